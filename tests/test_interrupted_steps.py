"""Steps that hold other work than training, an evaluation (StepEvent.evaluation: a module switched
to eval mode in the step's span) or a DataLoader's workers starting (StepEvent.workers_started), are
left out of the steady figures, read through the sidecar or line by line alike, unless they are not
fewer than the other steady steps; the job itself is unchanged by the wrapped Module.train and
DataLoader._get_iterator (torch's counters are plain python's, inside compiled functions too)."""

from __future__ import annotations

import json

import pytest

from cagtool.record.loader import load_run
from cagtool.record.schema import Event, OptimizerStepEvent, StepEvent
from cagtool.report.compare.render import excluded_line
from cagtool.report.figures.metrics import StepColumns, interrupted_steps, mode_metrics, steady_step_numbers
from cagtool.report.compare.analysis import compare_modes
from cagtool.report.summary import left_out_words
from event_records import both_loads, line, write_run

# The step after each epoch's evaluation, as in a Lightning job's (helper's job3: 34 ms against ~4 ms).
_EVALUATED = (6, 12)


def _steps(count: int = 18, evaluated: tuple[int, ...] = _EVALUATED, compiled: tuple[int, ...] = (0,)) -> list[Event]:
    events: list[Event] = []
    for step in range(count):
        events.append(OptimizerStepEvent(seq=len(events), t=step * 0.01, step=step, wall_s=0.0005, optimizer="SGD"))
        events.append(StepEvent(seq=len(events), t=step * 0.01 + 0.001, step=step, backward_s=0.001, compiles=int(step in compiled),
                                wall_s=None if step == 0 else (0.034 if step in evaluated else 0.004 + step * 1e-5), boundary="optimizer",
                                evaluation=step in evaluated))
    return events


def test_a_step_holding_an_evaluation_is_left_out_of_the_steady_figures_through_the_sidecar_and_the_lines(tmp_path):
    run = write_run(tmp_path / "r", {"ca": [line(e) for e in _steps()]})
    for record in both_loads(run / "ca"):
        assert interrupted_steps(record).steps == frozenset(_EVALUATED) and interrupted_steps(record).kinds == ("evaluation",)
        st = mode_metrics(record).step_time
        assert st.interrupted == _EVALUATED and st.interruptions == ("evaluation",) and sorted(st.excluded) == [0, *_EVALUATED]
        assert st.count == 15 and st.p90_s < 0.005  # the 34 ms steps are not in the p90
        assert 6 not in steady_step_numbers(record).tolist()
        assert left_out_words(st) == "; 1 compile-affected step and 2 steps holding a switch to eval mode left out"


def test_a_job_that_evaluates_in_every_step_keeps_its_steps():
    """A rollout before every update: no steady step is without one, so they are the job's steps."""
    columns = StepColumns.of_events([e for e in _steps(evaluated=tuple(range(1, 18))) if isinstance(e, StepEvent)])
    assert columns.interrupted == frozenset()
    half = StepColumns.of_events([e for e in _steps(evaluated=tuple(range(1, 10))) if isinstance(e, StepEvent)])
    assert half.interrupted == frozenset()  # 9 with one, 8 without: not fewer
    fewer = StepColumns.of_events([e for e in _steps(evaluated=tuple(range(1, 9))) if isinstance(e, StepEvent)])
    assert fewer.interrupted == frozenset(range(1, 9))


def test_the_comparison_names_the_steps_an_evaluation_left_out_apart_from_compiled_ones(tmp_path):
    run = write_run(tmp_path / "r", {mode: [line(e) for e in _steps()] for mode in ("eager", "ca")})
    comparison = compare_modes(load_run(run))
    said = excluded_line(comparison)
    assert said == ("Steps left out of the steady state because compilation touched them: eager: step 0; ca: step 0. Steps left out "
                    "because other work than training ran in them (a switch to eval mode): eager: steps 6, 12; ca: steps 6, 12")


@pytest.mark.slow
@pytest.mark.parametrize("variants", [("loop",), ("inside", "every"), ("workers",)])
def test_evaluations_between_steps_leave_the_job_unchanged_and_mark_its_steps(variants, tmp_path):
    """tests/scripts/work_between_steps.py: torch's counters equal plain python's (model.train()
    and model.eval() inside compiled functions included: Dynamo traces torch's train() there); an
    evaluation after each epoch marks the step after it; one before every update leaves every step in."""
    from plain_counters import plain_and_recorded

    plain, run, record = plain_and_recorded("tests/scripts/work_between_steps.py", variants, tmp_path / "r")
    assert run.stdout == plain
    assert json.loads(plain.splitlines()[-1])["frames"]["ok"] >= 1  # the counters line, compiled frames in it
    aot = record.mode("aot")
    flagged = [s.step for s in aot.of(StepEvent) if s.evaluation]
    if variants == ("workers",):
        # Each epoch's iterator starts the worker: steps 0 (compiled anyway), 6 and 12.
        started = [s.step for s in aot.of(StepEvent) if s.workers_started]
        assert flagged == [] and started == [0, 6, 12]
        assert interrupted_steps(aot).steps == frozenset({6, 12}) and interrupted_steps(aot).kinds == ("workers_started",)
        assert "2 steps holding a DataLoader's workers starting left out" in left_out_words(mode_metrics(aot).step_time)
        # A job whose only other processes are its DataLoader's workers has no ranks: the one-rank
        # reports say nothing of ranks ("ranks none; ... the ranks agree", and a --rank N that leads nowhere).
        from conftest import cli_in_process

        code, text, err = cli_in_process("recompiles", str(tmp_path / "r"), env={"CI": "true"})
        assert code == 0 and "ranks" not in text and "--rank" not in text, (text, err)
    elif variants == ("loop",):
        assert flagged == [6, 12]
        # Step 6 compiled the forward for grad off (the evaluation's): left out for that; step 12 for its evaluation.
        assert interrupted_steps(aot).steps == frozenset({12}) and mode_metrics(aot).step_time.interrupted == (12,)
    else:
        # `inside`'s 6 steps: model.eval() inside a compiled function is Dynamo's to run, never noted;
        # `every`'s 8 steps each hold one, more than the steps without: all kept.
        assert flagged == list(range(6, 14))
        assert interrupted_steps(aot).steps == frozenset()
