"""Do two runs of the same job agree? The same 2-mode `cagtool run` repeated N times, each run's
ca/aot verdict and interval read the way `cagtool compare` reads them.

    python benchmarks/replication.py --runs 10 --repeat 5 --threads 1 --json results/replication/repeat5.json
    python benchmarks/replication.py --runs 10 --repeat 1 --threads 1 --json results/replication/repeat1.json
    python benchmarks/replication.py --report results/replication/repeat5.json results/replication/repeat1.json

Each run is `cagtool run --modes aot,ca --backend eager --repeat K --no-report
sample_scripts/mlp_steps.py --steps 60`. The report counts contradicting verdicts (one run faster,
another slower; or one "no change" where another's interval excludes +/-5%), and how many of the
runs' 90% intervals cover the pooled estimate (the median of every block's ratio over all runs):
a verdict that replicates has none of the first and at least 90% of the second. The report
judges each run again by the rule in the tree it runs from (from the block ratios it kept).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(out: Path, repeat: int, steps: int, threads: int | None) -> dict:
    started = time.time()
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    proc = subprocess.run(
        [sys.executable, "-m", "cagtool", "run", "--modes", "aot,ca", "--backend", "eager", "--repeat", str(repeat), "--no-report",
         "-o", str(out), str(ROOT / "sample_scripts" / "mlp_steps.py"), "--steps", str(steps)],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    from cagtool.record.loader import load_run
    from cagtool.report.compare.analysis import compare_modes

    s = next(s for s in compare_modes(load_run(out)).speedups if s.label == "ca/aot")
    return {
        "ratio": s.ratio, "low": s.low, "high": s.high, "verdict": s.verdict, "method": s.interval.method if s.interval else None,
        "measure": s.interval.measure if s.interval else None, "blocks": list(s.repetition_ratios) or [s.ratio],
        "order": json.loads((out / "run.json").read_text())["modes"], "took_s": time.time() - started, "load": os.getloadavg()[0],
    }


def collect(args: argparse.Namespace) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            row = one_run(Path(tmp) / f"run{i}", args.repeat, args.steps, args.threads)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"repeat": args.repeat, "steps": args.steps, "threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                               "runs": rows}, indent=1))


def _current_rule(row: dict) -> dict:
    """The run's ca/aot interval and verdict by the rule in this tree, from its block ratios (all
    that rule reads: the sign interval of the blocks from 5, else the assumed noise of its measure)."""
    from cagtool.report.compare.analysis import Speedup
    from cagtool.report.figures.intervals import FIELDS, TimingSample, ratio_interval

    blocks = row["blocks"]
    k = len(blocks)

    def side(figures: list[float]) -> TimingSample:
        units = {f: tuple(figures) for f in FIELDS}
        cpu = units if row["measure"] == "cpu" else {}
        return TimingSample(100 * k, k, "process", {f: figures[0] for f in FIELDS}, units, cpu, bool(cpu), tuple(range(1, k + 1)))

    r = ratio_interval(side(blocks), side([1.0] * k), "median", paired=True)
    assert r is not None
    s = Speedup("ca", "aot", r.ratio, r.low, r.high, steady_steps=(100, 100), interval=r)
    return {**row, "ratio": r.ratio, "low": r.low, "high": r.high, "verdict": s.verdict}


def report(paths: list[str]) -> None:
    for path in paths:
        data = json.loads(Path(path).read_text())
        rows = [_current_rule(r) for r in data["runs"]]
        blocks = sorted(b for r in rows for b in r["blocks"])
        pooled = blocks[len(blocks) // 2] if len(blocks) % 2 else math.sqrt(blocks[len(blocks) // 2 - 1] * blocks[len(blocks) // 2])
        verdicts = [r["verdict"] for r in rows]
        contradictions = 0
        for a in rows:
            for b in rows:
                if a is b:
                    continue
                if {a["verdict"], b["verdict"]} == {"faster", "slower"}:
                    contradictions += 1
                elif a["verdict"] == "no change" and (b["low"] > 1.05 or b["high"] < 1 / 1.05):
                    contradictions += 1
        covered = sum(1 for r in rows if r["low"] <= pooled <= r["high"])
        print(f"\n{path}: {len(rows)} runs of --repeat {data['repeat']}, {data['date']}, load {min(r['load'] for r in rows):.1f}-{max(r['load'] for r in rows):.1f}")
        print(f"  pooled ca/aot (median of {len(blocks)} block ratios): {pooled:.3f}x; measures: {sorted({r['measure'] for r in rows})}")
        print(f"  verdicts: " + ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts))))
        print(f"  contradicting pairs: {contradictions // 2}; intervals covering the pooled estimate: {covered} of {len(rows)}")
        print("  runs: " + "; ".join(f"{r['ratio']:.2f}x [{r['low']:.2f}, {r['high']:.2f}] {r['verdict']}" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the job (default: torch's own)")
    parser.add_argument("--json")
    parser.add_argument("--report", nargs="+")
    args = parser.parse_args()
    if args.report:
        report(args.report)
    else:
        collect(args)


if __name__ == "__main__":
    main()
