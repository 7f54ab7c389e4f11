"""`recompiles --explain --verify`: re-run the job with each fix and measure whether it worked.

For a recorded run, the job is run again as it was recorded (same script, arguments, working
directory, backend, step limits), in the mode the recompiles were found in, `repeat` times as a
baseline and `repeat` times with each fix, each repetition its own `cagtool run` process; with
several, the sides take turns (round 1 the baseline, then each fix; each later round every side
once more, in a shuffled order: INTERLEAVED), each run folded into its side's record as the next
repetition (`ca.2`, as `run --repeat` names it). Each re-run is an ordinary run record under `<run>/verify/<stamp>/<name>/`, so every count is
torch's own and every figure can be checked with the other commands. The result
(`<run>/verification.json`) compares each fix's runs with the baseline's, by the comparison
`cagtool compare A B` makes:

- CA recompiles, Dynamo recompiles and CA graphs (exact counts, per repetition);
- compile time and time to first step (medians of the repetitions);
- steady step time: the fix's speedup over the baseline with its 90% confidence interval
  (report.figures.intervals; the repetitions are its units);
- peak memory (RSS, or CUDA max allocated), and whether the losses and final norms agree.

A fix that is a code change (verify/patches.py) is run the same way on a patched copy of the
script, kept beside its re-run (`<run>/verify/<stamp>/<fix>-<script>`): the copy's code runs as
the script would (same sys.argv, sys.path[0], `__file__`, cwd: capture/run/target.py), and the
user's file is never written.

Verdict: **verified** when the recompiles it targets went down (or, the recompile count the same,
the CA graphs: the .grad warm-up capture that count leaves out) and nothing got worse beyond the
noise (a slower steady step or a longer compile measured on one re-run process a side is harmful only
past `ONE_PROCESS_HARM`: one process measures no noise); **partly verified** when so, but the re-run's own explanation still finds a cause the fix
answers (the same kind of cause at the same line: `cause_key`); **harmful** when the steady step got slower beyond the noise (by more than
`HARMFUL_SLOWDOWN`), the compile time grew beyond the noise by more than `HARMFUL_COMPILE` (the fix
compiles more than the recompiles it removes did), peak memory grew by more than `HARMFUL_MEMORY`,
the numerics changed, or the recompiles went up; else **no effect**.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from cagtool.capture.run.self_launch import python_module_argv
from cagtool.errors import CagtoolError, EXIT_GATE_FAILED, UnreadableInput, UsageError
from cagtool.record.atomic import check_confined, make_new_dir, move_in, move_new, open_new, write_atomic
from cagtool.record.loader import RunRecord, load_run
from cagtool.record.seal import check_job, sealed_module_file, with_document_seal
from cagtool.report.compare.analysis import compare_runs, mode_fields
from cagtool.report.figures.intervals import ratio_text
from cagtool.report.recompiles.explain import plural
from cagtool.torch_text import PGO_SOURCES_SHOWN
from cagtool.report.recompiles.verification import JUDGED, VERIFICATION_FILE, VERIFICATION_FORMAT, repetition_counts
from cagtool.capture.run.target import PATCH_TARGET_ENV, PATCHED_SOURCE_ENV, SOURCE_DIGEST_ENV, SourceChanged, source_digest
from cagtool.verify.fixes import Fix
from cagtool.verify.last_batch import NAME as DROP_LAST, fix_call

VERIFY_DIR = "verify"
DYNAMIC_SOURCES_ENV = "TORCH_COMPILE_DYNAMIC_SOURCES"
ROOM_FILE = ".room"
ROOM_BYTES = 1 << 20


class BaselineFailed(CagtoolError):
    """The job failed in the baseline re-run, with no fix applied (exit 1, as a failed job's)."""

    exit_code = EXIT_GATE_FAILED

VERIFICATION_VERSION = 1
DEFAULT_REPEAT = 3
HARMFUL_SLOWDOWN = 0.05
HARMFUL_MEMORY = 0.20
HARMFUL_COMPILE = 0.20
# With one re-run process a side, a slower steady step is harmful only beyond this ratio (3x slower):
# nothing measures the run-to-run noise, which on a busy machine reaches +/-162 % (benchmarks/README.md).
ONE_PROCESS_HARM = 1 / 3
# A baseline re-run whose steady step (or compile) took more than this many times the record's, or
# less than its inverse, ran on another machine state: its timings are not compared. Beyond the
# run-to-run noise of one job's processes on a busy machine (+/-162 %, benchmarks/README.md).
OFF_RECORD = 3.0
# The speedup_verdict of a fix whose steady step is not compared (check_against_record).
NOT_COMPARED = "baseline re-run off the record"

VERIFIED = "verified"
# fewer recompiles, but a cause the fix answers is still there; or its causes gone and the recompiles
# left to guards the record never named (causes_uncovered)
PARTLY_VERIFIED = "partly verified"
NO_EFFECT = "no effect"
HARMFUL = "harmful"
FAILED = "failed"  # a re-run did not finish: nothing measured


@dataclass
class Side:
    """One set of repetitions (the baseline, or one fix), as measured."""

    name: str
    run: str  # its run directory
    status: str
    ca_recompiles: list[int | None]  # per repetition
    dynamo_recompiles: list[int | None]
    ca_graphs: list[int | None]
    compile_time_s: float | None
    first_step_s: float | None
    step_time_median_s: float | None
    steady_steps: int
    peak_memory_bytes: int | None
    wall_s: float
    # Per repetition: the backward hooks the backward calls ran (hook_calls): a patch that moves a
    # hook must keep it running, which the recompile counts alone do not show.
    hook_calls: list[int | None] = field(default_factory=list)
    compile_times_s: list[float | None] = field(default_factory=list)  # per repetition: the compile time's units
    # Per repetition: the share of its runnable time the process waited for a CPU where its compile
    # time was measured (report.figures.metrics.compile_wait); None where not read.
    compile_waits: list[float | None] = field(default_factory=list)
    steps: list[int | None] = field(default_factory=list)  # per repetition: the steps it trained
    # Per repetition: torch's graph_break counter. A fix may trade recompiles for graph breaks (a hook
    # run eagerly under torch._dynamo.disable breaks the CA graph where it is called): said, as a cost.
    # Torch counts a break once per compile that meets it (two breaks in the code, compiled 8 times,
    # count 16), so a fix that only removes recompiles lowers it: the places tell the two apart.
    graph_breaks: list[int | None] = field(default_factory=list)
    # Per repetition: the distinct places ("file:line") its breaks are at, as `summary` counts sites;
    # None where the count has breaks the log names no place for.
    graph_break_places: list[list[str] | None] = field(default_factory=list)
    # Why the set did not finish (the first failed repetition's exception), where it did not.
    failure: str | None = None


@dataclass
class FixResult:
    fix: str
    title: str
    who: str
    causes: list[int]
    run_flags: list[str]
    env: dict[str, str]
    measured: Side | None
    verdict: str
    reasons: list[str]
    speedup: float | None = None  # baseline step time / the fix's
    speedup_low: float | None = None
    speedup_high: float | None = None
    # the timing verdict of `speedup` (compare's: one of report.recompiles.verification.JUDGED, or why
    # none is given, e.g. too few steady steps: then its interval is not shown as a bound)
    speedup_verdict: str | None = None
    numerics_agree: bool | None = None
    patch: dict[str, Any] | None = None  # a code change: its diff (patches.Patch.to_dict)
    patched_copy: str | None = None  # the copy of the script the re-run ran
    torch_says: str | None = None  # torch's own suggestion (its PGO), verbatim, beside cagtool's fix
    # The fix whose re-run this one's would have been (the same command, environment and code): run
    # once, its measure judged for both (torch's PGO list often names exactly what dynamic-sources does).
    same_as: str | None = None


@dataclass
class Verification:
    run: str
    mode: str
    repeat: int
    baseline: Side | None
    fixes: list[FixResult]
    not_applied: list[dict[str, Any]] = field(default_factory=list)  # causes no fix could be applied for
    estimated_s: float | None = None
    wall_s: float | None = None
    # Why the baseline re-run's timings are not compared (check_against_record): it ran on another
    # machine state than the record's; empty where they agree.
    off_record: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"format": VERIFICATION_FORMAT, "version": VERIFICATION_VERSION, **asdict(self)}


def rerun_argv(run: RunRecord, mode: str, repeat: int, output: Path, fix: Fix | None) -> list[str]:
    """The `cagtool run` that records the job again as `run` was recorded, in `mode`."""
    options = run.meta.options or {}
    argv = [*python_module_argv("cagtool"), "run", "--modes", mode, "--repeat", str(repeat), "--no-report", "-o", str(output)]
    if options.get("backend"):
        argv += ["--backend", str(options["backend"])]
    if options.get("dynamic"):
        argv.append("--dynamic")
    for key, flag in (("steps", "--steps"), ("max_time", "--max-time")):
        if options.get(key) is not None:
            argv += [flag, str(options[key])]
    if options.get("warm_cache"):
        argv.append("--warm-cache")
    if options.get("isolate_workdir"):
        argv.append("--isolate-workdir")
    if fix is not None:
        argv += [flag for flag in fix.run_flags if flag not in argv]
    target = run.meta.target
    if target.get("kind") == "module":
        argv += ["-m", target["name"], "--", *run.meta.target_argv[1:]]
    else:
        argv += [target["name"], *run.meta.target_argv[1:]]
    return argv


def rerun_key(run: RunRecord, mode: str, repeat: int, fix: Fix) -> tuple[Any, ...]:
    """What a fix's re-run runs: its command (a flag the run was recorded with counts once), its
    environment and its patched code. Two fixes with the same key would measure the same job twice.
    TORCH_COMPILE_DYNAMIC_SOURCES is a set to torch (`is_dynamic_source` matches each item): torch's
    PGO list and dynamic-sources' name the same inputs in another order on a reentrant checkpoint."""
    argv = rerun_argv(run, mode, repeat, Path("OUT"), fix)
    env = {k: ",".join(sorted({s.strip() for s in v.split(",") if s.strip()})) if k == DYNAMIC_SOURCES_ENV else v for k, v in fix.env.items()}
    return tuple(argv), tuple(sorted(env.items())), fix.patch.patched if fix.patch is not None else None


def checked_source_env(run: RunRecord) -> dict[str, str]:
    """What a re-run of `run`'s job is told of the code it must run (SOURCE_DIGEST_ENV): the
    script, or the module's file, with the SHA-256 check_job found it unchanged at. The re-run runs
    it the one way `cagtool run` runs a target (capture/run/target.py), checking that digest first."""
    script = os.path.abspath(os.path.join(run.meta.cwd or ".", run.meta.target.get("name", "")))
    files = (run.meta.job_seal or {}).get("files", {})
    sealed = files.get(script)
    if run.meta.target.get("kind") == "script" and isinstance(sealed, str):
        return {SOURCE_DIGEST_ENV: source_digest("script", script, sealed, script)}
    if run.meta.target.get("kind") == "module" and (found := sealed_module_file(files, run.meta.target["name"])) is not None:
        return {SOURCE_DIGEST_ENV: source_digest("module", run.meta.target["name"], found[1], found[0])}
    return {}


def _side(name: str, path: Path, mode: str, wall_s: float, loaded: RunRecord | None = None) -> tuple[Side, RunRecord]:
    """One set of repetitions as measured; a multi-rank job (DDP) as rank 0 saw it, the record
    `cagtool recompiles` explains by default (its launching process trains nothing). `loaded`: the
    record at `path`, already read."""
    from cagtool.report.ranks.analysis import focused_run

    record, _rank = focused_run(loaded if loaded is not None else load_run(path), None)
    reps = [r for n, r in record.modes.items() if n == mode or n.startswith(f"{mode}.")]
    from cagtool.report.compare.analysis import compare_modes
    from cagtool.report.figures.metrics import compile_wait, mode_metrics

    column = compare_modes(record).modes.get(mode)
    metrics = [mode_metrics(r) for r in reps]
    fields = mode_fields(column) if column is not None else {}
    status = "finished" if reps and all(r.manifest.status == "finished" and r.manifest.exit_code in (0, None) for r in reps) else "failed"
    peak = fields.get("peak_device_memory_bytes") or fields.get("peak_rss_bytes")
    return Side(
        name=name, run=str(path), status=status,
        ca_recompiles=[m.ca_recompiles for m in metrics], dynamo_recompiles=[m.dynamo_recompiles for m in metrics],
        ca_graphs=[m.ca_graphs for m in metrics], compile_time_s=fields.get("compile_time_s"), first_step_s=fields.get("first_step_s"),
        step_time_median_s=fields.get("step_time_median_s"), steady_steps=int(fields.get("steady_steps") or 0),
        peak_memory_bytes=peak, wall_s=wall_s, hook_calls=[hook_calls(r) for r in reps],
        compile_times_s=[m.compile_time_s for m in metrics], compile_waits=[compile_wait(r) for r in reps], steps=[m.steps for m in metrics], graph_breaks=[m.graph_breaks for m in metrics],
        graph_break_places=[break_places(m) for m in metrics], failure=failure_of(record, mode) if status != "finished" else None,
    ), record


def break_places(metrics: Any) -> list[str] | None:
    """The distinct places ("file:line") of one mode's graph breaks (`summary`'s sites, by place);
    None where torch counted breaks the log names no place for."""
    places = sorted({f"{site.file or '?'}:{site.line if site.line is not None else '?'}" for site in metrics.graph_break_sites})
    return places if places or not metrics.graph_breaks else None


def hook_calls(record: Any) -> int | None:
    """The hooks one mode's backward calls ran: per backward, the hooks of the compiled-autograd
    graph it ran, which is the graph captured during it, else the one the backward before it ran
    (a hook added or removed is a new key, so a capture; a return to an older cached graph without
    a capture is the one case read as the graph before). None without compiled-autograd graphs."""
    from cagtool.record.schema import BackwardEvent, CAGraphEvent

    graphs = record.of(CAGraphEvent)
    if not graphs:
        return None
    events = sorted([*graphs, *record.of(BackwardEvent)], key=lambda e: e.seq)
    current: CAGraphEvent | None = None
    total = 0
    for event in events:
        if isinstance(event, CAGraphEvent):
            current = event
        elif current is not None:
            total += len(current.hooks)
    return total


def _total(side: Side) -> int | None:
    values = [a + b for a, b in zip(side.ca_recompiles, side.dynamo_recompiles) if a is not None and b is not None]
    return max(values) if values else None


def _most(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class RecordCheck:
    """The baseline re-run against the recorded run it repeats (check_against_record): the words
    for a timing that is not compared, None where the two agree."""

    step: str | None = None
    compile: str | None = None


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 1.0 else f"{seconds:.1f} s"


def _factor(ratio: float) -> str:
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"


def off_record(what: str, recorded_s: float | None, rerun_s: float | None, why: str, faster_too: bool = True) -> str | None:
    """The words for a baseline re-run whose `what` ("steady step", "compile") took more than
    OFF_RECORD times the record's, or (`faster_too`) less than its inverse: the same job, so another
    machine state (`why`), and no timing measured in it is compared. None where they agree, or
    either is unknown."""
    if recorded_s is None or rerun_s is None or recorded_s <= 0 or rerun_s <= 0:
        return None
    ratio = rerun_s / recorded_s
    if ratio <= OFF_RECORD and (ratio >= 1.0 / OFF_RECORD or not faster_too):
        return None
    slower = ratio > 1.0
    return (f"the baseline re-run's {what} {_factor(ratio if slower else 1.0 / ratio)} {'slower' if slower else 'faster'} than the "
            f"record's ({_duration(rerun_s)} vs {_duration(recorded_s)}): {why}, so {what} times are not compared")


def check_against_record(recorded: Side, baseline: Side) -> RecordCheck:
    """Whether the baseline re-run timed the job as the record did. It runs the same job, so a steady
    step many times the record's is the machine's load (a re-run at 288 ms a step against 2.06 ms
    recorded, on a loaded machine, read every fix ">100x" faster), and a compile time many times
    the record's its load: a fix's timings against such a baseline say nothing about the fix.
    A compile much shorter than the record's is expected (the record's compile filled Inductor's
    caches, which the baseline re-run reads and a fix that changes the graphs does not): not said,
    so that a fix's longer compile is still judged (ca-dynamic's 22 s -> 143 s on an HF job).
    Counts stay exact whatever the load."""
    return RecordCheck(
        step=off_record("steady step", recorded.step_time_median_s, baseline.step_time_median_s,
                        "the machine's load differed from the record's"),
        compile=off_record("compile", recorded.compile_time_s, baseline.compile_time_s,
                           "the machine's load differed from the record's", faster_too=False),
    )


def graph_break_change(before: int, after: int, places_before: frozenset[str] | None, places_after: frozenset[str] | None) -> str | None:
    """The graph breaks a fix changed, in words: torch's count, which is per compile (`summary`'s
    "N graph breaks at K sites"), and whether the places changed. A fix that only removes recompiles
    lowers the count with every break still in the code. None where nothing changed."""
    known = places_before is not None and places_after is not None
    if before == after and (not known or places_before == places_after):
        return None
    words = f"graph breaks (summed over compiles) {before} -> {after}"
    cost = ": compiled code split where it breaks, the step time says at what cost"
    if not known:
        return words + (cost if after > before else "")
    assert places_before is not None and places_after is not None
    if places_before == places_after:
        where = "at the same site" if len(places_after) == 1 else f"at the same {len(places_after)} sites"
        return f"{words}, {where}: the code breaks where it did, compiled {'fewer' if after < before else 'more'} times"
    new, gone = places_after - places_before, places_before - places_after
    moved = ([f"new at {_few(new)}"] if new else []) + ([f"gone from {_few(gone)}"] if gone else [])
    return f"{words}, {', '.join(moved)}" + (cost if new else "")


def _few(places: frozenset[str], shown: int = 2) -> str:
    """Up to `shown` places by file name and line (`model.py:52`), then how many more."""
    names = sorted(f"{os.path.basename(p.rpartition(':')[0]) or '?'}:{p.rpartition(':')[2]}" for p in places)
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _places(side: Side) -> frozenset[str] | None:
    """Every place the side's repetitions broke at; None where a repetition's are not known."""
    if not side.graph_break_places or any(p is None for p in side.graph_break_places):
        return None
    return frozenset(place for places in side.graph_break_places for place in places or ())


def numerics_unreproduced(run: RunRecord, base_record: RunRecord, mode: str) -> str | None:
    """Where the baseline re-run's losses (or final norms) differ from the recorded run's of the mode
    beyond the tolerance: the same job, seed and options not reproducing its numbers from run to run
    (Inductor's CPU kernels reducing in threads, amplified by a chaotic learning rate: pytorch/examples'
    word language model at lr 20 parted at its sixth step), so a fix's re-run differing from the
    baseline's is no evidence against the fix. The words, or None where they agree (or one is missing)."""
    from cagtool.report.compare.analysis import Tolerance, compare_samples, numerics_sample

    recorded, again = run.modes.get(mode), base_record.modes.get(mode)
    if recorded is None or again is None:
        return None
    tol = Tolerance()
    reference, sample = numerics_sample("record", recorded), numerics_sample("baseline", again)
    if not any(not d.agrees for d in compare_samples([sample], reference, tol).diffs):
        return None
    parted = next((step for step in sorted(set(sample.losses) & set(reference.losses))
                   if not tol.agrees(sample.losses[step], reference.losses[step])), None)
    where = f"its loss at step {parted}" if parted is not None else "its final norms"
    return (f"the baseline re-run, without any fix, already differs from the recorded run in {where} (rtol {tol.rtol:g}, "
            f"atol {tol.atol:g}): the job does not reproduce its numbers from run to run, so a fix's are not compared with them")


def judge(baseline: Side, fixed: Side, speedup: Any, numerics_agree: bool | None,
          record: RecordCheck = RecordCheck()) -> tuple[str, list[str]]:
    """The verdict of one fix against the baseline, with the reasons, in words. `record`: the
    baseline re-run's timings that are not compared (check_against_record), said in their place."""
    if fixed.status != "finished":
        why = f" ({fixed.failure[:300]})" if fixed.failure else ""
        return FAILED, [f"the re-run with the fix did not finish{why}: see its record"]
    before, after = _total(baseline), _total(fixed)
    reasons: list[str] = []
    harmful = False
    if before is not None and after is not None:
        if after < before:
            reasons.append(f"recompiles {before} -> {after}")
        elif after > before:
            reasons.append(f"recompiles went up: {before} -> {after}")
            harmful = True
        else:
            reasons.append(f"recompiles unchanged ({before})")
    graphs_before, graphs_after = _most(baseline.ca_graphs), _most(fixed.ca_graphs)
    ca_before, ca_after = _most(baseline.ca_recompiles), _most(fixed.ca_recompiles)
    # A capture the recompile count leaves out (AccumulateGrad's one-time .grad warm-up) is still
    # a capture and a compile: fewer CA graphs than fewer CA recompiles explain is one removed.
    # (A CA recompile traded for a Dynamo recompile of the CA graph removes a graph too, and no work.)
    fewer_graphs = (None not in (graphs_before, graphs_after, ca_before, ca_after)
                    and graphs_before - graphs_after > ca_before - ca_after)  # type: ignore[operator]
    if fewer_graphs and not (before is not None and after is not None and after < before):
        # A capture the recompile count leaves out (AccumulateGrad's one-time .grad warm-up) is
        # still a capture and a compile the fix removed.
        reasons.append(f"CA graphs {graphs_before} -> {graphs_after}")
    if record.step is not None:
        reasons.append(record.step)
    elif speedup is not None and speedup.ratio is not None and speedup.high is not None:
        # The time column rests on the same evidence as every timing verdict: each re-run process
        # is one unit (report.figures.intervals); counts, not times, decide "verified".
        ci = f"90% CI {ratio_text(speedup.low)}-{ratio_text(speedup.high)}"
        basis = f", {processes_text(speedup.interval.units)}" if speedup.interval is not None else ""
        one_each = speedup.interval is not None and min(speedup.interval.units) < 2
        if speedup.verdict == "slower" and speedup.high < 1.0 / (1.0 + HARMFUL_SLOWDOWN) and not (one_each and speedup.ratio > ONE_PROCESS_HARM):
            reasons.append(f"steady step slower ({ratio_text(speedup.ratio)}, {ci}{basis})")
            harmful = True
        elif speedup.verdict == "slower" and one_each:
            # One process a side measures no run-to-run noise: two re-runs of one environment read
            # "harmful" and "inconclusive" (0.53x and 0.58x, the same job no slower in plain torch).
            reasons.append(f"steady step {ratio_text(speedup.ratio)} ({ci}{basis}: one process a side, not judged; --repeat 3 judges it)")
        elif speedup.verdict in JUDGED:
            reasons.append(f"steady step {ratio_text(speedup.ratio)} ({speedup.verdict}, {ci}{basis})")
        else:
            reasons.append(f"steady step {ratio_text(speedup.ratio)} ({speedup.verdict})")
    removes = before is not None and after is not None and after < before
    compiles, grew = (record.compile, False) if record.compile is not None else _compile_growth(baseline, fixed, removes)
    if compiles:
        reasons.append(compiles)
        harmful = harmful or grew
    if baseline.peak_memory_bytes and fixed.peak_memory_bytes and fixed.peak_memory_bytes > (1.0 + HARMFUL_MEMORY) * baseline.peak_memory_bytes:
        reasons.append(f"peak memory {fixed.peak_memory_bytes / baseline.peak_memory_bytes:.2f}x the baseline's")
        harmful = True
    hooks_before, hooks_after = _most(baseline.hook_calls), _most(fixed.hook_calls)
    if hooks_before is not None and hooks_after is not None and hooks_before != hooks_after:
        if hooks_after < hooks_before:
            # A patch that drops a hook (or some of its calls) changes what the job does.
            reasons.append(f"hooks run {hooks_before} -> {hooks_after}: the fix dropped hook calls the job makes")
            harmful = True
        else:
            reasons.append(f"hooks run {hooks_before} -> {hooks_after}: the hook now also runs on the steps before it was registered")
    breaks_before, breaks_after = _most(baseline.graph_breaks), _most(fixed.graph_breaks)
    if breaks_before is not None and breaks_after is not None:
        # Not a verdict of its own: the step time says what the breaks cost.
        if (breaks := graph_break_change(breaks_before, breaks_after, _places(baseline), _places(fixed))) is not None:
            reasons.append(breaks)
    if numerics_agree is False:
        reasons.append("losses or final norms changed")
        harmful = True
    elif numerics_agree:
        reasons.append("numerics unchanged")
    if harmful:
        return HARMFUL, reasons
    if (before is not None and after is not None and after < before) or (fewer_graphs and after is not None and before is not None and after <= before):
        return VERIFIED, reasons
    return NO_EFFECT, reasons


def _in_script(place: str, copies: set[str], script: str) -> str:
    """A graph break's place ("file:line") in a patched copy, named as the script's."""
    file, _, line = place.rpartition(":")
    return f"{script}:{line}" if file in copies else place


def processes_text(units: tuple[int, int]) -> str:
    """'1 vs 1 process', '3 vs 3 processes': the re-run processes of a fix and of the baseline an
    interval rests on, as the gate and compare say them (report.figures.intervals)."""
    return f"{units[0]} vs {plural(units[1], 'process', 'processes')}"


def _compile_growth(baseline: Side, fixed: Side, removes: bool) -> tuple[str, bool]:
    """The words for a fix whose compile time grew beyond the noise by more than HARMFUL_COMPILE
    (the interval of the fix's over the baseline's, each repetition a unit: report.figures.intervals),
    and whether that is harmful (`removes`: whether the fix removed recompiles, which the words
    weigh the growth against); ("", False) else: its recompiles cost less than what it adds
    (WGAN-GP's compiled autograd started dynamic: 9 -> 4 recompiles, compile 11.6 s -> 27.3 s). From
    one re-run process a side it is harmful only past 1 / ONE_PROCESS_HARM (3x), as a slower step
    is: one process measures no noise (the shape loop's ca-dynamic read 2.25x, 1.26x-4.02x, in a
    suite on a loaded machine, and no growth beyond the noise in the run before). A growth the
    machine's load can account for (_compile_load) is not judged either: the gate's rule."""
    from cagtool.report.figures.intervals import compile_sample, ratio_interval

    top, bottom = compile_sample(fixed.compile_times_s), compile_sample(baseline.compile_times_s)
    interval = ratio_interval(top, bottom, "total") if top is not None and bottom is not None else None
    if interval is None or interval.low <= 1.0 + HARMFUL_COMPILE:
        return "", False
    words = (f"compile time {baseline.compile_time_s or 0:.1f} s -> {fixed.compile_time_s or 0:.1f} s ({ratio_text(interval.ratio)}, 90% CI "
             f"{ratio_text(interval.low)}-{ratio_text(interval.high)}, {processes_text(interval.units)}")
    if (load := _compile_load(baseline, fixed, interval.low)) is not None:
        return f"{words}: {load}, not judged; rerun on a quieter machine)", False
    if min(interval.units) < 2 and interval.ratio < 1.0 / ONE_PROCESS_HARM:
        return words + ": one process a side, not judged; --repeat 3 judges it)", False
    if not removes:  # HF Trainer's torch-pgo: 4 recompiles stayed, compile 23.4 s -> 31.5 s
        return words + "): it removes no recompile and compiles longer", True
    return words + "): it compiles more than the recompiles it removes did", True


def _compile_load(baseline: Side, fixed: Side, low: float) -> str | None:
    """Why the machine's load, not the fix, may have lengthened the fix's compile, in words; None
    where it cannot have. `low`: the lower end of the growth's interval. As the gate reads a
    regression (report.gate.checks): a fix's re-run that waited for a CPU HEAVY_WAIT of its runnable
    time or more while compiling may have been slowed up to heavy_load_bound; below that, by waiting
    more than the baseline's re-run, up to the top of load_range. A growth that such a slowdown
    brings within HARMFUL_COMPILE is the load's (a suite on 2 busy cores read 2.8 s -> 9.2 s for
    dynamic-sources, 1.6 s -> 1.5 s on the idle machine)."""
    from cagtool.report.figures.metrics import heavy_load_bound, load_range
    from cagtool.report.figures.pooled import HEAVY_WAIT

    waits = [w for w in fixed.compile_waits if w is not None]
    others = [w for w in baseline.compile_waits if w is not None]
    if not waits:
        return None
    wait = max(waits)
    if wait >= HEAVY_WAIT:
        bound = heavy_load_bound(wait, "wall")
        if low / bound <= 1.0 + HARMFUL_COMPILE:
            return (f"the fix's re-run waited for a CPU {wait:.0%} of its runnable time while compiling: beyond {HEAVY_WAIT:.0%}, "
                    f"the load can slow a compile up to {bound:.2g}x")
        return None
    if not others:
        return None
    factor = max(1.0 - min(others), 1e-3) / max(1.0 - wait, 1e-3)
    if factor <= 1.0:
        return None
    high = load_range(factor, "wall")[1]
    if low / high > 1.0 + HARMFUL_COMPILE:
        return None
    return (f"the fix's re-run waited for a CPU {wait:.0%} of its runnable time while compiling, the baseline's {min(others):.0%}, "
            f"which alone can make its compile up to {high:.2f}x longer")


# The sides of a verification with several repetitions take turns, in rounds (verify()): a load
# that comes and goes over the minutes a verification takes then falls on every side alike, where
# one side's repetitions after the other's put it on one side (a neighbour's job during a fix's
# re-runs read that fix 7x slower, 0.14x with a 90% CI of 0.06x-0.42x, on 3 processes a side).
INTERLEAVED = True


def _run_meta(path: Path) -> dict[str, Any] | None:
    """A re-run's run.json as written, read as a record's file is (never through a link); None
    where it is not there or not a run record's."""
    from cagtool.record.loader import read_json_object
    from cagtool.record.schema import RUN_META_FILE

    try:
        return read_json_object(path / RUN_META_FILE, "run record")
    except CagtoolError:
        return None


def _side_failed(path: Path, mode: str) -> bool:
    """Whether a side's record so far says its job failed (a failed run is not run again)."""
    data = _run_meta(path)
    if data is None:
        return True
    codes = data.get("mode_exit_codes") or {}
    return data.get("status") != "finished" or any(code not in (0, None) for code in codes.values())


def _fold(run_dir: Path, side: Path, single: Path, mode: str, k: int) -> None:
    """One more repetition into a side's record: `single`, a run of the mode alone (`--repeat 1`),
    becomes `<mode>.<k>` of `side`, as `cagtool run --repeat K` names its repetitions, and `side`'s
    run.json lists it with its exit code (the worse status and exit code of the two stand for the
    run). Nothing of `single` is left but its output files beside it; a run that did not start
    (its stderr file says why) leaves the side with the runs it has. A link or anything else
    planted at `<side>/<mode>.<k>` (or on the way) while the verification ran is refused
    (UnreadableInput): the move never leaves the run."""
    import shutil

    from cagtool.record.schema import RUN_META_FILE

    theirs, ours = _run_meta(single), _run_meta(side)
    source = single / mode
    name = f"{mode}.{k}"
    if theirs is not None and ours is not None and os.path.lexists(source):
        move_new(run_dir, source, side / name)  # refused: the single run is kept where it is
        ours["modes"] = [*ours.get("modes", []), name]
        ours.setdefault("mode_exit_codes", {})[name] = (theirs.get("mode_exit_codes") or {}).get(mode)
        if theirs.get("status") != "finished":
            ours["status"] = theirs.get("status")
        if ours.get("exit_code") in (0, None):
            ours["exit_code"] = theirs.get("exit_code")
        ours["ended_at"] = theirs.get("ended_at", ours.get("ended_at"))
        ours.setdefault("options", {})["repeat"] = k
        write_atomic(side / RUN_META_FILE, json.dumps(ours, indent=2), root=run_dir)
    shutil.rmtree(single, ignore_errors=True)


# A re-run's limit by default: RERUN_LIMIT_FACTOR times the recorded mode's time, at least
# RERUN_LIMIT_FLOOR_S (a fix may make the compile slower: dynamic shapes; a re-run is never killed
# for that), per repetition. `--rerun-timeout` sets it; 0 lifts it.
RERUN_LIMIT_FACTOR = 10
RERUN_LIMIT_FLOOR_S = 600.0
# After SIGTERM, the time a stopped re-run has to close its record before SIGKILL.
RERUN_STOP_GRACE_S = 60.0


def _recorded_duration(run: RunRecord, mode: str) -> float | None:
    """How long the recorded mode took (its manifest's duration), None where it does not say."""
    record = run.modes.get(mode)
    return record.manifest.duration_s if record is not None else None


def rerun_limit_s(run: RunRecord, mode: str) -> float:
    """The default limit of one repetition of a re-run (RERUN_LIMIT_FACTOR above)."""
    duration = _recorded_duration(run, mode)
    return max(RERUN_LIMIT_FLOOR_S, RERUN_LIMIT_FACTOR * duration) if duration is not None else RERUN_LIMIT_FLOOR_S


def _recorded_s(run: RunRecord, mode: str) -> str:
    duration = _recorded_duration(run, mode)
    return "an unknown time" if duration is None else f"{duration:.0f} s"


def wait_bounded(process: subprocess.Popen, allowed: float | None) -> int | None:
    """The re-run's exit code, or None where it ran past `allowed` seconds: then it is stopped as a
    terminal's kill would (SIGTERM: `cagtool run` stops its mode and closes the record), and killed
    (SIGKILL) if it has not gone RERUN_STOP_GRACE_S later."""
    try:
        return process.wait(timeout=allowed)
    except subprocess.TimeoutExpired:
        pass
    process.terminate()
    try:
        process.wait(timeout=RERUN_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return None


def estimate_seconds(run: RunRecord, mode: str, repeat: int, fixes: int) -> float | None:
    """The whole verification's wall time, from how long the recorded mode took."""
    duration = _recorded_duration(run, mode)
    return None if duration is None else duration * repeat * (1 + fixes)


def _claim_verify_dir(run_dir: Path, stamp: str) -> Path:
    """`<run>/verify/<stamp>[-N]`, made by this verification alone: two verifications of one run
    started in the same second never share a directory or read each other's re-runs."""
    suffix = 1
    while True:
        path = run_dir / VERIFY_DIR / (stamp if suffix == 1 else f"{stamp}-{suffix}")
        try:
            return make_new_dir(run_dir, path)
        except FileExistsError:
            suffix += 1


def _value_shown(value: str) -> str:
    """An environment value as the progress line says it: a list of more than a few items (torch's
    TORCH_COMPILE_DYNAMIC_SOURCES for a CA graph: hundreds) cut to its first few and its count."""
    items = value.split(",")
    if len(items) <= PGO_SOURCES_SHOWN + 2:
        return value
    return ",".join(items[:PGO_SOURCES_SHOWN]) + f",... ({len(items)} in all)"


def _shown(arg: str) -> str:
    """A path under the caller's working directory, as relative to it (what the user typed)."""
    if not os.path.isabs(arg):
        return arg
    relative = os.path.relpath(arg)
    return arg if relative.startswith("..") else relative


def _why_it_failed(record: RunRecord, mode: str, stderr: Path) -> str:
    """The first failed repetition's exception (or exit code), and the job's last line of stderr."""
    return failure_of(record, mode) or f"see {stderr}"


def failure_of(record: RunRecord, mode: str) -> str | None:
    """The first failed repetition's exception (or its status and exit code); None where every
    repetition finished."""
    for name, rep in record.modes.items():
        if not (name == mode or name.startswith(f"{mode}.")):
            continue
        manifest = rep.manifest
        if manifest.status == "finished" and manifest.exit_code in (0, None):
            continue
        if manifest.exception is not None:
            first = next((line.strip() for line in manifest.exception.message.splitlines() if line.strip()), "")
            return f"{manifest.exception.type}: {first}".strip()
        return f"{manifest.status}, exit {manifest.exit_code}"
    return None


def _source_changed(record: RunRecord, mode: str) -> str | None:
    """The re-run's refusal to run code other than what --verify checked (target.py), if it refused."""
    for name, rep in record.modes.items():
        failed = rep.manifest.exception
        if (name == mode or name.startswith(f"{mode}.")) and failed is not None and failed.type == SourceChanged.__name__:
            return failed.message
    return None


_TAIL_BYTES = 64 * 1024  # where the last line of a re-run's stderr is looked for: a job may write gigabytes there


def _last_line(path: Path) -> str:
    from cagtool.record.regular_files import open_record_file

    try:
        with os.fdopen(open_record_file(path), "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - _TAIL_BYTES))
            text = handle.read(_TAIL_BYTES).decode("utf-8", errors="replace")
    except (OSError, UnreadableInput):
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _write_result(run_dir: Path, result: Verification) -> None:
    # Atomic: a report or another verification reading it meanwhile sees the previous result or this one.
    # Sealed (record/seal.py): a report shows it as this verification's measurement only where this user's cagtool wrote it.
    write_atomic(run_dir / VERIFICATION_FILE, json.dumps(with_document_seal(result.to_dict()), indent=2) + "\n", root=run_dir)


def rename_copy(rep: Any) -> Callable[[str], str]:
    """A re-run's file name as the script's where the re-run ran a patched copy in its place
    (`drop-last-main.py` is `main.py`: a patch keeps the script's lines); others as they are."""
    options = rep.manifest.options if isinstance(rep.manifest.options, dict) else {}
    patched, script = options.get("patched_source"), options.get("patch_target")
    if isinstance(patched, str) and isinstance(script, str):
        copy, name = os.path.basename(patched), os.path.basename(script)
        return lambda file: name if os.path.basename(file) == copy else file
    return lambda file: file


def rerun_cause_key(rep: Any, cause: Any, causes: list[Any] | None = None) -> tuple:
    """cause_key of a re-run's cause (among its explanation's `causes`), a line of the patched copy it
    ran in the script's place named as the script's (`drop-last-main.py:81` is `main.py:81`: a patch
    keeps the script's lines), so the record's cause and the re-run's compare as the same cause."""
    from cagtool.report.recompiles.explain import cause_key

    return cause_key(cause, causes, rename_copy(rep))


def explained_causes(rep: Any) -> list[Any]:
    """A re-run's explained causes, once per record: causes_left and causes_uncovered both ask of a
    fix's re-run, and causes_uncovered of the baseline re-run for every fix."""
    from cagtool.report.recompiles.explain import explain
    from cagtool.report.recompiles.table import recompile_table

    return rep.derived("explained_causes", lambda record: explain(recompile_table(record)).causes)


def causes_left(record: RunRecord, mode: str, keys: dict[int, tuple]) -> dict[int, int]:
    """Of the causes `keys` names (number -> cause_key in the recorded run), those the re-run's own
    explanation still finds, with their recompiles (the most of any repetition). The re-run may
    split what the record holds as one cause into several of the same key (the pieces of a CA
    graph's code recompiled for one change of size, each its own cause once no CA recompile
    gathers them): their recompiles are summed, not the last one's taken."""
    from collections import Counter

    left: dict[int, int] = {}
    for name, rep in record.modes.items():
        if name != mode and not name.startswith(f"{mode}."):
            continue
        found: Counter[tuple] = Counter()
        explained = explained_causes(rep)
        for cause in explained:
            found[rerun_cause_key(rep, cause, explained)] += cause.count
        for number, key in keys.items():
            if key in found:
                left[number] = max(left.get(number, 0), found[key])
    return left


def causes_uncovered(record: RunRecord, baseline: RunRecord, mode: str, cwd: str) -> list[tuple[str, int]]:
    """The causes the re-run's explanation finds and the baseline re-run's does not (by cause_key),
    each as (its title, its recompiles, the most of any repetition), in the explanation's order.
    torch reports one failing guard per recompile: a fix that removes a recompile's first can leave
    the recompile to the next guard, which the record never named."""
    from cagtool.report.recompiles.explain import cause_words

    def causes(run: RunRecord) -> list[tuple[Any, list[Any]]]:
        return [(rep, explained_causes(rep)) for name, rep in run.modes.items() if name == mode or name.startswith(f"{mode}.")]

    before = {rerun_cause_key(rep, c, found) for rep, found in causes(baseline) for c in found}
    new: dict[tuple, tuple[str, int]] = {}
    for rep, found in causes(record):
        for cause in found:
            key = rerun_cause_key(rep, cause, found)
            if key not in before and cause.caused_by is None:
                title = cause_words(cause, cwd).title + (f", {cause.place_said}" if cause.place_said else "")
                if cause.source is not None:
                    title += f" ({os.path.basename(rename_copy(rep)(cause.source.file))}:{cause.source.line})"
                new[key] = (title, max(new.get(key, ("", 0))[1], cause.count))
    return list(new.values())


def verify(
    run_path: str | Path | None,
    mode: str,
    fixes: list[Fix],
    repeat: int = DEFAULT_REPEAT,
    not_applied: list[dict[str, Any]] | None = None,
    progress: Callable[[str], None] = lambda line: None,
    cause_keys: dict[int, tuple] | None = None,
    rerun_timeout: float | None = None,
) -> Verification:
    """Run the baseline and each fix `repeat` times, measure, judge, and keep the result in the run.

    The job run is the one the record names, and only when this user's `cagtool run` recorded it
    and its files are unchanged (record/seal.py). Every path given to a re-run is absolute (the
    re-runs start in the recorded cwd), and every file written goes under the run directory
    through the confined writer (record/atomic.py). `cause_keys`: cause number -> cause_key in the
    recorded run's explanation, to find the causes a fix answers that its re-run still has."""
    run = load_run(run_path)
    if mode not in run.modes:
        raise UsageError(f"run {run.path} has no {mode} mode to verify fixes in")
    run_dir = Path(os.path.abspath(run.path))
    check_job(run_dir, run.meta.job_seal, run.meta.target, run.meta.target_argv, run.meta.cwd, dict(run.meta.options or {}))
    check_confined(run_dir, run_dir / VERIFICATION_FILE)
    started = time.monotonic()
    estimate = estimate_seconds(run, mode, repeat, len({rerun_key(run, mode, repeat, f) for f in fixes}))
    result = Verification(str(run.path), mode, repeat, None, [], list(not_applied or []), estimate)
    if not fixes:  # nothing to apply: a baseline alone would prove nothing
        result.wall_s = result.estimated_s = 0.0
        _write_result(run_dir, result)
        return result
    root = _claim_verify_dir(run_dir, time.strftime("%Y%m%d-%H%M%S"))
    try:
        # A re-run on a full disk would lose even its own error line (its stderr goes to a file
        # there): room for the first records is asked for before anything runs.
        write_atomic(root / ROOM_FILE, bytes(ROOM_BYTES), root=run_dir)
        os.unlink(root / ROOM_FILE)
    except CagtoolError:
        with contextlib.suppress(OSError):
            os.rmdir(root)
        raise
    limit = rerun_limit_s(run, mode) if rerun_timeout is None else (rerun_timeout or None)
    # The re-runs record in a private folder, moved into `root` when they end (private_reruns).
    try:
        with private_reruns(run_dir, root) as (work, relocated):
            result = _verify_in(run, run_dir, work, root, mode, fixes, repeat, result, started,
                                lambda line: progress(relocated(line, shown=True)), cause_keys, limit)
    except KeyboardInterrupt:
        # Ctrl-C (the terminal's process group: the re-run in progress got it too, and
        # subprocess.run waited for it): what was made so far stays, said; no verdict is written.
        progress(f"interrupted: no verdict; the re-runs made so far are in {_shown(str(root))}")
        raise
    result = relocated(result)
    _write_result(run_dir, result)
    return result


@contextlib.contextmanager
def private_reruns(run_dir: Path, root: Path) -> Iterator[tuple[Path, Callable[..., Any]]]:
    """(work, relocated): a private folder of this user's (mode 0700, under TMPDIR) for re-runs
    whose records end up in `root`, a folder claimed under the run, and the function that names a
    path of `work` (in a string, or in a result's dataclasses) under `root` (`shown=True`: as
    `_shown` writes it, for progress lines). Re-runs record there, never into the run by path: a
    re-run is a `cagtool run -o DIR` of its own, whose processes write by path, and `root` swapped
    for a link while they run would take their records outside the run. Leaving the block, however
    it is left, moves everything into `root` by descriptor (move_in); an error raised in it names
    `root`'s paths."""
    work = Path(tempfile.mkdtemp(prefix="cagtool-reruns-"))
    staged, final = str(work), str(root)

    def relocated(value: Any, shown: bool = False) -> Any:
        return _relocated(value, staged, _shown(final) if shown else final)

    try:
        yield work, relocated
    except CagtoolError as exc:
        # The block's own error is the one raised; what settling refused is said in it, not in its place.
        error = type(exc)(relocated(str(exc)), exc.exit_code)
        try:
            _settle(run_dir, work, root)
        except CagtoolError as refused:
            error = type(exc)(f"{error}; then {refused}", exc.exit_code)
        raise error from None
    except BaseException:
        # Ctrl-C, or a bug's error: raised on unchanged, what settling refused said on stderr first.
        try:
            _settle(run_dir, work, root)
        except CagtoolError as refused:
            print(f"cagtool: {refused}", file=sys.stderr, flush=True)
        raise
    _settle(run_dir, work, root)


def _settle(run_dir: Path, work: Path, root: Path) -> None:
    """Everything the re-runs made in `work` moved into `root` (move_in: by descriptor, confined to
    the run), and `work` removed. What is refused there (a link planted meanwhile) stays in `work`,
    named in the one line raised after the rest is moved: nothing the re-runs made is lost."""
    refused: list[tuple[str, str]] = []
    for name in sorted(os.listdir(work)):
        try:
            move_in(run_dir, work / name, root / name)
        except CagtoolError as exc:
            refused.append((name, str(exc)))
    if not refused:
        shutil.rmtree(work, ignore_errors=True)
        return
    names = ", ".join(name for name, _ in refused[:4]) + (f" and {len(refused) - 4} more" if len(refused) > 4 else "")
    raise UnreadableInput(f"{refused[0][1]}; the re-runs' {names} are kept in {work} instead")


def _relocated(value: Any, old: str, new: str) -> Any:
    """`value` (the verification's result: dataclasses, lists, dicts, strings) with every path
    under `old` named under `new`."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_relocated(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _relocated(v, old, new) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _relocated(getattr(value, f.name), old, new) for f in dataclasses.fields(value) if f.init})
    return value


def _verify_in(run: Any, run_dir: Path, work: Path, root: Path, mode: str, fixes: list[Fix], repeat: int, result: Verification,
               started: float, progress: Callable[[str], None], cause_keys: dict[int, tuple] | None,
               limit: float | None = None) -> Verification:
    """verify()'s re-runs and verdicts, into `work` (the private folder they record in; `root`, the
    verify directory claimed for them in the run, where verify() moves them, named in the words).
    `limit`: the seconds one repetition of a re-run may take (None: no limit)."""
    copies: dict[str, Path] = {}
    timed_out: dict[str, float] = {}  # side -> the limit a re-run of it was stopped at

    def record(name: str, fix: Fix | None, reps: int, k: int = 1) -> tuple[Path, float, int]:
        """`reps` repetitions of one side into root/name (k = 1), or its k-th alone into root/name.k."""
        label = name if k == 1 else f"{name}.{k}"
        out = make_new_dir(work, work / label)
        argv = rerun_argv(run, mode, reps, out, fix)
        env = {**os.environ, **(fix.env if fix is not None else {})}
        env.pop(SOURCE_DIGEST_ENV, None)  # only what this verification checked
        said = f"  ({', '.join(f'{k}={_value_shown(v)}' for k, v in fix.env.items())})" if fix and fix.env else ""
        script = Path(os.path.abspath(os.path.join(run.meta.cwd or ".", run.meta.target["name"])))
        env.update(checked_source_env(run))
        if fix is not None and fix.patch is not None and fix.patch.patched is not None:
            # In the run, where the record names it: the re-run checks the digest of the code it
            # runs (capture/run/target.py), so a copy replaced through a link planted meanwhile never runs.
            copy = root / f"{name}-{script.name}"
            if name not in copies:
                write_atomic(copy, fix.patch.patched, root=run_dir)
                copies[name] = copy
            env.update({PATCH_TARGET_ENV: str(script.resolve()), PATCHED_SOURCE_ENV: str(copy),
                        SOURCE_DIGEST_ENV: source_digest("script", str(script), hashlib.sha256(fix.patch.patched.encode("utf-8")).hexdigest(), str(script))})
            said = f"  (runs the patched copy {copy} in place of {fix.patch.file}; your file is not changed)"
        turn = f" ({k}/{repeat})" if reps < repeat else ""
        progress(f"{name}{turn}: {' '.join(_shown(a) for a in argv[3:])}" + said.replace(str(root), _shown(str(root))))
        began = time.monotonic()
        # The job's own output is not the verification's: kept in files next to its record.
        # Its stdin is /dev/null: the re-runs are not interactive (a job that reads stdin fails, and says so).
        with open_new(work, work / f"{label}.stdout") as stdout, open_new(work, work / f"{label}.stderr") as stderr:
            try:
                process = subprocess.Popen(argv, cwd=run.meta.cwd or None, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
            except OSError as exc:
                raise UsageError(f"cannot start the re-run in {run.meta.cwd}: {exc.strerror or exc}") from None
            # On Ctrl-C the re-run got it too (the terminal's process group): leaving the block
            # waits for it to close its record, as `cagtool run` does on SIGINT.
            with process:
                allowed = None if limit is None else limit * reps
                code = wait_bounded(process, allowed)
                if code is None:
                    timed_out[name] = allowed
                    progress(f"{label}: stopped after {allowed:.0f} s (--rerun-timeout; the recorded mode took "
                             f"{_recorded_s(run, mode)}): the job did not finish in that time")
                    code = process.returncode
        return out, time.monotonic() - began, code

    # With several repetitions a side, the sides take turns (INTERLEAVED): round 1 runs each side
    # once, the baseline first (a job that fails without any fix stops the verification there);
    # each later round runs every side once more, in a shuffled order, and each run is folded into
    # its side's record as its next repetition.
    first = 1 if repeat > 1 and INTERLEAVED else repeat
    base_path, base_wall, base_code = record("baseline", None, first)
    base_stderr = work / "baseline.stderr"
    if not (base_path / "run.json").exists():
        last = _last_line(base_stderr)
        raise UsageError(f"the baseline re-run did not start (exit {base_code}{': ' + last if last else ''}); see {base_stderr}")
    baseline, base_record = _side("baseline", base_path, mode, base_wall)
    if (changed := _source_changed(base_record, mode)) is not None:
        raise UnreadableInput(f"{changed}; record the run again")
    if "baseline" in timed_out:
        raise BaselineFailed(f"the baseline re-run, without any fix, did not finish in {timed_out['baseline']:.0f} s (--rerun-timeout; "
                             f"the recorded mode took {_recorded_s(run, mode)}): nothing to measure the fixes against; see {base_stderr}")
    if baseline.status != "finished":
        # Nothing can be measured against a job that fails without any fix: the fixes are not run.
        raise BaselineFailed(f"the baseline re-run itself failed, without any fix ({_why_it_failed(base_record, mode, base_stderr)}; "
                             f"the re-runs read no stdin): nothing to measure the fixes against; see {base_stderr}")
    reruns: dict[tuple[Any, ...], tuple[str, Path, float]] = {}  # rerun_key -> the fix that ran it, its record, its wall time
    for fix in fixes:
        key = rerun_key(run, mode, repeat, fix)
        if key not in reruns:
            path, wall, _code = record(fix.name, fix, first)
            reruns[key] = (fix.name, path, wall)
    if first < repeat:
        by_name = {f.name: f for f in fixes}
        sides: list[tuple[str, Fix | None]] = [("baseline", None)] + [(name, by_name[name]) for name, _, _ in reruns.values()]
        walls = {"baseline": base_wall, **{name: wall for name, _, wall in reruns.values()}}
        shuffle = random.Random(int.from_bytes(os.urandom(4), "big")).shuffle
        for k in range(2, repeat + 1):
            order = list(sides)
            shuffle(order)
            for name, fix in order:
                if not (work / name / "run.json").exists() or (fix is not None and _side_failed(work / name, mode)):
                    continue  # a side that did not start, or failed its first run: not run again
                path, wall, _code = record(name, fix, 1, k)
                walls[name] += wall
                _fold(work, work / name, path, mode, k)
        reruns = {key: (name, path, walls[name]) for key, (name, path, _) in reruns.items()}
        baseline, base_record = _side("baseline", base_path, mode, walls["baseline"])
        if (changed := _source_changed(base_record, mode)) is not None:
            raise UnreadableInput(f"{changed}; record the run again")
        if "baseline" in timed_out:
            raise BaselineFailed(f"the baseline re-run, without any fix, did not finish in {timed_out['baseline']:.0f} s in a later "
                                 f"repetition (--rerun-timeout): nothing to measure the fixes against; see {root}")
        if baseline.status != "finished":
            raise BaselineFailed(f"the baseline re-run itself failed in a later repetition, without any fix "
                                 f"({_why_it_failed(base_record, mode, base_stderr)}): nothing to measure the fixes against; see {root}")
    result.baseline = baseline
    unreproduced = numerics_unreproduced(run, base_record, mode)
    if unreproduced:
        progress(f"baseline: {unreproduced}")
    recorded, _ = _side("record", run_dir, mode, 0.0, loaded=run)
    check = check_against_record(recorded, baseline)
    result.off_record = [words for words in (check.step, check.compile) if words]
    for words in result.off_record:
        progress(f"baseline: {words}")
    for fix in fixes:
        key = rerun_key(run, mode, repeat, fix)
        ran_as, path, wall = reruns[key]
        same_as = ran_as if ran_as != fix.name else None
        if same_as is not None:
            progress(f"{fix.name}: the same re-run as {same_as} (the same command, environment and code): not run again")
        ran = same_as or fix.name
        # The words every renderer shows, before the verdict's own reasons.
        same = [f"the same re-run as {same_as}: run once for both"] if same_as else []
        if ran in timed_out:
            same.append(f"stopped after {timed_out[ran]:.0f} s (--rerun-timeout; the recorded mode took {_recorded_s(run, mode)}): "
                        "the job did not finish with the fix in that time")
        if not (path / "run.json").exists():
            result.fixes.append(FixResult(fix.name, fix.title, fix.who, list(fix.causes), list(fix.run_flags), dict(fix.env), None, FAILED,
                                          [*same, "the re-run did not start: see its stderr file"],
                                          patch=fix.patch.to_dict() if fix.patch is not None else None,
                                          patched_copy=str(copies[ran]) if ran in copies else None, torch_says=fix.torch_says,
                                          same_as=same_as))
            continue
        measured, fixed_record = _side(ran, path, mode, wall)
        if ran in copies:
            # The copy runs in the script's place: a graph break at its line is the script's.
            script = os.path.abspath(os.path.join(run.meta.cwd or ".", run.meta.target.get("name", "")))
            names = {str(copies[ran]), str(copies[ran].resolve())}
            measured.graph_break_places = [None if places is None else sorted({_in_script(p, names, script) for p in places})
                                           for places in measured.graph_break_places]
        change = next((c for c in compare_runs(base_record, fixed_record).changes if c.mode == mode), None)
        speedup = change.speedup if change is not None else None
        numerics = [d for d in (change.numerics if change is not None else ()) if not d.inputs_differ]
        agree = all(d.agrees for d in numerics) if numerics else None
        # drop_last trains other batches: fewer steps where the loop runs epochs, the same number over
        # other batches where it counts steps (HF Trainer's max_steps): the losses differ by design.
        dropped = fix.patch is not None and fix.patch.name == DROP_LAST
        if dropped:
            agree = None
        if unreproduced and agree is False:
            # The baseline does not reproduce its own numbers: the fix's differing says nothing of the fix.
            agree = None
        verdict, reasons = judge(baseline, measured, speedup, agree, check)
        if unreproduced and agree is None and numerics:
            reasons.append(f"numerics not judged: {unreproduced}")
        if dropped:
            assert fix.patch is not None
            evaluation = (" (and, through TrainingArguments, the evaluation's last batch out of its metrics)"
                          if fix_call(fix.patch).startswith("TrainingArguments") else "")
            steps = (f"steps {repetition_counts(baseline.steps)} -> {repetition_counts(measured.steps)}"
                     if list(baseline.steps) != list(measured.steps) else
                     f"the same {repetition_counts(measured.steps)} steps, over other batches: the loop counts steps, not epochs")
            reasons.append(f"numerics not compared: drop_last=True leaves each epoch's last batch untrained{evaluation} ({steps}), "
                           "so the losses differ by design")
        left = causes_left(fixed_record, mode, {n: k for n, k in (cause_keys or {}).items() if n in fix.causes})
        if left:
            reasons.append("; ".join(f"cause #{n} is still there ({plural(k, 'recompile')} in the re-run)" for n, k in sorted(left.items())))
            if verdict == VERIFIED:
                verdict = PARTLY_VERIFIED
        elif fix.causes and verdict == NO_EFFECT and (uncovered := causes_uncovered(fixed_record, base_record, mode, run.meta.cwd or "")):
            # The causes it answers are gone, and the recompiles stay for guards the record never named.
            gone = ", ".join(f"#{n}" for n in fix.causes)
            told = "; ".join(title for title, _ in uncovered[:3])
            reasons.append(f"cause {gone} gone from the re-run, which recompiles instead for what the record did not show: {told}: "
                           "torch names one failing guard per recompile, so a fix of the first can uncover the next; "
                           f"`cagtool recompiles {path} --explain` explains it")
            verdict = PARTLY_VERIFIED
        elif fix.causes and verdict in (VERIFIED, PARTLY_VERIFIED) and (
                uncovered := causes_uncovered(fixed_record, base_record, mode, run.meta.cwd or "")):
            # What it answers is gone, and the re-run recompiles for a cause the baseline re-run did not
            # have: one the fix moved elsewhere (drop_last in training leaves the evaluation's smaller
            # batch to recompile the forward its training batch had made dynamic). Said, not hidden in the total.
            told = "; ".join(title for title, _ in uncovered[:3])
            reasons.append(f"its re-run has {plural(len(uncovered), 'cause')} the baseline re-run did not show: {told}; brought by "
                           "the fix, or uncovered by it (torch names one failing guard per recompile, so a recompile the fix "
                           f"removed the first guard of can stay for the next): `cagtool recompiles {path} --explain` explains "
                           f"{'it' if len(uncovered) == 1 else 'them'}")
        ran_copy = all(r.manifest.options.get("patched_source") for n, r in fixed_record.modes.items() if n == mode or n.startswith(f"{mode}."))
        if fix.patch is not None and not ran_copy:
            verdict, reasons = FAILED, ["the re-run did not run the patched copy: nothing measured of the patch"]
        if (changed := _source_changed(fixed_record, mode)) is not None:
            verdict, reasons = FAILED, [changed]
        compared = speedup if check.step is None else None  # no figure is shown that is not compared
        result.fixes.append(FixResult(
            fix.name, fix.title, fix.who, list(fix.causes), list(fix.run_flags), dict(fix.env), measured, verdict, [*same, *reasons],
            speedup=compared.ratio if compared else None, speedup_low=compared.low if compared else None,
            speedup_high=compared.high if compared else None,
            speedup_verdict=compared.verdict if compared else (NOT_COMPARED if speedup is not None else None), numerics_agree=agree,
            patch=fix.patch.to_dict() if fix.patch is not None else None,
            patched_copy=str(copies[ran]) if ran in copies else None, torch_says=fix.torch_says, same_as=same_as,
        ))
        progress(f"{fix.name}: {verdict} ({'; '.join(reasons)})")
    result.wall_s = time.monotonic() - started
    return result
