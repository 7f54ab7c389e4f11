"""A run as a Chrome trace-event JSON (`cagtool export RUN --perfetto trace.json`), for Perfetto
or chrome://tracing, next to a torch.profiler trace.

One process per mode record and rank (`ca`, `ca rank1`, ...), one track (thread) per kind of span:
steps (from the previous step's end to this one's; schema 1 records: start of a backward to the
start of the next, as `frames.steps_frame` measures them), backward calls, optimizer steps, CA captures, CA graph first calls (lazy compile + one run) and
Dynamo compiles. Every span is a complete event (`ph: "X"`) in microseconds; events record their
end time `t`, so a span is [t - duration, t]. What happened at one moment is an instant event
(`ph: "i"`) with torch's words in its args: a CA cache miss (on the CA capture track), a Dynamo
recompile and a graph break (on the Dynamo track).

Each mode starts at time 0 of its own run (its manifest's `started_at`): the modes ran one after
the other, and side by side they compare step for step. The ranks (processes) of one mode keep
their offsets from the mode's start, so they line up with each other. A process that recorded
nothing to draw (a launcher) is left out.

The first step has no previous step to measure from: its span starts at the first thing the
record saw of it (its first compile, capture or backward), which leaves out the part of its
forward before Dynamo started compiling.
A long job's steps are partly aggregated (`MAX_TRACE_STEPS`); the trace's `otherData.aggregated`
says what was merged or left out, and every compile, capture and recompile is always drawn.
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cagtool.record.schema import PHASE_CHECKPOINT_RECOMPUTE
from cagtool.report.recompiles.phases import phase_args
from cagtool.record.atomic import write_atomic
from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.schema import (
    BackwardEvent,
    CacheMissEvent,
    CACompileEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    GraphBreakEvent,
    OptimizerStepEvent,
    SourceRef,
    StepEvent,
)
from cagtool.report.figures.downsample import downsample
from cagtool.report.figures.metrics import held_steps, step_columns
from cagtool.torch_text import looks_like_user_file, strip_reason_id

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
    mode: str = ""


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
            out.append(TraceProcess(len(out) + 1, label, rec, name))
    return out


def _instant(name: str, track: tuple[int, str], pid: int, at_s: float, args: dict[str, Any]) -> dict[str, Any]:
    """A thread-scoped instant event: a mark on its track at one moment."""
    return {"name": name, "cat": track[1], "ph": "i", "s": "t", "pid": pid, "tid": track[0], "ts": _us(max(at_s, 0.0)), "args": args}


def _backward_name(step: Any, index: Any) -> str:
    """`backward step 3`, and `backward step 3 #2` for a step's second backward call."""
    step, index = int(step), int(index)
    return f"backward step {step}" + (f" #{index + 1}" if index else "")


def _span(name: str, track: tuple[int, str], pid: int, start_s: float, dur_s: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "cat": track[1], "ph": "X", "pid": pid, "tid": track[0], "ts": _us(start_s), "dur": _us(max(dur_s, 0.0)), "args": args}


# A long job's trace draws at most this many steps one by one, over all its processes (each step a
# step span, its backward calls and its optimizer step): 100,000 steps x 24 records would be 7
# million spans, a trace no viewer opens. Each process gets its share (at least
# MIN_STEPS_PER_PROCESS); a process with more steps keeps every step that carries a marker (compile
# or capture in it, a compile event at it) and the fastest and slowest step of each stretch
# (charts.downsample), and each stretch of steps between those becomes one aggregated span over the
# same time, with the count, mean, min and max of its steps. `otherData.aggregated` says, per
# process, how many steps were merged and how many backward and optimizer spans left out.
MAX_TRACE_STEPS = 24_000
MIN_STEPS_PER_PROCESS = 1_000


def steps_per_process(processes: int) -> int:
    return max(MIN_STEPS_PER_PROCESS, MAX_TRACE_STEPS // max(processes, 1))


def _kind_columns(record: ModeRecord, cls: type, names: tuple[str, ...]) -> dict[str, list[Any]]:
    """The named fields of `cls`'s events, column by column in file order: from the record's
    columns when the loader held them there, else from the events."""
    held = record.columns.get(cls.kind)  # type: ignore[attr-defined]
    if held is not None:
        return {name: held.column(name) for name in names}
    events = record.of(cls)
    return {name: [getattr(e, name) for e in events] for name in names}


def process_events(proc: TraceProcess, offset_s: float, max_steps: int | None = None) -> list[dict[str, Any]]:
    """The metadata and spans of one process; `offset_s` moves its clock onto the run's. With
    `max_steps`, a process with more steps is drawn as `MAX_TRACE_STEPS` says (its `aggregated`
    entry, when it was, is added to the metadata event `process_name`'s args)."""
    record, pid = proc.record, proc.pid
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": proc.label}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    for tid, name in TRACKS:
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    ca_graphs = record.of(CAGraphEvent)
    ca_compiles = record.of(CACompileEvent)
    dynamo = record.of(DynamoCompileEvent)
    marked_steps = {e.step for e in (*ca_graphs, *ca_compiles, *dynamo) if e.step is not None}
    held = _held_step_spans(record, pid, offset_s, max_steps, marked_steps)
    if held is not None:
        spans, aggregated = held
        events.extend(spans)
        if aggregated is not None:
            events[0]["args"]["aggregated"] = aggregated
        _compile_spans(events, pid, offset_s, ca_graphs, ca_compiles, dynamo)
        _instants(events, pid, offset_s, record)
        return events
    c = step_columns(record)
    by_boundary = any(c.boundary)  # schema 2: a step ends at its boundary (record/schema.py)
    # Per step, in step order (stable, as the frame's sort was): the figures of `frames.steps_frame`.
    order = range(len(c.step)) if all(map(operator.le, c.step, c.step[1:])) else sorted(range(len(c.step)), key=c.step.__getitem__)
    touched = [bool(c.compiles[i] > 0 or c.ca_captures[i] > 0) for i in order]
    starts: list[float | None]
    durations: list[float | None]
    if by_boundary:
        # On the host clock: from the previous step's end to this one's (the first has no start).
        durations = [c.wall_s[i] for i in order]
        starts = [None if d is None or d != d else c.t[i] - d for i, d in zip(order, durations)]
        if order and starts[0] is None:
            first = _first_step_start(record, int(c.step[order[0]]), c.t[order[0]])
            if first is not None:
                starts[0], durations[0] = first, c.t[order[0]] - first
        affected = touched
    else:
        starts = [c.t[i] - c.backward_s[i] for i in order]
        durations = [following - current for current, following in zip(starts, starts[1:])] + ([None] if starts else [])  # type: ignore[operator]
        affected = [t or following for t, following in zip(touched, touched[1:] + [False])]
    drawn = list(range(len(order)))
    aggregated: dict[str, Any] | None = None
    if max_steps is not None and len(order) > max_steps:
        marked = [k for k, i in enumerate(order) if affected[k] or c.step[i] in marked_steps]
        drawn = downsample([d if s is not None else None for s, d in zip(starts, durations)], marked, max_steps)
    kept_steps = {c.step[order[k]] for k in drawn}
    recorded = set(c.step) if len(drawn) < len(order) else set()  # a backward or optimizer step outside them is always drawn
    for k in drawn:
        i = order[k]
        start, duration = starts[k], durations[k]
        if start is not None and duration is not None and duration == duration:  # not NaN: the last step has no following start
            args = {"step": int(c.step[i]), "compile_affected": affected[k], "loss": _num(c.loss[i])}
            if k == 0 and by_boundary and (c.wall_s[i] is None or c.wall_s[i] != c.wall_s[i]):
                args["measured_from"] = FIRST_STEP_FROM
            events.append(_span(f"step {int(c.step[i])}", TRACK_STEPS, pid, offset_s + start, float(duration), args))
    if len(drawn) < len(order):
        import numpy as np

        merged = _merged_spans(
            np.array([c.step[i] for i in order], dtype=np.int64),
            np.array([np.nan if v is None else v for v in starts], dtype=float),
            np.array([np.nan if v is None else v for v in durations], dtype=float),
            drawn, pid, offset_s,
        )
        events.extend(merged)
        aggregated = {"steps": len(order), "steps_drawn": len(drawn), "aggregated_spans": len(merged)}
    if by_boundary:
        b = _kind_columns(record, BackwardEvent, ("step", "index", "call", "ca_captures", "loss", "t", "backward_s"))
        left = 0
        for step, index, call, captures, loss, t, backward_s in zip(*b.values()):
            if aggregated is not None and step in recorded and step not in kept_steps:
                left += 1
                continue
            args = {"step": step, "index": index, "call": call, "ca_captures": captures, "loss": _num(loss)}
            events.append(_span(_backward_name(step, index), TRACK_BACKWARD, pid, offset_s + t - backward_s, backward_s, args))
        if aggregated is not None:
            aggregated["backward_spans_left_out"] = left
    else:
        for k in drawn:
            i = order[k]
            args = {"step": c.step[i], "ca_captures": c.ca_captures[i], "compiles": c.compiles[i], "compile_s": _step_compile_s(record, i), "loss": _num(c.loss[i])}
            events.append(_span(_backward_name(c.step[i], 0), TRACK_BACKWARD, pid, offset_s + c.t[i] - c.backward_s[i], c.backward_s[i], args))
    o = _kind_columns(record, OptimizerStepEvent, ("step", "t", "wall_s", "optimizer"))
    left = 0
    for step, t, wall_s, optimizer in zip(*o.values()):
        if aggregated is not None and step in recorded and step not in kept_steps:
            left += 1
            continue
        events.append(_span(optimizer or "optimizer.step", TRACK_OPTIMIZER, pid, offset_s + t - wall_s, wall_s, {"step": step}))
    if aggregated is not None:
        aggregated["optimizer_spans_left_out"] = left
        events[0]["args"]["aggregated"] = aggregated
    _compile_spans(events, pid, offset_s, ca_graphs, ca_compiles, dynamo)
    _instants(events, pid, offset_s, record)
    return events


FIRST_STEP_FROM = "its first compile, capture or backward (the forward before Dynamo started compiling is not seen)"


def _first_step_start(record: ModeRecord, step: int, end: float) -> float | None:
    """Where the first step starts, from what the record saw of it: the earliest start of a span
    stamped with it (a Dynamo compile of its forward, a CA capture, a backward call, an optimizer
    step). None when nothing of it was recorded before its end. The report's measurement
    (report.figures.metrics.first_step_time, what the charts show) when it has one for this step."""
    from cagtool.report.figures.metrics import first_step_time

    measured = first_step_time(record)
    if measured is not None and measured.step == step and measured.start_t <= end:
        return max(measured.start_t, 0.0)
    starts: list[float] = []
    b = _kind_columns(record, BackwardEvent, ("step", "t", "backward_s"))
    starts.extend(t - d for s, t, d in zip(*b.values()) if s == step)
    o = _kind_columns(record, OptimizerStepEvent, ("step", "t", "wall_s"))
    starts.extend(t - d for s, t, d in zip(*o.values()) if s == step)
    starts.extend(d.t - (d.entire_frame_compile_time_s or 0.0) for d in record.of(DynamoCompileEvent) if d.step == step)
    starts.extend(g.t - g.capture_s for g in record.of(CAGraphEvent) if g.step == step)
    starts = [s for s in starts if s == s and s <= end]
    return max(min(starts), 0.0) if starts else None


def _step_compile_s(record: ModeRecord, index: int) -> float:
    held = record.columns.get(StepEvent.kind)
    return held.column("compile_s")[index] if held is not None else record.of(StepEvent)[index].compile_s


def _merged_spans(steps: Any, starts: Any, durations: Any, drawn: list[int], pid: int, offset_s: float) -> list[dict[str, Any]]:
    """One span per stretch of steps between two drawn ones (arrays in step order, NaN where a step
    has no start or time), over the time those steps took: from the first one's start to the last
    one's end, with their count and mean, min and max time."""
    import numpy as np

    timed = np.flatnonzero(~np.isnan(starts) & ~np.isnan(durations))
    undrawn = timed[~np.isin(timed, np.asarray(drawn, dtype=np.int64))]
    if not undrawn.size:
        return []
    stretch = np.searchsorted(np.asarray(drawn, dtype=np.int64), undrawn)  # the stretch (gap between drawn steps) each lies in
    heads = np.flatnonzero(np.r_[True, stretch[1:] != stretch[:-1]])
    tails = np.r_[heads[1:], undrawn.size] - 1
    times = durations[undrawn]
    sums, lows, highs = (np.add.reduceat(times, heads), np.minimum.reduceat(times, heads), np.maximum.reduceat(times, heads))
    out: list[dict[str, Any]] = []
    for head, tail, total, low, high in zip(heads.tolist(), tails.tolist(), sums.tolist(), lows.tolist(), highs.tolist()):
        first_k, last_k = int(undrawn[head]), int(undrawn[tail])
        first, last, count = int(steps[first_k]), int(steps[last_k]), tail - head + 1
        begin = float(starts[first_k])
        end = float(starts[last_k]) + float(durations[last_k])
        args = {"first_step": first, "last_step": last, "steps": count, "mean_ms": round(1000 * total / count, 6),
                "min_ms": round(1000 * low, 6), "max_ms": round(1000 * high, 6), "aggregated": True}
        out.append(_span(f"steps {first}-{last} ({count})", TRACK_STEPS, pid, offset_s + begin, end - begin, args))
    return out


def _held_step_spans(record: ModeRecord, pid: int, offset_s: float, max_steps: int | None, marked_steps: set[int]) -> tuple[list[dict[str, Any]], dict[str, Any] | None] | None:
    """The step, backward and optimizer spans of a record whose steps it holds as arrays
    (`metrics.held_steps`), as `process_events` draws them, taken out of the arrays for the drawn
    steps only; None for any other record."""
    import numpy as np

    fast = held_steps(record)
    if fast is None:
        return None
    steps_held = record.columns[StepEvent.kind]
    t, loss = steps_held.numbers("t"), steps_held.numbers("loss")
    b = record.columns.get(BackwardEvent.kind)
    o = record.columns.get(OptimizerStepEvent.kind)
    if t is None or loss is None or b is None or o is None:
        return None
    backward = {name: b.numbers(name) for name in ("step", "index", "ca_captures", "loss", "t", "backward_s")}
    optimizer = {name: o.numbers(name) for name in ("step", "t", "wall_s")}
    if any(v is None for v in (*backward.values(), *optimizer.values())):
        return None
    durations = np.where(fast.wall_null, np.nan, fast.wall_s)
    starts = t[0] - durations
    if fast.count and np.isnan(durations[0]):
        first = _first_step_start(record, int(fast.step[0]), float(t[0][0]))
        if first is not None:
            starts[0], durations[0] = first, float(t[0][0]) - first
    drawn = list(range(fast.count))
    if max_steps is not None and fast.count > max_steps:
        marks = np.flatnonzero(fast.touched | np.isin(fast.step, np.array(sorted(marked_steps), dtype=np.int64)))
        drawn = downsample(np.where(np.isnan(starts), np.nan, durations), marks.tolist(), max_steps)
    picked = np.asarray(drawn, dtype=np.int64)
    loss_null = set(loss[1])
    events: list[dict[str, Any]] = []
    for k, step, start, duration, affected, value in zip(drawn, fast.step[picked].tolist(), starts[picked].tolist(), durations[picked].tolist(),
                                                        fast.touched[picked].tolist(), loss[0][picked].tolist()):
        if start == start and duration == duration:  # not NaN: the first step has no start
            args = {"step": int(step), "compile_affected": affected, "loss": None if k in loss_null else _num(value)}
            if k == 0 and fast.wall_null[0]:
                args["measured_from"] = FIRST_STEP_FROM
            events.append(_span(f"step {int(step)}", TRACK_STEPS, pid, offset_s + start, duration, args))
    aggregated: dict[str, Any] | None = None
    if len(drawn) < fast.count:
        merged = _merged_spans(fast.step, starts, durations, drawn, pid, offset_s)
        events.extend(merged)
        aggregated = {"steps": fast.count, "steps_drawn": len(drawn), "aggregated_spans": len(merged)}

    def shown(step_numbers: Any) -> Any:
        """Rows drawn: those of a drawn step, or of a step that never ended (always drawn)."""
        if aggregated is None:
            return np.arange(len(step_numbers))
        return np.flatnonzero(np.isin(step_numbers, fast.step[picked]) | ~np.isin(step_numbers, fast.step))

    rows = shown(backward["step"][0])  # type: ignore[index]
    calls = b.column("call")
    columns = [backward[name][0][rows].tolist() for name in ("step", "index", "ca_captures", "loss", "t", "backward_s")]  # type: ignore[index]
    loss_nulls = set(backward["loss"][1])  # type: ignore[index]
    for row, step, index, captures, value, end, backward_s in zip(rows.tolist(), *columns):
        args = {"step": step, "index": index, "call": calls[row], "ca_captures": captures, "loss": None if row in loss_nulls else _num(value)}
        args = {**args, "step": int(step), "index": int(index), "ca_captures": int(captures)}
        events.append(_span(_backward_name(step, index), TRACK_BACKWARD, pid, offset_s + end - backward_s, backward_s, args))
    if aggregated is not None:
        aggregated["backward_spans_left_out"] = b.count - len(rows)
    rows = shown(optimizer["step"][0])  # type: ignore[index]
    names = o.column("optimizer")
    for row, step, end, wall_s in zip(rows.tolist(), *(optimizer[name][0][rows].tolist() for name in ("step", "t", "wall_s"))):  # type: ignore[index]
        events.append(_span(names[row] or "optimizer.step", TRACK_OPTIMIZER, pid, offset_s + end - wall_s, wall_s, {"step": step}))
    if aggregated is not None:
        aggregated["optimizer_spans_left_out"] = o.count - len(rows)
    return events, aggregated


def _compile_spans(events: list[dict[str, Any]], pid: int, offset_s: float, ca_graphs: list[CAGraphEvent], ca_compiles: list[CACompileEvent], dynamo: list[DynamoCompileEvent]) -> None:
    """The CA capture, CA first call and Dynamo compile spans, every one (they are the markers)."""
    for g in ca_graphs:
        args = {"compile_id": g.compile_id, "step": g.step, "nodes": g.node_count, "hooks": len(g.hooks), "code_file": g.code_file}
        events.append(_span(f"CA capture {g.compile_id}", TRACK_CA_CAPTURE, pid, offset_s + g.t - g.capture_s, g.capture_s, args))
    for cc in ca_compiles:
        args = {"ca_id": cc.ca_id, "step": cc.step, "ok": cc.ok, "error": cc.error}
        events.append(_span(f"CA first call !{cc.ca_id}", TRACK_CA_COMPILE, pid, offset_s + cc.t - cc.first_call_s, cc.first_call_s, args))
    for d in dynamo:
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
            **phase_args(d.phase, d.compile_id, d.is_ca_graph),
        }
        # The function's name only when it is the user's: a compiled module's frame is torch's `inner`.
        label = f"Dynamo compile {d.compile_id}" + (f" {d.co_name}" if d.co_name and looks_like_user_file(d.co_filename) else "")
        if d.phase is not None and d.phase.phase == PHASE_CHECKPOINT_RECOMPUTE:
            label += " (checkpoint recompute)"
        events.append(_span(label, TRACK_DYNAMO, pid, offset_s + d.t - duration, duration, args))


def _where(ref: SourceRef | None) -> str | None:
    if ref is None:
        return None
    return f"{ref.file}:{ref.line}" + (f"  {ref.code}" if ref.code else "")


def _instants(events: list[dict[str, Any]], pid: int, offset_s: float, record: ModeRecord) -> None:
    """CA cache misses, Dynamo recompiles and graph breaks: one instant event each, when it was
    recorded, with torch's reason, the node and the user's line in its args."""
    for m in record.of(CacheMissEvent):
        args: dict[str, Any] = {"compile_id": m.compile_id, "step": m.step, "kind": m.miss_kind, "reason": m.message,
                                "node": m.node, "node_call": m.node_call, "source": _where(m.source or m.backward_call)}
        if m.changed_sizes:
            args["changed_sizes"] = [
                {"index": c.index, "before": c.previous, "after": c.value, "node": c.node} for c in m.changed_sizes
            ]
        if m.inferred:
            args["inferred"] = True
        events.append(_instant(f"CA cache miss {m.compile_id}", TRACK_CA_CAPTURE, pid, offset_s + m.t, args))
    for r in record.of(DynamoRecompileEvent):
        # The first failing guard, without the `0/0: ` of the cache entry it failed for.
        args = {"compile_id": r.compile_id, "step": r.step, "reason": strip_reason_id(r.reasons[0].strip()) if r.reasons else None,
                "reasons": list(r.reasons), "source": _where(r.source), **phase_args(r.phase, r.compile_id, r.is_ca_graph)}
        recompute = " (checkpoint recompute)" if r.phase is not None and r.phase.phase == PHASE_CHECKPOINT_RECOMPUTE else ""
        events.append(_instant(f"Dynamo recompile {r.compile_id}{recompute}", TRACK_DYNAMO, pid, offset_s + r.t, args))
    breaks = record.of(GraphBreakEvent)
    if breaks:
        from cagtool.torch_text import graph_break_words  # reads torch's registry: only when needed
    for g in breaks:
        where = f"{g.file}:{g.line}" if g.file else None
        words = graph_break_words(g.reason or "")
        # `reason`: what tells this break apart (torch's first line is the same for every CALL break).
        args = {"compile_id": g.compile_id, "step": g.step, "reason": words.headline, "gb_id": words.gb_id or None,
                "message": g.reason, "source": (f"{where}  {g.code}" if g.code else where) if where else None}
        events.append(_instant(f"graph break {g.compile_id}", TRACK_DYNAMO, pid, offset_s + g.t, args))


def _num(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None


def _has_steps(record: ModeRecord) -> bool:
    held = record.columns.get(StepEvent.kind)
    return bool(held.count) if held is not None else bool(record.of(StepEvent))


def perfetto_trace(run: RunRecord) -> dict[str, Any]:
    """The trace document: `traceEvents` plus what it was made from."""
    processes = trace_processes(run)
    starts = {p.pid: _started(p.record) for p in processes}
    # Each mode from time 0 of its own run; its processes (ranks) keep their offsets within it.
    origins: dict[str, float] = {}
    for proc in processes:
        start = starts[proc.pid]
        if start is not None:
            origins[proc.mode] = min(origins.get(proc.mode, start), start)
    events: list[dict[str, Any]] = []
    limit = steps_per_process(sum(1 for p in processes if _has_steps(p.record)))
    aggregated: dict[str, Any] = {}
    left_out: list[str] = []
    unplaceable: dict[str, int] = {}
    for proc in processes:
        start, origin = starts[proc.pid], origins.get(proc.mode)
        emitted = process_events(proc, (start - origin) if start is not None and origin is not None else 0.0, limit)
        if "aggregated" in emitted[0]["args"]:
            aggregated[proc.label] = emitted[0]["args"].pop("aggregated")
        if all(e["ph"] == "M" for e in emitted):
            left_out.append(proc.label)  # a launcher, or a process that ended before doing anything
            continue
        kept = [e for e in emitted if _finite_times(e)]
        if len(kept) != len(emitted):  # a damaged or forged record's NaN or infinite time: not drawn, counted
            unplaceable[proc.label] = len(emitted) - len(kept)
        events.extend(kept)
    other: dict[str, Any] = {}
    if aggregated:
        other["aggregated"] = {
            "note": (f"at most {limit:,} steps per process are drawn one by one: every step with a compile, CA capture or recompile, and the "
                     "fastest and slowest of each stretch; the steps between them are merged into one span per stretch "
                     "(args: steps, mean_ms, min_ms, max_ms), and their backward and optimizer spans are left out"),
            "processes": aggregated,
        }
    other.update(_long_job_data(run))
    if unplaceable:
        other["events_without_a_finite_time"] = {"note": "events whose time or duration in the record is NaN or infinite: left out",
                                                 "processes": unplaceable}
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "format": TRACE_FORMAT,
            "run": str(run.path),
            "target": run.meta.target.get("name", ""),
            "time_origins": {mode: datetime.fromtimestamp(t).astimezone().isoformat() for mode, t in origins.items()},
            "time_origin_note": "each mode's times start at 0 when that mode started (time_origins); the modes ran one after another",
            "torch": run.meta.versions.get("torch", ""),
            **other,
            **({"processes_left_out": left_out} if left_out else {}),
        },
    }


def _long_job_data(run: RunRecord) -> dict[str, Any]:
    """What the trace's metadata (Perfetto's "Info and stats", otherData) carries beside the
    timeline: each mode's recompile budget with its forecast in words, the recompiles from causes a
    user does not expect (a thread count, train/eval, grad mode) with the line that changed them,
    and `cagtool checkpointing`'s measured saving when it was made."""
    from cagtool.report.checkpointing import checkpointing_lines, load_checkpointing
    from cagtool.report.recompiles.budget import budget_of
    from cagtool.report.recompiles.budget_words import budget_json, budget_lines
    from cagtool.report.recompiles.unexpected import unexpected_causes, unexpected_json, unexpected_lines

    cwd = run.meta.cwd or ""
    budgets, unexpected = {}, {}
    for name, record in run.modes.items():
        budget = budget_of(record)
        budgets[name] = {**(budget_json(budget, cwd) or {}), "words": budget_lines(budget, cwd)}
        causes = unexpected_causes(record)
        if causes:
            unexpected[name] = {"causes": unexpected_json(causes, cwd), "words": [line.strip() for line in unexpected_lines(causes, cwd)]}
    out: dict[str, Any] = {"recompile_budget": budgets} if budgets else {}
    if unexpected:
        out["unexpected_causes"] = unexpected
    measured = load_checkpointing(run.path)
    if measured is not None:
        out["checkpointing"] = {"words": checkpointing_lines(measured), "measured": measured}
    return out


def _finite_times(event: dict[str, Any]) -> bool:
    """Whether the event's time and duration are finite numbers (a trace's JSON has no NaN)."""
    return all(math.isfinite(event[key]) for key in ("ts", "dur") if isinstance(event.get(key), float))


def write_trace(run: RunRecord, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(perfetto_trace(run), allow_nan=False, default=str) + "\n")
    return path
