"""Consoles for rendering: colour only on a terminal, no wrapping off one (CI logs stay greppable),
and rich markup off: every string printed may carry record data (an exception text with `[b, c]`
or `[/x]`), so styles are given as `style=` or `Text`, never as markup in the string."""

from __future__ import annotations

import os
import sys
from typing import IO

from rich.console import Console

# Off a terminal nothing is wrapped or cut: a line is as long as its text. Rich needs a width;
# this one is never reached by a report line, and tables only take the width their cells need.
UNBOUNDED_WIDTH = 100_000


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def is_unbounded(console: Console) -> bool:
    """True for an off-terminal console: renderers that would stretch to the width (expand=True)
    must size to their content instead."""
    return console.width >= UNBOUNDED_WIDTH


def make_console(file: IO[str] | None = None, width: int | None = None, stderr: bool = False) -> Console:
    """A rich console for reports. On a terminal: its width (or COLUMNS) and colour. Off a
    terminal (pipes, files, CI logs): colourless and, unless COLUMNS is set, unbounded, so no line
    is wrapped mid-phrase or cut with an ellipsis. `width` fixes it (golden tests)."""
    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    is_tty = hasattr(stream, "isatty") and stream.isatty()
    if width is None and not is_tty:
        # An explicit COLUMNS is a request for that width (shells do not export it by default).
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else UNBOUNDED_WIDTH
    return Console(
        file=stream,
        width=width,
        no_color=not is_tty or "NO_COLOR" in os.environ,
        color_system="auto" if is_tty else None,
        highlight=False,
        markup=False,
        soft_wrap=width == UNBOUNDED_WIDTH,
        emoji=False,
    )
