"""Observes every compiled-autograd capture, whoever installed the compiler.

Patches `AutogradCompilerInstance.begin_capture` / `log_compile_reasons` / `end_capture` (looked up
on the class by C++, so this sees captures made under cagtool's own compiler and under the
script's `torch._dynamo.config.compiled_autograd` or `_enable`), and installs a verbose logger so
that C++ computes cache-miss reasons at all (docs/torch-internals.md, "CA cache misses").

The observer never changes the capture it watches (docs/torch-internals.md, "What the verbose
logger changes"): torch is handed no node origins (with a verbose logger C++ passes them, and
torch would write them into the graph's node meta, which a script's own CA compiler sees) unless
torch or the script installed a verbose logger of its own (then cagtool's forwards every message to
it and torch gets the origins, as without cagtool). After a capture that raised, C++ asserts when
that capture's graph comes back with a verbose logger set, where torch alone captures it again: the
backward entry point (steps/hooks.py) runs such a backward again with the logger set aside for it
(`logger_aside`), and the logger stays for every other backward, so later misses keep their
reasons. Every piece of cagtool's own work in these hooks contains its
failures: counted (`errors`, in the manifest), one `observer_error` finding, the capture goes on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any, Callable

from cagtool.capture.observe import dynamo_skip, graph_dump, hook_sites, source
from cagtool.capture.observe.compiling_now import CA_GRAPH, CAPTURING, CompilesInProgress
from cagtool.capture.steps.tracker import StepTracker
from cagtool.record.writer import RecordWriter
from cagtool.record.schema import (
    FINDING_CA_CAPTURE_ERROR,
    FINDING_CA_CAPTURE_FAILED,
    CACompileEvent,
    CacheMissEvent,
    CAGraphEvent,
    ChangedSize,
    FindingEvent,
)
from cagtool.torch_text import parse_miss, split_ca_reason

# Finding codes (schema.FindingEvent.code).
OBSERVER_ERROR = "observer_error"  # cagtool's own code failed inside a capture hook; the capture went on
CAPTURE_FAILED = FINDING_CA_CAPTURE_FAILED  # torch's capture raised (module docstring)
CAPTURE_ERROR = FINDING_CA_CAPTURE_ERROR  # ... what it raised, as the backward entry point saw it go to the script
_CA_TRACER = os.path.join("torch", "_dynamo", "compiled_autograd.py")  # the capture's Python side
# The text of the assert C++ raises where a failed capture's graph is walked again with a verbose
# logger set (docs/torch-internals.md, "What the verbose logger changes").
CA_LOGGER_ASSERT = "!vlogger.has_value() || compile_reason.has_value()"

def compiler_backend(compiled_fn: Any, compiler_fn: Any) -> str:
    """The name of what compiled a CA graph: the backend of the `torch.compile` the compiler_fn
    returned (Dynamo keeps it as `_compiler_name` down the callback chain of the OptimizedModule:
    CatchErrorsWrapper -> ConvertFrame -> WrapBackendDebug, docs/torch-internals.md), else the
    compiler_fn's own name (a compiler that is not torch.compile). "" when neither is known."""
    callback = getattr(getattr(compiled_fn, "dynamo_ctx", None), "callback", None)
    for _ in range(8):
        if callback is None:
            break
        name = getattr(callback, "_compiler_name", None)
        if isinstance(name, str) and name:
            return name
        callback = getattr(callback, "_torchdynamo_orig_backend", None)
    name = getattr(compiler_fn, "__name__", None)
    # torch.compile(backend=...)'s own closure is named `fn`: its name says nothing
    return name if isinstance(name, str) and name not in ("", "fn", "<lambda>") else ""


def compiler_fullgraph(compiled_fn: Any) -> bool:
    """Whether the `torch.compile` that compiled a CA graph was fullgraph=True (the OptimizedModule's
    OptimizeContext keeps it as `fullgraph`, docs/torch-internals.md)."""
    return getattr(getattr(compiled_fn, "dynamo_ctx", None), "fullgraph", False) is True


class _VerboseLogger:
    """What C++ calls with each cache-miss message; only its presence matters (reasons then reach
    log_compile_reasons with their graph id). Messages are also kept for graphs whose reasons
    never arrive there. C++ turns an exception raised here into one raised from the script's
    backward, so nothing here can raise."""

    def __init__(self) -> None:
        self.last_message: str | None = None
        # the logger torch or the script installed (torch's own verbose log): it gets every message
        # it would have got without cagtool, its exceptions included, as without cagtool
        self.forward: Any = None

    def debug(self, message: Any, *args: Any) -> None:
        if isinstance(message, str) and message.startswith("Cache miss"):
            self.last_message = message
        if self.forward is not None:
            if isinstance(self.forward, logging.Logger):
                # The record names the frame C++ called from (the engine's call: torch's
                # graph.py without cagtool, its copy in capture/steps/hooks.py with it), not this
                # line of cagtool's logger in between.
                self.forward.debug(message, *args, stacklevel=2)
            else:
                self.forward.debug(message, *args)


class CaptureObserver:
    def __init__(self, writer: RecordWriter, steps: StepTracker, cagtool_compiler: Callable[..., Any] | None,
                 compiling: CompilesInProgress | None = None) -> None:
        self.writer = writer
        self.steps = steps
        self.compiling = compiling  # what the live status line says is compiling (compiling_now.py)
        self.cagtool_compiler = cagtool_compiler
        self.logger = _VerboseLogger()
        self._originals: dict[str, Any] = {}
        self._seen_torch_ids: set[int] = set()
        self._next_record_id = 0
        self.errors = 0  # failures of cagtool's own code inside the hooks (manifest: observer_errors)
        self.last_error = ""
        self.failed_captures = 0  # captures torch began and never ended (it raised)
        # The verbose logger was taken away for good after a failed capture: its backward did not go
        # through cagtool's entry point, which runs a backward that meets the assert again (logger_aside).
        self.reasons_stopped = False
        self.walks_without_logger = 0  # backwards run again with the logger set aside (logger_aside)
        self._open_capture: Any = None  # the capture begun and not yet ended
        # The capture that raised, whose error the backward entry point has not handed over yet:
        # (compile id, step, the user's backward line, the thread it ran in); its error goes in a
        # `ca_capture_error` finding.
        self._failure_unsaid: tuple[str, Any, Any, int] | None = None
        # The verbose logger torch or the script set last (torch's `verbose_log` when the
        # compiled_autograd_verbose log is on as `_enable` is entered): what torch alone would have.
        self.theirs: Any = None
        self._set_verbose_logger: Any = None  # torch's own setter, while cagtool's stands in for it
        self.hide_capture = False  # `run --depyf`: the capture runs with Dynamo's callback off (install)

    # -- installation -------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        from torch._dynamo import compiled_autograd as ca

        cls = ca.AutogradCompilerInstance
        for name in ("begin_capture", "log_compile_reasons", "end_capture", "remove_unused_sizes"):
            if name == "remove_unused_sizes" and not hasattr(cls, name):
                continue  # a torch without it: the sizes' numbering is not recorded
            self._originals[name] = getattr(cls, name)
        observer = self

        orig_begin = self._originals["begin_capture"]
        orig_reasons = self._originals["log_compile_reasons"]
        orig_end = self._originals["end_capture"]

        def begin_capture(inst, inputs, sizes, scalars, origins, *args, **kwargs):
            # A capture begun and never ended raised in torch: known at the next one at the latest.
            observer._guarded("begin_capture", observer._on_begin, inst, sizes, origins, inputs)
            result = orig_begin(inst, inputs, sizes, scalars, observer._guarded("begin_capture", observer._origins_for_torch, origins), *args, **kwargs)
            if observer.compiling is not None:  # the id is torch's from begin_capture on
                observer._guarded("begin_capture", observer._capture_started, inst)
            return result

        def log_compile_reasons(inst, compile_reasons):
            observer._guarded("log_compile_reasons", observer._on_reasons, inst, compile_reasons)
            return orig_reasons(inst, compile_reasons)

        def end_capture(inst, outputs):
            return observer._on_end(inst, outputs, orig_end)

        orig_unused = self._originals.get("remove_unused_sizes")

        def remove_unused_sizes(inst, *args, **kwargs):
            # The sizes the graph's code reads, as torch keeps them (docs/torch-internals.md, "A CA
            # graph's sizes, numbered anew"): its result is returned untouched.
            used = orig_unused(inst, *args, **kwargs)
            observer._guarded("remove_unused_sizes", observer._note_used_sizes, inst, used)
            return used

        # Not torch._dynamo.disable: it turns Dynamo's callback off for everything under it, torch's
        # own capture included, whose frames plain python offers to Dynamo and counts
        # (counters["frames"]: 941 against 63 for a job setting the config flag). cagtool's wrapper
        # frames are in Dynamo's skip list (dynamo_skip.hide_cagtool_frames); its own work runs in
        # _guarded, with the callback off. Under `run --depyf` the capture is hidden as a whole:
        # with depyf's hooks in place a capture offered to Dynamo recurses until Python's limit
        # (RecursionError, plain torch and depyf too: docs/torch-internals.md), and the dump is
        # what that run is for.
        dynamo_skip.hide_cagtool_frames()
        hide = torch._dynamo.disable if self.hide_capture else (lambda fn: fn)
        cls.begin_capture = hide(begin_capture)
        cls.log_compile_reasons = hide(log_compile_reasons)
        cls.end_capture = hide(end_capture)
        if orig_unused is not None:
            cls.remove_unused_sizes = hide(remove_unused_sizes)
        # torch's `_enable` and `reset` set the logger through the module attribute: cagtool's stays
        # in place and forwards to theirs (docs/torch-internals.md, "What the verbose logger changes").
        module = torch._C._dynamo.compiled_autograd
        self._set_verbose_logger = module.set_verbose_logger

        def set_verbose_logger(logger: Any) -> Any:
            observer.theirs = logger
            return observer.install_logger()

        module.set_verbose_logger = set_verbose_logger
        self.install_logger()
        self.steps.ca_rerun = self.logger_aside

    def install_logger(self) -> Any:
        """cagtool's logger, forwarding to theirs; theirs alone after a capture raised in a backward
        that bypassed cagtool's entry point (check_failed_capture)."""
        import torch

        setter = self._set_verbose_logger or torch._C._dynamo.compiled_autograd.set_verbose_logger
        self.logger.forward = self.theirs
        # C++ keeps a borrowed pointer: self.logger lives as long as this observer.
        return setter(self.theirs if self.reasons_stopped else self.logger)

    # -- containment --------------------------------------------------------------------------
    def _guarded(self, hook: str, work: Callable[..., Any], *args: Any) -> Any:
        """cagtool's own part of a hook: a failure is counted and reported, never raised into the
        script's backward."""
        from torch._C._dynamo.eval_frame import set_eval_frame

        # With Dynamo's frame callback off (dynamo_skip.without_dynamo): the stdlib frames cagtool's
        # part calls are never offered to Dynamo, and torch's own part, outside, is offered as
        # under plain python.
        prior = set_eval_frame(None)
        try:
            return work(*args)
        except Exception as exc:  # noqa: BLE001 - the recorder never fails the script's backward
            self.note_error(hook, exc)
            return None
        finally:
            set_eval_frame(prior)

    def note_error(self, hook: str, exc: BaseException) -> None:
        try:
            self.errors += 1
            self.last_error = f"{hook}: {type(exc).__name__}: {exc}"[:500]
            if self.errors == 1:
                self.writer.emit(
                    FindingEvent,
                    code=OBSERVER_ERROR,
                    message=(
                        f"cagtool's compiled-autograd observer failed in {hook} ({type(exc).__name__}: {exc}); "
                        "the script's backward went on unchanged, but what cagtool recorded of this capture "
                        "(and of any later one that fails the same way) may be incomplete; the manifest's "
                        "options.observer_errors counts every such failure"
                    )[:2000],
                    step=self.steps.current_step,
                    detail={"hook": hook},
                )
        except Exception:  # noqa: BLE001 - reporting the failure must not fail either
            pass

    def _origins_for_torch(self, origins: Any) -> Any:
        """What torch would have been passed without cagtool's verbose logger: no origins (C++
        collects them only for a verbose logger; torch's begin_capture then stamps each input's
        node origin into the graph's node meta, which the script's own compiler would see), unless
        torch or the script installed one of theirs."""
        if self.theirs is not None:
            return origins
        try:
            return [[] for _ in origins]
        except Exception:  # noqa: BLE001 - not a sequence: hand torch what C++ gave
            return origins

    def uninstall(self) -> None:
        from torch._dynamo import compiled_autograd as ca

        self._guarded("uninstall", self.check_failed_capture)
        if self.steps.ca_rerun == self.logger_aside:
            self.steps.ca_rerun = None
        for name, original in self._originals.items():
            setattr(ca.AutogradCompilerInstance, name, original)
        if self._set_verbose_logger is not None:
            import torch

            torch._C._dynamo.compiled_autograd.set_verbose_logger = self._set_verbose_logger
            self._set_verbose_logger(self.theirs)
            self._set_verbose_logger = None

    def logger_aside(self, exc: BaseException) -> "_LoggerAside | None":
        """Asked by the backward entry point (steps/hooks.py) when the engine raised `exc`: where it is
        C++'s assert on a failed capture's graph walked again with cagtool's logger set (torch alone,
        with no verbose logger, captures that graph again there; the assert comes from the cache walk,
        before any node runs or is freed), a context in which the entry runs the backward again with
        no logger; else None, and the error goes on to the script as it is. Torch's or the script's own
        logger set: torch alone asserts as well, so None."""
        self._guarded("capture error", self._note_capture_error, exc)
        return self._guarded("backward rerun", self._aside_for, exc)

    def _note_capture_error(self, exc: BaseException) -> None:
        """The error a capture raised, of whatever type, as it leaves the backward for the script
        (C++ closed the capture before it, in the thread that ran it): its type and message, with
        the backward's line, in a finding. Never changes the error."""
        unsaid = self._failure_unsaid
        if unsaid is None or unsaid[3] != threading.get_ident() or CA_LOGGER_ASSERT in str(exc):
            return
        # Not the run of a graph captured earlier (a backward whose graph was in the cache, after a
        # failed capture whose error went by another way): that error passes through torch's
        # runtime wrapper (C++ keeps the traceback it fetched); a capture's own does not.
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_name == "runtime_wrapper" and code.co_filename.endswith(_CA_TRACER):
                return
            tb = tb.tb_next
        compile_id, step, caller, _ = unsaid
        self._failure_unsaid = None
        text = str(exc).strip()
        first = text.splitlines()[0] if text else ""
        self.writer.emit(
            FindingEvent,
            code=CAPTURE_ERROR,
            message=f"the compiled-autograd capture of {compile_id} raised {type(exc).__name__}" + (f": {first[:300]}" if first else ""),
            step=step,
            source=caller,
            detail={"compile_id": compile_id, "error_type": type(exc).__name__, "error": text[:2000]},
        )

    def _aside_for(self, exc: BaseException) -> "_LoggerAside | None":
        if self.theirs is not None or self.reasons_stopped or CA_LOGGER_ASSERT not in str(exc):
            return None
        return _LoggerAside(self)

    def manifest_notes(self) -> dict[str, Any]:
        """What the manifest's options say about the observer itself (absent when nothing happened)."""
        notes: dict[str, Any] = {}
        if self.errors:
            notes["observer_errors"] = {"count": self.errors, "last": self.last_error}
        if self.failed_captures:
            notes["failed_ca_captures"] = self.failed_captures
        return notes

    def _entry_is_cagtools(self) -> bool:
        """Every backward reaches cagtool's entry point now (or a wrapper of it): a backward that
        meets the assert is run again there (logger_aside)."""
        import torch.autograd
        from torch.autograd import graph as autograd_graph

        entry = getattr(self.steps, "_entry", None)
        if entry is None:
            return False
        for current in (torch.autograd.__dict__.get("_engine_run_backward"), autograd_graph.__dict__.get("_engine_run_backward")):
            hops = 0
            while current is not None and current is not entry and hops < 16:
                current, hops = getattr(current, "__wrapped__", None), hops + 1  # functools.wraps
            if current is not entry:
                return False
        return True

    # -- events -------------------------------------------------------------------------------
    def _record_id(self, torch_id: int) -> int:
        """torch restarts ids after torch._dynamo.reset(); the record keeps them unique."""
        record_id = torch_id if torch_id not in self._seen_torch_ids and torch_id >= self._next_record_id else self._next_record_id
        self._seen_torch_ids.add(torch_id)
        self._next_record_id = max(self._next_record_id, record_id + 1)
        return record_id

    def _input_params(self, inputs: Any) -> dict[int, str]:
        """i -> the module path of the parameter that is `inputs[i]` (the tensors themselves, before
        torch replaces them with fakes); only parameters a live module holds are named."""
        names = getattr(getattr(self.steps, "digests", None), "names", None)
        if names is None:
            return {}
        params: dict[int, str] = {}
        for index, tensor in enumerate(inputs):
            name = names.name_of(tensor)
            if name is not None:
                params[index] = name
        return params

    def _on_begin(self, inst: Any, sizes: Any, origins: Any, inputs: Any = ()) -> None:
        self.check_failed_capture()
        self._failure_unsaid = None  # a failed capture's error not handed over by now went by another way
        self._open_capture = inst
        # C++ closes the capture object whether the capture ended or raised (its error is kept
        # aside first): a close before end_capture returned is a capture that raised.
        # A weak reference: a closure holding the capture object would make a cycle, and torch
        # relies on a failed capture's object being freed at once (its compile context, entered
        # in begin_capture and left only by end_capture, is restored when the object goes).
        original_close = inst.close
        observer = self
        capture = weakref.ref(inst)

        def close(*args: Any, **kwargs: Any) -> Any:
            try:
                return original_close(*args, **kwargs)
            finally:
                if observer._open_capture is not None and observer._open_capture is capture():
                    observer._guarded("close", observer.check_failed_capture)

        inst.close = close
        inst._cag_t0 = time.perf_counter()
        sizes = list(sizes)
        inst._cag_sizes = sizes
        try:
            inst._cag_size_origins = [tuple(o) if o else None for o in origins[1]]
        except (IndexError, TypeError):
            inst._cag_size_origins = []
        try:
            inst._cag_placeholder_origins = {"inputs": list(origins[0]), "scalars": list(origins[2])}
        except (IndexError, TypeError):
            inst._cag_placeholder_origins = {}
        inst._cag_input_params = self._input_params(inputs)
        inst._cag_step = self.steps.current_step
        inst._cag_reason_logged = False
        inst._cag_caller = source.user_caller()

    def _capture_started(self, inst: Any) -> None:
        inst._cag_compiling = self.compiling.started(CA_GRAPH, f"!{inst.id}", CAPTURING)  # type: ignore[union-attr]

    def _capture_ended(self, inst: Any) -> None:
        if self.compiling is not None and inst is not None:
            self.compiling.ended(getattr(inst, "_cag_compiling", None))

    def _on_reasons(self, inst: Any, reasons: Any) -> None:
        reasons = list(reasons)
        if not reasons:
            return
        message = split_ca_reason(reasons[-1])[1]
        inst._cag_reason_logged = True
        self._emit_miss(inst, message)

    def _emit_miss(self, inst: Any, message: str) -> None:
        torch_id = int(getattr(inst, "id", -1))
        if not hasattr(inst, "_cag_record_id"):
            inst._cag_record_id = self._record_id(torch_id)
        parsed = parse_miss(message)
        sizes: list[int] = getattr(inst, "_cag_sizes", [])
        origins: list[Any] = getattr(inst, "_cag_size_origins", [])
        changed: list[ChangedSize] = []
        # sizes[i] indexes this capture's dynamic sizes: a size that just became dynamic was a
        # constant of the previous graph, so its earlier value is read off that graph by the
        # reports (report/changed_sizes.py), not guessed here by index.
        for index in parsed.pop("indices", []):
            origin = origins[index] if index < len(origins) else None
            value = sizes[index] if index < len(sizes) else None
            changed.append(
                ChangedSize(
                    index=index,
                    value=value,
                    node=origin[1] if origin else None,
                    node_call=int(origin[0]) if origin else None,
                )
            )
        node_source = None
        if parsed.get("node") and self.steps.current_roots:
            node_source = source.node_creation(self.steps.current_roots, parsed["node"])
        caller = getattr(inst, "_cag_caller", None)
        self.writer.emit(
            CacheMissEvent,
            ca_id=inst._cag_record_id,
            compile_id=f"!{torch_id}",
            step=getattr(inst, "_cag_step", None),
            message=message,
            changed_sizes=changed,
            source=node_source or caller,
            backward_call=caller,
            **parsed,
        )

    def _on_end(self, inst: Any, outputs: Any, orig_end: Callable[..., Any]) -> Any:
        symbolic: list[Any] = []
        shapes = self._guarded("end_capture", lambda: graph_dump.snapshot_meta(inst.fx_tracer.graph, symbolic)) or {}
        inst._cag_symbols = (self._guarded("end_capture", graph_dump.symbol_values, symbolic[0]) or None) if symbolic else None
        captured: dict[str, Any] = {}
        user_compiler = inst.compiler_fn
        # The graph is taken where torch builds it, just before it hands it to the compiler, and the
        # compiler is called as torch calls it: an error the compiler raises (the script's own,
        # of any type) reaches the script with torch's frame above the compiler's, as without cagtool.
        build_graph = inst.create_graph_module

        def recording_build(*args: Any, **kwargs: Any) -> Any:
            gm = build_graph(*args, **kwargs)
            captured["gm"] = gm
            captured["capture_end"] = time.perf_counter()
            return gm

        inst.create_graph_module = recording_build
        try:
            runtime_wrapper, compiled_fn = orig_end(inst, outputs)
        finally:
            try:
                del inst.create_graph_module
            except AttributeError:
                pass
            self._guarded("end_capture", self._capture_ended, inst)
        if self._open_capture is inst:
            self._open_capture = None
        timed = self._guarded("end_capture", self._after_end, inst, captured, shapes, user_compiler, compiled_fn)
        return runtime_wrapper, (timed if timed is not None else compiled_fn)

    def _after_end(self, inst: Any, captured: dict[str, Any], shapes: dict, user_compiler: Any, compiled_fn: Any) -> Any:
        torch_id = int(inst.id)
        if not getattr(inst, "_cag_reason_logged", False):
            message = self.logger.last_message or "no cache-miss reason reported by torch"
            self._emit_miss(inst, message)
        self.logger.last_message = None
        record_id = inst._cag_record_id
        capture_s = captured.get("capture_end", time.perf_counter()) - getattr(inst, "_cag_t0", time.perf_counter())
        gm = captured.get("gm")
        if gm is not None:
            self._guarded("graph summary", self._emit_graph, inst, gm, shapes, record_id, torch_id, capture_s, user_compiler, compiled_fn)
        self.steps.note_capture_finished(capture_s)
        return self._time_first_call(compiled_fn, record_id, getattr(inst, "_cag_hook_slots", ()))

    def check_failed_capture(self) -> None:
        """A capture torch began and never ended raised (its error reached the script, as without
        cagtool). Torch counted it (`captures`): so does the record, with the miss that caused it,
        and the first one a finding. With a verbose logger, C++ asserts (CA_LOGGER_ASSERT) when that
        capture's graph is walked again, where torch alone captures it again: cagtool's entry point
        runs that backward again without the logger (logger_aside); where the entry point is not
        cagtool's, the logger goes for good. Called when torch closes the capture object, and at
        the next capture."""
        inst = self._open_capture
        if inst is None:
            return
        self._open_capture = None
        self._capture_ended(inst)
        self.failed_captures += 1
        self._failure_unsaid = (f"!{getattr(inst, 'id', '?')}", getattr(inst, "_cag_step", None), getattr(inst, "_cag_caller", None),
                                threading.get_ident())
        try:
            if not hasattr(inst, "_cag_record_id"):
                self._emit_miss(inst, getattr(self.logger, "last_message", None) or "no cache-miss reason reported by torch")
            self.logger.last_message = None
        except Exception as exc:  # noqa: BLE001 - the record of a failure must not fail the script
            self.note_error("failed capture", exc)
        first = self.failed_captures == 1
        if not self.reasons_stopped and not self._entry_is_cagtools():
            self.reasons_stopped = True
            try:
                self.install_logger()
            except Exception as exc:  # noqa: BLE001
                self.note_error("failed capture", exc)
        elif not first:
            return
        try:
            if self.reasons_stopped:
                after = ("From here on torch reports no cache-miss reasons to cagtool: the backward entry point is not "
                         "cagtool's, which would run that graph's next backward without its verbose logger (with it in "
                         "place torch asserts when the failed graph comes back); later misses read 'no cache-miss reason "
                         "reported by torch'")
            else:
                after = ("When that graph comes back torch misses with no reason, as without cagtool; later misses keep "
                         "their reasons")
            self.writer.emit(
                FindingEvent,
                code=CAPTURE_FAILED,
                message=(
                    f"a compiled-autograd capture raised (CA graph !{getattr(inst, 'id', '?')}); torch counts it "
                    f"as a capture, and the record lists it with its cache miss. {after}"
                ),
                step=getattr(inst, "_cag_step", None),
                detail={"compile_id": f"!{getattr(inst, 'id', '?')}"},
            )
        except Exception as exc:  # noqa: BLE001
            self.note_error("failed capture", exc)

    @staticmethod
    def _note_used_sizes(inst: Any, used: Any) -> None:
        inst._cag_used_sizes = sorted(int(i) for i in used)

    def _emit_graph(self, inst: Any, gm: Any, shapes: dict, record_id: int, torch_id: int, capture_s: float, compiler: Any,
                    compiled_fn: Any = None) -> None:
        summary = graph_dump.summarize_graph(gm, shapes, getattr(inst, "_cag_placeholder_origins", None), getattr(inst, "_cag_input_params", None))
        inst._cag_hook_slots = summary.hook_slots
        code = graph_dump.readable_code(gm, {})  # the values are in the nodes file (their fakes are gone from the graph)
        code_rel, nodes_rel = self.writer.write_graph(record_id, f"!{torch_id}", code, summary.nodes, getattr(inst, "_cag_symbols", None))
        is_ours = self.cagtool_compiler is not None and compiler is self.cagtool_compiler
        backend = compiler_backend(compiled_fn, compiler)
        self.writer.emit(
            CAGraphEvent,
            ca_id=record_id,
            compile_id=f"!{torch_id}",
            step=getattr(inst, "_cag_step", None),
            node_count=len(summary.nodes),
            op_histogram=summary.op_histogram,
            autograd_nodes=summary.autograd_nodes,
            aot_ids=summary.aot_ids,
            hooks=summary.hooks,
            num_sizes=summary.num_sizes,
            capture_s=capture_s,
            code_file=code_rel,
            nodes_file=nodes_rel,
            compiler=("cagtool" if is_ours else "script") + (f":{backend}" if backend else ""),
            fullgraph=compiler_fullgraph(compiled_fn),
            used_sizes=getattr(inst, "_cag_used_sizes", None),
        )

    def _time_first_call(self, compiled_fn: Callable[..., Any], record_id: int, hook_slots: Any = ()) -> Callable[..., Any]:
        """What C++ keeps as the graph's compiled function: an object whose first call times the
        compiled function's first call (its compile) and names the hooks it is handed; from then on
        its class's `__call__` is the compiled function itself, so every later backward calls the
        graph with no Python frame of cagtool's between (a wrapper function cost ~3.3k instructions
        a backward). torch's `runtime_wrapper` calls it with Dynamo's frame callback off
        (`_disable()`), and its frame is in Dynamo's skip list anyway (dynamo_skip.py)."""
        writer, steps, observer = self.writer, self.steps, self

        def emit(seconds: float, error: str, hooks: Any) -> None:
            writer.emit(CACompileEvent, ca_id=record_id, first_call_s=seconds, step=steps.current_step, ok=not error, error=error,
                        hooks=hooks or [])

        def first_call_timer(timer: Any, *args: Any, **kwargs: Any) -> Any:
            type(timer).__call__ = staticmethod(compiled_fn)
            # runtime_wrapper calls compiled_fn(inputs, sizes, scalars, hooks, packed_inputs)
            hooks = observer._guarded("first call", hook_sites.hook_sites, args[3], hook_slots) if hook_slots and len(args) > 3 else None
            start = time.perf_counter()
            try:
                result = compiled_fn(*args, **kwargs)
            except BaseException as exc:
                observer._guarded("first call", emit, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"[:500], hooks)
                raise
            observer._guarded("first call", emit, time.perf_counter() - start, "", hooks)
            return result

        return type("FirstCallTimer", (), {"__call__": first_call_timer, "__slots__": (), "__module__": __name__})()


class _LoggerAside:
    """The backward entry point's re-run of a backward that met CA_LOGGER_ASSERT: no verbose logger
    while it runs (torch walks the failed capture's graph and captures it again, as torch alone
    does), cagtool's back after it, whatever it raised."""

    def __init__(self, observer: CaptureObserver) -> None:
        self.observer = observer

    def __enter__(self) -> None:
        observer = self.observer
        observer.walks_without_logger += 1
        observer._guarded("backward rerun", lambda: observer._set_verbose_logger(None) if observer._set_verbose_logger is not None else None)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        observer = self.observer
        observer._guarded("backward rerun", observer.install_logger)
        if exc is not None:  # the graph's capture raised again: what it raised, as the first time
            observer._guarded("capture error", observer._note_capture_error, exc)
        return False
