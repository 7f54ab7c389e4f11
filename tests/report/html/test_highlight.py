"""The report's code highlighting (report/html/highlight.py) is pygments' HTML: real graph code
comes out as pygments draws it, with its token classes, and code holding markup stays text."""

from __future__ import annotations

import html
import re

import pygments
from pygments.formatters.html import HtmlFormatter
from pygments.lexers import PythonLexer

from cagtool.report.html import highlight


def _pygments(source: str) -> str:
    return pygments.highlight(source, PythonLexer(), HtmlFormatter(cssclass="code", nowrap=False))


def test_recorded_graph_code(record_run):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    files = sorted((run.path / "ca" / "graphs").glob("ca_*.py"))
    assert len(files) >= 3
    for path in files:
        source = path.read_text()
        drawn = highlight.highlight_python(source)
        assert drawn == _pygments(source), path
        assert '<span class="k">def</span>' in drawn and '<span class="kc">None</span>' in drawn
        # The text of the HTML is the source.
        assert html.unescape(re.sub(r"<[^>]+>", "", drawn)).strip("\n") == source.strip("\n")


def test_code_holding_markup_stays_text():
    source = 'x = "</pre></div><script>alert(1)</script>"  # <img src=x onerror=alert(2)>\n'
    drawn = highlight.highlight_python(source)
    assert "<script>" not in drawn and "<img" not in drawn
    assert html.unescape(re.sub(r"<[^>]+>", "", drawn)).strip("\n") == source.strip("\n")


def test_css_is_pygments_default_style():
    assert highlight.css() == HtmlFormatter(cssclass="code", nowrap=False).get_style_defs(".code")
