"""Which parameters the end-of-run norms are read from, when an optimizer does not hold the
model's parameters.

A sharded optimizer steps tensors of its own: DeepSpeed's ZeRO 1/2 wraps the client optimizer and
hands it one flat fp32 partition per parameter group, each rank its own slice, that no module holds;
FSDP's flat parameters (`FlatParameter`), FSDP2's (`fully_shard`: DTensors placed Shard(0)) and
ZeRO-3's partitioned parameters (`ds_tensor`) are module parameters of which each rank holds a
shard. Their norms differ across ranks by design, so they say nothing about whether the ranks
agree: what is meant to agree is the model's parameters, by name. The final state says which it
read (`FinalStateEvent.of`).

A DTensor's values are read from the part this rank holds (`local_part`), never from the DTensor
itself: reducing a DTensor (a norm, `.item()`, `.tolist()`) runs collectives, which would add
communication to the job, hang where ranks read at different moments, and crash once the job has
destroyed its process group (an FSDP2 job's end, where the record closes).
"""

from __future__ import annotations

import sys
from typing import Any

from cagtool.record.schema import FINAL_OF_SHARDS as OF_SHARDS  # each rank's shard: not comparable across ranks

OF_OPTIMIZER = "optimizer"  # the optimizers' parameters (the model's own, as a plain optimizer holds them)
OF_MODEL = "model"  # the modules' parameters: the optimizer held tensors no module holds (a flat partition)


def _dtensor_class() -> Any:
    """torch's DTensor class where the job has imported it (no DTensor exists otherwise), else None."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None) if module is not None else None


def local_part(tensor: Any) -> Any:
    """The part of `tensor` this rank holds: a DTensor's local tensor (no collective), else `tensor`."""
    return tensor.to_local() if is_dtensor(tensor) else tensor


def readable(tensor: Any) -> bool:
    """Whether a plain tensor's storage holds its elements. FSDP2 frees an unsharded parameter's
    storage after use (resized to 0 bytes, the tensor's sizes kept): reading it is a read through
    a null pointer, a segfault, not an error. A tensor subclass that dispatches its own ops is
    read through them (True)."""
    import torch

    if getattr(type(tensor), "__torch_dispatch__", None) is not torch._C._disabled_torch_dispatch_impl:
        return True
    if tensor.layout != torch.strided or tensor.numel() == 0:  # sparse: no one storage to look at
        return True
    try:
        last = tensor.storage_offset() + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
        return tensor.untyped_storage().nbytes() >= (last + 1) * tensor.element_size()
    except (NotImplementedError, RuntimeError):  # a tensor kind without a storage of its own (mkldnn)
        return True


def is_dtensor(tensor: Any) -> bool:
    dtensor = _dtensor_class()
    return dtensor is not None and isinstance(tensor, dtensor)


def is_shard(param: Any) -> bool:
    """A parameter of which this rank holds a shard: FSDP's FlatParameter, a DTensor placed other
    than Replicate on some mesh dimension (FSDP2, tensor parallel), ZeRO-3's partitioned one."""
    if type(param).__name__ == "FlatParameter" or hasattr(param, "ds_tensor"):
        return True
    if is_dtensor(param):
        return any(not placement.is_replicate() for placement in param.placements)
    return False


def final_params(optimizer_params: list[Any], names: Any) -> tuple[list[Any], str]:
    """The parameters to read the final norms from, and which they are (OF_*). `names`: the
    process's grad_digest.ParamNames, or None where module paths are not tracked."""
    if any(is_shard(p) for p in optimizer_params):
        return optimizer_params, OF_SHARDS
    if names is None or not optimizer_params or all(names.name_of(p) is not None for p in optimizer_params):
        return optimizer_params, OF_OPTIMIZER
    model = names.module_params()
    if not model:
        return optimizer_params, OF_OPTIMIZER
    return model, OF_SHARDS if any(is_shard(p) for p in model) else OF_MODEL
