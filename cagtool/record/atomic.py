"""Files that are replaced whole or not at all, and a lock for read-modify-write updates."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Replace `path` with `data` (str: UTF-8), or leave the old file as it was: a reader sees the
    previous content or this one, never half of one. The temporary file beside it is this
    writer's own (pid and random part: two processes writing the same file never share one) and
    is removed when the write fails (a partial one would only take more of a full disk)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(tmp, "xb") as handle:
            handle.write(payload)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def locked(path: Path | str) -> Iterator[None]:
    """Hold an exclusive lock on `<path>.lock` (created beside `path`, kept there): two processes
    that read `path`, change it and write it back one after the other, never interleaved. Where
    the platform has no flock, the block runs unlocked."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    lock_path = Path(path).with_name(Path(path).name + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
