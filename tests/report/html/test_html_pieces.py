"""The report's pure pieces, without a browser: escaping into a <script> block, and thinning a
long timeline (min/max per bucket, every marked step kept)."""

from __future__ import annotations

import json
import random

from cagtool.report.downsample import downsample
from cagtool.report.html.charts import MAX_POINTS_PER_CHART, MAX_POINTS_PER_SERIES, MIN_POINTS_PER_SERIES, points_per_series, thin_steps
from cagtool.report.html.markup import esc, script_json


def test_script_json_cannot_end_its_script_element():
    data = {"reason": "</script><script>alert(1)</script><!-- x --> & \u2028", "nan": float("nan")}
    text = script_json(data)
    lowered = text.lower()
    assert "</" not in lowered and "<!--" not in lowered and "<script" not in lowered
    assert "\u2028" not in text
    back = json.loads(text)
    assert back["reason"] == data["reason"]  # the same text once parsed
    assert back["nan"] is None  # JSON has no NaN


def test_esc_quotes_and_angles():
    assert esc("<a href=\"x\" title='y'>&</a>") == "&lt;a href=&quot;x&quot; title=&#x27;y&#x27;&gt;&amp;&lt;/a&gt;"


def _rows(n: int, affected: set[int]) -> list[dict]:
    return [{"series": "ca", "step": i, "compile_affected": i in affected, "iteration_ms": 1.0} for i in range(1, n + 1)]


def test_short_timelines_are_drawn_whole():
    rows = _rows(100, {1, 2})
    assert thin_steps(rows, limit=100) == (rows, 0)


def test_long_timelines_keep_every_compile_affected_step():
    affected = {1, 2, 500, 9_999}
    kept, dropped = thin_steps(_rows(10_000, affected), limit=1_000)
    steps = [r["step"] for r in kept]
    assert affected <= set(steps)
    assert len(kept) <= 1_000 and dropped == 10_000 - len(kept)
    assert steps == sorted(steps)


def _buckets(n: int, limit: int, marked: int) -> list[range]:
    """The buckets `downsample` cuts a series of n values into (its docstring's rule)."""
    count = max((limit - marked) // 2, 1)
    size = -(-n // count)
    return [range(start, min(start + size, n)) for start in range(0, n, size)]


def test_downsampling_keeps_every_marked_step_and_each_buckets_min_and_max():
    rng = random.Random(4)
    n, limit = 20_000, 600
    values = [rng.lognormvariate(0, 0.3) for _ in range(n)]
    for i in range(0, n, 997):
        values[i] = None  # steps without a time (the first step has none) are never an extreme
    values[12_345] = 1e6  # a spike
    marked = {0, 1, 2, 7_000, 13_001, 19_999}
    kept = downsample(values, marked, limit)
    assert kept == sorted(set(kept)) and len(kept) <= limit
    assert marked <= set(kept) and 12_345 in kept
    for bucket in _buckets(n, limit, len(marked)):
        timed = [i for i in bucket if values[i] is not None]
        assert min(timed, key=values.__getitem__) in kept and max(timed, key=values.__getitem__) in kept
    assert all(values[i] is not None for i in set(kept) - marked)
    assert downsample(values[:limit], marked, limit) == list(range(limit))  # short series: whole


def test_downsampling_keeps_marked_steps_beyond_its_budget():
    """More marked steps than the budget: every one stays (markers are never dropped), plus the
    extremes of one bucket."""
    values = [float(i % 10) for i in range(5_000)]
    marked = set(range(0, 5_000, 4))
    kept = downsample(values, marked, 100)
    assert marked <= set(kept) and len(kept) <= len(marked) + 2


def test_thinned_rows_keep_the_marker_steps_of_their_series():
    rows = _rows(10_000, {5}) + [{**r, "series": "aot"} for r in _rows(10_000, set())]
    kept, dropped = thin_steps(rows, limit=400, marked_steps=[("ca", 4_321), ("aot", 77)])
    by_series = {s: {r["step"] for r in kept if r["series"] == s} for s in ("ca", "aot")}
    assert {5, 4_321} <= by_series["ca"] and 4_321 not in by_series["aot"] and 77 in by_series["aot"]
    assert all(len(steps) <= 400 for steps in by_series.values()) and dropped == 20_000 - len(kept)


def test_a_charts_points_are_shared_by_its_lines():
    assert points_per_series(1) == MAX_POINTS_PER_SERIES
    assert points_per_series(8) * 8 <= MAX_POINTS_PER_CHART
    assert points_per_series(1_000) == MIN_POINTS_PER_SERIES
