"""Every mode starts from the same random state, so modes compare: an unseeded script would
otherwise draw different weights and inputs in eager, aot and ca, and their losses would differ
for that reason alone. A script that seeds itself reseeds after this, which is as it would be
under python. The seed is recorded in the manifest (options["seed"])."""

from __future__ import annotations

import os
import random
import sys
from typing import Any

SEED_ENV = "CAGTOOL_SEED"  # an integer, or "off" to leave the script's randomness alone
DEFAULT_SEED = 0


def seed_all() -> dict[str, Any]:
    """Seed Python's random, torch (every device) and numpy when it is installed; returns what
    was done, for the manifest."""
    raw = os.environ.get(SEED_ENV, "").strip().lower()
    if raw == "off":
        return {"seed": None, "seeded": []}
    seed = int(raw) if raw.lstrip("-").isdigit() else DEFAULT_SEED
    seeded = []
    random.seed(seed)
    seeded.append("random")
    import torch

    torch.manual_seed(seed)
    seeded.append("torch")
    if "numpy" in sys.modules or _numpy_installed():
        try:
            import numpy

            numpy.random.seed(seed % 2**32)
            seeded.append("numpy")
        except Exception:  # noqa: BLE001 - a broken numpy is the script's business, not ours
            pass
    return {"seed": seed, "seeded": seeded}


def _numpy_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("numpy") is not None


def script_reseeded(info: dict[str, Any]) -> bool | None:
    """Whether the script seeded torch itself (torch.initial_seed() moved off ours)."""
    if info.get("seed") is None:
        return None
    import torch

    return torch.initial_seed() != info["seed"] % 2**64
