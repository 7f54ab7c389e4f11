"""A run record as pandas DataFrames, for notebooks and ad-hoc analysis (the Python API).

    from cagtool.record.loader import load_run
    from cagtool.report.frames import events_frame, steps_frame
    run = load_run(".cagtool/runs/train-20260101-120000")
    steps = steps_frame(run.mode("ca"))          # one row per step: iteration_s, backward_s, loss, ...
    misses = events_frame(run.mode("ca"), "ca_cache_miss")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import EVENT_TYPES, StepEvent, event_to_dict

if TYPE_CHECKING:
    import pandas as pd


def events_frame(record: ModeRecord, kind: str) -> "pd.DataFrame":
    """Every event of one kind, one row each, columns as in events.jsonl (nested records as dicts)."""
    import dataclasses

    import pandas as pd

    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown event kind {kind!r}; kinds: {', '.join(sorted(EVENT_TYPES))}")
    cls = EVENT_TYPES[kind]
    rows = [
        {k: (dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v) for k, v in event_to_dict(e).items()}
        for e in record.events
        if isinstance(e, cls)
    ]
    columns = ["kind"] + [f.name for f in dataclasses.fields(cls)]
    return pd.DataFrame(rows, columns=columns)


def steps_frame(record: ModeRecord) -> "pd.DataFrame":
    """One row per step, indexed by step number, with the iteration time (start of this backward to
    the start of the next; NaN for the last) and whether compilation touched the step."""
    frame = events_frame(record, StepEvent.kind).set_index("step").sort_index()
    start = frame["t"] - frame["backward_s"]
    frame["iteration_s"] = start.shift(-1) - start
    touched = (frame["compiles"] > 0) | (frame["ca_captures"] > 0)
    frame["compile_affected"] = touched | touched.shift(-1, fill_value=False)
    return frame
