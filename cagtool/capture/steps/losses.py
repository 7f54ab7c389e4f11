"""A backward call's loss: its first output's value when it is one element."""

from __future__ import annotations

from typing import Any

from cagtool.capture.outside_modes import outside_user_modes
from cagtool.capture.steps.sharded import is_dtensor


def read_loss(tensor: Any) -> tuple[float | None, Any]:
    """(value, None) for a CPU scalar, read now (no device to wait for); (None, detached tensor)
    for a scalar on an accelerator, read at the end of the run (device_readings.py); (None, None)
    for anything else. Called by the drain for a backward call's one-element first output that the
    hook did not read itself (hooks.py reads a plain CPU tensor's outside any mode): in the hook
    itself with CUDA in use (the hook drains there), else a few steps later, several in a row.
    Read outside the script's modes (outside_modes.py): the drain may run inside them."""
    return outside_user_modes(_read, tensor)


def _read(tensor: Any) -> tuple[float | None, Any]:
    try:
        if tensor.__class__.__name__ == "DTensor" and is_dtensor(tensor):  # the name first: a plain loss pays one compare
            # A DTensor loss (tensor parallel's loss_parallel): read only where every rank holds
            # all of it (Replicate), from this rank's copy; reading a partial or sharded one is a
            # collective, run by the drain at a moment of its own on each rank (sharded.py).
            if not all(placement.is_replicate() for placement in tensor.placements):
                return None, None
            tensor = tensor.to_local()
        if tensor.is_cpu:
            value = tensor.item()  # exact; RuntimeError when not one element: None below
            kind = value.__class__
            if kind is float:
                return value, None
            return (float(value) if kind is int or kind is bool else None), None  # complex: None
        if tensor.numel() != 1 or tensor.is_complex() or tensor.device.type == "meta":
            return None, None
        return None, tensor.detach()
    except Exception:  # noqa: BLE001 - not a tensor, a subclass without these, or not one element
        return None, None
