"""The Python API, for notebooks and custom harnesses:

    import cagtool
    with cagtool.capture(backend="inductor") as cap:   # compiled autograd on for this thread's backwards in the block
        for batch in loader:
            train_step(batch)
    cap.summary()                     # the summary `cagtool summary` prints
    cap.path                          # the run directory: every CLI command reads it
    cap.steps_frame(); cap.events_frame("ca_cache_miss"); cap.events_frame()  # the kinds
    run = cagtool.load(cap.path)      # any record

The block is recorded as the `ca` mode of a normal run record, with the same observers as
`cagtool run` (capture/): steps, CA graphs and their cache misses, Dynamo's compiles, recompiles
and graph breaks, of the block's thread only (capture/modes/thread_scope.py: other threads' backwards
run as plain torch). On exit, torch is as it was: compiled autograd off again, the patched entry
points and hooks removed, the Dynamo taps taken off. Nothing here imports torch until a capture
starts (`import cagtool` stays cheap).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cagtool.errors import UsageError

DEFAULT_RUNS_ROOT = Path(".cagtool") / "runs"


@dataclass
class Capture:
    """One recorded block. Use through `cagtool.capture(...)`; the record is complete once the
    `with` block has exited (whatever the block did)."""

    backend: str = "inductor"
    dynamic: bool = False
    output: Path | None = None
    runs_root: Path = DEFAULT_RUNS_ROOT
    label: str = "capture"
    reset: bool = False  # torch._dynamo.reset() on entry: compile from scratch
    path: Path | None = None  # the run directory, set on entry
    _recorder: Any = field(default=None, repr=False)  # capture/recorder.py, from entry to exit
    _meta: Any = field(default=None, repr=False)  # run.json
    _stack: contextlib.ExitStack | None = field(default=None, repr=False)  # the mode's changes to torch
    _used: bool = field(default=False, repr=False)

    # -- the record ---------------------------------------------------------------------------------
    def _make_run_dir(self) -> Path:
        from cagtool.capture.run_dir import claim_run_dir

        return claim_run_dir(self.output, self.runs_root, self.label, "ca")

    def __enter__(self) -> "Capture":
        if self._used:
            raise UsageError("this capture is already in use; start another with cagtool.capture()")
        import torch

        from cagtool.capture.modes.mode_setup import mode_context
        from cagtool.capture.modes.thread_scope import ThreadScope
        from cagtool.capture.processes.identity import ROLE_MAIN, process_info
        from cagtool.capture.recorder import Recorder, has_compiled_autograd, now_iso
        from cagtool.capture.torch_counters import counter_snapshot
        from cagtool.capture.versions import machine_info, record_versions
        from cagtool.record.writer import RecordWriter, write_run_meta
        from cagtool.record.manifest import ModeManifest, RunMeta

        if not has_compiled_autograd():
            raise UsageError(f"this torch build ({torch.__version__}) has no compiled autograd; cagtool needs torch 2.13")
        self._used = True
        if self.reset:
            torch._dynamo.reset()
        optimizers = _live_optimizers(torch)
        started = time.perf_counter()
        run_dir = self._make_run_dir()
        self.path = run_dir
        versions = record_versions(torch.__version__)
        now = now_iso()
        target = {"kind": "python_api", "name": self.label}
        self._meta = RunMeta(
            run_id=run_dir.name,
            created_at=now,
            cagtool_argv=[],
            target=target,
            target_argv=list(sys.argv),
            cwd=os.getcwd(),
            modes=["ca"],
            versions=versions,
            machine=machine_info(reference=False),  # this is the user's process: no reference loop in it
            options={"backend": self.backend, "dynamic": self.dynamic, "python_api": True, "reset": self.reset},
        )
        write_run_meta(run_dir, self._meta)
        manifest = ModeManifest(
            mode="ca",
            argv=list(sys.argv),
            target=target,
            cwd=os.getcwd(),
            versions=versions,
            backend=self.backend,
            dynamic=self.dynamic,
            started_at=now,
            options={"python_api": True, "torch_trace": False},
            process=process_info(ROLE_MAIN, "main"),
        )
        recorder = Recorder(RecordWriter(run_dir / "ca", manifest, clock_start=started), manifest, started=started,
                            counters_from=counter_snapshot())
        self._recorder = recorder
        # The block is its thread's: other threads' backwards and compiles run as plain torch and
        # are not recorded (capture/modes/thread_scope.py).
        scope = ThreadScope()
        recorder.instrument("ca", self.backend, scope=scope)
        # The README's shape makes the optimizer before the block: without knowing it, the first
        # backward would be a step of its own and its step() another (steps.expect_optimizers).
        recorder.steps.expect_optimizers(optimizers)
        del optimizers  # weak references only from here
        self._stack = contextlib.ExitStack()
        try:
            # What `cagtool run`'s ca mode does to torch, scoped to the block and to its thread
            # (capture/modes/mode_setup.py).
            self._stack.enter_context(mode_context("ca", recorder.observer, self.dynamic, scope=scope))
        except BaseException:
            self._restore(numerics=False)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        from cagtool.capture.recorder import job_peaks
        from cagtool.record.writer import write_run_meta
        from cagtool.record.manifest import ExceptionInfo
        from cagtool.record.schema import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED

        # The process's peak up to here (getrusage keeps no per-block peak), read before cagtool's
        # end-of-block work, as `cagtool run` reads the job's.
        peaks = job_peaks()
        self._restore(numerics=True)
        status, exit_code, exception = STATUS_FINISHED, 0, None
        if exc_type is not None:
            if issubclass(exc_type, KeyboardInterrupt):
                status, exit_code = STATUS_INTERRUPTED, 130
            else:
                status, exit_code = STATUS_FAILED, 1
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            exception = ExceptionInfo(exc_type.__name__, str(exc)[:2000], text[-20000:])
        recorder = self._recorder
        recorder.close(status, exit_code, exception, peaks)
        meta = self._meta
        meta.status = status
        meta.exit_code = exit_code
        meta.mode_exit_codes = {"ca": exit_code}
        meta.ended_at = recorder.manifest.ended_at
        write_run_meta(self.path, meta)
        self._recorder = self._stack = None
        return False  # the block's own exception goes on

    def _restore(self, numerics: bool) -> None:
        """Undo everything __enter__ did, in reverse: compiled autograd off, patches and hooks
        removed, the Dynamo taps taken off, the C++ verbose logger cleared; before the
        instruments come off, the end-of-block numerics (`numerics`)."""
        import torch

        try:
            if self._stack is not None:
                self._stack.close()  # leaves _enable: compiled autograd off, ca.reset restored
        finally:
            self._recorder.wind_down(numerics=numerics)
            torch._C._dynamo.compiled_autograd.set_verbose_logger(None)

    # -- reading it back ----------------------------------------------------------------------------
    def _record(self) -> Any:
        if self.path is None:
            raise UsageError("nothing captured yet: use `with cagtool.capture() as cap:` first")
        return load(self.path)

    def summary(self, fmt: str = "text") -> Any:
        """The summary `cagtool summary` prints, as text (a notebook shows the string; `print` it
        in a script); fmt="json": its JSON document, as a dict."""
        import io

        from cagtool.report.text.console import make_console
        from cagtool.report.summary import render_summary, summary_json

        run = self._record()
        if fmt == "json":
            return summary_json(run)
        out = io.StringIO()
        render_summary(make_console(out), run)
        return SummaryText(out.getvalue())

    def steps_frame(self) -> Any:
        """One row per step (pandas DataFrame)."""
        from cagtool.report.frames import steps_frame

        return steps_frame(self._record().mode("ca"))

    def events_frame(self, kind: str | None = None) -> Any:
        """One row per event of `kind` (e.g. "ca_cache_miss", "ca_graph"), as a pandas DataFrame;
        without a kind, the kinds there are and how many of each this record holds."""
        from cagtool.report.frames import events_frame

        return events_frame(self._record().mode("ca"), kind)


class SummaryText(str):
    """The summary's text: a str, shown as the text itself where Python shows a value (a
    notebook cell, the REPL), not as a quoted string with `\\n`."""

    def __repr__(self) -> str:
        return str.__str__(self)


def _live_optimizers(torch: Any) -> list[Any]:
    """The optimizers alive in the process (made before the block): an optimizer has no registry
    of its instances, so one pass over the objects the collector tracks, by exact type among
    Optimizer's subclasses (type(), not isinstance(), which reads `__class__`: some objects
    compute it, and one of torch.distributed's warns). All in C calls: about 0.2 s for 280,000
    objects on this project's 2-core VM, once, before the block's clock starts."""
    classes = {torch.optim.Optimizer}
    todo = [torch.optim.Optimizer]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in classes:
                classes.add(sub)
                todo.append(sub)
    objects = gc.get_objects()
    try:
        return list(itertools.compress(objects, map(classes.__contains__, map(type, objects))))
    finally:
        del objects


def capture(
    backend: str = "inductor",
    dynamic: bool = False,
    output: str | Path | None = None,
    runs_root: str | Path = DEFAULT_RUNS_ROOT,
    label: str = "capture",
    reset: bool = False,
) -> Capture:
    """Record a block as a cagtool run: compiled autograd on for every backward of this thread in it (compiled
    with `backend`: inductor, aot_eager or eager), sizes static first unless `dynamic`. The run
    directory is `output`, or a new one under `runs_root` (./.cagtool/runs).

    Compiled autograd's cache lives as long as the process: a second block running the same
    backward hits it and captures nothing new (the record says so). `reset=True` calls
    torch._dynamo.reset() first, so the block compiles from scratch (every compiled function of
    the process is dropped too)."""
    return Capture(
        backend=backend,
        dynamic=dynamic,
        output=Path(output) if output is not None else None,
        runs_root=Path(runs_root),
        label=label,
        reset=reset,
    )


def load(path: str | Path | None = None, strict: bool = False) -> Any:
    """A recorded run (cagtool run, cagtool import or cagtool.capture): the RunRecord every
    command reads. `path` None: the latest run under ./.cagtool/runs."""
    from cagtool.record.loader import load_run

    return load_run(path, strict=strict)
