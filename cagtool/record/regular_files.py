"""A record's files opened for reading, only as the regular files they must be.

A run directory can come from another host, another user or an untrusted pull request's CI
artifact: any file in it may be a symbolic link planted there (`ca/events.jsonl -> /etc/passwd`, a
graph file linking to another run) or a FIFO, whose open waits for a writer forever. Every read of
a record's file goes through here: no link is followed (O_NOFOLLOW), no FIFO or device is read
(opened without blocking, then refused on its fstat), no name with a NUL byte is opened, each
refused with one line (UnreadableInput, exit 3). Names inside a record are checked apart (loader.py, `inside`).

O_NOFOLLOW sees only a path's last name: a folder of the record swapped for a link between the
names' check and the open (`ca/graphs` renamed, `ca/graphs -> ~/.ssh` put in its place while a
report reads) would be read through. So a run's directory is registered when it is loaded
(`confine_reads`), and a file opened under it is kept only where the file it opened is under the
run's real path (its descriptor's path, /proc/self/fd): what is read is what was checked, whenever
the tree changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator

from cagtool.errors import UnreadableInput

_OPEN_RECORD_FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)

# A loaded run's directory as named (absolute) -> its real path: files opened under the one are
# kept only where they are under the other (confine_reads).
_ROOTS: dict[str, str] = {}


def confine_reads(root: Path | str) -> None:
    """From now on, a record file opened under `root` (as named: the path the user typed, which may
    itself be a link of theirs) is refused unless the file opened is under `root`'s real path."""
    named = os.path.abspath(root)
    _ROOTS.setdefault(named, os.path.realpath(named))


def _escaped(path: Path | str, fd: int) -> str | None:
    """Where the file open as `fd` really is, when `path` is under a registered root as named but
    that file is not under the root's real path (a folder swapped for a link meanwhile); else None.
    Unchecked where the system has no /proc."""
    if not _ROOTS:
        return None
    named = os.path.abspath(path)
    under = [real for root, real in _ROOTS.items() if named.startswith(root.rstrip(os.sep) + os.sep)]
    if not under:
        return None
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return next((opened for real in under if not opened.startswith(real.rstrip(os.sep) + os.sep)), None)


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
    except ValueError:  # a NUL byte in a name read from the record (a forged code_file): no file has one
        raise UnreadableInput(f"{str(path)!r} holds a NUL byte, which no file name can (a damaged or forged record); refusing to read it") from None
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
    if dir_fd is None and (elsewhere := _escaped(path, fd)) is not None:  # a walk by descriptor is confined already
        os.close(fd)
        raise UnreadableInput(f"{path} opened {elsewhere!r}, outside the run: a folder of the record was swapped for a link while "
                              "cagtool read it; a record's files are read only as regular files, never through a link")
    return fd


def _is_link(name: str | Path, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def read_record_bytes(path: Path, max_line: int | None = None, max_bytes: int | None = None, what: str = "JSON file") -> bytes:
    """The bytes of one of a record's files (open_record_file: never through a link, never a FIFO).

    `max_line`: the file is a stream of lines none longer than that (bytes, its newline left out).
    A file no longer than that is read whole, in one read; a longer one a chunk at a time, refused
    (UnreadableInput) as soon as a line is seen to be longer, with at most `max_line` bytes of that
    line read.

    `max_bytes`: the file is one document no larger than that (a record's JSON files:
    schema.MAX_JSON_FILE_BYTES); a larger one is refused (UnreadableInput) from its size, before
    any of it is read, and one that grows past it while read is refused after `max_bytes` + 1.
    `what` names the kind of file in that refusal ("JSON file", "text file")."""
    fd = open_record_file(path)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        if max_bytes is not None:
            size = os.fstat(handle.fileno()).st_size
            data = b"" if size > max_bytes else handle.read(size + 1)  # one read, as for max_line below
            if len(data) > size:  # it grew while read: the rest, up to one byte past the bound
                data += handle.read(max_bytes + 1 - len(data))
            if size > max_bytes or len(data) > max_bytes:
                raise UnreadableInput(f"{path} is {max(size, len(data)):,} bytes, more than any {what} cagtool writes "
                                      f"({max_bytes:,} at most: a damaged or forged file); refusing to read it")
            return data
        if max_line is None:
            return handle.read()
        size = os.fstat(handle.fileno()).st_size
        if size <= max_line:
            data = handle.read(size + 1)  # one read, as read() makes it: a regular file gives all it has
            if len(data) <= size:
                return data  # no line is longer than the whole file
            handle.seek(0)  # it grew while read: read it again, a chunk at a time
        # A line inside one chunk is no longer than the chunk, so only the line that runs on from
        # one chunk into the next is measured: one find and one rfind per chunk, in C.
        chunk_size = max(1, min(max_line, _CHUNK_BYTES))
        chunks: list[bytes] = []
        run_on = 0  # bytes since the last newline read
        while chunk := handle.read(chunk_size):
            first = chunk.find(b"\n")
            if (run_on + len(chunk) if first < 0 else run_on + first) > max_line:
                line = 1 + sum(c.count(b"\n") for c in chunks)
                raise UnreadableInput(f"{path}: line {line} is longer than {max_line:,} bytes, more than any event cagtool writes "
                                      "(a damaged or forged record); refusing to read it")
            run_on = run_on + len(chunk) if first < 0 else len(chunk) - 1 - chunk.rfind(b"\n")
            chunks.append(chunk)
        return b"".join(chunks)


_CHUNK_BYTES = 8 * 2**20


def read_record_prefix(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """The first `max_bytes` bytes of one of a record's files (open_record_file: never through a
    link, never a FIFO) and the file's size: for a reader that shows the start of a file and says
    how much it left out. At most `max_bytes` are read, whatever the size."""
    fd = open_record_file(path)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        chunks: list[bytes] = []
        got = 0
        while got < max_bytes and (chunk := handle.read(max_bytes - got)):  # a regular file gives all it has, in one read
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        return data, max(size, len(data))


def read_record_chunks(path: Path, chunk_bytes: int = _CHUNK_BYTES, max_bytes: int | None = None) -> Iterator[bytes]:
    """One of a record's files (open_record_file: never through a link, never a FIFO), a chunk at a
    time: for a reader that scans a file too large to hold whole (a TORCH_TRACE log). Ends after
    `max_bytes` when given."""
    fd = open_record_file(path)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        left = max_bytes
        while left is None or left > 0:
            chunk = handle.read(chunk_bytes if left is None else min(chunk_bytes, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk
