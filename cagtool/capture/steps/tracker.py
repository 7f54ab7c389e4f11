"""Steps: one training iteration each, ended by the optimizer's step() (or by each backward call
when the script has no optimizer); every top-level backward call is recorded within its step.

Replaces `torch.autograd._engine_run_backward`, the entry of Tensor.backward, autograd.backward
and autograd.grad (docs/torch-internals.md, "The backward entry point under both names"), and uses torch's global optimizer
step hooks. What a step is, with one, several or no optimizers: record/schema.py's docstring.
Thread-safe: backward may run in several threads (each has its own nesting depth).

Two halves, because a training step's path is where a Python line costs most (a microsecond or
more: the step's tensor work has just evicted the caches; benchmarks/README.md, step overhead):
- The hooks (hooks.py) only note what happened, in order: they append a note to `_raw` (notes.py:
  a backward began, a backward ended with its loss, an optimizer stepped, an optimizer was made or
  collected) and return. No lock, no Python call, no line.
- `drain` counts them afterwards, in the order they happened (boundaries.py: step numbers,
  indices within a step, boundaries; timing.py: the step's wall and CPU time), and the `backward`,
  `optimizer_step` and `step` lines are appended to the writer's `queued` list (lines.py); a step
  of one backward closed by its one optimizer's step() is one entry, its three lines made in one
  call. A hook that can end a step drains, and
  writes the lines, once every hold_s / 2 (`_hook_due`: one clock comparison a step otherwise;
  every hold_s / 4 measured ~20 us a step more in one harness, benchmarks/step_hook_pieces.py); the writer drains before it numbers any event (`RecordWriter.source`), and its flusher
  thread drains what the hooks have left too long (the job stopped making steps). So the file's
  seq and order are those the events had when they happened; asking for `current_step` (the
  observers, the status line) drains too.
  The training thread, rather than the flusher, does this work while it trains: measured alike in
  wall time (benchmarks/README.md), and no other thread works beside the job's.
Where the hook itself must act, it drains at once, under the lock (`_sync`): `--steps` (stop in
the step's own backward or step() call), an `on_step` callback, and CUDA (the step boundary's
event is recorded on the stream then). Everything a step's figures depend on is in the note,
taken at the moment: whether an optimizer is alive is ordered by the notes a weak reference's
callback appends when one is collected, so a drain run later counts what a count made in the hook
would have counted (tests/test_step_bookkeeping.py compares both on the step shapes).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable

from cagtool.capture.steps.boundaries import IDLE_OPTIMIZER_STEPS, UNDECIDED_NOTES, OpenStep, StepCounter
from cagtool.capture.steps.device_readings import DeviceReadings
from cagtool.capture.steps.final_state import emit_final_state, leaf_params, note_initial_versions, params_of
from cagtool.capture.steps.findings import (
    BACKWARD_ENTRY_REPLACED,
    BACKWARD_ENTRY_RESTORED,
    FLAG_CHECK_EVERY,
    FLAG_WITHOUT_COMPILED_BACKWARD,
    TRACED_BACKWARD,
    StepFindings,
)
from cagtool.capture.steps import heap_in_use
from cagtool.capture.steps.grad_digest import GradDigests
from cagtool.capture.steps.hooks import InstalledHooks, StepLimitReached, install_hooks
from cagtool.capture.steps.lines import line_makers
from cagtool.capture.steps.notes import COMPILED, ENDED, EVALUATED, GONE, MADE, RETURNED, SKIPPED, STEPPED, WORKERS_STARTED, BackwardCall
from cagtool.record.schema import FIRST_STEP, REASON_LAST
from cagtool.record.writer import MAX_HELD_LINES, RecordWriter
from cagtool.torch_text import frame_compile, in_torch_optim

__all__ = ["BACKWARD_ENTRY_REPLACED", "BACKWARD_ENTRY_RESTORED", "FLAG_WITHOUT_COMPILED_BACKWARD", "HELD_EVENTS",
           "IDLE_OPTIMIZER_STEPS", "TRACED_BACKWARD", "UNDECIDED_NOTES", "StepLimitReached", "StepTracker"]

# The events whose lines wait in memory up to the writer's hold_s (writer.py), named in the
# manifest with that bound: a process killed hard may lack these for its last hold_s seconds.
HELD_EVENTS = ["backward", "optimizer_step", "step"]


# The names under which tests/test_event_lines.py reads the line makers and the open step.
_line_makers, _OpenStep = line_makers, OpenStep


def _step_reading(optimizer_ref: weakref.ref[Any], param_ref: weakref.ref[Any], tensor: type) -> Any:
    """What one optimizer's step changes, read where the step tracker watches for a step inside
    compiled code: its parameter's state, each tensor as (id, version) and each number as itself
    (Adam's `step`, `exp_avg`, `exp_avg_sq`; SGD's `momentum_buffer`): a step updates them in place
    (every backend bumps their version counters; fused Adam's kernel bumps only `step`'s) or
    replaces them, and nothing but a step does, so a parameter the script changes in place under
    no_grad (weight clipping between micro-batches) is not read as a step. All of them, not one: an
    optimizer of the script's own may keep one a step leaves alone. With no state yet (before the
    first step), or none at all (SGD without momentum), the parameter's own version counter: the
    state a step makes reads as a change from it. -1 once the parameter is gone. Never raises: it
    runs at every backward's start."""
    param = param_ref()
    if param is None:
        return -1
    try:
        optimizer = optimizer_ref()
        state = None if optimizer is None else optimizer.state.get(param)
        if state:
            reading = tuple((id(v), v._version) if isinstance(v, tensor) else v for v in state.values() if isinstance(v, (tensor, int, float)))
            if reading:
                return reading
    except Exception:  # noqa: BLE001 - an optimizer of another shape: its parameter, as before
        pass
    return param._version


class StepTracker:
    """The steps of one record: installs the hooks (hooks.py), counts their notes into steps when
    it drains (boundaries.py), and tells the observers the step in progress and the graph's roots."""

    def __init__(self, writer: RecordWriter, mode: str, on_step: Callable[[int], None] | None = None, max_steps: int | None = None,
                 digests: GradDigests | None = None, scope: Any = None) -> None:
        self.writer = writer
        # The Python API's block (thread_scope.ThreadScope): only its thread's backwards and
        # optimizer steps are the job's; the entry point is the scope's, around this tracker's.
        self.scope = scope
        self.digests = digests  # per-parameter gradient digests (grad_digest.py), taken in the optimizer's pre-hook
        self.mode = mode
        # The hooks drain at once (under the lock) where they must act themselves: module docstring.
        self._sync = max_steps is not None or on_step is not None
        self.errors = 0
        self.last_error = ""
        self._lock = threading.RLock()
        self._draining = False  # a drain is running (the lock is held): one reached again from it returns
        self._local = threading.local()  # per thread: `call`, its top-level backward in progress
        # The top-level backward in progress when it is the only one, as in most jobs: {0: its
        # BackwardCall}, claimed by setdefault (atomic), so a second thread's concurrent backward
        # keeps its state in `_local` instead. Reading a thread-local costs ~4 us in a training
        # step (its per-thread dict is cold then); this dict, a fraction.
        self._solo: dict[int, BackwardCall] = {}
        self._raw: list[Any] = []  # the hooks' notes, not counted yet (the same list for the tracker's life)
        self._hook_due = 0.0  # perf_counter time from which a hook that can end a step drains and writes (drain)
        # The last top-level backward's first output, when one element (final state), or a weak
        # reference to it while an optimizer is alive (hooks.py): read through `_last_output`.
        self._last_loss: Any = None
        self._optim_frames: set[str] = set()  # Dynamo frame ids of torch.optim's code (step_of_compile)
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()  # every optimizer seen (final state)
        # id(parameter) -> (a weak reference to it, its version counter when its optimizer was made): final_state.py
        self._initial_versions: dict[int, tuple[Any, int]] = {}
        self.known: dict[int, weakref.ref[Any]] = {}  # id -> weak reference of every live optimizer, now
        # Every backward's end reads the CPU clocks (hooks.py), where a backward's end may be a
        # step's: two optimizers were alive at once (or the API block expects pre-existing ones),
        # so whether a backward ends its step is a question of the drain's count; or an optimizer
        # steps inside a compiled graph, whose step ends at its last backward's end
        # (boundaries.py, compiled_optimizer_found). Never reset.
        self.backward_reads_cpu = False
        # DataLoader iterators the job's loop thread made (hooks.py, its `_get_iterator`): one an
        # epoch, one per evaluation; 0 where the script slices its data by hand (the manifest's
        # `dataloader_iterators`, which explain reads before it names a DataLoader's last batch).
        self.loader_iterators = 0
        # ... and the collate functions they batch with (collate.py; the manifest's `collate_functions`).
        self.collate_functions: list[dict[str, Any]] = []
        # [torch._dynamo.compiled_autograd] while the ca mode is on (mode_setup.py), else []: each
        # top-level backward's start reads its flag (notes.py, BackwardCall.outside_ca).
        self._ca_module: list[Any] = []
        # Once an optimizer's code is compiled: [a reader of the watched parameters' version
        # counters] (watch_parameters), read by the hooks at each top-level backward's start and
        # where a compiled call returns.
        self._watching: list[Callable[[], tuple[Any, ...]]] = []
        # The same reader, once such a compile was made in no compiled call the hooks see (a function
        # compiled before they were installed): read at each top-level backward's start.
        self._watch_backwards: list[Callable[[], tuple[Any, ...]]] = []
        # The weak references of the optimizers the reader reads (watch_parameters): an optimizer made
        # where a collected one was has its id, never its reference.
        self._watch_refs: tuple[weakref.ref[Any], ...] = ()
        self._step_traced = False  # the trace in progress traced an optimizer's step() (hooks.py)
        # The CA observer's answer to an error raised from the engine: a context to run that backward
        # again in, or None (ca_observer.py, CaptureObserver.logger_aside); None without an observer.
        self.ca_rerun: Callable[[BaseException], Any] | None = None
        self.device = DeviceReadings(writer)
        self.counter = StepCounter(writer, self.device, on_step, max_steps)
        self.findings = StepFindings(writer, mode, lambda: self.current_step)
        self._flag_check_due = mode == "ca"  # the next top-level backward looks at the CA flag (set by the drain)
        self._main_thread_id = threading.main_thread().ident
        self._hooks: InstalledHooks | None = None
        # The heap in use around each backward, only in `cagtool checkpointing`'s re-runs (heap_in_use.py)
        self._heap_requested = heap_in_use.requested()
        self.heap = heap_in_use.readings_if_requested(self.known)

    # -- what the observers and the recorder read ---------------------------------------------
    @property
    def closed_steps(self) -> int:
        return self.counter.closed_steps

    @property
    def step_limit_reached(self) -> bool:
        return self.counter.limit_reached

    @step_limit_reached.setter
    def step_limit_reached(self, reached: bool) -> None:
        self.counter.limit_reached = reached

    @property
    def current_step(self) -> int:
        """The step in progress: events are stamped with it."""
        self.drain()
        if self.counter.held is not None:
            self._count_held()
        return FIRST_STEP + self.counter.closed_steps

    def _count_held(self) -> None:
        """A step's number is needed now (an event stamped with it, a compile or capture counted in
        it, a digest taken) while the notes wait on one optimizer's first step among several
        (boundaries.py): they are counted now, as one step that waits for every optimizer."""
        with self._lock:
            counter = self.counter
            if counter.held is None:
                return
            self._raw[:0] = counter.release(alone=False)
            self.drain()

    @property
    def current_roots(self) -> list[Any]:
        """grad_fn of the outputs of this thread's top-level backward in progress (a CA capture
        asks, from inside it), else of the last one's loss. Read when asked: making the Python
        object of a fresh graph's root node costs ~11 us in a training step (cold caches)."""
        call = self._own_call()
        outputs = call.outputs if call is not None else None
        if outputs is None:
            last = self._last_output()
            outputs = () if last is None else (last,)
        return [getattr(output, "grad_fn", None) for output in outputs]

    def _last_output(self) -> Any:
        """The last top-level backward's one-element output: None when there was none, or when
        only a weak reference was kept and the script has let it go."""
        last = self._last_loss
        return last() if isinstance(last, weakref.ReferenceType) else last

    @property
    def backward_calls(self) -> int:
        """Top-level backward calls so far."""
        self.drain()
        return self.counter.backward_calls

    @property
    def _original_run_backward(self) -> Any:
        return self._hooks.original if self._hooks is not None else None

    @property
    def _entry(self) -> Any:
        """cagtool's _engine_run_backward, while installed."""
        return self._hooks.entry if self._hooks is not None else None

    def _own_call(self) -> BackwardCall | None:
        """This thread's top-level backward in progress, if any."""
        call = self._solo.get(0)
        if call is not None and call.thread == threading.get_ident():
            return call
        return getattr(self._local, "call", None)

    def restart(self) -> None:
        """A forked child starts its own record: its steps count from the first again."""
        with self._lock:
            counter = self.counter
            # The parent's notes: its own record counts them. Which optimizers exist is the child's
            # too: an optimizer collected before the fork, its note not yet drained, is not one a
            # step of the child waits for (its steps would never end).
            for note in self._raw:
                if isinstance(note, tuple) and note and note[0] == MADE:
                    counter.made(note)
                elif isinstance(note, tuple) and note and note[0] == GONE:
                    counter.gone(note)
            del self._raw[:]
            self._draining = False
            call = self._solo.get(0)
            if call is not None and call.thread != threading.get_ident():  # a thread the fork did not copy
                self._solo.clear()
            self.device = DeviceReadings(self.writer)
            counter.restart(self.device)
            self._main_thread_id = threading.main_thread().ident
            if self.digests is not None:
                self.digests.restart()

    # -- compile bookkeeping, called by the observers ------------------------------------------
    def note_capture_finished(self, seconds: float) -> None:
        call = self._own_call()
        if call is not None:
            call.captures += 1
        self.drain()  # the step in progress is the one this backward counts in
        if self.digests is not None:
            self.digests.arm()
        with self._lock:
            self._count_held()
            opened = self.counter.open
            opened.captures += 1
            opened.compile_s += seconds

    def step_of_compile(self, compile_id: str) -> int:
        """The step a record of compile `compile_id` belongs to:
        the step in progress, but for a compile of torch.optim's frame while the optimizer steps
        inside compiled code (boundaries.py, compiled_optimizer) before any backward of the step in
        progress began: that is the optimizer step of the step its backward ended, one before (its
        compile time still falls in the span of the step in progress, counted there)."""
        step = self.current_step
        if self._optim_frames and frame_compile(compile_id) in self._optim_frames:
            counter = self.counter
            if counter.compiled_optimizer and counter.closed_steps and not counter.open.next_index:
                return step - 1
        return step

    def note_dynamo_compile(self, seconds: float, filename: str = "", compile_id: str = "") -> None:
        """A Dynamo compile ended (`filename`: its frame's file): counted in the step in progress;
        a compile of an optimizer's step (one of torch.optim's frames, or a frame that traced an
        optimizer's step(): hooks.py) is noted in order with the hooks' notes (optimizer_compiled)."""
        traced, self._step_traced = self._step_traced, False
        optim = in_torch_optim(filename)
        if optim or traced:
            self.optimizer_compiled()
        if optim:
            frame = frame_compile(compile_id)
            if frame is not None:
                self._optim_frames.add(frame)
        self.drain()
        if self.digests is not None:
            self.digests.arm()
        with self._lock:
            self._count_held()
            opened = self.counter.open
            opened.compiles += 1
            opened.compile_s += seconds
            if opened.backward_calls and not self._solo and getattr(self._local, "call", None) is None:
                opened.late_compiles += 1  # after the step's backward: its optimizer's (boundaries.py)

    def note_error(self, exc: BaseException) -> None:
        """A bug in the bookkeeping: counted (the manifest keeps it), never raised into the script."""
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"

    # -- installation -------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        from torch._dynamo import compiled_autograd

        self.findings.dynamo_config, self.findings.compiled_autograd = torch._dynamo.config, compiled_autograd
        # The per-step lines wait in memory up to hold_s (writer.py), and, where one optimizer steps
        # first among several, until it is known whether the others step with it: up to
        # IDLE_OPTIMIZER_STEPS of its steps (boundaries.py). The record says so, from its first
        # manifest on, for a process killed hard.
        held = {"kinds": HELD_EVENTS, "up_to_s": self.writer.hold_s, "up_to_optimizer_steps": IDLE_OPTIMIZER_STEPS}
        if self.writer.manifest.options.get("held_events") != held:
            self.writer.manifest.options["held_events"] = held
            self.writer.write_manifest()
        # The writer drains the notes before it numbers an event, and its flusher those left too long.
        self.writer.set_source(self.drain)
        self._hooks = install_hooks(self)

    def uninstall(self) -> None:
        import torch
        import torch.autograd
        from torch.autograd import graph as autograd_graph

        self.settle()
        self.drain()
        if self._watch_backwards:
            with self._lock:  # the last step's compiled optimizer step, after its last backward
                self.counter.parameters_changed(self._watch_backwards[0](), live=False)
        if self.counter.read_from_parameters is not None:
            try:
                self.findings.compiled_step_from_parameters(*self.counter.read_from_parameters)
            except Exception as exc:  # noqa: BLE001 - the end of the watch goes on
                self.note_error(exc)
        if self._heap_requested:
            self.writer.manifest.options["heap_in_use"] = self.heap.summary() if self.heap is not None else heap_in_use.unavailable()
        hooks = self._hooks
        if hooks is not None and torch.autograd.__dict__.get("_engine_run_backward") is not hooks.entry:
            self._entry_changed(reinstall=False)
        self.writer.set_source(None)
        if hooks is not None:
            torch.autograd._engine_run_backward = hooks.original
            autograd_graph._engine_run_backward = hooks.original_graph
            torch.optim.Optimizer.__init__ = hooks.original_optimizer_init
            if hooks.scaler_class is not None:
                hooks.scaler_class.step = hooks.original_scaler_step
            if hooks.context_class is not None:
                hooks.context_class.__init__ = hooks.original_context_init
            if hooks.returns_watched is not None:
                hooks.returns_watched[0] = False  # the contexts made meanwhile keep the exit hook
            if hooks.graph_class is not None:
                hooks.graph_class.call_cleanup_hooks = hooks.original_cleanup
            if hooks.disable_class is not None:
                hooks.disable_class.__call__ = hooks.original_disable_call
            if hooks.original_train is not None:
                torch.nn.Module.train = hooks.original_train
            if hooks.loader_class is not None:
                hooks.loader_class._get_iterator = hooks.original_get_iterator
            for handle in hooks.handles:
                handle.remove()
        self._hooks = None
        self.device.finish()

    # -- the rarer paths of the hooks ---------------------------------------------------------
    def _note_optimizer(self, optimizer: Any) -> None:
        """An optimizer exists (made, or first seen stepping): noted in order with the rest, and
        again, by a weak reference's callback, when it is collected."""
        key = id(optimizer)
        known = self.known
        ref = known.get(key)
        if ref is not None and ref() is optimizer:
            return
        raw = self._raw

        def collected(ref: weakref.ref[Any]) -> None:
            # At the moment the optimizer goes (any thread, inside a collection): two C calls.
            if known.get(key) is ref:
                del known[key]
            raw.append((GONE, key, ref))

        ref = weakref.ref(optimizer, collected)
        self._optimizers.add(optimizer)
        note_initial_versions(self._initial_versions, optimizer)
        # Noted before it is known: a backward's end that sees it alive (hooks.py) is after its note.
        raw.append((MADE, key, ref))
        known[key] = ref
        if len(known) > 1:
            self.backward_reads_cpu = True

    def watch_parameters(self) -> tuple[Any, ...] | None:
        """What an optimizer step changes, one reading per live optimizer, from the first compile of
        an optimizer's code on (None with no optimizer known), after the ids of the optimizers read:
        (ids, reading, ...), so two readings of different optimizers never compare as a step.
        An optimizer step inside a compiled graph runs no hook, but it updates its state and the
        parameters in place, which bumps their version counters (a C field, read without a sync; a
        backward only accumulates gradients): a change between the entry and the return of a call
        of the compiled function that steps it (or, for a function compiled before the hooks,
        between two backwards) is that optimizer's step (docs/torch-internals.md, "An optimizer
        step inside a compiled graph runs no hook"). Read per optimizer from its last parameter's
        state (_step_reading), else from that parameter.
        The last parameter, not the first: a model's first is often an embedding, which
        `nn.Embedding(max_norm=...)` renormalises in place in its forward.
        The optimizers read are those alive at the latest compile of an optimizer's code: one made
        after an earlier one's compile (a later phase of the job, its own compiled step) is read
        from its own compile on.
        Each reader's readings share one tuple of ids, the same object: readings whose ids are not
        that object came from another reader (boundaries.py compares them by identity), so the
        readings of a collected optimizer and of a new one that took its address are never
        compared as one optimizer's step."""
        keys, refs = [], []
        # Those made before the tracker (the Python API's block) too: their hooks never ran.
        for key, ref in [*self.known.items(), *self.counter.candidates.items()]:
            optimizer = ref()
            params = [p for group in getattr(optimizer, "param_groups", ()) for p in group.get("params", ())][-1:]
            if params and key not in keys:
                keys.append(key)
                refs.append((ref, weakref.ref(params[0])))
        if not refs:
            return self._watching[0]() if self._watching else None
        watched = tuple(ref for ref, _ in refs)
        if len(watched) != len(self._watch_refs) or any(a is not b for a, b in zip(watched, self._watch_refs)):
            import torch

            tensor = torch.Tensor
            ids = tuple(keys)

            def versions() -> tuple[Any, ...]:
                return (ids, *[_step_reading(optimizer, param, tensor) for optimizer, param in refs])

            # The hooks read the reader from these lists at each call: the new one from now on.
            self._watch_refs = watched
            self._watching[:] = [versions]
            if self._watch_backwards:
                self._watch_backwards[:] = [versions]
        return self._watching[0]()

    def optimizer_compiled(self) -> None:
        """Dynamo compiled an optimizer's step (notes.py, COMPILED), in the call of a compiled function
        in progress: that function's calls are watched from now on (hooks.py, CompiledFunction),
        this one from the readings taken now, before the compiled code first runs. A compile made in
        no call the hooks see (a function compiled before they were installed): the readings are
        taken at each backward's start instead (boundaries.py, parameters_changed)."""
        reading = self.watch_parameters()
        self._raw.append((COMPILED, reading))
        if reading is None:
            return
        hooks = self._hooks
        function = None if hooks is None or hooks.function_compiling is None else hooks.function_compiling()
        if function is not None:
            entry = function.entry
            if not function.steps or (entry is not None and entry[0] is not reading[0]):
                # watched from now on, or read anew: its entry's readings are of other optimizers
                function.steps, function.entry = True, reading
        elif not self._watch_backwards:
            self._watch_backwards.append(self._watching[0])

    def frame_offered_again(self, code: Any) -> None:
        """Dynamo is offered a frame whose cache failed its guards (observe/dynamo_taps.py, its
        recompile reasons), before it decides to compile it again or, past the recompile limit, to
        run it eagerly. Where that is an optimizer's step() (torch's step wrapper) in a call of a
        compiled function not watched yet, the call steps an optimizer either way, and an eager
        step there runs no hook of cagtool's (they are out of torch's dicts during compiled calls):
        that function is watched from now on, this call from the readings taken now."""
        hooks = self._hooks
        if hooks is None or hooks.function_compiling is None or code not in hooks.step_codes:
            return
        function = hooks.function_compiling()
        if function is not None and not function.steps:
            self.optimizer_compiled()

    def _entry_changed(self, reinstall: bool = True) -> None:
        """The backward entry point is not cagtool's any more (findings.py), seen at an optimizer
        step and at the end."""
        from torch._C._dynamo.eval_frame import set_eval_frame

        prior = set_eval_frame(None)
        try:
            self.findings.entry_changed(self._hooks, reinstall)
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
            hooks = self._hooks
            self.findings.check_flag(hooks is not None and hooks.in_compiled_call is not None and hooks.in_compiled_call())
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
                counter = self.counter
                n = len(raw)
                taken = raw[:n]
                del raw[:n]  # a note racing this one stays for the next drain
                if counter.undecided is not None:
                    taken = counter.decide(taken)
                while taken:
                    if counter.held is not None:
                        taken = counter.resolve(taken)
                    limit, taken = self._count(taken, live, limit)
                lines = counter.lines
                if lines.held_backward is not None:
                    lines.release()
                writer = self.writer
                now = time.perf_counter()
                self._hook_due = now + writer.hold_s / 2
                if live is not None and lines.queued:
                    if write or now >= writer.queued_due or len(lines.queued) >= MAX_HELD_LINES:
                        writer.write_queued()  # in the hook: the lines of the last hold_s / 2 or more, in one write
            finally:
                self._draining = False
        return limit

    def _count(self, taken: list[Any], live: Any, limit: bool) -> tuple[bool, list[Any]]:
        """Count `taken` in order (drain). Returns whether --steps was reached, and the notes not
        counted: those after an optimizer's step() from which the notes wait (boundaries.py,
        StepCounter.held)."""
        counter = self.counter
        for i, note in enumerate(taken):
            try:
                if note.__class__ is BackwardCall:
                    limit = counter.begun(note) or limit
                    continue
                kind = note[0]
                if kind == ENDED:
                    limit = counter.backward_ended(note, note is live) or limit
                    if not counter.backward_calls % FLAG_CHECK_EVERY and not self.findings.flag_done:
                        self._flag_check_due = True
                elif kind == STEPPED:
                    limit = counter.optimizer_stepped(note, note is live) or limit
                    if counter.held is not None:
                        return limit, taken[i + 1:]
                elif kind == SKIPPED:
                    limit = counter.optimizer_skipped(note, note is live) or limit
                elif kind == RETURNED:
                    _, before, version, clock, cpu = note
                    limit = counter.parameters_changed(version, note is live, before, clock, cpu) or limit
                elif kind == COMPILED:
                    self.backward_reads_cpu = True  # a backward's end may end a step now
                    counter.compiled_noted(note)
                elif kind == EVALUATED:
                    counter.open.evaluation = True
                elif kind == WORKERS_STARTED:
                    counter.open.workers_started = True
                elif kind == MADE:
                    counter.made(note)
                else:
                    counter.gone(note)
            except Exception as exc:  # noqa: BLE001 - one bad note never loses the others
                self.note_error(exc)
        return limit, []

    def expect_optimizers(self, optimizers: list[Any]) -> None:
        """Optimizers made before the tracker was installed (boundaries.py, `StepCounter.expect`)."""
        with self._lock:
            self.counter.expect(optimizers)
            if optimizers:
                self.backward_reads_cpu = True  # the drain decides whether a backward ends a step

    def settle(self) -> None:
        """The end of the watch: notes still undecided are counted (no optimizer stepped), and
        notes waiting on one optimizer's first step among several (boundaries.py): its steps are
        steps of their own where it stepped more than once and no other did."""
        self.drain()
        with self._lock:
            counter = self.counter
            if counter.held is not None:
                self._raw[:0] = counter.release(alone=counter.held_steps > 1)
            if counter.undecided is not None:
                self._raw[:0] = counter.undecided_notes()
        self.drain()

    # -- numerics -----------------------------------------------------------------------------
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
            held = self.counter.held
            if held is not None:
                if self.counter.held_key == id(optimizer):
                    # The optimizer that stepped first steps again while the notes wait: its step's
                    # number is known only when the wait ends (boundaries.py). Not digested: the
                    # same in every mode of the script, so their digests still pair.
                    return
                self._count_held()  # another optimizer steps: one step with the held one's
            step = FIRST_STEP + self.counter.closed_steps
            opened = self.counter.open
            recompiled = bool(opened.captures or opened.compiles)
        digests.before_step(step, recompiled, optimizer)

    def _digest_after_backward(self, outputs: Any) -> None:
        """The backward entry point's end, while no optimizer is alive, when the digests' countdown
        ran out: a top-level backward that returned ends the step in progress where no optimizer
        is waited for (boundaries.py), and that step is digested when due, from the leaves of the
        graph it ran (the parameters it accumulated gradients into). Called before its own note
        is counted: the step in progress is the one it ends."""
        digests = self.digests
        if digests is None:
            return
        with self._lock:
            self.drain()
            counter = self.counter
            if counter.required or counter.candidates or counter.undecided is not None or counter.compiled_optimizer:
                return  # an optimizer ends the step (its pre-hook digests it), or may: looked at again next time
            step = FIRST_STEP + counter.closed_steps
        # Read inside after_backward's step outside the script's modes (a mode sees attribute reads too).
        digests.after_backward(step, lambda: self._in_registration_order(leaf_params([getattr(o, "grad_fn", None) for o in outputs])))

    def _in_registration_order(self, params: list[Any]) -> list[Any]:
        """`params` (a graph's leaves, in the order a walk found them) in the order the script
        registered them on its modules, those no module registered last."""
        order = self.digests.names.registration_order() if self.digests is not None else {}
        return sorted(params, key=lambda p: order.get(id(p), len(order)))

    def grad_digest_events(self) -> list[dict[str, Any]]:
        """The digests, for GradDigestEvent, with the run's last step digested from the gradients
        still held when it was not already (the grads of the open step when the run ended in
        it after a backward, else of the last step that ended), and checked against them when it
        was (grad_digest.py `check_at_end`). None-only digests are left out."""
        digests = self.digests
        if digests is None:
            return []
        self.settle()  # the end: the notes still waiting are counted
        with self._lock:
            closed = self.counter.closed_steps
            if self.counter.open.backward_calls:
                last = FIRST_STEP + closed
            elif closed:
                last = FIRST_STEP + closed - 1
            else:
                last = None
        if last is not None and last not in digests.steps:
            stepped = params_of(self._optimizers)
            # The live optimizers' parameters first: the same in every mode. Those of the steps
            # digested before differ by mode (a recompile step is digested in ca alone).
            params = stepped or digests.params_seen() or self._in_registration_order(leaf_params(self.current_roots))
            if any(getattr(p, "grad", None) is not None for p in params):
                digests.digest(last, [REASON_LAST], params, optimizer=params is stepped)
        elif last is not None:
            digests.add_reason(last, REASON_LAST)
            digests.check_at_end(last)
        return digests.events()

    def note_traced_backward(self) -> None:
        """No backward reached the entry point because Dynamo traced them (findings.py)."""
        self.findings.traced_backward(self.backward_calls)

    def emit_final_state(self) -> None:
        """Parameter and gradient norms at the end, for comparing modes' numerics."""
        emit_final_state(self.writer, self._optimizers, lambda: self.current_roots, self.digests, self._initial_versions)  # outside any backward: the last loss's graph
