"""A whole `cagtool run`: the run directory, then one fresh process per mode (and repetition),
interleaved, each writing its mode record. One mode failing never stops the others."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from cagtool.capture.run.child import STARTUP_ERROR_FILE, ModeSpec
from cagtool.capture.run.self_launch import python_module_argv
from cagtool.capture.run_dir import claim_run_dir
from cagtool.capture.versions import machine_info, record_versions, reference_loop_s
from cagtool.capture.processes.cpu_wait import CpuWaitSampler
from cagtool.capture.processes.lifeline import STOP_SIGNALS, ChildSupervisor, adopt_orphans, end_orphans, exit_code_for, killed_words
from cagtool.capture.run.status import restore_terminal
from cagtool.capture.run.stdin_feed import ModeStdin, StdinFeed
from cagtool.capture.run.target import Target, module_file
from cagtool.capture.run.inductor_machine import header_files, isa_checks, job_cache_dir, keep_isa_checks, seed_isa_checks
from cagtool.capture.run.workdir import SET_ASIDE_DIR, list_workdir, set_aside, written_record, written_since
from cagtool.record.writer import write_json_atomic, write_run_meta
from cagtool.record.manifest import RunMeta, WrittenFiles
from cagtool.record.seal import seal_job
from cagtool.record.liveness import signal_stop_exception, this_process
from cagtool.record.schema import MANIFEST_FILE, MODES, STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED, STATUS_KILLED, STATUS_RUNNING


KEPT_CACHE_DIR = "inductor-cache"


@dataclass(frozen=True)
class RunOptions:
    target: Target
    modes: tuple[str, ...] = MODES
    output: Path | None = None  # the run directory; default ./.cagtool/runs/<label>-<timestamp>
    runs_root: Path = Path(".cagtool") / "runs"
    backend: str = "inductor"
    dynamic: bool = False
    steps: int | None = None
    max_time: float | None = None
    repeat: int = 1
    warm_cache: bool = False
    # Move what each mode created in the job's working directory into <run>/workdir/<mode>/ before
    # the next mode and after the last (workdir.py): every mode starts from the same directory.
    isolate_workdir: bool = False
    trace_nodes: bool = False
    depyf: bool = False
    torch_trace: bool = False
    keep_cache: bool = False  # keep the per-mode Inductor caches under <run>/inductor-cache
    seed: int | None = 0  # every process of every mode starts from it (capture/run/seeding.py); None: unseeded
    parity_every: int | None = None  # digest every parameter's gradient every K steps too (grad_digest.py)
    parity: bool = False  # compiled modes draw random numbers as eager does (fallback_random)
    cagtool_argv: tuple[str, ...] = ()
    # The order of the modes within each block of `--repeat`: drawn once per run (random.Random
    # seeded with it), recorded in run.json as `options.order_seed`. None: the modes' own order in
    # every block (one block, or a caller that wants it fixed).
    order_seed: int | None = None


@dataclass
class ModeOutcome:
    mode: str  # directory name: "ca", or "ca.2" for the second repetition
    exit_code: int | None
    wall_s: float
    error: str = ""
    status: str = ""  # the mode manifest's final status
    stopped: bool = False  # killed or interrupted: what the job left running is to be ended
    signalled: bool = False  # a stop signal ended the process (at its default action): its workers have it too


@dataclass
class RunOutcome:
    path: Path
    outcomes: list[ModeOutcome] = field(default_factory=list)
    interrupted: bool = False
    signal: int | None = None  # the signal that stopped the run (SIGINT, SIGTERM, SIGHUP)
    startup_error: str = ""  # the environment cannot run a mode at all (e.g. torch without CA)

    @property
    def exit_code(self) -> int:
        """The target's own code: the ca mode's if it failed, else the first failing mode's."""
        if self.interrupted:
            return exit_code_for(self.signal or signal.SIGINT)
        failing = [o for o in self.outcomes if o.exit_code not in (0, None)]
        for outcome in failing:
            if outcome.mode.split(".")[0] == "ca":
                return int(outcome.exit_code or 1)
        if failing:
            return int(failing[0].exit_code or 1)
        if any(o.exit_code is None for o in self.outcomes):
            return 1
        return 0


def _timestamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _user_name() -> str:
    """The login name, or the uid where it has none (a container's `--user 1234`): getpass raises
    OSError there (KeyError before Python 3.13), which must not stop a run."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return str(os.getuid())


def make_run_dir(options: RunOptions) -> Path:
    """The run directory, claimed atomically with its first mode's directory (run_dir.py)."""
    return claim_run_dir(options.output, options.runs_root, options.target.label, mode_dirs(options)[0])


def mode_dirs(options: RunOptions) -> list[str]:
    """Directory names in the order they run: one block per repetition holding every mode once
    (ca, ca.2, ...), the modes' order within each block shuffled by `order_seed`. A fixed order
    would give one mode every "first after a quiet spell" or "right after a compile-heavy
    neighbour" slot, a bias no number of repetitions averages out; shuffled, the blocks' paired
    ratios (report/figures/processes.py) see it as noise."""
    import random

    shuffle = random.Random(options.order_seed).shuffle if options.order_seed is not None and len(options.modes) > 1 else None
    names = []
    for rep in range(1, options.repeat + 1):
        block = list(options.modes)
        if shuffle is not None and options.repeat > 1:
            shuffle(block)
        names.extend(mode if rep == 1 else f"{mode}.{rep}" for mode in block)
    return names


def run(options: RunOptions, on_progress: Callable[[str, int, int], None] | None = None, on_started: Callable[[str], None] | None = None) -> RunOutcome:
    """Run every mode; `on_progress(name, index, total)` before each mode process starts,
    `on_started(name)` once it has started (while it imports torch, the caller may do its own work)."""
    run_dir = make_run_dir(options)
    import importlib.metadata as md

    meta = RunMeta(
        run_id=run_dir.name,
        created_at=_timestamp(),
        cagtool_argv=list(options.cagtool_argv),
        target=options.target.to_dict(),
        target_argv=[options.target.name, *options.target.args],
        cwd=os.getcwd(),
        modes=mode_dirs(options),
        versions=record_versions(md.version("torch")),  # torch is not imported in this process
        machine=machine_info(),
        options={
            "backend": options.backend,
            "dynamic": options.dynamic,
            "steps": options.steps,
            "max_time": options.max_time,
            "repeat": options.repeat,
            "order_seed": options.order_seed,
            "warm_cache": options.warm_cache,
            "isolate_workdir": options.isolate_workdir,
            "keep_cache": options.keep_cache,
            "seed": options.seed,
            "parity_every": options.parity_every,
            "parity": options.parity,
            "user": _user_name(),
        },
    )
    meta.process = this_process()
    meta.job_seal = seal_job(meta.target, meta.target_argv, meta.cwd, dict(meta.options), module_file(options.target))
    write_run_meta(run_dir, meta)
    outcome = RunOutcome(path=run_dir)
    cache_root = _cache_root(options, run_dir)
    # Every mode starts with the checks the job's cache held when the run began, whatever an
    # earlier mode of this run left there: the modes pay alike.
    job_cache = job_cache_dir(os.environ)
    checks = isa_checks(job_cache) if cache_root is not None else []
    names = mode_dirs(options)
    stdin_feed = StdinFeed(len(names))
    adopt_orphans()

    def start_process(index: int) -> _ModeProcess:
        name = names[index - 1]
        label = f"{name} ({index}/{len(names)})" if len(names) > 1 else name
        if cache_root is not None and checks:
            seed_isa_checks(checks, str(cache_root / name))
        return _start_mode_process(options, run_dir, name, cache_root, label, stdin_feed)

    ready: _ModeProcess | None = None  # the next mode's process, started while the last one exits
    first_listing = None  # the job's working directory before the first mode ran (workdir.py)

    def isolate(listing: dict, mode: str) -> dict:
        """--isolate-workdir: what `mode` created in the job's directory, moved into the run's
        workdir/<mode>/ (workdir.py); the directory's listing after it."""
        if not options.isolate_workdir or first_listing is None:
            return listing
        moved, left = set_aside(meta.cwd, first_listing, listing, run_dir / SET_ASIDE_DIR / mode)
        if moved:
            meta.set_aside[mode] = WrittenFiles(**written_record(moved))  # type: ignore[arg-type]
        if left:
            print(f"cagtool: --isolate-workdir could not move {len(left)} file(s) {mode} created: {', '.join(left[:3])}",
                  file=sys.stderr)
        return list_workdir(meta.cwd, run_dir) if moved else listing
    try:
        with ChildSupervisor() as supervisor:
            try:
                for index, name in enumerate(names, start=1):
                    if supervisor.stop_requested:
                        break
                    if on_progress is not None:
                        on_progress(name, index, len(names))
                    current, ready = ready or start_process(index), None
                    listing = list_workdir(meta.cwd, run_dir)  # before the script runs (its process may be importing torch)
                    if first_listing is None:
                        first_listing = listing
                    elif written := written_since(first_listing, isolate(listing, names[index - 2])):
                        meta.written_before[name] = WrittenFiles(**written_record(written))  # type: ignore[arg-type]

                    def start_next(following: int = index + 1) -> None:
                        nonlocal ready
                        if following <= len(names) and not supervisor.stop_requested:
                            try:
                                ready = start_process(following)
                            except OSError:
                                ready = None  # started at its turn instead, where a failure is reported

                    headers = header_files()
                    result = _run_mode(current, supervisor, on_started, start_next)
                    if header_files() - headers:  # it built Inductor's precompiled headers: a one-time cost
                        meta.built_headers.append(name)
                    if cache_root is not None and not result.stopped:
                        keep_isa_checks(str(cache_root / name), job_cache)
                    outcome.outcomes.append(result)
                    if result.stopped:
                        if ready is not None:  # not a process the job left behind: ours, not yet begun
                            _cancel(ready)
                            ready = None
                        # What the job left running when it was stopped (adopted: adopt_orphans). After
                        # a stop signal that ended the mode process at its default action, they have it too.
                        end_orphans(signalled=result.signalled)
                    startup_error = run_dir / name / STARTUP_ERROR_FILE
                    if startup_error.exists():
                        outcome.startup_error = startup_error.read_text().strip()
                        break
                    meta.mode_exit_codes[name] = result.exit_code
                    if not supervisor.stop_requested:
                        _probe_machine(meta)
                    _try_write_run_meta(run_dir, meta)
                    if result.status == STATUS_INTERRUPTED or supervisor.stop_requested:
                        break
            finally:
                if ready is not None:
                    _cancel(ready)
            if supervisor.stop_requested:
                supervisor.settle()
                last = outcome.outcomes[-1].status if outcome.outcomes else ""
                # A script that caught the signal and ended normally keeps its own exit code,
                # as under python; the run is interrupted if modes were left out or the last stopped.
                if len(outcome.outcomes) < len(names) or last in (STATUS_INTERRUPTED, STATUS_KILLED):
                    outcome.interrupted, outcome.signal = True, supervisor.first_signal
            elif outcome.outcomes and outcome.outcomes[-1].status == STATUS_INTERRUPTED:
                # The mode process alone was stopped (a signal sent to it, not to cagtool).
                code = outcome.outcomes[-1].exit_code or 130
                outcome.interrupted, outcome.signal = True, code - 128 if code > 128 else signal.SIGINT
    finally:
        if options.isolate_workdir and first_listing is not None and outcome.outcomes:  # the last mode's too: the directory as before
            isolate(list_workdir(meta.cwd, run_dir), outcome.outcomes[-1].mode)
        meta.status = STATUS_INTERRUPTED if outcome.interrupted else "finished"
        meta.ended_at = _timestamp()
        meta.exit_code = outcome.exit_code
        _try_write_run_meta(run_dir, meta)
        if cache_root is not None and not options.keep_cache:
            shutil.rmtree(cache_root, ignore_errors=True)
    return outcome


def _cache_root(options: RunOptions, run_dir: Path) -> Path | None:
    """Where each mode's fresh Inductor cache goes: a temporary directory removed when the run
    ends, or <run>/inductor-cache with --keep-cache. None with --warm-cache (torch's own)."""
    if options.warm_cache:
        return None
    if options.keep_cache:
        path = run_dir / KEPT_CACHE_DIR
        path.mkdir(exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix="cagtool-inductor-"))


def _probe_machine(meta: RunMeta) -> None:
    """The reference loop again after a mode: run.json keeps the fastest reading of the run, the
    machine's own speed (its CPU and clock) rather than a moment's contention, which on a shared
    VM moves one reading by up to 1.8x within seconds (capture/versions.py reference_loop_s)."""
    before = meta.machine.get("reference_loop_s")
    now = reference_loop_s()
    meta.machine["reference_loop_s"] = now if not isinstance(before, float) else min(before, now)


def _try_write_run_meta(run_dir: Path, meta: RunMeta) -> None:
    """run.json is rewritten as modes end; a full disk must not stop the run (the loader reads a
    dead "running" run as killed)."""
    try:
        write_run_meta(run_dir, meta)
    except OSError as exc:
        print(f"cagtool: could not update {run_dir / 'run.json'}: {exc.strerror or exc}", file=sys.stderr)


@dataclass
class _ModeProcess:
    """A mode process that has been started: it sets the mode up, imports torch, and waits for
    `_go` before it runs the script (child.py's _wait_for_go)."""

    name: str
    mode_dir: Path
    proc: subprocess.Popen
    ack_r: int  # the child's signals and its "record closed" (lifeline.py)
    go_w: int | None  # one byte: run the script; closed unwritten: the run ended first
    stdin: ModeStdin


def digested_steps(run_dir: Path, exclude: str) -> list[int]:
    """The steps the modes already recorded in `run_dir` digested the gradients of (their records
    are closed when the next mode starts), so the next mode digests them too and every mode has
    the same steps to compare. A cheap scan: only grad_digest lines are decoded. A step digested
    only as the run's last, at its end (reasons ["last"]), is left out: the next mode digests its
    own last step at the same moment, where an optimizer's pre-hook would read the gradients
    before what the script did to them after (a final zero_grad, another backward)."""
    from cagtool.record.schema import EVENTS_FILE, GradDigestEvent, REASON_LAST

    marker = f'"kind": "{GradDigestEvent.kind}"'
    steps: set[int] = set()
    for events in sorted(run_dir.glob(f"*/{EVENTS_FILE}")) + sorted(run_dir.glob(f"*/procs/*/{EVENTS_FILE}")):
        parts = events.relative_to(run_dir).parts
        if parts[0] == exclude:
            continue
        try:
            with events.open(encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    if marker in line:
                        try:
                            event = json.loads(line)
                        except ValueError:
                            continue
                        step = event.get("step") if isinstance(event, dict) else None
                        if isinstance(step, int) and not isinstance(step, bool) and event.get("reasons") != [REASON_LAST]:
                            steps.add(step)
        except OSError:
            continue
    return sorted(steps)


def _start_mode_process(options: RunOptions, run_dir: Path, name: str, cache_root: Path | None, label: str, stdin_feed: StdinFeed) -> _ModeProcess:
    """Start the process of mode `name`. The next mode's is started as soon as the current one has
    closed its record, so its torch import runs beside the current process's exit (a second of
    interpreter teardown after a torch job, on a machine with a core to spare) instead of after it;
    its script still starts only once the current process is gone (`_go`)."""
    mode_dir = run_dir / name
    # The first mode's directory is the run's claim, made by make_run_dir; the others are new.
    mode_dir.mkdir(exist_ok=True)
    spec = ModeSpec(
        mode=name.split(".")[0],
        mode_dir=str(mode_dir),
        target=asdict(options.target),
        backend=options.backend,
        dynamic=options.dynamic,
        max_steps=options.steps,
        max_time=options.max_time,
        trace_nodes=options.trace_nodes,
        depyf=options.depyf,
        torch_trace=options.torch_trace,
        label=label,
        seed=options.seed,
        parity_every=options.parity_every,
        digest_steps=digested_steps(run_dir, exclude=name),
        parity=options.parity,
    )
    spec_path = mode_dir / "spec.json"
    env = dict(os.environ)
    if cache_root is not None:
        # A fresh Inductor cache per mode, so compile times compare like with like. What torch keeps
        # per machine is as the job has it: the precompiled headers are not in it, and it starts
        # with the ISA checks the job's own cache holds (inductor_machine.py).
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / name)
        if not options.keep_cache:
            spec.temp_cache_dir = env["TORCHINDUCTOR_CACHE_DIR"]  # removed by the mode process if cagtool dies first
    ack_r, ack_w = os.pipe()
    go_r, go_w = os.pipe()
    spec.parent_pid, spec.ack_fd, spec.ack_hold_fd, spec.go_fd = os.getpid(), ack_w, ack_r, go_r
    stdin = stdin_feed.for_mode()
    try:
        spec_path.write_text(json.dumps(asdict(spec), indent=2))
        # The process starts with the stop signals blocked (a signal mask is inherited through fork
        # and exec; this thread's own is put back at once) and unblocks them at its turn: started
        # ahead, it has run nothing, and a Ctrl-C to the process group during the current mode's
        # exit is cagtool's to act on (it then kills it), not a KeyboardInterrupt in its imports.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            proc = subprocess.Popen([*python_module_argv("cagtool.capture.run.child"), str(spec_path)], env=env, pass_fds=(ack_w, ack_r, go_r), stdin=stdin.fd)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    except BaseException:
        os.close(ack_r)
        os.close(go_w)
        stdin.drop()
        shutil.rmtree(mode_dir, ignore_errors=True)  # a started-ahead mode that failed is started again at its turn
        raise
    finally:
        os.close(ack_w)
        os.close(go_r)
        if stdin.fd is not None:
            os.close(stdin.fd)
    return _ModeProcess(name, mode_dir, proc, ack_r, go_w, stdin)


def _go(process: _ModeProcess) -> None:
    """The mode's turn: its stdin is handed over and its script starts."""
    process.stdin.start()
    go_w, process.go_w = process.go_w, None
    if go_w is None:
        return
    try:
        os.write(go_w, b"g")
    except OSError:
        pass  # the process has already ended (e.g. killed while importing): its exit says how
    finally:
        os.close(go_w)


def _cancel(process: _ModeProcess) -> None:
    """A mode process started ahead whose turn never came (the run was stopped): it has run no
    script and written nothing, so it is killed and its directory removed."""
    if process.go_w is not None:
        os.close(process.go_w)
        process.go_w = None
    process.stdin.drop()
    if process.proc.poll() is None:
        process.proc.kill()
    process.proc.wait()
    os.close(process.ack_r)
    shutil.rmtree(process.mode_dir, ignore_errors=True)


def _run_mode(process: _ModeProcess, supervisor: ChildSupervisor, on_started: Callable[[str], None] | None, on_record_closed: Callable[[], None]) -> ModeOutcome:
    name, mode_dir = process.name, process.mode_dir
    start = time.perf_counter()
    sampler = CpuWaitSampler(process.proc.pid).start()  # the machine's load on this mode (cpu_wait.py)
    _go(process)
    if on_started is not None:
        on_started(name)
    began = time.monotonic()
    sigint = False
    try:
        code = supervisor.wait(process.proc, process.ack_r, on_record_closed)
        sigint = supervisor.stop_requested or supervisor.child_received(signal.SIGINT, process.ack_r, began)
    finally:
        os.close(process.ack_r)
        sampler.stop()
    wall = time.perf_counter() - start
    sampler.write(mode_dir)
    restore_terminal()
    status = settle_mode_record(mode_dir, code)
    if status == STATUS_INTERRUPTED and code != 0 and not sigint and (raised := _script_raised_interrupt(mode_dir)) is not None:
        status = STATUS_FAILED  # the script's own `raise KeyboardInterrupt`: its failure, and the run goes on
        sys.stderr.write(raised)  # its traceback, as python prints it (the mode process keeps a Ctrl-C's quiet)
        sys.stderr.flush()
    stopped = code < 0 or status in (STATUS_INTERRUPTED, STATUS_KILLED)
    signum = -code if code < 0 else None
    exit_code = exit_code_for(signum) if signum else code
    if signum:
        return ModeOutcome(name, exit_code, wall, killed_words(signum), status=status, stopped=stopped,
                           signalled=signum in STOP_SIGNALS)
    return ModeOutcome(name, exit_code, wall, status=status, stopped=stopped)


def _script_raised_interrupt(mode_dir: Path) -> str | None:
    """A mode that ended with KeyboardInterrupt though no SIGINT reached it, nor cagtool (a Ctrl-C
    reaches both, `kill -INT` one of them): the script raised it itself. Its manifest, which the
    mode process wrote as interrupted by Ctrl-C, says so and is failed: the run's later modes
    still run, as for any failure of the script. Returns its traceback as python prints it; None
    where the manifest is not that."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.regular_files import read_record_bytes
    from cagtool.record.schema import MAX_JSON_FILE_BYTES

    path = mode_dir / MANIFEST_FILE
    try:
        data = json.loads(read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES))
    except (OSError, ValueError, UnreadableInput):
        return None
    exception = data.get("exception") if isinstance(data, dict) else None
    if data.get("status") != STATUS_INTERRUPTED or not isinstance(exception, dict) or exception.get("type") != "KeyboardInterrupt":
        return None
    said = str(exception.get("traceback") or "").rstrip().rpartition("\n")[2]  # "KeyboardInterrupt: out of patience"
    said = said.partition(": ")[2] if said.startswith("KeyboardInterrupt: ") else ""
    exception["message"] = "the script raised KeyboardInterrupt itself (no SIGINT reached the process)" + (f": {said}" if said else "")
    data["status"] = STATUS_FAILED
    try:
        write_json_atomic(path, data)
    except OSError:
        return None
    return str(exception.get("traceback") or "")


def settle_mode_record(mode_dir: Path, code: int) -> str:
    """After the mode process ended: a manifest it could not finish is closed here, so run.json
    and the manifest agree: "interrupted" when SIGINT, SIGTERM or SIGHUP ended it at their default
    action, "killed" when another signal did (SIGKILL, the OOM killer), else by its exit code (the
    script called os._exit, or the disk was too full for the last write).
    Returns the mode's final status."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.regular_files import read_record_bytes
    from cagtool.record.schema import MAX_JSON_FILE_BYTES

    path = mode_dir / MANIFEST_FILE
    try:  # as the loader reads it: never through a link or a FIFO the job planted, never past the bound
        data = json.loads(read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES))
    except (OSError, ValueError, UnreadableInput):
        return STATUS_KILLED if code < 0 else ""
    if not isinstance(data, dict):
        return ""
    status = str(data.get("status") or "")
    if status != STATUS_RUNNING:
        return status
    signum = -code if code < 0 else None
    if signum in STOP_SIGNALS:
        # A stop signal at its default action (the script set no handler, as under python): the
        # process died at once, leaving its threads' stacks (lifeline.StopStacks).
        status = STATUS_INTERRUPTED
        exception = signal_stop_exception(signal.Signals(signum).name, mode_dir)
    elif signum:
        status = STATUS_KILLED
        exception = {"type": signal.Signals(signum).name, "message": killed_words(signum), "traceback": ""}
    else:
        status = STATUS_FINISHED if code == 0 else STATUS_FAILED
        exception = None if code == 0 else {"type": "Exit", "message": f"exited with code {code} without closing its record", "traceback": ""}
    data.update(status=status, exit_code=exit_code_for(signum) if signum else code, ended_at=_timestamp(), exception=exception)
    data.setdefault("options", {})["closed_by"] = "cagtool"  # the mode process could not close it itself
    try:
        write_json_atomic(path, data)
    except OSError:
        pass  # disk full: the loader reads a dead "running" record as killed anyway
    return status
