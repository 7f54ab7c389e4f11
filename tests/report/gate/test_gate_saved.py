"""`--rank` on `cagtool run --gate`, and the gate result kept in the run by `cagtool gate` as by
`run --gate`, so `cagtool report` shows the latest one. One real 2-rank gloo DDP job (mp.spawn,
eager backend; rank 1 runs one extra op at step 2: tests/scripts/ddp_rank_diverges.py), gated as
it is recorded."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import cagtool_in_process, ddp_ranks_diverge_gated, private_copy

pytestmark = pytest.mark.slow


def cagtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """gate and report, in-process (GITHUB_* unset)."""
    return cagtool_in_process(*args, cwd=cwd, env={"CI": "true"}, unset=("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"))


@pytest.fixture(scope="module")
def gated_rank0(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`cagtool run --gate --rank 0`: only rank 0's record is held to the thresholds (conftest's
    `ddp_ranks_diverge_gated`, recorded once for all xdist workers and for the ranks report's
    tests, each module with its own copy: a test here replaces the run's gate.json)."""
    return ddp_ranks_diverge_gated(tmp_path_factory)


def checked(gate: dict) -> set[tuple[str, str, bool]]:
    return {(c["check"], c["mode"], c["failed"]) for c in gate["checks"]}


def test_run_gate_rank_holds_only_that_rank(gated_rank0):
    run, proc = gated_rank0
    saved = json.loads((run / "gate.json").read_text())
    assert saved["ranks"] == [0]
    # Rank 1 recompiled (its extra op), rank 0 did not: with --rank 0, rank 1's record is not checked.
    assert ("max-recompiles:ca", "ca@rank0", False) in checked(saved)
    assert not any(c["mode"].endswith("@rank1") for c in saved["checks"])
    # The ranks still diverge, which the job-level check always reports: the gated run fails.
    assert ("ranks-agree", "ca", True) in checked(saved) and proc.returncode == 1, proc.stderr[-2000:]


def test_gate_keeps_its_result_in_the_run_for_the_report(gated_rank0, tmp_path):
    run, _ = gated_rank0
    proc = cagtool("gate", run, "--rank", "1", "--max-recompiles", "ca:0", "--no-config", cwd=tmp_path)
    assert proc.returncode == 1 and "max-recompiles:ca" in proc.stdout
    saved = json.loads((run / "gate.json").read_text())  # the latest gate's result replaced run --gate's
    assert saved["ranks"] == [1] and ("max-recompiles:ca", "ca@rank1", True) in checked(saved)
    out = tmp_path / "report.html"
    report = cagtool("report", run, "-o", out, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    html = out.read_text()
    assert 'id="gate"' in html and "ca@rank1" in html and "gate FAILED" in html
    # A rank the run does not have is unreadable input (exit 3), naming the ranks there are.
    missing = cagtool("gate", run, "--rank", "5", "--max-recompiles", "ca:0", "--no-config", cwd=tmp_path)
    assert missing.returncode == 3 and "has no rank 5 (ranks: 0, 1)" in missing.stderr


def test_rank_on_a_single_process_run_is_not_ignored(record_run, tmp_path):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    proc = cagtool("gate", private_copy(run.path, tmp_path / "run"), "--rank", "1", "--max-ca-graphs", "9", "--no-config", cwd=tmp_path)
    assert proc.returncode == 3 and "has no rank 1 (ranks: none)" in proc.stderr
