"""Which process of a job a mode record belongs to: the `process` field of its manifest and the
key of its directory (`main`, `rank<N>`, `pid<PID>`; PROTOCOL layout in record/schema.py)."""

from __future__ import annotations

import os
import sys
from typing import Any

from cagtool.record.liveness import this_process

ROLE_MAIN = "main"
ROLE_CHILD = "child"


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    try:
        return int(value)
    except ValueError:
        return None


def rank_from_env() -> int | None:
    """torchrun sets RANK for its workers (the launcher itself has none)."""
    return _env_int("RANK")


def attempt_from_env() -> int:
    """Which start of this worker by torchrun (TORCHELASTIC_RESTART_COUNT): 0 the first, 1 after
    one restart (--max-restarts); 0 outside torchrun."""
    attempt = _env_int("TORCHELASTIC_RESTART_COUNT")
    return attempt if attempt is not None and attempt > 0 else 0


def child_key(rank: int | None, pid: int | None = None, attempt: int = 0) -> str:
    """`rank<N>`, `rank<N>.attempt<K>` for a restarted worker's K-th restart, else `pid<PID>`."""
    if rank is None:
        return f"pid{pid if pid is not None else os.getpid()}"
    return f"rank{rank}" if attempt <= 0 else f"rank{rank}.attempt{attempt}"


def process_info(role: str, key: str, argv: list[str] | None = None, rank: int | None = None) -> dict[str, Any]:
    """The manifest's `process` dict. `rank` overrides the environment (known from the process group)."""
    return {
        "key": key,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "rank": rank if rank is not None else rank_from_env(),
        "local_rank": _env_int("LOCAL_RANK"),
        "world_size": _env_int("WORLD_SIZE"),
        "attempt": attempt_from_env(),
        "role": role,
        "argv": list(sys.argv if argv is None else argv),
        # hostname and start_ticks: a reader can tell this process died without closing the record
        # (record/liveness.py), e.g. a rank the OOM killer took while the job went on.
        **{k: v for k, v in this_process().items() if k != "pid"},
    }
