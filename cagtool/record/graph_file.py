"""The graph file format: graphs/ca_<N>.json, one compiled-autograd graph's nodes, structured
(written by capture, read by diff-graphs): `{"format": "cagtool-ca-graph", "schema_version": 1,
"ca_id": N, "compile_id": "!N", "nodes": [GraphNode...]}`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from cagtool.record.schema import AutogradNodeRef
from cagtool.record.validate import check_types

GRAPH_FORMAT = "cagtool-ca-graph"


@dataclass(frozen=True)
class GraphNode:
    """One FX node of a CA graph, as stored in graphs/ca_<N>.json (`nodes` list).

    `args` is the node's arguments rendered as text with other nodes written `%name`;
    `origin` is the autograd node it came from; `shape`/`dtype`/`stride` come from the
    traced fake tensor when it had one (symbolic sizes are strings such as "s3")."""

    name: str
    op: str  # placeholder, call_function, call_method, get_attr, output
    target: str
    args: str = ""
    origin: AutogradNodeRef | None = None
    aot_id: int | None = None
    hook_type: str | None = None
    shape: list[int | str] | None = None
    dtype: str | None = None
    stride: list[int | str] | None = None


def graph_node_to_dict(node: GraphNode) -> dict[str, Any]:
    """The node as JSON-ready data. Shallow on purpose: dataclasses.asdict's deep copy cost most
    of an import's time on logs with thousands of graphs."""
    data = dict(node.__dict__)
    if node.origin is not None:
        data["origin"] = {"node_call": node.origin.node_call, "name": node.origin.name}
    return data


_NODE_FIELDS = frozenset(f.name for f in dataclasses.fields(GraphNode))  # once: a graph has 10,000s of nodes
_NODE_REQUIRED = frozenset(f.name for f in dataclasses.fields(GraphNode) if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
# Every field in declaration order, with its default (required ones are always overwritten): the
# state a node starts from, so its __dict__ keeps the order GraphNode(**kwargs) gives it.
_NODE_TEMPLATE = {f.name: (None if f.default is dataclasses.MISSING else f.default) for f in dataclasses.fields(GraphNode)}
assert not any(f.default_factory is not dataclasses.MISSING for f in dataclasses.fields(GraphNode)), "graph_node_from_dict has no factories"


def graph_node_from_dict(data: dict[str, Any]) -> GraphNode:
    """Raises TypeError for a node that is not an object or has a field of the wrong type."""
    if not isinstance(data, dict):
        raise TypeError(f"a node is {type(data).__name__}, not an object")
    names = _NODE_FIELDS
    kwargs = data if data.keys() <= names else {k: v for k, v in data.items() if k in names}
    if not _NODE_REQUIRED <= kwargs.keys():
        GraphNode(**kwargs)  # raises the dataclass's own TypeError, naming the missing field
    # What the frozen dataclass's __init__ does, without its per-field object.__setattr__ (most
    # of reading a 10,000-node graph); GraphNode has no __post_init__.
    node = object.__new__(GraphNode)
    state = node.__dict__
    state.update(_NODE_TEMPLATE)
    state.update(kwargs)
    origin = kwargs.get("origin")
    if origin is not None:
        state["origin"] = AutogradNodeRef(**origin)
    return node if _plainly_valid(node) else check_types(node)


def _sizes_ok(sizes: Any) -> bool:
    return sizes is None or (type(sizes) is list and all(type(d) is int or type(d) is str for d in sizes))


def _plainly_valid(node: GraphNode) -> bool:
    """The node's fields have the types JSON decodes them to: check_types' verdict for such a node,
    without its per-field predicates (their calls were most of reading a 10,000-node graph). False
    sends the node to check_types, which names what is wrong or accepts what this refused."""
    origin = node.origin
    return (
        type(node.name) is str
        and type(node.op) is str
        and type(node.target) is str
        and type(node.args) is str
        and (origin is None or (type(origin) is AutogradNodeRef and type(origin.node_call) is int and type(origin.name) is str))
        and (node.aot_id is None or type(node.aot_id) is int)
        and (node.hook_type is None or type(node.hook_type) is str)
        and (node.dtype is None or type(node.dtype) is str)
        and _sizes_ok(node.shape)
        and _sizes_ok(node.stride)
    )
