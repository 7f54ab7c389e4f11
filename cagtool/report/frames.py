"""A run record as pandas DataFrames, for notebooks and ad-hoc analysis (the Python API).

    from cagtool.record.loader import load_run
    from cagtool.report.frames import events_frame, steps_frame
    run = load_run(".cagtool/runs/train-20260101-120000")
    steps = steps_frame(run.mode("ca"))          # one row per step: iteration_s, backward_calls, loss, ...
    backwards = events_frame(run.mode("ca"), "backward")  # one row per backward call, with its step
    misses = events_frame(run.mode("ca"), "ca_cache_miss")
    events_frame(run)                            # a whole run (its default mode): the kinds it holds, counted
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.schema import EVENT_TYPES, StepEvent, event_to_dict
from cagtool.report.figures.metrics import device_step_seconds

if TYPE_CHECKING:
    import pandas as pd


def events_frame(record: ModeRecord | RunRecord, kind: str | None = None) -> "pd.DataFrame":
    """Every event of one kind, one row each, columns as in events.jsonl (nested records as dicts).
    `record`: one mode's record, or a whole run as `cagtool.load` returns it (its default mode, the
    one `cagtool summary` shows). Without a kind: the kinds, one row each (`kind`, `count` in this
    record), every kind the format knows."""
    import msgspec
    import pandas as pd

    if isinstance(record, RunRecord):
        record = record.mode()
    if kind is None:
        counts = record.kind_counts
        return pd.DataFrame({"kind": sorted(EVENT_TYPES), "count": [int(counts.get(k, 0)) for k in sorted(EVENT_TYPES)]})
    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown event kind {kind!r}; kinds: {', '.join(sorted(EVENT_TYPES))}")
    cls = EVENT_TYPES[kind]
    rows = [
        event_to_dict(e) for e in record.of(cls)
    ]
    columns = ["kind"] + [f.name for f in msgspec.structs.fields(cls)]
    return pd.DataFrame(rows, columns=columns)


def steps_frame(record: ModeRecord) -> "pd.DataFrame":
    """One row per step, indexed by step number, with its time (`iteration_s`: since the previous
    step ended, on the device clock when the job ran on CUDA; NaN for the first step), its backward
    calls, and whether compilation touched it. Schema 1 records (one step per backward): the time
    from this backward's start to the next one's, NaN for the last."""
    frame = events_frame(record, StepEvent.kind).set_index("step").sort_index()
    touched = (frame["compiles"] > 0) | (frame["ca_captures"] > 0)
    if (frame["boundary"].fillna("") != "").any():
        device = device_step_seconds(record)
        frame["device_s"] = frame.index.map(lambda step: device.get(step, float("nan")))
        frame["iteration_s"] = frame["device_s"].where(frame["device_s"].notna(), frame["wall_s"]).astype(float)
        frame["compile_affected"] = touched
        return frame
    start = frame["t"] - frame["backward_s"]
    frame["iteration_s"] = start.shift(-1) - start
    frame["compile_affected"] = touched | touched.shift(-1, fill_value=False)
    return frame
