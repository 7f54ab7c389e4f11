"""The job's exception as python would show it: the frames of cagtool's own code it passed through
on its way (the runner that runs the script, runpy's, and the taps: a backward's error passes the
step tracker's `_engine_run_backward`, a wrong DDP argument its `__init__` tap) left out, in the
exception and in those it chains. A tap never raises its own failure into the job (each catches
and counts it), so a frame of cagtool's in a job's traceback only ever passed the job's exception
on; shown, it reads as cagtool's failure. Used where cagtool prints the mode process's uncaught
exception and in a followed process's sys.excepthook (a DDP rank's)."""

from __future__ import annotations

import os
import runpy
import types

_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
_RUNPY = os.path.realpath(runpy.__file__)


def _ours(filename: str, known: dict[str, bool]) -> bool:
    if filename not in known:
        real = os.path.realpath(filename)
        known[filename] = real.startswith(_ROOT + os.sep) or real == _RUNPY or filename.startswith("<frozen runpy")
    return known[filename]


def leave_out_our_frames(exc: BaseException) -> None:
    """Rewrite the tracebacks of `exc` and of the exceptions it chains (cause, context, a group's
    members) without cagtool's and runpy's frames. Where every frame is ours, none is left: python
    prints the exception's line alone, as for a script that failed to start."""
    known: dict[str, bool] = {}
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        each = pending.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        kept = []
        tb = each.__traceback__
        while tb is not None:
            if not _ours(tb.tb_frame.f_code.co_filename, known):
                kept.append(tb)
            tb = tb.tb_next
        rebuilt = None
        for entry in reversed(kept):
            rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        each.__traceback__ = rebuilt
        pending.extend((each.__cause__, each.__context__, *(getattr(each, "exceptions", None) or ())))
