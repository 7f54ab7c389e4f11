"""Steps: one training iteration each, ended by the optimizer's step() (or by each backward call
when the script has no optimizer); every top-level backward call is recorded within its step.

Replaces `torch.autograd._engine_run_backward`, the entry of Tensor.backward, autograd.backward
and autograd.grad (TORCH_2_13_NOTES.md, "Counting and timing"), and uses torch's global optimizer
step hooks. What a step is, with one, several or no optimizers: record/schema.py's docstring.
Thread-safe: backward may run in several threads (each has its own nesting depth).

Per step, on the training thread, this is the whole of cagtool's work: so it makes as few Python
calls as it can (a call costs microseconds there, with the step's tensor work having evicted the
caches; benchmarks/README.md, step overhead). Its `backward`, `optimizer_step` and `step` lines
are appended to the writer's `queued` list (writer.py: numbered there, in order, before any other
event) rather than passed through a writer method each; the Dynamo frame callback is swapped off
and back only when one is set.
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

from cagtool.capture import device_readings
from cagtool.capture.observe import dynamo_skip, source
from cagtool.capture.device_readings import DeviceReadings
from cagtool.capture.writer import MAX_HELD_LINES, RecordWriter
from cagtool.record.schema import (
    FIRST_STEP,
    STEP_BOUNDARY_BACKWARD,
    STEP_BOUNDARY_OPTIMIZER,
    BackwardEvent,
    FinalStateEvent,
    FindingEvent,
    OptimizerStepEvent,
    StepEvent,
)

FLAG_WITHOUT_COMPILED_BACKWARD = "ca_flag_without_compiled_backward"
TRACED_BACKWARD = "backward_traced_by_dynamo"
# An optimizer that does not step while another steps this many times in one open step stops
# being waited for (e.g. a second optimizer used only in a later phase of training).
IDLE_OPTIMIZER_STEPS = 10
FLAG_CHECK_EVERY = 64  # backward calls between two looks at the script's CA flag (_check_flag_finding)
# The events whose lines wait in memory up to the writer's hold_s (writer.emit_held), named in the
# manifest with that bound: a process killed hard may lack these for its last hold_s seconds.
HELD_EVENTS = ["backward", "optimizer_step", "step"]


class StepTracker:
    def __init__(self, writer: RecordWriter, mode: str, on_step: Callable[[int], None] | None = None, max_steps: int | None = None) -> None:
        self.writer = writer
        self.mode = mode
        self.on_step = on_step
        self.max_steps = max_steps
        self.device = DeviceReadings(writer)
        self.closed_steps = 0
        self.backward_calls = 0  # every top-level backward of the run
        self.current_roots: list[Any] = []
        self.compile_in_progress = False
        self.step_limit_reached = False
        self.errors = 0
        self.last_error = ""
        self._lock = threading.RLock()
        self._local = threading.local()  # per thread: backward nesting depth, captures of its backward
        self._open = _OpenStep()
        self._last_boundary_t: float | None = None
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()  # every optimizer seen (final state)
        self._required: dict[int, weakref.ref[Any]] = {}  # optimizers a step waits for
        self._last_roots_ref: list[Any] = []
        self._flag_finding_done = False
        self._handles: list[Any] = []
        self._main_thread_id = threading.main_thread().ident
        self._dynamo_config: Any = None
        self._compiled_autograd: Any = None
        self._original_run_backward: Any = None
        self._original_optimizer_init: Any = None
        self._queued = writer.queued  # the writer's list of lines to number (writer.py), one append a line
        self._backward_line, self._optimizer_step_line, self._step_line = _line_makers(writer)

    def restart(self) -> None:
        """A forked child starts its own record: its steps count from the first again."""
        with self._lock:
            self.closed_steps = 0
            self.backward_calls = 0
            self._open = _OpenStep()
            self._last_boundary_t = None
            self.device = DeviceReadings(self.writer)
            self._main_thread_id = threading.main_thread().ident

    @property
    def current_step(self) -> int:
        """The step in progress: events are stamped with it."""
        return FIRST_STEP + self.closed_steps

    # -- compile bookkeeping, called by the observers ------------------------------------------
    def note_capture_started(self) -> None:
        self.compile_in_progress = True

    def note_capture_finished(self, seconds: float) -> None:
        self.compile_in_progress = False
        self._local.captures = getattr(self._local, "captures", 0) + 1
        with self._lock:
            self._open.captures += 1
            self._open.compile_s += seconds

    def note_dynamo_compile(self, seconds: float) -> None:
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

        self._dynamo_config, self._compiled_autograd = torch._dynamo.config, compiled_autograd  # _check_flag_finding, per backward
        # The per-step lines wait in memory up to hold_s (writer.py): the record says so, from its
        # first manifest on, for a process killed hard.
        held = {"kinds": HELD_EVENTS, "up_to_s": self.writer.hold_s}
        if self.writer.manifest.options.get("held_events") != held:
            self.writer.manifest.options["held_events"] = held
            self.writer.write_manifest()
        # The bookkeeping runs with Dynamo's frame callback off (its stdlib calls, and a tensor
        # subclass's Python, are not the script's frames); the backward itself does not
        # (dynamo_skip.py). The callback is swapped here, in the wrapper, as
        # dynamo_skip.without_dynamo does, and put back only where one was set: set_eval_frame(None)
        # returns the one in place, usually None (backward called outside any compiled region).
        from torch._C._dynamo.eval_frame import set_eval_frame

        ending = tracker._backward_ended
        engine_log = autograd_graph.log
        local, current_graph_task_id = tracker._local, torch._C._current_graph_task_id
        lock, perf_counter = tracker._lock, time.perf_counter
        # torch.compiler.is_compiling() is this flag outside TorchScript (two Python calls less).
        compiler = torch.compiler
        compiling_flag = hasattr(compiler, "_is_compiling_flag")

        def _engine_run_backward(t_outputs, *args, **kwargs):
            # torch 2.13's torch/autograd/graph.py:_engine_run_backward with the step bookkeeping
            # around the engine call, in place of it rather than calling it: no extra Python
            # frame between the script's backward call and the engine, so a warning raised in a
            # backward hook (stacklevel counted from the hook) names the script's line as under
            # plain python, and is shown, or not, as often. Dynamo skips this frame (cagtool's
            # directory is in its skip list) and is offered the frames it calls, as it is
            # torch's function's.
            # Nested: a backward in this thread's backward, or one run by the autograd engine
            # while it executes a graph (reentrant checkpointing, on a device thread too).
            nested = getattr(local, "depth", 0) or (compiler._is_compiling_flag if compiling_flag else compiler.is_compiling()) or current_graph_task_id() != -1
            started = False
            if not nested:
                # A top-level backward begins: its step and index, taken now (inline: a Python call less).
                prior = set_eval_frame(None)
                try:
                    outputs = t_outputs if isinstance(t_outputs, (tuple, list)) else (t_outputs,)
                    if len(outputs) == 1:
                        roots = [getattr(outputs[0], "grad_fn", None)]
                    else:
                        roots = []
                        for output in outputs:
                            roots.append(getattr(output, "grad_fn", None))
                    with lock:
                        step = FIRST_STEP + tracker.closed_steps
                        opened = tracker._open
                        index = opened.next_index
                        opened.next_index = index + 1
                        tracker.current_roots = roots
                    if not tracker.backward_calls % FLAG_CHECK_EVERY and not tracker._flag_finding_done:
                        tracker._check_flag_finding(step)
                    local.depth, local.captures = 1, 0
                    started = True
                    start = perf_counter()
                except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
                    tracker.note_error(exc)
                finally:
                    if prior is not None:
                        set_eval_frame(prior)
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
                    prior = set_eval_frame(None)
                    try:
                        limit = ending(outputs, roots, step, index, kwargs, start)
                    finally:
                        if prior is not None:
                            set_eval_frame(prior)
            if limit:
                tracker.step_limit_reached = True
                raise StepLimitReached(tracker.closed_steps)
            return result

        dynamo_skip.hide_cagtool_frames()
        torch.autograd._engine_run_backward = _engine_run_backward

        # Knowing an optimizer exists before its first step() tells a GAN's two optimizers apart
        # from one (schema docstring); subclasses reach it through super().__init__.
        original_init = torch.optim.Optimizer.__init__
        self._original_optimizer_init = original_init

        @functools.wraps(original_init)
        def optimizer_init(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            try:
                tracker._note_optimizer(optimizer)
            except Exception:  # noqa: BLE001 - never fail the script's optimizer over bookkeeping
                pass

        torch.optim.Optimizer.__init__ = optimizer_init
        opt_start: dict[tuple[int, int], float] = {}

        get_ident = threading.get_ident

        # Dynamo's frame callback is off where these call Python code of the stdlib (as around the
        # backward bookkeeping above); the pre-hook's usual path calls only C.
        def pre_hook(optimizer, args, kwargs):
            opt_start[(get_ident(), id(optimizer))] = perf_counter()
            ref = tracker._required.get(id(optimizer))
            if ref is None or ref() is not optimizer:  # not known yet (_note_optimizer's own test)
                prior = set_eval_frame(None)
                try:
                    tracker._note_optimizer(optimizer)
                finally:
                    set_eval_frame(prior)

        stepped = tracker._optimizer_stepped

        def post_hook(optimizer, args, kwargs):
            start = opt_start.pop((get_ident(), id(optimizer)), None)
            if start is None:
                return
            prior = set_eval_frame(None)
            try:
                limit = stepped(optimizer, start)
            except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's step()
                tracker.note_error(exc)
                limit = False
            finally:
                if prior is not None:
                    set_eval_frame(prior)
            if limit:
                tracker.step_limit_reached = True
                raise StepLimitReached(tracker.closed_steps)

        self._handles = [register_optimizer_step_pre_hook(pre_hook), register_optimizer_step_post_hook(post_hook)]

    def uninstall(self) -> None:
        import torch.autograd

        if self._original_run_backward is not None:
            torch.autograd._engine_run_backward = self._original_run_backward
        if self._original_optimizer_init is not None:
            torch.optim.Optimizer.__init__ = self._original_optimizer_init
        for handle in self._handles:
            handle.remove()
        self.device.finish()

    # -- step boundaries ----------------------------------------------------------------------
    def _note_optimizer(self, optimizer: Any) -> None:
        ref = self._required.get(id(optimizer))
        if ref is not None and ref() is optimizer:
            return  # known and waited for: twice a step, so no lock and no new weak reference
        with self._lock:
            self._optimizers.add(optimizer)
            key = id(optimizer)
            if key not in self._required or self._required[key]() is not optimizer:
                self._required[key] = weakref.ref(optimizer)

    def _waiting_for(self) -> dict[int, weakref.ref[Any]]:
        """The optimizers a step waits for (id -> weak reference), forgetting those garbage-collected.
        Called twice a step: the common case (all alive) copies nothing."""
        required = self._required
        for ref in required.values():
            if ref() is None:
                break
        else:
            return required
        self._required = {key: ref for key, ref in required.items() if ref() is not None}
        return self._required

    def _optimizer_stepped(self, optimizer: Any, start: float) -> bool:
        """An optimizer's step(), begun at perf_counter time `start`, returned. True when that
        ended the step and --steps is reached."""
        now = time.perf_counter()
        seconds = now - start
        with self._lock:
            key = id(optimizer)
            ref = self._required.get(key)
            if ref is None or ref() is not optimizer:
                self._note_optimizer(optimizer)
            queued = self._queued  # the line emit_held would hold, appended (writer.py: `queued`)
            if not queued:
                self._first_queued(now)
            queued.append((self._optimizer_step_line, now - self.writer.t0, (FIRST_STEP + self.closed_steps, seconds, type(optimizer).__name__)))
            opened = self._open
            opened.optimizer_s += seconds
            stepped = opened.stepped
            stepped[key] = stepped.get(key, 0) + 1
            waiting = self._required
            for ref in waiting.values():  # all alive, the usual case: _waiting_for copies nothing
                if ref() is None:
                    waiting = self._waiting_for()
                    break
            if waiting.keys() <= stepped.keys():  # every optimizer waited for has stepped
                return self._close(STEP_BOUNDARY_OPTIMIZER)
            if stepped[key] >= IDLE_OPTIMIZER_STEPS:
                for other in [k for k in waiting if k not in stepped]:
                    del self._required[other]
                return self._close(STEP_BOUNDARY_OPTIMIZER)
            return False

    def _close(self, boundary: str) -> bool:
        """End the step in progress (caller holds the lock). True when --steps is reached."""
        opened = self._open
        step = FIRST_STEP + self.closed_steps
        writer, queued = self.writer, self._queued
        clock = time.perf_counter()
        now = clock - writer.t0  # writer.now(), a call less
        if not queued:
            self._first_queued(clock)
        # The step's figures are read from `opened` when the line is written: nothing changes it
        # once it is closed (every update goes to the step in progress, under the lock).
        queued.append((self._step_line, now, (opened, step, None if self._last_boundary_t is None else now - self._last_boundary_t, boundary)))
        if clock >= writer.queued_due or len(queued) >= MAX_HELD_LINES:
            writer.write_queued()  # the lines of the last hold_s / 2 or more, in one write
        if opened.loss_tensor is not None:
            self.device.defer_loss(step, opened.loss_tensor)
        cuda = device_readings._torch_cuda  # device.boundary's own first test, inline: no call where CUDA is not in use
        if cuda is None or getattr(cuda, "_initialized", True):
            self.device.boundary(step)
        self._last_boundary_t = now
        self.closed_steps += 1
        self._open = _OpenStep()
        if self.on_step is not None:
            self.on_step(step)
        return self.max_steps is not None and self.closed_steps >= self.max_steps and not self.step_limit_reached

    def _first_queued(self, clock: float) -> None:
        """A line is about to be appended to the writer's empty `queued` list (writer.py), at
        perf_counter time `clock`: it is due hold_s / 2 from now, and the writer's flusher thread
        bounds how long it can wait (started here, with the first line, and again in a forked child)."""
        self.writer.queued_due = clock + self.writer.hold_s / 2
        self.writer.start_flusher()

    # -- the wrapper's body -------------------------------------------------------------------
    def _backward_ended(self, outputs: Any, roots: list[Any], step: int, index: int, kwargs: dict, start: float) -> bool:
        """The backward the wrapper began (its step, its index within it, its perf_counter start)
        returned or raised. True when --steps is reached."""
        now = time.perf_counter()
        elapsed = now - start
        local = self._local
        local.depth = 0
        try:
            captures = local.captures
            loss = outputs[0] if outputs else None
            device_tensor = None
            try:  # the loss: a CPU scalar is read now, with one call into torch (_loss for the rest)
                if loss.is_cpu:
                    value = loss.item()  # exact; RuntimeError when not one element: None below
                    kind = value.__class__
                    if kind is not float:
                        value = float(value) if kind is int or kind is bool else None  # complex: None
                else:
                    value, device_tensor = _loss(loss)
            except Exception:  # noqa: BLE001 - not a tensor, a subclass without these, or not one element
                value = None
            thread = "" if threading.get_ident() == self._main_thread_id else threading.current_thread().name
            with self._lock:
                self.backward_calls += 1
                self._last_roots_ref = roots
                self.current_roots = []
                opened = self._open
                current = FIRST_STEP + self.closed_steps
                by_backward = True  # no optimizer alive: this call is a step of its own (_waiting_for's test, inline)
                for ref in self._required.values():
                    if ref() is not None:
                        by_backward = False
                        break
                if by_backward and step != current:
                    # Another thread's backward closed the step this one began in: it closes the next.
                    step, index = current, opened.backward_calls
                queued = self._queued  # the line emit_held would hold, appended (writer.py: `queued`)
                if not queued:
                    self._first_queued(now)
                queued.append((self._backward_line, now - self.writer.t0,
                               (step, index, elapsed, captures, "backward" if kwargs.get("accumulate_grad", True) else "grad", value, thread)))
                if step == current:  # not a backward that outlived its step (optimizer stepped in another thread)
                    opened.backward_calls += 1
                    opened.backward_s += elapsed
                    opened.loss, opened.loss_tensor = value, device_tensor
                return self._close(STEP_BOUNDARY_BACKWARD) if by_backward else False
        except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
            self.note_error(exc)
            return False

    def _check_flag_finding(self, step: int) -> None:
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
                step=step,
                source=where,
            )

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
        params = _params_of(self._optimizers) or _leaf_params(self._last_roots_ref)
        if not params:
            self.writer.emit(FinalStateEvent, param_norm=None, grad_norm=None, num_params=0)
            return
        import torch

        with torch.no_grad():
            p2 = sum(float(p.detach().double().pow(2).sum()) for p in params)
            grads = [p.grad for p in params if p.grad is not None]
            g2 = sum(float(g.detach().double().pow(2).sum()) for g in grads) if grads else None
        self.writer.emit(
            FinalStateEvent,
            param_norm=math.sqrt(p2),
            grad_norm=math.sqrt(g2) if g2 is not None else None,
            num_params=len(params),
        )


def _line_makers(writer: RecordWriter) -> tuple[Callable[[int, float, Any], str], ...]:
    """The `line(seq, t, payload)` functions of the tracker's queued lines (writer.py: `queued`):
    the payload is a tuple made in the training step, named here, when the line is written."""
    encode_backward, encode_optimizer_step, encode_step = (writer.encoder_of(cls) for cls in (BackwardEvent, OptimizerStepEvent, StepEvent))

    def backward_line(seq: int, t: float, payload: tuple) -> str:
        step, index, backward_s, captures, call, loss, thread = payload
        return encode_backward(seq, t, step=step, index=index, backward_s=backward_s, ca_captures=captures, call=call, loss=loss, thread=thread)

    def optimizer_step_line(seq: int, t: float, payload: tuple) -> str:
        step, wall_s, optimizer = payload
        return encode_optimizer_step(seq, t, step=step, wall_s=wall_s, optimizer=optimizer)

    def step_line(seq: int, t: float, payload: tuple) -> str:
        opened, step, wall_s, boundary = payload
        return encode_step(
            seq,
            t,
            step=step,
            backward_s=opened.backward_s,
            loss=opened.loss,
            ca_captures=opened.captures,
            compiles=opened.compiles,
            compile_s=opened.compile_s,
            wall_s=wall_s,
            backward_calls=opened.backward_calls,
            boundary=boundary,
            optimizer_s=opened.optimizer_s,
        )

    return backward_line, optimizer_step_line, step_line


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
    Once per backward call: the CPU case asks torch as little as it can (each call into torch costs
    a few microseconds in a training step, writer.py's docstring says why); _backward_ended reads
    a CPU loss inline, as here, and calls this for the others."""
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
