"""The graph file format: graphs/ca_<N>.json, one compiled-autograd graph's nodes, structured
(written by capture, read by diff-graphs): `{"format": "cagtool-ca-graph", "schema_version": 1,
"ca_id": N, "compile_id": "!N", "nodes": [GraphNode...]}`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any, Sequence

import msgspec

from cagtool.record.schema import AutogradNodeRef

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
    if _plainly_valid(node):
        return node
    try:  # msgspec names what is wrong, or accepts what the exact-type test refused
        return msgspec.convert(kwargs, GraphNode)
    except msgspec.ValidationError as exc:
        raise TypeError(f"GraphNode: {exc}") from None


def _sizes_ok(sizes: Any) -> bool:
    return sizes is None or (type(sizes) is list and all(type(d) is int or type(d) is str for d in sizes))


def _plainly_valid(node: GraphNode) -> bool:
    """The node's fields have the types JSON decodes them to: msgspec's verdict for such a node,
    without its per-field predicates (their calls were most of reading a 10,000-node graph). False
    sends the node to msgspec, which names what is wrong or accepts what this refused."""
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


@dataclass(frozen=True)
class GraphColumns:
    """A graph's nodes as one list per GraphNode field, node i at position i of each; `origins`
    holds (name, node_call) or None. What diff-graphs reads: a 10,000-node graph is 10 lists, not
    10,000 GraphNode objects built and checked field by field (most of reading one)."""

    names: list[str]
    ops: list[str]
    targets: list[str]
    args: list[str]
    origins: list[tuple[str, int] | None]
    aot_ids: list[int | None]
    hook_types: list[str | None]
    shapes: list[list[int | str] | None]
    dtypes: list[str | None]
    strides: list[list[int | str] | None]

    def __len__(self) -> int:
        return len(self.names)


def graph_columns(nodes: Sequence[GraphNode]) -> GraphColumns:
    """The columns of GraphNode objects (whatever their origin: built by hand, or read and checked)."""
    origins = [None if node.origin is None else (node.origin.name, node.origin.node_call) for node in nodes]
    return GraphColumns(
        [n.name for n in nodes], [n.op for n in nodes], [n.target for n in nodes], [n.args for n in nodes], origins,
        [n.aot_id for n in nodes], [n.hook_type for n in nodes], [n.shape for n in nodes], [n.dtype for n in nodes], [n.stride for n in nodes],
    )


_NODE_ORDER = tuple(_NODE_TEMPLATE)  # the dataclass's field order
assert _NODE_ORDER == ("name", "op", "target", "args", "origin", "aot_id", "hook_type", "shape", "dtype", "stride"), "GraphColumns follows GraphNode"
_STR = {str}
_INT = {int}
_NONE = type(None)


def _only(values: Any, allowed: set[type]) -> bool:
    return set(map(type, values)) <= allowed


def _sizes_column_ok(column: list[Any]) -> bool:
    return _only(column, {list, _NONE}) and _only(chain.from_iterable(s for s in column if s is not None), {int, str})


def graph_columns_from_dicts(nodes: list[Any]) -> GraphColumns | None:
    """The columns of a graph file's decoded `nodes`, when every node is an object with exactly
    GraphNode's fields, each of the JSON type graph_node_from_dict accepts without asking
    msgspec (_plainly_valid): the same nodes it would build. Else None (a node with a field
    missing, unknown or of another type): graph_node_from_dict then reads them one by one, and
    names what is wrong. The checks run column by column in C (map, set), not node by node."""
    if not nodes:
        return GraphColumns([], [], [], [], [], [], [], [], [], [])
    if not _only(nodes, {dict}) or set(map(len, nodes)) != {len(_NODE_ORDER)}:
        return None
    try:  # with 10 keys each, all of them present means exactly GraphNode's
        names, ops, targets, args, origins, aot_ids, hook_types, shapes, dtypes, strides = (list(map(itemgetter(f), nodes)) for f in _NODE_ORDER)
    except KeyError:
        return None
    if not (_only(names, _STR) and _only(ops, _STR) and _only(targets, _STR) and _only(args, _STR)):
        return None
    if not (_only(aot_ids, {int, _NONE}) and _only(hook_types, {str, _NONE}) and _only(dtypes, {str, _NONE})):
        return None
    if not (_sizes_column_ok(shapes) and _sizes_column_ok(strides) and _only(origins, {dict, _NONE})):
        return None
    refs = [o for o in origins if o is not None]
    if refs:
        if set(map(len, refs)) != {2}:
            return None
        try:
            calls, ref_names = list(map(itemgetter("node_call"), refs)), list(map(itemgetter("name"), refs))
        except KeyError:
            return None
        if not (_only(calls, _INT) and _only(ref_names, _STR)):
            return None
        pairs = iter(zip(ref_names, calls))
        origins = [None if o is None else next(pairs) for o in origins]
    return GraphColumns(names, ops, targets, args, origins, aot_ids, hook_types, shapes, dtypes, strides)
