"""How long `cagtool recompiles --explain` takes on a big record: 100,000 events, 1,000 recompiles.

Builds a synthetic run directory (the documented layout, written with the schema's own event classes,
closed as a mode process closes its record: with the columns sidecar the writer derives from
events.jsonl, `record.columns.write_sidecar`; `--no-sidecar` leaves it out, as a killed run would),
then times the whole command in-process: load (with the one loader), analysis, grouping, and
rendering the explanation to a 100-column console. Prints the median and the spread over the
repetitions. Target: median < 0.5 s.

    python benchmarks/recompiles_explain.py [--repeat 9] [--keep DIR] [--no-sidecar]
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from cagtool.commands.recompiles import RecompilesOptions, run_recompiles
from cagtool.record.columns import write_sidecar
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.schema import (
    FIRST_STEP,
    AutogradNodeRef,
    CacheMissEvent,
    CAGraphEvent,
    ChangedSize,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    Event,
    HookRef,
    OptimizerStepEvent,
    SourceRef,
    StepEvent,
    event_to_dict,
    json_default,
)

TOTAL_EVENTS = 100_000
RECOMPILES = 1_000
CWD = "/bench"
BACKWARD = SourceRef(file="/bench/train.py", line=88, code="loss.backward()", function="train", how="backward_call")
LAYER = SourceRef(file="/bench/model.py", line=42, code="h = self.act(h)", function="forward", how="node_traceback")
ROOT = "torch::autograd::GraphRoot"


def build_events() -> list[Event]:
    """1 initial capture + 1,000 recompiles spread over the run (structure changes, changed shapes,
    hooks, Dynamo guard failures with a recompile-limit hit), padded with steps and optimizer
    steps (the bulk of any real record) up to 100,000 events."""
    events: list[Event] = []

    def add(cls: type[Event], **fields) -> None:
        events.append(cls(seq=len(events), t=len(events) * 1e-3, **fields))

    nodes = [AutogradNodeRef(i, name) for i, name in enumerate([ROOT, "SumBackward0", "AddmmBackward0", "ReluBackward0"])]
    ca_id = 0
    recompiles = 0
    step = 0
    frame_attempt = 0
    while len(events) < TOTAL_EVENTS - 2:
        step += 1
        captures = 0
        if step == 1 or (recompiles < RECOMPILES - 1 and step % 40 == 0):
            kind = "initial" if step == 1 else ("shapes", "structure", "hook", "dynamo", "structure")[recompiles % 5]
            if kind == "dynamo":
                frame_attempt += 1
                add(DynamoRecompileEvent, compile_id=f"0/{frame_attempt}", is_ca_graph=False, step=step - 1,
                    reasons=[f"0/{frame_attempt - 1}: n == {frame_attempt}  # for _ in range(n):  # model.py:50 in forward\n"
                             'User stack trace:\n  File "/bench/model.py", line 50, in forward\n    for _ in range(n):'])
                add(DynamoCompileEvent, compile_id=f"0/{frame_attempt}", is_ca_graph=False, step=step - 1, co_name="forward",
                    co_filename="/bench/model.py", co_firstlineno=45, entire_frame_compile_time_s=0.2)
            else:
                captures = 1
                if kind == "shapes":
                    sizes = [ChangedSize(index=i, value=step, previous=step - 40, node="AddmmBackward0", node_call=2) for i in range(2)]
                    add(CacheMissEvent, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, miss_kind="changed_shapes",
                        message="Cache miss due to 2 changed tensor shapes (total of 2): sizes[0], sizes[1]",
                        changed_sizes=sizes, total_changed=2, source=BACKWARD, backward_call=BACKWARD)
                else:
                    node = {"initial": ROOT, "structure": f"Op{ca_id % 7}Backward0", "hook": "torch::autograd::AccumulateGrad"}[kind]
                    add(CacheMissEvent, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, miss_kind="new_node",
                        message=f"Cache miss due to new autograd node: {node} (NodeCall 3) with key size 40, previous key sizes=[]",
                        node=node, node_call=0 if kind == "initial" else 3, key_size=40, previous_key_sizes=[38],
                        source=LAYER if kind == "structure" else BACKWARD, backward_call=BACKWARD)
                graph_nodes = nodes + [AutogradNodeRef(4, f"Op{ca_id % 7}Backward0")]
                hooks = [HookRef("call_hook", "tensor_pre_hook")] * (ca_id % 3 if kind == "hook" else 0)
                add(CAGraphEvent, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, node_count=120, op_histogram={"getitem": 60},
                    autograd_nodes=graph_nodes, aot_ids=[], hooks=hooks, num_sizes=2, capture_s=0.05,
                    code_file=f"graphs/ca_{ca_id}.py", nodes_file=f"graphs/ca_{ca_id}.json")
                add(DynamoCompileEvent, compile_id=f"!{ca_id}/{ca_id + 1}/0", is_ca_graph=True, step=step,
                    co_name="forward", co_filename="<eval_with_key>", entire_frame_compile_time_s=0.3)
                ca_id += 1
            if kind != "initial":
                recompiles += 1
        add(StepEvent, step=step, backward_s=0.002, loss=1.0, ca_captures=captures, compiles=captures)
        add(OptimizerStepEvent, step=step, wall_s=0.0005, optimizer="AdamW")
    # The last recompile: Dynamo's next attempt on the frame hits the limit and gives up (eager from then on).
    add(DynamoRecompileEvent, compile_id=f"0/{frame_attempt + 1}", is_ca_graph=False, step=step,
        reasons=[f"0/{frame_attempt}: n == {frame_attempt + 1}  # for _ in range(n):  # model.py:50 in forward"])
    recompiles += 1
    add(DynamoCompileEvent, compile_id=f"0/{frame_attempt + 1}", is_ca_graph=False, step=step, fail_type="Unsupported",
        fail_reason="Dynamo recompile limit exceeded\n  Explanation: ... exceeding the recompile_limit cache size limit (currently set to 8).")
    add(StepEvent, step=step + 1, backward_s=0.002)
    assert recompiles == RECOMPILES, recompiles
    return from_first_step(events)


def from_first_step(events: list[Event]) -> list[Event]:
    """The builders count steps from 1 (readable arithmetic); a record numbers them from
    FIRST_STEP (0 since schema 3, as the script's own loop does): every step shifted to that."""
    shift = FIRST_STEP - 1
    return [msgspec.structs.replace(e, step=e.step + shift) if getattr(e, "step", None) is not None else e for e in events]


def write_run(root: Path, events: list[Event], sidecar: bool = True) -> Path:
    """The run as `cagtool run` leaves it: with `sidecar`, the columns sidecar the writer derives
    when the mode's process closes its record (its own function); without, as a killed run."""
    (root / "ca").mkdir(parents=True, exist_ok=True)
    meta = RunMeta(run_id="bench", created_at="2026-01-01T00:00:00Z", cagtool_argv=[], target={"kind": "script", "name": "train.py"},
                   target_argv=[], cwd=CWD, modes=["ca"], versions={}, machine={}, status="finished", exit_code=0)
    manifest = ModeManifest(mode="ca", argv=["train.py"], target={}, cwd=CWD, versions={}, backend="eager", dynamic=False,
                            started_at="2026-01-01T00:00:00Z", status="finished")
    (root / "run.json").write_text(json.dumps(to_dict(meta)))
    (root / "ca" / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    with (root / "ca" / "events.jsonl").open("w") as handle:
        for event in events:
            handle.write(json.dumps(event_to_dict(event), default=json_default) + "\n")
    if sidecar:
        assert write_sidecar(root / "ca")
    return root


def time_once(run: Path) -> tuple[float, str]:
    out = io.StringIO()
    start = time.perf_counter()
    run_recompiles(RecompilesOptions(run=str(run), explain=True, width=100), out, io.StringIO())
    return time.perf_counter() - start, out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--keep", type=Path, help="write the synthetic run here and keep it")
    parser.add_argument("--no-sidecar", action="store_true", help="no columns sidecar (a killed run's record): every line is scanned")
    args = parser.parse_args()
    events = build_events()
    with tempfile.TemporaryDirectory() as tmp:
        run = write_run(args.keep or Path(tmp) / "run", events, sidecar=not args.no_sidecar)
        _, text = time_once(run)  # warm-up: imports and the OS file cache
        assert f"{RECOMPILES} recompiles" in text.splitlines()[0], text.splitlines()[0]
        times = sorted(time_once(run)[0] for _ in range(args.repeat))
    median = statistics.median(times)
    quartiles = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    print(f"recompiles --explain on {len(events):,} events with {RECOMPILES:,} recompiles "
          f"({'no sidecar, ' if args.no_sidecar else ''}{args.repeat} repetitions, Python {platform.python_version()}, {platform.machine()})")
    print(f"  median {median:.3f} s  (min {times[0]:.3f}, p25 {quartiles[0]:.3f}, p75 {quartiles[2]:.3f}, max {times[-1]:.3f})")
    print(f"  target < 0.500 s: {'met' if median < 0.5 else 'NOT met'}")
    sys.exit(0 if median < 0.5 else 1)


if __name__ == "__main__":
    main()
