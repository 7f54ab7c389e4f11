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

_done = False


def hide_cagtool_frames() -> None:
    """Once per process, after `import torch`."""
    global _done
    if _done:
        return
    from torch._dynamo import trace_rules

    trace_rules.add("cagtool")
    _done = True
