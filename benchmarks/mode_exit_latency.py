"""How long `cagtool run` takes to notice that a mode process ended: a child that
sleeps 0.3 s, prints the time and exits, waited for by `ChildSupervisor.wait` as orchestrate.py
waits for each mode (with the ack pipe the mode process holds). Prints, per repetition, the
milliseconds from the child's last line to `wait` returning.

    python benchmarks/mode_exit_latency.py [--reps 10]

Before the wait watched a pidfd, the ack pipe's end of file often arrived just before the exit
status could be read, and the loop slept its 0.2 s select timeout: about half the repetitions
read ~200 ms, i.e. ~0.1 s per mode on average, after every mode of every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from cagtool.capture.processes.lifeline import ChildSupervisor

CHILD = "import time; time.sleep(0.3); print(repr(time.time()), flush=True)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    latencies = []
    with ChildSupervisor() as supervisor:
        for _ in range(args.reps):
            ack_r, ack_w = os.pipe()
            proc = subprocess.Popen([sys.executable, "-c", CHILD], pass_fds=(ack_w,), stdout=subprocess.PIPE, text=True)
            os.close(ack_w)
            try:
                supervisor.wait(proc, ack_r)
                noticed = time.time()
            finally:
                os.close(ack_r)
            latencies.append((noticed - float(proc.stdout.read())) * 1000)
    print("ms from the child's last line to wait() returning: " + " ".join(f"{ms:.0f}" for ms in latencies))
    print(f"median {statistics.median(latencies):.0f} ms, max {max(latencies):.0f} ms")


if __name__ == "__main__":
    main()
