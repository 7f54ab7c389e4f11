"""The events' lines are msgspec's text of the event in json's layout (record/schema.py,
`event_line`), NaN and infinities written as json writes them; the per-step lines wait in memory up
to the writer's hold_s (record/writer.py, one write for several steps): the order and numbering
are those of events emitted one by one, the held lines reach the file within hold_s (from the
training thread or, when it makes no more, the flusher thread), before any other line, at close,
or when too many wait, and a failed write stops the record at the first line not written."""

from __future__ import annotations

import json
import math
import os
import subprocess
import threading
import time
from pathlib import Path

import msgspec
import pytest

from cagtool.capture.steps.boundaries import IDLE_OPTIMIZER_STEPS
from cagtool.record import writer as writer_module
from cagtool.record.writer import RecordWriter
from cagtool.record.loader import load_mode, load_run
from cagtool.record.manifest import ModeManifest
from cagtool.record.schema import (
    BackwardEvent,
    CacheMissEvent,
    ChangedSize,
    FindingEvent,
    GradDigestEvent,
    OptimizerStepEvent,
    SourceRef,
    StepEvent,
    event_line,
    event_to_dict,
)

from conftest import ROOT, cagtool_cmd, cagtool_in_process

SAMPLE_EVENTS = [
    StepEvent(seq=0, t=0.25, step=0, backward_s=1.5e-7, loss=math.nan, wall_s=None, boundary="optimizer"),
    StepEvent(seq=1, t=1e300, step=1, backward_s=0.0, loss=-math.inf, compile_s=3.0),
    StepEvent(seq=2, t=0.5, step=2, backward_s=2.0, loss=0.1234567890123456789),
    BackwardEvent(seq=3, t=0.75, step=2, index=1, backward_s=0.1, call="grad", loss=None, thread='Thréad-ü ✓ "quoted"\\ name\n'),
    OptimizerStepEvent(seq=4, t=0.8, step=2, wall_s=0.001, optimizer="AdamW"),
    CacheMissEvent(seq=5, t=0.9, ca_id=1, compile_id="!1", step=2, miss_kind="changed_shapes", message="m",
                   changed_sizes=[ChangedSize(index=0, value=3, previous=2)], source=SourceRef(file="train.py", line=3)),
    FindingEvent(seq=6, t=1.0, code="x", message="ü", detail={"argv": ["a"], "n": 2}),
    GradDigestEvent(seq=7, t=1.1, step=2, reasons=["first"], names=["w", "b"], dtypes=["float32"] * 2, numels=[4, 2],
                    norm=[math.nan, 1.0], max_abs=[math.inf, None], checksum=[0.5, None]),
]


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("event", SAMPLE_EVENTS, ids=lambda e: f"{e.kind}-{e.seq}")
def test_a_line_is_the_event_in_jsons_layout_and_reads_back_the_same(tmp_path, event):
    line = event_line(event)
    assert line.endswith("}\n") and line.count("\n") == 1 and line.startswith('{"kind": "' + event.kind + '", "seq": ')
    # json's text of the event's dict (NaN and infinities as json spells them, kept: a NaN loss
    # is not a missing one), with ", " and ": " (the loader's kind filter and the sidecar read it)
    assert _same(json.loads(line), event_to_dict(event))
    assert json.dumps(json.loads(line), ensure_ascii=False) + "\n" == line
    path = tmp_path / "ca"
    path.mkdir()
    manifest = ModeManifest(mode="ca", argv=[], target={}, cwd="/", versions={}, backend="eager", dynamic=False, started_at="")
    (path / "manifest.json").write_text(json.dumps(writer_module.to_dict(manifest)))
    (path / "events.jsonl").write_text(line)
    read = load_mode(path, strict=True).events
    assert len(read) == 1 and _same(msgspec.to_builtins(read[0]), msgspec.to_builtins(event))


def test_the_writers_encoder_takes_the_fields_as_the_constructor_does(tmp_path):
    encode = writer_module._encoder_of(StepEvent)
    assert encode(3, 1.0, step=0, backward_s=0.5) == event_line(StepEvent(seq=3, t=1.0, step=0, backward_s=0.5))
    with pytest.raises(TypeError):
        encode(3, 1.0, step=0, backward_s=0.5, not_a_field=1)
    with pytest.raises(TypeError):
        encode(3, 1.0, step=0)  # a required field missing


def _writer(tmp_path: Path, hold_s: float = 3600.0, **options) -> RecordWriter:
    """hold_s: an hour unless a test is about the time bound (nothing is written on time)."""
    manifest = ModeManifest(mode="ca", argv=["t"], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
    return RecordWriter(tmp_path / "ca", manifest, hold_s=hold_s, **options)


def _lines(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "ca" / "events.jsonl").read_text().splitlines()]


def test_held_lines_are_written_before_the_next_line_in_order(tmp_path):
    writer = _writer(tmp_path)
    writer.emit_held(BackwardEvent, step=0, index=0, backward_s=0.5, loss=1.0)
    writer.emit_held(OptimizerStepEvent, step=0, wall_s=0.1, optimizer="SGD")
    writer.emit_held(StepEvent, step=0, backward_s=0.5, boundary="optimizer")
    assert _lines(tmp_path) == []  # held: nothing written yet
    writer.emit_held(BackwardEvent, step=1, index=0, backward_s=0.5)
    writer.emit(FindingEvent, code="x", message="y")  # any line written now takes the held ones first
    assert [(e["kind"], e["seq"]) for e in _lines(tmp_path)] == [("backward", 0), ("optimizer_step", 1), ("step", 2), ("backward", 3), ("finding", 4)]
    writer.emit_held(BackwardEvent, step=1, index=1, backward_s=0.5)
    writer.close()  # the open step's lines are not lost when the record closes
    assert [e["seq"] for e in _lines(tmp_path)] == [0, 1, 2, 3, 4, 5]
    assert all(e["t"] >= 0 for e in _lines(tmp_path))


def _queue(writer: RecordWriter, cls: type, **fields) -> None:
    """What the step tracker does for a per-step line (capture/steps/tracker.py): an append to `queued`."""
    if not writer.queued:  # StepTracker._first_queued
        writer.queued_due = writer.clock() + writer.hold_s / 2
        writer.start_flusher()
    writer.queued.append((writer.kwargs_line(cls), writer.now(), fields))


def test_queued_lines_are_numbered_as_emit_held_would_number_them(tmp_path):
    """The step tracker's lines, appended to `queued` without a call, get the seq and place in the
    file that emit_held at the same moments gives: before any line numbered after them."""
    queued, held = tmp_path / "q", tmp_path / "h"
    for path, hold in ((queued, lambda w, cls, **f: _queue(w, cls, **f)), (held, lambda w, cls, **f: w.emit_held(cls, **f))):
        writer = _writer(path)
        hold(writer, BackwardEvent, step=0, index=0, backward_s=0.5, loss=1.0)
        writer.emit(FindingEvent, code="x", message="y")  # takes the waiting line first
        hold(writer, BackwardEvent, step=0, index=1, backward_s=0.5)
        writer.emit_held(OptimizerStepEvent, step=0, wall_s=0.1, optimizer="SGD")  # and so does emit_held
        hold(writer, StepEvent, step=0, backward_s=1.0, boundary="optimizer")
        assert writer.events_written == 5
        hold(writer, BackwardEvent, step=1, index=0, backward_s=0.5)
        writer.close()  # and close
    assert [(e["kind"], e["seq"]) for e in _lines(queued)] == [("backward", 0), ("finding", 1), ("backward", 2), ("optimizer_step", 3), ("step", 4), ("backward", 5)]
    strip = lambda events: [{k: v for k, v in e.items() if k != "t"} for e in events]  # noqa: E731
    assert strip(_lines(queued)) == strip(_lines(held))


def test_queued_lines_racing_other_events_are_each_written_once(tmp_path):
    """One thread queues lines (as the step tracker does, under its own lock) while another emits
    events: every line reaches the file once, numbered 0, 1, 2... in the order of the file, and a
    thread's own lines in the order it made them."""
    writer = _writer(tmp_path)
    n = 3000

    def other() -> None:
        for index in range(n):
            writer.emit(FindingEvent, code="other", message=str(index))

    thread = threading.Thread(target=other)
    thread.start()
    for index in range(n):
        _queue(writer, BackwardEvent, step=0, index=index, backward_s=0.0)
        if index % 7 == 0:
            writer.write_queued()
    thread.join()
    writer.close()
    lines = _lines(tmp_path)
    assert [e["seq"] for e in lines] == list(range(2 * n))
    assert [e["index"] for e in lines if e["kind"] == "backward"] == list(range(n))
    assert [int(e["message"]) for e in lines if e["kind"] == "finding"] == list(range(n))


def _written_by_the_flusher(tmp_path: Path, count: int) -> list[dict]:
    """The file once the flusher thread has written `count` lines (its clock is the test's: it
    wakes every hold_s / 4 of real time and finds them due)."""
    deadline = time.monotonic() + 60.0  # only bounds a hang: the lines are due when this starts
    while len(_lines(tmp_path)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return _lines(tmp_path)


def test_the_flusher_writes_queued_lines_once_hold_s_half_has_passed(tmp_path, fake_clock):
    """A queued line and nothing after it (no step ends, no other event): the flusher thread,
    started with it, writes it once it has waited hold_s / 2, not before."""
    writer = _writer(tmp_path, hold_s=0.04, clock=fake_clock)
    _queue(writer, BackwardEvent, step=0, index=0, backward_s=0.5)
    _queue(writer, BackwardEvent, step=0, index=1, backward_s=0.5)
    fake_clock.advance(0.02 - 1e-3)
    writer._flush_if_due()  # what the flusher does when it wakes
    assert _lines(tmp_path) == []
    fake_clock.advance(2e-3)
    assert [e["seq"] for e in _written_by_the_flusher(tmp_path, 2)] == [0, 1]
    writer.close()
    assert "cagtool-writer" not in [t.name for t in threading.enumerate()]


def test_the_training_thread_writes_held_lines_half_hold_s_old(tmp_path, monkeypatch, fake_clock):
    """The training thread's half of the bound (the flusher left out, so that it cannot write first):
    a held line made once the oldest waiting one is hold_s / 2 old takes them all to the file."""

    class NoFlusher:
        def __init__(self, writer: RecordWriter) -> None:
            pass

        def stop(self) -> None:
            pass

    monkeypatch.setattr(writer_module, "_Flusher", NoFlusher)
    writer = _writer(tmp_path, hold_s=0.2, clock=fake_clock)
    writer.emit_held(BackwardEvent, step=0, index=0, backward_s=0.5)
    fake_clock.advance(0.05)
    writer.emit_held(StepEvent, step=0, backward_s=0.5)
    fake_clock.advance(0.05 - 1e-3)
    assert _lines(tmp_path) == []
    fake_clock.advance(2e-3)
    writer.emit_held(BackwardEvent, step=1, index=0, backward_s=0.5)
    assert [e["seq"] for e in _lines(tmp_path)] == [0, 1, 2]
    assert [e["t"] for e in _lines(tmp_path)] == pytest.approx([0.0, 0.05, 0.101])  # the events' times are the clock's
    writer.emit_held(StepEvent, step=1, backward_s=0.5)
    assert len(_lines(tmp_path)) == 3  # a new wait begins
    writer.close()
    assert len(_lines(tmp_path)) == 4


def test_the_flusher_writes_held_lines_once_hold_s_half_has_passed(tmp_path, fake_clock):
    """The job makes no more lines (evaluation, a hang): the flusher thread writes the held ones
    once they have waited hold_s / 2, so a process killed hard then loses nothing; close ends the thread."""
    writer = _writer(tmp_path, hold_s=0.04, clock=fake_clock)
    writer.emit_held(BackwardEvent, step=0, index=0, backward_s=0.5)
    writer.emit_held(StepEvent, step=0, backward_s=0.5)
    fake_clock.advance(0.02 - 1e-3)
    writer._flush_if_due()
    assert _lines(tmp_path) == []
    fake_clock.advance(2e-3)
    assert [e["seq"] for e in _written_by_the_flusher(tmp_path, 2)] == [0, 1]
    assert [t.name for t in threading.enumerate()].count("cagtool-writer") == 1
    writer.close()
    assert "cagtool-writer" not in [t.name for t in threading.enumerate()]


def test_held_lines_are_bounded(tmp_path):
    writer = _writer(tmp_path)
    for index in range(writer_module.MAX_HELD_LINES):
        writer.emit_held(BackwardEvent, step=0, index=index, backward_s=0.0)
    assert len(_lines(tmp_path)) == writer_module.MAX_HELD_LINES  # written once that many wait
    writer.close()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (writes fail with ENOSPC)")
def test_failed_write_stops_at_the_first_held_line(tmp_path):
    writer = _writer(tmp_path)
    writer.emit_held(StepEvent, step=0, backward_s=0.5)
    writer.flush_held()
    writer.emit_held(BackwardEvent, step=1, index=0, backward_s=0.5)
    os.close(writer._events)
    writer._events = os.open("/dev/full", os.O_WRONLY)  # the disk is full from here on
    writer.emit_held(StepEvent, step=1, backward_s=0.5)
    writer.flush_held()
    assert writer.stopped is not None and writer.stopped["at_seq"] == 1 and "ENOSPC" in writer.stopped["error"]
    writer.emit_held(BackwardEvent, step=2, index=0, backward_s=0.5)
    writer.close()
    assert [e["seq"] for e in _lines(tmp_path)] == [0]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigkill", "pause_sigkill", "sigterm"])
def test_a_process_ending_mid_step_loses_at_most_its_last_hold_s(tmp_path, how):
    """Ended at once (SIGKILL, as the OOM killer does; SIGTERM at its default action, as under
    python): the lines of its last hold_s (0.5 s) may be missing, what is on disk is whole and
    numbered from 0. Killed hard a second after its last backward call: everything is on disk, the
    open step's two backward lines included (the flusher wrote them). The manifest says which kinds
    are held and for how long, and the summary never states the step count as a fact: it says the
    lines of the last 0.5 s, if any, were lost with the process."""
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), str(ROOT / "tests" / "scripts" / "dies_mid_step.py"), how),
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "CI": "true"}, timeout=300)
    assert proc.returncode == (143 if how == "sigterm" else 137), proc.stderr[-3000:]
    ca = load_run(tmp_path / "r").modes["ca"]
    assert ca.manifest.options["held_events"] == {"kinds": ["backward", "optimizer_step", "step"], "up_to_s": writer_module.HOLD_S,
                                                  "up_to_optimizer_steps": IDLE_OPTIMIZER_STEPS}
    assert [e.seq for e in ca.events] == list(range(len(ca.events)))
    assert ("steps recorded (the process ended without closing its record: the per-step lines of its last 0.5 s, if any, were lost with it; "
            "where one optimizer had stepped alone while others were waited for, those of up to its last 10 steps)") in " ".join(proc.stderr.split())
    assert "no optimizer step ended" not in proc.stderr
    summary = cagtool_in_process("summary", str(tmp_path / "r"), "--format", "json")
    assert json.loads(summary.stdout)["modes"]["ca"]["steps_lost_with_process_s"] == writer_module.HOLD_S
    assert json.loads(summary.stdout)["modes"]["ca"]["optimizer_steps_lost_with_process"] == IDLE_OPTIMIZER_STEPS
    if how in ("sigkill", "sigterm"):
        steps = [s.step for s in ca.of(StepEvent)]
        assert steps == list(range(len(steps))) and len(steps) <= 2
        if how == "sigterm":
            assert (ca.manifest.status, ca.manifest.exception.type) == ("interrupted", "SIGTERM")
        return
    assert [s.step for s in ca.of(StepEvent)] == [0, 1]
    assert [o.step for o in ca.of(OptimizerStepEvent)] == [0, 1]
    assert [(b.step, b.index) for b in ca.of(BackwardEvent)] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]


def _three_lines_on_a_filling_disk(tmp_path, monkeypatch, cut) -> RecordWriter:
    """A writer holding three lines, flushed onto a disk that takes `cut(data)` bytes of the first
    write and fails every later one (ENOSPC)."""
    writer = _writer(tmp_path)
    for index in range(3):
        writer.emit_held(BackwardEvent, step=0, index=index, backward_s=0.5)
    real_write, calls = os.write, []

    def filling_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[: cut(bytes(data))])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_module.os, "write", filling_disk)
    writer.flush_held()
    monkeypatch.undo()
    return writer


def test_short_write_then_error_stops_after_the_lines_written_whole(tmp_path, monkeypatch):
    """A disk filling up: the first write takes a line and a half, the next fails."""
    writer = _three_lines_on_a_filling_disk(tmp_path, monkeypatch, lambda data: data.index(b"\n") + 1 + 10)
    assert writer.stopped is not None and writer.stopped["at_seq"] == 1  # event 0 is whole on disk
    writer.close()
    assert (tmp_path / "ca" / "events.jsonl").read_text().count("\n") == 1


def test_a_line_cut_before_its_newline_is_counted_as_written(tmp_path, monkeypatch):
    """The disk fills exactly at a line's newline: its text is on disk and reads back as an event,
    so the record stops after it, not at it (the stop and the events agree)."""
    writer = _three_lines_on_a_filling_disk(tmp_path, monkeypatch, lambda data: data.index(b"\n", data.index(b"\n") + 1))
    assert writer.stopped is not None and writer.stopped["at_seq"] == 2
    writer.close()
    assert [e["seq"] for e in _lines(tmp_path)] == [0, 1]  # the second line lacks only its newline


def _tracker_lines(tmp_path):
    from cagtool.capture.steps.tracker import _line_makers, _OpenStep

    writer = RecordWriter(tmp_path, ModeManifest(mode="eager", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at=""))
    return writer, _OpenStep, _line_makers(writer)


@pytest.mark.parametrize("loss", [0.1234567890123456789, None, math.nan, math.inf, -math.inf, 3.0])
@pytest.mark.parametrize("thread", ["", 'a "quoted"\\ name', "Thréad-ü ✓"])
def test_the_trackers_lines_are_the_events_lines(tmp_path, loss, thread):
    """tracker.py makes its three per-step lines from the tuples its drain queued: each is exactly
    the line of the event those values make."""
    writer, open_step, (backward_line, optimizer_step_line, step_line, group_line) = _tracker_lines(tmp_path)
    opened = open_step()
    opened.backward_s, opened.loss, opened.captures, opened.compiles, opened.compile_s = 0.000543319998541846, loss, 2, 1, 1.2345678901234567
    opened.backward_calls, opened.optimizer_s = 3, 0.0012345678901234567
    t = 12345.678901234567
    cases = [
        (backward_line(7, t, (4, 1, 0.000543319998541846, 2, "grad", loss, thread)),
         BackwardEvent(seq=7, t=t, step=4, index=1, backward_s=0.000543319998541846, ca_captures=2, call="grad", loss=loss, thread=thread)),
        (optimizer_step_line(8, t, (4, 0.0012345678901234567, thread or "AdamW")),
         OptimizerStepEvent(seq=8, t=t, step=4, wall_s=0.0012345678901234567, optimizer=thread or "AdamW")),
    ]
    for wall_s, cpu_s, thread_cpu_s in ((None, None, None), (0.004999999999999, 0.0071234567890123, 0.0049876543210987), (0.0, 0.0, None)):
        cases.append((step_line(9, t, (opened, 4, wall_s, "optimizer", cpu_s, thread_cpu_s)),
                      StepEvent(seq=9, t=t, step=4, backward_s=opened.backward_s, loss=loss, ca_captures=2, compiles=1, compile_s=opened.compile_s,
                                wall_s=wall_s, backward_calls=3, boundary="optimizer", optimizer_s=opened.optimizer_s, cpu_s=cpu_s,
                                thread_cpu_s=thread_cpu_s)))
    # A step's three lines made as one entry (tracker.py `_close`): the same text, seq after seq.
    backward = (4, 0, 0.000543319998541846, 2, "backward", loss, thread)
    for wall_s, cpu_s in ((None, None), (0.004999999999999, 0.0071234567890123)):
        assert group_line(7, t, (backward, t + 1, 0.0012345678901234567, thread or "AdamW", opened, 4, wall_s, "optimizer", cpu_s, cpu_s)) == (
            backward_line(7, t, backward) + optimizer_step_line(8, t + 1, (4, 0.0012345678901234567, thread or "AdamW"))
            + step_line(9, t + 1, (opened, 4, wall_s, "optimizer", cpu_s, cpu_s)))
    for line, event in cases:  # the writer's bytes: the line's UTF-8
        assert line == event_line(event).encode()
    writer.close()


def test_the_trackers_events_are_built_in_their_fields_order():
    """lines.py builds its events with their fields by position: in the order of the classes' fields."""
    from cagtool.capture.steps.lines import EVENT_FIELDS

    for cls, fields in EVENT_FIELDS.items():
        assert cls.__struct_fields__ == fields


@pytest.mark.parametrize("thread", ['}, {"kind": "step", "seq": 1}', "a\n}, {\"kind\": ", "Thréad-ü ✓ \\", "a, b", "null", "", "\u2028\x7f\x00%s"])
@pytest.mark.parametrize("loss", [1.5, None, math.nan, math.inf])
def test_scalar_lines_are_the_event_line_of_each(thread, loss):
    """schema.scalar_lines (a step's three lines from their values) is event_line of each event the
    values make, whatever a thread's name holds (commas, the separators, escapes) and with a
    non-finite loss."""
    from cagtool.record.schema import scalar_lines

    events = (BackwardEvent(seq=7, t=1.25, step=4, index=0, backward_s=0.001, ca_captures=1, call="backward", loss=loss, thread=thread),
              OptimizerStepEvent(seq=8, t=1.5, step=4, wall_s=0.002, optimizer=thread),
              StepEvent(seq=9, t=1.5, step=4, backward_s=0.001, loss=loss, wall_s=None, boundary="optimizer", cpu_s=0.003, thread_cpu_s=None))
    values = tuple(getattr(event, name) for event in events for name in event.__struct_fields__)
    text = scalar_lines(BackwardEvent, OptimizerStepEvent, StepEvent)(values)
    assert text == "".join(event_line(event) for event in events).encode()
    assert text.count(b"\n") == 3


# Floats whose shortest text msgspec and Python spell differently (1e16, 1e-05, 2.5e-07), the
# extremes, zeros of both signs, and non-finite ones; ints past 32 and 53 bits.
_FLOATS = [0.0, -0.0, 1.0, 1e16, 1.5e16, 1e15, 1e-05, 1e-4, 2.5e-07, 1e-300, 1e300, -1e300, 5e-324, 1.7976931348623157e308,
           0.1, 1 / 3, 12345.678, 1e21, -1e-7, math.nan, math.inf, -math.inf]
_INTS = [0, 1, -1, 2**31, 2**53 + 1, 2**63 - 1, -2**63]


def test_scalar_lines_are_event_line_over_many_values():
    """Every field of the three step events over floats at the edges of both float spellings, large
    ints, None, bools and strings: the same text as event_line of the event, field by field."""
    import random

    from cagtool.record.schema import scalar_lines

    rng = random.Random(5)
    strings = ["", "AdamW", "backward", 'q"uote', "back\\slash", "é ✓ \u2028", "a,b", "null", "1e5", "\n\t", "%d"]
    lines = {cls: scalar_lines(cls) for cls in (BackwardEvent, OptimizerStepEvent, StepEvent)}
    checked = 0
    for cls, make in lines.items():
        fields = msgspec.structs.fields(cls)
        for _ in range(400):
            values = []
            for field in fields:
                kinds = {str(field.type)}
                if "float" in kinds.pop():
                    pool = _FLOATS + [None, rng.uniform(-1e3, 1e3), rng.lognormvariate(0, 30), math.ldexp(rng.random(), rng.randint(-1074, 1023))]
                elif field.type is int:
                    pool = _INTS + [rng.randint(-2**63, 2**63 - 1)]
                elif field.type is bool:
                    pool = [True, False]
                else:
                    pool = strings
                values.append(rng.choice(pool) if field.name != "seq" else rng.randint(0, 2**40))
            event = cls(*values)
            assert make(tuple(values)) == event_line(event).encode(), event
            checked += 1
    for value in _FLOATS + [None]:  # each float alone in every float field
        values = (3, 1.0, 4, value, value, 0, 1, value, value, 2, "optimizer", value, False, value, value)
        assert lines[StepEvent](values) == event_line(StepEvent(*values)).encode()
    assert checked == 1200
