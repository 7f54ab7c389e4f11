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

from cagtool.capture.modes.mode_setup import mode_context, prepare_environment
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

    from cagtool.capture.processes.identity import ROLE_MAIN, process_info
    from cagtool.capture.processes.lifeline import STOP_SIGNALS, SignalStop, exit_code_for, ignore_further_stops, signal_tree, stop_taken
    from cagtool.capture.run.status import LiveStatus, status_enabled
    from cagtool.capture.recorder import Recorder, has_compiled_autograd, job_peaks
    from cagtool.capture.steps.tracker import StepLimitReached
    from cagtool.capture.run.target import Target, print_user_traceback, run_target, user_traceback
    from cagtool.capture.observe.compiling_now import CompilesInProgress
    from cagtool.record.writer import RecordWriter, close_run_of_dead_parent
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

    if not has_compiled_autograd():
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
    if spec.parity_every:
        manifest.options["parity_every"] = spec.parity_every
    recorder = Recorder(writer, manifest, started=started)
    # What compiles now, for the live status line: noted only when the line is drawn.
    compiling = CompilesInProgress() if status_enabled() else None
    recorder.instrument(spec.mode, spec.backend, max_steps=spec.max_steps, parity_every=spec.parity_every,
                        digest_steps=spec.digest_steps, parity=spec.parity, torch_trace=spec.torch_trace,
                        compiling=compiling, depyf=spec.depyf)
    steps, observer = recorder.steps, recorder.observer
    from cagtool.capture.processes.follow import attach_main

    followed = attach_main(spec, recorder)  # the Python processes the target starts
    # SIGTERM and SIGHUP keep their default action, as under python: the process dies at once and
    # the parent closes this record, with every thread's stack left beside it (lifeline.py).
    followed.stop_stacks.arm(mode_dir)

    def probe() -> dict[str, Any]:
        return {"step": steps.current_step, "graphs": observer._next_record_id, "compiling": compiling.current() if compiling is not None else None}

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
    live = LiveStatus(f"{spec.label or spec.mode}", probe, clock=compiling.clock) if compiling is not None else contextlib.nullcontext()
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
        manifest.options["patch_target"] = os.path.abspath(target.name)  # in place of this script
    from cagtool.capture.modes import checkpoint_variant

    if (variant := checkpoint_variant.requested()) is not None:
        checkpoint_variant.apply(variant)
        manifest.options["checkpoint_variant"] = variant  # the record says it is not the job as written

    def close_on_os_exit(code: int) -> None:
        """The script called os._exit(code): no finally below runs, so the record is closed here,
        finished or failed by the code (its stdout is not flushed, as under python)."""
        followed.stop_stacks.disarm()
        ignore_further_stops()
        if spec.max_time:
            signal.setitimer(signal.ITIMER_REAL, 0)
        peaks = job_peaks()
        failed = ExceptionInfo("os._exit", f"the script called os._exit({code})") if code else None
        recorder.wind_down(followed.before_close)
        recorder.close(STATUS_FINISHED if code == 0 else STATUS_FAILED, code, failed, peaks)
        _say_record_closed(spec.ack_fd)

    followed.close_main = close_on_os_exit
    try:
        with live, depyf_ctx, mode_context(spec.mode, observer, spec.dynamic):
            run_target(target)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            exit_code = 0
        elif isinstance(code, int):
            exit_code = code % 256  # what the process's status holds, as a shell sees python's: sys.exit(300) is 44
        else:
            try:
                print(code, file=sys.stderr)
            except (OSError, ValueError):  # a stderr whose reader has gone: python prints nothing either
                pass
            exit_code = 1
        status = STATUS_FINISHED if exit_code == 0 else STATUS_FAILED
        if exit_code:
            exception = ExceptionInfo("SystemExit", str(code))
    except StepLimitReached:
        # A bound the user asked for: the record up to here is a complete, valid run.
        manifest.options["stopped_by"] = "steps"
    except TimeLimitReached:
        manifest.options["stopped_by"] = "max_time"
    except KeyboardInterrupt as exc:
        # Not printed (a Ctrl-C stops quietly); kept, for a KeyboardInterrupt the script raised
        # itself (the parent tells them apart: orchestrate._script_raised_interrupt).
        status, exit_code = STATUS_INTERRUPTED, 130
        exception = ExceptionInfo("KeyboardInterrupt", "interrupted (Ctrl-C)", user_traceback(exc)[-20000:])
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
        recorder.wind_down(followed.before_close)
        recorder.close(status, exit_code, exception, peaks)
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
