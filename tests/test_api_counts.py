"""The Python API counts like `cagtool run`: the README's example shape (model and optimizer made
before `with cagtool.capture()`, the loop inside), on a real tiny model, gives the loop's steps,
one backward call each, the shape change at the step it happened, the process's peak RSS, and
the same figures `cagtool run` records for the same loop as a script."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch

import cagtool
from cagtool.record.schema import EVENT_TYPES, BackwardEvent, CacheMissEvent, StepEvent
from cagtool.report.frames import events_frame

ROOT = Path(__file__).resolve().parent.parent

# The loop, as a script for `cagtool run` and as functions for the API: six steps, the batch
# grows from 4 to 6 rows at step 3 (a CA recompile for changed sizes there).
LOOP = textwrap.dedent(
    """
    import torch

    def build():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        return model, torch.optim.SGD(model.parameters(), lr=0.01)

    def batches(steps=6, change_at=3):
        for step in range(steps):
            yield torch.randn(4 if step < change_at else 6, 8)

    def train_step(model, opt, x, accumulate=1):
        opt.zero_grad()
        for part in x.chunk(accumulate):
            model(part).pow(2).mean().backward()
        opt.step()

    if __name__ == "__main__":
        model, opt = build()
        for x in batches():
            train_step(model, opt, x)
    """
)


@pytest.fixture
def loop() -> dict:
    namespace: dict = {"__name__": "loop"}
    exec(compile(LOOP, "loop.py", "exec"), namespace)
    return namespace


def _mode_json(cap) -> dict:
    return cap.summary("json")["modes"]["ca"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_readme_shape_counts_the_loops_steps_and_the_shape_change_at_its_step(tmp_path, loop, backend, capsys):
    model, opt = loop["build"]()  # before the block, as in the README
    with cagtool.capture(backend=backend, output=tmp_path / "run", reset=True) as cap:
        for x in loop["batches"]():
            loop["train_step"](model, opt, x)
    mode = _mode_json(cap)
    assert mode["steps"] == 6  # was 7: the first backward a step of its own, then its step() another
    assert mode["backward_calls"] == 6
    assert mode["backward_calls_per_step"] == [1]
    assert mode["step_boundary"] == "optimizer"
    assert [(m["kind"], m["step"]) for m in mode["cache_misses"]] == [("new_node", 0), ("changed_shapes", 3)]  # was step 4
    frame = cap.steps_frame()
    assert list(frame.index) == [0, 1, 2, 3, 4, 5]
    assert list(frame["backward_calls"]) == [1] * 6
    assert list(frame["ca_captures"]) == [1, 0, 0, 1, 0, 0]
    # The process's peak RSS, a real figure (it holds torch: well over 50 MiB)
    peak = cagtool.load(cap.path).mode("ca").manifest.peak_rss_bytes
    assert isinstance(peak, int) and peak > 50 * 2**20
    out = cap.summary()
    assert "6 steps (optimizer steps, one backward call each)" in out
    assert "peak memory: RSS -" not in out and "peak memory: RSS " in out


def test_gradient_accumulation_with_the_optimizer_made_before_the_block(tmp_path, loop):
    model, opt = loop["build"]()
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        for x in loop["batches"](steps=3, change_at=3):
            loop["train_step"](model, opt, x, accumulate=2)
    mode = _mode_json(cap)
    assert (mode["steps"], mode["backward_calls"], mode["backward_calls_per_step"]) == (3, 6, [2])


def test_without_an_optimizer_step_every_backward_is_a_step_though_an_optimizer_is_alive(tmp_path, loop):
    model, stale = loop["build"]()  # alive, never stepped in the block (an earlier notebook cell's)
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        for x in loop["batches"](steps=4, change_at=4):
            model(x).pow(2).mean().backward()
    mode = _mode_json(cap)
    assert (mode["steps"], mode["backward_calls"], mode["step_boundary"]) == (4, 4, "backward")
    assert [b.step for b in cagtool.load(cap.path).mode("ca").of(BackwardEvent)] == [0, 1, 2, 3]
    del stale


@pytest.mark.slow
def test_the_api_and_cagtool_run_record_the_same_counts_for_the_same_loop(tmp_path, loop):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    proc = subprocess.run(
        [sys.executable, "-m", "cagtool", "run", "--modes", "ca", "--backend", "eager", "--no-report",
         "-o", str(tmp_path / "cli"), str(script)],
        capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    model, opt = loop["build"]()
    with cagtool.capture(backend="eager", output=tmp_path / "api", reset=True):
        for x in loop["batches"]():
            loop["train_step"](model, opt, x)

    def counts(path: Path) -> dict:
        record = cagtool.load(path).mode("ca")
        return {
            "steps": [(s.step, s.backward_calls, s.ca_captures, s.boundary) for s in record.of(StepEvent)],
            "backwards": [(b.step, b.index) for b in record.of(BackwardEvent)],
            "misses": [(m.miss_kind, m.step) for m in record.of(CacheMissEvent)],
        }

    cli, api = counts(tmp_path / "cli"), counts(tmp_path / "api")
    assert api == cli
    assert len(api["steps"]) == 6 and api["misses"] == [("new_node", 0), ("changed_shapes", 3)]


def test_events_frame_lists_the_kinds_without_one_and_reads_a_loaded_run(tmp_path, loop):
    model, opt = loop["build"]()
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        for x in loop["batches"](steps=2, change_at=2):
            loop["train_step"](model, opt, x)
    kinds = cap.events_frame()  # was TypeError: missing 'kind'
    assert list(kinds.columns) == ["kind", "count"]
    assert set(kinds["kind"]) == set(EVENT_TYPES)
    counted = dict(zip(kinds["kind"], kinds["count"]))
    assert counted["step"] == 2 and counted["backward"] == 2 and counted["ca_graph"] == 1
    run = cagtool.load(cap.path)
    # The README's form: a record from cagtool.load() (was AttributeError: no `events`)
    misses = events_frame(run, "ca_cache_miss")
    assert isinstance(misses, pd.DataFrame) and list(misses["compile_id"]) == ["!0"]
    pd.testing.assert_frame_equal(misses, cap.events_frame("ca_cache_miss"))
    pd.testing.assert_frame_equal(events_frame(run), kinds)
    with pytest.raises(ValueError, match="unknown event kind 'nope'; kinds: "):
        cap.events_frame("nope")
    assert json.dumps(cap.summary("json"))  # still one JSON document


def test_the_optimizer_scan_does_not_keep_optimizers_alive(tmp_path, loop):
    import gc
    import weakref

    model, opt = loop["build"]()
    ref = weakref.ref(opt)
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True):
        del opt
        gc.collect()
        assert ref() is None
        model(torch.randn(4, 8)).sum().backward()


def test_past_the_undecided_bound_backwards_are_counted_as_steps_of_their_own(tmp_path, loop, monkeypatch):
    import cagtool.capture.steps.tracker as steps_module

    monkeypatch.setattr(steps_module, "UNDECIDED_NOTES", 6)  # three backward calls wait, then no more
    model, stale = loop["build"]()
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        for x in loop["batches"](steps=8, change_at=8):
            model(x).pow(2).mean().backward()
    record = cagtool.load(cap.path).mode("ca")
    assert [b.step for b in record.of(BackwardEvent)] == list(range(8))
    assert [s.backward_calls for s in record.of(StepEvent)] == [1] * 8
    del stale
