"""What the table and the Markdown of a comparison show, built once for both: grids and lines.

A `Grid` is a titled table of text cells with its problem cells marked; the renderers
(`compare_table`, `compare_markdown`) only lay it out, so the two never say different things.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from cagtool.report.compare.core import (
    LOSS,
    Comparison,
    ModeColumn,
    Numerics,
    NumericsDiff,
    RunComparison,
    Speedup,
    format_rel,
    mode_fields,
)
from cagtool.report.compare.cells import (
    backward_cell,
    count,
    diffs_cell,
    mib,
    millis,
    numerics_cell,
    ratio,
    recompiles_cell,
    seconds,
    signed,
    speedup_range,
    spread_cell,
    status_cell,
    steady_cell,
    steps_list,
    worst_diff,
)

SPEEDUP_FOOTNOTE = (
    "speedup = baseline median step time / mode median step time (> 1: faster); a range containing 1.0 is within noise."
)

# A cell that starts or ends so is something the user must not miss.
_PROBLEM_PREFIXES = ("FAILED", "TIMEOUT", "INTERRUPTED", "RUNNING", "MISSING")
_PROBLEM_SUFFIX = "DISAGREES"


@dataclass
class Grid:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    sections: list[int] = field(default_factory=list)  # row indexes that start a new section
    problem_cells: set[tuple[int, int]] = field(default_factory=set)  # (row, column) to highlight

    def mark_problems(self, first_column: int) -> None:
        """Highlight the failed statuses and numerics disagreements from `first_column` on."""
        for r, row in enumerate(self.rows):
            for k, value in enumerate(row[first_column:], start=first_column):
                if value.startswith(_PROBLEM_PREFIXES) or value.endswith(_PROBLEM_SUFFIX):
                    self.problem_cells.add((r, k))


def left_aligned(index: int, name: str) -> bool:
    """Labels and words align left, figures right."""
    return index == 0 or name in ("", "mode", "note", "verdict")


_PHASES = (("dynamo", "  Dynamo"), ("aot", "  AOTAutograd"), ("inductor", "  Inductor"), ("ca_capture", "  CA capture"))

# (label, cell) for the per-mode rows of the one-run view.
_MODE_ROWS: tuple[tuple[str, Callable[[ModeColumn], str]], ...] = (
    ("status", status_cell),
    ("forward graphs", lambda c: count(c.metrics.forward_graphs if c.metrics else None)),
    ("backward graphs", backward_cell),
    ("graph breaks", lambda c: count(c.metrics.graph_breaks if c.metrics else None)),
    ("recompiles", recompiles_cell),
    ("compile time", lambda c: seconds(c.compile_time_s)),
    *(
        (label, (lambda key: lambda c: seconds(c.compile_phases_s.get(key)) if c.metrics else "-")(key))
        for key, label in _PHASES
    ),
    ("time to first step", lambda c: seconds(c.first_step_s)),
    ("step time (median)", lambda c: millis(c.step_time.median_s)),
    ("step time p10 - p90", spread_cell),
    ("steady steps", steady_cell),
    ("peak RSS", lambda c: mib(c.peak_rss_bytes)),
)


def mode_grid(comparison: Comparison) -> Grid:
    columns = list(comparison.modes.values())
    grid = Grid(f"Modes side by side: {comparison.target}", ["", *[c.name for c in columns]])
    for label, cell in _MODE_ROWS:
        grid.rows.append([label, *[cell(c) for c in columns]])
    reference = comparison.numerics.reference
    label = f"numerics vs {reference} (max rel diff)" if reference else "numerics"
    grid.rows.append([label, *[numerics_cell(comparison.numerics, c) for c in columns]])
    grid.mark_problems(first_column=1)
    return grid


def _speedup_row(s: Speedup) -> list[str]:
    note = s.note
    if s.repetition_ratios:
        reps = ", ".join(f"{r:.2f}" for r in s.repetition_ratios)
        note = f"per repetition: {reps}" + (f"; {note}" if note else "")
    return [s.label, ratio(s.ratio), speedup_range(s), s.verdict, note]


def speedup_grid(speedups: tuple[Speedup, ...] | list[Speedup], title: str = "Speedups (steady-state step time)") -> Grid:
    grid = Grid(title, ["", "speedup", "range (p10/p90)", "verdict", "note"])
    for s in speedups:
        grid.rows.append(_speedup_row(s))
    return grid


def numerics_lines(numerics: Numerics) -> list[tuple[str, bool]]:
    """(line, is_problem)."""
    tol = numerics.tolerance
    if numerics.reference is None:
        return [(f"Numerics: {n}", False) for n in numerics.notes] or [("Numerics: nothing to compare", False)]
    lines: list[tuple[str, bool]] = []
    worst = worst_diff(list(numerics.diffs))
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


def _where(d: NumericsDiff, quantity: bool = True) -> str:
    what = f"{d.quantity} of {d.record}" if quantity else ""
    step = f" at step {d.worst_step}" if d.quantity == LOSS and d.worst_step is not None else ""
    if quantity:
        return f" ({what}{step})"
    return step


def excluded_line(comparison: Comparison) -> str | None:
    parts = [f"{c.name}: {steps_list(c.step_time.excluded)}" for c in comparison.modes.values() if c.step_time.excluded]
    if not parts:
        return None
    return "Steps left out of the steady state because compilation touched them: " + "; ".join(parts)


# Before/after rows: (label, field key in mode_fields, value formatter, also used for the delta).
_CHANGE_ROWS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("forward graphs", "forward_graphs", count),
    ("backward graphs", "backward_graphs", count),
    ("graph breaks", "graph_breaks", count),
    ("recompiles", "recompiles", count),
    ("compile time", "compile_time_s", seconds),
    ("time to first step", "first_step_s", seconds),
    ("step time (median)", "step_time_median_s", millis),
    ("step time p10", "step_time_p10_s", millis),
    ("step time p90", "step_time_p90_s", millis),
    ("steady steps", "steady_steps", count),
    ("peak RSS", "peak_rss_bytes", mib),
)


def change_grid(rc: RunComparison) -> Grid:
    grid = Grid(
        f"Before/after: A = {rc.before.run_path}  B = {rc.after.run_path}",
        ["mode", "", "A (before)", "B (after)", "change"],
    )
    for change in rc.changes:
        grid.sections.append(len(grid.rows))
        a, b = change.before, change.after
        fa = mode_fields(a) if a else {}
        fb = mode_fields(b) if b else {}
        status_a = status_cell(a) if a else "not run"
        status_b = status_cell(b) if b else "not run"
        grid.rows.append([change.mode, "status", status_a, status_b, ""])
        if a is None or b is None:
            continue
        deltas = change.deltas
        for label, key, fmt in _CHANGE_ROWS:
            grid.rows.append(["", label, fmt(fa.get(key)), fmt(fb.get(key)), signed(deltas.get(key), fmt)])
        s = change.speedup
        if s is not None:
            verdict = f"{ratio(s.ratio)} ({speedup_range(s)}) {s.verdict}"
            grid.rows.append(["", "speedup B over A", "", "", verdict])
        if change.numerics:
            grid.rows.append(["", "numerics B vs A (max rel diff)", "", "", diffs_cell(change.numerics)])
    grid.mark_problems(first_column=2)
    return grid
