"""Which parameters the end-of-run norms are read from, when an optimizer does not hold the
model's parameters.

A sharded optimizer steps tensors of its own: DeepSpeed's ZeRO 1/2 wraps the client optimizer and
hands it one flat fp32 partition per parameter group, each rank its own slice, that no module holds;
FSDP's flat parameters (`FlatParameter`) and ZeRO-3's partitioned parameters (`ds_tensor`) are
module parameters of which each rank holds a shard. Their norms differ across ranks by design, so
they say nothing about whether the ranks agree: what is meant to agree is the model's parameters,
by name. The final state says which it read (`FinalStateEvent.of`).
"""

from __future__ import annotations

from typing import Any

from cagtool.record.schema import FINAL_OF_SHARDS as OF_SHARDS  # each rank's shard: not comparable across ranks

OF_OPTIMIZER = "optimizer"  # the optimizers' parameters (the model's own, as a plain optimizer holds them)
OF_MODEL = "model"  # the modules' parameters: the optimizer held tensors no module holds (a flat partition)


def is_shard(param: Any) -> bool:
    """A parameter of which this rank holds a shard: FSDP's FlatParameter, ZeRO-3's partitioned one."""
    return type(param).__name__ == "FlatParameter" or hasattr(param, "ds_tensor")


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
