"""The first step, the one that holds the compiles, is timed (`metrics.first_step_time`): no step
ended before it, so its `wall_s` is empty, but the recorder sees when its first compile began (the
step's first forward calling compiled code) and when its first backward began. Pinned on real
recorded runs: the figure, what it is measured from, and that the steady-state figures (and so
every verdict) leave it out as before."""

from __future__ import annotations

import pytest

from conftest import as_old_schema

from cagtool.record.loader import load_run
from cagtool.record.schema import BackwardEvent, DynamoCompileEvent, StepEvent
from cagtool.report.figures.metrics import (
    FIRST_STEP_FROM_BACKWARD,
    FIRST_STEP_FROM_COMPILE,
    first_step_time,
    mode_metrics,
    record_step_intervals,
)


@pytest.fixture(scope="module")
def three_modes(record_run):
    run = record_run("graph_breaks.py", "3", modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr
    return run.path


def test_the_compile_step_is_timed_from_its_first_compile(three_modes):
    run = load_run(three_modes)
    for name in ("aot", "ca"):
        record = run.modes[name]
        first = first_step_time(record)
        steps = sorted(record.of(StepEvent), key=lambda e: e.step)
        compiles = [d for d in record.of(DynamoCompileEvent) if d.step == 0]
        assert first is not None and first.step == 0 and first.compile_affected
        assert first.measured_from == FIRST_STEP_FROM_COMPILE and first.includes_forward
        # From the earliest compile's start (before the first backward began) to the step's end.
        assert first.start_t == min(d.t - d.entire_frame_compile_time_s for d in compiles)
        backward = next(b for b in record.of(BackwardEvent) if b.step == 0)
        assert first.start_t < backward.t - backward.backward_s
        assert first.end_t == steps[0].t and first.seconds == first.end_t - first.start_t
        # It spans the step's compiles, and is the slowest step of the run.
        assert first.seconds >= steps[0].compile_s
        assert first.seconds > max(s.wall_s for s in steps[1:])


def test_the_steady_figures_leave_the_first_step_out(three_modes):
    """The verdicts rest on the steady steps: step 0 is excluded (it compiled) and its new figure
    is in none of them."""
    run = load_run(three_modes)
    for name, record in run.modes.items():
        steps = sorted(record.of(StepEvent), key=lambda e: e.step)
        intervals, excluded, _ = record_step_intervals(record)
        steady = [s.wall_s for s in steps if s.wall_s is not None and not (s.compiles or s.ca_captures)]
        assert sorted(intervals) == sorted(steady)
        stats = mode_metrics(record).step_time
        assert stats is not None and stats.count == len(steady)
        if name != "eager":
            assert excluded == [0] and first_step_time(record).seconds not in intervals


def test_a_first_step_without_a_compile_is_timed_from_its_backward(three_modes):
    """eager compiles nothing: the first thing of step 0 the recorder sees is its backward call
    (its forward is invisible), and the figure says so."""
    record = load_run(three_modes).modes["eager"]
    first = first_step_time(record)
    backward = next(b for b in record.of(BackwardEvent) if b.step == 0)
    assert first is not None and not first.compile_affected
    assert first.measured_from == FIRST_STEP_FROM_BACKWARD and not first.includes_forward
    assert first.start_t == backward.t - backward.backward_s


def test_schema_1_records_time_their_first_step_already(three_modes, tmp_path):
    old = load_run(as_old_schema(three_modes, tmp_path / "schema1", 1))
    assert all(first_step_time(record) is None for record in old.modes.values())
