"""The HTML report, opened in headless Chromium with the network cut: it draws its charts from
the recorded values, shows reasons in tooltips, asks no host for anything, logs no error, and
shows everything from the record as text (never as markup or script).

Chromium is Debian's `chromium` package (`.ci/run` installs it); without it these tests skip
(and fail under CI=true: CI must not pass on what it did not measure).

Every page the tests open is photographed at 1400x900 (the whole page) for a person to look at
(docs/visual-review.md): into the session's pytest temporary directory, copied at the session's end
into $CAGTOOL_SCREENSHOTS when set (`.ci/run` sets it to test-artifacts/screenshots, which CI keeps).
What the review checklist asks that a test can measure, every page is held to: the headline is
on the first screen, every mark lies inside its plot, the step axes are labelled in whole steps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from browser import Browser, find_chromium
from conftest import ROOT, _session_dir, cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.record.schema import CacheMissEvent, GraphBreakEvent
from cagtool.report.frames import steps_frame
from cagtool.report.html.document import write_report
from cagtool.report.figures.metrics import first_step_time

SCREENSHOTS_ENV = "CAGTOOL_SCREENSHOTS"
SCREENSHOTS_STAGED = "screenshots"  # the session directory's folder they wait in (conftest.py)
VIEWPORT = (1400, 900)  # the first screen the review checklist is about
THREE = "eager,aot,ca"
CHARTS_DONE = "document.body.dataset.charts !== undefined && document.body.dataset.chartsDone === document.body.dataset.charts"
MAX_BYTES = 3 * 2**20


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory) -> Path:
    """Where the pages' screenshots go while the tests run: the session's directory, which every
    worker shares; the session's end copies them into $CAGTOOL_SCREENSHOTS when it is set
    (conftest.py, pytest_sessionfinish). Not there directly: `.ci/run` puts it under the checkout,
    the working directory of every job the other tests record, where a screenshot written while a
    job's mode runs reads as a file that mode left for the next (numerics "resumed from files")."""
    return _session_dir(tmp_path_factory, SCREENSHOTS_STAGED)


@pytest.fixture(scope="module")
def browser(screenshots):
    if find_chromium() is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            # CI must not pass on what it did not measure: .ci/run installs chromium.
            pytest.fail("chromium is not installed under CI=true: the browser tests cannot run (.ci/run installs it with apt-get)")
        pytest.skip("chromium is not installed: `apt-get install chromium` (Debian; .ci/run installs it)")
    with Browser.start(width=VIEWPORT[0], height=VIEWPORT[1]) as b:
        b.screenshot_dir = screenshots  # type: ignore[attr-defined]
        yield b


def open_report(browser: Browser, path: Path, shot: str):
    """The page, its charts drawn, photographed, and held to the review checklist."""
    page = browser.open(path)
    page.wait_for(CHARTS_DONE, timeout=60)
    page.screenshot(browser.screenshot_dir / f"{shot}.png")  # type: ignore[attr-defined]
    assert_looks_right(page)
    return page


# Every drawn mark's centre, against its own chart's plot (the frame's background).
_MARKS_OUTSIDE = """(() => {
  const out = [];
  document.querySelectorAll('.chart svg').forEach(svg => {
    const frame = svg.querySelector('g.role-frame.root > g > path.background').getBoundingClientRect();
    svg.querySelectorAll('.step_points_marks path, .compile_affected_marks path, g[class*="event_markers"] path').forEach(m => {
      const r = m.getBoundingClientRect(), x = r.x + r.width / 2, y = r.y + r.height / 2;
      if (x < frame.left - 0.5 || x > frame.right + 0.5 || y < frame.top - 0.5 || y > frame.bottom + 0.5)
        out.push(svg.parentNode.id + ': ' + m.getAttribute('aria-label'));
    });
  });
  return out;
})()"""

# The step axes' labels: every X-axis of a timeline (the charts holding step points).
_STEP_TICKS = """(() => Array.from(document.querySelectorAll('.chart svg')).filter(svg => svg.querySelector('.step_points_marks'))
  .flatMap(svg => Array.from(svg.querySelectorAll('g.role-axis')).filter(a => (a.getAttribute('aria-label') || '').startsWith('X-axis'))
  .flatMap(a => Array.from(a.querySelectorAll('.role-axis-label text')).map(t => t.textContent))))()"""


def assert_looks_right(page) -> None:
    """docs/visual-review.md, what can be measured: the headline within the first screen at
    1400x900, no mark outside its plot, no step-axis label that is not a whole step."""
    page.evaluate("window.scrollTo(0, 0)")
    bottom = page.evaluate("(() => { const h = document.getElementById('headline'); return h ? h.getBoundingClientRect().bottom : 0; })()")
    assert 0 < bottom <= VIEWPORT[1], f"the headline ends {bottom} px down, below the first screen"
    assert page.evaluate(_MARKS_OUTSIDE) == []
    ticks = [t for t in page.evaluate(_STEP_TICKS) if t]
    assert all(t.lstrip("-").replace(",", "").isdigit() for t in ticks), ticks


def assert_clean(page, path: Path) -> None:
    """No console error or exception, and no request but the file itself."""
    assert page.console_errors == []
    assert page.failed_requests == []
    assert page.requests == [path.resolve().as_uri()]


def hover_tooltip(page, selector: str, index: int) -> str:
    """Move the mouse onto the index-th mark under `selector` and return the tooltip's text."""
    x, y = page.evaluate(
        f"(() => {{ const e = document.querySelectorAll({json.dumps(selector)})[{index}]; e.scrollIntoView({{block: 'center'}});"
        " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
    )
    page.hover(x, y)
    return page.wait_for(
        "(() => { const t = document.getElementById('vg-tooltip-element');"
        " return t && t.classList.contains('visible') ? t.innerText : ''; })()",
        timeout=10,
    )


@pytest.fixture(scope="module")
def three_modes(record_run):
    run = record_run("graph_breaks.py", "3", modes=THREE)
    assert run.returncode == 0, run.stderr
    return run


@pytest.fixture(scope="module")
def op_loop(record_run):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    return run


@pytest.fixture(scope="module")
def checkpointed(record_run):
    run = record_run("checkpoint_recompute.py", modes="aot,ca")
    assert run.returncode == 0, run.stderr
    return run


def test_the_checkpoint_recompute_phase_in_the_page_and_its_marker(browser, checkpointed):
    """The recompile inside the reentrant checkpoint's recompute: named in the phases section (its
    step, function and line) and in the timeline marker's tooltip."""
    path = checkpointed.path / "report.html"
    page = open_report(browser, path, "report-checkpoint-recompute")
    assert_clean(page, path)
    text = " ".join(page.evaluate("document.querySelector('#phases').innerText").split())
    phase = "activation-checkpoint recompute in the backward (use_reentrant=True) of Block.forward"
    assert f"0/1 0 {phase}" in text and f"!0/0/1 0 {phase}" in text
    assert "sample_scripts/checkpoint_recompute.py:23" in text and "loss.backward()" in text
    markers = page.evaluate("Array.from(document.querySelectorAll('g[class*=event_markers] path')).map(e => e.getAttribute('aria-label'))")
    index = next(i for i, m in enumerate(markers) if "compile id: 0/1;" in m)
    assert f"phase: {phase}" in markers[index]
    assert phase in hover_tooltip(page, "g[class*=event_markers] path", index)


def test_run_writes_report_and_says_where(three_modes):
    report = three_modes.path / "report.html"
    assert report.is_file()
    assert f"report: {report}" in three_modes.stderr
    assert report.stat().st_size < MAX_BYTES


def test_three_modes_in_browser(browser, three_modes):
    path = three_modes.path / "report.html"
    page = open_report(browser, path, "report-graph-breaks-three-modes")
    assert_clean(page, path)
    run = load_run(three_modes.path)
    # Every chart drew: one timeline with every mode, and the compile phases.
    assert page.evaluate("document.querySelectorAll('.chart[data-rendered]').length") == 2
    # One point per step that has an iteration time, with the recorded value in its label; and
    # the first step of the modes that compile (it holds the compiles), timed from its first
    # compile, ringed, the slowest point of its mode.
    labels = page.evaluate("Array.from(document.querySelectorAll('.step_points_marks path')).map(e => e.getAttribute('aria-label'))")
    expected = []
    for name, record in run.modes.items():
        frame = steps_frame(record)
        for step, row in frame.dropna(subset=["iteration_s"]).iterrows():
            expected.append((f"step: {step};", f"record: {name};", f"step time (ms): {row['iteration_s'] * 1000:.3f};"))
        first = first_step_time(record)
        if name != "eager":
            assert first is not None and first.compile_affected and first.includes_forward
            expected.append(("step: 0;", f"record: {name};", f"step time (ms): {first.seconds * 1000:.3f};", "timed from: the start of its first compile"))
            assert first.seconds > frame["iteration_s"].max()
    assert len(labels) == len(expected)
    for want in expected:
        assert any(all(part in label for part in want) for label in labels), (want, labels)
    ringed = page.evaluate("Array.from(document.querySelectorAll('.compile_affected_marks path')).map(e => e.getAttribute('aria-label'))")
    assert sorted(r.split("record: ")[1].split(";")[0] for r in ringed if "step: 0;" in r) == ["aot", "ca"]
    # A marker per graph break (aot and ca), and its tooltip gives the reason and the source line.
    breaks = sum(len(r.of(GraphBreakEvent)) for r in run.modes.values())
    assert breaks >= 4
    markers = page.evaluate("Array.from(document.querySelectorAll('g[class*=event_markers] path')).map(e => e.getAttribute('aria-label'))")
    assert sum("event: graph break" in m for m in markers) == breaks
    index = next(i for i, m in enumerate(markers) if "event: graph break" in m)
    tip = hover_tooltip(page, "g[class*=event_markers] path", index)
    assert "graph break" in tip and "torch._dynamo.graph_break()" in tip
    assert "graph_breaks.py:1" in tip  # the source line (12 or 14)
    # The timeline zooms: the mouse wheel over the ca chart narrows its step axis.
    ticks = (
        "(() => { const a = Array.from(document.querySelectorAll('#chart-0 g.role-axis'))"
        ".find(a => (a.getAttribute('aria-label') || '').startsWith('X-axis'));"
        " return Array.from(a.querySelectorAll('.role-axis-label text')).map(t => t.textContent); })()"
    )
    before = page.evaluate(ticks)
    x, y = page.evaluate(
        "(() => { const e = document.querySelector('#chart-0 .step_points_marks'); e.scrollIntoView({block: 'center'});"
        " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
    )
    page.call("Input.dispatchMouseEvent", {"type": "mouseWheel", "x": x, "y": y, "deltaX": 0, "deltaY": -600})
    page.wait_for(f"JSON.stringify({ticks}) !== {json.dumps(json.dumps(before))}", timeout=10)
    # Compile phases: a bar per mode and phase (Dynamo, AOT, Inductor, CA capture, the AOT backward the
    # aot mode compiled at its first call, the total).
    assert page.evaluate("document.querySelectorAll('.phase_bars_marks path').length") == 3 * 6
    # The verdict table shows the modes side by side.
    verdict = page.evaluate("document.getElementById('verdict').innerText")
    assert "Modes side by side" in verdict and "speedup" in verdict


def test_ca_misses_diffs_and_code(browser, op_loop):
    path = op_loop.path / "report.html"
    page = open_report(browser, path, "report-op-loop")
    assert_clean(page, path)
    run = load_run(op_loop.path)
    ca = run.mode("ca")
    misses = ca.of(CacheMissEvent)
    assert len(misses) >= 3
    markers = page.evaluate("Array.from(document.querySelectorAll('g[class*=event_markers] path')).map(e => e.getAttribute('aria-label'))")
    assert sum("CA cache miss" in m or "CA first capture" in m for m in markers) == len({m.ca_id for m in misses})
    miss = next(m for m in misses if m.node_call != 0)
    index = next(i for i, m in enumerate(markers) if f"compile id: {miss.compile_id};" in m)
    tip = hover_tooltip(page, "g[class*=event_markers] path", index)
    assert miss.message.splitlines()[0] in tip  # torch's reason, verbatim
    assert miss.node.replace("torch::autograd::", "") in tip
    # Each graph has highlighted code; each graph after the first, a diff against the one it replaced.
    graphs = page.evaluate("document.querySelectorAll('article.graph').length")
    assert graphs == len({m.ca_id for m in misses})
    assert page.evaluate("document.querySelectorAll('.graph-diff').length") == graphs - 1
    assert page.evaluate("document.querySelectorAll('article.graph .code .k').length") > 0  # pygments keyword spans
    recompiles = page.evaluate("document.getElementById('recompiles').innerText")
    assert "Fix:" in recompiles and "new node" in recompiles


PAYLOAD = "</script><script>window.__pwned=1</script><!--<img src=\"http://evil.invalid/x.png\" onerror=\"window.__pwned=2\">'é"


def _inject(run_dir: Path) -> None:
    """Put hostile text everywhere the record holds text: the script name and argv, torch's
    reasons, a finding, the exception, and a graph's code."""
    meta_path = run_dir / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["target"]["name"] = f"train{PAYLOAD}.py"
    meta["target_argv"] = [meta["target"]["name"], PAYLOAD]
    meta_path.write_text(json.dumps(meta))
    mode = run_dir / "ca"
    manifest = json.loads((mode / "manifest.json").read_text())
    manifest["exception"] = {"type": "RuntimeError", "message": PAYLOAD, "traceback": PAYLOAD}
    manifest["status"] = "failed"
    manifest["exit_code"] = 1
    (mode / "manifest.json").write_text(json.dumps(manifest))
    lines = []
    for line in (mode / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event["kind"] == "ca_cache_miss":
            event["message"] = event["message"] + PAYLOAD
            event["node"] = f"Mul{PAYLOAD}"
        lines.append(json.dumps(event))
    lines.append(json.dumps({"kind": "finding", "seq": 10_000, "t": 9.0, "code": "x", "message": PAYLOAD}))
    (mode / "events.jsonl").write_text("\n".join(lines) + "\n")
    code = next((mode / "graphs").glob("ca_*.py"))
    code.write_text(code.read_text() + f"\n# {PAYLOAD}\n")


def test_everything_from_the_record_is_text(browser, op_loop, tmp_path):
    run_dir = tmp_path / "hostile"
    shutil.copytree(op_loop.path, run_dir)
    _inject(run_dir)
    out = tmp_path / "hostile.html"
    proc = cagtool_in_process("report", str(run_dir), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert PAYLOAD not in html and "<script>window.__pwned" not in html
    page = open_report(browser, out, "report-hostile")
    assert page.evaluate("window.__pwned === undefined")
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert_clean(page, out)  # the <img> would have asked evil.invalid for x.png
    body = page.evaluate("document.body.innerText")
    assert f"train{PAYLOAD}.py" in body  # the script name, shown as text
    assert f"RuntimeError: {PAYLOAD}" in body  # the exception
    code = page.evaluate("Array.from(document.querySelectorAll('article.graph .code')).map(e => e.textContent).join('\\n')")
    assert PAYLOAD in code
    # Inside the chart: the reason in the tooltip is text too.
    markers = page.evaluate("Array.from(document.querySelectorAll('g[class*=event_markers] path')).map(e => e.getAttribute('aria-label'))")
    index = next(i for i, m in enumerate(markers) if "CA cache miss" in m)
    tip = hover_tooltip(page, "g[class*=event_markers] path", index)
    assert PAYLOAD in tip
    assert page.evaluate("document.getElementById('vg-tooltip-element').querySelectorAll('img, script').length") == 0
    assert page.evaluate("window.__pwned === undefined")


def test_before_after_report(browser, op_loop, three_modes, tmp_path):
    out = tmp_path / "ab.html"
    proc = cagtool_in_process("report", str(three_modes.path), str(op_loop.path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    page = open_report(browser, out, "report-before-after")
    assert_clean(page, out)
    verdict = page.evaluate("document.getElementById('verdict').innerText")
    assert "Before/after" in verdict and "speedup B over A" in verdict
    # The ca timeline holds both runs.
    labels = page.evaluate("Array.from(document.querySelectorAll('.step_points_marks path')).map(e => e.getAttribute('aria-label'))")
    assert any("record: A ca;" in label for label in labels)
    assert any("record: B ca;" in label for label in labels)


def test_size_and_write_time(op_loop, three_modes, tmp_path):
    for recorded in (op_loop, three_modes):
        run = load_run(recorded.path)
        write_report(run, tmp_path / "warm.html")  # imports and the cached Vega bundle
        start = time.process_time()
        written = write_report(run, tmp_path / "report.html")
        cpu = time.process_time() - start
        assert written.bytes < MAX_BYTES
        assert cpu < 3.0, f"writing the report took {cpu:.2f} s of CPU"


def test_report_of_unreadable_runs(tmp_path):
    missing = cagtool_in_process("report", str(tmp_path / "nope"))
    assert missing.returncode == 3 and "no run at" in missing.stderr
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "run.json").write_text("{not json")
    bad = cagtool_in_process("report", str(garbage))
    assert bad.returncode == 3 and "not valid JSON" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_run_no_report(record_run):
    run = record_run("../tests/scripts/exit_code.py", "0", extra=("--no-report",))
    assert run.returncode == 0, run.stderr
    assert not (run.path / "report.html").exists()
    assert "report:" not in run.stderr


def _rank_records():
    """tests/report/ranks/rank_records.py (hand-made multi-rank records), loaded by path: test
    folders are not packages."""
    import importlib.util

    path = ROOT / "tests" / "report" / "ranks" / "rank_records.py"
    spec = importlib.util.spec_from_file_location("rank_records_for_html", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_multi_rank_timeline_and_table(browser, tmp_path):
    rr = _rank_records()
    run_dir = rr.write_multi_rank_run(
        tmp_path / "ddp",
        {0: rr.Rank(), 1: rr.Rank(caps=[rr.Cap(1), rr.Cap(3, "MulBackward0", 2, ("MulBackward0", "AddBackward0"))])},
    )
    written = write_report(load_run(run_dir))
    page = open_report(browser, written.path, "report-multi-rank")
    assert_clean(page, written.path)
    # Small multiples: a chart per rank, every mode on each, the same axes on both.
    titles = page.evaluate("Array.from(document.querySelectorAll('#timeline .chart .role-title-text')).map(e => e.textContent)")
    assert titles == ["rank 0", "rank 1"]
    for chart, rank in (("chart-0", 0), ("chart-1", 1)):
        labels = page.evaluate(f"Array.from(document.querySelectorAll('#{chart} .step_points_marks path')).map(e => e.getAttribute('aria-label'))")
        # 6 steps without boundaries (schema 1's shape): 5 timed from one backward's start to the next
        assert sum("record: ca;" in label for label in labels) == 5
    axes = "(id) => Array.from(document.querySelectorAll('#' + id + ' .role-axis-label text')).map(t => t.textContent).join(',')"
    assert page.evaluate(f"({axes})('chart-0')") == page.evaluate(f"({axes})('chart-1')")
    markers = page.evaluate("Array.from(document.querySelectorAll('#chart-1 g[class*=event_markers] path')).map(e => e.getAttribute('aria-label'))")
    miss = [m for m in markers if "record: ca;" in m and "CA cache miss" in m]
    assert len(miss) == 1 and "step: 3;" in miss[0] and "MulBackward0 (NodeCall 2)" in miss[0]
    # The legends name only the kinds this chart holds: rank 0 has no cache miss.
    legend = "(id) => Array.from(document.querySelectorAll('#' + id + ' .role-legend-label text')).map(t => t.textContent)"
    assert "CA cache miss" not in page.evaluate(f"({legend})('chart-0')")
    assert "CA cache miss" in page.evaluate(f"({legend})('chart-1')")
    verdict = page.evaluate("document.getElementById('verdict').innerText")
    assert "2 ranks of world size 2 recorded" in verdict
    assert "rank finding:" in verdict  # rank 1 captured a graph rank 0 did not


@pytest.mark.slow
def test_gated_run_shows_the_gate(browser, record_run, tmp_path):
    run = record_run("op_loop.py", extra=("--gate", "--max-ca-graphs", "1", "--no-config"))
    assert run.returncode == 1, run.stderr  # op_loop captures several graphs: the gate fails
    assert (run.path / "gate.json").is_file()
    for path in (run.path / "report.html", tmp_path / "again.html"):
        if path.parent == tmp_path:  # re-rendered later: the saved gate result is shown too
            proc = cagtool_in_process("report", str(run.path), "-o", str(path))
            assert proc.returncode == 0, proc.stderr
        page = open_report(browser, path, f"report-gated-{path.stem}")
        assert_clean(page, path)
        gate = page.evaluate("document.getElementById('gate').innerText")
        assert "gate FAILED" in gate and "max-ca-graphs" in gate and "FAIL" in gate


@pytest.fixture(scope="module")
def ragged(record_run):
    """A Dynamo recompile (the last, smaller batch) and CA recompiles: every kind of compile id."""
    run = record_run("ragged_batches.py")
    assert run.returncode == 0, run.stderr
    return run


def test_per_compile_detail_is_reachable_from_recompile_rows_and_graph_cards(browser, ragged):
    """tlparse's per-compile page in the report: each compile id's stack, Dynamo graph and guards,
    folded, linked from the recompile table's rows and from each CA graph's card."""
    from cagtool.record.schema import DynamoRecompileEvent
    from cagtool.report.compiles.detail import compile_details

    path = ragged.path / "report.html"
    page = open_report(browser, path, "report-per-compile-detail")
    assert_clean(page, path)
    ca = load_run(ragged.path).mode("ca")
    details = compile_details(ca)
    ids = [d.compile_id for d in details]
    assert "0/1" in ids and any(i.startswith("!") for i in ids)  # a forward recompile and CA graphs' compiles
    titles = page.evaluate("Array.from(document.querySelectorAll('article.compile h4')).map(h => h.textContent)")
    assert titles == [f"[{i}]" for i in ids]
    # Every link on the page to a compile lands on its article.
    hrefs = page.evaluate("Array.from(document.querySelectorAll('a[href^=\"#compile-\"]')).map(a => a.getAttribute('href'))")
    anchors = set(page.evaluate("Array.from(document.querySelectorAll('article.compile')).map(a => '#' + a.id)"))
    assert hrefs and set(hrefs) <= anchors
    # The Dynamo recompile's row links to its compile; clicking it shows the compile's article.
    recompiled = ca.of(DynamoRecompileEvent)[0].compile_id
    row_links = page.evaluate("Array.from(document.querySelectorAll('#recompiles table a')).map(a => [a.textContent, a.getAttribute('href')])")
    assert any(recompiled in text and href == "#compile-ca-" + recompiled.replace("/", "_") for text, href in row_links), row_links
    page.evaluate(f"document.querySelector('#recompiles table a[href=\"#compile-ca-{recompiled.replace('/', '_')}\"]').click()")
    page.wait_for(f"location.hash === '#compile-ca-{recompiled.replace('/', '_')}'", timeout=10)
    top = page.evaluate(f"document.getElementById('compile-ca-{recompiled.replace('/', '_')}').getBoundingClientRect().top")
    assert -2 <= top < VIEWPORT[1]  # sub-pixel scroll offsets
    # Each CA graph's card links to Dynamo's compiles of that graph.
    card_links = page.evaluate("Array.from(document.querySelectorAll('article.graph .graph-compiles a')).map(a => a.textContent)")
    assert card_links and all(t.startswith("[!") for t in card_links)
    # Each card's autograd-node list names the parameter every AccumulateGrad accumulates into.
    nodes = page.evaluate("Array.from(document.querySelectorAll('article.graph p.nodes')).map(p => p.innerText)")
    assert nodes and all(
        sorted(re.findall(r"AccumulateGrad \(\d+\) into (\S+?)(?:,|$)", text)) == ["0.bias", "0.weight", "2.bias", "2.weight"] for text in nodes
    ), nodes
    # The folded artifacts open to torch's text: the guard tree, the stack down to the user's line, the graph code.
    article = f"document.getElementById('compile-ca-{recompiled.replace('/', '_')}')"
    page.evaluate(f"{article}.querySelectorAll('details').forEach(d => d.open = true)")
    text = page.evaluate(f"{article}.innerText")
    assert "TREE_GUARD_MANAGER" in text and "size mismatch at index 0" in text
    assert "ragged_batches.py" in text and "class GraphModule" in text
    # Compile phases nest: AOTAutograd listed inside Dynamo, never as a row beside it.
    phases = page.evaluate("Array.from(document.querySelectorAll('.phase-tree li')).map(l => [l.className, l.textContent])")
    assert ["depth-0", "compile"] == [phases[0][0], phases[0][1].split(" ")[0]]
    assert any(c == "depth-2" and t.startswith("AOTAutograd") and "(inside Dynamo)" in t for c, t in phases), phases


@pytest.mark.slow
def test_what_to_do_is_the_verified_fix_the_measurements_support(browser, record_run, tmp_path):
    """After `--verify` measured ca-dynamic (recompiles 3 -> 2) and torch-pgo (3 -> 0), the page's
    "What to do" recommends torch-pgo, as the user applies it without cagtool. The verification
    is the one `recompiles --verify` keeps (its JSON), written here so no job re-runs."""
    from cagtool.record.seal import with_document_seal
    from cagtool.report.recompiles.verification import VERIFICATION_FILE, VERIFICATION_FORMAT

    recorded = record_run("ragged_batches.py")
    run = Path(shutil.copytree(recorded.path, tmp_path / "run"))

    def side(ca: int, dynamo: int, graphs: int) -> dict:
        return {"name": "x", "run": str(run), "status": "finished", "ca_recompiles": [ca], "dynamo_recompiles": [dynamo],
                "ca_graphs": [graphs], "compile_time_s": 1.0, "first_step_s": 2.0, "step_time_median_s": None, "steady_steps": 0,
                "peak_memory_bytes": None, "wall_s": 1.0, "hook_calls": [0]}

    def fix(name: str, env: dict, flags: list, measured: dict) -> dict:
        return {"fix": name, "title": name, "who": "run configuration (no code change)", "causes": [1], "run_flags": flags, "env": env,
                "measured": measured, "verdict": "verified", "reasons": ["counted"], "speedup": None, "speedup_low": None,
                "speedup_high": None, "numerics_agree": True, "patch": None, "patched_copy": None, "torch_says": None}

    data = {"format": VERIFICATION_FORMAT, "version": 1, "run": str(run), "mode": "ca", "repeat": 1, "baseline": side(1, 2, 3),
            "fixes": [fix("ca-dynamic", {}, ["--dynamic"], side(0, 2, 2)),
                      fix("torch-pgo", {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['args'][0]"}, ["--dynamic"], side(0, 0, 2))],
            "not_applied": [], "estimated_s": 1.0, "wall_s": 1.0}
    (run / VERIFICATION_FILE).write_text(json.dumps(with_document_seal(data)))  # as verify seals what it writes
    page_path = tmp_path / "report.html"
    proc = cagtool_in_process("report", str(run), "-o", str(page_path))
    assert proc.returncode == 0, proc.stderr
    page = open_report(browser, page_path, "report-verified-advice")
    advice = page.evaluate("document.getElementById('advice').innerText")
    assert advice.startswith("What to do: apply fix torch-pgo"), advice
    assert "set TORCH_COMPILE_DYNAMIC_SOURCES=\"L['args'][0]\" in the job's environment" in advice
    assert "torch.compile(..., dynamic=True)" in advice and "(recompiles 3 -> 0, compile " in advice
    verify = page.evaluate("document.getElementById('verify').innerText")
    assert "ca-dynamic: in your job, without cagtool: start compiled autograd dynamic" in verify


@pytest.mark.slow
def test_a_graph_card_says_how_many_sizes_torch_holds_dynamic_beside_those_its_code_reads(record_run, tmp_path):
    # padded_sequences.py: torch's miss says "total of 4", graph !2's code reads 2 (the others no node reads)
    run = record_run("../tests/scripts/padded_sequences.py")
    assert run.returncode == 0, run.stderr[-2000:]
    out = tmp_path / "r.html"
    proc = cagtool_in_process("report", str(run.path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "2 dynamic sizes read by its code (torch holds 4 dynamic)" in out.read_text(encoding="utf-8")
