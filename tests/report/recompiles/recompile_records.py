"""Hand-built `recompiles` records for the analysis tests: events in the documented layout
(run.json + ca/manifest.json + ca/events.jsonl) written from the schema's own event classes and read
back with the one loader, so a test exercises the same path as a real run without running torch."""

from __future__ import annotations

import json
from pathlib import Path

from cagtool.record.loader import load_run
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.schema import AutogradNodeRef, CacheMissEvent, CAGraphEvent, Event, HookRef, SourceRef, StepEvent, event_to_dict, json_default
from cagtool.report.recompiles.table import recompile_table

CWD = "/proj"
BACKWARD_LINE = SourceRef(file="/proj/train.py", line=30, code="loss.backward()", function="main", how="backward_call")
ROOT = "torch::autograd::GraphRoot"


class RecordBuilder:
    """Events in write order with `seq` assigned; `write(dir)` lays them out as a run directory.
    The records are old ones (schema 1 by default, 2 on request): steps numbered from 1 as written
    here, read back numbered from 0 (the loader renumbers them), so the expected steps below are
    one less than the ones written."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, cls: type[Event], **fields) -> Event:
        event = cls(seq=len(self.events), t=0.01 * len(self.events), **fields)
        self.events.append(event)
        return event

    def miss(self, ca_id: int, step: int, node: str | None, node_call: int | None, kind: str = "new_node", **fields) -> None:
        fields.setdefault("source", BACKWARD_LINE)
        self.add(CacheMissEvent, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, miss_kind=kind,
                 message=f"Cache miss ({kind})", node=node, node_call=node_call, **fields)

    def graph(self, ca_id: int, step: int, nodes: list[str] | None = None, hooks: tuple[str, ...] = (),
              histogram: dict[str, int] | None = None, num_sizes: int = 0) -> None:
        self.add(CAGraphEvent, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, node_count=10,
                 op_histogram=histogram or {}, autograd_nodes=[AutogradNodeRef(i, n) for i, n in enumerate(nodes or [])],
                 aot_ids=[], hooks=[HookRef("call_hook", h) for h in hooks], num_sizes=num_sizes, capture_s=0.01,
                 code_file=f"graphs/ca_{ca_id}.py", nodes_file=f"graphs/ca_{ca_id}.json")

    def step(self, step: int, captures: int = 0) -> None:
        self.add(StepEvent, step=step, backward_s=0.001, ca_captures=captures)

    def write(self, root: Path, schema_version: int = 1) -> Path:
        (root / "ca").mkdir(parents=True, exist_ok=True)
        meta = RunMeta(run_id="t", created_at="2026-01-01T00:00:00Z", cagtool_argv=[], target={"kind": "script", "name": "train.py"},
                       target_argv=[], cwd=CWD, modes=["ca"], versions={}, machine={}, status="finished", exit_code=0)
        meta.schema_version = schema_version
        manifest = ModeManifest(mode="ca", argv=["train.py"], target={}, cwd=CWD, versions={}, backend="eager",
                                dynamic=False, started_at="2026-01-01T00:00:00Z", status="finished")
        manifest.schema_version = schema_version  # 1: step events per backward, forward compiles stamped with the step last begun
        (root / "run.json").write_text(json.dumps(to_dict(meta)))
        (root / "ca" / "manifest.json").write_text(json.dumps(to_dict(manifest)))
        with (root / "ca" / "events.jsonl").open("w") as handle:
            for event in self.events:
                handle.write(json.dumps(event_to_dict(event), default=json_default) + "\n")
        return root


def table_of(builder: RecordBuilder, tmp_path: Path):
    return recompile_table(load_run(builder.write(tmp_path / "run")).mode("ca"))
