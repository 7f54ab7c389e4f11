"""The report's charts as Vega-Lite specs, written as plain dicts (the JSON altair wrote for
them before, key for key: tests/report/html/test_html_pieces.py compares the two where altair is
installed), from the figures cagtool already has.

Two charts: the step-time timeline of one mode (a line per record: repetitions and ranks), with
compile-affected steps ringed and one marker per CA cache miss, Dynamo recompile and graph break;
and compile time by phase, modes side by side. The step rows are the figures of `frames.steps_frame`
(read from the record's step columns, without pandas), the markers come from
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
from cagtool.record.schema import GraphBreakEvent, StepEvent, stamps_step_in_progress
from cagtool.report.downsample import downsample
from cagtool.report.html.vega_bundle import VEGALITE_SCHEMA
from cagtool.report.metrics import device_step_seconds, held_steps, step_columns
from cagtool.report.recompiles.render import detail_cell
from cagtool.report.recompiles.table import (
    SOURCE_CA,
    SOURCE_DYNAMO_CA_GRAPH,
    RecompileTable,
    display_path,
    format_source,
    forward_step,
    node_label,
)

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

PHASE_LABELS = {"dynamo": "Dynamo", "aot": "AOTAutograd", "inductor": "Inductor", "ca_capture": "CA capture"}


@dataclass(frozen=True)
class Series:
    """One line of a timeline: a mode record (a repetition, a rank) under its legend label."""

    label: str
    record: ModeRecord
    table: RecompileTable | None = None  # its recompiles, for the markers


def step_rows(series: Sequence[Series]) -> list[dict[str, Any]]:
    """One row per recorded step of each series, in step order: iteration time, backward time,
    loss, compile-affected flag (the figures of `frames.steps_frame`, computed the same way)."""
    return [_step_row(s.label, figures) for s in series for figures in step_figures(s.record)]


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
# one chart (8 ranks of 100,000 steps each stay a few hundred kB), never fewer than
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


def drawn_step_rows(series: Sequence[Series], markers: Sequence[dict[str, Any]] = ()) -> tuple[list[dict[str, Any]], int]:
    """`thin_steps(step_rows(series), ...)` with the chart's per-line budget and the steps of
    `markers` kept, without building a row for a step that is not drawn (a 100,000-step record
    builds a few hundred)."""
    limit = points_per_series(len(series))
    marks = {(m["series"], m["step"]) for m in markers}
    rows: list[dict[str, Any]] = []
    dropped = 0
    for s in series:
        held = _held_rows(s, marks, limit)
        if held is not None:
            rows.extend(held[0])
            dropped += held[1]
            continue
        figures = step_figures(s.record)
        marked = [i for i, f in enumerate(figures) if f[4] or (s.label, f[0]) in marks]
        chosen = downsample([f[1] for f in figures], marked, limit)
        dropped += len(figures) - len(chosen)
        rows.extend(_step_row(s.label, figures[i]) for i in chosen)
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
                rows.append(
                    {
                        "series": s.label,
                        "kind": kind,
                        "step": row.step,
                        "compile_id": row.compile_id,
                        "what": detail_cell(row),
                        "reason": reason,
                        "node": node_label(row.node, row.node_call),
                        "source": format_source(row.user_source, cwd),
                    }
                )
        for event in s.record.of(GraphBreakEvent):
            where = f"{display_path(event.file, cwd)}:{event.line}" if event.file else ""
            rows.append(
                {
                    "series": s.label,
                    "kind": MARKER_BREAK,
                    # Breaks happen while tracing a forward frame, before its step's backward.
                    "step": forward_step(event.step, in_progress=stamps_step_in_progress(s.record.manifest.schema_version)),
                    "compile_id": event.compile_id,
                    "what": event.reason.splitlines()[0] if event.reason else "",
                    "reason": event.reason,
                    "node": "",
                    "source": f"{where}  {event.code.strip()}".strip() if where else event.code.strip(),
                }
            )
    return [r for r in rows if r["step"] is not None]


def timeline_spec(title: str, steps: list[dict[str, Any]], markers: list[dict[str, Any]]) -> dict[str, Any]:
    """Iteration time per step (log scale: compile-affected steps are often 100x the steady ones),
    a line and a point per step; compile-affected steps ringed; each marker a rule at its step with
    a symbol on top whose tooltip holds the reason. Drag to pan, wheel to zoom the steps."""
    step_data = _dataset(steps, _STEP_COLUMNS)
    # Steps are whole numbers: ticks between them (a zoomed axis has some) carry no label.
    x = {"axis": {"labelExpr": "datum.value % 1 ? '' : datum.label", "tickMinStep": 1}, "field": "step", "title": "step", "type": "quantitative"}
    y = {"field": "iteration_ms", "scale": {"type": "log"}, "title": "step time (ms, log)", "type": "quantitative"}
    tooltip = [
        _tooltip("series", "nominal", title="record"),
        _tooltip("step", "quantitative"),
        _tooltip("iteration_ms", "quantitative", ".3f", "step time (ms)"),
        _tooltip("backward_ms", "quantitative", ".3f", "backward calls (ms)"),
        _tooltip("compile_affected", "nominal", title="compile-affected"),
        _tooltip("compiles", "quantitative"),
        _tooltip("ca_captures", "quantitative", title="CA captures"),
        _tooltip("compile_ms", "quantitative", ".1f", "compile (ms)"),
        _tooltip("loss", "quantitative", ".6g"),
    ]
    valid = {"filter": "isValid(datum.iteration_ms) && datum.iteration_ms > 0"}
    line = {
        "data": {"name": step_data[0]},
        "mark": {"type": "line", "opacity": 0.6},
        "encoding": {"color": {"field": "series", "legend": None, "type": "nominal"}, "x": x, "y": y},
        "name": STEP_LINE_VIEW,
        "transform": [valid],
    }
    points = {
        "data": {"name": step_data[0]},
        "mark": {"type": "point", "filled": True, "size": 30},
        "encoding": {"color": {"field": "series", "legend": {"orient": "top"}, "title": "record", "type": "nominal"}, "tooltip": tooltip, "x": x, "y": y},
        "name": STEP_MARKS,
        "transform": [valid],
    }
    layers = [line, points]
    if any(row["compile_affected"] and row["iteration_ms"] for row in steps):
        # An empty layer only draws Vega warnings about empty extents.
        layers.append(
            {
                "data": {"name": step_data[0]},
                "mark": {"type": "point", "color": "#d62728", "filled": False, "size": 160, "strokeWidth": 1.5},
                "encoding": {"tooltip": tooltip, "x": x, "y": y},
                "name": AFFECTED_MARKS,
                "transform": [valid, {"filter": "datum.compile_affected"}],
            }
        )
    datasets = dict([step_data])
    if markers:
        marker_data = _dataset(markers, _MARKER_COLUMNS)
        datasets[marker_data[0]] = marker_data[1]
        kinds = [k for k, _, _ in _MARKERS]
        colours = {"domain": kinds, "range": [c for _, _, c in _MARKERS]}
        marker_tooltip = [
            _tooltip("kind", "nominal", title="event"),
            _tooltip("series", "nominal", title="record"),
            _tooltip("step", "quantitative"),
            _tooltip("compile_id", "nominal", title="compile id"),
            _tooltip("reason", "nominal"),
            _tooltip("what", "nominal", title="what changed"),
            _tooltip("node", "nominal", title="autograd node"),
            _tooltip("source", "nominal", title="source line"),
        ]
        rules = {
            "data": {"name": marker_data[0]},
            "mark": {"type": "rule", "opacity": 0.5, "strokeDash": [3, 3]},
            "encoding": {"color": {"field": "kind", "legend": None, "scale": colours, "type": "nominal"}, "x": x},
        }
        # Each kind has its own lane along the top, in pixels (no scale), so a miss and a break at
        # one step stay apart.
        lanes = {k: 7 + 11 * i for i, k in enumerate(kinds)}
        symbols = {
            "data": {"name": marker_data[0]},
            "mark": {"type": "point", "filled": True, "opacity": 0.9, "size": 110},
            "encoding": {
                "color": {"field": "kind", "legend": {"orient": "top"}, "scale": colours, "title": "event", "type": "nominal"},
                "shape": {"field": "kind", "legend": None, "scale": {"domain": kinds, "range": [s for _, s, _ in _MARKERS]}, "type": "nominal"},
                "tooltip": marker_tooltip,
                "x": x,
                "y": {"axis": None, "field": "lane", "scale": None, "type": "quantitative"},
            },
            "name": EVENT_MARKS,
            "transform": [{"calculate": f"{json.dumps(lanes)}[datum.kind]", "as": "lane"}],
        }
        layers += [rules, symbols]
    # Colour scales are per layer: records for the steps, event kinds for the markers. The points'
    # legend stands for the line too (same field, same domain, so the same colours).
    spec: dict[str, Any] = {"config": _CONFIG, "layer": layers}
    if len(datasets) == 1:  # one dataset for every layer: named once, at the top (as altair did)
        for layer in layers:
            del layer["data"]
        spec["data"] = {"name": step_data[0]}
    return {
        **spec,
        "height": 240,
        "params": [{"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales", "views": [STEP_LINE_VIEW]}],
        "resolve": {"scale": {"color": "independent"}},
        "title": title,
        "width": "container",
        "$schema": VEGALITE_SCHEMA,
        "datasets": datasets,
    }


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
            "x": {"field": "seconds", "title": "compile time (s)", "type": "quantitative"},
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


_STEP_COLUMNS = ("series", "step", "iteration_ms", "backward_ms", "loss", "compile_affected", "compiles", "ca_captures", "compile_ms")
_MARKER_COLUMNS = ("series", "kind", "step", "compile_id", "what", "reason", "node", "source")


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN -> None


def _ms(seconds: Any) -> float | None:
    value = _float(seconds)
    return None if value is None else value * 1000.0
