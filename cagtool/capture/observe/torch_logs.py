"""Dynamo's side of the story in torch's structured-record shapes: compiles with their metrics,
recompiles with guard-failure reasons, graph breaks, AOT backward graphs. A live run hands these
records over from its Dynamo taps (dynamo_taps.py: no handler on `torch.__trace`); `cagtool import`
from a TORCH_TRACE log. `StructuredLogHandler` is still a logging.Handler, for a caller that wants
the records from the logger itself (tests compare the two)."""

from __future__ import annotations

import json
from collections import Counter
import os
import logging
import sys
import re
from typing import Any, Callable

from typing import TYPE_CHECKING

from cagtool.record.writer import warn
from cagtool.record.schema import (
    ARTIFACT_AOT_BACKWARD,
    ARTIFACT_STACK,
    COMPILE_ARTIFACTS,
    AotBackwardGraphEvent,
    BackwardCompileEvent,
    CompileArtifactEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    GraphBreakEvent,
)
from cagtool.torch_text import compile_id_of, graph_break_at

if TYPE_CHECKING:  # the handler reads a live run's steps, or an import's (which has none)
    from cagtool.capture.steps.tracker import StepTracker
    from cagtool.record.writer import RecordWriter

TRACE_LOGGER = "torch.__trace"
# cagtool's own key in a record's metadata: the user's line behind a recompile (a SourceRef), put
# there by the live run's Dynamo tap or, for an imported log, from the stack torch logged with the
# compile (`dynamo_start`). Torch's records never have it.
USER_FRAME_KEY = "cagtool_user_frame"
# cagtool's keys for what the live run's taps read at compile time: the compile's phase (a
# CompilePhase, capture/observe/compile_phase.py) and torch._dynamo.config.recompile_limit.
PHASE_KEY = "cagtool_phase"
RECOMPILE_LIMIT_KEY = "cagtool_recompile_limit"
ASSUME_STATIC_KEY = "cagtool_assume_static_by_default"  # torch._dynamo.config's, at compile time
FULLGRAPH_KEY = "cagtool_fullgraph"  # a graph break is an error in this compile (compile_phase.fullgraph_now)
# Where Dynamo's wrapper around a module whose forward it skips lives (`wrap_inline`'s `inner`):
# torch.compile(module) compiles that frame for nn.Sequential or nn.Linear (docs/torch-internals.md,
# "A compile call that compiles nothing").
WRAPPER_FILE = os.path.join("_dynamo", "external_utils.py")
ARGNAMES_KEY = "cagtool_argnames"  # in `dynamo_start`: the compiled code's parameters, in order
_US = 1e-6
# torch's name for a backward's compilation metrics in a TORCH_TRACE log, used for the live tap's too
BACKWARD_METRICS_KEY = "bwd_compilation_metrics"


# torch's profile-guided (PGO) suggestion after a shape recompile, in its own words: the tail that
# `render_code_state` (torch/_dynamo/pgo.py) adds to the code state it logs, e.g.
#   PGO detected a recompilation due to dynamic shapes. To reduce shape recompilations by compiling
#   dynamically to start, set environment variable TORCH_COMPILE_DYNAMIC_SOURCES="L['args'][0]"
PGO_SUGGESTION_START = "PGO detected a recompilation due to dynamic shapes."
# The structured artifacts whose payload is that rendered code state.
PGO_CODE_STATE_ARTIFACTS = frozenset({
    "put_local_code_state", "put_remote_code_state", "get_local_code_state", "get_remote_code_state", "get_extra_remote_code_state",
})


def pgo_suggestion_of(code_state_text: str) -> str | None:
    """torch's suggestion, verbatim, from a rendered code state; None when it makes none."""
    start = code_state_text.find(PGO_SUGGESTION_START)
    return code_state_text[start:].strip() if start >= 0 else None


_PGO_SOURCES = re.compile(r'TORCH_COMPILE_DYNAMIC_SOURCES="(?P<sources>[^"]*)"')


def pgo_dynamic_sources(suggestion: str) -> str | None:
    """The value torch's suggestion sets TORCH_COMPILE_DYNAMIC_SOURCES to, as it wrote it."""
    match = _PGO_SOURCES.search(suggestion)
    return match.group("sources") if match and match.group("sources") else None


def pgo_suggestion() -> str | None:
    """What torch's PGO would suggest for this process's recompiles so far, in its own words.
    torch logs it only when it writes a profile (a job id or a MAST job: `get_cache_key`), so it is
    asked for here, at the end of the mode: `render_code_state` on the code state Dynamo kept
    (`_CODE_STATE`), which only reads it. None when Dynamo never compiled or nothing went dynamic."""
    try:
        from torch._dynamo import pgo

        state = getattr(pgo, "_CODE_STATE", None)
        return pgo_suggestion_of(pgo.render_code_state(state)) if state else None
    except Exception:  # noqa: BLE001 - a torch without it, or a changed layout: nothing to say
        return None


# torch's structured records whose payload is one of a compile's artifacts (tlparse's per-compile
# pages); the AOT backward graph and the stack are read above with their own events.
_ARTIFACT_RECORDS = frozenset(COMPILE_ARTIFACTS) - {ARTIFACT_AOT_BACKWARD, ARTIFACT_STACK}


def format_stack(stack: list[Any]) -> str:
    """A compile's stack (torch's `dynamo_start` frames: filename, line, name; outermost first) as
    Python prints a traceback, each frame with its source line where the file can be read."""
    import linecache

    lines = []
    for frame in stack:
        if not isinstance(frame, dict):
            continue
        file, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
        lines.append(f'  File "{file}", line {line}, in {name}')
        code = linecache.getline(str(file), line).strip() if isinstance(line, int) else ""
        if code:
            lines.append(f"    {code}")
    return "\n".join(lines) + "\n"


def _seconds(value: Any, scale: float = 1.0) -> float | None:
    return float(value) * scale if isinstance(value, (int, float)) else None


class StructuredLogHandler(logging.Handler):
    def __init__(self, writer: "RecordWriter", steps: "StepTracker") -> None:
        super().__init__(level=logging.DEBUG)
        self.writer = writer
        self.steps = steps
        self.errors = 0  # records that could not be turned into events (kept in the manifest)
        # Dynamo's compiles of the job's frames seen so far, per code (its file, its first line);
        # compiled autograd's graphs not counted (compile_calls.py).
        self.code_compiles: Counter[tuple[str, int]] = Counter()
        self.last_error = ""
        self.pgo_suggestion: str | None = None  # torch's, from a logged code state (a TORCH_TRACE log)
        self._argnames: dict[str, list[str]] = {}  # compile id -> its code's parameters, until its metrics come

    def emit(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        if not isinstance(metadata, dict):
            return
        self.handle_structured(metadata, getattr(record, "payload", None))  # never raises: the target's compile goes on

    def handle_structured(self, metadata: dict[str, Any], payload: str | None) -> None:
        """One structured record, from a live run (`emit`) or read back from a TORCH_TRACE log
        (trace_import); errors are counted, never raised."""
        try:
            self._handle(metadata, payload)
        except Exception as exc:  # noqa: BLE001 - one bad record never stops the rest
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"

    def _handle(self, metadata: dict[str, Any], payload: str | None) -> None:
        # A compile's records are stamped with the step its frame's work belongs to (an optimizer's
        # step() compiled after the step ended at its backward: StepTracker.step_of_compile).
        metrics = metadata.get("compilation_metrics") or metadata.get(BACKWARD_METRICS_KEY)
        cid = str(metrics.get("compile_id") or "") if isinstance(metrics, dict) else compile_id_of(metadata)  # the metrics hold theirs
        step = self.steps.step_of_compile(cid)
        if "compilation_metrics" in metadata:
            self._compile(metadata["compilation_metrics"], step, metadata.get(PHASE_KEY), metadata.get(RECOMPILE_LIMIT_KEY),
                          metadata.get(ASSUME_STATIC_KEY), metadata.get(FULLGRAPH_KEY))
        elif isinstance(metadata.get(BACKWARD_METRICS_KEY), dict):
            m = metadata[BACKWARD_METRICS_KEY]
            self.writer.emit(BackwardCompileEvent, compile_id=cid, step=step,
                             compile_time_s=_seconds(m.get("backward_cumulative_compile_time_us"), _US),
                             inductor_compile_time_s=_seconds(m.get("inductor_compile_time_s")),
                             fail_type=str(m["fail_type"]) if m.get("fail_type") else None)
        elif "aot_backward_graph" in metadata:
            self.writer.emit(AotBackwardGraphEvent, compile_id=cid, step=step)
            if payload:
                self._artifact(cid, ARTIFACT_AOT_BACKWARD, payload, step)
        elif ARTIFACT_STACK in metadata:
            names = (metadata[ARTIFACT_STACK] or {}).get(ARGNAMES_KEY)
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                self._argnames[cid] = names
            stack = (metadata[ARTIFACT_STACK] or {}).get("stack")
            if isinstance(stack, list) and stack:
                self._artifact(cid, ARTIFACT_STACK, format_stack(stack), step)
        elif _ARTIFACT_RECORDS.intersection(metadata):
            if payload:
                self._artifact(cid, next(k for k in COMPILE_ARTIFACTS if k in metadata), payload, step)
        elif "artifact" in metadata:
            name = metadata["artifact"].get("name")
            if name == "recompile_reasons" and payload:
                try:
                    reasons = json.loads(payload)
                except (ValueError, RecursionError):
                    reasons = [payload]  # torch logs a single reason as a plain string (guards.py)
                self.writer.emit(
                    DynamoRecompileEvent,
                    compile_id=cid,
                    is_ca_graph=cid.startswith("!"),
                    step=step,
                    reasons=[str(r) for r in reasons] if isinstance(reasons, list) else [str(reasons)],
                    source=metadata.get(USER_FRAME_KEY),
                    phase=metadata.get(PHASE_KEY),
                )
            elif name == "dynamo_graph_break_reason" and payload:
                self._graph_break(cid, payload, step)
            elif name in PGO_CODE_STATE_ARTIFACTS and payload:
                self.pgo_suggestion = pgo_suggestion_of(payload) or self.pgo_suggestion

    def _artifact(self, cid: str, artifact: str, text: str, step: int | None) -> None:
        write = getattr(self.writer, "write_artifact", None)
        rel = write(cid, artifact, text) if write is not None else ""
        if rel:
            self.writer.emit(CompileArtifactEvent, compile_id=cid, artifact=artifact, file=rel, step=step, lines=text.count("\n") + 1)

    def _compile(self, m: dict[str, Any], step: int | None, phase: Any = None, recompile_limit: int | None = None,
                 assume_static: bool | None = None, fullgraph: bool | None = None) -> None:
        cid = str(m.get("compile_id") or "?")
        if not cid.startswith("!"):
            line = m.get("co_firstlineno")
            self.code_compiles[(str(m.get("co_filename") or ""), line if isinstance(line, int) else 0)] += 1
        total = _seconds(m.get("entire_frame_compile_time_s"))
        self.writer.emit(
            DynamoCompileEvent,
            compile_id=cid,
            is_ca_graph=cid.startswith("!"),
            step=step,
            co_name=str(m.get("co_name") or ""),
            co_filename=str(m.get("co_filename") or ""),
            co_firstlineno=m.get("co_firstlineno"),
            co_argnames=self._argnames.pop(cid, None),
            entire_frame_compile_time_s=total,
            backend_compile_time_s=_seconds(m.get("backend_compile_time_s")),
            inductor_compile_time_s=_seconds(m.get("inductor_compile_time_s")),
            dynamo_cumulative_compile_time_s=_seconds(m.get("dynamo_cumulative_compile_time_us"), _US),
            aot_autograd_cumulative_compile_time_s=_seconds(m.get("aot_autograd_cumulative_compile_time_us"), _US),
            inductor_cumulative_compile_time_s=_seconds(m.get("inductor_cumulative_compile_time_us"), _US),
            graph_op_count=m.get("graph_op_count"),
            guard_count=m.get("guard_count"),
            fail_type=m.get("fail_type"),
            fail_reason=(str(m["fail_reason"])[:2000] if m.get("fail_reason") else None),
            has_guarded_code=m.get("has_guarded_code"),
            phase=phase,
            recompile_limit=recompile_limit,
            assume_static_by_default=assume_static,
            fullgraph=fullgraph if isinstance(fullgraph, bool) else None,
        )
        self.steps.note_dynamo_compile(total or 0.0, str(m.get("co_filename") or ""), cid)

    def _graph_break(self, cid: str, payload: str, step: int | None) -> None:
        lines = [l for l in payload.splitlines() if l.strip()]
        where = graph_break_at(payload)
        reason_lines = [l for l in lines if not l.startswith("Graph break in user code")][:4]
        reason = "\n".join(reason_lines).replace("Graph Break Reason: ", "", 1)
        file, line = where if where else ("", None)
        code = rest = ""
        if file and line:
            import linecache

            code = linecache.getline(file, line).strip()
            rest = _call_rest(file, line, code)
        self.writer.emit(GraphBreakEvent, compile_id=cid, step=step, reason=reason, file=file, line=line, code=code, rest=rest)


def guard_trace_output(on_stop: Callable[[dict[str, Any]], None]) -> None:
    """torch's TORCH_TRACE handler writes from inside the script's compiles: a write error there
    (disk full) would print a logging traceback per record, or raise from the handler's file
    creation into the script. Make the first error stop trace output, with one line."""
    try:
        from torch._logging import _internal
    except ImportError:
        return
    handler = getattr(_internal, "LOG_TRACE_HANDLER", None)
    if handler is None:
        return
    original_emit = handler.emit
    state = {"stopped": False}

    def stop(exc: BaseException | None) -> None:
        if state["stopped"]:
            return
        state["stopped"] = True
        path = str(getattr(handler, "_stream_path", "") or "")
        logging.getLogger(TRACE_LOGGER).removeHandler(handler)
        try:
            handler.close()
        except Exception:  # noqa: BLE001 - it is being given up
            pass
        reason = f"{getattr(exc, 'strerror', None) or exc}"
        on_stop({"error": reason, "file": path})
        warn(f"TORCH_TRACE output stopped: {reason}; the script goes on, the trace up to here stays readable")

    def guarded_emit(record: logging.LogRecord) -> None:
        if state["stopped"]:
            return
        try:
            original_emit(record)
        except Exception as exc:  # noqa: BLE001 - opening the trace file failed
            stop(exc)

    def quiet_handle_error(record: logging.LogRecord) -> None:
        stop(sys.exc_info()[1])  # StreamHandler.emit caught a write error

    handler.emit = guarded_emit
    handler.handleError = quiet_handle_error


# A call left open at a graph break's line is read on, this many lines at most (GraphBreakEvent.rest).
CALL_LINES = 4


def _call_rest(file: str, line: int, code: str) -> str:
    """The lines where a call opened at `line` goes on (`logger.warning_once(` then its message's
    f-strings), joined, until its parentheses close or CALL_LINES lines; "" where `code` opens none."""
    import linecache

    depth = code.count("(") - code.count(")")
    if depth <= 0:
        return ""
    taken = []
    for n in range(line + 1, line + 1 + CALL_LINES):
        text = linecache.getline(file, n).strip()
        if not text:
            break
        taken.append(text)
        depth += text.count("(") - text.count(")")
        if depth <= 0:
            break
    return " ".join(taken)[:400]
