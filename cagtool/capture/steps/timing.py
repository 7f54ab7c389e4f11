"""How long a step took: wall time and CPU time from the previous step boundary to its own.

The process's CPU time at each boundary: a step's CPU time replicates between processes where its
wall time measures the machine's other load too. The thread's CPU time spans the step only when
the same thread ended both boundaries (its clock is its own): it says whether the step ran on the
CPU or waited off it."""

from __future__ import annotations

from cagtool.capture.steps.notes import CpuReading
from cagtool.record.writer import RecordWriter


class BoundaryTimes:
    """The previous boundary's clock and CPU reading; `span` measures a step from it to the next."""

    __slots__ = ("writer", "last_t", "last_cpu")

    def __init__(self, writer: RecordWriter) -> None:
        self.writer = writer  # a line's t is seconds since its t0 (set again in a forked child: reopen)
        self.last_t: float | None = None
        self.last_cpu: CpuReading | None = None

    def span(self, clock: float, cpu: CpuReading | None) -> tuple[float, float | None, float | None, float | None]:
        """(t, wall_s, cpu_s, thread_cpu_s) of the step ending at perf_counter time `clock` with the
        reading `cpu` (None: not read, hooks.py), and that boundary becomes the previous one."""
        t = clock - self.writer.t0
        last_t, last = self.last_t, self.last_cpu
        wall_s = None if last_t is None else t - last_t
        if last is None or cpu is None:
            cpu_s = thread_cpu_s = None
        else:
            cpu_s = cpu[0] - last[0]
            thread_cpu_s = cpu[1] - last[1] if cpu[2] == last[2] else None
        self.last_t, self.last_cpu = t, cpu
        return t, wall_s, cpu_s, thread_cpu_s
