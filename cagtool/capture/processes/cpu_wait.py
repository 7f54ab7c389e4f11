"""How long a mode's processes waited for a CPU: the machine's load, measured where it acts.

A mode's steps are slower on a machine whose other work keeps its threads waiting in the run
queue, and modes run one after another, so a neighbour that comes or goes between them reads as
a speed difference between modes. The kernel counts, per thread, the time it ran and the time it
was runnable but waited for a CPU (/proc/PID/task/TID/schedstat: run ns, wait ns, timeslices;
docs/torch-internals.md, "What cagtool reads from the kernel"). cagtool's own process samples
those counters for the mode's whole process tree (the script, its ranks and workers) while the
mode runs, from outside: nothing runs in the job's processes.

The samples go to `<mode>/cpu_wait.json`: cumulative run and wait seconds of the tree against the
mode's record clock (`time.perf_counter`, CLOCK_MONOTONIC, which every process on the machine
shares; the manifest's `clock_t0` places the record's event times on it). A thread that ends
takes its counters with it, so each sample adds what every thread gained since the last one.

A third cumulative figure, the **stall**: in each interval between samples, the longest any one
thread of the tree waited, up to the CPU time the tree left to others in it (the CPUs the job may
run on, times the interval, less what the tree ran). The summed wait is a share of the tree's
runnable time; a step that needs every thread of an intra-op pool is held up as long as the most
delayed one waits, while the others spin at its barrier (running, not waiting). A Lightning job's
2-thread eager steps beside another job read 185 ms against 2 ms alone: one thread ran the whole
time and the other waited the whole time, a summed share of 50 % (a "2x" bound) where the stall
is the whole interval. The cap keeps the job's own threads out of it: threads that outnumber the
CPUs wait for each other on an idle machine too, and then the tree leaves nothing to others.

A fourth, **others**: the CPU time everything outside the tree ran on the CPUs the job may use
(the kernel's per-CPU busy time in /proc/stat, less what the tree ran), cumulative as the rest,
with a fifth, the span of time it was read over. What the tree ran is read here from each of its
processes' /proc/PID/stat (user and system time, its ended threads' included, and its reaped
children's, `cutime`/`cstime`, in the same ticks as /proc/stat): a DataLoader worker that ends each
epoch, or a child too short-lived for the tree's rescan, is counted in the process that waited
for it, never as others' (per-thread counters lose an ended thread's last run, and never see such
a child: an idle machine read 0.05-2 cores of "others" from them). An interval in which the tree's
total went down (the root ended, or a process of it was reaped outside it) is left out of both.
A wait with nothing else running is the job's own doing (its threads and processes outnumber the
CPUs), which no quieter runner changes; the figures tell it from the machine's load by this.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

from cagtool.capture.processes.lifeline import descendants
from cagtool.record.schema import CPU_WAIT_FILE

SAMPLE_S = 0.5  # a sample of a few dozen threads' counters: ~0.2 ms of cagtool's CPU
RESCAN_EVERY = 4  # the tree (a scan of /proc, a few ms) is looked for again every 4th sample
_TICK_HZ = os.sysconf("SC_CLK_TCK")  # the unit of /proc/stat's times


def _task_counters(pid: int) -> dict[tuple[int, int], tuple[int, int]]:
    """{(pid, tid): (run ns, wait ns)} of the process's threads; {} when it is gone or the
    kernel keeps no schedstat."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as handle:
                run, wait, _ = handle.read().split()
            found[(pid, int(tid))] = (int(run), int(wait))
        except (OSError, ValueError):
            continue
    return found


def _busy_ns(cpus: set[int] | None) -> int | None:
    """The kernel's busy time of `cpus` (all where None) since boot, from /proc/stat (every state
    but idle and iowait; guest time is in user already), in ns; None where not readable."""
    try:
        with open("/proc/stat", "rb") as handle:
            lines = handle.read().split(b"\n")
        busy = 0
        for line in lines:
            if not line.startswith(b"cpu") or line.startswith(b"cpu "):
                continue
            name, *fields = line.split()
            if cpus is not None and int(name[3:]) not in cpus:
                continue
            ticks = [int(f) for f in fields[:8]]
            busy += sum(ticks) - ticks[3] - ticks[4]
        return busy * 1_000_000_000 // _TICK_HZ
    except (OSError, ValueError, IndexError):
        return None


def _tree_cpu_ns(pids: list[int]) -> int:
    """The CPU time the processes ran, their ended threads and their reaped children included, in
    ns (ticks: /proc/PID/stat's utime, stime, cutime, cstime); a process gone counts 0."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # fields 14-17 of the line, counted after the command
        except (OSError, ValueError, IndexError):
            continue
    return total * 1_000_000_000 // _TICK_HZ


def _affinity(pid: int) -> set[int] | None:
    """The CPUs the process may run on; None where not known (then the machine's)."""
    try:
        return set(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        return None


def available() -> bool:
    """Whether this kernel keeps per-thread schedstat (CONFIG_SCHED_INFO)."""
    return os.path.exists(f"/proc/{os.getpid()}/schedstat")


class CpuWaitSampler:
    """Samples the tree below and including `root` until `stop`; `write` saves the samples.
    Never raises into the run it watches: a failure only leaves the mode without a reading."""

    def __init__(self, root: int, clock: Callable[[], float] = time.perf_counter, sample_s: float = SAMPLE_S) -> None:
        self.root = root
        self.clock = clock
        self.sample_s = sample_s
        # (clock s, cumulative run s, cumulative wait s, cumulative stall s, cumulative others s,
        # cumulative span the others were read over s)
        self.samples: list[tuple[float, ...]] = []
        self._last: dict[tuple[int, int], tuple[int, int]] = {}
        self._pids: list[int] = [root]
        self._run_ns = 0
        self._wait_ns = 0
        self._stall_ns = 0
        self._cpu_set = _affinity(root)
        self._cpus = max(len(self._cpu_set), 1) if self._cpu_set is not None else os.cpu_count() or 1
        self._busy: int | None = None
        self._tree_cpu: int | None = None
        self._others_ns = 0
        self._others_span_ns = 0
        self._others_read = True  # every sample read /proc/stat: the column is kept
        self._ticks = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """One sample: what every thread of the tree ran and waited since the last one."""
        if self._ticks % RESCAN_EVERY == 0:
            self._pids = [self.root] + descendants(self.root)
        self._ticks += 1
        now: dict[tuple[int, int], tuple[int, int]] = {}
        for pid in self._pids:
            now.update(_task_counters(pid))
        ran = longest_wait = 0
        for key, (run, wait) in now.items():
            last_run, last_wait = self._last.get(key, (0, 0))
            # A thread first seen has run since it started: all of it counts (its start was
            # after the previous sample, or in the mode's first moments).
            ran += max(run - last_run, 0)
            waited = max(wait - last_wait, 0)
            self._wait_ns += waited
            longest_wait = max(longest_wait, waited)
        self._run_ns += ran
        self._last = now
        busy = _busy_ns(self._cpu_set)
        tree_cpu = _tree_cpu_ns(self._pids)
        clock = self.clock()
        if self.samples:  # the stall of the interval since the last sample (the module's docstring)
            left_to_others = self._cpus * (clock - self.samples[-1][0]) * 1e9 - ran
            self._stall_ns += int(min(longest_wait, max(left_to_others, 0.0)))
        if busy is None:
            self._others_read = False
        elif self._busy is not None and self._tree_cpu is not None and tree_cpu >= self._tree_cpu and self.samples:
            # What the CPUs ran less what the tree ran, both in ticks: a sample may read below 0 by a
            # tick or two; the sum keeps the total.
            self._others_ns += busy - self._busy - (tree_cpu - self._tree_cpu)
            self._others_span_ns += int((clock - self.samples[-1][0]) * 1e9)
        self._busy, self._tree_cpu = busy, tree_cpu
        self.samples.append((clock, self._run_ns / 1e9, self._wait_ns / 1e9, self._stall_ns / 1e9, max(self._others_ns, 0) / 1e9,
                             self._others_span_ns / 1e9))

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.sample_s):
                self.sample()
            self.sample()  # the last moments, up to the mode's end
        except Exception:  # noqa: BLE001 - a reading is optional; the run is not
            pass

    def start(self) -> CpuWaitSampler:
        """The first sample now, before the mode's script is let go (its steps start after
        it), then one every sample_s in a thread."""
        if available():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a reading is optional; the run is not
                return self
            self._thread = threading.Thread(target=self._loop, name="cagtool-cpu-wait", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def write(self, mode_dir: Path) -> None:
        """`<mode_dir>/cpu_wait.json`, when there are samples to place a steady window in."""
        if len(self.samples) < 2:
            return
        from cagtool.record.atomic import write_atomic
        from cagtool.record.cpu_wait_file import cpu_wait_text

        try:
            samples = self.samples if self._others_read else [sample[:4] for sample in self.samples]
            write_atomic(mode_dir / CPU_WAIT_FILE, cpu_wait_text(self.sample_s, samples))
        except OSError:
            pass  # a full disk: the mode simply has no reading
