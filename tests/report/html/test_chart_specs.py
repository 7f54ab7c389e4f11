"""The report's chart specs are written as plain dicts (no pandas, no altair: issue 12). They must
be the JSON altair built before, key for key, from the same rows (the altair builders below are
the ones the report used until then), and the step rows the figures `frames.steps_frame` gives,
on real records, a schema-1 record and a record with steps out of order and NaN losses. And
`cagtool run`'s end-of-run report imports neither pandas nor altair."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, as_old_schema

from cagtool.record.loader import load_run
from cagtool.report.compare.analysis import compare_modes
from cagtool.report.html import charts
from cagtool.report.html.document import Tables, _modes_by_base, _phase_rows, _series

THREE = "eager,aot,ca"


@pytest.fixture(scope="module")
def recordings(record_run):
    runs = [record_run("graph_breaks.py", "3", modes=THREE), record_run("op_loop.py")]
    for run in runs:
        assert run.returncode == 0, run.stderr
    return [run.path for run in runs]


def _shuffled_with_gaps(fresh: Path, target: Path) -> Path:
    """Step lines out of order, one NaN loss and one missing, an infinite backward time."""
    shutil.copytree(fresh, target)
    for mode in target.iterdir():
        if not (mode / "events.jsonl").is_file():
            continue
        events = [json.loads(line) for line in (mode / "events.jsonl").read_text().splitlines()]
        steps = [e for e in events if e["kind"] == "step"]
        assert len(steps) >= 3
        steps[0]["loss"] = float("nan")
        steps[1]["loss"] = None
        steps[2]["backward_s"] = float("inf")
        others = [e for e in events if e["kind"] != "step"]
        (mode / "events.jsonl").write_text("\n".join(json.dumps(e) for e in others + steps[::-1]) + "\n")
        (mode / "columns.json").unlink(missing_ok=True)
    return target


@pytest.fixture(scope="module")
def records(recordings, tmp_path_factory):
    base = tmp_path_factory.mktemp("chart-records")
    out = list(recordings)
    out.append(as_old_schema(recordings[1], base / "schema1", 1))
    out.append(_shuffled_with_gaps(recordings[1], base / "shuffled"))
    return out


def _frame_rows(series: list[charts.Series]) -> list[dict]:
    """The step rows as the report built them from `frames.steps_frame` (pandas) before."""
    from cagtool.report.frames import steps_frame

    rows = []
    for s in series:
        for step, row in steps_frame(s.record).iterrows():
            rows.append(
                {
                    "series": s.label,
                    "step": int(step),
                    "iteration_ms": charts._ms(row["iteration_s"]),
                    "backward_ms": charts._ms(row["backward_s"]),
                    "loss": charts._float(row["loss"]),
                    "compile_affected": bool(row["compile_affected"]),
                    "compiles": int(row["compiles"]),
                    "ca_captures": int(row["ca_captures"]),
                    "compile_ms": charts._ms(row["compile_s"]),
                }
            )
    return rows


def _altair_timeline(title: str, steps: list[dict], markers: list[dict]) -> dict:
    """The timeline as altair built it (the report's code until the plain-dict specs)."""
    import altair as alt
    import pandas as pd

    step_data = pd.DataFrame(steps, columns=list(charts._STEP_COLUMNS))
    zoom = alt.selection_interval(name="zoom", bind="scales", encodings=["x"])
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
    points = base.mark_point(filled=True, size=30).encode(x=x, y=y, color=color, tooltip=tooltip).properties(name=charts.STEP_MARKS)
    affected = (
        base.transform_filter("datum.compile_affected")
        .mark_point(filled=False, size=160, strokeWidth=1.5, color="#d62728")
        .encode(x=x, y=y, tooltip=tooltip)
        .properties(name=charts.AFFECTED_MARKS)
    )
    layers = [line, points]
    if any(row["compile_affected"] and row["iteration_ms"] for row in steps):
        layers.append(affected)
    if markers:
        marker_data = pd.DataFrame(markers, columns=list(charts._MARKER_COLUMNS))
        kinds = [k for k, _, _ in charts._MARKERS]
        scale = alt.Scale(domain=kinds, range=[c for _, _, c in charts._MARKERS])
        kind_color = alt.Color("kind:N", title="event", scale=scale, legend=alt.Legend(orient="top"))
        kind_shape = alt.Shape("kind:N", scale=alt.Scale(domain=kinds, range=[s for _, s, _ in charts._MARKERS]), legend=None)
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
        rules = marks.mark_rule(strokeDash=[3, 3], opacity=0.5).encode(x=x, color=alt.Color("kind:N", scale=scale, legend=None))
        lanes = {k: 7 + 11 * i for i, k in enumerate(kinds)}
        marks = marks.transform_calculate(lane=f"{json.dumps(lanes)}[datum.kind]")
        symbols = marks.mark_point(filled=True, size=110, opacity=0.9).encode(
            x=x, y=alt.Y("lane:Q", scale=None, axis=None), color=kind_color, shape=kind_shape, tooltip=marker_tooltip
        ).properties(name=charts.EVENT_MARKS)
        layers += [rules, symbols]
    chart = alt.layer(*layers).resolve_scale(color="independent").properties(title=title, width="container", height=240)
    return chart.to_dict(validate=False)


def _altair_phases(rows: list[dict]) -> dict:
    import altair as alt
    import pandas as pd

    phases = list(dict.fromkeys(r["phase"] for r in rows))
    chart = (
        alt.Chart(pd.DataFrame(rows, columns=["mode", "phase", "seconds"]))
        .mark_bar()
        .encode(
            y=alt.Y("mode:N", title=None, sort=None),
            yOffset=alt.YOffset("phase:N", sort=phases),
            x=alt.X("seconds:Q", title="compile time (s)"),
            color=alt.Color("phase:N", sort=phases, legend=alt.Legend(orient="top", title=None)),
            tooltip=[alt.Tooltip("mode:N"), alt.Tooltip("phase:N"), alt.Tooltip("seconds:Q", format=".3f")],
        )
        .properties(name=charts.PHASE_MARKS, title="Compile time by phase", width="container", height=max(60, 12 * len(rows)))
    )
    return chart.to_dict(validate=False)


def _same_view_name(spec: dict, view: str) -> str:
    """The spec as JSON text (key order included), with altair's hashed view name as ours."""
    text = json.dumps(spec)
    for layer in spec.get("layer", []):
        name = layer.get("name", "")
        if name.startswith("view_"):
            text = text.replace(json.dumps(name), json.dumps(view))
    return text


def test_step_rows_are_the_frames_figures(records):
    pytest.importorskip("pandas")
    compared = 0
    for path in records:
        for columns in (False, True):  # the sidecar's columns and the decoded events alike
            run = load_run(path, columns=columns)
            reference = load_run(path)
            for base, names in _modes_by_base(run).items():
                rows = charts.step_rows(_series(run, names, Tables()))
                expected = _frame_rows(_series(reference, names, Tables()))
                assert json.dumps(rows) == json.dumps(expected), (path, base)
                compared += len(rows)
    assert compared > 20


def test_specs_are_what_altair_built(records):
    pytest.importorskip("altair")
    pytest.importorskip("pandas")
    kinds = set()
    for path in records:
        run = load_run(path)
        tables = Tables()
        for base, names in _modes_by_base(run).items():
            series = _series(run, names, tables)
            steps, _ = charts.thin_steps(charts.step_rows(series))
            markers = charts.marker_rows(series)
            spec = charts.timeline_spec(f"mode {base}", steps, markers)
            assert _same_view_name(spec, charts.STEP_LINE_VIEW) == _same_view_name(_altair_timeline(f"mode {base}", steps, markers), charts.STEP_LINE_VIEW), (path, base)
            kinds.update(layer.get("name", "line") for layer in spec["layer"])
            kinds.add("markers" if markers else "no markers")
        phases = _phase_rows(compare_modes(run))
        assert json.dumps(charts.compile_phase_spec(phases)) == json.dumps(_altair_phases(phases)), path
    # Every layer was compared: ringed steps, markers, and a timeline without markers.
    assert {charts.STEP_MARKS, charts.AFFECTED_MARKS, charts.EVENT_MARKS, "markers", "no markers"} <= kinds


def test_the_vega_lite_version_is_altairs():
    alt = pytest.importorskip("altair")
    from altair.utils._importers import vl_version_for_vl_convert

    from cagtool.report.html.vega_bundle import VEGALITE_SCHEMA, VEGALITE_VERSION

    assert VEGALITE_SCHEMA == alt.SCHEMA_URL
    assert VEGALITE_VERSION == vl_version_for_vl_convert()


def test_datasets_are_typed_as_pandas_typed_them():
    rows = [{"a": 1, "b": 1, "c": True, "d": "x", "e": None}, {"a": 2, "b": None, "c": False, "d": float("nan"), "e": None}, {"a": 3, "b": float("inf"), "c": True, "d": None, "e": None}]
    name, values = charts._dataset(rows, ("a", "b", "c", "d", "e"))
    assert values == [
        {"a": 1, "b": 1.0, "c": True, "d": "x", "e": None},
        {"a": 2, "b": None, "c": False, "d": None, "e": None},
        {"a": 3, "b": None, "c": True, "d": None, "e": None},
    ]
    assert isinstance(values[0]["a"], int) and isinstance(values[0]["b"], float)
    assert name.startswith("data-") and len(name) == 37
    pd = pytest.importorskip("pandas")
    pytest.importorskip("altair")
    from altair.utils.data import to_values

    assert values == to_values(pd.DataFrame(rows, columns=list("abcde")))["values"]


def test_end_of_run_report_imports_neither_pandas_nor_altair(recordings, tmp_path):
    """`cagtool run` writes report.html with `report_after_run`: with the charts, the code and
    every section of a real 3-mode record, pandas and altair stay unimported."""
    run_dir = tmp_path / "run"
    shutil.copytree(recordings[0], run_dir)
    (run_dir / "report.html").unlink(missing_ok=True)
    code = (
        "import sys; from pathlib import Path; from cagtool.commands.report import report_after_run; "
        f"written = report_after_run(Path({str(run_dir)!r})); "
        "print(written, sorted(m for m in ('pandas', 'altair') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{run_dir / 'report.html'} []"
    html = (run_dir / "report.html").read_text()
    assert html.count('data-chart="chart-') == 4  # three timelines and the compile phases
    assert 'class="code"' in html and '<span class="k">def</span>' in html
