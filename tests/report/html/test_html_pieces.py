"""The report's pure pieces, without a browser: escaping into a <script> block, and thinning a
long timeline."""

from __future__ import annotations

import json

from cagtool.report.html.charts import thin_steps
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
