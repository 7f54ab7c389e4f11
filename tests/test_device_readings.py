"""Deferred losses (capture/steps/device_readings.py): what cagtool holds for them and how they are read
at the end. The CUDA copy into page-locked host memory needs a GPU (none in CI); what runs without
one is tested here: a loss not on CUDA is held as a tensor and counted, and the end-of-run read
takes host-chunk slots and held tensors alike, in step order."""

from __future__ import annotations

import json

import torch

from cagtool.capture.steps import device_readings
from cagtool.capture.steps.device_readings import DeviceReadings
from cagtool.record.writer import RecordWriter
from cagtool.record.manifest import ModeManifest
from cagtool.record.schema import EVENTS_FILE


def _readings(tmp_path) -> tuple[DeviceReadings, RecordWriter]:
    manifest = ModeManifest(mode="ca", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
    writer = RecordWriter(tmp_path, manifest)
    return DeviceReadings(writer), writer


def _losses(tmp_path) -> dict[int, float]:
    lines = [json.loads(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    return {line["step"]: line["loss"] for line in lines if line.get("kind") == "step_device" and line.get("loss") is not None}


def test_a_loss_not_on_cuda_is_held_and_counted(tmp_path):
    readings, writer = _readings(tmp_path)
    readings.defer_loss(0, torch.tensor(1.5))
    readings.defer_loss(1, torch.tensor(2.5, dtype=torch.bfloat16))
    assert readings.footprint() == {"pinned_host_bytes": 0, "losses_held_on_device": 2}
    readings.finish()
    writer.close()
    assert _losses(tmp_path) == {0: 1.5, 1: 2.5}


def test_host_chunk_slots_and_held_tensors_are_read_in_step_order(tmp_path):
    """The slots a CUDA copy fills (a chunk of float32 values, here an ordinary tensor standing for
    the page-locked one) are read once, beside losses held as tensors."""
    readings, writer = _readings(tmp_path)
    readings._chunks = [torch.tensor([0.25, 0.5, 0.0], dtype=torch.float32)]
    readings._losses = {3: (0, 1), 1: (0, 0), 2: torch.tensor(7.0)}
    readings.finish()
    writer.close()
    assert _losses(tmp_path) == {1: 0.25, 2: 7.0, 3: 0.5}
    assert readings._chunks == [] and readings._losses == {}


def test_losses_beyond_the_bound_are_dropped_and_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(device_readings, "MAX_DEFERRED_LOSSES", 2)
    readings, writer = _readings(tmp_path)
    for step in range(4):
        readings.defer_loss(step, torch.tensor(float(step)))
    assert readings.dropped_losses == 2 and readings.footprint()["losses_held_on_device"] == 2
    readings.finish()
    writer.close()
