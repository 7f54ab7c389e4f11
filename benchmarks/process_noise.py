"""Run a real torch job many times under `cagtool run`, one process a run, and keep what each
process's steady steps measured: the evidence behind the timing verdicts (docs/ci.md).

    python benchmarks/process_noise.py --runs 20 --slow-ms 0,1,2,10 --threads 1 --neighbours 1 --json results/process_noise/busy.json
    python benchmarks/process_noise.py --report results/process_noise/quiet.json results/process_noise/busy.json

Each run is `cagtool run --modes aot --no-report sample_scripts/mlp_steps.py --slow-ms X` (a
fixed-shape MLP under torch.compile, AdamW, ~4 ms a step on the idle 2-core VM; X ms of waiting
added to each step stands for a slowed pull request), the variants interleaved in a shuffled order so that
a drift of the machine falls on all of them. `--neighbours N` starts N processes that spin on a
core each for the whole benchmark (a busy CI runner). Per process it keeps the median steady
step in wall time and in CPU time, and whether its steps were CPU-bound.

`--report` prints, per file and measure, the run-to-run noise of the unchanged job (the standard
deviation of the log of a process's median, and the A/A spread: how far two processes land apart
90% of the time), and the gate's outcomes with one run a side (every unchanged process as the
baseline against every other process) and with a baseline of 5 processes: false fails at no
change, catches at each slowdown, inconclusive and pass rates, for thresholds of 5% to 50%.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "sample_scripts" / "mlp_steps.py"


def one_run(out: Path, slow_ms: float, steps: int, threads: int | None = None) -> dict:
    started = time.time()
    env = {**os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
    proc = subprocess.run(
        [sys.executable, "-m", "cagtool", "run", "--modes", "aot", "--no-report", "-o", str(out),
         str(JOB), "--steps", str(steps), "--slow-ms", str(slow_ms)],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    from cagtool.record.loader import load_run
    from cagtool.report.compare.analysis import mode_columns

    from cagtool.report.figures.metrics import cpu_wait, steady_cpu_seconds

    record = load_run(out)
    column = mode_columns(record)["aot"]
    timing = column.timing
    assert timing is not None
    thread = steady_cpu_seconds(record.modes["aot"], "thread_cpu_s")
    process = steady_cpu_seconds(record.modes["aot"])
    waited = cpu_wait(record.modes["aot"])
    return {
        "slow_ms": slow_ms,
        "wall_s": timing.units["median"][0],
        "cpu_s": timing.cpu_units["median"][0] if timing.cpu_units else None,
        # the median step's process CPU over its training thread's: > 1.25, an intra-op pool's
        "thread_cpu_s": sorted(thread)[len(thread) // 2] if thread else None,
        "threads_cpu": (sorted(process)[len(process) // 2] / sorted(thread)[len(thread) // 2]) if thread and process else None,
        "wait_share": waited.fraction if waited is not None else None,
        "stall_s": waited.stall_s if waited is not None else None,
        "window_s": waited.window_s if waited is not None else None,
        "cpu_bound": timing.cpu_bound,
        "steps": timing.count,
        "compile_s": column.compile_time_s,
        "took_s": time.time() - started,
        "load": os.getloadavg()[0],
    }


def collect(args: argparse.Namespace) -> None:
    variants = [float(v) for v in args.slow_ms.split(",")]
    order = [v for v in variants for _ in range(args.runs)]
    random.Random(args.seed).shuffle(order)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.neighbours)]
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, slow in enumerate(order):
                row = one_run(Path(tmp) / f"run{i}", slow, args.steps, args.threads)
                results.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"neighbours": args.neighbours, "threads": args.threads, "steps": args.steps, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                               "processes": results}, indent=1))


def _sample(rows: list[dict]):
    from cagtool.report.figures.intervals import FIELDS, TimingSample

    wall = tuple(r["wall_s"] for r in rows)
    cpu = tuple(r["cpu_s"] for r in rows) if all(r["cpu_s"] for r in rows) else ()
    return TimingSample(
        sum(r["steps"] for r in rows), len(rows), "process",
        {f: sorted(wall)[len(wall) // 2] for f in FIELDS}, {f: wall for f in FIELDS},
        {f: cpu for f in FIELDS} if cpu else {}, all(r["cpu_bound"] for r in rows), tuple(range(1, len(rows) + 1)),
    )


def outcomes(baselines: list[list[dict]], runs: list[dict], threshold: float) -> dict[str, int]:
    from cagtool.report.gate.checks import step_time_verdict

    counts = {"fail": 0, "pass": 0, "inconclusive": 0, "improved": 0}
    for base in baselines:
        for run in runs:
            if any(run is b for b in base):
                continue
            judged = step_time_verdict(_sample([run]), _sample(base), "median", 100, 1.0 + threshold, 1.0 - threshold)
            assert judged is not None
            counts[judged[0].outcome.value] += 1
    return counts


def report(paths: list[str]) -> None:
    for path in paths:
        data = json.loads(Path(path).read_text())
        rows = data["processes"]
        base = [r for r in rows if r["slow_ms"] == 0]
        print(f"\n{path}: {len(rows)} processes, neighbours {data['neighbours']}, threads {data.get('threads') or 'default'}, {data['date']}, "
              f"load {min(r['load'] for r in rows):.1f}-{max(r['load'] for r in rows):.1f}")
        for measure in ("wall_s", "cpu_s"):
            logs = [math.log(r[measure]) for r in base if r[measure]]
            if len(logs) < 2:
                continue
            mean = sum(logs) / len(logs)
            sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
            print(f"  {measure}: unchanged median {1e3 * math.exp(mean):.2f} ms, range {1e3 * math.exp(min(logs)):.2f}-{1e3 * math.exp(max(logs)):.2f} ms, "
                  f"sd(log) {sd:.3f}, A/A +/-{100 * math.expm1(1.645 * sd * math.sqrt(2)):.0f}%")
        print(f"  CPU-bound: {sum(r['cpu_bound'] for r in base)} of {len(base)} unchanged processes")
        fives = [base[i:i + 5] for i in range(0, len(base) - 4, 5)]
        for threshold in (0.05, 0.10, 0.25, 0.50):
            for label, baselines in (("1 a side", [[b] for b in base]), ("baseline of 5", fives)):
                if not baselines:
                    continue
                line = []
                for slow in sorted({r["slow_ms"] for r in rows}):
                    runs = [r for r in rows if r["slow_ms"] == slow]
                    c = outcomes(baselines, runs, threshold)
                    total = sum(c.values())
                    line.append(f"+{slow:g} ms: fail {c['fail']}/{total} pass {c['pass'] + c['improved']} inconclusive {c['inconclusive']}")
                print(f"  --max-regression {threshold:.0%}, {label}: " + "; ".join(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="processes per variant")
    parser.add_argument("--slow-ms", default="0", help="comma-separated waits added to each step")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--neighbours", type=int, default=0)
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for the job (default: torch's own, one per core)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    parser.add_argument("--report", nargs="+")
    args = parser.parse_args()
    if args.report:
        report(args.report)
    else:
        collect(args)


if __name__ == "__main__":
    main()
