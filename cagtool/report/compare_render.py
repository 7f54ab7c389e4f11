"""Renderers for mode comparisons (`compare.py`): rich table, JSON, CSV and Markdown.

The table and the Markdown are drawn from the same grids (`_mode_grid`, `_speedup_grid`...), so
the two never say different things. `render_comparison(comparison, fmt, console)` is the one entry
point: `cagtool compare` and the end of a multi-mode `cagtool run` both call it.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cagtool.report.compare import (
    LOSS,
    Comparison,
    ModeColumn,
    Numerics,
    NumericsDiff,
    RunComparison,
    Speedup,
    format_rel,
    mode_fields,
    speedup,
)

FORMATS = ("table", "json", "csv", "markdown")
JSON_FORMAT = "cagtool-compare"
JSON_RUNS_FORMAT = "cagtool-compare-runs"
JSON_SCHEMA_VERSION = 1

AnyComparison = Union[Comparison, RunComparison]


# ---------------------------------------------------------------------------------------------
# Value formatting


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0 s"
    return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def _millis(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.3f} ms"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _signed(value: float | int | None, fmt: Callable[[Any], str]) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "="
    text = fmt(abs(value))
    return f"+{text}" if value > 0 else f"-{text}"


def _steps_list(steps: list[int], limit: int = 6) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (", ..." if len(steps) > limit else "")


# ---------------------------------------------------------------------------------------------
# Grids: what the table and the Markdown show


@dataclass
class Grid:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    sections: list[int] = field(default_factory=list)  # row indexes that start a new section
    problem_cells: set[tuple[int, int]] = field(default_factory=set)  # (row, column) to highlight


def _status_cell(column: ModeColumn) -> str:
    if column.ok:
        return "ok" if len(column.records) == 1 else f"ok ({len(column.records)} runs)"
    first = column.failures[0]
    code = f", exit {first.exit_code}" if first.exit_code not in (None, 0) else ""
    extra = f" ({len(column.failures)} of {len(column.records)} runs)" if len(column.records) > 1 else ""
    return f"{first.status.upper()}{code}{extra}"


def _backward_cell(column: ModeColumn) -> str:
    m = column.metrics
    if m is None:
        return "-"
    if not m.backward_graphs:
        return "0"
    kind = "CA" if m.ca_graphs or column.name == "ca" else "AOT"
    return f"{m.backward_graphs} ({kind})"


def _recompiles_cell(column: ModeColumn) -> str:
    m = column.metrics
    if m is None:
        return "-"
    if not m.recompiles:
        return "0"
    return f"{m.recompiles} ({m.dynamo_recompiles} Dynamo, {m.ca_cache_misses} CA)"


def _steady_cell(column: ModeColumn) -> str:
    st = column.step_time
    if column.metrics is None:
        return "-"
    if not st.excluded:
        return str(st.count)
    return f"{st.count} ({len(st.excluded)} excluded)"


def _spread_cell(column: ModeColumn) -> str:
    st = column.step_time
    if st.p10_s is None or st.p90_s is None:
        return "-"
    return f"{st.p10_s * 1000:.3f} - {st.p90_s * 1000:.3f} ms"


def _numerics_cell(numerics: Numerics, column: ModeColumn) -> str:
    if numerics.reference is None:
        return "-"
    if any(r == numerics.reference for r in column.records[:1]):
        return "reference"
    mine = [d for d in numerics.diffs if d.record in column.records]
    if not mine:
        return "-"
    worst = max((d.max_rel_diff for d in mine if d.max_rel_diff is not None), default=None)
    flag = "" if all(d.agrees for d in mine) else " DISAGREES"
    return f"{format_rel(worst)}{flag}"


_PHASES = (("dynamo", "  Dynamo"), ("aot", "  AOTAutograd"), ("inductor", "  Inductor"), ("ca_capture", "  CA capture"))

# (label, cell) for the per-mode rows shared by one-run and before/after views.
_MODE_ROWS: tuple[tuple[str, Callable[[ModeColumn], str]], ...] = (
    ("status", _status_cell),
    ("forward graphs", lambda c: _count(c.metrics.forward_graphs if c.metrics else None)),
    ("backward graphs", _backward_cell),
    ("graph breaks", lambda c: _count(c.metrics.graph_breaks if c.metrics else None)),
    ("recompiles", _recompiles_cell),
    ("compile time", lambda c: _seconds(c.compile_time_s)),
    *(
        (label, (lambda key: lambda c: _seconds(c.compile_phases_s.get(key)) if c.metrics else "-")(key))
        for key, label in _PHASES
    ),
    ("time to first step", lambda c: _seconds(c.first_step_s)),
    ("step time (median)", lambda c: _millis(c.step_time.median_s)),
    ("step time p10 - p90", _spread_cell),
    ("steady steps", _steady_cell),
    ("peak RSS", lambda c: _mib(c.peak_rss_bytes)),
)


def _mode_grid(comparison: Comparison) -> Grid:
    columns = list(comparison.modes.values())
    grid = Grid(f"Modes side by side: {comparison.target}", ["", *[c.name for c in columns]])
    for label, cell in _MODE_ROWS:
        grid.rows.append([label, *[cell(c) for c in columns]])
    reference = comparison.numerics.reference
    label = f"numerics vs {reference} (max rel diff)" if reference else "numerics"
    grid.rows.append([label, *[_numerics_cell(comparison.numerics, c) for c in columns]])
    for r, row in enumerate(grid.rows):
        for k, value in enumerate(row[1:], start=1):
            if value.startswith(("FAILED", "TIMEOUT", "INTERRUPTED", "RUNNING", "MISSING")) or value.endswith("DISAGREES"):
                grid.problem_cells.add((r, k))
    return grid


def _speedup_range(s: Speedup) -> str:
    if s.low is None or s.high is None:
        return "-"
    return f"{s.low:.2f} - {s.high:.2f}x"


def _speedup_row(s: Speedup) -> list[str]:
    note = s.note
    if s.repetition_ratios:
        reps = ", ".join(f"{r:.2f}" for r in s.repetition_ratios)
        note = f"per repetition: {reps}" + (f"; {note}" if note else "")
    return [s.label, _ratio(s.ratio), _speedup_range(s), s.verdict, note]


def _speedup_grid(speedups: tuple[Speedup, ...] | list[Speedup], title: str = "Speedups (steady-state step time)") -> Grid:
    grid = Grid(title, ["", "speedup", "range (p10/p90)", "verdict", "note"])
    for s in speedups:
        grid.rows.append(_speedup_row(s))
    return grid


def _numerics_lines(numerics: Numerics) -> list[tuple[str, bool]]:
    """(line, is_problem)."""
    tol = numerics.tolerance
    if numerics.reference is None:
        return [(f"Numerics: {n}", False) for n in numerics.notes] or [("Numerics: nothing to compare", False)]
    lines: list[tuple[str, bool]] = []
    worst = _worst_diff(list(numerics.diffs))
    tolerance = f"rtol {tol.rtol:g}, atol {tol.atol:g}"
    if not numerics.diffs:
        lines.append((f"Numerics: only {numerics.reference} recorded values; nothing to compare", False))
    elif numerics.agree:
        where = _where(worst) if worst and worst.max_rel_diff else ""
        lines.append(
            (f"Numerics: losses and final norms agree with {numerics.reference} within {tolerance}; "
             f"largest relative difference {format_rel(numerics.max_rel_diff)}{where}", False)
        )
    else:
        lines.append((f"Numerics DISAGREE with {numerics.reference} ({tolerance}):", True))
        for d in numerics.disagreements:
            lines.append((f"  {d.quantity} of {d.record}: {format_rel(d.max_rel_diff)} relative{_where(d, quantity=False)} "
                          f"({d.value!r} vs {d.reference_value!r})", True))
    for d in numerics.diffs:
        if d.note:
            lines.append((f"  note: {d.note}", False))
    for note in numerics.notes:
        lines.append((f"  note: {note}", False))
    return lines


def _worst_diff(diffs: list[NumericsDiff]) -> NumericsDiff | None:
    with_values = [d for d in diffs if d.max_rel_diff is not None]
    return max(with_values, key=lambda d: d.max_rel_diff or 0.0) if with_values else None


def _where(d: NumericsDiff, quantity: bool = True) -> str:
    what = f"{d.quantity} of {d.record}" if quantity else ""
    step = f" at step {d.worst_step}" if d.quantity == LOSS and d.worst_step is not None else ""
    if quantity:
        return f" ({what}{step})"
    return step


def _excluded_line(comparison: Comparison) -> str | None:
    parts = [f"{c.name}: {_steps_list(c.step_time.excluded)}" for c in comparison.modes.values() if c.step_time.excluded]
    if not parts:
        return None
    return "Steps left out of the steady state because compilation touched them: " + "; ".join(parts)


# Before/after rows: (label, field key in mode_fields, value formatter, delta formatter).
_CHANGE_ROWS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("forward graphs", "forward_graphs", _count),
    ("backward graphs", "backward_graphs", _count),
    ("graph breaks", "graph_breaks", _count),
    ("recompiles", "recompiles", _count),
    ("compile time", "compile_time_s", _seconds),
    ("time to first step", "first_step_s", _seconds),
    ("step time (median)", "step_time_median_s", _millis),
    ("step time p10", "step_time_p10_s", _millis),
    ("step time p90", "step_time_p90_s", _millis),
    ("steady steps", "steady_steps", _count),
    ("peak RSS", "peak_rss_bytes", _mib),
)


def _change_grid(rc: RunComparison) -> Grid:
    grid = Grid(
        f"Before/after: A = {rc.before.run_path}  B = {rc.after.run_path}",
        ["mode", "", "A (before)", "B (after)", "change"],
    )
    for change in rc.changes:
        grid.sections.append(len(grid.rows))
        a, b = change.before, change.after
        fa = mode_fields(a) if a else {}
        fb = mode_fields(b) if b else {}
        status_a = _status_cell(a) if a else "not run"
        status_b = _status_cell(b) if b else "not run"
        grid.rows.append([change.mode, "status", status_a, status_b, ""])
        if a is None or b is None:
            continue
        deltas = change.deltas
        for label, key, fmt in _CHANGE_ROWS:
            grid.rows.append(["", label, fmt(fa.get(key)), fmt(fb.get(key)), _signed(deltas.get(key), fmt)])
        s = change.speedup
        if s is not None:
            verdict = f"{_ratio(s.ratio)} ({_speedup_range(s)}) {s.verdict}"
            grid.rows.append(["", "speedup B over A", "", "", verdict])
        if change.numerics:
            worst = _worst_diff(list(change.numerics))
            agree = all(d.agrees for d in change.numerics)
            grid.rows.append(["", "numerics B vs A (max rel diff)", "", "", f"{format_rel(worst.max_rel_diff if worst else None)}{'' if agree else ' DISAGREES'}"])
    for r, row in enumerate(grid.rows):
        for k, value in enumerate(row[2:], start=2):
            if value.startswith(("FAILED", "TIMEOUT", "INTERRUPTED", "RUNNING", "MISSING")) or value.endswith("DISAGREES"):
                grid.problem_cells.add((r, k))
    return grid


# ---------------------------------------------------------------------------------------------
# Rich table


def _left(index: int, name: str) -> bool:
    """Labels and words align left, figures right."""
    return index == 0 or name in ("", "mode", "note", "verdict")


class TableRenderer:
    """The terminal view. Options are constructor arguments; `render` prints."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def _table(self, grid: Grid) -> Table:
        table = Table(title=grid.title, title_justify="left", show_lines=False)
        for i, name in enumerate(grid.header):
            table.add_column(name, justify="left" if _left(i, name) else "right", overflow="fold")
        for r, row in enumerate(grid.rows):
            if r in grid.sections and r:
                table.add_section()
            cells = [Text(v, style="bold red") if (r, k) in grid.problem_cells else Text(v) for k, v in enumerate(row)]
            table.add_row(*cells)
        return table

    def _lines(self, lines: list[tuple[str, bool]]) -> None:
        for line, problem in lines:
            self.console.print(Text(line, style="bold red" if problem else ""))

    def render(self, comparison: AnyComparison) -> None:
        if isinstance(comparison, RunComparison):
            self.console.print(self._table(_change_grid(comparison)))
            for note in comparison.notes:
                self.console.print(Text(f"note: {note}", style="yellow"))
            self._problems(comparison.problems, failures_only=False)
            return
        self.console.print(self._table(_mode_grid(comparison)))
        if comparison.speedups:
            self.console.print(self._table(_speedup_grid(comparison.speedups)))
            self.console.print(
                Text("speedup = baseline median step time / mode median step time (> 1: faster); "
                     "a range containing 1.0 is within noise.", style="dim")
            )
        excluded = _excluded_line(comparison)
        if excluded:
            self.console.print(Text(excluded, style="dim"))
        self._lines(_numerics_lines(comparison.numerics))
        self._problems([f"mode {f.describe()}" for f in comparison.failures], failures_only=True)

    def _problems(self, problems: list[str], failures_only: bool) -> None:
        if not problems:
            return
        self.console.print(Text("Problems:", style="bold red"))
        for p in problems:
            self.console.print(Text(f"  {p}", style="red"))


# ---------------------------------------------------------------------------------------------
# Markdown


def _md_escape(value: str) -> str:
    return value.replace("|", "\\|")


def _md_table(grid: Grid) -> list[str]:
    lines = [f"**{_md_escape(grid.title)}**", ""]
    lines.append("| " + " | ".join(_md_escape(h) or " " for h in grid.header) + " |")
    lines.append("|" + "|".join(":---" if _left(i, h) else "---:" for i, h in enumerate(grid.header)) + "|")
    for r, row in enumerate(grid.rows):
        cells = [f"**{_md_escape(v)}**" if (r, k) in grid.problem_cells else _md_escape(v) for k, v in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def comparison_markdown(comparison: AnyComparison) -> str:
    if isinstance(comparison, RunComparison):
        lines = _md_table(_change_grid(comparison))
        lines += [f"- note: {_md_escape(n)}" for n in comparison.notes]
        if comparison.notes:
            lines.append("")
        problems = comparison.problems
    else:
        lines = _md_table(_mode_grid(comparison))
        if comparison.speedups:
            lines += _md_table(_speedup_grid(comparison.speedups))
            lines += ["speedup = baseline median step time / mode median step time (> 1: faster); a range containing 1.0 is within noise.", ""]
        excluded = _excluded_line(comparison)
        if excluded:
            lines += [excluded, ""]
        for line, problem in _numerics_lines(comparison.numerics):
            lines.append(f"- **{line.strip()}**" if problem else f"- {line.strip()}")
        lines.append("")
        problems = [f"mode {f.describe()}" for f in comparison.failures]
    if problems:
        lines.append("**Problems:**")
        lines += [f"- {_md_escape(p)}" for p in problems]
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# JSON


def _finite(value: Any) -> Any:
    """JSON has no inf/nan: write them as strings a reader can still recognise."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _speedup_json(s: Speedup) -> dict[str, Any]:
    return {
        "mode": s.mode,
        "baseline": s.baseline,
        "speedup": s.ratio,
        "low": s.low,
        "high": s.high,
        "within_noise": s.within_noise,
        "verdict": s.verdict,
        "steady_steps": {"mode": s.steady_steps[0], "baseline": s.steady_steps[1]},
        "repetition_ratios": list(s.repetition_ratios),
        "note": s.note,
    }


def _diff_json(d: NumericsDiff) -> dict[str, Any]:
    return {
        "quantity": d.quantity,
        "record": d.record,
        "reference": d.reference,
        "compared": d.compared,
        "max_rel_diff": _finite(d.max_rel_diff),
        "worst_step": d.worst_step,
        "value": _finite(d.value),
        "reference_value": _finite(d.reference_value),
        "agrees": d.agrees,
        "note": d.note,
    }


def _numerics_json(n: Numerics) -> dict[str, Any]:
    return {
        "reference": n.reference,
        "rtol": n.tolerance.rtol,
        "atol": n.tolerance.atol,
        "agree": n.agree,
        "max_rel_diff": _finite(n.max_rel_diff),
        "diffs": [_diff_json(d) for d in n.diffs],
        "notes": list(n.notes),
    }


def _mode_json(column: ModeColumn, numerics: Numerics) -> dict[str, Any]:
    data = mode_fields(column)
    data["records"] = list(column.records)
    data["compile_phases_s"] = dict(column.compile_phases_s)
    data["repetition_step_time_median_s"] = list(column.repetition_medians)
    data["loss_max_rel_diff"] = _finite(numerics.worst_for(column.name))
    data["failures"] = [
        {"record": f.record, "status": f.status, "exit_code": f.exit_code, "reason": f.reason} for f in column.failures
    ]
    return data


def comparison_to_json(comparison: AnyComparison) -> dict[str, Any]:
    if isinstance(comparison, RunComparison):
        return {
            "format": JSON_RUNS_FORMAT,
            "schema_version": JSON_SCHEMA_VERSION,
            "before": comparison_to_json(comparison.before),
            "after": comparison_to_json(comparison.after),
            "changes": {
                c.mode: {
                    "in_before": c.before is not None,
                    "in_after": c.after is not None,
                    "deltas": c.deltas,
                    "speedup": _speedup_json(c.speedup) if c.speedup else None,
                    "numerics": [_diff_json(d) for d in c.numerics],
                }
                for c in comparison.changes
            },
            "notes": comparison.notes,
            "problems": comparison.problems,
        }
    return {
        "format": JSON_FORMAT,
        "schema_version": JSON_SCHEMA_VERSION,
        "run": str(comparison.run_path),
        "target": comparison.target,
        "target_argv": list(comparison.target_argv),
        "versions": comparison.versions,
        "options": comparison.options,
        "modes": {name: _mode_json(c, comparison.numerics) for name, c in comparison.modes.items()},
        "speedups": {s.label: _speedup_json(s) for s in comparison.speedups},
        "numerics": _numerics_json(comparison.numerics),
        "problems": comparison.problems,
    }


# ---------------------------------------------------------------------------------------------
# CSV: one row per mode, PyTorch benchmark column names where they exist

CSV_COLUMNS = (
    "name",  # the script (benchmarks/dynamo: the model)
    "mode",
    "status",
    "exit_code",
    "repetitions",
    "speedup",  # over eager: eager median step / this mode's (benchmarks/dynamo's meaning)
    "speedup_low",
    "speedup_high",
    "speedup_within_noise",
    "abs_latency",  # median steady step time, ms (as benchmarks/dynamo writes it)
    "abs_latency_p10",
    "abs_latency_p90",
    "compilation_latency",  # seconds
    "compression_ratio",  # eager peak memory / this mode's (peak RSS here)
    "peak_rss_bytes",
    "unique_graphs",
    "graph_breaks",
    "autograd_captures",
    "forward_graphs",
    "backward_graphs",
    "recompiles",
    "first_step_s",
    "steady_steps",
    "loss_max_rel_diff",
)


def _csv_rows(comparison: Comparison, run_label: str | None = None, baseline: Comparison | None = None) -> list[dict[str, Any]]:
    rows = []
    eager = comparison.modes.get("eager")
    for name, column in comparison.modes.items():
        f = mode_fields(column)
        m = column.metrics
        vs_eager = speedup(column, eager) if eager is not None else None
        within_noise = vs_eager.within_noise if vs_eager else None
        if name == "eager" and vs_eager is not None and vs_eager.ratio is not None:
            vs_eager, within_noise = Speedup("eager", "eager", 1.0, 1.0, 1.0), None
        eager_peak = eager.peak_rss_bytes if eager is not None else None
        unique = None
        if m is not None:
            unique = m.unique_graphs if m.unique_graphs is not None else m.forward_graphs + m.ca_graphs
        captures = None
        if m is not None:
            captures = m.autograd_captures if m.autograd_captures is not None else m.ca_graphs
        row: dict[str, Any] = {
            "name": comparison.target,
            "mode": name,
            "status": f["status"],
            "exit_code": f["exit_code"],
            "repetitions": f["repetitions"],
            "speedup": vs_eager.ratio if vs_eager else None,
            "speedup_low": vs_eager.low if vs_eager else None,
            "speedup_high": vs_eager.high if vs_eager else None,
            "speedup_within_noise": within_noise,
            "abs_latency": _ms(f["step_time_median_s"]),
            "abs_latency_p10": _ms(f["step_time_p10_s"]),
            "abs_latency_p90": _ms(f["step_time_p90_s"]),
            "compilation_latency": f["compile_time_s"],
            "compression_ratio": (eager_peak / column.peak_rss_bytes) if eager_peak and column.peak_rss_bytes else None,
            "peak_rss_bytes": f["peak_rss_bytes"],
            "unique_graphs": unique,
            "graph_breaks": f["graph_breaks"],
            "autograd_captures": captures,
            "forward_graphs": f["forward_graphs"],
            "backward_graphs": f["backward_graphs"],
            "recompiles": f["recompiles"],
            "first_step_s": f["first_step_s"],
            "steady_steps": f["steady_steps"],
            "loss_max_rel_diff": _finite(comparison.numerics.worst_for(name)),
        }
        if run_label is not None:
            row = {"run": run_label, **row}
            before = baseline.modes.get(name) if baseline is not None else None
            change = speedup(column, before) if before is not None else None
            row["speedup_vs_baseline"] = change.ratio if change else None
        rows.append(row)
    return rows


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def comparison_csv(comparison: AnyComparison) -> str:
    buffer = io.StringIO()
    if isinstance(comparison, RunComparison):
        columns = ["run", *CSV_COLUMNS, "speedup_vs_baseline"]
        rows = _csv_rows(comparison.before, "A") + _csv_rows(comparison.after, "B", baseline=comparison.before)
    else:
        columns, rows = list(CSV_COLUMNS), _csv_rows(comparison)
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# Entry point


def format_comparison(comparison: AnyComparison, fmt: str) -> str:
    """The text of a non-table format (json, csv, markdown)."""
    if fmt == "json":
        return json.dumps(comparison_to_json(comparison), indent=2, default=str) + "\n"
    if fmt == "csv":
        return comparison_csv(comparison)
    if fmt == "markdown":
        return comparison_markdown(comparison)
    raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def render_comparison(comparison: AnyComparison, fmt: str = "table", console: Console | None = None) -> None:
    """Print a comparison (one run's modes, or two runs) in `fmt`: table | json | csv | markdown.

    The table goes through the rich console; the other formats are written to the console's file
    verbatim (no wrapping, no markup), so they can be piped or redirected."""
    if console is None:
        from cagtool.report.console import make_console

        console = make_console()
    if fmt == "table":
        TableRenderer(console).render(comparison)
        return
    text = format_comparison(comparison, fmt)
    console.file.write(text)
    console.file.flush()
