"""A bool attribute a compiled forward branches on, switched at a step: Dynamo guards its value
(the guard tree's FALSE_MATCH, then TRUE_MATCH), so each value is a compile of its own; it never
becomes an input of the graph, and no dynamic-shape or "now an input" advice fits it."""

from __future__ import annotations

import pytest

from cagtool.record.loader import load_run
from cagtool.report.recompiles.explain import cause_words, explain
from cagtool.report.recompiles.table import recompile_table

pytestmark = pytest.mark.slow  # one `cagtool run` the first time a test asks


def test_a_bool_flag_is_compiled_once_per_value_not_made_an_input(record_run):
    run = record_run("../tests/scripts/bool_flag_flipped.py")
    assert run.returncode == 0, run.stderr[-2000:]
    # What torch's guard tree of the recompile holds: a constant guard on the bool, not its type alone.
    tree = (run.path / "ca" / "compiles" / "0_1" / "dynamo_cpp_guards_str.txt").read_text()
    assert "TRUE_MATCH: L['self'].use_bias == True" in tree
    table = recompile_table(load_run(run.path).modes["ca"])
    root = explain(table).causes[0]
    [change] = root.facts["value_changes"]
    assert (change.source, change.before, change.after, change.as_input) == ("self.use_bias", "False", "True", False)
    words = cause_words(root, table.cwd)
    why, fixes = " ".join(words.why), " ".join(words.fix)
    assert "is a bool" in why and "0/1: `False` became `True`" in why and "a later flip back reuses the first" in why
    assert "as an input of the graph (automatic dynamic)" not in why and "takes it as an input" not in why
    assert words.fix[0].startswith("Nothing to fix: each of the two values of `self.use_bias` is compiled once and cached, however often it flips")
    assert "torch.where(flag, a, b)" in fixes and "torch.cond" in fixes
    assert "is an input of the compiled graph" not in fixes and "torch.tensor(self.use_bias)" not in fixes
