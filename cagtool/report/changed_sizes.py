"""The values sizes had before a changed-shapes cache miss, read off the recorded graphs.

Torch's "Cache miss due to N changed tensor shapes (total of M): sizes[i], ..." indexes the
*dynamic* sizes of the graph it is about to capture (`sizes`, its input). A size listed there
has just become dynamic: in the previous capture of the same graph structure (the same cache
entry: the same autograd nodes at the same NodeCalls) it was a constant, written into the graph
as a number. So its earlier value is not among any earlier capture's `sizes`; it is the number
that the previous graph holds where the new graph reads `sizes[i]`. Matching sizes by index across
captures, as the capture once did, mixes up sizes as soon as one more becomes dynamic (every later
index shifts), and finds nothing for the ones that were constants.

Each autograd node's FX nodes are paired in order between the two graphs; where a node's
arguments line up (the same number of node references and integers) and the new graph has a
read of `sizes[i]` where the old one has an integer, that integer is `sizes[i]`'s earlier value.
"""

from __future__ import annotations

import re

import msgspec

from cagtool.errors import UnreadableInput
from cagtool.record.graph_file import GraphNode
from cagtool.record.loader import ModeRecord, inside, load_graph_nodes
from cagtool.record.schema import MISS_CHANGED_SHAPES, CacheMissEvent, CAGraphEvent
from cagtool.torch_text import INT_CONSTANT, REF_OR_INT

_SIZES_READ = re.compile(r"^%sizes, (\d+)$")
# Earlier graphs of the same structure looked at for a miss's earlier values, latest first.
EARLIER_TRIED = 4
_UNWRAP = "unwrap_maybe_dynamic_int"


def size_reads(nodes: list[GraphNode]) -> dict[str, int]:
    """FX node name -> i, for the nodes that read `sizes[i]` (the getitem, and the unwrap of it)."""
    reads: dict[str, int] = {}
    for node in nodes:
        if node.target == "_operator.getitem" and (match := _SIZES_READ.match(node.args)):
            reads[node.name] = int(match.group(1))
        elif node.target.endswith(_UNWRAP) and node.args.startswith("%") and node.args[1:] in reads:
            reads[node.name] = reads[node.args[1:]]
    return reads


def _by_autograd_node(nodes: list[GraphNode], reads: dict[str, int]) -> dict[tuple[int, str, str], list[GraphNode]]:
    groups: dict[tuple[int, str, str], list[GraphNode]] = {}
    for node in nodes:
        if node.origin is None or node.name in reads or node.op != "call_function":
            continue
        groups.setdefault((node.origin.node_call, node.origin.name, node.target), []).append(node)
    return groups


def earlier_values(previous: list[GraphNode], current: list[GraphNode]) -> dict[int, int]:
    """sizes[i] -> the constant the previous graph held in its place, where the graphs show it."""
    reads = size_reads(current)
    if not reads:
        return {}
    old_groups = _by_autograd_node(previous, size_reads(previous))
    found: dict[int, int] = {}
    for key, new_nodes in _by_autograd_node(current, reads).items():
        for new, old in zip(new_nodes, old_groups.get(key, [])):
            new_tokens, old_tokens = REF_OR_INT.findall(new.args), REF_OR_INT.findall(old.args)
            if len(new_tokens) != len(old_tokens):
                continue
            for new_token, old_token in zip(new_tokens, old_tokens):
                index = reads.get(new_token[1:]) if new_token.startswith("%") else None
                if index is not None and not old_token.startswith("%"):
                    found.setdefault(index, int(old_token))
    return found


def _structure(graph: CAGraphEvent) -> tuple[tuple[int, str], ...]:
    return tuple((ref.node_call, ref.name) for ref in graph.autograd_nodes)


def _nodes(record: ModeRecord, graph: CAGraphEvent) -> list[GraphNode] | None:
    default = f"graphs/ca_{graph.ca_id}.json"
    relative = graph.nodes_file or default
    try:
        path = inside(record.path, relative, f"graph {graph.compile_id} of {record.path}")
        return load_graph_nodes(path) if path.is_file() else None
    except (UnreadableInput, OSError):
        return None  # a missing or damaged graph file: the earlier values stay unknown


def _named_by_graph(miss: CacheMissEvent, graph: CAGraphEvent | None) -> CacheMissEvent:
    """The miss with each changed size's node named as the graph it produced names its NodeCall.
    torch 2.13's size origins give the right NodeCall with, at times, another node's name (a VAE's
    `sizes[0]`, read by SumBackward0 at NodeCall 3, came as MulBackward0's: docs/torch-internals.md)."""
    if graph is None or not miss.changed_sizes:
        return miss
    names = {ref.node_call: ref.name for ref in graph.autograd_nodes}
    sizes = [msgspec.structs.replace(size, node=names[size.node_call])
             if size.node_call in names and names[size.node_call] != size.node else size for size in miss.changed_sizes]
    return msgspec.structs.replace(miss, changed_sizes=sizes) if sizes != list(miss.changed_sizes) else miss


def _with_earlier_values(record: ModeRecord) -> list[CacheMissEvent]:
    misses = record.of(CacheMissEvent)
    if not any(m.changed_sizes for m in misses):
        return misses
    graphs = sorted(record.of(CAGraphEvent), key=lambda g: g.ca_id)
    by_id = {g.ca_id: g for g in graphs}
    misses = [_named_by_graph(m, by_id.get(m.ca_id)) for m in misses]
    if not any(m.miss_kind == MISS_CHANGED_SHAPES and not m.inferred and m.changed_sizes for m in misses):
        return misses
    if not (record.path / "graphs").is_dir():  # a record without graph files (recorded so, or pruned)
        return misses
    # The previous capture of the same cache entry: the latest earlier graph of the same structure
    # that held the sizes as constants. One that reads them too (another backward of the same
    # nodes made dynamic by the same batch just before: dcgan's errD_real, then errD_fake) shows no
    # earlier value, so the one before it is read (up to EARLIER_TRIED).
    previous_of: dict[int, list[CAGraphEvent]] = {}
    earlier: dict[tuple[tuple[int, str], ...], list[CAGraphEvent]] = {}
    for graph in graphs:
        same = earlier.setdefault(_structure(graph), [])
        previous_of[graph.ca_id] = same[-EARLIER_TRIED:][::-1]
        same.append(graph)
    loaded: dict[int, list[GraphNode] | None] = {}

    def nodes(graph: CAGraphEvent) -> list[GraphNode] | None:
        if graph.ca_id not in loaded:
            loaded[graph.ca_id] = _nodes(record, graph)
        return loaded[graph.ca_id]

    out = []
    for miss in misses:
        current = by_id.get(miss.ca_id)
        numbering = None if current is None else miss_numbering(miss, current)
        if miss.miss_kind != MISS_CHANGED_SHAPES or miss.inferred or not miss.changed_sizes or numbering is None:
            out.append(miss)
            continue
        new_nodes = nodes(current)
        values: dict[int, int] = {}
        for previous in previous_of.get(miss.ca_id, ()) if new_nodes is not None else ():
            old_nodes = nodes(previous)
            read = earlier_values(old_nodes, new_nodes) if old_nodes is not None else {}
            # The code's sizes[k] is the miss's sizes[numbering[k]].
            values = {numbering[k]: v for k, v in read.items() if k < len(numbering)} if numbering else read
            if values:
                break
        if not values:
            out.append(miss)
            continue
        sizes = [msgspec.structs.replace(size, previous=values.get(size.index, size.previous)) for size in miss.changed_sizes]
        out.append(msgspec.structs.replace(miss, changed_sizes=sizes))
    return out


def miss_numbering(miss: CacheMissEvent, graph: CAGraphEvent) -> list[int] | None:
    """How the graph's code numbers the miss's sizes: [] where both number them alike (`sizes[i]`
    the same size in both), else the miss's index of the code's `sizes[k]` at position k; None
    where that is not known. torch 2.13 drops the sizes no node reads before the graph runs and
    numbers the rest anew (compiled_autograd.py, `remove_unused_sizes`): a graph that reads fewer
    sizes than the miss's "total of M" numbers them otherwise, which the capture records
    (CAGraphEvent.used_sizes; an older record does not)."""
    if graph.used_sizes is not None:
        return [] if graph.used_sizes == list(range(len(graph.used_sizes))) else list(graph.used_sizes)
    return [] if miss.dynamic_sizes is None or miss.dynamic_sizes <= graph.num_sizes else None


def misses_with_earlier_values(record: ModeRecord) -> list[CacheMissEvent]:
    """The mode's cache misses, each changed size with its earlier value where the graphs show it
    (`previous`; None where they do not) and its node named as its graph names that NodeCall
    (_named_by_graph). Computed once per record."""
    return list(record.derived("misses_with_earlier_values", _with_earlier_values))


def saved_values_changed(record: ModeRecord, before: CAGraphEvent, after: CAGraphEvent) -> list[tuple[str, int, int]] | None:
    """What differs between two graphs of the same nodes, in the same order, calling the same ops
    (a miss torch names "new node" where only a number a node saved changed: DivBackward1's divisor,
    the batch size of a mean over soft targets): (the autograd node, its value before, after) for
    each integer constant of a node's arguments that changed, in graph order, each once. None where
    a graph file is missing or the two differ in anything but integer constants."""
    old_nodes, new_nodes = _nodes(record, before), _nodes(record, after)
    if old_nodes is None or new_nodes is None or len(old_nodes) != len(new_nodes):
        return None
    found: dict[tuple[str, int, int], None] = {}
    for old, new in zip(old_nodes, new_nodes):
        if (old.op, old.target, old.origin) != (new.op, new.target, new.origin):
            return None
        if old.args == new.args:
            continue
        if INT_CONSTANT.sub("0", old.args) != INT_CONSTANT.sub("0", new.args):
            return None  # more than numbers differ (another reference, another op)
        name = old.origin.name if old.origin is not None else old.target.rsplit(".", 1)[-1]
        for a, b in zip(INT_CONSTANT.findall(old.args), INT_CONSTANT.findall(new.args)):
            if a != b:
                found.setdefault((name, int(a), int(b)))
    return list(found)
