"""Following every Python process the target starts (mp.spawn workers, multiprocessing children,
torchrun workers, `subprocess` pythons): each gets the mode's setup and its own record at
`<run>/<mode>/procs/<key>/` (key `rank<N>`, else `pid<PID>`; record/schema.py).

How a process is reached:
- spawned and exec'd children: the main process puts `bootstrap/` first on PYTHONPATH (keeping the
  user's entries) and the configuration in CAGTOOL_FOLLOW; `bootstrap/sitecustomize.py` calls
  `start_in_child()` at start-up in every Python child that inherits the environment;
- forked children inherit the parent's set-up torch and its open record: `os.register_at_fork`
  gives each its own record.

Lazy by design: a child is set up when it imports torch (a post-import hook), and its record is
made then (the manifest is written at start, status "running", and again at exit). Processes that
never import torch (multiprocessing's resource tracker, a `python -c` helper) get no record unless
they start a process cagtool cannot follow (that finding needs a record). A record that holds
nothing at exit (no event, no graph, no trace: e.g. the torchrun launcher, a DataLoader worker) is
removed. torch's own helper interpreters (Inductor compile workers) are not followed.

Exit: multiprocessing children close their record when `BaseProcess._bootstrap` returns (their
exit code; fork children leave through os._exit, past atexit); other children at `atexit`, with
the code given to sys.exit or 1 after an uncaught exception. A child killed hard keeps status
"running", which readers show as killed; one stopped by SIGTERM or SIGHUP (their default action,
as under python) leaves its threads' stacks beside its record, and readers show it as interrupted
by that signal (lifeline.StopStacks).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cagtool.capture.job_traceback import leave_out_our_frames
from cagtool.capture.on_import import OnImport
from cagtool.capture.processes import launch_audit, workdir_reads
from cagtool.capture.observe.ddp_watch import DDPWatch
from cagtool.capture.processes.identity import ROLE_CHILD, ROLE_MAIN, attempt_from_env, child_key, process_info, rank_from_env
from cagtool.capture.processes.lifeline import StopStacks
from cagtool.record.manifest import ExceptionInfo, ModeManifest
from cagtool.record.schema import (FINDING_THREAD_DIED, GRAPHS_DIR, PROCS_DIR, STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED, STATUS_RUNNING,
                                   TRACE_DIR, FindingEvent)

if TYPE_CHECKING:  # imported when a record is made: every followed process imports this module at start-up
    from cagtool.capture.recorder import Recorder

FOLLOW_ENV = "CAGTOOL_FOLLOW"
BOOTSTRAP_DIR = Path(__file__).resolve().with_name("bootstrap")
PROCESS_NOT_FOLLOWED = "process_not_followed"
_TORCH_HELPERS = ("torch._inductor.compile_worker", os.path.join("_inductor", "compile_worker"))


@dataclass(frozen=True)
class FollowConfig:
    """What a followed process needs to set itself up like the main one (CAGTOOL_FOLLOW, JSON)."""

    mode: str
    mode_dir: str  # the main process's record; children write under its procs/
    backend: str
    dynamic: bool
    torch_trace: bool
    trace_nodes: bool
    target: dict[str, str]
    cagtool_root: str  # the directory holding the cagtool package
    seed: int | None = 0  # the run's seed (capture/run/seeding.py): this process's is process_seed(seed, rank)
    parity_every: int | None = None  # gradient digests (grad_digest.py), as in the main process
    digest_steps: list[int] | None = None
    parity: bool = False

    @property
    def procs_dir(self) -> Path:
        return Path(self.mode_dir) / PROCS_DIR

    @classmethod
    def from_env(cls) -> FollowConfig:
        return cls(**json.loads(os.environ[FOLLOW_ENV]))


def set_child_environment(config: FollowConfig) -> None:
    """Every Python child that inherits os.environ from now on starts with cagtool's bootstrap."""
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != str(BOOTSTRAP_DIR)]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP_DIR), *entries])
    os.environ[FOLLOW_ENV] = json.dumps(asdict(config))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _retarget_torch_trace(old: Path, new: Path) -> None:
    """torch's trace handler opens its file lazily under the TORCH_TRACE dir it read at import: point
    it at the record's new place (an already open file moved with its directory)."""
    import logging

    os.environ["TORCH_TRACE"] = str(new)
    for handler in logging.getLogger("torch.__trace").handlers:
        root = getattr(handler, "root_dir", None)
        if isinstance(root, str) and Path(root) == old:
            handler.root_dir = str(new)


class ProcessRecord:
    """One process's record and the instruments writing it. The main process's is built from
    child.py's objects (child.py closes it); a followed process's is built and closed here."""

    def __init__(self, config: FollowConfig, recorder: Recorder, role: str) -> None:
        self.config = config
        self.recorder = recorder
        self.role = role
        self.exit_code: int | None = None
        self.exception: ExceptionInfo | None = None
        # Set when a KeyboardInterrupt (SIGINT) went through the script, whatever caught it after:
        # torch.multiprocessing.spawn's worker wrapper swallows it and the rank exits 0.
        self.interrupted: ExceptionInfo | None = None
        # The main process's record is closed by child.py, which sets this for a script that leaves
        # through os._exit (no finally runs): called with the code, before the process goes.
        self.close_main: Callable[[int], None] | None = None
        self.ddp = self._new_ddp_watch()
        # A followed process stopped by SIGTERM/SIGHUP leaves its threads' stacks in its record
        # (lifeline.py): armed when the record is made, and again in a forked child.
        self.stop_stacks = StopStacks()

    @property
    def writer(self) -> Any:
        return self.recorder.writer

    @property
    def manifest(self) -> ModeManifest:
        return self.recorder.manifest

    @property
    def steps(self) -> Any:
        return self.recorder.steps

    @property
    def closed(self) -> bool:
        return self.recorder.closed

    @property
    def key(self) -> str:
        return str(self.manifest.process.get("key", "main"))

    def _new_ddp_watch(self) -> DDPWatch:
        rank = self.manifest.process.get("rank")
        return DDPWatch(self.config.mode, self.writer.emit, lambda: self.steps.current_step if self.steps else None,
                        announce=rank in (None, 0))

    # -- events -------------------------------------------------------------------------------
    def report_unfollowed(self, launch: launch_audit.UnfollowedLaunch) -> None:
        from cagtool.capture.observe import source

        self.writer.emit(
            FindingEvent,
            code=PROCESS_NOT_FOLLOWED,
            message=launch.message(),
            step=self.steps.current_step if self.steps else None,
            source=source.user_caller(),
            detail={"argv": launch.argv, "executable": launch.executable, "reason": launch.reason, "fix": launch.fix},
        )
        print(f"cagtool: {launch.message()}", file=sys.stderr, flush=True)

    # -- identity -----------------------------------------------------------------------------
    def adopt_rank(self) -> None:
        """Once the process group is up: the rank in the manifest, and a `pid<PID>` record renamed
        to `rank<N>` (unless that name is taken: then the key stays)."""
        try:
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized()):
                return
            rank, world_size = dist.get_rank(), dist.get_world_size()
        except Exception:  # noqa: BLE001
            return
        process = self.manifest.process
        if process.get("rank") == rank and not self.key.startswith("pid"):
            return
        process["rank"], process["world_size"] = rank, world_size
        if self.role == ROLE_CHILD and self.key.startswith("pid"):
            old = Path(self.writer.mode_dir)
            new = old.with_name(child_key(rank, attempt=attempt_from_env()))
            if not new.exists():
                try:
                    os.rename(old, new)
                except OSError:
                    new = old
                if new != old:
                    self.writer.mode_dir = new
                    process["key"] = new.name
                    if self.config.torch_trace:
                        _retarget_torch_trace(old / TRACE_DIR, new / TRACE_DIR)
        self.ddp.announce = self.ddp.announce and rank == 0
        self.writer.write_manifest()

    def after_fork(self) -> None:
        """In a forked child: a new record `pid<PID>` for the same (inherited) instruments."""
        from cagtool.capture.torch_counters import counter_snapshot

        parent = self.manifest.process.get("pid")
        key = child_key(None)
        new_dir = self.config.procs_dir / key
        info = process_info(ROLE_CHILD, key, argv=list(self.manifest.process.get("argv") or sys.argv))
        # The rank variables in the environment are the parent's, not this process's.
        info.update(rank=None, local_rank=None, world_size=None, attempt=0, forked_from=parent)
        self.manifest.process = info
        self.manifest.status = STATUS_RUNNING
        self.manifest.started_at = _now()
        self.manifest.ended_at = self.manifest.duration_s = self.manifest.exit_code = self.manifest.exception = None
        self.manifest.torch_counters = {}
        self.role = ROLE_CHILD
        self.recorder.closed = False
        self.recorder.started = time.perf_counter()
        # torch's counters and compiled-autograd cache are inherited: the record counts from here.
        self.recorder.counters_from = counter_snapshot() if "torch._dynamo" in sys.modules else {}
        if self.steps is not None:
            self.steps.restart()
        self.ddp = self._new_ddp_watch()
        old_dir = Path(self.writer.mode_dir)
        self.writer.reopen(new_dir)
        self.stop_stacks.arm(new_dir)
        if self.config.torch_trace:
            _retarget_torch_trace(old_dir / TRACE_DIR, new_dir / TRACE_DIR)

    # -- the end ------------------------------------------------------------------------------
    def before_close(self) -> None:
        """What every process's record does last (the main's child.py calls this too)."""
        self.adopt_rank()
        self.ddp.check_collectives(Path(self.writer.mode_dir))

    def close(self, exit_code: int | None = None) -> None:
        """Finish a followed process's record (never the main's: child.py owns that)."""
        if self.recorder.closed or self.role != ROLE_CHILD:
            return
        from cagtool.capture.recorder import job_peaks

        code = self.exit_code if exit_code is None else exit_code
        code = 0 if code is None else code
        peaks = job_peaks()  # before cagtool's own end-of-run work
        status, exception = (STATUS_FINISHED if code == 0 else STATUS_FAILED), self.exception
        if self.interrupted is not None:
            # A signal stopped the script: interrupted, whatever its launcher made of it.
            status, exception = STATUS_INTERRUPTED, self.interrupted
        # The process is exiting: its instruments stay on torch; a process with no backward has
        # no numerics to write (and, having recorded nothing else, leaves no record).
        self.recorder.wind_down(self.before_close, numerics=bool(self.steps is not None and self.steps.backward_calls),
                                uninstall=False)
        self.stop_stacks.disarm()  # the record is about to say how the process ended
        self.recorder.close(status, code, exception, peaks)
        self._drop_if_empty()

    def _drop_if_empty(self) -> None:
        """A process that recorded nothing (the launcher, a helper) leaves no record. A rank that
        did not finish keeps it, empty or not: a restarted job's attempt that failed in its
        rendezvous is part of what happened."""
        record_dir = Path(self.writer.mode_dir)
        if self.writer.events_written:
            return
        if self.manifest.process.get("rank") is not None and self.manifest.status != STATUS_FINISHED:
            return
        graphs, trace = record_dir / GRAPHS_DIR, record_dir / TRACE_DIR
        if (graphs.is_dir() and any(graphs.iterdir())) or (trace.is_dir() and any(trace.iterdir())):
            return
        shutil.rmtree(record_dir, ignore_errors=True)
        try:
            record_dir.parent.rmdir()  # procs/ itself, when no process left a record
        except OSError:
            pass


# -- one per process --------------------------------------------------------------------------
_current: ProcessRecord | None = None
_child_config: FollowConfig | None = None


def _install_process_hooks(config: FollowConfig) -> None:
    """What every followed process has from its start, the main one included."""
    launch_audit.install(_on_unfollowed, str(BOOTSTRAP_DIR), FOLLOW_ENV)
    workdir_reads.install()
    os.register_at_fork(after_in_child=_after_fork_in_child)
    _wrap_multiprocessing_bootstrap()
    _wrap_os_exit()
    _wrap_thread_excepthook()


def _install_torch_hooks(record: ProcessRecord) -> None:
    """Once torch is imported: DDP models and the process group's rank reach the record, and an
    mp.spawn rank's Ctrl-C is not lost."""
    from cagtool.capture.observe import ddp_watch

    try:
        _wrap_spawn_worker()
    except Exception:  # noqa: BLE001 - torch without multiprocessing: nothing to wrap
        pass

    ddp_watch.install(lambda model: _current.ddp.on_model(model) if _current is not None else None)
    try:
        ddp_watch.install_destroy_guard()
    except Exception:  # noqa: BLE001 - a torch without distributed
        pass
    try:
        import torch.distributed as dist

        if dist.is_available():
            c10d = dist.distributed_c10d
            original = c10d.init_process_group
            if not getattr(original, "_cagtool_wrapped", False):

                @functools.wraps(original)
                def init_process_group(*args: Any, **kwargs: Any) -> Any:
                    result = original(*args, **kwargs)
                    if _current is not None:
                        _current.adopt_rank()
                    return result

                init_process_group._cagtool_wrapped = True  # type: ignore[attr-defined]
                c10d.init_process_group = init_process_group
                dist.init_process_group = init_process_group
    except Exception:  # noqa: BLE001 - a torch without distributed: nothing to name by rank
        pass


def _note_interrupt(exc: BaseException, swallowed_by: str = "") -> None:
    """The record of this process says it was interrupted by SIGINT, where the script was then,
    and what its launcher did with the KeyboardInterrupt."""
    if _current is None:
        return
    where = _script_frame(exc.__traceback__)
    message = "interrupted by SIGINT (Ctrl-C)" + (f" in {where}" if where else "")
    if swallowed_by:
        message += f"; {swallowed_by} caught the KeyboardInterrupt and the process exited 0"
    _current.interrupted = ExceptionInfo("KeyboardInterrupt", message)


def _script_frame(tb: Any) -> str:
    """`file:line (function)` of the innermost frame of the script's own code in a traceback."""
    frame = _script_frame_summary(tb)
    return f"{frame.filename}:{frame.lineno} ({frame.name})" if frame is not None else ""


def _script_frame_summary(tb: Any) -> Any:
    """The innermost frame of the script's own code in a traceback (traceback.FrameSummary), or None."""
    import traceback

    try:
        frames = traceback.extract_tb(tb)
    except Exception:  # noqa: BLE001
        return None
    from cagtool.capture.observe.source import is_user_file

    for frame in reversed(frames):
        if is_user_file(frame.filename):  # not Python's library, a package, or any of cagtool
            return frame
    return None


def _wrap_spawn_worker() -> None:
    """torch.multiprocessing.spawn runs each rank's function under `_wrap`, which swallows a
    KeyboardInterrupt (a Ctrl-C reaches every rank) and lets the rank exit 0: the record would
    read as finished. The rank's function is wrapped to note the interrupt on its way through.
    The worker resolves `_wrap` by name when it unpickles its process object, after torch's
    import (when this runs), so the replacement is the one it calls; it keeps `_wrap`'s name, so a
    process that spawns ranks itself still pickles it."""
    spawn = sys.modules.get("torch.multiprocessing.spawn")
    original = getattr(spawn, "_wrap", None)
    if original is None or getattr(original, "_cagtool_wrapped", False):
        return

    @functools.wraps(original)
    def _wrap(fn: Any, *args: Any, **kwargs: Any) -> Any:
        def noting(*fn_args: Any, **fn_kwargs: Any) -> Any:
            try:
                return fn(*fn_args, **fn_kwargs)
            except KeyboardInterrupt as exc:
                _note_interrupt(exc, "torch.multiprocessing.spawn")
                raise

        return original(noting, *args, **kwargs)

    _wrap._cagtool_wrapped = True  # type: ignore[attr-defined]
    spawn._wrap = _wrap  # type: ignore[union-attr]


def attach_main(spec: Any, recorder: Recorder) -> ProcessRecord:
    """The process cagtool started (child.py's ModeSpec and instruments): its children will be
    followed; its own record stays child.py's to close."""
    global _current
    import cagtool
    from cagtool.capture.modes.mode_setup import CA_OPTIMIZE_DDP

    manifest = recorder.manifest
    config = FollowConfig(
        mode=spec.mode,
        mode_dir=str(Path(spec.mode_dir).resolve()),
        backend=spec.backend,
        dynamic=spec.dynamic,
        torch_trace=spec.torch_trace,
        trace_nodes=spec.trace_nodes,
        target=manifest.target,
        cagtool_root=str(Path(cagtool.__file__).resolve().parent.parent),
        seed=spec.seed,
        parity_every=spec.parity_every,
        digest_steps=spec.digest_steps,
        parity=spec.parity,
    )
    if spec.mode == "ca":
        manifest.options["optimize_ddp"] = {"value": CA_OPTIMIZE_DDP, "set_by": "cagtool"}
    record = ProcessRecord(config, recorder, ROLE_MAIN)
    _current = record
    set_child_environment(config)
    _install_process_hooks(config)
    _install_torch_hooks(record)
    return record


def _on_unfollowed(launch: launch_audit.UnfollowedLaunch) -> None:
    record = _current or _make_child_record(with_torch=False)
    if record is not None:
        record.report_unfollowed(launch)


def _after_fork_in_child() -> None:
    try:
        if _current is not None:
            _current.after_fork()
        elif _child_config is not None and _child_config.torch_trace:
            os.environ["TORCH_TRACE"] = str(_child_config.procs_dir / child_key(None) / TRACE_DIR)
    except Exception as exc:  # noqa: BLE001 - never break the user's fork
        print(f"cagtool: the forked process {os.getpid()} is not profiled: {type(exc).__name__}: {exc}", file=sys.stderr)


def _wrap_multiprocessing_bootstrap() -> None:
    import multiprocessing.process as mp_process

    original = mp_process.BaseProcess._bootstrap
    if getattr(original, "_cagtool_wrapped", False):
        return

    @functools.wraps(original)
    def _bootstrap(self: Any, *args: Any, **kwargs: Any) -> int:
        code = original(self, *args, **kwargs)
        if _current is not None and _current.role == ROLE_CHILD:
            try:
                _current.close(code)
            except Exception:  # noqa: BLE001
                pass
        return code

    _bootstrap._cagtool_wrapped = True  # type: ignore[attr-defined]
    mp_process.BaseProcess._bootstrap = _bootstrap


# -- a followed child -------------------------------------------------------------------------
def _make_child_record(with_torch: bool) -> ProcessRecord | None:
    """The record of this followed process, made the first time there is something to record."""
    global _current
    config = _child_config
    if config is None:
        return None
    from cagtool.capture.versions import imported_torch_version, record_versions
    from cagtool.capture.recorder import Recorder
    from cagtool.record.writer import RecordWriter

    key = child_key(rank_from_env(), attempt=attempt_from_env())
    record_dir = config.procs_dir / key
    if record_dir.exists():  # a stale directory of a reused pid, or a rank taken twice
        key = child_key(None)
        record_dir = config.procs_dir / f"{key}"
    record_dir.mkdir(parents=True, exist_ok=True)
    argv = list(getattr(sys, "orig_argv", sys.argv))
    manifest = ModeManifest(
        mode=config.mode,
        argv=argv,
        target=config.target,
        cwd=os.getcwd(),
        versions=record_versions(imported_torch_version() if with_torch else None),
        backend=config.backend,
        dynamic=config.dynamic,
        started_at=_now(),
        options={"followed": True, "trace_nodes": config.trace_nodes, "torch_trace": config.torch_trace, "seed": _seeding},
        process=process_info(ROLE_CHILD, key, argv=argv),
    )
    record = ProcessRecord(config, Recorder(RecordWriter(record_dir, manifest), manifest, counters_from={}), ROLE_CHILD)
    record.stop_stacks.arm(record_dir)
    _current = record
    return record


def _on_torch_imported() -> None:
    _seed_now("torch")
    try:
        _setup_torch_in_child()
    except Exception as exc:  # noqa: BLE001 - never break the user's import of torch
        print(f"cagtool: this process (pid {os.getpid()}) is not profiled: {type(exc).__name__}: {exc}", file=sys.stderr)


def _setup_torch_in_child() -> None:
    """The same mode setup and instruments as the main process (child.py), for the rest of this
    process's life. --steps / --max-time bound the main process only."""
    import torch

    from cagtool.capture.modes import mode_setup

    config = _child_config
    assert config is not None
    record = _current or _make_child_record(with_torch=True)
    assert record is not None
    if "torch" not in record.manifest.versions:  # the record began before torch was imported
        from cagtool.capture.versions import imported_torch_version, record_versions

        record.manifest.versions = record_versions(imported_torch_version())
    record.recorder.instrument(config.mode, config.backend, parity_every=config.parity_every, digest_steps=config.digest_steps,
                               parity=config.parity, torch_trace=config.torch_trace)
    observer = record.recorder.observer
    if config.trace_nodes:
        torch.autograd.set_detect_anomaly(True, check_nan=False)
    record.mode_stack = mode_setup.enter_for_process(config.mode, observer, config.dynamic)  # type: ignore[attr-defined]
    if config.mode == "ca":
        record.manifest.options["optimize_ddp"] = {"value": mode_setup.CA_OPTIMIZE_DDP, "set_by": "cagtool"}
    _install_torch_hooks(record)
    record.adopt_rank()
    record.writer.write_manifest()


def _is_torch_helper() -> bool:
    argv = " ".join(getattr(sys, "orig_argv", sys.argv))
    return any(helper in argv for helper in _TORCH_HELPERS)


def _wrap_exit_paths() -> None:
    """What an exec'd child's atexit cannot see: the code given to sys.exit, an uncaught exception."""
    original_exit = sys.exit
    original_hook = sys.excepthook

    def exit(code: Any = None) -> None:
        if _current is not None:
            _current.exit_code = code % 256 if isinstance(code, int) else (0 if code is None else 1)  # the status's byte
        original_exit(code)

    def excepthook(exc_type: Any, exc: Any, tb: Any) -> None:
        if _current is not None and issubclass(exc_type, KeyboardInterrupt):
            # Python then ends the process by SIGINT, as a shell sees it: 130.
            _current.exit_code = 130
            if exc is not None:
                _note_interrupt(exc)
        elif _current is not None and not issubclass(exc_type, SystemExit):
            _current.exit_code = 1
            _current.exception = ExceptionInfo(exc_type.__name__, str(exc)[:2000])
        if _current is not None and exc is not None and tb is exc.__traceback__:
            try:
                leave_out_our_frames(exc)  # the rank's traceback as under python (job_traceback.py)
                tb = exc.__traceback__
            except Exception:  # noqa: BLE001 - printed as it came
                pass
        original_hook(exc_type, exc, tb)

    sys.exit = exit
    sys.excepthook = excepthook
    _wrap_os_exit()


def _wrap_os_exit() -> None:
    """os._exit skips atexit and every finally: the record would stay "running" and read as
    SIGKILLed, and the steps of its last moments (held lines) would be lost. A forked child that
    ends with os._exit(0), the way a fork ends, is a clean end; a worker that gives up with
    os._exit(1) is a failure its launcher sees as exit code 1. The record is closed with that code
    first: a followed process's here, the main process's by child.py (`close_main`).
    multiprocessing's fork children leave this way after `_bootstrap` has closed theirs already."""
    original = os._exit
    if getattr(original, "_cagtool_wrapped", False):
        return

    @functools.wraps(original)
    def _exit(code: int) -> None:
        record = _current
        if record is not None and not record.closed:
            try:
                exit_code = code % 256 if isinstance(code, int) else 1  # the status byte: os._exit(300) exits 44
                if record.role == ROLE_CHILD:
                    record.close(exit_code)
                elif record.close_main is not None:
                    record.close_main(exit_code)
            except BaseException:  # noqa: BLE001 - the process must still exit, now
                pass
        original(code)

    _exit._cagtool_wrapped = True  # type: ignore[attr-defined]
    os._exit = _exit


def _wrap_thread_excepthook() -> None:
    """A thread that ends with an uncaught exception leaves the process running, and it exits 0
    as under python: the record says which thread, what it raised and where (a finding), so that
    no one reads the process's figures as the whole job's. Python's own hook still prints it."""
    import threading

    original = threading.excepthook
    if getattr(original, "_cagtool_wrapped", False):
        return

    @functools.wraps(original)
    def excepthook(args: Any) -> None:
        try:
            _note_thread_died(args)
        except Exception:  # noqa: BLE001 - the job's own report of the exception must still print
            pass
        original(args)

    excepthook._cagtool_wrapped = True  # type: ignore[attr-defined]
    threading.excepthook = excepthook


def _note_thread_died(args: Any) -> None:
    record = _current
    if record is None or record.closed or args.exc_type is None or issubclass(args.exc_type, SystemExit):
        return  # a thread's SystemExit is python's quiet way to end it
    from cagtool.capture.observe import source as sources

    name = args.thread.name if args.thread is not None else "?"
    error = str(args.exc_value).strip().split("\n", 1)[0][:300] if args.exc_value is not None else ""
    frame = _script_frame_summary(args.exc_traceback)
    source = sources.ref(frame.filename, frame.lineno or 0, frame.name, "caller") if frame is not None else None
    from cagtool.torch_text import NESTED_CA_ERROR

    why = ""
    if NESTED_CA_ERROR in error:
        why = " (compiled autograd runs one backward at a time in a process: threads whose backwards overlap cannot all run under it)"
    record.writer.emit(
        FindingEvent,
        code=FINDING_THREAD_DIED,
        message=f"thread {name} ended with {args.exc_type.__name__}: {error}{why}; the process went on without it, so its "
        "figures are not the whole job's",
        step=record.steps.current_step if record.steps else None,
        source=source,
        detail={"thread": name, "error_type": args.exc_type.__name__, "error": error},
    )


def _close_at_exit() -> None:
    if _current is not None and _current.role == ROLE_CHILD:
        try:
            _current.close()
        except Exception:  # noqa: BLE001
            pass


def start_in_child() -> None:
    """Called by bootstrap/sitecustomize.py at the start of every Python process that inherits
    the environment of a process cagtool follows."""
    global _child_config
    if _child_config is not None or _is_torch_helper():
        return
    config = FollowConfig.from_env()
    _child_config = config
    from cagtool.capture.modes.mode_setup import prepare_environment

    prepare_environment(config.mode, config.procs_dir / child_key(rank_from_env(), attempt=attempt_from_env()) if config.torch_trace else None)
    _install_process_hooks(config)
    _wrap_exit_paths()
    atexit.register(_close_at_exit)
    _start_seeding(config)
    if "torch" in sys.modules:
        _on_torch_imported()
    else:
        OnImport.install({"torch": lambda _module: _on_torch_imported()})


# -- seeding ----------------------------------------------------------------------------------
# What this followed process seeded (capture/run/seeding.py), for its manifest: the same dict the
# record's options hold, so what is seeded after the record was made shows there too.
_seeding: dict[str, Any] = {"seed": None, "seeded": []}


def _start_seeding(config: FollowConfig) -> None:
    """The same seeding as the main process, per rank (seeding.py). Each generator is seeded
    before the script can use it and never after: `random` now, numpy and torch the moment they
    are imported, so a script that seeds one of them itself (even between its imports) keeps
    its own seed."""
    from cagtool.capture.run import seeding

    if config.seed is None:
        return
    rank = rank_from_env()
    _seeding.update(seed=seeding.process_seed(config.seed, rank), rank=rank)
    _seed_now("random")
    if "numpy" in sys.modules:
        _seed_now("numpy")
    else:
        OnImport.install({"numpy": lambda _module: _seed_now("numpy")})


def _seed_now(generator: str) -> None:
    seed = _seeding.get("seed")
    if seed is None or generator in _seeding["seeded"]:
        return
    from cagtool.capture.run import seeding

    try:
        if generator == "random":
            seeding.seed_random(seed)
        elif generator == "torch":
            seeding.seed_torch(seed)
        elif not seeding.seed_numpy(seed):
            return
    except Exception as exc:  # noqa: BLE001 - never break the user's process or its import
        print(f"cagtool: {generator} was not seeded in pid {os.getpid()}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    _seeding["seeded"].append(generator)
