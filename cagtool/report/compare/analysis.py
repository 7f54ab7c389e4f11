"""Modes side by side (eager / aot / ca) and runs before/after: pure analysis of run records.

`compare_modes(run)` answers "did compiled autograd help?" for one run: per mode its counts and
times (repetitions `ca.2`, `ca.3`... pooled into their mode), the speedups aot/eager, ca/eager and
ca/aot with their spread and a noise verdict, and whether the numerics agree. `compare_runs(a, b)`
puts the same columns of two runs next to each other (before/after a change). Renderers live in
`render.py` and `export.py`; nothing here prints.

In order below: one mode's repetitions pooled into a `ModeColumn`; one mode's speedup over
another, with its spread and noise verdict; losses and final norms against a reference within a
`Tolerance`; a run's modes side by side (`compare_modes`); two runs before/after (`compare_runs`).

Conventions, chosen to match PyTorch's own benchmarks where they have one:
- *speedup* of X over Y = median steady step time of Y / that of X (> 1: X is faster), like
  `benchmarks/dynamo` (eager time / compiled time).
- *interval* of a speedup: the 90% confidence interval of the ratio of medians, with the process
  as the unit of evidence (report.figures.intervals: the blocks of `run --repeat K`, paired, from
  K = 5; below that, only a change beyond the assumed run-to-run noise is called). A speedup is
  *faster* or *slower* when its interval is clear of 1.0, *no change* when it lies within
  +/-`EFFECT` of it, and *inconclusive* otherwise, with the blocks that would resolve it. Fewer
  than `MIN_STEADY_STEPS` steady steps a side: nothing is claimed. The per-block ratios are
  listed as well.
- *numerics*: per-step losses and final parameter/gradient norms of each mode against a reference
  (eager when it has values, else the first mode that does), `|x - ref| <= atol + rtol * |ref|`
  like `torch.allclose`. Default rtol 1e-3, atol 1e-6 (see `Tolerance`). A difference beyond it
  that comes after the first steps agreed to round-off, with the gradients checked early and
  agreeing, is *drift* (compare/drift.py), not a disagreement.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Union

from cagtool.report.text.words import and_words
from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.manifest import WORKDIR_READS_KEPT, WrittenFiles
from cagtool.record.schema import (
    FIRST_STEP,
    MODES,
    STATUS_FINISHED,
    STATUS_INTERRUPTED,
    STATUS_KILLED,
    STATUS_RUNNING,
    STATUS_TIMEOUT,
    CAGraphEvent,
    DynamoCompileEvent,
    FinalStateEvent,
)
from cagtool.report.figures.intervals import (
    MIN_SIGN_BLOCKS,
    RatioInterval,
    bound_text,
    left_out_words,
    method_words,
    outlier_words,
    paired_ratios,
    ratio_interval,
)
from cagtool.report.figures.metrics import (
    MACHINE_NEGLIGIBLE,
    OWN_WAITS_SAID,
    PARALLEL_STEP,
    CpuWait,
    ModeMetrics,
    first_backward_loss,
    heavy_load_bound,
    load_range,
    mode_metrics,
    params_shared,
    reference_loop_of,
    step_losses,
)

from cagtool.report.compare.closeness import Tolerance, relative_difference
from cagtool.report.compare.drift import LossDrift, loss_drift
from cagtool.report.text.safe_text import shown_command
from cagtool.report.findings import thread_deaths
from cagtool.report.figures.pooled import (  # re-exported: compare's renderers read them from here
    ABOVE,
    BELOW,
    EFFECT,
    HEAVY_WAIT,
    INCONCLUSIVE,
    LOAD_DIFFERED,
    MIN_STEADY_STEPS,
    ModeColumn,
    ModeFailure,
    NO_CHANGE,
    STATUS_MISSING,
    NUMERIC_FIELDS,
    TOO_FEW_STEPS,
    base_mode,
    compilers_differ,
    mode_columns,
    mode_fields,
    on_common_steps,
    steps_words,
    speedup_verdict,
)

# Below a 2% difference in what waiting for a CPU does to the two sides, the load is not mentioned.
LOAD_NEGLIGIBLE = math.log(1.02)

# How a mode's process ended, as its record says (`ModeFailure.status`, read from the manifest in
# one place: pooled._failure_of), for a figure it never reached: "ca: it was interrupted before a
# steady step". A status not listed here (failed; no record though its process ran) is a failure.
_ENDED_WORDS = {
    STATUS_INTERRUPTED: "was interrupted",  # Ctrl-C, SIGTERM, SIGHUP, or cagtool's own process died
    STATUS_KILLED: "was killed",  # another signal (SIGKILL, the OOM killer, a crash's SIGSEGV)
    STATUS_RUNNING: "was killed",  # a record never closed: the process vanished
    STATUS_TIMEOUT: "timed out",
}


def ended_words(column: ModeColumn) -> str:
    """How `column`'s mode ended where it did not finish cleanly, from its first repetition that
    ran and did not: "was interrupted", "was killed", "timed out" or "failed", to follow "it"
    ("no recompiles in ca before it was interrupted"). "" when every repetition that did not
    finish was never started (said as "not run: <why>", `ModeFailure.describe`) or none failed."""
    ended = [f for f in column.failures if not f.not_run]
    return _ENDED_WORDS.get(ended[0].status, "failed") if ended else ""


# The pairs reported for one run, as (mode, baseline): "aot/eager" is aot's speedup over eager.
SPEEDUP_PAIRS: tuple[tuple[str, str], ...] = (("aot", "eager"), ("ca", "eager"), ("ca", "aot"))


@dataclass(frozen=True)
class Speedup:
    """`mode` over `baseline`: baseline step time / mode step time (> 1: faster), on the measure
    its interval names (CPU time per step where both spent their steps on the CPU)."""

    mode: str
    baseline: str
    ratio: float | None
    low: float | None  # the 90% confidence interval of the ratio (report.figures.intervals)
    high: float | None
    repetition_ratios: tuple[float, ...] = ()  # the ratio in each block of `run --repeat`
    steady_steps: tuple[int, int] = (0, 0)  # (mode, baseline), the steps the ratio is over
    note: str = ""  # why there is no ratio, or why it is not claimed
    # Steps steady on one side only, left out of the ratio (on_common_steps): each side's own
    # medians are over more steps than the ratio is.
    left_out: tuple[int, ...] = ()
    interval: RatioInterval | None = None
    # The factor by which waiting for a CPU alone would scale the ratio (baseline's CPU-wait
    # slowdown / the mode's, metrics.CpuWait), when both sides were measured; 1.0: equal load.
    # The CPU-bound model's: a lower bound of the load's effect (load_range).
    load_factor: float | None = None
    # For the mode and the baseline whose median step waited for a CPU HEAVY_WAIT or more of its
    # runnable time, the most the load may have slowed it (heavy_load_bound: beyond HEAVY_WAIT, the wait
    # alone no longer says what the load did); None for a side that waited less.
    heavy_load: tuple[float | None, float | None] = (None, None)
    # Where the ca mode's backward and the aot mode's were compiled by different compilers (the CA
    # graphs by cagtool's --backend, aot's by the script's torch.compile): what else the ratio
    # compares (compilers_differ): (ca's compiler, aot's), () where they are alike.
    compilers: tuple[str, str] = ()
    # Where each side ran the script to its own end (no --steps or --max-time bound) in another
    # number of steps: (the baseline's steps, the mode's). The job's course follows its numbers (an
    # episode's length in reinforcement learning, a loop run until the loss is low enough), so a
    # step may hold other work on each side (own_courses).
    courses: tuple[int, int] = ()

    @property
    def label(self) -> str:
        return f"{self.mode}/{self.baseline}"

    @property
    def _plain(self) -> str:
        assert self.ratio is not None and self.low is not None and self.high is not None
        return speedup_verdict(self.ratio, self.low, self.high, min(self.steady_steps), 1.0)

    @property
    def load_too_heavy(self) -> bool:
        """Whether a side the verdict rests on waited too long for a CPU to be judged: the baseline
        for "faster" (its steps may have been slowed more than measured), the mode for "slower",
        unless the verdict holds had the load slowed that side as much as it may have; either side
        for an inconclusive one (a real difference may be hidden). A heavy load on the side the
        verdict goes against only made it harder to reach, and it stands. On CPU time as on wall
        time: a step that waited that long lost its caches to the neighbours, and its CPU time grew
        (2.0x measured for an unchanged job beside six busy loops, docs/ci.md)."""
        if self.ratio is None or self.low is None or self.high is None or self.heavy_load == (None, None):
            return False
        mode_bound, baseline_bound = self.heavy_load
        plain = self._plain
        if plain == INCONCLUSIVE:
            return True
        # "faster" rests on the baseline's steps, "slower" on the mode's: the speedup had the load
        # slowed that side by its bound (the baseline's time over the mode's).
        g = {ABOVE: 1 / baseline_bound if baseline_bound else None, BELOW: mode_bound}.get(plain)
        if g is None:
            return False
        return speedup_verdict(self.ratio * g, self.low * g, self.high * g, min(self.steady_steps), 1.0) != plain

    @property
    def load_changes_verdict(self) -> bool:
        """Whether the verdict on the load-corrected interval (the ratio divided by what the load
        may have made of it, anywhere in load_range(load_factor)) differs from the plain one: then
        the machine's load, not the code, may be what the ratio shows, and nothing is claimed. On
        CPU time too, with its own range (a waiting step loses its caches: load_range)."""
        if self.ratio is None or self.load_factor is None or self.low is None or self.high is None:
            return False
        if abs(math.log(self.load_factor)) < LOAD_NEGLIGIBLE:
            return False
        steps = min(self.steady_steps)
        plain = self._plain
        # The verdict moves one way as the factor grows: the range's two ends are the whole test.
        return any(plain != speedup_verdict(self.ratio / f, self.low / f, self.high / f, steps, 1.0) for f in load_range(self.load_factor, "cpu" if self.on_cpu else "wall"))

    @property
    def on_cpu(self) -> bool:
        return self.interval is not None and self.interval.measure == "cpu"

    @property
    def within_noise(self) -> bool | None:
        """True when no difference is claimed: inconclusive, no change, or too few steady steps."""
        if self.ratio is None:
            return None
        return self._plain in (TOO_FEW_STEPS, INCONCLUSIVE)

    @property
    def blocks_needed(self) -> int | None:
        """For an inconclusive speedup: the blocks (`run --repeat N`) that would resolve it, one way
        or the other, 4 times in 5 at this noise; None when it is resolved, or when no reasonable
        number would (the ratio sits too close to the effect's edge)."""
        if self.verdict != INCONCLUSIVE or self.interval is None or self.ratio is None or self.interval.stretched:
            return None  # a process set apart from its side is resolved by a rerun, not by more of them
        if not self.measured:
            # From an assumed noise any number is a guess (one ratio's 58, a closer one's 5 where its
            # guess passed the most advised): the first step is to measure the noise.
            return MIN_SIGN_BLOCKS
        d = abs(math.log(self.ratio))
        return self.interval.processes_needed(max(d, math.log1p(EFFECT) - d))

    @property
    def verdict(self) -> str:
        if self.ratio is None or self.low is None or self.high is None:
            return "n/a"
        if self.load_changes_verdict or self.load_too_heavy:
            return LOAD_DIFFERED
        plain = self._plain
        if plain == TOO_FEW_STEPS:
            return TOO_FEW_STEPS
        if plain != INCONCLUSIVE:
            return "faster" if plain == ABOVE else "slower"
        if self.low >= 1.0 / (1.0 + EFFECT) and self.high <= 1.0 + EFFECT:
            return NO_CHANGE
        return INCONCLUSIVE

    @property
    def measured(self) -> bool:
        """Whether the verdict rests on measured run-to-run noise (paired blocks, or processes)."""
        return self.interval is not None and self.interval.measured

    def evidence(self) -> str:
        """What the verdict rests on, and for an inconclusive one what would resolve it."""
        if self.interval is None:
            return ""
        words = method_words(self.interval)
        if self.compilers:
            ca, aot = self.compilers
            like = "inductor (the default)" if aot == "Inductor" else "the script's backend (eager or aot_eager)"
            words += (f"; the ca mode's backward was compiled by {ca}, the aot mode's by {aot} (the script's torch.compile): "
                      f"the ratio compares compilers as well as compiled autograd (to compare like with like, record with "
                      f"--backend {like}, which compiles the CA graphs unless the script sets up its own)")
        if self.courses:
            words += (f"; {self.baseline} ran {self.courses[0]} steps to the job's own end and {self.mode} {self.courses[1]}: the "
                      "job's course follows its numbers, which differ between the modes, so a step may hold other work in each "
                      "(an episode's length, a loop run until the loss is low enough): the ratio is like with like only where "
                      "every step does the same work")
        if self.interval.outliers:
            # The interval's top is the baseline's side (its time over the mode's).
            odd = "; ".join(outlier_words(self.interval, self.baseline, self.mode, "median step time"))
            words += f"; {odd}: it ran under other conditions than they did (a busy machine, another input)"
            if self.interval.stretched:
                words += ", and only a verdict that holds on both readings stands"
        if self.interval.stretched:
            if self.verdict == INCONCLUSIVE:
                words += ": rerun on a quieter machine"
        elif self.verdict == INCONCLUSIVE:
            needed = self.blocks_needed
            if needed is None:
                words += f"; the ratio is too close to +/-{EFFECT:.0%} to resolve"
            else:
                words += f"; run --repeat {needed} to resolve it"
            if self.measured and self.interval.spread > EFFECT:
                words += f"; this machine's run-to-run noise is wider than the {EFFECT:.0%} effect: a quieter machine resolves it sooner"
        elif not self.measured and self.verdict in ("faster", "slower", NO_CHANGE):
            words += "; the change is beyond even that"
        return words


def speedup(mode: ModeColumn | None, baseline: ModeColumn | None, mode_label: str = "", baseline_label: str = "", paired: bool = True) -> Speedup:
    """`mode` over `baseline`. `paired`: two modes of one run, their repetitions in shared blocks
    (False for the same mode of two runs)."""
    mode_label = mode_label or (mode.name if mode else "?")
    baseline_label = baseline_label or (baseline.name if baseline else "?")
    for column, label in ((mode, mode_label), (baseline, baseline_label)):
        if column is None:
            return Speedup(mode_label, baseline_label, None, None, None, note=f"{label} was not run")
        if column.step_time.median_s is None:
            never = [f for f in column.failures if f.not_run]
            if column.metrics is None and never and len(never) == len(column.failures):
                # Stopped before its turn: not run, never "failed".
                return Speedup(mode_label, baseline_label, None, None, None, note=f"{label}: not run: {never[0].reason}")
            ended = ended_words(column)
            why = f"it {ended} before a steady step" if ended else "no steady-state steps (all were compiling, or fewer than 2 steps)"
            if not ended and column.metrics is not None and column.metrics.steps == 0:
                why = "it trained no step (a job that resumed at its end, or one that does not train in this mode)"
            if column.metrics is None and column.failures and all(f.status == STATUS_MISSING for f in column.failures):
                why = "no record of it to read (its failure above says why)"  # never "it failed": its process may have run
            return Speedup(mode_label, baseline_label, None, None, None, note=f"{label}: {why}")
    assert mode is not None and baseline is not None
    for column, label in ((mode, mode_label), (baseline, baseline_label)):
        if column.threads_died:
            # Its processes went on without that thread's work: a speed of part of the job.
            more = f" (+{len(column.threads_died) - 1} more)" if len(column.threads_died) > 1 else ""
            return Speedup(mode_label, baseline_label, None, None, None,
                           note=f"not compared: in {label}, {column.threads_died[0]}{more}; its steps are not the whole job's")
    # Two modes of one run, or one mode of two runs: the same steps of the script on both sides.
    mode, baseline, left_out = on_common_steps(mode, baseline)
    if mode.step_time.median_s is None or baseline.step_time.median_s is None:
        return Speedup(mode_label, baseline_label, None, None, None,
                       note=f"no step is steady in both {mode_label} and {baseline_label} ({steps_words(left_out)} steady in one only)")
    # A process whose steps are no time, or whose median is 0 s, is named, never dropped unsaid
    # from its side (the gate's timing checks say the same in an ERROR).
    lost = left_out_words([(label, column.timing) for column, label in ((mode, mode_label), (baseline, baseline_label))
                           if column.timing is not None], "median", advice="time more work a step")
    if lost:
        return Speedup(mode_label, baseline_label, None, None, None, note=f"not compared: {lost}")
    m, b = mode.step_time, baseline.step_time
    if not (m.median_s and m.p10_s and m.p90_s and b.median_s and b.p10_s is not None and b.p90_s is not None):
        # Zero-length intervals can only come from a clock that did not move: nothing to divide by.
        return Speedup(mode_label, baseline_label, None, None, None, note="step times of zero length")
    interval = ratio_interval(baseline.timing, mode.timing, "median", paired=paired) if baseline.timing and mode.timing else None
    reps: tuple[float, ...] = ()
    if interval is not None and paired and baseline.timing and mode.timing:
        reps = tuple(paired_ratios(baseline.timing, mode.timing, interval.measure, "median"))
    note = ""
    if min(m.count, b.count) < MIN_STEADY_STEPS:
        fewest = min(m.count, b.count)
        note = f"only {fewest} steady step{'s' if fewest != 1 else ''}; run more steps to judge"
    elif not mode.ok or not baseline.ok:
        note = "from a mode that did not finish cleanly"
    if left_out:
        same = f"on the {min(m.count, b.count)} steps steady in both (left out: {steps_words(left_out)})"
        note = f"{note}; {same}" if note else same
    ratio = interval.ratio if interval is not None else b.median_s / m.median_s
    load_factor = None
    on_cpu = interval is not None and interval.measure == "cpu"
    # The machine's share of each side's waits: none where nothing else ran on the job's CPUs.
    waits = [column.cpu_wait.machines() if column.cpu_wait is not None else None for column in (mode, baseline)]
    heavy = tuple(heavy_load_bound(wait.runnable_fraction, "cpu" if on_cpu else "wall", wait.runnable, wait.median_parallel)
                  if wait is not None and wait.runnable_fraction >= HEAVY_WAIT else None for wait in waits)
    own = [label for label, column in ((mode_label, mode), (baseline_label, baseline))
           if column.cpu_wait is not None and column.cpu_wait.own_waits and column.cpu_wait.step_fraction >= OWN_WAITS_SAID]
    if own:
        words = (f"{' and '.join(own)} waited for a CPU with nothing else running on the job's CPUs: the job's own threads and "
                 "processes outnumbered them, not the machine's load, so the times stand as measured")
        note = f"{note}; {words}" if note else words
    if waits[0] is not None and waits[1] is not None:
        load_factor = waits[1].slowdown / waits[0].slowdown
        if abs(math.log(load_factor)) >= LOAD_NEGLIGIBLE:
            blocks = min((c.timing.repetitions for c in (mode, baseline) if c.timing is not None), default=1)
            load = load_note(mode_label, waits[0], baseline_label, waits[1], load_factor, repeated=blocks >= 5,
                             measure="cpu" if on_cpu else "wall")
            note = f"{note}; {load}" if note else load
    if any(heavy):
        busy = " and ".join(label for label, is_heavy in zip((mode_label, baseline_label), heavy) if is_heavy)
        parallel = [label for label, wait, is_heavy in zip((mode_label, baseline_label), waits, heavy) if is_heavy
                    and wait is not None and (wait.median_parallel or 0) >= PARALLEL_STEP]
        words = (f"{busy}'s median step waited for a CPU {HEAVY_WAIT:.0%} or more of its runnable time: beyond that, the load can "
                 f"slow a step far more than the wait alone says, its CPU time included (up to {bound_text(max(b for b in heavy if b))} here"
                 + (f"; {' and '.join(parallel)} ran threads in parallel, each region waiting for its slowest thread while the others spin, "
                    "which no wait bounds" if parallel else "")
                 + "), so only a verdict that holds even so stands")
        note = f"{note}; {words}" if note else words
    return Speedup(
        mode=mode_label,
        baseline=baseline_label,
        ratio=ratio,
        low=interval.low if interval is not None else ratio,
        high=interval.high if interval is not None else ratio,
        repetition_ratios=reps if len(reps) > 1 else (),
        steady_steps=(m.count, b.count),
        note=note,
        left_out=tuple(left_out),
        interval=interval,
        load_factor=load_factor,
        heavy_load=heavy,  # type: ignore[arg-type]
    )




def load_note(mode: str, mode_wait: CpuWait, baseline: str, baseline_wait: CpuWait, factor: float, repeated: bool = False,
              measure: str = "wall") -> str:
    """What the machine's load did to a ratio, in words. `repeated`: the sides already ran in 5
    or more shuffled blocks (--repeat 5 is then not advised again)."""
    favoured = mode if factor > 1 else baseline
    low, high = load_range(max(factor, 1 / factor), measure)
    advice = "run on a quiet machine" + ("" if repeated else ", or --repeat 5 for blocks of the modes in a shuffled order")
    span = f"up to {high:.2f}x faster in CPU time per step" if measure == "cpu" else f"{low:.2f}-{high:.2f}x faster"
    return (f"{mode} waited for a CPU {_wait_words(mode_wait)}, {baseline} {_wait_words(baseline_wait, short=True)}: "
            f"the machine's load alone can make {favoured} look {span} ({advice})")


def _wait_words(wait: CpuWait, short: bool = False) -> str:
    """The share a median is judged against (its median step's), and the window's where the load
    came and went enough to make them differ."""
    words = f"{wait.runnable_fraction:.0%}" if short else f"{wait.runnable_fraction:.0%} of its runnable time"
    if wait.runnable < 0.95:  # a step that also sleeps or waits for a device: the load lengthens only the rest
        words += f" (runnable {wait.runnable:.0%} of its time)"
    if round(wait.runnable_fraction, 2) != round(wait.fraction, 2):
        words += f" at its median step ({wait.fraction:.0%} over its steps' span)"
    return words


# Numerics quantities, in display order.
LOSS = "loss"
PARAM_NORM = "param_norm"
GRAD_NORM = "grad_norm"
# How many of the optimizers' parameters were updated by the end (FinalStateEvent.params_updated):
# a mode where some were never updated that the reference updated trained another model.
PARAMS_UPDATED = "params_updated"


@dataclass(frozen=True)
class NumericsDiff:
    """One quantity of one recorded mode against the reference."""

    quantity: str  # loss | param_norm | grad_norm
    record: str  # the directory compared, e.g. "ca" or "ca.2"
    reference: str  # the reference directory, e.g. "eager"
    compared: int  # values compared (steps, for the loss)
    max_rel_diff: float | None
    worst_step: int | None = None  # where the loss differs most
    value: float | None = None  # at the worst point
    reference_value: float | None = None
    agrees: bool = True
    note: str = ""
    # Not a verdict on compiled autograd: the first step's losses already differ (the forward saw
    # other inputs or randomness before any backward could matter), or the record's compiled graphs
    # hold random ops that draw other numbers than the reference (Numerics.random_ops), wherever
    # the losses part.
    inputs_differ: bool = False
    # A difference beyond the tolerance that is drift (compare/drift.py): the words saying so.
    drift: str = ""
    # The step the losses jumped apart at, from agreeing to round-off (compare/drift.py): a change there.
    jumped_at: int | None = None
    # A ca mode on Inductor whose losses left round-off growing, not at a jump, too soon for drift:
    # the first step beyond it (the note says how to rule Inductor's rounding out).
    parts_growing_from: int | None = None
    # ca's losses against aot's that part at a jump after too few steps agreeing for the rule to
    # call it a change, where their gradients agree at step 0: that step, not told apart yet (the
    # note says how).
    undecided_at: int | None = None


@dataclass(frozen=True)
class Numerics:
    reference: str | None
    tolerance: Tolerance
    diffs: tuple[NumericsDiff, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. "no losses recorded (backward called on a non-scalar)"
    # record -> (the first paths, how many) of the files in the job's working directory that an
    # earlier mode wrote before it started (RunMeta.written_before): a job resuming from its own files.
    written_before: dict[str, WrittenFiles] = field(default_factory=dict)
    # record -> the files it created there that `cagtool run --isolate-workdir` moved into the run's
    # workdir/<record>/ (RunMeta.set_aside): every mode started from the directory as the first found it.
    set_aside: dict[str, WrittenFiles] = field(default_factory=dict)
    # record -> (its loss, the reference's) at the first step, for each record whose first-step loss
    # already differs (inputs_differ): what the words quote (the diffs hold the worst step's).
    first_losses: dict[str, tuple[float, float]] = field(default_factory=dict)
    # record -> why it differs where its gradient check found the cause: random ops (dropout) in
    # Inductor's compiled graphs draw from Inductor's generator, not eager's seeded one
    # (grad_parity.PairParity.not_comparable): said instead of "unseeded?" where the first step
    # already differs, and instead of DISAGREE where the losses part later (a GAT's dropout on
    # near-uniform first predictions: the first losses agree to 1e-4, step 8's differ by 6e-3).
    random_ops: dict[str, str] = field(default_factory=dict)
    # record -> the first step its loss is beyond the tolerance, for each record in random_ops
    # whose first step agrees (not in first_losses).
    parted_at: dict[str, int] = field(default_factory=dict)
    # record -> the loss both made at the first step's first backward, for each record in
    # first_losses whose first backward's loss agrees with the reference's: the step's last loss,
    # computed after a backward, is what differs (gradient accumulation), so the backward changed
    # what the next forward computed (random numbers it drew: torch.compile's non-reentrant
    # checkpoint on the eager backend moves the generator in its recompute, which eager's leaves
    # as it was; docs/torch-internals.md), not the inputs.
    first_backward_agrees: dict[str, float] = field(default_factory=dict)
    # Where the reference (eager) differs from aot and ca from the first step on, but aot's first
    # loss is ca's: ca against aot (run_numerics), which answers whether compiled autograd changed
    # anything the compiled forward had not. Empty otherwise.
    against_aot: tuple[NumericsDiff, ...] = ()
    # (ca's backward compiler, aot's) where they differ (compilers_differ): ca against aot then
    # compares compilers' rounding as well as compiled autograd. () where alike.
    compilers: tuple[str, str] = ()
    # Records that ran to their end and recorded fewer steps than the reference, which did too (no
    # --steps or --max-time bound ended either): what a job that resumes and skips the steps done shows.
    fewer_steps: tuple[str, ...] = ()
    # Records that ran to their end without one training step (no loss) where the reference recorded
    # losses: a job that resumed at its end, or one that did not train in that mode. Their final
    # norms can equal the reference's (loaded from its checkpoint): no agreement is read into them.
    stepless: tuple[str, ...] = ()
    # Records (the reference's included) that trained parameters in shared memory other processes
    # wrote too (Hogwild workers): each one's losses depend on the order the OS ran the processes,
    # so nothing is compared (no diffs) and nothing is read into agreeing or not.
    shared: tuple[str, ...] = ()
    # `cagtool run --seed off`: cagtool seeded nothing, so modes that drew other numbers are the
    # script's own seeding's doing, not evidence of a resume from an earlier mode's files.
    unseeded: bool = False
    # record -> the files under the working directory its processes opened for reading
    # (ModeOptions.workdir_reads), where every process of it kept them; absent where not known.
    reads: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def agree(self) -> bool:
        return all(d.agrees for d in self.diffs)

    @property
    def resumed(self) -> dict[str, WrittenFiles]:
        """The records that started with files an earlier mode wrote and differ from the reference as
        only a resume explains: fewer steps (a job that resumes skips those done), or a first step that
        already differs with nothing else in the record to account for it. A file being there is no
        evidence that the job read it (a log or counters dump each mode writes anew). Where ca
        agrees with aot, compiled alike, and both differ from eager from the first step, the record
        shows the compiled program computing otherwise; and ca, started after aot's files too,
        computed what aot did. A record that opened such a file and ran fewer steps resumed,
        whatever its numerics (losses that do not move agree from any step)."""
        differ = {d.record for d in self.diffs if not d.agrees}
        from_start = set(self.first_losses)
        compiled_alike: set[str] = set()
        if self.against_aot and all(d.agrees for d in self.against_aot):
            compiled_alike = {d.record for d in self.against_aot} | {d.reference for d in self.against_aot}

        def resumed(record: str, files: WrittenFiles) -> bool:
            if self._read_none_of(record, files):
                return False
            if record in self.stepless:
                return True
            if record in self.fewer_steps and self.reads.get(record, frozenset()) & set(files.paths):
                return True  # it read one of them: a resume, whatever its losses
            if record not in differ:
                return False
            return record in self.fewer_steps or (record in from_start and record not in compiled_alike and not self.unseeded)

        return {r: files for r, files in self.written_before.items() if resumed(r, files)}

    def _read_none_of(self, record: str, files: WrittenFiles) -> bool:
        """The record's processes opened none of the files an earlier mode wrote, as far as can be
        told: every file is named (none past the list's first few), none is of a kind native code
        reads without Python's `open` (workdir_reads.py), and the reads were kept."""
        reads = self.reads.get(record)
        if reads is None or files.count > len(files.paths) or any(p.endswith(NATIVE_READ_SUFFIXES) for p in files.paths):
            return False
        return not reads & set(files.paths)


    @property
    def inputs_differ(self) -> list[str]:
        """Records not comparable with the reference: their first-step loss already differs, or
        random ops in their compiled graphs draw other numbers (random_ops)."""
        return list(dict.fromkeys(d.record for d in self.diffs if d.inputs_differ))

    @property
    def backward_parted_only(self) -> bool:
        """Every record not comparable parted from the reference in its first step's backward."""
        return bool(self.inputs_differ) and all(r in self.first_backward_agrees for r in self.inputs_differ)

    @property
    def random_ops_only(self) -> bool:
        """Every record not comparable is so for random ops in its compiled graphs."""
        return bool(self.inputs_differ) and all(r in self.random_ops for r in self.inputs_differ)

    @property
    def max_rel_diff(self) -> float | None:
        values = [d.max_rel_diff for d in self.diffs if d.max_rel_diff is not None]
        return max(values) if values else None

    @property
    def disagreements(self) -> list[NumericsDiff]:
        """Real disagreements: same first-step loss, different later on, and not drift."""
        return [d for d in self.diffs if not d.agrees and not d.inputs_differ and not d.drift]

    @property
    def drifted(self) -> list[NumericsDiff]:
        """Differences beyond the tolerance that are drift (compare/drift.py), not disagreements."""
        return [d for d in self.diffs if not d.agrees and not d.inputs_differ and d.drift]

    @property
    def drift_words(self) -> dict[str, str]:
        """record -> the words of its drift, for each record with a difference that is drift."""
        found: dict[str, str] = {}
        for d in self.drifted:
            found.setdefault(d.record, d.drift)
        return found

    def worst_for(self, mode: str) -> float | None:
        """Largest relative difference of any repetition of `mode` (None: nothing compared)."""
        values = [d.max_rel_diff for d in self.diffs if base_mode(d.record) == mode and d.max_rel_diff is not None]
        return max(values) if values else None


@dataclass(frozen=True)
class NumericsSample:
    """What a mode record says about its numerics."""

    record: str
    losses: dict[int, float]  # step -> loss
    param_norm: float | None
    grad_norm: float | None
    finished: bool  # final norms only mean something when the run ended normally
    # step -> the compile ids of what was compiled in it (CA graphs "!N", Dynamo's "0/1"): where a
    # change in the losses may come from
    compiled_at: dict[int, tuple[str, ...]] = field(default_factory=dict)
    bounded: bool = False  # a --steps or --max-time bound ended it (options["stopped_by"])
    # FinalStateEvent's params_watched, params_updated and never_updated (None, None, (): not read)
    params_watched: int | None = None
    params_updated: int | None = None
    never_updated: tuple[str, ...] = ()
    # A ca mode whose CA graphs cagtool compiled with Inductor (--backend inductor, the default; not
    # the script's own CA compiler): its kernels round otherwise than eager's, which `--backend
    # eager` leaves out.
    ca_inductor: bool = False
    # Parameters it trained in CPU shared memory (FinalStateEvent.params_shared): other processes
    # wrote them between its steps, in an order the OS chose.
    params_shared: int = 0
    # The loss of the first step's first backward where the step made several (metrics.py
    # first_backward_loss): its step loss is the last's, computed after a backward ran. Read only
    # where the first steps' losses differ (a call: a job's backward lines are not read otherwise).
    first_backward: Callable[[], float | None] | None = field(default=None, compare=False, repr=False)

    @property
    def first_backward_loss(self) -> float | None:
        return self.first_backward() if self.first_backward is not None else None


def numerics_sample(name: str, record: ModeRecord) -> NumericsSample:
    losses = step_losses(record)
    final = record.of(FinalStateEvent)
    # A job thread that died leaves a process that "finished" without that thread's work (its
    # training may have stopped early): its final norms are no end of the job to compare.
    finished = record.manifest.status == STATUS_FINISHED and record.manifest.exit_code in (0, None) and not thread_deaths(record)
    compiled_at: dict[int, tuple[str, ...]] = {}
    for event in (*record.of(CAGraphEvent), *record.of(DynamoCompileEvent)):
        if event.step is not None and not getattr(event, "is_ca_graph", False):
            compiled_at[event.step] = (*compiled_at.get(event.step, ()), event.compile_id)
    return NumericsSample(
        record=name,
        losses=losses,
        param_norm=final[-1].param_norm if final else None,
        grad_norm=final[-1].grad_norm if final else None,
        finished=finished,
        compiled_at=compiled_at,
        bounded=bool(record.manifest.options.get("stopped_by")) if isinstance(record.manifest.options, dict) else False,
        ca_inductor=record.manifest.mode == "ca" and record.manifest.backend == "inductor"
        and any(graph.compiler.partition(":")[0] != "script" for graph in record.of(CAGraphEvent)),
        params_shared=params_shared(record),
        first_backward=functools.partial(first_backward_loss, record),
        **_updates_read(final[-1] if final else None),
    )



def _updates_read(final: FinalStateEvent | None) -> dict[str, Any]:
    """FinalStateEvent's parameter-update counts where they are counts (0 <= updated <= watched); a
    record's file is not trusted: other figures are left unread, as a record without them is."""
    if final is None or final.params_watched is None or final.params_updated is None:
        return {}
    watched, updated = final.params_watched, final.params_updated
    if not (0 <= updated <= watched) or len(final.never_updated) > watched:
        return {}
    return {"params_watched": watched, "params_updated": updated, "never_updated": tuple(final.never_updated)}


def _updated_diff(sample: NumericsSample, reference: NumericsSample) -> NumericsDiff | None:
    """Parameters `sample` never updated that `reference` did (their version counters: final_state.py):
    their optimizers' steps never reached them in that mode (torch 2.13 under compiled autograd, an
    optimizer looked up by its parameter in a module-level dict inside a post-accumulate-grad hook,
    steps only the last: docs/torch-internals.md). A difference of the trained model itself, which
    norms over every parameter can miss at a small learning rate. None where either did not read
    them, or they watched different parameter sets, or both updated as many."""
    if not (sample.finished and reference.finished) or sample.params_updated is None or reference.params_updated is None:
        return None
    if sample.params_watched != reference.params_watched or sample.params_updated >= reference.params_updated:
        return None
    theirs = set(reference.never_updated)
    missing = [name for name in sample.never_updated if name not in theirs]
    named = f": {', '.join(missing[:5])}{' and more' if len(missing) > 5 else ''}" if missing else ""
    return NumericsDiff(
        quantity=PARAMS_UPDATED,
        record=sample.record,
        reference=reference.record,
        compared=sample.params_watched or 0,
        max_rel_diff=relative_difference(float(sample.params_updated), float(reference.params_updated)),
        value=float(sample.params_updated),
        reference_value=float(reference.params_updated),
        agrees=False,
        note=(f"{sample.record} updated {sample.params_updated} of the optimizers' {sample.params_watched} parameters, "
              f"{reference.record} {reference.params_updated}; never updated in {sample.record}{named} (their optimizers' "
              "step never reached them there: the job trained another model)"),
    )


def _worst_and_agreement(steps: list[int], values: dict[int, float], references: dict[int, float], tol: Tolerance) -> tuple[int, float, bool]:
    """(the first step with the largest relative_difference, that difference, whether every step
    agrees within `tol`) in one pass over `steps` (a run's losses: tens of thousands of steps);
    where both values are finite, Tolerance.agrees and relative_difference computed inline, and
    by those functions where one is not."""
    atol, rtol = tol.atol, tol.rtol
    worst_step, worst, agrees = steps[0], -1.0, True
    for step in steps:
        value, reference = values[step], references[step]
        diff = abs(value - reference)
        if diff - diff == 0.0:  # finite: so are both values
            scale = abs(reference)
            if diff > atol + rtol * scale:
                agrees = False
            relative = 0.0 if diff == 0.0 else (diff / scale if scale > 0 else math.inf)
        else:
            agrees = agrees and tol.agrees(value, reference)
            relative = relative_difference(value, reference)
        if relative > worst:
            worst_step, worst = step, relative
    return worst_step, worst, agrees


def _loss_diff(sample: NumericsSample, reference: NumericsSample, tol: Tolerance) -> NumericsDiff | None:
    common = sorted(set(sample.losses) & set(reference.losses))
    if not common:
        if sample.losses and reference.losses:
            return NumericsDiff(LOSS, sample.record, reference.record, 0, None, agrees=True, note="no step in common")
        return None
    worst_step, worst, agrees = _worst_and_agreement(common, sample.losses, reference.losses, tol)
    note = ""
    if len(sample.losses) != len(reference.losses):
        note = f"{sample.record} has {len(sample.losses)} losses, {reference.record} {len(reference.losses)}: compared the {len(common)} steps both ran"
    return NumericsDiff(
        quantity=LOSS,
        record=sample.record,
        reference=reference.record,
        compared=len(common),
        max_rel_diff=worst,
        worst_step=worst_step,
        value=sample.losses[worst_step],
        reference_value=reference.losses[worst_step],
        agrees=agrees,
        note=note,
    )


def _norm_diff(quantity: str, sample: NumericsSample, reference: NumericsSample, tol: Tolerance) -> NumericsDiff | None:
    value, ref = getattr(sample, quantity), getattr(reference, quantity)
    if not (sample.finished and reference.finished):
        return None
    ends = [max(s.losses, default=None) for s in (sample, reference)]
    if (sample.bounded or reference.bounded) and ends[0] != ends[1]:
        # A --max-time bound stops each mode at another step: its final norms are another point of
        # training than the other's (a mode stopped after 32 steps against one that ran 377).
        if quantity != PARAM_NORM or (value is None and ref is None):
            return None
        ran = [(f"{s.record} was stopped after {end + 1} steps" if s.bounded else f"{s.record} ran {end + 1} steps")
               if end is not None else f"{s.record} {'was stopped by a bound' if s.bounded else 'ran to its end'} with no loss kept"
               for s, end in zip((sample, reference), ends)]
        return NumericsDiff(quantity, sample.record, reference.record, 0, None, agrees=True,
                            note=f"final norms not compared: {ran[0]}, {ran[1]} (a --steps or --max-time bound): "
                                 "their parameters are at other points of training")
    if value is None or ref is None:
        if quantity == GRAD_NORM and (value is None) != (ref is None):
            # One holds gradients at its end, the other none: a like-with-unlike pair, said rather
            # than passed over (a step inside compiled code ends where the compiled call returns,
            # after a zero_grad() in that call; eager's --steps stops inside its step()).
            holder, empty = (reference.record, sample.record) if value is None else (sample.record, reference.record)
            return NumericsDiff(quantity, sample.record, reference.record, 0, None, agrees=True,
                                note=f"grad_norm not compared: {empty} holds no gradient at its end, {holder} does "
                                     "(its run ended at another point of the script, or after its gradients were set to None)")
        return None
    return NumericsDiff(
        quantity=quantity,
        record=sample.record,
        reference=reference.record,
        compared=1,
        max_rel_diff=relative_difference(value, ref),
        value=value,
        reference_value=ref,
        agrees=tol.agrees(value, ref),
    )


def compare_samples(samples: list[NumericsSample], reference: NumericsSample | None, tol: Tolerance,
                    gradients: dict[str, Any] | None = None) -> Numerics:
    """Each sample against `reference`. `gradients`: record -> its gradient check against the
    same reference (grad_parity.PairParity), which can make a later difference drift."""
    if reference is None:
        return Numerics(None, tol, notes=("no mode recorded a scalar loss or final norms: nothing to compare",))
    from cagtool.report.compare.grad_parity import RANDOM_OPS_WORDS

    diffs: list[NumericsDiff] = []
    notes: list[str] = []
    first_losses: dict[str, tuple[float, float]] = {}
    random_ops: dict[str, str] = {}
    parted_at: dict[str, int] = {}
    backward_agrees: dict[str, float] = {}
    for sample in samples:
        if sample.record == reference.record:
            continue
        found = [
            _loss_diff(sample, reference, tol),
            _norm_diff(PARAM_NORM, sample, reference, tol),
            _norm_diff(GRAD_NORM, sample, reference, tol),
        ]
        kept = [d for d in found if d is not None]
        if not kept:
            notes.append(f"{sample.record}: nothing to compare with {reference.record}")
        why = getattr((gradients or {}).get(sample.record), "not_comparable", "")
        one_run = _different_modes_of_one_run(sample.record, reference.record)
        random = one_run and why.startswith(RANDOM_OPS_WORDS)
        if one_run and first_losses_differ(sample, reference, tol):
            kept = [replace(d, inputs_differ=not d.agrees) for d in kept]
            first_losses[sample.record] = (sample.losses[FIRST_STEP], reference.losses[FIRST_STEP])
            first, theirs = sample.first_backward_loss, reference.first_backward_loss
            if first is not None and theirs is not None and tol.agrees(first, theirs):
                backward_agrees[sample.record] = first
            if random:
                random_ops[sample.record] = why.split("; ", 1)[0]
        elif random and any(not d.agrees for d in kept):
            # The first losses agree (dropout barely moves a near-uniform first prediction) and
            # part later: other random draws all the same, so no verdict, as at the first step.
            kept = [replace(d, inputs_differ=not d.agrees) for d in kept]
            random_ops[sample.record] = why.split("; ", 1)[0]
            parted = _first_parted(sample, reference, tol)
            if parted is not None:
                parted_at[sample.record] = parted
        elif any(not d.agrees for d in kept):
            drift = loss_drift(sample.losses, reference.losses, tol.rtol, tol.atol)
            words, left_tight, jump = _drift(sample, reference, drift, (gradients or {}).get(sample.record))
            # A final norm's difference is drift only where the losses drifted too.
            kept = [replace(d, drift=words) if not d.agrees and (d.quantity == LOSS or left_tight) else d for d in kept]
            if jump is not None:
                kept = [replace(d, note=jump[1], jumped_at=jump[0]) if d.quantity == LOSS and not d.agrees else d for d in kept]
            elif not words:
                hint = _inductor_rounding_hint(sample, reference, drift)
                if hint is not None:
                    kept = [replace(d, note=hint[1], parts_growing_from=hint[0]) if d.quantity == LOSS and not d.agrees else d
                            for d in kept]
        updated = _updated_diff(sample, reference)  # never drift, whatever the losses do
        if updated is not None:
            kept.append(updated)
        diffs.extend(kept)
    return Numerics(reference.record, tol, tuple(diffs), tuple(notes + nonfinite_notes(samples)), first_losses=first_losses,
                    random_ops=random_ops, parted_at=parted_at, first_backward_agrees=backward_agrees)


def _first_parted(sample: NumericsSample, reference: NumericsSample, tol: Tolerance) -> int | None:
    """The first step both recorded whose losses are beyond the tolerance (None: none is)."""
    return next((step for step in sorted(sample.losses.keys() & reference.losses.keys())
                 if not tol.agrees(sample.losses[step], reference.losses[step])), None)


def _drift(sample: NumericsSample, reference: NumericsSample, drift: LossDrift, check: Any) -> tuple[str, bool, tuple[int, str] | None]:
    """(the drift words (compare/drift.py) for `sample`'s differences beyond `tol`, or "", whether
    its losses left DRIFT_RTOL, (the step of a jump, its words) or None): drift where the first DRIFT_STEPS losses
    agree within DRIFT_RTOL, leave it growing rather than at a jump, and `check` (its gradients
    against the same reference) compared a step among them and agrees at every step before the
    losses parted. A jump after the first DRIFT_STEPS is said whatever the check."""
    from cagtool.report.compare.drift import drift_words, jump_words

    if drift.early_agreement and drift.jumped:
        return "", False, (drift.jumped_at, jump_words(drift, sample.record, sample.compiled_at))
    if check is None or check.not_comparable or not check.agrees or not check.steps or check.across_ranks:
        return "", False, None
    if check.reference.split(" ")[0] != reference.record:
        return "", False, None
    early = [step for step in check.steps if drift.in_window(step)]
    if not drift.may_be_drift or not early:
        return "", False, None
    return drift_words(drift, early[0], check.params), drift.left_tight, None


def _parting_words(record: str, other: str, drift: LossDrift) -> str | None:
    """"ca's losses agree with aot's bit for bit for the first 20 steps, then part growing past 1e-05
    (no jump)": losses that agreed to round-off over two steps or more and parted growing, not at a
    jump (compare/drift.py), as round-off amplified by training parts them; None otherwise."""
    from cagtool.report.compare.drift import DRIFT_RTOL

    if drift.tight_steps < 2 or drift.jumped:
        return None
    to = "bit for bit" if drift.tight_worst == 0 else f"to {drift.tight_worst:.0e}"
    return (f"{record}'s losses agree with {other}'s {to} for the first {drift.tight_steps} steps, then part growing past "
            f"{DRIFT_RTOL:g} (no jump)")


def _inductor_rounding_hint(sample: NumericsSample, reference: NumericsSample, drift: LossDrift) -> tuple[int, str] | None:
    """For a ca mode whose CA graphs Inductor compiled, whose losses differ from eager's beyond `tol`
    but agreed to round-off over its first steps and parted growing, not at a jump
    (compare/drift.py), where the rule could not call it drift: how to tell Inductor's rounding,
    amplified by training, from a difference of compiled autograd's. A chaotic job (a language
    model at a high learning rate) parts within a few steps; its ca mode on `--backend eager`
    (the CA graphs run by aten's kernels, as eager's) matches eager bit for bit. (The first step
    beyond round-off, the words), or None."""
    from cagtool.report.compare.drift import DRIFT_STEPS

    against = base_mode(reference.record)
    if not sample.ca_inductor or against not in ("eager", "aot"):
        return None
    if drift.parted_at is None or (parting := _parting_words(sample.record, reference.record, drift)) is None:
        return None
    short = (f"{drift.tight_steps} steps are fewer than the {DRIFT_STEPS} that tell it from an error"
             if drift.tight_steps < DRIFT_STEPS else "no gradient check among those steps tells it from an error")
    # Against aot both backwards are Inductor's, compiled apart (aot's AOT backward graphs, ca's CA
    # graphs, fused otherwise): their round-off differs as ca's and eager's does.
    kernels = (f"Inductor's kernels (which compiled {sample.record}'s CA graphs)" if against == "eager" else
               f"Inductor's kernels (which compiled {reference.record}'s backward graphs and {sample.record}'s CA graphs apart, "
               "each fused its own way)")
    parity = "" if against == "eager" else " (with --parity where the compiled graphs draw random numbers: dropout)"
    return FIRST_STEP + drift.tight_steps, (f"{parting}, beyond the tolerance from step {drift.parted_at}: what round-off "
            f"of {kernels} looks like once training amplifies it, but "
            f"{short}. To tell, record it without Inductor: cagtool run --modes eager,ca --backend eager{parity}, the same script "
            "and arguments (its CA graphs then run eager's kernels: agreement there puts the difference in Inductor's "
            "rounding; a difference there is compiled autograd's own, which that run's compare judges as this one's)")


def _compilers_rounding(diff: NumericsDiff, sample: NumericsSample, aot: NumericsSample, compilers: tuple[str, str]) -> NumericsDiff:
    """ca's losses against aot's where their backwards were compiled by different compilers
    (compilers_differ: the CA graphs by --backend eager, aot's backward by Inductor): losses that
    agreed to round-off over the first steps and parted growing, not at a jump, are what the two
    compilers' rounding looks like once training amplifies it (word_language_model's Transformer at
    lr 5: bit for bit for 20 steps, 5e-2 apart by step 91), not yet compiled autograd's error."""
    if diff.quantity != LOSS or diff.agrees or diff.jumped_at is not None or diff.parts_growing_from is not None:
        return diff
    drift = loss_drift(sample.losses, aot.losses, 0.0, 0.0)
    if drift.tight_steps >= drift.compared or (parting := _parting_words(sample.record, aot.record, drift)) is None:
        return diff
    ca, theirs = compilers
    like = "inductor (the default)" if theirs == "Inductor" else "the script's backend (eager or aot_eager)"
    return replace(diff, parts_growing_from=FIRST_STEP + drift.tight_steps, note=(
        f"{parting}: what round-off looks like once training amplifies it, and the two backwards were "
        f"compiled apart ({sample.record}'s CA graphs by {ca}, {aot.record}'s backward by {theirs}), which round otherwise. "
        f"To compare like with like, record with --backend {like}, the same script and arguments"))


# A gradient difference at most this many times its tolerance, before the losses part, is taken
# as round-off's size (imagenet's resnet18 above: 1.7x at step 1); one a hook or a wrong node
# changes is expected to differ by more, or in kind (a scale, a zero, a sign).
NEAR_TOLERANCE = 4.0


def _too_soon_to_tell(diff: NumericsDiff, sample: NumericsSample, aot: NumericsSample, tol: Tolerance, check: Any) -> NumericsDiff:
    """ca's losses against aot's that agreed to round-off for a few steps (two or more, fewer than
    DRIFT_STEPS) and parted at a jump (compare/drift.py), where their gradients were digested at
    step 0 and agree there: the jump rule's bound is calibrated on jobs that train, and a job whose
    losses diverge amplifies round-off faster (pytorch/examples' imagenet, resnet18 on random labels
    at lr 0.1: ca's Inductor-compiled CA graph against aot's Inductor-compiled backward, 1e-7 at
    step 1, 136x that at step 2, 3e-2 by step 7, the gradients equal at step 0). Said undecided,
    with how to tell, not "compiled autograd computes otherwise"."""
    from cagtool.report.compare.drift import DRIFT_STEPS, JUMP
    from cagtool.report.compare.grad_parity import DIFFERS

    if diff.quantity != LOSS or diff.agrees or diff.note or diff.parts_growing_from is not None or check is None:
        return diff
    if check.not_comparable or not check.steps or check.steps[0] != FIRST_STEP or FIRST_STEP in check.bad_steps:
        return diff
    drift = loss_drift(sample.losses, aot.losses, tol.rtol, tol.atol)
    if not drift.jumped or not 2 <= drift.tight_steps < DRIFT_STEPS or drift.jump is None:
        return diff
    before = [step for step in check.steps if step < drift.jumped_at]
    every = before == list(range(FIRST_STEP, drift.jumped_at))
    if not [step for step in check.bad_steps if step < drift.jumped_at]:
        digested = (f"agree with {aot.record}'s at step {FIRST_STEP}, the only step digested before they parted" if before == [FIRST_STEP]
                    else f"agree with {aot.record}'s at every step digested before they parted ({', '.join(map(str, before))})")
    elif all(m.kind == DIFFERS and m.excess <= NEAR_TOLERANCE for m in check.first_bad):
        # Differences near the tolerance before the losses part: round-off's size; a gradient a
        # hook or a wrong node changes differs by far more from the step it starts, or in kind.
        worst = max(m.excess for m in check.first_bad)
        digested = (f"agree with {aot.record}'s at step {FIRST_STEP} and first differ at step {check.first_bad_step}, in "
                    f"{len(check.first_bad)} of {check.params} parameters by at most {worst:.2g}x the tolerance: round-off's size, "
                    "not a changed gradient's (one a hook or a wrong node changes differs by far more from the step it starts, "
                    "or in kind: a scale, a zero, a sign)")
    else:
        return diff
    tell = ("" if every else " To tell, record it with cagtool run --parity-every 1 (every step's gradients digested in every "
            f"mode): the first step whose gradients differ from {aot.record}'s, and by how much, says which.")
    return replace(diff, undecided_at=drift.jumped_at, note=(
        f"{sample.record}'s losses agree with {aot.record}'s to {drift.tight_worst:.0e} for the first {drift.tight_steps} steps, "
        f"then part at step {drift.jumped_at} ({drift.jump:,.0f}x the difference before it, past the {JUMP:g}x the rule reads as "
        f"a change), and its gradients {digested}: too few steps agreeing to tell a change compiled autograd made from "
        f"round-off of the two Inductor-compiled backwards amplified by a job that diverges fast.{tell}").rstrip("."))


def nonfinite_notes(samples: list[NumericsSample]) -> list[str]:
    """Where each record's loss (and final norms) was not a finite number, grouped: "loss is NaN
    from step 2 in eager, aot and ca" (every later step too), "loss is NaN at step 3 in eager, aot
    and ca" (a grad scaler's overflow: the steps after it finite again). A NaN the modes share
    agrees; it is still said."""
    found: dict[str, list[str]] = {}
    for sample in samples:
        losses = sample.losses
        bad = sorted(step for step, value in losses.items() if value - value != 0.0)  # NaN or infinite
        if bad:
            first = bad[0]
            if len(bad) == sum(1 for step in losses if step >= first):
                where = f"from step {first}"
            else:
                where = (f"at step {first}" if len(bad) == 1 else
                         f"at {len(bad)} steps ({', '.join(map(str, bad[:5]))}{' ...' if len(bad) > 5 else ''})")
            found.setdefault(f"loss is {_nonfinite_word(losses[first])} {where}", []).append(sample.record)
        for quantity in (PARAM_NORM, GRAD_NORM):
            value = getattr(sample, quantity)
            if value is not None and not math.isfinite(value):
                found.setdefault(f"final {quantity.replace('_', ' ')} is {_nonfinite_word(value)}", []).append(sample.record)
    return [f"{what} in {and_words(records)}" for what, records in found.items()]


def _nonfinite_word(value: float) -> str:
    return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _different_modes_of_one_run(record: str, reference: str) -> bool:
    """eager vs ca of one run. Not repetitions of one mode (same seed, same inputs: a first-step
    difference there means the script is not deterministic, a real problem) and not before/after
    runs ("A ca" vs "B ca": the change under test may change the inputs)."""
    return " " not in record and " " not in reference and base_mode(record) != base_mode(reference)


def first_losses_differ(sample: NumericsSample, reference: NumericsSample, tol: Tolerance) -> bool:
    """The honest rule for "input randomness, not a disagreement": the loss of the first step
    both ran comes from the forward before any backward could change a parameter, so when it
    already differs beyond tolerance the two modes computed on different inputs (an unseeded
    script, dropout, data order), and nothing later says anything about compiled autograd.
    Only when that first step is the run's first step (FIRST_STEP on both sides)."""
    if FIRST_STEP not in sample.losses or FIRST_STEP not in reference.losses:
        return False
    return not tol.agrees(sample.losses[FIRST_STEP], reference.losses[FIRST_STEP])


def _pick_reference(samples: list[NumericsSample]) -> NumericsSample | None:
    """eager (the ground truth: no compiler involved) when it has values, else the first that does."""
    useful = [s for s in samples if s.losses or (s.finished and (s.param_norm is not None or s.grad_norm is not None))]
    if not useful:
        return None
    by_mode = {base_mode(s.record): s for s in reversed(useful)}  # first repetition wins
    for mode in MODES:
        if mode in by_mode:
            return by_mode[mode]
    return useful[0]


def run_numerics(run: RunRecord, tol: Tolerance, parity: Any = None) -> Numerics:
    """The modes' losses and final norms against the reference; `parity` (grad_parity.GradParity):
    the gradient checks that tell drift from a disagreement (compare/drift.py)."""
    samples = [numerics_sample(name, record) for name, record in run.modes.items()]
    gradients, against_checks = None, None
    if parity is not None:
        # A multi-rank mode's numerics are its first rank's: its check is that rank's.
        pairs = [p for p in parity.pairs if not p.across_ranks]
        gradients = {p.record.split(" ")[0]: p for p in reversed(pairs)}
        against_checks = {p.record.split(" ")[0]: p for p in reversed(parity.against_aot) if not p.across_ranks}
    written = {name: w for name, w in (run.meta.written_before or {}).items() if name in run.modes}
    options = run.meta.options or {}
    unseeded = "seed" in options and options.get("seed") is None  # --seed off (an imported run says nothing)
    reads = {name: found for name, record in run.modes.items() if name in written and (found := workdir_reads(record)) is not None}
    set_aside = {name: w for name, w in (run.meta.set_aside or {}).items() if name in run.modes}
    return replace(modes_numerics(samples, tol, gradients, written, compilers_differ(run), against_checks), unseeded=unseeded, reads=reads,
                   set_aside=set_aside)


# What to do where a mode started from files an earlier mode wrote (Numerics.resumed): the headline's
# advice and the numerics' line.
ISOLATE_WORKDIR_FIX = ("run again with --isolate-workdir (cagtool then moves what each mode creates in the job's directory into "
                       "the run directory before the next mode), or point the job at a fresh directory")


# Files native code reads without Python's `open` (safetensors' Rust reader, HDF5's C library), so
# no audit event says whether a mode read them (capture/processes/workdir_reads.py).
NATIVE_READ_SUFFIXES = (".safetensors", ".h5", ".hdf5", ".nc", ".zarr", ".arrow", ".parquet", ".lmdb", ".mdb")


def workdir_reads(record: ModeRecord) -> frozenset[str] | None:
    """The files of the working directory the mode's processes opened for reading, where every one
    kept them (ModeOptions.workdir_reads); None where any did not (a record made before they were
    kept, a Python API block)."""
    found: set[str] = set()
    for process in (record, *record.processes.values()):
        read = process.manifest.options.get("workdir_reads")
        if not isinstance(read, list) or not all(isinstance(path, str) for path in read) or len(read) >= WORKDIR_READS_KEPT:
            return None  # not kept, or full: a later read (the checkpoint after a dataset's files) may be missing
        found.update(read)
    return frozenset(found)


def modes_numerics(samples: list[NumericsSample], tol: Tolerance, gradients: dict[str, Any] | None = None,
                   written: dict[str, WrittenFiles] | None = None, compilers: tuple[str, str] = (),
                   against_checks: dict[str, Any] | None = None) -> Numerics:
    """run_numerics on the modes' samples; `written`: record -> the files earlier modes wrote before it
    started (RunMeta.written_before); `against_checks`: ca record -> its gradient check against aot
    (grad_parity.GradParity.against_aot)."""
    reference = _pick_reference(samples)
    shared = tuple(s.record for s in samples if s.params_shared)
    if shared and reference is not None:
        return Numerics(reference.record, tol, shared=shared)
    numerics = compare_samples(samples, reference, tol, gradients)
    differ = {d.record for d in numerics.diffs if not d.agrees}
    aot = next((s for s in samples if base_mode(s.record) == "aot" and s.record in differ), None)
    cas = [s for s in samples if base_mode(s.record) == "ca" and s.record in differ]
    if aot is not None and cas and reference is not None and base_mode(reference.record) == "eager":
        # Both compiled modes differ from eager (from the first step: the compiled forward computes
        # otherwise; later: the compiled program, or eager's run with Dynamo disabled, does): ca
        # against aot, compiled alike, says whether compiled autograd changed anything on top of it.
        against = compare_samples(cas, aot, tol)
        if against.diffs and not against.inputs_differ:
            by_record = {s.record: s for s in cas}
            diffs = tuple(_compilers_rounding(d, by_record[d.record], aot, compilers) for d in against.diffs) if compilers else against.diffs
            diffs = tuple(_too_soon_to_tell(d, by_record[d.record], aot, tol, (against_checks or {}).get(d.record)) for d in diffs)
            numerics = replace(numerics, against_aot=diffs, compilers=compilers)
            # A ca mode that agrees with aot computed what aot did: how to tell Inductor's rounding
            # of its CA graphs from compiled autograd (_inductor_rounding_hint) is answered.
            alike = {d.record for d in against.diffs} - {d.record for d in against.diffs if not d.agrees}
            numerics = replace(numerics, diffs=tuple(replace(d, note="") if d.record in alike and d.parts_growing_from is not None else d
                                                     for d in numerics.diffs))
    fewer = _fewer_steps(samples, reference)
    stepless = tuple(s.record for s in samples if s.record in fewer and not s.losses)
    if not written:
        return replace(numerics, stepless=stepless)
    return replace(numerics, written_before=written, fewer_steps=fewer, stepless=stepless)


def _fewer_steps(samples: list[NumericsSample], reference: NumericsSample | None) -> tuple[str, ...]:
    """The records that ran to their end with fewer steps (losses) than the reference did, none included."""
    if reference is None or not reference.finished or reference.bounded or not reference.losses:
        return ()
    return tuple(s.record for s in samples
                 if s.record != reference.record and s.finished and not s.bounded and len(s.losses) < len(reference.losses))


def numerics_problem(diff: NumericsDiff, tol: Tolerance) -> str:
    """The one-line problem a disagreeing diff is reported as."""
    if diff.quantity == PARAMS_UPDATED:
        return f"numerics: {diff.note}" if diff.note else f"numerics: {diff.record} updated fewer parameters than {diff.reference}"
    where = f" at step {diff.worst_step}" if diff.worst_step is not None else ""
    hint = ""
    within_one_run = " " not in diff.record and " " not in diff.reference  # before/after names are "A ca", "B ca"
    if within_one_run and base_mode(diff.record) == base_mode(diff.reference) and diff.record != diff.reference:
        hint = "; the same mode differs from itself, so the script is not deterministic (seed it with torch.manual_seed)"
    return (
        f"numerics: {diff.quantity} of {diff.record} differs from {diff.reference}{where} by "
        f"{format_rel(diff.max_rel_diff)} relative ({diff.value!r} vs {diff.reference_value!r}; "
        f"tolerance rtol {tol.rtol:g}, atol {tol.atol:g}){hint}"
    )


def format_rel(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == 0:
        return "0"
    if value == float("inf"):
        return "inf"
    return f"{value:.2e}"


@dataclass(frozen=True)
class RankScope:
    """A multi-rank run compared on one rank's records (`focus`): what its other ranks did, for
    the headline. Each mode record's ranks as report.ranks analyses them (the analysis summary,
    compare's rank tables and the gate's ranks checks read), and each rank's figures."""

    focus: int
    analyses: dict[str, Any]  # record name ("ca", "ca.2") -> its ranks (report.ranks.analysis.RankAnalysis)
    metrics: dict[str, dict[int, ModeMetrics]]  # record name -> rank -> that rank's figures

    def record_of(self, column: ModeColumn) -> str | None:
        """The record of `column` whose ranks the headline reads: its first repetition that has them
        (the one its own figures come from)."""
        return next((name for name in column.records if name in self.analyses), None)


def rank_scope(run: RunRecord) -> RankScope | None:
    """The other ranks of a rank's view of a multi-rank run (ranks.focused_run); None for any other run."""
    # Imported here: report.ranks reads compare.closeness, and this package's __init__ imports this module.
    from cagtool.report.ranks.analysis import analyze_ranks, whole_run

    origin = whole_run(run)
    if origin is None:
        return None
    whole, focus = origin
    analyses: dict[str, Any] = {}
    metrics: dict[str, dict[int, ModeMetrics]] = {}
    for name in run.modes:
        record = whole.modes.get(name)
        analysis = analyze_ranks(record) if record is not None else None
        if record is None or analysis is None:
            continue
        analyses[name] = analysis
        metrics[name] = {rank: mode_metrics(rec) for rank, rec in record.ranks().items()}
    return RankScope(focus, analyses, metrics) if analyses else None


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
    grad_parity: Any = None  # grad_parity.GradParity: per-parameter gradients of the modes, compared
    # A multi-rank run compared on one rank's records: its other ranks (None for any other run).
    ranks: RankScope | None = None
    # The mode records during which Inductor's precompiled headers were built (RunMeta.built_headers):
    # their compile time includes that one-time cost.
    built_headers: tuple[str, ...] = ()

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
        if self.grad_parity is not None:
            from cagtool.report.compare.grad_parity import problems as grad_problems

            found.extend(grad_problems(self.grad_parity))
        return found


def _losses_alike(numerics: Numerics, mode: str, baseline: str) -> bool:
    """Whether the two modes' losses agree on the steps both ran: the same course, whatever stopped
    one sooner (a job that trains for a time, not a number of steps)."""
    def with_reference(name: str) -> bool:
        losses = [d for d in numerics.diffs if base_mode(d.record) == name and d.quantity == LOSS]
        return name == numerics.reference or (bool(losses) and all(d.agrees and not d.inputs_differ for d in losses))

    if with_reference(mode) and with_reference(baseline):
        return True
    against = [d for d in numerics.against_aot if d.quantity == LOSS]
    return {mode, baseline} == {"ca", "aot"} and bool(against) and all(d.agrees for d in against)


def own_courses(run: RunRecord, columns: dict[str, ModeColumn]) -> dict[str, int]:
    """mode -> the steps of its first repetition, where it ran the script to its own end: finished
    with exit 0, stopped by no --steps or --max-time bound."""
    found = {}
    for name, column in columns.items():
        record = run.modes.get(column.records[0]) if column.records else None
        metrics = column.metrics
        if record is None or metrics is None or metrics.status != STATUS_FINISHED or metrics.exit_code not in (0, None):
            continue
        options = record.manifest.options if isinstance(record.manifest.options, dict) else {}
        if not options.get("stopped_by"):
            found[name] = metrics.steps
    return found


def compare_modes(run: RunRecord, tolerance: Tolerance | None = None) -> Comparison:
    """The side-by-side comparison of one run's modes."""
    tol = tolerance or Tolerance()
    columns = mode_columns(run)
    speedups = tuple(speedup(columns[m], columns[b]) for m, b in SPEEDUP_PAIRS if m in columns and b in columns)
    differ = compilers_differ(run)
    if differ:
        speedups = tuple(replace(s, compilers=differ) if {s.mode, s.baseline} == {"ca", "aot"} else s for s in speedups)
    from cagtool.report.compare.grad_parity import grad_parity
    parity = grad_parity(run)
    numerics = run_numerics(run, tol, parity)
    parity = parity.naming_resumes(numerics.resumed)
    courses = own_courses(run, columns)
    speedups = tuple(replace(s, courses=(courses[s.baseline], courses[s.mode]))
                     if s.ratio is not None and s.mode in courses and s.baseline in courses and courses[s.mode] != courses[s.baseline]
                     and not _losses_alike(numerics, s.mode, s.baseline) else s for s in speedups)
    return Comparison(
        run_path=run.path,
        target=str(run.meta.target.get("name", "")),
        modes=columns,
        speedups=speedups,
        numerics=numerics,
        options=dict(run.meta.options or {}),
        target_argv=tuple(run.meta.target_argv or ()),
        versions=dict(run.meta.versions or {}),
        machine=dict(run.meta.machine or {}),
        grad_parity=parity,
        ranks=rank_scope(run),
        built_headers=tuple(name for name in run.meta.built_headers or () if name in run.modes),
    )


@dataclass(frozen=True)
class ModeChange:
    """One mode in run A (before) and run B (after)."""

    mode: str
    before: ModeColumn | None
    after: ModeColumn | None
    speedup: Speedup | None  # after over before (> 1: B is faster)
    numerics: tuple[NumericsDiff, ...] = ()  # B's first repetition against A's

    @property
    def processes(self) -> tuple[int, int]:
        """The processes (repetitions) each run holds of the mode: (A, B)."""
        return (len(self.before.records) if self.before else 0, len(self.after.records) if self.after else 0)

    @property
    def deltas(self) -> dict[str, float | int | None]:
        """after - before for each numeric field of `mode_fields` (None when either is missing).
        The steady steps are pooled over a run's processes: where the two runs hold different
        numbers of them, their difference is the processes', so it is None, and
        `steady_steps_per_process` is the difference of each run's steady steps a process."""
        if self.before is None or self.after is None:
            return {}
        a, b = mode_fields(self.before), mode_fields(self.after)
        out: dict[str, float | int | None] = {}
        for key in NUMERIC_FIELDS:
            va, vb = a.get(key), b.get(key)
            out[key] = vb - va if isinstance(va, (int, float)) and isinstance(vb, (int, float)) else None
        ka, kb = self.processes
        if ka != kb and ka and kb and out.get("steady_steps") is not None:
            out["steady_steps"] = None
            out["steady_steps_per_process"] = b["steady_steps"] / kb - a["steady_steps"] / ka
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
            found.append(f"the runs ran different commands: A `{shown_command(a.target_argv)}`, B `{shown_command(b.target_argv)}`")
        for key in ("torch", "python"):
            va, vb = a.versions.get(key), b.versions.get(key)
            if va and vb and va != vb:
                found.append(f"{key} differs: A {va}, B {vb}")
        machine_a = (a.machine.get("hostname"), a.machine.get("cpu_count"), a.machine.get("processor"), a.machine.get("cpu_model"))
        machine_b = (b.machine.get("hostname"), b.machine.get("cpu_count"), b.machine.get("processor"), b.machine.get("cpu_model"))
        if a.machine and b.machine and machine_a != machine_b:
            found.append("the runs were recorded on different machines: their timings do not compare")
        # The gate's reading of the loop: a value no loop gives is refused (compare_runs read it first).
        loop_a, loop_b = reference_loop_of(a.machine, f"run {a.run_path}"), reference_loop_of(b.machine, f"run {b.run_path}")
        if loop_a is not None and loop_b is not None and abs(math.log(loop_b / loop_a)) >= MACHINE_NEGLIGIBLE:
            how = f"{loop_b / loop_a:.2f}x slower" if loop_b > loop_a else f"{loop_a / loop_b:.2f}x faster"
            found.append(f"B's machine ran cagtool's reference loop {how} than A's ({loop_b * 1e3:.2f} ms against {loop_a * 1e3:.2f} ms "
                         "of CPU): the machine alone can make B's timings differ by as much")
        for key in ("backend", "dynamic", "warm_cache"):
            va, vb = a.options.get(key), b.options.get(key)
            if va != vb and (va is not None or vb is not None):
                found.append(f"option {key} differs: A {va}, B {vb}")
        for change in self.changes:
            ka, kb = change.processes
            if ka != kb and ka and kb:
                # Pooled over each run's processes, the steady steps of 3 against 1 read as steps lost.
                found.append(f"{change.mode}: A ran it in {ka} process{'es' if ka != 1 else ''}, B in {kb}: the steady steps row "
                             "pools each run's processes, and its change is per process")
            s = change.speedup
            if s is not None and s.ratio is not None and s.left_out and change.before is not None and change.after is not None:
                # Each run's median is over its own steady steps, the ratio over the steps both
                # timed: read together without this, a lower median beside 1.00x looks contradictory.
                found.append(f"{change.mode}: the speedup is over the {min(s.steady_steps)} steps steady in both runs "
                             f"(left out: {steps_words(s.left_out)}); the step time rows are over each run's own steady steps "
                             f"(A: {change.before.step_time.count}, B: {change.after.step_time.count})")
        return found

    @property
    def problems(self) -> list[str]:
        found = [f"A: {p}" for p in self.before.failure_problems]
        found += [f"B: {p}" for p in self.after.failure_problems]
        for change in self.changes:
            for diff in change.numerics:
                if not diff.agrees and not diff.inputs_differ:
                    found.append(numerics_problem(diff, self.tolerance))
        return found


def compare_runs(run_a: RunRecord, run_b: RunRecord, tolerance: Tolerance | None = None) -> RunComparison:
    """Run A (before) against run B (after), mode by mode."""
    tol = tolerance or Tolerance()
    for run in (run_a, run_b):  # refused as the gate refuses it (exit 3), before any figure is rendered
        reference_loop_of(run.meta.machine, f"run {run.path}")
    before, after = compare_modes(run_a, tol), compare_modes(run_b, tol)
    names = list(before.modes) + [m for m in after.modes if m not in before.modes]
    changes = []
    for name in names:
        a, b = before.modes.get(name), after.modes.get(name)
        change_speedup = speedup(b, a, f"B {name}", f"A {name}", paired=False) if a is not None and b is not None else None
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
