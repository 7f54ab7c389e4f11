"""`compare A B` says which steps each step-time figure is over: each run's medians are over its own
steady steps, the speedup over the steps steady in both. A run that recompiled at step 2 and its fix
that did not: on the steps both timed nothing changed (1.00x), while B's median, over two more quick
steps, is lower. Without a word on the steps, the two rows read as a contradiction."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.manifest import ModeManifest, RunMeta
from cagtool.record.schema import Event, FinalStateEvent, StepEvent
from cagtool.report.compare.analysis import compare_runs
from cagtool.report.compare.render import render_comparison
from cagtool.report.text.console import make_console

# Steps 3..10 as both runs time them; B's steps 1 and 2, steady in B only, are quick.
COMMON = {n: 0.002 * (n - 1) for n in range(3, 11)}


def _run(path: Path, walls: dict[int, float], compiling: tuple[int, ...]) -> RunRecord:
    events: list[Event] = []
    t = 1.0
    for n in range(max(walls) + 1):
        t += walls.get(n) or 0.05
        events.append(StepEvent(seq=n, t=t, step=n, backward_s=0.0001, loss=1.0, compiles=1 if n in compiling else 0,
                                wall_s=walls.get(n), boundary="optimizer"))
    events.append(FinalStateEvent(seq=999, t=99.0, param_norm=10.0, grad_norm=1.0, num_params=3))
    manifest = ModeManifest(mode="ca", argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/", versions={},
                            backend="eager", dynamic=False, started_at="2026-01-01T00:00:00+00:00", status="finished", exit_code=0,
                            peak_rss_bytes=100 * 2**20)
    meta = RunMeta(run_id=path.name, created_at="2026-01-01T00:00:00+00:00", cagtool_argv=[], target={"kind": "script", "name": "train.py"},
                   target_argv=["train.py"], cwd="/", modes=["ca"], versions={}, machine={}, mode_exit_codes={"ca": 0})
    return RunRecord(path=path, meta=meta, modes={"ca": ModeRecord(path=path / "ca", manifest=manifest, events=events)})


def _rendered(comparison, fmt: str) -> str:
    buffer = io.StringIO()
    render_comparison(comparison, fmt, make_console(file=buffer, width=120))
    return buffer.getvalue()


def test_the_speedup_and_the_medians_say_which_steps_they_are_over(tmp_path):
    before = _run(tmp_path / "a", COMMON, compiling=(0, 2))  # steps 1 and 2 not steady
    after = _run(tmp_path / "b", {1: 0.001, 2: 0.001, **COMMON}, compiling=(0,))
    rc = compare_runs(before, after)
    [change] = rc.changes
    assert change.speedup.ratio == pytest.approx(1.0)
    assert change.after.step_time.median_s < change.before.step_time.median_s  # the row that read as a contradiction
    said = ("ca: the speedup is over the 8 steps steady in both runs (left out: steps 1, 2); "
            "the step time rows are over each run's own steady steps (A: 8, B: 10)")
    assert said in rc.notes, rc.notes
    assert f"note: {said}" in " ".join(_rendered(rc, "table").split())
    assert f"- note: {said}" in _rendered(rc, "markdown")
    assert said in json.loads(_rendered(rc, "json"))["notes"]


def test_runs_steady_on_the_same_steps_need_no_such_note(tmp_path):
    rc = compare_runs(_run(tmp_path / "a", COMMON, compiling=(0, 2)), _run(tmp_path / "b", COMMON, compiling=(0, 2)))
    assert not any("steps steady in both runs" in n for n in rc.notes), rc.notes
