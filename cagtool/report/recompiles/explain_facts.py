"""The facts behind each root cause of `recompiles --explain`: what changed at which node, the sizes
and values seen, the hooks added or removed, the failing guards, and whether the cause has
stabilised. Pure functions of a RecompileTable and the rows of one cause; explain_text turns
these facts into sentences and the JSON renderer writes them out.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from cagtool.record.schema import CAGraphEvent
from cagtool.report.recompiles.explain_model import (
    Cause,
    CAUSE_DYNAMO_CA_GRAPH,
    CAUSE_DYNAMO_FRAME,
    CAUSE_GRAD_DEFINED,
    CAUSE_HOOK,
    CAUSE_SHAPES,
    CAUSE_STRUCTURE,
)
from cagtool.report.recompiles.table import SOURCE_CA, RecompileRow, RecompileTable, compile_frame, guard_shape, guard_text


@dataclass(frozen=True)
class NodeChange:
    """What one structural recompile changed at a NodeCall: `before` is None when the node is new."""

    compile_id: str
    step: int | None
    node_call: int | None
    after: str
    before: str | None
    previous_graph: str | None  # "!N" the `before` was read from


_AUTOGRAD_NODE = re.compile(r"(Backward\d*|AccumulateGrad|GraphRoot)$")


def hook_counts(graph: CAGraphEvent | None) -> Counter[str]:
    return Counter(h.hook_type for h in graph.hooks) if graph is not None else Counter()


def _autograd_names(graph: CAGraphEvent) -> Counter[str]:
    """The autograd nodes a graph covers, by name; from the op histogram when the capture could not
    map NodeCalls (its keys include each autograd node's name, e.g. `MulBackward0`)."""
    if graph.autograd_nodes:
        return Counter(ref.name for ref in graph.autograd_nodes)
    return Counter({k: v for k, v in graph.op_histogram.items() if _AUTOGRAD_NODE.search(k)})


def _node_change(table: RecompileTable, row: RecompileRow) -> NodeChange:
    """What the new node replaced, read by comparing the autograd nodes of the graph this miss
    produced with the graph captured before it: the node that left when this one came in. (Not by
    NodeCall: the number in torch's miss message counts the cache lookup, which can differ by one
    from the NodeCall numbers in the graph's stack traces.) None when nothing left: the graph grew."""
    produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
    previous = table.previous_graph(row.ca_id)
    before = None
    if produced is not None and previous is not None:
        gone = sorted((_autograd_names(previous) - _autograd_names(produced)).keys())
        before = " + ".join(gone) if gone else None
    where = f"!{previous.ca_id}" if previous is not None else None
    return NodeChange(row.compile_id, row.step, row.node_call, row.node or "?", before, where)


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
    function = ""
    for row in cause.rows:
        if row.user_source is not None and row.user_source.function:
            function = row.user_source.function
            break
    return {
        "failures": failures,
        "guard": known[0] if known else "",
        "guard_kinds": sorted({guard_shape(g) for g in known}),
        "frame": compile_frame(cause.rows[0].compile_id),
        "function": function,
        **_stability(table, cause),
    }


def _hook_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    diffs = []
    for row in cause.rows:
        produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
        previous = table.previous_graph(row.ca_id)
        now, before = hook_counts(produced), hook_counts(previous)
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


def cause_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
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
