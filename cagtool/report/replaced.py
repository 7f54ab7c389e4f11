"""Which earlier compiled-autograd graph each capture replaced, read from the record's graphs and
cache misses: one rule for `diff-graphs` (what a graph is compared with) and `recompiles
--explain` (what a recompile's graph is read against: the nodes that left, the hooks added).
"""

from __future__ import annotations

from dataclasses import dataclass

from cagtool.record.schema import MISS_CHANGED_SHAPES, CacheMissEvent, CAGraphEvent, SourceRef

# How the graph a graph replaced was found (ReplacedPair.by).
BY_BACKWARD_CALL = "backward_call"  # the latest earlier graph of the same backward call
BY_AUTOGRAD_NODES = "autograd_nodes"  # a shape change: the latest earlier graph of the same autograd nodes
BY_CAPTURE_ORDER = "capture_order"  # nothing in the record ties it to an earlier graph: the one captured before it


@dataclass(frozen=True)
class ReplacedPair:
    old: int
    new: int
    by: str  # BY_*


def backward_call(miss: CacheMissEvent | None) -> SourceRef | None:
    """The user line whose backward call captured the graph a miss produced."""
    if miss is None:
        return None
    if miss.backward_call is not None:
        return miss.backward_call
    return miss.source if miss.source is not None and miss.source.how == "backward_call" else None


def autograd_nodes(graph: CAGraphEvent | None) -> tuple[tuple[int, str], ...] | None:
    """The graph's autograd nodes with their NodeCalls; None when the capture could not map them."""
    if graph is None or not graph.autograd_nodes:
        return None
    return tuple((ref.node_call, ref.name) for ref in graph.autograd_nodes)


def replaced_by(ids: list[int], graphs: dict[int, CAGraphEvent], misses: dict[int, CacheMissEvent]) -> list[ReplacedPair]:
    """For every graph after the first, the graph it replaced: the latest earlier graph of its
    backward call, for a shape change the latest of that call with the same autograd nodes.

    Compiled autograd keeps one graph per cache entry, and an entry is more than the autograd
    nodes: the keys of their inputs count too, so two calls of one model's backward (dcgan's
    errD_real and errD_fake: the second accumulates into .grad the first wrote) are two entries of
    the same nodes. The record keeps no keys; the backward call (the user's line) tells those
    entries apart, and a GAN's discriminator and generator as well. Where no graph of its call has
    a shape change's nodes (the call unrecorded: an imported log), the latest earlier graph of
    those nodes is the entry it replaced. A graph tied to none, the first of its call or one whose
    miss is lost, is paired with the graph captured just before it, and says so (BY_CAPTURE_ORDER)."""
    last_of_call: dict[tuple[str, int], int] = {}
    last_of_call_nodes: dict[tuple[tuple[str, int], tuple[tuple[int, str], ...]], int] = {}
    last_of_nodes: dict[tuple[tuple[int, str], ...], int] = {}
    pairs: list[ReplacedPair] = []
    for position, ca_id in enumerate(ids):
        miss = misses.get(ca_id)
        call = backward_call(miss)
        where = (call.file, call.line) if call is not None else None
        nodes = autograd_nodes(graphs.get(ca_id))
        shapes = miss is not None and miss.miss_kind == MISS_CHANGED_SHAPES
        if position:
            found: tuple[int, str] | None = None
            if shapes and where is not None and nodes is not None and (where, nodes) in last_of_call_nodes:
                found = last_of_call_nodes[(where, nodes)], BY_BACKWARD_CALL
            elif shapes and nodes is not None and nodes in last_of_nodes:
                found = last_of_nodes[nodes], BY_AUTOGRAD_NODES
            elif where is not None and where in last_of_call:
                found = last_of_call[where], BY_BACKWARD_CALL
            old, by = found if found is not None else (ids[position - 1], BY_CAPTURE_ORDER)
            pairs.append(ReplacedPair(old, ca_id, by))
        if where is not None:
            last_of_call[where] = ca_id
            if nodes is not None:
                last_of_call_nodes[(where, nodes)] = ca_id
        if nodes is not None:
            last_of_nodes[nodes] = ca_id
    return pairs
