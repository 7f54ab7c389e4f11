"""Module hooks a compiled forward never runs. torch 2.13's Dynamo does not guard on nn.Module
hooks (`skip_nnmodule_hook_guards`, True by default): a hook registered on a module of a compiled
module after its forward compiled is never called by the compiled forward, and nothing recompiles.
cagtool says so on the registering line; torch's own hook calls (counted by the hooks themselves)
are the evidence, under cagtool as without it."""

from __future__ import annotations

import sys

import torch
import torch.nn as nn
from torch._dynamo.utils import counters

import cagtool
from cagtool.record.schema import FINDING_MODULE_HOOK_NOT_COMPILED, FindingEvent


def _train(compiled: nn.Module, steps: int, at: int, register, sizes=lambda step: 4) -> None:
    for step in range(steps):
        if step == at:
            register()
        compiled(torch.randn(sizes(step), 8)).sum().backward()


def _findings(path) -> list[FindingEvent]:
    return [f for f in cagtool.load(path).mode("ca").of(FindingEvent) if f.code == FINDING_MODULE_HOOK_NOT_COMPILED]


def test_hooks_registered_after_the_forward_compiled_are_found_on_their_lines(tmp_path):
    torch._dynamo.reset()
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    calls = {"forward": 0, "backward": 0}
    lines = []

    def register() -> None:
        net[0].register_forward_hook(lambda m, i, o: calls.__setitem__("forward", calls["forward"] + 1)); lines.append(sys._getframe().f_lineno)  # noqa: E702
        net[2].register_full_backward_hook(lambda m, gi, go: calls.__setitem__("backward", calls["backward"] + 1)); lines.append(sys._getframe().f_lineno)  # noqa: E702

    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        frames = counters["frames"]["total"]
        compiled = torch.compile(net, backend="eager")
        _train(compiled, 4, 2, register)
        # torch's own evidence: neither hook ran, and no forward frame was compiled again for them
        assert calls == {"forward": 0, "backward": 0}
        assert counters["frames"]["total"] - frames == 1 + counters["compiled_autograd"]["captures"]
    forward, backward = _findings(cap.path)
    assert [forward.source.line, backward.source.line] == lines and forward.source.file == __file__
    assert forward.detail == {"method": "register_forward_hook", "module": "Linear", "path": "0", "compiled": "Sequential"}
    assert forward.message.startswith("register_forward_hook() on `0` (Linear) of the compiled Sequential after its forward compiled "
                                      "(compiled at test_module_hooks.py:")
    assert "the compiled forward never ran the hook" in forward.message and "skip_nnmodule_hook_guards = False" in forward.message
    assert backward.detail["method"] == "register_full_backward_hook" and backward.detail["path"] == "2"
    assert "a module's backward hook is set up by its forward call" in backward.message
    assert nn.Module.register_forward_hook.__module__ == "torch.nn.modules.module"  # torch's own again
    assert "__wrapped__" not in nn.Module.register_forward_hook.__dict__


def test_hooks_the_compiled_forward_runs_are_not_found(tmp_path):
    """Registered before the first call; registered later with the guards on (it recompiles); and
    registered later, followed by a recompile for a new size, which traces it in."""
    torch._dynamo.reset()
    for name, at, guards, sizes in (("before", 0, True, lambda s: 4), ("guarded", 2, False, lambda s: 4),
                                    ("recompiled", 2, True, lambda s: 4 if s < 3 else 5)):
        torch._dynamo.reset()
        net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
        ran = []
        previous = torch._dynamo.config.skip_nnmodule_hook_guards
        torch._dynamo.config.skip_nnmodule_hook_guards = guards
        try:
            with cagtool.capture(backend="eager", output=tmp_path / name, reset=True) as cap:
                _train(torch.compile(net, backend="eager"), 5, at, lambda: net[0].register_forward_hook(lambda m, i, o: ran.append(1)), sizes)
        finally:
            torch._dynamo.config.skip_nnmodule_hook_guards = previous
        assert ran, name  # torch ran the hook in the compiled forward
        assert not _findings(cap.path), name
