"""The report's sections as HTML fragments, each from the analysis its text command prints.

verdict: `compare.render`'s grids and numerics lines (what `cagtool compare` shows), findings,
and the alerts of `recompiles.explain`; recompiles: `recompiles.render.table_cells` and the
explain words; graphs: each CA graph event with its code file, and `graphs.runs.compare_replaced`
rendered with `graphs.render`'s hunks; gate: a `GateResult`. Every string from the record goes
through `markup.esc`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.schema import CAGraphEvent, FindingEvent
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
from cagtool.report.graphs.diff import CHANGED, EQUAL, INSERTED, REMOVED, NodeDiff
from cagtool.report.graphs.render import changed_fields, header_lines, hunks, node_text, origin_label, summary_lines
from cagtool.report.graphs.runs import GraphComparison
from cagtool.report.html.markup import bullet_list, paragraphs, table, tag, text
from cagtool.report.recompiles.explain import Cause, Explanation, alert_words, cause_words, step_list
from cagtool.report.recompiles.render import TABLE_HEADER, counts_line, record_notes, table_cells
from cagtool.report.recompiles.table import format_source

if TYPE_CHECKING:
    from cagtool.report.gate.run import GateResult

# Graph code files larger than this are shown cut, with the path of the whole file: a report of a
# large model must stay small enough to open and send (the budget is 3 MB).
MAX_CODE_CHARS = 60_000


def grid_table(grid: Grid) -> str:
    """A compare grid (the same rows the terminal table and Markdown show), problems marked."""
    marks = {cell: "problem" for cell in grid.problem_cells}
    return text("h3", grid.title) + table(grid.header, grid.rows, classes="grid", cell_classes=marks)


def advice(sentence: str, details: str = "#recompiles") -> str:
    """What to do, right under the headline (its `advice`), with a link to the causes; "" when
    there is nothing to do."""
    if not sentence:
        return ""
    return tag("p", text("b", "What to do: ") + text("span", sentence) + " " + tag("a", "why, and every recompile", href=details), class_="advice", id="advice")


def header(run: RunRecord, anchor: str = "run", title: str = "") -> str:
    """What ran: script and argv, when, where, with which versions and backend, and how it ended."""
    meta = run.meta
    target = meta.target.get("name", "?")
    argv = " ".join(meta.target_argv[1:])
    options = meta.options or {}
    backend = options.get("backend") or next((m.manifest.backend for m in run.modes.values()), "?")
    statuses = ", ".join(f"{name}: {_mode_status(record)}" for name, record in run.modes.items())
    missing = [m for m in meta.modes if m not in run.modes]
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
    body = "".join(f"<tr>{text('th', k)}{text('td', v)}</tr>" for k, v in rows)
    heading = text("h2", title or _script_and_arguments(meta.target, meta.target_argv))
    return tag("section", heading + tag("table", f"<tbody>{body}</tbody>", class_="facts"), id=anchor)


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
    return f"{name} {' '.join(rest)}".strip()


def verdict(comparison: Comparison, run: RunRecord, explanations: dict[str, Explanation], ranks_html: str = "") -> str:
    """Modes side by side, the speedups with their noise verdict, numerics, then what the user
    must not miss: failed modes, findings and recompile alerts."""
    parts = [grid_table(mode_grid(comparison))]
    if comparison.speedups:
        parts.append(grid_table(speedup_grid(comparison.speedups)))
        parts.append(text("p", SPEEDUP_FOOTNOTE, class_="note"))
    excluded = excluded_line(comparison)
    if excluded:
        parts.append(text("p", excluded, class_="note"))
    from cagtool.report.compare.render import grad_parity_lines

    for line, problem in numerics_lines(comparison.numerics) + grad_parity_lines(comparison.grad_parity):
        parts.append(text("p", line.strip(), class_="problem" if problem else None))
    problems = comparison.failure_problems
    if problems:
        parts.append(text("h3", "Problems") + bullet_list(problems, class_="problem"))
    parts.append(ranks_html)
    parts.append(findings(run, explanations))
    return tag("section", text("h2", "Verdict") + "".join(parts), id="verdict")


def findings(run: RunRecord, explanations: dict[str, Explanation]) -> str:
    items = []
    for name, record in run.modes.items():
        cwd = record.manifest.cwd
        for finding in record.of(FindingEvent):
            where = f" ({format_source(finding.source, cwd)})" if finding.source else ""
            items.append(f"{name}: {finding.message}{where}")
        if record.skipped_lines or record.unknown_kinds:
            items.append(f"{name}: skipped {record.skipped_lines} unreadable line(s) and {sum(record.unknown_kinds.values())} unknown event(s)")
    alerts = []
    for name, explanation in explanations.items():
        for alert in explanation.alerts:
            words = alert_words(alert, explanation.table.cwd)
            alerts.append(tag("div", text("h4", f"{name}: {words.title}") + paragraphs(words.why) + paragraphs([f"Fix: {f}" for f in words.fix]), class_="alert"))
    out = text("h3", "Findings and alerts")
    if not items and not alerts:
        return out + text("p", "None: no finding was recorded and no recompile alert was raised.")
    return out + "".join(alerts) + bullet_list(items, class_="findings")


def ranks(run: RunRecord, focus: int | None) -> str:
    """Multi-rank runs: which rank the figures above are from, then per mode the ranks' table
    (as `summary` and `compare` print it) and their findings (divergence, missing or failed ranks)."""
    from cagtool.report.ranks.analysis import agreement, analyze_ranks
    from cagtool.report.ranks.render import RANK_HEADER, rank_cells

    parts = []
    for name, record in run.modes.items():
        analysis = analyze_ranks(record)
        if analysis is None:
            continue
        size = f" of world size {analysis.world_size}" if analysis.world_size is not None else ""
        parts.append(text("h4", f"mode {name}: {len(analysis.rows)} ranks{size} recorded"))
        parts.append(table(RANK_HEADER, rank_cells(analysis), classes="grid ranks"))
        parts.append(text("p", "total: counts and peak RSS summed, step time the slowest rank's median", class_="note"))
        if analysis.other_processes:
            parts.append(text("p", "other processes followed (no rank): " + ", ".join(analysis.other_processes), class_="note"))
        parts.append(bullet_list([f"rank finding: {f.message}" for f in analysis.findings], class_="problem"))
        if len(analysis.rows) > 1 and not analysis.diverge:
            parts.append(text("p", agreement(analysis)[0].upper() + agreement(analysis)[1:] + ".", class_="ok"))
    if not parts:
        return ""
    lead = f"A multi-rank run: the tables above, the recompiles and the graphs are rank {focus}'s records; the timeline shows every rank."
    return text("h3", "Ranks") + text("p", lead, class_="note") + "".join(parts)


def run_change(rc: RunComparison) -> str:
    """Before/after: `compare`'s change grid, its notes and problems."""
    parts = [grid_table(change_grid(rc))]
    parts += [text("p", f"note: {n}", class_="note") for n in rc.notes]
    if rc.problems:
        parts.append(text("h3", "Problems") + bullet_list(rc.problems, class_="problem"))
    return tag("section", text("h2", "Verdict: before (A) and after (B)") + "".join(parts), id="verdict")


def chart_block(chart_id: str, caption: str = "") -> str:
    """A placeholder the page's script draws the chart `chart_id` into."""
    cap = text("p", caption, class_="note") if caption else ""
    return tag("div", "", id=chart_id, class_="chart") + cap


def recompiles(explanations: dict[str, Explanation], anchor: str = "recompiles", title: str = "Recompiles and their causes") -> str:
    """Per mode: every recompile (the `cagtool recompiles` table), then the root causes with
    why, the fix and the evidence (`--explain`)."""
    parts = []
    for name, explanation in explanations.items():
        t = explanation.table
        parts.append(text("h3", f"mode {name}"))
        parts.append(text("p", counts_line(t)))
        parts.extend(text("p", note, class_="note") for note in record_notes(t))
        if t.rows:
            parts.append(table(TABLE_HEADER, table_cells(t), classes="recompiles"))
        if not explanation.causes and not explanation.alerts:
            if t.rows:
                parts.append(text("p", "No recompiles: every step after the first reused the cached graphs."))
            continue
        for alert in explanation.alerts:
            words = alert_words(alert, t.cwd)
            parts.append(_cause_block(f"!! {words.title}", words.why, words.fix, words.evidence, "alert"))
        inner: dict[int, list[str]] = {}  # root cause number -> the cards of its consequences
        for cause in explanation.causes:
            if cause.caused_by is not None:
                inner.setdefault(cause.caused_by, []).append(_cause_card(cause, t.cwd, "cause consequence"))
        for cause in explanation.causes:
            if cause.caused_by is None:
                parts.append(_cause_card(cause, t.cwd, "cause", inner.get(cause.number, [])))
    if not parts:
        parts.append(text("p", "No mode recorded any compile."))
    return tag("section", text("h2", title) + "".join(parts), id=anchor)


def _cause_card(cause: Cause, cwd: str, kind: str, consequences: Sequence[str] = ()) -> str:
    """A root cause's card holds the cards of the recompiles that follow from it."""
    words = cause_words(cause, cwd)
    steps = cause.steps
    at = f", {'step' if len(steps) == 1 else 'steps'} {step_list(steps)}" if steps else ""
    return _cause_block(f"#{cause.number} {words.title}{at}", words.why, words.fix, words.evidence, kind, "".join(consequences))


def _cause_block(title: str, why: Sequence[str], fix: Sequence[str], evidence: str, kind: str, inside: str = "") -> str:
    body = text("h4", title) + paragraphs(why) + "".join(text("p", f"Fix: {f}", class_="fix") for f in fix)
    if evidence:
        body += text("p", f"Evidence: {evidence}", class_="note")
    return tag("div", body + inside, class_=kind)


def graphs(mode: ModeRecord, comparisons: Sequence[GraphComparison], highlight: "CodeHighlighter") -> str:
    """Every CA graph of a mode: what it holds (nodes, ops, hooks, autograd nodes), its code, and
    for each recompile, the structural diff against the graph it replaced."""
    events = sorted(mode.of(CAGraphEvent), key=lambda g: g.ca_id)
    by_new = {c.new.ca_id: c for c in comparisons}
    blocks = []
    for graph in events:
        blocks.append(_graph_block(mode, graph, by_new.get(graph.ca_id), highlight))
    if not blocks:
        blocks.append(text("p", f"mode {mode.mode} captured no compiled-autograd graph."))
    return "".join(blocks)


def _graph_block(mode: ModeRecord, graph: CAGraphEvent, comparison: GraphComparison | None, highlight: "CodeHighlighter") -> str:
    step = f"step {graph.step}" if graph.step is not None else "step ?"
    facts = (
        f"{graph.node_count} FX nodes, {len(graph.autograd_nodes)} autograd nodes, {graph.num_sizes} dynamic sizes, "
        f"captured in {graph.capture_s * 1000:.1f} ms at {step}" + (f", compiler {graph.compiler}" if graph.compiler else "")
    )
    parts = [text("h3", f"{mode.mode} graph {graph.compile_id}", id=f"graph-{mode.path.name}-{graph.ca_id}"), text("p", facts)]
    ops = sorted(graph.op_histogram.items(), key=lambda kv: (-kv[1], kv[0]))
    hooks = Counter(f"{h.hook_type} ({h.name})" for h in graph.hooks)
    side = table(("op", "count"), ops, classes="ops")
    hook_list = bullet_list([f"{h} x{n}" if n > 1 else h for h, n in hooks.items()]) or text("p", "no hooks")
    nodes = ", ".join(f"{n.name} ({n.node_call})" for n in graph.autograd_nodes)
    parts.append(
        tag(
            "div",
            tag("div", text("h4", "op histogram") + side)
            + tag("div", text("h4", "hooks") + hook_list + text("h4", "autograd nodes (NodeCall)") + text("p", nodes or "-", class_="nodes")),
            class_="graph-facts",
        )
    )
    if graph.aot_ids:
        ids = ", ".join(str(i) for i in graph.aot_ids)
        parts.append(text("p", f"inlined AOT backward graphs: {len(graph.aot_ids)} (ids {ids})"))
    if comparison is not None:
        parts.append(diff_block(comparison))
    code_path = mode.path / graph.code_file if graph.code_file else None
    parts.append(highlight.code_details(code_path, f"code of {graph.compile_id}"))
    return tag("article", "".join(parts), class_="graph")


_DIFF_CLASS = {INSERTED: "ins", REMOVED: "del", CHANGED: "chg", EQUAL: "eq"}


def diff_block(comparison: GraphComparison, context: int = 3) -> str:
    """`diff-graphs`' unified view of one recompile: header, hunks, summary."""
    head = "".join(text("p", line.plain, class_="diff-head") for line in header_lines(comparison))
    summary = "".join(text("p", line.plain, class_="diff-summary") for line in summary_lines(comparison))
    lines: list[str] = []
    spans, skipped_after = hunks(comparison.diff.entries, context)
    entries = comparison.diff.entries
    for hunk in spans:
        where = f"{hunk.skipped_before} unchanged before" if hunk.start else "start of graph"
        lines.append(text("span", f"@@ {where} @@", class_="hunk"))
        origin = None
        for entry in entries[hunk.start : hunk.stop]:
            if origin_label(entry) != origin:
                origin = origin_label(entry)
                lines.append(text("span", f"  # {origin}", class_="hunk"))
            lines.extend(_diff_lines(entry))
    if spans and skipped_after:
        lines.append(text("span", f"@@ {skipped_after} unchanged after @@", class_="hunk"))
    body = tag("pre", "\n".join(lines), class_="diff") if lines else ""
    title = f"diff: {comparison.old.compile_id} → {comparison.new.compile_id}"
    return tag("div", text("h4", title) + head + body + summary, class_="graph-diff")


def _diff_lines(entry: NodeDiff) -> list[str]:
    out = []
    if entry.old is not None and entry.kind != EQUAL:
        out.append(text("span", "-" + node_text(entry.old), class_="del"))
    if entry.new is not None:
        if entry.kind == EQUAL:
            out.append(text("span", " " + node_text(entry.new), class_="eq"))
        else:
            changed = f"  # changed: {changed_fields(entry)}" if entry.kind == CHANGED else ""
            out.append(text("span", "+" + node_text(entry.new) + changed, class_=_DIFF_CLASS[entry.kind] if entry.kind == CHANGED else "ins"))
    return out


class CodeHighlighter:
    """Python code as highlighted HTML, pygments' HTML for it (`highlight.py`: every token
    escaped); its CSS goes in the page once."""

    def css(self) -> str:
        from cagtool.report.html.highlight import css

        return css()

    def highlight(self, source: str) -> str:
        from cagtool.report.html.highlight import highlight_python

        return highlight_python(source)

    def code_details(self, path: Path | None, summary: str) -> str:
        if path is None:
            return text("p", f"{summary}: no code file recorded", class_="note")
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return text("p", f"{summary}: cannot read {path}: {exc.strerror}", class_="note")
        note = ""
        if len(source) > MAX_CODE_CHARS:
            note = text("p", f"first {MAX_CODE_CHARS:,} of {len(source):,} characters; the whole file: {path}", class_="note")
            source = source[:MAX_CODE_CHARS]
        label = f"{summary} ({source.count(chr(10))} lines, {path.name})"
        return tag("details", text("summary", label) + note + self.highlight(source))


def gate(result: "GateResult") -> str:
    """The gate's checks, one row each, as `cagtool gate` prints them."""
    from cagtool.report.gate.output import refresh_hint, result_label, verdict_line

    rows = [(r.check, r.mode, r.actual, r.limit, result_label(r), r.source, r.message) for r in result.results]
    marks = {(i, 4): "problem" for i, r in enumerate(result.results) if r.failed}
    parts = [
        text("p", verdict_line(result), class_="problem" if not result.passed else "ok"),
        table(("check", "mode", "actual", "limit", "result", "source", "message"), rows, classes="gate", cell_classes=marks),
    ]
    # A check's own warnings (a slower tail under a median threshold) first, then the environment's.
    parts += [text("p", f"warning: {w}", class_="note") for w in (*(w for r in result.results for w in r.warnings), *result.warnings)]
    hint = refresh_hint(result)
    if hint:
        parts.append(text("p", hint, class_="note"))
    return tag("section", text("h2", "Gate") + "".join(parts), id="gate")


def verification(data: dict) -> str:
    """`recompiles --explain --verify`'s result: before -> after per fix, with its verdict."""
    base = data.get("baseline") or {}
    rows, marks = [], {}

    for i, fix in enumerate(data.get("fixes", ())):
        m = fix.get("measured") or {}

        def counts(key: str) -> str:
            return f"{'/'.join(map(str, base.get(key) or ['?']))} → {'/'.join(map(str, m.get(key) or ['?']))}"

        step = "-" if fix.get("speedup") is None else f"{fix['speedup']:.2f}x ({fix['speedup_low']:.2f}-{fix['speedup_high']:.2f}x)"
        rows.append((fix["fix"], ", ".join(f"#{n}" for n in fix["causes"]), fix["who"], counts("ca_recompiles"), counts("dynamo_recompiles"),
                     step, fix["verdict"].upper(), "; ".join(fix["reasons"])))
        marks[(i, 6)] = "ok" if fix["verdict"] == "verified" else "problem"
    parts = [text("p", f"Mode {data['mode']}: the job re-run {data['repeat']} times as a baseline and {data['repeat']} times with each fix "
                  "(a code fix runs on a patched copy, never on the script); counts are torch's own in every re-run.", class_="note")]
    if rows:
        parts.append(table(("fix", "causes", "who", "CA recompiles", "Dynamo recompiles", "steady speed vs baseline (90% CI)", "verdict", "why"),
                           rows, classes="verify", cell_classes=marks))
    for fix in data.get("fixes", ()):
        if fix.get("torch_says"):
            parts.append(text("p", f"{fix['fix']}: torch's own suggestion (PGO), verbatim: {fix['torch_says']}", class_="note"))
        if fix.get("patch"):
            copy = f" Applied to a copy ({fix['patched_copy']}) run in place of the script; your file is unchanged." if fix.get("patched_copy") else ""
            parts.append(text("p", f"{fix['fix']}: {fix['patch']['title']} ({fix['patch']['file']}, line {fix['patch']['line']}).{copy}", class_="note"))
            parts.append(text("pre", fix["patch"]["diff"], class_="patch"))
    for item in data.get("not_applied", ()):
        parts.append(text("p", f"cause #{item['cause']} ({item['code']}): {item['why']} ({item['who']})", class_="note"))
        if (item.get("patch") or {}).get("diff"):
            parts.append(text("pre", item["patch"]["diff"], class_="patch"))
    return tag("section", text("h2", "Fixes verified by re-running") + "".join(parts), id="verify")
