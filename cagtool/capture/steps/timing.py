"""How long a step took: wall time and CPU time from the previous step boundary to its own.

The process's CPU time at each boundary: a step's CPU time replicates between processes where its
wall time measures the machine's other load too. The thread's CPU time spans the step only when
the same thread ended both boundaries (its clock is its own): it says whether the step ran on the
CPU or waited off it."""

from __future__ import annotations

from cagtool.capture.steps.notes import CpuReading
from cagtool.record.writer import RecordWriter


class BoundaryTimes:
    """The previous boundary's clock and CPU reading, from which the step that ends next is measured
    (boundaries.py, `StepCounter.close`: the step's t is its boundary's perf_counter time less the
    writer's t0; wall_s the difference of the two t; cpu_s the process CPU times' difference, None
    where either reading is missing (not read, hooks.py); thread_cpu_s the thread CPU times' where
    the same thread read both, else None), and which that boundary then replaces."""

    __slots__ = ("writer", "last_t", "last_cpu")

    def __init__(self, writer: RecordWriter) -> None:
        self.writer = writer  # a line's t is seconds since its t0 (set again in a forked child: reopen)
        self.last_t: float | None = None
        self.last_cpu: CpuReading | None = None
