"""The report's pure pieces, without a browser: escaping into a <script> block, and thinning a
long timeline (min/max per bucket, every marked step kept)."""

from __future__ import annotations

import json
import random
from html.parser import HTMLParser

from cagtool.report.figures.downsample import downsample
from cagtool.report.html.charts import MAX_POINTS_PER_CHART, MAX_POINTS_PER_SERIES, MIN_POINTS_PER_SERIES, points_per_series, thin_steps
from cagtool.report.figures.compile_phases import PhaseRow
from cagtool.report.html import sections, templating
from cagtool.report.html.phase_section import ModePhasesBlock, PhasesSection
from cagtool.report.html.templating import script_json
from cagtool.report.text.safe_text import safe_text


def test_script_json_cannot_end_its_script_element():
    data = {"reason": "</script><script>alert(1)</script><!-- x --> & \u2028", "nan": float("nan")}
    text = script_json(data)
    lowered = text.lower()
    assert "</" not in lowered and "<!--" not in lowered and "<script" not in lowered
    assert "\u2028" not in text
    back = json.loads(text)
    assert back["reason"] == data["reason"]  # the same text once parsed
    assert back["nan"] is None  # JSON has no NaN


def test_templates_print_text_escaped_and_terminal_safe():
    printed = templating.environment().from_string('<p title="{{ v }}">{{ v }}</p>').render(v="<a href=\"x\" title='y'>&</a>\x1b[31m\x07")
    text = "&lt;a href=&#34;x&#34; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;\\x07"  # the colour dropped, the bell shown
    assert printed == f'<p title="{text}">{text}</p>'


HOSTILE = "</script><script>window.x=1</script><!--<img src=x onerror=y>'\"&\x1b[31m\udce9"
SHOWN = safe_text(HOSTILE)


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.text.extend(v or "" for _, v in attrs)

    def handle_data(self, data):
        self.text.append(data)


def _hostile_sections() -> dict[str, object]:
    h = HOSTILE
    table = sections.table((h, h), [(h, h)], h, {(0, 1): h}, links={(0, 0): h})
    card = sections.CauseCard(h, [h], [h], h, h, [sections.CauseCard(h, [h], [h], h, h)])
    code = sections.Code(h, None, h)
    diff = sections.Diff(h, [h], [sections.Line(h, h, "span")], [h])
    graph = sections.GraphView(h, h, h, table, [h], h, h, diff, code, [(h, h)])
    phases = [PhaseRow(h, h, 0, 1.0), PhaseRow(h, h, 2, 0.5, h)]
    compile_view = sections.CompileView(h, h, [h], [sections.Artifact(h, sections.Code(h, h, h), True), sections.Artifact(h, code, False)])
    return {
        "run": sections.RunBlock(sections.Headline(h, h), h, h),
        "header": sections.Header(h, h, [(h, h)], sections.Headline(h, h)),
        "verdict": sections.Verdict([sections.TitledTable(h, table)], h, h, [sections.Line(h, h)], [h],
                                    sections.Ranks(h, [sections.RankMode(h, table, h, [h], h)]),
                                    sections.Findings([sections.Alert(h, [h], [h])], [h])),
        "change": sections.Change(sections.TitledTable(h, table), [h], [h]),
        "timeline": sections.Timeline([sections.TimelineEntry(sections.Chart(h, h)), sections.TimelineEntry(None, h)]),
        "compile": sections.CompileTime(sections.Chart(h, h), [sections.PhaseTree(h, phases)]),
        "compiles": sections.CompileDetails(h, [(h, [compile_view], h)]),
        "recompiles": sections.Recompiles(h, h, [sections.RecompileMode(h, h, [h], table, True, [card])]),
        "graphs": sections.Graphs(h, h, [sections.GraphGroup(h, h, [graph], h), sections.GraphGroup(h, h, [], h)]),
        "gate": sections.Gate(h, False, table, [h], h),
        "verify": sections.Verification(h, table, [sections.Line(h, h), sections.Line(h, h, "pre")]),
        "phases": PhasesSection([ModePhasesBlock(h, h, table, [h]), ModePhasesBlock(h, h, None, [])], [h]),
    }


def test_every_section_template_shows_record_text_as_text():
    """Whatever a record holds, in any field a section template prints, arrives as text: no
    element or attribute of its own, nothing that ends a script or opens a comment."""
    built = _hostile_sections()
    assert {s.TEMPLATE for s in built.values()} == {f"sections/{p.name}" for p in (templating.TEMPLATES / "sections").glob("*.html.j2")}
    for name, section in built.items():
        html = templating.template(section.TEMPLATE).render(section=section)
        assert HOSTILE not in html and "<script" not in html and "<!--" not in html and "\x1b" not in html, name
        parsed = _Elements()
        parsed.feed(html)
        assert parsed.tags <= _OWN_TAGS, (name, parsed.tags - _OWN_TAGS)
        assert SHOWN in "".join(parsed.text), name


_OWN_TAGS = {"section", "div", "h2", "h3", "h4", "p", "b", "span", "a", "table", "thead", "tbody", "tr", "th", "td",
             "ul", "li", "article", "pre", "details", "summary"}


def test_templates_mark_nothing_safe():
    """Markup reaches a template only as `Markup` made in Python (pygments' HTML, the specs through
    `script_json`, the page's CSS and scripts): no template turns text into markup itself."""
    for path in templating.TEMPLATES.rglob("*.j2"):
        source = path.read_text()
        assert "|safe" not in source.replace(" ", "") and "autoescape" not in source, path


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


def test_compiled_templates_are_only_a_cache(tmp_path, monkeypatch):
    """The templates compiled by one report are read back by the next (jinja2's bytecode cache in
    cagtool's cache directory); a damaged cache file, or a cache directory that cannot be made,
    costs a compile, never the report."""
    monkeypatch.setenv("CAGTOOL_CACHE_DIR", str(tmp_path / "cache"))
    section = _hostile_sections()["recompiles"]

    def render() -> tuple[str, int]:
        env = templating.new_environment(templating.compiled_cache())
        compiled = []
        compile_source = env.compile
        env.compile = lambda *a, **k: compiled.append(a[1]) or compile_source(*a, **k)
        return env.get_template(section.TEMPLATE).render(section=section), len(compiled)

    first, compiles = render()
    assert compiles == 2  # the section and the macros it imports
    files = list((tmp_path / "cache").rglob("*.cache"))
    assert len(files) == 2
    assert render() == (first, 0)
    for path in files:
        path.write_bytes(path.read_bytes()[:40] + b"\x00garbage")
    assert render() == (first, 2)
    monkeypatch.setenv("CAGTOOL_CACHE_DIR", str(files[0]))  # a file: no directory can be made there
    assert templating.compiled_cache() is None
    assert render() == (first, 2)
