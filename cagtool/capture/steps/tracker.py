"""Steps: one training iteration each, ended by the optimizer's step() (or by each backward call
when the script has no optimizer); every top-level backward call is recorded within its step.

Replaces `torch.autograd._engine_run_backward`, the entry of Tensor.backward, autograd.backward
and autograd.grad (docs/torch-internals.md, "The backward entry point under both names"), and uses torch's global optimizer
step hooks. What a step is, with one, several or no optimizers: record/schema.py's docstring.
Thread-safe: backward may run in several threads (each has its own nesting depth).

Two halves, because a training step's path is where a Python line costs most (a microsecond or
more: the step's tensor work has just evicted the caches; benchmarks/README.md, step overhead):
- The hooks only note what happened, in order: they append a tuple to `_raw` (a backward began,
  a backward ended with its loss, an optimizer stepped, an optimizer was made or collected) and
  return. No lock, no Python call, no line.
- `drain` counts them afterwards, in the order they happened: step numbers, indices within a step,
  boundaries, and the `backward`, `optimizer_step` and `step` lines, appended to the writer's
  `queued` list (writer.py); a step of one backward closed by its one optimizer's step() is one
  entry, its three lines made in one format (`_close`). A hook that can end a step drains, and
  writes the lines, once every hold_s / 2 (`_hook_due`: one clock comparison a step otherwise;
  every hold_s / 4 measured ~20 us a step more in one harness, benchmarks/step_hook_pieces.py); the writer drains before it numbers any event (`RecordWriter.source`), and its flusher
  thread drains what the hooks have left too long (the job stopped making steps). So the file's
  seq and order are those the events had when they happened; asking for `current_step` (the
  observers, the status line) drains too.
  The training thread, rather than the flusher, does this work while it trains: measured alike in
  wall time (benchmarks/README.md), and no other thread works beside the job's.
Where the hook itself must act, it drains at once, under the lock (`_sync`): `--steps` (stop in
the step's own backward or step() call), an `on_step` callback, and CUDA (the step boundary's
event is recorded on the stream then). Everything a step's figures depend on is in the tuple,
taken at the moment: whether an optimizer is alive is ordered by the tuples a weak reference's
callback appends when one is collected, so a drain run later counts what a count made in the hook
would have counted (tests/test_step_bookkeeping.py compares both on the step shapes).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import math
import threading
import time
import weakref
from typing import Any, Callable

from cagtool.capture.observe import dynamo_skip, source
from cagtool.capture.steps import sharded
from cagtool.capture.steps.device_readings import DeviceReadings
from cagtool.capture.steps.grad_digest import REASON_LAST, GradDigests
from cagtool.capture.steps import heap_in_use
from cagtool.record.writer import MAX_HELD_LINES, RecordWriter
from cagtool.record.schema import (
    FIRST_STEP,
    STEP_BOUNDARY_BACKWARD,
    STEP_BOUNDARY_OPTIMIZER,
    BackwardEvent,
    FinalStateEvent,
    FindingEvent,
    OptimizerStepEvent,
    StepEvent,
    event_line,
)

FLAG_WITHOUT_COMPILED_BACKWARD = "ca_flag_without_compiled_backward"
TRACED_BACKWARD = "backward_traced_by_dynamo"
# Something put torch's own backward entry point back over cagtool's (code that saved it before
# cagtool ran): cagtool put its own back, backward calls in between were not recorded.
BACKWARD_ENTRY_RESTORED = "backward_entry_restored"
# Something else replaced the backward entry point: backward calls that do not reach cagtool's are
# not recorded (the record says from when).
BACKWARD_ENTRY_REPLACED = "backward_entry_replaced"
# An optimizer that does not step while another steps this many times in one open step stops
# being waited for (e.g. a second optimizer used only in a later phase of training).
IDLE_OPTIMIZER_STEPS = 10
# Notes held while it is unknown whether a pre-existing optimizer will step (expect_optimizers):
# two a backward call (its begin and end), so 256 backward calls.
UNDECIDED_NOTES = 512
FLAG_CHECK_EVERY = 64  # backward calls between two looks at the script's CA flag (_check_flag_finding)
# The events whose lines wait in memory up to the writer's hold_s (writer.py), named in the
# manifest with that bound: a process killed hard may lack these for its last hold_s seconds.
HELD_EVENTS = ["backward", "optimizer_step", "step"]

# What the hooks append to `_raw` (the first item of each tuple; `drain` reads them in order):
_BEGIN = 0  # [_BEGIN, step, index]: a top-level backward began; a list, the drain fills in its step and index
_END = 1  # (_END, clock, start, begun, loss, captures, accumulate_grad, thread, cpu): it returned or raised;
#           loss: its first output when one element (read by the drain), else None
_STEPPED = 2  # (_STEPPED, clock, start, id(optimizer), optimizer's class, cpu): an optimizer's step() returned
#           cpu, in both: (process CPU time, the calling thread's CPU time, its ident) at `clock`
_MADE = 3  # (_MADE, id(optimizer), weak reference): an optimizer exists
_GONE = 4  # (_GONE, id(optimizer), weak reference): it was collected


class _NoCuda:
    _initialized = False


class StepTracker:
    def __init__(self, writer: RecordWriter, mode: str, on_step: Callable[[int], None] | None = None, max_steps: int | None = None,
                 digests: GradDigests | None = None, scope: Any = None) -> None:
        self.writer = writer
        # The Python API's block (thread_scope.ThreadScope): only its thread's backwards and
        # optimizer steps are the job's; the entry point is the scope's, around this tracker's.
        self.scope = scope
        self.digests = digests  # per-parameter gradient digests (grad_digest.py), taken in the optimizer's pre-hook
        self.mode = mode
        self.on_step = on_step
        self.max_steps = max_steps
        # The hooks drain at once (under the lock) where they must act themselves: module docstring.
        self._sync = max_steps is not None or on_step is not None
        self.device = DeviceReadings(writer)
        self.closed_steps = 0
        self._backward_calls = 0  # every top-level backward of the run, counted (drain)
        self._last_loss: Any = None  # the last top-level backward's first output, when one element (final state)
        self.step_limit_reached = False
        self.errors = 0
        self.last_error = ""
        self._lock = threading.RLock()
        self._draining = False  # a drain is running (the lock is held): one reached again from it returns
        self._local = threading.local()  # per thread: backward nesting depth, captures of its backward
        # The top-level backward in progress when it is the only one, as in most jobs: {0: [its thread's
        # ident, its outputs, CA captures so far]}, claimed by setdefault (atomic), so a second thread's
        # concurrent backward keeps its state in `_local` instead. Reading a thread-local costs ~4 us
        # in a training step (its per-thread dict is cold then); this dict, a fraction.
        self._solo: dict[int, list[Any]] = {}
        self._raw: list[Any] = []  # the hooks' notes, not counted yet (the same list for the tracker's life)
        self._hook_due = 0.0  # perf_counter time from which a hook that can end a step drains and writes (drain)
        self._open = _OpenStep()
        self._last_boundary_t: float | None = None
        self._last_boundary_cpu: tuple[float, float, int] | None = None  # (process, thread CPU time, thread ident) at that boundary
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()  # every optimizer seen (final state)
        self._known: dict[int, weakref.ref[Any]] = {}  # id -> weak reference of every live optimizer, now
        self._required: dict[int, weakref.ref[Any]] = {}  # the optimizers a step waits for, as of the tuples drained
        self._flag_finding_done = mode != "ca"
        self._flag_check_due = mode == "ca"  # the next top-level backward looks at the CA flag (set by the drain)
        self._handles: list[Any] = []
        self._main_thread_id = threading.main_thread().ident
        self._dynamo_config: Any = None
        self._compiled_autograd: Any = None
        self._original_run_backward: Any = None
        self._original_graph_run_backward: Any = None
        self._entry: Any = None  # cagtool's _engine_run_backward, while installed
        self._entry_findings: set[str] = set()
        self._original_optimizer_init: Any = None
        self._queued = writer.queued  # the writer's list of lines to number (writer.py), one append a line
        self._backward_line, self._optimizer_step_line, self._step_line, self._group_line = _line_makers(writer)
        # Within one drain: the step's one backward line, held back in case the step's optimizer
        # step closes it next, so that the three lines go as one queued entry (_close); (clock, payload).
        self._pending: tuple[float, tuple] | None = None
        # Optimizers that existed before the tracker (expect_optimizers): until one of them steps,
        # or one is made, whether a backward ends a step is undecided and its notes wait here.
        self._candidates: dict[int, weakref.ref[Any]] = {}
        self._undecided: list[Any] | None = None
        # The heap in use around each backward, only in `cagtool checkpointing`'s re-runs (heap_in_use.py)
        self._heap_requested = heap_in_use.requested()
        self.heap = heap_in_use.readings_if_requested()

    def restart(self) -> None:
        """A forked child starts its own record: its steps count from the first again."""
        with self._lock:
            del self._raw[:]  # the parent's: its own record counts them
            self._draining = False
            self._pending = None
            owner = self._solo.get(0)
            if owner is not None and owner[0] != threading.get_ident():  # a thread the fork did not copy
                self._solo.clear()
            self.closed_steps = 0
            self._backward_calls = 0
            self._open = _OpenStep()
            self._last_boundary_t = self._last_boundary_cpu = None
            self.device = DeviceReadings(self.writer)
            self._main_thread_id = threading.main_thread().ident
            if self.digests is not None:
                self.digests.restart()

    @property
    def current_step(self) -> int:
        """The step in progress: events are stamped with it."""
        self.drain()
        return FIRST_STEP + self.closed_steps

    @property
    def current_roots(self) -> list[Any]:
        """grad_fn of the outputs of this thread's top-level backward in progress (a CA capture
        asks, from inside it), else of the last one's loss. Read when asked: making the Python
        object of a fresh graph's root node costs ~11 us in a training step (cold caches)."""
        solo = self._solo.get(0)
        outputs = solo[1] if solo is not None and solo[0] == threading.get_ident() else getattr(self._local, "outputs", None)
        if outputs is None:
            outputs = () if self._last_loss is None else (self._last_loss,)
        roots = []
        for output in outputs:
            roots.append(getattr(output, "grad_fn", None))
        return roots

    @property
    def backward_calls(self) -> int:
        """Top-level backward calls so far."""
        self.drain()
        return self._backward_calls

    # -- compile bookkeeping, called by the observers ------------------------------------------
    def note_capture_finished(self, seconds: float) -> None:
        solo = self._solo.get(0)
        if solo is not None and solo[0] == threading.get_ident():
            solo[2] += 1
        else:
            self._local.captures = getattr(self._local, "captures", 0) + 1
        self.drain()  # the step in progress is the one this backward counts in
        if self.digests is not None:
            self.digests.arm()
        with self._lock:
            self._open.captures += 1
            self._open.compile_s += seconds

    def note_dynamo_compile(self, seconds: float) -> None:
        self.drain()
        if self.digests is not None:
            self.digests.arm()
        with self._lock:
            self._open.compiles += 1
            self._open.compile_s += seconds

    def note_error(self, exc: BaseException) -> None:
        """A bug in the bookkeeping: counted (the manifest keeps it), never raised into the script."""
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"

    # -- installation -------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        import torch.autograd
        from torch.autograd import graph as autograd_graph
        from torch.autograd.variable import Variable
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        original = torch.autograd._engine_run_backward
        self._original_run_backward = original
        tracker = self
        from torch._dynamo import compiled_autograd

        self._dynamo_config, self._compiled_autograd = torch._dynamo.config, compiled_autograd  # _check_flag_finding
        # The per-step lines wait in memory up to hold_s (writer.py): the record says so, from its
        # first manifest on, for a process killed hard.
        held = {"kinds": HELD_EVENTS, "up_to_s": self.writer.hold_s}
        if self.writer.manifest.options.get("held_events") != held:
            self.writer.manifest.options["held_events"] = held
            self.writer.write_manifest()
        # The writer drains the notes before it numbers an event, and its flusher those left too long.
        self.writer.set_source(self.drain)
        # Dynamo's frame callback is off where cagtool runs Python code in the script's backward or
        # step() (its stdlib calls, and a tensor subclass's Python, are not the script's frames);
        # the backward itself keeps it (dynamo_skip.py). The hooks' usual path calls only C
        # functions, so it swaps nothing; the rarer paths (a drain in the hook, the flag check, a
        # thread's name) swap the callback off as dynamo_skip.without_dynamo does, and put back only
        # one that was set: set_eval_frame(None) returns the one in place, usually None.
        from torch._C._dynamo.eval_frame import set_eval_frame

        engine_log = autograd_graph.log
        local, current_graph_task_id = tracker._local, torch._C._current_graph_task_id
        solo = tracker._solo
        claim = solo.setdefault
        perf_counter, get_ident = time.perf_counter, threading.get_ident
        # The process's CPU time at each step boundary (0.5 us a call): a step's CPU time replicates
        # between processes where its wall time measures the machine's other load too.
        process_time, thread_time = time.process_time, time.thread_time
        append = tracker._raw.append
        sync = tracker._sync
        heap = tracker.heap  # None but in a measurement re-run: one comparison a hook otherwise
        # torch.cuda._initialized, read by the hooks that can end a step: with CUDA in use the step
        # boundary is recorded on the stream by the hook itself (device_readings.py).
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not hasattr(cuda, "_initialized"):
            cuda = _NoCuda
        # torch.compiler.is_compiling() is this flag outside TorchScript (two Python calls less).
        compiler = torch.compiler
        compiling_flag = hasattr(compiler, "_is_compiling_flag")

        def in_hook(entry: tuple, write: bool = False) -> bool:
            """Note `entry` and count everything noted so far, now (module docstring: `_sync`, and
            every hold_s / 2 in any case); `write`: and write the lines. True when --steps is reached."""
            prior = set_eval_frame(None)
            try:
                with tracker._lock:
                    append(entry)
                    return tracker.drain(live=entry, write=write)
            finally:
                if prior is not None:
                    set_eval_frame(prior)

        def _engine_run_backward(t_outputs, *args, **kwargs):
            # torch 2.13's torch/autograd/graph.py:_engine_run_backward with the step notes around
            # the engine call, in place of it rather than calling it: no extra Python frame between
            # the script's backward call and the engine, so a warning raised in a backward hook
            # (stacklevel counted from the hook) names the script's line as under plain python, and
            # is shown, or not, as often. Dynamo skips this frame (cagtool's directory is in its
            # skip list) and is offered the frames it calls, as it is torch's function's.
            # Nested: a backward in this thread's backward, or one run by the autograd engine
            # while it executes a graph (reentrant checkpointing, on a device thread too).
            # Where this call's state lives (`_solo`): `mine`, the slot it claimed, or the thread-local.
            started = mine = False
            me = get_ident()
            owner = solo.get(0)
            if owner is None:  # no backward in progress: one may be nested in the engine's work all the same
                top = not ((compiler._is_compiling_flag if compiling_flag else compiler.is_compiling()) or current_graph_task_id() != -1)
            elif owner[0] == me:  # within this thread's own top-level backward
                top = False
            else:  # another thread's backward is in progress: this one's state is thread-local
                top = not (getattr(local, "depth", 0) or (compiler._is_compiling_flag if compiling_flag else compiler.is_compiling())
                           or current_graph_task_id() != -1)
            if top:
                try:
                    begun = [_BEGIN, 0, 0]
                    append(begun)
                    outputs = t_outputs if isinstance(t_outputs, (tuple, list)) else (t_outputs,)
                    if tracker._flag_check_due:
                        tracker._flag_due()
                    slot = [me, outputs, 0]  # outputs: current_roots; 0: captures (note_capture_finished)
                    mine = owner is None and claim(0, slot) is slot
                    if not mine:
                        local.depth, local.captures, local.outputs = 1, 0, outputs
                    started = True
                    if heap is not None:
                        heap.backward_began()
                    start = perf_counter()
                except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
                    tracker.note_error(exc)
            limit = False
            try:
                attach_logging_hooks = engine_log.getEffectiveLevel() <= logging.DEBUG
                if attach_logging_hooks:
                    unregister_hooks = autograd_graph._register_logging_hooks_on_whole_graph(t_outputs)
                torch._C._stash_obj_in_tls("context", contextvars.copy_context())
                try:
                    result = Variable._execution_engine.run_backward(t_outputs, *args, **kwargs)
                finally:
                    if attach_logging_hooks:
                        unregister_hooks()
                    torch._C._remove_obj_from_tls("context")
            finally:
                if started:
                    clock = perf_counter()
                    if heap is not None:
                        heap.backward_ended()
                    if mine:
                        captures = slot[2]
                        del solo[0]
                    else:
                        captures = local.captures
                        local.depth, local.outputs = 0, None
                    try:
                        # The loss: one call into torch here; the drain reads it (a CPU value there,
                        # several at a time with warm caches: _loss). Only a one-element tensor is
                        # held until then, so no large output outlives the call by more than that.
                        loss = outputs[0] if outputs else None
                        try:
                            if loss.numel() != 1:
                                loss = None
                        except Exception:  # noqa: BLE001 - not a tensor, or a subclass without numel
                            loss = None
                        tracker._last_loss = loss
                        entry = (_END, clock, start, begun, loss, captures, kwargs.get("accumulate_grad", True),
                                 "" if get_ident() == tracker._main_thread_id else tracker._thread_name(), (process_time(), thread_time(), me))
                        if sync or cuda._initialized:
                            limit = in_hook(entry)
                        elif clock >= tracker._hook_due:
                            in_hook(entry, True)
                        else:
                            append(entry)
                    except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
                        tracker.note_error(exc)
            if limit:
                tracker.step_limit_reached = True
                raise StepLimitReached(tracker.closed_steps)
            return result

        dynamo_skip.hide_cagtool_frames()
        # Both names: torch.autograd's is the one backward()/grad() call; torch.autograd.graph's is
        # the one code that patches the entry point saves and restores (torch.compiler's
        # _patch_engine_backward does, and puts it back into both), so cagtool's survives that.
        self._original_graph_run_backward = autograd_graph._engine_run_backward
        if self.scope is not None:
            _engine_run_backward = self.scope.wrap(_engine_run_backward, original)
        self._entry = _engine_run_backward
        torch.autograd._engine_run_backward = _engine_run_backward
        autograd_graph._engine_run_backward = _engine_run_backward
        autograd_names = torch.autograd.__dict__
        only = None if self.scope is None else self.scope.owner  # the one thread whose steps count
        entry_changed = tracker._entry_changed

        # Knowing an optimizer exists before its first step() tells a GAN's two optimizers apart
        # from one (schema docstring); subclasses reach it through super().__init__.
        original_init = torch.optim.Optimizer.__init__
        self._original_optimizer_init = original_init

        @functools.wraps(original_init)
        def optimizer_init(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            if only is not None and get_ident() != only:
                return
            try:
                tracker._note_optimizer(optimizer)
            except Exception:  # noqa: BLE001 - never fail the script's optimizer over bookkeeping
                pass

        torch.optim.Optimizer.__init__ = optimizer_init
        opt_start: dict[int, float] = {}  # id(optimizer) -> its step()'s start, between the two hooks
        known = tracker._known
        digests = tracker.digests

        def pre_hook(optimizer, args, kwargs):
            if only is not None and get_ident() != only:
                return
            key = id(optimizer)
            if digests is not None:
                # Usually one decrement: the rarer path drains to know the step (grad_digest.py).
                digests.countdown -= 1
                if digests.countdown <= 0:
                    prior = set_eval_frame(None)
                    try:
                        tracker._digest_before_step(optimizer)
                    except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's step()
                        tracker.note_error(exc)
                    finally:
                        if prior is not None:
                            set_eval_frame(prior)
            opt_start[key] = perf_counter()
            if key not in known:  # made before cagtool was installed: noted now (a Python call, rare)
                prior = set_eval_frame(None)
                try:
                    tracker._note_optimizer(optimizer)
                except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's step()
                    tracker.note_error(exc)
                finally:
                    if prior is not None:
                        set_eval_frame(prior)

        def post_hook(optimizer, args, kwargs):
            if autograd_names.get("_engine_run_backward") is not _engine_run_backward:
                entry_changed()
            if only is not None and get_ident() != only:
                return
            key = id(optimizer)
            start = opt_start.pop(key, None)
            if start is None:
                return
            clock = perf_counter()
            if heap is not None:
                heap.step_ended()
            entry = (_STEPPED, clock, start, key, optimizer.__class__, (process_time(), thread_time(), get_ident()))
            if sync or cuda._initialized:
                try:
                    limit = in_hook(entry)
                except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's step()
                    tracker.note_error(exc)
                    limit = False
                if limit:
                    tracker.step_limit_reached = True
                    raise StepLimitReached(tracker.closed_steps)
            elif clock >= tracker._hook_due:
                try:
                    in_hook(entry, True)
                except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's step()
                    tracker.note_error(exc)
            else:
                append(entry)

        self._handles = [register_optimizer_step_pre_hook(pre_hook), register_optimizer_step_post_hook(post_hook)]

    def uninstall(self) -> None:
        import torch.autograd
        from torch.autograd import graph as autograd_graph

        self.settle()
        self.drain()
        if self._heap_requested:
            self.writer.manifest.options["heap_in_use"] = self.heap.summary() if self.heap is not None else heap_in_use.unavailable()
        if self._entry is not None and torch.autograd.__dict__.get("_engine_run_backward") is not self._entry:
            self._entry_changed(reinstall=False)
        self.writer.set_source(None)
        if self._original_run_backward is not None:
            torch.autograd._engine_run_backward = self._original_run_backward
        if self._original_graph_run_backward is not None:
            autograd_graph._engine_run_backward = self._original_graph_run_backward
        self._entry = None
        if self._original_optimizer_init is not None:
            torch.optim.Optimizer.__init__ = self._original_optimizer_init
        for handle in self._handles:
            handle.remove()
        self.device.finish()

    # -- the rarer paths of the hooks ---------------------------------------------------------
    def _note_optimizer(self, optimizer: Any) -> None:
        """An optimizer exists (made, or first seen stepping): noted in order with the rest, and
        again, by a weak reference's callback, when it is collected."""
        key = id(optimizer)
        ref = self._known.get(key)
        if ref is not None and ref() is optimizer:
            return
        raw, known = self._raw, self._known

        def collected(ref: weakref.ref[Any]) -> None:
            # At the moment the optimizer goes (any thread, inside a collection): two C calls.
            if known.get(key) is ref:
                del known[key]
            raw.append((_GONE, key, ref))

        ref = weakref.ref(optimizer, collected)
        known[key] = ref
        self._optimizers.add(optimizer)
        raw.append((_MADE, key, ref))

    def _entry_changed(self, reinstall: bool = True) -> None:
        """torch.autograd._engine_run_backward is not cagtool's any more (seen at an optimizer step and
        at the end). Torch's own put back over it (by code that saved it before cagtool ran) is
        replaced by cagtool's again: the two run the same body. Anything else is left in place, as
        the job set it; backward calls that do not reach cagtool's are not recorded, and a
        finding says so, once, from the step it was first seen."""
        from torch._C._dynamo.eval_frame import set_eval_frame

        prior = set_eval_frame(None)
        try:
            import torch.autograd
            from torch.autograd import graph as autograd_graph

            current = torch.autograd.__dict__.get("_engine_run_backward")
            wrapped, hops = current, 0
            while wrapped is not None and wrapped is not self._entry and hops < 16:
                wrapped, hops = getattr(wrapped, "__wrapped__", None), hops + 1  # functools.wraps
            if wrapped is self._entry or self._entry is None:
                return  # cagtool's, or a wrapper around it: every backward still reaches it
            name = f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', type(current).__name__)}"
            restored = current is self._original_run_backward or current is self._original_graph_run_backward
            if restored and reinstall:
                torch.autograd._engine_run_backward = self._entry
                autograd_graph._engine_run_backward = self._entry
            code = BACKWARD_ENTRY_RESTORED if restored else BACKWARD_ENTRY_REPLACED
            if code in self._entry_findings:
                return
            self._entry_findings.add(code)
            if restored:
                message = (
                    "something put torch's own torch.autograd._engine_run_backward back in place of cagtool's "
                    "(code that saved it before cagtool started); backward calls made between that and this "
                    f"step were not recorded. cagtool put its own back{'' if reinstall else ' (at the end of the run)'}: "
                    "from here on every backward is recorded again"
                )
            else:
                message = (
                    f"torch.autograd._engine_run_backward was replaced by {name}; backward calls that do not "
                    "go through cagtool's entry point (which it replaced) are not recorded from here on. "
                    "cagtool leaves the job's replacement in place"
                )
            self.writer.emit(FindingEvent, code=code, message=message, step=self.current_step, detail={"entry_point": name})
        except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's step()
            self.note_error(exc)
        finally:
            if prior is not None:
                set_eval_frame(prior)

    def _flag_due(self) -> None:
        """The first top-level backward, and the next after every FLAG_CHECK_EVERY counted: look at
        the CA flag."""
        self._flag_check_due = False
        from torch._C._dynamo.eval_frame import set_eval_frame

        prior = set_eval_frame(None)
        try:
            self._check_flag_finding()
        finally:
            if prior is not None:
                set_eval_frame(prior)

    def _thread_name(self) -> str:
        """A backward in a thread other than the main one: the thread's name (Python code, so with
        Dynamo's frame callback off)."""
        from torch._C._dynamo.eval_frame import set_eval_frame

        prior = set_eval_frame(None)
        try:
            return threading.current_thread().name
        finally:
            if prior is not None:
                set_eval_frame(prior)

    # -- the count ----------------------------------------------------------------------------
    def drain(self, live: Any = None, write: bool = False, late: bool = False) -> bool:
        """Count what the hooks noted, in the order they noted it (module docstring). `live` is
        the note of a hook draining for itself: a step it ends gets its CUDA boundary now, and its
        lines are written when due (`write`: now). `late`: the writer's flusher, which counts only
        notes the hooks have left longer than hold_s / 4 past their turn (the job stopped making
        steps): a note made just after a drain is counted by hold_s / 2 (the next hook's drain) or
        by the flusher's first look after 3/4 hold_s (it looks every hold_s / 4), so within hold_s.
        True when a step ended here reached --steps."""
        raw = self._raw
        if not raw:
            return False
        if late and time.perf_counter() < self._hook_due + self.writer.hold_s / 4:
            return False
        limit = False
        with self._lock:
            if self._draining:
                return False
            self._draining = True
            try:
                n = len(raw)
                taken = raw[:n]
                del raw[:n]  # a note racing this one stays for the next drain
                if self._undecided is not None:
                    taken = self._settle(taken)
                for entry in taken:
                    try:
                        kind = entry[0]
                        if kind == _END:
                            limit = self._backward_ended(entry, entry is live) or limit
                        elif kind == _STEPPED:
                            limit = self._optimizer_stepped(entry, entry is live) or limit
                        elif kind == _BEGIN:
                            opened = self._open
                            entry[1], entry[2] = FIRST_STEP + self.closed_steps, opened.next_index
                            opened.next_index += 1
                        elif kind == _MADE:
                            self._required[entry[1]] = entry[2]
                        elif self._required.get(entry[1]) is entry[2]:  # _GONE
                            del self._required[entry[1]]
                    except Exception as exc:  # noqa: BLE001 - one bad note never loses the others
                        self.note_error(exc)
                if self._pending is not None:
                    self._queue_pending()
                writer = self.writer
                now = time.perf_counter()
                self._hook_due = now + writer.hold_s / 2
                if live is not None and self._queued:
                    if write or now >= writer.queued_due or len(self._queued) >= MAX_HELD_LINES:
                        writer.write_queued()  # in the hook: the lines of the last hold_s / 2 or more, in one write
            finally:
                self._draining = False
        return limit

    def expect_optimizers(self, optimizers: list[Any]) -> None:
        """Optimizers made before the tracker was installed (the Python API's block starts in a
        running process): a backward before their first step() must not be counted as a step of
        its own (no optimizer known yet). The notes of such backwards wait until one of them steps
        (they are its step's), an optimizer is made, or the end (each backward a step of its own,
        as with no optimizer); at most UNDECIDED_NOTES notes."""
        with self._lock:
            self._candidates = {id(o): weakref.ref(o) for o in optimizers}
            if self._candidates and not self.closed_steps:
                self._undecided = []

    def _settle(self, taken: list[Any]) -> list[Any]:
        """The notes to count now (caller holds the lock): none while undecided; once decided,
        the held ones first, in their order."""
        held = self._undecided
        assert held is not None
        for i, entry in enumerate(taken):
            kind = entry[0]
            if kind == _GONE or (kind in (_BEGIN, _END) and len(held) < UNDECIDED_NOTES):
                held.append(entry)
                continue
            # Decided: an optimizer made or stepping, or too many backwards without one.
            self._undecided = None
            key = entry[1] if kind == _MADE else entry[3] if kind == _STEPPED else None
            ref = self._candidates.get(key) if key is not None else None
            if ref is not None and ref() is not None:  # not another object at a collected one's id
                # A pre-existing optimizer's first step (its pre-hook notes it as made): the
                # waiting backwards are its step's.
                self._required[key] = ref
            return held + taken[i:]
        return []

    def settle(self) -> None:
        """The end of the watch: notes still undecided are counted (no optimizer stepped)."""
        with self._lock:
            if self._undecided is None:
                return
            held, self._undecided = self._undecided, None
            self._raw[:0] = held
        self.drain()

    def _queue(self, line: Callable[[int, float, Any], str], clock: float, payload: Any) -> None:
        """A line for the writer's `queued` list (writer.py), made at perf_counter time `clock`: when
        it is the first there, it is due hold_s / 2 from that time. (The writer's flusher runs
        already: `set_source` started it, and `reopen` again in a forked child.) A backward line
        held back (`_pending`) goes first: the lines keep the order of their events."""
        if self._pending is not None:
            self._queue_pending()
        queued = self._queued
        if not queued:
            self.writer.queued_due = clock + self.writer.hold_s / 2
        queued.append((line, clock - self.writer.t0, payload))

    def _queue_pending(self) -> None:
        """The held-back backward line, on its own after all (the step did not close next)."""
        (clock, payload), self._pending = self._pending, None  # type: ignore[misc]
        self._queue(self._backward_line, clock, payload)

    def _backward_ended(self, entry: tuple, live: bool) -> bool:
        """A top-level backward returned or raised (an _END note). True when --steps is reached."""
        _, clock, start, begun, loss, captures, accumulate, thread, cpu = entry
        value, device_tensor = (None, None) if loss is None else _loss(loss)
        elapsed = clock - start
        self._backward_calls += 1
        if not self._backward_calls % FLAG_CHECK_EVERY and not self._flag_finding_done:
            self._flag_check_due = True
        opened = self._open
        current = FIRST_STEP + self.closed_steps
        step, index = begun[1], begun[2]
        by_backward = not self._required  # no optimizer alive: this call is a step of its own
        if by_backward and step != current:
            # Another thread's backward closed the step this one began in: it closes the next.
            step, index = current, opened.backward_calls
        payload = (step, index, elapsed, captures, "backward" if accumulate else "grad", value, thread)
        if step == current:  # not a backward that outlived its step (optimizer stepped in another thread)
            opened.backward_calls += 1
            opened.backward_s += elapsed
            opened.loss, opened.loss_tensor = value, device_tensor
            if opened.backward_calls == 1 and not by_backward and not opened.stepped:
                # The step's first backward, no optimizer stepped yet: if the next note closes the
                # step, its three lines go as one entry (_optimizer_stepped). Queued otherwise.
                if self._pending is not None:
                    self._queue_pending()
                self._pending = (clock, payload)
                return False
        self._queue(self._backward_line, clock, payload)
        return self._close(STEP_BOUNDARY_BACKWARD, clock, cpu, live) if by_backward else False

    def _optimizer_stepped(self, entry: tuple, live: bool) -> bool:
        """An optimizer's step() returned (a _STEPPED note). True when that ended the step and
        --steps is reached."""
        _, clock, start, key, optimizer_class, cpu = entry
        seconds = clock - start
        if key not in self._required:  # stepping again after it stopped being waited for
            ref = self._known.get(key)
            if ref is not None:
                self._required[key] = ref
        opened = self._open
        stepped = opened.stepped
        waiting = self._required
        pending = self._pending
        if pending is not None and not stepped and len(waiting) == 1 and key in waiting and opened.backward_calls == 1:
            # The usual step: one backward, then the one optimizer steps and closes it. Its
            # backward, optimizer-step and step lines: one entry (_close), the same text.
            self._pending = None
            opened.optimizer_s += seconds
            stepped[key] = 1
            return self._close(STEP_BOUNDARY_OPTIMIZER, clock, cpu, live, (pending, seconds, optimizer_class.__name__))
        self._queue(self._optimizer_step_line, clock, (FIRST_STEP + self.closed_steps, seconds, optimizer_class.__name__))
        opened.optimizer_s += seconds
        stepped[key] = stepped.get(key, 0) + 1
        if waiting.keys() <= stepped.keys():  # every optimizer waited for has stepped
            return self._close(STEP_BOUNDARY_OPTIMIZER, clock, cpu, live)
        if stepped[key] >= IDLE_OPTIMIZER_STEPS:
            for other in [k for k in waiting if k not in stepped]:
                del waiting[other]
            return self._close(STEP_BOUNDARY_OPTIMIZER, clock, cpu, live)
        return False

    def _close(self, boundary: str, clock: float, cpu: float, live: bool, group: tuple | None = None) -> bool:
        """End the step in progress at perf_counter time `clock`, process CPU time `cpu` (caller holds the lock). True when
        --steps is reached. `group`: ((its backward's clock, payload), the optimizer step's seconds,
        its class name), the step's backward and optimizer-step lines not queued yet: the three go
        as one entry, whose text is the three lines (`_line_makers`), and two entries without text
        after it, so the writer numbers them as three events."""
        opened = self._open
        step = FIRST_STEP + self.closed_steps
        now = clock - self.writer.t0
        wall_s = None if self._last_boundary_t is None else now - self._last_boundary_t
        last = self._last_boundary_cpu
        # The thread's CPU time spans the step only when the same thread ended both boundaries
        # (its clock is its own): it says whether the step ran on the CPU or waited off it.
        cpu_s, thread_cpu_s = (None, None) if last is None else (cpu[0] - last[0], cpu[1] - last[1] if cpu[2] == last[2] else None)
        # The step's figures are read from `opened` when the line is written: nothing changes it
        # once it is closed (every update goes to the step in progress, under the lock).
        if group is None:
            self._queue(self._step_line, clock, (opened, step, wall_s, boundary, cpu_s, thread_cpu_s))
        else:
            (backward_clock, backward), seconds, optimizer = group
            queued = self._queued
            if not queued:
                self.writer.queued_due = backward_clock + self.writer.hold_s / 2
            # One extend: the three are numbered together whatever another thread takes meanwhile.
            queued += [(self._group_line, backward_clock - self.writer.t0, (backward, now, seconds, optimizer, opened, step, wall_s, boundary, cpu_s, thread_cpu_s)),
                       _NO_LINE, _NO_LINE]
        if opened.loss_tensor is not None:
            self.device.defer_loss(step, opened.loss_tensor)
        if live:  # in the hook (with CUDA in use, or --steps): the stream is marked at the step's end
            self.device.boundary(step)
        self._last_boundary_t, self._last_boundary_cpu = now, cpu
        self.closed_steps += 1
        self._open = _OpenStep()
        if self.on_step is not None:
            self.on_step(step)
        return self.max_steps is not None and self.closed_steps >= self.max_steps and not self.step_limit_reached

    def _check_flag_finding(self) -> None:
        """The script set the CA flag but this backward runs outside any compiled region, so as
        written it would get no compiled autograd (only cagtool's own enable is active). Asked at
        the first backward and every FLAG_CHECK_EVERY-th after it: reading a Dynamo config value is
        several Python calls, and a script sets the flag once, usually before training."""
        if self._flag_finding_done or self.mode != "ca":
            return
        if self._dynamo_config.compiled_autograd and self._compiled_autograd.depth <= 1:
            self._flag_finding_done = True
            where = source.user_caller()
            self.writer.emit(
                FindingEvent,
                code=FLAG_WITHOUT_COMPILED_BACKWARD,
                message=(
                    "the script sets torch._dynamo.config.compiled_autograd = True, but its backward runs "
                    "outside any torch.compile'd function, so without cagtool it gets no compiled autograd "
                    "(torch 2.13 reads the flag only while a compiled function runs). Call backward inside "
                    "a compiled step function, or wrap the loop in torch._dynamo.compiled_autograd._enable(...)."
                ),
                step=self.current_step,
                source=where,
            )

    def _digest_before_step(self, optimizer: Any) -> None:
        """The optimizer's pre-hook, when the digests' countdown ran out: the step in progress,
        counted now, and whether a capture or compile happened in it decide whether it is due."""
        digests = self.digests
        if digests is None:
            return
        import torch

        if torch.compiler.is_compiling():  # a compiled optimizer step being traced: no gradients to read
            return
        with self._lock:
            self.drain()
            step = FIRST_STEP + self.closed_steps
            opened = self._open
            recompiled = bool(opened.captures or opened.compiles)
        digests.before_step(step, recompiled, optimizer)

    def grad_digest_events(self) -> list[dict[str, Any]]:
        """The digests, for GradDigestEvent, with the run's last step digested from the gradients
        still held when it was not already (the grads of the open step when the run ended in
        it after a backward, else of the last step that ended). None-only digests are left out."""
        digests = self.digests
        if digests is None:
            return []
        self.drain()
        with self._lock:
            if self._open.backward_calls:
                last = FIRST_STEP + self.closed_steps
            elif self.closed_steps:
                last = FIRST_STEP + self.closed_steps - 1
            else:
                last = None
        if last is not None and last not in digests.steps:
            params = digests.params_seen() or _params_of(self._optimizers) or _leaf_params(self.current_roots)
            if any(getattr(p, "grad", None) is not None for p in params):
                digests.digest(last, [REASON_LAST], params)
        elif last is not None:
            digests.add_reason(last, REASON_LAST)
        return digests.events()

    def note_traced_backward(self) -> None:
        """With trace_autograd_ops, Dynamo traces `loss.backward()` into its own graph: no backward
        reaches the autograd engine's entry point, so there are no steps and no CA graphs to record."""
        import torch

        if self.backward_calls == 0 and getattr(torch._dynamo.config, "trace_autograd_ops", False):
            self.writer.emit(
                FindingEvent,
                code=TRACED_BACKWARD,
                message=(
                    "the script sets torch._dynamo.config.trace_autograd_ops = True: Dynamo traced its "
                    "backward calls into the compiled graphs, so no backward ran through the autograd "
                    "engine (no steps, no compiled-autograd graphs to record)"
                ),
            )

    def emit_final_state(self) -> None:
        """Parameter and gradient norms at the end, for comparing modes' numerics."""
        params = _params_of(self._optimizers) or _leaf_params(self.current_roots)  # outside any backward: the last loss's graph
        if not params:
            self.writer.emit(FinalStateEvent, param_norm=None, grad_norm=None, num_params=0)
            return
        params, of = sharded.final_params(params, self.digests.names if self.digests is not None else None)
        import torch

        with torch.no_grad():
            p2 = sum(_sum_of_squares(p) for p in params)
            grads = [p.grad for p in params if p.grad is not None]
            g2 = sum(_sum_of_squares(g) for g in grads) if grads else None
        self.writer.emit(
            FinalStateEvent,
            param_norm=math.sqrt(p2),
            grad_norm=math.sqrt(g2) if g2 is not None else None,
            num_params=len(params),
            of=of,
        )


# Elements squared in float64 at a time for the final norms: the copies cagtool makes for them are
# 2 x 8 MiB at most, whatever the size of a parameter (a whole 1 GiB float32 embedding in float64
# was 4 GiB more at the run's end, on the job's device).
_NORM_CHUNK = 1 << 20


def _sum_of_squares(tensor: Any) -> float:
    """sum(x**2) of a tensor in float64, a chunk at a time; one read of the device at the end."""
    flat = tensor.detach()
    if not flat.is_contiguous() or flat.numel() <= _NORM_CHUNK:
        return float(flat.double().pow(2).sum())
    flat = flat.view(-1)
    total = None
    for start in range(0, flat.numel(), _NORM_CHUNK):
        part = flat[start:start + _NORM_CHUNK].double().pow(2).sum()
        total = part if total is None else total + part
    return float(total)


def _line_makers(writer: RecordWriter) -> tuple[Callable[[int, float, Any], str], ...]:
    """The `line(seq, t, payload)` functions of the tracker's queued lines (writer.py: `queued`):
    the payload is the tuple the drain made, named here, when the line is written. Each line is
    its event's (record/schema.py, `event_line`): built from the payload, by keyword, and encoded
    by msgspec, so a field added to one of these events is written once the drain passes its value."""

    def backward_line(seq: int, t: float, payload: tuple) -> str:
        step, index, backward_s, captures, call, loss, thread = payload
        return event_line(BackwardEvent(seq=seq, t=t, step=step, index=index, backward_s=backward_s, ca_captures=captures, call=call, loss=loss, thread=thread))

    def optimizer_step_line(seq: int, t: float, payload: tuple) -> str:
        step, wall_s, optimizer = payload
        return event_line(OptimizerStepEvent(seq=seq, t=t, step=step, wall_s=wall_s, optimizer=optimizer))

    def step_line(seq: int, t: float, payload: tuple) -> str:
        opened, step, wall_s, boundary, cpu_s, thread_cpu_s = payload
        return event_line(StepEvent(seq=seq, t=t, step=step, backward_s=opened.backward_s, loss=opened.loss, ca_captures=opened.captures,
                                    compiles=opened.compiles, compile_s=opened.compile_s, wall_s=wall_s, backward_calls=opened.backward_calls,
                                    boundary=boundary, optimizer_s=opened.optimizer_s, cpu_s=cpu_s, thread_cpu_s=thread_cpu_s))

    def group_line(seq: int, t: float, payload: tuple) -> str:
        """A step's backward, optimizer-step and step lines (seq, seq + 1, seq + 2)."""
        backward, t_step, optimizer_s, optimizer, opened, _, wall_s, boundary, cpu_s, thread_cpu_s = payload
        step = backward[0]
        return (backward_line(seq, t, backward) + optimizer_step_line(seq + 1, t_step, (step, optimizer_s, optimizer))
                + step_line(seq + 2, t_step, (opened, step, wall_s, boundary, cpu_s, thread_cpu_s)))

    return backward_line, optimizer_step_line, step_line, group_line


def _no_line(seq: int, t: float, payload: Any) -> str:
    return ""


# A queued entry without text: an event whose line a group entry before it wrote (_close).
_NO_LINE = (_no_line, 0.0, None)


class StepLimitReached(BaseException):
    """Raised out of the target's backward when --steps is reached; the run ends cleanly.
    A BaseException, like KeyboardInterrupt, so the script's `except Exception` lets it through."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped after {step} steps (--steps)")
        self.step = step


class _OpenStep:
    """The step in progress: what it has done so far. One is made a step: the immutable fields
    start as class attributes (an instance gets its own on the first update), so only `stepped`
    is set here."""

    next_index = 0  # the next backward call's index (taken when it starts)
    backward_calls = 0  # calls that finished
    backward_s = 0.0
    captures = 0
    compiles = 0
    compile_s = 0.0
    optimizer_s = 0.0
    loss: float | None = None
    loss_tensor: Any = None  # the last loss when it lives on an accelerator

    def __init__(self) -> None:
        self.stepped: dict[int, int] = {}  # id(optimizer) -> step() calls in this step


def _loss(tensor: Any) -> tuple[float | None, Any]:
    """(value, None) for a CPU scalar, read now (no device to wait for); (None, detached tensor)
    for a scalar on an accelerator, read at the end of the run; (None, None) for anything else.
    Called by the drain for each backward call's one-element first output: in the hook itself
    with CUDA in use (the hook drains there), else a few steps later, several in a row."""
    try:
        if tensor.is_cpu:
            value = tensor.item()  # exact; RuntimeError when not one element: None below
            kind = value.__class__
            if kind is float:
                return value, None
            return (float(value) if kind is int or kind is bool else None), None  # complex: None
        if tensor.numel() != 1 or tensor.is_complex() or tensor.device.type == "meta":
            return None, None
        return None, tensor.detach()
    except Exception:  # noqa: BLE001 - not a tensor, a subclass without these, or not one element
        return None, None


def _params_of(optimizers: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for optimizer in list(optimizers):
        for group in optimizer.param_groups:
            for p in group["params"]:
                seen.setdefault(id(p), p)
    return list(seen.values())


def _leaf_params(roots: list[Any]) -> list[Any]:
    found: dict[int, Any] = {}
    for node in source.walk_graph(roots):
        variable = getattr(node, "variable", None)
        if variable is not None:
            found.setdefault(id(variable), variable)
    return list(found.values())
