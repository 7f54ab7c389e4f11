"""The record writer never writes what its own loader refuses: an event whose line is over
MAX_EVENT_LINE_BYTES becomes a finding of the same seq and time that names what was left out, a
graph's nodes file over MAX_JSON_FILE_BYTES is not written, and the manifest counts both. A real
torch block recorded through the Python API, given those oversized things through its writer."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import cagtool
from cagtool.record.graph_file import GraphNode
from cagtool.record.loader import load_run
from cagtool.record.schema import FINDING_OVERSIZED_EVENT, MAX_EVENT_LINE_BYTES, MAX_JSON_FILE_BYTES, FindingEvent, StepEvent
from conftest import cli_in_process as cagtool_cli


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    opt.zero_grad()
    model(torch.randn(3, 4)).sum().backward()
    opt.step()


def test_an_event_over_the_line_limit_is_written_as_a_finding_and_counted(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    huge = "x" * (MAX_EVENT_LINE_BYTES + 1)  # with its JSON around it, a line over the limit
    with cagtool.capture(backend="eager", output=tmp_path / "run") as cap:
        writer = cap._recorder.writer
        _step(model, opt)
        writer.emit(FindingEvent, code="big", message=huge)  # written at once
        _step(model, opt)
        writer.emit_held(FindingEvent, code="big", message=huge)  # held, written among the step lines
        _step(model, opt)
    del huge
    mode = tmp_path / "run" / "ca"
    with open(mode / "events.jsonl", "rb") as handle:
        lines = handle.read().split(b"\n")
    assert lines[-1] == b"" and max(len(line) for line in lines) <= MAX_EVENT_LINE_BYTES
    events = [json.loads(line) for line in lines[:-1]]
    assert [e["seq"] for e in events] == list(range(len(events)))  # no seq lost or repeated
    dropped = [e for e in events if e["kind"] == "finding" and e["code"] == FINDING_OVERSIZED_EVENT]
    assert len(dropped) == 2, [e["kind"] for e in events]
    for event in dropped:
        assert event["detail"]["kind"] == "finding" and event["detail"]["bytes"] > MAX_EVENT_LINE_BYTES
        assert event["detail"]["limit"] == MAX_EVENT_LINE_BYTES and event["t"] > 0
    assert not any(e["kind"] == "finding" and e["code"] == "big" for e in events)
    manifest = json.loads((mode / "manifest.json").read_text())
    counted = manifest["options"]["oversized_dropped"]
    assert counted["count"] == 2 and counted["last"].startswith("a finding event of ") and manifest["status"] == "finished", counted

    run = load_run(tmp_path / "run", strict=True)  # every line a valid event
    assert len(run.mode("ca").of(StepEvent)) == 3
    code, out, err = cagtool_cli("summary", str(tmp_path / "run"))
    assert code == 0 and "Traceback" not in err, err
    assert out.count("was not recorded: one event line is at most") == 2, out


def test_a_graph_nodes_file_over_the_json_limit_is_not_written(tmp_path):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cagtool.capture(backend="eager", output=tmp_path / "run") as cap:
        writer = cap._recorder.writer
        _step(model, opt)
        node = GraphNode(name="n", op="call_function", target="t", args="a" * MAX_JSON_FILE_BYTES)
        written = writer.write_graph(99, "!99", "def graph(): pass\n", [node])
        small = writer.write_graph(98, "!98", "def graph(): pass\n", [GraphNode(name="n", op="output", target="output")])
    del node
    mode = tmp_path / "run" / "ca"
    assert written == ("graphs/ca_99.py", "") and small == ("graphs/ca_98.py", "graphs/ca_98.json")
    assert (mode / "graphs" / "ca_99.py").is_file() and not (mode / "graphs" / "ca_99.json").exists()
    counted = json.loads((mode / "manifest.json").read_text())["options"]["oversized_dropped"]
    assert counted["count"] == 1 and counted["last"].startswith("graph !99's nodes file of "), counted
    findings = [e for e in load_run(tmp_path / "run", strict=True).mode("ca").of(FindingEvent) if e.code == FINDING_OVERSIZED_EVENT]
    assert [f.detail["kind"] for f in findings] == ["graph_nodes_file"] and findings[0].detail["bytes"] > MAX_JSON_FILE_BYTES


def test_a_record_without_oversized_events_counts_none(tmp_path):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cagtool.capture(backend="eager", output=tmp_path / "run"):
        _step(model, opt)
    manifest = json.loads(Path(tmp_path / "run" / "ca" / "manifest.json").read_text())
    assert manifest["options"]["oversized_dropped"] == {"count": 0, "last": None}
