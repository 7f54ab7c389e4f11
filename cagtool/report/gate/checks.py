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
from typing import Any, Callable, Protocol

from cagtool.errors import UsageError
from cagtool.record.schema import FIRST_STEP
from cagtool.report.figures.pooled import ABOVE, BELOW, HEAVY_WAIT, INCONCLUSIVE, MIN_STEADY_STEPS, TOO_FEW_STEPS, common_steps, keeping, speedup_verdict, steady_in_every, steps_words
from cagtool.report.gate.baseline import ModeSnapshot, StepTimeSnapshot, steady_of
from cagtool.report.figures.intervals import (
    MEASURE_WORDS,
    MIN_RANK_UNITS,
    RatioInterval,
    TimingSample,
    agreeing_geometric_mean,
    bound_text,
    change_text,
    compile_sample,
    measure_of,
    method_words,
    outlier_words,
    left_out_words,
    median_of,
    ratio_basis,
    ratio_interval,
    timing_sample,
)
from cagtool.report.figures.metrics import MACHINE_NEGLIGIBLE, OWN_WAITS_SAID, PARALLEL_STEP, heavy_load_bound, load_range, waits_own

RECOMPILE_KINDS: dict[str, str] = {
    "total": "recompiles",  # CA recompiles + Dynamo recompiles
    # CA cache misses after the first capture, except the one-time .grad None -> defined warm-up
    # miss of an ordinary training loop (report.figures.metrics.CAMisses; docs/ci.md)
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
    # A timing check whose interval contains its bound: the evidence cannot tell a pass from a
    # fail. Never a pass: the gate exits with its own code (EXIT_INCONCLUSIVE).
    INCONCLUSIVE = "inconclusive"


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


def insist_on_power(result: CheckResult) -> CheckResult:
    """`--require-power`: an inconclusive timing check is an ERROR (exit 1) rather than its own
    outcome (exit 5), for teams whose CI reads any non-zero code the same way."""
    if result.outcome is not Outcome.INCONCLUSIVE:
        return result
    return replace(result, outcome=Outcome.ERROR, failed=True, message=f"{result.message} (--require-power)")


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
    # The gated mode, where this check counts another (a CA limit reads the ca mode: gate/run.py):
    # every result then says so in a note, and `gated_mode` in its data puts it in the report's header.
    gated_mode: str = ""

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
        result = self._evaluate(run, baseline)
        if not self.gated_mode or self.gated_mode == self.mode:
            return result
        why = (f"counted on mode {self.mode}, not on the gated mode {self.gated_mode}: only the ca mode captures CA graphs "
               f"({self.gated_mode}'s count is 0 by design, and would pass on a run that never measured CA)")
        return replace(result, notes=[why, *result.notes], data={**result.data, "gated_mode": self.gated_mode})

    def _evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
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
        elif delta < 0 and trained_nothing(run[self.mode]):
            outcome, message = Outcome.PASS, f"{head} < {limit} allowed ({delta}), but nothing of the job's training ran in it: not an improvement"
        elif delta < 0:
            what = "refresh the baseline" if self.limit is None else "lower the limit"
            outcome, message = Outcome.IMPROVED, f"{head} < {limit} allowed ({delta}): improved, {what}"
        else:
            outcome, message = Outcome.PASS, f"{head} = {limit} allowed"
        data = {"metric": self.metric, "actual": actual, "limit": limit, "delta": delta}
        notes = []
        one_time = max(run[self.mode].ca_cache_misses - 1, 0) - run[self.mode].ca_recompiles  # misses count the initial capture
        if self.metric in ("ca_recompiles", "recompiles") and one_time > 0:
            notes.append(
                f"not counted: {one_time} CA cache miss{'es' if one_time != 1 else ''} captured once each: AccumulateGrad's .grad "
                "None -> defined warm-up (the first backward that finds .grad defined: the next step's when gradients are kept, or "
                "the second micro-batch's under gradient accumulation), or the first graph of a step's other backward call (a GAN's "
                "generator after its discriminator); cached from then on; see cagtool recompiles --explain"
            )
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, str(actual), limit_text, message, self.source, notes, data)


@dataclass(frozen=True)
class ModeStatusCheck:
    """The mode must have run to the end: a crashed mode's counts would pass every limit."""

    mode: str
    name: str = "mode-finished"
    source: str = "run"
    launcher: bool = False  # a multi-rank mode's launcher: it trains nothing itself (its ranks do, checked apart)

    def evaluate(self, run: dict[str, ModeSnapshot], baseline: dict[str, ModeSnapshot] | None) -> CheckResult:
        if self.mode not in run:
            return missing_mode(self.name, self.mode, run, "run", "finished", self.source)
        snap = run[self.mode]
        ok = finished_cleanly(snap) and not snap.process_problems
        problems = len(snap.process_problems)
        actual = f"{snap.status}, {problems} problem{'s' if problems > 1 else ''}" if problems else snap.status
        exit_text = "" if snap.exit_code in (None, 0) else f", exit code {snap.exit_code}"
        reps = f", {snap.repetitions} repetitions" if snap.repetitions > 1 else ""
        message = f"{self.name} ({self.mode}): status {snap.status}{exit_text}, {snap.steps} steps{reps}"
        if snap.problem:
            message += f": {snap.problem}"
        if snap.process_problems:
            message += "; " + "; ".join(snap.process_problems)
        outcome = Outcome.PASS if ok else Outcome.FAIL
        if ok and not self.launcher and trained_nothing(snap):
            # Nothing of the job's training ran: every count is 0 and every limit would pass.
            outcome, ok = Outcome.ERROR, False
            message = (f"{self.name} ({self.mode}): status {snap.status}, 0 steps: nothing of the job's training ran in it (no step, "
                       "backward or compiled graph), so every count of it would pass every limit; a job that resumed at its end "
                       f"from a checkpoint an earlier mode wrote in its directory does this ({FILES_UNNAMED}; "
                       "`cagtool run --isolate-workdir` starts every mode from the directory the first found)")
        return CheckResult(
            self.name, self.mode, outcome, not ok, actual, "finished", message, self.source,
            data={"status": snap.status, "exit_code": snap.exit_code, "steps": snap.steps},
        )


# Where a mode that trained nothing started after files an earlier mode wrote: what its check says of
# them, which the gate's run (gate/run.py `_with_written_files`) replaces with their names.
FILES_UNNAMED = "cagtool compare names the files"


def trained_nothing(snap: ModeSnapshot) -> bool:
    """No step, no backward graph, no compiled graph: none of the mode's counts measured the job."""
    return snap.steps == 0 and snap.ca_graphs == 0 and snap.backward_graphs == 0 and snap.forward_graphs == 0


def finished_cleanly(snap: ModeSnapshot) -> bool:
    """Finished with exit code 0, or stopped by --max-time (a bounded run: its steps count)."""
    return (snap.status == "finished" and snap.exit_code in (None, 0)) or snap.status == "timeout"


def partial_job(snap: ModeSnapshot) -> str | None:
    """Why the mode's steps are not the whole job's (a mode that did not finish, a thread of the job
    that died, a rank or child that failed), None where they are: such steps time part of the job,
    and a timing check on them would pass or fail on what was not run."""
    if snap.status == "missing":
        return None  # no record: each check says so (_unrecorded, or no steps to time)
    if not finished_cleanly(snap):
        code = f", exit code {snap.exit_code}" if snap.exit_code not in (None, 0) else ""
        return f"mode {snap.mode} did not finish ({snap.status}{code}): its steps are not the whole job's"
    if snap.process_problems:
        more = f" (+{len(snap.process_problems) - 1} more)" if len(snap.process_problems) > 1 else ""
        return f"mode {snap.mode}'s steps are not the whole job's: {snap.process_problems[0]}{more}"
    return None


def speedup_interval(num: ModeSnapshot, den: ModeSnapshot) -> RatioInterval | None:
    """time(den)/time(num) at the medians with its confidence interval (report.figures.intervals):
    two modes of one run, their processes paired by block. None without steady-state steps on
    both sides."""
    a, b = num.step_time, den.step_time
    if a is None or b is None or a.sample is None or b.sample is None:
        return None
    return ratio_interval(b.sample, a.sample, "median", paired=True)


# A run that compiled or captured in more than this share of the steps its baseline timed is not
# judged on step time: its steady steps are other steps of the script than the baseline's.
UNLIKE_STEPS = 0.1


def on_baseline_steps(current: ModeSnapshot, previous: ModeSnapshot) -> tuple[ModeSnapshot, str, str]:
    """(this run's snapshot on the steps its baseline timed, a note saying what was left out, and
    why the two cannot be compared: "" where they can). A run's steps that compiled in the
    baseline (a fix that removed a recompile makes the baseline's heavy steps steady in the run)
    are left out of the run's figures; steps the baseline timed that compiled in the run (a new
    recompile) cannot be taken out of the baseline's figures, which keep no step: a few are
    named, more than UNLIKE_STEPS of them make the check inconclusive. As they are where the
    baseline keeps no steady steps (saved before it kept them) or the run's are not known."""
    import numpy as np

    cur, base = current.step_time, previous.step_time
    if cur is None or base is None or cur.sample is None or not cur.processes:
        return current, "", ""
    timed, mine = steady_of(base), steady_in_every(cur.processes)
    if timed is None or mine is None:
        return current, "", ""
    missing = np.setdiff1d(timed, mine).tolist()
    union = np.unique(np.concatenate([np.asarray(p.steps, dtype=np.int64) for p in cur.processes]))
    extra = np.setdiff1d(union, timed).tolist()
    # Steps the run never reached (it ran fewer steps: `--steps`, an earlier stop) are not steps it compiled in.
    end = FIRST_STEP + max(current.steps, int(union.max()) + 1 - FIRST_STEP if len(union) else 0)
    unreached = [step for step in missing if step >= end]
    missing = [step for step in missing if step < end]
    if len(unreached) > UNLIKE_STEPS * len(timed):
        return current, "", (f"this run ran {end - FIRST_STEP} steps and never reached {len(unreached)} of the {len(timed)} steps the baseline "
                             f"timed ({steps_words(unreached)}): its steady steps are other steps of the script than the baseline's; "
                             "run as many steps as the baseline did")
    if unreached:
        missing_note = f"{len(unreached)} of the baseline's steady steps past this run's last ({steps_words(unreached)})"
    else:
        missing_note = ""
    if len(missing) > UNLIKE_STEPS * len(timed):
        return current, "", (f"this run compiled or captured in {len(missing)} of the {len(timed)} steps the baseline timed "
                             f"({steps_words(missing)}): its steady steps are other steps of the script than the baseline's "
                             "(--max-recompiles counts the recompiles)")
    note = f"{len(missing)} of the baseline's steady steps compiled in this run ({steps_words(missing)})" if missing else ""
    note = "; ".join(n for n in (note, missing_note) if n)
    if not extra:
        return current, note, ""
    kept = tuple(keeping(p, timed) for p in cur.processes)
    sample = timing_sample(kept, cur.sample.clock)
    if sample is None or sample.repetitions < cur.sample.repetitions:
        return current, "", "none of this run's steady steps (in some process) is one the baseline timed"
    left = f"on the steps the baseline timed: this run's {steps_words(extra)} left out (they compiled in the baseline)"
    restricted = replace(current, step_time=replace(cur, sample=sample, count=sample.count, processes=kept))
    return restricted, f"{left}; {note}" if note else left, ""


def on_common_snapshots(num: ModeSnapshot, den: ModeSnapshot) -> tuple[ModeSnapshot, ModeSnapshot, tuple[int, ...]]:
    """Two modes of one run with their step-time samples on the steps steady in both
    (report.figures.pooled.CommonSteps), and the steps left out; as they are where the steps
    cannot be paired (a snapshot without its processes' steps) or none is left out."""
    a, b = num.step_time, den.step_time
    found = common_steps(a.processes, b.processes) if a is not None and b is not None else None
    if found is None or not found.left_out or a is None or b is None or a.sample is None or b.sample is None:
        return num, den, ()
    first, second = found.sample(0, a.sample.clock), found.sample(1, b.sample.clock)
    if first is None or second is None:
        return num, den, ()
    return (replace(num, step_time=replace(a, sample=first, count=first.count, processes=found.first)),
            replace(den, step_time=replace(b, sample=second, count=second.count, processes=found.second)), found.left_out)


def evidence_note(interval: RatioInterval, outcome: Outcome, distance: float, baseline: bool = False) -> str:
    """What a timing check's outcome rests on, and for an inconclusive one what would resolve it:
    `distance`, the log-distance between the ratio and the bound the interval failed to clear.
    `baseline`: the interval is this run's over a baseline's (the advice fits what each holds)."""
    words = "evidence: " + method_words(interval)
    if outcome is Outcome.INCONCLUSIVE and interval.stretched:
        # More processes would not say which conditions the job runs under: a rerun does.
        words += "; a process set apart, not the number of processes, keeps it from a verdict: rerun"
    elif outcome is Outcome.INCONCLUSIVE:
        needed = interval.processes_needed(abs(distance)) if interval.measured else None
        if not interval.measured:
            # From an assumed noise any number of processes is a guess: measure the noise first.
            words += "; measure the run-to-run noise first: 5 processes a side (run --repeat 5, baseline save from such a run)"
        elif needed is None:
            words += "; the ratio is too close to the bound for any reasonable number of processes to resolve"
        elif interval.paired:
            words += f"; run --repeat {needed} to resolve it"
        else:
            words += f"; {_processes_advice(interval, needed, baseline)}"
    return words


def _processes_advice(interval: RatioInterval, needed: int, baseline: bool) -> str:
    """What `needed` processes a side asks of each side, given what each already holds: against a
    `baseline`, the top side is this run and the bottom the baseline, and a side that holds `needed`
    or more needs none (more on the other side alone gives an interval at least as narrow)."""
    run, base = interval.units
    if baseline and base >= needed > run:
        return (f"about {needed} processes of this run would resolve it (run --repeat {needed}; the baseline's {base} processes "
                "are enough)")
    if baseline and run >= needed > base:
        return (f"a baseline of about {needed} processes would resolve it (this run's {run} are enough): baseline save from a "
                f"run --repeat {needed}, or add runs with baseline save --accumulate")
    return f"about {needed} processes a side would resolve it (run --repeat {needed}, baseline save from such a run)"


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
        for mode in (t.numerator, t.denominator):
            if (partial := partial_job(run[mode])) is not None:
                return unmeasurable(self.name, pair, partial, limit, self.source)
        lost = left_out_words([(f"{mode} of this run", snap.step_time.sample) for mode in (t.numerator, t.denominator)
                               if (snap := run[mode]).step_time is not None and snap.step_time.sample is not None], "median")
        if lost:
            return unmeasurable(self.name, pair, lost, limit, self.source)
        numerator, denominator, left_out = on_common_snapshots(run[t.numerator], run[t.denominator])
        interval = speedup_interval(numerator, denominator)
        if interval is None:
            return unmeasurable(self.name, pair, "no steady-state steps to time in both modes (run more steps)", limit, self.source)
        mid, low, high = interval.ratio, interval.low, interval.high
        detail = f"speedup {mid:.3f}x ({_ci_name(interval)} {low:.3f}x-{high:.3f}x)"
        notes: list[str] = []
        steady = min(s.step_time.count for s in (numerator, denominator) if s.step_time)
        if left_out:
            notes.append(f"on the {steady} steps steady in both modes (left out: {steps_words(left_out)})")
        verdict = speedup_verdict(mid, low, high, steady, t.minimum)
        if verdict == TOO_FEW_STEPS:
            return unmeasurable(
                self.name, pair, f"{detail} from only {steady} steady steps: too few to judge a speedup "
                f"(compare says the same; run at least {MIN_STEADY_STEPS} steady steps)", limit, self.source,
            )
        if verdict == BELOW:
            outcome, message = Outcome.FAIL, f"{self.name} ({pair}): {detail} < {t.minimum:g}x required"
        elif verdict == INCONCLUSIVE:
            outcome, message = Outcome.INCONCLUSIVE, f"{self.name} ({pair}): {detail}: inconclusive, the interval contains {t.minimum:g}x required"
        else:
            outcome, message = Outcome.PASS, f"{self.name} ({pair}): {detail} >= {t.minimum:g}x required"
        notes.append(evidence_note(interval, outcome, math.log(mid / t.minimum)))
        data = {"speedup": mid, "low": low, "high": high, "minimum": t.minimum, "verdict": verdict,
                **_interval_data(interval, (t.denominator, t.numerator))}
        warnings: list[str] = _outlier_warnings(f"{self.name} ({pair})", interval, "median step time")
        num, den = numerator.step_time, denominator.step_time
        own_notes, (num, den) = _machines_waits(f"{self.name} ({pair})", [(t.numerator, num), (t.denominator, den)])
        notes += own_notes
        load = _load_effect(den.cpu_wait if den else None, num.cpu_wait if num else None, t.denominator, t.numerator,
                            measure=interval.measure, shown=(_shown(den), _shown(num)))
        corrected: list[Outcome] = []
        if load is not None:
            factor, words = load  # the speedup made this much larger by the waiting alone
            data["load_factor"] = factor
            corrected = [_SPEEDUP_OUTCOME.get(speedup_verdict(mid / f, low / f, high / f, steady, t.minimum), Outcome.PASS)
                         for f in load_range(factor, interval.measure)]
        # A FAIL rests on the numerator's steps being slow, a clear PASS on the denominator's.
        rests_on = {Outcome.FAIL: [(t.numerator, num)], Outcome.PASS: [(t.denominator, den)]}.get(outcome, [(t.numerator, num), (t.denominator, den)])
        # --repeat 5 shuffles the modes' blocks, so a load that came and went weighs on both: advised
        # only to a run that has fewer blocks (more of them would not narrow a load's effect).
        blocks = min((s.sample.repetitions for s in (num, den) if s is not None and s.sample is not None), default=1)
        rerun = "rerun on a quieter runner" + (", or with --repeat 5" if blocks < 5 else "")
        def slowed(side: str, f: float) -> Outcome:
            g = 1 / f if side == t.denominator else f  # the speedup is the denominator's time over the numerator's
            return _SPEEDUP_OUTCOME.get(speedup_verdict(mid * g, low * g, high * g, steady, t.minimum), Outcome.PASS)

        decided = _load_decides(f"{self.name} ({pair})", outcome, load, corrected, rests_on, rerun, slowed, interval.measure)
        notes += decided.notes
        warnings += decided.warnings
        if decided.outcome is not outcome:
            outcome, message = decided.outcome, f"{self.name} ({pair}): {detail}: inconclusive, {decided.why}"
            data["verdict"], data["load_decided"] = INCONCLUSIVE, verdict
        return CheckResult(self.name, pair, outcome, outcome is Outcome.FAIL, f"{mid:.3f}x", limit, message, self.source, notes, data, warnings)


# A speedup's verdict as the gate's outcome.
_SPEEDUP_OUTCOME = {BELOW: Outcome.FAIL, INCONCLUSIVE: Outcome.INCONCLUSIVE, ABOVE: Outcome.PASS}


@dataclass(frozen=True)
class LoadDecision:
    """What the machine's load leaves of a timing check's outcome (`_load_decides`)."""

    outcome: Outcome
    why: str  # for an outcome the load made inconclusive: why, in a few words; "" otherwise
    notes: list[str]
    warnings: list[str]


def _load_decides(check: str, outcome: Outcome, load: tuple[float, str] | None, corrected: list[Outcome],
                  rests_on: list[tuple[str, StepTimeSnapshot | _Waited | None]], rerun: str,
                  slowed: Callable[[str, float], Outcome], measure: str, plain: Outcome | None = None) -> LoadDecision:
    """The load's say on `outcome`, the verdict on the figures. `corrected`: the verdict on the
    interval corrected by each end of the load's range (load_range); `plain`: that interval's own
    verdict, uncorrected, where `outcome` rests on more than it (a CPU-time pass that wall time
    cannot confirm): a correction turns the outcome only where it turns `plain` (a correction of 1,
    an end of CPU time's range, turns nothing); None: `outcome` is it; `rests_on`: the sides the
    outcome rests on (this run for a FAIL, the baseline for a PASS; both for an inconclusive one);
    `slowed(side, f)`: the outcome had `side`'s figures been f times what the code alone gave.
    A FAIL or a PASS that the correction would turn, or that rests on a side whose median step
    waited for a CPU HEAVY_WAIT of its runnable time or more and would turn had the load slowed
    that side as much as it may have (heavy_load_bound on `measure`: beyond HEAVY_WAIT the wait
    no longer tells what the load did, docs/ci.md), cannot tell the code's effect from the
    machine's: INCONCLUSIVE, never a pass and never a fail, with a warning that says why. A load
    that changes nothing is a note."""
    notes: list[str] = []
    warnings: list[str] = []
    reasons: list[str] = []
    settled = outcome in (Outcome.FAIL, Outcome.PASS, Outcome.IMPROVED)
    if load is not None:
        words = load[1]
        own = outcome if plain is None else plain
        other = next((c for c in corrected if _side(c) != _side(own) and _side(c) != _side(outcome)), None)
        if other is None:
            notes.append(words)
        else:
            warnings.append(f"{check}: {words}, and without that difference the check would {_WOULD[_side(other)]}: {rerun}")
            reasons.append("corrected for the load, the outcome would turn")
    for side, snap in rests_on:
        if snap is None or snap.runnable_wait is None or snap.runnable_wait < HEAVY_WAIT:
            continue
        runnable = snap.runnable if snap.runnable is not None else 1.0
        parallel = getattr(snap, "parallel", None)  # a step's (StepTimeSnapshot); a compile's: none
        bound = heavy_load_bound(snap.runnable_wait, measure, runnable, parallel)
        work = getattr(snap, "work", "step")  # what the check times: a step, or a compile
        included = ", its CPU time included" if work == "step" else ""
        part = f" (runnable {runnable:.0%} of its time: the load lengthens only that part)" if runnable < 0.95 else ""
        if parallel is not None and parallel >= PARALLEL_STEP:
            part += f" (its threads ran in parallel, {parallel:.1f}x its loop thread's CPU: each region waits for its slowest thread)"
        waited = (f"{check}: load: {side}'s {getattr(snap, 'span', 'median step')} waited for a CPU {snap.runnable_wait:.0%} of its "
                  f"runnable time{part}: beyond {HEAVY_WAIT:.0%}, the load can slow a {work} far more than the wait alone says{included} "
                  f"(a {work} that waits that long loses its caches to the neighbours), up to {bound_text(bound)} on "
                  f"{'CPU time' if measure == 'cpu' else 'wall time'}")
        if settled and _side(slowed(side, bound)) == _side(outcome):
            notes.append(f"{waited}, and the outcome holds even so")  # the load at its most would not turn it
            continue
        warnings.append(f"{waited}, so the machine's load, not the code, may have decided the outcome: rerun on a quieter runner")
        if settled:
            reasons.append(f"it rests on steps that waited for a CPU {HEAVY_WAIT:.0%} of their runnable time or more" if work == "step" else
                           f"it rests on a {work} that waited for a CPU {HEAVY_WAIT:.0%} of its runnable time or more")
    if settled and reasons:
        return LoadDecision(Outcome.INCONCLUSIVE, "the machine's load, not the code, may have decided it: " + " and ".join(reasons), notes, warnings)
    return LoadDecision(outcome, "", notes, warnings)


@dataclass(frozen=True)
class _Waited:
    """A side's share of waiting for a CPU where what a check compares was measured."""

    cpu_wait: float | None
    span: str = "compile (its process before its steady steps)"  # where the wait was read
    work: str = "compile"  # what the check times, which the load slows
    runnable: float | None = None  # a compile is CPU work: runnable all its time

    @property
    def runnable_wait(self) -> float | None:
        return self.cpu_wait


def _regression_load(check: str, verdict: RegressionVerdict, cur: StepTimeSnapshot | _Waited | None, base: StepTimeSnapshot | _Waited | None,
                     interval: tuple[float, float, float], samples: int, bounds: tuple[float, float], data: dict[str, Any],
                     measure: str, timed: str = "steps", where: str = "",
                     machine: tuple[float, str] | None = None) -> tuple[RegressionVerdict, LoadDecision]:
    """A regression check's verdict (now / baseline) with the machine's load taken into account
    (_load_decides), from each side's wait, on `measure` (load_range: waiting does not lengthen a
    step's CPU time, but a step that waits loses its caches to the neighbours, so its CPU time
    grows too, less: docs/ci.md). A FAIL rests on this run's steps being slow, a PASS on the baseline's not having
    been. `data` gets `load_factor`, and `load_decided` with the figures' verdict where the load
    turned it. `timed`, `where`: what the figure times and where the waits were read, for the words
    (_load_effect)."""
    ratio, low, high = interval
    allowed, improved = bounds
    own_notes, (cur, base) = _machines_waits(check, [("this run", cur), ("the baseline", base)])
    load = _load_effect(cur.cpu_wait if cur else None, base.cpu_wait if base else None, "this run", "the baseline", timed, where, measure,
                        shown=(_shown(cur), _shown(base)))
    corrected: list[Outcome] = []
    if load is not None:
        data["load_factor"] = load[0]  # this run made this much slower than the baseline by waiting alone
        corrected = [regression_verdict(ratio / f, low / f, high / f, samples, allowed, improved).outcome for f in load_range(load[0], measure)]
    rests_on = {Outcome.FAIL: [("this run", cur)], Outcome.PASS: [("the baseline", base)], Outcome.IMPROVED: [("the baseline", base)]}.get(
        verdict.outcome, [("this run", cur), ("the baseline", base)])
    def slowed(side: str, f: float) -> Outcome:
        g = 1 / f if side == "this run" else f
        return regression_verdict(ratio * g, low * g, high * g, samples, allowed, improved).outcome

    plain = regression_verdict(ratio, low, high, samples, allowed, improved).outcome
    decided = _load_decides(check, verdict.outcome, load, corrected, rests_on, "rerun on a quieter runner", slowed, measure, plain)
    if machine is not None:
        decided = _machine_decides(check, verdict.outcome, decided, machine, slowed)
        data["machine_factor"] = machine[0]
    if decided.outcome is not verdict.outcome:
        data["verdict"], data["load_decided"] = INCONCLUSIVE, verdict.verdict
        verdict = RegressionVerdict(decided.outcome, INCONCLUSIVE)
    if own_notes:
        decided = replace(decided, notes=own_notes + decided.notes)
    return verdict, decided


def _own_waits(snap: StepTimeSnapshot | _Waited | None) -> bool:
    """Whether a side's steps waited for a CPU (OWN_WAITS_SAID of their runnable time or more) with
    nothing else running on its CPUs (metrics.waits_own): its own threads and processes competed."""
    return (snap is not None and waits_own(getattr(snap, "others_cores", None))
            and snap.runnable_wait is not None and snap.runnable_wait >= OWN_WAITS_SAID)


def _machines_waits(check: str, sides: list[tuple[str, Any]]) -> tuple[list[str], list[Any]]:
    """Each side's waits as the machine's load made them: none where they were its own threads'
    (_own_waits), with a note for each such side; the sides in the order given."""
    notes = [f"{check}: {side}'s steps waited for a CPU {snap.runnable_wait:.0%} of their runnable time while nothing else ran on "
             f"its CPUs ({snap.others_cores:.2f} cores on average): the job's own threads and processes outnumbered them, which a "
             "quieter runner does not change: judged as measured, not as the machine's load" for side, snap in sides if _own_waits(snap)]
    return notes, [replace(snap, cpu_wait=0.0) if _own_waits(snap) else snap for _, snap in sides]




def machine_effect(current: ModeSnapshot, previous: ModeSnapshot) -> tuple[float, str] | None:
    """(factor, words): how much slower this run's machine ran the reference loop than the
    baseline's (capture/versions.py reference_loop_s: the CPU's model, clock, stolen time); None
    where either was not timed or the difference is under 25%."""
    now, before = current.reference_loop_s, previous.reference_loop_s
    if now is None or before is None:
        return None
    factor = now / before
    if abs(math.log(factor)) < MACHINE_NEGLIGIBLE:
        return None
    how = f"{factor:.2f}x slower" if factor > 1 else f"{1 / factor:.2f}x faster"
    return factor, (f"machine: this run's machine ran cagtool's reference loop {how} than the baseline's "
                    f"({now * 1e3:.2f} ms against {before * 1e3:.2f} ms of CPU): another CPU, or one clocked down or shared, "
                    "which alone can make the job's time differ by as much")


def _machine_decides(check: str, outcome: Outcome, decided: LoadDecision, machine: tuple[float, str],
                     slowed: Callable[[str, float], Outcome]) -> LoadDecision:
    """`decided` with the two machines' speed difference weighed: a FAIL or PASS that would turn had
    this run's machine been as fast as the baseline's is INCONCLUSIVE, with a warning; else a note."""
    factor, words = machine
    settled = outcome in (Outcome.FAIL, Outcome.PASS, Outcome.IMPROVED)
    other = slowed("this run", factor)  # this run's figures as its machine made them: `factor` times the code's
    if not settled or _side(other) == _side(outcome):
        return replace(decided, notes=[*decided.notes, words])
    warning = f"{check}: {words}, and on machines as fast the check would {_WOULD[_side(other)]}: gate against a baseline saved on this kind of runner"
    why = "corrected for the machine's speed, the outcome would turn"
    reason = decided.why + " and " + why if decided.why else "the machine, not the code, may have decided it: " + why
    return LoadDecision(Outcome.INCONCLUSIVE, reason, decided.notes, [*decided.warnings, warning])


def _side(outcome: Outcome) -> str:
    return {Outcome.FAIL: "fail", Outcome.PASS: "pass", Outcome.IMPROVED: "pass"}.get(outcome, "inconclusive")


_WOULD = {"fail": "FAIL", "pass": "pass", "inconclusive": "be inconclusive"}


def _shown(snap: StepTimeSnapshot | _Waited | None) -> tuple[float, str] | None:
    """A side's wait for the words: the share of its runnable time, and where it also slept or
    waited for a device, words for the share of its time it was runnable."""
    if snap is None or snap.runnable_wait is None:
        return None
    return snap.runnable_wait, (f" (runnable {snap.runnable:.0%} of its time)" if snap.runnable is not None and snap.runnable < 0.95 else "")


def _load_effect(wait: float | None, other_wait: float | None, side: str, other_side: str, timed: str = "steps",
                 where: str = "", measure: str = "wall", shown: tuple[tuple[float, str] | None, tuple[float, str] | None] | None = None) -> tuple[float, str] | None:
    """(factor, words): how much slower `side`'s steps are than `other_side`'s from waiting for a
    CPU alone (a CPU-bound step that waits a share w of its runnable time takes 1 / (1 - w) as
    long: report.figures.metrics.CpuWait), the model's factor, a lower bound (load_range gives
    what a torch step measured); None when either was not measured or the difference is under 2%. The
    waits are shares of the wall time (a step that also sleeps waited less of it than of its
    runnable time); `shown`: each side's share of runnable time in words (_shown). `timed`: what the
    figure times ("steps", "compile"); `where`: where the waits were read, when not in those."""
    if wait is None or other_wait is None:
        return None
    factor = max(1.0 - other_wait, 1e-3) / max(1.0 - wait, 1e-3)
    if abs(math.log(factor)) < math.log(1.02):
        return None
    slower, by = (side, factor) if factor > 1 else (other_side, 1 / factor)
    low, high = load_range(by, measure)
    span = f"up to {high:.2f}x slower in CPU time" if measure == "cpu" else f"{low:.2f}-{high:.2f}x slower"
    (wait, part), (other_wait, other_part) = (wait, ""), (other_wait, "")
    if shown is not None and shown[0] is not None and shown[1] is not None:
        (wait, part), (other_wait, other_part) = shown  # the words give the share of runnable time; the factor is of wall time
    return factor, (f"load: {side} waited for a CPU {wait:.0%} of its runnable time{part}, {other_side} {other_wait:.0%}{other_part}{where}, "
                    f"which alone can make {slower}'s {timed} {span}")


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
        for snap in (run[t.numerator], below):
            if (partial := partial_job(snap)) is not None:
                return unmeasurable(self.name, label, partial, limit, self.source)
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
    """A ratio (now / baseline) judged against the allowed regression by the one rule."""

    outcome: Outcome
    verdict: str  # the rule's word against the allowed bound: above | inconclusive | below | too few steady steps


def regression_verdict(
    ratio: float, low: float, high: float, samples: int, allowed: float, improved: float, min_samples: int = MIN_STEADY_STEPS,
) -> RegressionVerdict:
    """The rule of `compare` and `--min-speedup` (report.compare.analysis.speedup_verdict) applied
    to a time against its baseline: a FAIL when the whole interval [low, high] of the ratio lies
    above `allowed` (1 + the threshold), a PASS when it lies wholly below it (IMPROVED when wholly
    below `improved`, 1 - the threshold), INCONCLUSIVE when it contains `allowed`: the evidence
    cannot tell, and that is never a pass. An ERROR with too few steady steps."""
    up = speedup_verdict(ratio, low, high, samples, allowed, min_samples=min_samples)
    if up == TOO_FEW_STEPS:
        return RegressionVerdict(Outcome.ERROR, up)
    if up == ABOVE:
        return RegressionVerdict(Outcome.FAIL, up)
    if up == INCONCLUSIVE:
        return RegressionVerdict(Outcome.INCONCLUSIVE, up)
    if high < improved:
        return RegressionVerdict(Outcome.IMPROVED, up)
    return RegressionVerdict(Outcome.PASS, up)


def step_time_verdict(cur: TimingSample, base: TimingSample, field_name: str, samples: int, allowed: float, improved: float,
                      own_waits: bool = False) -> tuple[RegressionVerdict, RatioInterval, RatioInterval | None] | None:
    """The regression rule on step times (now / baseline): the verdict on the measure the sides
    are compared on (CPU time where both spent their steps on the CPU, else wall time). A PASS on
    CPU time also needs the wall time's interval within the threshold: CPU time cannot see a step's
    time off the CPU (a wait added to it), so a pass the wall time cannot confirm is INCONCLUSIVE.
    Where the CPU time's verdict is not a FAIL and the wall time's interval lies beyond the
    threshold, the verdict is on the wall time less each step's wait for a CPU (the "unwaited"
    measure, the mean's only): a FAIL there is the job's own time off the CPU, not the machine's
    load; where `own_waits` (this run's waits were its own: nothing else ran on its CPUs), on the
    wall time itself. Returns (verdict, the interval it rests on, the
    wall interval when it was consulted too); None without a figure on both sides."""
    r = ratio_interval(cur, base, field_name)
    if r is None:
        return None
    verdict = regression_verdict(r.ratio, r.low, r.high, samples, allowed, improved)
    if r.measure != "cpu" or verdict.outcome in (Outcome.FAIL, Outcome.ERROR):
        return verdict, r, None
    wall = ratio_interval(cur, base, field_name, measure="wall")
    if wall is None:
        return verdict, r, None
    on_wall = regression_verdict(wall.ratio, wall.low, wall.high, samples, allowed, improved)
    if on_wall.outcome is Outcome.FAIL:
        # Wall time beyond the threshold past its noise, CPU time not (within it, or unresolved):
        # the steps spent time off the CPU. Less each step's wait for a CPU (the machine's run
        # queue), what is left is the job's own (a sleep, I/O, a lock): where that too lies beyond
        # the threshold, the job is slower.
        if own_waits:
            return RegressionVerdict(Outcome.FAIL, ABOVE), wall, wall
        unwaited = ratio_interval(cur, base, field_name, measure="unwaited")
        if unwaited is not None and regression_verdict(unwaited.ratio, unwaited.low, unwaited.high, samples, allowed,
                                                       improved).outcome is Outcome.FAIL:
            return RegressionVerdict(Outcome.FAIL, ABOVE), unwaited, wall
    if verdict.outcome is Outcome.INCONCLUSIVE or on_wall.outcome in (Outcome.PASS, Outcome.IMPROVED):
        return verdict, r, (wall if verdict.outcome is not Outcome.INCONCLUSIVE else None)
    return RegressionVerdict(Outcome.INCONCLUSIVE, INCONCLUSIVE), r, wall


def _regression_message(head: str, detail: str, verdict: RegressionVerdict, threshold: TimeThreshold, spread: str) -> str:
    if verdict.outcome is Outcome.FAIL:
        return f"{head}: {detail} > +{threshold.amount}{spread}"
    if verdict.outcome is Outcome.IMPROVED:
        return f"{head}: {detail} < -{threshold.amount}{spread}: improved, refresh the baseline"
    if verdict.outcome is Outcome.INCONCLUSIVE:
        return f"{head}: {detail}: inconclusive, the interval{spread} contains +{threshold.amount}"
    return f"{head}: {detail}: no regression beyond +{threshold.amount}{spread}"


def _bounds(threshold: TimeThreshold, before: float) -> tuple[float, float]:
    """(allowed, improved) bounds on the ratio now / before for a threshold in % or seconds."""
    delta = threshold.value / 100.0 if threshold.unit == "%" else threshold.value / before
    return 1.0 + delta, 1.0 - delta


def figures_and_ratio(figure: str, now_s: float, before_s: float, counts: tuple[int, int], interval: RatioInterval,
                      basis: tuple[float, float] | None, of: str) -> str:
    """A timing check's figures against the baseline's, with their change, and the ratio the
    verdict is on where it reads otherwise. The printed figures are each side's median of its
    processes' figures (what `baseline show` prints); the verdict's ratio is the interval's
    estimate from every process's figure (the ratio of the geometric means, or the median of the
    ratios of every pair), which with more than one process a side need not agree with them, in
    size or even in sign. Each change is printed beside the figures it is of, so no line shows a
    change its own figures contradict. `figure`: "CPU time per step median"; `of`: one process's
    figure ("median", "compile time")."""
    now, before = counts
    change = change_text(now_s / before_s)
    if now == before == 1:  # the ratio of the two figures, which are each side's one process's
        return f"{figure} {_fmt_s(now_s)} vs baseline {_fmt_s(before_s)}: {change_text(interval.ratio)}"
    said = f"{figure} {_fmt_s(now_s)} vs baseline {_fmt_s(before_s)} (the medians of {now} and {before} processes: {change})"
    return said + judged_on(change, interval, basis, of)


def judged_on(change: str, interval: RatioInterval, basis: tuple[float, float] | None, of: str) -> str:
    """"; judged on <what the verdict's ratio is of>: <its change>", for a line whose figures read
    `change`; "" where the ratio reads the same (figures_and_ratio)."""
    if change_text(interval.ratio) == change:
        return ""
    if basis is not None:
        whose = "the processes that agree" if interval.outliers else f"every process's {of}"
        how = f"the ratio of the geometric means of {whose}, {_fmt_s(basis[0])} vs {_fmt_s(basis[1])}"
    else:
        a, b = interval.units
        how = f"the median of the {a * b} ratios of a process of this run to one of the baseline's"
    return f"; judged on {how}: {change_text(interval.ratio)}"


def _ratio_fields(basis: tuple[float, float] | None) -> dict[str, Any]:
    """--format json: what a timing check's `ratio` is of (figures_and_ratio): "geometric_means",
    with the two (`ratio_actual_s` / `ratio_baseline_s` is `ratio`), or "pairwise_median" (the
    median of the ratios of every pair of processes, and of no two figures: both null)."""
    if basis is None:
        return {"ratio_of": "pairwise_median", "ratio_actual_s": None, "ratio_baseline_s": None}
    return {"ratio_of": "geometric_means", "ratio_actual_s": basis[0], "ratio_baseline_s": basis[1]}


def _ci_name(interval: RatioInterval) -> str:
    return f"{100 * interval.confidence:g}% CI"


def _range_text(interval: RatioInterval) -> str:
    return f" ({_ci_name(interval)} {change_text(interval.low)}..{change_text(interval.high)})"


def _interval_data(interval: RatioInterval, sides: tuple[str, str] = ("run", "baseline")) -> dict[str, Any]:
    """The interval's evidence for --format json: what it rests on, the A/A noise, and the processes
    set apart from their side (`sides`: the names of the ratio's top and bottom)."""
    return {
        "measure": interval.measure, "method": interval.method, "units": list(interval.units), "unit": interval.unit,
        "confidence": interval.confidence, "noise_measured": interval.measured, "run_to_run_noise": interval.spread,
        "outliers": [{"side": sides[0] if o.side == "top" else sides[1] if o.side == "bottom" else o.side, "process": o.process,
                      "times_others": o.factor}
                     for o in interval.outliers],
    }


def _outlier_warnings(check: str, interval: RatioInterval, figure: str) -> list[str]:
    """A warning per process set apart from its side (report.figures.intervals.OUTLIER_NOISES): it
    ran under other conditions than the others, and no count of processes tells which conditions
    the job's figure is; the check is on the agreeing processes, stretched to its reading."""
    found = []
    for o, words in zip(interval.outliers, outlier_words(interval, "this run", "the baseline", figure)):
        rerun = "save the baseline again from a run on a quieter runner" if o.side == "bottom" else "rerun on a quieter runner"
        kept = ("the interval is theirs stretched to its reading, and only a verdict that holds on both stands" if interval.stretched
                else "the rank interval reaches its reading at most")
        found.append(f"{check}: {words}: it ran under other conditions than they did (a busy machine, another input), so {kept}: {rerun}")
    return found


def _machine_too_noisy(interval: RatioInterval, allowed: float) -> str:
    """For an inconclusive check: when the run-to-run noise alone spans more than the threshold,
    the machine, not the amount of evidence at hand, is what keeps the check from a verdict."""
    if interval.spread <= allowed - 1.0:
        return ""
    what = "measured" if interval.measured else "assumed (not measured)"
    if interval.noise_factor > 1.0:  # a t interval: the few processes' spread, taken at its upper bound
        return (f"this machine's run-to-run noise, measured +/-{100 * min(interval.seen_spread, 1.0):.0f}% between two processes (A/A) "
                f"and taken at up to +/-{100 * min(interval.spread, 1.0):.0f}% (the most it may be, measured on so few processes), is "
                f"wider than the +{100 * (allowed - 1.0):g}% threshold: gate on a quieter runner, with more processes a side, "
                "or with a wider threshold")
    return (f"this machine's run-to-run noise, {what}, is +/-{100 * min(interval.spread, 1.0):.0f}% between two processes (A/A), "
            f"wider than the +{100 * (allowed - 1.0):g}% threshold: gate on a quieter runner, with more processes a side, "
            "or with a wider threshold")


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
        for side, snap in (("this run", run[self.mode]), ("the baseline", baseline[self.mode])):
            if (partial := partial_job(snap)) is not None:
                return unmeasurable(self.name, self.mode, f"in {side}, {partial}", limit, self.source)
        return self._against(run[self.mode], baseline[self.mode], limit)

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        """The check proper, once both the run and the baseline have the mode."""
        raise NotImplementedError


def side_figure(sample: TimingSample, measure: str, field_name: str) -> tuple[float, int] | None:
    """The figure a step-time check prints for one side, and what a threshold in seconds is a share
    of: the median of its processes' `field_name` on `measure` (each process's figure of its own
    steady steps: never the steps of every process pooled), and how many processes; None without one."""
    figures = sample.figures(measure, field_name)
    return (median_of(figures), len(figures)) if figures else None


@dataclass(frozen=True)
class BaselineFigure:
    """What `--max-regression` compares a run against, read from the baseline alone (`baseline show`)."""

    measure: str  # "cpu" | "wall" | "device", as the gate chooses it (measure_of)
    seconds: float
    processes: int
    # Where `measure` is CPU time: the same figure in the baseline's clock's time, which the gate
    # compares on instead against a run whose steps are not CPU-bound (or None).
    otherwise: tuple[str, float] | None = None
    # The geometric mean of the processes' figures (less any set apart): what the check's ratio is
    # of against a run of fewer than MIN_RANK_UNITS processes, or any run when the baseline has
    # fewer (ratio_basis); a run of as many is judged on the median of every pair's ratio.
    geometric_mean: float | None = None


def baseline_figure(sample: TimingSample, field_name: str = "median") -> BaselineFigure | None:
    """The baseline's step-time figure a `max-regression` check compares with, by the gate's own
    rules: the measure `measure_of` chooses against a run whose steps are like the baseline's (CPU
    time where the baseline's are CPU-bound on one thread, else its clock's), the `side_figure` on
    it; with the clock's figure beside a CPU one, for a run whose steps are not CPU-bound."""
    measure = measure_of(sample, sample)
    found = side_figure(sample, measure, field_name)
    if found is None:
        return None
    other = side_figure(sample, sample.clock, field_name) if measure == "cpu" else None
    return BaselineFigure(measure, found[0], found[1], (sample.clock, other[0]) if other is not None else None,
                          agreeing_geometric_mean(sample, measure, field_name))


def baseline_figure_words(step: StepTimeSnapshot | None) -> str:
    """`baseline show`'s line for a mode: the figure `gate --max-regression` compares a run's median
    step time against (`baseline_figure`), formatted as the check formats it, so the two read alike."""
    head = "gate --max-regression compares against:"
    if step is None:
        return f"{head} nothing: no steady-state steps"
    if step.sample is None or step.sample.unit != "process":
        return f"{head} nothing: saved by an older cagtool, its step times are not one figure per process (re-save it: cagtool baseline save RUN)"
    figure = baseline_figure(step.sample)
    if figure is None:
        return f"{head} nothing: no process has a median step time above 0 s"
    processes = "1 process's median" if figure.processes == 1 else f"the median of {figure.processes} processes' medians"
    said = f"{head} {MEASURE_WORDS[figure.measure]} median {_fmt_s(figure.seconds)} ({processes}"
    if figure.geometric_mean is not None and _fmt_s(figure.geometric_mean) != _fmt_s(figure.seconds):
        # The gate prints this median and its change, and beside it the ratio its verdict is on,
        # of this geometric mean (figures_and_ratio): said here, so the gate's second figure is in the file's words too.
        against = f" against a run of fewer than {MIN_RANK_UNITS} processes" if figure.processes >= MIN_RANK_UNITS else ""
        said += f"; judged on their geometric mean {_fmt_s(figure.geometric_mean)}{against}"
    if figure.otherwise is not None:
        clock, seconds = figure.otherwise
        said += f"; {MEASURE_WORDS[clock]} {_fmt_s(seconds)} against a run whose steps are not CPU-bound"
    return said + ")"


@dataclass(frozen=True)
class StepTimeRegressionCheck(_TimeCheck):
    """Step time against the baseline's, by the one rule (`regression_verdict`): the ratio now /
    baseline of the chosen statistic, each process one unit (report.figures.intervals), fails
    only when its whole interval exceeds the threshold and passes only when its whole interval
    is within it; otherwise it is inconclusive. A median or mean check with `watch_tail` also
    judges the p90 by the same rule and threshold, and warns (without failing) when the tail
    alone regressed."""

    name: str = "max-regression"
    watch_tail: bool = False

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        t = self.threshold
        cur, base = current.step_time, previous.step_time
        if cur is None or base is None:
            side = "this run" if cur is None else "the baseline"
            return unmeasurable(self.name, self.mode, f"{side} has no steady-state steps (every step compiled; run more steps)", limit, self.source)
        if base.sample is None or base.sample.unit != "process":
            return unmeasurable(
                self.name, self.mode, "the baseline was saved by an older cagtool, whose step times are not one figure per process: "
                "re-save it (cagtool baseline save RUN)", limit, self.source,
            )
        if cur.sample is None:
            return unmeasurable(self.name, self.mode, "this run has no step times to build an interval from", limit, self.source)
        lost = left_out_words([("this run", cur.sample), ("the baseline", base.sample)], t.field)
        if lost:
            return unmeasurable(self.name, self.mode, lost, limit, self.source)
        if min(cur.count, base.count) < MIN_STEADY_STEPS:
            return unmeasurable(self.name, self.mode, f"only {min(cur.count, base.count)} steady steps (this run {cur.count}, baseline "
                                f"{base.count}): too few to judge a regression (run at least {MIN_STEADY_STEPS} steady steps)", limit, self.source)
        current, steps_note, unlike = on_baseline_steps(current, previous)
        if unlike:
            return CheckResult(self.name, self.mode, Outcome.INCONCLUSIVE, False, "-", limit,
                               f"{self.name} ({self.mode}): inconclusive: {unlike}", self.source)
        cur = current.step_time
        assert cur is not None and cur.sample is not None
        samples = min(cur.count, base.count)
        # A threshold in seconds is a share of the baseline's figure on the measure the verdict is on
        # (CPU time where both sides are CPU-bound, else wall time).
        on = side_figure(base.sample, measure_of(cur.sample, base.sample), t.field)
        allowed, improved = _bounds(t, on[0] if on is not None else base.sample.values[t.field])
        judged = step_time_verdict(cur.sample, base.sample, t.field, samples, allowed, improved, own_waits=_own_waits(cur))
        if judged is None:
            return unmeasurable(self.name, self.mode, f"no {t.field} step time to compare", limit, self.source)
        verdict, r, wall = judged
        ours, theirs = side_figure(cur.sample, r.measure, t.field), side_figure(base.sample, r.measure, t.field)
        assert ours is not None and theirs is not None  # the interval was made of them
        (now_s, now), (before_s, before) = ours, theirs
        what = {"cpu": "CPU time per step", "unwaited": "step time less its waits for a CPU"}.get(r.measure, "step time")
        basis = ratio_basis(r, cur.sample, base.sample, t.field)
        detail = figures_and_ratio(f"{what} {t.field}", now_s, before_s, (now, before), r, basis, t.field)
        if verdict.outcome is Outcome.ERROR:
            return unmeasurable(
                self.name, self.mode, f"{detail} from only {samples} steady steps (this run {cur.count}, baseline {base.count}): "
                f"too few to judge a regression (run at least {MIN_STEADY_STEPS} steady steps)", limit, self.source,
            )
        message = _regression_message(f"{self.name} ({self.mode})", detail, verdict, t, _range_text(r))
        notes = [evidence_note(r, verdict.outcome, math.log(r.ratio / allowed), baseline=True)] + ([steps_note] if steps_note else [])
        if wall is not None and verdict.outcome is Outcome.INCONCLUSIVE:
            # The CPU interval cleared the bound; the wall time's did not: say that, not that the
            # CPU interval contains the bound, and what would resolve the wall time.
            message = (f"{self.name} ({self.mode}): {detail}: inconclusive, CPU time per step shows no regression beyond "
                       f"+{t.amount}{_range_text(r)}, but wall time, which also sees a step's time off the CPU, cannot confirm it: "
                       f"wall time {change_text(wall.ratio)}{_range_text(wall)}")
            # Both intervals' evidence, each naming its measure: the CPU time's, which the Actual
            # figure is, and the wall time's, which keeps it from a verdict (what would resolve it).
            notes = [evidence_note(r, Outcome.PASS, 0.0), evidence_note(wall, verdict.outcome, math.log(wall.ratio / allowed), baseline=True)]
            if wall.low > allowed:
                # Both intervals clear the bound, on either side of it: not noise that more processes
                # narrow, but time the steps spent off the CPU that the baseline's did not.
                notes[1] = ("evidence: " + method_words(wall) + "; wall time is beyond the threshold and CPU time within it, each "
                            "past its noise: the steps spent time off the CPU that the baseline's did not (the job's own waits: "
                            "a sleep, I/O, a lock, data not ready; or the machine's other load), which more processes would not "
                            "resolve: the steps' wall times (`cagtool summary`, the report's step chart) show where")
            notes += [steps_note] if steps_note else []
        if r.measure in ("unwaited", "wall") and wall is not None and verdict.outcome is Outcome.FAIL:
            # The FAIL rests on the steps' time less their waits for a CPU: say what each measure read.
            on_cpu = ratio_interval(cur.sample, base.sample, t.field)
            held = "within it" if on_cpu is not None and on_cpu.high <= allowed else "not beyond it past its noise"
            cpu_words = f"CPU time per step {change_text(on_cpu.ratio)}{_range_text(on_cpu)}, {held}; " if on_cpu is not None else ""
            still = (f"and still {change_text(r.ratio)} less each step's wait for a CPU (the machine's load)" if r.measure == "unwaited"
                     else "its waits for a CPU the job's own (nothing else ran on its CPUs)")
            notes.insert(1, (f"{cpu_words}wall time {change_text(wall.ratio)}{_range_text(wall)}, beyond it, {still}: the steps "
                             "spent time off the CPU that the baseline's did not, by the job's own doing (a sleep, I/O, a lock, data "
                             "not ready, its threads and processes outnumbering the CPUs); the steps' wall times (`cagtool summary`, "
                             "the report's step chart) show where"))
        if verdict.outcome is Outcome.INCONCLUSIVE:
            noisy = _machine_too_noisy(wall if wall is not None else r, allowed)
            if noisy:
                notes.append(noisy)
        data = {
            "field": t.field, "actual_s": now_s, "baseline_s": before_s, "change_pct": 100.0 * (now_s / before_s - 1.0),
            "ratio": r.ratio, **_ratio_fields(basis), "low": r.low, "high": r.high, "range": _ci_name(r), "allowed_ratio": allowed,
            "verdict": verdict.verdict,
            "run_figures_s": list(cur.sample.figures(r.measure, t.field)), "baseline_figures_s": list(base.sample.figures(r.measure, t.field)),
            "steps": cur.count, "baseline_steps": base.count, "processes": cur.sample.repetitions, "baseline_processes": base.sample.repetitions,
            **_interval_data(r),
        }
        # Less its waits, a step's time grows under load as its CPU time does (caches lost to the neighbours).
        verdict, decided = _regression_load(f"{self.name} ({self.mode})", verdict, cur, base, (r.ratio, r.low, r.high), samples,
                                            (allowed, improved), data, "cpu" if r.measure == "unwaited" else r.measure,
                                            machine=machine_effect(current, previous))
        notes += decided.notes
        warnings: list[str] = _outlier_warnings(f"{self.name} ({self.mode})", r, f"{t.field} {what}") + list(decided.warnings)
        if "load_decided" in data:
            message = f"{self.name} ({self.mode}): {detail}: inconclusive, {decided.why}{_range_text(r)}"
        # The tail says nothing beside a median the load decided: it was under the same load.
        if self.watch_tail and t.field not in ("p10", "p90") and verdict.outcome is not Outcome.FAIL and "load_decided" not in data:
            tail = self._tail(cur, base)
            if tail is not None:
                data["tail"] = tail[1]
                warnings.append(tail[0])
        outcome = verdict.outcome
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, change_text(r.ratio), limit, message, self.source, notes, data, warnings)

    def _tail(self, cur: StepTimeSnapshot, base: StepTimeSnapshot) -> tuple[str, dict[str, Any]] | None:
        """(warning, data) when the p90 regressed beyond this check's threshold."""
        assert cur.sample is not None and base.sample is not None
        r = ratio_interval(cur.sample, base.sample, "p90")
        if r is None:
            return None
        allowed, improved = _bounds(replace(self.threshold, field="p90"), base.sample.values["p90"])
        verdict = regression_verdict(r.ratio, r.low, r.high, min(cur.count, base.count), allowed, improved)
        if verdict.outcome is not Outcome.FAIL:
            return None
        warning = (
            f"{self.name} ({self.mode}): slower tail: step time p90 {change_text(r.ratio)} "
            f"> +{self.threshold.amount}{_range_text(r)}, "
            f"while the {self.threshold.field} is not; gate the tail with --max-regression p90:{self.threshold.amount}"
        )
        return warning, {"field": "p90", "ratio": r.ratio, "low": r.low, "high": r.high, "verdict": verdict.verdict}


@dataclass(frozen=True)
class CompileTimeRegressionCheck(_TimeCheck):
    """Total compile time (Dynamo, AOT, Inductor, CA capture) against the baseline's, by the same
    rule, each process's compile time one unit (`run --repeat K`, `baseline save --accumulate`);
    with too few processes to measure the run-to-run noise it is assumed (report.figures.intervals),
    and only a change beyond it is called."""

    name: str = "max-compile-regression"

    def _against(self, current: ModeSnapshot, previous: ModeSnapshot, limit: str) -> CheckResult:
        t = self.threshold
        notes: list[str] = []
        if previous.backward_compile_s is None and current.backward_compile_s:
            notes.append(f"the baseline was saved before cagtool counted the backwards AOTAutograd compiles at their first call "
                         f"({_fmt_s(current.backward_compile_s)} in this run): compared without them; save the baseline again to count them")
            current = current.without_backward_compiles()
        now, before = current.compile_time_s, previous.compile_time_s
        ours, theirs = current.compile_samples, previous.compile_samples
        change_s = now - before
        change_pct = 100.0 * change_s / before if before > 0 else (0.0 if change_s == 0 else math.inf)

        def figure(value: float, samples: tuple[float, ...]) -> str:
            return f"median {_fmt_s(value)} of {len(samples)} runs" if len(samples) > 1 else _fmt_s(value)

        detail = f"total compile time {figure(now, ours)} vs baseline {figure(before, theirs)}: {_pct(change_pct)}"
        data: dict[str, Any] = {"samples": len(ours), "baseline_samples": len(theirs)}
        warnings: list[str] = []
        top, bottom = compile_sample(ours), compile_sample(theirs)
        interval = ratio_interval(top, bottom, "total") if before > 0 and now > 0 and top and bottom else None
        if interval is not None:
            ratio, low, high = interval.ratio, interval.low, interval.high
            allowed, improved = _bounds(t, before)
            spread = _range_text(interval)
            assert top is not None and bottom is not None  # the interval was made of them
            basis = ratio_basis(interval, top, bottom, "total")
            # The change of the two figures printed is theirs; the verdict's ratio, where it reads
            # otherwise (the processes' geometric means, or every pair's), is printed and named beside it.
            if len(ours) > 1 or len(theirs) > 1:  # one figure a side: the ratio is theirs
                detail += judged_on(_pct(change_pct), interval, basis, "compile time")
            data.update(low=low, high=high, **_ratio_fields(basis), **_interval_data(interval))
        else:  # nothing compiled on one side: no ratio; any compile time fails a %, or one over an absolute threshold
            fails = now > 0 and before <= 0 and (t.unit == "%" or now > t.value)
            ratio, allowed, improved = (math.inf if fails else 1.0), 2.0, 0.5
            low = high = ratio
            spread = " (nothing compiled on one side: no ratio)"
            data.update(noise_measured=False)
        verdict = regression_verdict(ratio, low, high, MIN_STEADY_STEPS, allowed, improved)
        message = _regression_message(f"{self.name} ({self.mode})", detail, verdict, t, spread)
        if interval is not None:
            notes.append(evidence_note(interval, verdict.outcome, math.log(ratio / allowed), baseline=True))
            warnings += _outlier_warnings(f"{self.name} ({self.mode})", interval, "total compile time")
        data.update(
            actual_s=now, baseline_s=before, change_pct=change_pct if math.isfinite(change_pct) else None,
            ratio=ratio if math.isfinite(ratio) else None, allowed_ratio=allowed, verdict=verdict.verdict,
            run_samples_s=list(ours), baseline_samples_s=list(theirs),
        )
        # Compile time is wall time, and a compile is CPU work: the machine's load slows it as it
        # slows a step. The wait of each side's steady steps (the same processes') is the load's
        # measure, by the step-time check's rule (_load_decides): a FAIL or PASS the load could have
        # decided is INCONCLUSIVE (an unchanged job read +76% beside a busier runner's load).
        if interval is not None:
            # Each side's load is its wait where the compile was measured (before its steady steps),
            # else its steady steps' (a record or baseline without it).
            waits = [_Waited(snap.compile_wait) if snap.compile_wait is not None
                     else _Waited(snap.step_time.runnable_wait if snap.step_time else None,
                                  "median steady step (its wait stands for its compile's, which was not read)")
                     for snap in (current, previous)]
            read = [snap.compile_wait is not None for snap in (current, previous)]
            where = (" where each compiled" if all(read) else " in their steady steps (no reading where they compiled)" if not any(read)
                     else f" ({'this run' if read[0] else 'the baseline'} where it compiled, the other in its steady steps)")
            verdict, decided = _regression_load(f"{self.name} ({self.mode})", verdict, waits[0], waits[1],
                                                (ratio, low, high), MIN_STEADY_STEPS, (allowed, improved), data, "wall", "compile", where,
                                                machine=machine_effect(current, previous))
            notes += decided.notes
            warnings += decided.warnings
            if "load_decided" in data:
                message = f"{self.name} ({self.mode}): {detail}: inconclusive, {decided.why}{spread}"
        outcome = verdict.outcome
        actual = change_text(ratio) if interval is not None else _pct(change_pct)  # the change the verdict is on, as max-regression's
        return CheckResult(self.name, self.mode, outcome, outcome is Outcome.FAIL, actual, limit, message, self.source, notes, data,
                           warnings)
