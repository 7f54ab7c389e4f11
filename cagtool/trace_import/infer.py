"""What changed between two consecutive compiled-autograd graphs, for logs without torch's own
cache-miss reasons (the job did not turn `compiled_autograd_verbose` on, so C++ never computed
them). The result has the fields of a CacheMissEvent and says in its message that it was inferred.

Torch misses its cache either on a *new autograd node* (a node whose cache key it has not seen:
a new node, or a known one with different hooks or attributes) or on *changed sizes*. From the
graphs: an autograd node whose nodes differ in structure -> new node; the same structure with
different integer constants, or sizes that became symbolic -> changed sizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cagtool.capture.observe.graph_dump import GraphSummary
from cagtool.record.schema import MISS_CHANGED_SHAPES, MISS_NEW_NODE, MISS_UNKNOWN, ChangedSize
from cagtool.torch_text import INT_CONSTANT, NODE_REF

INFERRED_PREFIX = "inferred from the graph diff (the log has no compiled_autograd_compile_reasons)"
_MAX_SIZES = 32
# A node reference blanked to `%` (by _by_origin) or an integer constant.
_BLANKED_TOKEN = re.compile("%|" + INT_CONSTANT.pattern)


@dataclass(frozen=True)
class InferredMiss:
    miss_kind: str
    message: str
    node: str | None = None
    node_call: int | None = None
    changed_sizes: list[ChangedSize] = field(default_factory=list)
    total_changed: int | None = None


def _by_origin(summary: GraphSummary) -> dict[tuple[int, str], list[tuple[str, str, str]]]:
    """Autograd node -> its FX nodes as (op, target, args with node references blanked), without
    the nodes that only read sizes (they appear when sizes become dynamic)."""
    groups: dict[tuple[int, str], list[tuple[str, str, str]]] = {}
    for node in summary.nodes:
        if node.origin is None or _is_size_node(node.target, node.args):
            continue
        groups.setdefault((node.origin.node_call, node.origin.name), []).append((node.op, node.target, NODE_REF.sub("%", node.args)))
    return groups


def _shape_free(items: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The nodes with every size blanked: integer constants and node references alike (a size
    that became symbolic is a reference to a size node), and the size-reading nodes dropped."""
    return [(op, target, INT_CONSTANT.sub("#", args.replace("%", "#"))) for op, target, args in items]


def _is_size_node(target: str, args: str) -> bool:
    return target.endswith("unwrap_maybe_dynamic_int") or (target == "_operator.getitem" and args.startswith("%sizes,"))


def infer_miss(previous: GraphSummary | None, current: GraphSummary) -> InferredMiss:
    if previous is None:
        first = current.autograd_nodes[0] if current.autograd_nodes else None
        return InferredMiss(
            MISS_NEW_NODE,
            f"{INFERRED_PREFIX}: first capture in the log",
            node=first.name if first else None,
            node_call=first.node_call if first else None,
        )
    old, new = _by_origin(previous), _by_origin(current)
    for key in sorted(new):
        if key not in old:
            return InferredMiss(MISS_NEW_NODE, f"{INFERRED_PREFIX}: new autograd node {key[1]} (NodeCall {key[0]})", node=key[1], node_call=key[0])
        if _shape_free(new[key]) != _shape_free(old[key]):
            return InferredMiss(
                MISS_NEW_NODE,
                f"{INFERRED_PREFIX}: autograd node {key[1]} (NodeCall {key[0]}) changed (hooks, attributes or inputs)",
                node=key[1],
                node_call=key[0],
            )
    removed = sorted(set(old) - set(new))
    if removed:
        key = removed[0]
        return InferredMiss(MISS_NEW_NODE, f"{INFERRED_PREFIX}: autograd node {key[1]} (NodeCall {key[0]}) is gone", node=key[1], node_call=key[0])
    # One changed size per autograd node and distinct change (4 -> 6 appears in every shape and
    # stride argument of a node; torch's key holds it once). The index is an ordinal, not torch's.
    # Arguments are compared token by token (node references and integers, in order), and only
    # where both have as many: a size that became symbolic is a reference where the old graph had
    # its value, which shifts every later integer of the argument list.
    changes: dict[tuple[int, str, int, int | None], None] = {}
    for key in sorted(new):
        for (_, _, new_args), (_, _, old_args) in zip(new[key], old[key]):
            if new_args == old_args:
                continue
            new_tokens, old_tokens = _BLANKED_TOKEN.findall(new_args), _BLANKED_TOKEN.findall(old_args)
            if len(new_tokens) != len(old_tokens):
                continue
            for new_token, old_token in zip(new_tokens, old_tokens):
                if old_token == "%" or new_token == old_token:
                    continue
                # now a reference: the size became dynamic, its new value is not in the graph
                changes.setdefault((key[0], key[1], int(old_token), None if new_token == "%" else int(new_token)), None)
    changed = [
        ChangedSize(index=i, value=new_value, previous=old_value, node=name, node_call=call)
        for i, (call, name, old_value, new_value) in enumerate(list(changes)[:_MAX_SIZES])
    ]
    total = len(changes)
    if total or current.num_sizes != previous.num_sizes:
        became = current.num_sizes - previous.num_sizes
        detail = f"{total} size constant(s) changed" if total else ""
        if became > 0:
            detail += (", " if detail else "") + f"{became} size(s) became symbolic (dynamic)"
        return InferredMiss(MISS_CHANGED_SHAPES, f"{INFERRED_PREFIX}: changed shapes: {detail}", changed_sizes=changed, total_changed=total or max(became, 0) or None)
    return InferredMiss(MISS_UNKNOWN, f"{INFERRED_PREFIX}: no structural change from the previous graph (a cache reset, or a change the graph does not show)")
