"""Two runs before/after: the same modes of run A and run B next to each other, with the change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from cagtool.record.loader import RunRecord
from cagtool.report.compare.columns import NUMERIC_FIELDS, ModeColumn, mode_fields
from cagtool.report.compare.numerics import NumericsDiff, Tolerance, compare_samples, numerics_problem, numerics_sample
from cagtool.report.compare.one_run import Comparison, compare_modes
from cagtool.report.compare.speedup import Speedup, speedup


@dataclass(frozen=True)
class ModeChange:
    """One mode in run A (before) and run B (after)."""

    mode: str
    before: ModeColumn | None
    after: ModeColumn | None
    speedup: Speedup | None  # after over before (> 1: B is faster)
    numerics: tuple[NumericsDiff, ...] = ()  # B's first repetition against A's

    @property
    def deltas(self) -> dict[str, float | int | None]:
        """after - before for each numeric field of `mode_fields` (None when either is missing)."""
        if self.before is None or self.after is None:
            return {}
        a, b = mode_fields(self.before), mode_fields(self.after)
        out: dict[str, float | int | None] = {}
        for key in NUMERIC_FIELDS:
            va, vb = a.get(key), b.get(key)
            out[key] = vb - va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) else None
        return out


@dataclass(frozen=True)
class RunComparison:
    before: Comparison
    after: Comparison
    changes: tuple[ModeChange, ...]
    tolerance: Tolerance

    @property
    def notes(self) -> list[str]:
        """Differences between the two runs that change how far their figures compare."""
        a, b = self.before, self.after
        found = []
        if a.target_argv != b.target_argv:
            found.append(f"the runs ran different commands: A `{' '.join(a.target_argv)}`, B `{' '.join(b.target_argv)}`")
        for key in ("torch", "python"):
            va, vb = a.versions.get(key), b.versions.get(key)
            if va and vb and va != vb:
                found.append(f"{key} differs: A {va}, B {vb}")
        machine_a = (a.machine.get("hostname"), a.machine.get("cpu_count"), a.machine.get("processor"))
        machine_b = (b.machine.get("hostname"), b.machine.get("cpu_count"), b.machine.get("processor"))
        if a.machine and b.machine and machine_a != machine_b:
            found.append("the runs were recorded on different machines: their timings do not compare")
        for key in ("backend", "dynamic", "warm_cache"):
            va, vb = a.options.get(key), b.options.get(key)
            if va != vb and (va is not None or vb is not None):
                found.append(f"option {key} differs: A {va}, B {vb}")
        return found

    @property
    def problems(self) -> list[str]:
        found = [f"A: {p}" for p in self.before.failure_problems]
        found += [f"B: {p}" for p in self.after.failure_problems]
        for change in self.changes:
            for diff in change.numerics:
                if not diff.agrees:
                    found.append(numerics_problem(diff, self.tolerance))
        return found


def compare_runs(run_a: RunRecord, run_b: RunRecord, tolerance: Tolerance | None = None) -> RunComparison:
    """Run A (before) against run B (after), mode by mode."""
    tol = tolerance or Tolerance()
    before, after = compare_modes(run_a, tol), compare_modes(run_b, tol)
    names = list(before.modes) + [m for m in after.modes if m not in before.modes]
    changes = []
    for name in names:
        a, b = before.modes.get(name), after.modes.get(name)
        change_speedup = speedup(b, a, f"B {name}", f"A {name}") if a is not None and b is not None else None
        diffs: tuple[NumericsDiff, ...] = ()
        if a is not None and b is not None and a.records and b.records:
            rec_a, rec_b = run_a.modes.get(a.records[0]), run_b.modes.get(b.records[0])
            if rec_a is not None and rec_b is not None:
                sample_a = numerics_sample(f"A {a.records[0]}", rec_a)
                sample_b = numerics_sample(f"B {b.records[0]}", rec_b)
                diffs = compare_samples([sample_b], sample_a, tol).diffs
        changes.append(ModeChange(name, a, b, change_speedup, diffs))
    return RunComparison(before, after, tuple(changes), tol)


# What the renderers take: one run's modes, or two runs.
AnyComparison = Union[Comparison, RunComparison]
