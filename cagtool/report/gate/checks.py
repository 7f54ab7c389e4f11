"""Gate checks: small objects, each comparing one figure of the run (and maybe of the baseline)
with a threshold and producing a `CheckResult` with a fixed-format message.

Counts are exact and direction-aware, like PyTorch's own benchmark gates: more than allowed
fails, fewer is reported as an *improvement* (so the limit or the baseline gets tightened), and
`fail_on_improvement` turns that into a failure. The checks against a baseline's times live in
report.gate_time_checks. Pure functions of `ModeSnapshot`s: no torch, no files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

from cagtool.report.gate.baseline import ModeSnapshot
from cagtool.report.compare.core import MIN_STEADY_STEPS
from cagtool.report.gate.thresholds import SpeedupThreshold

# ---------------------------------------------------------------- results


class Outcome(str, Enum):
    PASS = "pass"
    FAIL = "fail"  # worse than allowed
    IMPROVED = "improved"  # better than the limit or baseline says: tighten it
    ERROR = "error"  # could not be measured (missing mode, no steady-state steps): never a pass


@dataclass(frozen=True)
class CheckResult:
    check: str  # the threshold's name, e.g. "max-recompiles:ca"
    mode: str  # the mode it reads ("ca/aot" for a speedup)
    outcome: Outcome
    failed: bool  # the gate fails because of this check
    actual: str  # the figure, formatted
    limit: str  # what it was held to, formatted
    message: str  # one line, fixed format: "<check> (<mode>): <detail>"
    source: str = "flag"  # flag | config | baseline | run
    notes: list[str] = field(default_factory=list)  # e.g. "inside the noise"
    data: dict[str, Any] = field(default_factory=dict)  # raw numbers for --format json

    @property
    def testcase(self) -> str:
        return f"{self.check} [{self.mode}]"


class Check(Protocol):
    name: str

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult: ...


def finish(result: CheckResult, fail_on_improvement: bool) -> CheckResult:
    """Decide `failed` from the outcome and the improvement policy."""
    failed = result.outcome in (Outcome.FAIL, Outcome.ERROR) or (
        result.outcome is Outcome.IMPROVED and fail_on_improvement
    )
    return result if failed == result.failed else replace(result, failed=failed)


def unmeasurable(name: str, mode: str, why: str, limit: str, source: str) -> CheckResult:
    """An ERROR result: the figure could not be measured, which fails the gate (never a pass)."""
    return CheckResult(name, mode, Outcome.ERROR, True, "-", limit, f"{name} ({mode}): cannot check: {why}", source)


def _unrecorded(name: str, snap: ModeSnapshot, limit: str, source: str) -> CheckResult | None:
    """An error when the mode ran but left no record to count from."""
    if snap.status != "missing":
        return None
    return unmeasurable(name, snap.mode, f"mode {snap.mode} left no record ({snap.problem or 'it did not start'})", limit, source)


def missing_mode(  # the run or baseline lacks the mode a check reads
    name: str, mode: str, where: dict[str, ModeSnapshot], what: str, limit: str, source: str, label: str = ""
) -> CheckResult:
    have = ", ".join(sorted(where)) or "none"
    hint = f"; record it with --modes including {mode}" if what == "run" else "; save the baseline from a run with that mode"
    return unmeasurable(name, label or mode, f"the {what} has no {mode} mode (it has: {have}){hint}", limit, source)


# ---------------------------------------------------------------- checks

_COUNT_LABELS = {
    "ca_graphs": "CA graphs",
    "recompiles": "recompiles",
    "ca_cache_misses": "CA recompiles",
    "dynamo_recompiles": "Dynamo recompiles",
    "graph_breaks": "graph breaks",
}


@dataclass(frozen=True)
class MaxCountCheck:
    """`metric` of `mode` must be at most `limit` (from a flag, the config, or the baseline's own count)."""

    name: str
    metric: str  # a ModeSnapshot field
    mode: str
    limit: int | None = None  # None: take the baseline's count
    source: str = "flag"

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
        label = _COUNT_LABELS.get(self.metric, self.metric)
        limit = self.limit
        limit_text = "-" if limit is None else f"<= {limit}"
        if self.mode not in run:
            return missing_mode(self.name, self.mode, run, "run", limit_text, self.source)
        if (unrecorded := _unrecorded(self.name, run[self.mode], limit_text, self.source)) is not None:
            return unrecorded
        if limit is None:
            if baseline is None or self.mode not in baseline:
                return missing_mode(self.name, self.mode, baseline or {}, "baseline", limit_text, self.source)
            limit = int(getattr(baseline[self.mode], self.metric))
            limit_text = f"<= {limit} (baseline)"
        actual = int(getattr(run[self.mode], self.metric))
        delta = actual - limit
        head = f"{self.name} ({self.mode}): {label} {actual}"
        if delta > 0:
            outcome, message = Outcome.FAIL, f"{head} > {limit} allowed (+{delta})"
        elif delta < 0 and not finished_cleanly(run[self.mode]):
            outcome, message = Outcome.PASS, f"{head} < {limit} allowed ({delta}), but the mode did not finish: not an improvement"
        elif delta < 0:
            what = "refresh the baseline" if self.limit is None else "lower the limit"
            outcome, message = Outcome.IMPROVED, f"{head} < {limit} allowed ({delta}): improved, {what}"
        else:
            outcome, message = Outcome.PASS, f"{head} = {limit} allowed"
        data = {"metric": self.metric, "actual": actual, "limit": limit, "delta": delta}
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, str(actual), limit_text, message, self.source, data=data)


@dataclass(frozen=True)
class ModeStatusCheck:
    """The mode must have run to the end: a crashed mode's counts would pass every limit."""

    mode: str
    name: str = "mode-finished"
    source: str = "run"

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
        if self.mode not in run:
            return missing_mode(self.name, self.mode, run, "run", "finished", self.source)
        snap = run[self.mode]
        ok = finished_cleanly(snap)
        exit_text = "" if snap.exit_code in (None, 0) else f", exit code {snap.exit_code}"
        reps = f", {snap.repetitions} repetitions" if snap.repetitions > 1 else ""
        message = f"{self.name} ({self.mode}): status {snap.status}{exit_text}, {snap.steps} steps{reps}"
        if snap.problem:
            message += f": {snap.problem}"
        outcome = Outcome.PASS if ok else Outcome.FAIL
        return CheckResult(
            self.name, self.mode, outcome, not ok, snap.status, "finished", message, self.source,
            data={"status": snap.status, "exit_code": snap.exit_code, "steps": snap.steps},
        )


def finished_cleanly(snap: ModeSnapshot) -> bool:
    """Finished with exit code 0, or stopped by --max-time (a bounded run: its steps count)."""
    return (snap.status == "finished" and snap.exit_code in (None, 0)) or snap.status == "timeout"


def speedup_with_spread(num: ModeSnapshot, den: ModeSnapshot) -> tuple[float, float, float] | None:
    """time(den)/time(num) at the medians, and its low/high from the p10-p90 bands (worst and
    best pairing): the convention of report.compare's `speedup`, on snapshots so that baselines
    and runs are treated alike. None without steady-state steps on both sides."""
    a, b = num.step_time, den.step_time
    if a is None or b is None or not a.median_s or not b.median_s:
        return None
    mid = b.median_s / a.median_s
    low = (b.p10_s or b.median_s) / (a.p90_s or a.median_s)
    high = (b.p90_s or b.median_s) / (a.p10_s or a.median_s)
    return mid, min(low, mid), max(high, mid)


@dataclass(frozen=True)
class MinSpeedupCheck:
    threshold: SpeedupThreshold
    name: str = "min-speedup"
    source: str = "flag"

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
        t = self.threshold
        pair = f"{t.numerator}/{t.denominator}"
        limit = f">= {t.minimum:g}x"
        for mode in (t.numerator, t.denominator):
            if mode not in run:
                return missing_mode(self.name, mode, run, "run", limit, self.source, label=pair)
        spread = speedup_with_spread(run[t.numerator], run[t.denominator])
        if spread is None:
            return unmeasurable(self.name, pair, "no steady-state steps to time in both modes (run more steps)", limit, self.source)
        mid, low, high = spread
        detail = f"speedup {mid:.3f}x (p10-p90 {low:.3f}x-{high:.3f}x)"
        notes: list[str] = []
        if mid < t.minimum:
            outcome, message = Outcome.FAIL, f"{self.name} ({pair}): {detail} < {t.minimum:g}x required"
        else:
            outcome, message = Outcome.PASS, f"{self.name} ({pair}): {detail} >= {t.minimum:g}x required"
            if low < t.minimum:
                notes.append(f"inside the noise: the low end {low:.3f}x is under {t.minimum:g}x")
        steady = min(s.step_time.count for s in (run[t.numerator], run[t.denominator]) if s.step_time)
        if steady < MIN_STEADY_STEPS:
            notes.append(f"only {steady} steady steps: too few to judge a speedup (run more steps)")
        data = {"speedup": mid, "low": low, "high": high, "minimum": t.minimum}
        return CheckResult(self.name, pair, outcome, outcome is Outcome.FAIL, f"{mid:.3f}x", limit, message, self.source, notes, data)


def evaluate_all(
    checks: list[Check],
    run: dict[str, ModeSnapshot],
    baseline: dict[str, ModeSnapshot] | None,
    fail_on_improvement: bool = False,
) -> list[CheckResult]:
    return [finish(check.evaluate(run, baseline), fail_on_improvement) for check in checks]
