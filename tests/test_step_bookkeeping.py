"""The step tracker's hooks only note what happened; its drain counts the notes later, in order
(capture/steps/tracker.py). These pin that a count made later is the count made in the hook: the same
events, numbers and order as the tracker that counted in its hooks gave (the expected rows were
read from its record of the same script), and the same as this tracker's synchronous path, which
`--steps` takes (each hook drains at once, so it can stop the run in the step's own call)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from cagtool.record.loader import load_run
from cagtool.record.schema import BackwardEvent, OptimizerStepEvent, StepEvent

SCRIPT = str(Path(__file__).parent / "scripts" / "step_bookkeeping.py")

# (b, step, index, call) a backward call, (o, step, optimizer) an optimizer step, (s, step, boundary,
# backward calls) a step, in file order: recorded by the tracker that counted in its hooks (60e33b4).
EXPECTED = [
    ("b", 0, 0, "backward"), ("s", 0, "backward", 1), ("b", 1, 0, "backward"), ("s", 1, "backward", 1),  # no optimizer yet
    *[row for step in (2, 3, 4) for row in ([("b", step, i, "backward") for i in range(3)] + [("o", step, "SGD"), ("s", step, "optimizer", 3)])],
    *[row for step in (5, 6) for row in [("b", step, 0, "grad"), ("b", step, 1, "backward"), ("o", step, "SGD"), ("s", step, "optimizer", 2)]],
    *[row for step in (7, 8, 9) for row in [("b", step, 0, "backward"), ("o", step, "Adam"), ("b", step, 1, "backward"), ("o", step, "Adam"),
                                            ("b", step, 2, "backward"), ("o", step, "SGD"), ("s", step, "optimizer", 3)]],  # the GAN
    *[row for step in (10, 11) for row in [("b", step, 0, "backward"), ("o", step, "SGD"), ("s", step, "optimizer", 1)]],  # Adam collected
    # Per-parameter optimizers stepped inside the backward; the SGD still waited for never steps.
    *[("o", 12, "SGD")] * 4, ("b", 12, 0, "backward"), *[("o", 12, "SGD")] * 4, ("b", 12, 1, "backward"),
    ("b", 12, 2, "backward"), ("s", 12, "backward", 3),  # every optimizer collected: backward calls end steps again
    ("b", 13, 0, "backward"), ("s", 13, "backward", 1),
]


def _rows(mode) -> list[tuple]:
    rows = []
    for event in sorted([*mode.of(BackwardEvent), *mode.of(OptimizerStepEvent), *mode.of(StepEvent)], key=lambda e: e.seq):
        if isinstance(event, BackwardEvent):
            rows.append(("b", event.step, event.index, event.call))
        elif isinstance(event, OptimizerStepEvent):
            rows.append(("o", event.step, event.optimizer))
        else:
            rows.append(("s", event.step, event.boundary, event.backward_calls))
    return rows


def _untimed(mode) -> list[dict]:
    """Every event of the mode without its times (the only thing two runs may differ in)."""
    return [{k: v for k, v in msgspec.structs.asdict(e).items() if k != "t" and not k.endswith("_s")} for e in mode.events]


@pytest.mark.slow
def test_steps_counted_after_the_hooks_are_those_counted_in_them(record_run):
    run = record_run(SCRIPT, modes="eager")
    assert run.returncode == 0, run.stderr
    eager = load_run(run.path).mode("eager")
    assert _rows(eager) == EXPECTED
    steps = eager.of(StepEvent)
    assert [s.step for s in steps] == list(range(14))
    # Every loss is the one its backward call read, and a step's is its last backward's.
    backwards = eager.of(BackwardEvent)
    assert all(isinstance(b.loss, float) for b in backwards)
    assert [s.loss for s in steps] == [[b for b in backwards if b.step == s.step][-1].loss for s in steps]


@pytest.mark.slow
def test_the_synchronous_path_records_the_same_events(record_run):
    deferred = record_run(SCRIPT, modes="eager")
    synchronous = record_run(SCRIPT, modes="eager", extra=("--steps", "1000"))  # each hook counts at once
    assert deferred.returncode == synchronous.returncode == 0, synchronous.stderr
    a, b = load_run(deferred.path).mode("eager"), load_run(synchronous.path).mode("eager")
    assert _rows(b) == EXPECTED
    assert _untimed(a) == _untimed(b)
