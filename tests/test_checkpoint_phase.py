"""What torch 2.13's torch/utils/checkpoint.py puts on the stack while it re-runs a checkpointed
forward in the backward, for each checkpoint (docs/torch-internals.md, "Knowing a compile runs
inside an activation-checkpoint recompute"): `compile_phase.phase_now`, called from inside the
checkpointed function as a Dynamo tap would be, names the recompute, its checkpoint and function;
in the first forward it says forward, in a plain backward it says backward."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from cagtool.capture.observe.compile_phase import phase_now


def _save_mm(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


class Probe(torch.nn.Module):
    """Reads the phase each time it runs: once in the forward, once in the recompute."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.seen: list = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(phase_now("0/0"))
        return torch.sin(self.lin(x))


@pytest.mark.parametrize(
    "options, kind",
    [
        ({"use_reentrant": True}, "reentrant"),
        ({"use_reentrant": False}, "non_reentrant"),
        ({"use_reentrant": False, "context_fn": functools.partial(create_selective_checkpoint_contexts, _save_mm)}, "selective"),
    ],
)
def test_the_recompute_of_each_checkpoint_is_named_with_its_function(options, kind):
    probe = Probe()
    x = torch.randn(2, 4, requires_grad=True)
    out = checkpoint(probe, x, **options)
    out.sum().backward()  # the line the recompute's caller is
    assert [p.phase for p in probe.seen] == ["forward", "checkpoint_recompute"]
    recompute = probe.seen[1]
    assert recompute.checkpoint == kind
    assert recompute.in_backward
    assert recompute.function is not None and recompute.function.function == "Probe.forward"
    assert recompute.function.file == __file__ and recompute.function.line == Probe.forward.__code__.co_firstlineno
    assert recompute.caller is not None and recompute.caller.code == "out.sum().backward()  # the line the recompute's caller is"
    assert x.grad is not None  # the job itself ran as without the probe


def test_a_frame_compiled_inside_a_backward_without_checkpoint_is_backward_and_a_ca_id_is_a_ca_graph():
    seen = []
    x = torch.randn(3, requires_grad=True)
    x.register_hook(lambda g: seen.append(phase_now("1/0")) or g)
    (x * 2).sum().backward()
    assert seen[0].phase == "backward" and seen[0].in_backward
    assert phase_now("!0/1/0").phase == "ca_graph"
    assert phase_now("0/0").phase == "forward"


def test_a_frame_compiled_inside_a_backward_is_backward_under_cagtools_own_backward_entry(tmp_path):
    """In a recorded process the step tracker's copy of `_engine_run_backward` (capture/steps/hooks.py)
    replaces torch's: a backward run through it is a backward all the same (a hook, a frame Dynamo
    compiles while compiled autograd captures)."""
    import cagtool

    seen = []
    x = torch.randn(3, requires_grad=True)
    with cagtool.capture(backend="eager", output=tmp_path / "run"):
        assert "cagtool" in torch.autograd._engine_run_backward.__code__.co_filename  # cagtool's entry, not torch's
        (x * 2).sum().backward()
        seen.append(phase_now("1/0", _frame_below_backward(x)))
    assert seen[0].phase == "backward" and seen[0].in_backward


def _frame_below_backward(x):
    """A frame on the stack of a backward run through the installed entry point (a tensor hook's)."""
    frames = []
    y = x * 3
    y.register_hook(lambda g: frames.append(__import__("sys")._getframe()) or g)
    with torch._dynamo.compiled_autograd._disable():  # the hook runs eagerly, inside the engine call
        y.sum().backward()
    return frames[0]
