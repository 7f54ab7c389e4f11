"""Every recompile of a mode record, one row each: pure functions of the record, no rendering.

`recompile_table(mode_record)` is the entry point; the rows and the table are described in
`recompile_rows`, Dynamo's rows and recompile-limit hits come from `recompiles_dynamo`.
"""

from __future__ import annotations

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import MISS_UNKNOWN, CacheMissEvent, CAGraphEvent, DynamoCompileEvent, StepEvent
from cagtool.report.recompiles.rows import (  # noqa: F401 - re-exported: the module's public names
    GRAPH_ROOT,
    KIND_GUARD,
    SOURCE_CA,
    SOURCE_DYNAMO_CA_GRAPH,
    SOURCE_DYNAMO_FRAME,
    LimitHit,
    RecompileRow,
    RecompileTable,
    StepSummary,
    display_path,
    format_source,
    node_label,
    short_file,
)
from cagtool.report.recompiles.dynamo import (  # noqa: F401
    compile_attempt,
    compile_frame,
    dynamo_rows,
    forward_step,
    guard_shape,
    guard_text,
    limit_hits,
)


def step_summary(record: ModeRecord) -> StepSummary:
    numbers = [s.step for s in record.of(StepEvent)]
    return StepSummary(len(numbers), max(numbers) if numbers else None)


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


def recompile_table(record: ModeRecord, steps: StepSummary | None = None) -> RecompileTable:
    """The recompiles of one mode record, in the order they happened. `steps` is given when the
    record was read without its step events (recompiles_load); otherwise it is counted here."""
    graphs: dict[int, CAGraphEvent] = {}
    misses: list[CacheMissEvent] = []
    compile_events: list[DynamoCompileEvent] = []
    for event in record.events:  # one pass: records can hold 100,000 events
        if isinstance(event, CAGraphEvent):
            graphs[event.ca_id] = event
        elif isinstance(event, CacheMissEvent):
            misses.append(event)
        elif isinstance(event, DynamoCompileEvent):
            compile_events.append(event)
    rows = _ca_rows(record, misses, graphs) + dynamo_rows(record, compile_events)
    rows.sort(key=lambda r: r.seq)
    steps = steps if steps is not None else step_summary(record)
    manifest = record.manifest
    return RecompileTable(
        mode=record.mode,
        rows=rows,
        steps=steps.count,
        last_step=steps.last,
        limit_hits=limit_hits(record, compile_events),
        graphs=graphs,
        cwd=manifest.cwd,
        skipped_lines=record.skipped_lines,
        unknown_kinds=dict(record.unknown_kinds),
        status=manifest.status,
    )


