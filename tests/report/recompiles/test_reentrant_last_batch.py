"""A smaller last batch through reentrant activation checkpoints, under compiled autograd with
no torch.compile of the script's own: the backward is captured again for the new sizes (whose
earlier values no recorded graph's code shows), and in the same step Dynamo recompiles the code
that graph runs, compiled for the full batch (the checkpoint's backward through torch's
call_backward, the recompute of the block). It is a last batch, named so, with drop_last or padding
the first fix; not "the sizes changed again", and no recompile listed twice."""

from __future__ import annotations

import pytest

from conftest import cli_in_process

from cagtool.record.loader import load_run
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_FRAME, CAUSE_SHAPES, cause_words, explain
from cagtool.report.recompiles.table import recompile_table

pytestmark = pytest.mark.slow  # one `cagtool run` the first time a test asks


@pytest.fixture(scope="module")
def recorded(record_run):
    run = record_run("../tests/scripts/reentrant_checkpoint_last_batch.py")
    assert run.returncode == 0, run.stderr[-2000:]
    return run


def test_a_last_batch_through_a_reentrant_checkpoint_is_named_and_dropping_it_is_the_first_fix(recorded):
    table = recompile_table(load_run(recorded.path).modes["ca"])
    causes = explain(table).causes
    shapes = next(c for c in causes if c.code == CAUSE_SHAPES)
    # Each changed size's earlier value comes from the size guards of the code the new graph ran in its step.
    assert all(e["values"] == [8, 7] for e in shapes.facts["sizes"].values()), shapes.facts["sizes"]
    words = cause_words(shapes, table.cwd)
    why = " ".join(words.why)
    assert "Every size that changed got smaller, once" in why and "it came at the run's last step, 3" in why
    assert "changed again" not in why
    assert "In the same step Dynamo recompiled code that the new graph runs" in why and "!1/1/1 at step 3" in why
    # No DataLoader in this job (the record counts none): the last batch is a slice the script made.
    assert words.fix[0].startswith("If it is the last batch: no DataLoader ran in this job, so it is a slice the script makes itself")
    assert "For a last batch this moves the recompile more than it removes it" in words.fix[1]
    # The recompute's own recompile: no mark reaches it, so the batch is its first fix too.
    recompute = next(c for c in causes if c.code == CAUSE_DYNAMO_FRAME)
    assert recompute.facts["reentrant_recompute"] == "Block.forward"
    assert cause_words(recompute, table.cwd).fix[0].startswith("If it is the last batch: no DataLoader ran in this job")


def test_the_summary_lists_the_recompute_once_and_gives_its_phase(recorded):
    code, out, err = cli_in_process("summary", str(recorded.path))
    assert code == 0, err
    text = " ".join(out.split())
    recompute = next(line for line in out.splitlines() if "size mismatch" in line and "'x'" in line)
    compile_id = recompute.split("recompile ", 1)[1].split()[0]
    assert text.count(f"recompile {compile_id} ") == 1, out
    assert f"phase of {compile_id} at step 3: activation-checkpoint recompute in the backward (use_reentrant=True) of Block.forward" in text
