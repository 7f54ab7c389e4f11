"""The files of the job's working directory a process opened for reading: what tells a mode that
resumed from an earlier mode's files (a checkpoint it loads) from one that only found them there.

Every mode runs in the same working directory, and the files an earlier mode wrote there are listed
before each later one (capture/run/workdir.py). A file being there is no evidence that the job read
it: pytorch/examples' siamese network saves its model at its end and never loads it, and its modes'
first losses differed for another reason (`--seed off`). A `sys.addaudithook` sees each `open`
(builtins.open, io.open_code, os.open: the `open` audit event, with the path and the mode or flags)
in the process; the ones for reading of a file under the directory the process started in are
kept, by relative path, up to MAX_KEPT. Python source and bytecode (imports) are left out, and so
is a file last modified after the hook was installed: one this mode wrote itself before reading it
(pytorch/examples' word language model saves its best model each epoch and loads it at its end),
whatever wrote it (torch.save to a path writes from C++, with no audit event). The kernel stamps a
file from a clock that never runs ahead of `time.time_ns()`, so an earlier mode's file, written
before this process started, is always older than the hook.

What it cannot see: a file native code opens itself (safetensors' Rust reader, HDF5's C library)
raises no audit event. The comparison reads the absence of a read as evidence only where none of
the files is of such a kind (report/compare/analysis.py, `Numerics.resumed`).
"""

from __future__ import annotations

import os
import sys
import time
from stat import S_ISREG
from typing import Any

from cagtool.record.manifest import WORKDIR_READS_KEPT as MAX_KEPT

_SOURCE = (".py", ".pyc", ".pyi", ".pth", ".so")
_WRITE_ONLY = os.O_WRONLY

_reads: set[str] | None = None  # None: not watched in this process


def install() -> None:
    """Watch this process's reads under its working directory, for the rest of its life (audit
    hooks cannot be removed; a forked child keeps the parent's hook and what it saw)."""
    global _reads
    if _reads is not None:
        return
    reads: set[str] = set()
    _reads = reads
    try:
        root = os.path.abspath(os.getcwd())
    except OSError:
        return
    prefix = root.rstrip(os.sep) + os.sep
    installed = time.time_ns()
    # What the hook's first test reads is held here: it runs for every audit event until the
    # process ends, also while the interpreter clears the modules' globals at exit.
    fspath, abspath, isabs, join, getcwd, stat, is_regular = os.fspath, os.path.abspath, os.path.isabs, os.path.join, os.getcwd, os.stat, S_ISREG

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "open" or len(reads) >= MAX_KEPT:
            return
        try:
            path, mode, flags = args
            if isinstance(path, int) or path is None:
                return  # a file descriptor: opened before
            if mode is None:  # os.open
                if (flags & os.O_ACCMODE) == _WRITE_ONLY:
                    return
            elif "r" not in mode and "+" not in mode:
                return
            path = fspath(path)
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if path.endswith(_SOURCE):
                return
            full = path if isabs(path) else join(getcwd(), path)
            full = abspath(full)
            if full.startswith(prefix):
                found = stat(full)  # raises for a name a loader tried (`<eval_with_key>.0`)
                if is_regular(found.st_mode) and found.st_mtime_ns < installed:  # not rewritten by this mode
                    reads.add(full[len(prefix):])
        except Exception:  # noqa: BLE001 - the job's open goes on whatever happens here
            pass

    sys.addaudithook(hook)


def reads() -> list[str] | None:
    """The relative paths read so far, sorted; None where this process was not watched."""
    return None if _reads is None else sorted(_reads)
