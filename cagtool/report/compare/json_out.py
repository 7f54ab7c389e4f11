"""A comparison as one JSON document (`--format json`): raw figures, for machines."""

from __future__ import annotations

import math
from typing import Any

from cagtool.report.compare.core import AnyComparison, ModeColumn, Numerics, NumericsDiff, RunComparison, Speedup, mode_fields

JSON_FORMAT = "cagtool-compare"
JSON_RUNS_FORMAT = "cagtool-compare-runs"
JSON_SCHEMA_VERSION = 1


def finite(value: Any) -> Any:
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
        "max_rel_diff": finite(d.max_rel_diff),
        "worst_step": d.worst_step,
        "value": finite(d.value),
        "reference_value": finite(d.reference_value),
        "agrees": d.agrees,
        "note": d.note,
    }


def _numerics_json(n: Numerics) -> dict[str, Any]:
    return {
        "reference": n.reference,
        "rtol": n.tolerance.rtol,
        "atol": n.tolerance.atol,
        "agree": n.agree,
        "max_rel_diff": finite(n.max_rel_diff),
        "diffs": [_diff_json(d) for d in n.diffs],
        "notes": list(n.notes),
    }


def _mode_json(column: ModeColumn, numerics: Numerics) -> dict[str, Any]:
    data = mode_fields(column)
    data["records"] = list(column.records)
    data["compile_phases_s"] = dict(column.compile_phases_s)
    data["repetition_step_time_median_s"] = list(column.repetition_medians)
    data["loss_max_rel_diff"] = finite(numerics.worst_for(column.name))
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
