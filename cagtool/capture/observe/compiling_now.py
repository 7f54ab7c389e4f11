"""What the job is compiling right now, for the live status line: a Dynamo frame, an AOT backward
compiled at its first backward, a compiled-autograd graph (its capture, then Dynamo's compile of it).

Noted by the thread that compiles and read by the status line's drawing thread, in the same
process: the notes are plain Python objects in a list (appending and removing are atomic under
the GIL), so reading them takes no lock and calls nothing in torch.

Dynamo's compiles are seen through torch's compile callbacks: every Dynamo frame compile
(`convert_frame`, trigger DYNAMO, a CA graph's compile id starting with `!`) and every lazy AOT
backward compile (`runtime_wrappers`, LAZY_BACKWARD) runs inside
`callback_handler.install_callbacks(trigger, compile_id)`. cagtool wraps that method on its class
rather than registering callbacks: `torch._dynamo.reset()` clears the registered callbacks
(scripts call it), and torch runs them only for the outermost of nested compiles. The capture of a
CA graph is noted by the CA observer (ca_observer.py), from its begin_capture to its end_capture.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

# The method wrapped (doctor.CA_ENTRY_POINTS lists it).
TAPPED = ("torch._dynamo.callback", "CompilationCallbackHandler.install_callbacks")

FRAME = "frame"
AOT_BACKWARD = "AOT backward"
CA_GRAPH = "CA graph"
COMPILING, CAPTURING = "compiling", "capturing"


@dataclass(frozen=True, eq=False)
class Compiling:
    """One compile in progress: `<verb> <what> [<compile_id>]` since `started` (the clock's time)."""

    what: str
    compile_id: str
    started: float
    verb: str = COMPILING


def what_is_compiled(trigger: Any, compile_id: str) -> str:
    """The status line's word for a compile torch announced with `trigger` (a CallbackTrigger)."""
    name = getattr(trigger, "name", str(trigger))
    if name == "DYNAMO":
        return CA_GRAPH if compile_id.startswith("!") else FRAME
    if name == "LAZY_BACKWARD":
        return AOT_BACKWARD
    if name == "CUDAGRAPH_RECORDING":
        return "CUDA graph"
    return name.lower().replace("_", " ")


class CompilesInProgress:
    """The compiles in progress, newest last, as the compiling threads note them."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._open: list[Compiling] = []
        self._installed: tuple[Any, Any] | None = None

    def started(self, what: str, compile_id: str, verb: str = COMPILING) -> Compiling:
        entry = Compiling(what, compile_id, self.clock(), verb)
        self._open.append(entry)
        return entry

    def ended(self, entry: Compiling | None) -> None:
        try:
            self._open.remove(entry)  # type: ignore[arg-type]
        except ValueError:
            pass

    def current(self) -> Compiling | None:
        """The innermost (newest) compile in progress, None when nothing compiles."""
        try:
            return self._open[-1]
        except IndexError:
            return None

    # -- torch's compile callbacks ---------------------------------------------------------------
    def install(self) -> None:
        """Wrap `CompilationCallbackHandler.install_callbacks` (module docstring); a torch without
        it leaves Dynamo's compiles unseen (doctor says so)."""
        try:
            from torch._dynamo.callback import CompilationCallbackHandler
        except ImportError:
            return
        original = CompilationCallbackHandler.__dict__.get("install_callbacks")
        if original is None or self._installed is not None:
            return
        progress = self

        @contextlib.contextmanager
        def install_callbacks(handler: Any, trigger: Any, compile_id: str) -> Iterator[None]:
            entry = progress._note(trigger, compile_id)
            try:
                with original(handler, trigger, compile_id):
                    yield
            finally:
                progress.ended(entry)

        install_callbacks.__wrapped__ = original  # type: ignore[attr-defined]
        CompilationCallbackHandler.install_callbacks = install_callbacks  # type: ignore[method-assign]
        self._installed = (CompilationCallbackHandler, original)

    def _note(self, trigger: Any, compile_id: Any) -> Compiling | None:
        try:
            text = str(compile_id)
            return self.started(what_is_compiled(trigger, text), text)
        except Exception:  # noqa: BLE001 - the status line never fails a compile
            return None

    def uninstall(self) -> None:
        if self._installed is not None:
            owner, original = self._installed
            owner.install_callbacks = original
            self._installed = None
