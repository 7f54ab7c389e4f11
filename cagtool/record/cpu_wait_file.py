"""cpu_wait.json, beside a mode's manifest: how long the mode's process tree ran and waited for a
CPU, sampled by cagtool's own process (capture/processes/cpu_wait.py) on the machine's monotonic
clock, read by the figures (report/figures/metrics.py). Each sample is [t, run_s, wait_s, stall_s,
others_s, others_span_s]: perf_counter seconds, the tree's cumulative run, wait and stall seconds
at that time, the CPU seconds everything else ran on the job's CPUs, and the seconds of time those
were read over (files written before the stall or the others were kept have the first three or
four columns)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta, Struct, field

CPU_WAIT_FORMAT = "cagtool.cpu_wait/1"
DEFAULT_SAMPLE_S = 0.5  # what a file without `sample_s` was sampled at


class CpuWaitFile(Struct, kw_only=True):
    format: str = CPU_WAIT_FORMAT
    clock: str = "perf_counter"
    sample_s: float | None = None
    # A fourth value is the stall only where `columns` names it (the writer always does).
    columns: list[str] = field(default_factory=lambda: ["t", "run_s", "wait_s"])
    # Each at least [t, run_s, wait_s] (what a column after those `columns` names is ignored).
    samples: list[Annotated[list[float], Meta(min_length=3)]]


def cpu_wait_text(sample_s: float, samples: list[tuple[float, ...]]) -> str:
    """The file's text, in json's layout (indent 2), as written so far. Never over what the reader
    reads (schema.MAX_JSON_FILE_BYTES, some 800,000 samples: 4.6 days at 0.5 s): a longer run keeps
    every 2nd sample (then every 4th...) and the last, its sample_s multiplied to match. The
    samples are cumulative, so a coarser series still holds every second of run and wait."""
    import json

    from cagtool.record.schema import MAX_JSON_FILE_BYTES

    rows = [[round(sample[0], 4), *(round(x, 6) for x in sample[1:6])] for sample in samples]
    every = 1
    if len(rows) > 4096:  # the thinning judged from the last rows (the longest numbers), so the long text is made once
        # In the document a row is 2 spaces further in than in a list of its own, on each of its 5 lines.
        row_bytes = len(json.dumps(rows[-1024:], indent=2)) / 1024 + 10
        while row_bytes * len(rows) / every > MAX_JSON_FILE_BYTES:
            every *= 2
    while True:
        kept = rows[::every]
        if kept[-1:] != rows[-1:]:
            kept.append(rows[-1])
        columns = ["t", "run_s", "wait_s", "stall_s", "others_s", "others_span_s"][: len(rows[0])]
        text = json.dumps(msgspec.to_builtins(CpuWaitFile(sample_s=sample_s * every, columns=columns, samples=kept)), indent=2) + "\n"
        if len(text) <= MAX_JSON_FILE_BYTES or len(kept) <= 2:
            return text
        every *= 2


# How far the cumulative others may step back between two samples, beyond a core's worth of the
# interval: the kernel's busy time counts in 10 ms ticks per CPU, some of which one interval can
# read short (the sampler's sum keeps the total).
_OTHERS_DIP_S = 0.05


def _others_possible(samples: list[list[float]]) -> bool:
    """Whether the others' columns are what a sampler writes: the span never going back nor growing
    faster than the clock, the others never stepping back past a few ticks. A column that says
    "nothing else ran" where a sampler could not have is no reading: it would make the job's waits
    its own (report.figures.metrics.waits_own)."""
    for before, after in zip(samples, samples[1:]):
        span, elapsed = after[5] - before[5], after[0] - before[0]
        if span < 0 or span > elapsed + 1e-3 or after[4] < before[4] - _OTHERS_DIP_S - elapsed or after[4] < 0:
            return False
    return bool(samples) and samples[0][4] >= 0 and samples[0][5] >= 0


def read_cpu_wait(data: bytes) -> tuple[list[list[float]], float] | None:
    """(samples as [t, run_s, wait_s] or, where the file has the stall, [t, run_s, wait_s,
    stall_s], and the others' CPU where it has them too, [..., others_s, others_span_s], seconds
    between samples), or None for a file that is not one: the readings are a
    note on the figures, never a reason to refuse a record."""
    try:
        document = msgspec.json.decode(data, type=CpuWaitFile)
    except (msgspec.DecodeError, RecursionError):  # ValidationError included; RecursionError: nested deeper than msgspec goes
        return None
    width = 4 if document.columns[3:4] == ["stall_s"] and all(len(sample) >= 4 for sample in document.samples) else 3
    if width == 4 and document.columns[4:6] == ["others_s", "others_span_s"] and all(len(sample) >= 6 for sample in document.samples):
        width = 6 if _others_possible(document.samples) else 4
    return [sample[:width] for sample in document.samples], document.sample_s or DEFAULT_SAMPLE_S
