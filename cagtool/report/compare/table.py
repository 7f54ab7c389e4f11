"""The terminal view of a comparison: its grids as rich tables, then its notes and problems."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

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


class TableRenderer:
    """The terminal view. Options are constructor arguments; `render` prints."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def _table(self, grid: Grid) -> Table:
        table = Table(title=grid.title, title_justify="left", show_lines=False)
        for i, name in enumerate(grid.header):
            table.add_column(name, justify="left" if left_aligned(i, name) else "right", overflow="fold")
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
            self.console.print(self._table(change_grid(comparison)))
            for note in comparison.notes:
                self.console.print(Text(f"note: {note}", style="yellow"))
            self._problems(comparison.problems, failures_only=False)
            return
        self.console.print(self._table(mode_grid(comparison)))
        if comparison.speedups:
            self.console.print(self._table(speedup_grid(comparison.speedups)))
            self.console.print(Text(SPEEDUP_FOOTNOTE, style="dim"))
        excluded = excluded_line(comparison)
        if excluded:
            self.console.print(Text(excluded, style="dim"))
        self._lines(numerics_lines(comparison.numerics))
        self._problems(comparison.failure_problems, failures_only=True)

    def _problems(self, problems: list[str], failures_only: bool) -> None:
        if not problems:
            return
        self.console.print(Text("Problems:", style="bold red"))
        for p in problems:
            self.console.print(Text(f"  {p}", style="red"))
