"""The heap a forward holds for its backward, as `cagtool checkpointing`'s re-runs read it
(capture/steps/heap_in_use.py): the gradients zero_grad() frees between the reading at the
previous step's end and the backward's entry are counted back, so a job that zeroes its gradients
before the forward reads what its forward held, not that less every .grad (a figure below zero read
as "checkpointing saves 100%"). A real torch job under `cagtool run`, the readings switched on as
the re-runs switch them on."""

from __future__ import annotations

import os
import subprocess

from conftest import ROOT, cagtool_cmd

from cagtool.capture.steps.heap_in_use import HEAP_READINGS_ENV
from cagtool.record.loader import load_run
from cagtool.report.checkpointing import ModeSaving, Side, heap_lines
from cagtool.verify.checkpointing import heap_held

MIB = 2**20


def test_the_heap_held_for_backward_counts_back_the_gradients_zero_grad_freed(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager", "--no-report", "-o", str(out), "tests/scripts/zero_grad_before_forward.py"),
                          cwd=str(ROOT), capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CI": "true", HEAP_READINGS_ENV: "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = load_run(out).modes["eager"]
    readings = record.manifest.options["heap_in_use"]
    assert readings["source"] and len(readings["grads_freed"]) == 8
    # Every step after the first freed the four gradients (4 x 1024 x 1024 float32) before its forward.
    assert readings["grads_freed"][0] == 0 and all(freed == 16 * MIB for freed in readings["grads_freed"][1:]), readings["grads_freed"]
    held = heap_held(record)
    # The activations the forward kept: each Linear's input and each ReLU's output, 256 x 1024 float32
    # (1 MiB each), 4 to 8 MiB as torch saves them; never below zero.
    assert held is not None and 3 * MIB <= held.held_bytes <= 12 * MIB, held
    # Without the gradients counted back the same readings are below zero: what read "saves 100%".
    raw = sorted(e - b for b, e in zip(readings["before"][1:], readings["at_entry"][1:]))
    assert raw[len(raw) // 2] < 0


def test_a_heap_held_below_zero_is_no_measurement_never_a_saving():
    from cagtool.report.checkpointing import HeapHeld

    below = HeapHeld("glibc", 6, -7 * MIB, MIB // 4, 2 * MIB, MIB // 4)
    plain = HeapHeld("glibc", 6, 10 * MIB, MIB // 4, 12 * MIB, MIB // 4)
    saving = ModeSaving("aot", Side("as written", "", "finished", 1, 0, heap=below), Side("plain", "", "finished", 1, 0, heap=plain))
    assert saving.held_saving is None
    [line] = heap_lines(saving)
    assert "not compared" in line and "below zero is no measurement" in line and "100%" not in line
