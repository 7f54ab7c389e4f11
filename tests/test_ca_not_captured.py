"""A ca mode whose backward calls compiled autograd never captured (tests/scripts/func_grad_step.py:
a torch.func `grad` training loop, which compiled autograd does not capture even inside `_enable` by
hand) says so, in the summary, the headline and `recompiles --explain`, and gives no compiled-autograd
speed figure: its steps are the job without compiled autograd."""

from __future__ import annotations

import json

import pytest

from conftest import cli_in_process

pytestmark = pytest.mark.slow


def test_a_ca_mode_that_captured_nothing_says_so_and_claims_no_speed(record_run):
    run = record_run("../tests/scripts/func_grad_step.py", modes="eager,ca")
    assert run.returncode == 0, run.stderr[-2000:]
    # torch's own count, printed by the script in the ca mode (its lines come last): no capture
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"captures": 0}
    code, summary, _ = cli_in_process("summary", str(run.path))
    said = " ".join(summary.split())
    assert code == 0 and "CA graphs: 0 (none) (torch counted 0 captures)" in said
    assert "compiled autograd captured none of its 3 backward calls: each ran without it" in said
    headline = said.split(" cagtool run ")[0]
    assert "compiled autograd captured none of the ca mode's 3 backward calls" in headline
    assert "compiled autograd:" not in headline and "the speed of" not in headline  # no figure of the ca mode
    code, explained, _ = cli_in_process("recompiles", str(run.path), "--explain")
    assert code == 0 and "No recompiles, and no graph: compiled autograd captured none of this mode's backward calls." in explained
    assert "No recompiles: the eager mode compiles nothing." in explained
    assert "reused the cached graphs" not in explained


def test_a_ca_mode_whose_per_sample_gradients_ran_without_compiled_autograd_says_how_many(record_run):
    """tests/scripts/per_sample_norms.py: each step's per-sample norms by torch.func, then the training
    backward; 8 top-level backward calls, 4 of them inside functorch's grad transform, where torch
    turns compiled autograd off. The record counts those (the manifest's `backward_calls_outside_ca`,
    read where each call begins), and the summary and the headline say it; the training backward's
    one graph is captured, so it is no "captured none"."""
    run = record_run("../tests/scripts/per_sample_norms.py")
    assert run.returncode == 0, run.stderr[-2000:]
    manifest = json.loads((run.path / "ca" / "manifest.json").read_text())
    assert manifest["options"]["backward_calls_outside_ca"] == 4
    code, summary, _ = cli_in_process("summary", str(run.path))
    said = " ".join(summary.split())
    assert code == 0 and "CA graphs: 1 (1 initial) (torch counted 1 capture)" in said
    assert ("compiled autograd was off for 4 of its 8 backward calls: they ran without it, as in the aot mode (a backward inside a "
            "torch.func transform such as grad or vjp") in said
    assert "captured none" not in said
    headline = said.split(" cagtool run ")[0]
    assert "compiled autograd was off for 4 of the ca mode's 8 backward calls (inside torch.func's transforms, or after torch._dynamo.reset())" in headline
