"""How much CPU cagtool's report commands take as the user runs them: the whole process, start-up
included, measured as CPU time (user + system, from `getrusage(RUSAGE_CHILDREN)`) because wall
time on a shared machine measures the neighbours. Each command runs as a subprocess, once to warm
up (OS file cache, .pyc), then --repeat times; the median, min and max CPU times (and the median
wall time, for reference) are printed with the machine, its load and the commit. A verdict is
"met" only when the largest CPU time of the repetitions is under the target.

    python benchmarks/cli_speed.py                      # every command, 5 repetitions
    python benchmarks/cli_speed.py --only help,runs     # some of them
    python benchmarks/cli_speed.py --json results.json  # also write the figures
    python benchmarks/cli_speed.py --keep DIR           # keep the synthetic records in DIR
    python benchmarks/cli_speed.py --cagtool .venv/bin/cagtool   # time another install (here the editable one)

What is timed is what the README's quickstart installs for users, `pip install .`: by default the
checkout is built into a wheel and installed into a fresh virtualenv, where pip byte-compiles it
(its dependencies are this environment's, added by a .pth file, not installed again). The
development install (`pip install -e`) differs in two ways: setuptools' editable finder is
imported at every start, and where PYTHONDONTWRITEBYTECODE is set (or the checkout is read-only)
Python never caches the .pyc files, so every run compiles cagtool's modules from source again
(+0.02 s for `runs`, +0.05 s for `recompiles --explain`, in CPU, on the 2-core VM).

The records are synthetic, written with the schema's own event classes:
- `runs`: a runs directory of 10 runs (3 modes each, 2,000 steps per mode);
- `recompiles --explain`: 100,000 events with 1,000 recompiles (benchmarks/recompiles_explain.py),
  closed with the columns sidecar a mode process writes (`write_sidecar`, the writer's function);
- `diff-graphs`: a run with two 10,000-node CA graphs (benchmarks/graph_diff.py), side by side;
- `summary`: a 3-mode run of 20,000 steps per mode, with a few CA graphs and recompiles.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))  # the sibling benchmarks' record builders

from graph_diff import synthetic_graph  # noqa: E402
from recompiles_explain import build_events, from_first_step, write_run  # noqa: E402

from cagtool.record.columns import write_sidecar  # noqa: E402
from cagtool.record.graph_file import GRAPH_FORMAT  # noqa: E402
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict  # noqa: E402
from cagtool.record.schema import (  # noqa: E402
    SCHEMA_VERSION,
    AutogradNodeRef,
    BackwardEvent,
    CacheMissEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    Event,
    FinalStateEvent,
    OptimizerStepEvent,
    StepEvent,
    event_to_dict,
    json_default,
)

TARGETS = {"help": 0.15, "runs": 0.15, "recompiles": 0.35, "diff-graphs": 0.6, "summary": 0.5}
# The libraries every report command is built on (the CLI, its tables, the record's schema),
# imported and nothing else, by the same interpreter: the part of each figure cagtool's code does
# not decide. Timed beside the commands, so a verdict can be read against the machine's state.
FLOOR_CODE = "import typer, msgspec, rich.cells"  # what `runs` prints through: the libraries alone


@dataclass
class Timing:
    name: str
    argv: list[str]
    target_s: float | None  # None: a reference figure (the library floor), no target
    times: list[float]  # wall seconds, for reference only
    cpu: list[float]  # user + system seconds of the whole process: what the targets are set on

    @property
    def median(self) -> float:
        return statistics.median(self.cpu)

    @property
    def verdict(self) -> str:
        if self.target_s is None:
            return "reference"
        return "met" if max(self.cpu) <= self.target_s else ("median met, spread not" if self.median <= self.target_s else "NOT met")


def _write_mode(mode_dir: Path, mode: str, events: list[Event]) -> None:
    mode_dir.mkdir(parents=True, exist_ok=True)
    manifest = ModeManifest(mode=mode, argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/bench", versions={"torch": "2.13.0+cpu"},
                            backend="eager", dynamic=False, started_at="2026-01-01T00:00:00Z", status="finished", exit_code=0, duration_s=100.0,
                            torch_counters={"compiled_autograd": {"captures": sum(isinstance(e, CAGraphEvent) for e in events)}})
    (mode_dir / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    with (mode_dir / "events.jsonl").open("w") as handle:
        for event in events:
            handle.write(json.dumps(event_to_dict(event), default=json_default) + "\n")
    write_sidecar(mode_dir)  # as the writer does when a mode closes its record


def _write_meta(root: Path, modes: list[str]) -> None:
    meta = RunMeta(run_id=root.name, created_at="2026-01-01T00:00:00Z", cagtool_argv=["cagtool", "run", "train.py"], target={"kind": "script", "name": "train.py"},
                   target_argv=[], cwd="/bench", modes=modes, versions={}, machine={}, status="finished", exit_code=0)
    (root / "run.json").write_text(json.dumps(to_dict(meta)))


def training_events(steps: int, mode: str, recompiles: int = 3) -> list[Event]:
    """A mode's events as capture writes them (schema 3, steps from 0): per step a `backward`, an `optimizer_step` and a `step`,
    plus (ca) a CA graph and cache miss at the first steps and a compile per graph."""
    events: list[Event] = []

    def add(cls: type[Event], **fields) -> None:
        events.append(cls(seq=len(events), t=len(events) * 1e-3, **fields))

    for step in range(1, steps + 1):
        if mode == "ca" and step <= recompiles + 1:
            node = "torch::autograd::GraphRoot" if step == 1 else f"Op{step}Backward0"
            add(CacheMissEvent, ca_id=step - 1, compile_id=f"!{step - 1}", step=step, miss_kind="new_node",
                message=f"Cache miss due to new autograd node: {node} (NodeCall {0 if step == 1 else 2}) with key size 40, previous key sizes=[]",
                node=node, node_call=0 if step == 1 else 2, key_size=40, previous_key_sizes=[])
            add(CAGraphEvent, ca_id=step - 1, compile_id=f"!{step - 1}", step=step, node_count=120, op_histogram={"getitem": 60},
                autograd_nodes=[AutogradNodeRef(0, "torch::autograd::GraphRoot")], aot_ids=[], hooks=[], num_sizes=0, capture_s=0.05,
                code_file=f"graphs/ca_{step - 1}.py", nodes_file=f"graphs/ca_{step - 1}.json")
            add(DynamoCompileEvent, compile_id=f"!{step - 1}/{step}/0", is_ca_graph=True, step=step, co_name="forward",
                co_filename="<eval_with_key>", entire_frame_compile_time_s=0.3)
        captures = int(mode == "ca" and step <= recompiles + 1)
        backward_s = 0.002 + (step % 7) * 1e-5
        add(BackwardEvent, step=step, index=0, backward_s=backward_s, ca_captures=captures, loss=1.0 / step)
        add(OptimizerStepEvent, step=step, wall_s=0.0005, optimizer="AdamW")
        add(StepEvent, step=step, backward_s=backward_s, loss=1.0 / step, ca_captures=captures, compiles=0, compile_s=0.0,
            wall_s=None if step == 1 else 0.004, backward_calls=1, boundary="optimizer", optimizer_s=0.0005)
    add(FinalStateEvent, param_norm=10.0, grad_norm=1.0, num_params=4)
    return from_first_step(events)


def write_training_run(root: Path, steps: int, modes: tuple[str, ...] = ("eager", "aot", "ca")) -> Path:
    for mode in modes:
        _write_mode(root / mode, mode, training_events(steps, mode))
    _write_meta(root, list(modes))
    return root


def write_graph_run(root: Path, nodes: int) -> Path:
    """A ca-mode record with two CA graphs of about `nodes` nodes, the second recompiled from the first."""
    events: list[Event] = []
    graphs = root / "ca" / "graphs"
    graphs.mkdir(parents=True, exist_ok=True)
    for ca_id, variant in ((0, False), (1, True)):
        graph = synthetic_graph(nodes, seed=1, variant=variant)
        payload = {"format": GRAPH_FORMAT, "schema_version": SCHEMA_VERSION, "ca_id": ca_id, "compile_id": f"!{ca_id}", "nodes": [to_dict(n) for n in graph]}
        (graphs / f"ca_{ca_id}.json").write_text(json.dumps(payload, default=str) + "\n")
        (graphs / f"ca_{ca_id}.py").write_text(f"class CompiledAutograd{ca_id}(torch.nn.Module): ...\n")
        node = "torch::autograd::GraphRoot" if ca_id == 0 else "MulBackward0"
        events.append(CacheMissEvent(seq=len(events), t=float(ca_id), ca_id=ca_id, compile_id=f"!{ca_id}", step=ca_id, miss_kind="new_node",
                                     message=f"Cache miss due to new autograd node: {node} (NodeCall {2 * ca_id}) with key size 40, previous key sizes=[]",
                                     node=node, node_call=2 * ca_id, key_size=40, previous_key_sizes=[]))
        events.append(CAGraphEvent(seq=len(events), t=float(ca_id), ca_id=ca_id, compile_id=f"!{ca_id}", step=ca_id, node_count=len(graph), op_histogram={},
                                   autograd_nodes=[], aot_ids=[], hooks=[], num_sizes=0, capture_s=0.5,
                                   code_file=f"graphs/ca_{ca_id}.py", nodes_file=f"graphs/ca_{ca_id}.json"))
    _write_mode(root / "ca", "ca", events)
    _write_meta(root, ["ca"])
    return root


def build_fixtures(base: Path) -> dict[str, list[str]]:
    """The records, and the argv (after `cagtool`) of each timed command."""
    runs_root = base / "runs"
    for index in range(10):
        write_training_run(runs_root / f"train-20260101-12000{index}", 2_000)
    explain_run = write_run(base / "explain", build_events())
    graph_run = write_graph_run(base / "graphs", 10_000)
    summary_run = write_training_run(base / "summary", 20_000)
    return {
        "help": ["--help"],
        "runs": ["runs", str(runs_root)],
        "recompiles": ["recompiles", str(explain_run), "--explain"],
        "diff-graphs": ["diff-graphs", str(graph_run), "0", "1"],
        "summary": ["summary", str(summary_run)],
    }


def readme_install(base: Path) -> Path:
    """The README's `pip install .` of this checkout into a fresh virtualenv under `base`; returns
    its `cagtool` console script. The wheel is built from a copy of the package sources (an in-tree
    build/ could hold a module deleted since); pip byte-compiles what it installs. The venv reads
    this environment's site-packages through a .pth file for torch, typer, rich..."""
    src = base / "src"
    shutil.copytree(REPO / "cagtool", src / "cagtool", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    quiet = {"stdout": subprocess.DEVNULL, "check": True}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(base / "wheel"), str(src)], **quiet)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], **quiet)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "cagtool_bench_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next((base / "wheel").glob("cagtool-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], **quiet)
    return venv / "bin" / "cagtool"


def time_command(argv: list[str], repeat: int) -> tuple[list[float], list[float]]:
    # Without PYTHONPATH: a checkout on it (as the development notes set it) would be imported in
    # place of the installed copy being timed.
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "CI": "true", "COLUMNS": "100"}
    ok_codes = (0, 1)  # diff-graphs exits 1 when the graphs differ, as diff does

    def once() -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=str(REPO))
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode not in ok_codes:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
        return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    once()  # warm-up
    runs = [once() for _ in range(repeat)]
    return [wall for wall, _ in runs], [cpu for _, cpu in runs]


def _portable(arg: str, base: Path) -> str:
    """An argument as the results file keeps it: the temporary records' directory as $TMP."""
    return arg.replace(str(base), "$TMP")


def machine() -> dict[str, object]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=str(REPO)).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "commit": commit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default=",".join(TARGETS), help="comma-separated: " + ", ".join(TARGETS))
    parser.add_argument("--keep", type=Path, help="write the synthetic records here and keep them")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--cagtool", type=Path, help="time this console script instead of a fresh `pip install .` of the checkout")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    base = args.keep or Path(tempfile.mkdtemp(prefix="cagtool-cli-speed-"))
    try:
        commands = build_fixtures(base)
        cagtool = [str(args.cagtool.resolve() if args.cagtool else readme_install(base / "install"))]
        info = machine()
        info["cagtool"] = str(args.cagtool) if args.cagtool else "pip install . (fresh virtualenv)"
        load_before = os.getloadavg()
        results = [Timing(name, cagtool + commands[name], TARGETS[name], *time_command(cagtool + commands[name], args.repeat)) for name in names]
        floor = [str(Path(cagtool[0]).parent / "python"), "-c", FLOOR_CODE]
        results.append(Timing("floor", floor, None, *time_command(floor, args.repeat)))
        load_after = os.getloadavg()
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"{info['cpu']}, {info['cores']} cores, Python {info['python']}, commit {info['commit']}, cagtool from {info['cagtool']}; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; {args.repeat} repetitions after a warm-up")
    print(f"{'command':<12} {'cpu med':>8} {'cpu min':>8} {'cpu max':>8} {'wall med':>8} {'target':>8}  verdict (CPU)")
    for r in results:
        target = "-" if r.target_s is None else f"{r.target_s:.2f}"
        print(f"{r.name:<12} {r.median:8.3f} {min(r.cpu):8.3f} {max(r.cpu):8.3f} {statistics.median(r.times):8.3f} {target:>8}  {r.verdict}")
    print(f"floor: `python -c \"{FLOOR_CODE}\"`, the libraries alone")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "load_before": load_before, "load_after": load_after,
                                         "results": [{"name": r.name, "argv": [_portable(a, base) for a in (r.argv[len(cagtool):] if r.target_s is not None else r.argv[1:])], "target_s": r.target_s, "cpu_s": r.cpu, "wall_s": r.times,
                                                      "cpu_median_s": r.median, "verdict": r.verdict} for r in results]}, indent=2))


if __name__ == "__main__":
    main()
