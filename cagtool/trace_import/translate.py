"""Turns the envelopes of one process's trace log into the events of one mode record.

Dynamo's side (compiles with per-phase metrics, recompiles with guard-failure reasons, graph
breaks, AOT backward graphs) goes through the same translation as a live run
(capture/torch_logs.StructuredLogHandler). Compiled autograd's side is rebuilt here: each
`compiled_autograd_graph` becomes graphs/ca_<N>.py (the logged code, verbatim) and ca_<N>.json
(its nodes, read back from the code) and a `ca_graph` event; its cache miss comes from
`compiled_autograd_compile_reasons` when the job logged them, otherwise it is inferred from the
diff with the previous graph and says so. Capture time is torch's own `compiled_autograd`
chromium span. Event times are the log's timestamps, relative to its first envelope.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import msgspec

from cagtool.capture.observe.graph_dump import GraphSummary
from cagtool.capture.observe.torch_logs import PGO_CODE_STATE_ARTIFACTS, USER_FRAME_KEY, StructuredLogHandler
from cagtool.errors import UnreadableInput
from cagtool.record.bounds import bounded_fields, figure_problem
from cagtool.record.writer import RecordWriter
from cagtool.record.schema import CacheMissEvent, CAGraphEvent, ChangedSize, Event, SourceRef
from cagtool.torch_text import compile_id_of, looks_like_user_file, parse_miss, split_ca_reason
from cagtool.trace_import.graph_code import parse_graph_code
from cagtool.trace_import.infer import infer_miss
from cagtool.trace_import.log_reader import Envelope

# The envelopes an import reads; every other kind is only counted.
# `str` (the log's table of file names) and `dynamo_start` (the stack of a compile) name the user's
# line behind a recompile.
WANTED_KINDS = frozenset(
    {"compilation_metrics", "aot_backward_graph", "artifact", "compiled_autograd_graph", "chromium_event", "str", "dynamo_start"}
)
_ARTIFACTS = frozenset({"recompile_reasons", "dynamo_graph_break_reason", "compiled_autograd_compile_reasons", "torch_version", *PGO_CODE_STATE_ARTIFACTS})
_CA_SPAN = '"name": "compiled_autograd",'
# Of the chromium events (a fifth of a log's envelopes) only compiled autograd's span is read.
PEEK = {"chromium_event": _CA_SPAN.encode()}


class _NoSteps:
    """An imported log has no step boundaries: every event's step is unknown (None)."""

    current_step: int | None = None

    def step_of_compile(self, compile_id: str) -> int | None:
        return None

    def note_dynamo_compile(self, seconds: float, filename: str = "", compile_id: str = "") -> None:
        pass


class _LogTimeWriter:
    """The record writer, with each event stamped with the log's time instead of the clock's, and
    each figure checked against the range the loader reads (record/bounds.py): a log is a text
    anyone can write, and a compile time of 1e308 s or NaN written into the record would be read
    back as one (or refuse the record). Such a figure is left unknown and counted, as a bad line of
    the log is skipped and counted (with strict, RankTranslator makes it an error: an exception
    raised here would be one more error the structured-log handler counts)."""

    def __init__(self, writer: RecordWriter, stats: "TranslationStats") -> None:
        self.writer = writer
        self.stats = stats
        self.t = 0.0
        self.where = ""  # the envelope being translated ("<log>: line N"), for the note and the error

    def emit(self, event_cls: type[Event], **fields: Any) -> Event:
        fields["t"] = self.t
        for name, bound in bounded_fields(event_cls).items():
            problem = figure_problem(fields.get(name), bound)
            if problem is None:
                continue
            self.stats.bad_figures += 1
            self.stats.first_bad_figure = self.stats.first_bad_figure or f"{self.where}: {event_cls.kind} {name} {problem}"
            fields[name] = None if _defaults(event_cls).get(name, 0.0) is None else 0.0
        return self.writer.emit(event_cls, **fields)


@cache
def _defaults(cls: type[Event]) -> dict[str, Any]:
    """The event class's fields' defaults: a bad figure of a field whose default is None is left
    None (unknown); of any other, 0.0 (what import writes where the log has no figure)."""
    return {f.name: f.default for f in msgspec.structs.fields(cls) if f.default is not msgspec.NODEFAULT}


@dataclass
class _PendingGraph:
    torch_id: int
    record_id: int
    summary: GraphSummary
    code_file: str
    nodes_file: str
    t: float
    capture_s: float = 0.0


@dataclass
class TranslationStats:
    ca_graphs: int = 0
    reasons_logged: int = 0  # CA misses read from torch's compile reasons
    reasons_inferred: int = 0  # CA misses inferred from the graph diff
    torch_version: str = ""
    first_ts: float | None = None
    last_ts: float | None = None
    handler_errors: int = 0
    handler_last_error: str = ""
    # Figures out of the range the loader reads (a NaN or 1e308 s compile time), left unknown; the first, in words.
    bad_figures: int = 0
    first_bad_figure: str = ""
    pgo_suggestion: str | None = None  # torch's PGO suggestion from a logged code state
    unused_reasons: list[str] = field(default_factory=list)


class GraphCache:
    """Parsed graphs by their payload's md5 (torch's has_payload): ranks of one job, and a job
    that resets Dynamo, log the same graph code again; it is parsed once. Bounded."""

    def __init__(self, size: int = 128) -> None:
        self.size = size
        self._parsed: dict[str, GraphSummary] = {}
        self.hits = 0

    def parse(self, code: str, digest: object) -> GraphSummary:
        if not isinstance(digest, str):
            return parse_graph_code(code)
        found = self._parsed.get(digest)
        if found is not None:
            self.hits += 1
            return found
        summary = parse_graph_code(code)
        if len(self._parsed) >= self.size:
            self._parsed.pop(next(iter(self._parsed)))
        self._parsed[digest] = summary
        return summary


class RankTranslator:
    """Feed every envelope of one process's log (in order), then call `finish()`."""

    def __init__(self, writer: RecordWriter, year: int, graph_cache: "GraphCache | None" = None, strict: bool = False) -> None:
        self.writer = writer
        self.stats = TranslationStats()
        self.strict = strict
        self.timed = _LogTimeWriter(writer, self.stats)
        self.handler = StructuredLogHandler(self.timed, _NoSteps())  # type: ignore[arg-type]
        self.year = year
        self.log = ""  # the log file being fed, named in what a bad figure says
        self._reasons: dict[int, str] = {}  # torch CA id -> its newest logged reason
        self._span_start: dict[int, float] = {}  # torch CA id -> `compiled_autograd` span begin (us)
        self._pending: _PendingGraph | None = None
        self._previous: GraphSummary | None = None
        self._seen_ids: set[int] = set()
        self._graph_cache = graph_cache if graph_cache is not None else GraphCache()
        self._next_record_id = 0
        self._files: dict[int, str] = {}  # the log's string table: index -> file name
        # A recompile's reasons come just before the `dynamo_start` of the compile they caused, whose
        # stack names the user's line: they wait for it (and go without it on any other envelope).
        self._held_recompile: tuple[Envelope, float] | None = None

    def feed(self, envelope: Envelope) -> None:
        self.timed.where = f"{self.log}: line {envelope.line}" if self.log else f"line {envelope.line}"
        self._feed(envelope)
        self._refuse_if_strict()

    def _refuse_if_strict(self) -> None:
        if self.strict and self.stats.bad_figures:
            raise UnreadableInput(f"{self.stats.first_bad_figure} (--strict)")

    def _feed(self, envelope: Envelope) -> None:
        kind = envelope.kind
        if kind == "chromium_event":
            self._chromium(envelope)
            return
        if kind == "str":
            self._string(envelope)
            return
        if kind == "artifact" and envelope.artifact_name not in _ARTIFACTS:
            return
        if kind == "dynamo_start":
            self._release_recompile(envelope)
            return
        self._release_recompile(None)
        self._stamp(envelope)
        if kind == "artifact" and envelope.artifact_name == "recompile_reasons":
            self._held_recompile = (envelope, self.timed.t)
        elif kind == "compiled_autograd_graph":
            self._graph(envelope)
        elif kind == "artifact" and envelope.artifact_name == "compiled_autograd_compile_reasons":
            self._compile_reasons(envelope)
        elif kind == "artifact" and envelope.artifact_name == "torch_version":
            try:
                self.stats.torch_version = str(json.loads(envelope.payload or "{}").get("pytorch_version", ""))
            except (ValueError, AttributeError, RecursionError):
                pass
        else:
            self.handler.handle_structured(envelope.data, envelope.payload)

    def finish(self) -> None:
        self._release_recompile(None)
        self._flush_graph()
        self._refuse_if_strict()
        self.stats.handler_errors = self.handler.errors
        self.stats.handler_last_error = self.handler.last_error
        self.stats.pgo_suggestion = self.handler.pgo_suggestion

    # -- the user's line behind a recompile ------------------------------------------------------
    def _string(self, envelope: Envelope) -> None:
        entry = envelope.data.get("str")
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], int):
            self._files[entry[1]] = entry[0]

    def _caller(self, start: Envelope) -> SourceRef | None:
        """The innermost user frame of a compile's stack, the compiled frame itself left out (the
        last entry): the line that called the recompiled code. None when torch logged no caller
        (a top-level compiled function's stack is that function alone)."""
        stack = (start.data.get("dynamo_start") or {}).get("stack")
        if not isinstance(stack, list):
            return None
        for frame in reversed(stack[:-1]):
            if not isinstance(frame, dict):
                continue
            file = self._files.get(frame.get("filename"))  # type: ignore[arg-type]
            line = frame.get("line")
            if file and isinstance(line, int) and looks_like_user_file(file):
                return SourceRef(file=file, line=line, code=str(frame.get("loc") or ""), function=str(frame.get("name") or ""), how="caller")
        return None

    def _release_recompile(self, start: Envelope | None) -> None:
        """Hand the held recompile to the handler, with the user's line when `start` is the
        `dynamo_start` of the compile it caused."""
        held, self._held_recompile = self._held_recompile, None
        if held is None:
            return
        envelope, t = held
        metadata = dict(envelope.data)
        if start is not None and compile_id_of(start.data) == compile_id_of(envelope.data):
            caller = self._caller(start)
            if caller is not None:
                metadata[USER_FRAME_KEY] = caller
        saved, self.timed.t = self.timed.t, t
        self.handler.handle_structured(metadata, envelope.payload)
        self.timed.t = saved

    # -- time -----------------------------------------------------------------------------------
    def _stamp(self, envelope: Envelope) -> None:
        ts = envelope.timestamp(self.year)
        if ts is None:
            return
        if self.stats.first_ts is None:
            self.stats.first_ts = ts
        self.stats.last_ts = ts
        self.timed.t = max(ts - self.stats.first_ts, 0.0)

    # -- compiled autograd ------------------------------------------------------------------------
    def _chromium(self, envelope: Envelope) -> None:
        payload = envelope.payload or ""
        if _CA_SPAN not in payload[:80]:
            return
        try:
            event = json.loads(payload)
            graph_id = int(event["args"]["graph_id"])
            ts = float(event["ts"])
        except (ValueError, KeyError, TypeError, RecursionError):
            return
        if event.get("ph") == "B":
            self._span_start[graph_id] = ts
        elif event.get("ph") == "E":
            start = self._span_start.pop(graph_id, None)
            pending = self._pending
            if pending is not None and pending.torch_id == graph_id and start is not None:
                pending.capture_s = max(ts - start, 0.0) / 1e6
            if pending is not None and pending.torch_id == graph_id:
                self._flush_graph()

    def _compile_reasons(self, envelope: Envelope) -> None:
        try:
            reasons = json.loads(envelope.payload or "[]")
        except (ValueError, RecursionError):
            return
        if not isinstance(reasons, list):
            return
        # The list accumulates per cache node; each entry names its graph ("!6: Cache miss ...").
        for reason in reasons:
            named, text = split_ca_reason(str(reason))
            if named is not None:
                self._reasons[named] = text
        ca_id = envelope.data.get("compiled_autograd_id")
        if isinstance(ca_id, int) and ca_id not in self._reasons and reasons:
            self._reasons[ca_id] = split_ca_reason(str(reasons[-1]))[1]

    def _record_id(self, torch_id: int) -> int:
        """torch restarts ids after torch._dynamo.reset() (and a concatenated log repeats them):
        the record keeps its ids unique, as a live capture does."""
        record_id = torch_id if torch_id not in self._seen_ids and torch_id >= self._next_record_id else self._next_record_id
        self._seen_ids.add(torch_id)
        self._next_record_id = max(self._next_record_id, record_id + 1)
        return record_id

    def _graph(self, envelope: Envelope) -> None:
        self._flush_graph()
        code = envelope.payload or ""
        torch_id = envelope.data.get("compiled_autograd_id")
        if not isinstance(torch_id, int):
            return
        record_id = self._record_id(torch_id)
        summary = self._graph_cache.parse(code, envelope.data.get("has_payload"))
        code_rel, nodes_rel = self.writer.write_graph(record_id, f"!{torch_id}", code + "\n", summary.nodes)
        self._emit_miss(torch_id, record_id, summary)
        self._pending = _PendingGraph(torch_id, record_id, summary, code_rel, nodes_rel, self.timed.t)

    def _emit_miss(self, torch_id: int, record_id: int, summary: GraphSummary) -> None:
        message = self._reasons.pop(torch_id, None)
        if message is not None:
            self.stats.reasons_logged += 1
            parsed = parse_miss(message)
            indices = parsed.pop("indices", [])
            self.timed.emit(
                CacheMissEvent,
                ca_id=record_id,
                compile_id=f"!{torch_id}",
                step=None,
                message=message,
                changed_sizes=[ChangedSize(index=i) for i in indices],
                **parsed,
            )
        else:
            self.stats.reasons_inferred += 1
            inferred = infer_miss(self._previous, summary)
            self.timed.emit(
                CacheMissEvent,
                ca_id=record_id,
                compile_id=f"!{torch_id}",
                step=None,
                miss_kind=inferred.miss_kind,
                message=inferred.message,
                node=inferred.node,
                node_call=inferred.node_call,
                changed_sizes=inferred.changed_sizes,
                total_changed=inferred.total_changed,
                inferred=True,
            )
        self._previous = summary

    def _flush_graph(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        s = pending.summary
        saved_t = self.timed.t
        self.timed.t = pending.t
        self.timed.emit(
            CAGraphEvent,
            ca_id=pending.record_id,
            compile_id=f"!{pending.torch_id}",
            step=None,
            node_count=len(s.nodes),
            op_histogram=s.op_histogram,
            autograd_nodes=s.autograd_nodes,
            aot_ids=s.aot_ids,
            hooks=s.hooks,
            num_sizes=s.num_sizes,
            capture_s=pending.capture_s,
            code_file=pending.code_file,
            nodes_file=pending.nodes_file,
            compiler="unknown (imported)",
        )
        self.timed.t = saved_t
        self.stats.ca_graphs += 1
