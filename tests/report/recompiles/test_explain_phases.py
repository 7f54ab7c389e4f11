"""`recompiles --explain` on a long job's phases (tests/scripts/training_phases.py, the shape a user's
long job had): a curriculum, an unfreeze, a loss switched later, gradient accumulation switched on,
an evaluation every epoch. Each recompile is put with the phase that made it: the evaluation's
recompile after the unfreeze is said to come between steps, not in a training step; the forward's
size recompiles keep their backward captures though a later loss switch makes a capture of its
own; accumulation begun at a later phase is said to be that, with nothing to fix. A real `cagtool
run` of a real torch job (ca mode), its counts held to torch's own."""

from __future__ import annotations

import ast

from conftest import ROOT

from cagtool.record.loader import load_run
from cagtool.report.recompiles.explain import (
    CAUSE_DYNAMO_FRAME,
    CAUSE_GRAD_DEFINED,
    CAUSE_STRUCTURE,
    cause_words,
    evaluation_compile,
    explain,
)
from cagtool.report.recompiles.render import step_cell
from cagtool.report.recompiles.table import recompile_table
from cagtool.torch_text import GUARD_REQUIRES_GRAD, GUARD_SIZE


def test_each_recompile_of_a_phased_job_is_put_with_its_phase(record_run):
    run = record_run(str(ROOT / "tests" / "scripts" / "training_phases.py"))
    assert run.returncode == 0, run.stderr[-3000:]
    printed = {line.split()[1]: ast.literal_eval(line.split(" ", 2)[2]) for line in run.stdout.splitlines() if line.startswith("COUNTERS ")}
    record = load_run(run.path).modes["ca"]
    assert record.manifest.torch_counters["compiled_autograd"]["captures"] == printed["compiled_autograd"]["captures"]
    table = recompile_table(record)
    explanation = explain(table)
    causes = explanation.causes

    # The unfreeze at step 15, and the evaluation after step 19 that met the unfrozen parameters
    # with grad off: one cause, said at both places; the evaluation's row is "after 19".
    [unfreeze] = [c for c in causes if c.code == CAUSE_DYNAMO_FRAME and c.facts.get("kind") == GUARD_REQUIRES_GRAD]
    assert unfreeze.place == "step 15, between steps 19 and 20"
    [evaluated] = [r for r in unfreeze.rows if evaluation_compile(table, r)]
    assert step_cell(table, evaluated) == "after 19"
    # One unfreeze (its evaluation's recompile is the same change): nothing to fix, not "unfreeze in stages".
    assert cause_words(unfreeze, str(ROOT)).fix[0].startswith("Nothing to fix for an unfreeze done once")

    # The forward's size recompiles (the last batch at step 4, the longer sequences at step 10) each
    # keep the backward capture that follows them, though the loss switched at step 20 made another.
    sizes = [c for c in causes if c.code == CAUSE_DYNAMO_FRAME and c.facts.get("kind") == GUARD_SIZE]
    assert sorted(c.steps for c in sizes) == [[4], [10]]
    for cause in sizes:
        [follower] = [c for c in causes if c.caused_by == cause.number]
        assert follower.code == CAUSE_STRUCTURE and follower.steps == cause.steps
    [switched] = [c for c in causes if c.code == CAUSE_STRUCTURE and c.caused_by is None]
    assert switched.steps == [20]

    # Accumulation from step 25: the .grad miss is that, and nothing to fix.
    [accumulated] = [c for c in causes if c.code == CAUSE_GRAD_DEFINED]
    words = cause_words(accumulated, str(ROOT))
    assert accumulated.steps == [25] and accumulated.facts["accumulation_from"] == 25
    assert any("Gradient accumulation began at step 25" in line for line in words.why)
    assert words.fix[0].startswith("Nothing to fix:") and not any("zero_grad(set_to_none=True)" in f for f in words.fix)
