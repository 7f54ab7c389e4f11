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
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
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
    _state: dict[str, Any] = field(default_factory=dict, repr=False)

    # -- the record ---------------------------------------------------------------------------------
    def _make_run_dir(self) -> Path:
        from cagtool.capture.run_dir import claim_run_dir

        return claim_run_dir(self.output, self.runs_root, self.label, "ca")

    def __enter__(self) -> "Capture":
        if self._state:
            raise UsageError("this capture is already in use; start another with cagtool.capture()")
        import torch

        from cagtool.capture.observe.ca_observer import CaptureObserver
        from cagtool.capture.run.child import _has_compiled_autograd
        from cagtool.capture.modes.mode_setup import make_compiler, mode_context
        from cagtool.capture.processes.identity import ROLE_MAIN, process_info
        from cagtool.capture.steps.tracker import StepTracker
        from cagtool.capture.torch_counters import counter_snapshot
        from cagtool.capture.versions import machine_info, record_versions
        from cagtool.capture.observe import dynamo_taps
        from cagtool.capture.modes.thread_scope import ThreadScope
        from cagtool.capture.writer import RecordWriter, write_run_meta
        from cagtool.record.manifest import ModeManifest, RunMeta

        if not _has_compiled_autograd():
            raise UsageError(f"this torch build ({torch.__version__}) has no compiled autograd; cagtool needs torch 2.13")
        if self.reset:
            torch._dynamo.reset()
        optimizers = _live_optimizers(torch)
        started = time.perf_counter()
        run_dir = self._make_run_dir()
        self.path = run_dir
        versions = record_versions(torch.__version__)
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        target = {"kind": "python_api", "name": self.label}
        meta = RunMeta(
            run_id=run_dir.name,
            created_at=now,
            cagtool_argv=[],
            target=target,
            target_argv=list(sys.argv),
            cwd=os.getcwd(),
            modes=["ca"],
            versions=versions,
            machine=machine_info(),
            options={"backend": self.backend, "dynamic": self.dynamic, "python_api": True, "reset": self.reset},
        )
        write_run_meta(run_dir, meta)
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
        writer = RecordWriter(run_dir / "ca", manifest, clock_start=started)
        # The block is its thread's: other threads' backwards run as plain torch and are not
        # recorded (capture/modes/thread_scope.py).
        scope = ThreadScope()
        steps = StepTracker(writer, "ca", scope=scope)
        observer = CaptureObserver(writer, steps, make_compiler(self.backend))
        handler = _thread_handler(writer, steps, scope.owner)
        self._state = {
            "meta": meta,
            "manifest": manifest,
            "writer": writer,
            "steps": steps,
            "observer": observer,
            "handler": handler,
            "counters": counter_snapshot(),
            "started": started,
            "scope": scope,
        }
        self._state["taps"] = dynamo_taps.install(handler)  # no handler on torch's structured logger
        steps.install()
        # The README's shape makes the optimizer before the block: without knowing it, the first
        # backward would be a step of its own and its step() another (steps.expect_optimizers).
        steps.expect_optimizers(optimizers)
        del optimizers  # weak references only from here
        observer.install()
        stack = contextlib.ExitStack()
        try:
            # What `cagtool run`'s ca mode does to torch, scoped to the block and to its thread
            # (capture/modes/mode_setup.py).
            stack.enter_context(mode_context("ca", observer, self.dynamic, scope=scope))
        except BaseException:
            self._restore(stack)
            raise
        self._state["stack"] = stack
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        from cagtool.capture.run.child import cagtool_memory, job_peaks
        from cagtool.capture.writer import write_run_meta
        from cagtool.record.manifest import ExceptionInfo
        from cagtool.capture.torch_counters import counter_delta, counter_snapshot
        from cagtool.record.schema import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED

        state = self._state
        manifest = state["manifest"]
        # The process's peak up to here (getrusage keeps no per-block peak), read before cagtool's
        # end-of-block work, as `cagtool run` reads the job's.
        peaks = job_peaks()
        try:
            state["steps"].emit_final_state()
        except Exception:  # noqa: BLE001 - numerics are a bonus; the record must still close
            pass
        self._restore(state.get("stack"))
        try:
            state["steps"].note_traced_backward()
        except Exception:  # noqa: BLE001 - the record must still close
            pass
        manifest.peak_rss_bytes, manifest.peak_device_memory_bytes = peaks
        try:
            manifest.options["cagtool_memory"] = cagtool_memory(peaks, state["steps"].device)
        except Exception:  # noqa: BLE001 - the record must still close
            pass
        status, exit_code = STATUS_FINISHED, 0
        if exc_type is not None:
            if issubclass(exc_type, KeyboardInterrupt):
                status, exit_code = STATUS_INTERRUPTED, 130
            else:
                status, exit_code = STATUS_FAILED, 1
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            manifest.exception = ExceptionInfo(exc_type.__name__, str(exc)[:2000], text[-20000:])
        manifest.status = status
        manifest.exit_code = exit_code
        manifest.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        manifest.duration_s = time.perf_counter() - state["started"]
        manifest.torch_counters = counter_delta(state["counters"], counter_snapshot())
        handler = state["handler"]
        if handler.errors:
            manifest.options["structured_log_errors"] = {"count": handler.errors, "last": handler.last_error}
        steps, scope = state["steps"], state["scope"]
        if steps.errors:
            manifest.options["step_tracking_errors"] = {"count": steps.errors, "last": steps.last_error}
        if scope.errors:
            manifest.options["thread_scope_errors"] = {"count": scope.errors, "last": scope.last_error}
        manifest.options.update(state["observer"].manifest_notes())
        writer = state["writer"]
        writer.write_manifest()
        writer.close()
        meta = state["meta"]
        meta.status = status
        meta.exit_code = exit_code
        meta.mode_exit_codes = {"ca": exit_code}
        meta.ended_at = manifest.ended_at
        write_run_meta(self.path, meta)
        self._state = {"done": True}
        return False  # the block's own exception goes on

    def _restore(self, stack: contextlib.ExitStack | None) -> None:
        """Undo everything __enter__ did, in reverse: compiled autograd off, patches and hooks
        removed, the Dynamo taps taken off, the C++ verbose logger cleared."""
        import torch

        state = self._state
        try:
            if stack is not None:
                stack.close()  # leaves _enable: compiled autograd off, ca.reset restored
        finally:
            state["observer"].uninstall()
            state["steps"].uninstall()
            state["taps"].uninstall()
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


def _thread_handler(writer: Any, steps: Any, owner: int) -> Any:
    """Dynamo's records of the block's thread only: another thread's compiles are not the block's."""
    from cagtool.capture.observe.torch_logs import StructuredLogHandler

    class ThreadHandler(StructuredLogHandler):
        def handle_structured(self, metadata: dict[str, Any], payload: str | None) -> None:
            if threading.get_ident() == owner:
                super().handle_structured(metadata, payload)

    return ThreadHandler(writer, steps)


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
