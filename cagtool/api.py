"""The Python API, for notebooks and custom harnesses:

    import cagtool
    with cagtool.capture(backend="inductor") as cap:   # compiled autograd on for every backward in the block
        for batch in loader:
            train_step(batch)
    cap.summary()                     # the summary `cagtool summary` prints
    cap.path                          # the run directory: every CLI command reads it
    cap.steps_frame(); cap.events_frame("ca_cache_miss")
    run = cagtool.load(cap.path)      # any record

The block is recorded as the `ca` mode of a normal run record, with the same observers as
`cagtool run` (capture/): steps, CA graphs and their cache misses, Dynamo's compiles, recompiles
and graph breaks. On exit, torch is as it was: compiled autograd off again, the patched entry
points and hooks removed, the Dynamo taps taken off. Nothing here imports torch until a capture
starts (`import cagtool` stays cheap).
"""

from __future__ import annotations

import contextlib
import os
import sys
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
        from cagtool.capture.child import _has_compiled_autograd
        from cagtool.capture.mode_setup import make_compiler, mode_context
        from cagtool.capture.processes.identity import ROLE_MAIN, process_info
        from cagtool.capture.steps import StepTracker
        from cagtool.capture.torch_counters import counter_snapshot
        from cagtool.capture.versions import machine_info, record_versions
        from cagtool.capture.observe import dynamo_taps
        from cagtool.capture.observe.torch_logs import StructuredLogHandler
        from cagtool.capture.writer import RecordWriter, write_run_meta
        from cagtool.record.manifest import ModeManifest, RunMeta

        if not _has_compiled_autograd():
            raise UsageError(f"this torch build ({torch.__version__}) has no compiled autograd; cagtool needs torch 2.13")
        if self.reset:
            torch._dynamo.reset()
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
        steps = StepTracker(writer, "ca")
        observer = CaptureObserver(writer, steps, make_compiler(self.backend))
        handler = StructuredLogHandler(writer, steps)
        self._state = {
            "meta": meta,
            "manifest": manifest,
            "writer": writer,
            "steps": steps,
            "observer": observer,
            "handler": handler,
            "counters": counter_snapshot(),
            "started": started,
        }
        self._state["taps"] = dynamo_taps.install(handler)  # no handler on torch's structured logger
        steps.install()
        observer.install()
        stack = contextlib.ExitStack()
        try:
            # What `cagtool run`'s ca mode does to torch, scoped to the block (capture/mode_setup.py).
            stack.enter_context(mode_context("ca", observer, self.dynamic))
        except BaseException:
            self._restore(stack)
            raise
        self._state["stack"] = stack
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        from cagtool.capture.writer import write_run_meta
        from cagtool.record.manifest import ExceptionInfo
        from cagtool.capture.torch_counters import counter_delta, counter_snapshot
        from cagtool.record.schema import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED

        state = self._state
        manifest = state["manifest"]
        try:
            state["steps"].emit_final_state()
        except Exception:  # noqa: BLE001 - numerics are a bonus; the record must still close
            pass
        self._restore(state.get("stack"))
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
        """The summary `cagtool summary` prints (fmt="json": its JSON document, as a dict)."""
        from cagtool.report.console import make_console
        from cagtool.report.summary import render_summary, summary_json

        run = self._record()
        if fmt == "json":
            return summary_json(run)
        render_summary(make_console(), run)
        return None

    def steps_frame(self) -> Any:
        """One row per step (pandas DataFrame)."""
        from cagtool.report.frames import steps_frame

        return steps_frame(self._record().mode("ca"))

    def events_frame(self, kind: str) -> Any:
        """One row per event of `kind` (e.g. "ca_cache_miss", "ca_graph"), as a pandas DataFrame."""
        from cagtool.report.frames import events_frame

        return events_frame(self._record().mode("ca"), kind)


def capture(
    backend: str = "inductor",
    dynamic: bool = False,
    output: str | Path | None = None,
    runs_root: str | Path = DEFAULT_RUNS_ROOT,
    label: str = "capture",
    reset: bool = False,
) -> Capture:
    """Record a block as a cagtool run: compiled autograd on for every backward in it (compiled
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
