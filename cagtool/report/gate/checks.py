"""Gate checks: small objects, each comparing one figure of the run (and maybe of the baseline)
with a threshold and producing a `CheckResult` with a fixed-format message.

Counts are exact and direction-aware, like PyTorch's own benchmark gates: more than allowed
fails, fewer is reported as an *improvement* (so the limit or the baseline gets tightened), and
`fail_on_improvement` turns that into a failure. The checks against a baseline's times live at
the bottom of this file. Pure functions of `ModeSnapshot`s: no torch, no files.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

from cagtool.errors import UsageError
from cagtool.report.compare.analysis import ABOVE, BELOW, MIN_STEADY_STEPS, TOO_FEW_STEPS, WITHIN_NOISE, speedup_verdict
from cagtool.report.gate.baseline import ModeSnapshot, StepTimeSnapshot

RECOMPILE_KINDS: dict[str, str] = {
    "total": "recompiles",  # CA recompiles + Dynamo recompiles
    # CA cache misses after the first capture, except the one-time .grad None -> defined warm-up
    # miss of an ordinary training loop (report.metrics.CAMisses; docs/ci.md)
    "ca": "ca_recompiles",
    "dynamo": "dynamo_recompiles",  # a guard failure of a forward frame or a CA graph
}


STEP_TIME_FIELDS = ("median", "mean", "p10", "p90")
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"


@dataclass(frozen=True)
class CountLimit:
    kind: str  # total | ca | dynamo for recompiles; "total" for the others
    limit: int


@dataclass(frozen=True)
class SpeedupThreshold:
    numerator: str  # the faster-hoped mode: speedup = time(denominator) / time(numerator)
    denominator: str
    minimum: float

    def __str__(self) -> str:
        return f"{self.numerator}/{self.denominator}:{self.minimum:g}x"


@dataclass(frozen=True)
class TimeThreshold:
    value: float
    unit: str  # "%" or "s"
    field: str = "median"  # for step time: median | mean | p10 | p90

    def __str__(self) -> str:
        prefix = "" if self.field == "median" else f"{self.field}:"
        return f"{prefix}{self.amount}"

    @property
    def amount(self) -> str:
        """The threshold without its field ("10%", "0.002s"): messages name the field already."""
        return f"{self.value:g}{self.unit}"


def parse_count(text: Any, flag: str, kinds: tuple[str, ...] = ("total",)) -> CountLimit:
    """`3` or `KIND:3`. Ints from TOML are accepted as they are."""
    if isinstance(text, bool):
        raise UsageError(f"{flag}: expected a count, got {text!r}")
    if isinstance(text, int):
        kind, number = "total", str(text)
    else:
        raw = str(text).strip()
        kind, _, number = raw.rpartition(":")
        kind = kind.strip().lower() or "total"
    if kind not in kinds:
        raise UsageError(f"{flag}: unknown kind {kind!r} in {text!r} (kinds: {', '.join(kinds)})")
    if not re.fullmatch(r"[0-9]+", number.strip()):
        raise UsageError(f"{flag}: expected a whole number >= 0 or KIND:N, got {text!r}")
    return CountLimit(kind, int(number))


def parse_speedup(text: Any, flag: str = "--min-speedup", modes: tuple[str, ...] = ("eager", "aot", "ca")) -> SpeedupThreshold:
    """`1.05` (ca/aot), `1.05x`, or `ca/eager:1.2`."""
    raw = str(text).strip()
    pair, _, number = raw.rpartition(":")
    numerator, denominator = "ca", "aot"
    if pair:
        num, slash, den = pair.partition("/")
        if not slash or num.strip() not in modes or den.strip() not in modes or num.strip() == den.strip():
            raise UsageError(f"{flag}: expected X or MODE/MODE:X with modes {'/'.join(modes)}, got {text!r}")
        numerator, denominator = num.strip(), den.strip()
    number = number.strip().rstrip("xX")
    if not re.fullmatch(_NUMBER, number) or float(number) <= 0:
        raise UsageError(f"{flag}: expected a positive speedup such as 1.05 or ca/eager:1.2x, got {text!r}")
    return SpeedupThreshold(numerator, denominator, float(number))


BASELINE = "baseline"


@dataclass(frozen=True)
class MemoryRatioThreshold:
    """peak memory of `numerator` / peak of `denominator` must be at most `maximum`. Denominator
    BASELINE: the same mode in the baseline; numerator "" is the gated mode (filled in by the gate)."""

    numerator: str
    denominator: str
    maximum: float

    @property
    def key(self) -> str:
        return BASELINE if self.denominator == BASELINE else f"{self.numerator}/{self.denominator}"


def parse_memory_ratio(text: Any, flag: str = "--max-memory-ratio", modes: tuple[str, ...] = ("eager", "aot", "ca")) -> MemoryRatioThreshold:
    """`1.2` (ca/aot), `ca/eager:1.5`, or `baseline:1.1`."""
    raw = str(text).strip()
    pair, _, number = raw.rpartition(":")
    numerator, denominator = "ca", "aot"
    if pair.strip().lower() == BASELINE:
        numerator, denominator = "", BASELINE
    elif pair:
        num, slash, den = pair.partition("/")
        if not slash or num.strip() not in modes or den.strip() not in modes or num.strip() == den.strip():
            raise UsageError(f"{flag}: expected R, MODE/MODE:R with modes {'/'.join(modes)}, or baseline:R, got {text!r}")
        numerator, denominator = num.strip(), den.strip()
    number = number.strip().rstrip("xX")
    if not re.fullmatch(_NUMBER, number) or float(number) <= 0:
        raise UsageError(f"{flag}: expected a positive ratio such as 1.2, ca/eager:1.5 or baseline:1.1, got {text!r}")
    return MemoryRatioThreshold(numerator, denominator, float(number))


def parse_time_threshold(text: Any, flag: str, fields: tuple[str, ...] = ()) -> TimeThreshold:
    """`10`, `10%`, `0.002s`, and with `fields`, `p90:10%`."""
    if isinstance(text, bool):
        raise UsageError(f"{flag}: expected a percentage, got {text!r}")
    raw = str(text).strip()
    field_name, _, rest = raw.rpartition(":")
    field_name = field_name.strip().lower()
    if field_name and field_name not in fields:
        allowed = f" (fields: {', '.join(fields)})" if fields else " (no FIELD: here)"
        raise UsageError(f"{flag}: unknown field {field_name!r} in {text!r}{allowed}")
    match = re.fullmatch(rf"({_NUMBER})\s*(%|s)?", rest.strip())
    if not match:
        raise UsageError(f"{flag}: expected a percentage (10 or 10%) or seconds (0.5s), got {text!r}")
    return TimeThreshold(float(match.group(1)), match.group(2) or "%", field_name or "median")


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
    # Worth a look although the check passed (e.g. a slower tail under a median check): each one
    # line that names the check, shown as `warning:` and as a GitHub ::warning.
    warnings: list[str] = field(default_factory=list)

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


_COUNT_LABELS = {
    "ca_graphs": "CA graphs",
    "recompiles": "recompiles",
    "ca_cache_misses": "CA cache misses",
    "ca_recompiles": "CA recompiles",
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
        notes = []
        warmup = max(run[self.mode].ca_cache_misses - 1, 0) - run[self.mode].ca_recompiles  # misses count the initial capture
        if self.metric in ("ca_recompiles", "recompiles") and warmup > 0:
            notes.append(
                f"not counted: {warmup} CA cache miss for AccumulateGrad's one-time .grad None -> defined warm-up "
                "(the second backward of a loop that keeps .grad; see cagtool recompiles --explain)"
            )
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, str(actual), limit_text, message, self.source, notes, data)


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
        ok = finished_cleanly(snap) and not snap.process_problems
        exit_text = "" if snap.exit_code in (None, 0) else f", exit code {snap.exit_code}"
        reps = f", {snap.repetitions} repetitions" if snap.repetitions > 1 else ""
        message = f"{self.name} ({self.mode}): status {snap.status}{exit_text}, {snap.steps} steps{reps}"
        if snap.problem:
            message += f": {snap.problem}"
        if snap.process_problems:
            message += "; " + "; ".join(snap.process_problems)
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
        steady = min(s.step_time.count for s in (run[t.numerator], run[t.denominator]) if s.step_time)
        # The noise rule `compare` applies to the same ratio (report.compare.analysis.speedup_verdict),
        # with the minimum as the bound: only a range wholly under the minimum fails.
        verdict = speedup_verdict(mid, low, high, steady, t.minimum)
        if verdict == TOO_FEW_STEPS:
            return unmeasurable(
                self.name, pair, f"{detail} from only {steady} steady steps: too few to judge a speedup "
                f"(compare says the same; run at least {MIN_STEADY_STEPS} steady steps)", limit, self.source,
            )
        if verdict == BELOW:
            outcome, message = Outcome.FAIL, f"{self.name} ({pair}): {detail} < {t.minimum:g}x required, beyond the noise"
        elif verdict == WITHIN_NOISE:
            outcome, message = Outcome.PASS, f"{self.name} ({pair}): {detail}: {t.minimum:g}x required is within the noise"
            notes.append(f"within noise: the p10-p90 range {low:.3f}x-{high:.3f}x contains {t.minimum:g}x; it neither passes nor fails clearly (run more steps to narrow it)")
        else:
            outcome, message = Outcome.PASS, f"{self.name} ({pair}): {detail} >= {t.minimum:g}x required"
        data = {"speedup": mid, "low": low, "high": high, "minimum": t.minimum, "verdict": verdict}
        return CheckResult(self.name, pair, outcome, outcome is Outcome.FAIL, f"{mid:.3f}x", limit, message, self.source, notes, data)


def peak_memory(a: ModeSnapshot, b: ModeSnapshot) -> tuple[int, int, str] | None:
    """The two peaks to compare, on the same footing: CUDA max allocated when both have it,
    else peak RSS; None when neither figure is in both."""
    if a.peak_device_memory_bytes and b.peak_device_memory_bytes:
        return a.peak_device_memory_bytes, b.peak_device_memory_bytes, "CUDA max allocated"
    if a.peak_rss_bytes and b.peak_rss_bytes:
        return a.peak_rss_bytes, b.peak_rss_bytes, "peak RSS"
    return None


@dataclass(frozen=True)
class MaxMemoryRatioCheck:
    """Peak memory of one mode over another's (ca/aot by default), or over the baseline's same mode."""

    threshold: MemoryRatioThreshold  # numerator filled in (the gated mode for a baseline ratio)
    name: str = "max-memory-ratio"
    source: str = "flag"

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
        t = self.threshold
        against_baseline = t.denominator == BASELINE
        label = f"{t.numerator}/baseline" if against_baseline else f"{t.numerator}/{t.denominator}"
        limit = f"<= {t.maximum:g}x"
        if t.numerator not in run:
            return missing_mode(self.name, t.numerator, run, "run", limit, self.source, label=label)
        if against_baseline:
            if baseline is None or t.numerator not in baseline:
                return missing_mode(self.name, t.numerator, baseline or {}, "baseline", limit, self.source, label=label)
            below = baseline[t.numerator]
        else:
            if t.denominator not in run:
                return missing_mode(self.name, t.denominator, run, "run", limit, self.source, label=label)
            below = run[t.denominator]
        peaks = peak_memory(run[t.numerator], below)
        if peaks is None:
            return unmeasurable(self.name, label, "no peak memory recorded on both sides", limit, self.source)
        top, bottom, what = peaks
        ratio = top / bottom
        detail = f"{what} {top / 2**20:.0f} MiB / {bottom / 2**20:.0f} MiB = {ratio:.3f}x"
        if ratio > t.maximum:
            outcome, message = Outcome.FAIL, f"{self.name} ({label}): {detail} > {t.maximum:g}x allowed"
        else:
            outcome, message = Outcome.PASS, f"{self.name} ({label}): {detail} <= {t.maximum:g}x allowed"
        data = {"ratio": ratio, "maximum": t.maximum, "numerator_bytes": top, "denominator_bytes": bottom, "memory": what}
        return CheckResult(self.name, label, outcome, outcome is Outcome.FAIL, f"{ratio:.3f}x", limit, message, self.source, [], data)


def evaluate_all(
    checks: list[Check],
    run: dict[str, ModeSnapshot],
    baseline: dict[str, ModeSnapshot] | None,
    fail_on_improvement: bool = False,
) -> list[CheckResult]:
    return [finish(check.evaluate(run, baseline), fail_on_improvement) for check in checks]


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


@dataclass(frozen=True)
class RegressionVerdict:
    """A ratio (now / baseline) judged against the allowed regression by the one noise rule."""

    outcome: Outcome
    verdict: str  # the rule's word against the allowed bound: above | within noise | below | too few steady steps
    note: str = ""  # why it passed although the median alone would not have


def regression_verdict(
    ratio: float, low: float, high: float, samples: int, allowed: float, improved: float, min_samples: int = MIN_STEADY_STEPS,
    range_name: str = "p10-p90 range",
) -> RegressionVerdict:
    """The noise rule of `compare` and `--min-speedup` (report.compare.analysis.speedup_verdict)
    applied to a time against its baseline: a FAIL only when the whole range [low, high] of the
    ratio lies above `allowed` (1 + the threshold), an IMPROVED only when it lies wholly below
    `improved` (1 - the threshold), an ERROR with too few samples (never a silent pass), else a
    PASS, with a note when the range straddles a bound (within noise). `range_name` says in the
    note where the range came from."""
    up = speedup_verdict(ratio, low, high, samples, allowed, min_samples=min_samples)
    if up == TOO_FEW_STEPS:
        return RegressionVerdict(Outcome.ERROR, up)
    if up == ABOVE:
        return RegressionVerdict(Outcome.FAIL, up)
    down = speedup_verdict(ratio, low, high, samples, improved, min_samples=min_samples)
    if down == BELOW:
        return RegressionVerdict(Outcome.IMPROVED, up)
    if up == WITHIN_NOISE:
        side = "beyond" if ratio > allowed else "inside"
        return RegressionVerdict(Outcome.PASS, up, f"within noise: the ratio is {side} the allowed regression, but the ratio's range ({range_name}) contains it (more steps or repetitions narrow it)")
    if down == WITHIN_NOISE and ratio < improved:
        return RegressionVerdict(Outcome.PASS, up, f"within noise: the ratio improved beyond the threshold, but the ratio's range ({range_name}) does not clearly")
    return RegressionVerdict(Outcome.PASS, up)


def _regression_message(head: str, detail: str, verdict: RegressionVerdict, threshold: TimeThreshold, spread: str) -> str:
    if verdict.outcome is Outcome.FAIL:
        return f"{head}: {detail} > +{threshold.amount}, beyond the noise{spread}"
    if verdict.outcome is Outcome.IMPROVED:
        return f"{head}: {detail} < -{threshold.amount}, beyond the noise{spread}: improved, refresh the baseline"
    if verdict.verdict == WITHIN_NOISE:
        return f"{head}: {detail}: +{threshold.amount} allowed is within the noise{spread}"
    return f"{head}: {detail} within +/-{threshold.amount}{spread}"


def _bounds(threshold: TimeThreshold, before: float) -> tuple[float, float]:
    """(allowed, improved) bounds on the ratio now / before for a threshold in % or seconds."""
    delta = threshold.value / 100.0 if threshold.unit == "%" else threshold.value / before
    return 1.0 + delta, 1.0 - delta


@dataclass(frozen=True)
class _TimeCheck:
    """A time of one mode against the baseline's, held to `threshold`; an error when either lacks the mode."""

    threshold: TimeThreshold
    mode: str
    name: str  # each check sets its own default
    source: str = "flag"

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
        limit = f"+{self.threshold.amount}"
        if self.mode not in run:
            return missing_mode(self.name, self.mode, run, "run", limit, self.source)
        if baseline is None or self.mode not in baseline:
            return missing_mode(self.name, self.mode, baseline or {}, "baseline", limit, self.source)
        return self._against(run[self.mode], baseline[self.mode], limit)

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        """The check proper, once both the run and the baseline have the mode."""
        raise NotImplementedError


# The quantiles whose own confidence bands (baseline.quantile_band) make the range of a tail check.
_BANDED_FIELDS = ("p10", "p90")


@dataclass(frozen=True)
class StepRatio:
    """FIELD(run) / FIELD(baseline) of the steady step times, with the range the noise rule judges."""

    now: float
    before: float
    ratio: float
    low: float
    high: float
    range_name: str  # where the range comes from, as printed
    note: str = ""  # why the range is wider than it should be (an old baseline without bands)


def step_ratio(cur: StepTimeSnapshot, base: StepTimeSnapshot, field_name: str) -> StepRatio | None:
    """The ratio of one statistic of the step times and its range. For the median and the mean:
    p10(run)/p90(baseline) .. p90(run)/p10(baseline), the spread of the step times. For a
    quantile (p10, p90), the spread would contain any tail shift that leaves the median alone, so
    the range is that of the quantile itself: its 90% confidence band on each side, lower(run) /
    upper(baseline) .. upper(run) / lower(baseline)."""
    now, before = getattr(cur, f"{field_name}_s"), getattr(base, f"{field_name}_s")
    if now is None or before is None or before <= 0:
        return None
    ratio = now / before
    note = ""
    if field_name in _BANDED_FIELDS:
        band_now, band_before = cur.band(field_name), base.band(field_name)
        if band_now is not None and band_before is not None and band_before[0] > 0:
            low = min(ratio, band_now[0] / band_before[1])
            high = max(ratio, band_now[1] / band_before[0])
            return StepRatio(now, before, ratio, low, high, f"{field_name} confidence bands")
        note = (
            f"the {'baseline' if band_before is None else 'run'} has no {field_name} confidence band (a baseline saved by an older "
            f"cagtool: re-save it): the range is the p10-p90 spread of the step times, which a slower tail alone rarely leaves"
        )
    low = min(ratio, (cur.p10_s or now) / (base.p90_s or before))
    high = max(ratio, (cur.p90_s or now) / (base.p10_s or before)) if (base.p10_s or before) > 0 else math.inf
    return StepRatio(now, before, ratio, low, high, "p10-p90 range", note)


def _range_text(name: str, low: float, high: float) -> str:
    return f" ({name} {_pct(100.0 * (low - 1.0))}..{_pct(100.0 * (high - 1.0))})"


@dataclass(frozen=True)
class StepTimeRegressionCheck(_TimeCheck):
    """Step time against the baseline's, by the one noise rule (`regression_verdict`): the ratio
    now / baseline of the chosen field fails only when its whole range (`step_ratio`) exceeds the
    threshold. A median or mean check with `watch_tail` also judges the p90 by the same rule and
    threshold, and warns (without failing) when the tail alone regressed beyond the noise."""

    name: str = "max-regression"
    watch_tail: bool = False

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        t = self.threshold
        cur, base = current.step_time, previous.step_time
        if cur is None or base is None:
            side = "this run" if cur is None else "the baseline"
            return unmeasurable(self.name, self.mode, f"{side} has no steady-state steps (every step compiled; run more steps)", limit, self.source)
        r = step_ratio(cur, base, t.field)
        if r is None:
            return unmeasurable(self.name, self.mode, f"no {t.field} step time to compare", limit, self.source)
        change_pct = 100.0 * (r.ratio - 1.0)
        detail = f"step time {t.field} {_fmt_s(r.now)} vs baseline {_fmt_s(r.before)}: {_pct(change_pct)}"
        samples = min(cur.count, base.count)
        allowed, improved = _bounds(t, r.before)
        verdict = regression_verdict(r.ratio, r.low, r.high, samples, allowed, improved, range_name=r.range_name)
        if verdict.outcome is Outcome.ERROR:
            return unmeasurable(
                self.name, self.mode, f"{detail} from only {samples} steady steps (this run {cur.count}, baseline {base.count}): "
                f"too few to judge a regression (run at least {MIN_STEADY_STEPS} steady steps)", limit, self.source,
            )
        message = _regression_message(f"{self.name} ({self.mode})", detail, verdict, t, _range_text(r.range_name, r.low, r.high))
        data = {
            "field": t.field, "actual_s": r.now, "baseline_s": r.before, "change_pct": change_pct,
            "ratio": r.ratio, "low": r.low, "high": r.high, "range": r.range_name, "allowed_ratio": allowed, "verdict": verdict.verdict,
            "steps": cur.count, "baseline_steps": base.count,
        }
        notes = [n for n in (verdict.note, r.note) if n]
        warnings = []
        if self.watch_tail and t.field not in _BANDED_FIELDS and verdict.outcome is not Outcome.FAIL:
            tail = self._tail(cur, base)
            if tail is not None:
                data["tail"] = tail[1]
                warnings.append(tail[0])
        outcome = verdict.outcome
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, _pct(change_pct), limit, message, self.source, notes, data, warnings)

    def _tail(self, cur: StepTimeSnapshot, base: StepTimeSnapshot) -> tuple[str, dict[str, Any]] | None:
        """(warning, data) when the p90 regressed beyond the noise by this check's threshold."""
        tail_threshold = replace(self.threshold, field="p90")
        r = step_ratio(cur, base, "p90")
        if r is None or r.note:  # no bands: a tail shift cannot be told from the spread
            return None
        allowed, improved = _bounds(tail_threshold, r.before)
        verdict = regression_verdict(r.ratio, r.low, r.high, min(cur.count, base.count), allowed, improved, range_name=r.range_name)
        if verdict.outcome is not Outcome.FAIL:
            return None
        change = _pct(100.0 * (r.ratio - 1.0))
        warning = (
            f"{self.name} ({self.mode}): slower tail: step time p90 {_fmt_s(r.now)} vs baseline {_fmt_s(r.before)}: {change} "
            f"> +{self.threshold.amount}, beyond the noise{_range_text(r.range_name, r.low, r.high)}, "
            f"while the {self.threshold.field} is not; gate the tail with --max-regression p90:{self.threshold.amount}"
        )
        return warning, {"field": "p90", "actual_s": r.now, "baseline_s": r.before, "ratio": r.ratio, "low": r.low, "high": r.high, "verdict": verdict.verdict}


# Compile time has one figure per run. Without repetitions to measure its spread, the ratio gets
# this fixed relative noise band on each side: run-to-run compile times of the same code on one
# CI runner type move by several percent (cache state, load, allocator), so a lone figure is
# never judged as exact.
COMPILE_NOISE_FLOOR = 0.10
# Baseline compile samples (`run --repeat K`, `baseline save --accumulate`) needed to use their
# measured spread instead of the fixed floor.
MIN_COMPILE_SAMPLES = 3


@dataclass(frozen=True)
class CompileTimeRegressionCheck(_TimeCheck):
    """Total compile time (Dynamo, AOT, Inductor, CA capture) against the baseline's, by the same
    rule. Its range is measured when the baseline holds at least MIN_COMPILE_SAMPLES compile times
    (min(run)/max(baseline) .. max(run)/min(baseline)), else the fixed COMPILE_NOISE_FLOOR around
    the ratio; the message names which, and the figures compared."""

    name: str = "max-compile-regression"

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        t = self.threshold
        now, before = current.compile_time_s, previous.compile_time_s
        ours, theirs = current.compile_samples, previous.compile_samples
        change_s = now - before
        change_pct = 100.0 * change_s / before if before > 0 else (0.0 if change_s == 0 else math.inf)

        def figure(value: float, samples: tuple[float, ...]) -> str:
            return f"median {_fmt_s(value)} of {len(samples)} runs" if len(samples) > 1 else _fmt_s(value)

        detail = f"total compile time {figure(now, ours)} vs baseline {figure(before, theirs)}: {_pct(change_pct)}"
        data: dict[str, Any] = {"samples": len(ours), "baseline_samples": len(theirs)}
        if before > 0:
            ratio = now / before
            allowed, improved = _bounds(t, before)
            if len(theirs) >= MIN_COMPILE_SAMPLES and min(theirs) > 0:
                low, high = min(ratio, min(ours) / max(theirs)), max(ratio, max(ours) / min(theirs))
                noise, range_name = "samples", "range"
                how = f"noise measured: {len(ours)} run vs {len(theirs)} baseline compile times"
            else:
                low, high = ratio / (1.0 + COMPILE_NOISE_FLOOR), ratio * (1.0 + COMPILE_NOISE_FLOOR)
                noise, range_name = "floor", "range"
                how = (
                    f"noise: fixed +/-{100 * COMPILE_NOISE_FLOOR:g}% floor, {len(theirs)} baseline compile time"
                    f"{'s' if len(theirs) > 1 else ''} (save it from run --repeat {MIN_COMPILE_SAMPLES} to measure it)"
                )
            spread = f" ({range_name} {_pct(100.0 * (low - 1.0))}..{_pct(100.0 * (high - 1.0))}; {how})"
            data.update(low=low, high=high, noise=noise, noise_floor=COMPILE_NOISE_FLOOR if noise == "floor" else None)
        else:  # nothing compiled before: no ratio; any compile time fails a %, or one over an absolute threshold
            fails = now > 0 and (t.unit == "%" or now > t.value)
            ratio, allowed, improved = (math.inf if fails else 1.0), 2.0, 0.5
            low = high = ratio
            spread, range_name = " (nothing compiled in the baseline: no ratio, no noise margin)", "range"
            data.update(noise="none")
        verdict = regression_verdict(ratio, low, high, MIN_STEADY_STEPS, allowed, improved, range_name=f"noise {range_name}")
        message = _regression_message(f"{self.name} ({self.mode})", detail, verdict, t, spread)
        notes = [verdict.note] if verdict.note else []
        data.update(
            actual_s=now, baseline_s=before, change_pct=change_pct if math.isfinite(change_pct) else None,
            ratio=ratio if math.isfinite(ratio) else None, allowed_ratio=allowed, verdict=verdict.verdict,
            run_samples_s=list(ours), baseline_samples_s=list(theirs),
        )
        outcome = verdict.outcome
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, _pct(change_pct), limit, message, self.source, notes, data)
