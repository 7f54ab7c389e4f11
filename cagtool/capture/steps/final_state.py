"""The job's numbers at the end of a record: parameter and gradient norms (FinalStateEvent), and the
parameters they are read from (the optimizers', else the leaves of the last loss's graph)."""

from __future__ import annotations

import math
import weakref
from typing import Any, Callable

from cagtool.capture.observe import source
from cagtool.capture.steps import sharded
from cagtool.record.schema import FinalStateEvent
from cagtool.record.writer import RecordWriter


# The names of parameters never updated kept in the record (the count is whole).
NEVER_UPDATED_NAMED = 20


def note_initial_versions(initial: dict[int, tuple[Any, int]], optimizer: Any) -> None:
    """Each parameter of an optimizer just made (or first seen) with its version counter now: a
    parameter whose counter has not moved by the run's end was never updated in place (no step of
    its optimizer reached it). A C field read per parameter, once per optimizer; never raises."""
    try:
        for group in optimizer.param_groups:
            for p in group["params"]:
                entry = initial.get(id(p))
                if entry is None or entry[0]() is not p:  # a parameter made where a collected one was has its id
                    initial[id(p)] = (weakref.ref(p), p._version)
    except Exception:  # noqa: BLE001 - an optimizer of another shape, or a tensor without a counter: not read
        pass


def _updates(params: list[Any], initial: dict[int, tuple[Any, int]] | None, digests: Any) -> dict[str, Any]:
    """FinalStateEvent's params_watched / params_updated / never_updated, over the parameters whose
    version was read when their optimizer was made (none read: nothing said)."""
    if not initial:
        return {}
    watched, never = 0, []
    names = getattr(digests, "names", None)
    for index, p in enumerate(params):
        entry = initial.get(id(p))
        if entry is None or entry[0]() is not p:
            continue
        try:
            version = p._version
        except Exception:  # noqa: BLE001 - not a tensor with a version counter
            continue
        watched += 1
        if version == entry[1]:
            name = names.name_of(p) if names is not None else None
            never.append(name or f"<parameter {index}>")
    if not watched:
        return {}
    return {"params_watched": watched, "params_updated": watched - len(never), "never_updated": never[:NEVER_UPDATED_NAMED]}


def emit_final_state(writer: RecordWriter, optimizers: Any, roots: Callable[[], list[Any]], digests: Any = None,
                     initial_versions: dict[int, tuple[Any, int]] | None = None) -> None:
    """Parameter and gradient norms at the end, for comparing modes' numerics. Read from the live
    optimizers' parameters; where none is alive (a script whose main() has returned), from those
    the gradient digests hold (the optimizers' own, as they stepped); else from the leaves of the
    last loss's graph (`roots`: its grad_fn), which under FSDP2 are its unsharded working copies,
    storage freed: the tensors whose storage does not hold them are not read (sharded.readable)."""
    owned = params_of(optimizers)
    params = owned or (digests.params_seen() if digests is not None else []) or leaf_params(roots())
    updates = _updates(owned, initial_versions, digests)
    # A DTensor's own part: its reduction would be a collective (sharded.py).
    local = sharded.local_part
    if params:
        params, of = sharded.final_params(params, digests.names if digests is not None else None)
        params = [p for p in params if sharded.readable(local(p))]
    if not params:
        writer.emit(FinalStateEvent, param_norm=None, grad_norm=None, num_params=0, **updates)
        return
    import torch

    shared = sum(1 for p in params if _in_shared_memory(local(p)))
    with torch.no_grad():
        p2 = sum(_sum_of_squares(local(p)) for p in params)
        grads = [g for g in (local(p.grad) for p in params if p.grad is not None) if sharded.readable(g)]
        g2 = sum(_sum_of_squares(g) for g in grads) if grads else None
    writer.emit(
        FinalStateEvent,
        param_norm=math.sqrt(p2),
        grad_norm=math.sqrt(g2) if g2 is not None else None,
        num_params=len(params),
        of=of,
        params_shared=shared,
        **updates,
    )


def _in_shared_memory(tensor: Any) -> bool:
    """A CPU tensor whose storage is in shared memory (`share_memory_()`); a device tensor says no
    (torch calls every CUDA tensor shared: IPC, not what another process writes by Hogwild)."""
    try:
        return tensor.device.type == "cpu" and bool(tensor.is_shared())
    except Exception:  # noqa: BLE001 - a tensor subclass without storage: not read as shared
        return False


# Elements squared in float64 at a time for the final norms: the copies cagtool makes for them are
# 2 x 8 MiB at most, whatever the size of a parameter (a whole 1 GiB float32 embedding in float64
# was 4 GiB more at the run's end, on the job's device).
_NORM_CHUNK = 1 << 20


def _sum_of_squares(tensor: Any) -> float:
    """sum(|x|**2) of a tensor in float64, a chunk at a time; one read of the device at the end. A
    complex tensor is read as its real and imaginary parts (cast to float64 it would lose the
    imaginary part, with a warning in the job's output)."""
    flat = tensor.detach()
    if flat.is_complex():
        import torch

        flat = torch.view_as_real(flat.resolve_conj())
    if not flat.is_contiguous() or flat.numel() <= _NORM_CHUNK:
        return float(flat.double().pow(2).sum())
    flat = flat.view(-1)
    total = None
    for start in range(0, flat.numel(), _NORM_CHUNK):
        part = flat[start:start + _NORM_CHUNK].double().pow(2).sum()
        total = part if total is None else total + part
    return float(total)


def params_of(optimizers: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for optimizer in list(optimizers):
        for group in optimizer.param_groups:
            for p in group["params"]:
                seen.setdefault(id(p), p)
    return list(seen.values())


def leaf_params(roots: list[Any]) -> list[Any]:
    found: dict[int, Any] = {}
    for node in source.walk_graph(roots):
        variable = getattr(node, "variable", None)
        if variable is not None:
            found.setdefault(id(variable), variable)
    return list(found.values())
