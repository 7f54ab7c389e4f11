"""One mode of one run, in its own process: `python -m cagtool.capture.run.child SPEC.json`.

Sets the mode up before torch is imported, runs the target like python, and finishes the record
whatever the target does (returns, raises, exits, is interrupted or times out). Exits with the
target's exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cagtool.capture.modes.mode_setup import make_compiler, mode_context, prepare_environment
from cagtool.capture.torch_counters import counter_snapshot
from cagtool.capture.versions import imported_torch_version, record_versions

EXIT_NO_CA = 2
STARTUP_ERROR_FILE = "startup_error.txt"


@dataclass
class ModeSpec:
    mode: str  # eager | aot | ca
    mode_dir: str
    target: dict[str, Any]  # Target fields incl. args
    backend: str = "inductor"
    dynamic: bool = False
    max_steps: int | None = None
    max_time: float | None = None
    trace_nodes: bool = False
    depyf: bool = False
    torch_trace: bool = False
    label: str = ""
    temp_cache_dir: str | None = None  # this mode's fresh Inductor cache, a temporary one cagtool removes at the run's end
    parent_pid: int = 0  # the cagtool process: this one dies with it
    ack_fd: int | None = None  # pipe to the parent: the signals this process received (lifeline.py)
    ack_hold_fd: int | None = None  # the same pipe's read end, held open so that writes to it never fail (lifeline.py)
    go_fd: int | None = None  # pipe from the parent: one byte when the script may start (_wait_for_go)
    seed: int | None = 0  # random, torch and numpy are seeded with it before the script (seeding.py); None: not seeded
    parity_every: int | None = None  # digest the gradients every K steps too (grad_digest.py)
    digest_steps: list[int] | None = None  # steps an earlier mode of the run digested: digested here too
    parity: bool = False  # compiled code draws random numbers as eager does (Inductor's fallback_random)


class TimeLimitReached(BaseException):
    pass


def _has_compiled_autograd() -> bool:
    import torch

    ca_module = getattr(torch._dynamo, "compiled_autograd", None)
    return bool(
        ca_module is not None
        and hasattr(ca_module, "_enable")
        and hasattr(ca_module, "AutogradCompilerInstance")
        and hasattr(getattr(torch._C, "_dynamo", None), "compiled_autograd")
    )


def _peak_rss_bytes() -> int | None:
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except Exception:  # noqa: BLE001 - not on this platform
        return None


def _peak_cuda_bytes() -> int | None:
    """torch.cuda.max_memory_allocated, summed over the devices this process used; None when the
    job never initialised CUDA (cagtool does not initialise it for the job)."""
    try:
        import torch

        if not torch.cuda.is_initialized():
            return None
        return sum(int(torch.cuda.max_memory_allocated(d)) for d in range(torch.cuda.device_count()))
    except Exception:  # noqa: BLE001 - a broken CUDA state must not lose the record
        return None


def job_peaks() -> tuple[int | None, int | None]:
    """(peak RSS, peak CUDA bytes) as the job left them: read before cagtool's own end-of-run work
    (the float64 norms, reading the deferred losses), which could otherwise raise them."""
    return _peak_rss_bytes(), _peak_cuda_bytes()


def cagtool_memory(before: tuple[int | None, int | None], device: Any) -> dict[str, Any]:
    """What cagtool itself allocated, for the manifest (options["cagtool_memory"]): the loss
    storage (device_readings.py), and how far its end-of-run work raised the peaks read before it
    (`before`, from job_peaks; 0 when it stayed under them)."""
    after = job_peaks()

    def added(was: int | None, now: int | None) -> int | None:
        return None if was is None or now is None else max(now - was, 0)

    footprint = device.footprint() if device is not None else {}
    return {**footprint, "end_of_run_peak_rss_added_bytes": added(before[0], after[0]),
            "end_of_run_peak_device_added_bytes": added(before[1], after[1])}


def main(spec_path: str) -> int:
    spec = ModeSpec(**json.loads(Path(spec_path).read_text()))
    from cagtool.capture.processes.lifeline import SignalStop, die_with_parent, exit_code_for, install_child_handlers, stop_taken

    install_child_handlers(spec.parent_pid, spec.ack_fd, spec.ack_hold_fd)
    try:
        if spec.parent_pid:
            die_with_parent(spec.parent_pid)
        return _record_mode(spec)
    except SignalStop as stop:  # before the record existed (e.g. while torch imported)
        stop_taken()
        return exit_code_for(stop.signum)
    except KeyboardInterrupt:
        return 130


def _record_mode(spec: ModeSpec) -> int:
    # Every record path is absolute before the script runs: it may os.chdir.
    spec.mode_dir = os.path.abspath(spec.mode_dir)
    prepare_environment(spec.mode, Path(spec.mode_dir) if spec.torch_trace else None)
    started = time.perf_counter()
    from datetime import datetime, timezone

    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    import torch  # noqa: F401 - after the environment is set

    from cagtool.capture.observe.ca_observer import CaptureObserver
    from cagtool.capture.processes.identity import ROLE_MAIN, process_info
    from cagtool.capture.processes.lifeline import STOP_SIGNALS, SignalStop, exit_code_for, ignore_further_stops, signal_tree, stop_taken
    from cagtool.capture.run.status import LiveStatus, status_enabled
    from cagtool.capture.steps.tracker import StepLimitReached, StepTracker
    from cagtool.capture.run.target import Target, print_user_traceback, run_target
    from cagtool.capture.observe import dynamo_taps
    from cagtool.capture.observe.torch_logs import StructuredLogHandler, guard_trace_output
    from cagtool.capture.writer import RecordWriter, close_run_of_dead_parent
    from cagtool.record.manifest import ExceptionInfo, ModeManifest
    from cagtool.record.schema import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED

    waited_s = 0.0
    if spec.go_fd is not None:
        waited = _wait_for_go(spec.go_fd)
        if waited is None:
            return 0  # the run ended before this mode's turn: no record (the parent removes its directory)
        waited_s = waited
        # The record's clock leaves the wait out: its times (time to first step, duration) read as
        # a bare run's would, the imports and then the script.
        started += waited_s
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    if not _has_compiled_autograd():
        # The parent turns this into its one-line error and stops the run.
        (Path(spec.mode_dir) / STARTUP_ERROR_FILE).write_text(
            f"this torch build ({torch.__version__}) has no compiled autograd "
            "(torch._dynamo.compiled_autograd._enable is missing); cagtool needs torch 2.13"
        )
        return EXIT_NO_CA

    target = Target(**spec.target)
    mode_dir = Path(spec.mode_dir)
    manifest = ModeManifest(
        mode=spec.mode,
        argv=[target.name, *target.args],
        target=target.to_dict(),
        cwd=os.getcwd(),
        versions=record_versions(imported_torch_version()),
        backend=spec.backend,
        dynamic=spec.dynamic,
        started_at=started_at,
        options={"waited_to_start_s": round(waited_s, 3), "max_steps": spec.max_steps, "max_time": spec.max_time, "trace_nodes": spec.trace_nodes, "depyf": spec.depyf, "torch_trace": spec.torch_trace},
        process=process_info(ROLE_MAIN, "main", argv=[target.name, *target.args]),
    )
    writer = RecordWriter(mode_dir, manifest, clock_start=started)
    from cagtool.capture.steps.grad_digest import GradDigests

    digests = GradDigests(spec.parity_every, spec.digest_steps or ())
    digests.names.install()
    steps = StepTracker(writer, spec.mode, max_steps=spec.max_steps, digests=digests)
    if spec.parity_every:
        manifest.options["parity_every"] = spec.parity_every
    if spec.parity and spec.mode != "eager":
        _eager_randomness()
    observer = CaptureObserver(writer, steps, make_compiler(spec.backend) if spec.mode == "ca" else None)
    handler = StructuredLogHandler(writer, steps)
    taps = dynamo_taps.install(handler)  # no handler on torch's structured logger (dynamo_taps.py)
    if spec.torch_trace:
        guard_trace_output(lambda stopped: setattr(manifest, "trace_stopped", stopped))
    steps.install()
    observer.install()
    from cagtool.capture.processes.follow import attach_main

    followed = attach_main(spec, writer, manifest, steps, observer)  # the Python processes the target starts
    # SIGTERM and SIGHUP keep their default action, as under python: the process dies at once and
    # the parent closes this record, with every thread's stack left beside it (lifeline.py).
    followed.stop_stacks.arm(mode_dir)

    def probe() -> dict[str, Any]:
        return {"step": steps.current_step, "graphs": observer._next_record_id, "compiling": steps.compile_in_progress}

    exit_code = 0
    parent_died = False
    status = STATUS_FINISHED
    exception: ExceptionInfo | None = None
    if spec.max_time:
        def _on_alarm(signum: int, frame: Any) -> None:
            raise TimeLimitReached()

        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, spec.max_time)
    if spec.trace_nodes:
        torch.autograd.set_detect_anomaly(True, check_nan=False)
    live = LiveStatus(f"{spec.label or spec.mode}", probe) if status_enabled() else contextlib.nullcontext()
    depyf_ctx: Any = contextlib.nullcontext()
    if spec.depyf:
        import depyf

        from cagtool.capture.observe.source import not_user_code

        depyf_ctx = depyf.prepare_debug(str(mode_dir / "depyf"))
        not_user_code(str(mode_dir / "depyf"))
    from cagtool.capture.run.seeding import script_reseeded, seed_all

    manifest.options["seed"] = seed_all(spec.seed)  # every mode alike, so their numerics compare
    from cagtool.capture.run.target import patched_source_for

    if (patched := patched_source_for(target)) is not None:
        manifest.options["patched_source"] = patched  # the record says it ran a patched copy
    from cagtool.capture.modes import checkpoint_variant

    if (variant := checkpoint_variant.requested()) is not None:
        checkpoint_variant.apply(variant)
        manifest.options["checkpoint_variant"] = variant  # the record says it is not the job as written
    try:
        with live, depyf_ctx, mode_context(spec.mode, observer, spec.dynamic):
            run_target(target)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            exit_code = 0
        elif isinstance(code, int):
            exit_code = code
        else:
            print(code, file=sys.stderr)
            exit_code = 1
        status = STATUS_FINISHED if exit_code == 0 else STATUS_FAILED
        if exit_code:
            exception = ExceptionInfo("SystemExit", str(code))
    except StepLimitReached:
        # A bound the user asked for: the record up to here is a complete, valid run.
        manifest.options["stopped_by"] = "steps"
    except TimeLimitReached:
        manifest.options["stopped_by"] = "max_time"
    except KeyboardInterrupt:
        status, exit_code = STATUS_INTERRUPTED, 130
        exception = ExceptionInfo("KeyboardInterrupt", "interrupted (Ctrl-C)")
    except SignalStop as stop:
        stop_taken()
        status, exit_code = STATUS_INTERRUPTED, exit_code_for(stop.signum)
        if stop.parent_died:  # no cagtool to pass the signal on to the script's own workers
            signal_tree(os.getpid(), stop.signum, include_root=False)
            parent_died = True  # only once they have it: otherwise the check below stops them
        why = "cagtool's own process died" if stop.parent_died else f"stopped by {signal.Signals(stop.signum).name}"
        exception = ExceptionInfo(signal.Signals(stop.signum).name, why)
    except BaseException as exc:  # noqa: BLE001 - the target's own failure, recorded and passed on
        text = print_user_traceback(exc)
        status, exit_code = STATUS_FAILED, 1
        exception = ExceptionInfo(type(exc).__name__, str(exc)[:2000], text[-20000:])
        sigval = getattr(exc, "sigval", None)
        if type(exc).__name__ == "SignalException" and isinstance(sigval, int) and sigval in STOP_SIGNALS:
            # torchrun's launcher turns SIGINT/SIGTERM/SIGHUP into torch.distributed.elastic's
            # SignalException and exits 1 (as under python): a stop, not a failure of the job.
            status = STATUS_INTERRUPTED
    finally:
        followed.stop_stacks.disarm()  # before ignore_further_stops: unregistering needs the default action in place
        ignore_further_stops()
        if not parent_died and spec.parent_pid and os.getppid() != spec.parent_pid:
            # cagtool died while the script was ending another way (its own error, an exit, a
            # signal handled first): the script's workers must not outlive it either.
            parent_died = True
            signal_tree(os.getpid(), signal.SIGTERM, include_root=False)
        if spec.max_time:
            signal.setitimer(signal.ITIMER_REAL, 0)
        peaks = job_peaks()
        # Each step of winding down may meet what the script left behind (a stop that a hook
        # caught and raises again on the way out, a failing device read): none may keep the
        # record and run.json from being closed below.
        for wind_down in (steps.emit_final_state, lambda: _emit_grad_digests(writer, steps, manifest), digests.names.uninstall,
                          steps.note_traced_backward, followed.before_close, steps.uninstall, observer.uninstall, taps.uninstall):
            try:
                wind_down()
            except BaseException:  # noqa: BLE001 - the record must still close
                pass
        manifest.status = status
        manifest.exit_code = exit_code
        manifest.exception = exception
        manifest.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        manifest.duration_s = time.perf_counter() - started
        manifest.peak_rss_bytes, manifest.peak_device_memory_bytes = peaks
        try:
            manifest.options["cagtool_memory"] = cagtool_memory(peaks, steps.device)
        except Exception:  # noqa: BLE001 - the record must still close
            pass
        manifest.torch_counters = counter_snapshot()
        manifest.options["seed"]["script_reseeded"] = script_reseeded(manifest.options["seed"])
        if steps.errors:
            manifest.options["step_tracking_errors"] = {"count": steps.errors, "last": steps.last_error}
        if steps.device.dropped_losses:
            manifest.options["losses_not_kept"] = steps.device.dropped_losses
        if handler.errors:
            manifest.options["structured_log_errors"] = {"count": handler.errors, "last": handler.last_error}
        from cagtool.capture.observe.torch_logs import pgo_suggestion

        if (suggestion := pgo_suggestion()) is not None:
            manifest.options["pgo_suggestion"] = suggestion  # torch's own words, shown beside cagtool's
        manifest.options.update(observer.manifest_notes())
        writer.write_manifest()
        writer.close()
        if parent_died:
            close_run_of_dead_parent(mode_dir.parent, mode_dir.name, exit_code, manifest.ended_at)
            _remove_temp_cache(spec.temp_cache_dir)
        sys.stdout.flush()
        _say_record_closed(spec.ack_fd)
    return exit_code


def _remove_temp_cache(path: str | None) -> None:
    """cagtool died first (SIGKILL, the OOM killer): nobody else removes this mode's temporary
    Inductor cache (compiled kernels, hundreds of MB on a real model), nor the run's temporary
    folder holding it once every mode's is gone."""
    if not path:
        return
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(path))  # only when empty: another mode process may still hold its own
    except OSError:
        pass


def _eager_randomness() -> None:
    """`cagtool run --parity`: Inductor's compiled code calls torch's own random ops (the eager
    stream, seeded alike in every mode: seeding.py) instead of its own generator, so dropout and
    friends draw the same numbers as in eager mode and gradients compare."""
    try:
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True
    except Exception:  # noqa: BLE001 - a torch without Inductor: nothing draws differently
        pass


def _emit_grad_digests(writer: Any, steps: Any, manifest: Any) -> None:
    """The gradient digests, read back from the device now (the run's only wait for them), and
    whether compiled code drew eager-equal random numbers (what a parity verdict depends on)."""
    from cagtool.record.schema import GradDigestEvent

    try:
        for fields in steps.grad_digest_events():
            writer.emit(GradDigestEvent, **fields)
    except Exception as exc:  # noqa: BLE001 - numerics are a bonus; the record must still close
        manifest.options["grad_digest_error"] = f"{type(exc).__name__}: {exc}"[:500]
    # Not imported here when the job never used Inductor: then nothing drew Inductor's numbers.
    inductor_config = sys.modules.get("torch._inductor.config")
    manifest.options["fallback_random"] = bool(getattr(inductor_config, "fallback_random", False))


def _wait_for_go(go_fd: int) -> float | None:
    """The parent may start this process while the previous mode's process is still exiting (the
    interpreter's teardown, about a second after a torch job): torch is imported by then, and the
    script starts only on the parent's word, once that process is gone, so no mode is measured
    beside another. Returns the seconds waited, or None when the parent closed the pipe instead
    (the run stopped before this mode)."""
    from cagtool.capture.processes.lifeline import STOP_SIGNALS

    began = time.perf_counter()
    try:
        word = os.read(go_fd, 1)
    finally:
        os.close(go_fd)
    if not word:
        return None
    # The parent started this process with the stop signals blocked (orchestrate.py): from here they
    # are the script's, and one that came while it waited is delivered now (the mode was stopped
    # at its start, as it would have been a moment later).
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    return time.perf_counter() - began


def _say_record_closed(ack_fd: int | None) -> None:
    """Tell the parent the record is complete: what remains is the interpreter's exit."""
    if ack_fd is None:
        return
    from cagtool.capture.processes.lifeline import RECORD_CLOSED

    try:
        os.write(ack_fd, bytes([RECORD_CLOSED]))
    except OSError:
        pass  # the parent is gone or stopped listening: it waits for the exit instead


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
