"""`recompiles --explain --verify`: fixes proven on the job itself by re-running it, with the counts
before and after equal to torch's own in every re-run (each re-run is an ordinary cagtool run),
never by editing the script. Timings are not asserted (they are the machine's); counts are exact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd

from cagtool.record.loader import load_run
from cagtool.report.metrics import mode_metrics

pytestmark = pytest.mark.slow


def _verify(run: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(cagtool_cmd("recompiles", str(run), "--explain", "--verify", "--repeat", "1", "--format", "json", *extra),
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT), env={**os.environ, "CI": "true"})
    return proc, (json.loads(proc.stdout) if proc.returncode == 0 else {})


def _copy(record_run, tmp_path: Path, script: str) -> Path:
    recorded = record_run(script, modes="ca", backend="eager")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    return Path(shutil.copytree(recorded.path, tmp_path / "run"))  # the verification writes into the run


def test_dynamic_sizes_remove_the_shape_loops_ca_recompile(record_run, tmp_path):
    """10/100/10 with the script's own CA flag: static first graph, one changed-shapes recompile.
    ca-dynamic (cagtool run --dynamic, reaching the flag's own _enable) makes it 0."""
    run = _copy(record_run, tmp_path, "shape_loop.py")
    proc, data = _verify(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cagtool: verifying 1 fix in mode ca" in proc.stderr and "estimated" in proc.stderr
    v = data["verification"]
    [fix] = v["fixes"]
    assert fix["fix"] == "ca-dynamic" and fix["run_flags"] == ["--dynamic"] and fix["causes"] == [1]
    assert fix["verdict"] == "verified", fix["reasons"]
    assert v["baseline"]["ca_recompiles"] == [1] and fix["measured"]["ca_recompiles"] == [0]
    assert v["baseline"]["ca_graphs"] == [2] and fix["measured"]["ca_graphs"] == [1]
    # Torch's own counter in the re-run's record says the same.
    fixed = load_run(fix["measured"]["run"])
    assert fixed.modes["ca"].manifest.torch_counters["compiled_autograd"]["captures"] == 1
    assert mode_metrics(fixed.modes["ca"]).ca_recompiles == 0
    assert (run / "verification.json").is_file()
    # Text: the block per fix, with its verdict.
    text = subprocess.run(cagtool_cmd("summary", str(run)), capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert "ca-dynamic (cause #1)" in text.stdout and "verdict: VERIFIED" in text.stdout
    page = tmp_path / "report.html"
    assert subprocess.run(cagtool_cmd("report", str(run), "-o", str(page)), capture_output=True, timeout=120, cwd=str(ROOT)).returncode == 0
    html = page.read_text()
    assert '<section id="verify">' in html and '<td class="ok">VERIFIED</td>' in html and "1 → 0" in html


def test_dynamic_sources_remove_a_ragged_batchs_forward_recompile(record_run, tmp_path):
    """A DataLoader's ragged last batch: Dynamo's size guard on the forward's input fails once.
    dynamic-sources (TORCH_COMPILE_DYNAMIC_SOURCES, the input named as torch names it) removes it."""
    run = _copy(record_run, tmp_path, "ragged_batches.py")
    before = mode_metrics(load_run(run).modes["ca"])
    proc, data = _verify(run, "--fix", "dynamic-sources")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [fix] = data["verification"]["fixes"]
    assert fix["fix"] == "dynamic-sources" and fix["env"] == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['args'][0]"}
    assert data["verification"]["baseline"]["dynamo_recompiles"] == [before.dynamo_recompiles] == [2]
    assert fix["measured"]["dynamo_recompiles"] == [1] and fix["verdict"] == "verified", fix["reasons"]
    assert fix["who"].startswith("run configuration")


def test_a_cause_that_needs_a_code_change_is_said_so_and_nothing_reruns(record_run, tmp_path):
    run = _copy(record_run, tmp_path, "hook_added_midrun.py")
    proc, data = _verify(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = data["verification"]
    assert v["fixes"] == [] and v["baseline"] is None and not (run / "verify").exists() or not any((run / "verify").iterdir())
    assert v["not_applied"] and all(item["who"] == "your code" for item in v["not_applied"])
    bad = subprocess.run(cagtool_cmd("recompiles", str(run), "--verify", "--fix", "nonsense"), capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert bad.returncode == 2 and "--fix nonsense: no such fix applies" in bad.stderr
