"""cagtool's report commands on a record the size of a real job: 100,000 steps x 3 modes (eager,
aot, ca) x 8 ranks. Each command runs as a user runs it (`python -m cagtool ...`, a subprocess);
what is measured is that child's CPU time (user + system, from os.wait4: the machine may be
shared, and CPU time is what other work inflates least) and its peak RSS, plus the size of the
files `report` and `export --perfetto` write, against the targets:

    summary, compare, gate, baseline save, recompiles --explain:  <= 2 s CPU, <= 300 MB peak
    report:            <= 5 s CPU, <= 5 MB of HTML
    export --perfetto: <= 5 s CPU

    python benchmarks/job_scale.py                              # build the record in a temp dir, time all
    python benchmarks/job_scale.py --keep .job-scale            # build it there once, reuse it next time
    python benchmarks/job_scale.py --steps 2000 --ranks 2       # a smaller job
    python benchmarks/job_scale.py --only report,export --json results.json

The record is written in the layout `cagtool run` leaves for a DDP job (a launcher process with no
rank in <mode>/, one record per rank in <mode>/procs/rank<N>/, each manifest's `process` giving its
rank, world size and role), its lines written by the capture side's own line encoders from the
schema's event classes, and each rank's record closed as the writer closes it (with the columns
sidecar, record.columns.write_sidecar). Steps take about 4 ms (eager), 3.4 ms (aot) and 3 ms (ca)
with a seeded jitter per rank and a slow step now and then; markers: aot compiles at step 0 and
recompiles at the middle step, ca captures CA graphs at steps 0 and 1 and recompiles
(a changed shape) at 40 % and 80 % of the run, each with its cache miss and Dynamo compile.
Generating the record takes about a minute of CPU for the full size; with --keep it is built once
(a record of another size is rebuilt).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # this checkout's cagtool, whatever is installed

from cagtool.record.writer import _encoder_of  # noqa: E402 - the writer's own line encoders
from cagtool.record.columns import write_sidecar  # noqa: E402
from cagtool.record.graph_file import GRAPH_FORMAT, GraphNode, graph_node_to_dict  # noqa: E402
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict  # noqa: E402
from cagtool.record.schema import (  # noqa: E402
    SCHEMA_VERSION,
    AutogradNodeRef,
    BackwardEvent,
    CACompileEvent,
    CacheMissEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    FinalStateEvent,
    OptimizerStepEvent,
    StepEvent,
    event_to_dict,
    json_default,
)

MODES = ("eager", "aot", "ca")
STEP_S = {"eager": 0.004, "aot": 0.0034, "ca": 0.003}
CPU_TARGET_S = {"summary": 2.0, "compare": 2.0, "baseline": 2.0, "gate": 2.0, "recompiles": 2.0, "report": 5.0, "export": 5.0}
RSS_TARGET_MB = {"summary": 300, "compare": 300, "gate": 300, "baseline": 300, "recompiles": 300}
SIZE_TARGET_MB = {"report": 5.0}
STARTED = "2026-01-01T00:00:00+00:00"


def _manifest(mode: str, rank: int | None, world_size: int, steps: int) -> ModeManifest:
    key = "main" if rank is None else f"rank{rank}"
    return ModeManifest(
        mode=mode, argv=["train_ddp.py"], target={"kind": "script", "name": "train_ddp.py"}, cwd="/bench",
        versions={"torch": "2.13.0+cpu", "python": platform.python_version()}, backend="eager", dynamic=False, started_at=STARTED,
        status="finished", ended_at=STARTED, duration_s=steps * STEP_S[mode] + 5.0, exit_code=0, peak_rss_bytes=600 * 2**20,
        options={"followed": rank is not None, "steps": steps},
        # each mode its own processes: the loader refuses two records of one process (a copy)
        process={"key": key, "pid": 1000 + 100 * ("eager", "aot", "ca").index(mode) + (rank if rank is not None else -1),
                 "ppid": 999 + 100 * ("eager", "aot", "ca").index(mode), "rank": rank,
                 "local_rank": rank, "world_size": None if rank is None else world_size,
                 "role": "main" if rank is None else "child", "argv": ["train_ddp.py"]},
    )


def _graph_file(path: Path, ca_id: int, ops: list[str]) -> None:
    nodes = [GraphNode(name="inputs", op="placeholder", target="inputs")]
    for i, origin in enumerate(ops):
        nodes.append(GraphNode(name=f"mul_{i}", op="call_function", target="torch.ops.aten.mul.Tensor", args="(%inputs, 2)",
                               origin=AutogradNodeRef(i + 1, origin)))
    nodes.append(GraphNode(name="output", op="output", target="output", args="[]"))
    payload = {"format": GRAPH_FORMAT, "schema_version": SCHEMA_VERSION, "ca_id": ca_id, "compile_id": f"!{ca_id}",
               "nodes": [graph_node_to_dict(n) for n in nodes]}
    path.with_suffix(".json").write_text(json.dumps(payload, default=str) + "\n")
    path.with_suffix(".py").write_text(f"def forward(inputs):  # CA graph {ca_id}\n    ...\n")


def marker_steps(mode: str, steps: int) -> dict[int, str]:
    """The steps that carry a marker, by what happens there."""
    if mode == "aot":
        return {0: "compile", steps // 2: "recompile"}
    if mode == "ca":
        return {0: "capture", 1: "capture", (steps * 2) // 5: "recompile", (steps * 4) // 5: "recompile"}
    return {}


def write_rank(mode_dir: Path, mode: str, rank: int, world_size: int, steps: int) -> None:
    """One rank's record of one mode, as the writer leaves it when the rank's process ends."""
    mode_dir.mkdir(parents=True, exist_ok=True)
    (mode_dir / "graphs").mkdir(exist_ok=True)
    rng = random.Random(f"{mode}-{rank}")
    markers = marker_steps(mode, steps)
    base = STEP_S[mode] * (1 + 0.01 * rank)
    encode = {cls: _encoder_of(cls) for cls in (BackwardEvent, OptimizerStepEvent, StepEvent)}
    backward_line, optimizer_line, step_line = encode[BackwardEvent], encode[OptimizerStepEvent], encode[StepEvent]
    lines: list[str] = []
    seq = 0
    t = 5.0
    ca_id = 0

    def other(event) -> None:  # a rarer event: the dataclass itself, written as the writer's generic encoder does
        lines.append(json.dumps(event_to_dict(event), default=json_default) + "\n")

    for step in range(steps):
        marker = markers.get(step)
        compile_s = 0.0
        captures = compiles = 0
        if marker in ("capture", "recompile") and mode == "ca":
            node = "torch::autograd::GraphRoot" if ca_id == 0 else "MulBackward0"
            miss = "new_node" if marker == "capture" else "changed_shapes"
            message = (f"Cache miss due to new autograd node: {node} (NodeCall {ca_id}) with key size 40, previous key sizes=[]"
                       if miss == "new_node" else "Cache miss due to changed shapes: marking size idx 0 of torch::autograd::GraphRoot (NodeCall 0) as dynamic")
            other(CacheMissEvent(seq=seq, t=t, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, miss_kind=miss, message=message,
                                 node=node, node_call=ca_id, key_size=40))
            seq += 1
            ops = ["MulBackward0"] * (3 + ca_id)
            _graph_file(mode_dir / "graphs" / f"ca_{ca_id}", ca_id, ops)
            other(CAGraphEvent(seq=seq, t=t + 0.05, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, node_count=len(ops) + 2,
                               op_histogram={"aten.mul.Tensor": len(ops)}, autograd_nodes=[AutogradNodeRef(i + 1, o) for i, o in enumerate(ops)],
                               aot_ids=[], hooks=[], num_sizes=0, capture_s=0.05, code_file=f"graphs/ca_{ca_id}.py",
                               nodes_file=f"graphs/ca_{ca_id}.json", compiler="cagtool:eager"))
            seq += 1
            other(DynamoCompileEvent(seq=seq, t=t + 0.35, compile_id=f"!{ca_id}/0/0", is_ca_graph=True, step=step, co_name="forward",
                                     co_filename="<eval_with_key>", entire_frame_compile_time_s=0.3))
            seq += 1
            other(CACompileEvent(seq=seq, t=t + 0.4, ca_id=ca_id, first_call_s=0.05, step=step))
            seq += 1
            ca_id += 1
            captures, compiles, compile_s = 1, 1, 0.4
        elif marker in ("compile", "recompile"):
            attempt = 0 if marker == "compile" else 1
            other(DynamoCompileEvent(seq=seq, t=t + 0.3, compile_id=f"0/{attempt}", is_ca_graph=False, step=step, co_name="forward",
                                     co_filename="/bench/train_ddp.py", co_firstlineno=40, entire_frame_compile_time_s=0.3,
                                     fail_reason=None if attempt == 0 else "tensor 'x' size mismatch at index 0. expected 32, actual 16"))
            seq += 1
            compiles, compile_s = 1, 0.3
        jitter = rng.gauss(1.0, 0.03)
        if rng.random() < 0.002:
            jitter *= 3  # a slow step now and then (a GC pause, a noisy neighbour)
        step_s = base * jitter + compile_s
        backward_s = step_s * 0.55
        optimizer_s = step_s * 0.1
        t += step_s
        loss = 2.0 / (1 + step * 1e-3)
        lines.append(backward_line(seq, round(t - optimizer_s, 9), step=step, index=0, backward_s=round(backward_s, 9), ca_captures=captures, loss=loss))
        lines.append(optimizer_line(seq + 1, round(t, 9), step=step, wall_s=round(optimizer_s, 9), optimizer="SGD"))
        lines.append(step_line(seq + 2, round(t, 9), step=step, backward_s=round(backward_s, 9), loss=loss, ca_captures=captures, compiles=compiles,
                               compile_s=round(compile_s, 9), wall_s=None if step == 0 else round(step_s, 9), backward_calls=1,
                               boundary="optimizer", optimizer_s=round(optimizer_s, 9)))
        seq += 3
    other(FinalStateEvent(seq=seq, t=t, param_norm=10.0 + rank * 1e-9, grad_norm=1.0, num_params=1000))
    with (mode_dir / "events.jsonl").open("w") as handle:
        handle.writelines(lines)
    manifest = _manifest(mode, rank, world_size, steps)
    if mode == "ca":
        manifest.torch_counters = {"compiled_autograd": {"captures": ca_id}}
    (mode_dir / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    if not write_sidecar(mode_dir):
        print(f"note: no columns sidecar for {mode_dir} (the writer would leave none either)", file=sys.stderr)


def write_launcher(mode_dir: Path, mode: str, world_size: int) -> None:
    """The launching process (mp.spawn's parent): no rank, no steps, its final state unknown."""
    mode_dir.mkdir(parents=True, exist_ok=True)
    (mode_dir / "events.jsonl").write_text(json.dumps(event_to_dict(FinalStateEvent(seq=0, t=1.0, param_norm=None, grad_norm=None, num_params=0))) + "\n")
    (mode_dir / "manifest.json").write_text(json.dumps(to_dict(_manifest(mode, None, world_size, 0))))


def write_job(root: Path, steps: int, ranks: int) -> Path:
    stamp = root / "job_scale.json"
    wanted = {"steps": steps, "ranks": ranks, "modes": list(MODES), "schema_version": SCHEMA_VERSION}
    if stamp.exists() and json.loads(stamp.read_text()) == wanted:
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for mode in MODES:
        write_launcher(root / mode, mode, ranks)
        for rank in range(ranks):
            write_rank(root / mode / "procs" / f"rank{rank}", mode, rank, ranks, steps)
            print(f"  wrote {mode} rank {rank}", file=sys.stderr)
    meta = RunMeta(run_id=root.name, created_at=STARTED, cagtool_argv=["cagtool", "run", "train_ddp.py"], target={"kind": "script", "name": "train_ddp.py"},
                   target_argv=[], cwd="/bench", modes=list(MODES), versions={"torch": "2.13.0+cpu"}, machine={}, status="finished", exit_code=0,
                   ended_at=STARTED, mode_exit_codes={m: 0 for m in MODES})
    (root / "run.json").write_text(json.dumps(to_dict(meta)))
    stamp.write_text(json.dumps(wanted))
    return root


@dataclass
class Result:
    name: str
    argv: list[str]
    cpu_s: float
    peak_mb: float
    output_mb: float | None

    @property
    def verdict(self) -> str:
        misses = []
        if self.cpu_s > CPU_TARGET_S[self.name]:
            misses.append(f"cpu > {CPU_TARGET_S[self.name]:g} s")
        if self.name in RSS_TARGET_MB and self.peak_mb > RSS_TARGET_MB[self.name]:
            misses.append(f"peak > {RSS_TARGET_MB[self.name]} MB")
        if self.name in SIZE_TARGET_MB and (self.output_mb or 0) > SIZE_TARGET_MB[self.name]:
            misses.append(f"size > {SIZE_TARGET_MB[self.name]:g} MB")
        return "met" if not misses else "NOT met: " + ", ".join(misses)


def run_child(argv: list[str]) -> tuple[float, float, int, str]:
    """(CPU seconds, peak RSS in MB, exit code, stderr tail) of one command, from os.wait4."""
    env = {**os.environ, "CI": "true", "COLUMNS": "100", "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=str(REPO))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-2000:]
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode, tail


def commands(run: Path, out: Path) -> dict[str, tuple[list[str], Path | None]]:
    base = out / "baseline.json"
    return {
        "summary": (["summary", str(run)], None),
        "compare": (["compare", str(run)], None),
        "baseline": (["baseline", "save", str(run), "-o", str(base)], None),
        "gate": (["gate", str(run), "--baseline", str(base), "--max-regression", "10%", "--max-compile-regression", "25%",
                  "--max-ca-graphs", "8", "--max-recompiles", "ca:4", "--min-speedup", "1.0"], None),
        "recompiles": (["recompiles", str(run), "--explain"], None),
        "report": (["report", str(run), "-o", str(out / "report.html")], out / "report.html"),
        "export": (["export", str(run), "--perfetto", str(out / "trace.json")], out / "trace.json"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="build the record here (or reuse the one already there) and keep it")
    parser.add_argument("--only", default=",".join(CPU_TARGET_S), help="comma-separated: " + ", ".join(CPU_TARGET_S))
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(CPU_TARGET_S)
    if unknown:
        parser.error(f"unknown command(s): {', '.join(sorted(unknown))}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="cagtool-job-scale-"))
    out = Path(tempfile.mkdtemp(prefix="cagtool-job-scale-out-"))
    try:
        run = write_job(base / "run", args.steps, args.ranks)
        table = commands(run, out)
        if "gate" in names:  # the gate reads the baseline `baseline save` writes
            names = [n for n in names if n != "baseline"]
            names.insert(names.index("gate"), "baseline")
        results: list[Result] = []
        for name in names:
            argv = [sys.executable, "-m", "cagtool", *table[name][0]]
            cpu, peak, code, tail = run_child(argv)
            if code not in (0, 1, 5):  # gate exits 1 (a check failed) or 5 (inconclusive): not the benchmark's business
                raise SystemExit(f"{' '.join(argv)} failed ({code}): {tail}")
            written = table[name][1]
            results.append(Result(name, table[name][0], cpu, peak, written.stat().st_size / 2**20 if written and written.exists() else None))
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=str(REPO)).stdout.strip()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{args.steps:,} steps x {len(MODES)} modes x {args.ranks} ranks; commit {commit}; {when}; Python {platform.python_version()}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print(f"{'command':<11} {'cpu s':>7} {'peak MB':>8} {'file MB':>8}  verdict")
    for r in results:
        size = f"{r.output_mb:8.2f}" if r.output_mb is not None else f"{'':8}"
        print(f"{r.name:<11} {r.cpu_s:7.2f} {r.peak_mb:8.0f} {size}  {r.verdict}")
    if args.json:
        args.json.write_text(json.dumps({"steps": args.steps, "ranks": args.ranks, "modes": list(MODES), "commit": commit, "date": when,
                                         "load_average_1min": os.getloadavg()[0], "cores": os.cpu_count(),
                                         "results": [{"name": r.name, "argv": r.argv, "cpu_s": r.cpu_s, "peak_mb": r.peak_mb, "output_mb": r.output_mb,
                                                      "target_cpu_s": CPU_TARGET_S[r.name], "verdict": r.verdict} for r in results]}, indent=2))


if __name__ == "__main__":
    main()
