"""What a run is named after: the user's script, also when a launcher module ran it.

`cagtool run -m torch.distributed.run --nproc-per-node 2 train.py` records the module
`torch.distributed.run` as its target; the job is train.py, and every name a person reads (the
run directory's label, the report's title) is the script's. Shared by the capture, which names the
run directory, and the reports, which read the recorded target back.
"""

from __future__ import annotations

import os
from typing import Sequence

LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def launched_script(kind: str, name: str, args: Sequence[str]) -> str | None:
    """The script a launcher module was told to run (its first `.py` argument), else None."""
    if kind != "module" or name not in LAUNCHER_MODULES:
        return None
    return next((a for a in args if a.endswith(".py")), None)


def target_label(kind: str, name: str, args: Sequence[str]) -> str:
    """A short name: the script's stem, or a module's last part (`train`, `run`)."""
    script = launched_script(kind, name, args)
    if script is not None:
        return os.path.splitext(os.path.basename(script))[0]
    return os.path.splitext(os.path.basename(name))[0] if kind == "script" else name.rsplit(".", 1)[-1]


def target_title(target: dict[str, str], argv: Sequence[str]) -> str:
    """The target as a person named it: the script path as given (the launched one under a
    launcher module), or the module's name. `argv` is the target's sys.argv as recorded."""
    kind, name = target.get("kind", ""), target.get("name", "?")
    return launched_script(kind, name, list(argv)[1:]) or name
