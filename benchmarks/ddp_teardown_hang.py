"""How often a DDP job hangs at its end (docs/reliability.md, "A DDP job's end under gloo": torch
2.13's ~ProcessGroupGloo joins a gloo worker that waits for the GIL). Runs a DDP script N times
under `cagtool run` (or plain python with --plain), each with a time limit, and counts the runs
that did not finish; a hung run's processes are killed (the whole session: start_new_session).

    python benchmarks/ddp_teardown_hang.py --runs 30                 # sample_scripts/train_ddp.py under cagtool run --modes aot
    python benchmarks/ddp_teardown_hang.py --plain --runs 40
    PYTHONPATH=../copy python benchmarks/ddp_teardown_hang.py     # a copy of the tree with a piece changed

2026-11-23 (2-core VM, the sample as it is now, i.e. without the earlier 0.2 s pause
after its barrier): plain python 0 of 40; cagtool at cc6e6f8 (no guard) 4 of 30; with the guard
(ddp_watch.GLOO_SETTLE_S) 0 of 30, and 0 of 30 with the script's destroy_process_group() removed;
at 0533ffb, the sample itself: 0 of 30 (`--runs 30`) and 0 of 20 in ca mode (`--runs 20 --mode ca --limit 60`).
The copy without destroy_process_group():

    sed 's/^    dist.destroy_process_group()$//' sample_scripts/train_ddp.py > sample_scripts/nodestroy.py
    python benchmarks/ddp_teardown_hang.py --runs 30 --script sample_scripts/nodestroy.py && rm sample_scripts/nodestroy.py
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--limit", type=float, default=30.0, help="seconds before a run counts as hung")
    parser.add_argument("--plain", action="store_true", help="plain python, no cagtool")
    parser.add_argument("--mode", default="aot", choices=("eager", "aot", "ca"), help="the cagtool mode to run (default aot)")
    parser.add_argument("--script", default=str(REPO / "sample_scripts" / "train_ddp.py"))
    args = parser.parse_args()
    hung = 0
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            target = [args.script, "--steps", "3"]
            command = [sys.executable, *target] if args.plain else [sys.executable, "-m", "cagtool", "run", "--modes", args.mode, "--backend", "eager", "-o", f"{tmp}/r", *target]
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
            try:
                process.wait(timeout=args.limit)
                print(f"run {run + 1}: exit {process.returncode}", flush=True)
            except subprocess.TimeoutExpired:
                hung += 1
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                print(f"run {run + 1}: HUNG (killed after {args.limit:.0f} s)", flush=True)
    print(f"{'plain python' if args.plain else f'cagtool run --modes {args.mode}'}: {hung} of {args.runs} runs hung")


if __name__ == "__main__":
    main()
