"""The step tracker's hooks on torch: the backward entry point (a copy of torch's, engine_copy.py)
and the optimizers' __init__ and global step pre-/post-hooks. They only note what happened
(notes.py) and return; tracker.py's drain counts the notes.

What one boundary costs the training thread, the hot path of the product (benchmarks/README.md,
step overhead; `benchmarks/step_tracker_cpu.py --per-step` measures it): a top-level backward
reads perf_counter twice, a plain CPU loss's value (`item()`: the note then holds no tensor, and so
no autograd graph, until the drain), appends its BackwardCall and one ENDED note (and, only where an optimizer's
step was compiled in a function made before the hooks, reads one version counter an optimizer:
tracker.watch_parameters; while no optimizer is alive, counts the gradient digests down: one
decrement and one comparison, grad_digest.py); an optimizer step reads
perf_counter twice and appends one STEPPED note. The two CPU clocks (process and thread: a system
call each, ~0.5-2 us) are read where a step can end: at every optimizer step, and at a backward's
end only while no optimizer is alive (a backward then ends its step). Everything is bound to
closure variables (a cell read, not an attribute lookup), and the usual path calls no Python
function of cagtool's. Where a hook must act itself it drains at once, under the lock (`in_hook`):
`--steps`, an `on_step` callback, CUDA in use (the step boundary's event is recorded on the stream
then), and every hold_s / 2 to write the lines (one clock comparison a step otherwise). A compiled
call (torch.compile's wrapper) costs four Python calls more: its enter and exit hooks, where an
optimizer step inside the compiled graph is seen when its compiled code steps an optimizer (one
version read an optimizer at each, a note only when they changed), and the optimizer hooks taken
out of torch's dicts and put back (a lock, two dict stores).

Dynamo finds no optimizer hook of cagtool's: they are out of torch's global hook dicts during every
compiled call, where it traces and checks guards (`_hidden_while_compiled`), so a compiled function
that steps the optimizer compiles as with no hook at all. Where they are there all the same (a
compiled call whose context predates cagtool's install), and for GradScaler.step, torch is given
them through a function of torch's own file that returns at once while Dynamo traces
(dynamo_skip.as_torchs): one Python frame more a hook."""

from __future__ import annotations

import contextvars
import functools
import logging
import sys
import threading
import time
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from cagtool.capture.observe import dynamo_skip
from cagtool.capture.observe.dynamo_skip import TRAINING_SWITCH, as_torchs
from cagtool.capture.steps.collate import note_collate
from cagtool.capture.steps.notes import ENDED, EVALUATED, RETURNED, SKIPPED, STEPPED, WORKERS_STARTED, BackwardCall


class StepLimitReached(BaseException):
    """Raised out of the target's backward when --steps is reached; the run ends cleanly.
    A BaseException, like KeyboardInterrupt, so the script's `except Exception` lets it through."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped after {step} steps (--steps)")
        self.step = step


class _NoCuda:
    _initialized = False


@dataclass(slots=True)
class InstalledHooks:
    """What install_hooks replaced, to put back (uninstall) and to recognise (entry_changed)."""

    entry: Callable[..., Any]  # cagtool's _engine_run_backward
    original: Callable[..., Any]  # torch.autograd's before it
    original_graph: Callable[..., Any]  # torch.autograd.graph's before it
    original_optimizer_init: Callable[..., Any]
    handles: list[Any]  # the optimizer step hooks' handles
    scaler_class: Any = None  # torch.amp.GradScaler, whose step() is wrapped (None: not there)
    original_scaler_step: Any = None
    context_class: Any = None  # torch._dynamo.eval_frame.OptimizeContext, whose __init__ is wrapped (None: not there)
    original_context_init: Any = None
    # [True] while installed: the exit hook stays in the contexts made meanwhile, and does nothing after
    returns_watched: list[bool] | None = None
    graph_class: Any = None  # torch._dynamo.output_graph.OutputGraph, whose call_cleanup_hooks is wrapped (None: not there)
    original_cleanup: Any = None
    function_compiling: Callable[[], Any] | None = None  # the compiled function whose call compiles now (CompiledFunction)
    step_codes: frozenset[Any] = frozenset()  # the code objects whose trace is an optimizer's step() (call_cleanup_hooks)
    disable_class: Any = None  # torch._dynamo.eval_frame.DisableContext, whose __call__ is wrapped (None: not there)
    original_disable_call: Any = None
    original_train: Any = None  # torch.nn.Module.train before it was wrapped (None: not wrapped)
    loader_class: Any = None  # torch.utils.data.DataLoader, whose _get_iterator is wrapped (None: not there)
    original_get_iterator: Any = None
    in_compiled_call: Callable[[], bool] | None = None  # a compiled call is in progress in this thread (_hidden_while_compiled)


class CompiledFunction:
    """One function torch.compile made (one OptimizeContext): `steps` once a compile made in its
    call traced an optimizer's step() (tracker.optimizer_compiled); `entry`: the watched readings at
    the entry of its call in progress (None: none taken)."""

    __slots__ = ("steps", "entry", "hooked")

    def __init__(self) -> None:
        self.steps = False
        self.entry: Any = None
        self.hooked = 0  # the optimizer steps the hooks had seen at that entry


def install_hooks(tracker: Any) -> InstalledHooks:
    """Install the hooks of `tracker` (a StepTracker: its notes list, lock, drain and rarer paths)."""
    import torch
    import torch.autograd
    from torch.autograd import graph as autograd_graph
    from torch.autograd.variable import Variable
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    # Dynamo's frame callback is off where cagtool runs Python code in the script's backward or
    # step() (its stdlib calls, and a tensor subclass's Python, are not the script's frames); the
    # backward itself keeps it (dynamo_skip.py). The hooks' usual path calls only C functions, so
    # it swaps nothing; the rarer paths (a drain in the hook, the flag check, a thread's name) swap
    # the callback off as dynamo_skip.without_dynamo does, and put back only one that was set:
    # set_eval_frame(None) returns the one in place, usually None.
    from torch._C._dynamo.eval_frame import set_eval_frame

    original = torch.autograd._engine_run_backward
    engine_log = autograd_graph.log
    local, current_graph_task_id = tracker._local, torch._C._current_graph_task_id
    solo = tracker._solo
    claim = solo.setdefault
    known = tracker.known
    perf_counter, get_ident = time.perf_counter, threading.get_ident
    process_time, thread_time = time.process_time, time.thread_time
    append = tracker._raw.append
    weak_loss = weakref.ref
    # [] until an optimizer's code is compiled, then [the watched parameters' version reader]
    # (tracker.watch_parameters), read where a call of the compiled function that steps it begins and
    # returns; `watch_backwards`: the same reader, only where such a compile was made in no call of a
    # context made while the hooks were installed (a function compiled before the Python API's
    # block), read at each top-level backward's start: one truth test a backward otherwise.
    watching = tracker._watching
    ca_module = tracker._ca_module
    watch_backwards = tracker._watch_backwards
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
    tensor_class = torch.Tensor
    function_modes, dispatch_modes = torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack
    digests = tracker.digests  # gradient digests (grad_digest.py): counted down by the optimizer's pre-hook, else by a backward's end

    def in_hook(note: tuple, write: bool = False) -> bool:
        """Note `note` and count everything noted so far, now; `write`: and write the lines. True
        when --steps is reached."""
        prior = set_eval_frame(None)
        try:
            with tracker._lock:
                append(note)
                return tracker.drain(live=note, write=write)
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
        # This call's state, when it is a top-level one: `call`, in the solo slot (`mine`, the
        # usual case: tracker._solo) or in the thread-local.
        call = None
        mine = False
        me = get_ident()
        owner = solo.get(0)
        if owner is None:  # no backward in progress: one may be nested in the engine's work all the same
            top = not ((compiler._is_compiling_flag if compiling_flag else compiler.is_compiling()) or current_graph_task_id() != -1)
        elif owner.thread == me:  # within this thread's own top-level backward
            top = False
        else:  # another thread's backward is in progress: this one's state is thread-local
            top = not (getattr(local, "call", None) is not None or (compiler._is_compiling_flag if compiling_flag else compiler.is_compiling())
                       or current_graph_task_id() != -1)
        if top:
            try:
                outputs = t_outputs if isinstance(t_outputs, (tuple, list)) else (t_outputs,)
                begun = BackwardCall(me, outputs)
                if ca_module and not ca_module[0].compiled_autograd_enabled:
                    begun.outside_ca = True
                if watch_backwards:
                    begun.version = watch_backwards[0]()
                append(begun)
                if tracker._flag_check_due:
                    tracker._flag_due()
                mine = owner is None and claim(0, begun) is begun
                if not mine:
                    local.call = begun
                call = begun
                if heap is not None:
                    heap.backward_began()
                start = perf_counter()
            except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
                tracker.note_error(exc)
        limit = False
        returned = False
        try:
            attach_logging_hooks = engine_log.getEffectiveLevel() <= logging.DEBUG
            if attach_logging_hooks:
                unregister_hooks = autograd_graph._register_logging_hooks_on_whole_graph(t_outputs)
            torch._C._stash_obj_in_tls("context", contextvars.copy_context())
            try:
                rerun = None
                try:
                    result = Variable._execution_engine.run_backward(t_outputs, *args, **kwargs)
                except BaseException as exc:
                    # Any error: the observer notes what a capture raised, whatever its type, and
                    # raising it on unchanged. Compiled autograd's assert where it walks a failed
                    # capture's graph again with cagtool's verbose logger set: run again without it,
                    # as torch alone runs it (ca_observer.py, CaptureObserver.logger_aside). Outside
                    # this block: no context.
                    rerun = None if tracker.ca_rerun is None else tracker.ca_rerun(exc)
                    if rerun is None:
                        raise
                if rerun is not None:
                    with rerun:
                        result = Variable._execution_engine.run_backward(t_outputs, *args, **kwargs)
                returned = True
            finally:
                if attach_logging_hooks:
                    unregister_hooks()
                torch._C._remove_obj_from_tls("context")
        finally:
            if call is not None:
                clock = perf_counter()
                if heap is not None:
                    heap.backward_ended()
                if mine:
                    del solo[0]
                else:
                    local.call = None
                try:
                    # The loss: a plain CPU tensor's value is read here, outside any mode of the
                    # script's (no mode entered: two C calls), so that neither the note nor the
                    # call holds a tensor, and with it the step's autograd graph, until the drain:
                    # a graph kept alive that long keeps its memory from the next steps, whose
                    # allocations then cost malloc more (~20k instructions a step at 1 ms steps,
                    # benchmarks/README.md). Any other one-element tensor (a subclass, a device's,
                    # inside a mode) is read by the drain (losses.py).
                    call.outputs = None
                    loss = outputs[0] if outputs else None
                    try:
                        if loss.numel() != 1:
                            loss = None
                    except Exception:  # noqa: BLE001 - not a tensor, or a subclass without numel
                        loss = None
                    if loss is None or not known:
                        tracker._last_loss = loss
                    else:
                        # An optimizer is alive: its parameters are the final state's, and the last
                        # loss only a fallback (tracker.current_roots). A weak reference: holding the
                        # loss would hold its step's autograd graph through the next forward, and free
                        # it here a step later, cold (~8 us of this hook at ~4 ms steps,
                        # benchmarks/README.md), where the script frees it warm as under python.
                        try:
                            tracker._last_loss = weak_loss(loss)
                        except TypeError:  # a one-element object that takes no weak reference
                            tracker._last_loss = loss
                    if not known and returned and digests is not None:
                        # No optimizer alive: this backward ends its step, digested here when due
                        # (grad_digest.py, "When"); usually one decrement and one comparison.
                        digests.countdown -= 1
                        if digests.countdown <= 0 and kwargs.get("accumulate_grad", True):  # autograd.grad fills no .grad
                            off_dynamo(tracker._digest_after_backward, outputs)
                    if loss.__class__ is tensor_class and loss.is_cpu and not function_modes() and not dispatch_modes():
                        try:
                            loss = loss.item()
                            if loss.__class__ is not float:
                                loss = float(loss) if loss.__class__ is int or loss.__class__ is bool else None
                        except Exception:  # noqa: BLE001 - not readable here: no value, as the drain's read gives
                            loss = None
                    note = [ENDED, clock, start, call, loss, kwargs.get("accumulate_grad", True),
                            "" if me == tracker._main_thread_id else tracker._thread_name(), None]
                    if sync or cuda._initialized:
                        note[7] = (process_time(), thread_time(), me)
                        limit = in_hook(note)
                    elif clock >= tracker._hook_due:
                        note[7] = (process_time(), thread_time(), me)
                        in_hook(note, True)
                    else:
                        # This backward ends its step only while no optimizer is alive: the CPU
                        # clocks are read then (and always where several optimizers make it a
                        # question of the drain's count: tracker.backward_reads_cpu). Nothing is
                        # allocated, and no other thread runs, between this look and the append, so
                        # no collection can note the last optimizer gone in between.
                        if not known or tracker.backward_reads_cpu or call.inside is not None:
                            note[7] = (process_time(), thread_time(), me)
                        append(note)
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
    original_graph = autograd_graph._engine_run_backward
    entry = _engine_run_backward
    if tracker.scope is not None:
        entry = tracker.scope.wrap(_engine_run_backward, original)
    torch.autograd._engine_run_backward = entry
    autograd_graph._engine_run_backward = entry
    autograd_names = torch.autograd.__dict__
    only = None if tracker.scope is None else tracker.scope.owner  # the one thread whose steps count
    entry_changed = tracker._entry_changed

    # Knowing an optimizer exists before its first step() tells a GAN's two optimizers apart
    # from one (schema docstring); subclasses reach it through super().__init__.
    original_init = torch.optim.Optimizer.__init__

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
    after_closure: dict[int, bool] = {}  # id(optimizer) -> its step() was given a closure (digests only)

    def off_dynamo(call: Callable[[Any], Any], optimizer: Any) -> None:
        """A rare path of the optimizer hook (or of a backward's end): `call(optimizer)` with
        Dynamo's frame callback off, an error counted, never raised into the script's step()."""
        prior = set_eval_frame(None)
        try:
            call(optimizer)
        except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's step()
            tracker.note_error(exc)
        finally:
            if prior is not None:
                set_eval_frame(prior)

    def pre_hook(optimizer, args, kwargs):
        if only is not None and get_ident() != only:
            return
        key = id(optimizer)
        if digests is not None:
            if kwargs.get("closure") is not None or (len(args) > 1 and callable(args[1])):
                # step(closure): the step's forward and backward run inside step(), in the
                # closure (Lightning's automatic optimization, LBFGS), so the gradients are not
                # made yet: the post-hook digests them (grad_digest.py, "When").
                after_closure[key] = True
            else:
                # Usually one decrement: the rarer path drains to know the step (grad_digest.py).
                digests.countdown -= 1
                if digests.countdown <= 0:
                    off_dynamo(tracker._digest_before_step, optimizer)
        opt_start[key] = perf_counter()
        if key not in known:  # made before cagtool was installed: noted now (a Python call, rare)
            off_dynamo(tracker._note_optimizer, optimizer)

    stepped = [0]  # optimizer steps the post-hook saw: a grad scaler's step() that adds none skipped it

    def post_hook(optimizer, args, kwargs):
        if autograd_names.get("_engine_run_backward") is not entry:
            entry_changed()
        if only is not None and get_ident() != only:
            return
        key = id(optimizer)
        start = opt_start.pop(key, None)
        if start is None:
            return
        stepped[0] += 1
        if after_closure and after_closure.pop(key, False):
            digests.countdown -= 1
            if digests.countdown <= 0:
                off_dynamo(tracker._digest_before_step, optimizer)
        clock = perf_counter()
        if heap is not None:
            heap.step_ended()
        note = (STEPPED, clock, start, key, optimizer.__class__, (process_time(), thread_time(), get_ident()))
        if sync or cuda._initialized or clock >= tracker._hook_due:
            step_ended_in_hook(note)
        else:
            append(note)

    def step_ended_in_hook(note: tuple) -> None:
        """The rarer path of a note that ends an optimizer's step (STEPPED, SKIPPED; the clock is
        its second item): drained at once where the hook must act (in_hook), or to write the
        lines that are due; StepLimitReached raised into the script's step() at --steps."""
        try:
            if sync or cuda._initialized:
                limit = in_hook(note)
            else:
                in_hook(note, True)
                limit = False
        except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's step()
            tracker.note_error(exc)
            limit = False
        if limit:
            tracker.step_limit_reached = True
            raise StepLimitReached(tracker.closed_steps)

    # A compiled optimizer step (torch.compile around `opt.step()`, fullgraph included) traces the
    # global hooks and guards on their count; plain python has none, so they are out of torch's
    # dicts during compiled calls (_hidden_while_compiled, below). Registered as torch's own for a
    # compiled call that finds them all the same: Dynamo must find two that do nothing there
    # (dynamo_skip.as_torchs), not cagtool's skipped frames (a graph break, an error under fullgraph=True).
    # No hook of cagtool's runs for a step inside compiled code: the tracker learns of it from the
    # compile that traced an optimizer's step() (call_cleanup_hooks below), or of a frame of
    # torch.optim's (notes.py, COMPILED), and sees it where the compiled call returns.
    optimizer_file = register_optimizer_step_pre_hook.__code__.co_filename  # torch/optim/optimizer.py
    pre_hook_as_torchs = as_torchs(optimizer_file, pre_hook, "pre_hook")
    handles = [register_optimizer_step_pre_hook(pre_hook_as_torchs),
               register_optimizer_step_post_hook(as_torchs(optimizer_file, post_hook, "post_hook"))]

    # torch.amp.GradScaler.step(optimizer) calls the optimizer's step() only when the gradients are
    # finite (an fp16 job's first steps often are not): a skipped step ends the step all the same,
    # as the script's loop and the training frameworks count it. torch.cuda.amp's scaler is a
    # subclass that keeps this step().
    grad_scaler = getattr(getattr(torch, "amp", None), "grad_scaler", None)
    scaler_class = getattr(grad_scaler, "GradScaler", None)
    original_scaler_step = getattr(scaler_class, "step", None)
    optimizer_class = torch.optim.Optimizer

    def watched_scaler_step(scaler, optimizer, *args, **kwargs):
        before = stepped[0]
        # A step inside compiled code (the optimizer's step() compiled, or this call inside a
        # compiled training step, where the hooks are out of torch's dicts) runs no post-hook but
        # updates the parameters in place, which a skipped one leaves alone: one with a gradient.
        param = _last_with_grad(optimizer)
        version = None if param is None else param._version
        result = original_scaler_step(scaler, optimizer, *args, **kwargs)
        if (stepped[0] == before and isinstance(optimizer, optimizer_class) and (only is None or get_ident() == only)
                and (param is None or param._version == version)):
            clock = perf_counter()
            note = (SKIPPED, clock, clock, id(optimizer), optimizer.__class__, (process_time(), thread_time(), get_ident()))
            if sync or cuda._initialized or clock >= tracker._hook_due:
                step_ended_in_hook(note)
            else:
                append(note)
        return result

    if original_scaler_step is not None:
        scaler_class.step = functools.update_wrapper(
            as_torchs(original_scaler_step.__code__.co_filename, watched_scaler_step, "step", original_scaler_step,
                       "self, optimizer, *args, **kwargs"), original_scaler_step)
    else:
        scaler_class = None
    # Put first in every OptimizeContext's enter_exit_hooks (context_init, below): entered before
    # Dynamo's callback is set, its cleanup run before the exit hook's, which may raise
    # StepLimitReached.
    from torch.optim import optimizer as optimizer_module

    returns_watched = [True]  # False once uninstalled: the contexts made meanwhile keep both hooks
    # The gradient digests' module and parameter registration hooks (grad_digest.py, ParamNames) too:
    # a compiled forward that makes a module (every transformers model slices its ModuleList,
    # `self.layers[:n]`, a new ModuleList made by add_module) would call them where plain python's
    # dicts are empty, and break its graph on cagtool's skipped function.
    names = getattr(digests, "names", None)
    registrations = [(handle.hooks_dict_ref(), handle.id) for handle in getattr(names, "_handles", ())]
    hooks_hidden, shown_in, in_compiled_call = _hidden_while_compiled(
        [(optimizer_module._global_optimizer_pre_hooks, handles[0].id), (optimizer_module._global_optimizer_post_hooks, handles[1].id),
         *[(table, key) for table, key in registrations if table is not None and key in table]],
        returns_watched)
    # A function torch._dynamo.disable (torch.compiler.disable) made runs with Dynamo's callback off:
    # an optimizer step() in it, called from compiled code, runs eagerly, and the hooks are back.
    disable_class = getattr(getattr(getattr(torch, "_dynamo", None), "eval_frame", None), "DisableContext", None)
    original_disable_call = getattr(disable_class, "__call__", None)
    if original_disable_call is not None:
        @functools.wraps(original_disable_call)
        def disable_call(context: Any, fn: Any) -> Any:
            made = original_disable_call(context, fn)
            if isinstance(made, types.FunctionType) and getattr(made, "_torchdynamo_disable", False):
                return shown_in(made)
            return made

        disable_class.__call__ = disable_call
    else:
        disable_class = None

    # An optimizer step inside a compiled graph runs no hook, but torch.compile's wrapper
    # (eval_frame.py, compile_wrapper) calls each of its context's `enter_exit_hooks` on entry and
    # the cleanup each returns on exit, in its `finally`, once the compiled code has returned and
    # Dynamo's frame callback is off: there, in a call of a function whose compiled code steps an
    # optimizer (CompiledFunction.steps), the watched readings taken at its entry and its return say
    # whether the optimizer stepped in it (docs/torch-internals.md, "An optimizer step inside a
    # compiled graph runs no hook"). So such a step ends where the script's call of the compiled
    # function returns, and --steps stops the job there, the same point as eager's step(), not one
    # forward and backward later; and a parameter changed in place anywhere else (an embedding's
    # max_norm renormalisation in a compiled forward, weight clipping) is not read as a step.
    # Appended last, after torch's own hooks (compiled autograd's context among them), so those are
    # undone before StepLimitReached is raised out of the cleanup. A call of a function that steps
    # no optimizer costs two Python calls and a truth test each.
    context_class = getattr(getattr(getattr(torch, "_dynamo", None), "eval_frame", None), "OptimizeContext", None)
    original_context_init = getattr(context_class, "__init__", None)
    functions: weakref.WeakKeyDictionary[Any, CompiledFunction] = weakref.WeakKeyDictionary()  # context -> its function
    wrapper_file = getattr(getattr(getattr(torch, "_dynamo", None), "eval_frame", None), "__file__", None)

    def watch_calls(function: CompiledFunction) -> Callable[[], Callable[[], None]]:
        """The enter hook of one context (one function torch.compile made)."""

        def compiled_returned() -> None:
            if not function.steps:
                return
            before, function.entry = function.entry, None
            if before is None or not returns_watched[0] or (only is not None and get_ident() != only):
                return
            limit = False
            try:
                owner = solo.get(0)
                call = owner if owner is not None and owner.thread == get_ident() else getattr(local, "call", None)
                if call is not None:
                    # Inside a backward: a compiled autograd graph's call, whose hooks stepped an
                    # optimizer where no hook of cagtool's runs (optimizer in backward: a
                    # post-accumulate-grad hook's step()). The backward's end counts it (boundaries.py).
                    if stepped[0] == function.hooked:
                        version = watching[0]()
                        if version != before:
                            call.inside = (before if call.inside is None else call.inside[0], version)
                    return
                version = watching[0]()
                if version == before:
                    return
                # A step() the hooks saw in the call (a disabled function's, where they are back in
                # torch's dicts) is counted already: no clock then, so that a change with no backward
                # in the step is not read as a second step (boundaries.py, parameters_changed).
                if stepped[0] == function.hooked:
                    note = (RETURNED, before, version, perf_counter(), (process_time(), thread_time(), get_ident()))
                else:
                    note = (RETURNED, before, version, None, None)
                if sync or cuda._initialized:
                    limit = in_hook(note)
                else:
                    append(note)
            except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's compiled call
                tracker.note_error(exc)
            if limit:
                tracker.step_limit_reached = True
                raise StepLimitReached(tracker.closed_steps)

        def compiled_entered() -> Callable[[], None]:
            # Also where the call's first compile will make it watched (tracker.optimizer_compiled).
            function.hooked = stepped[0]
            if function.steps and returns_watched[0]:
                try:
                    function.entry = watching[0]()
                except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's compiled call
                    tracker.note_error(exc)
            return compiled_returned

        return compiled_entered

    def function_compiling() -> CompiledFunction | None:
        """The function torch.compile made whose call is compiling a frame now, in this thread (a
        compile runs inside that call: compile_wrapper has called the enter hooks and set Dynamo's
        frame callback): the innermost frame of its wrapper, whose `self` is the context. None for a
        context made before the hooks were installed. Called at a compile's end only."""
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_name == "compile_wrapper" and code.co_filename == wrapper_file:
                context = frame.f_locals.get("self")
                return None if context is None else functions.get(context)
            frame = frame.f_back
        return None

    if original_context_init is not None:
        @functools.wraps(original_context_init)
        def context_init(context: Any, *args: Any, **kwargs: Any) -> None:
            original_context_init(context, *args, **kwargs)
            exit_hooks = getattr(context, "enter_exit_hooks", None)
            if isinstance(exit_hooks, list):
                function = CompiledFunction()
                try:
                    functions[context] = function
                except TypeError:  # a context that takes no weak reference: its calls are not watched
                    exit_hooks.insert(0, hooks_hidden)
                    return
                exit_hooks.insert(0, hooks_hidden)
                exit_hooks.append(watch_calls(function))

        context_class.__init__ = context_init
    else:
        context_class = None

    # Which compiled code steps an optimizer: any optimizer's step() (torch.optim's or the script's
    # own subclass's) goes through torch's `profile_hook_step` wrapper (Optimizer._patch_step_function
    # puts it on the class at the first __init__); Dynamo lists the code it traced, the frame's own
    # and each function it inlined, in `OutputGraph.traced_code`, which it hands to its cleanup at
    # the end of each trace. So a frame that traced that wrapper's code (or cagtool's pre-hook, in a
    # compiled call that finds the hooks in torch's dicts) traced an optimizer's step: the compile's
    # end notes it (tracker.note_dynamo_compile).
    graph_class = getattr(getattr(getattr(torch, "_dynamo", None), "output_graph", None), "OutputGraph", None)
    original_cleanup = getattr(graph_class, "call_cleanup_hooks", None)
    step_codes = {pre_hook_as_torchs.__code__}
    profile_hook_step = getattr(torch.optim.Optimizer, "profile_hook_step", None)
    if profile_hook_step is not None:
        try:
            step_codes.add(profile_hook_step(lambda *args, **kwargs: None).__code__)
        except Exception:  # noqa: BLE001 - another torch's wrapper shape: cagtool's pre-hook and torch.optim's frames still tell
            pass

    if original_cleanup is not None:
        @functools.wraps(original_cleanup)
        def call_cleanup_hooks(output_graph: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                if only is None or get_ident() == only:
                    for code in getattr(output_graph, "traced_code", ()):
                        if code in step_codes:
                            tracker._step_traced = True
                            break
            except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's compile
                tracker.note_error(exc)
            return original_cleanup(output_graph, *args, **kwargs)

        graph_class.call_cleanup_hooks = call_cleanup_hooks
    else:
        graph_class = None
    # An evaluation inside the job's steps (Lightning's validation loop between two training steps,
    # HF Trainer's evaluate() every eval_steps, a script's own evaluation after each epoch) makes
    # the step whose span holds it longer than a training step: the step is noted as holding one
    # (EVALUATED), and the steady figures leave it out (report/figures/metrics.py). What marks it:
    # a module switched from training to eval mode, which is what an evaluation does first. The
    # wrapper is a function of torch's own module.py that calls torch's train() straight on when it
    # switches to training (HF Trainer's training_step calls model.train() every step, and train()
    # calls itself on every submodule: one Python frame more each) or while Dynamo traces it.
    module_class = torch.nn.Module
    original_train = module_class.__dict__.get("train")
    if isinstance(original_train, types.FunctionType):
        switching: list[None] = []  # non-empty while a switch to eval mode goes down the submodules

        def watched_train(module, mode):
            if switching or (only is not None and get_ident() != only) or not getattr(module, "training", False):
                return original_train(module, mode)
            switching.append(None)
            try:
                append((EVALUATED, perf_counter()))
            except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's eval()
                tracker.note_error(exc)
            try:
                return original_train(module, mode)
            finally:
                switching.pop()

        train = as_torchs(original_train.__code__.co_filename, watched_train, "train", original_train, "self, mode=True",
                           text=TRAINING_SWITCH)
        module_class.train = functools.update_wrapper(train, original_train)
    else:
        original_train = None
    # A DataLoader with worker processes starts them with each new iterator (every epoch, unless
    # persistent_workers): the step that holds their start-up and first batch is no steady step
    # either (a job's epoch boundaries: 78-95 ms against ~2.5 ms). Noted where the iterator is made.
    loader_module = sys.modules.get("torch.utils.data.dataloader")
    loader_class = getattr(loader_module, "DataLoader", None)
    original_get_iterator = getattr(loader_class, "__dict__", {}).get("_get_iterator")
    if isinstance(original_get_iterator, types.FunctionType):
        def watched_get_iterator(loader):
            try:
                if only is None or get_ident() == only:
                    tracker.loader_iterators += 1
                    if loader.num_workers:
                        append((WORKERS_STARTED, perf_counter()))
                    note_collate(tracker.collate_functions, loader)
            except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's loop
                tracker.note_error(exc)
            return original_get_iterator(loader)

        loader_class._get_iterator = functools.update_wrapper(
            as_torchs(original_get_iterator.__code__.co_filename, watched_get_iterator, "_get_iterator", original_get_iterator, "self"),
            original_get_iterator)
    else:
        loader_class = original_get_iterator = None
    return InstalledHooks(entry, original, original_graph, original_init, handles, scaler_class, original_scaler_step,
                          context_class, original_context_init, returns_watched, graph_class, original_cleanup, function_compiling,
                          frozenset(step_codes), disable_class, original_disable_call, original_train, loader_class,
                          original_get_iterator, in_compiled_call=in_compiled_call)


def _last_with_grad(optimizer: Any) -> Any:
    """The last parameter of `optimizer` that has a gradient (None: none has, or not an optimizer's
    shape): the one a grad scaler's step() reads to tell a step inside compiled code from a skip."""
    try:
        for group in reversed(optimizer.param_groups):
            for param in reversed(group["params"]):
                if param.grad is not None:
                    return param
    except Exception:  # noqa: BLE001 - an optimizer of another shape: the hooks' count alone decides
        pass
    return None


class _Region:
    """A compiled call or a disabled function's call in progress (`_hidden_while_compiled`): equal
    only to itself, so that leaving one removes it and not another of its kind."""

    __slots__ = ("compiled", "thread")

    def __init__(self, compiled: bool) -> None:
        self.compiled = compiled
        self.thread = threading.get_ident()


def _hidden_while_compiled(registered: list[tuple[Any, int]],
                           installed: list[bool]) -> tuple[Callable[[], Callable[[], None]], Callable[[Any], Any], Callable[[], bool]]:
    """(hidden, shown_in, inside): `hidden` is an enter hook of torch.compile's wrapper
    (OptimizeContext.enter_exit_hooks) that takes cagtool's optimizer hooks out of torch's global
    hook dicts (`registered`: the dict and the handle's id of each) for the call, so that Dynamo,
    which traces and checks its guards only inside such a call, finds the dicts as under plain
    python: it guards `len(_global_optimizer_pre_hooks) == 0` on an optimizer's step() frame, and
    any hook it traces changes which frames it compiles (docs/torch-internals.md, "The optimizer
    hooks and GradScaler.step as Dynamo sees them"). `shown_in(fn)` wraps a function
    torch._dynamo.disable made: called inside a compiled call, the hooks are back in the dicts while
    it runs (Dynamo traces nothing there), so an eager step() in it is seen by them. The
    innermost region in progress (any thread's) decides; the hooks go back in registration order.
    `installed` [False]: the tracker was uninstalled, and its handles removed what was there."""
    hooks = [(table, key, table[key]) for table, key in registered]
    get_ident = threading.get_ident
    regions: list[_Region] = []  # the compiled and the disabled calls in progress, innermost last
    taken: list[tuple[Any, int, Any]] = []
    lock = threading.Lock()

    def settle() -> None:
        """Under the lock: the hooks out of the dicts where the innermost region is a compiled call."""
        if regions and regions[-1].compiled and installed[0]:
            if not taken:
                for table, key, hook in hooks:
                    if table.get(key) is hook:
                        del table[key]
                        taken.append((table, key, hook))
        elif taken:
            if installed[0]:
                for table, key, hook in taken:
                    table[key] = hook
                    if len(table) > 1:  # the handles' ids grow: their order is the registration order
                        for later in sorted(k for k in table if k > key):
                            table.move_to_end(later)
            taken.clear()

    def hidden() -> Callable[[], None]:
        region = _Region(True)
        with lock:
            regions.append(region)
            settle()

        def shown() -> None:
            with lock:
                regions.remove(region)
                settle()

        return shown

    def shown_in(disabled: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            # Inside this thread's own disabled call (torch's disabled functions call each other:
            # two in three of the ~9,500 calls a compile of a small transformer makes), another
            # region would change nothing: the one below it is this thread's, left after it.
            innermost = regions[-1:]  # one read: another thread may empty it meanwhile
            if not innermost or not innermost[0].compiled and innermost[0].thread == get_ident():
                return disabled(*args, **kwargs)
            region = _Region(False)
            with lock:
                regions.append(region)
                settle()
            try:
                return disabled(*args, **kwargs)
            finally:
                with lock:
                    regions.remove(region)
                    settle()

        # Its `_torchdynamo_disable` and the rest copied: Dynamo skips calling it as it skipped torch's.
        # Copied here, not by functools.update_wrapper: torch.compiler.disable makes its function at
        # the first call, inside the compiled code, where Dynamo would be offered that stdlib frame
        # (one in counters["frames"] more).
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            value = getattr(disabled, name, None)
            if value is not None:
                setattr(call, name, value)
        call.__dict__.update(disabled.__dict__)
        call.__wrapped__ = disabled  # type: ignore[attr-defined]
        return call

    def inside() -> bool:
        """A compiled call is in progress in this thread (the step tracker's CA-flag finding)."""
        me = get_ident()
        return any(region.compiled and region.thread == me for region in list(regions))

    return hidden, shown_in, inside
