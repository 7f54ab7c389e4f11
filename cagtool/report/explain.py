"""Why it recompiled: groups a RecompileTable's rows by root cause and explains each in plain words.

Pure functions of a RecompileTable. Alerts (a recompile storm, a recompile limit that sent a
frame back to eager) come first; then one Cause per root cause, biggest first. Every cause
names its evidence (compile ids, steps, event seqs) so the user can check it in the record.
The sentences themselves are written by `cagtool.report.explain_text`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from cagtool.record.schema import MISS_CHANGED_SHAPES, MISS_NEW_NODE, CAGraphEvent, SourceRef
from cagtool.report.recompiles import (
    SOURCE_CA,
    SOURCE_DYNAMO_CA_GRAPH,
    SOURCE_DYNAMO_FRAME,
    LimitHit,
    RecompileRow,
    RecompileTable,
)

# Cause codes (stable: they are part of the JSON schema).
CAUSE_STRUCTURE = "graph_structure"  # different ops / a branch / a loop of varying length
CAUSE_HOOK = "hook_changed"  # a backward hook added or removed
CAUSE_GRAD_DEFINED = "grad_defined_changed"  # .grad None vs defined (AccumulateGrad's key)
CAUSE_SHAPES = "changed_shapes"
CAUSE_DYNAMO_FRAME = "dynamo_guard_failure"
CAUSE_DYNAMO_CA_GRAPH = "dynamo_ca_graph_guard_failure"
CAUSE_UNKNOWN = "unknown"

ALERT_LIMIT = "recompile_limit"
ALERT_STORM = "recompile_storm"

STORM_FRACTION = 0.5  # a storm: recompiles on more than half of the steps after the first
STORM_MIN_STEPS = 3  # fewer recompiling steps than this is not a storm, whatever the fraction


@dataclass(frozen=True)
class Evidence:
    compile_id: str
    step: int | None
    seq: int


@dataclass(frozen=True)
class NodeChange:
    """What one structural recompile changed at a NodeCall: `before` is None when the node is new."""

    compile_id: str
    step: int | None
    node_call: int | None
    after: str
    before: str | None
    previous_graph: str | None  # "!N" the `before` was read from


@dataclass
class Cause:
    code: str
    rows: list[RecompileRow]
    number: int = 0  # 1-based, in rendering order
    source: SourceRef | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what the sentences are built from (and JSON)

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def steps(self) -> list[int]:
        return sorted({r.step for r in self.rows if r.step is not None})

    @property
    def evidence(self) -> list[Evidence]:
        return [Evidence(r.compile_id, r.step, r.seq) for r in self.rows]


@dataclass
class Alert:
    code: str
    facts: dict[str, Any]
    causes: list[int] = field(default_factory=list)  # numbers of the causes behind it
    limit_hits: list[LimitHit] = field(default_factory=list)


@dataclass
class Explanation:
    table: RecompileTable
    alerts: list[Alert]
    causes: list[Cause]

    @property
    def total(self) -> int:
        return len(self.table.recompiles)


def _hook_counts(graph: CAGraphEvent | None) -> Counter[str]:
    return Counter(h.hook_type for h in graph.hooks) if graph is not None else Counter()


def _previous_graph(table: RecompileTable, ca_id: int | None) -> CAGraphEvent | None:
    if ca_id is None:
        return None
    earlier = [i for i in table.graphs if i < ca_id]
    return table.graphs[max(earlier)] if earlier else None


_AUTOGRAD_NODE = re.compile(r"(Backward\d*|AccumulateGrad|GraphRoot)$")


def _node_at(graph: CAGraphEvent | None, node_call: int | None) -> str | None:
    if graph is None or node_call is None:
        return None
    for ref in graph.autograd_nodes:
        if ref.node_call == node_call:
            return ref.name
    return None


def _autograd_names(graph: CAGraphEvent) -> Counter[str]:
    """The autograd nodes a graph covers, by name; from the op histogram when the capture could not
    map NodeCalls (its keys include each autograd node's name, e.g. `MulBackward0`)."""
    if graph.autograd_nodes:
        return Counter(ref.name for ref in graph.autograd_nodes)
    return Counter({k: v for k, v in graph.op_histogram.items() if _AUTOGRAD_NODE.search(k)})


def _node_change(table: RecompileTable, row: RecompileRow) -> NodeChange:
    if row.ca_id is not None and row.node_call is not None:
        # The most recent earlier graph that has a node at that NodeCall tells what was there before.
        for ca_id in sorted((i for i in table.graphs if i < row.ca_id), reverse=True):
            name = _node_at(table.graphs[ca_id], row.node_call)
            if name is not None:
                return NodeChange(row.compile_id, row.step, row.node_call, row.node or "?", name, f"!{ca_id}")
    produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
    previous = _previous_graph(table, row.ca_id)
    before = None
    if produced is not None and previous is not None and not produced.autograd_nodes:
        # No NodeCall map: the node that left the graph when this one came in is what it replaced.
        gone = sorted((_autograd_names(previous) - _autograd_names(produced)).keys())
        before = gone[0] if len(gone) == 1 else None
    where = f"!{previous.ca_id}" if previous is not None else None
    return NodeChange(row.compile_id, row.step, row.node_call, row.node or "?", before, where)


def _ca_new_node_code(table: RecompileTable, row: RecompileRow) -> str:
    node = row.node or ""
    produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
    hooks_changed = produced is not None and _hook_counts(produced) != _hook_counts(_previous_graph(table, row.ca_id))
    if hooks_changed or "BackwardHookFunction" in node:
        return CAUSE_HOOK
    if node.endswith("AccumulateGrad"):
        return CAUSE_GRAD_DEFINED
    return CAUSE_STRUCTURE


_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")
_ID_PREFIX = re.compile(r"^\s*-?\s*!?\d+/\d+(/\d+)?:\s*")


def guard_text(message: str) -> str:
    """The failing guard of one Dynamo reason, without the `0/1:` prefix and the `# source` comment."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return _ID_PREFIX.sub("", first).split("  #")[0].split(" # ")[0].strip()


def guard_shape(message: str) -> str:
    """The guard with its numbers blanked, so `depth == 1` and `depth == 2` are one root cause."""
    return _NUMBER.sub("N", guard_text(message))


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
    frame = row.compile_id.lstrip("!").split("/")
    if row.source == SOURCE_DYNAMO_CA_GRAPH:
        # Dynamo compiles a CA graph for the sizes of its first call; when a graph that a
        # changed-shapes miss made is recompiled, the sizes changed again: the same root cause.
        ca_id = _ca_id_of(row.compile_id)
        first = guard_text(row.messages[0]) if row.messages else ""
        if ca_id in shape_keys and (not first or "size" in first.lower()):
            return shape_keys[ca_id]
        return (CAUSE_DYNAMO_CA_GRAPH, frame[1] if len(frame) > 2 else frame[0])
    return (CAUSE_DYNAMO_FRAME, frame[0])


def _stability(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    steps = cause.steps
    last = table.last_step
    if not steps or last is None:
        return {"stabilised": None, "last_recompile_step": steps[-1] if steps else None}
    return {
        "stabilised": steps[-1] < last,
        "last_recompile_step": steps[-1],
        "quiet_steps_after": last - steps[-1],
        "last_step": last,
    }


def _structure_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    changes = [_node_change(table, r) for r in cause.rows]
    grew = sum(1 for c in changes if c.before is None)
    node_calls = {c.node_call for c in changes}
    variants: dict[int | None, list[str]] = {}
    for change in changes:
        names = variants.setdefault(change.node_call, [])
        for name in (change.before, change.after):
            if name is not None and name not in names:
                names.append(name)
    return {
        "changes": changes,
        "grew": grew,
        "node_calls": sorted(n for n in node_calls if n is not None),
        "variants": variants,
        "distinct_structures": cause.count + 1,
        **_stability(table, cause),
    }


def _shape_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    per_size: dict[int, dict[str, Any]] = {}
    for row in cause.rows:
        for size in row.changed_sizes:
            entry = per_size.setdefault(
                size.index, {"values": [], "node": None, "node_call": None, "changes": 0, "previous_missing": False}
            )
            entry["changes"] += 1
            entry["previous_missing"] = entry["previous_missing"] or size.previous is None
            for value in (size.previous, size.value):
                if value is not None and value not in entry["values"]:
                    entry["values"].append(value)
            if size.node and entry["node"] is None:
                entry["node"], entry["node_call"] = size.node, size.node_call
    dynamic_graphs = {
        f"!{r.ca_id}": table.graphs[r.ca_id].num_sizes for r in cause.rows if r.ca_id in table.graphs
    }
    ca_rows = [r for r in cause.rows if r.source == SOURCE_CA]
    return {
        "sizes": dict(sorted(per_size.items())),
        "ca_misses": len(ca_rows),
        "dynamo_recompiles": [(r.compile_id, r.step, guard_text(r.messages[0]) if r.messages else "") for r in cause.rows if r.source != SOURCE_CA],
        "changed_per_recompile": [r.total_changed if r.total_changed is not None else len(r.changed_sizes) for r in ca_rows],
        "dynamic_graphs": dynamic_graphs,
        "repeated": any(e["changes"] > 1 for e in per_size.values()) or len(ca_rows) > 1,
        **_stability(table, cause),
    }


def _guard_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    failures: list[tuple[str, str]] = []  # (compile id, failing guard or "")
    for row in cause.rows:
        failures.append((row.compile_id, guard_text(row.messages[0]) if row.messages else ""))
    known = [g for _, g in failures if g]
    frame = cause.rows[0].compile_id.lstrip("!").split("/")
    function = ""
    for row in cause.rows:
        if row.user_source is not None and row.user_source.function:
            function = row.user_source.function
            break
    return {
        "failures": failures,
        "guard": known[0] if known else "",
        "guard_kinds": sorted({guard_shape(g) for g in known}),
        "frame": frame[1] if cause.code == CAUSE_DYNAMO_CA_GRAPH and len(frame) > 2 else frame[0],
        "function": function,
        **_stability(table, cause),
    }


def _hook_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    diffs = []
    for row in cause.rows:
        produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
        previous = _previous_graph(table, row.ca_id)
        now, before = _hook_counts(produced), _hook_counts(previous)
        diffs.append(
            {
                "compile_id": row.compile_id,
                "step": row.step,
                "added": sorted((now - before).elements()),
                "removed": sorted((before - now).elements()),
                "previous_graph": f"!{previous.ca_id}" if previous is not None else None,
            }
        )
    return {"hook_diffs": diffs, "key_sizes": _key_sizes(cause), **_stability(table, cause)}


def _key_sizes(cause: Cause) -> list[tuple[tuple[int, ...], int | None]]:
    return [(r.previous_key_sizes, r.key_size) for r in cause.rows]


def _facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    if cause.code == CAUSE_STRUCTURE:
        return _structure_facts(table, cause)
    if cause.code == CAUSE_SHAPES:
        return _shape_facts(table, cause)
    if cause.code in (CAUSE_DYNAMO_FRAME, CAUSE_DYNAMO_CA_GRAPH):
        return _guard_facts(table, cause)
    if cause.code == CAUSE_HOOK:
        return _hook_facts(table, cause)
    if cause.code == CAUSE_GRAD_DEFINED:
        return {"key_sizes": _key_sizes(cause), **_stability(table, cause)}
    return _stability(table, cause)


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
        cause.facts = _facts(table, cause)
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
    frames = {hit.compile_id.lstrip("!").split("/")[0] for hit in table.limit_hits if hit.compile_id}
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


__all__ = [
    "Alert",
    "Cause",
    "Evidence",
    "Explanation",
    "NodeChange",
    "explain",
    "group_causes",
    "guard_shape",
    "guard_text",
    "SOURCE_DYNAMO_FRAME",
]
