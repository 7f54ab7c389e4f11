"""CPU of a whole `cagtool run` (the parent and every mode process), two cagtool trees interleaved:
each repetition runs the same job once with each tree, alternately, so both see the same machine
load. The figure is user + system CPU of the process tree (getrusage of the waited children),
which a busy 2-core machine inflates far less than wall time.

    python benchmarks/mode_process_cpu.py --before /path/to/old/checkout --reps 5
    python benchmarks/mode_process_cpu.py --before OLD --modes ca --backend eager --script sample_scripts/mlp_steps.py -- --steps 5

Each tree runs as `python -m cagtool` with PYTHONPATH set to it (the same interpreter and torch);
the record goes to a temporary directory. Prints the median, min and max CPU per tree and the
median of the per-repetition differences (after - before) with their range.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_of(argv: list[str], env: dict[str, str], cwd: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other cagtool checkout (its root)")
    parser.add_argument("--after", type=Path, default=ROOT, help="this checkout by default")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--modes", default="eager")
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--script", default="sample_scripts/mlp_steps.py")
    parser.add_argument("--json", type=Path)
    parser.add_argument("script_args", nargs="*")
    args = parser.parse_args()
    script = str((ROOT / args.script).resolve())
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="cagtool-mode-cpu-") as tmp:
        for rep in range(args.reps):
            order = list(trees) if rep % 2 == 0 else list(reversed(trees))
            for name in order:
                env = {**os.environ, "PYTHONPATH": str(trees[name]), "CI": "true"}
                argv = [sys.executable, "-m", "cagtool", "run", "--modes", args.modes, "--backend", args.backend, "--no-report",
                        "-o", str(Path(tmp) / f"{name}-{rep}"), script, *args.script_args]
                cpu[name].append(cpu_of(argv, env, tmp))
            print(f"rep {rep + 1}: before {cpu['before'][-1]:.2f} s, after {cpu['after'][-1]:.2f} s", flush=True)
    diffs = [a - b for a, b in zip(cpu["after"], cpu["before"])]
    job = f"cagtool run --modes {args.modes} --backend {args.backend} {args.script} {' '.join(args.script_args)}".strip()
    print(f"{job}, {args.reps} reps, load {os.getloadavg()[0]:.1f}:")
    for name in trees:
        print(f"  {name} ({trees[name]}): median {statistics.median(cpu[name]):.2f} s CPU ({min(cpu[name]):.2f} .. {max(cpu[name]):.2f})")
    print(f"  after - before: median {statistics.median(diffs):+.2f} s ({min(diffs):+.2f} .. {max(diffs):+.2f})")
    if args.json:
        args.json.write_text(json.dumps({"job": job, "cpu": cpu, "diffs": diffs, "load": os.getloadavg()}, indent=2))


if __name__ == "__main__":
    main()
