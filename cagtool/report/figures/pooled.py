"""One mode of a run with its repetitions pooled (`ModeColumn`, `mode_columns`), and the one rule
that turns a timing ratio's interval into a verdict against a bound (`speedup_verdict`). Read by
`compare` (its speedups) and by `gate` (its checks and baseline files): a pooled per-mode figure,
not one report's own."""

from __future__ import annotations

import os
import re
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from cagtool.errors import UnreadableInput
from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.report.findings import SkippedCompile, skipped_compiles, thread_deaths
from cagtool.record.schema import (
    EVENTS_FILE,
    MANIFEST_FILE,
    STATUS_FINISHED,
    STATUS_RUNNING,
)
from cagtool.report.figures.intervals import ProcessSteps, TimingSample, timing_sample
from cagtool.report.figures.same_steps import same_steps, step_profile
from cagtool.report.known_failures import in_ca_graph_compile
from cagtool.report.text.safe_text import safe_line
from cagtool.torch_text import ca_node_in_error
from cagtool.report.figures.metrics import (
    INTERRUPTION_WORDS,
    CpuWait,
    ModeMetrics,
    StepStats,
    compile_wait,
    cpu_wait,
    not_times,
    median_parallel,
    median_runnable,
    mode_metrics,
    record_step_intervals,
    slowdown_of,
    stats_of_intervals,
    steady_cpu_seconds,
    steady_step_numbers,
    step_waits,
    untimed_steps,
)

# A median step that waited this share of its runnable time or more is not judged against: the
# CPU-bound model (a share w makes a step 1 / (1 - w) as long) is a lower bound, 1.35-1.40x short
# of the measured slowdown of torch steps of one and two threads that waited 41-51% (within
# metrics.LOAD_EXPONENT's range), and 1.8-2.2x short at 60-66%, beyond it (benchmarks/load_model.py;
# docs/ci.md, "The machine's load"). The law broke below half a wait too: an unchanged one-thread job
# of 5 processes whose median step waited 49% read 3.03x the wall time of its own 5 processes at 19%,
# where the law bounds the pair at 2.09x (the model's 1.59 to the power 2.4).
HEAVY_WAIT = 0.4


STATUS_MISSING = "missing"  # listed in run.json but no manifest was written (the process died early)

# How a run that ended before all its modes ran ended (run.json's status), as the reason a mode
# it never started gives.
def base_mode(record_name: str) -> str:
    """`ca.2` -> `ca`: repetitions are stored as `<mode>.<n>` directories."""
    head, dot, tail = record_name.rpartition(".")
    return head if dot and tail.isdigit() else record_name


def repetition_index(record_name: str) -> int:
    head, dot, tail = record_name.rpartition(".")
    return int(tail) if dot and tail.isdigit() else 1


@dataclass(frozen=True)
class ModeFailure:
    """Why one recorded mode (or repetition) did not finish cleanly."""

    record: str  # directory name: "ca" or "ca.2"
    status: str  # failed | timeout | interrupted | running (killed) | missing
    exit_code: int | None
    reason: str  # one line: "RuntimeError: boom", "stopped after 5 s (--max-time)"...
    # Never started: the run was stopped before its turn (`reason` says how). Its status stays
    # `missing` (no record to read a figure from), but it is said as not run, never as a death.
    not_run: bool = False
    # Its exception was raised inside torch's compiler (a frame of torch._dynamo, _functorch or
    # _inductor on its traceback), not where the script used what torch.compile returned (a torch.load
    # of a compiled module's pickle after training); None where no traceback was kept
    in_compiler: bool | None = None
    # The autograd node compiled autograd's graph failed on, where torch's error names one
    # (`PackPaddedSequenceBackward0`): the op whose backward compiled autograd cannot run
    ca_node: str | None = None
    # Raised while Dynamo compiled a compiled-autograd graph (known_failures.in_ca_graph_compile)
    in_ca_graph: bool = False
    # Its exception's message names torch.compile's wrapper (`_orig_mod` keys of a state dict,
    # OptimizedModule): the job failed using what torch.compile returned, which every mode returns
    # alike (the eager mode keeps the wrapper, as the plain job has it)
    compile_wrapper: bool = False

    def describe(self) -> str:
        if self.not_run:
            return f"{self.record}: not run: {self.reason}"
        code = f", exit code {self.exit_code}" if self.exit_code not in (None, 0) else ""
        return f"{self.record}: {self.status}{code}: {self.reason}"


@dataclass(frozen=True)
class ModeColumn:
    """One mode of a run, repetitions pooled.

    Counts (graphs, breaks, recompiles) come from the first repetition that left a record: they
    are deterministic. Step times pool the steady intervals of every repetition; compile time and
    time to first step are the median over repetitions (each ran with a fresh compile cache unless
    --warm-cache); peak memory is the largest."""

    name: str  # eager | aot | ca
    records: tuple[str, ...]  # directory names pooled, in run order: ("ca", "ca.2")
    metrics: ModeMetrics | None  # of the first repetition with a record; None when none has one
    step_time: StepStats  # pooled over repetitions
    repetition_medians: tuple[float | None, ...] = ()
    timing: TimingSample | None = None  # what the intervals of its step times are made from
    compile_time_s: float | None = None
    compile_phases_s: dict[str, float] = field(default_factory=dict)
    first_step_s: float | None = None
    peak_rss_bytes: int | None = None
    peak_device_memory_bytes: int | None = None  # CUDA max allocated, when the job used CUDA
    failures: tuple[ModeFailure, ...] = ()
    # Threads of the job that died while its processes went on (report.findings.thread_deaths), one
    # line each: the process may finish cleanly, but its figures are not the whole job's.
    threads_died: tuple[str, ...] = ()
    # The job's module.compile() calls that compiled nothing (report.findings.skipped_compiles), of
    # its first repetition with a record: the mode ran those modules eagerly.
    skipped_compiles: tuple[SkippedCompile, ...] = ()
    # How long its processes waited for a CPU in their steady steps, repetitions summed; None where
    # it was not measured (metrics.CpuWait).
    cpu_wait: CpuWait | None = None
    # The largest share its processes waited for a CPU before their steady steps, where the compile
    # time was measured (metrics.compile_wait), the largest of the repetitions that have it; None with none.
    compile_wait: float | None = None
    # Each process's steady steps (what `timing` is made from), with their step numbers where known.
    processes: tuple[ProcessSteps, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures and self.metrics is not None

    @property
    def status(self) -> str:
        return self.failures[0].status if self.failures else STATUS_FINISHED

    @property
    def exit_code(self) -> int | None:
        for failure in self.failures:
            if failure.exit_code not in (None, 0):
                return failure.exit_code
        if self.failures:
            return self.failures[0].exit_code
        return self.metrics.exit_code if self.metrics is not None else None


def _failure_of(name: str, record: ModeRecord | None, exit_code: int | None, not_run_reason: str | None = None,
                missing_reason: str | None = None) -> ModeFailure | None:
    if record is None and not_run_reason is not None:
        return ModeFailure(name, STATUS_MISSING, None, not_run_reason, not_run=True)
    if record is None:
        reason = missing_reason or "no record was written (the process died before starting the target)"
        return ModeFailure(name, STATUS_MISSING, exit_code, reason)
    manifest = record.manifest
    if manifest.status == STATUS_FINISHED and manifest.exit_code in (0, None):
        return None
    code = manifest.exit_code if manifest.exit_code is not None else exit_code
    if manifest.status == STATUS_RUNNING:
        signal_note = f" (exit code {code})" if code not in (None, 0) else ""
        # The loader reads a record whose process is gone from this host as killed (record/liveness.py):
        # one still "running" is being written now, or its process ran where this host cannot look.
        return ModeFailure(name, STATUS_RUNNING, code, f"its record is not finished: the process is still running, or it was "
                                                       f"killed on a host this one cannot look at{signal_note}")
    node = None
    if manifest.exception is not None:
        exc = manifest.exception
        first_line = (exc.message or "").strip().splitlines()[0] if (exc.message or "").strip() else ""
        reason = f"{exc.type}: {first_line}" if first_line else exc.type
        node = ca_node_in_error(exc.message or "")
        if node is not None and node not in first_line:
            # The message's first line does not say where: the node is deep in torch's text.
            reason += f" (at the autograd node {node}, in compiled autograd's graph)"
    else:
        reason = f"exited with code {code}"
    # The job's own text (torch's messages carry terminal escapes: "\x1b[1mdo those steps only if you
    # trust the source\x1b[0m"): one plain line wherever it goes, the JSON headline included.
    trace = manifest.exception.traceback if manifest.exception is not None else ""
    in_compiler = bool(_COMPILER_FRAME.search(trace)) if trace else None
    wrapper = bool(_COMPILE_WRAPPER.search(manifest.exception.message or "")) if manifest.exception is not None else False
    return ModeFailure(name, manifest.status, code, safe_line(reason), in_compiler=in_compiler,
                       ca_node=safe_line(node) if node else None, in_ca_graph=in_ca_graph_compile(manifest.exception),
                       compile_wrapper=wrapper)


_COMPILER_FRAME = re.compile(r"torch[/\\]_(dynamo|functorch|inductor)[/\\]")
_COMPILE_WRAPPER = re.compile(r"\b_orig_mod\b|\bOptimizedModule\b")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def mode_column(name: str, records: list[tuple[str, ModeRecord | None]], exit_codes: dict[str, int | None],
                not_run_reasons: dict[str, str] | None = None, missing_reasons: dict[str, str] | None = None) -> ModeColumn:
    """Pool one mode's repetitions, given as (directory name, record or None) in run order.
    `not_run_reasons`: directory name -> why the run never started it (`not_run`);
    `missing_reasons`: directory name -> what its directory says of a record with no manifest."""
    present = [(n, r) for n, r in records if r is not None]
    reasons = not_run_reasons or {}
    missing = missing_reasons or {}
    failures = tuple(f for n, r in records if (f := _failure_of(n, r, exit_codes.get(n), reasons.get(n), missing.get(n))) is not None)
    if not present:
        return ModeColumn(name, tuple(n for n, _ in records), None, stats_of_intervals([], []), failures=failures)
    per_rep = [(r, mode_metrics(r)) for _, r in present]
    intervals: list[float] = []
    excluded: list[int] = []
    clocks: set[str] = set()
    processes: list[ProcessSteps] = []
    for (record_name, _), (record, _metrics) in zip(present, per_rep):
        rep_intervals, rep_excluded, clock = record_step_intervals(record)
        processes.append(_process_steps(record, repetition_index(record_name), rep_intervals, clock))
        intervals.extend(rep_intervals)
        excluded.extend(rep_excluded)
        clocks.add(clock)
    _refuse_same_steps(name, [n for n, _ in present], processes)
    firsts = [m.step_time.first_step_s for _, m in per_rep if m.step_time and m.step_time.first_step_s is not None]
    first = per_rep[0][1]
    phases = {
        key: _median([m.compile_phases_s.get(key, 0.0) for _, m in per_rep]) or 0.0
        for key in first.compile_phases_s
    }
    peaks = [m.peak_rss_bytes for _, m in per_rep if m.peak_rss_bytes is not None]
    device_peaks = [m.peak_device_memory_bytes for _, m in per_rep if m.peak_device_memory_bytes is not None]
    return ModeColumn(
        name=name,
        records=tuple(n for n, _ in records),
        metrics=first,
        # Excluded steps are listed per repetition; the first one's are the informative ones.
        step_time=_pooled_stats(per_rep, intervals, sorted(set(excluded)), _median(firsts), "device" if clocks == {"device"} else "wall"),
        repetition_medians=tuple(m.step_time.median_s if m.step_time else None for _, m in per_rep),
        timing=timing_sample(processes, "device" if clocks == {"device"} else "wall"),
        compile_time_s=_median([m.compile_time_s for _, m in per_rep]),
        compile_phases_s=phases,
        first_step_s=_median(firsts),
        peak_rss_bytes=max(peaks) if peaks else None,
        peak_device_memory_bytes=max(device_peaks) if device_peaks else None,
        failures=failures,
        threads_died=tuple(f"{record_name}: {death}" if len(present) > 1 else death
                           for record_name, record in present for death in thread_deaths(record)),
        skipped_compiles=skipped_compiles(per_rep[0][0]),
        cpu_wait=_pooled_cpu_wait([record for record, _ in per_rep]),
        compile_wait=_largest([compile_wait(record) for record, _ in per_rep]),
        processes=tuple(processes),
    )


def _refuse_same_steps(mode: str, names: list[str], processes: list[ProcessSteps]) -> None:
    """UnreadableInput when two repetitions of a mode have the same step times, to the nanosecond,
    beyond what their clocks could give by chance (same_steps.same_steps), also with some steps
    edited, shifted or reordered: one process's record copied under another name with its pid or
    clock edited, which would count one process as two that agree and narrow the gate's interval.
    Genuine processes never share their steps."""
    if len(processes) < 2:
        return
    profiles = [step_profile(p.times) for p in processes]
    for i in range(len(processes)):
        for j in range(i + 1, len(processes)):
            found = same_steps(profiles[i], profiles[j])
            if found is not None:
                raise UnreadableInput(
                    f"mode {mode}: {names[j]} and {names[i]} have the same step times ({found.words()}): one process's record under two names, "
                    "not two processes; a repetition is a process of its own"
                )


def _largest(values: list[float | None]) -> float | None:
    """The largest of the readings there are (None: a repetition without one), None with none."""
    read = [v for v in values if v is not None]
    return max(read) if read else None


def _process_steps(record: ModeRecord, block: int, times: list[float], clock: str) -> ProcessSteps:
    """One process's steady steps for the intervals: its times, and on the wall clock its CPU
    times and waits for a CPU where the record has them for every steady step."""
    cpu = steady_cpu_seconds(record) if clock == "wall" else None
    thread = steady_cpu_seconds(record, "thread_cpu_s") if cpu is not None else None
    waits = step_waits(record) if cpu is not None else None
    cpu = cpu if cpu is not None and len(cpu) == len(times) else None
    thread = thread if thread is not None and len(thread) == len(times) else None
    # A CPU time that is no time is left out of no figure: the step is named instead, as a wall time is.
    bad = [not_times(c) for c in (cpu, thread) if c is not None]
    untimed = untimed_steps(record) + (int((bad[0] | bad[-1]).sum()) if bad else 0)
    numbers = steady_step_numbers(record)
    return ProcessSteps(block, times, cpu, waits[1] if waits is not None and len(waits[1]) == len(times) else None, thread, untimed,
                        numbers if len(numbers) == len(times) else None)


@dataclass(frozen=True)
class CommonSteps:
    """Two sides' processes (two modes of one run, or one mode of two runs), each keeping only the
    steps steady in every process of both: a compile or capture that touched a step on one side
    only (ca's capture of the .grad warm-up at the second step, a recompile at a new shape) leaves
    it out of the other too, so the ratio is of the same steps of the script, not of each side's
    own steady set."""

    first: tuple[ProcessSteps, ...]
    second: tuple[ProcessSteps, ...]
    left_out: tuple[int, ...]  # step numbers steady on some process of a side but not in all of both, in order

    def sample(self, side: int, clock: str) -> TimingSample | None:
        return timing_sample(self.first if side == 0 else self.second, clock)


def steady_in_every(processes: Sequence[ProcessSteps]) -> Any:
    """The step numbers steady in every one of `processes` (a sorted numpy int64 array); None where
    a process's are not known. A process's steps are numbered once each, in step order."""
    import numpy as np

    if not processes or any(p.steps is None for p in processes):
        return None
    arrays = [np.asarray(p.steps, dtype=np.int64) for p in processes]
    common = arrays[0]
    for array in arrays[1:]:
        if not (len(array) == len(common) and bool(np.array_equal(array, common))):
            common = np.intersect1d(common, array, assume_unique=True)
    return common


def common_steps(first: Sequence[ProcessSteps], second: Sequence[ProcessSteps]) -> CommonSteps | None:
    """`CommonSteps` of two sides; None where a process's step numbers are not known (a schema-1
    record, a record whose steady steps and numbers disagree), which then compare as they are.
    In numpy: a job's 100,000 steps a process are never a Python int each."""
    import numpy as np

    every = [*first, *second]
    if not first or not second or any(p.steps is None for p in every):
        return None
    common = steady_in_every(every)
    others = [np.setdiff1d(np.asarray(p.steps, dtype=np.int64), common, assume_unique=True) for p in every if len(p.steps) != len(common)]  # type: ignore[arg-type]
    left_out = tuple(np.unique(np.concatenate(others)).tolist()) if others else ()
    if not left_out:
        return CommonSteps(tuple(first), tuple(second), ())
    return CommonSteps(tuple(keeping(p, common) for p in first), tuple(keeping(p, common) for p in second), left_out)


def keeping(process: ProcessSteps, steps: Any) -> ProcessSteps:
    """The process with only its steps numbered in `steps` (a sorted array of step numbers; times,
    CPU times and waits alike, as numpy arrays)."""
    import numpy as np

    assert process.steps is not None
    numbers = np.asarray(process.steps, dtype=np.int64)
    mask = np.isin(numbers, steps, assume_unique=True)
    if bool(mask.all()):
        return process

    def kept(values: Sequence[float] | None) -> Any:
        return None if values is None else np.asarray(values, dtype=float)[mask]

    return replace(process, times=kept(process.times), cpu=kept(process.cpu), wait_share=kept(process.wait_share),
                   thread_cpu=kept(process.thread_cpu), steps=numbers[mask])


def on_common_steps(first: ModeColumn, second: ModeColumn) -> tuple[ModeColumn, ModeColumn, tuple[int, ...]]:
    """Two modes of one run with their step figures on the steps steady in both (`CommonSteps`),
    and the steps left out; the columns as they are where the steps cannot be paired or none is."""
    found = common_steps(first.processes, second.processes)
    if found is None or not found.left_out:
        return first, second, ()
    return _column_on(first, found.first), _column_on(second, found.second), found.left_out


def steps_words(numbers: Sequence[int], shown: int = 6) -> str:
    """`step 3`, `steps 1, 2, 7`, `steps 1, 2, 3, 4, 5, 6 and 14 more`."""
    head = ", ".join(str(n) for n in numbers[:shown])
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"step{'s' if len(numbers) != 1 else ''} {head}{more}"


def _column_on(column: ModeColumn, processes: tuple[ProcessSteps, ...]) -> ModeColumn:
    import numpy as np

    clock = column.step_time.clock
    times = np.sort(np.concatenate([np.asarray(p.times, dtype=float) for p in processes])).tolist()
    stats = replace(stats_of_intervals(times, list(column.step_time.excluded), column.step_time.first_step_s, clock, presorted=True),
                    interrupted=column.step_time.interrupted, interruptions=column.step_time.interruptions)
    # The load on the steps the figure now rests on: a step left out may be the one a neighbour slowed.
    wait, slowdown = column.cpu_wait, processes_slowdown(processes)
    if wait is not None and slowdown is not None:
        wait = replace(wait, median_slowdown=slowdown)
    return replace(column, processes=processes, timing=timing_sample(processes, clock), step_time=stats, cpu_wait=wait)


def processes_slowdown(processes: Sequence[ProcessSteps]) -> float | None:
    """What waiting for a CPU made of a side's figure, as metrics.median_slowdown reads it for one
    process (its median step's time over the median of its steps' times less their waits), for each
    process on the steps it keeps, and the median over the processes (each one unit of evidence, as
    the side's figure is the median of theirs). None where a process has no waits per step."""
    found = []
    for process in processes:
        if process.wait_share is None or len(process.times) == 0 or len(process.wait_share) != len(process.times):
            return None
        slowdown = slowdown_of(process.times, process.wait_share)
        if slowdown is None:
            return None
        found.append(slowdown)
    return statistics.median(found) if found else None


def _pooled_cpu_wait(records: list[ModeRecord]) -> CpuWait | None:
    """The CPU wait of the repetitions that have their reading, summed; None when none has. A
    repetition without one (its cpu_wait.json lost or refused) does not take the others' away: the
    load rules would then be off for the whole side, and a loaded baseline's verdict stand."""
    read = [(record, reading) for record in records if (reading := cpu_wait(record)) is not None]
    if not read:
        return None
    stalls = [r.stall_s for _, r in read]
    # A repetition that ran beside others makes the side's waits no longer all its own: the largest.
    others = [r.others_cores for _, r in read]
    # The side's figure is the median of its processes' (each process one unit of evidence), and
    # so is its load: the median of each repetition's own median-step slowdown. Pooled over every
    # step instead, a side whose processes were loaded in 2 of 3 (their steady steps 5-20x slower,
    # the third's as quiet as the baseline's) read no load at all, and its figure "slower".
    slowdowns = [r.median_slowdown for _, r in read]
    return CpuWait(sum(r.wait_s for _, r in read), sum(r.run_s for _, r in read), sum(r.window_s for _, r in read),
                   stall_s=sum(stalls) if all(s is not None for s in stalls) else None,  # type: ignore[misc]
                   median_slowdown=statistics.median(slowdowns) if None not in slowdowns else None,  # type: ignore[type-var]
                   median_runnable=median_runnable([record for record, _ in read]),
                   median_parallel=median_parallel([record for record, _ in read]),
                   others_cores=max(others) if None not in others else None)  # type: ignore[type-var]


def _pooled_stats(per_rep: list[tuple[ModeRecord, ModeMetrics]], intervals: list[float], excluded: list[int], first_step_s: float | None, clock: str) -> StepStats:
    """`stats_of_intervals` of the pooled repetitions. One repetition's are its own metrics' (the
    same intervals, first step and clock), already computed: a gate over 8 ranks of 100,000 steps
    would sort each rank's steps again."""
    if len(per_rep) == 1:
        own = per_rep[0][1].step_time
        if own is not None and own.count == len(intervals) and own.first_step_s == first_step_s and own.clock == clock:
            return replace(own, excluded=excluded)
    # The steps other work alone left out, of any repetition (as `excluded` lists every one's).
    interrupted = tuple(sorted({step for _, m in per_rep if m.step_time for step in m.step_time.interrupted}))
    kinds = {kind for _, m in per_rep if m.step_time for kind in m.step_time.interruptions}
    return replace(stats_of_intervals(intervals, excluded, first_step_s, clock), interrupted=interrupted,
                   interruptions=tuple(k for k in INTERRUPTION_WORDS if k in kinds))


def ca_graphs_compiler(run: RunRecord) -> str:
    """What compiled the ca mode's CA graphs (CAGraphEvent.compiler): cagtool's --backend, or the
    script's own CA compiler where cagtool kept it (DeepSpeed's); "" where both did, or no CA graph
    says (an older record reads as --backend)."""
    from cagtool.record.schema import CAGraphEvent

    record = run.modes.get("ca")
    if record is None:
        return ""
    found = {graph.compiler.partition(":")[2] if graph.compiler.startswith("script") else record.manifest.backend
             for graph in record.of(CAGraphEvent)} or {record.manifest.backend}
    return found.pop() if len(found) == 1 else ""


def compilers_differ(run: RunRecord) -> tuple[str, str]:
    """For a ca/aot ratio whose two backwards different compilers compiled, (ca's, aot's): ca's CA
    graphs by `ca_graphs_compiler`, aot's by the script's own torch.compile, with Inductor (its
    compiles spent time in Inductor) or without; () where both used Inductor or neither, or aot
    compiled no backward (the script compiles nothing: aot ran it eagerly). Read from the aot
    record's compile events (counts are the same in every repetition), not its pooled steps."""
    from cagtool.record.schema import AotBackwardGraphEvent, DynamoCompileEvent

    ca_backend, aot = ca_graphs_compiler(run), run.modes.get("aot")
    if not ca_backend or aot is None or "ca" not in run.modes or not aot.of(AotBackwardGraphEvent):
        return ()
    aot_inductor = sum(d.inductor_cumulative_compile_time_s or 0.0 for d in aot.of(DynamoCompileEvent)) > 0
    if aot_inductor == (ca_backend == "inductor"):
        return ()
    return ca_backend, "Inductor" if aot_inductor else "the script's backend, not Inductor"


def mode_columns(run: RunRecord) -> dict[str, ModeColumn]:
    """Base mode -> pooled column, in the order modes first ran (eager, aot, ca for the default)."""
    grouped: dict[str, list[tuple[str, ModeRecord | None]]] = {}
    names = list(run.meta.modes) or list(run.modes)
    for extra in run.modes:  # a record on disk that run.json does not list (an older writer)
        if extra not in names:
            names.append(extra)
    for record_name in names:
        grouped.setdefault(base_mode(record_name), []).append((record_name, run.modes.get(record_name)))
    for reps in grouped.values():
        reps.sort(key=lambda item: repetition_index(item[0]))
    exit_codes = dict(run.meta.mode_exit_codes or {})
    ended = run.ended_early_words()
    reasons = {record_name: ended for record_name in run.not_run()} if ended is not None else {}
    missing = {record_name: why for reps in grouped.values() for record_name, record in reps
               if record is None and record_name not in reasons and (why := manifest_missing(run, record_name)) is not None}
    return {name: mode_column(name, reps, exit_codes, reasons, missing) for name, reps in grouped.items()}


def manifest_missing(run: RunRecord, record_name: str) -> str | None:
    """Why a mode has no record when its process did start. The mode process creates events.jsonl
    and at once writes its manifest (status running), then events: events in events.jsonl with no
    manifest beside it are a manifest lost or removed since, a damaged record, not a process that
    died before the target; an empty events.jsonl alone, a manifest never written (killed in that
    instant, a full disk). cagtool's parent writes spec.json there before the process starts: it
    proves nothing. None where there is no events.jsonl. The loader has refused a mode directory
    planted as a link, and lstat follows no link."""
    try:
        size = os.lstat(run.path / record_name / EVENTS_FILE).st_size
    except OSError:
        return None
    where = f"{record_name}/{EVENTS_FILE}"
    if size:
        return f"its {MANIFEST_FILE} is missing: a damaged record (the process did start: {where} holds its events)"
    return f"its {MANIFEST_FILE} is missing: the process started its record ({where}, empty) and wrote no manifest (killed at once, or a full disk)"


# The per-mode fields every format shows (JSON keys; the table and CSV read the same values).
NUMERIC_FIELDS = (
    "forward_graphs",
    "backward_graphs",
    "aot_backward_graphs",
    "ca_graphs",
    "graph_breaks",
    "recompiles",
    "dynamo_recompiles",
    "ca_cache_misses",
    "ca_recompiles",
    "compile_time_s",
    "compile_dynamo_s",
    "compile_aot_s",
    "compile_inductor_s",
    "compile_ca_capture_s",
    "compile_backward_s",
    "first_step_s",
    "step_time_median_s",
    "step_time_p10_s",
    "step_time_p90_s",
    "steady_steps",
    "steps",
    "peak_rss_bytes",
    "peak_device_memory_bytes",
    "unique_graphs",
)


def mode_fields(column: ModeColumn) -> dict[str, Any]:
    """The flat per-mode figures, keyed as in the JSON output (`modes.<name>`)."""
    m = column.metrics
    st = column.step_time
    phases = column.compile_phases_s
    return {
        "status": column.status,
        "exit_code": column.exit_code,
        "repetitions": len(column.records),
        "forward_graphs": m.forward_graphs if m else None,
        "backward_graphs": m.backward_graphs if m else None,
        "aot_backward_graphs": m.aot_backward_graphs if m else None,
        "ca_graphs": m.ca_graphs if m else None,
        "graph_breaks": m.graph_breaks if m else None,
        "recompiles": m.recompiles if m else None,
        "dynamo_recompiles": m.dynamo_recompiles if m else None,
        "ca_cache_misses": m.ca_cache_misses if m else None,
        "ca_recompiles": m.ca_recompiles if m else None,
        "compile_time_s": column.compile_time_s,
        "compile_dynamo_s": phases.get("dynamo") if m else None,
        "compile_aot_s": phases.get("aot") if m else None,
        "compile_inductor_s": phases.get("inductor") if m else None,
        "compile_ca_capture_s": phases.get("ca_capture") if m else None,
        "compile_backward_s": phases.get("backward") if m else None,  # AOT backwards compiled at their first call
        "first_step_s": column.first_step_s,
        "step_time_median_s": st.median_s,
        "step_time_p10_s": st.p10_s,
        "step_time_p90_s": st.p90_s,
        "steady_steps": st.count,
        "excluded_steps": list(st.excluded),
        # those of excluded_steps other work alone left out, and what it was (INTERRUPTION_*)
        "interrupted_steps": list(st.interrupted),
        "interruptions": list(st.interruptions),
        "steps": m.steps if m else None,
        "peak_rss_bytes": column.peak_rss_bytes,
        "peak_device_memory_bytes": column.peak_device_memory_bytes,
        "unique_graphs": m.unique_graphs if m else None,
        "autograd_captures": m.autograd_captures if m else None,
    }


# Fewer steady steps than this on either side and a speedup is not claimed, whatever its value.
MIN_STEADY_STEPS = 5
# The effect a comparison of modes is stated against: an interval within +/-5% of 1.0 is "no
# change" (none larger than that), one clear of 1.0 is faster or slower, the rest inconclusive.
EFFECT = 0.05


# Verdicts of a ratio against a bound (1.0 in compare: faster or slower; the minimum in gate).
TOO_FEW_STEPS = "too few steady steps"
INCONCLUSIVE = "inconclusive"
NO_CHANGE = "no change"
LOAD_DIFFERED = "load differed"  # the machine's load on the two sides could explain the verdict
ABOVE = "above"
BELOW = "below"


def speedup_verdict(
    ratio: float,
    low: float,
    high: float,
    steady_steps: int,
    bound: float = 1.0,
    min_samples: int = MIN_STEADY_STEPS,
) -> str:
    """The one rule for every timing ratio: `compare`'s speedups (bound 1.0), `gate
    --min-speedup` (bound = the minimum) and gate's regressions against a baseline (ratio = now /
    baseline, bound = 1 + the allowed regression; report.gate.checks). [low, high] is the ratio's
    confidence interval (report.figures.intervals). Too few steady steps on either side
    (`steady_steps` < `min_samples`) and nothing is claimed; an interval containing the bound is
    inconclusive; otherwise the whole interval is above or below it."""
    if steady_steps < min_samples:
        return TOO_FEW_STEPS
    if low <= bound <= high:
        return INCONCLUSIVE
    return ABOVE if low > bound else BELOW
