"""A sequence that grows every step under a compiled forward: the forward recompiles once (step 1)
and is dynamic from then on, and the backward's sizes change again at step 2 with no forward
recompile in that step. The backward's sizes are one cause, following the forward's: its words
say which step the forward's change reached it in, and that at step 2 the backward alone
recompiled, which a fix of the forward does not reach; its fix names what removes Dynamo's
recompile of the compiled-autograd graph (not starting compiled autograd dynamic, which leaves it)."""

from __future__ import annotations

import pytest

from cagtool.record.loader import load_run
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_CA_GRAPH, CAUSE_DYNAMO_FRAME, CAUSE_SHAPES, cause_words, explain
from cagtool.report.recompiles.table import SOURCE_DYNAMO_CA_GRAPH, SOURCE_DYNAMO_FRAME, recompile_table

pytestmark = pytest.mark.slow  # one `cagtool run` the first time a test asks


def test_a_backward_recompile_in_a_step_without_a_forward_recompile_is_said_apart_in_its_cause(record_run):
    run = record_run("../tests/scripts/growing_sequence.py")
    assert run.returncode == 0, run.stderr[-2000:]
    table = recompile_table(load_run(run.path).modes["ca"])
    # The record: the forward recompiled at step 1 only; the CA graph's code at step 2.
    assert [r.step for r in table.recompiles if r.source == SOURCE_DYNAMO_FRAME] == [1]
    assert [r.step for r in table.recompiles if r.source == SOURCE_DYNAMO_CA_GRAPH] == [2]
    causes = explain(table).causes
    forward = next(c for c in causes if c.code == CAUSE_DYNAMO_FRAME)
    shapes = next(c for c in causes if c.code == CAUSE_SHAPES)
    assert shapes.caused_by == forward.number and {r.step for r in shapes.rows} == {1, 2}
    assert not [c for c in causes if c.code == CAUSE_DYNAMO_CA_GRAPH]
    words = cause_words(shapes, table.cwd)
    why = " ".join(words.why)
    assert "reached the backward in the same step (step 1). At step 2 the sizes changed again with no forward recompile" in why, why
    assert "which a fix of #1 does not reach" in why
    assert "got smaller, once" not in why  # a length that grows is no last batch
    assert any("starting compiled autograd dynamic leaves it" in f and "TORCH_COMPILE_DYNAMIC_SOURCES" in f for f in words.fix), words.fix
