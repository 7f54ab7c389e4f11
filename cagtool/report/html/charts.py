"""The report's charts as Vega-Lite specs, written as plain dicts, from the figures cagtool
already has (the compile-phase chart is the JSON altair built for it, key for key:
tests/report/html/test_chart_specs.py compares the two where altair is installed).

Two charts: step time per step of several records (every mode of a run; one chart per rank of a
multi-rank run, or per mode of a before/after page, all on the same `Axes`), with the first step
timed from its first compile, compile-affected steps ringed and one marker per CA cache miss,
Dynamo recompile and graph break in its record's lane; and compile time by phase, modes side by
side. The step rows are the figures of `frames.steps_frame` (read from the record's step columns,
without pandas) plus `metrics.first_step_time`, the markers come from
`recompiles.table.recompile_table` (the figures `compare` and `recompiles` print), the phases from
`compare.analysis.ModeColumn`; nothing is computed again here. Neither pandas nor altair is
imported: together they cost `cagtool run`'s end-of-run report about 0.9 s of a 15 s job.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import GraphBreakEvent, StepEvent
from cagtool.report.figures.downsample import downsample
from cagtool.report.html.vega_bundle import VEGALITE_SCHEMA
from cagtool.report.figures.metrics import (
    FIRST_STEP_FROM_BACKWARD,
    FIRST_STEP_FROM_COMPILE,
    device_step_seconds,
    first_step_time,
    held_steps,
    step_columns,
    step_field,
)
from cagtool.report.recompiles.render import detail_cell
from cagtool.report.recompiles.reads import display_path, format_source, forward_step
from cagtool.report.recompiles.table import SOURCE_CA, SOURCE_DYNAMO_CA_GRAPH, RecompileTable, guard_text, node_label

# Marker kinds, in legend order, with their shapes and colours (fixed, so every report reads alike).
MARKER_CA_FIRST = "CA first capture"
MARKER_CA_MISS = "CA cache miss"
MARKER_DYNAMO = "Dynamo recompile"
MARKER_DYNAMO_CA = "Dynamo recompile (CA graph)"
MARKER_BREAK = "graph break"
_MARKERS = (
    (MARKER_CA_FIRST, "circle", "#7f7f7f"),
    (MARKER_CA_MISS, "triangle-down", "#d62728"),
    (MARKER_DYNAMO, "diamond", "#9467bd"),
    (MARKER_DYNAMO_CA, "square", "#8c564b"),
    (MARKER_BREAK, "cross", "#ff7f0e"),
)

# Vega-Lite's mark names become CSS classes of the SVG groups: the browser tests find marks by them.
STEP_MARKS = "step_points"
AFFECTED_MARKS = "compile_affected"
EVENT_MARKS = "event_markers"
PHASE_MARKS = "phase_bars"

# The labels say how torch's cumulative phase times nest (figures/compile_phases.py): a bar is
# never read as a part that adds up with the others.
PHASE_LABELS = {"dynamo": "Dynamo (holds AOT)", "aot": "AOTAutograd (in Dynamo)", "inductor": "Inductor (in AOT)", "ca_capture": "CA capture", "backward": "AOT backward (at its first call)"}


@dataclass(frozen=True)
class Series:
    """One line of a timeline: a mode record (a repetition, a rank) under its legend label."""

    label: str
    record: ModeRecord
    table: RecompileTable | None = None  # its recompiles, for the markers
    lane: str = ""  # the row its markers are drawn in along the top ("": its label), named on the right


def lane_of(series: Series) -> str:
    return series.lane or series.label


def step_rows(series: Sequence[Series]) -> list[dict[str, Any]]:
    """One row per recorded step of each series, in step order: iteration time, backward time,
    loss, compile-affected flag (the figures of `frames.steps_frame`, computed the same way)."""
    rows: list[dict[str, Any]] = []
    for s in series:
        own = [_step_row(s.label, figures) for figures in step_figures(s.record)]
        rows.extend(with_first_step(own, s.record))
    return rows


# The tooltip's word for how the first step was timed (`metrics.FirstStepTime.measured_from`).
FIRST_STEP_TIMED_FROM = {
    FIRST_STEP_FROM_COMPILE: "the start of its first compile (no step ended before it)",
    FIRST_STEP_FROM_BACKWARD: "the start of its first backward call (no step ended before it; its forward is not visible)",
}


TIMED_FROM_PREVIOUS_END = "the previous step's end"
TIMED_FROM_BACKWARD_STARTS = "its backward's start to the next step's (schema 1 record)"


def with_first_step(rows: list[dict[str, Any]], record: ModeRecord) -> list[dict[str, Any]]:
    """`rows` (one series' step rows) with what each is timed from, and the run's first step timed (`metrics.first_step_time`)
    when it compiled: the step that holds the compiles has no step before it to be timed from, and
    is the one a reader most needs to see. It stays ringed as compile-affected and out of every
    steady-state figure. A first step that compiled nothing is left untimed: what the recorder sees
    of it (from its first backward call) leaves its forward out and would read as a fast step."""
    every = TIMED_FROM_PREVIOUS_END if any(step_field(record, "boundary")) else TIMED_FROM_BACKWARD_STARTS
    for row in rows:
        row["timed_from"] = every
    first = first_step_time(record)
    if first is None or not first.compile_affected:
        return rows
    for row in rows:
        if row["step"] == first.step and row["iteration_ms"] is None:
            row["iteration_ms"] = _ms(first.seconds)
            row["timed_from"] = FIRST_STEP_TIMED_FROM[first.measured_from]
    return rows


def _step_row(label: str, figures: tuple[int, float | None, float, float | None, bool, int, int, float]) -> dict[str, Any]:
    step, iteration_s, backward_s, loss, affected, compiles, captures, compile_s = figures
    return {
        "series": label,
        "step": step,
        "iteration_ms": _ms(iteration_s),
        "backward_ms": _ms(backward_s),
        "loss": _float(loss),
        "compile_affected": affected,
        "compiles": compiles,
        "ca_captures": captures,
        "compile_ms": _ms(compile_s),
        "timed_from": None,
    }


def step_figures(record: ModeRecord) -> list[tuple[int, float | None, float, float | None, bool, int, int, float]]:
    """Per step, in step order: (step, iteration_s, backward_s, loss, compile_affected, compiles,
    ca_captures, compile_s), as `frames.steps_frame` defines them. `iteration_s`: schema 2, the
    step's device time when the job ran on CUDA, else its wall time since the previous step ended
    (None for the first); schema 1, from this step's backward start to the next one's (None for
    the last), compile-affected when either step compiled. Read from the record's step columns
    (its sidecar, when the loader used it), so no pandas and no event per step."""
    c = step_columns(record)
    held = record.columns.get(StepEvent.kind)
    compile_s = held.column("compile_s") if held is not None else [e.compile_s for e in record.of(StepEvent)]
    order = sorted(range(len(c.step)), key=c.step.__getitem__)  # stable, as the frame's sort was for these
    touched = [bool(c.compiles[i] > 0 or c.ca_captures[i] > 0) for i in order]
    if any(b for b in c.boundary if b is not None):
        device = device_step_seconds(record)
        iteration = [_device_or_wall(device.get(c.step[i]), c.wall_s[i]) for i in order]
        affected = touched
    else:
        start = [c.t[i] - c.backward_s[i] for i in order]
        iteration = [following - current for current, following in zip(start, start[1:])] + ([None] if start else [])
        affected = [t or following for t, following in zip(touched, touched[1:] + [False])]
    return [
        (int(c.step[i]), iteration[k], c.backward_s[i], c.loss[i], affected[k], int(c.compiles[i]), int(c.ca_captures[i]), compile_s[i])
        for k, i in enumerate(order)
    ]


def _device_or_wall(device_s: float | None, wall_s: float | None) -> float | None:
    if device_s is not None and device_s == device_s:  # not NaN
        return device_s
    return wall_s


# A long run's timeline is drawn from a bounded number of points per line (about 200 bytes each in
# the page): at most MAX_POINTS_PER_SERIES, and at most MAX_POINTS_PER_CHART over all the lines of
# the page's step-time charts (a chart per rank of 8 ranks of 100,000 steps stays a few hundred
# kB: `drawn_step_rows`' `lines`), never fewer than
# MIN_POINTS_PER_SERIES. The figures (medians, percentiles) come from every step; only the drawing
# is thinned, and every step that carries a marker stays (see `downsample`).
MAX_POINTS_PER_SERIES = 2500
MAX_POINTS_PER_CHART = 4000
MIN_POINTS_PER_SERIES = 300


def points_per_series(series_count: int) -> int:
    """How many points each of `series_count` lines of one chart may draw."""
    return min(MAX_POINTS_PER_SERIES, max(MIN_POINTS_PER_SERIES, MAX_POINTS_PER_CHART // max(series_count, 1)))


def thin_steps(rows: list[dict[str, Any]], limit: int = MAX_POINTS_PER_SERIES, marked_steps: Iterable[tuple[str, int]] = ()) -> tuple[list[dict[str, Any]], int]:
    """(the rows to draw, how many were left out): `downsample` of each series' `iteration_ms`,
    keeping its compile-affected rows and the (series, step) pairs in `marked_steps`."""
    marks = set(marked_steps)
    by_series: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_series.setdefault(row["series"], []).append(row)
    kept: list[dict[str, Any]] = []
    dropped = 0
    for label, series_rows in by_series.items():
        marked = [i for i, r in enumerate(series_rows) if r["compile_affected"] or (label, r["step"]) in marks]
        chosen = [series_rows[i] for i in downsample([r.get("iteration_ms") for r in series_rows], marked, limit)]
        dropped += len(series_rows) - len(chosen)
        kept.extend(chosen)
    return kept, dropped


def drawn_step_rows(series: Sequence[Series], markers: Sequence[dict[str, Any]] = (), lines: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """`thin_steps(step_rows(series), ...)` with the per-line budget of `lines` lines (the page's
    charts together: a multi-rank run draws a chart per rank; default: these series alone) and the
    steps of `markers` kept, without building a row for a step that is not drawn (a
    100,000-step record builds a few hundred)."""
    limit = points_per_series(lines or len(series))
    marks = {(m["series"], m["step"]) for m in markers}
    rows: list[dict[str, Any]] = []
    dropped = 0
    for s in series:
        held = _held_rows(s, marks, limit)
        if held is not None:
            rows.extend(with_first_step(held[0], s.record))
            dropped += held[1]
            continue
        figures = step_figures(s.record)
        marked = [i for i, f in enumerate(figures) if f[4] or (s.label, f[0]) in marks]
        chosen = downsample([f[1] for f in figures], marked, limit)
        dropped += len(figures) - len(chosen)
        rows.extend(with_first_step([_step_row(s.label, figures[i]) for i in chosen], s.record))
    return rows, dropped


def _held_rows(s: Series, marks: set[tuple[str, int]], limit: int) -> tuple[list[dict[str, Any]], int] | None:
    """`drawn_step_rows` of one series whose steps the record holds as arrays (`held_steps`):
    the same rows, with the figures of the drawn steps only taken out of the arrays."""
    import numpy as np

    fast = held_steps(s.record)
    if fast is None:
        return None
    held = s.record.columns[StepEvent.kind]
    columns = {name: held.numbers(name) for name in ("backward_s", "loss", "compiles", "ca_captures", "compile_s")}
    if any(found is None for found in columns.values()):
        return None
    iteration = np.where(fast.wall_null, np.nan, fast.wall_s)
    marked_steps = np.array(sorted(step for label, step in marks if label == s.label), dtype=np.int64)
    marked = set(np.flatnonzero(fast.touched).tolist()) | set(np.flatnonzero(np.isin(fast.step, marked_steps)).tolist())
    chosen = downsample(iteration, marked, limit)
    picked = np.array(chosen, dtype=np.int64)

    def values(name: str) -> list[Any]:
        array, nulls = columns[name]  # type: ignore[misc]
        out = array[picked].tolist()
        if nulls:
            null = set(nulls)
            out = [None if i in null else v for i, v in zip(chosen, out)]
        return out

    wall = [None if null else value for null, value in zip(fast.wall_null[picked].tolist(), fast.wall_s[picked].tolist())]
    figures = zip(fast.step[picked].tolist(), wall, values("backward_s"), values("loss"), fast.touched[picked].tolist(),
                  values("compiles"), values("ca_captures"), values("compile_s"))
    return [_step_row(s.label, f) for f in figures], fast.count - len(chosen)  # type: ignore[arg-type]


def _phase_words(table: Any, row: Any) -> str:
    """The phase the compile ran in (report/recompiles/phases.py), for the marker's tooltip."""
    phases = getattr(table, "phases", None)
    found = phases.of(row.produced or row.compile_id) if phases is not None else None
    return found.words() if found is not None else ""


def marker_rows(series: Sequence[Series]) -> list[dict[str, Any]]:
    """One row per CA capture, Dynamo recompile and graph break of each series: its kind, step,
    compile id, torch's reason verbatim, the autograd node and the user's source line."""
    rows: list[dict[str, Any]] = []
    for s in series:
        cwd = s.record.manifest.cwd
        if s.table is not None:
            for row in s.table.rows:
                if row.source == SOURCE_CA:
                    kind = MARKER_CA_FIRST if row.initial else MARKER_CA_MISS
                else:
                    kind = MARKER_DYNAMO_CA if row.source == SOURCE_DYNAMO_CA_GRAPH else MARKER_DYNAMO
                reason = row.messages[0] if row.messages else "(no reason recorded)"
                if row.source != SOURCE_CA and row.messages:
                    # The failing guard, without the `0/0: ` of the cache entry it failed for
                    # (the recompile's own id is the tooltip's compile id).
                    reason = guard_text(row.messages[0]) or reason
                rows.append(
                    {
                        "series": s.label,
                        "lane": lane_of(s),
                        "kind": kind,
                        "step": row.step,
                        "compile_id": row.compile_id,
                        "what": detail_cell(row),
                        "reason": reason,
                        "node": node_label(row.node, row.node_call),
                        "source": format_source(row.user_source, cwd),
                        "phase": _phase_words(s.table, row),
                    }
                )
        breaks = s.record.of(GraphBreakEvent)
        if breaks:
            from cagtool.torch_text import graph_break_words  # reads torch's registry: only when needed
        for event in breaks:
            where = f"{display_path(event.file, cwd)}:{event.line}" if event.file else ""
            # Torch's first line is the same for every break of an instruction kind ("Encountered
            # graph break when attempting to trace CALL..."): the tooltip shows what tells this one
            # apart, as the text summary does, and torch's first hint.
            words = graph_break_words(event.reason or "")
            gb = f"[{words.gb_id}] " if words.gb_id else ""
            rows.append(
                {
                    "series": s.label,
                    "lane": lane_of(s),
                    "kind": MARKER_BREAK,
                    # Breaks happen while tracing a forward frame, before its step's backward.
                    "step": forward_step(event.step),
                    "compile_id": event.compile_id,
                    "what": f"hint: {words.advice}" if words.advice else "",
                    "reason": f"{gb}{words.headline}",
                    "node": "",
                    "source": f"{where}  {event.code.strip()}".strip() if where else event.code.strip(),
                    "phase": "",
                }
            )
    return [r for r in rows if r["step"] is not None]


# Pixels of the plot: its height, and the marker lanes along its top (one per lane, LANE_PX apart).
TIMELINE_HEIGHT = 240
LANE_TOP_PX = 8
LANE_PX = 12
KIND_SHIFT_PX = 7  # between two kinds' symbols at one step in one lane (5 kinds: 14 px either side)
# A step-time axis is logarithmic when its largest value is more than this many times its smallest
# (a compile step is often 1,000x a steady one); linear, from 0, otherwise.
LOG_ABOVE_RATIO = 10.0
# Series colours, in order: fixed by the series' place in `Axes.series`, so a mode keeps its colour
# across a page's charts; none is a marker kind's colour (no orange, red, purple or grey).
_PALETTE = ("#4c78a8", "#54a24b", "#72b7b2", "#e0ac2b", "#b279a2", "#ff9da6", "#1f4e79", "#88d27a", "#9d7660", "#439894")

@dataclass(frozen=True)
class Axes:
    """What the timelines drawn side by side share, so that they read alike: the step range, the
    step-time scale (log or linear) and its domain, the series' colours, the marker lanes and the
    marker kinds in the legends (only those that occur). `shared_axes` computes it from every
    chart's rows."""

    steps: tuple[int, int]  # first and last step drawn
    log: bool
    time_ms: tuple[float, float]  # the step-time domain, room for the marker lanes above the data
    series: tuple[str, ...]  # every series label, in colour order
    lanes: tuple[str, ...]  # the marker lanes that hold a marker, top first
    kinds: tuple[str, ...]  # the marker kinds that occur, in legend order


def shared_axes(steps: Sequence[dict[str, Any]], markers: Sequence[dict[str, Any]], series: Sequence[str], lanes: Sequence[str]) -> Axes:
    """One `Axes` for all the charts of `steps` and `markers` (the rows of every chart), with the
    series and lanes in the order given."""
    numbers = [r["step"] for r in steps if r.get("iteration_ms")] + [m["step"] for m in markers]
    first, last = (min(numbers), max(numbers)) if numbers else (0, 1)
    if last <= first:
        last = first + 1  # one step: a range the axis can draw, with integer ends
    times = [r["iteration_ms"] for r in steps if r.get("iteration_ms") and r["iteration_ms"] > 0]
    used_lanes = [lane for lane in dict.fromkeys(lanes) if any(m["lane"] == lane for m in markers)]
    band = LANE_TOP_PX + LANE_PX * len(used_lanes) if used_lanes else 0
    # The data stay below the lanes: the domain's top is where the largest time would sit `band`
    # pixels lower (the axis is bound: Vega would otherwise round it to a nice value).
    share = TIMELINE_HEIGHT / (TIMELINE_HEIGHT - band)
    low, high = (min(times), max(times)) if times else (1.0, 10.0)
    log = high > low * LOG_ABOVE_RATIO
    if log:
        bottom, top = math.log10(low / 1.25), math.log10(high * 1.25)
        domain = (10 ** bottom, 10 ** (bottom + (top - bottom) * share))
    else:
        domain = (0.0, high * 1.1 * share)
    kinds = tuple(k for k, _, _ in _MARKERS if any(m["kind"] == k for m in markers))
    return Axes((int(first), int(last)), log, domain, tuple(dict.fromkeys(series)), tuple(used_lanes), kinds)


def timeline_spec(title: str, steps: list[dict[str, Any]], markers: list[dict[str, Any]], axes: Axes | None = None) -> dict[str, Any]:
    """Step time per step, a line and a point per step of each series, on `axes` (shared with the
    charts beside it; computed from these rows alone when None); compile-affected steps ringed;
    each marker a rule at its step with a symbol in its series' lane along the top, whose tooltip
    holds the reason. Drag to pan, wheel to zoom the steps."""
    if axes is None:
        axes = shared_axes(steps, markers, [r["series"] for r in steps], [m["lane"] for m in markers])
    step_data = _dataset(steps, _STEP_COLUMNS)
    # Steps are whole numbers: ticks between them (a zoomed axis has some) carry no label.
    x = {
        "axis": {"labelExpr": "datum.value % 1 ? '' : datum.label", "tickMinStep": 1, "format": "d"},
        "field": "step",
        "scale": {"domain": list(axes.steps), "nice": False, "padding": 2 * KIND_SHIFT_PX + 4},  # room for the shifted symbols
        "title": "step",
        "type": "quantitative",
    }
    y_scale: dict[str, Any] = {"domain": list(axes.time_ms), "nice": False}
    y_axis: dict[str, Any] = {"format": "~g"}
    if axes.log:
        y_scale["type"] = "log"
        y_axis["values"] = _log_ticks(*axes.time_ms)
    y = {"axis": y_axis, "field": "iteration_ms", "scale": y_scale, "title": "step time (ms, log)" if axes.log else "step time (ms)", "type": "quantitative"}
    # The legends name what this chart draws; the scales (colours, lanes) are the page's.
    present = [label for label in axes.series if any(r["series"] == label for r in steps)]
    colours = {"domain": list(axes.series), "range": [_PALETTE[i % len(_PALETTE)] for i in range(len(axes.series))]}
    tooltip = [
        _tooltip("series", "nominal", title="record"),
        _tooltip("step", "quantitative"),
        _tooltip("iteration_ms", "quantitative", ".3f", "step time (ms)"),
        _tooltip("timed_from", "nominal", title="timed from"),
        _tooltip("backward_ms", "quantitative", ".3f", "backward calls (ms)"),
        _tooltip("compile_affected", "nominal", title="left out of the steady figures"),
        _tooltip("compiles", "quantitative"),
        _tooltip("ca_captures", "quantitative", title="CA captures"),
        _tooltip("compile_ms", "quantitative", ".1f", "compile (ms)"),
        _tooltip("loss", "quantitative", ".6g"),
    ]
    valid = {"filter": "isValid(datum.iteration_ms) && datum.iteration_ms > 0"}
    line = {
        "data": {"name": step_data[0]},
        "mark": {"type": "line", "opacity": 0.6, "clip": True},
        "encoding": {"color": {"field": "series", "legend": None, "scale": colours, "type": "nominal"}, "x": x, "y": y},
        "name": STEP_LINE_VIEW,
        "transform": [valid],
    }
    points = {
        "data": {"name": step_data[0]},
        "mark": {"type": "point", "filled": True, "size": 30, "clip": True},
        "encoding": {"color": {"field": "series", "legend": {"orient": "top", "values": present}, "scale": colours, "title": "record", "type": "nominal"}, "tooltip": tooltip, "x": x, "y": y},
        "name": STEP_MARKS,
        "transform": [valid],
    }
    layers = [line, points]
    if any(row["compile_affected"] and row["iteration_ms"] for row in steps):
        # An empty layer only draws Vega warnings about empty extents.
        layers.append(
            {
                "data": {"name": step_data[0]},
                "mark": {"type": "point", "color": "#d62728", "filled": False, "size": 160, "strokeWidth": 1.5, "clip": True},
                "encoding": {"tooltip": tooltip, "x": x, "y": y},
                "name": AFFECTED_MARKS,
                "transform": [valid, {"filter": "datum.compile_affected"}],
            }
        )
    datasets = dict([step_data])
    if markers:
        marker_data = _dataset(markers, _MARKER_COLUMNS)
        datasets[marker_data[0]] = marker_data[1]
        shapes = {k: s for k, s, _ in _MARKERS}
        kinds_here = [k for k in axes.kinds if any(m["kind"] == k for m in markers)]
        kind_colours = {"domain": list(axes.kinds), "range": [c for k, _, c in _MARKERS if k in axes.kinds]}
        marker_tooltip = [
            _tooltip("kind", "nominal", title="event"),
            _tooltip("series", "nominal", title="record"),
            _tooltip("step", "quantitative"),
            _tooltip("compile_id", "nominal", title="compile id"),
            _tooltip("reason", "nominal"),
            _tooltip("what", "nominal", title="what changed"),
            _tooltip("node", "nominal", title="autograd node"),
            _tooltip("source", "nominal", title="source line"),
            _tooltip("phase", "nominal", title="phase"),
        ]
        rules = {
            "data": {"name": marker_data[0]},
            "mark": {"type": "rule", "opacity": 0.5, "strokeDash": [3, 3], "clip": True},
            "encoding": {"color": {"field": "kind", "legend": None, "scale": kind_colours, "type": "nominal"}, "x": x},
        }
        # Each series has its own lane along the top, named on the right, so A's and B's (or two
        # modes') markers at one step stay apart; within a lane, the kind is the symbol and colour.
        last_lane = LANE_TOP_PX + LANE_PX * max(len(axes.lanes) - 1, 0)
        symbols = {
            "data": {"name": marker_data[0]},
            "mark": {"type": "point", "filled": True, "opacity": 0.9, "size": 80, "clip": True},
            "encoding": {
                "color": {"field": "kind", "legend": {"orient": "top", "values": kinds_here}, "scale": kind_colours, "title": "event", "type": "nominal"},
                "shape": {"field": "kind", "legend": None, "scale": {"domain": list(axes.kinds), "range": [shapes[k] for k in axes.kinds]}, "type": "nominal"},
                "tooltip": marker_tooltip,
                "x": x,
                "y": {
                    "axis": {"orient": "right", "title": None, "domain": False, "ticks": False, "labelFontSize": 10, "labelColor": "#555"},
                    "field": "lane",
                    "scale": {"type": "point", "domain": list(axes.lanes), "range": [LANE_TOP_PX, last_lane], "padding": 0},
                    "type": "nominal",
                },
            },
            "name": EVENT_MARKS,
        }
        # Within a lane, kinds that meet at one step (a capture and a break in the first step) sit
        # side by side: a layer per kind, each shifted a few pixels (the rule marks the step).
        per_kind = []
        for i, kind in enumerate(kinds_here):
            layer = json.loads(json.dumps(symbols))
            layer["encoding"]["xOffset"] = {"value": round((i - (len(kinds_here) - 1) / 2) * KIND_SHIFT_PX, 1)}
            layer["transform"] = [{"filter": {"field": "kind", "equal": kind}}]
            if i:  # the same axis and legend in every layer: Vega-Lite draws them once
                layer["name"] = f"{EVENT_MARKS}_{i}"
            per_kind.append(layer)
        symbols = per_kind[0] if len(per_kind) == 1 else {"layer": per_kind}
        # The symbols' lanes are a y scale of their own (independent): the step layers, nested,
        # share the step-time one and its one axis on the left.
        layers = [{"layer": layers + [rules], "resolve": {"scale": {"color": "independent"}}}, symbols]
    # Colour scales are per layer: records for the steps, event kinds for the markers. The points'
    # legend stands for the line too (same field, same domain, so the same colours).
    spec: dict[str, Any] = {"config": _CONFIG, "layer": layers}
    if len(datasets) == 1:  # one dataset for every layer: named once, at the top
        for layer in layers:
            del layer["data"]
        spec["data"] = {"name": step_data[0]}
    resolve = {"color": "independent", "y": "independent"} if markers else {"color": "independent"}
    return {
        **spec,
        "height": TIMELINE_HEIGHT,
        "params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales", "views": [STEP_LINE_VIEW]}],
        "resolve": {"scale": resolve},
        "title": title,
        "width": "container",
        "$schema": VEGALITE_SCHEMA,
        "datasets": datasets,
    }


def _log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten within [low, high] (with 2 and 5 between them when fewer than three fit): a
    log axis left to itself labels every 1-9 multiple when its domain is not rounded. No ticks where
    the domain is not a finite, positive range (a damaged record's time): the axis labels itself."""
    if not (0 < low <= high < math.inf):
        return []
    first, last = math.ceil(math.log10(low)), math.floor(math.log10(high))
    ticks = [10.0 ** k for k in range(first, last + 1)]
    if len(ticks) < 3:
        ticks = sorted(v for k in range(first - 1, last + 1) for v in (10.0 ** k, 2 * 10.0 ** k, 5 * 10.0 ** k) if low <= v <= high)
    return [float(f"{t:.12g}") for t in ticks]


def compile_phase_spec(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Compile seconds by phase, one group of bars per mode (grouped, not stacked: torch's
    cumulative phase times nest, so stacking them would add time twice)."""
    name, values = _dataset(rows, ("mode", "phase", "seconds"))
    phases = list(dict.fromkeys(r["phase"] for r in rows))
    return {
        "config": _CONFIG,
        "data": {"name": name},
        "mark": {"type": "bar"},
        "encoding": {
            "color": {"field": "phase", "legend": {"orient": "top", "title": None}, "sort": phases, "type": "nominal"},
            "tooltip": [_tooltip("mode", "nominal"), _tooltip("phase", "nominal"), _tooltip("seconds", "quantitative", ".3f")],
            # Vega's default is a tick per 40 px: ~30 crowded labels across a wide page.
            "x": {"axis": {"tickCount": 8}, "field": "seconds", "title": "compile time (s)", "type": "quantitative"},
            "y": {"field": "mode", "sort": None, "title": None, "type": "nominal"},
            "yOffset": {"field": "phase", "sort": phases, "type": "nominal"},
        },
        "height": max(60, 12 * len(rows)),
        "name": PHASE_MARKS,
        "title": "Compile time by phase",
        "width": "container",
        "$schema": VEGALITE_SCHEMA,
        "datasets": {name: values},
    }


# The view the zoom parameter binds to (altair named it after a hash of the layer; any name
# unique in the spec does).
STEP_LINE_VIEW = "view_step_line"
_CONFIG = {"view": {"continuousWidth": 300, "continuousHeight": 300}}


def _tooltip(field: str, kind: str, fmt: str | None = None, title: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"field": field}
    if fmt is not None:
        out["format"] = fmt
    if title is not None:
        out["title"] = title
    out["type"] = kind
    return out


def _dataset(rows: list[dict[str, Any]], columns: Sequence[str]) -> tuple[str, list[dict[str, Any]]]:
    """(name, values) of an inline dataset, as altair made them from a DataFrame of `rows`: the
    columns in order, values as pandas typed the column (a numeric column holding a float or a
    gap is all floats; NaN and infinities are null), named after a hash of the values."""
    values = [{c: row.get(c) for c in columns} for row in rows]
    for column in columns:
        present = [row[column] for row in values if row[column] is not None]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)
        if numeric and present and (len(present) < len(values) or any(isinstance(v, float) for v in present)):
            for row in values:
                v = row[column]
                row[column] = None if v is None or not math.isfinite(v) else float(v)
        elif not numeric:
            for row in values:
                v = row[column]
                if isinstance(v, float) and v != v:
                    row[column] = None
    digest = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:32]
    return "data-" + digest, values


_STEP_COLUMNS = ("series", "step", "iteration_ms", "backward_ms", "loss", "compile_affected", "compiles", "ca_captures", "compile_ms", "timed_from")
_MARKER_COLUMNS = ("series", "lane", "kind", "step", "compile_id", "what", "reason", "node", "source", "phase")


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN -> None


def _ms(seconds: Any) -> float | None:
    value = _float(seconds)
    return None if value is None else value * 1000.0
