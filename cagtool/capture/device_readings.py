"""Step figures that live on the device, read without stalling it: CUDA step times from events
recorded on the stream at step boundaries (read once they have completed), and losses of tensors
on an accelerator (read at the end of the run; on CPU they are read at once, which costs nothing).

A profiler must not add a device sync per step: `float(loss)` on a CUDA tensor waits for every
kernel queued so far, which would hide the very overlap compiled autograd is meant to help.
"""

from __future__ import annotations

from typing import Any

from cagtool.capture.writer import RecordWriter
from cagtool.record.schema import StepDeviceEvent

# Losses waiting to be read (one per step, 4 bytes of device memory each); beyond this the later
# steps' losses are not kept and the count of dropped ones is recorded in the manifest.
MAX_DEFERRED_LOSSES = 1_000_000


_torch_cuda: Any = None


def _cuda_in_use() -> Any:
    """torch.cuda when the job has initialised CUDA (cagtool never does it for the job)."""
    global _torch_cuda
    cuda = _torch_cuda
    if cuda is None:
        import torch

        cuda = _torch_cuda = getattr(torch, "cuda", None)
        if cuda is None:
            return None
    return cuda if cuda.is_initialized() else None


class DeviceReadings:
    def __init__(self, writer: RecordWriter) -> None:
        self.writer = writer
        self._last_event: Any = None  # the CUDA event recorded at the previous boundary
        self._pending: list[tuple[int, Any, Any]] = []  # (step, start event, end event), not read yet
        self._losses: dict[int, Any] = {}  # step -> detached scalar tensor on the device
        self.dropped_losses = 0

    def boundary(self, step: int) -> None:
        """Step `step` just ended: mark the stream, and write the device times that are ready."""
        # Once per step. torch.cuda.is_initialized() is `_initialized and not _is_in_bad_fork()`:
        # its flag, read first, spares two Python calls a step where CUDA is not in use.
        if _torch_cuda is not None and not getattr(_torch_cuda, "_initialized", True):
            return
        cuda = _cuda_in_use()
        if cuda is None or cuda.is_current_stream_capturing():
            return
        event = cuda.Event(enable_timing=True)
        event.record()  # on the current stream: after all the step's queued work
        if self._last_event is not None:
            self._pending.append((step, self._last_event, event))
        self._last_event = event
        self._write_ready(wait=False)

    def defer_loss(self, step: int, loss: Any) -> None:
        """Keep a reference to the step's (last) loss; read it when the run ends."""
        if step not in self._losses and len(self._losses) >= MAX_DEFERRED_LOSSES:
            self.dropped_losses += 1
            return
        self._losses[step] = loss

    def finish(self) -> None:
        """The run is over: waiting for the device costs the job nothing now."""
        self._write_ready(wait=True)
        self._write_losses()

    def _write_ready(self, wait: bool) -> None:
        still: list[tuple[int, Any, Any]] = []
        for step, start, end in self._pending:
            if not wait and (still or not end.query()):  # one stream: later events finish later
                still.append((step, start, end))
                continue
            if wait:
                end.synchronize()
            self.writer.emit(StepDeviceEvent, step=step, device_s=start.elapsed_time(end) / 1000.0)
        self._pending = still

    def _write_losses(self) -> None:
        if not self._losses:
            return
        steps = sorted(self._losses)
        try:
            import torch

            values = torch.stack([self._losses[s].reshape(()).float() for s in steps]).tolist()
        except Exception:  # noqa: BLE001 - losses on several devices: read them one by one
            values = []
            for s in steps:
                try:
                    values.append(float(self._losses[s]))
                except Exception:  # noqa: BLE001
                    values.append(None)
        for step, value in zip(steps, values):
            if value is not None:
                self.writer.emit(StepDeviceEvent, step=step, loss=float(value))
        self._losses.clear()
