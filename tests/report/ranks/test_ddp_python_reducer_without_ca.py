"""A DDP script that chose the Python reducer itself, recorded in aot and ca modes: in aot (no
compiled autograd) Dynamo compiles DDP's all-reduce hook during the eager backward. Those graphs
are named as DDP's hook, not forward graphs; the summary says that such an aot run is neither the
CA job nor the job as run without CA; and the ca mode's line says the script, not cagtool, chose
the reducer. One real run over gloo, one rank (~40 s of CPU)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import ROOT, cagtool_cmd, cagtool_in_process

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "tests" / "scripts" / "ddp_python_reducer_compiled_step.py"
ENV = {key: value for key, value in os.environ.items() if key != "COLUMNS"} | {"CI": "true"}


def test_ddp_hook_graphs_are_named_and_the_aot_run_explained(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "aot,ca", "--backend", "eager", "-o", str(out), str(SCRIPT)),
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the script set torch._dynamo.config.optimize_ddp = 'python_reducer' itself" in proc.stderr
    assert "cagtool set torch._dynamo.config.optimize_ddp" not in proc.stderr
    summary = cagtool_in_process("summary", str(out), "--format", "json", env={"CI": "true"})
    aot = json.loads(summary.stdout)["modes"]["aot"]
    # train_step's forward is the one forward graph; the hook was compiled once per parameter shape
    assert aot["forward_graphs"] == 1 and aot["ddp_hook_graphs"] >= 2, aot
    assert aot["ddp_hook_recompiles"] == aot["ddp_hook_graphs"] - 1
    assert "neither the CA job" in aot["ddp_reducer_note"]
    assert json.loads(summary.stdout)["modes"]["ca"]["ddp_reducer_note"] is None
    text = cagtool_in_process("summary", str(out), env={"CI": "true"}).stdout
    assert f"Dynamo: 1 forward graph, {aot['ddp_hook_graphs']} graphs of DDP's all-reduce hook (compiled in the backward)" in text
    assert "note: the script chose DDP's Python reducer (torch._dynamo.config.optimize_ddp = 'python_reducer')" in text
    events = [json.loads(line) for line in (out / "ca" / "events.jsonl").read_text().splitlines() if '"ddp_model"' in line]
    assert [e["set_by"] for e in events] == ["script"]
