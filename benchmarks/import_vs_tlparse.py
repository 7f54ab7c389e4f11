"""`cagtool import` against tlparse 0.4.3 on the same ~200 MB TORCH_TRACE log: wall time of the
whole process (start-up included) and peak RSS, median of N runs each.

The log: the real logs of tests/scripts/trace_jobs/single_job.py (CA verbose on and off),
captured here with TORCH_TRACE, concatenated and replicated up to the target size (what a long
job's log looks like: the same kinds of envelopes many times over).

    python benchmarks/import_vs_tlparse.py [--size-mb 200] [--runs 5] [--work DIR]   # default: cag-import-bench in the temp dir

Needs `pip install tlparse==0.4.3` in the same environment (the `tlparse` binary on PATH or next
to this Python)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "scripts" / "trace_jobs" / "single_job.py"


def build_log(work: Path, size_mb: int) -> Path:
    big = work / f"dedicated_log_torch_trace_bench_{size_mb}mb.log"
    if big.exists() and big.stat().st_size >= size_mb * 2**20:
        return big
    pieces = []
    for variant in ("plain", "verbose"):
        trace = work / f"seed-{variant}"
        shutil.rmtree(trace, ignore_errors=True)
        env = {**os.environ, "TORCH_TRACE": str(trace)}
        args = [sys.executable, str(JOB)] + (["verbose"] if variant == "verbose" else [])
        subprocess.run(args, env=env, check=True, capture_output=True)
        pieces.append(next(trace.glob("*.log")).read_bytes())
    seed = b"".join(pieces)
    with big.open("wb") as out:
        written = 0
        while written < size_mb * 2**20:
            out.write(seed)
            written += len(seed)
    return big


def measure(cmd_for_run, runs: int) -> dict:
    walls, rss = [], []
    for i in range(runs):
        # A fresh Python per measurement so RUSAGE_CHILDREN's max is this one command's.
        probe = (
            "import json,resource,subprocess,sys,time;"
            "c=json.loads(sys.argv[1]);t=time.perf_counter();p=subprocess.run(c,capture_output=True);"
            "w=time.perf_counter()-t;"
            "print(json.dumps([p.returncode,w,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss*1024,p.stderr.decode()[-500:]]))"
        )
        out = subprocess.run([sys.executable, "-c", probe, json.dumps(cmd_for_run(i))], capture_output=True, text=True, check=True)
        code, wall, peak, err = json.loads(out.stdout)
        if code != 0:
            raise SystemExit(f"command failed ({code}): {err}")
        walls.append(wall)
        rss.append(peak)
    return {
        "median_s": statistics.median(walls),
        "min_s": min(walls),
        "max_s": max(walls),
        "runs_s": [round(w, 3) for w in walls],
        "peak_rss_mb": max(rss) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "cag-import-bench")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    log = build_log(args.work, args.size_mb)
    tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
    out = args.work / "out"

    def cagtool_cmd(i: int) -> list[str]:
        shutil.rmtree(out / f"cag{i}", ignore_errors=True)
        return [sys.executable, "-m", "cagtool", "import", str(log), "-o", str(out / f"cag{i}")]

    def tlparse_cmd(i: int) -> list[str]:
        return [tlparse, str(log), "-o", str(out / f"tl{i}"), "--overwrite", "--no-browser"]

    results = {}
    # Interleave the tools run by run so machine noise hits both alike.
    cag, tl = [], []
    for i in range(args.runs):
        cag.append(measure(lambda _: cagtool_cmd(i), 1))
        tl.append(measure(lambda _: tlparse_cmd(i), 1))
    for name, rows in (("cagtool import", cag), ("tlparse 0.4.3", tl)):
        walls = [r["median_s"] for r in rows]
        results[name] = {
            "median_s": round(statistics.median(walls), 2),
            "min_s": round(min(walls), 2),
            "max_s": round(max(walls), 2),
            "runs_s": [round(w, 2) for w in walls],
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in rows), 1),
        }
    c, t = results["cagtool import"], results["tlparse 0.4.3"]
    ratios = sorted(tw / cw for tw, cw in zip(t["runs_s"], c["runs_s"]))
    summary = {
        "log_mb": round(log.stat().st_size / 2**20, 1),
        "runs": args.runs,
        **results,
        "speedup_median": round(t["median_s"] / c["median_s"], 2),
        "speedup_per_run_min_max": [round(ratios[0], 2), round(ratios[-1], 2)],
        "speedup_worst_case": round(t["min_s"] / c["max_s"], 2),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
