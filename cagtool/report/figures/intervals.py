"""Timing verdicts with the process as the unit of evidence.

Every timing verdict (compare's speedups, `gate --min-speedup`, `--max-regression`,
`--max-compile-regression`, `recompiles --verify`'s time column, the HTML verdict) rests on one
interval: that of the ratio of a figure between two sides, where each side's evidence is its
**processes**. A process's steps share its state (its memory layout, its compile, the machine's
load while it ran): steps of one process vary less than processes do, so an interval made of one
process's steps claims a precision that the next run contradicts (two identical runs read 1.46x
and 0.25x). Each process therefore contributes one figure per statistic (the median, mean, p10
or p90 of its steady steps, or its compile time), and the interval is built from those figures:

- **Paired blocks** (the modes of one `run --repeat K`, each block one process per mode in a
  shuffled order): the ratio in each block, and the distribution-free interval of their median
  from the sign test's order statistics. It reaches 90% from `MIN_SIGN_BLOCKS` blocks (5: the
  extreme ratios cover 93.75%).
- **Two independent sides with three or more processes each** (a run against a baseline, two
  runs): the Hodges-Lehmann interval of the shift of the log figures (Mann-Whitney's exact null
  distribution; 3 against 3 is exactly 90%).
- **Fewer processes**: the prediction interval d -/+ t * s * sqrt(1/k_top + 1/k_bottom) of the
  log figures, with s the run-to-run noise measured from the processes of a side with three or
  more of them (pooled, Student's t on its degrees of freedom), or, where no side has that many,
  `ASSUMED_NOISE` for the measure (the noise this VM showed between processes beside a CPU-bound
  neighbour, benchmarks/README.md), and the verdict says the noise was assumed, not measured.
  One run a side then fails a slowdown of 2.0x in CPU time or 2.9x in wall time at a 10% threshold
  (2.2x / 3.3x at 25%), never a 5% one.
- **A process far from its side's others** (OUTLIER_NOISES assumed noises from the side's
  median; one beside heavy load reads 10-50x): set apart and named. A standard deviation would
  be the distance to it (a t interval of 1e-5x..1e5x), so the interval is that of the processes
  that agree, stretched to the ratio the set-apart one reads: a verdict holds on both or is none.

The figure. For a CPU job whose steps are CPU-bound on both sides (the median process's CPU time
per step at least `CPU_BOUND_SHARE` of its wall time less its wait for a CPU, every process's at
least `CPU_BOUND_FLOOR`) and spent on one thread (the process's CPU time per step at most
`ONE_THREAD_CPU` times the training thread's) the figure is the
process's **CPU time per step**: the machine's other load moves it less than the wall time
(benchmarks/README.md). Where a side spends its steps off the CPU (sleeping, reading data, a
device), CPU time does not see that time, and the figure is the wall time (device time on CUDA).
So is it where a side's steps burn CPU in several threads (torch's intra-op pool): a pool's
threads spin at each parallel region until the slowest arrives, so a neighbour that delays one
thread makes the others burn CPU: a Lightning job's 2-thread eager steps read 185 ms of CPU time
beside another job against 5.5 ms alone (2.1 ms of wall time), where one thread's CPU time moved
1.2-1.3x (benchmarks/README.md). Each interval names its measure.

The outcome of a check on an interval is one of: beyond the bound, clear of it, or
**inconclusive** (the interval contains the bound). An inconclusive result says how many
processes a side would resolve it (`processes_needed`), or that none would within reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any, Sequence

CONFIDENCE = 0.90
POWER = 0.80  # what `processes_needed` plans for: an inconclusive result resolved 4 times in 5
# Step-time statistics a check can hold to a threshold.
FIELDS = ("median", "mean", "p10", "p90")
# Paired blocks for a distribution-free interval at CONFIDENCE: with 5, the extreme block ratios
# cover 1 - 2 / 2**5 = 93.75%; with 4, 87.5%.
MIN_SIGN_BLOCKS = 5
# Processes a side for the rank interval (3 against 3: the extreme differences, exactly 90%), and
# for a side's spread to count as measured run-to-run noise.
MIN_RANK_UNITS = 3
# The run-to-run noise (standard deviation of the log of one process's figure) assumed where no
# side measured it, from real processes on this 2-core VM beside a CPU-bound neighbour and
# another test suite (load 2-4; benchmarks/README.md): 20 processes of sample_scripts/mlp_steps.py
# read 0.414 in wall time and 0.171 in CPU time (benchmarks/process_noise.py), and the ca/aot CPU
# ratio of 10 runs of one process per mode spread as 0.31 a ratio, 0.22 a process, in two clusters
# (benchmarks/replication.py): CPU time is taken at 0.25. A device clock as CPU time (no load moves
# a kernel's duration more). Compile time: one figure per process.
ASSUMED_NOISE = {"cpu": 0.25, "wall": 0.42, "device": 0.25, "compile": 0.25, "unwaited": 0.42}
# No interval is narrower than this noise a process (0.5%): identical figures are a coincidence
# of rounding or of very few steps, not a measurement of no noise.
NOISE_FLOOR = 0.005
# A process is CPU-bound when its training loop's thread's CPU time per step is at least this
# share of the step's wall time less its wait for a CPU: what CPU time cannot see (sleep, I/O, a
# device) is then at most a tenth of a step.
CPU_BOUND_SHARE = 0.9
# ... judged on the side's median process; each process at least this share. One process's share
# is an estimate (its wait comes from readings twice a second), and an unchanged CPU-bound job's
# process read 0.898 beside a busy runner, which sent a whole 5-process side, and every gate
# against it, to wall time, where a 2x CPU regression read +11.5%. A step that sleeps or reads
# data for a real share of its time reads far below either bound.
CPU_BOUND_FLOOR = 0.75
# ... and spent on one thread: the process's CPU time per step at most this many times the training
# loop's thread's (the median process's). An intra-op pool that computes in parallel reads 2-3x
# (2.6x: a 784-64-64-10 MLP with two threads, quiet); cagtool's own threads and a data loader's
# pinning thread add a few percent.
ONE_THREAD_CPU = 1.25
# Beyond this many processes a side, an inconclusive result "cannot be resolved" rather than
# asking for a number no one will run.
MAX_PROCESSES_ADVISED = 60
# A process whose log figure lies farther than this many times the assumed run-to-run noise
# (ASSUMED_NOISE, the largest this VM showed between processes beside a CPU-bound neighbour) from
# its side's median ran under other conditions than the rest (a process beside heavy load read
# 10-50x): 4 of that noise is 5.4x on wall time, 2.7x on CPU, device or compile time. A normal
# spread of that noise (itself the worst seen) puts a process that far from its side's median in
# about 1 side in 1,000, of 3 to 10 processes (simulated, 2e6 sides). Only a minority of a side
# of MIN_RANK_UNITS or more is set apart: a side that disagrees with itself is noise, not one process.
OUTLIER_NOISES = 4.0


# The processes' own figures' uncertainty (RatioInterval.own) is said beside the assumed noise
# where it is at least this share of the assumed part of the interval.
OWN_NOISE_SAID = 0.5

MEASURE_WORDS = {"cpu": "CPU time per step", "wall": "wall time per step", "device": "device time per step", "compile": "compile time",
                 "unwaited": "wall time per step less its waits for a CPU"}
# The statistics a side keeps of its wall time less its waits for a CPU ("unwaited": each step's
# wall x (1 - its share waited), report/figures/metrics.py step_waits). The shares come from
# readings every half second, spread over the steps between them: a sum over the steps keeps
# what they waited, so the mean is exact, while a quantile is not (a burst of load lands on a
# few steps, its wait on all of them).
UNWAITED_FIELDS = ("mean",)


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile, P(T <= x) = p (Hill 1970, CACM Algorithm 396): within 1e-4 relative
    of scipy.stats.t.ppf for df = 1, 2 and every real df >= 2, pinned by a test. Between 1 and 2
    the algorithm is off by up to 4%, so df is taken down to 1 there: a wider, never a narrower,
    interval. Hand-written because `import scipy.special` alone costs 0.6 s of CPU, more than the
    whole `gate` command on a 20,000-step record (benchmarks/README.md)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if math.isinf(df) or df > 1e7:
        return NormalDist().inv_cdf(p)
    n = float(df) if df >= 2.0 else 1.0
    if p == 0.5:
        return 0.0
    two_tail = 2.0 * min(p, 1.0 - p)
    sign = 1.0 if p > 0.5 else -1.0
    if n == 1.0:
        x = 1.0 / math.tan(two_tail * math.pi / 2.0)
        return sign * x
    if n == 2.0:
        return sign * math.sqrt(2.0 / (two_tail * (2.0 - two_tail)) - 2.0)
    a = 1.0 / (n - 0.5)
    b = 48.0 / (a * a)
    c = ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36
    d = ((94.5 / (b + c) - 3.0) / b + 1.0) * math.sqrt(a * math.pi / 2.0) * n
    x = d * two_tail
    y = x ** (2.0 / n)
    if y > 0.05 + a:
        x = NormalDist().inv_cdf(two_tail * 0.5)
        y = x * x
        if n < 5.0:
            c += 0.3 * (n - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x
        y = math.expm1(a * y * y)
    else:
        y = ((1.0 / (((n + 6.0) / (n * y) - 0.089 * d - 0.822) * (n + 2.0) * 3.0) + 0.5 / (n + 4.0)) * y - 1.0) * (n + 1.0) / (n + 2.0) + 1.0 / y
    return sign * math.sqrt(n * y)


def statistic(values: Sequence[float], field_name: str) -> float:
    import numpy as np

    array = np.asarray(values, dtype=float)
    if field_name == "median":
        return float(np.median(array))
    if field_name == "mean":
        return float(array.mean())
    if field_name in ("p10", "p90"):
        return float(np.percentile(array, 10.0 if field_name == "p10" else 90.0))
    raise ValueError(f"unknown statistic {field_name!r}")


@dataclass(frozen=True)
class ProcessSteps:
    """One process's steady steps, as `timing_sample` needs them: its block (the repetition it
    ran in), its wall (or device) times and CPU times in step order (None where not recorded),
    and each step's share of waiting for a CPU (None where not measured)."""

    block: int
    times: Sequence[float]
    cpu: Sequence[float] | None = None  # the process's CPU time per step (all its threads)
    wait_share: Sequence[float] | None = None
    thread_cpu: Sequence[float] | None = None  # the training loop's thread's CPU time per step
    untimed: int = 0  # steady steps left out because a time recorded for them is no time (metrics.is_time)
    steps: Sequence[int] | None = None  # the step number of each time (None: not known), what two modes' steps are paired by


@dataclass(frozen=True)
class TimingSample:
    """One side of a comparison: per statistic, the figure of each of its processes (its units),
    on the wall (or device) clock and, where every process recorded it, in CPU time. This is what
    a baseline file keeps of the step times."""

    count: int  # steady steps, all processes
    repetitions: int  # processes
    unit: str  # "process" ("batch" / "repetition" in baselines of an older cagtool: not comparable)
    values: dict[str, float]  # statistic -> the median of the processes' figures (wall or device clock)
    units: dict[str, tuple[float, ...]]  # statistic -> each process's figure (wall or device clock)
    cpu_units: dict[str, tuple[float, ...]] = field(default_factory=dict)  # the same in CPU time; empty where not recorded
    cpu_bound: bool = False  # the processes spent their steps on the CPU (CPU_BOUND_SHARE, CPU_BOUND_FLOOR)
    blocks: tuple[int, ...] = ()  # each process's block (repetition), for pairing
    clock: str = "wall"  # "wall" | "device": the clock of `values` and `units`
    # Processes of the side that gave no figure, or figures without some of their steps: (block,
    # why). A check on such a side is an error that names them: a process lost unsaid would leave
    # a side that passes on fewer processes than it ran. Never in a baseline file (not saved).
    left_out: tuple[tuple[int, str], ...] = ()
    # How uncertain each process's own figure is from its steps (`own_noises`: the standard deviation
    # of the log figure, per statistic, aligned with `units` / `cpu_units`): few steps spread widely
    # (a step that waits for DataLoader workers or not) leave a process's median itself unsettled.
    # Empty where not known (a baseline file keeps the figures only): taken as 0.
    unit_noise: dict[str, tuple[float, ...]] = field(default_factory=dict)
    cpu_unit_noise: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # The wall clock's figures less each step's wait for a CPU (UNWAITED_FIELDS), where every
    # process has its steps' waits: what a step spent running or off the CPU by the job's own
    # doing (a sleep, I/O, a lock), the machine's run queue left out. Empty where not measured.
    unwaited_units: dict[str, tuple[float, ...]] = field(default_factory=dict)
    unwaited_unit_noise: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def per_process(self, measure: str, field_name: str) -> tuple[float, ...]:
        """Each process's figure on `measure`, in process order (aligned with `blocks`)."""
        held = self.cpu_units if measure == "cpu" else self.unwaited_units if measure == "unwaited" else self.units
        return held.get(field_name, ())

    def process_noise(self, measure: str, field_name: str) -> tuple[float, ...]:
        """Each process's own noise on `measure` (aligned with `per_process`; 0 where not known)."""
        held = self.cpu_unit_noise if measure == "cpu" else self.unwaited_unit_noise if measure == "unwaited" else self.unit_noise
        noise = held.get(field_name, ())
        return noise if len(noise) == len(self.per_process(measure, field_name)) else (0.0,) * len(self.per_process(measure, field_name))

    def own_noise(self, measure: str, field_name: str) -> tuple[float, ...]:
        """Each process's own noise (`own_noises`) on `measure` for the processes `figures` keeps (0 where not known)."""
        noise = self.process_noise(measure, field_name)
        figures = self.per_process(measure, field_name)
        if len(noise) != len(figures):
            noise = (0.0,) * len(figures)
        return tuple(n for v, n in zip(figures, noise) if v > 0)

    def figures(self, measure: str, field_name: str) -> tuple[float, ...]:
        return tuple(v for v in self.per_process(measure, field_name) if v > 0)


def median_of(values: Sequence[float]) -> float:
    ordered = sorted(values)
    k = len(ordered)
    return ordered[k // 2] if k % 2 else (ordered[k // 2 - 1] + ordered[k // 2]) / 2.0


def _cpu_share(process: ProcessSteps) -> float | None:
    """The training loop's thread's median CPU time per step over the median of the steps' wall
    times less their wait for a CPU: how much of a step it spent on the CPU. A step that sleeps,
    reads data or waits for a device spends that time off the CPU, where CPU time cannot see it.
    None without the figures."""
    import numpy as np

    if process.cpu is None or process.thread_cpu is None or len(process.thread_cpu) != len(process.times):
        return None
    wall = np.asarray(process.times, dtype=float)
    if process.wait_share is not None and len(process.wait_share) == len(wall):
        wall = wall * (1.0 - np.asarray(process.wait_share, dtype=float))
    on_wall = float(np.median(wall))
    return float(np.median(np.asarray(process.thread_cpu, dtype=float))) / on_wall if on_wall > 0 else None


def _threads_cpu(process: ProcessSteps) -> float | None:
    """The process's median CPU time per step over its training loop's thread's: 1.0 where one
    thread did the step's work, 2-3 where an intra-op pool did. None without the figures."""
    if process.cpu is None or process.thread_cpu is None or not len(process.thread_cpu):
        return None
    thread = median_of(list(process.thread_cpu))
    return median_of(list(process.cpu)) / thread if thread > 0 else None


def _cpu_bound(processes: Sequence[ProcessSteps]) -> bool:
    """Whether a side's processes spent their steps on the CPU of one thread: the median process's
    share at least CPU_BOUND_SHARE, every process's at least CPU_BOUND_FLOOR, and the median
    process's CPU time at most ONE_THREAD_CPU times its training thread's (the module docstring)."""
    shares = [_cpu_share(p) for p in processes]
    if not shares or any(s is None for s in shares):
        return False
    threads = [_threads_cpu(p) for p in processes]
    if any(t is None for t in threads) or median_of(threads) > ONE_THREAD_CPU:  # type: ignore[arg-type]
        return False
    return median_of(shares) >= CPU_BOUND_SHARE and min(shares) >= CPU_BOUND_FLOOR  # type: ignore[type-var]


def own_noises(values: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, float]:
    """For each statistic in FIELDS (the steps sorted once): how uncertain one process's figure is
    from its own steps, the standard deviation of the log figure. For a quantile (median, p10,
    p90), from the distribution-free interval of its order statistics (the normal approximation of
    the binomial ranks; half its log width over z); for the mean, its standard error. 0 where it
    cannot be said (fewer than two positive steps). Steps of one process vary less than processes
    do, so for the many tight steps of a CPU-bound job it is near 0; a handful of steps of which
    some wait for data and some do not makes it large."""
    import numpy as np

    array = np.asarray(values, dtype=float)
    array = np.sort(array[array > 0])
    return {name: _own_noise_sorted(array, name, confidence) for name in FIELDS}


def _own_noise_sorted(array: Any, field_name: str, confidence: float) -> float:
    n = len(array)
    if n < 2:
        return 0.0
    if field_name == "mean":
        mean = float(array.mean())
        return float(array.std(ddof=1)) / (mean * math.sqrt(n)) if mean > 0 else 0.0
    q = {"median": 0.5, "p10": 0.1, "p90": 0.9}[field_name]
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    half = z * math.sqrt(n * q * (1.0 - q))
    low, high = max(0, math.floor(n * q - half) - 1), min(n - 1, math.ceil(n * q + half) - 1)
    return (math.log(array[high]) - math.log(array[low])) / (2.0 * z)


def timing_sample(processes: Sequence[ProcessSteps], clock: str = "wall") -> TimingSample | None:
    """The sample of one side from its processes' steady steps. None without a step."""
    kept = [p for p in processes if len(p.times) > 0]
    left_out = tuple((p.block, _why_left_out(p)) for p in processes if p.untimed or not len(p.times))
    if not kept:
        return None
    units = {name: tuple(statistic(p.times, name) for p in kept) for name in FIELDS}
    with_cpu = all(p.cpu is not None and len(p.cpu) == len(p.times) for p in kept)
    cpu_units = {name: tuple(statistic(p.cpu, name) for p in kept) for name in FIELDS} if with_cpu else {}  # type: ignore[arg-type]
    wall_noises = [own_noises(p.times) for p in kept]
    cpu_noises = [own_noises(p.cpu) for p in kept] if with_cpu else []  # type: ignore[arg-type]
    unit_noise = {name: tuple(n[name] for n in wall_noises) for name in FIELDS}
    cpu_unit_noise = {name: tuple(n[name] for n in cpu_noises) for name in FIELDS} if with_cpu else {}
    unwaited = _unwaited(kept)
    unwaited_noises = [own_noises(u) for u in unwaited] if unwaited else []
    return TimingSample(
        count=sum(len(p.times) for p in kept),
        repetitions=len(kept),
        unit="process",
        values={name: median_of(figures) for name, figures in units.items()},
        units=units,
        cpu_units=cpu_units,
        cpu_bound=with_cpu and _cpu_bound(kept),
        blocks=tuple(p.block for p in kept),
        clock=clock,
        left_out=left_out,
        unit_noise=unit_noise,
        cpu_unit_noise=cpu_unit_noise,
        unwaited_units={name: tuple(statistic(u, name) for u in unwaited) for name in UNWAITED_FIELDS} if unwaited else {},
        unwaited_unit_noise={name: tuple(n[name] for n in unwaited_noises) for name in UNWAITED_FIELDS} if unwaited else {},
    )


def _unwaited(processes: Sequence[ProcessSteps]) -> list[Any]:
    """Each process's steps' wall times less their waits for a CPU (numpy arrays), where every
    process has its steps' waits; [] otherwise."""
    import numpy as np

    if not processes or any(p.wait_share is None or len(p.wait_share) != len(p.times) for p in processes):
        return []
    return [np.asarray(p.times, dtype=float) * (1.0 - np.clip(np.asarray(p.wait_share, dtype=float), 0.0, 1.0)) for p in processes]


def _why_left_out(process: ProcessSteps) -> str:
    if process.untimed:
        return (f"{process.untimed} of its steady steps have a recorded time (wall, CPU or device) that is no time (NaN, negative, or 1e9 s and more: "
                "a damaged or forged record) and were left out")
    return "it has no steady step with a time (every step compiled, or none was timed)"


def zero_figures(sample: TimingSample, measure: str, field_name: str) -> tuple[int, ...]:
    """The blocks of the processes whose figure is 0 s (or none) on `measure`: no ratio is formed
    from them. A clock coarser than the steps reads a step as 0 s; where it reads a tenth of them
    so, the p10 is 0."""
    return tuple(b for b, v in zip(sample.blocks, sample.per_process(measure, field_name)) if not v > 0)


def left_out_words(sides: list[tuple[str, TimingSample]], field_name: str,
                   advice: str = "gate another statistic, or time more work a step") -> str:
    """The processes a timing check cannot count, named with why ("" when none): one left out of
    its side's figures (steps that are no time, or no steady step), or whose figure is 0 s on a
    measure the check reads (no ratio is formed from it). The check is then an ERROR: a process
    lost unsaid would let a side pass on fewer processes than it ran (gate); compare forms no
    ratio from such a side and says why."""
    found = []
    for side, sample in sides:
        found += [f"process {block} of {side}: {why}" for block, why in sample.left_out]
        measures = ("wall", "cpu") if sample.cpu_units else ("wall",)
        zero = sorted({b for m in measures for b in zero_figures(sample, m, field_name)})
        found += [f"process {b} of {side}: its {field_name} step time is 0 s (a clock coarser than its steps), no ratio can be formed "
                  f"from it: {advice}" for b in zero]
    return "; ".join(found)


def compile_sample(samples: Sequence[float | None], blocks: Sequence[int] = ()) -> TimingSample | None:
    """Compile times, one per process: each process is a unit."""
    kept = [(float(s), b) for s, b in zip(samples, blocks or range(1, len(samples) + 1)) if s is not None and s > 0]
    if not kept:
        return None
    figures = tuple(s for s, _ in kept)
    return TimingSample(len(kept), len(kept), "process", {"total": median_of(figures)}, {"total": figures}, blocks=tuple(b for _, b in kept), clock="compile")


def measure_of(top: TimingSample, bottom: TimingSample) -> str:
    """The figure two sides are compared on: CPU time where both recorded it and both spent their
    steps on the CPU, else the sides' clock (device when both timed steps on the device)."""
    if top.clock == "compile" or bottom.clock == "compile":
        return "compile"
    if top.cpu_units and bottom.cpu_units and top.cpu_bound and bottom.cpu_bound and top.clock == bottom.clock == "wall":
        return "cpu"
    return "device" if top.clock == bottom.clock == "device" else "wall"


@dataclass(frozen=True)
class Outlier:
    """A process set apart from its side (`_set_apart`)."""

    side: str  # "top" | "bottom": the side of the ratio it is on; "block": a block of modes of one run, both its processes
    index: int  # its place among the side's figures, from 0
    process: int  # its block (the repetition it ran in), or its place on the side from 1
    factor: float  # its figure over the median of the side's other processes' figures


def _set_apart(logs: Sequence[float], blocks: Sequence[int], side: str, measure: str, scale: float = 1.0) -> tuple[Outlier, ...]:
    """The processes of a side whose log figure lies more than OUTLIER_NOISES assumed noises from
    the side's median, when they are fewer than half of a side of MIN_RANK_UNITS or more. `scale`:
    the noise of one of `logs` in assumed noises of a process (a ratio of two processes: sqrt 2)."""
    if len(logs) < MIN_RANK_UNITS:
        return ()
    centre = median_of(logs)
    bound = OUTLIER_NOISES * ASSUMED_NOISE.get(measure, ASSUMED_NOISE["wall"]) * scale
    far = [i for i, v in enumerate(logs) if abs(v - centre) > bound]
    if not far or 2 * len(far) >= len(logs):
        return ()
    found = []
    for i in far:
        others = median_of([v for j, v in enumerate(logs) if j != i])
        found.append(Outlier(side, i, blocks[i] if len(blocks) == len(logs) else i + 1, math.exp(logs[i] - others)))
    return tuple(found)


@dataclass(frozen=True)
class RatioInterval:
    """top / bottom of one figure, with its two-sided CONFIDENCE interval (see the module docstring)."""

    ratio: float
    low: float
    high: float
    units: tuple[int, int]  # processes (or blocks, when paired) on each side
    measure: str  # "cpu" | "wall" | "device" | "compile"
    method: str  # "sign" (paired blocks) | "rank" (Hodges-Lehmann) | "t" (measured noise) | "assumed" (noise not measured)
    noise: float  # run-to-run noise: standard deviation of the log figure of one process (of a block's log ratio when paired)
    noise_df: float  # its degrees of freedom (inf when assumed)
    confidence: float = CONFIDENCE
    unit: str = "process"
    # With the assumed noise: the processes at hand showed a larger spread than assumed, too few
    # of them to rest on, and the interval uses theirs.
    seen: bool = False
    # The sides are modes of one run whose processes share blocks: more evidence is more blocks
    # (`run --repeat N`), judged by the sign interval from MIN_SIGN_BLOCKS.
    in_blocks: bool = False
    # Processes set apart from their side (OUTLIER_NOISES): except for the rank interval, `units`
    # then counts the processes that agree, and [low, high] is theirs stretched to what each
    # set-apart process reads (ratio_interval).
    outliers: tuple[Outlier, ...] = ()
    # What `noise` is of the few processes' own spread (t intervals: their sd taken at its 75 % upper
    # bound, _sd_upper_factor); 1 where it is the spread itself.
    noise_factor: float = 1.0
    # With the assumed noise: the standard deviation of the log ratio that the processes' own
    # figures add (own_noises: few, widely spread steps), 0 where they add nothing known.
    own: float = 0.0

    @property
    def stretched(self) -> bool:
        """Whether processes set apart decide the interval's width (every method but the rank
        interval's, which keeps its own): then a rerun resolves it, not more processes."""
        return bool(self.outliers) and self.method != "rank"

    @property
    def measured(self) -> bool:
        """Whether the run-to-run noise was measured (three or more processes a side, or paired blocks)."""
        return self.method != "assumed"

    @property
    def paired(self) -> bool:
        return self.method == "sign"

    @property
    def spread(self) -> float:
        """The A/A noise: how far apart two processes of the same job land 90% of the time, as a
        relative figure (0.12: +/-12%)."""
        pair = self.noise if self.paired else self.noise * math.sqrt(2.0)
        return math.expm1(NormalDist().inv_cdf(0.95) * pair)

    @property
    def seen_spread(self) -> float:
        """`spread` as the processes themselves showed it (before a t interval takes their noise at
        its upper bound): what `baseline save` reports of the same processes."""
        pair = self.noise if self.paired else self.noise * math.sqrt(2.0)
        return math.expm1(NormalDist().inv_cdf(0.95) * pair / self.noise_factor)

    def processes_needed(self, distance: float) -> int | None:
        """Processes a side (blocks, when paired) for an interval of this noise to clear a bound
        `distance` away (log) from the ratio with probability POWER; None when more than
        MAX_PROCESSES_ADVISED would be needed (the difference is too close to the bound)."""
        if distance <= 0 or not math.isfinite(distance):
            return None
        z = NormalDist().inv_cdf(1.0 - (1.0 - self.confidence) / 2.0) + NormalDist().inv_cdf(POWER)
        noise = self.noise
        if self.own and self.units and min(self.units) > 0:
            # Each process's own figure's uncertainty (`own`: of the ratio at hand, sum(se^2)/k^2 a
            # side) shrinks with more processes as their spread does: per process it is
            # own^2 / (1/k_top + 1/k_bottom), added to the noise between processes.
            a, b = self.units
            noise = math.sqrt(noise ** 2 + self.own ** 2 / (1.0 / a + 1.0 / b))
        if self.paired or self.in_blocks:
            # The sign interval's efficiency against the mean on normal data is 2/pi.
            n = (z * noise / distance) ** 2 * math.pi / 2.0
            floor = MIN_SIGN_BLOCKS
        else:
            n = 2.0 * (z * noise / distance) ** 2
            floor = MIN_RANK_UNITS
        needed = max(floor, math.ceil(n))
        # Never what is at hand already: it did not resolve it. Paired blocks' sign interval is the
        # blocks' extremes up to 7 blocks (90%): from 8 it leaves the outermost out.
        have = min(self.units) if self.units else 0
        if needed <= have:
            needed = max(have + 1, 8 if (self.paired or self.in_blocks) else have + 1)
        return needed if needed <= MAX_PROCESSES_ADVISED else None


def _sd_upper_factor(df: float, confidence: float) -> float:
    """sqrt(df / chi2_(1-confidence)(df)): how much a standard deviation estimated with `df`
    degrees of freedom may be under the true one, at `confidence` (Wilson-Hilferty's chi-square
    quantile, within 1% of the exact one from df = 2)."""
    if not math.isfinite(df) or df <= 0:
        return 1.0
    z = NormalDist().inv_cdf(1.0 - confidence)
    term = 2.0 / (9.0 * df)
    quantile = df * max(1.0 - term + z * math.sqrt(term), 1e-3) ** 3
    return math.sqrt(df / quantile)


def mean_var(values: Sequence[float]) -> tuple[float, float]:
    k = len(values)
    mean = sum(values) / k
    return mean, (sum((v - mean) ** 2 for v in values) / (k - 1) if k > 1 else math.nan)


_RANK_CUTS: dict[tuple[int, int, float], int] = {}


def _gaussian_binomial(m: int, n: int) -> list[int]:
    """Coefficients of the Gaussian binomial [m+n choose m]_q: entry u is the number of orderings
    of m + n distinct values in which the Mann-Whitney U of the m is u (0 <= u <= m * n)."""
    poly = [1]
    for i in range(1, m + 1):
        grown = poly + [0] * (n + i)
        for u in range(len(poly) - 1, -1, -1):
            grown[u + n + i] -= poly[u]
        for u in range(i, len(grown)):
            grown[u] += grown[u - i]
        poly = grown[: len(grown) - i]
    return poly


def rank_cut(m: int, n: int, confidence: float = CONFIDENCE) -> int:
    """How many of the m * n pairwise differences to leave out at each end for a two-sided
    `confidence` interval of a shift (Hodges-Lehmann; Mann-Whitney's exact null distribution):
    the largest k with P(U <= k - 1) <= (1 - confidence) / 2. 0 when no k reaches it."""
    key = (min(m, n), max(m, n), confidence)
    if key not in _RANK_CUTS:
        counts = _gaussian_binomial(*key[:2])
        total = sum(counts)
        tail = (1.0 - confidence) / 2.0
        k, below = 0, 0
        while k < len(counts) and (below + counts[k]) / total <= tail * (1.0 + 1e-9):
            below += counts[k]
            k += 1
        _RANK_CUTS[key] = k
    return _RANK_CUTS[key]


def sign_cut(n: int, confidence: float = CONFIDENCE) -> int:
    """For n paired ratios, the order statistic j (1-based) such that [x_(j), x_(n+1-j)] covers
    their median with at least `confidence` (the sign test: P(Binomial(n, 1/2) < j) <= the tail);
    0 when n is too small for any."""
    tail = (1.0 - confidence) / 2.0
    j, below = 0, 0.0
    while j < n // 2:
        mass = math.comb(n, j) / 2.0**n
        if below + mass > tail * (1.0 + 1e-9):
            break
        below += mass
        j += 1
    return j


def _pooled_noise(sides: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """(sd, df) of the log figures pooled over the sides with MIN_RANK_UNITS or more processes;
    None when no side has that many."""
    num, df = 0.0, 0
    for logs in sides:
        if len(logs) >= MIN_RANK_UNITS:
            _, var = mean_var(logs)
            num += var * (len(logs) - 1)
            df += len(logs) - 1
    if df == 0:
        return None
    return max(math.sqrt(num / df), NOISE_FLOOR), float(df)


def paired_ratios(top: TimingSample, bottom: TimingSample, measure: str, field_name: str) -> list[float]:
    """top / bottom in each block both sides ran a process in (the modes of one `run --repeat`)."""
    return [r for _, r in _block_ratios(top, bottom, measure, field_name)]


def _block_ratios(top: TimingSample, bottom: TimingSample, measure: str, field_name: str) -> list[tuple[int, float]]:
    a = dict(zip(top.blocks, top.per_process(measure, field_name)))
    b = dict(zip(bottom.blocks, bottom.per_process(measure, field_name)))
    return [(k, a[k] / b[k]) for k in sorted(a.keys() & b.keys()) if a[k] > 0 and b[k] > 0]


def ratio_interval(top: TimingSample, bottom: TimingSample, field_name: str, paired: bool = False, confidence: float = CONFIDENCE,
                   measure: str | None = None) -> RatioInterval | None:
    """The interval of top/bottom for `field_name` (see the module docstring). `paired`: the two
    sides are modes of one run, their processes in shared blocks. `measure`: the figure to compare
    on (default `measure_of`; "wall" asks for the sides' own clock). None when a side has no figure."""
    if measure is None:
        measure = measure_of(top, bottom)
    elif measure == "wall" and top.clock == bottom.clock == "device":
        measure = "device"
    la = [math.log(v) for v in top.figures(measure, field_name)]
    lb = [math.log(v) for v in bottom.figures(measure, field_name)]
    if not la or not lb:
        return None
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    if paired:
        logs = sorted(math.log(r) for r in paired_ratios(top, bottom, measure, field_name))
        j = sign_cut(len(logs), confidence)
        if j >= 1 and len(logs) >= MIN_SIGN_BLOCKS:
            _, var = mean_var(logs)
            centre = median_of(logs)
            low, high = min(logs[j - 1], centre), max(logs[len(logs) - j], centre)
            noise = max(math.sqrt(var), NOISE_FLOOR)
            if high - low < 2.0 * z * NOISE_FLOOR / math.sqrt(len(logs)):
                low, high = centre - z * NOISE_FLOOR, centre + z * NOISE_FLOOR
            return RatioInterval(math.exp(centre), math.exp(low), math.exp(high), (len(logs), len(logs)), measure, "sign", noise, float(len(logs) - 1), confidence, in_blocks=True)
    pairs = _block_ratios(top, bottom, measure, field_name) if paired else []
    blocks = [math.log(r) for _, r in pairs]
    if paired:
        # Fewer blocks than the sign interval needs: one block whose ratio lies far from the
        # others' (both its processes ran under other conditions than the rest's) is set apart as
        # a process of an independent side is; a ratio of two processes has sqrt(2) their noise.
        return _odd_blocks_apart(top, bottom, measure, field_name, confidence, pairs,
                                 _set_apart(blocks, [k for k, _ in pairs], "block", measure, math.sqrt(2.0)))
    na, nb = top.own_noise(measure, field_name), bottom.own_noise(measure, field_name)
    apart = _set_apart(la, top.blocks, "top", measure) + _set_apart(lb, bottom.blocks, "bottom", measure)
    whole = _independent(la, lb, measure, confidence, paired, blocks, (na, nb))
    if not apart:
        return whole
    if whole.method == "rank":
        # Ranks bound the interval by the figures themselves: the odd process widens it to its own
        # reading at most, a real figure. Kept, and the process named.
        return replace(whole, outliers=apart)
    # A standard deviation is no measure of noise when one process is far from the rest: it is
    # the distance to that process, and the interval it makes reaches 1e-5x..1e5x. The interval of
    # the processes that agree, stretched to the ratio each set-apart one reads against the other
    # side: a verdict stands only when it holds on both readings.
    apart_top = {o.index for o in apart if o.side == "top"}
    apart_bottom = {o.index for o in apart if o.side == "bottom"}
    kept_top = [v for i, v in enumerate(la) if i not in apart_top]
    kept_bottom = [v for i, v in enumerate(lb) if i not in apart_bottom]
    own = ([v for i, v in enumerate(na) if i not in apart_top], [v for i, v in enumerate(nb) if i not in apart_bottom])
    agreeing = _independent(kept_top, kept_bottom, measure, confidence, paired, blocks, own)
    centre_top, centre_bottom = sum(kept_top) / len(kept_top), sum(kept_bottom) / len(kept_bottom)
    readings = [la[o.index] - centre_bottom for o in apart if o.side == "top"] + [centre_top - lb[o.index] for o in apart if o.side == "bottom"]
    low = min(agreeing.low, math.exp(min(readings)))
    high = max(agreeing.high, math.exp(max(readings)))
    return replace(agreeing, low=low, high=high, outliers=apart)


def _odd_blocks_apart(top: TimingSample, bottom: TimingSample, measure: str, field_name: str, confidence: float,
                      pairs: list[tuple[int, float]], apart: tuple[Outlier, ...]) -> RatioInterval:
    """The interval of modes of one run in fewer than MIN_SIGN_BLOCKS blocks: that of the blocks
    that agree, stretched to the ratio each block set apart reads (a verdict holds on both)."""
    odd = {o.process for o in apart}

    def logs(side: TimingSample) -> list[float]:
        return [math.log(v) for b, v in zip(side.blocks, side.per_process(measure, field_name)) if v > 0 and b not in odd]

    def own(side: TimingSample) -> list[float]:
        noise = side.process_noise(measure, field_name)
        figures = side.per_process(measure, field_name)
        return [n for b, v, n in zip(side.blocks, figures, noise) if v > 0 and b not in odd]

    agreeing = _independent(logs(top), logs(bottom), measure, confidence, True, [math.log(r) for k, r in pairs if k not in odd],
                            (own(top), own(bottom)))
    if not apart:
        return agreeing
    readings = [math.log(r) for k, r in pairs if k in odd]
    return replace(agreeing, low=min(agreeing.low, math.exp(min(readings))), high=max(agreeing.high, math.exp(max(readings))), outliers=apart)


def _independent(la: Sequence[float], lb: Sequence[float], measure: str, confidence: float, paired: bool, blocks: Sequence[float],
                 own: tuple[Sequence[float], Sequence[float]] = ((), ())) -> RatioInterval:
    """The interval of two sides' log figures that are not paired block by block (see the module
    docstring); `blocks`: the log ratios of the blocks the sides share, when they are modes of one run;
    `own`: each process's own noise (own_noises), by side (aligned with `la`, `lb`). Where the run-to-run noise
    is assumed, each process's figure also carries what its own steps leave uncertain: a process of
    a few widely spread steps (those that waited for data, those that did not) has a median that a
    rerun of the same process moves by more than the assumed noise between processes (one process a
    side read 0.22x "slower" where three a side read 0.93x, inconclusive). Measured noise (the
    processes' own spread) includes it already."""
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    d = sum(la) / len(la) - sum(lb) / len(lb)
    counts = (len(la), len(lb))
    scale = math.sqrt(1.0 / len(la) + 1.0 / len(lb))
    # Modes of one run with fewer than MIN_SIGN_BLOCKS blocks: no distribution-free interval
    # reaches the confidence, and their processes' spread is not what pairing would remove; only
    # a change beyond the assumed noise is called.
    noise = None if paired else _pooled_noise((la, lb))
    if noise is not None and min(counts) >= MIN_RANK_UNITS:
        k = rank_cut(len(la), len(lb), confidence)
        differences = sorted(x - y for x in la for y in lb)
        centre = median_of(differences)
        low, high = min(differences[k - 1], centre), max(differences[len(differences) - k], centre)
        if high - low < 2.0 * z * NOISE_FLOOR * scale:
            low, high = centre - z * NOISE_FLOOR * scale, centre + z * NOISE_FLOOR * scale
        return RatioInterval(math.exp(centre), math.exp(low), math.exp(high), counts, measure, "rank", noise[0], noise[1], confidence)
    if noise is not None:
        sd, df = noise
        # A few processes' spread is itself noisy, and their figures are heavier-tailed than a
        # log-normal: 5 processes a side gave 4 false fails in 60 at the bare estimate
        # (benchmarks/README.md). The noise is taken at its 75% upper bound (chi-square).
        factor = _sd_upper_factor(df, 0.75)
        sd *= factor
        t = t_quantile(1.0 - (1.0 - confidence) / 2.0, df)
        method = "t"
    else:
        # Not measured well enough to rest on, but a spread that is there (two processes of a
        # side, or blocks whose ratios disagree) is never ignored: the larger of it and the
        # assumed noise.
        sd, df = ASSUMED_NOISE.get(measure, ASSUMED_NOISE["wall"]), math.inf
        seen = [math.sqrt(mean_var(logs)[1]) for logs in (la, lb) if len(logs) >= 2]
        if paired and len(blocks) >= 2:
            seen.append(math.sqrt(mean_var(blocks)[1]) / math.sqrt(2.0))
        larger = max(seen, default=0.0) > sd
        sd = max([sd, *seen])
        # The variance of the difference of the sides' mean log figures from each process's own figure.
        within = sum(v * v for v in own[0]) / len(la) ** 2 + sum(v * v for v in own[1]) / len(lb) ** 2 if len(own[0]) == len(la) and len(own[1]) == len(lb) else 0.0
        half = z * math.sqrt((sd * scale) ** 2 + within)
        return RatioInterval(math.exp(d), math.exp(d - half), math.exp(d + half), counts, measure, "assumed", sd, df, confidence, seen=larger, in_blocks=paired,
                             own=math.sqrt(within))
    half = t * sd * scale
    return RatioInterval(math.exp(d), math.exp(d - half), math.exp(d + half), counts, measure, method, sd, df, confidence, noise_factor=factor)


def ratio_basis(interval: RatioInterval, top: TimingSample, bottom: TimingSample, field_name: str) -> tuple[float, float] | None:
    """The two figures `interval.ratio` is the ratio of, for a line that prints them beside it:
    each side's `agreeing_geometric_mean`, for the t and assumed intervals of independent sides.
    None where the ratio is a median of ratios and of no two figures: the rank interval's (every
    pair of processes) and the sign interval's (the blocks), and blocks set apart."""
    if interval.method in ("rank", "sign") or interval.in_blocks or any(o.side == "block" for o in interval.outliers):
        return None
    a = agreeing_geometric_mean(top, interval.measure, field_name)
    b = agreeing_geometric_mean(bottom, interval.measure, field_name)
    return (a, b) if a is not None and b is not None else None


def agreeing_geometric_mean(side: TimingSample, measure: str, field_name: str) -> float | None:
    """The geometric mean of a side's processes' figures, less those set apart from it
    (`_set_apart`, which looks at the side alone): what a t or assumed interval's ratio divides
    (`_independent` on the logs of the processes that agree). None without a figure."""
    figures = side.figures(measure, field_name)
    logs = [math.log(v) for v in figures]
    apart = {o.index for o in _set_apart(logs, side.blocks, "side", measure)}
    kept = [v for i, v in enumerate(logs) if i not in apart]
    return math.exp(sum(kept) / len(kept)) if kept else None


def method_words(interval: RatioInterval) -> str:
    """How the interval was made, for a note: what it rests on, in a user's words."""
    words = _method_words(interval)
    if interval.outliers and interval.outliers[0].side == "block":
        n = len(interval.outliers)
        words += (f"; {n} block{'s' if n > 1 else ''} set apart, far from the others' ratio: the others' interval, stretched to what "
                  f"{'they read' if n > 1 else 'it reads'}")
    elif interval.outliers:
        n = len(interval.outliers)
        stretched = "the rank interval of all" if interval.method == "rank" else "the others' interval, stretched to what it reads"
        words += f"; {n} process{'es' if n > 1 else ''} set apart, far from {'their' if n > 1 else 'its'} side's others: {stretched}"
    return words


def outlier_words(interval: RatioInterval, top: str, bottom: str, figure: str) -> list[str]:
    """One sentence per process set apart: which, and how far, e.g. "process 3 of the baseline:
    its median step time was 36.6x the others'". `top`, `bottom`: the sides' names."""
    found = []
    for o in interval.outliers:
        times = ratio_text(o.factor) if not 0.01 <= o.factor <= 100.0 else f"{o.factor:.3g}x"
        if o.side == "block":
            found.append(f"block {o.process} (the processes of repetition {o.process}): its ratio of {figure} was {times} the others'")
        else:
            found.append(f"process {o.process} of {top if o.side == 'top' else bottom}: its {figure} was {times} the others'")
    return found


def _method_words(interval: RatioInterval) -> str:
    what = MEASURE_WORDS.get(interval.measure, interval.measure)
    a, b = interval.units
    if interval.method == "sign":
        return f"{what}, {a} paired blocks of processes (sign-test interval; run-to-run noise {spread_text(interval.spread)} A/A)"
    if interval.method == "rank":
        return f"{what}, {a} vs {b} processes (rank interval; run-to-run noise {spread_text(interval.spread)} A/A)"
    if interval.method == "t":
        return (f"{what}, {a} vs {b} processes, run-to-run noise measured ({spread_text(interval.seen_spread)} A/A, taken at "
                f"{spread_text(interval.spread)}: the most it may be, measured on so few processes)")
    if interval.seen:
        return (f"{what}, {a} vs {b} processes: too few to measure the run-to-run noise, and they already differ by "
                f"{spread_text(interval.spread)} (A/A)")
    unsettled = ""
    if interval.own >= OWN_NOISE_SAID * interval.noise * math.sqrt(1.0 / max(a, 1) + 1.0 / max(b, 1)):
        unsettled = (f"; and each process's own figure is unsettled (its steps near that figure spread widely: their ratio alone is uncertain by "
                     f"{spread_text(math.expm1(NormalDist().inv_cdf(0.95) * interval.own))}), which widens the interval")
    return (f"{what}, {a} vs {b} process{'es' if b != 1 else ''}: run-to-run noise not measured, "
            f"assumed {spread_text(interval.spread)} A/A{unsettled}")


def spread_text(spread: float) -> str:
    """The A/A noise as "+/-12%", capped: past 100% a percentage says nothing a user can act on."""
    return "over +/-100%" if not math.isfinite(spread) or spread > 1.0 else f"+/-{100 * spread:.0f}%"


def pct(log_distance: float) -> str:
    """A log-distance as the relative change it means, e.g. 0.0953 -> "10.0%"."""
    if not math.isfinite(log_distance):
        return "unbounded"
    return f"{100.0 * math.expm1(log_distance):.1f}%"


def ratio_text(value: float) -> str:
    """A ratio for a sentence: two decimals, never "0.00x" or a figure past what a process can
    show (below 0.01 or above 100 reads "<0.01x" / ">100x")."""
    if not math.isfinite(value) or value > 100.0:
        return ">100x"
    if value < 0.01:
        return "<0.01x"
    return f"{value:.2f}x"


def bound_text(value: float) -> str:
    """A slowdown bound for a sentence ("up to 46x"): two figures, whole from 10x, and past 100x
    (a bound extrapolated beyond anything measured) "over 100x", never "3.6e+02x"."""
    if not math.isfinite(value) or value > 100.0:
        return "over 100x"
    return f"{value:.0f}x" if value >= 10.0 else f"{value:.2g}x"


def change_text(ratio: float) -> str:
    """A ratio as a signed percentage change, capped the same way (">+9900%")."""
    if not math.isfinite(ratio) or ratio > 100.0:
        return ">+9900%"
    if ratio < 0.01:
        return "<-99%"
    return f"{100.0 * (ratio - 1.0):+.1f}%"
