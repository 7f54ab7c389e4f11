"""Keeps cagtool's own Python frames out of Dynamo's frame selection, so that a recorded run
compiles exactly the frames the script compiles under plain python.

Dynamo's eval-frame callback offers every Python frame that starts while a compiled function
runs (the rest of it after a graph break included) to `torch.compile`, unless the frame's file
is in its skip list: the script's own hooks reached from a `loss.backward()` there, and the stdlib
code they call (warnings, logging), are offered and counted in `counters["frames"]`. cagtool's
wrappers must therefore neither turn the callback off for what they call (a recursive
`torch._dynamo.disable` hides the script's backward hooks from Dynamo) nor be offered themselves
(cagtool's audit hook and step bookkeeping would be counted as frames). Putting cagtool's package
directory in Dynamo's skip list (torch/_dynamo/trace_rules.py: checked before a frame is counted,
and not inherited by the frames a skipped one calls) does both.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

_done = False


def hide_cagtool_frames() -> None:
    """Once per process, after `import torch`."""
    global _done
    if _done:
        return
    from torch._dynamo import trace_rules

    trace_rules.add("cagtool")
    _done = True


def without_dynamo(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` run with Dynamo's frame callback off, so that the stdlib frames it calls (threading,
    weakref, json) are never offered to Dynamo, as `torch._dynamo.disable(fn)` would: for the step
    tracker's callbacks, called several times per training step. torch's wrapper also resolves the
    compiler stance, checks export mode and a JustKnob on every call (about 5 us for four calls a
    step); this is the same callback swap (eval_frame.py's DisableContext), two C calls. Like the
    rest of cagtool's frames this wrapper is in Dynamo's skip list (hide_cagtool_frames). Call after
    `import torch`."""
    from torch._C._dynamo.eval_frame import set_eval_frame

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        prior = set_eval_frame(None)
        try:
            return fn(*args, **kwargs)
        finally:
            set_eval_frame(prior)

    return call


# A hook or wrapper as Dynamo must see it: a function of torch's own file `filename` (torch's trace
# rules for that file: inlined where a compiled function calls it, as plain python's code there
# is), which, while Dynamo traces (torch.compiler.is_dynamo_compiling() is True there), calls
# `original` (GradScaler.step: traced as under plain python) or does nothing (an optimizer hook:
# plain python has none); run eagerly it calls cagtool's `watched` (in cagtool's skipped
# directory, hide_cagtool_frames).
# `{params}`: the parameters, passed on as they came (an optimizer hook's three: no packing of
# *args on every step, ~0.2 us a call).
_TRANSPARENT = """
def {name}({params}):
    if is_compiling():
        return None if original is None else original({params})
    return watched({params})
"""
_HOOK_PARAMS = "optimizer, args, kwargs"
# Module.train's: torch's own train() at once where it switches to training mode (`mode is True`,
# the call of every training step) or while Dynamo traces it; `watched` only for a switch to eval.
TRAINING_SWITCH = """
def {name}(self, mode=True):
    if mode is True or is_compiling():
        return original(self, mode)
    return watched(self, mode)
"""


def as_torchs(filename: str, watched: Callable[..., Any], name: str, original: Callable[..., Any] | None = None,
               params: str = _HOOK_PARAMS, text: str = _TRANSPARENT) -> Callable[..., Any]:
    """A function of torch's file `filename` named `name` taking `params`, made from `text` (above)."""
    import torch

    # is_dynamo_compiling: False when run, a constant True while Dynamo traces (one call, no check of
    # TorchScript as is_compiling makes: this is on every optimizer step of the job).
    namespace: dict[str, Any] = {"is_compiling": torch.compiler.is_dynamo_compiling, "original": original, "watched": watched}
    text = text.format(name=name, params=params)
    exec(compile(text, filename, "exec"), namespace)  # noqa: S102 - a fixed text, see above
    return namespace[name]
