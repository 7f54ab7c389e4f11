"""Consoles for rendering: colour only on a terminal, no wrapping off one (CI logs stay greppable),
and rich markup off: every string printed may carry record data (an exception text with `[b, c]`
or `[/x]`), so styles are given as `style=` or `Text`, never as markup in the string."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

# Off a terminal nothing is wrapped or cut: a line is as long as its text. Rich needs a width;
# this one is never reached by a report line, and tables only take the width their cells need.
UNBOUNDED_WIDTH = 100_000


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def is_unbounded(console: "Console") -> bool:
    """True for an off-terminal console: renderers that would stretch to the width (expand=True)
    must size to their content instead."""
    return console.width >= UNBOUNDED_WIDTH


def _stream(file: IO[str] | None, stderr: bool) -> IO[str]:
    return file if file is not None else (sys.stderr if stderr else sys.stdout)


def _is_tty(stream: IO[str]) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


def _off_terminal_width() -> int:
    # An explicit COLUMNS is a request for that width (shells do not export it by default).
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else UNBOUNDED_WIDTH


def make_console(file: IO[str] | None = None, width: int | None = None, stderr: bool = False) -> Console:
    """A rich console for reports. On a terminal: its width (or COLUMNS) and colour. Off a
    terminal (pipes, files, CI logs): colourless and, unless COLUMNS is set, unbounded, so no line
    is wrapped mid-phrase or cut with an ellipsis. `width` fixes it (golden tests)."""
    from rich.console import Console

    stream = _stream(file, stderr)
    is_tty = _is_tty(stream)
    if width is None and not is_tty:
        width = _off_terminal_width()
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


# Start-up (issue 12): rich.console and rich.table are ~40 ms of imports, more than `cagtool runs`
# spends on anything else. Where what rich would print is plain text laid out without wrapping,
# the two functions below write it themselves, byte for byte what the console from `make_console`
# prints (tests/test_plain_output.py compares them with rich); anything else goes to rich.


def _plain(text: str) -> bool:
    """Text that rich prints unchanged, one character per cell: printable ASCII (no tabs, no
    newlines, no control codes, no wide or combining characters)."""
    return text.isascii() and text.isprintable()


def _plain_width(stream: IO[str]) -> int | None:
    """The width `make_console` gives a console on `stream`, or None on a terminal (colour, bold
    headers: rich renders those)."""
    return None if _is_tty(stream) else _off_terminal_width()


def print_text(text: str, file: IO[str] | None = None) -> None:
    """`make_console(file).print(text)`: one line of text, no markup."""
    stream = _stream(file, False)
    width = _plain_width(stream)
    if width is not None and len(text) <= width and _plain(text):
        stream.write(text + "\n")
        stream.flush()
        return
    make_console(file).print(text)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], file: IO[str] | None = None) -> None:
    """A borderless table of left-aligned text columns, as `make_console(file)` prints
    `Table(box=None, pad_edge=False)` whose columns fold (`overflow="fold"`): each column as wide
    as its widest cell, two spaces between columns, every cell padded to its column's width."""
    stream = _stream(file, False)
    width = _plain_width(stream)
    if width is not None and all(len(row) == len(headers) for row in rows):
        cells = [list(headers), *(list(row) for row in rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
        if headers and all(widths) and sum(widths) + 2 * (len(widths) - 1) <= width and all(_plain(c) for row in cells for c in row):
            lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in cells]
            stream.write("\n".join(lines) + "\n")
            stream.flush()
            return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    make_console(file).print(table)
