"""A sequence that grows every step under a compiled forward: the forward recompiles once (step 1)
and is dynamic from then on, and the backward's sizes change again at step 2 with no forward
recompile in that step. Only what the forward's recompile brought (compiled autograd's capture in
its step) follows from it; Dynamo's recompile of that graph's code at step 2 is a cause of its own."""

from __future__ import annotations

import pytest

from cagtool.record.loader import load_run
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_CA_GRAPH, CAUSE_DYNAMO_FRAME, CAUSE_SHAPES, cause_words, explain
from cagtool.report.recompiles.table import SOURCE_DYNAMO_FRAME, recompile_table

pytestmark = pytest.mark.slow  # one `cagtool run` the first time a test asks


def test_a_backward_recompile_in_a_step_without_a_forward_recompile_does_not_follow_the_forward(record_run):
    run = record_run("../tests/scripts/growing_sequence.py")
    assert run.returncode == 0, run.stderr[-2000:]
    table = recompile_table(load_run(run.path).modes["ca"])
    # The record: the forward recompiled at step 1 only; the CA graph's code at step 2.
    assert [r.step for r in table.recompiles if r.source == SOURCE_DYNAMO_FRAME] == [1]
    causes = explain(table).causes
    forward = next(c for c in causes if c.code == CAUSE_DYNAMO_FRAME)
    shapes = next(c for c in causes if c.code == CAUSE_SHAPES)
    assert shapes.caused_by == forward.number and {r.step for r in shapes.rows} == {1}
    shapes_why = " ".join(cause_words(shapes, table.cwd).why)
    assert "reached the backward in the same step" in shapes_why and "changed again" not in shapes_why
    [later] = [c for c in causes if c.code == CAUSE_DYNAMO_CA_GRAPH]
    assert later.caused_by is None and [r.step for r in later.rows] == [2]
    words = cause_words(later, table.cwd)
    why = " ".join(words.why)
    assert "Follows from" not in why
    assert "Compiled autograd captured !1 at step 1 for changed sizes" in why and "No forward was recompiled in the step" in why
    assert any("start compiled autograd dynamic" in f for f in words.fix)
