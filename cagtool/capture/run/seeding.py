"""Every mode starts from the same random state, so modes compare: an unseeded script would
otherwise draw different weights and inputs in eager, aot and ca, and their losses would differ
for that reason alone. A script that seeds itself reseeds after this, which is as it would be
under python. `cagtool run --seed N` picks the seed, `--seed off` leaves the script's randomness
alone (modes of an unseeded script then differ for that reason).

Every process of the job is seeded, not only the one cagtool starts: each torchrun worker or
spawned Python child gets `process_seed(seed, rank)` (processes/follow.py), the same in every
mode. Ranks get different seeds (seed + rank), as unseeded ranks draw different numbers under
python; a process without a RANK in its environment (an mp.spawn worker learns its rank only as
an argument) gets the run's seed. A forked child is not reseeded: it inherits its parent's state,
as under python. The seed is recorded in each process's manifest (options["seed"])."""

from __future__ import annotations

import random
import sys
from typing import Any


def parse_seed(text: str) -> int | None:
    """`--seed`'s value: an integer, or "off" (None). Raises ValueError on anything else."""
    value = text.strip().lower()
    if value == "off":
        return None
    seed = int(value)
    if not 0 <= seed < 2**63:
        raise ValueError(text)
    return seed


def process_seed(seed: int, rank: int | None) -> int:
    """The seed of one process of the job: the run's seed, plus its rank for a rank."""
    return seed + rank if rank is not None and rank >= 0 else seed


def seed_random(seed: int) -> None:
    random.seed(seed)


def seed_torch(seed: int) -> None:
    import torch

    torch.manual_seed(seed)  # every device's generator


def seed_numpy(seed: int) -> bool:
    """Seed numpy's global generator; False when numpy cannot be imported (a broken numpy is
    the script's business, not ours)."""
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except Exception:  # noqa: BLE001
        return False
    return True


def seed_all(seed: int | None) -> dict[str, Any]:
    """Seed Python's random, torch (every device) and numpy when it is installed; returns what
    was done, for the manifest. `seed` None: nothing is seeded."""
    if seed is None:
        return {"seed": None, "seeded": []}
    seeded = []
    seed_random(seed)
    seeded.append("random")
    seed_torch(seed)
    seeded.append("torch")
    if ("numpy" in sys.modules or _numpy_installed()) and seed_numpy(seed):
        seeded.append("numpy")
    return {"seed": seed, "seeded": seeded}


def _numpy_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("numpy") is not None


def script_reseeded(info: dict[str, Any]) -> bool | None:
    """Whether the script seeded torch itself (torch.initial_seed() moved off ours)."""
    if info.get("seed") is None or "torch" not in info.get("seeded", ()):
        return None
    import torch

    return torch.initial_seed() != info["seed"] % 2**64
