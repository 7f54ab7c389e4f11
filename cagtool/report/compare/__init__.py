"""Modes side by side and runs before/after: analysis.py (pure), render.py (table, Markdown), export.py (JSON, CSV).

The names below are what the commands (compare, summary) and other capabilities use."""

from cagtool.report.compare.analysis import (
    Comparison,
    ModeColumn,
    RunComparison,
    compare_modes,
    compare_runs,
    mode_columns,
)
from cagtool.report.compare.closeness import Tolerance
from cagtool.report.compare.export import comparison_csv, comparison_to_json
from cagtool.report.compare.render import FORMATS, format_comparison, render_comparison

__all__ = [
    "FORMATS",
    "Comparison",
    "ModeColumn",
    "RunComparison",
    "Tolerance",
    "compare_modes",
    "compare_runs",
    "comparison_csv",
    "comparison_to_json",
    "format_comparison",
    "mode_columns",
    "render_comparison",
]
