"""Renderers for mode comparisons (`compare.py`): rich table, JSON, CSV and Markdown.

`render_comparison(comparison, fmt, console)` is the one entry point: `cagtool compare` and the end
of a multi-mode `cagtool run` both call it. The formats live in `compare_table`, `compare_markdown`
(both drawn from the same grids of `compare_grids`, so the two never say different things),
`compare_json` and `compare_csv`.
"""

from __future__ import annotations

import json

from rich.console import Console

from cagtool.report.compare.core import AnyComparison
from cagtool.report.compare.csv_out import CSV_COLUMNS, comparison_csv
from cagtool.report.compare.json_out import JSON_FORMAT, JSON_RUNS_FORMAT, JSON_SCHEMA_VERSION, comparison_to_json
from cagtool.report.compare.markdown import comparison_markdown
from cagtool.report.compare.table import TableRenderer

__all__ = [
    "CSV_COLUMNS",
    "FORMATS",
    "JSON_FORMAT",
    "JSON_RUNS_FORMAT",
    "JSON_SCHEMA_VERSION",
    "AnyComparison",
    "TableRenderer",
    "comparison_csv",
    "comparison_markdown",
    "comparison_to_json",
    "format_comparison",
    "render_comparison",
]

FORMATS = ("table", "json", "csv", "markdown")


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
