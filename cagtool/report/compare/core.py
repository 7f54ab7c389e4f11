"""Modes side by side (eager / aot / ca) and runs before/after: pure analysis of run records.

`compare_modes(run)` answers "did compiled autograd help?" for one run: per mode its counts and
times (repetitions `ca.2`, `ca.3`... pooled into their mode), the speedups aot/eager, ca/eager and
ca/aot with their spread and a noise verdict, and whether the numerics agree. `compare_runs(a, b)`
puts the same columns of two runs next to each other (before/after a change). Renderers live in
`compare_render.py`; nothing here prints.

This module is the entry point; the parts live in
- `compare_columns`: one mode's repetitions pooled into a `ModeColumn`, and its flat figures;
- `compare_speedup`: one mode's speedup over another, with its spread and noise verdict;
- `compare_numerics`: losses and final norms against a reference, within a `Tolerance`;
- `compare_one_run`: a run's modes side by side (`compare_modes`);
- `compare_two_runs`: two runs before/after (`compare_runs`).

Conventions, chosen to match PyTorch's own benchmarks where they have one:
- *speedup* of X over Y = median steady step time of Y / that of X (> 1: X is faster), like
  `benchmarks/dynamo` (eager time / compiled time).
- *spread* of a speedup: the range [Y.p10 / X.p90, Y.p90 / X.p10] of the pooled steady step times.
  It is deliberately conservative: a speedup whose range contains 1.0 is reported as *within
  noise*, and so is one measured on fewer than `MIN_STEADY_STEPS` steady steps per side. With
  repetitions, the per-repetition ratios of medians are listed as well (run-to-run noise).
- *numerics*: per-step losses and final parameter/gradient norms of each mode against a reference
  (eager when it has values, else the first mode that does), `|x - ref| <= atol + rtol * |ref|`
  like `torch.allclose`. Default rtol 1e-3, atol 1e-6 (see `Tolerance`).
"""

from __future__ import annotations

from cagtool.report.compare.columns import (
    NUMERIC_FIELDS,
    STATUS_MISSING,
    ModeColumn,
    ModeFailure,
    base_mode,
    mode_column,
    mode_columns,
    mode_fields,
    repetition_index,
)
from cagtool.report.compare.numerics import (
    GRAD_NORM,
    LOSS,
    PARAM_NORM,
    Numerics,
    NumericsDiff,
    NumericsSample,
    Tolerance,
    compare_samples,
    format_rel,
    numerics_problem,
    numerics_sample,
    relative_difference,
    run_numerics,
)
from cagtool.report.compare.one_run import Comparison, compare_modes
from cagtool.report.compare.speedup import MIN_STEADY_STEPS, SPEEDUP_PAIRS, Speedup, speedup
from cagtool.report.compare.two_runs import AnyComparison, ModeChange, RunComparison, compare_runs

__all__ = [
    "GRAD_NORM",
    "LOSS",
    "MIN_STEADY_STEPS",
    "NUMERIC_FIELDS",
    "PARAM_NORM",
    "SPEEDUP_PAIRS",
    "STATUS_MISSING",
    "AnyComparison",
    "Comparison",
    "ModeChange",
    "ModeColumn",
    "ModeFailure",
    "Numerics",
    "NumericsDiff",
    "NumericsSample",
    "RunComparison",
    "Speedup",
    "Tolerance",
    "base_mode",
    "compare_modes",
    "compare_runs",
    "compare_samples",
    "format_rel",
    "mode_column",
    "mode_columns",
    "mode_fields",
    "numerics_problem",
    "numerics_sample",
    "relative_difference",
    "repetition_index",
    "run_numerics",
    "speedup",
]
