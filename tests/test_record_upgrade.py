"""Old record schemas are converted once, by the loader (record/upgrade.py): a schema 1 or 2 record
of a job loads as the events a current record of the same job holds, and the reports that used to
ask the schema read both the same. Hand-built records: one job, written as each schema wrote it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import msgspec
import pytest
from rich.console import Console

from cagtool.record.loader import load_run
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.schema import (
    SCHEMA_VERSION,
    STEP_BOUNDARY_BACKWARD,
    BackwardEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    Event,
    GraphBreakEvent,
    StepEvent,
    event_to_dict,
)
from cagtool.report.figures.metrics import mode_metrics
from cagtool.report.html.charts import Series, marker_rows
from cagtool.report.recompiles.table import recompile_table
from cagtool.report.summary import render_mode

SCHEMA_2_FIELDS = ("wall_s", "backward_calls", "boundary", "optimizer_s", "cpu_s", "thread_cpu_s")


def current_job() -> list[Event]:
    """Three steps without an optimizer, as the current writer stamps them: a forward frame that
    breaks and compiles in step 0 and recompiles in step 2, one CA graph captured in step 0."""
    events: list[Event] = []

    def add(cls: type[Event], **fields) -> None:
        events.append(cls(seq=len(events), t=0.1 * (len(events) + 1), **fields))

    for step in range(3):
        if step == 0:
            add(GraphBreakEvent, compile_id="0/0", step=0, reason="Call to `torch._dynamo.graph_break()`")
            add(DynamoCompileEvent, compile_id="0/0", is_ca_graph=False, step=0, co_name="fn", entire_frame_compile_time_s=0.05)
        if step == 2:
            add(DynamoRecompileEvent, compile_id="0/1", is_ca_graph=False, step=2, reasons=["0/0: L['depth'] == 1"])
            add(DynamoCompileEvent, compile_id="0/1", is_ca_graph=False, step=2, co_name="fn", entire_frame_compile_time_s=0.05)
        if step == 0:
            add(CAGraphEvent, ca_id=0, compile_id="!0", step=0, node_count=3, op_histogram={}, autograd_nodes=[], aot_ids=[], hooks=[],
                num_sizes=0, capture_s=0.01, code_file="graphs/ca_0.py", nodes_file="graphs/ca_0.json")
            add(DynamoCompileEvent, compile_id="!0/0/0", is_ca_graph=True, step=0, co_name="forward", entire_frame_compile_time_s=0.02)
        add(BackwardEvent, step=step, index=0, backward_s=0.01, ca_captures=int(step == 0))
        add(StepEvent, step=step, backward_s=0.01, ca_captures=int(step == 0), compiles=int(step in (0, 2)), wall_s=None if step == 0 else 0.2,
            boundary=STEP_BOUNDARY_BACKWARD)
    return events


def as_written_by(schema_version: int, event: Event) -> dict | None:
    """The event's line as a cagtool of `schema_version` wrote it (None: it wrote none)."""
    line = event_to_dict(event)
    if schema_version >= 3 or line.get("step") is None:
        return line
    in_forward_frame = not line.get("compile_id", "!").startswith("!")
    if schema_version == 1:
        if event.kind == "backward":
            return None  # schema 1's step event was its backward call
        if event.kind == "step":
            for key in SCHEMA_2_FIELDS:
                line.pop(key, None)
        if in_forward_frame:  # stamped with the step last begun, from 1: None before any backward
            line["step"] = line["step"] or None
            return line
    line["step"] += 1  # schemas 1 and 2 numbered steps from 1
    return line


def write_run(root: Path, schema_version: int, events: list[Event]) -> Path:
    (root / "ca").mkdir(parents=True)
    meta = RunMeta(run_id="t", created_at="2026-01-01T00:00:00Z", cagtool_argv=[], target={"kind": "script", "name": "train.py"},
                   target_argv=[], cwd="/proj", modes=["ca"], versions={}, machine={}, status="finished", exit_code=0)
    manifest = ModeManifest(mode="ca", argv=["train.py"], target={}, cwd="/proj", versions={}, backend="eager",
                            dynamic=False, started_at="2026-01-01T00:00:00Z", status="finished", exit_code=0)
    meta.schema_version = manifest.schema_version = schema_version
    (root / "run.json").write_text(json.dumps(to_dict(meta)))
    (root / "ca" / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    lines = [as_written_by(schema_version, e) for e in events]
    (root / "ca" / "events.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines if line is not None))
    return root


def without_schema_2_fields(event: Event) -> Event:
    """A step event as schema 1 could hold it (what it never measured at its defaults)."""
    if not isinstance(event, StepEvent):
        return event
    return msgspec.structs.replace(event, **{key: getattr(StepEvent(seq=0, t=0.0, step=0, backward_s=0.0), key) for key in SCHEMA_2_FIELDS})


@pytest.fixture
def records(tmp_path):
    """The job's mode record as written by schemas 1, 2 and the current one, loaded."""
    return {v: load_run(write_run(tmp_path / f"schema{v}", v, current_job())).mode("ca") for v in (1, 2, SCHEMA_VERSION)}


def test_old_schemas_load_as_the_current_one(records):
    current = records[SCHEMA_VERSION].events
    assert records[2].events == current
    # Schema 1: the backward events made from its steps (seq and end of their step line), forward
    # frames restamped with the step they belong to; the step fields it never measured stay unset.
    made = {(e.step, e.seq) for e in records[1].of(BackwardEvent)}
    assert made == {(s.step, s.seq) for s in records[1].of(StepEvent)} and len(made) == 3
    expected = [without_schema_2_fields(e) for e in current if e.kind != "backward"]
    assert [e for e in records[1].events if e.kind != "backward"] == expected
    assert [(e.compile_id, e.step) for e in records[1].of(DynamoCompileEvent)] == [("0/0", 0), ("!0/0/0", 0), ("0/1", 2)]
    assert records[1].kind_counts == records[SCHEMA_VERSION].kind_counts


def test_a_kinds_filter_sees_the_converted_kinds(tmp_path):
    """Asked for backward events alone, a schema 1 record gives the ones made from its steps (and
    no step events); its counts are the converted stream's."""
    run = write_run(tmp_path / "s1", 1, current_job())
    record = load_run(run, kinds={BackwardEvent.kind}).mode("ca")
    assert [e.kind for e in record.events] == ["backward"] * 3
    assert record.kind_counts["backward"] == record.kind_counts["step"] == 3
    record = load_run(run, kinds={StepEvent.kind}).mode("ca")
    assert [e.kind for e in record.events] == ["step"] * 3


def test_reports_read_every_schema_the_same(records):
    """What used to branch on the schema: the steps of recompile rows, the summary's recompile
    lines, the chart's graph-break markers and the backward-call count."""
    def read(record):
        rows = [(r.compile_id, r.step) for r in recompile_table(record).rows]
        console = Console(file=io.StringIO(), width=200, color_system=None)
        metrics = mode_metrics(record)
        render_mode(console, record, metrics)
        markers = [(m["kind"], m["compile_id"], m["step"]) for m in marker_rows([Series("ca", record, recompile_table(record))])]
        recompile_lines = [line for line in console.file.getvalue().splitlines() if line.strip().startswith("recompile ")]
        return rows, recompile_lines, markers, metrics.backward_calls, metrics.ca_graphs, metrics.dynamo_recompiles

    current = read(records[SCHEMA_VERSION])
    assert current[0] == [("!0", 0), ("0/1", 2)] and current[3] == 3
    assert [line.split(":")[0].strip() for line in current[1]] == ["recompile 0/1 at step 2"]
    assert [(cid, step) for kind, cid, step in current[2] if cid == "0/0"] == [("0/0", 0)]
    assert read(records[2]) == current
    assert read(records[1]) == current
