"""report/console.py's plain writers (print_text, print_table, PlainConsole) print byte for byte
what rich prints on the same console, and they, like the side-by-side diff table, skip rich
exactly where `plain_width` says rich writes plain text (they exist to spare `cagtool runs` and
`recompiles --explain` the import of rich, issue 12)."""

from __future__ import annotations

import builtins
import io
import os
import random
import string
import subprocess
import sys

import pytest
from rich.table import Table

from cagtool.report.console import UNBOUNDED_WIDTH, make_console, plain_width, print_table, print_text, prints_plain

HEADERS = ("run", "created", "target", "modes", "exit")


def _assert_tables_match_rich(rng: random.Random, tables: int, most_rows: int) -> None:
    """print_table and rich print the same text for `tables` random tables of up to `most_rows` rows."""
    for _ in range(tables):
        rows = [tuple(random_cell(rng) for _ in HEADERS) for _ in range(rng.randint(0, most_rows))]
        plain, reference = io.StringIO(), io.StringIO()
        print_table(HEADERS, rows, file=plain)
        rich_table(HEADERS, rows, reference)
        assert plain.getvalue() == reference.getvalue(), rows


def rich_table(headers, rows, file) -> None:
    """What `cagtool runs` printed before the plain writer: the reference."""
    table = Table(box=None, pad_edge=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    make_console(file).print(table)


def random_cell(rng: random.Random) -> str:
    shape = rng.random()
    if shape < 0.1:
        return ""
    if shape < 0.2:
        return " " * rng.randint(1, 3) + "x" + " " * rng.randint(0, 3)  # leading and trailing spaces
    if shape < 0.3:
        return "[b]not markup[/b] :smile: 0x1f http://a.b/c 1.5e3 None True"  # nothing rich would style or replace
    return "".join(rng.choice(string.printable[:95]) for _ in range(rng.randint(1, 40)))


@pytest.mark.parametrize("columns", [None, "200", "60", "20"])
def test_print_table_matches_rich(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    _assert_tables_match_rich(random.Random(12), tables=150, most_rows=6)


@pytest.mark.parametrize(
    "cell",
    ["wide 表 characters", "tab\there", "two\nlines", "carriage\rreturn", "bell\x07", "é combining e\u0301", "x" * 300],
)
@pytest.mark.parametrize("columns", [None, "80"])
def test_print_table_hands_what_it_cannot_lay_out_to_rich(monkeypatch, cell, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    rows = [("runs/a", "2026-01-01T00:00:00Z", cell, "ca:finished", "0"), ("runs/b", cell, "t.py", "eager:killed", "None")]
    plain, reference = io.StringIO(), io.StringIO()
    print_table(HEADERS, rows, file=plain)
    rich_table(HEADERS, rows, reference)
    assert plain.getvalue() == reference.getvalue()


def test_print_table_exact_layout(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    print_table(("a", "long header"), [("value", "x"), ("", "yy")], file=out)
    assert out.getvalue() == "a      long header\nvalue  x          \n       yy         \n"


@pytest.mark.parametrize("columns", [None, "30", "62", "63", "64"])
@pytest.mark.parametrize(
    "text",
    [
        "no runs under .cagtool/runs; record one with: cagtool run train.py",
        "no runs under /tmp/[b]x[/b]  two  spaces ; record one",
        "no runs under /tmp/wide 表; record one",
        "no runs under /tmp/tab\there",
        "  no runs under /tmp/ending in spaces  ; record one   ",
    ],
)
def test_print_text_matches_rich(monkeypatch, columns, text):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    plain, reference = io.StringIO(), io.StringIO()
    print_text(text, file=plain)
    make_console(reference).print(text)
    assert plain.getvalue() == reference.getvalue()


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_rich_renders_the_table(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    plain, reference = FakeTerminal(), FakeTerminal()
    rows = [("runs/a", "2026-01-01T00:00:00Z", "t.py", "ca:finished", "0")]
    print_table(HEADERS, rows, file=plain)
    rich_table(HEADERS, rows, reference)
    assert plain.getvalue() == reference.getvalue()
    assert "\x1b[1m" in plain.getvalue()  # the bold header only rich draws: the plain writer stood aside


@pytest.mark.parametrize("margin", [-1, 0, 1])
def test_plain_writers_at_the_width_boundary(monkeypatch, margin):
    # A table or line exactly as wide as COLUMNS, one narrower, one wider (rich folds that one).
    rows = [("runs/train-1", "2026-01-01T00:00:00Z", "train.py", "eager:finished, ca:finished", "0")]
    table_width = sum(max(len(h), len(c)) for h, c in zip(HEADERS, rows[0])) + 2 * (len(HEADERS) - 1)
    monkeypatch.setenv("COLUMNS", str(table_width + margin))
    plain, reference = io.StringIO(), io.StringIO()
    print_table(HEADERS, rows, file=plain)
    rich_table(HEADERS, rows, reference)
    assert plain.getvalue() == reference.getvalue()
    text = "no runs under some/where; record one with: cagtool run train.py"
    monkeypatch.setenv("COLUMNS", str(len(text) + margin))
    plain, reference = io.StringIO(), io.StringIO()
    print_text(text, file=plain)
    make_console(reference).print(text)
    assert plain.getvalue() == reference.getvalue()


def test_one_rule_decides_where_rich_is_skipped(monkeypatch):
    """plain_width is the decision; prints_plain and print_text / print_table (below, in a
    process of their own) follow it."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.setenv("COLUMNS", "61")

    def agree(stream) -> int | None:
        width = plain_width(stream)
        assert prints_plain(make_console(stream)) == (width is not None)
        return width

    assert agree(io.StringIO()) == make_console(io.StringIO()).width == 61
    monkeypatch.delenv("COLUMNS")
    assert agree(io.StringIO()) == make_console(io.StringIO()).width == UNBOUNDED_WIDTH
    assert plain_width(io.StringIO(), 37) == 37
    leader, follower = os.openpty()
    try:
        with open(follower, "w", closefd=False) as tty:
            assert agree(tty) is None
    finally:
        os.close(leader)
        os.close(follower)
    # rich's switches that make it treat any stream as a terminal: make_console's console off a
    # terminal still has no colour system (the writers' text under them: the test below)
    for name, value in [("FORCE_COLOR", "1"), ("FORCE_COLOR", ""), ("TTY_COMPATIBLE", "1"), ("TTY_COMPATIBLE", "0")]:
        monkeypatch.setenv(name, value)
        assert agree(io.StringIO()) == UNBOUNDED_WIDTH, (name, value)
        monkeypatch.delenv(name)
    # a notebook: rich displays there instead of writing to the stream
    monkeypatch.setattr(builtins, "get_ipython", lambda: None, raising=False)
    assert agree(io.StringIO()) is None


@pytest.mark.parametrize("switch", ["", "FORCE_COLOR=1", "TTY_COMPATIBLE=1", "notebook"])
def test_print_text_and_print_table_follow_the_rule(switch):
    """Off a terminal they write without importing rich, also where rich is told to treat the
    stream as a terminal (what rich prints there is the same text: the next test); in a notebook
    they leave it to rich."""
    script = (
        "import builtins, io, sys\n"
        + ("builtins.get_ipython = lambda: None\n" if switch == "notebook" else "")
        + "from cagtool.report.console import print_table, print_text\n"
        "out = io.StringIO()\n"
        "print_text('no runs', file=out)\n"
        "print_table(('a', 'b'), [('x', 'yy')], file=out)\n"
        "print(repr(out.getvalue()), 'rich.console' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TTY_COMPATIBLE", "FORCE_COLOR")}
    if "=" in switch:
        name, value = switch.split("=")
        env[name] = value
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    written = "no runs\na  b \nx  yy\n"
    assert result.stdout == f"{written!r} {switch == 'notebook'}\n"


@pytest.mark.parametrize("switch", ["FORCE_COLOR", "TTY_COMPATIBLE"])
def test_where_rich_treats_any_stream_as_a_terminal_it_prints_the_plain_writers_text(monkeypatch, switch):
    """rich prints no colour, no style and no control code with make_console's console off a
    terminal even when told the stream is one: the plain writers stay on there."""
    monkeypatch.setenv(switch, "1")
    monkeypatch.delenv("COLUMNS", raising=False)
    _assert_tables_match_rich(random.Random(switch), tables=40, most_rows=4)
    assert make_console(io.StringIO()).is_terminal  # rich did take such a stream for a terminal
