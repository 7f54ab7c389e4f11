"""Benchmark: `diff-graphs` on two synthetic 10,000-node compiled-autograd graphs.

The graphs look like real CA graphs (an input prologue, then per autograd node a
validate_outputs, its getitems, the node's op and the getitems of its outputs, AOT-inlined
aten ops in some groups), and the second differs from the first the way recompiles do:
a few autograd nodes inserted and removed, a hook added, sizes that became symbolic, and
every FX counter renamed. What is timed is `diff_graphs` from raw GraphNode lists:
normalising both graphs, aligning them and summarising (rendering is not included).

    python benchmarks/graph_diff.py            # 10,000 nodes, 7 repetitions
    python benchmarks/graph_diff.py --nodes 50000 --repeat 3 --json

With --before/--after it times the whole command instead: `cagtool diff-graphs RUN 0 1`
(side by side, CI=true, COLUMNS=100, stdout to a pipe, as benchmarks/cli_speed.py runs it) with two
installs, alternately, and prints each one's CPU time (user + system, from getrusage), which a
busy machine inflates far less than wall time, and the median of the per-repetition differences:

    python benchmarks/cli_speed.py --only diff-graphs --keep bench     # bench/graphs, bench/install (this checkout)
    python benchmarks/graph_diff.py --record bench/graphs --before OLD/venv/bin/cagtool --after bench/install/venv/bin/cagtool
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import time
from pathlib import Path

from cagtool.record.graph_file import GraphNode
from cagtool.record.schema import AutogradNodeRef
from cagtool.report.graphs.diff import diff_graphs

OPS = ["MulBackward0", "AddBackward0", "MmBackward0", "ReluBackward0", "SumBackward0", "ViewBackward0", "TBackward0"]
ATEN = ["aten.mul.Tensor", "aten.mm.default", "aten.add.Tensor", "aten.threshold_backward.default", "aten.sum.dim_IntList"]


class _Builder:
    """Appends CA-like nodes with FX-style names (`getitem_<k>` counters shared by the graph)."""

    def __init__(self, counter_offset: int) -> None:
        self.nodes: list[GraphNode] = []
        self.counts: dict[str, int] = {}
        self.offset = counter_offset  # shifts every counter, as an earlier change would

    def name(self, base: str) -> str:
        k = self.counts.get(base, 0) + self.offset
        self.counts[base] = self.counts.get(base, 0) + 1
        return base if k == 0 else f"{base}_{k}"

    def add(self, base: str, target: str, args: str, origin: AutogradNodeRef | None, **extra) -> str:
        name = self.name(base)
        self.nodes.append(GraphNode(name=name, op="call_function", target=target, args=args, origin=origin, **extra))
        return name


def synthetic_graph(n_nodes: int, seed: int, variant: bool) -> list[GraphNode]:
    """A graph of about n_nodes nodes. `variant` applies the recompile-like changes."""
    rng = random.Random(seed)
    b = _Builder(counter_offset=3 if variant else 0)
    for p in ("inputs", "sizes", "scalars", "hooks", "packed_data"):
        b.nodes.append(GraphNode(name=p, op="placeholder", target=p))
    n_inputs = max(8, n_nodes // 50)
    inputs = [b.add("getitem", "_operator.getitem", f"%inputs, {i}", None, shape=[64, 64], dtype="float32", stride=[64, 1]) for i in range(n_inputs)]
    n_sizes = 8 if variant else 0
    sizes = [b.add("unwrap_maybe_dynamic_int", "torch._dynamo.external_utils.unwrap_maybe_dynamic_int", "%" + b.add("getitem", "_operator.getitem", f"%sizes, {i}", None), None) for i in range(n_sizes)]
    grad = inputs[0]
    call = 0
    group = 0
    while len(b.nodes) < n_nodes - 2:
        group += 1
        op = OPS[rng.randrange(len(OPS))]
        if variant and group % 97 == 0:
            op = "DivBackward0"  # a changed autograd node
        if variant and group % 151 == 0:
            continue  # a removed autograd node
        call += 1
        origin = AutogradNodeRef(call, op)
        checked = b.add("validate_outputs", "torch._dynamo.compiled_autograd.ops.validate_outputs", f"[%{grad}], [((None, None, device(type='cpu'), 6, 0, None), [64, 64], False, 6)]", origin)
        item = b.add("getitem", "_operator.getitem", f"%{checked}, 0", origin)
        dims = f"%{sizes[group % n_sizes]}, 64" if variant and group % 41 == 0 else "64, 64"
        if group % 5 == 0:  # an inlined AOT backward
            aot = f"aot{group // 5 + (7 if variant else 0)}_"
            prev = item
            for k in range(4):
                name = f"{aot}{ATEN[(group + k) % len(ATEN)].split('.')[1]}_{k}"
                b.nodes.append(GraphNode(name=name, op="call_function", target=ATEN[(group + k) % len(ATEN)], args=f"%{prev}, %{inputs[(group + k) % n_inputs]}", aot_id=group // 5, shape=[64, 64], dtype="float32"))
                prev = name
            grad = prev
        else:
            result = b.add(op.lower(), f"torch._dynamo.compiled_autograd.ops.{op}", f"[%{item}], [True, True], [{dims}]", origin)
            grad = b.add("getitem", "_operator.getitem", f"%{result}, 0", origin)
        if variant and group % 173 == 0:  # a hook added
            hook = b.add("getitem", "_operator.getitem", f"%hooks, {group}", origin)
            grad = b.add("call_hook", "torch._dynamo.external_utils.call_hook", f"%{hook}, %{grad}, hook_type='tensor_pre_hook'", origin, hook_type="tensor_pre_hook")
        if group % 3 == 0:
            acc = AutogradNodeRef(call + 1, "torch::autograd::AccumulateGrad")
            call += 1
            b.add("call_accumulate_grad", "torch._dynamo.external_utils.call_accumulate_grad", f"%{inputs[group % n_inputs]}, None, %{grad}, False", acc)
    b.nodes.append(GraphNode(name="output", op="output", target="output", args="[]"))
    return b.nodes


def command_cpu(record: Path, installs: dict[str, str], repeat: int) -> None:
    """CPU of `cagtool diff-graphs RECORD 0 1` per install, interleaved (the order alternates)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # both use their .pyc files
    env.update(CI="true", COLUMNS="100")
    cpu: dict[str, list[float]] = {name: [] for name in installs}
    for rep in range(repeat + 1):  # the first is a warm-up
        order = list(installs.items()) if rep % 2 else list(reversed(installs.items()))
        for name, script in order:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run([script, "diff-graphs", str(record), "0", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode not in (0, 1):
                raise SystemExit(f"{script} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
            if rep:
                cpu[name].append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    print(f"`diff-graphs {record} 0 1`, {repeat} interleaved repetitions after a warm-up; load average {os.getloadavg()[0]:.2f} at the end; CPU = user + system")
    for name, values in cpu.items():
        print(f"  {name:<7} median {statistics.median(values):.3f} s  (min {min(values):.3f}, max {max(values):.3f})  {installs[name]}")
    if len(cpu) == 2:
        (a, xs), (b, ys) = cpu.items()
        print(f"  median of per-repetition differences ({b} - {a}): {statistics.median(y - x for x, y in zip(xs, ys)):+.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    parser.add_argument("--record", type=Path, help="with --before/--after: a run with graphs 0 and 1 (cli_speed.py --keep DIR writes DIR/graphs)")
    parser.add_argument("--before", help="the cagtool console script of the install before a change")
    parser.add_argument("--after", help="the cagtool console script of the install after it")
    args = parser.parse_args()
    if args.before or args.after:
        if not (args.record and args.before and args.after):
            parser.error("--before and --after need each other and --record")
        command_cpu(args.record, {"before": args.before, "after": args.after}, args.repeat)
        return
    old = synthetic_graph(args.nodes, seed=0, variant=False)
    new = synthetic_graph(args.nodes, seed=0, variant=True)
    diff_graphs(old, new)  # warm-up (imports, regex compilation)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        diff = diff_graphs(old, new)
        times.append(time.perf_counter() - start)
    s = diff.summary
    result = {
        "benchmark": "graph_diff",
        "old_nodes": len(old),
        "new_nodes": len(new),
        "repeat": args.repeat,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "stdev_s": statistics.stdev(times) if len(times) > 1 else 0.0,
        "diff": {"inserted": s.inserted, "removed": s.removed, "changed": s.changed, "equal": s.equal, "became_symbolic": len(s.became_symbolic)},
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"diff_graphs: {len(old):,} vs {len(new):,} nodes, {args.repeat} repetitions")
    print(f"  median {result['median_s'] * 1000:.0f} ms  (min {result['min_s'] * 1000:.0f}, max {result['max_s'] * 1000:.0f}, stdev {result['stdev_s'] * 1000:.0f})")
    print(f"  found: {s.inserted} inserted, {s.removed} removed, {s.changed} changed, {s.equal} equal, {len(s.became_symbolic)} sizes became symbolic")
    if args.nodes == 10_000:
        print(f"  target (10,000 nodes in under 1 s): {'met' if result['median_s'] < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
