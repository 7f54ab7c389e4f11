"""`cagtool diff-graphs`: a structural diff of compiled-autograd graphs, within a run or across two."""

from __future__ import annotations

import re
from pathlib import Path
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, List, Optional

import typer

from cagtool.errors import EXIT_GATE_FAILED, CagtoolError, UsageError

from ._common import MODE_OPT, STRICT_OPT

if TYPE_CHECKING:
    from cagtool.record.loader import RunRecord
    from cagtool.report.graphs import GraphComparison
    from cagtool.report.ranks.analysis import RankFocus

# A graph id as torch prints it (3, !3, ca_3), optionally of one rank of a multi-rank run (3@1).
_ID = re.compile(r"^(?:!|ca_)?(\d+)(?:@(?:rank)?(\d+))?$")


class DiffFormat(str, Enum):
    side = "side"
    unified = "unified"
    stat = "stat"
    json = "json"


@dataclass(frozen=True)
class GraphSpec:
    run: str | None  # None: the run given separately (or the latest)
    ca_id: int
    rank: int | None = None  # ID@RANK: that rank's graph (default: --rank, else rank 0)


@dataclass(frozen=True)
class DiffGraphsOptions:
    run: str | None
    old: GraphSpec | None  # both None: each graph against the one it replaced
    new: GraphSpec | None
    mode: str | None = None
    format: DiffFormat = DiffFormat.side
    context: int = 3
    strict: bool = False
    rank: int | None = None  # multi-rank runs: this rank's graphs; None: rank 0


def _graph_id(text: str) -> GraphSpec | None:
    """`3`, `!3`, `ca_3` or `3@1` -> a spec of that graph (run unset), or None."""
    match = _ID.match(text.strip())
    if not match:
        return None
    return GraphSpec(None, int(match.group(1)), int(match.group(2)) if match.group(2) is not None else None)


def _run_graph(text: str) -> GraphSpec | None:
    """`RUN:ID` -> GraphSpec, or None when the text is not of that form."""
    if ":" not in text:
        return None
    run, _, ident = text.rpartition(":")
    spec = _graph_id(ident)
    return replace(spec, run=run) if run and spec is not None else None


_SHAPES = "give `[RUN] A B` (graph ids of one run) or `RUN_A:ID RUN_B:ID` (across runs)"


def parse_graph_args(args: list[str]) -> tuple[str | None, GraphSpec | None, GraphSpec | None]:
    """(run, old, new) from the positional arguments `[RUN] [A B]` or `RUN_A:ID RUN_B:ID`."""
    if not args:
        return None, None, None
    if len(args) == 1:
        if _graph_id(args[0]) is not None or _run_graph(args[0]) is not None:
            raise UsageError(f"one graph given ({args[0]}); {_SHAPES}")
        return args[0], None, None
    if len(args) == 2:
        cross = [_run_graph(a) for a in args]
        if cross[0] is not None and cross[1] is not None:
            return None, cross[0], cross[1]
        ids = [_graph_id(a) for a in args]
        if ids[0] is not None and ids[1] is not None:
            return None, ids[0], ids[1]
        raise UsageError(f"cannot read graphs from {args[0]!r} {args[1]!r}; {_SHAPES}")
    if len(args) == 3:
        ids = [_graph_id(a) for a in args[1:]]
        if ids[0] is not None and ids[1] is not None:
            return args[0], ids[0], ids[1]
        raise UsageError(f"cannot read graph ids from {args[1]!r} {args[2]!r}; {_SHAPES}")
    raise UsageError(f"too many arguments ({len(args)}); {_SHAPES}")


def _load_focused(path: str | None, options: DiffGraphsOptions, notes: list[RankFocus], rank: int | None = None) -> RunRecord:
    """A run with the compared mode's record replaced by the rank's (`rank`, else --rank, else
    rank 0) in a multi-rank run; the note saying which ranks exist and whether they diverge goes
    to `notes` (once per run and rank)."""
    from cagtool.record.loader import load_run

    run = load_run(path, strict=options.strict)
    main = run.mode(options.mode)
    if (rank if rank is not None else options.rank) is None and not main.processes and main.rank is None:
        return run  # one process: nothing to focus on or say (and the ranks analysis is not imported)
    from cagtool.report.ranks.analysis import focus_note, focus_record

    record, focus = focus_record(run, main, rank if rank is not None else options.rank)
    if record is main:
        return run
    note = focus_note(main, focus)
    for i, seen in enumerate(notes):  # two ranks of one run (ID@RANK): one line naming both
        if note is not None and seen.analysis == note.analysis:
            shown = seen.rank if isinstance(seen.rank, tuple) else (seen.rank,)
            notes[i] = replace(seen, rank=tuple(dict.fromkeys((*shown, focus))))
            note = None
    if note is not None:
        notes.append(note)
    import msgspec  # here, not at the top: `cagtool --help` imports this module, and msgspec's import is 8 % of it

    name = next(key for key, value in run.modes.items() if value is main)
    return msgspec.structs.replace(run, modes={**run.modes, name: record})


def run_diff_graphs(options: DiffGraphsOptions, notes: list[RankFocus] | None = None) -> list[GraphComparison]:
    """Load the runs and compare the graphs the options name (no rendering). Multi-rank runs are
    read at `options.rank` (default rank 0), with a RankFocus per run appended to `notes`."""
    from cagtool.report.graphs import compare, compare_replaced

    notes = notes if notes is not None else []
    if options.old is None or options.new is None:
        return compare_replaced(_load_focused(options.run, options, notes), options.mode)
    old_run = _load_focused(options.old.run or options.run, options, notes, options.old.rank)
    if (options.new.run is None or options.new.run == options.old.run) and options.new.rank == options.old.rank:
        new_run = old_run
    else:
        new_run = _load_focused(options.new.run or options.old.run or options.run, options, notes, options.new.rank)
    return [compare(old_run, options.old.ca_id, new_run, options.new.ca_id, options.mode)]


# A side-by-side table asked for off a terminal, with no COLUMNS: folded at this width (unbounded,
# its columns would be as wide as the longest node: thousands of characters a line).
PIPED_TABLE_WIDTH = 200


def _table_fits() -> bool:
    """Whether stdout has a width for a side-by-side table: a terminal, or COLUMNS set."""
    import os
    import sys

    return sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()


def diff_graphs_command(
    graphs: Optional[List[str]] = typer.Argument(
        None, metavar="[RUN] [A B]", show_default=False, help="RUN_A:ID RUN_B:ID (across runs), or a run (default: the latest) then two graph ids."
    ),
    format: Optional[DiffFormat] = typer.Option(
        None, "--format", "-f", show_default=False,
        help="side (a table; the default on a terminal), unified (diff -u like; the default in a pipe, a file or a CI log, "
             "where a table is as wide as its longest node), stat (each comparison's header and summary alone) or json. An asked-for table off a terminal is "
             f"{PIPED_TABLE_WIDTH} columns wide (COLUMNS sets another).",
    ),
    context: int = typer.Option(3, "--context", "-U", min=0, help="Unchanged nodes shown around each difference."),
    mode: Optional[str] = MODE_OPT,
    strict: bool = STRICT_OPT,
    rank: Optional[int] = typer.Option(None, "--rank", min=0, metavar="N", help="Multi-rank runs: rank N's graphs (default: rank 0)."),
) -> None:
    """Show how one compiled-autograd graph differs from another, node by node.

    A structural diff, not a text diff: FX counters (getitem_7 vs getitem_6),
    aot<id>_ prefixes and eval_with_key numbers are normalised away; nodes are
    aligned by op and by the autograd node they came from. You see inserted
    (+), removed (-) and changed (~) nodes, then a summary: node counts, op
    counts, autograd nodes and hooks added or removed, sizes that became
    symbolic (in the code, and those the record's cache miss made dynamic
    that the code does not read). The header names the recompile (cache
    miss) that produced the newer graph, and the line of your code where it
    happened.

    Examples:

      \b
      cagtool diff-graphs                   # latest run: each graph vs the one it replaced
      cagtool diff-graphs runs/op_loop      # the same, for that run
      cagtool diff-graphs runs/op_loop 0 1  # graph !0 vs graph !1
      cagtool diff-graphs before:0 after:0  # graph 0 of run `before` vs of run `after`
      cagtool diff-graphs RUN 0@0 1@1       # rank 0's graph !0 vs rank 1's !1 (multi-rank run)
      cagtool diff-graphs -f unified -U 1   # diff -u style, 1 line of context
      cagtool diff-graphs -f stat           # each graph's header and summary: what changed, in a screen
      cagtool diff-graphs -f json | jq '.comparisons[].summary'

    Graph ids are compiled-autograd ids as torch prints them: 3, !3 or ca_3
    (the run's graphs/ca_3.py holds its code). In a multi-rank run (DDP) the
    graphs are rank 0's unless --rank N, after a line naming the ranks and
    whether they diverge. Exit code, like diff: 0 the
    graphs are identical, 1 they differ (in their code, or in the sizes
    they take dynamic: the same code captured again when sizes became
    dynamic is another graph), 3 unreadable input (no such run or graph, a
    run without graphs, a missing graph file).
    """
    from cagtool.report.graphs import cyclic_gc_paused

    run, old, new = parse_graph_args(list(graphs or []))
    if format is None:
        format = DiffFormat.side if _table_fits() else DiffFormat.unified
    options = DiffGraphsOptions(run=run, old=old, new=new, mode=mode, format=format, context=context, strict=strict, rank=rank)
    # Reading, diffing and rendering two large graphs allocate hundreds of thousands of objects
    # and free them by reference counting; the cyclic collector's passes over them cost a fifth
    # of the command. The exit code is raised after the pause: an exception raised inside it
    # would keep the diff alive (its traceback holds the frames) when collection resumes, and
    # the first collection would then walk every object the diff made.
    with cyclic_gc_paused():
        identical = _diff_and_render(options)
    if not identical:
        raise typer.Exit(EXIT_GATE_FAILED)


def _diff_and_render(options: DiffGraphsOptions) -> bool:
    """Diff and print; True when every comparison found the graphs identical."""
    from cagtool.report.text.console import make_console
    from cagtool.report.graphs import JsonRenderer, SideBySideRenderer, StatRenderer, UnifiedRenderer, graph_ids

    notes: list[RankFocus] = []
    comparisons = run_diff_graphs(options, notes)
    console = make_console(width=None if options.format is not DiffFormat.side or _table_fits() else PIPED_TABLE_WIDTH)
    for note in notes:  # on stderr with --format json, so stdout stays one JSON document
        (make_console(stderr=True) if options.format is DiffFormat.json else console).print(note.line, markup=False, overflow="fold")
    if not comparisons:
        # Only reachable with no ids: a run with exactly one graph.
        record = _load_focused(options.run, options, [])
        only = graph_ids(record.mode(options.mode))
        console.print(
            f"{record.path} has one compiled-autograd graph (!{only[0]}): nothing replaced it. "
            f"To compare it with another run: cagtool diff-graphs {record.path}:{only[0]} OTHER_RUN:{only[0]}",
            markup=False,
        )
        return True
    renderer = {
        DiffFormat.side: SideBySideRenderer(context=options.context),
        DiffFormat.unified: UnifiedRenderer(context=options.context),
        DiffFormat.stat: StatRenderer(context=options.context),
        DiffFormat.json: JsonRenderer(),
    }[options.format]
    renderer.render(comparisons, console)
    if options.format is not DiffFormat.json:
        for line in _detail_lines(comparisons):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return all(c.identical for c in comparisons)


def _detail_lines(comparisons: list["GraphComparison"]) -> list[str]:
    """Where to read Dynamo's compiles of each newer graph in full (`cagtool compile`)."""
    from cagtool.record.loader import load_mode
    from cagtool.record.schema import CompileArtifactEvent
    from cagtool.report.compiles.detail import detail_command

    lines = []
    records: dict[tuple[Path, str], list[str]] = {}
    for comparison in comparisons:
        side = comparison.new
        key = (side.run, side.mode)
        if key not in records:
            try:
                record = load_mode(side.run / side.mode, kinds={CompileArtifactEvent.kind})
                records[key] = list(record.compile_artifacts())
            except CagtoolError:
                records[key] = []
        ids = [cid for cid in records[key] if cid.startswith(side.compile_id + "/")]
        if ids:
            lines.append(f"{side.compile_id}'s compiles (stack, graphs, guards): " + "; ".join(detail_command(str(side.run), cid, None if side.mode == "ca" else side.mode) for cid in ids))
    return lines


def register(app: typer.Typer) -> None:
    app.command("diff-graphs")(diff_graphs_command)
