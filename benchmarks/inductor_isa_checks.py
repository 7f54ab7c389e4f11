"""Benchmark: the compile time `cagtool run` reports where each mode's fresh Inductor cache starts
with the ISA checks the job's own cache holds (capture/run/inductor_machine.py, what cagtool does
now) against a tree where it starts empty (each mode dry-compiles every ISA check again).

    python benchmarks/inductor_isa_checks.py --before /path/to/old/checkout
    python benchmarks/inductor_isa_checks.py --before OLD --reps 3 --json benchmarks/results/inductor_isa_checks/<date>.json \\
        sample_scripts/mlp_steps.py --backend inductor --steps 20

Each repetition runs `cagtool run --modes aot,ca --no-report SCRIPT [ARGS]` once per tree (`python -m
cagtool` with PYTHONPATH set to the tree; the order alternating between repetitions), and reads each
mode's compile time from `cagtool summary --format json` and the whole process tree's CPU time
(user + sys) from getrusage. The job's cache (TORCHINDUCTOR_CACHE_DIR, else torch's default) is
given its ISA checks first, as any plain Inductor job on the machine leaves them, not counted.
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
CHECK = "from torch._inductor import cpu_vec_isa; cpu_vec_isa.valid_vec_isa_list()"


def run_once(tree: Path, label: str, command: list[str], work: Path) -> dict:
    out = Path(tempfile.mkdtemp(dir=work))
    env = {**os.environ, "CI": "true", "PYTHONPATH": str(tree)}
    cagtool = [sys.executable, "-m", "cagtool"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([*cagtool, "run", "--modes", "aot,ca", "--no-report", "-o", str(out / "r"), *command],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads(subprocess.run([*cagtool, "summary", str(out / "r"), "--format", "json"], check=True, env=env,
                                        capture_output=True, text=True, cwd=work).stdout)
    return {"tree": label, "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
            "compile_s": {mode: round(m["compile_time_s"], 2) for mode, m in summary["modes"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the tree before")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="SCRIPT [ARGS] (default: the README's transformer)")
    args = parser.parse_args()
    command = [str(Path(args.command[0]).resolve()), *args.command[1:]] if args.command else [str(ROOT / "sample_scripts" / "transformer_lm.py")]
    subprocess.run([sys.executable, "-c", CHECK], check=True)  # the job's cache holds its ISA checks
    trees = {"before": args.before.resolve(), "after": ROOT}
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for rep in range(args.reps):
            for label in (("before", "after") if rep % 2 == 0 else ("after", "before")):
                rows.append(run_once(trees[label], label, command, Path(work)))
                print(json.dumps(rows[-1]), flush=True)
    for label in trees:
        mine = [r for r in rows if r["tree"] == label]
        modes = {mode: statistics.median(r["compile_s"][mode] for r in mine) for mode in mine[0]["compile_s"]}
        print(f"{label}: compile " + ", ".join(f"{m} {v:.1f} s" for m, v in modes.items())
              + f"; process tree CPU {statistics.median(r['cpu_s'] for r in mine):.1f} s (median of {len(mine)})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        script = Path(command[0])
        shown = str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else script.name  # no machine path in a result
        args.json.write_text(json.dumps({"command": [shown, *command[1:]], "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
