"""The record writer never writes what its own loader refuses: an event whose line is over
MAX_EVENT_LINE_BYTES becomes a finding of the same seq and time that names what was left out, a
graph's nodes file over MAX_JSON_FILE_BYTES is not written, and the manifest counts both. A real
torch block recorded through the Python API, given those oversized things through its writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
    # both said: two lines, or one with its count where the two read alike (the same size to the byte)
    lines = out.count("was not recorded: one event line is at most")
    assert lines == 2 or (lines == 1 and "what reports show of it is missing - 2 times in all" in out), out


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


def test_a_graphs_code_and_a_compile_artifact_over_the_text_limit_are_cut_and_read_back(tmp_path):
    """A graph's code and a compile artifact over MAX_TEXT_FILE_BYTES are written cut at a line to
    that size, their last line saying how much was left out; a finding names each and the manifest
    counts them. `cagtool compile` prints the cut artifact (its reader refuses only what is over the
    limit), and the report shows the start of the cut code."""
    from cagtool.record.schema import MAX_TEXT_FILE_BYTES, CompileArtifactEvent

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    line = "    buf = torch.ops.aten.mul.Tensor(buf, buf)  # é\n"
    code = "def graph():\n" + line * (MAX_TEXT_FILE_BYTES // len(line.encode()) + 10)
    with cagtool.capture(backend="eager", output=tmp_path / "run") as cap:
        writer = cap._recorder.writer
        _step(model, opt)
        code_rel, nodes_rel = writer.write_graph(97, "!97", code, [GraphNode(name="n", op="output", target="output")])
        rel = writer.write_artifact("0/0", "dynamo_cpp_guards_str", code)
        writer.emit(CompileArtifactEvent, compile_id="0/0", artifact="dynamo_cpp_guards_str", file=rel)
    mode = tmp_path / "run" / "ca"
    whole = len(code.encode())
    del code
    for written in (mode / code_rel, mode / rel):
        data = written.read_bytes()
        assert len(data) <= MAX_TEXT_FILE_BYTES, (written, len(data))
        kept, _, last = data.rstrip(b"\n").rpartition(b"\n")
        assert kept.endswith(line.rstrip("\n").encode()) and data.decode("utf-8")  # cut after a whole line, valid UTF-8
        assert last.decode() == (f"# cagtool: the rest of this file ({whole - len(kept) - 1:,} of its {whole:,} bytes) was not recorded: "
                                 f"a record's text file is at most {MAX_TEXT_FILE_BYTES:,} bytes")
    assert nodes_rel == "graphs/ca_97.json"
    counted = json.loads((mode / "manifest.json").read_text())["options"]["oversized_dropped"]
    assert counted["count"] == 2 and counted["last"] == f"compile artifact {rel} of {whole:,} bytes, cut", counted
    findings = [e for e in load_run(tmp_path / "run", strict=True).mode("ca").of(FindingEvent) if e.code == FINDING_OVERSIZED_EVENT]
    assert [(f.detail["kind"], f.detail["bytes"]) for f in findings] == [("graph_code_file", whole), ("compile_artifact", whole)]
    assert findings[0].message.startswith(f"graph !97's code ({code_rel}) of {whole:,} bytes was cut at its last whole line under ")
    code_, out, err = cagtool_cli("compile", str(tmp_path / "run"), "0/0", "--show", "dynamo_cpp_guards_str")
    assert code_ == 0 and "Traceback" not in err and "was not recorded: a record's text file is at most" in out, err[-2000:]


@pytest.mark.slow
def test_a_huge_argv_leaves_a_run_json_and_manifest_the_loader_reads(tmp_path, monkeypatch):
    """A job whose argv is over MAX_JSON_FILE_BYTES (one word of 65 MiB): run.json
    and the manifest are written under the limit, the word cut with a marker saying how much, and
    their `truncated` says what was cut; the record loads and `summary` reads it."""
    from cagtool.record.manifest import CUT_MARKER

    word = "w" * (MAX_JSON_FILE_BYTES + 2**20)
    monkeypatch.setattr("sys.argv", ["train.py", word, "--steps", "3"])
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with cagtool.capture(backend="eager", output=tmp_path / "run"):
        _step(model, opt)
    monkeypatch.undo()
    for name in ("run.json", "ca/manifest.json"):
        path = tmp_path / "run" / name
        assert path.stat().st_size <= MAX_JSON_FILE_BYTES, name
        data = json.loads(path.read_text())
        argv = data["target_argv" if name == "run.json" else "argv"]
        fields = ["target_argv[1]"] if name == "run.json" else ["argv[1]", "process.argv[1]"]  # the manifest has the argv twice
        cut = data["truncated"]["cuts"]
        assert [c["field"] for c in cut] == fields and {c["unit"] for c in cut} == {"characters"}, cut
        assert argv[1] == "w" * cut[0]["kept"] + CUT_MARKER.format(cut[0]["cut"]) and cut[0]["kept"] + cut[0]["cut"] == len(word)
        assert argv[2:] == ["--steps", "3"] and data["truncated"]["bytes"] > MAX_JSON_FILE_BYTES and data["truncated"]["limit"] == MAX_JSON_FILE_BYTES
    run = load_run(tmp_path / "run", strict=True)
    assert run.mode("ca").manifest.truncated["cuts"][0]["field"] == "argv[1]" and run.meta.truncated is not None
    code, out, err = cagtool_cli("summary", str(tmp_path / "run"))
    assert code == 0 and "Traceback" not in err, err[-2000:]
    # what was cut is said where the record is read, not only in its files
    text = " ".join(out.split())
    kept = run.mode("ca").manifest.truncated["cuts"][0]["kept"]
    shown = len(run.meta.target_argv[1])  # the word as run.json kept it (cut, with the marker)
    assert "w" * 201 not in out and f"{'w' * 200}[... {shown:,} characters] --steps 3" in text  # the header's argv, bounded
    assert f"note: run.json was cut to fit the readers' bound ({run.meta.truncated['bytes'] / 2**20:,.0f} MiB whole): target_argv[1]: kept {run.meta.truncated['cuts'][0]['kept']:,} of {len(word):,} characters" in text, text
    assert f"note: its manifest was cut to fit the readers' bound ({run.mode('ca').manifest.truncated['bytes'] / 2**20:,.0f} MiB whole): argv[1]: kept {kept:,} of {len(word):,} characters; process.argv[1]: kept" in text, text
    del word


def _manifest(**changes) -> dict:
    from cagtool.record.manifest import ModeManifest, to_dict

    manifest = ModeManifest(mode="ca", argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/job",
                            versions={"torch": torch.__version__}, backend="eager", dynamic=False, started_at="2026-01-01T00:00:00Z")
    for name, value in changes.items():
        setattr(manifest, name, value)
    return to_dict(manifest)


def test_every_shape_of_oversized_manifest_is_cut_to_one_its_reader_reads():
    """document_text with a 1 MiB bound (the same code as at 64 MiB, 64 times cheaper): a giant
    exception message and traceback, options by the ten thousand, a list of findings-like
    objects, and all at once; each text is under the bound, reads back as a manifest (every field's
    type checked), keeps the fields that make it a record, and its `truncated` names each cut."""
    from cagtool.record.manifest import ExceptionInfo, document_text, mode_manifest_from_dict
    from cagtool.record.schema import MODE_FORMAT

    limit = 2**20
    cases = {
        "exception": _manifest(exception=ExceptionInfo("RuntimeError", "boom " * 200_000, "File x, line 1\n" * 100_000)),
        "options": _manifest(options={f"option_{i}": i for i in range(60_000)}),
        "findings": _manifest(imported={"findings": [{"code": "x", "message": "m" * 50} for _ in range(20_000)]}),
    }
    cases["all"] = {**cases["exception"], "options": cases["options"]["options"], "imported": cases["findings"]["imported"]}
    expected = {"exception": {"exception.message", "exception.traceback"}, "options": {"options"}, "findings": {"imported.findings"}}
    for name, data in cases.items():
        text = document_text(json.loads(json.dumps(data)), limit=limit)
        assert len(text) <= limit, (name, len(text))
        back = json.loads(text)
        manifest = mode_manifest_from_dict(back)
        assert (manifest.format, manifest.mode, manifest.status, manifest.started_at) == (MODE_FORMAT, "ca", "running", "2026-01-01T00:00:00Z")
        fields = {cut["field"] for cut in back["truncated"]["cuts"]}
        assert fields and fields <= set().union(*expected.values()), (name, fields)
        if name in expected:
            assert fields == expected[name], (name, fields)
        for cut in back["truncated"]["cuts"]:
            assert cut["cut"] > 0 and cut["unit"] in ("characters", "items", "entries")
        if manifest.exception is not None:
            assert manifest.exception.type == "RuntimeError" and "[... cagtool cut " in manifest.exception.message
    small = _manifest()
    assert document_text(dict(small), limit=limit) == json.dumps(small, indent=2) + "\n"  # under the bound: as before, no `truncated`
    assert mode_manifest_from_dict(json.loads(document_text(_manifest()))).truncated is None
