"""Which graphs `diff-graphs` compares, read from run records, and the recompile behind each one.

A graph is named by (run, mode, ca_id). Within a run, with no ids given, every graph is compared
with the one it replaced: the graph its backward call ran with until the cache miss that produced
it (`replaced_by`). The miss event says why (a new autograd node, changed shapes) and where (step,
user line); that becomes the header of the comparison.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from cagtool.errors import UnreadableInput
from cagtool.record.loader import ModeRecord, RunRecord, inside, load_graph_columns
from cagtool.record.graph_file import GraphColumns
from cagtool.record.schema import (
    EVENTS_FILE,
    GRAPHS_DIR,
    MISS_CHANGED_SHAPES,
    MISS_NEW_NODE,
    CacheMissEvent,
    CAGraphEvent,
    SourceRef,
)
from cagtool.report.graphs.diff import GraphDiff, cyclic_gc_paused, diff_graphs
from cagtool.report.changed_sizes import misses_with_earlier_values
from cagtool.report.replaced import ReplacedPair, replaced_by

_GRAPH_FILE = re.compile(r"^ca_(\d+)\.json$")


@dataclass(frozen=True)
class GraphSide:
    """One graph of a comparison and what the record says about it."""

    run: Path
    mode: str
    ca_id: int
    step: int | None
    code_file: Path  # the readable .py next to the nodes file
    recompile: str | None  # why this graph was captured (its cache miss), in one line; None if unrecorded
    miss: CacheMissEvent | None
    num_sizes: int | None = None  # the dynamic sizes its code reads (the ca_graph event); None if unrecorded

    @property
    def compile_id(self) -> str:
        return f"!{self.ca_id}"

    @property
    def first_capture(self) -> bool:
        return self.miss is not None and is_first_capture(self.miss)


@dataclass(frozen=True)
class SizesDiffer:
    """The record's word that compiled autograd holds other sizes dynamic (symbolic) for two
    graphs, which their code need not show. A changed-shapes cache miss makes sizes of the cache
    key dynamic that were constants in it (torch's "total of M" counts every dynamic one); a size
    no node reads leaves no trace in the graph's code (torch 2.13 drops it before the graph runs:
    remove_unused_sizes, which renumbers the sizes the code reads). Two graphs of the same code,
    one captured so, are not the same graph: the one is reused for sizes the other was not (a
    padded batch's length in a CompiledFunctionBackward's key: !1 for one length, !2 for any)."""

    old: CacheMissEvent | None  # the side's own changed-shapes miss; None: captured for another reason
    new: CacheMissEvent | None
    same_record: bool  # both graphs of one mode record: their ids are their capture order


@dataclass(frozen=True)
class GraphComparison:
    old: GraphSide
    new: GraphSide
    diff: GraphDiff
    paired_by: str | None = None  # BY_*: how `old` was chosen when no ids were given; None: given
    sizes: SizesDiffer | None = None  # None: the record says nothing differs in the sizes held dynamic for them

    @property
    def identical(self) -> bool:
        """The same code and, as far as the record tells, the same sizes held dynamic: what
        `diff-graphs` exits 0 for."""
        return self.diff.identical and self.sizes is None and not self.diff.summary.resized


def shape_miss(side: GraphSide) -> CacheMissEvent | None:
    """The changed-shapes cache miss that captured the side's graph, as torch gave it (one
    cagtool inferred from a graph diff says no more than the code does)."""
    miss = side.miss
    return miss if miss is not None and miss.miss_kind == MISS_CHANGED_SHAPES and not miss.inferred else None


def sizes_differ(old: GraphSide, new: GraphSide, same_record: bool) -> SizesDiffer | None:
    """Whether the record says compiled autograd holds other sizes dynamic for the two graphs: one
    captured by a changed-shapes miss and the other not, or by misses that made other sizes dynamic
    (torch's counts and indices; the values are the batch's, not the graph's)."""
    a, b = shape_miss(old), shape_miss(new)

    def facts(miss: CacheMissEvent | None) -> tuple | None:
        return None if miss is None else (miss.changed_count, miss.dynamic_sizes, tuple(s.index for s in miss.changed_sizes))

    if facts(a) == facts(b):
        return None
    return SizesDiffer(a, b, same_record)


def graph_ids(mode: ModeRecord) -> list[int]:
    """CA graph ids of a mode record: from its events, plus any graph file the events lost
    (a crash can cut the event stream after a graph file was written)."""
    ids = {event.ca_id for event in mode.of(CAGraphEvent)}
    graphs = mode.path / GRAPHS_DIR
    if graphs.is_dir():
        for path in graphs.iterdir():
            match = _GRAPH_FILE.match(path.name)
            if match:
                ids.add(int(match.group(1)))
    return sorted(ids)


def _where(source: SourceRef | None) -> str:
    return f"{Path(source.file).name}:{source.line}" if source is not None else ""


def _size_text(index: int, previous: int | None, value: int | None) -> str:
    if previous is not None and value is not None:
        return f"sizes[{index}] {previous}→{value}"
    return f"sizes[{index}]" + (f"={value}" if value is not None else "")


def is_first_capture(miss: CacheMissEvent) -> bool:
    """A miss at NodeCall 0 (the GraphRoot) means the cache had nothing: the first backward, or
    the first after a reset, not a recompile of an existing graph."""
    return miss.miss_kind == MISS_NEW_NODE and miss.node_call == 0


def changed_sizes_text(miss: CacheMissEvent) -> str:
    """'sizes[0] 10→100, sizes[1]=100 of SumBackward0 at NodeCall 1': a changed-shapes miss's sizes
    (the first 6) and their node where they have one; "" when the miss lists none."""
    sizes = [_size_text(size.index, size.previous, size.value) for size in miss.changed_sizes[:6]]
    if not sizes:
        return ""
    text = ", ".join(sizes) + (", …" if len(miss.changed_sizes) > 6 else "")
    owners = {(s.node, s.node_call) for s in miss.changed_sizes if s.node}
    if len(owners) == 1:
        node, call = owners.pop()
        text += f" of {node}" + (f" at NodeCall {call}" if call is not None else "")
    return text


def describe_recompile(miss: CacheMissEvent) -> str:
    """'new autograd node MulBackward0 at NodeCall 2, step 3, train.py:14' and the like."""
    if is_first_capture(miss):
        what = "nothing cached yet at the graph root"
    elif miss.miss_kind == MISS_NEW_NODE and miss.node:
        what = f"new autograd node {miss.node}"
        if miss.node_call is not None:
            what += f" at NodeCall {miss.node_call}"
    elif miss.miss_kind == MISS_CHANGED_SHAPES:
        count = miss.changed_count
        what = f"{count} changed tensor shape{'s' if count != 1 else ''}"
        sizes = changed_sizes_text(miss)
        if sizes:
            what += ": " + sizes
    else:
        what = miss.message.strip() or "cache miss"
    parts = [what]
    if miss.step is not None:
        parts.append(f"step {miss.step}")
    where = _where(miss.source or miss.backward_call)
    if where:
        parts.append(where)
    return ", ".join(parts)


def _side_code_file(mode: ModeRecord, ca_id: int) -> Path:
    event = next((e for e in mode.of(CAGraphEvent) if e.ca_id == ca_id), None)
    relative = event.code_file if event is not None and event.code_file else f"{GRAPHS_DIR}/ca_{ca_id}.py"
    return inside(mode.path, relative, f"graph !{ca_id} of {mode.path / EVENTS_FILE}")


def _side(run: RunRecord, mode: ModeRecord, ca_id: int) -> GraphSide:
    event = next((e for e in mode.of(CAGraphEvent) if e.ca_id == ca_id), None)
    miss = next((e for e in misses_with_earlier_values(mode) if e.ca_id == ca_id), None)
    code = _side_code_file(mode, ca_id)
    step = event.step if event is not None else (miss.step if miss is not None else None)
    return GraphSide(
        run=run.path,
        mode=mode.mode,
        ca_id=ca_id,
        step=step,
        code_file=code,
        recompile=describe_recompile(miss) if miss is not None else None,
        miss=miss,
        num_sizes=event.num_sizes if event is not None else None,
    )


def _nodes_path(mode: ModeRecord, ca_id: int) -> Path:
    event = next((e for e in mode.of(CAGraphEvent) if e.ca_id == ca_id), None)
    relative = event.nodes_file if event is not None and event.nodes_file else f"{GRAPHS_DIR}/ca_{ca_id}.json"
    return inside(mode.path, relative, f"graph !{ca_id} of {mode.path / EVENTS_FILE}")


def _mode_with_graphs(run: RunRecord, mode_name: str | None) -> ModeRecord:
    mode = run.mode(mode_name)
    if not graph_ids(mode):
        raise UnreadableInput(
            f"run {run.path} (mode {mode.mode}) has no compiled-autograd graphs to diff; "
            f"was compiled autograd active? `cagtool summary {run.path}` shows what ran"
        )
    return mode


def _check_id(run: RunRecord, mode: ModeRecord, ca_id: int) -> None:
    ids = graph_ids(mode)
    if ca_id not in ids:
        have = ", ".join(str(i) for i in ids)
        raise UnreadableInput(f"run {run.path} (mode {mode.mode}) has no graph {ca_id}; its graphs are: {have}")


def _load_nodes(mode: ModeRecord, ca_id: int) -> GraphColumns:
    path = _nodes_path(mode, ca_id)
    if not path.exists():
        raise UnreadableInput(f"graph {ca_id} of {mode.path} is recorded but its file is missing: {path}")
    return load_graph_columns(path)


def compare(old_run: RunRecord, old_id: int, new_run: RunRecord, new_id: int, mode_name: str | None = None) -> GraphComparison:
    """Diff graph `old_id` of `old_run` against graph `new_id` of `new_run` (the same run is fine)."""
    old_mode = _mode_with_graphs(old_run, mode_name)
    new_mode = old_mode if new_run is old_run else _mode_with_graphs(new_run, mode_name)
    _check_id(old_run, old_mode, old_id)
    _check_id(new_run, new_mode, new_id)
    with cyclic_gc_paused():  # reading a graph file allocates as many objects as diffing it
        diff = diff_graphs(_load_nodes(old_mode, old_id), _load_nodes(new_mode, new_id))
    old, new = _side(old_run, old_mode, old_id), _side(new_run, new_mode, new_id)
    return GraphComparison(old, new, diff, sizes=sizes_differ(old, new, same_record=old_mode is new_mode))


def replaced_pairs(run: RunRecord, mode_name: str | None = None) -> list[ReplacedPair]:
    """Every graph after the first with the graph it replaced (`replaced_by`), in capture order."""
    mode = _mode_with_graphs(run, mode_name)
    graphs: dict[int, CAGraphEvent] = {}
    for graph in mode.of(CAGraphEvent):
        graphs.setdefault(graph.ca_id, graph)
    misses: dict[int, CacheMissEvent] = {}
    for miss in mode.of(CacheMissEvent):
        misses.setdefault(miss.ca_id, miss)
    return replaced_by(graph_ids(mode), graphs, misses)


def compare_replaced(run: RunRecord, mode_name: str | None = None) -> list[GraphComparison]:
    return [replace(compare(run, pair.old, run, pair.new, mode_name), paired_by=pair.by) for pair in replaced_pairs(run, mode_name)]

