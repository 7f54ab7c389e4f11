"""Tensor parallelism (pytorch/examples' distributed/tensor_parallelism, on the CPU over gloo) under
compiled autograd: its parameters are DTensors, each rank a shard, as under FSDP2, but compiled
autograd runs this backward. Its recompiles are torch's own DTensor code that the CA graph runs
(a custom Function's backward through `call_backward`, and the rest of it past a graph break),
compiled once per value or type and cached: explained as such, never as FSDP2's unsupported setup."""

from __future__ import annotations

import pytest

from conftest import ROOT, cli_in_process, torchrun_recorded

pytestmark = pytest.mark.slow
SCRIPT = str(ROOT / "tests" / "scripts" / "tensor_parallel_job.py")


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory):
    return torchrun_recorded(tmp_path_factory, "tensor-parallel", SCRIPT, "4")


def test_dtensor_code_the_ca_graph_runs_is_explained_as_torchs_own_not_fsdp2(tp_run):
    code, text, _ = cli_in_process("recompiles", str(tp_run), "--explain", env={"CI": "true", "COLUMNS": "200"})
    assert code == 0
    assert "FSDP2" not in text and "174906" not in text
    fixes = [line.strip() for line in text.splitlines() if line.strip().startswith("Fix:")]
    dynamo = [f for f in fixes if "torch's own" in f]
    assert len(dynamo) >= 2, text  # DTensor's backward, and its resume after the graph break, each its own cause
    assert all(f.startswith("Fix: Nothing to fix in the script: the code is torch's own (") for f in dynamo)
    assert any("in torch/distributed/tensor/_api.py" in f for f in dynamo), text
