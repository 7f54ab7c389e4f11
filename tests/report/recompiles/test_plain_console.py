"""PlainConsole writes, off a terminal, exactly what rich's Console from make_console writes for the
same calls (the recompiles --explain text skips rich there: issue 12)."""

from __future__ import annotations

import io
import os
import random

import pytest

from cagtool.report.console import UNBOUNDED_WIDTH, make_console
from cagtool.report.console import PlainConsole
from cagtool.report.recompiles.render import print_line, print_wrapped

# What record data can put in a line: control codes rich drops or keeps, tabs, newlines, Unicode
# spaces (rich crops trailing whitespace past the width by str's idea of whitespace), wide and
# combining characters, markup-looking brackets.
ALPHABET = ["a", "b", "Z", "0", " ", "  ", "\t", "\n", "\r", "\x07", "\x08", "\x0b", "\x0c", "\x1b[1m", "\x00", "\x1c",
            "\xa0", "\u3000", "\u2028", "é", "e\u0301", "漢", "🙂", "[b]", "[/x]", ":smile:", "}", "-", "/"]


def _strings(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = ["", " ", "x" * 150, "x" * 99 + "   ", "y" * 40 + "\u3000\u3000", "No recompiles: every step after the first reused the cached graphs."]
    for _ in range(count):
        out.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 60))))
    return out


def _both(width: int | None, calls) -> tuple[str, str]:
    plain_out, rich_out = io.StringIO(), io.StringIO()
    plain = PlainConsole.where_plain(plain_out, width)
    assert plain is not None
    rich = make_console(rich_out, width=width)
    calls(plain)
    calls(rich)
    return plain_out.getvalue(), rich_out.getvalue()


@pytest.mark.parametrize("width", [100, 37, 8, None])
def test_lines_blank_lines_and_strings_are_written_as_rich_writes_them(width, monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)
    for text in _strings(150, seed=width or 0):
        def calls(console, text=text):
            print_line(console, text, style="bold")
            console.print()
            console.print(text)
            print_wrapped(console, text * 3, indent=2, style="bold")
        plain, rich = _both(width, calls)
        assert plain == rich, repr(text)


def test_the_width_is_make_consoles(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "61")
    assert PlainConsole.where_plain(io.StringIO()).width == make_console(io.StringIO()).width == 61
    monkeypatch.delenv("COLUMNS")
    assert PlainConsole.where_plain(io.StringIO()).width == make_console(io.StringIO()).width == UNBOUNDED_WIDTH


def test_rich_is_used_on_a_terminal_and_where_rich_is_told_to_treat_the_stream_as_one(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    leader, follower = os.openpty()
    try:
        with open(follower, "w", closefd=False) as tty:
            assert PlainConsole.where_plain(tty) is None
    finally:
        os.close(leader)
        os.close(follower)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert PlainConsole.where_plain(io.StringIO()) is None
    monkeypatch.delenv("FORCE_COLOR")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    assert PlainConsole.where_plain(io.StringIO()) is None
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert PlainConsole.where_plain(io.StringIO()) is not None
