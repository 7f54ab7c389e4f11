"""A compiled-autograd compiler made with torch.compile(..., fullgraph=True) (TorchRec's way):
what cagtool advises must not be a graph break there. A hook that appends to a Python list
recompiles the graph's code every backward; under a full graph the fix is to keep the value a
tensor, and `--verify` does not run the torch._dynamo.disable patch, an error there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cagtool_in_process, cli_in_process

from cagtool.record.loader import load_run
from cagtool.record.schema import CAGraphEvent

pytestmark = pytest.mark.slow


def test_a_list_appending_hook_under_a_fullgraph_compiler_is_fixed_with_a_tensor_and_never_disabled(record_run):
    recorded = record_run("../tests/scripts/fullgraph_ca_hook.py")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    graphs = load_run(recorded.path).modes["ca"].of(CAGraphEvent)
    assert graphs and all(g.fullgraph for g in graphs)
    code, out, err = cli_in_process("recompiles", str(recorded.path), "--explain", "--format", "json")
    assert code == 0, err
    [cause] = json.loads(out)["modes"]["ca"]["explanation"]["causes"]
    assert cause["count"] == 3 and cause["fix"][0].startswith("Keep the value a tensor: a hook that writes into a tensor")
    assert "fullgraph=True), where a hook under torch._dynamo.disable is an error" in cause["fix"][0]
    assert not any(f.startswith("Keep the hook out of Dynamo") for f in cause["fix"])
    head = cli_in_process("summary", str(recorded.path))[1].splitlines()
    assert head[1].startswith("what to do: Keep the value a tensor")
    # The disable patch is shown as not applicable, so nothing re-runs (no fix applies).
    proc = cagtool_in_process("recompiles", str(recorded.path), "--explain", "--verify", "--format", "json", env={"CI": "true"})
    assert "nothing to verify in mode ca: no fix cagtool can apply answers these causes" in proc.stderr
    assert "fullgraph=True, where a hook under torch._dynamo.disable is an error" in proc.stdout + proc.stderr
    assert not (Path(recorded.path) / "verify").exists()
