"""`cagtool export RUN --perfetto trace.json`: a Chrome trace-event document that Perfetto and
chrome://tracing load. Checked against the JSON Object Format of the Trace Event spec (complete
events `X` with µs `ts`/`dur`, metadata `M` naming processes and threads) and against the record."""

from __future__ import annotations

import json
import subprocess

import jsonschema
import pytest

from conftest import cagtool_cmd

from cagtool.record.loader import load_run
from cagtool.record.schema import BackwardEvent, CAGraphEvent, DynamoCompileEvent, StepEvent
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
                    "ph": {"enum": ["X", "M"]},
                    "pid": {"type": "integer", "minimum": 0},
                    "tid": {"type": "integer", "minimum": 0},
                    "ts": {"type": "number", "minimum": 0},
                    "dur": {"type": "number", "minimum": 0},
                    "args": {"type": "object"},
                },
                "allOf": [
                    {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["ts", "dur"]}},
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
    proc = subprocess.run(cagtool_cmd("export", str(run.path), "--perfetto", str(out)), capture_output=True, text=True, timeout=120)
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
        # Steps: from the previous step's end to this one's (the first has no start).
        step_spans = [e for e in spans if e["tid"] == tid["steps"]]
        assert len(step_spans) == max(len(steps) - 1, 0)
        for event, step in zip(sorted(step_spans, key=lambda e: e["ts"]), sorted(steps, key=lambda s: s.step)[1:]):
            assert event["dur"] == pytest.approx(step.wall_s * 1e6, abs=1)
        assert len([e for e in spans if e["tid"] == tid["CA capture"]]) == len(record.of(CAGraphEvent))
        assert len([e for e in spans if e["tid"] == tid["Dynamo compile"]]) == len(record.of(DynamoCompileEvent))
    ca_pid = pid_of["ca"]
    assert any(e["tid"] == tid["CA capture"] and e["pid"] == ca_pid for e in events)


def test_export_needs_a_format_and_a_run(tmp_path):
    no_format = subprocess.run(cagtool_cmd("export", str(tmp_path)), capture_output=True, text=True, timeout=120)
    assert no_format.returncode == 2 and "--perfetto" in no_format.stderr
    missing = subprocess.run(cagtool_cmd("export", str(tmp_path / "nope"), "--perfetto", str(tmp_path / "t.json")), capture_output=True, text=True, timeout=120)
    assert missing.returncode == 3 and "no run at" in missing.stderr
