"""Overhead of `cagtool run` (ca mode) on steady-state step time, against the same script with
compiled autograd enabled by hand and no cagtool. Runs are interleaved, several repetitions, in
one session; prints the ratio of medians and its spread. Target: <= 1.02.

    python benchmarks/run_overhead.py [--reps 5] [--steps 300] [--backend eager]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "steady_state_script.py"


def _median_step(stdout: str) -> float:
    line = next(l for l in stdout.splitlines() if l.startswith("{"))
    return json.loads(line)["median_step_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS for both sides (1 cuts run-to-run noise on a small machine)")
    args = parser.parse_args()
    env = {**os.environ, "CI": "true", "OMP_NUM_THREADS": str(args.threads)}
    bare, tool = [], []
    for rep in range(args.reps):
        proc = subprocess.run([sys.executable, str(HERE / "ca_by_hand.py"), args.backend, str(SCRIPT), str(args.steps)], capture_output=True, text=True, env=env, check=True)
        bare.append(_median_step(proc.stdout))
        with tempfile.TemporaryDirectory() as out:
            proc = subprocess.run(
                [sys.executable, "-m", "cagtool", "run", "--modes", "ca", "--backend", args.backend, "--no-torch-trace", "-o", f"{out}/r", str(SCRIPT), str(args.steps)],
                capture_output=True, text=True, env=env, check=True,
            )
        tool.append(_median_step(proc.stdout))
        print(f"rep {rep + 1}: bare {bare[-1] * 1e3:.3f} ms  cagtool {tool[-1] * 1e3:.3f} ms  ratio {tool[-1] / bare[-1]:.3f}", flush=True)
    ratios = sorted(t / b for t, b in zip(tool, bare))
    print(
        f"steady-state step time, median of {args.reps} reps: bare {statistics.median(bare) * 1e3:.3f} ms, "
        f"cagtool {statistics.median(tool) * 1e3:.3f} ms; ratio {statistics.median(tool) / statistics.median(bare):.3f} "
        f"(per-rep ratios {ratios[0]:.3f} .. {ratios[-1]:.3f})"
    )


if __name__ == "__main__":
    main()
