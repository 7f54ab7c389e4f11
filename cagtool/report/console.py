"""Consoles for rendering: colour only on a terminal, a fixed width when asked (tests, CI logs)."""

from __future__ import annotations

import os
import sys
from typing import IO

from rich.console import Console


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def make_console(file: IO[str] | None = None, width: int | None = None, stderr: bool = False) -> Console:
    """A rich console for reports. Width comes from COLUMNS or the terminal; when the output is
    not a terminal it is 100 columns, colourless, so CI logs and pipes stay readable."""
    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    is_tty = hasattr(stream, "isatty") and stream.isatty()
    if width is None and not is_tty:
        width = int(os.environ.get("COLUMNS", "100"))
    return Console(
        file=stream,
        width=width,
        no_color=not is_tty or "NO_COLOR" in os.environ,
        color_system="auto" if is_tty else None,
        highlight=False,
        soft_wrap=False,
        emoji=False,
    )
