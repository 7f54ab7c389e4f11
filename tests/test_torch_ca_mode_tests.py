"""torch's test_torch_function_mode and test_torch_dispatch_mode shapes, and a training step inside
the same modes (tests/scripts/torch_ca_mode_tests.py), under `cagtool run` and `cagtool.capture()`:
each mode sees the ops the job makes and none of cagtool's (the loss it reads, the gradient norms
it digests in the optimizer's pre-hook), as in the same job without cagtool.

`--steps` makes the step tracker count in the backward's own hook (capture/steps/tracker.py), so
the loss is read inside the script's modes at a known moment, not when a clock says so. The eager
mode's job is the script itself for the training steps (no compile, no compiled autograd); the ca
mode's and the Python API's is the script inside compiled autograd by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, cagtool_cmd, recorded_once

SCRIPT = str(ROOT / "tests" / "scripts" / "torch_ca_mode_tests.py")
BY_HAND = """
import runpy, sys
import torch
from torch._dynamo import compiled_autograd
sys.argv = sys.argv[1:]
with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="eager"), dynamic=False):
    runpy.run_path(sys.argv[0], run_name="__main__")
"""
TRAINING = ("train_function_mode", "train_dispatch_mode")
ALL = ("function_mode", "dispatch_mode", *TRAINING)

pytestmark = pytest.mark.slow


def _results(stdout: str) -> dict:
    [line] = [line for line in stdout.splitlines() if line.startswith('{"train_function_mode"')]
    return json.loads(line)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    def record(directory):
        def run(argv):
            done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=900)
            return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr[-3000:]}

        common = ("--backend", "eager", "--steps", "1000", "--no-report")
        return {
            "plain": run([sys.executable, SCRIPT]),
            "hand": run([sys.executable, "-c", BY_HAND, SCRIPT]),
            "eager": run(cagtool_cmd("run", "--modes", "eager", *common, "-o", str(directory / "eager"), SCRIPT)),
            "ca": run(cagtool_cmd("run", "--modes", "ca", *common, "-o", str(directory / "ca"), SCRIPT)),
            "api": run([sys.executable, SCRIPT, "--capture", str(directory / "api")]),
        }

    _, value = recorded_once(tmp_path_factory, "torch-ca-mode-tests", record)
    for name, done in value.items():
        assert done["rc"] == 0, (name, done["stderr"])
    return {name: _results(done["stdout"]) for name, done in value.items()}


@pytest.mark.parametrize("key", TRAINING)
def test_the_eager_mode_adds_nothing_to_the_scripts_modes(runs, key):
    assert runs["eager"][key] == runs["plain"][key]
    assert "_foreach_norm" not in runs["eager"][key] and "item" not in runs["eager"][key]


@pytest.mark.parametrize("way", ["ca", "api"])
@pytest.mark.parametrize("key", ALL)
def test_compiled_autograd_under_cagtool_adds_nothing_to_the_scripts_modes(runs, way, key):
    assert runs[way][key] == runs["hand"][key]


def test_torchs_expected_lists_hold_by_hand(runs):
    """What torch's two tests expect inside compiled autograd (their assertExpectedInline)."""
    assert runs["hand"]["function_mode"] == ["Forward", "mul", "mul", "sum", "Backward", "_set_multithreading_enabled",
                                             "backward", "_set_multithreading_enabled"]
    dispatch = runs["hand"]["dispatch_mode"]
    assert dispatch[:5] == ["Forward", "mul.Tensor", "mul.Tensor", "sum.default", "Backward"]
    assert "_local_scalar_dense.default" not in dispatch
