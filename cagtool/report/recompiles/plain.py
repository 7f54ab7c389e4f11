"""The recompiles text renderers' output to a colourless stream (a pipe, a file, CI), without rich.

Off a terminal the console `make_console` gives has no colour and no style: what rich writes
for a line of text is the text itself, with its control codes dropped. `PlainConsole` writes
exactly that, so `recompiles --explain | less` neither imports rich nor lays out through it
(about 40 ms of the command's 0.25 s CPU on a 100,000-event record, issue 12). What it does not
reproduce exactly itself (tabs, several lines, a line longer than the width, a table) it hands to a rich Console made, on
first use, as `make_console` makes it for the same stream; on a terminal, or where rich's own
environment switches would make it treat the stream as one, the renderers get rich's Console.
"""

from __future__ import annotations

import builtins
import os
from typing import IO, TYPE_CHECKING, Any

from cagtool.report.console import UNBOUNDED_WIDTH

if TYPE_CHECKING:
    from rich.console import Console

# What rich's Text drops from every string (rich.control.STRIP_CONTROL_CODES: bell, backspace,
# vertical tab, form feed, carriage return), as a str.translate table.
_DROPPED = dict.fromkeys((7, 8, 11, 12, 13))


class PlainConsole:
    """The part of rich's Console the recompiles renderers use (`width`, `print`, and `line` for
    `print(Text(text), soft_wrap=True)`), writing straight to a colourless stream."""

    def __init__(self, file: IO[str], width: int) -> None:
        self.file = file
        self.width = width
        self._rich: Console | None = None

    @classmethod
    def where_plain(cls, file: IO[str], width: int | None = None) -> PlainConsole | None:
        """A PlainConsole for `file` when rich would write it no colour, no style and no terminal
        control (what make_console(file, width) gives off a terminal); None otherwise."""
        if hasattr(file, "isatty") and file.isatty():
            return None
        environ = os.environ
        # rich's own switches that make it treat any stream as a terminal, and a notebook (rich
        # displays there instead of writing to the stream).
        if environ.get("TTY_COMPATIBLE") == "1" or environ.get("FORCE_COLOR") or hasattr(builtins, "get_ipython"):
            return None
        if width is None:  # make_console's width off a terminal
            columns = environ.get("COLUMNS", "")
            width = int(columns) if columns.isdigit() and int(columns) > 0 else UNBOUNDED_WIDTH
        return cls(file, width)

    def line(self, text: str) -> None:
        """What `print(Text(text), soft_wrap=True)` writes: the text without the control codes rich
        drops. Tab stops, several lines, and a line longer than the width (rich 13 crops its trailing
        whitespace there, rich 15 does not) are left to rich."""
        plain = text.translate(_DROPPED)
        if "\t" in plain or "\n" in plain or len(plain) > self.width:
            from rich.text import Text

            self.rich().print(Text(text), soft_wrap=True)
            return
        self._write(plain + "\n")

    def print(self, *objects: Any, **options: Any) -> None:
        """A blank line, or a printable ASCII string that fits the width (nothing to wrap), written
        here; anything else printed by rich."""
        if not options and not objects:
            self._write("\n")
            return
        if not options and len(objects) == 1 and isinstance(objects[0], str):
            text = objects[0]
            if text.isascii() and text.isprintable() and len(text) <= self.width:
                self._write(text + "\n")
                return
        self.rich().print(*objects, **options)

    def rich(self) -> Console:
        """The rich Console make_console would have given for this stream."""
        if self._rich is None:
            from cagtool.report.console import make_console

            self._rich = make_console(self.file, width=self.width)
        return self._rich

    def _write(self, text: str) -> None:
        try:
            self.file.write(text)
        except UnicodeEncodeError as error:  # the hint rich adds to the same error
            error.reason = f"{error.reason}\n*** You may need to add PYTHONIOENCODING=utf-8 to your environment ***"
            raise
