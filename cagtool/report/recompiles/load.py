"""Reading just what `recompiles` needs from a run, fast enough for 100,000-event records: the one
loader with a `kinds` filter (other events, mostly steps, are only counted)."""

from __future__ import annotations

from pathlib import Path

from cagtool.record.loader import RunRecord, load_run
from cagtool.record.schema import CacheMissEvent, CAGraphEvent, DynamoCompileEvent, DynamoRecompileEvent, FindingEvent, StepEvent
from cagtool.report.recompiles.rows import StepSummary

NEEDED_KINDS = frozenset(
    cls.kind for cls in (CacheMissEvent, CAGraphEvent, DynamoCompileEvent, DynamoRecompileEvent, FindingEvent)
)


def load_filtered(path: str | Path | None) -> tuple[RunRecord, dict[str, StepSummary]]:
    """A RunRecord holding only the events `recompiles` reads, with each mode's step count and
    last step (steps are numbered 1..N in write order). Raises UnreadableInput like `load_run`."""
    run = load_run(path, kinds=NEEDED_KINDS)
    steps = {}
    for name, mode in run.modes.items():
        count = mode.kind_counts[StepEvent.kind]
        steps[name] = StepSummary(count, count or None)
    return run, steps
