"""report/console.py's plain writers print byte for byte what rich prints on the same console
(they exist to spare `cagtool runs` the import of rich.table and rich.console, issue 12)."""

from __future__ import annotations

import io
import random
import string

import pytest
from rich.table import Table

from cagtool.report.console import make_console, print_table, print_text

HEADERS = ("run", "created", "target", "modes", "exit")


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
    rng = random.Random(12)
    for _ in range(150):
        rows = [tuple(random_cell(rng) for _ in HEADERS) for _ in range(rng.randint(0, 6))]
        plain, reference = io.StringIO(), io.StringIO()
        print_table(HEADERS, rows, file=plain)
        rich_table(HEADERS, rows, reference)
        assert plain.getvalue() == reference.getvalue(), rows


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
