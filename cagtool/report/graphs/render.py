"""Renderers for graph comparisons: side by side (a rich table), unified (diff-like text), JSON.

Each renderer's constructor takes its options; `render(comparisons, console)` writes them.
Node text goes through rich `Text` objects, never markup: FX arguments are full of brackets.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from cagtool.report.text.console import is_unbounded
from cagtool.report.text.safe_text import is_safe

from cagtool.report.graphs.diff import CHANGED, EQUAL, INSERTED, REMOVED, FieldChange, NodeDiff
from cagtool.record.schema import MISS_NEW_NODE, CacheMissEvent
from cagtool.report.graphs.runs import GraphComparison, GraphSide, SizesDiffer, changed_sizes_text, describe_recompile
from cagtool.report.replaced import BY_CAPTURE_ORDER, backward_call
from cagtool.report.graphs.normalize import NormNode

JSON_FORMAT = "cagtool-graph-diff"
JSON_SCHEMA_VERSION = 1

STYLE = {INSERTED: "green", REMOVED: "red", CHANGED: "yellow", EQUAL: "dim"}
CA_DUMMY_SIZE = 123456789  # torch/_dynamo/compiled_autograd.py allocate_dummy
MARK = {INSERTED: "+", REMOVED: "-", CHANGED: "~", EQUAL: " "}


def node_text(node: NormNode) -> str:
    """One node as a line of pseudo-code: `sum_backward0 = SumBackward0([validate_outputs[0]], ...)`."""
    if node.op == "placeholder":
        text = f"{node.label}  (input)"
    elif node.op == "output":
        text = f"return {node.args}"
    elif node.op == "call_method":
        text = f"{node.label} = .{node.short}({node.args})"
    else:
        text = f"{node.label} = {node.short}({node.args})"
    # CA traces through dummy tensors of shape [0, 123456789]; their "shape" is not the data's.
    if node.shape is not None and CA_DUMMY_SIZE in node.shape:
        pass
    elif node.shape is not None or node.dtype is not None:
        shape = "[" + ", ".join(str(d) for d in node.shape) + "]" if node.shape is not None else ""
        text += f"  : {node.dtype or ''}{shape}"
    if node.stride is not None and CA_DUMMY_SIZE not in node.stride:
        text += "  stride [" + ", ".join(str(d) for d in node.stride) + "]"
    if node.hook_type and node.hook_type not in node.args:
        text += f"  hook {node.hook_type}"
    return text


@dataclass(frozen=True)
class Hunk:
    start: int  # entry indices, stop exclusive
    stop: int
    skipped_before: int  # equal entries left out before this hunk


def hunks(entries: Sequence[NodeDiff], context: int) -> tuple[list[Hunk], int]:
    """Spans of entries to show (each difference with `context` equal entries around it), and the
    number of equal entries left out after the last span."""
    changed = [i for i, e in enumerate(entries) if e.kind != EQUAL]
    spans: list[list[int]] = []
    for i in changed:
        start, stop = max(0, i - context), min(len(entries), i + context + 1)
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], stop)
        else:
            spans.append([start, stop])
    out: list[Hunk] = []
    previous_stop = 0
    for start, stop in spans:
        out.append(Hunk(start, stop, start - previous_stop))
        previous_stop = stop
    return out, len(entries) - previous_stop


def origin_label(entry: NodeDiff) -> str:
    old = entry.old.origin_text if entry.old is not None else None
    new = entry.new.origin_text if entry.new is not None else None
    if old is None or new is None or old == new:
        return (old or new) or ""
    return f"{old} → {new}"


def _side_text(side: GraphSide, nodes: int) -> str:
    step = f"step {side.step}, " if side.step is not None else ""
    return f"{side.compile_id}  {side.code_file}  ({step}{nodes} nodes)"


def header_lines(comparison: GraphComparison) -> list[Text]:
    s = comparison.diff.summary
    lines = [
        Text("--- " + _side_text(comparison.old, s.old_nodes), style="bold red"),
        Text("+++ " + _side_text(comparison.new, s.new_nodes), style="bold green"),
    ]
    new = comparison.new
    if new.recompile:
        what = f"{new.compile_id} is a first capture" if new.first_capture else f"recompile that produced {new.compile_id}"
        lines.append(Text(f"{what}: {new.recompile}", style="bold"))
    if comparison.paired_by == BY_CAPTURE_ORDER:
        lines.append(Text(unpaired_line(comparison)))
    return lines


def unpaired_line(comparison: GraphComparison) -> str:
    """Why a graph is shown against the one captured before it rather than one it replaced."""
    call = backward_call(comparison.new.miss)
    new, old = comparison.new.compile_id, comparison.old.compile_id
    if call is not None:
        return f"{new} replaced no earlier graph of its backward call ({Path(call.file).name}:{call.line}): shown against {old}, the graph captured before it"
    return f"the record ties {new} to no earlier graph: shown against {old}, the graph captured before it"


def _listed(sign: str, nodes: list[str], most: int = 6) -> list[str]:
    """Each autograd node with its NodeCall when there are few; counts per name when there are many."""
    if len(nodes) <= most:
        return [f"{sign}{n}" for n in nodes]
    names = Counter(n.split(" (NodeCall ")[0] for n in nodes)
    return [f"{sign}{count} {name}" for name, count in names.most_common()]


def summary_lines(comparison: GraphComparison) -> list[Text]:
    s = comparison.diff.summary
    if comparison.identical:
        lines = [Text(f"identical: {s.new_nodes} nodes, same structure", style="bold")]
        miss = comparison.new.miss
        if miss is not None and not comparison.new.first_capture and miss.miss_kind == MISS_NEW_NODE and miss.node:
            # The cache key holds more than the graph's code shows: the node's identity and its inputs' keys.
            node = miss.node.rsplit("::", 1)[-1]
            why = (" (the backward of a forward Dynamo recompiled is another CompiledFunctionBackward, of the same ops here)"
                   if "CompiledFunctionBackward" in node else "")
            lines.append(Text(f"the cache miss that captured {comparison.new.compile_id} was on the key of {node}, which the "
                              f"graph's code does not show{why}: cagtool recompiles --explain says why"))
        return lines
    if comparison.diff.identical and comparison.sizes is not None:
        # The code is the same; the record says compiled autograd holds other sizes dynamic for one:
        # sizes of its cache key no node reads (torch drops them before the compiled graph runs).
        lines = [Text(f"same code, not the same graph: {s.new_nodes} nodes, same structure, but the sizes compiled autograd "
                      "holds dynamic for them differ (the record shows it, the code does not)", style="bold")]
        return lines + [Text(line) for line in sizes_lines(comparison, comparison.sizes)]
    resized = f" ({s.resized} only in their sizes' values)" if s.resized else ""
    if comparison.diff.identical:
        return [Text(f"same code, captured for other sizes: {s.new_nodes} nodes, same structure; {s.resized} of them hold sizes "
                     "of other values (shown above, symbol by symbol as each capture recorded them)", style="bold")]
    lines = [
        Text(
            f"{s.inserted} inserted, {s.removed} removed, {s.changed} changed{resized}, "
            f"{s.equal} unchanged "
            f"({s.old_nodes} → {s.new_nodes} nodes)",
            style="bold",
        )
    ]
    if s.autograd_nodes_added or s.autograd_nodes_removed:
        parts = _listed("+", s.autograd_nodes_added) + _listed("-", s.autograd_nodes_removed)
        lines.append(Text("autograd nodes: " + ", ".join(parts)))
    if s.hooks_added or s.hooks_removed:
        parts = [f"+{n}" for n in s.hooks_added] + [f"-{n}" for n in s.hooks_removed]
        lines.append(Text("hooks: " + ", ".join(parts)))
    if s.op_histogram_delta:
        lines.append(Text("ops: " + ", ".join(f"{op} {d:+d}" for op, d in s.op_histogram_delta.items())))
    if s.became_symbolic:
        parts = [f"{b.old} → {b.new} ({b.node} {b.where})" for b in s.became_symbolic[:8]]
        more = f", … {len(s.became_symbolic) - 8} more" if len(s.became_symbolic) > 8 else ""
        lines.append(Text(f"became symbolic ({len(s.became_symbolic)}): " + ", ".join(parts) + more))
    return lines


def _taken(side: GraphSide, miss: CacheMissEvent) -> str:
    """'; 4 sizes are dynamic for !2 (torch's count), its code reads 2', where the miss has torch's
    total. Compiled autograd's cache key holds them all; the graph's code reads those a node uses
    (torch drops the others, remove_unused_sizes, and renumbers the rest), often fewer."""
    if miss.dynamic_sizes is None:
        return ""
    reads = f", its code reads {side.num_sizes}" if side.num_sizes is not None else ""
    many = miss.dynamic_sizes != 1
    return f"; {miss.dynamic_sizes} size{'s' if many else ''} {'are' if many else 'is'} dynamic for {side.compile_id} (torch's count){reads}"


def _at(miss: CacheMissEvent) -> str:
    return f" (step {miss.step})" if miss.step is not None else ""


def sizes_lines(comparison: GraphComparison, sizes: SizesDiffer) -> list[str]:
    """What the record says differs in the sizes two graphs take dynamic. Graphs of one record:
    the sizes that became dynamic between the earlier capture and the later, as the later one's
    cache miss lists them. Else each graph's own capture, side by side."""
    sides = [(comparison.old, sizes.old), (comparison.new, sizes.new)]
    if sizes.same_record:
        (earlier, _), (later, miss) = sorted(sides, key=lambda pair: pair[0].ca_id)
        if miss is not None:
            listed = changed_sizes_text(miss) or f"{miss.changed_count} size{'s' if miss.changed_count != 1 else ''} (not listed)"
            return [f"sizes that became dynamic (symbolic) between {earlier.compile_id} and {later.compile_id}: {listed}, at the "
                    f"cache miss that captured {later.compile_id}{_at(miss)}{_taken(later, miss)}"]
    lines = []
    for side, miss in sides:
        name = side.compile_id if sizes.same_record else f"{side.compile_id} of {side.run}"
        if miss is not None:
            count = miss.changed_count
            listed = changed_sizes_text(miss)
            lines.append(f"{name} was captured when {count} size{'s' if count != 1 else ''} became dynamic (symbolic)"
                         f"{': ' + listed if listed else ''}{_at(miss)}{_taken(side, miss)}")
        elif side.miss is not None:
            lines.append(f"{name} was captured for: {describe_recompile(side.miss)}")
        else:
            lines.append(f"{name}: the record holds no cache miss for it")
    return lines


def _sizes_json(comparison: GraphComparison) -> dict[str, Any] | None:
    sizes = comparison.sizes
    if sizes is None:
        return None

    def side(graph: GraphSide, miss: CacheMissEvent | None) -> dict[str, Any]:
        return {
            "compile_id": graph.compile_id,
            "captured_for": graph.miss.miss_kind if graph.miss is not None else None,
            "became_dynamic": [{"index": size.index, "value": size.value, "previous": size.previous, "node": size.node, "node_call": size.node_call}
                               for size in miss.changed_sizes] if miss is not None else [],
            "changed_count": miss.changed_count if miss is not None else None,
            "dynamic_sizes": miss.dynamic_sizes if miss is not None else None,  # torch's "total of M"
            "code_reads": graph.num_sizes,
        }

    return {"old": side(comparison.old, sizes.old), "new": side(comparison.new, sizes.new), "lines": sizes_lines(comparison, sizes)}


def changed_fields(entry: NodeDiff) -> str:
    """The fields that changed; a shape or stride judged by value with its values (its symbols may
    read alike on both sides, `[s35, 1]` with s35 64 in one graph and 8 in the other), and with its
    symbols where the dims that share one changed (duck sizing tied two sizes that came equal)."""
    return ", ".join(_field_change(c) for c in entry.changes)


def _field_change(change: FieldChange) -> str:
    if change.old_values is None:
        return change.field
    values = f"{change.field} {change.old_values} -> {change.new_values}"
    return f"{values} (symbols {change.old} -> {change.new})" if change.ties_changed else values


class _HunkRenderer:
    """Each comparison as its header, its differences with `context` unchanged nodes around them
    (the part a subclass draws), then its summary."""

    def __init__(self, context: int = 3) -> None:
        self.context = context

    def render(self, comparisons: Sequence[GraphComparison], console: Console) -> None:
        for number, comparison in enumerate(comparisons):
            if number:
                console.print()
            for line in header_lines(comparison):
                console.print(line, soft_wrap=True)
            spans, skipped_after = hunks(comparison.diff.entries, self.context)
            self._differences(comparison, spans, skipped_after, console)
            for line in summary_lines(comparison):
                console.print(line, soft_wrap=True)

    def _differences(self, comparison: GraphComparison, spans: list[Hunk], skipped_after: int, console: Console) -> None:
        raise NotImplementedError


class StatRenderer(_HunkRenderer):
    """Each comparison's header and summary alone (`git diff --stat`'s use): a run of many graphs,
    or graphs of thousands of nodes, in a screen."""

    def _differences(self, comparison: GraphComparison, spans: list[Hunk], skipped_after: int, console: Console) -> None:
        return None


class UnifiedRenderer(_HunkRenderer):
    """`diff -u`-like text: `-` old, `+` new; a changed node is a `-`/`+` pair."""

    def _differences(self, comparison: GraphComparison, spans: list[Hunk], skipped_after: int, console: Console) -> None:
        entries = comparison.diff.entries
        for hunk in spans:
            where = f"{hunk.skipped_before} unchanged before" if hunk.start else "start of graph"
            console.print(Text(f"@@ {where} @@", style="cyan"), soft_wrap=True)
            origin = None
            for entry in entries[hunk.start : hunk.stop]:
                if origin_label(entry) != origin:
                    origin = origin_label(entry)
                    console.print(Text(f"  # {origin}", style="cyan"), soft_wrap=True)
                self._entry(entry, console)
        if spans and skipped_after:
            console.print(Text(f"@@ {skipped_after} unchanged after @@", style="cyan"), soft_wrap=True)

    def _entry(self, entry: NodeDiff, console: Console) -> None:
        # One node, one line: no wrapping, so the output greps like `diff -u`.
        lines: list[Text] = []
        if entry.old is not None and entry.kind != EQUAL:
            lines.append(Text("-" + node_text(entry.old), style="red"))
        if entry.new is not None:
            if entry.kind == EQUAL:
                # An input item an insertion renumbered: the old graph's lines name it by its old label.
                was = f"  # was {entry.old.label}" if (entry.old is not None and entry.new.input_list is not None
                                                 and entry.old.label != entry.new.label) else ""
                lines.append(Text(" " + node_text(entry.new) + was, style=STYLE[EQUAL]))
            else:
                changed = f"  # changed: {changed_fields(entry)}" if entry.kind == CHANGED else ""
                lines.append(Text("+" + node_text(entry.new) + changed, style="green"))
        for line in lines:
            console.print(line, soft_wrap=True)


class SideBySideRenderer(_HunkRenderer):
    """A table, old graph left and new graph right, one aligned node per row."""

    def _differences(self, comparison: GraphComparison, spans: list[Hunk], skipped_after: int, console: Console) -> None:
        if not spans:
            return
        entries = comparison.diff.entries
        rows: list[tuple[Text, Text, Text]] = []
        for hunk in spans:
            self._gap(rows, hunk.skipped_before)
            self._hunk(rows, entries[hunk.start : hunk.stop])
        self._gap(rows, skipped_after)
        if _plain_layout(console, rows):
            console.print(_PlainRows(lambda: self._table(comparison, console), rows))
            return
        console.print(_filled(self._table(comparison, console), rows))

    def _table(self, comparison: GraphComparison, console: Console) -> Table:
        table = Table(show_header=True, header_style="bold", expand=not is_unbounded(console), show_lines=False, pad_edge=False)
        table.add_column("", width=1, no_wrap=True)
        table.add_column(f"{comparison.old.compile_id} (old)", ratio=1, overflow="fold")
        table.add_column(f"{comparison.new.compile_id} (new)", ratio=1, overflow="fold")
        return table

    def _gap(self, rows: list[tuple[Text, Text, Text]], unchanged: int) -> None:
        if unchanged:
            gap = Text(f"⋯ {unchanged} unchanged", style="dim italic")
            rows.append((Text(""), gap, gap))

    def _hunk(self, rows: list[tuple[Text, Text, Text]], entries: Sequence[NodeDiff]) -> None:
        origin = None
        for entry in entries:
            here = origin_label(entry)
            if here != origin:
                old_o = entry.old.origin_text if entry.old is not None else ""
                new_o = entry.new.origin_text if entry.new is not None else ""
                rows.append((Text(""), Text(f"# {old_o}" if old_o else "", style="cyan"), Text(f"# {new_o}" if new_o else "", style="cyan")))
                origin = here
            style = STYLE[entry.kind]
            left = Text(node_text(entry.old), style=style) if entry.old is not None else Text("")
            right = Text(node_text(entry.new), style=style) if entry.new is not None else Text("")
            if entry.kind == CHANGED:
                right.append(f"  # {changed_fields(entry)}", style="yellow italic")
            rows.append((Text(MARK[entry.kind], style=style), left, right))


def _filled(table: Table, rows: Sequence[tuple[Text, Text, Text]]) -> Table:
    for row in rows:
        table.add_row(*row)
    return table


def _plain_layout(console: Console, rows: Sequence[tuple[Text, Text, Text]]) -> bool:
    """Whether the side-by-side table can be drawn by `_PlainRows`: a colourless console with
    unicode box characters, and cells of safe single-line text (tabs, newlines and anything
    `safe_text` would rewrite go through rich's own table)."""
    if console.color_system is not None or console.options.ascii_only:
        return False
    return all(is_safe(cell.plain) and "\t" not in cell.plain and "\n" not in cell.plain for row in rows for cell in row)


class _PlainRows:
    """The side-by-side table as rich draws it on a colourless console, its rows drawn here.

    Rich's table renders every cell through its whole layout machinery; for a diff of two
    10,000-node graphs (about a thousand rows, 100 columns) that was 0.65 s of CPU, drawn here in
    0.07 s: with the graph files' msgspec decode, `diff-graphs` went from 1.15 s to 0.51 s of
    whole-process CPU (medians, `benchmarks/cli_speed.py`, 2026-11-26, benchmarks/README.md),
    far above the 20 % a hand-written piece needs (CONTRIBUTING.md). Rich still lays the
    table out: it draws the header, the borders and a row of each column's widest cells, which
    gives the column widths it would choose for the whole table; the rows are then folded with
    rich's own `Text.wrap` where they do not fit, padded and joined with the table's box
    characters. tests/report/graphs/test_graph_diff.py holds the output equal to rich's."""

    def __init__(self, make_table: Callable[[], Table], rows: Sequence[tuple[Text, Text, Text]]) -> None:
        self.make_table = make_table
        self.rows = rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment | Table]:
        widest = tuple(max((row[i] for row in self.rows), key=lambda cell: cell_len(cell.plain)) for i in range(3))
        layout = self.make_table()
        layout.add_row(*widest)
        drawn = ["".join(segment.text for segment in line) for line in console.render_lines(layout, options, pad=False)]
        head = next((i for i, line in enumerate(drawn) if line.startswith("┡")), None)
        widths = [len(part) for part in drawn[0][1:-1].split("┳")]
        # pad_edge=False: the first column has no left padding, the last no right padding.
        pads = ((0, 1), (1, 1), (1, 0))
        content = [width - left - right for width, (left, right) in zip(widths, pads)]
        if head is None or len(widths) != 3 or min(content) < 1:  # a console too narrow for the columns: rich squeezes them
            yield _filled(self.make_table(), self.rows)
            return
        for line in drawn[: head + 1]:
            yield Segment(line)
            yield Segment.line()
        folded: dict[tuple[str, int], list[str]] = {}  # an unchanged node is the same text on both sides
        for row in self.rows:
            cells = []
            for cell, width in zip(row, content):
                key = (cell.plain, width)
                lines = folded.get(key)
                if lines is None:
                    lines = folded[key] = _folded(console, cell, width)
                cells.append(lines)
            height = max(len(lines) for lines in cells)
            for n in range(height):
                parts = []
                for lines, width, (left, right) in zip(cells, content, pads):
                    text = lines[n] if n < len(lines) else " " * width
                    parts.append(" " * left + text + " " * right)
                yield Segment("│" + "│".join(parts) + "│")
                yield Segment.line()
        yield Segment(drawn[-1])
        yield Segment.line()


def _folded(console: Console, cell: Text, width: int) -> list[str]:
    """A cell's lines as rich's table folds them at `width` cells, each padded to the width."""
    plain = cell.plain
    length = cell_len(plain)
    if length <= width:
        return [plain + " " * (width - length)]
    return [line.plain for line in Text(plain).wrap(console, width, justify="left", overflow="fold")]


def _node_json(node: NormNode | None) -> dict[str, Any] | None:
    if node is None:
        return None
    return {
        "name": node.name,
        "label": node.label,
        "op": node.op,
        "target": node.short,
        "target_full": node.target,
        "args": node.args,
        "origin": node.origin,
        "node_call": node.node_call,
        "aot_id": node.aot_id,
        "hook_type": node.hook_type,
        "shape": list(node.shape) if node.shape is not None else None,
        "dtype": node.dtype,
        "stride": list(node.stride) if node.stride is not None else None,
    }


def _side_json(side: GraphSide, nodes: int) -> dict[str, Any]:
    return {
        "run": str(side.run),
        "mode": side.mode,
        "ca_id": side.ca_id,
        "compile_id": side.compile_id,
        "step": side.step,
        "nodes": nodes,
        "code_file": str(side.code_file),
        "recompile": side.recompile,
        "miss_kind": side.miss.miss_kind if side.miss is not None else None,
    }


def comparison_json(comparison: GraphComparison) -> dict[str, Any]:
    s = comparison.diff.summary
    return {
        "old": _side_json(comparison.old, s.old_nodes),
        "new": _side_json(comparison.new, s.new_nodes),
        "identical": comparison.identical,
        # The same nodes, though the record may say the graphs take different sizes dynamic (`sizes`).
        "same_code": comparison.diff.identical,
        "sizes": _sizes_json(comparison),
        "paired_by": comparison.paired_by,
        "summary": asdict(s),
        "changes": [
            {
                "kind": e.kind,
                "old": _node_json(e.old),
                "new": _node_json(e.new),
                "fields": [asdict(c) for c in e.changes],
            }
            for e in comparison.diff.entries
            if e.kind != EQUAL
        ],
    }


class JsonRenderer:
    """One JSON document: every comparison with its summary and its non-equal nodes."""

    def render(self, comparisons: Sequence[GraphComparison], console: Console) -> None:
        document = {
            "format": JSON_FORMAT,
            "schema_version": JSON_SCHEMA_VERSION,
            "identical": all(c.identical for c in comparisons),
            "comparisons": [comparison_json(c) for c in comparisons],
        }
        console.file.write(json.dumps(document, indent=2) + "\n")
