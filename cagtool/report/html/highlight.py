"""Python code as highlighted HTML: pygments' Python lexer and HTML formatter, default style.

Graph code comes from the record (FX's generated Python, or a file someone edited): pygments
escapes every token it writes, so the code is text on the page whatever it holds. A hand port of
the lexer for FX's subset of Python drew the same HTML faster, but saved only 0.09-0.14 s of
`cagtool report`'s 0.9-1.1 s of CPU on a small transformer's 50 KB graph (about 10 %, measured
with `sample_scripts/transformer_lm.py`, `--modes ca --backend eager`): too little to keep a copy
of pygments' rules in step with it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

CSS_CLASS = "code"


def highlight_python(source: str) -> str:
    """`pygments.highlight(source, PythonLexer(), HtmlFormatter(cssclass="code"))`."""
    from pygments import highlight

    return highlight(source, _lexer(), _formatter())


@lru_cache(maxsize=1)
def _lexer() -> Any:
    from pygments.lexers.python import PythonLexer

    return PythonLexer()


@lru_cache(maxsize=1)
def _formatter() -> Any:
    from pygments.formatters.html import HtmlFormatter

    return HtmlFormatter(cssclass=CSS_CLASS, nowrap=False)


def prepare() -> None:
    """Import pygments and build the lexer, formatter and style now (`cagtool run` does it while
    its modes run, so the end-of-run report does not wait for them)."""
    _lexer()
    css()


def css() -> str:
    """The style sheet of pygments' classes (its default style), scoped to the code blocks."""
    return _formatter().get_style_defs(f".{CSS_CLASS}")
