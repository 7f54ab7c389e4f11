"""End to end: a real 2-rank gloo DDP job (mp.spawn, eager backend) where rank 1 runs one extra op
in its forward at step 2 (tests/scripts/ddp_rank_diverges.py; its loop and cagtool both number
steps from 0). `cagtool run` follows both ranks; summary, gate and diff-graphs must find where the
ranks' CA graphs part. One run (~20 s of CPU)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import cagtool_in_process, ddp_ranks_diverge_gated

pytestmark = pytest.mark.slow


def cagtool(*args: str) -> subprocess.CompletedProcess:
    """The commands that read the record, in-process."""
    return cagtool_in_process(*args, env={"CI": "true", "COLUMNS": "100"})


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The run (conftest's `ddp_ranks_diverge_gated`: recorded once for all xdist workers and for
    the gate's `--rank` tests, each module with its own copy) and its process. It was gated on rank
    0 as it was recorded: the gate's failure on the ranks parting is its exit code, 1; the job
    itself finished, exit 0."""
    run, proc = ddp_ranks_diverge_gated(tmp_path_factory)
    assert proc.returncode == 1 and "gate FAILED" in proc.stdout + proc.stderr, proc.stderr[-3000:]
    meta = json.loads((run / "run.json").read_text())
    assert (meta["status"], meta["exit_code"], meta["mode_exit_codes"]) == ("finished", 0, {"ca": 0}), meta
    return run, proc


def test_summary_finds_where_the_ranks_part(ddp_run):
    run, proc = ddp_run
    summary = cagtool("summary", str(run), "--format", "json")
    assert summary.returncode == 0, summary.stderr
    ranks = json.loads(summary.stdout)["ranks"]
    context = json.dumps(ranks, indent=1)
    rows = {r["rank"]: r for r in ranks["ranks"]}
    assert sorted(rows) == [0, 1] and ranks["world_size"] == 2 and ranks["missing_ranks"] == [], context
    for rank in (0, 1):
        assert rows[rank]["status"] == "finished" and rows[rank]["steps"] == 4, context
    # Rank 1 captured one more CA graph, as torch itself counted in each rank.
    assert (rows[0]["ca_graphs"], rows[1]["ca_graphs"]) == (1, 2), context
    for rank, key in ((0, "rank0"), (1, "rank1")):
        manifest = json.loads((run / "ca" / "procs" / key / "manifest.json").read_text())
        assert manifest["torch_counters"]["compiled_autograd"]["captures"] == rows[rank]["ca_graphs"]
    # torch's cache misses: one per capture, the first included
    assert (rows[0]["cache_misses"], rows[1]["cache_misses"]) == (1, 2), context
    assert ranks["totals"]["ca_graphs"] == 3
    codes = [f["code"] for f in ranks["findings"]]
    assert codes == ["ranks_graphs_diverge"], context  # DDP kept the gradients in sync: the norms agree
    [finding] = ranks["findings"]
    assert finding["step"] == 2 and finding["ranks"] == [0, 1]
    assert finding["data"]["ref_capture"] is None
    assert finding["data"]["capture"]["step"] == 2 and "new autograd node TanhBackward0" in finding["data"]["capture"]["miss"]
    # The text report: the per-rank table and the finding.
    text = " ".join(proc.stderr.split())
    assert "rank status steps CA graphs cache misses graph breaks step time peak RSS" in text, proc.stderr[-3000:]
    assert "rank finding: ranks 0 and 1 part at step 2" in text, proc.stderr[-3000:]


def test_gate_and_diff_graphs_on_the_diverging_ranks(ddp_run):
    run, _ = ddp_run
    gate = cagtool("gate", str(run), "--max-recompiles", "ca:0", "--no-config", "--format", "json")
    assert gate.returncode == 1, gate.stderr
    failed = {(c["check"], c["mode"]) for c in json.loads(gate.stdout)["checks"] if c["failed"]}
    assert failed == {("max-recompiles:ca", "ca@rank1"), ("ranks-agree", "ca")}
    diff = cagtool("diff-graphs", str(run), "0@0", "1@1", "-f", "json")
    assert diff.returncode == 1  # the two ranks' graphs differ
    [comparison] = json.loads(diff.stdout)["comparisons"]
    assert "TanhBackward0" in json.dumps(comparison["summary"])


def test_the_compile_command_the_summary_prints_reads_rank_0_without_rank(ddp_run):
    # The launcher's record compiles nothing: `cagtool compile RUN ID`, as the summary prints it, is rank 0's.
    run, _ = ddp_run
    manifest = json.loads((run / "ca" / "procs" / "rank0" / "manifest.json").read_text())
    assert manifest["torch_counters"]["compiled_autograd"]["captures"] >= 1
    shown = cagtool("compile", str(run), "!0/0/0")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("compile [!0/0/0]") and shown.stdout == cagtool("compile", str(run), "!0/0/0", "--rank", "0").stdout
