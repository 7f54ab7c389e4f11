"""`recompiles --explain --verify` runs a re-run once when two fixes would run the same one: on a
forward recompiled for a shorter last batch (tests/scripts/two_forward_causes.py), torch's own PGO
list names exactly the input dynamic-sources names, so torch-pgo and dynamic-sources set the same
TORCH_COMPILE_DYNAMIC_SOURCES and nothing else. Measured twice, one change read 9.33x and 0.86x."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.report.recompiles.verification import verification_lines

pytestmark = pytest.mark.slow


def test_two_fixes_with_the_same_re_run_are_run_once_and_both_shown(record_run, tmp_path):
    recorded = record_run("../tests/scripts/two_forward_causes.py", backend="aot_eager")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = Path(shutil.copytree(recorded.path, tmp_path / "run"))  # the verification writes into the run
    proc = cagtool_in_process("recompiles", str(run), "--explain", "--verify", "--repeat", "1", "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = json.loads(proc.stdout)["verification"]
    pgo, sources = v["fixes"]
    assert (pgo["fix"], sources["fix"]) == ("torch-pgo", "dynamic-sources")
    assert pgo["env"] == sources["env"] == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['x']"} and pgo["run_flags"] == sources["run_flags"] == []
    # One re-run: the baseline's and torch-pgo's directories, none for dynamic-sources.
    stamp = next((run / "verify").iterdir())
    assert sorted(p.name for p in stamp.iterdir() if p.is_dir()) == ["baseline", "torch-pgo"]
    assert "dynamic-sources: the same re-run as torch-pgo" in proc.stderr
    assert pgo["same_as"] is None and sources["same_as"] == "torch-pgo"
    assert sources["measured"] == pgo["measured"] and sources["speedup"] == pgo["speedup"]
    assert sources["verdict"] == pgo["verdict"] and sources["reasons"] == ["the same re-run as torch-pgo: run once for both", *pgo["reasons"]]
    assert load_run(pgo["measured"]["run"]).modes["ca"].manifest.status == "finished"
    # The text names it where the verdict is read.
    shown = [line for line in verification_lines(v) if line.startswith("    verdict:")]
    assert shown[1].startswith(f"    verdict: {pgo['verdict'].upper()} (the same re-run as torch-pgo: run once for both; ")
