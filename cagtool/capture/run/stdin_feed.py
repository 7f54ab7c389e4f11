"""Every mode reads the same stdin, as `python train.py < data` would give it once.

- a terminal, /dev/null or another character device: each mode inherits it (reads it live);
- a regular file: each mode starts reading at the offset cagtool found it at;
- a pipe or socket with one mode: inherited as is;
- a pipe or socket with several modes: the bytes are kept (in an anonymous temporary file) as the
  first mode reads them, and given again to each later mode, which then goes on reading the real
  stdin where the earlier modes stopped. Nothing is read ahead of what a mode asks for, beyond one
  pipe buffer, so a script that never reads stdin never waits for it.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading

_CHUNK = 65536


class StdinFeed:
    def __init__(self, mode_count: int) -> None:
        self.kind = "inherit"
        self._offset = 0
        self._spool: int | None = None
        self._spooled = 0
        self._eof = False
        self._read_lock = threading.Lock()
        try:
            st = os.fstat(0)
        except OSError:
            return  # no stdin at all: the modes have none either
        if stat.S_ISREG(st.st_mode):
            try:
                self._offset = os.lseek(0, 0, os.SEEK_CUR)
                self.kind = "file"
            except OSError:
                pass
        elif (stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)) and mode_count > 1:
            self.kind = "replay"
            handle = tempfile.TemporaryFile(prefix="cagtool-stdin-")
            self._spool = os.dup(handle.fileno())
            handle.close()

    def for_mode(self) -> "ModeStdin":
        """Before starting a mode process: its stdin. The mode process may be started before its
        turn (orchestrate.py); nothing is read or rewound for it until `ModeStdin.start()`."""
        if self.kind != "replay":
            return ModeStdin(self, None)
        read_fd, write_fd = os.pipe()
        return ModeStdin(self, read_fd, write_fd)

    def _rewind(self) -> None:
        if self.kind == "file":
            os.lseek(0, self._offset, os.SEEK_SET)

    def _next_chunk(self, pos: int) -> bytes:
        assert self._spool is not None
        while True:
            if pos < self._spooled:
                return os.pread(self._spool, min(_CHUNK, self._spooled - pos), pos)
            if self._eof:
                return b""
            with self._read_lock:  # one reader of the real stdin at a time
                if pos < self._spooled or self._eof:
                    continue
                try:
                    chunk = os.read(0, _CHUNK)
                except OSError:
                    chunk = b""
                if not chunk:
                    self._eof = True
                    return b""
                # Kept before it is handed on: if this mode has gone, the next one still gets it.
                os.pwrite(self._spool, chunk, self._spooled)
                self._spooled += len(chunk)

    def _pump(self, write_fd: int) -> None:
        pos = 0
        try:
            while True:
                chunk = self._next_chunk(pos)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    written = os.write(write_fd, view)
                    view = view[written:]
                pos += len(chunk)
        except OSError:
            pass  # the mode closed its stdin or ended
        finally:
            os.close(write_fd)


class ModeStdin:
    """One mode process's stdin: `fd` to give it (None: it inherits cagtool's; the caller closes fd
    once the process has started); `start()` when its script may run, `drop()` if it never will."""

    def __init__(self, feed: StdinFeed, fd: int | None, write_fd: int | None = None) -> None:
        self.fd = fd
        self._feed = feed
        self._write_fd = write_fd

    def start(self) -> None:
        """A regular file is rewound to where cagtool found it (the modes share its offset); a
        replayed pipe starts being fed."""
        self._feed._rewind()
        if self._write_fd is not None:
            threading.Thread(target=self._feed._pump, args=(self._write_fd,), name="cagtool-stdin", daemon=True).start()
            self._write_fd = None

    def drop(self) -> None:
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None
