"""`cagtool export RUN --perfetto trace.json`: a Chrome trace-event document that Perfetto and
chrome://tracing load. Checked against the JSON Object Format of the Trace Event spec (complete
events `X` with µs `ts`/`dur`, instant events `i` with their scope `s`, metadata `M` naming
processes and threads) and against the record. (Perfetto's own trace processor downloads a binary
when it starts, which the test machines cannot: the format is checked here instead.)"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import cagtool_in_process

sys.path.insert(0, str(Path(__file__).parent / "ranks"))

from cagtool.record.loader import load_run
from cagtool.record.schema import (
    BackwardEvent,
    CacheMissEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    GraphBreakEvent,
    StepEvent,
)
from cagtool.report.perfetto import TRACKS

# The parts of the Trace Event Format (Google's "Trace Event Format" document) this export uses.
TRACE_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "ph", "pid", "tid"],
                "properties": {
                    "name": {"type": "string"},
                    "cat": {"type": "string"},
                    "ph": {"enum": ["X", "M", "i"]},
                    "s": {"enum": ["g", "p", "t"]},
                    "pid": {"type": "integer", "minimum": 0},
                    "tid": {"type": "integer", "minimum": 0},
                    "ts": {"type": "number", "minimum": 0},
                    "dur": {"type": "number", "minimum": 0},
                    "args": {"type": "object"},
                },
                "allOf": [
                    {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur"]}},
                    {"if": {"properties": {"ph": {"const": "i"}}}, "then": {"required": ["ts", "s", "args"]}},
                    {
                        "if": {"properties": {"ph": {"const": "M"}}},
                        "then": {
                            "properties": {"name": {"enum": ["process_name", "process_sort_index", "thread_name", "thread_sort_index"]}},
                            "required": ["args"],
                        },
                    },
                ],
            },
        },
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
}


@pytest.fixture(scope="module")
def trace(record_run, tmp_path_factory):
    run = record_run("graph_breaks.py", "3", modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr
    out = tmp_path_factory.mktemp("trace") / "trace.json"
    proc = cagtool_in_process("export", str(run.path), "--perfetto", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"trace: {out}" in proc.stderr
    return load_run(run.path), json.loads(out.read_text())


def test_trace_follows_the_trace_event_format(trace):
    _run, doc = trace
    jsonschema.validate(doc, TRACE_SCHEMA)


def test_one_process_per_mode_with_named_tracks(trace):
    run, doc = trace
    events = doc["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(processes.values()) == sorted(run.modes)
    for pid in processes:
        threads = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}
        assert threads == dict(TRACKS)
    # Every span sits on a named process and track.
    for e in events:
        if e["ph"] == "X":
            assert e["pid"] in processes and e["tid"] in dict(TRACKS)


def test_spans_match_the_record(trace):
    run, doc = trace
    events = doc["traceEvents"]
    pid_of = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    tid = {name: t for t, name in TRACKS}
    for name, record in run.modes.items():
        spans = [e for e in events if e["ph"] == "X" and e["pid"] == pid_of[name]]
        backward = [e for e in spans if e["tid"] == tid["backward"]]
        steps = record.of(StepEvent)
        calls = record.of(BackwardEvent)  # one span per backward call
        assert len(backward) == len(calls) >= len(steps)
        for event, call in zip(sorted(backward, key=lambda e: e["ts"]), sorted(calls, key=lambda b: b.seq)):
            assert event["dur"] == pytest.approx(call.backward_s * 1e6, abs=1)
        # Steps: from the previous step's end to this one's; the first from the first thing
        # recorded of it (its first compile or backward), ending where it ended.
        step_spans = sorted((e for e in spans if e["tid"] == tid["steps"]), key=lambda e: e["ts"])
        ordered = sorted(steps, key=lambda s: s.step)
        assert [e["args"]["step"] for e in step_spans] == [s.step for s in ordered]
        for event, step in zip(step_spans[1:], ordered[1:]):
            assert event["dur"] == pytest.approx(step.wall_s * 1e6, abs=1)
        first, first_step = step_spans[0], ordered[0]
        assert first["name"] == f"step {first_step.step}" and "measured_from" in first["args"]
        assert first["ts"] + first["dur"] == pytest.approx(first_step.t * 1e6, abs=1)
        # It holds its compiles: it starts no later than the first Dynamo compile of its forward.
        compiles = [d for d in record.of(DynamoCompileEvent) if d.step == first_step.step]
        for compile_event in compiles:
            assert first["ts"] <= (compile_event.t - (compile_event.entire_frame_compile_time_s or 0.0)) * 1e6 + 1
        assert len([e for e in spans if e["tid"] == tid["CA capture"]]) == len(record.of(CAGraphEvent))
        assert len([e for e in spans if e["tid"] == tid["Dynamo compile"]]) == len(record.of(DynamoCompileEvent))
    ca_pid = pid_of["ca"]
    assert any(e["tid"] == tid["CA capture"] and e["pid"] == ca_pid for e in events)


def test_each_mode_starts_at_its_own_time_zero(trace):
    """Modes ran one after another; side by side each is drawn from 0 to its own end, not laid end
    to end on one clock."""
    run, doc = trace
    events = doc["traceEvents"]
    pid_of = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    for name, record in run.modes.items():
        drawn = [e for e in events if e["pid"] == pid_of[name] and e["ph"] in ("X", "i")]
        end = max(e.t for e in record.events)
        assert min(e["ts"] for e in drawn) >= 0
        assert max(e["ts"] + e.get("dur", 0) for e in drawn) <= end * 1e6 + 1
    assert set(doc["otherData"]["time_origins"]) == set(run.modes)


def test_slice_names_have_no_float_artefacts(trace):
    _run, doc = trace
    names = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "backward"]
    assert names and all(re.fullmatch(r"backward step \d+( #\d+)?", n) for n in names), names[:5]
    steps = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "steps"]
    assert all(re.fullmatch(r"step \d+", n) for n in steps), steps[:5]


def test_misses_recompiles_and_graph_breaks_are_instant_events_with_torchs_words(trace):
    run, doc = trace
    events = doc["traceEvents"]
    pid_of = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    tid = {name: t for t, name in TRACKS}
    seen = {"miss": 0, "recompile": 0, "break": 0}
    for name, record in run.modes.items():
        instants = [e for e in events if e["ph"] == "i" and e["pid"] == pid_of[name]]
        misses = [e for e in instants if e["name"].startswith("CA cache miss ")]
        recompiles = [e for e in instants if e["name"].startswith("Dynamo recompile ")]
        breaks = [e for e in instants if e["name"].startswith("graph break ")]
        assert len(misses) == len(record.of(CacheMissEvent))
        assert len(recompiles) == len(record.of(DynamoRecompileEvent))
        assert len(breaks) == len(record.of(GraphBreakEvent))
        assert all(e["tid"] == tid["CA capture"] for e in misses)
        assert all(e["tid"] == tid["Dynamo compile"] for e in recompiles + breaks)
        for event, miss in zip(misses, record.of(CacheMissEvent)):
            assert event["args"]["reason"] == miss.message and event["args"]["node"] == miss.node
        for event, brk in zip(breaks, record.of(GraphBreakEvent)):
            assert event["args"]["message"] == brk.reason and event["args"]["source"].startswith(f"{brk.file}:{brk.line}")
            assert event["args"]["reason"] and not event["args"]["reason"].startswith("Encountered graph break")
        seen["miss"] += len(misses)
        seen["recompile"] += len(recompiles)
        seen["break"] += len(breaks)
    assert seen["miss"] and seen["break"], seen  # graph_breaks.py: CA captures and graph breaks in every compiled mode


def test_a_launcher_with_nothing_to_draw_is_left_out(tmp_path):
    from rank_records import Rank, write_multi_rank_run  # noqa: E402 - the hand-made multi-rank records

    from cagtool.report.perfetto import perfetto_trace

    run = load_run(write_multi_rank_run(tmp_path / "run", {0: Rank(boundary=True), 1: Rank(boundary=True)}))
    doc = perfetto_trace(run)
    jsonschema.validate(doc, TRACE_SCHEMA)
    names = sorted(e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name")
    assert names == ["ca rank 0", "ca rank 1"]
    assert doc["otherData"]["processes_left_out"] == ["ca"]
    # Both ranks start together (same start time): their steps line up, step 0 included.
    firsts = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "step 0"]
    assert len(firsts) == 2 and firsts[0]["ts"] == firsts[1]["ts"]


def test_export_needs_a_format_and_a_run(tmp_path):
    no_format = cagtool_in_process("export", str(tmp_path))
    assert no_format.returncode == 2 and "--perfetto" in no_format.stderr
    missing = cagtool_in_process("export", str(tmp_path / "nope"), "--perfetto", str(tmp_path / "t.json"))
    assert missing.returncode == 3 and "no run at" in missing.stderr
