"""Compiled autograd for one thread's backwards only: the Python API's block (`cagtool.capture()`)
records the thread that entered it, and the process's other threads keep plain torch.

Torch's switch is process-wide (docs/torch-internals.md, "One thread's compiled autograd"): the
compiler `_enable` installs is one C++ global that every thread's next backward reads, and the
engine runs one compiled-autograd backward at a time (a second, from any thread, raises
"Trying to run compiled autograd within another compiled autograd call"). So the block does not
hold `_enable` open; the backward entry point (the step tracker's, steps/hooks.py) enters it around each
top-level backward of the owning thread, and a gate keeps the two kinds of backward apart: the
owner's compiled backward runs while no other thread's backward does, and another thread's
backward waits while the owner's runs. Other threads' backwards still run beside each other.
Nested backwards (reentrant checkpointing, a backward in a hook) are never held at the gate: their
top-level call already holds it.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


class ThreadScope:
    """The owning thread's backwards under compiled autograd (`enable()`, torch's `_enable` with
    cagtool's compiler, set by mode_setup.mode_context), every other thread's as plain torch."""

    def __init__(self, owner: int | None = None) -> None:
        self.owner = threading.get_ident() if owner is None else owner
        self.enable: Callable[[], Any] | None = None  # a fresh _enable context per backward; None: off
        self.after_backward: Callable[[], None] | None = None  # puts the block's Python flag back
        self._cond = threading.Condition(threading.Lock())
        self._others = 0  # other threads' top-level backwards running
        self._owner_running = False
        self._local = threading.local()  # per thread: top-level backward in progress
        self.waits = 0  # times a backward waited at the gate (tests read it to order threads)
        self.errors = 0
        self.last_error = ""

    # -- the gate -----------------------------------------------------------------------------
    def _owner_enter(self) -> None:
        with self._cond:
            if self._others:
                self.waits += 1
                self._cond.notify_all()
            while self._others:
                self._cond.wait()
            self._owner_running = True

    def _owner_exit(self) -> None:
        with self._cond:
            self._owner_running = False
            self._cond.notify_all()

    def _other_enter(self) -> None:
        with self._cond:
            if self._owner_running:
                self.waits += 1
                self._cond.notify_all()
            while self._owner_running:
                self._cond.wait()
            self._others += 1

    def _other_exit(self) -> None:
        with self._cond:
            self._others -= 1
            if not self._others:
                self._cond.notify_all()

    def wait_for_waiters(self, count: int, timeout: float) -> bool:
        """True once `count` backwards have waited at the gate (for tests: threads in order, not
        by the clock; `timeout` only ends a test that would otherwise hang)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.waits >= count, timeout)

    # -- the entry point ----------------------------------------------------------------------
    def wrap(self, tracked: Callable[..., Any], plain: Callable[..., Any]) -> Callable[..., Any]:
        """The backward entry point: the owner's top-level backwards under compiled autograd and
        recorded (`tracked`), the others' as torch's own (`plain`), neither at the same time."""
        import torch
        from torch._dynamo import compiled_autograd as ca

        from cagtool.capture.observe.dynamo_skip import without_dynamo

        owner = self.owner
        get_ident = threading.get_ident
        local = self._local
        scope = self
        graph_task_id = torch._C._current_graph_task_id

        @without_dynamo
        def owner_begin() -> Any:
            scope._owner_enter()
            context = None
            try:
                enable = scope.enable
                # An `_enable` the script opened itself (or the config flag's, around a compiled
                # function) keeps its compiler, as it does inside `cagtool run`'s: the innermost
                # decides, and the observer sees its graphs all the same.
                if enable is not None and not ca.depth:
                    context = enable()
                    context.__enter__()
            except Exception as exc:  # noqa: BLE001 - the backward runs all the same, recorded without CA
                context = None
                scope.errors += 1
                scope.last_error = f"{type(exc).__name__}: {exc}"
            return context

        @without_dynamo
        def owner_end(context: Any) -> None:
            try:
                if context is not None:
                    context.__exit__(None, None, None)
                if scope.after_backward is not None:
                    scope.after_backward()
            except Exception as exc:  # noqa: BLE001 - never raised into the script's backward
                scope.errors += 1
                scope.last_error = f"{type(exc).__name__}: {exc}"
            finally:
                scope._owner_exit()

        def _engine_run_backward(t_outputs, *args, **kwargs):
            me = get_ident()
            if getattr(local, "depth", 0) or graph_task_id() != -1:
                # Nested in a backward (this thread's, or the engine's work on one of its threads):
                # its top-level call holds the gate already.
                return tracked(t_outputs, *args, **kwargs) if me == owner else plain(t_outputs, *args, **kwargs)
            local.depth = 1
            try:
                if me == owner:
                    context = owner_begin()
                    try:
                        return tracked(t_outputs, *args, **kwargs)
                    finally:
                        owner_end(context)
                scope._other_enter()
                try:
                    return plain(t_outputs, *args, **kwargs)
                finally:
                    scope._other_exit()
            finally:
                local.depth = 0

        return _engine_run_backward
