"""The graph file format: graphs/ca_<N>.json, one compiled-autograd graph's nodes, structured
(written by capture, read by diff-graphs): `{"format": "cagtool-ca-graph", "schema_version": 1,
"ca_id": N, "compile_id": "!N", "nodes": [GraphNode...], "symbols": {"s35": 64, ...}}`; `symbols`, each
size symbol's value in that capture, is absent from files written before it was kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import msgspec
from msgspec import Struct

from cagtool.record.schema import SCHEMA_VERSION, AutogradNodeRef

GRAPH_FORMAT = "cagtool-ca-graph"


class GraphNode(Struct, frozen=True):
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


class GraphFile(Struct, kw_only=True):
    """The whole file. msgspec decodes it straight into nodes, checking every field's type: 0.011 s
    for a 10,000-node graph, where json plus a check per node took 0.057 s (and the columns built
    from the decoded dicts without a node object, 0.041 s; diff-graphs reads two)."""

    format: str
    schema_version: int
    ca_id: int | None = None
    compile_id: str | None = None
    nodes: list[GraphNode]
    # Each size symbol's value in this capture: a capture numbers its symbols afresh, so two
    # graphs' symbolic shapes are compared by value (None: a file from before it was kept).
    symbols: dict[str, int] | None = None


def graph_node_to_dict(node: GraphNode) -> dict[str, Any]:
    """The node as JSON-ready data, every field in declaration order (the file's layout)."""
    return msgspec.to_builtins(node)  # type: ignore[no-any-return]


def graph_file_text(ca_id: int, compile_id: str, nodes: list[GraphNode], symbols: dict[str, int] | None = None) -> str:
    """The file's text: json's layout, the one every graph file so far was written in."""
    import json

    payload = msgspec.to_builtins(GraphFile(format=GRAPH_FORMAT, schema_version=SCHEMA_VERSION, ca_id=ca_id, compile_id=compile_id, nodes=nodes, symbols=symbols))
    if symbols is None:
        del payload["symbols"]  # a graph with no symbolic size: the file as it was written before symbols were kept
    return json.dumps(payload, default=str) + "\n"


_DECODER: msgspec.json.Decoder | None = None


def decode_graph_file(data: bytes) -> GraphFile:
    """Raises msgspec.DecodeError (ValidationError included: it names the field) for what is not a graph file."""
    global _DECODER
    if _DECODER is None:
        _DECODER = msgspec.json.Decoder(GraphFile)
    return _DECODER.decode(data)


def graph_file_from_value(value: Any) -> GraphFile:
    """A decoded JSON object (json's reading: NaN included) as the file. Raises msgspec.ValidationError."""
    return msgspec.convert(value, GraphFile)


@dataclass(frozen=True)
class GraphColumns:
    """A graph's nodes as one list per GraphNode field, node i at position i of each; `origins`
    holds (name, node_call) or None: what diff-graphs' normalisation reads, field by field."""

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
    symbols: dict[str, int] | None = None  # GraphFile.symbols

    def __len__(self) -> int:
        return len(self.names)


def graph_columns(nodes: Sequence[GraphNode], symbols: dict[str, int] | None = None) -> GraphColumns:
    """The columns of GraphNode objects (whatever their origin: built by hand, or read and checked)."""
    origins = [None if node.origin is None else (node.origin.name, node.origin.node_call) for node in nodes]
    return GraphColumns(
        [n.name for n in nodes], [n.op for n in nodes], [n.target for n in nodes], [n.args for n in nodes], origins,
        [n.aot_id for n in nodes], [n.hook_type for n in nodes], [n.shape for n in nodes], [n.dtype for n in nodes], [n.stride for n in nodes],
        symbols,
    )
