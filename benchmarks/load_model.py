"""How far the load model of `compare` holds: a step that waits a share w of its runnable time for
a CPU takes 1 / (1 - w) as long (report.figures.metrics.CpuWait), against what a busy machine
really does to a torch step of one or two intra-op threads.

For each thread count, `cagtool run --modes eager` records `sample_scripts/transformer_lm.py` on
the machine as it is (the idle reference), then beside N processes that spin on a core each. The
table gives each run's median step, the median step's share of waiting (CpuWait.step_fraction),
the slowdown the model makes of it, the slowdown measured against the idle run, and their ratio.
`compare` stops judging against a side past HEAVY_WAIT (report.compare.analysis): this is the
measurement behind that bound. Run it on an otherwise idle machine.

    python benchmarks/load_model.py                               # threads 1,2 x neighbours 0,2,4
    python benchmarks/load_model.py --threads 2 --neighbours 0,4 --json F
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "sample_scripts" / "transformer_lm.py"


def record(out: Path, threads: int, neighbours: int, steps: int) -> dict:
    """One eager recording beside `neighbours` spinning processes; its median step and CPU wait."""
    from cagtool.record.loader import load_run
    from cagtool.report.figures.metrics import cpu_wait, mode_metrics

    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(neighbours)]
    try:
        time.sleep(1.0 if neighbours else 0.0)  # the spinners at full speed before the job starts
        env = {**os.environ, "CI": "true", "OMP_NUM_THREADS": str(threads)}
        cmd = [sys.executable, "-m", "cagtool", "run", "--modes", "eager", "-o", str(out), str(SCRIPT), "--steps", str(steps)]
        proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    if proc.returncode != 0:
        raise SystemExit(f"cagtool run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    mode = load_run(out).modes["eager"]
    median = mode_metrics(mode).step_time.median_s
    wait = cpu_wait(mode)
    return {
        "threads": threads,
        "neighbours": neighbours,
        "median_ms": None if median is None else median * 1e3,
        "span_wait": None if wait is None else wait.fraction,
        "median_step_wait": None if wait is None else wait.step_fraction,
        "model_slowdown": None if wait is None else wait.slowdown,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2", help="intra-op thread counts (OMP_NUM_THREADS), comma-separated")
    parser.add_argument("--neighbours", default="0,2,4", help="spinning processes beside the job, comma-separated (0: the idle reference)")
    parser.add_argument("--steps", type=int, default=120, help="training steps of each recording")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    neighbours = sorted({0, *(int(n) for n in args.neighbours.split(","))})
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="cagtool-load-model-") as scratch:
        for t in threads:
            idle = None
            for n in neighbours:
                row = record(Path(scratch) / f"t{t}-n{n}", t, n, args.steps)
                if n == 0:
                    idle = row["median_ms"]
                row["measured_slowdown"] = row["median_ms"] / idle if idle and row["median_ms"] else None
                model, measured = row["model_slowdown"], row["measured_slowdown"]
                row["measured_over_model"] = measured / model if model and measured else None
                rows.append(row)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {load_before:.2f} before; transformer_lm.py --steps {args.steps}, eager")

    def cell(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    print(f"{'threads':>7} {'beside':>6} {'median ms':>9} {'wait (median step)':>18} {'span wait':>9} {'model x':>7} {'measured x':>10} {'measured/model':>14}")
    for r in rows:
        print(f"{r['threads']:>7} {r['neighbours']:>6} {cell(r['median_ms'], '.2f'):>9} {cell(r['median_step_wait'], '.0%'):>18} {cell(r['span_wait'], '.0%'):>9} "
              f"{cell(r['model_slowdown'], '.2f'):>7} {cell(r['measured_slowdown'], '.2f'):>10} {cell(r['measured_over_model'], '.2f'):>14}")
    if args.json:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"commit": commit, "load_before": load_before, "steps": args.steps, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
