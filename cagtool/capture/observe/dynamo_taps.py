"""Dynamo's records (compiles, recompile reasons, graph breaks, AOT backward graphs) read without a
handler on torch's structured logger.

A handler on `torch.__trace` makes torch build every structured record of every compile (the graph
code, the guards, the bytecode of resume functions...) that a job run without TORCH_TRACE never
builds, and the compile times cagtool reports would include that work (docs/torch-internals.md,
"Reading Dynamo without a structured-log handler"). So cagtool taps the few torch functions that
hold what it reads, each after torch's own call, and hands what it found to
`StructuredLogHandler.handle_structured` in the shape torch's record would have had: the events
are built by one piece of code whether they came from a live run or a TORCH_TRACE log.

| tap (after torch's call) | torch's record it stands for |
| --- | --- |
| `torch._dynamo.utils.add_compilation_metrics_to_chromium(metrics)` | `compilation_metrics` |
| `get_and_maybe_log_recompilation_reasons` (guards, convert_frame) | artifact `recompile_reasons` |
| `InstructionTranslatorBase.log_graph_break` | artifact `dynamo_graph_break_reason` |
| `_log_fw_bw_graphs` (graph_compile), `_log_cached_graphs` (from the AOT cache) | `aot_forward_graph`, `aot_backward_graph` (their code, which torch printed anyway) |
| `log_dynamo_start` (convert_frame) | `dynamo_start` (the stack the compile came from, and the code's parameters) |
| `OutputGraph.call_user_compiler` (before torch's call: the backend may rewrite the graph) | `dynamo_output_graph` |
| `GraphLowering._compile_to_module_lines`, `FxGraphCache.cache_hit_post_compile` | `inductor_output_code` |
| `CheckFunctionManager.__init__` | `dynamo_cpp_guards_str` |

The per-compile artifacts (the last four rows, what tlparse shows per compile id) cost what torch
does not do without a handler: printing the Dynamo graph and the guard tree. Measured at about 1 %
of the compile's CPU (benchmarks/README.md, "compile artifacts"), they are recorded by default;
`record_artifacts=False` leaves those taps out.

Each tap only reads what torch computed anyway; a failure in it is counted by the handler
(`errors`), never raised into the compile.

A tapped module the process has not imported yet is tapped when torch imports it
(capture/on_import.py), not imported for cagtool: Inductor's graph module alone costs ~0.8 s of CPU to import, which a job on the eager or
aot_eager backend, or an eager-mode process, never pays under plain python (benchmarks/README.md,
"A whole run's CPU").
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any, Callable

from cagtool.capture.observe import compile_phase, graph_dump, source
from cagtool.capture.on_import import OnImport
from cagtool.capture.observe.torch_logs import (
    ARGNAMES_KEY,
    ASSUME_STATIC_KEY,
    FULLGRAPH_KEY,
    BACKWARD_METRICS_KEY,
    PHASE_KEY,
    RECOMPILE_LIMIT_KEY,
    USER_FRAME_KEY,
    StructuredLogHandler,
)

# The CompilationMetrics fields StructuredLogHandler reads (torch's record has ~100 more).
_METRIC_FIELDS = (
    "compile_id",
    "co_name",
    "co_filename",
    "co_firstlineno",
    "entire_frame_compile_time_s",
    "backend_compile_time_s",
    "inductor_compile_time_s",
    "dynamo_cumulative_compile_time_us",
    "aot_autograd_cumulative_compile_time_us",
    "inductor_cumulative_compile_time_us",
    "graph_op_count",
    "guard_count",
    "fail_type",
    "fail_reason",
    "has_guarded_code",
)
# A backward's metrics (AOTAutograd's lazy backward compile, `is_forward` False).
_BACKWARD_FIELDS = ("compile_id", "backward_cumulative_compile_time_us", "inductor_compile_time_s", "fail_type")

# (module, attribute path) of every function tapped; `cagtool doctor` and the internals tests
# check they exist.
TAPPED = (
    ("torch._dynamo.utils", "add_compilation_metrics_to_chromium"),
    ("torch._dynamo.guards", "get_and_maybe_log_recompilation_reasons"),
    ("torch._dynamo.convert_frame", "get_and_maybe_log_recompilation_reasons"),
    ("torch._dynamo.symbolic_convert", "InstructionTranslatorBase.log_graph_break"),
    ("torch._functorch._aot_autograd.graph_compile", "_log_fw_bw_graphs"),
    ("torch._functorch._aot_autograd.aot_autograd_result", "GenericAOTAutogradResult._log_cached_graphs"),
)
# The taps of the per-compile artifacts alone (left out with record_artifacts=False).
ARTIFACT_TAPPED = (
    ("torch._dynamo.convert_frame", "log_dynamo_start"),
    ("torch._dynamo.output_graph", "OutputGraph.call_user_compiler"),
    ("torch._inductor.graph", "GraphLowering._compile_to_module_lines"),
    ("torch._inductor.codecache", "FxGraphCache.cache_hit_post_compile"),
    ("torch._dynamo.guards", "CheckFunctionManager.__init__"),
)


def compile_id_metadata() -> dict[str, Any]:
    """The compile-id fields torch puts in a record made inside the current compile."""
    import torch

    cid = torch._guards.CompileContext.current_compile_id()
    if cid is None:
        return {}
    out: dict[str, Any] = {}
    for name in ("compiled_autograd_id", "frame_id", "frame_compile_id"):
        value = getattr(cid, name, None)
        if value is not None:
            out[name] = value
    return out


def _resolve(module_name: str, path: str) -> tuple[Any, str, Any]:
    return _resolve_in(importlib.import_module(module_name), path)


def _resolve_in(owner: Any, path: str) -> tuple[Any, str, Any]:
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, name, owner.__dict__[name]


_TAP_MARK = "_cagtool_tap"  # set on every function a tap put in torch's place


class DynamoTaps:
    def __init__(self, handler: StructuredLogHandler, record_artifacts: bool = True) -> None:
        self.handler = handler
        self.record_artifacts = record_artifacts
        self._installed: list[tuple[Any, str, Any]] = []
        self._on_import: OnImport | None = None  # the modules not imported yet, tapped when they are
        self.compile_calls: Any = None  # compile_calls.CompileCalls, once installed
        self.module_hooks: Any = None  # module_hooks.LateModuleHooks, once installed

    def note_compile_calls(self) -> None:
        """The findings of the script's compile calls that compiled nothing, and of module hooks its
        compiled forwards never ran (at the end of the watch)."""
        if self.compile_calls is not None:
            self.compile_calls.note_compiled_nothing()
        if self.module_hooks is not None:
            self.module_hooks.note_not_compiled()

    # -- what each tap hands the handler ---------------------------------------------------
    def _record(self, make: Callable[[], tuple[dict[str, Any], str | None] | None]) -> None:
        try:
            made = make()
        except Exception as exc:  # noqa: BLE001 - counted like a record the handler could not read
            self.handler.errors += 1
            self.handler.last_error = f"{type(exc).__name__}: {exc}"
            return
        if made is not None:
            self.handler.handle_structured(*made)

    @staticmethod
    def _metrics(metrics: Any) -> tuple[dict[str, Any], None] | None:
        # torch names a runtime's metrics ..._runtime: no compile; a backward's bwd_: the backward
        # AOTAutograd compiled at its first call, apart from its frame's compile
        if getattr(metrics, "is_runtime", None) is True:
            return None
        if getattr(metrics, "is_forward", None) is False:
            backward = {name: getattr(metrics, name, None) for name in _BACKWARD_FIELDS}
            backward["compile_id"] = str(backward["compile_id"]) if backward["compile_id"] is not None else None
            return {BACKWARD_METRICS_KEY: backward}, None
        fields = {name: getattr(metrics, name, None) for name in _METRIC_FIELDS}
        if fields["compile_id"] is not None:
            fields["compile_id"] = str(fields["compile_id"])
        # torch hands the metrics over at the end of the compile, still inside it: the stack is
        # the compile's (the model's call, a backward, a checkpoint's recompute)
        return {
            "compilation_metrics": fields,
            PHASE_KEY: compile_phase.phase_now(str(fields["compile_id"] or "")),
            RECOMPILE_LIMIT_KEY: compile_phase.recompile_limit_now(),
            ASSUME_STATIC_KEY: compile_phase.assume_static_now(),
            FULLGRAPH_KEY: compile_phase.fullgraph_now(),
        }, None

    def _recompile_offered(self, reasons: Any, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], str] | None:
        """A frame offered to Dynamo again (its guards failed; `args`: the cache entries, the
        frame): the step tracker hears of it (an optimizer's step past the recompile limit runs
        eagerly where no hook of cagtool's is seen), then its record."""
        offered = getattr(getattr(self.handler, "steps", None), "frame_offered_again", None)
        frame = args[1] if len(args) > 1 else kwargs.get("frame")
        if offered is not None and frame is not None:
            offered(frame.f_code)
        return self._recompile(reasons, *args, **kwargs)

    @staticmethod
    def _recompile(reasons: Any, *args: Any, skip_logging: bool = False, **kwargs: Any) -> tuple[dict[str, Any], str] | None:
        import json

        if not reasons or skip_logging or (len(args) > 3 and args[3]):
            return None  # torch logs no record for this call either (a fail_on_recompile check)
        payload = reasons[0] if len(reasons) == 1 else json.dumps(list(reasons))
        metadata: dict[str, Any] = {"artifact": {"name": "recompile_reasons", "encoding": "json"}, **compile_id_metadata()}
        # The code being recompiled is not on the stack yet (Dynamo compiles a frame before it
        # runs): the innermost frame of the user's code is the line that called it, `model(x)`,
        # where the compiled frame itself may be torch's (a compiled module runs through
        # torch's own wrapper).
        caller = source.user_caller(how="caller")
        if caller is not None:
            metadata[USER_FRAME_KEY] = caller
        cid = compile_id_metadata()
        metadata[PHASE_KEY] = compile_phase.phase_now("!" if "compiled_autograd_id" in cid else "")
        return metadata, payload

    @staticmethod
    def _graph_break(tx: Any, reason: str, exc: Any) -> tuple[dict[str, Any], str]:
        """Where torch's own record says the break is (`log_graph_break`: the inlined frame's
        line with nested graph breaks, else the last frame of the user stack) and its reason."""
        import torch

        filename, line = "", 0
        if torch._dynamo.config.nested_graph_breaks and getattr(tx, "parent", None) is not None:
            filename, line = tx.f_code.co_filename, tx.lineno
        else:
            stack = getattr(exc, "real_stack", None)
            if stack is None:
                stack = torch._guards.TracingContext.extract_stack()
            if stack:
                filename, line = stack[-1].filename, stack[-1].lineno
        payload = f"Graph break in user code at {filename}:{line}\nGraph Break Reason: {reason}\n"
        return {"artifact": {"name": "dynamo_graph_break_reason", "encoding": "string"}, **compile_id_metadata()}, payload

    @staticmethod
    def _aot_backward() -> tuple[dict[str, Any], None]:
        return {"aot_backward_graph": {}, **compile_id_metadata()}, None

    def _aot_graphs(self, forward: Any, backward: Any) -> tuple[dict[str, Any], str | None] | None:
        """The AOT forward graph's record, handed over here; the backward's is returned (it is
        also the AOT-backward-graph count)."""
        ids = compile_id_metadata()
        if self.record_artifacts and isinstance(forward, str):
            self.handler.handle_structured({"aot_forward_graph": {}, **ids}, forward)
        return {"aot_backward_graph": {}, **ids}, (backward if self.record_artifacts and isinstance(backward, str) else None)

    @staticmethod
    def _stack(code: Any) -> tuple[dict[str, Any], None] | None:
        """Where the compile came from, as torch's `dynamo_start` has it: the Python stack up to
        Dynamo's entry (convert_frame), then the compiled code itself; outermost first, cagtool's
        runner left out. Walked from the frames (no source read, no traceback objects)."""
        import sys

        from torch._dynamo import convert_frame

        frames = []
        frame = sys._getframe(1)
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
        stack: list[dict[str, Any]] = []
        for f in reversed(frames):
            filename = f.f_code.co_filename
            if filename == convert_frame.__file__:
                break
            if not stack and not source.is_user_file(filename):
                continue  # cagtool's runner and runpy, before the user's first frame
            stack.append({"filename": filename, "line": f.f_lineno, "name": f.f_code.co_name})
        stack.append({"filename": code.co_filename, "line": code.co_firstlineno, "name": code.co_name})
        # The compiled function's parameters, in order (`forward(self, input, hidden)`): a size guard
        # names the parameter, which explain maps to the caller's argument (`model(data, hidden)`).
        names = list(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
        return {"dynamo_start": {"stack": stack, ARGNAMES_KEY: names}, **compile_id_metadata()}, None

    @staticmethod
    def _dynamo_graph(gm: Any) -> tuple[dict[str, Any], str]:
        # torch's own record prints it with print_readable (output_graph.py, `dynamo_output_graph`),
        # generating the code again: the code torch made to run it, with each node's tensor, instead
        return {"dynamo_output_graph": {}, **compile_id_metadata()}, graph_dump.readable_code(gm)

    @staticmethod
    def _output_code(code: Any) -> tuple[dict[str, Any], str] | None:
        return ({"inductor_output_code": {}, **compile_id_metadata()}, code) if isinstance(code, str) and code else None

    @staticmethod
    def _guards(manager: Any) -> tuple[dict[str, Any], str] | None:
        guard_manager = getattr(manager, "guard_manager", None)
        return ({"dynamo_cpp_guards_str": {}, **compile_id_metadata()}, str(guard_manager)) if guard_manager is not None else None

    # -- installation -----------------------------------------------------------------------
    def install(self) -> None:
        taps = self
        record = self._record

        def after(original: Callable[..., Any], make: Callable[..., Any]) -> Callable[..., Any]:
            def tapped(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                record(lambda: make(result, *args, **kwargs))
                return result

            tapped.__wrapped__ = original  # type: ignore[attr-defined]
            tapped.__name__ = getattr(original, "__name__", "tapped")
            tapped.__qualname__ = getattr(original, "__qualname__", tapped.__name__)
            return tapped

        def before(original: Callable[..., Any], make: Callable[..., Any]) -> Callable[..., Any]:
            def tapped(*args: Any, **kwargs: Any) -> Any:
                record(lambda: make(*args, **kwargs))
                return original(*args, **kwargs)

            tapped.__wrapped__ = original  # type: ignore[attr-defined]
            tapped.__name__ = getattr(original, "__name__", "tapped")
            tapped.__qualname__ = getattr(original, "__qualname__", tapped.__name__)
            return tapped

        def graph_break(original: Callable[..., Any]) -> Callable[..., Any]:
            def log_graph_break(tx: Any, code_options: Any, reason: str, exc: Any) -> Any:
                seen = getattr(exc, "logged", False)  # torch logs each exception's break once
                result = original(tx, code_options, reason, exc)
                if not seen:
                    record(lambda: taps._graph_break(tx, reason, exc))
                return result

            log_graph_break.__wrapped__ = original  # type: ignore[attr-defined]
            return log_graph_break

        def cached_graphs(original: Callable[..., Any]) -> Callable[..., Any]:
            def _log_cached_graphs(result_self: Any, *args: Any, **kwargs: Any) -> Any:
                out = original(result_self, *args, **kwargs)
                if getattr(result_self, "aot_backward_graph_str", None) is not None:
                    record(lambda: taps._aot_graphs(getattr(result_self, "aot_forward_graph_str", None), result_self.aot_backward_graph_str))
                return out

            _log_cached_graphs.__wrapped__ = original  # type: ignore[attr-defined]
            return _log_cached_graphs

        makers: dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
            "add_compilation_metrics_to_chromium": lambda o: after(o, lambda _r, metrics, *a, **k: taps._metrics(metrics)),
            "get_and_maybe_log_recompilation_reasons": lambda o: after(o, taps._recompile_offered),
            "InstructionTranslatorBase.log_graph_break": graph_break,
            "_log_fw_bw_graphs": lambda o: after(o, lambda result, *a, **k: taps._aot_graphs(*(result if isinstance(result, tuple) and len(result) == 2 else (None, None)))),
            "GenericAOTAutogradResult._log_cached_graphs": cached_graphs,
            "log_dynamo_start": lambda o: after(o, lambda _r, code, *a, **k: taps._stack(code)),
            "OutputGraph.call_user_compiler": lambda o: before(o, lambda _self, gm, *a, **k: taps._dynamo_graph(gm)),
            "GraphLowering._compile_to_module_lines": lambda o: after(o, lambda _r, _self, wrapper_code, *a, **k: taps._output_code(getattr(wrapper_code, "value", None))),
            "FxGraphCache.cache_hit_post_compile": lambda o: after(o, lambda result, *a, **k: taps._output_code(getattr(result[0], "source_code", None) if isinstance(result, tuple) and result else None)),
            "CheckFunctionManager.__init__": lambda o: after(o, lambda _r, manager, *a, **k: taps._guards(manager)),
        }
        from cagtool.capture.observe import global_state
        from cagtool.capture.observe.compile_calls import CompileCalls
        from cagtool.capture.observe.module_hooks import LateModuleHooks

        self._uninstall_global_state = global_state.install(self.handler)  # the thread count Dynamo guards on
        self.compile_calls = CompileCalls(self.handler)  # the script's compile calls that compile nothing
        self.compile_calls.install()
        self.module_hooks = LateModuleHooks(self.handler, self.compile_calls)  # hooks a compiled forward never runs
        self.module_hooks.install()
        installed = self._installed

        def tap(module: Any, paths: list[str]) -> None:
            for path in paths:
                try:
                    owner, name, original = _resolve_in(module, path)
                except (AttributeError, KeyError):
                    continue  # a torch without it: that record is not read (doctor says so)
                function = original.__func__ if isinstance(original, staticmethod) else original
                if getattr(function, _TAP_MARK, False):
                    # Already this tap: a module imported after the one it imports the name from
                    # (convert_frame binds guards' get_and_maybe_log_recompilation_reasons at its
                    # import) got it tapped. Not tapped twice; put back at the end all the same.
                    installed.append((owner, name, staticmethod(function.__wrapped__) if function is not original else function.__wrapped__))
                    continue
                tapped = makers[path](function)
                setattr(tapped, _TAP_MARK, True)
                setattr(owner, name, staticmethod(tapped) if function is not original else tapped)
                installed.append((owner, name, original))

        by_module: dict[str, list[str]] = {}
        for module_name, path in TAPPED + (ARTIFACT_TAPPED if self.record_artifacts else ()):
            by_module.setdefault(module_name, []).append(path)
        pending: dict[str, Callable[[ModuleType], None]] = {}
        for module_name, paths in by_module.items():
            module = sys.modules.get(module_name)
            if module is not None:
                tap(module, paths)
            else:  # tapped when torch imports it (module docstring)
                pending[module_name] = lambda module, paths=paths: tap(module, paths)
        if pending:
            self._on_import = OnImport.install(pending)

    def uninstall(self) -> None:
        on_import = self._on_import
        if on_import is not None:
            on_import.remove()
            self._on_import = None
        if getattr(self, "_uninstall_global_state", None) is not None:
            self._uninstall_global_state()
            self._uninstall_global_state = None
        if self.module_hooks is not None:
            self.module_hooks.uninstall()
        if self.compile_calls is not None:
            self.compile_calls.uninstall()
        while self._installed:
            owner, name, original = self._installed.pop()
            setattr(owner, name, original)


def install(handler: StructuredLogHandler, record_artifacts: bool = True) -> DynamoTaps:
    taps = DynamoTaps(handler, record_artifacts)
    taps.install()
    return taps
