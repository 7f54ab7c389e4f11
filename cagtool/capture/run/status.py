"""The live status line on a terminal (step, graphs so far, what is compiling and since when). Silent when
stderr is not a terminal or CI=true, so logs get no control characters.

The line is drawn on the terminal itself, never by capturing the script's streams: the bottom
row is kept out of the terminal's scroll region (DECSTBM), so everything the script writes (to
stdout or stderr, from Python, C or a subprocess) scrolls above it, and `> out.txt` gets exactly
the script's stdout. Each redraw is one write() that saves the cursor, draws on the bottom row
and restores the cursor, so it never lands inside the script's output.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

_SAVE, _RESTORE = "\x1b7", "\x1b8"
_RESET_REGION = "\x1b[r"


def status_enabled() -> bool:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return False
    if os.environ.get("TERM", "") == "dumb":
        return False
    try:
        return os.isatty(sys.stderr.fileno())
    except (AttributeError, ValueError, OSError):
        return False


def restore_terminal() -> None:
    """After a mode process ended, however it ended (a SIGKILLed one could not tidy up): give the
    terminal its full scroll region back. Harmless when no status was drawn."""
    if status_enabled():
        try:
            os.write(sys.stderr.fileno(), (_SAVE + _RESET_REGION + _RESTORE).encode())
        except OSError:
            pass


class LiveStatus:
    """The status on the terminal's bottom row, redrawn 4 times a second by a daemon thread;
    cleared when the run ends.

    `probe()` says what to show: `step`, `graphs` (CA graphs so far) and `compiling`, the compile in
    progress (compiling_now.Compiling, stamped with the same `clock`) or None. The drawing thread
    only reads what the job's threads noted: it calls nothing in torch."""

    def __init__(self, label: str, probe: Callable[[], dict[str, Any]], interval_s: float = 0.25,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.label = label
        self.probe = probe
        self.interval_s = interval_s
        self.clock = clock
        self.start = clock()
        self._fd: int | None = None
        self._rows = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def text(self) -> str:
        info = self.probe()
        now = self.clock()
        line = f"cagtool {self.label}: step {info.get('step') or 0}  CA graphs {info.get('graphs', 0)}  {now - self.start:6.1f}s"
        compiling = info.get("compiling")
        if compiling is not None:
            # whole seconds: the line is redrawn 4 times a second, and a compile worth showing is long
            line += f"  {compiling.verb} {compiling.what} [{compiling.compile_id}] since {int(max(now - compiling.started, 0.0))}s"
        return line

    def _write(self, text: str) -> None:
        if self._fd is not None:
            try:
                os.write(self._fd, text.encode("utf-8", "replace"))
            except OSError:
                self._stop.set()  # the terminal went away: stop drawing, never fail the run

    def _set_region(self) -> int:
        rows = os.get_terminal_size(self._fd).lines
        if rows != self._rows:
            self._rows = rows
            # Save/restore around it: setting the region moves the cursor to the top left.
            self._write(f"{_SAVE}\x1b[1;{rows - 1}r{_RESTORE}")
        return rows

    def _draw(self) -> None:
        try:
            size = os.get_terminal_size(self._fd)
            self._set_region()
            line = self.text()[: max(size.columns - 1, 0)]
        except Exception:  # noqa: BLE001 - a status line must never break the run
            return
        self._write(f"{_SAVE}\x1b[{size.lines};1H\x1b[2K\x1b[2m{line}\x1b[0m{_RESTORE}")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._draw()

    def __enter__(self) -> "LiveStatus":
        try:
            self._fd = os.dup(sys.stderr.fileno())  # the script may replace or close sys.stderr
            if os.get_terminal_size(self._fd).lines < 3:
                raise OSError("terminal too small")
        except OSError:
            self._fd = None
            return self
        # Make room: a new line, then back up, so a cursor on the bottom row ends inside the region.
        self._write("\n\x1b[1A")
        self._set_region()
        self._draw()
        self._thread = threading.Thread(target=self._loop, name="cagtool-status", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._fd is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self._write(f"{_SAVE}{_RESET_REGION}\x1b[{self._rows};1H\x1b[2K{_RESTORE}")
        os.close(self._fd)
        self._fd = None
