"""The report's code highlighting (report/html/highlight.py) is pygments' HTML, byte for byte:
on the fast path (CA graph code and the Python subset it covers) and on everything it leaves to
pygments."""

from __future__ import annotations

import pytest

from cagtool.report.html import highlight

pygments = pytest.importorskip("pygments")
from pygments.formatters.html import HtmlFormatter  # noqa: E402
from pygments.lexers import PythonLexer  # noqa: E402


def _pygments(source: str) -> str:
    return pygments.highlight(source, PythonLexer(), HtmlFormatter(cssclass="code", nowrap=False))


# Every construct the fast path draws itself, in the shapes FX writes them and a few more.
SUBSET = '''

class CompiledAutograd0(torch.nn.Module):
    def forward(self, inputs, sizes, scalars, hooks, packed_data):
        # File: /x/compiled_autograd.py:1582 in set_node_origin, code: torch::autograd::GraphRoot (NodeCall 0)
        getitem = inputs[0];  getitem_1 = inputs[-1]
        validate_outputs = ops_validate_outputs([getitem], [((None, None, device(type='cpu'), 6, 0, None), [256, 64], False, 6)]);  getitem = None
        x = y.type(torch.float32) if z is not None and not w or v in u else list(range(3))
        a = 1.5e-05 + 2. * .5 - 1_000 // 0x1F % 0o17 ^ 0b101 | 3e7 & ~4 << 1 >> 2; b = 1j; c = "dq" != 'sq'
        d = {"k": [1, 2], 'e': ()}; f := 3
        self.__init__(); x.__dict__; __name__; cls; Ellipsis; ValueError; x.ValueError; print
        lambda q: q ; assert a; del b; return [], ''\t# tabs\f
    def __call__(self):
        while True: pass
        for i in range(2): continue
        with open("f") as g: raise KeyError("x")
        return
'''

# Each leaves the subset: pygments draws these itself (and so the result is the same).
OUTSIDE = [
    'x = """doc"""\n',
    "x = f'{a}'\n",
    "x = r'\\d'\n",
    "x = 'a\\n'\n",
    "x = '%s' % y\n",
    "x = '{}'.format(y)\n",
    "@decorator\ndef f(): pass\n",
    "import torch\n",
    "from a import b\n",
    "match x:\n    case 1: pass\n",
    "yield from g\n",
    "async def f(): pass\n",
    "x = 'é'\n",
    "#!/usr/bin/env python\nx = 1\n",
    "x = 1 + \\\n    2\n",
    "x = $\n",
    "def\n",
    "class (x): pass\n",
]


def test_the_installed_pygments_is_the_one_the_port_follows():
    # If this fails, pygments' Python rules changed: check highlight.py against them, then update
    # _RULES_FINGERPRINT (until then every report highlights through pygments, slower, same HTML).
    assert highlight._rules() is not None


def test_the_subset_is_drawn_as_pygments_draws_it():
    assert highlight.uses_fast_path(SUBSET)
    assert highlight.highlight_python(SUBSET) == _pygments(SUBSET)
    # Line ends, leading and trailing blank lines, no final newline: pygments' preprocessing.
    for variant in (SUBSET.replace("\n", "\r\n"), SUBSET.strip("\n"), "\n\n" + SUBSET + "\n\n\n", "x = 1", "", "\n"):
        assert highlight.highlight_python(variant) == _pygments(variant), repr(variant[:40])


def test_every_line_of_the_subset_alone():
    for line in SUBSET.splitlines():
        if highlight.uses_fast_path(line):
            assert highlight.highlight_python(line) == _pygments(line), line


@pytest.mark.parametrize("source", OUTSIDE)
def test_outside_the_subset_pygments_draws_it(source):
    assert not highlight.uses_fast_path(source)
    assert highlight.highlight_python(source) == _pygments(source)


def test_recorded_graph_code(record_run):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    files = sorted((run.path / "ca" / "graphs").glob("ca_*.py"))
    assert len(files) >= 3
    for path in files:
        source = path.read_text()
        assert highlight.uses_fast_path(source), path
        assert highlight.highlight_python(source) == _pygments(source), path


def test_css_is_pygments_default_style():
    assert highlight.css() == HtmlFormatter(cssclass="code", nowrap=False).get_style_defs(".code")
