"""What activation checkpointing does for a recorded job, measured by re-running it: in each mode
(aot, ca) the job as written and a variant with checkpointing turned into a plain call
(capture/modes/checkpoint_variant.py), one process each, and the memory each holds for its
backward: the heap in use at each backward's entry and its sampled maximum inside the backward
(capture/steps/heap_in_use.py, read in these re-runs only), median over steady steps; peak RSS
beside it (CUDA's max allocated on a GPU). A job whose reentrant checkpoints recompile in their
recompute, or fail under compiled autograd ("Trying to run compiled autograd within another
compiled autograd call"), is also re-run with them made non-reentrant (`use_reentrant=False`, the
fix), and the recompiles in the recompute and the exit status are compared. A mode whose compiled
code called a checkpoint that a side effect broke the graph inside ("HOP: ... side effect", which
lets its unpack hooks split the compiled-autograd graph's code) is re-run with Dynamo's
`skip_fwd_side_effects_in_bwd_under_checkpoint` set (the fix explain names), and the graph breaks
and compile time are compared.

The re-runs are ordinary runs under RUN/checkpointing/<time>/, started as `--verify` starts its
re-runs (the job's seal checked first, absolute paths, stdin /dev/null, output kept in files);
the result is kept in RUN/checkpointing.json. The user's file is never written."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from cagtool.capture.modes.checkpoint_variant import CHECKPOINT_VARIANT_ENV, VARIANT_NON_REENTRANT, VARIANT_PLAIN, VARIANT_SKIP_SIDE_EFFECTS
from cagtool.capture.run.target import SOURCE_DIGEST_ENV
from cagtool.capture.steps.heap_in_use import HEAP_READINGS_ENV
from cagtool.errors import UsageError
from cagtool.record.atomic import check_confined, make_new_dir, open_new, write_atomic
from cagtool.record.loader import ModeRecord, load_run
from cagtool.record.schema import CHECKPOINT_REENTRANT, PHASE_CHECKPOINT_RECOMPUTE, BackwardEvent, StepEvent
from cagtool.record.seal import check_job, with_document_seal
from cagtool.report.checkpointing import CHECKPOINTING_FILE, CheckpointingResult, HeapHeld, ModeSaving, Side, checkpointing_lines
from cagtool.torch_text import NESTED_CA_ERROR
from cagtool.verify.verification import (RERUN_LIMIT_FACTOR, RERUN_LIMIT_FLOOR_S, checked_source_env, private_reruns, rerun_argv, rerun_limit_s,
                                          wait_bounded)

CHECKPOINTING_DIR = "checkpointing"
MEASURED_MODES = ("aot", "ca")


def _recompute_recompiles(record: ModeRecord) -> int:
    from cagtool.report.recompiles.phases import mode_phases

    return sum(1 for c in mode_phases(record).recompiles if c.phase == PHASE_CHECKPOINT_RECOMPUTE)


def _reentrant_trouble(record: ModeRecord) -> bool:
    """Reentrant checkpoints recompiled in their recompute, or the mode failed on a nested CA call."""
    from cagtool.report.recompiles.phases import mode_phases

    if any(c.phase == PHASE_CHECKPOINT_RECOMPUTE and c.checkpoint == CHECKPOINT_REENTRANT for c in mode_phases(record).recompiles):
        return True
    exception = record.manifest.exception
    return exception is not None and NESTED_CA_ERROR in (exception.message or "")


def _side_effect_break(record: ModeRecord) -> bool:
    """A side effect broke the graph inside a checkpoint the compiled code called
    (explain.checkpoint_region_break: a "HOP: ..." break), the break the fix answers: in ca its
    unpack hooks then split the CA graph's code, in aot the checkpoint runs as eager checkpointing
    does."""
    from cagtool.report.recompiles.explain import checkpoint_region_break
    from cagtool.report.recompiles.table import recompile_table

    found = checkpoint_region_break(recompile_table(record))
    return found is not None and "side effect" in found["reason"]


def heap_held(record: ModeRecord) -> HeapHeld | None:
    """The heap held for the backward in a re-run (capture/steps/heap_in_use.py's readings), over its
    steady steps: a backward with a reading before it, in a step that compiled and captured
    nothing (a compile's own memory is not the activations'). None where nothing was read."""
    import statistics

    readings = (record.manifest.options or {}).get("heap_in_use")
    if not isinstance(readings, dict):
        return None
    if not readings.get("source"):
        return HeapHeld(None, 0, None, None, None, None, str(readings.get("why") or "not read"))
    compiled = {s.step for s in record.of(StepEvent) if s.compiles or s.ca_captures}
    calls = sorted(record.of(BackwardEvent), key=lambda e: e.seq)
    held, peak = [], []
    freed = readings.get("grads_freed") or []
    for i, (call, before, entry, inside) in enumerate(zip(calls, readings.get("before") or [], readings.get("at_entry") or [],
                                                           readings.get("max_inside") or [])):
        if before is None or call.step in compiled:
            continue
        # The gradients zero_grad() freed between the two readings, counted back (heap_in_use.py).
        back = freed[i] if i < len(freed) and isinstance(freed[i], int) else 0
        held.append(entry - before + back)
        peak.append(inside - before + back)
    if not held:
        return HeapHeld(readings["source"], 0, None, None, None, None, "no steady step (every step compiled, or one step)")
    return HeapHeld(readings["source"], len(held), int(statistics.median(held)), max(held) - min(held),
                    int(statistics.median(peak)), max(peak) - min(peak))


def _side(variant: str, path: Path, mode: str) -> Side:
    if not (path / "run.json").exists():
        return Side(variant, str(path), "did not start", None, None, "see its stderr file")
    record = load_run(path).modes.get(mode)
    if record is None:
        return Side(variant, str(path), "no record", None, None)
    m = record.manifest
    status = "finished" if m.status == "finished" and m.exit_code in (0, None) else m.status
    error = f"{m.exception.type}: {(m.exception.message or '').splitlines()[0] if m.exception.message else ''}" if m.exception else ""
    # CUDA's max allocated where the job used a GPU (the activations themselves), else peak RSS
    peak = m.peak_device_memory_bytes or m.peak_rss_bytes
    from cagtool.report.figures.metrics import mode_metrics

    figures = mode_metrics(record)
    return Side(variant, str(path), status, peak, _recompute_recompiles(record), error, "cuda_max_allocated" if m.peak_device_memory_bytes else "rss",
                heap_held(record), figures.graph_breaks, figures.compile_time_s)


def measure_checkpointing(run_path: str | Path | None, modes: list[str] | None = None,
                          progress: Callable[[str], None] = lambda line: None) -> CheckpointingResult:
    run = load_run(run_path)
    run_dir = Path(os.path.abspath(run.path))
    check_job(run_dir, run.meta.job_seal, run.meta.target, run.meta.target_argv, run.meta.cwd, dict(run.meta.options or {}))
    check_confined(run_dir, run_dir / CHECKPOINTING_FILE)
    chosen = [m for m in (modes or MEASURED_MODES) if m in run.modes] or [m for m in MEASURED_MODES]
    started = time.monotonic()
    root = make_new_dir(run_dir, run_dir / CHECKPOINTING_DIR / time.strftime("%Y%m%d-%H%M%S"))
    result = CheckpointingResult(str(run.path))
    with private_reruns(run_dir, root) as (work, relocated):
        _measure_in(run, work, chosen, result, lambda line: progress(relocated(line, shown=True)))
    result = relocated(result)
    result.wall_s = time.monotonic() - started
    import json

    write_atomic(run_dir / CHECKPOINTING_FILE, json.dumps(with_document_seal(result.to_dict()), indent=2), root=run_dir)
    return result


def _measure_in(run: Any, work: Path, chosen: list[str], result: CheckpointingResult, progress: Callable[[str], None]) -> None:
    """measure_checkpointing's re-runs, each recorded in `work` (verification.private_reruns)."""

    def rerun(name: str, mode: str, variant: str | None) -> Path:
        out = make_new_dir(work, work / name)
        argv = rerun_argv(run, mode, 1, out, None)
        env = {**os.environ}
        env.pop(CHECKPOINT_VARIANT_ENV, None)
        # The re-run runs the code check_job found unchanged or nothing (capture/run/target.py checks the digest).
        env.pop(SOURCE_DIGEST_ENV, None)
        env.update(checked_source_env(run))
        env[HEAP_READINGS_ENV] = "1"  # both sides: the heap held for each backward (capture/steps/heap_in_use.py)
        if variant is not None:
            env[CHECKPOINT_VARIANT_ENV] = variant
        progress(f"{name}: cagtool {' '.join(argv[3:])}" + (f"  ({CHECKPOINT_VARIANT_ENV}={variant}; your file is not changed)" if variant else ""))
        with open_new(work, work / f"{name}.stdout") as stdout, open_new(work, work / f"{name}.stderr") as stderr:
            try:
                process = subprocess.Popen(argv, cwd=run.meta.cwd or None, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
            except OSError as exc:
                raise UsageError(f"cannot start the re-run in {run.meta.cwd}: {exc.strerror or exc}") from None
            with process:  # Ctrl-C: the re-run got it too, and closes its record before this returns
                limit = rerun_limit_s(run, mode)
                if wait_bounded(process, limit) is None:  # its record says it was stopped: that side did not finish
                    progress(f"{name}: stopped after {limit:.0f} s ({RERUN_LIMIT_FACTOR}x the recorded mode's time, at least "
                             f"{RERUN_LIMIT_FLOOR_S:.0f} s): the job did not finish in that time")
        return out

    for mode in chosen:
        checkpointed = _side("as written", rerun(f"{mode}-as-written", mode, None), mode)
        plain = _side(VARIANT_PLAIN, rerun(f"{mode}-plain", mode, VARIANT_PLAIN), mode)
        saving = ModeSaving(mode, checkpointed, plain)
        recorded = run.modes.get(mode)
        if recorded is not None and _reentrant_trouble(recorded):
            saving.non_reentrant = _side(VARIANT_NON_REENTRANT, rerun(f"{mode}-non-reentrant", mode, VARIANT_NON_REENTRANT), mode)
        if recorded is not None and _side_effect_break(recorded):
            saving.side_effects_skipped = _side(VARIANT_SKIP_SIDE_EFFECTS,
                                                rerun(f"{mode}-skip-side-effects", mode, VARIANT_SKIP_SIDE_EFFECTS), mode)
        result.modes.append(saving)
        progress(" ".join(checkpointing_lines(result)[-1:]))


