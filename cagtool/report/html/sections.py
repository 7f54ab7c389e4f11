"""What the report's sections say, as plain data, each from the analysis its text command prints;
a section's template in `templates/sections/` (its `TEMPLATE`) lays it out.

verdict: `compare.render`'s grids and numerics lines (what `cagtool compare` shows), findings,
and the alerts of `recompiles.explain`; recompiles: `recompiles.render.table_cells` and the
explain words; graphs: each CA graph event with its code file, and `graphs.runs.compare_replaced`
rendered with `graphs.render`'s hunks; gate: a `GateResult`. Nothing here writes markup: every
string is text the templates escape, but for pygments' HTML of a code file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Sequence

from cagtool.record.loader import ModeRecord, RunRecord, inside
from cagtool.record.manifest import cut_words
from cagtool.record.regular_files import read_record_prefix
from cagtool.record.schema import ARTIFACT_TITLES, CacheMissEvent, CAGraphEvent, FindingEvent, compile_dir_name
from cagtool.report.compiles.detail import CompileDetail, compile_details
from cagtool.report.figures.compile_phases import PhaseRow
from cagtool.report.compare.analysis import Comparison, RunComparison
from cagtool.report.compare.render import (
    SPEEDUP_FOOTNOTE,
    Grid,
    change_grid,
    excluded_line,
    mode_grid,
    numerics_lines,
    speedup_grid,
)
from cagtool.report.figures.intervals import ratio_text
from cagtool.report.findings import shown_findings
from cagtool.report.graphs.diff import CHANGED, EQUAL, NodeDiff
from cagtool.report.graphs.render import changed_fields, header_lines, hunks, node_text, origin_label, summary_lines
from cagtool.report.graphs.runs import GraphComparison
from cagtool.report.recompiles.explain import Cause, Explanation, alert_words, cause_words
from cagtool.report.recompiles.render import TABLE_HEADER, counts_line, record_notes, table_cells
from cagtool.report.recompiles.reads import format_source
from cagtool.report.recompiles.verification import fix_in_job, speedup_bounds
from cagtool.report.text.safe_text import shown_command
from cagtool.torch_text import reason_line

if TYPE_CHECKING:
    from cagtool.report.gate.run import GateResult

# Graph code files larger than this are shown cut, with the path of the whole file: a report of a
# large model must stay small enough to open and send (the budget is 3 MB).
MAX_CODE_CHARS = 60_000


@dataclass(frozen=True)
class Line:
    """A line of text in its own element (`tag`: p, pre, span), `cls` its class (None: none)."""

    text: str
    cls: str | None = None
    tag: str = "p"


@dataclass(frozen=True)
class Table:
    """A table of text cells; `rows[r][k]` is (text, class or None), the class marking problems."""

    header: Sequence[str]
    rows: list[list[tuple[str, str | None]]]
    cls: str | None = None
    links: dict[tuple[int, int], str] = field(default_factory=dict)  # (row, column) -> the cell's link (`#anchor`)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], cls: str | None = None, marks: dict[tuple[int, int], str] | None = None,
          links: dict[tuple[int, int], str] | None = None) -> Table:
    marks = marks or {}
    cells = [[("" if v is None else str(v), marks.get((r, k))) for k, v in enumerate(row)] for r, row in enumerate(rows)]
    return Table(list(header), cells, cls, dict(links or {}))


@dataclass(frozen=True)
class TitledTable:
    title: str
    table: Table


def grid_table(grid: Grid) -> TitledTable:
    """A compare grid (the same rows the terminal table and Markdown show), problems marked."""
    return TitledTable(grid.title, table(grid.header, grid.rows, "grid", {cell: "problem" for cell in grid.problem_cells}))


@dataclass(frozen=True)
class Chart:
    """A placeholder the page's script draws the chart `id` into, with its caption."""

    id: str
    caption: str = ""


@dataclass(frozen=True)
class Headline:
    text: str
    tone: str


# The first screen ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunBlock:
    """The answer and what to do (an empty `advice`: nothing to do), linking to the causes."""

    TEMPLATE: ClassVar[str] = "sections/run.html.j2"
    headline: Headline
    advice: str
    details: str = "#recompiles"


@dataclass(frozen=True)
class Header:
    """What ran: script and argv, when, where, with which versions and backend, how it ended."""

    TEMPLATE: ClassVar[str] = "sections/header.html.j2"
    anchor: str
    heading: str
    rows: list[tuple[str, str]]
    headline: Headline | None = None  # the before/after page opens with it, above run A


def header(run: RunRecord, anchor: str = "run", title: str = "", headline: Headline | None = None) -> Header:
    meta = run.meta
    target = meta.target.get("name", "?")
    argv = shown_command(meta.target_argv[1:])
    options = meta.options or {}
    backend = options.get("backend") or next((m.manifest.backend for m in run.modes.values()), "?")
    statuses = ", ".join(f"{name}: {_mode_status(record)}" for name, record in run.modes.items())
    never = run.not_run()
    if never:
        statuses += f"; not run ({run.ended_early_words()}): " + ", ".join(never)
    missing = [m for m in meta.modes if m not in run.modes and m not in never]
    if missing:
        statuses += "; no record: " + ", ".join(missing)
    machine = meta.machine or {}
    rows = [
        ("script", f"{target} {argv}".strip()),
        ("run directory", str(run.path)),
        ("started", f"{meta.created_at}" + (f", ended {meta.ended_at}" if meta.ended_at else "")),
        ("exit status", f"{meta.status}, exit code {meta.exit_code}"),
        ("modes", statuses),
        ("backend", f"{backend}" + (", dynamic" if options.get("dynamic") else "")),
        ("versions", ", ".join(f"{k} {v}" for k, v in (meta.versions or {}).items())),
        ("machine", ", ".join(f"{k} {v}" for k, v in machine.items() if k in ("hostname", "platform", "processor", "cpu_count"))),
    ]
    return Header(anchor, title or _script_and_arguments(meta.target, meta.target_argv), rows, headline)


def _mode_status(record: ModeRecord) -> str:
    manifest = record.manifest
    state = manifest.status if manifest.exit_code in (0, None) else f"{manifest.status} (exit {manifest.exit_code})"
    if manifest.exception is not None:
        first = (manifest.exception.message or "").strip().splitlines()
        state += f": {manifest.exception.type}" + (f": {first[0]}" if first else "")
    return state


def _script_and_arguments(target: dict[str, str], argv: list[str]) -> str:
    """The job as its user would name it: the script (the one a launcher module ran, without the
    launcher's own options) and its arguments."""
    from cagtool.record.target_name import target_title

    name = target_title(target, argv)
    rest = list(argv[1:])
    if name in rest:  # launched: what follows the script is the script's
        rest = rest[rest.index(name) + 1 :]
    return f"{name} {shown_command(rest)}".strip()


# Verdict ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alert:
    title: str
    why: list[str]
    fix: list[str]


@dataclass(frozen=True)
class Findings:
    """What the user must not miss: recompile alerts, then findings and skipped lines."""

    alerts: list[Alert]
    items: list[str]


@dataclass(frozen=True)
class RankMode:
    title: str
    table: Table
    others: str  # "": no process beside the ranks
    findings: list[str]
    agreement: str  # "": the ranks diverge (their findings say how), or only one


@dataclass(frozen=True)
class Ranks:
    lead: str
    modes: list[RankMode]


@dataclass(frozen=True)
class Verdict:
    """Modes side by side, the speedups with their noise verdict, numerics, then failed modes,
    the ranks, findings and recompile alerts."""

    TEMPLATE: ClassVar[str] = "sections/verdict.html.j2"
    grids: list[TitledTable]
    footnote: str  # under the speedups; "" without them
    excluded: str
    numerics: list[Line]
    problems: list[str]
    ranks: Ranks | None
    findings: Findings


def verdict(comparison: Comparison, run: RunRecord, explanations: dict[str, Explanation], ranks: Ranks | None = None) -> Verdict:
    from cagtool.report.compare.render import grad_parity_lines

    grids = [grid_table(mode_grid(comparison))]
    if comparison.speedups:
        grids.append(grid_table(speedup_grid(comparison.speedups)))
    lines = numerics_lines(comparison.numerics) + grad_parity_lines(comparison.grad_parity)
    return Verdict(
        grids=grids,
        footnote=SPEEDUP_FOOTNOTE if comparison.speedups else "",
        excluded=excluded_line(comparison),
        numerics=[Line(line.strip(), "problem" if problem else None) for line, problem in lines],
        problems=list(comparison.failure_problems),
        ranks=ranks,
        findings=findings(run, explanations),
    )


def findings(run: RunRecord, explanations: dict[str, Explanation]) -> Findings:
    items = [cut] if (cut := cut_words(run.meta.truncated, "run.json")) else []
    for name, record in run.modes.items():
        cwd = record.manifest.cwd
        if cut := cut_words(record.manifest.truncated, "its manifest"):
            items.append(f"{name}: {cut}")
        for shown in shown_findings(record.of(FindingEvent)):
            where = f" ({format_source(shown.first.source, cwd)})" if shown.first.source else ""
            items.append(f"{name}: {shown.first.message}{where}{shown.repeats}")
        if record.skipped_lines or record.unknown_kinds:
            items.append(f"{name}: skipped {record.skipped_lines} unreadable line(s) and {sum(record.unknown_kinds.values())} unknown event(s)")
    alerts = []
    for name, explanation in explanations.items():
        for alert in explanation.alerts:
            words = alert_words(alert, explanation.table.cwd)
            alerts.append(Alert(f"{name}: {words.title}", list(words.why), [f"Fix: {f}" for f in words.fix]))
    return Findings(alerts, items)


def ranks(run: RunRecord, focus: int | None) -> Ranks | None:
    """Multi-rank runs: which rank the figures above are from, then per mode the ranks' table
    (as `summary` and `compare` print it) and their findings (divergence, missing or failed ranks)."""
    from cagtool.report.ranks.analysis import agreement, analyze_ranks, trains_in_workers
    from cagtool.report.ranks.render import RANK_HEADER, rank_cells

    modes = []
    for name, record in run.modes.items():
        analysis = analyze_ranks(record)
        if analysis is None:
            continue
        size = f" of world size {analysis.world_size}" if analysis.world_size is not None else ""
        agree = ""
        if len(analysis.rows) > 1 and not analysis.diverge and not analysis.workers:
            words = agreement(analysis)
            agree = words[0].upper() + words[1:] + "."
        recorded = (f"{len(analysis.rows)} training processes started without a rank (numbered by start, as ranks)"
                    if analysis.workers else f"{len(analysis.rows)} ranks{size} recorded")
        modes.append(
            RankMode(
                title=f"mode {name}: {recorded}",
                table=table(RANK_HEADER, rank_cells(analysis), "grid ranks"),
                others=", ".join(analysis.other_processes),
                findings=[f"rank finding: {f.message}" for f in analysis.findings],
                agreement=agree,
            )
        )
    if not modes:
        return None
    if trains_in_workers(run):
        lead = (f"The job trained in processes it started without a rank, each on its own (not held to each other's graphs or "
                f"norms): the tables above, the recompiles and the graphs are training process {focus}'s records; the timeline "
                "shows every process.")
    else:
        lead = f"A multi-rank run: the tables above, the recompiles and the graphs are rank {focus}'s records; the timeline shows every rank."
    return Ranks(lead, modes)


@dataclass(frozen=True)
class Change:
    """Before/after: `compare`'s change grid, its notes and problems."""

    TEMPLATE: ClassVar[str] = "sections/change.html.j2"
    grid: TitledTable
    notes: list[str]
    problems: list[str]


def run_change(rc: RunComparison) -> Change:
    return Change(grid_table(change_grid(rc)), [f"note: {n}" for n in rc.notes], list(rc.problems))


# Charts ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineEntry:
    """A group's chart, or (None) the note that it has nothing to draw."""

    chart: Chart | None
    note: str = ""


@dataclass(frozen=True)
class Timeline:
    """The step-time charts, one per group, on shared axes."""

    TEMPLATE: ClassVar[str] = "sections/timeline.html.j2"
    entries: list[TimelineEntry]


@dataclass(frozen=True)
class PhaseTree:
    """One mode's compile time as its phases nest (figures/compile_phases.py)."""

    mode: str
    rows: list[PhaseRow]


@dataclass(frozen=True)
class CompileTime:
    TEMPLATE: ClassVar[str] = "sections/compile.html.j2"
    chart: Chart
    trees: list[PhaseTree] = field(default_factory=list)


# Per-compile detail ----------------------------------------------------------------------------

# A report lists this many compiles per record at most (a recompile storm has thousands; `cagtool
# compile` reads any of them).
MAX_COMPILE_DETAILS = 60


def compile_anchor(record_name: str, compile_id: str) -> str:
    """The id of a compile's article in the report: from each recompile row and graph card."""
    return f"compile-{record_name}-{compile_dir_name(compile_id)}"


@dataclass(frozen=True)
class Artifact:
    title: str
    code: Code
    plain: bool  # text in a <pre> (a stack, guards), not highlighted code


@dataclass(frozen=True)
class CompileView:
    anchor: str
    title: str
    facts: list[str]
    artifacts: list[Artifact]


@dataclass(frozen=True)
class CompileDetails:
    """tlparse's per-compile pages: for each compile id, the stack it came from, the Dynamo graph,
    the AOT graphs, Inductor's code and the guards, each folded (`<details>`)."""

    TEMPLATE: ClassVar[str] = "sections/compiles.html.j2"
    anchor: str
    modes: list[tuple[str, list[CompileView], str]]  # (title, compiles, note)


def detail_ids(run: RunRecord) -> dict[str, set[str]]:
    """The compile ids each mode's report lists with their detail (what links may point at)."""
    return {name: {d.compile_id for d in compile_details(record)[:MAX_COMPILE_DETAILS]} for name, record in run.modes.items()}


def compile_detail_section(run: RunRecord, highlight: "CodeHighlighter", anchor: str = "compiles") -> CompileDetails:
    modes = []
    for name, record in run.modes.items():
        details = compile_details(record)
        if not details:
            continue
        cut = len(details) - MAX_COMPILE_DETAILS
        note = f"{cut} more compile(s) not listed here: cagtool compile {run.path} ID --mode {name}" if cut > 0 else ""
        modes.append((f"mode {name}", [_compile_view(record, d, highlight) for d in details[:MAX_COMPILE_DETAILS]], note))
    return CompileDetails(anchor, modes)


def _compile_view(record: ModeRecord, detail: CompileDetail, highlight: "CodeHighlighter") -> CompileView:
    facts = []
    if detail.step is not None:
        facts.append(f"at step {detail.step}")
    if detail.function:
        facts.append(f"compiled {detail.function}" + (f" in {detail.compile_s:.2f} s" if detail.compile_s is not None else ""))
    facts += [f"recompiled because: {reason_line(r)}" for r in detail.reasons]
    artifacts = []
    for event in detail.artifacts:
        title = ARTIFACT_TITLES.get(event.artifact, event.artifact)
        path = inside(record.path, event.file, "compile artifact")
        is_code = event.artifact not in ("dynamo_start", "dynamo_cpp_guards_str")
        artifacts.append(Artifact(title, highlight.code(path, title) if is_code else highlight.text(path, title), not is_code))
    return CompileView(compile_anchor(record.path.name, detail.compile_id), f"[{detail.compile_id}]", facts, artifacts)


# Recompiles ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CauseCard:
    """A root cause or alert; a root cause's card holds the cards of the recompiles that follow
    from it (`consequences`)."""

    title: str
    why: list[str]
    fix: list[str]
    evidence: str
    kind: str  # its class: alert, cause, cause consequence
    consequences: list["CauseCard"] = field(default_factory=list)


@dataclass(frozen=True)
class RecompileMode:
    name: str
    counts: str
    notes: list[str]
    table: Table | None
    none_after_first: bool  # "no recompiles" said: it compiled, and nothing recompiled
    cards: list[CauseCard]


@dataclass(frozen=True)
class Recompiles:
    """Per mode: every recompile (the `cagtool recompiles` table), then the root causes with
    why, the fix and the evidence (`--explain`)."""

    TEMPLATE: ClassVar[str] = "sections/recompiles.html.j2"
    anchor: str
    title: str
    modes: list[RecompileMode]


def recompiles(explanations: dict[str, Explanation], anchor: str = "recompiles", title: str = "Recompiles and their causes",
               details: dict[str, set[str]] | None = None) -> Recompiles:
    """`details`: per mode, the compile ids the page shows the detail of; their rows link there."""
    modes = []
    for name, explanation in explanations.items():
        t = explanation.table
        shown = (details or {}).get(name, set())
        links = {}
        for r, row in enumerate(t.rows):
            for k, cid in ((2, row.compile_id), (6, row.produced)):
                if cid and cid in shown:
                    links[(r, k)] = "#" + compile_anchor(name, cid)
        quiet = not explanation.causes and not explanation.alerts
        cards = []
        if not quiet:
            for alert in explanation.alerts:
                words = alert_words(alert, t.cwd)
                cards.append(CauseCard(f"!! {words.title}", list(words.why), list(words.fix), words.evidence, "alert"))
            inner: dict[int, list[CauseCard]] = {}  # root cause number -> the cards of its consequences
            for cause in explanation.causes:
                if cause.caused_by is not None:
                    inner.setdefault(cause.caused_by, []).append(_cause_card(cause, t.cwd, "cause consequence"))
            for cause in explanation.causes:
                if cause.caused_by is None:
                    cards.append(_cause_card(cause, t.cwd, "cause", inner.get(cause.number, [])))
        modes.append(
            RecompileMode(
                name=f"mode {name}",
                counts=counts_line(t),
                notes=list(record_notes(t)),
                table=table(TABLE_HEADER, table_cells(t), "recompiles", links=links) if t.rows else None,
                none_after_first=quiet and bool(t.rows),
                cards=cards,
            )
        )
    return Recompiles(anchor, title, modes)


def _cause_card(cause: Cause, cwd: str, kind: str, consequences: list[CauseCard] | None = None) -> CauseCard:
    words = cause_words(cause, cwd)
    at = f", {cause.place_said}" if cause.place else ""
    return CauseCard(f"#{cause.number} {words.title}{at}", list(words.why), list(words.fix), words.evidence, kind, consequences or [])


# Graphs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diff:
    """`diff-graphs`' unified view of one recompile: header, hunks (each line with its class),
    summary."""

    title: str
    head: list[str]
    lines: list[Line]
    summary: list[str]


@dataclass(frozen=True)
class Code:
    """A graph's code file: highlighted (`html`, pygments' markup) under `label`, or a note
    saying why it is not shown."""

    label: str
    html: Any = None  # markupsafe.Markup; None: `note` says why there is none
    note: str = ""


@dataclass(frozen=True)
class GraphView:
    anchor: str
    title: str
    facts: str
    ops: Table
    hooks: list[str]
    nodes: str
    aot: str
    diff: Diff | None
    code: Code
    compiles: list[tuple[str, str]] = field(default_factory=list)  # (compile id, #anchor): Dynamo's compiles of this graph


@dataclass(frozen=True)
class GraphGroup:
    """One record's graphs (a mode, or a process of it), with what stopped their diffs."""

    note: str  # "": the diffs are there
    process: str  # "": the mode's own record
    graphs: list[GraphView]
    empty: str  # what to say when `graphs` is empty


@dataclass(frozen=True)
class Graphs:
    TEMPLATE: ClassVar[str] = "sections/graphs.html.j2"
    anchor: str
    title: str
    groups: list[GraphGroup]


def graphs(mode: ModeRecord, comparisons: Sequence[GraphComparison], highlight: "CodeHighlighter", details: set[str] | None = None) -> list[GraphView]:
    """Every CA graph of a mode: what it holds (nodes, ops, hooks, autograd nodes), its code, and
    for each recompile, the structural diff against the graph it replaced. `details`: the compile
    ids whose detail the page shows (each graph links to its Dynamo compiles among them)."""
    events = sorted(mode.of(CAGraphEvent), key=lambda g: g.ca_id)
    by_new = {c.new.ca_id: c for c in comparisons}
    # torch's count of the sizes it holds dynamic for each graph ("total of M"), where its code reads fewer
    held = {m.ca_id: m.dynamic_sizes for m in mode.of(CacheMissEvent) if m.dynamic_sizes}
    return [_graph_view(mode, graph, by_new.get(graph.ca_id), highlight, details or set(), held.get(graph.ca_id))
            for graph in events]


def _graph_view(mode: ModeRecord, graph: CAGraphEvent, comparison: GraphComparison | None, highlight: "CodeHighlighter",
                details: set[str] = frozenset(), held: int | None = None) -> GraphView:  # type: ignore[assignment]
    step = f"step {graph.step}" if graph.step is not None else "step ?"
    # torch drops the sizes no node reads before the graph runs: its cache key can hold more (`held`)
    sizes = f"{graph.num_sizes} dynamic sizes" + (f" read by its code (torch holds {held} dynamic)" if held and held > graph.num_sizes else "")
    facts = (
        f"{graph.node_count} FX nodes, {len(graph.autograd_nodes)} autograd nodes, {sizes}, "
        f"captured in {graph.capture_s * 1000:.1f} ms at {step}" + (f", compiler {graph.compiler}" if graph.compiler else "")
    )
    ops = sorted(graph.op_histogram.items(), key=lambda kv: (-kv[1], kv[0]))
    hooks = Counter(f"{h.hook_type} ({h.name})" for h in graph.hooks)
    aot = ""
    if graph.aot_ids:
        aot = f"inlined AOT backward graphs: {len(graph.aot_ids)} (ids {', '.join(str(i) for i in graph.aot_ids)})"
    code_path = inside(mode.path, graph.code_file, f"code file of graph {graph.compile_id}") if graph.code_file else None
    return GraphView(
        anchor=f"graph-{mode.path.name}-{graph.ca_id}",
        title=f"{mode.mode} graph {graph.compile_id}",
        facts=facts,
        ops=table(("op", "count"), ops, "ops"),
        hooks=[f"{h} x{n}" if n > 1 else h for h, n in hooks.items()],
        nodes=", ".join(f"{n.name} ({n.node_call})" + (f" into {n.param}" if n.param else "") for n in graph.autograd_nodes) or "-",
        aot=aot,
        diff=diff(comparison) if comparison is not None else None,
        code=highlight.code(code_path, f"code of {graph.compile_id}"),
        compiles=[(cid, "#" + compile_anchor(mode.path.name, cid)) for cid in sorted(details) if cid.startswith(graph.compile_id + "/")],
    )


def diff(comparison: GraphComparison, context: int = 3) -> Diff:
    lines: list[Line] = []
    entries = comparison.diff.entries
    spans, skipped_after = hunks(entries, context)
    for hunk in spans:
        where = f"{hunk.skipped_before} unchanged before" if hunk.start else "start of graph"
        lines.append(Line(f"@@ {where} @@", "hunk", "span"))
        origin = None
        for entry in entries[hunk.start : hunk.stop]:
            if origin_label(entry) != origin:
                origin = origin_label(entry)
                lines.append(Line(f"  # {origin}", "hunk", "span"))
            lines.extend(_diff_lines(entry))
    if spans and skipped_after:
        lines.append(Line(f"@@ {skipped_after} unchanged after @@", "hunk", "span"))
    return Diff(
        title=f"diff: {comparison.old.compile_id} → {comparison.new.compile_id}",
        head=[line.plain for line in header_lines(comparison)],
        lines=lines,
        summary=[line.plain for line in summary_lines(comparison)],
    )


def _diff_lines(entry: NodeDiff) -> list[Line]:
    out = []
    if entry.old is not None and entry.kind != EQUAL:
        out.append(Line("-" + node_text(entry.old), "del", "span"))
    if entry.new is not None:
        if entry.kind == EQUAL:
            out.append(Line(" " + node_text(entry.new), "eq", "span"))
        elif entry.kind == CHANGED:
            out.append(Line("+" + node_text(entry.new) + f"  # changed: {changed_fields(entry)}", "chg", "span"))
        else:
            out.append(Line("+" + node_text(entry.new), "ins", "span"))
    return out


def _shown_part(path: Path) -> tuple[str, str]:
    """The start of a record's text file that the page shows (MAX_CODE_CHARS) and what says it was
    cut ("" when whole). Only that start is read (a character is at most 4 bytes of UTF-8): the page
    shows a part of a long file, so a file of any size, a forged one included, costs no more to read
    than the part shown; a link or a FIFO is refused (UnreadableInput, exit 3) as every record file is."""
    data, size = read_record_prefix(path, 4 * MAX_CODE_CHARS)
    source = data.decode("utf-8", errors="replace")
    if len(source) <= MAX_CODE_CHARS and len(data) >= size:
        return source, ""
    if len(data) < size:  # its last character may have been cut mid-way: what stays is whole
        source = source[:-1] if source.endswith("\ufffd") else source
    source = source[:MAX_CODE_CHARS]
    return source, f"first {len(source):,} characters of {size:,} bytes; the whole file: {path}"


class CodeHighlighter:
    """Python code as highlighted HTML, pygments' HTML for it (`highlight.py`: every token
    escaped); its CSS goes in the page once."""

    def css(self) -> str:
        from cagtool.report.html.highlight import css

        return css()

    def highlight(self, source: str) -> str:
        from cagtool.report.html.highlight import highlight_python

        return highlight_python(source)

    def text(self, path: Path, summary: str) -> Code:
        """A plain-text file (a stack, a guard tree) as preformatted text, escaped by the template."""
        try:
            source, cut = _shown_part(path)
        except OSError as exc:
            return Code(summary, note=f"{summary}: cannot read {path}: {exc.strerror}")
        return Code(f"{summary} ({source.count(chr(10))} lines, {path.name})", source, cut)

    def code(self, path: Path | None, summary: str) -> Code:
        if path is None:
            return Code(summary, note=f"{summary}: no code file recorded")
        try:
            source, cut = _shown_part(path)
        except OSError as exc:
            return Code(summary, note=f"{summary}: cannot read {path}: {exc.strerror}")
        from markupsafe import Markup

        label = f"{summary} ({source.count(chr(10))} lines, {path.name})"
        # pygments escapes every token it writes: its HTML is markup cagtool made.
        return Code(label, Markup(self.highlight(source)), cut)


# Gate and verification -------------------------------------------------------------------------


@dataclass(frozen=True)
class Gate:
    """The gate's checks, one row each, as `cagtool gate` prints them."""

    TEMPLATE: ClassVar[str] = "sections/gate.html.j2"
    verdict: str
    passed: bool
    table: Table
    warnings: list[str]
    hint: str


def gate(result: "GateResult") -> Gate:
    from cagtool.report.gate.output import refresh_hint, result_label, verdict_line

    rows = [(r.check, r.mode, r.actual, r.limit, result_label(r), r.source, r.message) for r in result.results]
    marks = {(i, 4): "problem" for i, r in enumerate(result.results) if r.failed}
    # A check's own warnings (a slower tail under a median threshold) first, then the environment's.
    warnings = [f"warning: {w}" for w in (*(w for r in result.results for w in r.warnings), *result.warnings)]
    return Gate(
        verdict=verdict_line(result),
        passed=result.passed,
        table=table(("check", "mode", "actual", "limit", "result", "source", "message"), rows, "gate", marks),
        warnings=warnings,
        hint=refresh_hint(result) or "",
    )


@dataclass(frozen=True)
class Verification:
    """`recompiles --explain --verify`'s result: before -> after per fix, with its verdict, then
    each fix's notes and patch (`Line`s: notes as p, patches as pre)."""

    TEMPLATE: ClassVar[str] = "sections/verify.html.j2"
    intro: str
    table: Table | None
    details: list[Line]


def verification(data: dict) -> Verification:
    base = data.get("baseline") or {}
    rows, marks = [], {}

    for i, fix in enumerate(data.get("fixes", ())):
        m = fix.get("measured") or {}

        def counts(key: str) -> str:
            return f"{'/'.join(map(str, base.get(key) or ['?']))} → {'/'.join(map(str, m.get(key) or ['?']))}"

        step = "-" if fix.get("speedup") is None else f"{ratio_text(fix['speedup'])} ({speedup_bounds(fix)})"
        rows.append((fix["fix"], ", ".join(f"#{n}" for n in fix["causes"]), fix["who"], counts("ca_recompiles"), counts("dynamo_recompiles"),
                     step, fix["verdict"].upper(), "; ".join(fix["reasons"])))
        marks[(i, 6)] = "ok" if fix["verdict"] == "verified" else "problem"
    intro = (f"Mode {data['mode']}: the job re-run {data['repeat']} times as a baseline and {data['repeat']} times with each fix "
             "(a code fix runs on a patched copy, never on the script); counts are torch's own in every re-run.")
    header = ("fix", "causes", "who", "CA recompiles", "Dynamo recompiles", "steady speed vs baseline (90% CI)", "verdict", "why")
    details = []
    for fix in data.get("fixes", ()):
        if not fix.get("patch") and (in_job := fix_in_job(fix)):
            details.append(Line(f"{fix['fix']}: in your job, without cagtool: {in_job}", "note"))
        if fix.get("torch_says"):
            details.append(Line(f"{fix['fix']}: torch's own suggestion (PGO), verbatim: {fix['torch_says']}", "note"))
        if fix.get("patch"):
            copy = f" Applied to a copy ({fix['patched_copy']}) run in place of the script; your file is unchanged." if fix.get("patched_copy") else ""
            details.append(Line(f"{fix['fix']}: {fix['patch']['title']} ({fix['patch']['file']}, line {fix['patch']['line']}).{copy}", "note"))
            details.append(Line(fix["patch"]["diff"], "patch", "pre"))
    for item in data.get("not_applied", ()):
        details.append(Line(f"cause #{item['cause']} ({item['code']}): {item['why']} ({item['who']})", "note"))
        if (item.get("patch") or {}).get("diff"):
            details.append(Line(item["patch"]["diff"], "patch", "pre"))
    return Verification(intro, table(header, rows, "verify", marks) if rows else None, details)
