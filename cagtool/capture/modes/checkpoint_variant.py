"""A variant run of a job that uses activation checkpointing, for measuring what checkpointing
does (`cagtool checkpointing`): the job as written, but with `torch.utils.checkpoint.checkpoint`
turned into a plain call of the checkpointed function (`plain`: nothing is recomputed, every
activation is kept), or with its reentrant checkpoints made non-reentrant (`non_reentrant`:
`use_reentrant=False`, the fix for reentrant checkpointing under compiled autograd), or with
Dynamo's `skip_fwd_side_effects_in_bwd_under_checkpoint` set (`skip_side_effects`: Dynamo traces a
checkpoint whose function has a side effect as one region, not replaying the side effect in the
backward's recompute; the fix where that side effect broke the graph inside it). The user's
file is never touched: the variant is chosen by CHECKPOINT_VARIANT_ENV in the re-run's
environment, and applied before the script runs, so `from torch.utils.checkpoint import
checkpoint` in the script gets it. A run without the variable is the job as written."""

from __future__ import annotations

import os
from typing import Any

CHECKPOINT_VARIANT_ENV = "CAGTOOL_CHECKPOINT_VARIANT"
VARIANT_PLAIN = "plain"
VARIANT_NON_REENTRANT = "non_reentrant"
VARIANT_SKIP_SIDE_EFFECTS = "skip_side_effects"
VARIANTS = (VARIANT_PLAIN, VARIANT_NON_REENTRANT, VARIANT_SKIP_SIDE_EFFECTS)
# What the skip_side_effects variant sets (torch 2.13's Dynamo config; docs/torch-internals.md).
SIDE_EFFECTS_CONFIG = "skip_fwd_side_effects_in_bwd_under_checkpoint"
# checkpoint()'s own keyword arguments: not the checkpointed function's
_CHECKPOINT_KWARGS = ("use_reentrant", "context_fn", "determinism_check", "debug", "preserve_rng_state", "early_stop")


def requested() -> str | None:
    value = os.environ.get(CHECKPOINT_VARIANT_ENV, "")
    return value if value in VARIANTS else None


def apply(variant: str) -> None:
    """Replace torch.utils.checkpoint.checkpoint (the module's attribute, which checkpoint_sequential
    calls too) by the variant, for the rest of the process; or set the Dynamo config of
    `skip_side_effects` (the job's own assignment of it, later, wins)."""
    if variant == VARIANT_SKIP_SIDE_EFFECTS:
        import torch._dynamo.config as dynamo_config

        setattr(dynamo_config, SIDE_EFFECTS_CONFIG, True)
        return
    import torch.utils.checkpoint as checkpoint_module

    original = checkpoint_module.checkpoint

    if variant == VARIANT_PLAIN:
        def checkpoint(function: Any, *args: Any, **kwargs: Any) -> Any:
            for name in _CHECKPOINT_KWARGS:
                kwargs.pop(name, None)
            return function(*args, **kwargs)
    else:
        def checkpoint(function: Any, *args: Any, **kwargs: Any) -> Any:
            kwargs["use_reentrant"] = False
            return original(function, *args, **kwargs)

    checkpoint.__wrapped__ = original  # type: ignore[attr-defined]
    checkpoint.__doc__ = original.__doc__
    checkpoint_module.checkpoint = checkpoint
