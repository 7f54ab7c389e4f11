"""The report's charts as Vega-Lite specs, built with altair from the frames cagtool already has.

Two charts: the step-time timeline of one mode (a line per record: repetitions and ranks), with
compile-affected steps ringed and one marker per CA cache miss, Dynamo recompile and graph break;
and compile time by phase, modes side by side. The rows come from `frames.steps_frame` and
`recompiles.table.recompile_table` (the figures `compare` and `recompiles` print), the phases from
`compare.analysis.ModeColumn`; nothing is computed again here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import GraphBreakEvent, stamps_step_in_progress
from cagtool.report.frames import steps_frame
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
    """One row per recorded step of each series, from `steps_frame` (iteration time, backward
    time, loss, compile-affected flag)."""
    rows: list[dict[str, Any]] = []
    for s in series:
        frame = steps_frame(s.record)
        for step, row in frame.iterrows():
            rows.append(
                {
                    "series": s.label,
                    "step": int(step),
                    "iteration_ms": _ms(row["iteration_s"]),
                    "backward_ms": _ms(row["backward_s"]),
                    "loss": _float(row["loss"]),
                    "compile_affected": bool(row["compile_affected"]),
                    "compiles": int(row["compiles"]),
                    "ca_captures": int(row["ca_captures"]),
                    "compile_ms": _ms(row["compile_s"]),
                }
            )
    return rows


# A long run's timeline keeps at most this many points per line (about 200 bytes each in the page):
# every compile-affected step stays, steady steps are thinned evenly. The figures (medians,
# percentiles) come from every step; only the drawing is thinned.
MAX_POINTS_PER_SERIES = 2500


def thin_steps(rows: list[dict[str, Any]], limit: int = MAX_POINTS_PER_SERIES) -> tuple[list[dict[str, Any]], int]:
    """(the rows to draw, how many were left out)."""
    by_series: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_series.setdefault(row["series"], []).append(row)
    kept: list[dict[str, Any]] = []
    dropped = 0
    for series_rows in by_series.values():
        if len(series_rows) <= limit:
            kept.extend(series_rows)
            continue
        affected = [r for r in series_rows if r["compile_affected"]]
        steady = [r for r in series_rows if not r["compile_affected"]]
        room = max(limit - len(affected), 1)
        stride = -(-len(steady) // room)  # ceil
        chosen = affected + steady[::stride]
        chosen.sort(key=lambda r: r["step"])
        dropped += len(series_rows) - len(chosen)
        kept.extend(chosen)
    return kept, dropped


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
    import altair as alt
    import pandas as pd

    step_data = pd.DataFrame(steps, columns=list(_STEP_COLUMNS))
    zoom = alt.selection_interval(name="zoom", bind="scales", encodings=["x"])
    # Steps are whole numbers: ticks between them (a zoomed axis has some) carry no label.
    x = alt.X("step:Q", title="step", axis=alt.Axis(tickMinStep=1, labelExpr="datum.value % 1 ? '' : datum.label"))
    y = alt.Y("iteration_ms:Q", title="step time (ms, log)", scale=alt.Scale(type="log"))
    color = alt.Color("series:N", title="record", legend=alt.Legend(orient="top"))
    tooltip = [
        alt.Tooltip("series:N", title="record"),
        alt.Tooltip("step:Q"),
        alt.Tooltip("iteration_ms:Q", title="step time (ms)", format=".3f"),
        alt.Tooltip("backward_ms:Q", title="backward calls (ms)", format=".3f"),
        alt.Tooltip("compile_affected:N", title="compile-affected"),
        alt.Tooltip("compiles:Q"),
        alt.Tooltip("ca_captures:Q", title="CA captures"),
        alt.Tooltip("compile_ms:Q", title="compile (ms)", format=".1f"),
        alt.Tooltip("loss:Q", format=".6g"),
    ]
    base = alt.Chart(step_data).transform_filter("isValid(datum.iteration_ms) && datum.iteration_ms > 0")
    line = base.mark_line(opacity=0.6).encode(x=x, y=y, color=alt.Color("series:N", legend=None)).add_params(zoom)
    points = base.mark_point(filled=True, size=30).encode(x=x, y=y, color=color, tooltip=tooltip).properties(name=STEP_MARKS)
    affected = (
        base.transform_filter("datum.compile_affected")
        .mark_point(filled=False, size=160, strokeWidth=1.5, color="#d62728")
        .encode(x=x, y=y, tooltip=tooltip)
        .properties(name=AFFECTED_MARKS)
    )
    layers = [line, points]
    if any(row["compile_affected"] and row["iteration_ms"] for row in steps):
        layers.append(affected)  # an empty layer only draws Vega warnings about empty extents
    if markers:
        marker_data = pd.DataFrame(markers, columns=list(_MARKER_COLUMNS))
        kinds = [k for k, _, _ in _MARKERS]
        kind_color = alt.Color(
            "kind:N", title="event", scale=alt.Scale(domain=kinds, range=[c for _, _, c in _MARKERS]), legend=alt.Legend(orient="top")
        )
        kind_shape = alt.Shape("kind:N", scale=alt.Scale(domain=kinds, range=[s for _, s, _ in _MARKERS]), legend=None)
        marker_tooltip = [
            alt.Tooltip("kind:N", title="event"),
            alt.Tooltip("series:N", title="record"),
            alt.Tooltip("step:Q"),
            alt.Tooltip("compile_id:N", title="compile id"),
            alt.Tooltip("reason:N"),
            alt.Tooltip("what:N", title="what changed"),
            alt.Tooltip("node:N", title="autograd node"),
            alt.Tooltip("source:N", title="source line"),
        ]
        marks = alt.Chart(marker_data)
        rules = marks.mark_rule(strokeDash=[3, 3], opacity=0.5).encode(
            x=x, color=alt.Color("kind:N", scale=alt.Scale(domain=kinds, range=[c for _, _, c in _MARKERS]), legend=None)
        )
        # Each kind has its own lane along the top, in pixels (no scale), so a miss and a break at
        # one step stay apart.
        lane = alt.Y("lane:Q", scale=None, axis=None)
        lanes = {k: 7 + 11 * i for i, k in enumerate(kinds)}
        marks = marks.transform_calculate(lane=f"{json.dumps(lanes)}[datum.kind]")
        symbols = marks.mark_point(filled=True, size=110, opacity=0.9).encode(
            x=x, y=lane, color=kind_color, shape=kind_shape, tooltip=marker_tooltip
        ).properties(name=EVENT_MARKS)
        layers += [rules, symbols]
    # Colour scales are per layer: records for the steps, event kinds for the markers. The points'
    # legend stands for the line too (same field, same domain, so the same colours).
    chart = alt.layer(*layers).resolve_scale(color="independent")
    chart = chart.properties(title=title, width="container", height=240)
    return chart.to_dict(validate=False)


def compile_phase_spec(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Compile seconds by phase, one group of bars per mode (grouped, not stacked: torch's
    cumulative phase times nest, so stacking them would add time twice)."""
    import altair as alt
    import pandas as pd

    data = pd.DataFrame(rows, columns=["mode", "phase", "seconds"])
    phases = list(dict.fromkeys(r["phase"] for r in rows))
    chart = (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("mode:N", title=None, sort=None),
            yOffset=alt.YOffset("phase:N", sort=phases),
            x=alt.X("seconds:Q", title="compile time (s)"),
            color=alt.Color("phase:N", sort=phases, legend=alt.Legend(orient="top", title=None)),
            tooltip=[alt.Tooltip("mode:N"), alt.Tooltip("phase:N"), alt.Tooltip("seconds:Q", format=".3f")],
        )
        .properties(name=PHASE_MARKS, title="Compile time by phase", width="container", height=max(60, 12 * len(rows)))
    )
    return chart.to_dict(validate=False)


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
