"""Why it recompiled: groups a RecompileTable's rows by root cause and explains each in plain words.

Pure functions of a RecompileTable. Alerts (a recompile storm, a recompile limit that sent a
frame back to eager) come first; then one Cause per root cause, biggest first. Every cause
names its evidence (compile ids, steps, event seqs) so the user can check it in the record.
The sentences themselves are written by `cagtool.report.recompiles.explain_text`.
"""

from __future__ import annotations

import re

from cagtool.record.schema import MISS_CHANGED_SHAPES, MISS_NEW_NODE, SourceRef
from cagtool.report.recompiles.explain_facts import NodeChange, cause_facts, hook_counts  # noqa: F401 - NodeChange re-exported
from cagtool.report.recompiles.explain_model import (  # noqa: F401 - re-exported: the module's public names
    ALERT_LIMIT,
    ALERT_STORM,
    CAUSE_DYNAMO_CA_GRAPH,
    CAUSE_DYNAMO_FRAME,
    CAUSE_GRAD_DEFINED,
    CAUSE_HOOK,
    CAUSE_SHAPES,
    CAUSE_STRUCTURE,
    CAUSE_UNKNOWN,
    Alert,
    Cause,
    Evidence,
    Explanation,
)
from cagtool.report.recompiles.table import (  # noqa: F401
    SOURCE_CA,
    SOURCE_DYNAMO_CA_GRAPH,
    RecompileRow,
    RecompileTable,
    compile_frame,
    guard_shape,
    guard_text,
)

STORM_FRACTION = 0.5  # a storm: recompiles on more than half of the steps after the first
STORM_MIN_STEPS = 3  # fewer recompiling steps than this is not a storm, whatever the fraction


def _ca_new_node_code(table: RecompileTable, row: RecompileRow) -> str:
    node = row.node or ""
    produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
    hooks_changed = produced is not None and hook_counts(produced) != hook_counts(table.previous_graph(row.ca_id))
    if hooks_changed or "BackwardHookFunction" in node:
        return CAUSE_HOOK
    if node.endswith("AccumulateGrad"):
        return CAUSE_GRAD_DEFINED
    return CAUSE_STRUCTURE


def _location(ref: SourceRef | None) -> tuple[str, int] | None:
    return (ref.file, ref.line) if ref is not None else None


def _ca_id_of(compile_id: str) -> int | None:
    """N of `!N/F/C`."""
    match = re.match(r"^!(\d+)/", compile_id)
    return int(match.group(1)) if match else None


def _group_key(table: RecompileTable, row: RecompileRow, shape_keys: dict[int, tuple]) -> tuple:
    if row.source == SOURCE_CA:
        if row.kind == MISS_NEW_NODE:
            code = _ca_new_node_code(table, row)
            if code == CAUSE_STRUCTURE:
                return (code, _location(row.user_source) or row.node)
            return (code, row.node, _location(row.user_source))
        if row.kind == MISS_CHANGED_SHAPES:
            return (CAUSE_SHAPES, _location(row.user_source))
        return (CAUSE_UNKNOWN,)
    frame = compile_frame(row.compile_id)
    if row.source == SOURCE_DYNAMO_CA_GRAPH:
        # Dynamo compiles a CA graph for the sizes of its first call; when a graph that a
        # changed-shapes miss made is recompiled, the sizes changed again: the same root cause.
        ca_id = _ca_id_of(row.compile_id)
        first = guard_text(row.messages[0]) if row.messages else ""
        if ca_id in shape_keys and (not first or "size" in first.lower()):
            return shape_keys[ca_id]
        return (CAUSE_DYNAMO_CA_GRAPH, frame)
    return (CAUSE_DYNAMO_FRAME, frame)


_SOURCE_RANK = {"node_traceback": 0, "guard": 1, "compiled_frame": 2, "backward_call": 3}


def group_causes(table: RecompileTable) -> list[Cause]:
    """Recompiles grouped by root cause, biggest group first (ties: the earliest first)."""
    groups: dict[tuple, list[RecompileRow]] = {}
    shape_keys: dict[int, tuple] = {}
    for row in table.recompiles:
        key = _group_key(table, row, shape_keys)
        if key[0] == CAUSE_SHAPES and row.ca_id is not None:
            shape_keys[row.ca_id] = key
        groups.setdefault(key, []).append(row)
    causes = []
    for key, rows in groups.items():
        sources = [r.user_source for r in rows if r.user_source is not None]
        # The most specific line wins: where the node was made or the guard installed, then the
        # compiled function, then the line that called backward.
        sources.sort(key=lambda ref: _SOURCE_RANK.get(ref.how, len(_SOURCE_RANK)))
        source = sources[0] if sources else None
        causes.append(Cause(code=key[0], rows=rows, source=source))
    causes.sort(key=lambda c: (-c.count, c.rows[0].seq))
    for number, cause in enumerate(causes, start=1):
        cause.number = number
        cause.facts = cause_facts(table, cause)
    return causes


def _storm(table: RecompileTable, causes: list[Cause]) -> Alert | None:
    last = table.last_step
    if last is None or last < STORM_MIN_STEPS + 1:
        return None
    later_steps = range(2, last + 1)
    recompiling = sorted({r.step for r in table.recompiles if r.step is not None and r.step >= 2})
    if len(recompiling) < STORM_MIN_STEPS or len(recompiling) / len(later_steps) <= STORM_FRACTION:
        return None
    in_storm = [c for c in causes if any(s in recompiling for s in c.steps)]
    return Alert(
        code=ALERT_STORM,
        facts={
            "recompiling_steps": recompiling,
            "steps_after_first": len(later_steps),
            "every_step": len(recompiling) == len(later_steps),
            "recompiles": sum(1 for r in table.recompiles if r.step is not None and r.step >= 2),
            "still_recompiling": recompiling[-1] == last,
            "last_step": last,
        },
        causes=[c.number for c in in_storm],
    )


def _limit_alert(table: RecompileTable, causes: list[Cause]) -> Alert | None:
    if not table.limit_hits:
        return None
    frames = {compile_frame(hit.compile_id) for hit in table.limit_hits if hit.compile_id}
    behind = [
        c.number
        for c in causes
        if c.code in (CAUSE_DYNAMO_FRAME, CAUSE_DYNAMO_CA_GRAPH) and c.facts.get("frame") in frames
    ]
    for cause in causes:
        if cause.number in behind:
            # Its recompiles stopped because Dynamo gave up, not because the cause went away.
            cause.facts["stabilised"] = False
            cause.facts["stopped_by_limit"] = True
    return Alert(code=ALERT_LIMIT, facts={"hits": len(table.limit_hits)}, causes=behind, limit_hits=table.limit_hits)


def explain(table: RecompileTable) -> Explanation:
    causes = group_causes(table)
    alerts = [a for a in (_limit_alert(table, causes), _storm(table, causes)) if a is not None]
    return Explanation(table=table, alerts=alerts, causes=causes)
