"""`cagtool checkpointing` on real jobs: the peak-memory saving of non-reentrant checkpointing in aot
and in ca, measured against re-runs with checkpointing a plain call, and a reentrant checkpoint's
recompile in its recompute fixed by use_reentrant=False, verified by re-running it so. Each job
and its measurement run once per session (recorded_once)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, cli_in_process, recorded_once

pytestmark = pytest.mark.slow

SCRIPT = str(ROOT / "sample_scripts" / "checkpoint_memory.py")
MIB = 2**20


def _measure(directory: Path, modes: str, *script_args: str) -> dict:
    out = directory / "run"
    env = {"CI": "true", "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, "CI": "true"}
    run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", modes, "--backend", "eager", "--no-report", "-o", str(out),
                          SCRIPT, *script_args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    measured = subprocess.run([sys.executable, "-m", "cagtool", "checkpointing", str(out), "--modes", modes, "--format", "json"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return {"code": measured.returncode, "json": measured.stdout, "stderr": measured.stderr}


@pytest.fixture(scope="module")
def non_reentrant(tmp_path_factory) -> tuple[Path, dict]:
    path, value = recorded_once(tmp_path_factory, "checkpoint-memory", lambda d: _measure(d, "aot,ca", "--rows", "1024"))
    assert value["code"] == 0, value["stderr"][-2000:]
    return path, json.loads(value["json"])


@pytest.mark.parametrize("mode", ["aot", "ca"])
def test_the_saving_of_each_mode_is_measured_against_a_plain_call(non_reentrant, mode):
    _, result = non_reentrant
    (entry,) = [m for m in result["modes"] if m["mode"] == mode]
    checkpointed, plain = entry["checkpointed"], entry["plain"]
    assert checkpointed["status"] == plain["status"] == "finished"
    # the figure is the two processes' own peaks, nothing else
    assert entry["saving"] == pytest.approx((plain["peak_rss_bytes"] - checkpointed["peak_rss_bytes"]) / plain["peak_rss_bytes"])
    assert entry["non_reentrant"] is None  # nothing to fix: no reentrant checkpoint recompiled
    # On CPU the figure is each process's peak RSS, which on the 2-core VM has read both ways
    # for the same job (aot: 18 % saved at 2048 rows, 3 % more at 1024 beside a test suite; ca:
    # 16 % saved at 2048 rows, 17-19 % more at 1024): its sign is not pinned, only that it is
    # the two processes' own figures, each a real peak.
    assert checkpointed["peak_of"] == plain["peak_of"] == "rss"
    assert checkpointed["peak_rss_bytes"] > 100 * MIB and plain["peak_rss_bytes"] > 100 * MIB


def test_the_measurement_is_kept_and_shown_by_summary(non_reentrant):
    path, result = non_reentrant
    kept = json.loads((path / "run" / "checkpointing.json").read_text())
    assert [m["mode"] for m in kept["modes"]] == ["aot", "ca"]
    code, out, err = cli_in_process("summary", str(path / "run"), env={"CI": "true", "COLUMNS": "200"}, cwd=ROOT, unset=("FORCE_COLOR",))
    assert code == 0, err
    text = " ".join(out.split() + err.split())
    assert "activation checkpointing, measured (cagtool checkpointing):" in text
    saving = result["modes"][0]["saving"]
    assert f"aot: checkpointing {'saves' if saving >= 0 else 'costs'} {abs(saving):.0%} peak memory (peak RSS" in text


@pytest.fixture(scope="module")
def reentrant(tmp_path_factory) -> dict:
    _, value = recorded_once(tmp_path_factory, "checkpoint-reentrant", lambda d: _measure(d, "ca", "--reentrant", "--rows", "256"))
    assert value["code"] == 0, value["stderr"][-2000:]
    return json.loads(value["json"])


def test_reentrant_under_ca_recompiles_in_its_recompute_and_use_reentrant_false_fixes_it(reentrant):
    (entry,) = reentrant["modes"]
    assert entry["checkpointed"]["recompute_recompiles"] == 1
    fixed = entry["non_reentrant"]
    assert fixed is not None and fixed["status"] == "finished" and fixed["recompute_recompiles"] == 0
    from cagtool.report.checkpointing import checkpointing_lines

    assert checkpointing_lines(reentrant)[1].endswith("fix use_reentrant=False: 1 recompiles in the recompute -> 0 recompiles in the recompute: VERIFIED")


def test_bad_input_is_one_line(tmp_path):
    code, out, err = cli_in_process("checkpointing", str(tmp_path / "nowhere"), env={"CI": "true"}, cwd=ROOT)
    assert code == 3 and err.count("\n") == 1 and "Traceback" not in err
    code, out, err = cli_in_process("checkpointing", str(tmp_path), "--modes", "eager", env={"CI": "true"}, cwd=ROOT)
    assert code == 2 and "--modes takes aot and ca" in err
