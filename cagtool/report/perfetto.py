"""A run as a Chrome trace-event JSON (`cagtool export RUN --perfetto trace.json`), for Perfetto
or chrome://tracing, next to a torch.profiler trace.

One process per mode record and rank (`ca`, `ca rank1`, ...), one track (thread) per kind of span:
steps (from the previous step's end to this one's; schema 1 records: start of a backward to the
start of the next, as `frames.steps_frame` measures them), backward calls, optimizer steps, CA captures, CA graph first calls (lazy compile + one run) and
Dynamo compiles. Every span is a complete event (`ph: "X"`) in microseconds; events record their
end time `t`, so a span is [t - duration, t]. Times are relative to the earliest mode start of the
run (each mode's clock starts at its manifest's `started_at`), so modes and ranks line up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.schema import (
    BackwardEvent,
    CACompileEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    OptimizerStepEvent,
    StepEvent,
)
from cagtool.report.frames import steps_frame

TRACE_FORMAT = "cagtool-perfetto"

# (tid, track name), in display order.
TRACK_STEPS = (1, "steps")
TRACK_BACKWARD = (2, "backward")
TRACK_OPTIMIZER = (3, "optimizer step")
TRACK_CA_CAPTURE = (4, "CA capture")
TRACK_CA_COMPILE = (5, "CA compile (first call)")
TRACK_DYNAMO = (6, "Dynamo compile")
TRACKS = (TRACK_STEPS, TRACK_BACKWARD, TRACK_OPTIMIZER, TRACK_CA_CAPTURE, TRACK_CA_COMPILE, TRACK_DYNAMO)


@dataclass(frozen=True)
class TraceProcess:
    """One process of the trace: a mode record, or one rank's record of it."""

    pid: int
    label: str
    record: ModeRecord


def _us(seconds: float) -> float:
    return round(seconds * 1_000_000, 3)


def _started(record: ModeRecord) -> float | None:
    try:
        return datetime.fromisoformat(record.manifest.started_at).timestamp()
    except (TypeError, ValueError):
        return None


def trace_processes(run: RunRecord) -> list[TraceProcess]:
    """Each mode record, and each followed process of it (rank or pid), in run order."""
    out: list[TraceProcess] = []
    for name, record in run.modes.items():
        entries = [(record, name if record.rank is None else f"{name} rank {record.rank}")]
        for key, child in record.processes.items():
            entries.append((child, f"{name} rank {child.rank}" if child.rank is not None else f"{name} {key}"))
        for rec, label in entries:
            out.append(TraceProcess(len(out) + 1, label, rec))
    return out


def _span(name: str, track: tuple[int, str], pid: int, start_s: float, dur_s: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "cat": track[1], "ph": "X", "pid": pid, "tid": track[0], "ts": _us(start_s), "dur": _us(max(dur_s, 0.0)), "args": args}


def process_events(proc: TraceProcess, offset_s: float) -> list[dict[str, Any]]:
    """The metadata and spans of one process; `offset_s` moves its clock onto the run's."""
    record, pid = proc.record, proc.pid
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": proc.label}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    for tid, name in TRACKS:
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    steps = record.of(StepEvent)
    by_boundary = any(s.boundary for s in steps)  # schema 2: a step ends at its boundary (record/schema.py)
    if steps:
        frame = steps_frame(record)
        for number, row in frame.iterrows():
            if by_boundary:
                # On the host clock: from the previous step's end to this one's (the first has no start).
                duration = row["wall_s"]
                start = float(row["t"]) - float(duration) if duration == duration and duration is not None else None
            else:
                start, duration = float(row["t"]) - float(row["backward_s"]), row["iteration_s"]
            if start is not None and duration == duration:  # not NaN: the last step has no following start
                args = {"step": int(number), "compile_affected": bool(row["compile_affected"]), "loss": _num(row["loss"])}
                events.append(_span(f"step {number}", TRACK_STEPS, pid, offset_s + start, float(duration), args))
    if by_boundary:
        for b in record.of(BackwardEvent):
            args = {"step": b.step, "index": b.index, "call": b.call, "ca_captures": b.ca_captures, "loss": _num(b.loss)}
            events.append(_span(f"backward {b.step}.{b.index}", TRACK_BACKWARD, pid, offset_s + b.t - b.backward_s, b.backward_s, args))
    for s in steps if not by_boundary else ():
        args = {"step": s.step, "ca_captures": s.ca_captures, "compiles": s.compiles, "compile_s": s.compile_s, "loss": _num(s.loss)}
        events.append(_span(f"backward {s.step}", TRACK_BACKWARD, pid, offset_s + s.t - s.backward_s, s.backward_s, args))
    for o in record.of(OptimizerStepEvent):
        events.append(_span(o.optimizer or "optimizer.step", TRACK_OPTIMIZER, pid, offset_s + o.t - o.wall_s, o.wall_s, {"step": o.step}))
    for g in record.of(CAGraphEvent):
        args = {"compile_id": g.compile_id, "step": g.step, "nodes": g.node_count, "hooks": len(g.hooks), "code_file": g.code_file}
        events.append(_span(f"CA capture {g.compile_id}", TRACK_CA_CAPTURE, pid, offset_s + g.t - g.capture_s, g.capture_s, args))
    for c in record.of(CACompileEvent):
        args = {"ca_id": c.ca_id, "step": c.step, "ok": c.ok, "error": c.error}
        events.append(_span(f"CA first call !{c.ca_id}", TRACK_CA_COMPILE, pid, offset_s + c.t - c.first_call_s, c.first_call_s, args))
    for d in record.of(DynamoCompileEvent):
        duration = d.entire_frame_compile_time_s or 0.0
        args = {
            "compile_id": d.compile_id,
            "is_ca_graph": d.is_ca_graph,
            "step": d.step,
            "function": d.co_name,
            "file": d.co_filename,
            "line": d.co_firstlineno,
            "dynamo_s": d.dynamo_cumulative_compile_time_s,
            "aot_autograd_s": d.aot_autograd_cumulative_compile_time_s,
            "inductor_s": d.inductor_cumulative_compile_time_s,
            "fail_type": d.fail_type,
            "fail_reason": d.fail_reason,
        }
        label = f"Dynamo compile {d.compile_id}" + (f" {d.co_name}" if d.co_name else "")
        events.append(_span(label, TRACK_DYNAMO, pid, offset_s + d.t - duration, duration, args))
    return events


def _num(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None


def perfetto_trace(run: RunRecord) -> dict[str, Any]:
    """The trace document: `traceEvents` plus what it was made from."""
    processes = trace_processes(run)
    starts = {p.pid: _started(p.record) for p in processes}
    known = [s for s in starts.values() if s is not None]
    origin = min(known) if known else 0.0
    events: list[dict[str, Any]] = []
    for proc in processes:
        start = starts[proc.pid]
        events.extend(process_events(proc, (start - origin) if start is not None else 0.0))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "format": TRACE_FORMAT,
            "run": str(run.path),
            "target": run.meta.target.get("name", ""),
            "time_origin": datetime.fromtimestamp(origin).astimezone().isoformat() if known else "",
            "torch": run.meta.versions.get("torch", ""),
        },
    }


def write_trace(run: RunRecord, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(perfetto_trace(run), allow_nan=False, default=str) + "\n", encoding="utf-8")
    return path
