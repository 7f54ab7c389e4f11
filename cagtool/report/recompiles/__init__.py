"""Every recompile of a run: table.py (rows from the record), explain.py (root causes and fixes), render.py (text and JSON),
verification.py (a kept verification of fixes, in words).

The names below are what `cagtool recompiles` uses."""

from cagtool.report.recompiles.explain import Explanation, explain
from cagtool.report.recompiles.render import (
    ExplanationRenderer,
    RecompilesJsonRenderer,
    RecompilesTableRenderer,
    print_wrapped,
    record_notes,
)
from cagtool.report.recompiles.reads import StepSummary, step_summary
from cagtool.report.recompiles.table import RecompileTable, load_filtered, recompile_table

__all__ = [
    "Explanation",
    "ExplanationRenderer",
    "RecompileTable",
    "RecompilesJsonRenderer",
    "RecompilesTableRenderer",
    "StepSummary",
    "explain",
    "load_filtered",
    "print_wrapped",
    "record_notes",
    "recompile_table",
    "step_summary",
]
