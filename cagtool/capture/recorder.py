"""One recorded process: its writer and manifest, the instruments that read torch (gradient
digests, step tracker, CA observer, structured-log handler, Dynamo taps) and the closing manifest.

Every process cagtool records builds one: the mode process (run/child.py), a process the job
started (processes/follow.py) and a Python API block (api.py). What differs between them is
passed in (the step bound, the thread scope, the counters' baseline); the instruments and every
closing field are the same code, so a field added here reaches all three."""

from __future__ import annotations

import sys
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

from cagtool.capture.observe.torch_logs import StructuredLogHandler
from cagtool.record.manifest import ExceptionInfo, ModeManifest

# What every close writes into the manifest's options, whatever happened (a count of 0 included):
# the fields by which a record says how far cagtool's own parts can be trusted.
CLOSING_OPTIONS = ("backward_calls_outside_ca", "cagtool_memory", "collate_functions", "dataloader_iterators", "fallback_random",
                   "losses_not_kept", "oversized_dropped", "step_tracking_errors", "structured_log_errors", "workdir_reads")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def has_compiled_autograd() -> bool:
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


def eager_randomness() -> None:
    """`cagtool run --parity`: Inductor's compiled code calls torch's own random ops (the eager
    stream, seeded alike in every mode: seeding.py) instead of its own generator, so dropout and
    friends draw the same numbers as in eager mode and gradients compare."""
    try:
        import torch._inductor.config as inductor_config

        inductor_config.fallback_random = True
    except Exception:  # noqa: BLE001 - a torch without Inductor: nothing draws differently
        pass


def _error_count(part: Any) -> dict[str, Any]:
    return {"count": part.errors, "last": part.last_error} if part is not None and part.errors else {"count": 0, "last": None}


class Recorder:
    """The record of one process and the instruments writing it.

    `writer` and `manifest` exist from the start; the torch instruments are added by `instrument`
    once torch is imported (a followed process may be recorded before it imports torch, or never
    import it). `counters_from`: torch's counters when recording began (None: the process's own,
    from its start)."""

    def __init__(self, writer: Any, manifest: ModeManifest, *, started: float | None = None,
                 counters_from: dict[str, dict[str, int]] | None = None) -> None:
        self.writer = writer
        self.manifest = manifest
        self.started = time.perf_counter() if started is None else started
        self.counters_from = counters_from
        self.digests: Any = None
        self.steps: Any = None
        self.observer: Any = None
        self.handler: Any = None
        self.taps: Any = None
        self.scope: Any = None
        self.compiling: Any = None  # what compiles now, for the live status line (only when it is drawn)
        self.closed = False

    # -- the instruments ----------------------------------------------------------------------
    def instrument(self, mode: str, backend: str, *, max_steps: int | None = None, parity_every: int | None = None,
                   digest_steps: list[int] | tuple[int, ...] | None = None, parity: bool = False, scope: Any = None,
                   torch_trace: bool = False, compiling: Any = None, depyf: bool = False) -> None:
        """Build and install the instruments that read torch (torch is imported by now). `scope`:
        the Python API's thread (modes/thread_scope.py): only its backwards and Dynamo records.
        `compiling`: a CompilesInProgress the live status line reads (observe/compiling_now.py).
        `depyf`: depyf's dump is on (`run --depyf`), under which the capture is hidden from Dynamo
        (CaptureObserver.install)."""
        from cagtool.capture.modes.mode_setup import make_compiler
        from cagtool.capture.observe import dynamo_taps
        from cagtool.capture.observe.ca_observer import CaptureObserver
        from cagtool.capture.observe.torch_logs import guard_trace_output
        from cagtool.capture.steps.grad_digest import GradDigests
        from cagtool.capture.steps.tracker import StepTracker

        self.scope = scope
        self.digests = GradDigests(parity_every, digest_steps or ())
        self.digests.names.install()
        self.steps = StepTracker(self.writer, mode, max_steps=max_steps, digests=self.digests, scope=scope)
        if parity and mode != "eager":
            eager_randomness()
        self.compiling = compiling
        self.observer = CaptureObserver(self.writer, self.steps, make_compiler(backend) if mode == "ca" else None, compiling)
        self.observer.hide_capture = depyf
        self.handler = (ThreadHandler(self.writer, self.steps, scope.owner) if scope is not None
                        else StructuredLogHandler(self.writer, self.steps))
        self.taps = dynamo_taps.install(self.handler)  # no handler on torch's structured logger (dynamo_taps.py)
        if torch_trace:
            # A full disk stops the trace with one line, not a logging traceback per structured record.
            guard_trace_output(lambda stopped: setattr(self.manifest, "trace_stopped", stopped))
        self.steps.install()
        self.observer.install()
        if compiling is not None:
            compiling.install()

    def wind_down(self, *extra: Callable[[], Any], numerics: bool = True, uninstall: bool = True) -> None:
        """The end-of-record work on the instruments: final norms, gradient digests and the traced
        backward's note (`numerics`), `extra` (e.g. the DDP checks), then the instruments taken off
        torch (`uninstall`; a followed process that is exiting only counts its notes still
        undecided, as uninstall does, and reads its device's last figures). Each
        part may meet what the job left behind (a stop a hook raises again, a failing device
        read): none may keep the record from closing."""
        parts: list[Callable[[], Any]] = []
        if self.steps is not None and numerics:
            parts += [self.steps.emit_final_state, self._emit_grad_digests, self.digests.names.uninstall,
                      self.steps.note_traced_backward, self.taps.note_compile_calls]
        parts += extra
        if self.steps is not None:
            parts += ([self.steps.uninstall, self.observer.uninstall, self.taps.uninstall]
                      + ([self.compiling.uninstall] if self.compiling is not None else [])
                      if uninstall else [self.steps.settle, self.steps.device.finish])
        from cagtool.capture.outside_modes import outside_user_modes

        def run_parts() -> None:
            for part in parts:
                try:
                    part()
                except BaseException:  # noqa: BLE001 - the record must still close
                    pass

        # A Python API block ends inside whatever mode the script entered around it.
        outside_user_modes(run_parts)

    def _emit_grad_digests(self) -> None:
        """The gradient digests, read back from the device now (the run's only wait for them), and
        whether compiled code drew eager-equal random numbers (what a parity verdict depends on)."""
        from cagtool.record.schema import GradDigestEvent

        try:
            for fields in self.steps.grad_digest_events():
                self.writer.emit(GradDigestEvent, **fields)
        except Exception as exc:  # noqa: BLE001 - numerics are a bonus; the record must still close
            self.manifest.options["grad_digest_error"] = f"{type(exc).__name__}: {exc}"[:500]

    # -- the closing manifest -----------------------------------------------------------------
    def close(self, status: str, exit_code: int, exception: ExceptionInfo | None,
              peaks: tuple[int | None, int | None]) -> None:
        """Write the closing manifest and close the writer. `peaks`: job_peaks() read before the
        end-of-record work."""
        if self.closed:
            return
        self.closed = True
        manifest = self.manifest
        options = manifest.options
        manifest.status = status
        manifest.exit_code = exit_code
        manifest.exception = exception
        manifest.ended_at = now_iso()
        manifest.duration_s = time.perf_counter() - self.started
        manifest.peak_rss_bytes, manifest.peak_device_memory_bytes = peaks
        device = self.steps.device if self.steps is not None else None
        try:
            options["cagtool_memory"] = cagtool_memory(peaks, device)
        except Exception:  # noqa: BLE001 - the record must still close
            options["cagtool_memory"] = {}
        if "torch._dynamo" in sys.modules:
            from cagtool.capture.observe.torch_logs import pgo_suggestion
            from cagtool.capture.torch_counters import counter_delta, counter_snapshot

            now = counter_snapshot()
            manifest.torch_counters = now if self.counters_from is None else counter_delta(self.counters_from, now)
            if (suggestion := pgo_suggestion()) is not None:  # never raises
                options["pgo_suggestion"] = suggestion  # torch's own words, shown beside cagtool's
        seed = options.get("seed")
        if isinstance(seed, dict) and "torch" in sys.modules:
            from cagtool.capture.run.seeding import script_reseeded

            try:
                seed["script_reseeded"] = script_reseeded(seed)
            except Exception:  # noqa: BLE001 - the record must still close
                pass
        # Not imported when the job never used Inductor: then nothing drew Inductor's numbers.
        inductor_config = sys.modules.get("torch._inductor.config")
        options["fallback_random"] = bool(getattr(inductor_config, "fallback_random", False))
        options["step_tracking_errors"] = _error_count(self.steps)
        options["structured_log_errors"] = _error_count(self.handler)
        options["oversized_dropped"] = {"count": self.writer.oversized, "last": self.writer.last_oversized}
        options["losses_not_kept"] = device.dropped_losses if device is not None else 0
        from cagtool.capture.processes.workdir_reads import reads

        options["workdir_reads"] = reads()  # None: not watched (a Python API block)
        options["dataloader_iterators"] = self.steps.loader_iterators if self.steps is not None else None
        options["collate_functions"] = list(self.steps.collate_functions) if self.steps is not None else None
        # The ca mode's top-level backwards that began with compiled autograd off (None: not the ca mode, or steps not tracked).
        options["backward_calls_outside_ca"] = self.steps.counter.outside_ca if self.steps is not None and self.steps.mode == "ca" else None
        if self.scope is not None and self.scope.errors:
            options["thread_scope_errors"] = {"count": self.scope.errors, "last": self.scope.last_error}
        if self.observer is not None:
            try:
                options.update(self.observer.manifest_notes())
            except Exception:  # noqa: BLE001 - the record must still close
                pass
        self.writer.write_manifest()
        self.writer.close()


class ThreadHandler(StructuredLogHandler):
    """Dynamo's records of one thread only: another thread's compiles are not the block's."""

    def __init__(self, writer: Any, steps: Any, owner: int) -> None:
        super().__init__(writer, steps)
        self.owner = owner

    def handle_structured(self, metadata: dict[str, Any], payload: str | None) -> None:
        if threading.get_ident() == self.owner:
            super().handle_structured(metadata, payload)
