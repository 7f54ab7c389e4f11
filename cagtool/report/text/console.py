"""Consoles for rendering: colour only on a terminal, no wrapping off one (CI logs stay greppable),
and rich markup off: every string printed may carry record data (an exception text with `[b, c]`
or `[/x]`), so styles are given as `style=` or `Text`, never as markup in the string. For the same
reason every text these consoles write passes `safe_line` (escape sequences, control characters,
lone surrogates, line breaks), whichever renderer made it: a string or Text printed is one line,
so record data in it cannot start a line of its own (in a CI log, a line of its own may be a
workflow command, `::error::`); a renderer that means several lines prints each. A table measures
a Text cell before it is printed: a renderer escapes a Text cell's record data itself, or passes a
string (which rich turns into Text here, so it is measured as printed). Where a narrow console folds
a long word, no line it writes begins with `::` either (`_NoCommandAtLineStart`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from functools import cache
from typing import IO, TYPE_CHECKING, Any

from cagtool.report.text.safe_text import IN_LINE_COMMANDS, escape_line_starts, no_command_in_line, safe_line

if TYPE_CHECKING:
    from rich.console import Console

# Off a terminal nothing is wrapped or cut: a line is as long as its text. Rich needs a width;
# this one is never reached by a report line, and tables only take the width their cells need.
UNBOUNDED_WIDTH = 100_000


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


@cache
def _safe_console_class() -> type[Console]:
    from rich.console import Console
    from rich.text import Text

    class SafeConsole(Console):
        """A rich Console whose text is `safe_line`: strings as rich turns them into Text (so a
        table measures what it will print), and Text objects made by a renderer, rebuilt with
        their styles where they hold something unsafe or a line break. Rich's own styles are
        rendered after this, so colour on a terminal is kept."""

        def render_str(self, text: str, **options: Any) -> Text:
            return super().render_str(safe_line(text), **options)

        def render(self, renderable: Any, options: Any = None) -> Any:
            if isinstance(renderable, Text) and not _one_safe_line(renderable.plain):
                renderable = _safe_rich_text(self, renderable)
            return super().render(renderable, options)

    return SafeConsole


def _one_safe_line(text: str) -> bool:
    # Printable ASCII needs nothing of safe_line but where a `::` may begin a wrapped line, or a `##[` or `##vso[` stands.
    return (text.isascii() and text.isprintable() and "::" not in text and "##" not in text) or safe_line(text) == text


def _safe_rich_text(console: Console, text: Any) -> Any:
    """A copy of the rich Text `text` with each styled piece made safe (escape sequences are cut
    out per piece: a sequence split across two styles is shown, not obeyed)."""
    from rich.text import Text

    pieces = [(safe_line(segment.text), segment.style) for segment in text.render(console) if segment.text]
    return Text.assemble(*pieces, justify=text.justify, overflow=text.overflow, no_wrap=text.no_wrap, end=text.end, tab_size=text.tab_size)


_LONGEST_IN_LINE = max(map(len, IN_LINE_COMMANDS))


class _NoCommandAtLineStart:
    """The stream a report console writes to, with a `::` where a line begins (past its leading
    whitespace) shown as `:\\:`, as safe_text shows it. safe_line escapes a `::` after a space,
    where rich wraps a line; rich also folds a word longer than the width anywhere in it (a cell,
    a path to copy), and a forged value `aaaa...a::error::x` can be made to fold right before its
    `::`: no text escape can know where that will be, the written lines can. The commands a runner
    reads anywhere in a line (`##[`, Azure's `##vso[`) are escaped here too, whatever wrote them,
    a write's end that may begin one held until the next write says."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._at_head = True  # the line written so far is whitespace only (or nothing)
        self._held = ""  # a `:` that may begin a command, held until what follows it is known

    def write(self, text: str) -> int:
        if not text:
            return 0
        joined = no_command_in_line(self._held + text)
        self._held = tail = ""
        if "#" in joined[-_LONGEST_IN_LINE:]:
            for size in range(_LONGEST_IN_LINE - 1, 0, -1):
                if any(command.startswith(joined[-size:]) for command in IN_LINE_COMMANDS):
                    tail, joined = joined[-size:], joined[:-size]
                    break
        joined = escape_line_starts(joined, self._at_head)
        line = joined[max(joined.rfind("\n"), joined.rfind("\u2028"), joined.rfind("\u2029")) + 1 :]
        if len(line) < len(joined):
            self._at_head = True
        if self._at_head:
            stripped = line.rstrip(":")
            if line[len(stripped):] == ":" and stripped.isspace() or line == ":":
                self._held, joined = ":", joined[:-1]
            self._at_head = line.isspace() or not line or bool(self._held)
        self._held += tail
        self._stream.write(joined)
        return len(text)

    def flush(self) -> None:
        if self._held:
            self._stream.write(self._held)
            self._held = ""
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's
        return getattr(self._stream, name)


def make_console(file: IO[str] | None = None, width: int | None = None, stderr: bool = False) -> Console:
    """A rich console for reports. On a terminal: its width (or COLUMNS) and colour. Off a
    terminal (pipes, files, CI logs): colourless and, unless COLUMNS is set, unbounded, so no line
    is wrapped mid-phrase or cut with an ellipsis. `width` fixes it (golden tests). Record text is
    shown as text, one line per string or Text printed (`safe_line`)."""
    stream = _stream(file, stderr)
    is_tty = _is_tty(stream)
    if width is None and not is_tty:
        width = _off_terminal_width()
    return _safe_console_class()(
        file=_NoCommandAtLineStart(stream),
        width=width,
        no_color=not is_tty or "NO_COLOR" in os.environ,
        color_system="auto" if is_tty else None,
        highlight=False,
        markup=False,
        soft_wrap=width == UNBOUNDED_WIDTH,
        emoji=False,
    )


def print_text(text: str, file: IO[str] | None = None) -> None:
    """One line of text, no markup."""
    make_console(file).print(text)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], file: IO[str] | None = None) -> None:
    """A borderless table of left-aligned text columns that fold (never "…": a cell may be a path
    to copy), each column as wide as its widest cell where the width allows."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    make_console(file).print(table)
