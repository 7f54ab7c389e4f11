"""Every recompile of a mode record, one row each: pure functions of the record, no rendering.

Three sources of recompiles are kept apart, with the ids torch prints:
- `ca_cache_miss`: compiled autograd missed its cache and captured graph `!N`;
- `dynamo_frame`: Dynamo recompiled a forward frame (`F/C`) because a guard failed;
- `dynamo_ca_graph`: Dynamo recompiled the code of a CA graph (`!N/F/C`) because a guard failed.
The first CA capture of a mode (the lowest `!N`, normally `!0`, a miss on GraphRoot) is the
initial compile: it is kept as a row with `initial=True` and never counted as a recompile.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import (
    MISS_UNKNOWN,
    CacheMissEvent,
    CAGraphEvent,
    ChangedSize,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    FindingEvent,
    SourceRef,
    StepEvent,
)

SOURCE_CA = "ca_cache_miss"
SOURCE_DYNAMO_FRAME = "dynamo_frame"
SOURCE_DYNAMO_CA_GRAPH = "dynamo_ca_graph"
KIND_GUARD = "guard_failure"
GRAPH_ROOT = "torch::autograd::GraphRoot"

# `File "/x/train.py", line 10, in f` followed by the code line, as in Dynamo's recompile reasons.
_USER_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>[^\n]*)')
_LIMIT = re.compile(r"exceeding the (?P<type>\w*recompile_limit) cache size limit \(currently set to (?P<value>\d+)\)")
_LIMIT_LOG = re.compile(r"hit config\.(?P<type>\w*recompile_limit) \((?P<value>\d+)\)")


@dataclass(frozen=True)
class RecompileRow:
    """One recompile (or the initial CA capture). `seqs` are the events it was read from."""

    mode: str
    source: str  # SOURCE_CA | SOURCE_DYNAMO_FRAME | SOURCE_DYNAMO_CA_GRAPH
    compile_id: str  # the id of what was (re)compiled: "!3", "0/2", "!0/1/1"
    step: int | None
    kind: str  # new_node | changed_shapes | unknown | guard_failure
    seqs: tuple[int, ...]
    initial: bool = False
    ca_id: int | None = None
    node: str | None = None
    node_call: int | None = None
    key_size: int | None = None
    previous_key_sizes: tuple[int, ...] = ()
    changed_sizes: tuple[ChangedSize, ...] = ()
    total_changed: int | None = None
    messages: tuple[str, ...] = ()  # torch's reasons, verbatim (CA message or Dynamo guard failures)
    user_source: SourceRef | None = None
    produced: str | None = None  # the graph this recompile produced: "!N" or the Dynamo compile id

    @property
    def seq(self) -> int:
        return self.seqs[0] if self.seqs else -1

    @property
    def failing_guard(self) -> str | None:
        """The first guard-failure line of a Dynamo recompile (the newest cache entry's), verbatim."""
        if self.kind != KIND_GUARD or not self.messages:
            return None
        return self.messages[0].splitlines()[0].strip() if self.messages[0].strip() else None


@dataclass(frozen=True)
class LimitHit:
    """Dynamo gave up compiling a frame: it runs without compiling (eager) from then on."""

    mode: str
    compile_id: str
    step: int | None
    seq: int
    limit_type: str  # recompile_limit | accumulated_recompile_limit
    limit_value: int | None
    function: str = ""
    file: str = ""
    line: int | None = None


@dataclass
class RecompileTable:
    """The processed view of one mode: rows in record order, plus what the explanation needs."""

    mode: str
    rows: list[RecompileRow]  # initial capture(s) and recompiles, in event order
    steps: int  # steps recorded (top-level backwards)
    last_step: int | None
    limit_hits: list[LimitHit] = field(default_factory=list)
    graphs: dict[int, CAGraphEvent] = field(default_factory=dict)  # ca_id -> graph
    cwd: str = ""
    skipped_lines: int = 0
    unknown_kinds: dict[str, int] = field(default_factory=dict)
    status: str = ""

    @property
    def recompiles(self) -> list[RecompileRow]:
        return [r for r in self.rows if not r.initial]

    @property
    def initial(self) -> list[RecompileRow]:
        return [r for r in self.rows if r.initial]

    def count(self, source: str | None = None) -> int:
        return sum(1 for r in self.rows if not r.initial and (source is None or r.source == source))


def display_path(path: str, cwd: str) -> str:
    """A path relative to the run's working directory when it is inside it (stable across machines)."""
    if not path or not cwd or not os.path.isabs(path):
        return path
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _user_frame_from_reasons(reasons: list[str]) -> SourceRef | None:
    """The last user frame Dynamo names in its 'User stack trace' (the line that installed the guard)."""
    found = list(_USER_FRAME.finditer("\n".join(reasons)))
    if not found:
        return None
    match = found[-1]
    return SourceRef(
        file=match["file"], line=int(match["line"]), code=match["code"].strip(), function=match["func"], how="guard"
    )


def _limit_from_text(text: str) -> tuple[str, int | None] | None:
    match = _LIMIT.search(text) or _LIMIT_LOG.search(text)
    if match:
        return match["type"], int(match["value"])
    if "recompile limit exceeded" in text.lower() or "recompile_limit" in text:
        kind = "accumulated_recompile_limit" if "accumulated" in text else "recompile_limit"
        return kind, None
    return None


def _ca_rows(record: ModeRecord, misses: list[CacheMissEvent], graphs: dict[int, CAGraphEvent]) -> list[RecompileRow]:
    """One row per CA capture id: its miss event(s), or the graph alone when no reason was recorded."""
    by_id: dict[int, list[CacheMissEvent]] = {}
    for miss in misses:
        by_id.setdefault(miss.ca_id, []).append(miss)
    ids = sorted(set(by_id) | set(graphs))
    first_id = ids[0] if ids else None
    rows: list[RecompileRow] = []
    for ca_id in ids:
        events = by_id.get(ca_id, [])
        graph = graphs.get(ca_id)
        produced = f"!{ca_id}" if graph is not None else None
        if not events:
            rows.append(
                RecompileRow(
                    mode=record.mode,
                    source=SOURCE_CA,
                    compile_id=graph.compile_id or f"!{ca_id}",
                    step=graph.step,
                    kind=MISS_UNKNOWN,
                    seqs=(graph.seq,),
                    initial=ca_id == first_id,
                    ca_id=ca_id,
                    produced=produced,
                )
            )
            continue
        main = events[0]
        rows.append(
            RecompileRow(
                mode=record.mode,
                source=SOURCE_CA,
                compile_id=main.compile_id or f"!{ca_id}",
                step=main.step,
                kind=main.miss_kind,
                seqs=tuple(e.seq for e in events),
                initial=ca_id == first_id,
                ca_id=ca_id,
                node=main.node,
                node_call=main.node_call,
                key_size=main.key_size,
                previous_key_sizes=tuple(main.previous_key_sizes),
                changed_sizes=tuple(c for e in events for c in e.changed_sizes),
                total_changed=main.total_changed,
                messages=tuple(e.message for e in events),
                user_source=main.source or main.backward_call,
                produced=produced,
            )
        )
    return rows


_COMPILE_ID = re.compile(r"^(?:!(?P<ca>\d+)/)?(?P<frame>\d+)/(?P<attempt>\d+)$")


def compile_attempt(compile_id: str) -> int | None:
    """C of `F/C` or `!N/F/C`: 0 for a first compile, >0 for a recompile of the same frame."""
    match = _COMPILE_ID.match(compile_id or "")
    return int(match["attempt"]) if match else None


def forward_step(step: int | None) -> int:
    """The step a forward-frame compile belongs to. The capture stamps Dynamo events with the step
    last begun (None before the first backward), but a forward frame runs before its step's
    backward, so its compile belongs to the next step."""
    return (step or 0) + 1


def _dynamo_rows(record: ModeRecord, compile_events: list[DynamoCompileEvent]) -> list[RecompileRow]:
    """Dynamo recompiles: one per `dynamo_recompile` event, plus compiles with attempt > 0 that have
    none (their guard-failure reason was not recorded, but the recompile happened)."""
    compiles = {c.compile_id: c for c in compile_events}
    recompile_events = record.of(DynamoRecompileEvent)
    seen = {e.compile_id for e in recompile_events}
    rows = []
    for event in recompile_events:
        source = _user_frame_from_reasons(event.reasons)
        compiled = compiles.get(event.compile_id)
        if source is None and compiled is not None and compiled.co_filename and not event.is_ca_graph:
            source = SourceRef(
                file=compiled.co_filename, line=compiled.co_firstlineno or 0, function=compiled.co_name, how="compiled_frame"
            )
        rows.append(_dynamo_row(record.mode, event.compile_id, event.is_ca_graph, event.step, event.seq, tuple(event.reasons), source))
    for event in compile_events:
        attempt = compile_attempt(event.compile_id)
        if not attempt or event.compile_id in seen:
            continue
        seen.add(event.compile_id)
        source = None
        if event.co_filename and not event.is_ca_graph:
            source = SourceRef(file=event.co_filename, line=event.co_firstlineno or 0, function=event.co_name, how="compiled_frame")
        rows.append(_dynamo_row(record.mode, event.compile_id, event.is_ca_graph, event.step, event.seq, (), source))
    return rows


def _dynamo_row(
    mode: str, compile_id: str, is_ca_graph: bool, step: int | None, seq: int, reasons: tuple[str, ...], source: SourceRef | None
) -> RecompileRow:
    return RecompileRow(
        mode=mode,
        source=SOURCE_DYNAMO_CA_GRAPH if is_ca_graph else SOURCE_DYNAMO_FRAME,
        compile_id=compile_id,
        step=step if is_ca_graph else forward_step(step),
        kind=KIND_GUARD,
        seqs=(seq,),
        messages=reasons,
        user_source=source,
        produced=compile_id,
    )


def _frame_key(compile_id: str) -> str:
    """`0/3` -> `0`, `!1/2/0` -> `!1/2`: the frame a compile id belongs to."""
    return compile_id.rsplit("/", 1)[0]


def _limit_hits(record: ModeRecord, compiles: list[DynamoCompileEvent]) -> list[LimitHit]:
    hits: list[LimitHit] = []
    seen: set[str] = set()
    # A compile that failed on the limit has no code info; an earlier compile of its frame does.
    named = {_frame_key(c.compile_id): c for c in compiles if c.co_name}
    for event in compiles:
        found = _limit_from_text(f"{event.fail_type or ''} {event.fail_reason or ''}") if event.fail_reason else None
        if found is None or event.compile_id in seen:
            continue
        seen.add(event.compile_id)
        if not event.co_name and _frame_key(event.compile_id) in named:
            event = dataclasses.replace(event, co_name=named[_frame_key(event.compile_id)].co_name,
                                        co_filename=named[_frame_key(event.compile_id)].co_filename,
                                        co_firstlineno=named[_frame_key(event.compile_id)].co_firstlineno)
        hits.append(
            LimitHit(
                mode=record.mode,
                compile_id=event.compile_id,
                step=event.step if event.is_ca_graph else forward_step(event.step),
                seq=event.seq,
                limit_type=found[0],
                limit_value=found[1],
                function=event.co_name,
                file=event.co_filename,
                line=event.co_firstlineno,
            )
        )
    for finding in record.of(FindingEvent):
        found = _limit_from_text(f"{finding.code} {finding.message}")
        if found is None or "recompile_limit" not in finding.code + finding.message and "recompile limit" not in finding.message.lower():
            continue
        compile_id = re.search(r"\[?(!?\d+/\d+(?:/\d+)?)\]?", finding.message)
        key = compile_id.group(1) if compile_id else f"finding:{finding.seq}"
        if key in seen:
            continue
        seen.add(key)
        src = finding.source
        hits.append(
            LimitHit(
                mode=record.mode,
                compile_id=key if compile_id else "",
                step=finding.step,
                seq=finding.seq,
                limit_type=found[0],
                limit_value=found[1],
                file=src.file if src else "",
                line=src.line if src else None,
                function=src.function if src else "",
            )
        )
    return hits


def recompile_table(record: ModeRecord) -> RecompileTable:
    """The recompiles of one mode record, in the order they happened."""
    graphs = {g.ca_id: g for g in record.of(CAGraphEvent)}
    compile_events = record.of(DynamoCompileEvent)
    rows = _ca_rows(record, record.of(CacheMissEvent), graphs) + _dynamo_rows(record, compile_events)
    rows.sort(key=lambda r: r.seq)
    steps = record.of(StepEvent)
    step_numbers = [s.step for s in steps]
    manifest = record.manifest
    return RecompileTable(
        mode=record.mode,
        rows=rows,
        steps=len(steps),
        last_step=max(step_numbers) if step_numbers else None,
        limit_hits=_limit_hits(record, compile_events),
        graphs=graphs,
        cwd=manifest.cwd,
        skipped_lines=record.skipped_lines,
        unknown_kinds=dict(record.unknown_kinds),
        status=manifest.status,
    )


def short_file(path: str, cwd: str) -> str:
    shown = display_path(path, cwd)
    return shown if shown else "?"


def format_source(ref: SourceRef | None, cwd: str, with_code: bool = True) -> str:
    if ref is None:
        return ""
    where = f"{short_file(ref.file, cwd)}:{ref.line}"
    if with_code and ref.code:
        return f"{where}  {ref.code.strip()}"
    return where


def node_label(name: str | None, node_call: int | None) -> str:
    if not name:
        return ""
    short = name.replace("torch::autograd::", "")
    return f"{short} (NodeCall {node_call})" if node_call is not None else short
