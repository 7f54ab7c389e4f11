"""Step figures that live on the device, read without stalling it: CUDA step times from events
recorded on the stream at step boundaries (read once they have completed), and losses of tensors
on an accelerator (read at the end of the run; on CPU they are read at once, which costs nothing).

A profiler must not add a device sync per step: `float(loss)` on a CUDA tensor waits for every
kernel queued so far, which would hide the very overlap compiled autograd is meant to help.

Nor may it hold the job's device memory: keeping each step's loss tensor to the end held one
caching-allocator block (512 bytes) per step, up to ~512 MB over a million steps. A CUDA loss is
instead copied, as its step ends, into page-locked host memory by an asynchronous copy queued on
the current stream (after the kernels that compute it; no sync), and the device tensor is let go
at once. The host memory comes in chunks of LOSS_CHUNK float32 values (16 KiB), allocated as
steps need them (4 MB for a million steps); the values are read once the device has been
synchronized at the end of the run. A loss on another accelerator, or one made while the stream
is being captured into a CUDA graph (a copy there would be captured too), is held as before.
What cagtool held is recorded (`footprint`, the manifest's options["cagtool_memory"]).
"""

from __future__ import annotations

from typing import Any

from cagtool.capture.outside_modes import outside_user_modes
from cagtool.record.writer import RecordWriter
from cagtool.record.schema import StepDeviceEvent

# Losses waiting to be read (one per step: 4 bytes of pinned host memory each on CUDA, a device
# tensor elsewhere); beyond this the later steps' losses are not kept and the count of dropped ones
# is recorded in the manifest.
MAX_DEFERRED_LOSSES = 1_000_000
LOSS_CHUNK = 4096  # float32 values per page-locked host chunk


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
        # step -> (chunk, offset) of its value in `_chunks`, or the detached scalar tensor itself
        self._losses: dict[int, Any] = {}
        self._chunks: list[Any] = []  # page-locked float32 host tensors of LOSS_CHUNK values
        self._used = LOSS_CHUNK  # values written into the last chunk
        self._copied_from: set[Any] = set()  # the devices whose streams copy into the chunks
        self.held_on_device = 0  # losses kept as device tensors (not CUDA, or captured)
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
        """Keep the step's (last) loss, on the host where it can be copied there without a sync;
        read it when the run ends."""
        if step not in self._losses and len(self._losses) >= MAX_DEFERRED_LOSSES:
            self.dropped_losses += 1
            return
        try:
            slot = outside_user_modes(self._copy_to_host, loss)  # the drain may run inside the script's modes
        except Exception:  # noqa: BLE001 - kept on the device instead, as it was
            slot = None
        if slot is None:
            self.held_on_device += 1
            self._losses[step] = loss
        else:
            self._losses[step] = slot

    def _copy_to_host(self, loss: Any) -> tuple[int, int] | None:
        cuda = _cuda_in_use()
        if cuda is None or not getattr(loss, "is_cuda", False) or cuda.is_current_stream_capturing():
            return None
        if self._used == LOSS_CHUNK:
            import torch

            self._chunks.append(torch.empty(LOSS_CHUNK, dtype=torch.float32, pin_memory=True))
            self._used = 0
        chunk, offset = len(self._chunks) - 1, self._used
        # Queued on the current stream, after the loss is computed; a dtype other than float32 is
        # converted on the device first (a one-element temporary, freed in stream order).
        self._chunks[chunk][offset].copy_(loss.reshape(()), non_blocking=True)
        self._used += 1
        self._copied_from.add(loss.device)
        return chunk, offset

    def footprint(self) -> dict[str, int]:
        """What cagtool held for the losses: page-locked host bytes, losses held on a device."""
        return {"pinned_host_bytes": len(self._chunks) * LOSS_CHUNK * 4, "losses_held_on_device": self.held_on_device}

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
        read = self._read_host_chunks()
        values: list[float | None] = []
        on_device = [s for s in steps if not isinstance(self._losses[s], tuple)]
        device_values: dict[int, float | None] = {}
        if on_device:
            try:
                import torch

                device_values = dict(zip(on_device, torch.stack([self._losses[s].reshape(()).float() for s in on_device]).tolist()))
            except Exception:  # noqa: BLE001 - losses on several devices: read them one by one
                for s in on_device:
                    try:
                        device_values[s] = float(self._losses[s])
                    except Exception:  # noqa: BLE001
                        device_values[s] = None
        for s in steps:
            slot = self._losses[s]
            if isinstance(slot, tuple):
                values.append(read[slot[0]][slot[1]] if read is not None else None)
            else:
                values.append(device_values.get(s))
        for step, value in zip(steps, values):
            if value is not None:
                self.writer.emit(StepDeviceEvent, step=step, loss=float(value))
        self._losses.clear()
        self._chunks, self._used = [], LOSS_CHUNK

    def _read_host_chunks(self) -> list[list[float]] | None:
        """The host chunks' values, once every copy into them has completed (the run is over: a
        sync costs the job nothing now). None when the device cannot be synchronized."""
        if not self._chunks:
            return []
        try:
            import torch

            for device in self._copied_from:
                torch.cuda.synchronize(device)
            return [chunk.tolist() for chunk in self._chunks]
        except Exception:  # noqa: BLE001 - a broken CUDA state: those losses are not read
            return None
