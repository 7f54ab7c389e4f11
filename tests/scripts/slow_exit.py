"""One backward, then an exit that takes a while (an atexit handler sleeping, as a job writing a
checkpoint at exit would). Appends to LOG, one line per event, times on CLOCK_BOOTTIME:
  start PID PROCESS_STARTED SCRIPT_STARTED ALIVE   (when the process was created / this script
        began; ALIVE: the pids of earlier `start` lines still running then, comma-separated, or -)
  trained PID AT                             (its one backward returned)
  exit PID EXIT_BEGAN EXIT_ENDED             (the atexit handler's sleep)

    python slow_exit.py LOG SECONDS
"""

import atexit
import os
import sys
import time

import torch


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _process_started() -> float:
    fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime: field 22 of stat, ticks since boot


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


log, seconds = sys.argv[1], float(sys.argv[2])
script_started = _boottime()
earlier = [int(line.split()[1]) for line in open(log) if line.startswith("start ")] if os.path.exists(log) else []
alive = ",".join(str(pid) for pid in earlier if _alive(pid)) or "-"
with open(log, "a") as handle:
    handle.write(f"start {os.getpid()} {_process_started():.3f} {script_started:.3f} {alive}\n")
torch.nn.Linear(2, 2)(torch.randn(1, 2)).sum().backward()
with open(log, "a") as handle:
    handle.write(f"trained {os.getpid()} {_boottime():.3f}\n")
print("TRAINED", flush=True)


def _slow_exit() -> None:
    began = _boottime()
    time.sleep(seconds)
    with open(log, "a") as handle:
        handle.write(f"exit {os.getpid()} {began:.3f} {_boottime():.3f}\n")


atexit.register(_slow_exit)
