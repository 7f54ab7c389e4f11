"""One run: its modes side by side (counts, times, speedups, numerics) in a `Comparison`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cagtool.record.loader import RunRecord
from cagtool.report.compare.columns import ModeColumn, ModeFailure, mode_columns
from cagtool.report.compare.numerics import Numerics, Tolerance, numerics_problem, run_numerics
from cagtool.report.compare.speedup import SPEEDUP_PAIRS, Speedup, speedup


@dataclass(frozen=True)
class Comparison:
    run_path: Path
    target: str  # the script or module, as the user gave it
    modes: dict[str, ModeColumn]
    speedups: tuple[Speedup, ...]
    numerics: Numerics
    options: dict[str, Any] = field(default_factory=dict)  # the run's options (steps, repeat, backend...)
    target_argv: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[ModeFailure]:
        return [f for column in self.modes.values() for f in column.failures]

    @property
    def failure_problems(self) -> list[str]:
        """One problem line per mode (or repetition) that did not finish cleanly."""
        return [f"mode {f.describe()}" for f in self.failures]

    @property
    def problems(self) -> list[str]:
        """What the user must not miss: failed modes and numerics that disagree."""
        found = self.failure_problems
        for diff in self.numerics.disagreements:
            found.append(numerics_problem(diff, self.numerics.tolerance))
        return found


def compare_modes(run: RunRecord, tolerance: Tolerance | None = None) -> Comparison:
    """The side-by-side comparison of one run's modes."""
    tol = tolerance or Tolerance()
    columns = mode_columns(run)
    speedups = tuple(speedup(columns[m], columns[b]) for m, b in SPEEDUP_PAIRS if m in columns and b in columns)
    return Comparison(
        run_path=run.path,
        target=str(run.meta.target.get("name", "")),
        modes=columns,
        speedups=speedups,
        numerics=run_numerics(run, tol),
        options=dict(run.meta.options or {}),
        target_argv=tuple(run.meta.target_argv or ()),
        versions=dict(run.meta.versions or {}),
        machine=dict(run.meta.machine or {}),
    )
