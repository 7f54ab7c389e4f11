"""The baseline file: the few figures of a run that a gate compares against, as a small,
versioned JSON meant to be committed next to the code it guards.

    cagtool baseline save RUN -o cagtool-baseline.json

A missing, corrupt or newer-than-understood baseline is an `UnreadableInput` (exit 3): a gate
never skips a comparison silently.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from cagtool.record.bounds import STEP_BOUNDS, Bytes, Seconds
from cagtool.record.atomic import write_atomic
from cagtool.errors import UnreadableInput
from cagtool.record.loader import ModeRecord, RunRecord, check_format, json_loads, read_json_object
from cagtool.record.manifest import process_identity
from cagtool.record.schema import MAX_JSON_FILE_BYTES
from cagtool.report.findings import thread_deaths
from cagtool.report.figures.pooled import ModeColumn, mode_columns, steady_in_every
from cagtool.report.figures.intervals import FIELDS, ProcessSteps, TimingSample, median_of, ratio_interval
from cagtool.report.figures.metrics import mode_metrics, reference_loop_of, runnable_wait
from cagtool.report.ranks.analysis import analyze_ranks, lowest_rank, missing_ranks, rank_list, rank_view, world_size

BASELINE_FORMAT = "cagtool-baseline"
# Bump when an older reader would misread the file; additive fields do not bump it.
BASELINE_VERSION = 1
DEFAULT_BASELINE_FILE = "cagtool-baseline.json"

# Machine keys that differ between two CI runners of the same kind: never a reason to warn.
# Not compared as they are: a name, or a figure the gate judges by its own rule (reference_loop_s).
_VOLATILE_MACHINE_KEYS = frozenset({"hostname", "host", "node", "user", "pid", "boot_time", "uptime_s", "load_avg", "reference_loop_s"})


@dataclass(frozen=True)
class StepTimeSnapshot:
    """Steady-state step time, seconds (see report.figures.metrics.StepStats), with what the intervals of
    its statistics are made from (`sample`: per statistic, its value in each process, in wall and
    CPU time; report.figures.intervals). None in baselines saved before it: a timing check
    against such a baseline is an error that says to re-save it, never a guess."""

    count: int
    median_s: float | None
    p10_s: float | None
    p90_s: float | None
    mean_s: float | None = None
    sample: TimingSample | None = None
    # The share of its wall time the mode's median step waited for a CPU where the steps' own waits
    # are known, else the share of their runnable time the processes waited over the steps
    # (report.figures.metrics.CpuWait.step_fraction); None where it was not measured (older records
    # and baselines).
    cpu_wait: float | None = None
    # Each process's steady steps with their step numbers (a run's, never a baseline file's): what
    # two modes of one run are compared on (report.figures.pooled.CommonSteps).
    processes: tuple[ProcessSteps, ...] = ()
    # The step numbers steady in every process of the side, a sorted numpy int64 array, as a baseline
    # file keeps them (a run's are `steady_of` its processes): what a run is compared with its
    # baseline on. None where not known.
    steady_steps: Any = None
    # The median step's runnable share of its wall time (CpuWait.runnable): below 1 for steps that
    # sleep or wait for data or a device, which no load lengthens; None where not measured (1).
    runnable: float | None = None
    # The steps' process CPU over their loop thread's (CpuWait.median_parallel): a step whose threads
    # ran in parallel has no load bound past HEAVY_WAIT (metrics.heavy_load_bound); None where not known.
    parallel: float | None = None
    # The CPU cores everything outside the job used on its CPUs during its steps (CpuWait.others_cores):
    # below OWN_WAITS_OTHERS its waits were its own (its threads outnumbered the CPUs), not the
    # machine's load; None where not measured.
    others_cores: float | None = None

    @property
    def runnable_wait(self) -> float | None:
        """The share of its runnable time the median step waited for a CPU (what HEAVY_WAIT reads)."""
        return None if self.cpu_wait is None else runnable_wait(self.cpu_wait, self.runnable)


@dataclass(frozen=True)
class ModeSnapshot:
    """What a gate needs of one mode: its counts, compile time and step-time statistics.
    Built from `ModeMetrics` for the run under test and read back from the baseline file."""

    mode: str
    status: str
    steps: int
    ca_graphs: int
    ca_cache_misses: int
    dynamo_recompiles: int
    recompiles: int
    graph_breaks: int
    forward_graphs: int
    backward_graphs: int
    compile_time_s: float
    step_time: StepTimeSnapshot | None = None
    exit_code: int | None = None
    repetitions: int = 1
    peak_rss_bytes: int | None = None
    peak_device_memory_bytes: int | None = None  # CUDA max allocated, when the job used CUDA
    problem: str = ""  # why the mode did not finish cleanly (not saved: a baseline comes from a clean run)
    # Followed processes (ranks) of the mode that failed, were interrupted or left no record: the
    # main process finishing says nothing about rank 1 (not saved either). Also a mode process whose
    # record says it finished cleanly while the launcher saw it exit otherwise (exit_code_disagreements).
    process_problems: tuple[str, ...] = ()
    # CA cache misses but the one-time .grad warm-up (report.figures.metrics.CAMisses): `--max-recompiles ca:N`.
    # Baselines written before it existed read it as ca_cache_misses.
    ca_recompiles: int = None  # type: ignore[assignment]  # None: as ca_cache_misses
    # Total compile time of each repetition (`run --repeat K`), and in a baseline of each run saved
    # into it (`baseline save --accumulate`): the only spread a compile time has. Empty: one figure.
    compile_time_samples_s: tuple[float, ...] = ()
    # The largest share of its runnable time a process waited for a CPU before its steady steps,
    # the span its compile time was measured in (metrics.compile_wait); None where not measured.
    compile_wait: float | None = None
    # The machine's reference loop where the run (or the baseline's newest run) was recorded, CPU
    # seconds (capture/versions.py reference_loop_s; `machine` in run.json and the baseline file,
    # not a mode's figure): the gate's measure of a speed difference between the two machines.
    reference_loop_s: float | None = None
    # Of compile_time_s, the backwards AOTAutograd compiled at their first call (metrics.backward_compile_s),
    # per repetition beside compile_time_samples_s; None in a baseline saved before they were
    # counted, whose compile times leave them out (the gate then compares this run's without them).
    backward_compile_s: float | None = 0.0
    backward_compile_samples_s: tuple[float, ...] = ()
    # How many ranks the mode trained on (its world size, or its rank records where none was
    # recorded: ranks_trained); None for one process. A baseline's: the gate fails a run with fewer.
    ranks: int | None = None

    def __post_init__(self) -> None:
        if self.ca_recompiles is None:
            object.__setattr__(self, "ca_recompiles", self.ca_cache_misses)

    def without_backward_compiles(self) -> ModeSnapshot:
        """The compile figures as a baseline saved before backward compiles were counted has them."""
        if self.backward_compile_s is None:
            return self
        samples = self.compile_time_samples_s
        if samples and len(self.backward_compile_samples_s) == len(samples):
            samples = tuple(max(c - b, 0.0) for c, b in zip(samples, self.backward_compile_samples_s))
            total = median_of(list(samples))
        else:
            samples, total = (), max(self.compile_time_s - self.backward_compile_s, 0.0)
        return replace(self, compile_time_s=total, compile_time_samples_s=samples, backward_compile_s=None, backward_compile_samples_s=())

    @property
    def compile_samples(self) -> tuple[float, ...]:
        return self.compile_time_samples_s or (self.compile_time_s,)


def steady_of(step_time: StepTimeSnapshot) -> Any:
    """The step numbers steady in every process of a side: a baseline file's, or computed from a
    run's processes (only where a gate or a baseline needs them); None where not known."""
    return step_time.steady_steps if step_time.steady_steps is not None else steady_in_every(step_time.processes)


def step_ranges(steps: Any) -> list[tuple[int, int]]:
    """[(first, last), ...] of the runs of consecutive step numbers in a sorted array: a baseline's
    steady steps in a few numbers (one range for a job whose only compile was its first step)."""
    import numpy as np

    steps = np.asarray(steps, dtype=np.int64)
    if not len(steps):
        return []
    breaks = np.flatnonzero(np.diff(steps) != 1)
    firsts = np.concatenate(([0], breaks + 1))
    lasts = np.concatenate((breaks, [len(steps) - 1]))
    return list(zip(steps[firsts].tolist(), steps[lasts].tolist()))


def steps_of_ranges(ranges: list[tuple[int, int]]) -> Any:
    """The sorted numpy array of the step numbers `ranges` name (step_ranges' inverse)."""
    import numpy as np

    if not ranges:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate([np.arange(a, b + 1, dtype=np.int64) for a, b in ranges]))


def snapshot_of(column: ModeColumn) -> ModeSnapshot:
    """A mode of a run as the gate sees it: the comparison's pooled column (counts of the first
    repetition, steady step times pooled over repetitions, median compile time), so `gate` and
    `compare` never disagree on a figure."""
    stats = column.step_time
    step_time = None
    if stats.count > 0:
        wait = column.cpu_wait.step_fraction if column.cpu_wait is not None else None  # the median step's: what a median is judged against
        runnable = column.cpu_wait.median_runnable if column.cpu_wait is not None else None
        parallel = column.cpu_wait.median_parallel if column.cpu_wait is not None else None
        others = column.cpu_wait.others_cores if column.cpu_wait is not None else None
        step_time = StepTimeSnapshot(stats.count, stats.median_s, stats.p10_s, stats.p90_s, stats.mean_s, column.timing, wait,
                                     column.processes, runnable=runnable, parallel=parallel, others_cores=others)
    problem = "; ".join(f.describe() for f in column.failures)
    m = column.metrics
    if m is None:  # no repetition left a record
        return ModeSnapshot(column.name, column.status, steps=0, ca_graphs=0, ca_cache_misses=0, dynamo_recompiles=0, recompiles=0,
                            graph_breaks=0, forward_graphs=0, backward_graphs=0, compile_time_s=0.0, exit_code=column.exit_code,
                            repetitions=len(column.records), problem=problem)
    return ModeSnapshot(
        mode=column.name,
        status=column.status,
        steps=m.steps,
        ca_graphs=m.ca_graphs,
        ca_cache_misses=m.ca_cache_misses,
        ca_recompiles=m.ca_recompiles,
        dynamo_recompiles=m.dynamo_recompiles,
        recompiles=m.recompiles,
        # Breaks Dynamo could not resume after included (the rest of the function ran eagerly): torch's
        # counter leaves them out, and a gate of 0 graph breaks passed a model whose LSTM never compiled.
        graph_breaks=m.graph_breaks + m.unresumable_breaks,
        forward_graphs=m.forward_graphs,
        backward_graphs=m.backward_graphs,
        compile_time_s=column.compile_time_s if column.compile_time_s is not None else m.compile_time_s,
        backward_compile_s=m.compile_phases_s.get("backward", 0.0),
        step_time=step_time,
        exit_code=column.exit_code,
        repetitions=len(column.records),
        peak_rss_bytes=column.peak_rss_bytes,
        peak_device_memory_bytes=column.peak_device_memory_bytes,
        problem=problem,
        compile_wait=column.compile_wait,
    )


def run_snapshots(run: RunRecord) -> dict[str, ModeSnapshot]:
    """Base mode (eager, aot, ca) -> snapshot; repetitions (`ca.2`...) are pooled into their mode."""
    snapshots = {}
    reference = reference_loop_of(run.meta.machine, f"run {run.path}")
    for name, column in mode_columns(run).items():
        snap = replace(snapshot_of(column), reference_loop_s=reference)
        records = [rec for record_name in column.records if (rec := run.modes.get(record_name)) is not None]
        problems = tuple(p for rec in records for p in process_problems(rec))
        problems += tuple(exit_code_disagreements(run, column.records))
        if problems:
            snap = replace(snap, process_problems=problems)
        snapshots[name] = _with_spread(snap, records)
    return snapshots


def _with_spread(snap: ModeSnapshot, records: list[ModeRecord]) -> ModeSnapshot:
    """One compile time per repetition: the only spread a compile time has."""
    if not records:
        return snap
    metrics = [mode_metrics(rec) for rec in records]
    samples = tuple(m.compile_time_s for m in metrics)
    backward = tuple(m.compile_phases_s.get("backward", 0.0) for m in metrics)
    return replace(snap, compile_time_samples_s=samples if len(samples) > 1 else (), backward_compile_s=median_of(list(backward)),
                   backward_compile_samples_s=backward if len(samples) > 1 else ())


def exit_code_disagreements(run: RunRecord, names: tuple[str, ...] | list[str]) -> list[str]:
    """Mode processes (`names`: "ca", "ca.2") whose record says they finished with exit code 0
    while the launcher noted another exit code for them (run.json's mode_exit_codes): a process
    that crashed after closing its record, or a record edited to pass. Either way the mode did not
    end cleanly, and its counts are not a clean run's. A followed rank's record (a rank's view of
    the run) is not the process the launcher waited for: not compared."""
    codes = run.meta.mode_exit_codes or {}
    said = []
    for name in names:
        record = run.modes.get(name)
        launcher = codes.get(name)
        if record is None or launcher is None or (record.manifest.process or {}).get("role") == "child":
            continue
        manifest = record.manifest
        if manifest.status == "finished" and manifest.exit_code in (0, None) and launcher != 0:
            said.append(f"{name}: the launcher recorded exit code {launcher}, but the mode's record says "
                        f"{manifest.status} with exit code {0 if manifest.exit_code is None else manifest.exit_code}")
    return said


def process_problems(record: ModeRecord) -> list[str]:
    """What went wrong in the processes a mode followed: a rank or child that did not finish
    cleanly, and ranks below the recorded world size that left no record at all."""
    # A thread of the job that died: the process went on (and may exit 0) without its work.
    problems = [f"{record.path.name} {'' if record.processes else 'process main: '}{death}" for death in thread_deaths(record)]
    for key, child in record.processes.items():
        manifest = child.manifest
        if manifest.status in ("finished", "timeout") and manifest.exit_code in (0, None):
            continue
        code = f", exit code {manifest.exit_code}" if manifest.exit_code not in (None, 0) else ""
        why = f": {manifest.exception.type}" if manifest.exception is not None else ""
        status = "killed (record never finished)" if manifest.status == "running" else manifest.status
        problems.append(f"{record.path.name} process {key}: {status}{code}{why}")
    size = world_size(record)
    # A followed process's own record (one rank's view, as the gate checks each rank) knows only
    # itself: the other ranks are its launcher's to account for.
    if size is not None and (record.manifest.process or {}).get("role") != "child":
        missing = missing_ranks(record.ranks(), size)
        if missing:
            problems.append(f"{record.path.name}: rank {rank_list(missing)} of world size {size} left no record")
    return problems


@dataclass(frozen=True)
class Baseline:
    modes: dict[str, ModeSnapshot]
    versions: dict[str, str] = field(default_factory=dict)  # torch, python, cagtool...
    machine: dict[str, Any] = field(default_factory=dict)
    target: dict[str, str] = field(default_factory=dict)
    target_argv: list[str] = field(default_factory=list)
    source_run: str = ""
    created_at: str = ""
    path: Path | None = None  # where it was read from
    # Which processes its figures came from (run_process_ids), every run accumulated into it:
    # `--accumulate` refuses a run it already holds. Empty in files saved before it was kept.
    processes: tuple[str, ...] = ()

    def mode(self, name: str) -> ModeSnapshot | None:
        return self.modes.get(name)


def baseline_from_run(run: RunRecord) -> Baseline:
    """A multi-rank run's baseline holds rank 0's figures (its launcher ran no steps); the gate
    holds every rank to them."""
    rank = lowest_rank(run)
    modes = run_snapshots(run)
    if rank is not None:
        # Rank 0's figures, with the whole job's process problems (a failed or missing rank), so
        # `baseline save` still refuses a run whose other ranks did not finish.
        whole = modes
        modes = {
            name: replace(snap, process_problems=whole[name].process_problems) if name in whole else snap
            for name, snap in run_snapshots(rank_view(run, rank)).items()
        }
    modes = {name: replace(snap, ranks=ranks_trained(run.modes.get(name))) for name, snap in modes.items()}
    for name, snap in modes.items():
        sample = snap.step_time.sample if snap.step_time is not None else None
        if sample is not None and sample.left_out:
            # A baseline file holds each process's figures, not who was left out: a process lost
            # here would be lost unsaid to every gate against it.
            block, why = sample.left_out[0]
            raise UnreadableInput(f"run {run.path}: mode {name}, process {block}: {why}; not saved as a baseline")
    return Baseline(
        modes=modes,
        versions=dict(run.meta.versions),
        machine=dict(run.meta.machine),
        target=dict(run.meta.target),
        target_argv=list(run.meta.target_argv),
        source_run=run.meta.run_id or str(run.path),
        created_at=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        processes=run_process_ids(run),
    )


def ranks_trained(record: ModeRecord | None) -> int | None:
    """How many ranks a mode trained on: its world size where recorded, else its rank records;
    None for a single process, and for training processes started without a rank (Hogwild's
    workers: how many the job meant to start is not known)."""
    analysis = analyze_ranks(record) if record is not None else None
    if analysis is None or not analysis.rows or analysis.workers:
        return None
    return analysis.world_size or len(analysis.rows)


def ranks_said(ranks: int | None) -> str:
    return "one process" if ranks is None else f"{ranks} rank" + ("s" if ranks != 1 else "")


def run_process_ids(run: RunRecord) -> tuple[str, ...]:
    """One short digest per mode record of the run (each repetition's own process, which the
    loader holds to be distinct): the same run saved again gives the same ones, another run
    none of them. Digests, not the identities: a pid and start time are no figure to commit."""
    found = []
    for record in run.modes.values():
        identity = process_identity(record.manifest)
        if identity is not None:
            found.append(hashlib.sha256(identity.encode()).hexdigest()[:16])
    return tuple(found)


# The most steady steps a baseline's ranges may name (a step number beyond any job's: a forged file's
# [[0, 10**9]] would otherwise be a set of a billion numbers).
MAX_STEADY_STEPS = 2_000_000

# Compile times a baseline keeps when runs are accumulated into it: the newest, enough to measure a
# spread, few enough to follow a slow drift of the runner.
MAX_COMPILE_SAMPLES = 20
# Process digests a baseline keeps: 20 runs of 3 modes and 5 repetitions each. A run older than
# that has no figure left in the file's samples, and adding it again would count it once.
MAX_PROCESS_IDS = 300


def accumulate_baseline(previous: Baseline, new: Baseline) -> Baseline:
    """`baseline save --accumulate`: the new run's figures, with the compile times of every run
    saved into the file before it (per mode, newest last, at most MAX_COMPILE_SAMPLES; the mode's
    compile time their median), so that `--max-compile-regression` has a measured spread. Compile times of another target or torch
    are not comparable: refused (UsageError)."""
    from cagtool.errors import UsageError

    where = previous.path or "the baseline"
    old_target, new_target = Path(previous.target.get("name", "")).name, Path(new.target.get("name", "")).name
    if old_target and new_target and old_target != new_target:
        raise UsageError(f"not accumulating into {where}: it holds {old_target}, this run is {new_target} (save a new baseline)")
    old_torch, new_torch = previous.versions.get("torch"), new.versions.get("torch")
    if old_torch and new_torch and old_torch != new_torch:
        raise UsageError(f"not accumulating into {where}: its compile times are from torch {old_torch}, this run has {new_torch} (save a new baseline)")
    # The same processes added twice would read as several that agree: the noise the gate's
    # checks rest on would shrink to nothing and an unchanged run would fail.
    held = set(previous.processes) & set(new.processes)
    if held:
        raise UsageError(f"not accumulating into {where}: it already holds the processes of run {new.source_run} "
                         f"({len(held)} of {len(new.processes)}); each run is added once")
    for name, snap in new.modes.items():
        before = previous.modes.get(name)
        if before is not None and before.ranks != snap.ranks:
            raise UsageError(f"not accumulating into {where}: its mode {name} trained on {ranks_said(before.ranks)}, this run's "
                             f"on {ranks_said(snap.ranks)} (save a new baseline)")
        copied = _copied_process(before.step_time.sample if before is not None and before.step_time is not None else None,
                                 snap.step_time.sample if snap.step_time is not None else None)
        if copied is not None:
            process, figures = copied
            raise UsageError(f"not accumulating into {where}: process {process} of mode {name} of run {new.source_run} has the step "
                             f"figures of a process it already holds ({figures}): a copy of a run it holds, one process counted "
                             "twice; each run is added once")
    modes = {}
    for name, snap in new.modes.items():
        before = previous.modes.get(name)
        if before is not None and before.backward_compile_s is None:
            snap = snap.without_backward_compiles()  # a baseline saved before they were counted: its figures are kept as they are
        samples = (*(before.compile_samples if before is not None else ()), *snap.compile_samples)[-MAX_COMPILE_SAMPLES:]
        waits = [w for w in (before.compile_wait if before is not None else None, snap.compile_wait) if w is not None]
        # The compile time is the median of those held, as a run's of its repetitions (figures.pooled):
        # the figure the gate prints as "median ... of N runs" and measures a seconds threshold from.
        snap = replace(snap, compile_time_s=median_of(samples), compile_time_samples_s=samples if len(samples) > 1 else (),
                       compile_wait=max(waits) if waits else None)
        if before is not None and before.step_time is not None and snap.step_time is not None:
            pooled = _pooled_sample(before.step_time.sample, snap.step_time.sample)
            if pooled is not None:
                # The pooled processes' wait: the heavier of the two (a PASS rests on the baseline's
                # steps not having been slowed; the newest run's alone would hide a loaded earlier one).
                # (its runnable share with it: the pair that says how much the load may have done)
                waits = [(w, r) for w, r in ((before.step_time.cpu_wait, before.step_time.runnable),
                                             (snap.step_time.cpu_wait, snap.step_time.runnable)) if w is not None]
                heaviest = max(waits, key=lambda pair: runnable_wait(*pair)) if waits else (None, None)
                # The steps steady in every run pooled; unknown where a run's are.
                import numpy as np

                old_steady, new_steady = steady_of(before.step_time), steady_of(snap.step_time)
                steady = None if old_steady is None or new_steady is None else np.intersect1d(old_steady, new_steady)
                both = [p for p in (before.step_time.parallel, snap.step_time.parallel) if p is not None]
                # Waits all the job's own only where every run's were (the largest of the others' use; unknown where one's is).
                others = (before.step_time.others_cores, snap.step_time.others_cores)
                snap = replace(snap, step_time=replace(snap.step_time, sample=pooled, count=pooled.count,
                                                       cpu_wait=heaviest[0], runnable=heaviest[1], steady_steps=steady,
                                                       parallel=max(both) if both else None,
                                                       others_cores=None if None in others else max(others)))  # type: ignore[type-var]
        modes[name] = snap
    return replace(new, modes=modes, processes=(*previous.processes, *new.processes)[-MAX_PROCESS_IDS:])


# Fewer distinct figures above 0 than this in a process (median, mean, p10, p90, in wall and CPU
# time) and its figures may equal another process's by chance: a clock coarser than the steps
# reads them as a few ticks.
_COPY_FIGURES = 3


def _process_figures(sample: TimingSample, index: int) -> tuple[float | None, ...]:
    """One process's figures as a baseline file holds them (six significant digits)."""
    wall = tuple(_round(sample.units[name][index]) for name in FIELDS if name in sample.units)
    cpu = tuple(_round(sample.cpu_units[name][index]) for name in FIELDS if name in sample.cpu_units)
    return wall + cpu


def _copied_process(held: TimingSample | None, new: TimingSample | None) -> tuple[int, str] | None:
    """(the new process's block, its figures) when a process of `new` has every step figure of a
    process `held` already holds: two processes do not give the same median, mean, p10 and p90 to
    six digits, in wall and CPU time, unless one is the other's record (a run copied with its pids
    edited, so that its process digests are new). None otherwise, and where the figures are too
    few or too coarse to tell processes apart."""
    if held is None or new is None or held.unit != "process" or new.unit != "process" or held.clock != new.clock:
        return None
    if set(held.units) != set(new.units) or bool(held.cpu_units) != bool(new.cpu_units):
        return None
    kept = {_process_figures(held, k) for k in range(held.repetitions)}
    for k in range(new.repetitions):
        figures = _process_figures(new, k)
        if figures in kept and len({v for v in figures if v}) >= _COPY_FIGURES:
            shown = ", ".join(f"{name} {value:.6g} s" for name, value in zip(FIELDS, figures))
            return new.blocks[k] if k < len(new.blocks) else k + 1, shown
    return None


def _pooled_sample(old: TimingSample | None, new: TimingSample | None) -> TimingSample | None:
    """The processes of both samples, newest last, at most MAX_COMPILE_SAMPLES of them: a
    baseline accumulated over runs measures the run-to-run noise its gate checks rest on. None
    when either is missing or from an older cagtool (not one figure per process)."""
    if old is None or new is None or old.unit != "process" or new.unit != "process" or old.clock != new.clock:
        return None
    keep = MAX_COMPILE_SAMPLES

    def joined(a: dict[str, tuple[float, ...]], b: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
        return {name: (*a[name], *b[name])[-keep:] for name in FIELDS if name in a and name in b}

    units = joined(old.units, new.units)
    cpu_units = joined(old.cpu_units, new.cpu_units) if old.cpu_units and new.cpu_units else {}
    processes = len(units["median"])
    values = {name: median_of(v) for name, v in units.items()}
    # Blocks of different runs are not pairs: numbered apart.
    blocks = tuple(range(1, processes + 1))
    count = round((old.count + new.count) * processes / (old.repetitions + new.repetitions))

    def noise(a: dict[str, tuple[float, ...]], a_n: int, b: dict[str, tuple[float, ...]], b_n: int) -> dict[str, tuple[float, ...]]:
        # Each process's own noise where known, 0 where its file kept none: aligned with `units`.
        return {name: (*(a.get(name) or (0.0,) * a_n), *(b.get(name) or (0.0,) * b_n))[-keep:] for name in units}

    # A statistic of every process or of none: a run without its steps' waits leaves the whole side without them.
    unwaited = {name: (*old.unwaited_units[name], *new.unwaited_units[name])[-keep:]
                for name in old.unwaited_units if name in new.unwaited_units}

    return TimingSample(count, processes, "process", values, units, cpu_units, old.cpu_bound and new.cpu_bound, blocks, new.clock,
                        unit_noise=noise(old.unit_noise, old.repetitions, new.unit_noise, new.repetitions),
                        cpu_unit_noise=noise(old.cpu_unit_noise, old.repetitions, new.cpu_unit_noise, new.repetitions) if cpu_units else {},
                        unwaited_units=unwaited,
                        unwaited_unit_noise={name: (*old.process_noise("unwaited", name), *new.process_noise("unwaited", name))[-keep:]
                                             for name in unwaited})


def suggested_threshold(snap: ModeSnapshot) -> tuple[int | None, str]:
    """The smallest `--max-regression` (in %, a multiple of 5) that one unchanged run can pass
    against this baseline, from the run-to-run noise its processes measured, with the words that
    say why; (None, words) when it holds too few processes to measure that noise."""
    from cagtool.report.figures.intervals import MIN_RANK_UNITS, mean_var, t_quantile

    sample = snap.step_time.sample if snap.step_time is not None else None
    from cagtool.report.figures.pooled import HEAVY_WAIT

    wait = snap.step_time.runnable_wait if snap.step_time is not None else None
    if wait is not None and wait >= HEAVY_WAIT:
        # A baseline recorded on a loaded runner: the gate withholds a pass that the load could
        # explain (report/gate/checks.py, heavy load), so no threshold the noise suggests would pass.
        return None, (f"its median step waited for a CPU {wait:.0%} of its runnable time (a loaded runner): a step-time gate "
                      "against it reads inconclusive (exit 5) at any usual threshold, as the load, not the code, could explain "
                      "the difference; re-save it on a quieter runner")
    if sample is None or sample.repetitions < MIN_RANK_UNITS:
        held = "one process" if sample is None or sample.repetitions == 1 else f"{sample.repetitions} processes"
        return None, (f"{held}: the gate will assume the run-to-run noise (at a 10% threshold it catches a 2.0x slowdown in CPU time or 2.9x in wall time, not a 10% one, and says "
                      "inconclusive, exit 5, rather than pass); save from `cagtool run --repeat 5` (or add runs with --accumulate) "
                      "to measure it")
    measure = "cpu" if sample.cpu_bound and sample.cpu_units else "wall"
    # A pass on CPU time is confirmed on wall time (checks.step_time_verdict): the threshold one
    # unchanged run passes is the larger of the two measures' (the wall time's own noise).
    measures = ("cpu", "wall") if measure == "cpu" else ("wall",)
    unchanged = _one_process_at_median(sample)
    upper, apart, k, noisiest = 0.0, 0.0, 0, measure
    r = None
    for each in measures:
        logs = [math.log(v) for v in sample.figures(each, "median")]
        k = len(logs)
        sd = math.sqrt(mean_var(logs)[1])
        # The gate's own interval for one unchanged run at the baseline's median: its upper end is the
        # smallest threshold that run passes (the gate bounds the noise it measured from above).
        found = ratio_interval(unchanged, sample, "median", measure=each) if unchanged is not None else None
        high = found.high if found is not None else math.exp(t_quantile(0.95, k - 1) * max(sd, 0.005) * math.sqrt(1.0 + 1.0 / k))
        if each == measure:
            r = found
        if high > upper:
            upper, noisiest = high, each
        apart = max(apart, math.expm1(1.645 * sd * math.sqrt(2)))
    what = f"{k} processes, {'CPU' if noisiest == 'cpu' else 'wall'} time per step" + (
        " (which confirms a pass on CPU time)" if noisiest == "wall" and measure == "cpu" else "")
    odd = [o for o in (r.outliers if r is not None else ()) if o.side == "bottom"]
    if odd:
        # Named: the gate sets it apart too (report.figures.intervals.OUTLIER_NOISES), and warns.
        which = "; ".join(f"process {o.process} read {o.factor:.3g}x the others" for o in odd)
        return None, (f"{what}: {which}: it ran under other conditions (a busy machine?), so most step-time gates against this "
                      "baseline will be inconclusive; re-save it on a quieter runner")
    if upper > 2.0 or apart > 1.0:
        return None, (f"{what} {'over 100' if apart > 1.0 else f'{100 * apart:.0f}'}% apart 90% of the time (A/A): too noisy to gate "
                      "a regression of less than 2x; re-save it on a quieter runner (one process that waited for a CPU makes a side this noisy)")
    pct = 5 * math.ceil(100.0 * (upper - 1.0) / 5.0) + 5
    return pct, (f"{what} {100 * apart:.0f}% apart 90% of the time (A/A): one unchanged run passes from about --max-regression {pct}%")


def _one_process_at_median(sample: TimingSample) -> TimingSample | None:
    """A side of one process whose figures are `sample`'s medians: an unchanged run."""
    if not sample.values:
        return None
    cpu = {name: (median_of(v),) for name, v in sample.cpu_units.items()} if sample.cpu_units else {}
    return TimingSample(sample.count // max(sample.repetitions, 1), 1, "process", dict(sample.values),
                        {name: (value,) for name, value in sample.values.items()}, cpu, sample.cpu_bound, (1,), sample.clock)


def _round(value: float | None) -> float | None:
    # Six significant digits: stable diffs when the file is committed, far below timing noise.
    return None if value is None else float(f"{value:.6g}")


# The file's layout, as msgspec types: field order is the order written, and msgspec checks each
# value as the file is read. A baseline's figures are the limits and references a gate compares
# with: a count below zero would make every run fail (or a limit meaningless), and Infinity or NaN
# (which json reads) would pass or fail every comparison; each is refused, naming its field. So is a
# figure no run gives, which the interval arithmetic cannot take: a step of 1e-300 s or 1e300 s
# overflowed it, a share of 1 of waiting divides by zero (1 / (1 - w)), a step of 0 s was dropped
# from the sample unsaid, a count of 10**400 printed 400 digits. Bounds are far outside any run.
_Count = Annotated[int, Meta(ge=0, le=10**9)]
# Steps and compile times: bounds.Seconds, 0 or within STEP_BOUNDS, the rule a record's own figures
# are read by (inf is above the bound, NaN below none). 0 is one too: a clock coarser than the steps
# reads some as 0 s, and a p10 then reads 0 (a check on it is an error that names the process, never
# a figure dropped unsaid); what lies between 0 and a nanosecond is refused (_nonzero_at_least_a_nanosecond).
_MAX_SHARE = 0.999999  # written for a share that rounds to 1 (six digits)
_Share = Annotated[float, Meta(ge=0.0, lt=1.0)]  # a share of runnable time: never all of it
_Runnable = Annotated[float, Meta(gt=0.0, le=1.0)]  # a step's runnable share of its wall time
_OwnNoise = Annotated[float, Meta(ge=0.0, le=50.0)]  # a standard deviation of a log figure: 50 is e^50 times apart


class _SampleFile(Struct, kw_only=True):
    unit: str
    count: _Count
    repetitions: _Count
    values_s: dict[str, Seconds]
    units_s: dict[str, list[Seconds]]
    cpu_units_s: dict[str, list[Seconds]] | None = None
    cpu_bound: bool = False
    blocks: list[_Count] | None = None  # older files: each process its own block
    clock: str | None = "wall"
    # Each process's own noise per statistic (own_noises) (report/figures/intervals.py); older files: none (taken as 0)
    unit_noise: dict[str, list[_OwnNoise]] | UnsetType = UNSET
    cpu_unit_noise: dict[str, list[_OwnNoise]] | UnsetType = UNSET
    # The wall time less each step's wait for a CPU (TimingSample.unwaited_units), where measured; older files: none
    unwaited_units_s: dict[str, list[Seconds]] | UnsetType = UNSET
    unwaited_unit_noise: dict[str, list[_OwnNoise]] | UnsetType = UNSET


class _StepTimeFile(Struct, kw_only=True):
    count: _Count
    median_s: Seconds | None = None
    p10_s: Seconds | None = None
    p90_s: Seconds | None = None
    mean_s: Seconds | None = None
    sample: _SampleFile | None = None
    cpu_wait: _Share | UnsetType = UNSET  # written only where measured
    runnable: _Runnable | UnsetType = UNSET  # StepTimeSnapshot.runnable, written only where measured and under 1
    parallel: Annotated[float, Meta(gt=0.0, le=1024.0)] | UnsetType = UNSET  # StepTimeSnapshot.parallel, written where known
    others_cores: Annotated[float, Meta(ge=0.0, le=1024.0)] | UnsetType = UNSET  # StepTimeSnapshot.others_cores, written where measured
    # The step numbers steady in every process, as [first, last] ranges (step_ranges); older files: none.
    steady_steps: list[tuple[_Count, _Count]] | UnsetType = UNSET


class _ModeFile(Struct, kw_only=True):
    status: str = "finished"
    exit_code: int | None = None
    steps: _Count
    repetitions: _Count = 1
    ca_graphs: _Count
    ca_cache_misses: _Count
    ca_recompiles: _Count | None = None  # older files: as ca_cache_misses
    dynamo_recompiles: _Count
    recompiles: _Count
    graph_breaks: _Count
    forward_graphs: _Count = 0
    backward_graphs: _Count = 0
    compile_time_s: Seconds
    compile_time_samples_s: list[Seconds] | None = None
    # The backwards AOTAutograd compiled at their first call, within compile_time_s; absent in files
    # written before they were counted (their compile_time_s leaves them out).
    backward_compile_s: Seconds | UnsetType = UNSET
    peak_rss_bytes: Bytes | None = None
    peak_device_memory_bytes: Bytes | None = None
    step_time: _StepTimeFile | None = None
    compile_cpu_wait: _Share | UnsetType = UNSET  # ModeSnapshot.compile_wait, written only where measured
    ranks: Annotated[int, Meta(ge=1, le=1_000_000)] | UnsetType = UNSET  # ModeSnapshot.ranks, written for a multi-rank run


class _BaselineFile(Struct, kw_only=True):
    format: str = BASELINE_FORMAT
    version: int = BASELINE_VERSION
    created_at: str = ""
    source_run: str = ""
    target: dict[str, str] = {}
    target_argv: list[str] = []
    versions: dict[str, str] = {}
    machine: dict[str, Any] = {}
    modes: dict[str, _ModeFile]
    processes: list[str] | UnsetType = UNSET  # Baseline.processes, written where known


def _sample_file(sample: TimingSample) -> _SampleFile:
    return _SampleFile(
        unit=sample.unit,
        count=sample.count,
        repetitions=sample.repetitions,
        values_s={name: _round(v) for name, v in sample.values.items()},  # type: ignore[misc]
        units_s={name: [_round(v) for v in values] for name, values in sample.units.items()},  # type: ignore[misc]
        cpu_units_s={name: [_round(v) for v in values] for name, values in sample.cpu_units.items()},  # type: ignore[misc]
        cpu_bound=sample.cpu_bound,
        blocks=list(sample.blocks),
        clock=sample.clock,
        unit_noise={name: [float(f"{v:.4g}") for v in values] for name, values in sample.unit_noise.items()} or UNSET,
        cpu_unit_noise={name: [float(f"{v:.4g}") for v in values] for name, values in sample.cpu_unit_noise.items()} or UNSET,
        unwaited_units_s={name: [_round(v) for v in values] for name, values in sample.unwaited_units.items()} or UNSET,  # type: ignore[misc]
        unwaited_unit_noise={name: [float(f"{v:.4g}") for v in values] for name, values in sample.unwaited_unit_noise.items()} or UNSET,
    )


def _mode_file(snap: ModeSnapshot) -> _ModeFile:
    st = snap.step_time
    return _ModeFile(
        status=snap.status,
        exit_code=snap.exit_code,
        steps=snap.steps,
        repetitions=snap.repetitions,
        ca_graphs=snap.ca_graphs,
        ca_cache_misses=snap.ca_cache_misses,
        ca_recompiles=snap.ca_recompiles,
        dynamo_recompiles=snap.dynamo_recompiles,
        recompiles=snap.recompiles,
        graph_breaks=snap.graph_breaks,
        forward_graphs=snap.forward_graphs,
        backward_graphs=snap.backward_graphs,
        compile_time_s=_round(snap.compile_time_s),  # type: ignore[arg-type]
        compile_time_samples_s=[_round(v) for v in snap.compile_time_samples_s] or None,  # type: ignore[misc]
        backward_compile_s=UNSET if snap.backward_compile_s is None else _round(snap.backward_compile_s),  # type: ignore[arg-type]
        peak_rss_bytes=snap.peak_rss_bytes,
        peak_device_memory_bytes=snap.peak_device_memory_bytes,
        step_time=None if st is None else _StepTimeFile(
            count=st.count,
            median_s=_round(st.median_s),
            p10_s=_round(st.p10_s),
            p90_s=_round(st.p90_s),
            mean_s=_round(st.mean_s),
            sample=None if st.sample is None else _sample_file(st.sample),
            cpu_wait=UNSET if st.cpu_wait is None else _round_share(st.cpu_wait),
            runnable=UNSET if st.runnable is None or st.runnable >= 1.0 else max(_round_share(st.runnable), 1e-6),
            parallel=UNSET if st.parallel is None or not 0 < st.parallel <= 1024 else round(st.parallel, 3),
            others_cores=UNSET if st.others_cores is None or not 0 <= st.others_cores <= 1024 else round(st.others_cores, 4),
            steady_steps=UNSET if (steady := steady_of(st)) is None else step_ranges(steady),
        ),
        compile_cpu_wait=UNSET if snap.compile_wait is None else _round_share(snap.compile_wait),
        ranks=UNSET if snap.ranks is None else snap.ranks,
    )


def _nonzero_at_least_a_nanosecond(where: str, name: str, values: list[float | None]) -> None:
    low = STEP_BOUNDS[0]
    for value in values:
        if value is not None and 0.0 < value < low:
            raise UnreadableInput(f"{where} has a bad value ({name} {value!r} is neither 0 nor at least {low:g} s)")


def _timing_sample(data: _SampleFile, where: str) -> TimingSample:
    held = [("values_s", list(data.values_s.values()))]
    held += [(f"units_s.{n}", v) for n, v in data.units_s.items()] + [(f"cpu_units_s.{n}", v) for n, v in (data.cpu_units_s or {}).items()]
    unwaited = data.unwaited_units_s if isinstance(data.unwaited_units_s, dict) else {}
    held += [(f"unwaited_units_s.{n}", v) for n, v in unwaited.items()]
    for key, values in held:
        _nonzero_at_least_a_nanosecond(where, f"step_time.sample.{key}", values)  # type: ignore[arg-type]
    missing = [name for name in FIELDS if name not in data.values_s or name not in data.units_s]
    if missing:
        raise UnreadableInput(f"{where} lacks step_time.sample's {', '.join(missing)}")
    # One figure per process: the repetitions are the figures the file holds, never more.
    lengths = {len(v) for v in (*data.units_s.values(), *(data.cpu_units_s or {}).values(), *unwaited.values(),
                                *([data.blocks] if data.blocks else []))}
    if lengths != {data.repetitions}:
        raise UnreadableInput(f"{where}: step_time.sample says {data.repetitions} processes but holds "
                              f"{' or '.join(str(n) for n in sorted(lengths))} figures a statistic")
    blocks = tuple(data.blocks) if data.blocks else tuple(range(1, data.repetitions + 1))
    # A process's own noise goes with its figure: a list of another length is no process's (ignored, as an older file's absence is).
    def own(noise: dict[str, list[float]] | UnsetType) -> dict[str, tuple[float, ...]]:
        return {k: tuple(v) for k, v in noise.items() if len(v) == data.repetitions} if isinstance(noise, dict) else {}

    return TimingSample(data.count, data.repetitions, data.unit, dict(data.values_s), {k: tuple(v) for k, v in data.units_s.items()},
                        {k: tuple(v) for k, v in (data.cpu_units_s or {}).items()}, data.cpu_bound, blocks, data.clock or "wall",
                        unit_noise=own(data.unit_noise), cpu_unit_noise=own(data.cpu_unit_noise),
                        unwaited_units={k: tuple(v) for k, v in unwaited.items()}, unwaited_unit_noise=own(data.unwaited_unit_noise))


def _round_share(value: float) -> float:
    return min(_round(value), _MAX_SHARE)  # type: ignore[type-var]


def _mode_snapshot(name: str, data: _ModeFile, where: str) -> ModeSnapshot:
    low = STEP_BOUNDS[0]
    for field_name, value in (("compile_time_s", data.compile_time_s), *(("compile_time_samples_s", v) for v in data.compile_time_samples_s or ())):
        if 0.0 < value < low:
            raise UnreadableInput(f"{where}: mode {name!r} has a bad value ({field_name} {value!r} is neither 0 nor at least {low:g} s)")
    st = data.step_time
    step_time = None
    if st is not None:
        for key in ("median_s", "p10_s", "p90_s", "mean_s"):
            _nonzero_at_least_a_nanosecond(f"{where}: mode {name!r}", f"step_time.{key}", [getattr(st, key)])
        sample = None if st.sample is None else _timing_sample(st.sample, f"{where}: mode {name!r}")
        cpu_wait = None if st.cpu_wait is UNSET else st.cpu_wait
        steady = None
        if st.steady_steps is not UNSET:
            if any(a > b for a, b in st.steady_steps) or sum(b - a + 1 for a, b in st.steady_steps) > MAX_STEADY_STEPS:
                raise UnreadableInput(f"{where}: mode {name!r} has a bad value (step_time.steady_steps: a range whose first "
                                      f"step is after its last, or more than {MAX_STEADY_STEPS:,} steps)")
            steady = steps_of_ranges(st.steady_steps)
        step_time = StepTimeSnapshot(st.count, st.median_s, st.p10_s, st.p90_s, st.mean_s, sample, cpu_wait,  # type: ignore[arg-type]
                                     steady_steps=steady, runnable=None if st.runnable is UNSET else st.runnable,  # type: ignore[arg-type]
                                     parallel=None if st.parallel is UNSET else st.parallel,  # type: ignore[arg-type]
                                     others_cores=None if st.others_cores is UNSET else st.others_cores)  # type: ignore[arg-type]
    return ModeSnapshot(
        mode=name,
        status=data.status,
        exit_code=data.exit_code,
        steps=data.steps,
        ca_graphs=data.ca_graphs,
        ca_cache_misses=data.ca_cache_misses,
        ca_recompiles=data.ca_recompiles,  # type: ignore[arg-type]
        dynamo_recompiles=data.dynamo_recompiles,
        recompiles=data.recompiles,
        graph_breaks=data.graph_breaks,
        forward_graphs=data.forward_graphs,
        backward_graphs=data.backward_graphs,
        compile_time_s=data.compile_time_s,
        step_time=step_time,
        repetitions=data.repetitions,
        peak_rss_bytes=data.peak_rss_bytes,
        peak_device_memory_bytes=data.peak_device_memory_bytes,
        compile_time_samples_s=tuple(data.compile_time_samples_s or ()),
        backward_compile_s=None if data.backward_compile_s is UNSET else data.backward_compile_s,  # type: ignore[arg-type]
        compile_wait=None if data.compile_cpu_wait is UNSET else data.compile_cpu_wait,  # type: ignore[arg-type]
        ranks=None if data.ranks is UNSET else data.ranks,  # type: ignore[arg-type]
    )


def baseline_to_dict(baseline: Baseline) -> dict[str, Any]:
    document = _BaselineFile(
        created_at=baseline.created_at,
        source_run=baseline.source_run,
        target=baseline.target,
        target_argv=baseline.target_argv,
        versions=baseline.versions,
        machine=baseline.machine,
        modes={name: _mode_file(snap) for name, snap in baseline.modes.items()},
        processes=list(baseline.processes) if baseline.processes else UNSET,
    )
    return msgspec.to_builtins(document)  # type: ignore[no-any-return]


def save_baseline(baseline: Baseline, path: Path, source: str | None = None) -> Path:
    """Write `baseline` to `path`, once it reads back as `gate --baseline` will read it: a figure
    the reader refuses (a step of 1e-300 s, a compile time of 1e308 s) is an UnreadableInput naming
    `source` (what the figures came from: "run PATH"; default the baseline's source run), the field
    and the value, and nothing is written."""
    path = Path(path)
    # json's layout (indent 2, ASCII escapes), the one baseline files committed so far were written in.
    document = baseline_to_dict(baseline)
    text = json.dumps(document, indent=2, sort_keys=False) + "\n"
    if len(text) > MAX_JSON_FILE_BYTES:  # ASCII: one byte a character
        # Cut, its figures would no longer be the run's: refused, and the file there is left as it was.
        raise UnreadableInput(f"not saving the baseline: it would be {len(text):,} bytes, more than the {MAX_JSON_FILE_BYTES:,} "
                              f"`cagtool gate` reads from a baseline (the run's {_largest_field(document)}); "
                              f"{path} is left as it was")
    try:
        baseline_from_document(json_loads(text), source or f"run {baseline.source_run}")
    except UnreadableInput as exc:
        raise UnreadableInput(f"not saving the baseline: {exc}; {path} is left as it was") from None
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)  # never leave a half-written baseline behind
    return path


def _largest_field(data: dict[str, Any]) -> str:
    """Which field of the baseline holds the most: what made it too large, in words."""
    name, value = max(data.items(), key=lambda item: len(json.dumps(item[1])))
    return f"{name} is {len(json.dumps(value)):,} bytes of it"


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline file; anything missing or malformed is an UnreadableInput (exit 3)."""
    path = Path(path)
    data = read_json_object(path, "baseline", missing_hint=f" (create it with: cagtool baseline save RUN -o {path})")
    return baseline_from_document(data, f"baseline {path}", path)


def baseline_from_document(data: dict[str, Any], where: str, path: Path | None = None) -> Baseline:
    """A baseline file's JSON document as a Baseline, held to every rule a baseline is read by:
    what `load_baseline` reads and what `save_baseline` is about to write. Anything malformed is an
    UnreadableInput whose message starts with `where` ("baseline PATH", "run PATH") and names the
    field and its value."""
    check_format(data, BASELINE_FORMAT, path if path is not None else where, what="cagtool baseline",  # type: ignore[arg-type]
                 version_key="version", readable=BASELINE_VERSION)
    modes = data.get("modes")
    if not isinstance(modes, dict) or not modes:
        raise UnreadableInput(f"{where} has no modes")
    snapshots = {}
    for name, value in modes.items():  # one by one, so that an error names the mode (msgspec's path does not)
        try:
            snapshots[str(name)] = _mode_snapshot(str(name), msgspec.convert(value, _ModeFile), where)
        except msgspec.ValidationError as exc:
            raise UnreadableInput(f"{where}: mode {name!r} has a bad value ({exc}){_refused_value(value, exc, _ModeFile)}") from None
    rest = {**data, "modes": {}}
    try:
        document = msgspec.convert(rest, _BaselineFile)
    except msgspec.ValidationError as exc:
        raise UnreadableInput(f"{where} is malformed: {exc}{_refused_value(rest, exc, _BaselineFile)}") from None
    reference = reference_loop_of(document.machine, where)
    snapshots = {name: replace(snap, reference_loop_s=reference) for name, snap in snapshots.items()}
    return Baseline(
        modes=snapshots,
        versions=document.versions,
        machine=document.machine,
        target=document.target,
        target_argv=document.target_argv,
        source_run=document.source_run,
        created_at=document.created_at,
        path=path,
        processes=() if document.processes is UNSET else tuple(document.processes),
    )


_PATH_STEP = r"\.([^.\[]+)|\[(\d+|\.\.\.)\]"
_SHOWN_VALUE = 80  # characters of a refused value quoted in the error


def _refused_value(document: Any, exc: msgspec.ValidationError, kind: type) -> str:
    """": FIELD is VALUE" for the value msgspec refused in `document` (converted to `kind`): its
    path (`$.step_time.sample.units_s[...][1]`) with the dict keys msgspec writes as `[...]` found
    by converting the document with that dict cut to one entry, the first that is refused alone.
    "" where the error names no value (a field missing)."""
    import copy
    import re

    message = str(exc)
    _, at, tail = message.rpartition(" - at `$")
    if not at:
        return ""
    steps = re.findall(_PATH_STEP, tail.rstrip("`"))
    shown: list[str] = []
    trail: list[Any] = []
    node = document
    for attr, index in steps:
        if attr:
            if not isinstance(node, dict) or attr not in node:
                return ""
            key: Any = attr
            shown.append(f".{attr}" if shown else attr)
        elif index != "...":
            if not isinstance(node, list) or int(index) >= len(node):
                return ""
            key = int(index)
            shown.append(f"[{index}]")
        else:
            if not isinstance(node, dict):
                return ""
            key = None
            for candidate in node:
                alone = copy.deepcopy(document)
                holder = alone
                for step in trail:
                    holder = holder[step]
                holder.clear()
                holder[candidate] = node[candidate]
                try:
                    msgspec.convert(alone, kind)
                except msgspec.ValidationError as again:
                    if str(again) == message:
                        key = candidate
                        break
            if key is None:
                return ""
            shown.append(f".{key}" if isinstance(key, str) and key.isidentifier() else f"[{key!r}]")
        trail.append(key)
        node = node[key]
    value = repr(node)
    if len(value) > _SHOWN_VALUE:
        value = f"{value[:_SHOWN_VALUE]}[... {len(value):,} characters]"
    return f": {''.join(shown)} is {value}"


def environment_warnings(baseline: Baseline, run: RunRecord) -> list[str]:
    """Why timings of this run may not compare with the baseline's: another torch, another
    machine, another target. Warnings, not failures: counts still compare exactly."""
    where = baseline.path or "the baseline"
    warnings: list[str] = []
    base_torch = baseline.versions.get("torch")
    run_torch = run.meta.versions.get("torch")
    if base_torch and run_torch and base_torch != run_torch:
        warnings.append(
            f"torch version differs: baseline {base_torch}, this run {run_torch}; "
            f"refresh {where} if the change is intended"
        )
    differing = []
    for key in sorted(set(baseline.machine) & set(run.meta.machine)):
        if key in _VOLATILE_MACHINE_KEYS:
            continue
        if baseline.machine[key] != run.meta.machine[key]:
            differing.append(f"{key} {baseline.machine[key]!r} -> {run.meta.machine[key]!r}")
    if differing:
        warnings.append(f"machine differs from the baseline's ({'; '.join(differing)}): timings may not compare")
    base_name = Path(baseline.target.get("name", "")).name
    run_name = Path(run.meta.target.get("name", "")).name
    if base_name and run_name and base_name != run_name:
        warnings.append(f"target differs: baseline was recorded from {base_name}, this run is {run_name}")
    elif baseline.target_argv and baseline.target_argv[1:] != run.meta.target_argv[1:] and run.meta.target_argv:
        warnings.append(
            f"target arguments differ: baseline {baseline.target_argv[1:]}, this run {run.meta.target_argv[1:]}"
        )
    return warnings
