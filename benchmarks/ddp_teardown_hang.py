"""How often the DDP sample hangs at its end (docs/reliability.md, "Known limits": torch 2.13's
~ProcessGroupGloo joins a gloo worker that waits for the GIL). Runs the sample N times under
`cagtool run` (or plain python with --plain), each with a time limit, and counts the runs that did
not finish; a hung run's processes are killed (the whole session: start_new_session).

    python benchmarks/ddp_teardown_hang.py                 # 12 runs of cagtool run --modes aot
    python benchmarks/ddp_teardown_hang.py --plain --runs 20
    PYTHONPATH=../copy python benchmarks/ddp_teardown_hang.py     # a copy of the tree with a piece removed

Session 6 (2026-11-23, 2-core VM): cagtool 2-3 of 12 runs hung (60e33b4 and later), plain python
0 of 20; with the sample's 0.2 s pause after its barrier, cagtool 0 of 12. To reproduce, take the
pause out of a copy of the sample (22:47 UTC, main at f5e73ab: 2 of 12 hung; with the pause 0 of 12):

    sed 's/^    time.sleep(0.2)$//' sample_scripts/train_ddp.py > sample_scripts/nopause.py
    python benchmarks/ddp_teardown_hang.py --script sample_scripts/nopause.py && rm sample_scripts/nopause.py
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
    parser.add_argument("--script", default=str(REPO / "sample_scripts" / "train_ddp.py"))
    args = parser.parse_args()
    hung = 0
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            target = [args.script, "--steps", "3"]
            command = [sys.executable, *target] if args.plain else [sys.executable, "-m", "cagtool", "run", "--modes", "aot", "--backend", "eager", "-o", f"{tmp}/r", *target]
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
            try:
                process.wait(timeout=args.limit)
                print(f"run {run + 1}: exit {process.returncode}", flush=True)
            except subprocess.TimeoutExpired:
                hung += 1
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                print(f"run {run + 1}: HUNG (killed after {args.limit:.0f} s)", flush=True)
    print(f"{'plain python' if args.plain else 'cagtool run --modes aot'}: {hung} of {args.runs} runs hung")


if __name__ == "__main__":
    main()
