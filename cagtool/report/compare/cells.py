"""How one figure of a mode comparison reads as text: value formats and the per-mode cells.

Shared by the grids (table and Markdown) of `compare_grids`; the JSON and CSV keep raw numbers.
"""

from __future__ import annotations

from typing import Any, Callable

from cagtool.report.compare.core import ModeColumn, Numerics, NumericsDiff, Speedup, format_rel

# ---------------------------------------------------------------------------------------------
# Values


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0 s"
    return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def millis(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.3f} ms"


def mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


def count(value: int | None, detail: str = "") -> str:
    """A count, with its breakdown in brackets when it has one (`3 (AOT)`); "-" when unknown."""
    if value is None:
        return "-"
    return f"{value} ({detail})" if detail else str(value)


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def signed(value: float | int | None, fmt: Callable[[Any], str]) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "="
    text = fmt(abs(value))
    return f"+{text}" if value > 0 else f"-{text}"


def steps_list(steps: list[int], limit: int = 6) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (", ..." if len(steps) > limit else "")


# ---------------------------------------------------------------------------------------------
# Cells of one mode


def status_cell(column: ModeColumn) -> str:
    if column.ok:
        return "ok" if len(column.records) == 1 else f"ok ({len(column.records)} runs)"
    first = column.failures[0]
    code = f", exit {first.exit_code}" if first.exit_code not in (None, 0) else ""
    extra = f" ({len(column.failures)} of {len(column.records)} runs)" if len(column.records) > 1 else ""
    return f"{first.status.upper()}{code}{extra}"


def backward_cell(column: ModeColumn) -> str:
    m = column.metrics
    if m is None:
        return "-"
    kind = "CA" if m.ca_graphs or column.name == "ca" else "AOT"
    return count(m.backward_graphs, kind if m.backward_graphs else "")


def recompiles_cell(column: ModeColumn) -> str:
    m = column.metrics
    if m is None:
        return "-"
    return count(m.recompiles, f"{m.dynamo_recompiles} Dynamo, {m.ca_cache_misses} CA" if m.recompiles else "")


def steady_cell(column: ModeColumn) -> str:
    st = column.step_time
    if column.metrics is None:
        return "-"
    return count(st.count, f"{len(st.excluded)} excluded" if st.excluded else "")


def spread_cell(column: ModeColumn) -> str:
    st = column.step_time
    if st.p10_s is None or st.p90_s is None:
        return "-"
    return f"{st.p10_s * 1000:.3f} - {st.p90_s * 1000:.3f} ms"


def diffs_cell(diffs: list[NumericsDiff] | tuple[NumericsDiff, ...]) -> str:
    """The largest relative difference of some numerics diffs, flagged when any disagrees."""
    worst = worst_diff(list(diffs))
    flag = "" if all(d.agrees for d in diffs) else " DISAGREES"
    return f"{format_rel(worst.max_rel_diff if worst else None)}{flag}"


def numerics_cell(numerics: Numerics, column: ModeColumn) -> str:
    if numerics.reference is None:
        return "-"
    if any(r == numerics.reference for r in column.records[:1]):
        return "reference"
    mine = [d for d in numerics.diffs if d.record in column.records]
    if not mine:
        return "-"
    return diffs_cell(mine)


def worst_diff(diffs: list[NumericsDiff]) -> NumericsDiff | None:
    with_values = [d for d in diffs if d.max_rel_diff is not None]
    return max(with_values, key=lambda d: d.max_rel_diff or 0.0) if with_values else None


def speedup_range(s: Speedup) -> str:
    if s.low is None or s.high is None:
        return "-"
    return f"{s.low:.2f} - {s.high:.2f}x"
