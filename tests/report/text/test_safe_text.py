"""safe_text: what a terminal would obey is dropped or shown, what UTF-8 and XML 1.0 cannot hold
is shown as an escape, and everything else is left alone. The end-to-end guarantees (every report
command on a hostile record) are in tests/test_reliability.py."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cagtool.report.text.console import make_console
from cagtool.report.gate.checks import CheckResult, Outcome
from cagtool.report.gate.config import GateSettings
from cagtool.report.gate.output import render_junit, render_markdown
from cagtool.report.gate.run import GateResult
from cagtool.report.text.markdown import md_text
from cagtool.report.text.safe_text import encodable_text, is_safe, safe_text

ANSI_ERROR = "\x1b[1;31mRuntimeError\x1b[0m: \x1b[33mCUDA out of memory\x1b[0m"


@pytest.mark.parametrize("text, shown", [
    (ANSI_ERROR, "RuntimeError: CUDA out of memory"),
    ("\x1b]0;new title\x07after", "after"),  # window title (OSC ended by BEL)
    ("\x1b]8;;https://x.example\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC 8 hyperlink (ended by ST)
    ("\x1b]0;unended", ""),  # a terminal swallows an unended string too
    ("a\x1b[2Jb\x1b[Hc", "abc"),  # screen clear, cursor home
    ("a\x1b(Bb\x1b7c", "abc"),  # charset designation, save cursor
    ("bell\x07 nul\x00 del\x7f csi8\x9b cr\r", "bell\\x07 nul\\x00 del\\x7f csi8\\x9b cr\\x0d"),
    ("lone \x1b", "lone \\x1b"),
    ("caf\udce9", "caf\\xe9"),  # a non-UTF-8 byte as surrogateescape carries it
    ("\ud800 and \udfff", "\\ud800 and \\udfff"),
    ("\ufffe\uffff", "\\ufffe\\uffff"),
    ("tab\tand\nnewline stay; é, 中文, ✅ too", "tab\tand\nnewline stay; é, 中文, ✅ too"),
])
def test_safe_text(text, shown):
    assert safe_text(text) == shown
    assert safe_text(shown) == shown  # idempotent
    assert is_safe(shown)
    shown.encode("utf-8")


def test_safe_text_returns_safe_text_itself():
    text = "nothing to do here: <= 1, p10 - p90, é"
    assert safe_text(text) is text and encodable_text(text) is text


def test_encodable_text_touches_only_surrogates():
    assert encodable_text("\x1b[31m caf\udce9") == "\x1b[31m caf\\xe9"


def test_junit_of_an_ansi_coloured_exception_is_well_formed():
    """ElementTree writes an ESC as it is; XML 1.0 forbids it and CI drops the whole file."""
    result = CheckResult("mode-finished", "ca", Outcome.FAIL, True, "failed", "finished", f"mode-finished (ca): {ANSI_ERROR}",
                         notes=["note \x1b[2J"], warnings=["warning \udce9"])
    gate = GateResult(Path("run\x1b]0;t\x07"), "ca", GateSettings(), None, None, [result], ["env \x07"])
    root = ET.fromstring(render_junit(gate).encode("utf-8"))
    failure = root.find(".//failure")
    assert failure is not None and failure.get("message") == "mode-finished (ca): RuntimeError: CUDA out of memory"
    out = root.find(".//system-out")
    assert out is not None and out.text == "mode-finished (ca): RuntimeError: CUDA out of memory\nnote: note \nwarning: warning \\xe9"
    assert "\x1b" not in render_markdown(gate) and "\x1b" not in md_text(ANSI_ERROR)


def test_every_console_path_writes_the_same_safe_text():
    """rich (str and Text), the plain writers, and a terminal console: the record's sequences go,
    the line's own text stays."""
    from rich.text import Text

    line = f"exception: {ANSI_ERROR} caf\udce9"
    want = "exception: RuntimeError: CUDA out of memory caf\\xe9"
    for printed in (line, Text(line), Text.assemble(("exception:", "red"), f" {ANSI_ERROR} caf\udce9")):
        stream = io.StringIO()
        make_console(file=stream).print(printed)
        assert stream.getvalue() == want + "\n", printed


def test_a_command_shown_quoted_pastes_back_as_the_words_it_was():
    """The summary's `cagtool run ...` header: a path or argument with a space read as two words
    when pasted (`cagtool run dir with space/my script.py`). Quoted, each word reads back as it
    was; a word with a control character is left for the console to show escaped."""
    import shlex

    from cagtool.report.text.safe_text import shown_command

    words = ["dir with space/my script.py", "--name", "a b", "--lr", "0.1", "it's"]
    shown = shown_command(words, quoted=True)
    assert shown == "'dir with space/my script.py' --name 'a b' --lr 0.1 'it'\"'\"'s'"
    assert shlex.split(shown) == words
    assert shown_command(["train.py", "x\n::error::y"], quoted=True) == "train.py x\n::error::y"
    assert shown_command(words) == " ".join(words)  # unquoted as before where not asked
    long = "w" * 500
    assert shown_command([long, "a b"], quoted=True) == f"{'w' * 200}[... 500 characters] 'a b'"  # a cut word is not quoted
