"""The report page: gathers each section from its analysis, embeds the chart specs and the Vega
bundle, and writes one self-contained file.

The page asks nothing of any host: the JavaScript is inline, charts are drawn as SVG from specs
in `<script type="application/json">` blocks, vega-embed's action menu (which links to the online
editor) is off, and a Content-Security-Policy forbids every fetch, image, font or frame from
elsewhere, so even a bug cannot phone out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cagtool.errors import UnreadableInput
from cagtool.record.atomic import write_atomic
from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.target_name import target_title
from cagtool.report.figures.compile_phases import phase_tree
from cagtool.report.compare.analysis import (
    Comparison,
    RunComparison,
    base_mode,
    compare_modes,
    compare_runs,
)
from cagtool.report.graphs.runs import compare_replaced, graph_ids
from cagtool.report.html import charts, sections, templating
from cagtool.report.html.templating import script_json
from cagtool.report.recompiles.explain import Explanation, explain
from cagtool.report.ranks.analysis import focused_run
from cagtool.report.recompiles.table import RecompileTable, recompile_table
from cagtool.report.text.safe_text import encodable_text

if TYPE_CHECKING:
    from cagtool.report.gate.run import GateResult

REPORT_FILE = "report.html"

_CSP = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'; frame-src 'none'; base-uri 'none'; form-action 'none'"
)


@dataclass
class Page:
    """The page being assembled: its sections, in order (the data of `sections.py`), and the
    chart specs they placed."""

    title: str
    nav: list[tuple[str, str]] = field(default_factory=list)  # (anchor, label)
    body: list[Any] = field(default_factory=list)  # section data, each laid out by its TEMPLATE
    specs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (placeholder id, Vega-Lite spec)

    def add(self, anchor: str, label: str, section: Any) -> None:
        self.nav.append((anchor, label))
        self.body.append(section)

    def chart(self, spec: dict[str, Any], caption: str = "") -> sections.Chart:
        chart_id = f"chart-{len(self.specs)}"
        self.specs.append((chart_id, spec))
        return sections.Chart(chart_id, caption)

    def render(self, css: str) -> str:
        """The page from `templates/report.html.j2` and its sections' templates, autoescaped:
        only the chart specs (through `script_json`), the CSS and the scripts arrive as markup."""
        from markupsafe import Markup

        from cagtool.report.html.vega_bundle import javascript_bundle

        bundle = javascript_bundle() if self.specs else ""
        return templating.template("report.html.j2").render(
            csp=_CSP,
            title=self.title,
            nav=self.nav,
            body=self.body,
            specs=[(chart_id, Markup(script_json(spec))) for chart_id, spec in self.specs],
            css=Markup(templating.asset("report.css") + css),
            # The bundle is library code vl-convert ships; it holds no `</script`, which is checked.
            bundle=Markup(_checked_script(bundle)),
            embed=Markup(_checked_script(templating.asset("embed.js"))),
        )


def prepare() -> None:
    """Import jinja2 and pygments and compile the templates now (`cagtool run` does it while its
    modes run, so the end-of-run report does not wait for them)."""
    from cagtool.report.html.highlight import prepare as prepare_highlighting

    for name in ("report.html.j2", *(f"sections/{p.name}" for p in (templating.TEMPLATES / "sections").glob("*.html.j2"))):
        templating.template(name)
    templating.asset("report.css")
    templating.asset("embed.js")
    prepare_highlighting()


def _checked_script(code: str) -> str:
    if "</script" in code.lower() or "<!--" in code:
        raise RuntimeError("the Vega bundle contains a sequence that would end its <script> element")
    return code


class Tables:
    """Each record's recompile table, built once whichever section asks first."""

    def __init__(self) -> None:
        self._by_record: dict[int, tuple[ModeRecord, RecompileTable]] = {}

    def __call__(self, record: ModeRecord) -> RecompileTable:
        found = self._by_record.get(id(record))
        if found is None:
            found = (record, recompile_table(record))  # the record is kept so its id stays unique
            self._by_record[id(record)] = found
        return found[1]


def _series(run: RunRecord, names: list[str], tables: Tables, prefix: str = "", lane: str = "") -> list[charts.Series]:
    """The timeline's lines for records `names`: one per record, or one per rank when the mode
    followed ranked processes; markers in lane `lane` (each record's own label when "")."""
    out = []
    for name in names:
        record = run.modes[name]
        ranks = record.ranks()
        if ranks and (len(ranks) > 1 or record.rank is None):
            out.extend(charts.Series(f"{prefix}{name} rank {rank}", rec, tables(rec), lane) for rank, rec in ranks.items())
        else:
            out.append(charts.Series(f"{prefix}{name}", record, tables(record), lane))
    return out


def _run_timelines(run: RunRecord, tables: Tables) -> list[tuple[str, list[charts.Series]]]:
    """The run report's timelines: every mode on one chart, so they compare at a glance; a
    multi-rank run, one chart per rank (small multiples), every mode on each."""
    by_rank: dict[int, list[charts.Series]] = {}
    single: list[charts.Series] = []
    for name, record in run.modes.items():
        ranks = record.ranks()
        if ranks and (len(ranks) > 1 or record.rank is None):
            for rank, rec in ranks.items():
                by_rank.setdefault(rank, []).append(charts.Series(name, rec, tables(rec)))
        else:
            single.append(charts.Series(name, record, tables(record)))
    if not by_rank:
        if not single:
            return []
        return [("every mode" if len(single) > 1 else f"mode {single[0].label}", single)]
    # A mode recorded without ranks beside ranked ones (rare): drawn on each rank's chart.
    return [(f"rank {rank}", series + single) for rank, series in sorted(by_rank.items())]


def _modes_by_base(run: RunRecord) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name in run.modes:
        grouped.setdefault(base_mode(name), []).append(name)
    return grouped


def _phase_rows(comparison: Comparison, label_prefix: str = "") -> list[dict[str, Any]]:
    rows = []
    # The AOT backward compiled at its first call only where some mode compiled one (as the compare table).
    timed = any(c.metrics is not None and c.compile_phases_s.get("backward") for c in comparison.modes.values())
    for name, column in comparison.modes.items():
        if column.metrics is None:
            continue
        label = f"{label_prefix}{name}"
        for key, phase in charts.PHASE_LABELS.items():
            if key == "backward" and not timed:
                continue
            rows.append({"mode": label, "phase": phase, "seconds": column.compile_phases_s.get(key, 0.0)})
        rows.append({"mode": label, "phase": "total", "seconds": column.compile_time_s or 0.0})
    return rows


def _phase_trees(comparison: Comparison) -> list[sections.PhaseTree]:
    return [
        sections.PhaseTree(f"mode {name}", phase_tree(column.compile_phases_s, column.compile_time_s or 0.0))
        for name, column in comparison.modes.items()
        if column.metrics is not None
    ]


def _timeline_section(page: Page, groups: list[tuple[str, list[charts.Series]]]) -> sections.Timeline:
    """The step-time charts of `groups` (title, lines), drawn on shared axes: the same steps, the
    same step-time scale, colours and marker lanes, so they compare side by side."""
    drawn = []
    lines = sum(len(series) for _, series in groups)  # the points' budget is the page's, not each chart's
    for title, series in groups:
        markers = charts.marker_rows(series)
        steps, dropped = charts.drawn_step_rows(series, markers, lines)
        drawn.append((title, series, steps, markers, dropped))
    axes = charts.shared_axes(
        [r for d in drawn for r in d[2]], [m for d in drawn for m in d[3]],
        [s.label for d in drawn for s in d[1]], [charts.lane_of(s) for d in drawn for s in d[1]],
    )
    entries = []
    for title, series, steps, markers, dropped in drawn:
        if not steps and not markers:
            entries.append(sections.TimelineEntry(None, f"{title}: no steps recorded."))
            continue
        caption = (f"{dropped:,} steps not drawn: each line shows the fastest and slowest step of each stretch of steps, and every compile-affected or marked step; the figures use them all." if dropped else "")
        entries.append(sections.TimelineEntry(page.chart(charts.timeline_spec(title, steps, markers, axes), caption)))
    return sections.Timeline(entries)


def _graphs_section(run: RunRecord, highlight: sections.CodeHighlighter, label_prefix: str = "", anchor: str = "graphs",
                    shown: dict[str, set[str]] | None = None) -> sections.Graphs:
    """`shown`: the compile ids whose detail the page lists, per mode (graph cards link to them)."""
    shown = shown or {}
    groups = []
    for name, record in run.modes.items():
        for key, rec in [("", record), *record.processes.items()]:
            if not graph_ids(rec):
                continue
            view = run if rec is record else RunRecord(path=run.path, meta=run.meta, modes={name: rec})
            note = ""
            try:
                comparisons = compare_replaced(view, name)
            except UnreadableInput as exc:  # a graph file missing: show the graphs, say why there is no diff
                note = f"{name}: no structural diffs: {exc}"
                comparisons = []
            graphs = sections.graphs(rec, comparisons, highlight, shown.get(name) if rec is record else set())
            groups.append(sections.GraphGroup(note, f"{name}, process {key}" if key else "", graphs, f"mode {rec.mode} captured no compiled-autograd graph."))
    return sections.Graphs(anchor, f"{label_prefix}Compiled-autograd graphs", groups)


def run_report(run: RunRecord, gate: "GateResult | None" = None) -> str:
    """The HTML of one run's report."""
    page = Page(f"cagtool report: {target_title(run.meta.target, run.meta.target_argv)}")
    highlight = sections.CodeHighlighter()
    # A multi-rank run is read on one rank's records (its launcher ran no steps), as `compare` and
    # `recompiles` read it; the timeline shows every rank.
    view, focus = focused_run(run, None)
    comparison = compare_modes(view)
    tables = Tables()
    explanations: dict[str, Explanation] = {name: explain(tables(record)) for name, record in view.modes.items()}

    from cagtool.report.compare.headline import run_headline
    from cagtool.report.recompiles.verification import load_verification

    verified = load_verification(run.path)
    ca = comparison.modes.get("ca")
    # The causes of the ca record the headline counts (its first repetition with a record).
    ca_name = next((name for name in (ca.records if ca is not None and ca.metrics is not None else ()) if name in explanations), None)
    line = run_headline(comparison, verified, explanations[ca_name] if ca_name else None)
    # The first screen: the answer, what to do, then the modes side by side; what ran where (the
    # host, the versions) is looked up, not read first: it closes the page.
    page.add("run", "run", sections.RunBlock(sections.Headline(line.text, line.tone), line.advice))
    page.add("verdict", "verdict", sections.verdict(comparison, view, explanations, sections.ranks(run, focus)))
    page.add("timeline", "step time", _timeline_section(page, _run_timelines(run, tables)))
    phases = _phase_rows(comparison)
    if phases:
        chart = page.chart(charts.compile_phase_spec(phases), "Median over repetitions. torch's phase times nest (Dynamo's contains AOTAutograd's, which contains Inductor's), so the bars are side by side, never stacked; the lists below show the nesting.")
        page.add("compile", "compile time", sections.CompileTime(chart, _phase_trees(comparison)))
    shown = sections.detail_ids(view)
    page.add("recompiles", "recompiles", sections.recompiles(explanations, details=shown))
    from cagtool.report.checkpointing import load_checkpointing
    from cagtool.report.html.phase_section import phases_section

    page.add("phases", "phases and budget", phases_section({name: tables(record) for name, record in view.modes.items()}, load_checkpointing(run.path)))
    if verified is not None:
        page.add("verify", "fixes verified", sections.verification(verified))
    page.add("graphs", "CA graphs", _graphs_section(view, highlight, f"rank {focus}: " if focus is not None else "", shown=shown))
    if any(shown.values()):
        page.add("compiles", "per compile", sections.compile_detail_section(view, highlight))
    if gate is not None:
        page.add("gate", "gate", sections.gate(gate))
    page.add("details", "run details", sections.header(run, anchor="details"))
    return page.render(highlight.css())


def comparison_report(run_a: RunRecord, run_b: RunRecord) -> str:
    """Before (A) and after (B): the change grid, both runs' timelines and compile phases side by
    side, and each run's recompiles and graphs."""
    page = Page(f"cagtool report: {target_title(run_a.meta.target, run_a.meta.target_argv)} before/after")
    highlight = sections.CodeHighlighter()
    rc: RunComparison = compare_runs(focused_run(run_a, None)[0], focused_run(run_b, None)[0])
    from cagtool.report.compare.headline import change_headline

    line = change_headline(rc)
    headline = sections.Headline(line.text, line.tone)
    page.add("run-a", "A", sections.header(run_a, anchor="run-a", title=f"A (before): {run_a.path}", headline=headline))
    page.add("run-b", "B", sections.header(run_b, anchor="run-b", title=f"B (after): {run_b.path}"))
    page.add("verdict", "verdict", sections.run_change(rc))
    tables = Tables()
    by_a, by_b = _modes_by_base(run_a), _modes_by_base(run_b)
    groups = []
    for base in list(by_a) + [m for m in by_b if m not in by_a]:
        series = _series(run_a, by_a.get(base, []), tables, "A ", "A") + _series(run_b, by_b.get(base, []), tables, "B ", "B")
        groups.append((f"mode {base}: A and B", series))
    page.add("timeline", "step time", _timeline_section(page, groups))
    phases = _phase_rows(rc.before, "A ") + _phase_rows(rc.after, "B ")
    if phases:
        page.add("compile", "compile time", sections.CompileTime(page.chart(charts.compile_phase_spec(phases))))
    page.add("recompiles-a", "A recompiles", sections.recompiles({f"A {k}": explain(tables(r)) for k, r in run_a.modes.items()}, "recompiles-a", "A: recompiles and their causes"))
    page.add("recompiles-b", "B recompiles", sections.recompiles({f"B {k}": explain(tables(r)) for k, r in run_b.modes.items()}, "recompiles-b", "B: recompiles and their causes"))
    page.add("graphs-a", "A graphs", _graphs_section(run_a, highlight, "A: ", "graphs-a"))
    page.add("graphs-b", "B graphs", _graphs_section(run_b, highlight, "B: ", "graphs-b"))
    return page.render(highlight.css())


@dataclass(frozen=True)
class Written:
    path: Path
    bytes: int
    seconds: float


def write_html(html: str, out: Path, root: Path | None = None) -> Path:
    """Write atomically: a report being rewritten is never seen half-written, and a full disk
    leaves no half-written file behind. `root`: the run directory the report goes into by
    default, where the write is confined (record/atomic.py: no link in the run is followed)."""
    if root is None:
        out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, html, root=root)
    return out


def write_report(run: RunRecord, out: Path | None = None, gate: "GateResult | None" = None, run_b: RunRecord | None = None) -> Written:
    """Render and write the report of `run` (or of `run` against `run_b`); default path:
    <run>/report.html. Returns where, how big and how long it took."""
    start = time.perf_counter()
    if gate is None and run_b is None:
        from cagtool.report.gate.output import load_gate_result

        gate = load_gate_result(run.path)  # the run was gated when it was recorded
    html = run_report(run, gate) if run_b is None else comparison_report(run, run_b)
    html = encodable_text(html)  # a non-UTF-8 script argument, a lone surrogate in an exception
    path = write_html(html, out) if out is not None else write_html(html, run.path / REPORT_FILE, root=run.path)
    return Written(path, len(html.encode("utf-8")), time.perf_counter() - start)
