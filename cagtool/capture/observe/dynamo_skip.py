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
