"""cagtool's replacement for the autograd engine's entry point survives code that saves and
restores it, and a replacement that bypasses it is reported, never silent. Real torch, in process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from cagtool.capture.steps.tracker import BACKWARD_ENTRY_REPLACED, BACKWARD_ENTRY_RESTORED, StepTracker
from cagtool.record.writer import RecordWriter
from cagtool.record.manifest import ModeManifest


class Tracked:
    def __init__(self, tmp_path: Path) -> None:
        manifest = ModeManifest(mode="aot", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
        self.dir = tmp_path / "aot"
        self.writer = RecordWriter(self.dir, manifest)
        self.steps = StepTracker(self.writer, "aot")
        self.closed = False

    def finish(self) -> None:
        """Uninstalled and the record closed (per-step lines may wait in memory until then)."""
        if not self.closed:
            self.closed = True
            self.steps.uninstall()
            self.writer.close()

    def events(self, kind: str) -> list[dict[str, Any]]:
        self.finish()
        lines = (self.dir / "events.jsonl").read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["kind"] == kind]


@pytest.fixture
def tracked(tmp_path: Path) -> Iterator[Tracked]:
    original = (torch.autograd._engine_run_backward, torch.autograd.graph._engine_run_backward)
    tracked = Tracked(tmp_path)
    tracked.steps.install()
    try:
        yield tracked
    finally:
        tracked.finish()
        torch.autograd._engine_run_backward, torch.autograd.graph._engine_run_backward = original


def _train_step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    opt.zero_grad()


def test_torch_patch_engine_backward_leaves_cagtools_entry_in_place(tracked):
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _train_step(model, opt)
    with torch.compiler._patch_engine_backward():  # saves torch.autograd.graph's, restores both on exit
        pass
    for _ in range(3):
        _train_step(model, opt)
    assert len(tracked.events("backward")) == 6
    assert tracked.events("finding") == []


def test_torch_own_entry_put_back_is_replaced_again_and_reported(tracked):
    steps = tracked.steps
    torch_own = steps._original_run_backward  # what a library saved before cagtool started
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt)
    torch.autograd._engine_run_backward = torch_own  # the library "restores" it
    _train_step(model, opt)  # this backward is not seen; its optimizer step notices
    _train_step(model, opt)
    _train_step(model, opt)
    assert torch.autograd._engine_run_backward is steps._entry  # cagtool's again
    assert len(tracked.events("backward")) == 3  # all but the one made while torch's own was in place
    findings = tracked.events("finding")
    assert [f["code"] for f in findings] == [BACKWARD_ENTRY_RESTORED]


def test_a_replacement_that_bypasses_cagtool_is_reported_and_left_in_place(tracked):
    steps = tracked.steps
    torch_own = steps._original_run_backward
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt)

    def other_profilers_entry(*args: Any, **kwargs: Any) -> Any:
        return torch_own(*args, **kwargs)

    torch.autograd._engine_run_backward = other_profilers_entry
    _train_step(model, opt)
    _train_step(model, opt)
    assert torch.autograd._engine_run_backward is other_profilers_entry  # the job's choice stands
    findings = tracked.events("finding")
    assert [f["code"] for f in findings] == [BACKWARD_ENTRY_REPLACED]
    assert "other_profilers_entry" in findings[0]["detail"]["entry_point"]
