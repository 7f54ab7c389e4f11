"""The columns sidecar (record/columns.py): a summary read through it says exactly what the event
lines say, and a sidecar that does not match its events.jsonl (appended to, truncated, edited in
place, damaged itself) or that could not be written (corrupt or foreign step lines) is never used."""

from __future__ import annotations

import json
import math
import shutil

import msgspec
import pytest

from cagtool.record.writer import RecordWriter
from cagtool.commands.summary import print_run_report
from cagtool.errors import UnreadableInput
from cagtool.record.columns import COLUMNS_FILE, derive
from cagtool.record.loader import load_mode, load_run
from cagtool.record.schema import (
    SCHEMA_VERSION,
    BackwardEvent,
    CAGraphEvent,
    CacheMissEvent,
    Event,
    OptimizerStepEvent,
    StepEvent,
)
from cagtool.report.figures.metrics import mode_metrics
from cagtool.report.summary import SUMMARY_KINDS, summary_json
from event_records import both_loads, line, manifest, write_run


def training(steps: int = 40) -> list[Event]:
    """Steps as capture writes them, with what makes columns hard: a NaN loss, a first step with no
    interval (null), an integer where a float is declared, two backward calls in one step, a
    compile-affected step and a few events of other kinds between them."""
    events: list[Event] = []

    def add(cls, **fields) -> None:
        events.append(cls(seq=len(events), t=len(events) * 0.01 + 0.001, **fields))

    for step in range(1, steps + 1):
        if step == 3:
            add(CacheMissEvent, ca_id=1, compile_id="!1", step=3, miss_kind="new_node", message="Cache miss due to new autograd node: MulBackward0",
                node="MulBackward0", node_call=2)
            add(CAGraphEvent, ca_id=1, compile_id="!1", step=3, node_count=7, op_histogram={"mul": 2}, autograd_nodes=[], aot_ids=[], hooks=[],
                num_sizes=0, capture_s=0.05, code_file="graphs/ca_1.py", nodes_file="graphs/ca_1.json")
        calls = 2 if step == 5 else 1
        for index in range(calls):
            add(BackwardEvent, step=step, index=index, backward_s=0.002 + step * 1e-5, ca_captures=int(step == 3), loss=float("nan") if step == 7 else 1.0 / step)
        add(OptimizerStepEvent, step=step, wall_s=0.0005, optimizer="SGD")
        add(StepEvent, step=step, backward_s=0.002 * calls, loss=float("nan") if step == 7 else 1.0 / step, ca_captures=int(step == 3),
            compiles=int(step == 3), wall_s=None if step == 1 else (0 if step == 9 else 0.004 + (step % 5) * 1e-4), backward_calls=calls,
            boundary="optimizer", optimizer_s=0.0005)
    return events


def same_events(a: list[Event], b: list[Event]) -> bool:
    """Equal field for field and type for type (NaN equal to NaN, 0 not equal to 0.0)."""
    def key(event: Event) -> list:
        return [type(event).__name__] + [(type(v).__name__, "nan" if isinstance(v, float) and math.isnan(v) else v) for v in msgspec.structs.astuple(event)]
    return [key(e) for e in a] == [key(e) for e in b]


def assert_same_record(fast, slow) -> None:
    for cls in (StepEvent, BackwardEvent, OptimizerStepEvent, CAGraphEvent, CacheMissEvent, Event):
        assert same_events(fast.of(cls), slow.of(cls)), cls
    assert fast.kind_counts == slow.kind_counts
    assert (fast.skipped_lines, fast.unknown_kinds) == (slow.skipped_lines, slow.unknown_kinds)


@pytest.mark.parametrize("schema_version", [2, SCHEMA_VERSION])
def test_columns_give_exactly_the_events_the_lines_give(tmp_path, schema_version):
    """Older schemas included: whatever the loader converts in an old record's events (step
    numbers) it converts in its columns too."""
    run = write_run(tmp_path / "r", {"ca": [line(e) for e in training()]}, schema_version=schema_version)
    assert (run / "ca" / COLUMNS_FILE).exists()
    fast, slow = both_loads(run / "ca")
    assert set(fast.columns) == {"step", "backward", "optimizer_step"} and not slow.columns
    assert not any(isinstance(e, (StepEvent, BackwardEvent)) for e in fast.events)  # held as columns, not built
    assert_same_record(fast, slow)
    assert type(fast.of(StepEvent)[8].wall_s) is float  # a float field's `0` reads as 0.0, from the columns as from the line
    fast_kinds, slow_kinds = both_loads(run / "ca", kinds=SUMMARY_KINDS)
    assert "optimizer_step" not in fast_kinds.columns and fast_kinds.kind_counts == slow_kinds.kind_counts
    assert mode_metrics(fast_kinds) == mode_metrics(slow_kinds) and mode_metrics(fast_kinds).steps == 40


def test_summary_text_and_json_unchanged_through_the_sidecar(tmp_path, capsys):
    lines = {mode: [line(e) for e in training()] for mode in ("eager", "ca")}
    run = write_run(tmp_path / "r", lines)
    outputs = []
    for keep in (True, False):
        if not keep:
            for mode in lines:
                (run / mode / COLUMNS_FILE).unlink()
        assert bool(load_run(run, columns=True).modes["ca"].columns) is keep
        print_run_report(run, "text")
        print_run_report(run, "json")
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "40 steps" in outputs[0]


def test_lines_the_columns_cannot_hold_leave_no_sidecar(tmp_path):
    """A corrupt or truncated step line, or a step line of another layout: no sidecar, the loader
    reads every line (and counts the bad one) as before."""
    good = [line(e) for e in training(6)]
    cut = good[:5] + [good[5][:40]] + good[6:]  # a torn line in the middle
    other_layout = good + [json.dumps({"kind": "step", "step": 7, "seq": 99, "t": 1.0, "backward_s": 0.1})]
    assert derive(("\n".join(good) + "\n").encode()) is not None
    for lines in (cut, other_layout):
        assert derive(("\n".join(lines) + "\n").encode()) is None
    run = write_run(tmp_path / "r", {"ca": cut})
    assert not (run / "ca" / COLUMNS_FILE).exists()
    fast, slow = both_loads(run / "ca")
    assert not fast.columns and fast.skipped_lines == 1
    assert_same_record(fast, slow)


def test_corrupt_lines_of_other_kinds_are_still_read_leniently_or_strictly(tmp_path):
    lines = [line(e) for e in training(6)]
    lines.insert(4, '{"kind": "ca_graph", "seq": 1000, "t": 0.5, "ca_id": 9')  # a torn line that is not a step
    lines.insert(8, "\xff garbage")
    lines.insert(9, '{"kind": "from_the_future", "seq": 1001, "t": 0.6}')
    run = write_run(tmp_path / "r", {"ca": lines})
    assert (run / "ca" / COLUMNS_FILE).exists()
    fast, slow = both_loads(run / "ca")
    assert fast.columns and fast.skipped_lines == 2 and fast.unknown_kinds == {"from_the_future": 1}
    assert_same_record(fast, slow)
    for columns in (True, False):
        with pytest.raises(UnreadableInput, match="line 5"):
            load_mode(run / "ca", strict=True, columns=columns)


def test_a_sidecar_that_does_not_match_events_jsonl_is_not_used(tmp_path):
    lines = [line(e) for e in training(12)]
    run = write_run(tmp_path / "r", {"ca": lines})
    events = run / "ca" / "events.jsonl"
    original = events.read_bytes()
    sidecar = run / "ca" / COLUMNS_FILE
    stored = sidecar.read_bytes()

    # Appended to after the sidecar was written: a truncated last line (a crash mid-write).
    events.write_bytes(original + b'{"kind": "step", "seq": 500, "t": 9.0, "st')
    fast, slow = both_loads(run / "ca")
    assert not fast.columns and fast.skipped_lines == 1
    assert_same_record(fast, slow)

    # Edited in place, same size: a step's interval changed from 0.0042 to 0.0043.
    assert original.count(b'"wall_s": 0.0042') >= 1
    events.write_bytes(original.replace(b'"wall_s": 0.0042', b'"wall_s": 0.0043', 1))
    fast, slow = both_loads(run / "ca")
    assert not fast.columns and 0.0043 in [s.wall_s for s in fast.of(StepEvent)]
    assert_same_record(fast, slow)

    # Truncated to fewer lines.
    events.write_bytes(original[: original.rindex(b"\n", 0, len(original) - 1) + 1])
    fast, slow = both_loads(run / "ca")
    assert not fast.columns and len(fast.of(StepEvent)) == 11
    assert_same_record(fast, slow)

    # The sidecar itself damaged (one byte of a column flipped) or cut short: ignored.
    events.write_bytes(original)
    body = stored.index(b"\n") + 10
    for damaged in (stored[:body] + bytes([stored[body] ^ 1]) + stored[body + 1 :], stored[: len(stored) // 2], b"not json\n"):
        sidecar.write_bytes(damaged)
        fast, slow = both_loads(run / "ca")
        assert not fast.columns
        assert_same_record(fast, slow)
    sidecar.write_bytes(stored)
    assert load_mode(run / "ca", columns=True).columns  # and the intact one is used again


def test_the_writer_leaves_a_matching_sidecar_when_it_closes(tmp_path):
    writer = RecordWriter(tmp_path / "ca", manifest())
    for event in training(10):
        fields = {k: v for k, v in msgspec.structs.asdict(event).items() if k != "seq"}
        writer.emit(type(event), **fields)
    assert not (tmp_path / "ca" / COLUMNS_FILE).exists()  # a record still being written has none
    writer.close()
    fast, slow = both_loads(tmp_path / "ca")
    assert fast.columns["step"].count == 10 and fast.columns["backward"].count == 11
    assert_same_record(fast, slow)


def test_a_step_the_sidecar_cannot_see_is_read_with_the_others_in_order(tmp_path):
    """A step line whose key only JSON decoding reveals (`"\\u006bind"`) is an other line to the
    sidecar; the loader then reads every line, as without a sidecar."""
    lines = [line(e) for e in training(4)]
    lines.insert(3, '{"\\u006bind": "step", "seq": 2.5, "t": 0.02, "step": 99, "backward_s": 0.1}'.replace("2.5", "1000"))
    run = write_run(tmp_path / "r", {"ca": lines})
    assert (run / "ca" / COLUMNS_FILE).exists()
    fast, slow = both_loads(run / "ca")
    assert not fast.columns
    assert 99 in [s.step for s in fast.of(StepEvent)]
    assert_same_record(fast, slow)


def test_real_run_summary_is_the_same_through_the_sidecar(record_run, tmp_path, capsys):
    """A real 3-mode run: every mode's record closed with a sidecar, and the summary (text and
    JSON, the end comparison included) is the same read through it as read line by line."""
    recorded = record_run("graph_breaks.py", "3", modes="eager,aot,ca")
    run = shutil.copytree(recorded.path, tmp_path / "run")
    loaded = load_run(run, columns=True, kinds=SUMMARY_KINDS)
    assert all(record.columns["step"].count == 3 for record in loaded.modes.values())
    outputs = []
    for through_sidecar in (True, False):
        if not through_sidecar:
            for mode in ("eager", "aot", "ca"):
                (run / mode / COLUMNS_FILE).unlink()
        print_run_report(run, "text")
        print_run_report(run, "json")
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "3 steps" in outputs[0]
    assert summary_json(load_run(run))["modes"]["ca"]["steps"] == 3


def test_a_step_shift_reaches_the_columns_and_the_events_built_from_them(tmp_path):
    run = write_run(tmp_path / "r", {"ca": [line(e) for e in training(5)]})
    record = load_mode(run / "ca", columns=True)
    held = record.columns["step"]
    held.step_shift = -1
    assert held.column("step") == [0, 1, 2, 3, 4]
    assert [s.step for s in held.events()] == [0, 1, 2, 3, 4]


def test_no_sidecar_without_step_lines_or_for_a_stream_over_the_cap(tmp_path, monkeypatch):
    from cagtool.record import columns

    only_graphs = [line(e) for e in training(4) if not isinstance(e, (StepEvent, BackwardEvent, OptimizerStepEvent))]
    run = write_run(tmp_path / "a", {"ca": only_graphs})
    assert not (run / "ca" / COLUMNS_FILE).exists()  # an imported log's record: nothing to hold
    monkeypatch.setattr(columns, "MAX_EVENTS_BYTES", 1000)
    run = write_run(tmp_path / "b", {"ca": [line(e) for e in training(10)]})
    assert not (run / "ca" / COLUMNS_FILE).exists()
    assert len(load_mode(run / "ca", columns=True).of(StepEvent)) == 10


def test_a_kind_with_no_lines_has_empty_columns(tmp_path):
    """Steps with no backward or optimizer-step line (hand-made or imported records): the figures
    read empty columns for those kinds, as they read no events without the sidecar."""
    steps_only = [line(e) for e in training(5) if not isinstance(e, (BackwardEvent, OptimizerStepEvent))]
    run = write_run(tmp_path / "r", {"ca": steps_only})
    fast, slow = both_loads(run / "ca", kinds=SUMMARY_KINDS)
    assert fast.columns["backward"].count == 0 and fast.columns["backward"].column("step") == []
    assert fast.of(BackwardEvent) == []
    assert mode_metrics(fast) == mode_metrics(slow)
    assert_same_record(fast, slow)


def test_a_sidecar_is_trusted_from_stat_only_while_the_stream_keeps_its_recorded_size_and_time(tmp_path):
    """Without reading events.jsonl (what keeps a report over 24 records of 100,000 steps fast),
    only when the sidecar recorded the stream's size and modification time, both still match, and
    the stream was modified strictly before the sidecar was written; otherwise the CRC-32 decides."""
    import os

    from cagtool.record.columns import read_sidecar

    run = write_run(tmp_path / "r", {"ca": [line(e) for e in training(12)]})
    events, sidecar = run / "ca" / "events.jsonl", run / "ca" / COLUMNS_FILE
    recorded = json.loads(sidecar.read_bytes().split(b"\n", 1)[0])["events_mtime_ns"]
    assert recorded == events.stat().st_mtime_ns
    written = sidecar.stat().st_mtime_ns
    os.utime(events, ns=(recorded, recorded))
    os.utime(sidecar, ns=(written, max(written, recorded + 1)))  # the stream older than the sidecar, as when it closed
    assert read_sidecar(run / "ca", events_stat=events.stat()) is not None
    # Modified in the sidecar's own clock tick (or later): the time proves nothing, the CRC decides.
    os.utime(sidecar, ns=(recorded, recorded))
    assert read_sidecar(run / "ca", events_stat=events.stat()) is None
    assert read_sidecar(run / "ca", events.read_bytes()) is not None
    os.utime(sidecar, ns=(written, max(written, recorded + 1)))
    # Another time (an edit, or a copy that did not keep times): the CRC decides; the edit is caught.
    edited = events.read_bytes().replace(b'"wall_s": 0.0042', b'"wall_s": 0.0043', 1)
    events.write_bytes(edited)
    os.utime(events, ns=(recorded + 2 * 10**9, recorded + 2 * 10**9))  # written later (set: a coarse clock could give it the old time in a fast test)
    assert read_sidecar(run / "ca", events_stat=events.stat()) is None and read_sidecar(run / "ca", edited) is None
    fast = load_mode(run / "ca", columns=True)
    assert not fast.columns and 0.0043 in [s.wall_s for s in fast.of(StepEvent)]
    # A sidecar that never recorded the time (version 1, or derive() without it): the CRC decides.
    events.write_bytes(edited)
    sidecar.write_bytes(derive(edited))
    assert read_sidecar(run / "ca", events_stat=events.stat()) is None and read_sidecar(run / "ca", edited) is not None
    assert load_mode(run / "ca", columns=True).columns
