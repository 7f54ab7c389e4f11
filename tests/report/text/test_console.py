"""report/text/console.py: rich consoles that, off a terminal, write colourless text that is never
wrapped or cut (CI logs stay greppable), honour an explicit COLUMNS, and keep record text as text."""

from __future__ import annotations

import io
import os

import pytest

from cagtool.report.text.console import UNBOUNDED_WIDTH, is_unbounded, make_console, print_table, print_text


def test_print_table_exact_layout(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    print_table(("a", "long header"), [("value", "x"), ("", "yy")], file=out)
    assert out.getvalue() == "a      long header\nvalue  x          \n       yy         \n"


def test_off_a_terminal_nothing_is_wrapped_cut_or_coloured(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    long_path = "/runs/" + "x" * 300
    out = io.StringIO()
    print_table(("run", "exit"), [(long_path, "0")], file=out)
    print_text("[b]not markup[/b] " + "word " * 100, file=out)
    lines = out.getvalue().splitlines()
    assert lines[1].startswith(long_path) and "…" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert lines[2] == "[b]not markup[/b] " + "word " * 100
    assert is_unbounded(make_console(io.StringIO())) and make_console(io.StringIO()).width == UNBOUNDED_WIDTH


def test_an_explicit_columns_folds_the_table_and_keeps_every_character(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    long_path = "/runs/" + "x" * 100
    out = io.StringIO()
    print_table(("run", "exit"), [(long_path, "0")], file=out)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 40 for line in lines)
    assert lines[1].startswith("/runs/") and sum(line.count("x") for line in lines[1:]) == 100


def test_on_a_terminal_the_console_has_colour_and_the_terminal_width(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "77")
    monkeypatch.setenv("TERM", "xterm-256color")
    leader, follower = os.openpty()
    try:
        with open(follower, "w", closefd=False) as tty:
            console = make_console(tty)
            assert console.width == 77 and console.color_system is not None and not is_unbounded(console)
    finally:
        os.close(leader)
        os.close(follower)


@pytest.mark.parametrize("text", ["exception: \x1b[31mred\x1b[0m caf\udce9", "tab\there"])
def test_record_text_is_shown_as_text(monkeypatch, text):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    print_text(text, file=out)
    assert "\x1b" not in out.getvalue() and "\udce9" not in out.getvalue()
