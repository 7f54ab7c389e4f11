"""Python code as highlighted HTML, exactly as pygments draws it, in a fraction of its time.

The report shows the code of every CA graph (about 100 KB for a small transformer); pygments'
Python lexer and HTML formatter took 0.16 s of CPU for it, a tenth of `cagtool run`'s end-of-run
report. Graph code is FX's generated Python: names, calls, numbers, short strings,
comments, `def`, `return`, `None`. This module tokenizes that subset with one regular expression,
classifies words with pygments' own word lists, and formats with a port of pygments' line
formatter: the HTML is byte for byte pygments' (tests/report/html/test_highlight.py compares them).
Source outside the subset (triple-quoted or prefixed strings, escapes, `%` or `{` in strings,
decorators, imports, non-ASCII, backslashes, soft keywords...) is handed to pygments itself, as is
everything when the installed pygments' Python rules differ from those this port was written
against (`_RULES_FINGERPRINT`).
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from html import escape
from typing import Any, Iterable

CSS_CLASS = "code"

# pygments' short CSS class of each token type the subset produces ("" = plain text, no span).
_KEYWORD, _CONSTANT, _WHITESPACE, _TEXT = "k", "kc", "w", ""
_NAME, _CLASS, _FUNCTION = "n", "nc", "nf"
_BUILTIN, _PSEUDO, _EXCEPTION, _MAGIC_FUNCTION, _MAGIC_VARIABLE = "nb", "bp", "ne", "fm", "vm"
_OPERATOR, _OPERATOR_WORD, _PUNCTUATION, _COMMENT = "o", "ow", "p", "c1"
_SINGLE, _DOUBLE = "s1", "s2"
_NUMBER_CLASSES = {"float": "mf", "float_exp": "mf", "oct": "mo", "bin": "mb", "hex": "mh", "int": "mi"}

# pygments' rules, in its order (PythonLexer 'root' then 'expr'), for the subset; a string holding
# a backslash, `%`, `{` or a newline, or a word followed by a quote (a prefixed string), is not in it.
_TOKEN = re.compile(
    r"""
    (?P<nl>\n)
    |(?P<comment>\#[^\n]*)
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<single>'[^\\'"%{\n]*')
    |(?P<double>"[^\\'"%{\n]*")
    |(?P<space>[ \t\f\v]+)
    |(?P<float>(?:\d(?:_?\d)*\.(?:\d(?:_?\d)*)?|(?:\d(?:_?\d)*)?\.\d(?:_?\d)*)(?:[eE][+-]?\d(?:_?\d)*)?)
    |(?P<float_exp>\d(?:_?\d)*[eE][+-]?\d(?:_?\d)*j?)
    |(?P<oct>0[oO](?:_?[0-7])+)
    |(?P<bin>0[bB](?:_?[01])+)
    |(?P<hex>0[xX](?:_?[a-fA-F0-9])+)
    |(?P<int>\d(?:_?\d)*)
    |(?P<op>!=|==|<<|>>|:=|[-~+/*%=<>&^|.])
    |(?P<punct>[]{}:(),;[])
    """,
    re.VERBOSE,
)
# Words whose rules the subset leaves to pygments: soft keywords (`match`, `case`, `_` after them),
# imports, and the keywords pygments also lists with a second word ("yield from", "async for").
_WORDS_LEFT_TO_PYGMENTS = frozenset({"match", "case", "lazy", "from", "import", "yield", "async"})
_OPERATOR_WORDS = frozenset({"in", "is", "and", "or", "not"})
_PSEUDO_BUILTINS = frozenset({"self", "Ellipsis", "NotImplemented", "cls"})
_PSEUDO_RULE = r"(?<!\.)(self|Ellipsis|NotImplemented|cls)\b"

# A digest of the rules of pygments' PythonLexer this port follows (patterns, token types and the
# word lists' prefixes and suffixes, not the words: those are read from pygments). Computed from
# pygments 2.21; another version with other rules turns the fast path off (`_rules`).
_RULES_FINGERPRINT = "2facf494d47958ce"


def _rule_summary(lexer_tokens: dict[str, list[Any]]) -> str:
    """PythonLexer's rules for the states the subset goes through, as stable text."""

    def describe(item: Any) -> str:
        if isinstance(item, str):  # a pattern, a state name or an include()
            return f"{type(item).__name__}:{item}"
        if hasattr(item, "words"):  # words(): its words are read, not pinned
            return f"words:{item.prefix!r}:{item.suffix!r}"
        cells = getattr(item, "__closure__", None)  # bygroups(): the token types it yields
        if cells:
            return "callback:" + ",".join(repr(c.cell_contents) for c in cells)
        if hasattr(item, "state"):  # default()
            return f"default:{item.state!r}"
        return repr(item)

    parts = []
    for state in ("root", "expr", "keywords", "soft-keywords", "expr-keywords", "builtins", "magicfuncs", "magicvars", "numbers", "name", "funcname", "classname", "sqs", "dqs"):
        for rule in lexer_tokens[state]:
            items = rule if isinstance(rule, tuple) else (rule,)
            parts.append(state + "|" + "|".join(describe(item) for item in items))
    return "\n".join(parts)


@lru_cache(maxsize=1)
def _rules() -> dict[str, str] | None:
    """word -> CSS class for every word pygments' Python rules treat specially, or None when the
    installed pygments' rules are not the ones this port follows."""
    try:
        from pygments.lexers.python import PythonLexer

        tokens = PythonLexer.tokens
        summary = _rule_summary(tokens)
        if hashlib.sha256(summary.encode()).hexdigest()[:16] != _RULES_FINGERPRINT:
            return None
        if tokens["builtins"][1][0] != _PSEUDO_RULE:
            return None
        classes: dict[str, str] = {}
        # Lowest priority first, so a word gets the class of the first rule pygments tries that
        # matches it: root's keywords, then expr's operator words, keywords, builtins (pseudo
        # builtins, exceptions), magic functions and variables, and any other word is a name.
        for state, index, css in (
            ("magicvars", 0, _MAGIC_VARIABLE),
            ("magicfuncs", 0, _MAGIC_FUNCTION),
            ("builtins", 2, _EXCEPTION),
            (None, 0, _PSEUDO),
            ("builtins", 0, _BUILTIN),
            ("expr-keywords", 1, _CONSTANT),
            ("expr-keywords", 0, _KEYWORD),
            (None, 1, _OPERATOR_WORD),
            ("keywords", 1, _CONSTANT),
            ("keywords", 0, _KEYWORD),
        ):
            words = tokens[state][index][0].words if state else (_PSEUDO_BUILTINS if index == 0 else _OPERATOR_WORDS)
            for word in words:
                classes[word] = css
        return classes
    except Exception:  # noqa: BLE001 - any surprise in pygments' internals: use pygments itself
        return None


def _prepare(source: str) -> str:
    """pygments' own preprocessing (no BOM, \\n newlines, no leading or trailing blank lines, one final newline)."""
    if source.startswith("\ufeff"):
        source = source[1:]
    source = source.replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    return source if source.endswith("\n") else source + "\n"


def _fast_tokens(text: str, classes: dict[str, str]) -> list[tuple[str, str]] | None:
    """(CSS class, text) tokens as pygments' PythonLexer gives them, or None outside the subset."""
    if not text.isascii() or text.startswith("#!") or "'''" in text or '"""' in text:
        return None
    out: list[tuple[str, str]] = []
    append = out.append
    pos = 0
    end = len(text)
    pending_head = ""  # "def" or "class" just seen: the next word is the name it defines
    match = _TOKEN.match
    while pos < end:
        m = match(text, pos)
        if m is None:
            return None
        kind = m.lastgroup
        value = m.group()
        stop = m.end()
        if pending_head:
            if kind == "space" and out[-1][1] == pending_head:
                append((_WHITESPACE, value))
                pos = stop
                continue
            if kind != "word" or out[-1][0] != _WHITESPACE:
                return None
            if pending_head == "def":
                append((_MAGIC_FUNCTION if classes.get(value) == _MAGIC_FUNCTION else _FUNCTION, value))
            else:
                append((_CLASS, value))
            pending_head = ""
            pos = stop
            continue
        if kind == "word":
            if stop < end and text[stop] in "'\"":
                return None  # a prefixed string (f'', r'', b'' ...)
            if value in _WORDS_LEFT_TO_PYGMENTS:
                return None
            if value in ("def", "class"):
                if stop >= end or text[stop] not in " \t":
                    return None
                append((_KEYWORD, value))
                pending_head = value
                pos = stop
                continue
            css = classes.get(value, _NAME)
            if css in (_BUILTIN, _PSEUDO, _EXCEPTION) and pos and text[pos - 1] == ".":
                css = _NAME  # `x.type`: pygments' builtin rules do not follow a dot (no word is also magic)
            append((css, value))
        elif kind == "space":
            append((_TEXT, value))
        elif kind == "nl":
            append((_WHITESPACE, value))
        elif kind == "comment":
            append((_COMMENT, value))
        elif kind == "single":
            append((_SINGLE, value))
        elif kind == "double":
            append((_DOUBLE, value))
        elif kind == "op":
            append((_OPERATOR, value))
        elif kind == "punct":
            append((_PUNCTUATION, value))
        else:
            append((_NUMBER_CLASSES[kind], value))
        pos = stop
    if pending_head:
        return None
    return out


def _format_lines(tokens: Iterable[tuple[str, str]]) -> str:
    """pygments' HtmlFormatter._format_lines for the formatter's defaults (no line numbers, no
    anchors, "\\n" between lines): adjacent tokens of one class share a span."""
    lines: list[str] = []
    lspan = ""
    line: list[str] = []
    for css, value in tokens:
        cspan = f'<span class="{css}">' if css else ""
        parts = escape(value, quote=False).split("\n")
        if len(parts) > 1:
            for part in parts[:-1]:
                if line:
                    if lspan != cspan and part:
                        line.extend(((lspan and "</span>"), cspan, part, (cspan and "</span>"), "\n"))
                    else:
                        line.extend((part, (lspan and "</span>"), "\n"))
                    lines.append("".join(line))
                    line = []
                elif part:
                    lines.append("".join((cspan, part, (cspan and "</span>"), "\n")))
                else:
                    lines.append("\n")
        last = parts[-1]
        if line and last:
            if lspan != cspan:
                line.extend(((lspan and "</span>"), cspan, last))
                lspan = cspan
            else:
                line.append(last)
        elif last:
            line = [cspan, last]
            lspan = cspan
    if line:
        line.extend(((lspan and "</span>"), "\n"))
        lines.append("".join(line))
    return "".join(lines)


def highlight_python(source: str) -> str:
    """`pygments.highlight(source, PythonLexer(), HtmlFormatter(cssclass="code"))`, the same text."""
    classes = _rules()
    tokens = _fast_tokens(_prepare(source), classes) if classes is not None else None
    if tokens is None:
        return _pygments_highlight(source)
    return f'<div class="{CSS_CLASS}"><pre><span></span>{_format_lines(tokens)}</pre></div>\n'


def uses_fast_path(source: str) -> bool:
    """Whether `highlight_python` draws this source itself (tests; the HTML is the same either way)."""
    classes = _rules()
    return classes is not None and _fast_tokens(_prepare(source), classes) is not None


def _pygments_highlight(source: str) -> str:
    from pygments import highlight
    from pygments.lexers import PythonLexer

    return highlight(source, PythonLexer(), _formatter())


@lru_cache(maxsize=1)
def _formatter() -> Any:
    from pygments.formatters.html import HtmlFormatter

    return HtmlFormatter(cssclass=CSS_CLASS, nowrap=False)


def prepare() -> None:
    """Read pygments' word lists and style now (`cagtool run` does it while its modes run)."""
    _rules()
    css()


def css() -> str:
    """The style sheet of the classes above (pygments' default style)."""
    return _formatter().get_style_defs(f".{CSS_CLASS}")
