"""Hand-made multi-rank run records, written to disk in the agreed layout (<mode>/procs/rank<N>/)
with the capture side's own RecordWriter, so the loader reads them as it reads a real run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cagtool.record.writer import RecordWriter, write_run_meta
from cagtool.record.graph_file import GraphNode
from cagtool.record.manifest import ExceptionInfo, ModeManifest, RunMeta
from cagtool.record.schema import (
    AutogradNodeRef,
    BackwardEvent,
    CacheMissEvent,
    CAGraphEvent,
    FinalStateEvent,
    FindingEvent,
    StepEvent,
)


@dataclass(frozen=True)
class Cap:
    """A CA capture at `step` (numbered from 0, as the script's loop and cagtool number steps)
    caused by a new-node miss on `node` (NodeCall `call`); the graph holds one mul per name in `ops`."""

    step: int
    node: str = "torch::autograd::GraphRoot"
    call: int = 0
    ops: tuple[str, ...] = ("MulBackward0",)
    miss_kind: str = "new_node"  # "changed_shapes": captured again for other sizes


@dataclass
class Rank:
    steps: int = 6
    caps: list[Cap] = field(default_factory=lambda: [Cap(0)])
    param_norm: float | None = 3.0
    grad_norm: float | None = 0.5
    status: str = "finished"
    exit_code: int | None = 0
    exception: str | None = None
    findings: list[tuple[str, str]] = field(default_factory=list)  # (code, message)
    step_s: float = 0.01
    cuda_peak: int | None = None  # manifest peak_device_memory_bytes
    boundary: bool = False  # steps end at the optimizer (schema 2's layout: wall_s since the previous step)
    final_of: str = "optimizer"  # FinalStateEvent.of: "shards" where each rank holds its own shard
    waits: dict[int, float] = field(default_factory=dict)  # step -> seconds the rank waited there for another (boundary steps)


def _manifest(key: str, rank: int | None, world_size: int | None, role: str, status: str, exit_code: int | None) -> ModeManifest:
    return ModeManifest(
        mode="ca", argv=["train_ddp.py"], target={"kind": "script", "name": "train_ddp.py"}, cwd="/work", versions={"torch": "2.13.0"},
        backend="eager", dynamic=False, started_at="2026-01-01T00:00:00+00:00", status=status, exit_code=exit_code,
        duration_s=1.0, peak_rss_bytes=200 * 2**20, torch_counters={"graph_break": {}, "stats": {}},
        process={"key": key, "pid": 100 + (rank or 0), "ppid": 1, "rank": rank, "local_rank": rank, "world_size": world_size,
                 "role": role, "argv": ["train_ddp.py"]},
    )


def _nodes(ops: tuple[str, ...]) -> list[GraphNode]:
    nodes = [GraphNode(name="inputs", op="placeholder", target="inputs")]
    for i, origin in enumerate(ops):
        nodes.append(GraphNode(name=f"mul_{i}", op="call_function", target="torch.ops.aten.mul.Tensor", args="(%inputs, 2)",
                               origin=AutogradNodeRef(i + 1, origin)))
    nodes.append(GraphNode(name="output", op="output", target="output", args="[]"))
    return nodes


def _write_process(mode_dir: Path, manifest: ModeManifest, spec: Rank) -> None:
    writer = RecordWriter(mode_dir, manifest, clock_start=0.0)
    caps = {c.step: (i, c) for i, c in enumerate(spec.caps)}
    t = 0.5
    for step in range(spec.steps):
        captured = 0
        if step in caps:
            ca_id, cap = caps[step]
            writer.emit(CacheMissEvent, t=t, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, miss_kind=cap.miss_kind,
                        message=f"Cache miss due to new autograd node: {cap.node} (NodeCall {cap.call})", node=cap.node,
                        node_call=cap.call, key_size=40)
            code, nodes = writer.write_graph(ca_id, f"!{ca_id}", "def forward(inputs): ...\n", _nodes(cap.ops))
            writer.emit(CAGraphEvent, t=t, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, node_count=len(cap.ops) + 2,
                        op_histogram={"aten.mul.Tensor": len(cap.ops)}, autograd_nodes=[AutogradNodeRef(i + 1, o) for i, o in enumerate(cap.ops)],
                        aot_ids=[], hooks=[], num_sizes=0, capture_s=0.01, code_file=code, nodes_file=nodes)
            captured = 1
        t += spec.step_s
        if spec.boundary:
            writer.emit(BackwardEvent, t=t, step=step, index=0, backward_s=0.001, ca_captures=captured, loss=1.0 / (step + 1))
        timing = {"boundary": "optimizer", "wall_s": None if step == 0 else spec.step_s + (0.05 if captured else 0.0) + spec.waits.get(step, 0.0)} if spec.boundary else {}
        writer.emit(StepEvent, t=t, step=step, backward_s=0.001, loss=1.0 / (step + 1), ca_captures=captured, compiles=captured, **timing)
    for code, message in spec.findings:
        writer.emit(FindingEvent, t=t, code=code, message=message)
    if spec.param_norm is not None or spec.grad_norm is not None:
        writer.emit(FinalStateEvent, t=t, param_norm=spec.param_norm, grad_norm=spec.grad_norm, num_params=4, of=spec.final_of)
    writer.close()


def write_multi_rank_run(root: Path, ranks: dict[int, Rank], world_size: int | None = None, main_findings: list[tuple[str, str]] | None = None) -> Path:
    """A run of one `ca` mode: the launcher (main, no rank, no steps) and procs/rank<N> per rank."""
    size = world_size if world_size is not None else len(ranks)
    root.mkdir(parents=True)
    write_run_meta(root, RunMeta(run_id="ddp", created_at="2026-01-01T00:00:00+00:00", cagtool_argv=["run", "train_ddp.py"],
                                 target={"kind": "script", "name": "train_ddp.py"}, target_argv=["train_ddp.py"], cwd="/work",
                                 modes=["ca"], versions={"torch": "2.13.0"}, machine={}, status="finished", exit_code=0,
                                 mode_exit_codes={"ca": 0}))
    _write_process(root / "ca", _manifest("main", None, size, "main", "finished", 0),
                   Rank(steps=0, caps=[], param_norm=None, grad_norm=None, findings=main_findings or []))
    for rank, spec in ranks.items():
        manifest = _manifest(f"rank{rank}", rank, size, "child", spec.status, spec.exit_code)
        manifest.peak_device_memory_bytes = spec.cuda_peak
        if spec.exception:
            manifest.exception = ExceptionInfo("RuntimeError", spec.exception)
        _write_process(root / "ca" / "procs" / f"rank{rank}", manifest, spec)
    return root


@pytest.fixture
def multi_rank_run(tmp_path):
    """make(ranks, world_size=None, main_findings=None, name="run") -> a run directory under tmp_path.
    Imported by the test modules (not a conftest.py: `from conftest import ROOT` elsewhere must keep
    finding tests/conftest.py)."""

    def make(ranks: dict[int, Rank], world_size: int | None = None, main_findings: list[tuple[str, str]] | None = None, name: str = "run") -> Path:
        return write_multi_rank_run(tmp_path / name, ranks, world_size, main_findings)

    return make
