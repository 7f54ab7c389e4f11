"""Record text made safe to show: one helper for every place a report writes text that came from a
job (an exception, a script's arguments, a finding, a reason torch logged).

Such text may hold what a terminal obeys rather than shows (an ANSI colour from a logging
library, a title change, a screen clear, an OSC 8 hyperlink), characters XML 1.0 forbids (which
make a JUnit file not well-formed, so CI drops the report), and lone surrogates: a non-UTF-8
script argument reaches Python as `surrogateescape` text (b"caf\\xe9" is "caf\\udce9") and an
exception may carry any lone surrogate; neither can be encoded as UTF-8, so a strict stdout or a
UTF-8 file raises on them.

`safe_text` drops complete escape sequences (what they do is not text), shows every other
control character as `\\xNN` (a bidirectional control, which reorders what follows it, as
`\\u202e`), and a lone surrogate as the byte it escapes (`\\xe9`) or as `\\udNNN`. Tab and
newline stay: they are layout. The result is printable on any terminal, encodable as UTF-8, and
allowed in XML 1.0. It is idempotent, and text without such characters comes back unchanged (the
same object).

Neither lets record text begin a line with `::`, what GitHub's runner reads as a workflow command
(`::error::`, `::stop-commands::`): it trims a line's leading whitespace, every Unicode space
included, and then looks for `::`. Such a `::` is shown as `:\\:`, which the runner ignores and a
reader still reads. `safe_text` does it where a line of the text may begin (the text's start and
after each line break, past any whitespace); `safe_line` also after any whitespace within the line,
because a console or `textwrap` breaks a long line there (`aaaa ::error::x` narrowed to 10 columns
prints `::error::x` on a line of its own). A `::` after a letter (`torch::autograd::GraphRoot`)
is left as it is. The runner's older form, `##[error]x`, is a command wherever in a line it
stands: every `##[` is shown as `##\\[`; so is Azure Pipelines' `##vso[task.setvariable ...]`
(its agent looks for `##vso[` anywhere in a line of stdout or stderr: a record could set a
pipeline variable, prepend to PATH or upload a file), shown as `##vso\\[`."""

from __future__ import annotations

import re
from functools import cache


# The patterns are compiled when first needed, and text that is printable ASCII (what most record
# text is: paths, dates, mode names) never needs one: compiling them is 9 M instructions, as much
# as `cagtool runs` spends reading its ten runs' manifests.
@cache
def _sequence() -> re.Pattern[str]:
    # ECMA-48 escape sequences: control strings (OSC, DCS, SOS, PM, APC) up to BEL or ST (or the
    # next escape, or the end: rich drops BEL from a Text before this sees it, and a terminal
    # swallows an unended string anyway), control sequences (CSI), and the two- or
    # three-character escapes.
    return re.compile(
        r"\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"
        r"|\x1b\[[0-?]*[ -/]*[@-~]"
        r"|\x1b[ -/]*[0-~]"
    )


@cache
def _unsafe() -> re.Pattern[str]:
    # C0 but tab and newline, DEL, C1, lone surrogates, the two noncharacters XML 1.0 forbids, and
    # the bidirectional controls (marks, embeddings, overrides, isolates): a terminal or a log viewer
    # obeys them, and a right-to-left override shows the rest of a line reversed (a record's
    # `invoice\u202efdp.exe` reads as `invoiceexe.pdf`).
    return re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def _plain(text: str) -> bool:
    """Printable ASCII (space to tilde): none of it is unsafe."""
    return text.isascii() and text.isprintable()


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte that was not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    if code > 0xFF:
        return f"\\u{code:04x}"
    return f"\\x{code:02x}"


# What a workflow command begins with, and how it is shown where a line may begin with it.
_COMMAND = "::"
_COMMAND_SHOWN = ":\\:"


@cache
def _command_at_line_start(text_starts_a_line: bool = True) -> re.Pattern[str]:
    # At the text's start or after a line break (those safe_text keeps: a newline, and the Unicode
    # line and paragraph separators a log viewer breaks at), past any whitespace (\s is Python's
    # str.isspace, a superset of what .NET's TrimStart trims).
    return re.compile(r"(?:^|(?<=[\n\u2028\u2029]))(\s*)::" if text_starts_a_line else r"(?<=[\n\u2028\u2029])(\s*)::")


def escape_line_starts(text: str, text_starts_a_line: bool = True) -> str:
    """`text` with a `::` that begins one of its lines (past whitespace) shown as `:\\:`;
    `text_starts_a_line`: False where the text continues a line already written."""
    if _COMMAND not in text:
        return text
    return _command_at_line_start(text_starts_a_line).sub(lambda m: m.group(1) + _COMMAND_SHOWN, text)


@cache
def _command_after_space() -> re.Pattern[str]:
    return re.compile(r"(?:^|(?<=\s))::")


def _escaped_chars(text: str) -> str:
    if _plain(text) or not _unsafe().search(text):
        return text
    if "\x1b" in text:
        text = _sequence().sub("", text)
    return _unsafe().sub(_shown, text)


_LEGACY_COMMAND = "##["
_LEGACY_SHOWN = "##\\["
# Azure Pipelines' logging commands: `##vso[area.action ...]value`, anywhere in a line.
_AZURE_COMMAND = "##vso["
_AZURE_SHOWN = "##vso\\["
# What a command found anywhere in a line begins with (the console's stream holds a write's end that
# may begin one: report/text/console.py).
IN_LINE_COMMANDS = (_LEGACY_COMMAND, _AZURE_COMMAND)


def no_command_in_line(text: str) -> str:
    """`text` with every command a runner reads anywhere in a line (IN_LINE_COMMANDS) escaped."""
    if "##" not in text:
        return text
    return text.replace(_LEGACY_COMMAND, _LEGACY_SHOWN).replace(_AZURE_COMMAND, _AZURE_SHOWN)


def safe_text(text: str) -> str:
    """`text` with escape sequences dropped and other unsafe characters shown as escapes, and no
    line of it beginning with `::` (nor holding the runner's older `##[`)."""
    return no_command_in_line(escape_line_starts(_escaped_chars(text)))


def safe_line(text: str) -> str:
    """safe_text for a field shown within one line (a host name, a path, a mode name): a newline or
    tab in it is shown as an escape too, and so are the Unicode line and paragraph separators (a
    log viewer or `str.splitlines` breaks a line there), so a record's data cannot start a line of
    its own: in a CI log, a line of its own may be a workflow command (`::stop-commands::`). A `::`
    at its start or after a space is shown as `:\\:` (where the line may be wrapped)."""
    text = no_command_in_line(_escaped_chars(text))
    if not text.isprintable():
        text = text.replace("\n", "\\n").replace("\t", "\\t").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    if _COMMAND not in text:
        return text
    return _command_after_space().sub(_COMMAND_SHOWN, text)


@cache
def _surrogate() -> re.Pattern[str]:
    return re.compile(r"[\ud800-\udfff]")


def encodable_text(text: str) -> str:
    """`text` with only its lone surrogates shown as `safe_text` shows them: for a document that
    is not shown on a terminal and may hold control characters of its own (the HTML report's
    scripts), but must be written as UTF-8."""
    return text if text.isascii() or not _surrogate().search(text) else _surrogate().sub(_shown, text)


def is_safe(text: str) -> bool:
    """True where `safe_text` leaves `text` as it is."""
    return ((_plain(text) or _unsafe().search(text) is None) and (_COMMAND not in text or _command_at_line_start().search(text) is None)
            and _LEGACY_COMMAND not in text and _AZURE_COMMAND not in text)


# A command line shown in a report's line or header: a job's argv may be of any length (a word of
# megabytes), and a line is read, not scrolled.
SHOWN_WORD = 200
SHOWN_COMMAND = 2000


def shown_command(words: list[str] | tuple[str, ...], word_limit: int = SHOWN_WORD, limit: int = SHOWN_COMMAND,
                  quoted: bool = False) -> str:
    """`words` joined by spaces, each word over `word_limit` characters cut with how long it was,
    and the whole cut after `limit` characters with how many words were left out. `quoted`: each
    word of printable characters as a POSIX shell reads it back (shlex.quote: `'my script.py'`), so
    that a line shown whole can be pasted; a word with a control character stays as it is, for the
    console to show it escaped (never a line of its own), and so does a word cut."""
    import shlex

    shown: list[str] = []
    length = 0
    for i, word in enumerate(words):
        if len(word) > word_limit:  # cut, and so not pasteable: never quoted
            word = f"{word[:word_limit]}[... {len(word):,} characters]"
        elif quoted and word.isprintable():
            word = shlex.quote(word)
        if shown and length + len(word) > limit:
            shown.append(f"[... {len(words) - i:,} more words]")
            break
        shown.append(word)
        length += len(word) + 1
    return " ".join(shown)
