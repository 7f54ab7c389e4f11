"""Gate checks against a baseline's times: step-time and compile-time regressions.

A change counts only beyond the threshold and, for step time, beyond the noise of the two
measurements (see `StepTimeRegressionCheck`); a change as large the other way is an improvement.
Pure functions of `ModeSnapshot`s, like report.gate_checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cagtool.report.gate.baseline import ModeSnapshot
from cagtool.report.compare.core import MIN_STEADY_STEPS
from cagtool.report.gate.checks import CheckResult, Outcome, missing_mode, unmeasurable
from cagtool.report.gate.thresholds import TimeThreshold


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if abs(seconds) >= 1:
        return f"{seconds:.3f} s"
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _pct(change: float) -> str:
    return f"{change:+.1f}%"


def _verdict(head: str, detail: str, change_s: float, allowed_s: float, bound: str) -> tuple[Outcome, str]:
    """Worse than allowed fails, as much better is an improvement, anything between passes."""
    if change_s > allowed_s:
        return Outcome.FAIL, f"{head}: {detail} > +{bound}"
    if change_s < -allowed_s:
        return Outcome.IMPROVED, f"{head}: {detail} < -{bound}: improved, refresh the baseline"
    return Outcome.PASS, f"{head}: {detail} within +/-{bound}"


@dataclass(frozen=True)
class _TimeCheck:
    """A time of one mode against the baseline's, held to `threshold`; an error when either lacks the mode."""

    threshold: TimeThreshold
    mode: str
    name: str  # each check sets its own default
    source: str = "flag"

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
        limit = f"+{self.threshold}"
        if self.mode not in run:
            return missing_mode(self.name, self.mode, run, "run", limit, self.source)
        if baseline is None or self.mode not in baseline:
            return missing_mode(self.name, self.mode, baseline or {}, "baseline", limit, self.source)
        return self._against(run[self.mode], baseline[self.mode], limit)

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        """The check proper, once both the run and the baseline have the mode."""
        raise NotImplementedError


@dataclass(frozen=True)
class StepTimeRegressionCheck(_TimeCheck):
    """Step time against the baseline's, with a noise floor: a change only counts when it exceeds
    both the threshold and the noise of the two measurements, twice the standard error of the
    difference (about 95%). Each side's standard error comes from its measured spread: sigma is
    estimated as (p90 - p10) / 2.563 (the p10-p90 width of a normal), and SE = 1.2533 sigma / sqrt(n)
    for a median (used for mean, p10 and p90 too: rough, and said so in the docs)."""

    name: str = "max-regression"

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        t = self.threshold
        cur, base = current.step_time, previous.step_time
        if cur is None or base is None:
            side = "this run" if cur is None else "the baseline"
            return unmeasurable(self.name, self.mode, f"{side} has no steady-state steps (every step compiled; run more steps)", limit, self.source)
        now, before = getattr(cur, f"{t.field}_s"), getattr(base, f"{t.field}_s")
        if now is None or before is None or before <= 0:
            return unmeasurable(self.name, self.mode, f"no {t.field} step time to compare", limit, self.source)
        noise_s = 2.0 * math.sqrt(_standard_error(cur) ** 2 + _standard_error(base) ** 2)
        change_s = now - before
        change_pct = 100.0 * change_s / before
        noise_pct = 100.0 * noise_s / before
        if t.unit == "%":
            allowed_pct = max(t.value, noise_pct)
            allowed_s = before * allowed_pct / 100.0
        else:
            allowed_s = max(t.value, noise_s)
            allowed_pct = 100.0 * allowed_s / before
        detail = (
            f"step time {t.field} {_fmt_s(now)} vs baseline {_fmt_s(before)}: {_pct(change_pct)}"
        )
        bound = f"{allowed_pct:.1f}% ({_fmt_s(allowed_s)}; threshold {t}, noise +/-{noise_pct:.1f}%)"
        outcome, message = _verdict(f"{self.name} ({self.mode})", detail, change_s, allowed_s, bound)
        notes = []
        if min(cur.count, base.count) < MIN_STEADY_STEPS:
            notes.append(f"few steady-state steps (this run {cur.count}, baseline {base.count}): the noise floor is rough")
        data = {
            "field": t.field, "actual_s": now, "baseline_s": before, "change_pct": change_pct,
            "noise_pct": noise_pct, "allowed_pct": allowed_pct, "steps": cur.count, "baseline_steps": base.count,
        }
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, _pct(change_pct), limit, message, self.source, notes, data)


def _standard_error(stats: Any) -> float:
    """Standard error of the median step time, from the p10-p90 spread and the step count."""
    if stats.p10_s is None or stats.p90_s is None or stats.count < 1:
        return 0.0
    sigma = max(stats.p90_s - stats.p10_s, 0.0) / 2.5631
    return 1.2533 * sigma / math.sqrt(stats.count)


@dataclass(frozen=True)
class CompileTimeRegressionCheck(_TimeCheck):
    """Total compile time against the baseline's. One measurement per run, so no spread: use an
    absolute threshold (`0.5s`) when compile times are tiny and percentages jumpy."""

    name: str = "max-compile-regression"

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        t = self.threshold
        now, before = current.compile_time_s, previous.compile_time_s
        change_s = now - before
        allowed_s = before * t.value / 100.0 if t.unit == "%" else t.value
        change_pct = 100.0 * change_s / before if before > 0 else (0.0 if change_s == 0 else math.inf)
        detail = f"compile time {_fmt_s(now)} vs baseline {_fmt_s(before)}: {_pct(change_pct)}"
        outcome, message = _verdict(f"{self.name} ({self.mode})", detail, change_s, allowed_s, f"{t}")
        data = {"actual_s": now, "baseline_s": before, "change_pct": change_pct if math.isfinite(change_pct) else None}
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, _pct(change_pct), limit, message, self.source, data=data)
