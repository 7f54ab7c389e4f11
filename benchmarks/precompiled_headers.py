"""Benchmark: the compile time `cagtool run` reports, with Inductor's precompiled headers as the plain
job has them (on, built: what cagtool does now) and switched off (TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS=0,
what cagtool set before in every mode it gave a fresh cache).

    python benchmarks/precompiled_headers.py                  # the README's transformer, 2 reps
    python benchmarks/precompiled_headers.py --reps 3 --json benchmarks/results/precompiled_headers/<date>.json

Each repetition runs `cagtool run --modes aot,ca --no-report SCRIPT` once per variant (the order
alternating between repetitions), and reads each mode's compile time from `cagtool summary
--format json`, and the whole process tree's CPU time (user + sys) from getrusage. The headers are
built before the first repetition (one run with them on, not counted), so "on" measures what every
job after the first on a machine sees, the plain job's too.
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
SWITCH = "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"


def run_once(script: str, headers: bool, work: Path) -> dict:
    out = Path(tempfile.mkdtemp(dir=work))
    env = {**os.environ, "CI": "true"}
    env.pop(SWITCH, None)
    if not headers:
        env[SWITCH] = "0"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cagtool = [sys.executable, "-m", "cagtool"]
    subprocess.run([*cagtool, "run", "--modes", "aot,ca", "--no-report", "-o", str(out / "r"), script],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads(subprocess.run([*cagtool, "summary", str(out / "r"), "--format", "json"], check=True, env=env,
                                        capture_output=True, text=True).stdout)
    return {"headers": headers, "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
            "compile_s": {mode: round(m["compile_time_s"], 2) for mode, m in summary["modes"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("script", nargs="?", default=str(ROOT / "sample_scripts" / "transformer_lm.py"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        run_once(args.script, True, Path(work))  # the headers built: not counted
        rows = []
        for rep in range(args.reps):
            for headers in ((True, False) if rep % 2 == 0 else (False, True)):
                rows.append(run_once(args.script, headers, Path(work)))
                print(json.dumps(rows[-1]), flush=True)
    for headers in (True, False):
        mine = [r for r in rows if r["headers"] is headers]
        modes = {mode: statistics.median(r["compile_s"][mode] for r in mine) for mode in mine[0]["compile_s"]}
        print(f"headers {'on ' if headers else 'off'}: compile " + ", ".join(f"{m} {v:.1f} s" for m, v in modes.items())
              + f"; process tree CPU {statistics.median(r['cpu_s'] for r in mine):.1f} s (median of {len(mine)})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        script = Path(args.script).resolve()
        shown = str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else script.name  # no machine path in a result
        args.json.write_text(json.dumps({"script": shown, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
