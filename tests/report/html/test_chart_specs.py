"""The report's chart specs are written as plain dicts (no pandas, no altair): the step rows are
the figures `frames.steps_frame` gives (plus the first step, timed from its first compile), on
real records, a schema-1 record and a record with steps out of order and NaN losses; the compile
phases are the JSON altair built, key for key; the timelines of a page share their axes and their
legends name only what the chart draws. And `cagtool run`'s end-of-run report imports neither
pandas nor altair."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
    """Step lines out of order, one NaN loss and one missing (an infinite backward time is no longer
    read: the loader refuses the record, tests/test_record_bounds.py)."""
    shutil.copytree(fresh, target)
    for mode in target.iterdir():
        if not (mode / "events.jsonl").is_file():
            continue
        events = [json.loads(line) for line in (mode / "events.jsonl").read_text().splitlines()]
        steps = [e for e in events if e["kind"] == "step"]
        assert len(steps) >= 3
        steps[0]["loss"] = float("nan")
        steps[1]["loss"] = None
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


def _first_step_from_events(record) -> tuple[int, float, str] | None:
    """(step, seconds, what it is timed from) of the record's first step when it compiled, from
    its events: the earliest start of a Dynamo compile, a CA capture or a backward call in it, to
    its end. None for schema-1 records (their first step is timed) and a first step that compiled
    nothing."""
    from cagtool.record.schema import BackwardEvent, CAGraphEvent, DynamoCompileEvent, StepEvent

    steps = record.of(StepEvent)
    if not steps or not steps[0].boundary:
        return None
    first = min(steps, key=lambda e: e.step)
    if not (first.compiles or first.ca_captures):
        return None
    starts = [(d.t - d.entire_frame_compile_time_s, "compile") for d in record.of(DynamoCompileEvent) if d.step == first.step and d.entire_frame_compile_time_s]
    starts += [(g.t - g.capture_s, "compile") for g in record.of(CAGraphEvent) if g.step == first.step]
    starts += [(b.t - b.backward_s, "backward") for b in record.of(BackwardEvent) if b.step == first.step][:1]
    start, why = min(starts)
    return first.step, first.t - start, charts.FIRST_STEP_TIMED_FROM[why]


def _frame_rows(series: list[charts.Series]) -> list[dict]:
    """The step rows as the report built them from `frames.steps_frame` (pandas) before, with the
    first step timed from the events when it compiled."""
    from cagtool.report.frames import steps_frame

    rows = []
    for s in series:
        first = _first_step_from_events(s.record)
        for step, row in steps_frame(s.record).iterrows():
            timed = first is not None and first[0] == step and row["iteration_s"] != row["iteration_s"]
            rows.append(
                {
                    "series": s.label,
                    "step": int(step),
                    "iteration_ms": charts._ms(first[1] if timed else row["iteration_s"]),
                    "backward_ms": charts._ms(row["backward_s"]),
                    "loss": charts._float(row["loss"]),
                    "compile_affected": bool(row["compile_affected"]),
                    "compiles": int(row["compiles"]),
                    "ca_captures": int(row["ca_captures"]),
                    "compile_ms": charts._ms(row["compile_s"]),
                    "timed_from": first[2] if timed else (charts.TIMED_FROM_PREVIOUS_END if row.get("boundary") else charts.TIMED_FROM_BACKWARD_STARTS),
                }
            )
    return rows


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
            x=alt.X("seconds:Q", title="compile time (s)", axis=alt.Axis(tickCount=8)),
            color=alt.Color("phase:N", sort=phases, legend=alt.Legend(orient="top", title=None)),
            tooltip=[alt.Tooltip("mode:N"), alt.Tooltip("phase:N"), alt.Tooltip("seconds:Q", format=".3f")],
        )
        .properties(name=charts.PHASE_MARKS, title="Compile time by phase", width="container", height=max(60, 12 * len(rows)))
    )
    return chart.to_dict(validate=False)


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


def test_step_rows_are_the_frames_figures_and_the_first_step_is_timed(records):
    """The compile step (step 0) is drawn: on the 3-mode record, aot's and ca's first steps are
    timed from their first compile, and each is the slowest step of its mode; eager's first step
    compiled nothing and stays undrawn (what the recorder sees of it leaves its forward out)."""
    run = load_run(records[0])
    for name in ("aot", "ca"):
        rows = charts.step_rows([charts.Series(name, run.modes[name])])
        first = rows[0]
        assert first["step"] == 0 and first["compile_affected"] and first["timed_from"] == charts.FIRST_STEP_TIMED_FROM["compile"]
        assert first["iteration_ms"] > max(r["iteration_ms"] for r in rows[1:])
    eager = charts.step_rows([charts.Series("eager", run.modes["eager"])])
    assert eager[0]["step"] == 0 and eager[0]["iteration_ms"] is None


def test_phases_are_what_altair_built(records):
    pytest.importorskip("altair")
    pytest.importorskip("pandas")
    for path in records:
        run = load_run(path)
        phases = _phase_rows(compare_modes(run))
        assert json.dumps(charts.compile_phase_spec(phases)) == json.dumps(_altair_phases(phases)), path


def _layers(spec: dict) -> list[dict]:
    out = []
    for layer in spec.get("layer", []):
        out.extend(_layers(layer) if "layer" in layer else [layer])
    return out


def test_timelines_share_their_axes_and_legends_name_what_occurs(records):
    """The A/B page of the 3-mode record (A) against the op_loop record (B): one chart per mode,
    the same step range and step-time scale on each; each chart's legends list the records it
    draws and the marker kinds it holds; A's and B's markers in lanes of their own."""
    a, b = load_run(records[0]), load_run(records[1])
    tables = Tables()
    groups = []
    for base in ("eager", "aot", "ca"):
        series = _series(a, [base], tables, "A ", "A") + (_series(b, [base], tables, "B ", "B") if base in b.modes else [])
        markers = charts.marker_rows(series)
        steps, _ = charts.drawn_step_rows(series, markers)
        groups.append((series, steps, markers))
    axes = charts.shared_axes([r for g in groups for r in g[1]], [m for g in groups for m in g[2]],
                              [s.label for g in groups for s in g[0]], [charts.lane_of(s) for g in groups for s in g[0]])
    assert axes.lanes == ("A", "B") and axes.log
    assert axes.steps == (0, max(r["step"] for g in groups for r in g[1]))
    specs = [charts.timeline_spec(f"mode {base}", steps, markers, axes) for base, (_, steps, markers) in zip(("eager", "aot", "ca"), groups)]
    scales = set()
    for spec, (series, steps, markers) in zip(specs, groups):
        layers = _layers(spec)
        points = next(layer for layer in layers if layer.get("name") == charts.STEP_MARKS)
        scales.add(json.dumps([points["encoding"]["x"]["scale"], points["encoding"]["y"]["scale"]]))
        assert points["encoding"]["color"]["legend"]["values"] == [s.label for s in series if any(r["series"] == s.label for r in steps)]
        symbols = [layer for layer in layers if layer.get("name", "").startswith(charts.EVENT_MARKS)]
        kinds = {m["kind"] for m in markers}
        assert len(symbols) == len(kinds)  # a layer per kind, side by side in a lane
        for layer in symbols:
            assert sorted(layer["encoding"]["color"]["legend"]["values"]) == sorted(kinds)
            assert layer["encoding"]["y"]["scale"]["domain"] == ["A", "B"]
        assert {m["lane"] for m in markers} <= {"A", "B"}
    assert len(scales) == 1  # identical axes on every chart
    ca_markers = groups[2][2]
    assert {m["lane"] for m in ca_markers} == {"A", "B"}
    # The kinds no chart holds are in no legend: on torch 2.13 this page has no Dynamo recompile (2.14
    # recompiles its own frames inside op_loop's captures: tests/test_torch_internals.py).
    assert set(axes.kinds) == {m["kind"] for g in groups for m in g[2]}
    if torch.__version__.startswith("2.13."):
        assert charts.MARKER_DYNAMO not in axes.kinds


def test_the_log_axis_is_labelled_at_powers_of_ten():
    assert charts._log_ticks(0.05, 30_000) == [0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0]
    assert charts._log_ticks(3, 40) == [5.0, 10.0, 20.0]


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
    assert html.count('data-chart="chart-') == 2  # every mode on one timeline, and the compile phases
    assert 'class="code"' in html and '<span class="k">def</span>' in html


def test_a_report_whose_own_module_fails_to_import_does_not_blame_vl_convert(recordings, tmp_path):
    """One of cagtool's own modules not importable (an install changed under a long run): the end
    of the run says the report was not written and how to retry, not that vl-convert is missing."""
    run_dir = tmp_path / "run"
    shutil.copytree(recordings[0], run_dir)
    code = (
        "import sys; from pathlib import Path; sys.modules['cagtool.report.html.document'] = None; "
        "from cagtool.commands.report import report_after_run; "
        f"print(report_after_run(Path({str(run_dir)!r})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert proc.returncode == 0 and proc.stdout.strip() == "None", proc.stderr
    assert "cagtool: report not written: ModuleNotFoundError: " in proc.stderr and "vl-convert" not in proc.stderr, proc.stderr
    assert f"(retry with: cagtool report {run_dir})" in proc.stderr
