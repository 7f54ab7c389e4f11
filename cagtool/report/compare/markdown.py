"""A comparison as Markdown: the same grids and lines as the terminal table, as pipe tables."""

from __future__ import annotations

from cagtool.report.compare.core import AnyComparison, RunComparison
from cagtool.report.compare.grids import (
    SPEEDUP_FOOTNOTE,
    Grid,
    change_grid,
    excluded_line,
    left_aligned,
    mode_grid,
    numerics_lines,
    speedup_grid,
)


def _md_escape(value: str) -> str:
    return value.replace("|", "\\|")


def _md_table(grid: Grid) -> list[str]:
    lines = [f"**{_md_escape(grid.title)}**", ""]
    lines.append("| " + " | ".join(_md_escape(h) or " " for h in grid.header) + " |")
    lines.append("|" + "|".join(":---" if left_aligned(i, h) else "---:" for i, h in enumerate(grid.header)) + "|")
    for r, row in enumerate(grid.rows):
        cells = [f"**{_md_escape(v)}**" if (r, k) in grid.problem_cells else _md_escape(v) for k, v in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def comparison_markdown(comparison: AnyComparison) -> str:
    if isinstance(comparison, RunComparison):
        lines = _md_table(change_grid(comparison))
        lines += [f"- note: {_md_escape(n)}" for n in comparison.notes]
        if comparison.notes:
            lines.append("")
        problems = comparison.problems
    else:
        lines = _md_table(mode_grid(comparison))
        if comparison.speedups:
            lines += _md_table(speedup_grid(comparison.speedups))
            lines += [SPEEDUP_FOOTNOTE, ""]
        excluded = excluded_line(comparison)
        if excluded:
            lines += [excluded, ""]
        for line, problem in numerics_lines(comparison.numerics):
            lines.append(f"- **{line.strip()}**" if problem else f"- {line.strip()}")
        lines.append("")
        problems = comparison.failure_problems
    if problems:
        lines.append("**Problems:**")
        lines += [f"- {_md_escape(p)}" for p in problems]
        lines.append("")
    return "\n".join(lines)
