"""Benchmark: a 3-mode `cagtool run` against three bare `python` runs of the same script and modes.

    ratio = wall(cagtool run --modes eager,aot,ca SCRIPT)
            / (wall(eager bare) + wall(aot bare) + wall(ca bare))          target: <= 1.05

The bare runs are what a user would do by hand to get the same three answers:
  eager  TORCHDYNAMO_DISABLE=1 python SCRIPT ARGS
  aot    python SCRIPT ARGS                                 (the script's torch.compile as written)
  ca     python benchmarks/ca_by_hand.py BACKEND SCRIPT ARGS
         (the script inside compiled_autograd._enable(torch.compile(backend=BACKEND)), no cagtool)
Every process, bare or under cagtool, gets a fresh Inductor cache dir, as `cagtool run` does
without --warm-cache. Repetitions are interleaved (bare first on odd repetitions, cagtool first on
even ones) so drift in machine load falls on both sides. Besides wall time, the CPU time of the
process trees (user + sys, from getrusage(RUSAGE_CHILDREN)) is reported: on a shared machine it is
the steadier figure, and so is the ratio of minimums (the least disturbed cagtool run over the sum
of each mode's least disturbed bare run). The per-mode lines compare each bare run with the mode's `duration_s` in its
manifest (the child process from start to record closed), to show where any overhead sits.

    python benchmarks/three_mode_overhead.py                      # transformer sample, 5 reps
    python benchmarks/three_mode_overhead.py --reps 3 --json
    python benchmarks/three_mode_overhead.py -- sample_scripts/graph_breaks.py 50
    python benchmarks/three_mode_overhead.py --cagtool-arg=--no-torch-trace
    python benchmarks/three_mode_overhead.py --threads 1      # steadier on a shared machine
    python benchmarks/three_mode_overhead.py --reps 3 --also-tree OLD   # before (OLD checkout) / after, same load
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CA_BY_HAND = HERE / "ca_by_hand.py"
DEFAULT_TARGET = [str(ROOT / "sample_scripts" / "transformer_lm.py"), "--steps", "24", "--backend", "eager"]
MODES = ("eager", "aot", "ca")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one command, which must succeed."""
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=str(cwd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall, cpu = time.perf_counter() - wall0, _children_cpu() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return wall, cpu


def bare_commands(target: list[str], backend: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    python = sys.executable
    return {
        "eager": ([python, *target], {"TORCHDYNAMO_DISABLE": "1"}),
        "aot": ([python, *target], {}),
        "ca": ([python, str(CA_BY_HAND), backend, *target], {}),
    }


def run_bare(target: list[str], backend: str, base_env: dict[str, str], scratch: Path) -> dict[str, tuple[float, float]]:
    out = {}
    for mode, (cmd, extra) in bare_commands(target, backend).items():
        cache = tempfile.mkdtemp(prefix=f"bare-{mode}-", dir=scratch)
        out[mode] = _timed(cmd, {**base_env, **extra, "TORCHINDUCTOR_CACHE_DIR": cache})
    return out


def run_cagtool(target: list[str], backend: str, cagtool_args: list[str], base_env: dict[str, str], scratch: Path, tree: Path = ROOT) -> tuple[float, float, dict[str, float]]:
    """`tree`: the checkout whose cagtool runs (`-m cagtool` from its directory, the mode
    processes too); the default is this one."""
    run_dir = Path(tempfile.mkdtemp(prefix="cagtool-", dir=scratch)) / "run"
    cmd = [sys.executable, "-m", "cagtool", "run", "--modes", ",".join(MODES), "--backend", backend, *cagtool_args, "-o", str(run_dir), *target]
    wall, cpu = _timed(cmd, base_env, cwd=tree)
    durations = {}
    for mode in MODES:
        manifest = json.loads((run_dir / mode / "manifest.json").read_text())
        if manifest.get("status") != "finished":
            raise SystemExit(f"mode {mode} did not finish under cagtool: {manifest.get('status')} {manifest.get('exception')}")
        durations[mode] = float(manifest.get("duration_s") or 0.0)
    return wall, cpu, durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--backend", default="eager", help="backend compiling CA graphs (cagtool --backend, ca_by_hand.py)")
    parser.add_argument("--cagtool-arg", action="append", default=[], help="extra argument for `cagtool run` (repeatable)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS for every process, both sides (1 keeps a shared machine's noise down)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument("--also-tree", type=Path, default=None,
                        help="another checkout (e.g. `git archive COMMIT | tar -x -C DIR`): its cagtool also runs each repetition, "
                             "right before or after this one's (alternating), for a before/after on the same machine load")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT [ARGS] after --; default: transformer_lm.py --steps 24 --backend eager")
    args = parser.parse_args()
    target = [a for a in args.target if a != "--"] or DEFAULT_TARGET
    # CI=true keeps cagtool's progress display quiet, as in a log.
    base_env = {**os.environ, "CI": "true"}
    base_env.pop("TORCHDYNAMO_DISABLE", None)
    if args.threads is not None:
        base_env["OMP_NUM_THREADS"] = str(args.threads)

    reps: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="three-mode-bench-") as tmp:
        scratch = Path(tmp)
        for rep in range(1, args.reps + 1):
            # Bare first on odd repetitions, cagtool first on even ones (--also-tree's run last, then first).
            sides = ["bare", "tool"] + (["other"] if args.also_tree is not None else [])
            if rep % 2 == 0:
                sides.reverse()
            results: dict[str, object] = {}
            for side in sides:
                if side == "bare":
                    results[side] = run_bare(target, args.backend, base_env, scratch)
                else:
                    tree = args.also_tree.resolve() if side == "other" else ROOT
                    results[side] = run_cagtool(target, args.backend, args.cagtool_arg, base_env, scratch, tree)
            bare = results["bare"]
            tool_wall, tool_cpu, durations = results["tool"]
            other = results.get("other")
            bare_wall = sum(w for w, _ in bare.values())
            bare_cpu = sum(c for _, c in bare.values())
            reps.append({
                "rep": rep,
                "bare_wall_s": {m: w for m, (w, _) in bare.items()},
                "bare_cpu_s": {m: c for m, (_, c) in bare.items()},
                "cagtool_wall_s": tool_wall,
                "cagtool_cpu_s": tool_cpu,
                "cagtool_mode_duration_s": durations,
                "wall_ratio": tool_wall / bare_wall,
                "cpu_ratio": tool_cpu / bare_cpu,
            })
            if other is not None:
                reps[-1].update(other_wall_s=other[0], other_cpu_s=other[1], other_wall_ratio=other[0] / bare_wall, other_cpu_ratio=other[1] / bare_cpu)
            if not args.json:
                per_mode = "  ".join(f"{m} {bare[m][0]:.1f}/{durations[m]:.1f}" for m in MODES)
                print(
                    f"rep {rep}: cagtool {tool_wall:.1f} s wall / {tool_cpu:.1f} s CPU; bare sum {bare_wall:.1f} s / {bare_cpu:.1f} s; "
                    f"ratio wall {tool_wall / bare_wall:.3f}, CPU {tool_cpu / bare_cpu:.3f}   (bare/cagtool mode s: {per_mode})",
                    flush=True,
                )
                if other is not None:
                    print(f"       --also-tree cagtool {other[0]:.1f} s wall / {other[1]:.1f} s CPU: ratio wall {other[0] / bare_wall:.3f}, CPU {other[1] / bare_cpu:.3f}", flush=True)
    min_bare = sum(min(r["bare_wall_s"][m] for r in reps) for m in MODES)
    min_tool = min(r["cagtool_wall_s"] for r in reps)
    wall_ratios = sorted(r["wall_ratio"] for r in reps)
    cpu_ratios = sorted(r["cpu_ratio"] for r in reps)
    summary = {
        "target": target,
        "backend": args.backend,
        "cagtool_args": args.cagtool_arg,
        "threads": args.threads,
        "reps": args.reps,
        "wall_ratio_median": statistics.median(wall_ratios),
        "wall_ratio_range": [wall_ratios[0], wall_ratios[-1]],
        "wall_ratio_of_minimums": min_tool / min_bare,
        "cpu_ratio_median": statistics.median(cpu_ratios),
        "cpu_ratio_range": [cpu_ratios[0], cpu_ratios[-1]],
        "cagtool_wall_median_s": statistics.median(r["cagtool_wall_s"] for r in reps),
        "bare_wall_sum_median_s": statistics.median(sum(r["bare_wall_s"].values()) for r in reps),
        "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "platform": platform.platform()},
        "repetitions": reps,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(
        f"3-mode cagtool run / sum of 3 bare runs, median of {args.reps}: wall {summary['wall_ratio_median']:.3f} "
        f"(range {wall_ratios[0]:.3f} .. {wall_ratios[-1]:.3f}; of minimums {min_tool / min_bare:.3f}), CPU {summary['cpu_ratio_median']:.3f} "
        f"(range {cpu_ratios[0]:.3f} .. {cpu_ratios[-1]:.3f}); target wall <= 1.05, <= 1.03 on the 15 s job"
    )
    if args.also_tree is not None:
        other_cpu = sorted(r["other_cpu_ratio"] for r in reps)
        other_wall = sorted(r["other_wall_ratio"] for r in reps)
        mine_minus_other = sorted(r["cagtool_cpu_s"] - r["other_cpu_s"] for r in reps)
        print(
            f"--also-tree {args.also_tree}: wall {statistics.median(other_wall):.3f} (range {other_wall[0]:.3f} .. {other_wall[-1]:.3f}), "
            f"CPU {statistics.median(other_cpu):.3f} (range {other_cpu[0]:.3f} .. {other_cpu[-1]:.3f}); "
            f"this checkout's CPU minus the other's, median {statistics.median(mine_minus_other):+.2f} s"
        )


if __name__ == "__main__":
    main()
