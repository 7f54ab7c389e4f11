"""A long multi-rank record as the report and the trace draw it: the step-time chart and the
Perfetto trace thin the steps (min/max per bucket) but keep every step that carries a marker, and
say what they left out; the figures read through the columns are the ones the lines give."""

from __future__ import annotations

import json

import pytest
from rank_records import Cap, Rank, multi_rank_run  # noqa: F401 - a fixture

from cagtool.record.loader import load_run
from cagtool.report import perfetto
from cagtool.report.html import charts
from cagtool.report.html.document import Tables, _series
from cagtool.report.figures.metrics import held_steps, mode_metrics, record_step_intervals

STEPS = 3_000
CAPTURES = (0, 1_234, 2_999)


@pytest.fixture
def long_run(multi_rank_run):
    caps = [Cap(step, node="torch::autograd::GraphRoot" if i == 0 else "MulBackward0", call=i) for i, step in enumerate(CAPTURES)]
    return multi_rank_run({rank: Rank(steps=STEPS, caps=caps, step_s=0.01 + rank * 1e-3, boundary=True) for rank in (0, 1)})


def test_the_timeline_draws_a_bounded_number_of_points_and_every_marked_step(long_run):
    run = load_run(long_run, columns=True)
    series = _series(run, ["ca"], Tables())
    markers = charts.marker_rows(series)
    rows, dropped = charts.drawn_step_rows(series, markers)
    limit = charts.points_per_series(len(series))
    assert limit < STEPS and dropped == len(series) * STEPS - len(rows)
    for s in series:
        steps = [r["step"] for r in rows if r["series"] == s.label]
        assert len(steps) <= limit and steps == sorted(steps)
        assert set(CAPTURES) <= set(steps)
        assert {m["step"] for m in markers if m["series"] == s.label} <= set(steps)
    # The rows drawn are the full rows of those steps, figure for figure.
    full = {(r["series"], r["step"]): r for r in charts.step_rows(series)}
    assert all(full[(r["series"], r["step"])] == r for r in rows)


def test_the_page_shares_one_budget_of_points_over_its_charts_per_rank(long_run):
    """A multi-rank run draws a chart per rank: the points' budget is the page's, not each chart's."""
    from cagtool.report.html.document import _run_timelines

    run = load_run(long_run, columns=True)
    groups = _run_timelines(run, Tables())
    assert [title for title, _ in groups] == ["rank 0", "rank 1"]
    lines = sum(len(series) for _, series in groups)
    drawn = [charts.drawn_step_rows(series, charts.marker_rows(series), lines)[0] for _, series in groups]
    per_line = charts.points_per_series(lines)
    assert all(len(rows) <= per_line for rows in drawn)
    assert sum(len(rows) for rows in drawn) <= max(charts.MAX_POINTS_PER_CHART, lines * charts.MIN_POINTS_PER_SERIES)


def test_the_trace_aggregates_steps_and_keeps_every_marked_one(long_run, monkeypatch):
    monkeypatch.setattr(perfetto, "MAX_TRACE_STEPS", 600)
    monkeypatch.setattr(perfetto, "MIN_STEPS_PER_PROCESS", 200)
    run = load_run(long_run, columns=True)
    doc = perfetto.perfetto_trace(run)
    aggregated = doc["otherData"]["aggregated"]
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert set(aggregated["processes"]) == {"ca rank 0", "ca rank 1"}
    for pid, label in names.items():
        if label not in aggregated["processes"]:
            continue
        spans = [e for e in doc["traceEvents"] if e["pid"] == pid and e["ph"] == "X" and e["cat"] == "steps"]
        single = [e for e in spans if not e["args"].get("aggregated")]
        merged = [e for e in spans if e["args"].get("aggregated")]
        info = aggregated["processes"][label]
        assert len(single) <= 300 and info["aggregated_spans"] == len(merged)
        assert {c for c in CAPTURES if c} <= {e["args"]["step"] for e in single}
        # Every step is in exactly one span, the first (timed from its first compile) included:
        # drawn alone or counted in a stretch.
        assert len(single) + sum(e["args"]["steps"] for e in merged) == STEPS
        assert info["steps"] == STEPS and info["steps_drawn"] == len(single)
        backward = [e for e in doc["traceEvents"] if e["pid"] == pid and e["ph"] == "X" and e["cat"] == "backward"]
        assert len(backward) + info["backward_spans_left_out"] == STEPS
    json.dumps(doc, allow_nan=False)


def test_long_records_read_through_the_columns_give_the_figures_of_the_lines(long_run):
    fast, slow = load_run(long_run, columns=True), load_run(long_run)
    for rank, record in fast.modes["ca"].ranks().items():
        assert held_steps(record) is not None
        reference = slow.modes["ca"].ranks()[rank]
        assert mode_metrics(record) == mode_metrics(reference)
        assert record_step_intervals(record) == record_step_intervals(reference)
