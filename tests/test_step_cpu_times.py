"""Every step after the first has its CPU times, whatever ends it: a backward's end reads the CPU
clocks only where it can end a step (capture/steps/hooks.py), so the step shapes where that is a
question (no optimizer, one collected, several, one that stops being waited for) are run here with
real torch, in process, and each step's cpu_s and thread_cpu_s are read back from the record."""

from __future__ import annotations

import gc
import json
import runpy
from pathlib import Path

import pytest
import torch

from cagtool.capture.steps.tracker import IDLE_OPTIMIZER_STEPS, StepTracker
from cagtool.record.manifest import ModeManifest
from cagtool.record.loader import load_mode
from cagtool.record.schema import StepEvent
from cagtool.record.writer import RecordWriter

SHAPES = Path(__file__).parent / "scripts" / "step_bookkeeping.py"


def _idle_then_collected() -> None:
    """Two optimizers; the second stops being waited for (it idles while the first steps), then the
    first is collected: with the second still alive, each backward ends a step of its own."""
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.01), torch.optim.SGD(b.parameters(), lr=0.01)
    for _ in range(IDLE_OPTIMIZER_STEPS + 2):
        a(torch.randn(3, 2)).sum().backward()
        opt_a.step()
    del opt_a
    gc.collect()
    for _ in range(3):
        a(torch.randn(3, 2)).sum().backward()
    assert opt_b is not None


@pytest.mark.slow
def test_every_step_but_the_first_has_its_cpu_times(tmp_path: Path) -> None:
    original = (torch.autograd._engine_run_backward, torch.autograd.graph._engine_run_backward)
    manifest = ModeManifest(mode="eager", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
    writer = RecordWriter(tmp_path / "eager", manifest)
    steps = StepTracker(writer, "eager")
    steps.install()
    try:
        runpy.run_path(str(SHAPES), run_name="__main__")
        _idle_then_collected()
    finally:
        steps.uninstall()
        writer.close()
        torch.autograd._engine_run_backward, torch.autograd.graph._engine_run_backward = original
    events = [json.loads(line) for line in (tmp_path / "eager" / "events.jsonl").read_text().splitlines()]
    records = [e for e in events if e["kind"] == "step"]
    # the shapes' own 14 steps (test_step_bookkeeping.py counts them), then the idle shape's 15: the
    # first optimizer's 12 steps, each a step once the idle rule stopped waiting for the second (10
    # counted together when the 10th showed it), then three ended by backward calls
    assert len(records) == 29 and sum(r["boundary"] == "backward" for r in records) == 7
    assert [r["backward_calls"] for r in records[-15:]] == [1] * (IDLE_OPTIMIZER_STEPS + 5)
    first, *rest = records
    assert first["cpu_s"] is None and first["thread_cpu_s"] is None
    missing = [(r["step"], r["boundary"]) for r in rest if not (isinstance(r["cpu_s"], float) and isinstance(r["thread_cpu_s"], float))]
    assert not missing  # every later step: process and (one thread) thread CPU time
    assert all(r["cpu_s"] >= 0 and r["thread_cpu_s"] >= 0 for r in rest)
    # the last three steps are the idle shape's backward-only ones, ended with an optimizer alive
    assert [r["boundary"] for r in records[-3:]] == ["backward"] * 3


def test_a_boundary_counted_after_a_later_one_has_no_negative_time(tmp_path: Path) -> None:
    """Two threads' backwards: one thread reads its clocks, another reads later ones, and the
    other's note is counted first. The step counted second has no span (never a negative time,
    which no reader accepts) and the next step is measured from the later boundary."""
    manifest = ModeManifest(mode="eager", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
    writer = RecordWriter(tmp_path / "eager", manifest)
    counter = StepTracker(writer, "eager").counter
    t0 = writer.t0
    readings = [(t0 + 1.0, (5.0, 1.0, 1)), (t0 + 2.0, (6.0, 2.0, 2)), (t0 + 1.5, (5.5, 1.5, 1)), (t0 + 3.0, (5.9, 3.0, 2))]
    for clock, cpu in readings:
        counter.close("backward", clock, cpu, False)
    writer.close()
    steps = load_mode(tmp_path / "eager").of(StepEvent)
    assert [s.step for s in steps] == [0, 1, 2, 3]
    assert [s.wall_s for s in steps] == [None, pytest.approx(1.0), None, pytest.approx(1.0)]
    # process CPU time read out of order too (the fourth read before the second's): unknown, not negative
    assert [s.cpu_s for s in steps] == [None, pytest.approx(1.0), None, None]
    assert [s.thread_cpu_s for s in steps] == [None, None, None, pytest.approx(1.0)]  # the same thread read both ends
