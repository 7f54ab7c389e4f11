"""A record's files opened for reading, only as the regular files they must be.

A run directory can come from another host, another user or an untrusted pull request's CI
artifact: any file in it may be a symbolic link planted there (`ca/events.jsonl -> /etc/passwd`, a
graph file linking to another run) or a FIFO, whose open waits for a writer forever. Every read of
a record's file goes through here: no link is followed (O_NOFOLLOW), no FIFO or device is read
(opened without blocking, then refused on its fstat), each refused with one line (UnreadableInput,
exit 3). Names inside a record are checked apart (loader.py, `inside`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cagtool.errors import UnreadableInput

_OPEN_RECORD_FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def open_record_file(path: Path, dir_fd: int | None = None) -> int:
    """A file descriptor of one of a record's files, opened only as the regular file it must be:
    a symbolic link there (a record's file planted as a link to /etc/passwd, or to another run) is
    refused, not followed, and so is a FIFO or a device (opened without waiting for a writer, so a
    FIFO never hangs the reader). UnreadableInput for those; OSError (FileNotFoundError...) as
    os.open raises it otherwise. The caller closes it.

    `dir_fd`: `path`'s folder, already open (a walk by descriptor): its last name is opened there,
    so a folder on the way swapped for a link meanwhile is never followed; `path` names it in errors."""
    name = Path(path).name if dir_fd is not None else path
    try:
        fd = os.open(name, _OPEN_RECORD_FILE, dir_fd=dir_fd)
    except OSError as exc:
        if _is_link(name, dir_fd):
            raise UnreadableInput(f"{path} is a symbolic link; a record's files are read only as regular files, never through a link") from None
        raise exc
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnreadableInput(f"{path} is not a regular file (a FIFO, device or directory); refusing to read it")
    return fd


def _is_link(name: str | Path, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def read_record_bytes(path: Path) -> bytes:
    """The bytes of one of a record's files (open_record_file: never through a link, never a FIFO)."""
    fd = open_record_file(path)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()
