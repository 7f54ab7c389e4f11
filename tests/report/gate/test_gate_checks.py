"""Gate checks, threshold grammar, config merging and renderers on small hand-built snapshots."""

from __future__ import annotations

import json
import math
import random
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import ROOT

from cagtool.errors import UnreadableInput, UsageError
from cagtool.report.gate.baseline import ModeSnapshot, StepTimeSnapshot, load_baseline, quantile_band
from cagtool.report.gate.checks import (
    CompileTimeRegressionCheck,
    CountLimit,
    MaxCountCheck,
    MinSpeedupCheck,
    ModeStatusCheck,
    Outcome,
    SpeedupThreshold,
    StepTimeRegressionCheck,
    TimeThreshold,
    evaluate_all,
    parse_count,
    parse_speedup,
    parse_time_threshold,
    speedup_with_spread,
)
from cagtool.report.gate.config import (
    GateSettings,
    find_config,
    load_config,
    merge,
    settings_from_values,
)
from cagtool.report.gate.output import github_annotations, render_junit, render_markdown
from cagtool.report.gate.run import GateResult, build_checks


def snap(mode: str = "ca", *, median: float | None = 0.010, p10: float | None = None, p90: float | None = None,
         count: int = 20, status: str = "finished", compile_s: float = 1.0, **counts: int) -> ModeSnapshot:
    step = None
    if median is not None:
        step = StepTimeSnapshot(count, median, p10 if p10 is not None else median, p90 if p90 is not None else median, median)
    values = dict(ca_graphs=1, ca_cache_misses=0, dynamo_recompiles=0, recompiles=0, graph_breaks=0)
    values.update(counts)
    return ModeSnapshot(mode=mode, status=status, steps=count + 2, forward_graphs=1, backward_graphs=values["ca_graphs"],
                        compile_time_s=compile_s, step_time=step, **values)


# ------------------------------------------------------------------ grammar

@pytest.mark.parametrize("text, kind, limit", [("3", "total", 3), (3, "total", 3), ("ca:0", "ca", 0), (" dynamo : 2 ", "dynamo", 2)])
def test_parse_count(text, kind, limit):
    assert parse_count(text, "--max-recompiles", ("total", "ca", "dynamo")) == CountLimit(kind, limit)


@pytest.mark.parametrize("text", ["-1", "1.5", "x", "ca:", "foo:1", True, ""])
def test_parse_count_rejects(text):
    with pytest.raises(UsageError) as info:
        parse_count(text, "--max-recompiles", ("total", "ca", "dynamo"))
    assert "--max-recompiles" in str(info.value)


def test_parse_count_kind_only_where_allowed():
    with pytest.raises(UsageError, match="unknown kind 'ca'"):
        parse_count("ca:1", "--max-ca-graphs")


@pytest.mark.parametrize("text, expected", [
    ("1.05", SpeedupThreshold("ca", "aot", 1.05)),
    ("1.05x", SpeedupThreshold("ca", "aot", 1.05)),
    (2, SpeedupThreshold("ca", "aot", 2.0)),
    ("ca/eager:1.2", SpeedupThreshold("ca", "eager", 1.2)),
    ("aot/eager:0.9x", SpeedupThreshold("aot", "eager", 0.9)),
])
def test_parse_speedup(text, expected):
    assert parse_speedup(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "fast", "ca/ca:1", "ca/gpu:1", "ca:1.1"])
def test_parse_speedup_rejects(text):
    with pytest.raises(UsageError):
        parse_speedup(text)


@pytest.mark.parametrize("text, expected", [
    ("10", TimeThreshold(10, "%")),
    (10, TimeThreshold(10, "%")),
    ("7.5%", TimeThreshold(7.5, "%")),
    ("0.002s", TimeThreshold(0.002, "s")),
    ("p90:15%", TimeThreshold(15, "%", "p90")),
    ("mean:1e-3s", TimeThreshold(0.001, "s", "mean")),
])
def test_parse_time_threshold(text, expected):
    assert parse_time_threshold(text, "--max-regression", ("median", "mean", "p10", "p90")) == expected


@pytest.mark.parametrize("text", ["ten", "10ms", "-5%", "max:10%", True])
def test_parse_time_threshold_rejects(text):
    with pytest.raises(UsageError):
        parse_time_threshold(text, "--max-regression", ("median", "mean", "p10", "p90"))


def test_compile_threshold_has_no_field():
    with pytest.raises(UsageError, match="no FIELD"):
        parse_time_threshold("p90:10%", "--max-compile-regression")


# ------------------------------------------------------------------ count checks

@pytest.mark.parametrize("actual, limit, outcome", [(2, 2, Outcome.PASS), (3, 2, Outcome.FAIL), (1, 2, Outcome.IMPROVED)])
def test_count_check_is_exact_and_direction_aware(actual, limit, outcome):
    run = {"ca": snap(ca_graphs=actual)}
    [result] = evaluate_all([MaxCountCheck("max-ca-graphs", "ca_graphs", "ca", limit)], run, None)
    assert result.outcome is outcome
    assert result.failed is (outcome is Outcome.FAIL)
    assert result.data == {"metric": "ca_graphs", "actual": actual, "limit": limit, "delta": actual - limit}


def test_count_messages_have_a_fixed_format():
    run = {"ca": snap(ca_cache_misses=3)}
    check = MaxCountCheck("max-recompiles:ca", "ca_recompiles", "ca", 1)
    assert check.evaluate(run, None).message == "max-recompiles:ca (ca): CA recompiles 3 > 1 allowed (+2)"
    assert MaxCountCheck("max-recompiles:ca", "ca_recompiles", "ca", 3).evaluate(run, None).message == (
        "max-recompiles:ca (ca): CA recompiles 3 = 3 allowed"
    )
    assert MaxCountCheck("max-recompiles:ca", "ca_recompiles", "ca", 5).evaluate(run, None).message == (
        "max-recompiles:ca (ca): CA recompiles 3 < 5 allowed (-2): improved, lower the limit"
    )


def test_fail_on_improvement_fails_improvements_only():
    run = {"ca": snap(graph_breaks=0, ca_graphs=1)}
    checks = [MaxCountCheck("max-graph-breaks", "graph_breaks", "ca", 2), MaxCountCheck("max-ca-graphs", "ca_graphs", "ca", 1)]
    improved, exact = evaluate_all(checks, run, None, fail_on_improvement=True)
    assert improved.outcome is Outcome.IMPROVED and improved.failed
    assert exact.outcome is Outcome.PASS and not exact.failed


def test_count_limit_from_baseline():
    check = MaxCountCheck("max-graph-breaks", "graph_breaks", "ca", None, "baseline")
    worse = check.evaluate({"ca": snap(graph_breaks=3)}, {"ca": snap(graph_breaks=2)})
    assert worse.outcome is Outcome.FAIL and worse.limit == "<= 2 (baseline)"
    better = check.evaluate({"ca": snap(graph_breaks=1)}, {"ca": snap(graph_breaks=2)})
    assert better.outcome is Outcome.IMPROVED and "refresh the baseline" in better.message


def test_missing_mode_is_an_error_not_a_pass():
    [result] = evaluate_all([MaxCountCheck("max-ca-graphs", "ca_graphs", "ca", 9)], {"aot": snap("aot")}, None)
    assert result.outcome is Outcome.ERROR and result.failed
    assert "has no ca mode" in result.message


def test_fewer_counts_from_a_crashed_mode_are_not_an_improvement():
    result = MaxCountCheck("max-ca-graphs", "ca_graphs", "ca", 4).evaluate({"ca": snap(ca_graphs=1, status="failed")}, None)
    assert result.outcome is Outcome.PASS and "did not finish: not an improvement" in result.message


def test_failed_mode_fails_the_status_check():
    ok = ModeStatusCheck("ca").evaluate({"ca": snap(status="timeout")}, None)
    assert ok.outcome is Outcome.PASS
    crashed = ModeStatusCheck("ca").evaluate({"ca": snap(status="failed")}, None)
    assert crashed.failed and crashed.message.startswith("mode-finished (ca): status failed")


# ------------------------------------------------------------------ speedup

def test_speedup_and_spread():
    mid, low, high = speedup_with_spread(snap("ca", median=0.010, p10=0.009, p90=0.011), snap("aot", median=0.020, p10=0.018, p90=0.022))
    assert mid == pytest.approx(2.0)
    assert low == pytest.approx(0.018 / 0.011)
    assert high == pytest.approx(0.022 / 0.009)


def test_min_speedup_pass_fail_and_noise_note():
    """The same noise rule as compare (speedup_verdict): only a p10-p90 range wholly under the
    minimum fails; one that contains it passes with a note, whichever side the median is on."""
    run = {"ca": snap("ca", median=0.010, p10=0.008, p90=0.012), "aot": snap("aot", median=0.011, p10=0.010, p90=0.012)}
    passing = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.05)).evaluate(run, None)
    assert passing.outcome is Outcome.PASS and passing.actual == "1.100x"
    assert passing.notes and "within noise" in passing.notes[0]
    noisy = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.2)).evaluate(run, None)  # median 1.1 < 1.2, range to 1.5
    assert noisy.outcome is Outcome.PASS and "within the noise" in noisy.message
    failing = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.6)).evaluate(run, None)
    assert failing.outcome is Outcome.FAIL
    assert failing.message.startswith("min-speedup (ca/aot): speedup 1.100x (p10-p90 ")
    assert failing.message.endswith("< 1.6x required, beyond the noise")
    clear = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 0.5)).evaluate(run, None)
    assert clear.outcome is Outcome.PASS and not clear.notes


def test_min_speedup_without_steady_steps_is_an_error():
    run = {"ca": snap("ca", median=None), "aot": snap("aot")}
    result = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.0)).evaluate(run, None)
    assert result.outcome is Outcome.ERROR and result.failed


# ------------------------------------------------------------------ step and compile time

def test_step_time_regression_beyond_threshold_fails():
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": snap(median=0.010)}
    assert check.evaluate({"ca": snap(median=0.0105)}, base).outcome is Outcome.PASS
    worse = check.evaluate({"ca": snap(median=0.012)}, base)
    assert worse.outcome is Outcome.FAIL and worse.actual == "+20.0%" and worse.failed
    assert worse.message.startswith("max-regression (ca): step time median 12.000 ms vs baseline 10.000 ms: +20.0% > +10%, beyond the noise")
    better = check.evaluate({"ca": snap(median=0.008)}, base)
    assert better.outcome is Outcome.IMPROVED


def test_step_time_regression_within_noise_passes_with_a_note():
    """The one noise rule (speedup_verdict, as for --min-speedup): +20% at the medians with a 10%
    threshold, but the p10-p90 range of the ratio (0.8 ms of spread on 10 ms) contains +10%."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": snap(median=0.010, p10=0.0096, p90=0.0104)}
    noisy = check.evaluate({"ca": snap(median=0.012, p10=0.0100, p90=0.0140)}, base)
    assert noisy.outcome is Outcome.PASS and not noisy.failed
    assert noisy.data["low"] == pytest.approx(0.0100 / 0.0104) and noisy.data["high"] == pytest.approx(0.0140 / 0.0096)
    assert "+10% allowed is within the noise" in noisy.message
    assert noisy.notes and noisy.notes[0].startswith("within noise")
    # The same +20% with tight spreads on both sides is clearly beyond: the whole range is above +10%.
    clear = check.evaluate({"ca": snap(median=0.012, p10=0.0118, p90=0.0122)}, base)
    assert clear.outcome is Outcome.FAIL and clear.data["low"] > 1.10
    # The baseline's spread counts too.
    both = check.evaluate({"ca": snap(median=0.012)}, {"ca": snap(median=0.010, p10=0.007, p90=0.013)})
    assert both.outcome is Outcome.PASS and "within the noise" in both.message
    # An improvement counts only when the whole range is below -10%.
    unsure = check.evaluate({"ca": snap(median=0.008, p10=0.007, p90=0.0095)}, base)
    assert unsure.outcome is Outcome.PASS and unsure.notes and "within noise" in unsure.notes[0]


def test_step_time_regression_too_few_steps_is_an_error():
    """Fewer than 5 steady steps on either side: the gate cannot judge, which fails it (never a pass)."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    for run, base in ((snap(median=0.050, count=4), snap(median=0.010)), (snap(median=0.010), snap(median=0.010, count=3))):
        result = check.evaluate({"ca": run}, {"ca": base})
        assert result.outcome is Outcome.ERROR and result.failed
        assert "too few to judge a regression" in result.message


def test_step_time_field_and_absolute_threshold():
    base = {"ca": snap(median=0.010, p10=0.0099, p90=0.0101)}
    run = {"ca": snap(median=0.010, p10=0.0098, p90=0.0150)}
    assert StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca").evaluate(run, base).outcome is Outcome.PASS
    p90 = StepTimeRegressionCheck(TimeThreshold(10, "%", "p90"), "ca").evaluate(run, base)
    # The tail got worse (+48.5% at p90) but the median held: the range is that of the step
    # times, which reaches below 1.0, so it is within noise, not a failure.
    assert p90.actual == "+48.5%" and p90.outcome is Outcome.PASS and "within the noise" in p90.message
    tail = StepTimeRegressionCheck(TimeThreshold(10, "%", "p90"), "ca").evaluate({"ca": snap(median=0.0145, p10=0.0140, p90=0.0150)}, base)
    assert tail.outcome is Outcome.FAIL
    absolute = StepTimeRegressionCheck(TimeThreshold(0.0001, "s"), "ca").evaluate(
        {"ca": snap(median=0.0102, p10=0.0102, p90=0.0102)}, {"ca": snap(median=0.010)}
    )
    assert absolute.outcome is Outcome.FAIL and absolute.data["allowed_ratio"] == pytest.approx(1.01)


def test_step_time_without_steady_steps_is_an_error():
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    result = check.evaluate({"ca": snap(median=None)}, {"ca": snap()})
    assert result.outcome is Outcome.ERROR and "this run has no steady-state steps" in result.message


def test_compile_time_regression_with_the_fixed_noise_floor():
    """One compile figure per side: the ratio gets a fixed +/-10% band, and the line says so."""
    check = CompileTimeRegressionCheck(TimeThreshold(25, "%"), "ca")
    base = {"ca": snap(compile_s=2.0)}
    assert check.evaluate({"ca": snap(compile_s=2.4)}, base).outcome is Outcome.PASS
    # +30% against a 25% threshold: the band 1.18..1.43 contains 1.25, so within the noise, not a failure.
    noisy = check.evaluate({"ca": snap(compile_s=2.6)}, base)
    assert noisy.outcome is Outcome.PASS and noisy.data["noise"] == "floor"
    assert noisy.data["low"] == pytest.approx(1.3 / 1.1) and noisy.data["high"] == pytest.approx(1.3 * 1.1)
    assert "+25% allowed is within the noise" in noisy.message and "noise: fixed +/-10% floor" in noisy.message
    # +40%: the whole band (1.27..1.54) is above 1.25.
    failed = check.evaluate({"ca": snap(compile_s=2.8)}, base)
    assert failed.outcome is Outcome.FAIL and failed.failed
    assert failed.message.startswith("max-compile-regression (ca): total compile time 2.800 s vs baseline 2.000 s: +40.0% > +25%, beyond the noise (range +27.3%..+54.0%; noise: fixed +/-10% floor")
    assert "\n" not in failed.message
    assert check.evaluate({"ca": snap(compile_s=1.3)}, base).outcome is Outcome.IMPROVED  # 0.65 x 1.1 < 0.75
    assert check.evaluate({"ca": snap(compile_s=1.4)}, base).outcome is Outcome.PASS  # 0.70 x 1.1 is not
    absolute = CompileTimeRegressionCheck(TimeThreshold(0.5, "s"), "ca")
    assert absolute.evaluate({"ca": snap(compile_s=2.4)}, base).outcome is Outcome.PASS
    from_zero = check.evaluate({"ca": snap(compile_s=0.1)}, {"ca": snap(compile_s=0.0)})
    assert from_zero.outcome is Outcome.FAIL and from_zero.data["change_pct"] is None and from_zero.data["noise"] == "none"
    assert check.evaluate({"ca": snap(compile_s=0.0)}, {"ca": snap(compile_s=0.0)}).outcome is Outcome.PASS
    assert absolute.evaluate({"ca": snap(compile_s=0.1)}, {"ca": snap(compile_s=0.0)}).outcome is Outcome.PASS


def test_compile_time_regression_uses_the_baselines_measured_spread():
    """Three or more baseline compile times (run --repeat, baseline save --accumulate): the range is
    min(run)/max(baseline) .. max(run)/min(baseline), and the line names the samples compared."""
    check = CompileTimeRegressionCheck(TimeThreshold(25, "%"), "ca")
    base = {"ca": replace(snap(compile_s=2.0), compile_time_samples_s=(1.9, 2.0, 2.1))}
    inside = check.evaluate({"ca": snap(compile_s=2.6)}, base)  # 2.6 / 2.1 = 1.238 < 1.25
    assert inside.outcome is Outcome.PASS and inside.data["noise"] == "samples"
    assert "noise measured: 1 run vs 3 baseline compile times" in inside.message and "median 2.000 s of 3 runs" in inside.message
    beyond = check.evaluate({"ca": snap(compile_s=2.7)}, base)  # 2.7 / 2.1 = 1.286: beyond, though the floor would not fail it
    assert beyond.outcome is Outcome.FAIL and beyond.data["low"] == pytest.approx(2.7 / 2.1)
    assert check.evaluate({"ca": snap(compile_s=2.7)}, {"ca": snap(compile_s=2.0)}).outcome is Outcome.PASS
    # A wide spread in the baseline widens the range: +40% is no longer a clear regression.
    wide = {"ca": replace(snap(compile_s=2.0), compile_time_samples_s=(1.5, 2.0, 2.5))}
    assert check.evaluate({"ca": snap(compile_s=2.8)}, wide).outcome is Outcome.PASS
    # Two samples are not enough to measure a spread: the floor applies.
    two = {"ca": replace(snap(compile_s=2.0), compile_time_samples_s=(2.0, 2.0))}
    assert check.evaluate({"ca": snap(compile_s=2.6)}, two).data["noise"] == "floor"


def test_quantile_band_is_distribution_free_and_covers():
    # n = 20, q = 0.9: P(Bin(20, 0.9) <= 15) = 0.043 <= 5%, P(<= 16) = 0.133: the band is X(16)..X(20).
    assert quantile_band([float(i) for i in range(1, 21)], 0.9) == (16.0, 20.0)
    assert quantile_band([float(i) for i in range(20, 0, -1)], 0.1) == (1.0, 5.0)  # any order
    assert quantile_band([], 0.9) is None and quantile_band([3.0], 0.9) == (3.0, 3.0)
    # Coverage: over many random samples the true p90 of a skewed distribution lies in the band
    # at least about 90% of the time.
    rng = random.Random(7)
    true_p90 = -math.log(0.1)  # exponential(1)
    hits = sum(lo <= true_p90 <= hi for lo, hi in (quantile_band([rng.expovariate(1.0) for _ in range(60)], 0.9) for _ in range(400)))
    assert hits >= 0.86 * 400


def _banded(median: float, p10: float, p90: float, count: int = 60, spread: float = 0.05) -> ModeSnapshot:
    step = StepTimeSnapshot(count, median, p10, p90, median, p10_band_s=(p10 * (1 - spread), p10 * (1 + spread)),
                            p90_band_s=(p90 * (1 - spread), p90 * (1 + spread)))
    return replace(snap(median=median, p10=p10, p90=p90, count=count), step_time=step)


def test_tail_regression_fails_a_p90_threshold_and_warns_under_a_median_one():
    """The weak spot: the p90 +50% with the median unchanged. The p10-p90 spread contains any tail
    shift; the p90's own confidence bands do not."""
    base = {"ca": _banded(0.010, 0.009, 0.012)}
    run = {"ca": _banded(0.010, 0.009, 0.018)}
    tail = StepTimeRegressionCheck(TimeThreshold(10, "%", "p90"), "ca", name="max-regression:p90").evaluate(run, base)
    assert tail.outcome is Outcome.FAIL and tail.data["range"] == "p90 confidence bands"
    assert tail.data["low"] == pytest.approx(0.018 * 0.95 / (0.012 * 1.05))
    assert tail.message.startswith("max-regression:p90 (ca): step time p90 18.000 ms vs baseline 12.000 ms: +50.0% > +10%, beyond the noise (p90 confidence bands")
    median = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca", watch_tail=True).evaluate(run, base)
    assert median.outcome is Outcome.PASS and not median.failed
    assert len(median.warnings) == 1 and median.data["tail"]["verdict"] == "above"
    assert median.warnings[0].startswith("max-regression (ca): slower tail: step time p90 18.000 ms vs baseline 12.000 ms: +50.0% > +10%, beyond the noise")
    assert median.warnings[0].endswith("while the median is not; gate the tail with --max-regression p90:10%")
    # No warning when the tail moved within its noise, or when the p90 has a threshold of its own.
    assert not StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca", watch_tail=True).evaluate({"ca": _banded(0.010, 0.009, 0.0125)}, base).warnings
    assert not StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca").evaluate(run, base).warnings
    checks = build_checks(settings_from_values({"max_regression": ["10%", "p90:20%"]}, "flag"), "ca", object())  # type: ignore[arg-type]
    assert [(c.name, c.watch_tail) for c in checks if isinstance(c, StepTimeRegressionCheck)] == [("max-regression", False), ("max-regression:p90", False)]
    checks = build_checks(settings_from_values({"max_regression": "10%"}, "flag"), "ca", object())  # type: ignore[arg-type]
    assert [(c.name, c.watch_tail) for c in checks if isinstance(c, StepTimeRegressionCheck)] == [("max-regression", True)]


def test_tail_warning_reaches_every_output():
    base = {"ca": _banded(0.010, 0.009, 0.012)}
    result = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca", watch_tail=True).evaluate({"ca": _banded(0.010, 0.009, 0.018)}, base)
    gate = GateResult(Path("run"), "ca", GateSettings(), None, Path("b.json"), [result], [])
    assert gate.passed
    lines = github_annotations(gate)
    assert any(line.startswith("::warning title=cagtool gate%3A max-regression (ca)::max-regression (ca): slower tail") for line in lines)
    assert all("\n" not in line for line in lines)
    assert "> **warning:** max-regression (ca): slower tail" in render_markdown(gate)
    root = ET.fromstring(render_junit(gate))
    assert "warning: max-regression (ca): slower tail" in root.find(".//system-out").text
    from cagtool.report.gate.output import gate_from_dict, gate_to_dict

    assert gate_from_dict(json.loads(json.dumps(gate_to_dict(gate)))).results[0].warnings == result.warnings


# ------------------------------------------------------------------ settings

def test_settings_from_flags_and_merge_flags_win(tmp_path):
    config = settings_from_values(
        {"max-ca-graphs": 2, "max_recompiles": {"ca": 0, "dynamo": 1}, "baseline": "ci/b.json", "fail-on-improvement": True},
        str(tmp_path / "pyproject.toml"), base_dir=tmp_path,
    )
    assert config.baseline == tmp_path / "ci" / "b.json"
    flags = settings_from_values({"max_ca_graphs": "3", "max_recompiles": ["dynamo:4"], "fail_on_improvement": False}, "flag")
    merged = merge(config, flags)
    assert merged.max_ca_graphs == CountLimit("total", 3)
    assert merged.max_recompiles == {"ca": CountLimit("ca", 0), "dynamo": CountLimit("dynamo", 4)}
    assert merged.fail_on_improvement is False
    assert merged.baseline == tmp_path / "ci" / "b.json"
    assert merged.sources["max_ca_graphs"] == "flag"
    assert merged.sources["baseline"] == str(tmp_path / "pyproject.toml")


def test_unknown_config_key_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown gate setting 'max-graphs'"):
        settings_from_values({"max-graphs": 1}, "pyproject.toml")


def test_config_found_upward(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.cagtool.gate]\nmax-graph-breaks = 0\nmin-speedup = { "ca/eager" = 1.5 }\n')
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "a" / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no gate table: skipped
    monkeypatch.chdir(deep)
    found = find_config()
    assert found == (tmp_path / "pyproject.toml").resolve()
    settings = load_config(found)
    assert settings.max_graph_breaks == CountLimit("total", 0)
    assert settings.min_speedup == {"ca/eager": SpeedupThreshold("ca", "eager", 1.5)}


def test_bad_toml_is_a_usage_error(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.cagtool.gate\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_config(tmp_path / "pyproject.toml")


def test_build_checks_needs_thresholds_and_a_baseline_for_regressions():
    with pytest.raises(UsageError, match="no gate thresholds"):
        build_checks(GateSettings(), "ca", None)
    with pytest.raises(UsageError, match="--max-regression compares against a baseline"):
        build_checks(GateSettings(max_regression=TimeThreshold(10, "%")), "ca", None)


# ------------------------------------------------------------------ baseline file

@pytest.mark.parametrize("content, message", [
    (None, "baseline not found"),
    ("{not json", "not valid JSON"),
    ('{"format": "something-else"}', "is not a cagtool baseline"),
    ('{"format": "cagtool-baseline", "version": 99, "modes": {}}', "newer than this cagtool reads"),
    ('{"format": "cagtool-baseline", "version": 1, "modes": {}}', "has no modes"),
    ('{"format": "cagtool-baseline", "version": 1, "modes": {"ca": {"steps": 1}}}', "lacks 'ca_graphs'"),
])
def test_unreadable_baselines(tmp_path, content, message):
    path = tmp_path / "b.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UnreadableInput, match=message):
        load_baseline(path)


# ------------------------------------------------------------------ renderers

def _gate(results, warnings=()) -> GateResult:
    return GateResult(Path("/runs/r1"), "ca", GateSettings(), None, None, list(results), list(warnings))


def _results():
    run = {"ca": snap(ca_graphs=3, graph_breaks=0)}
    return evaluate_all(
        [
            ModeStatusCheck("ca"),
            MaxCountCheck("max-ca-graphs", "ca_graphs", "ca", 1),
            MaxCountCheck("max-graph-breaks", "graph_breaks", "ca", 2),
            MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.0)),
        ],
        run,
        None,
    )


def test_junit_one_testcase_per_check():
    gate = _gate(_results(), ["torch version differs"])
    root = ET.fromstring(render_junit(gate))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["mode-finished", "max-ca-graphs", "max-graph-breaks", "min-speedup"]
    assert suite.get("tests") == "4" and suite.get("failures") == "1" and suite.get("errors") == "1"
    failure = cases[1].find("failure")
    assert failure.get("type") == "regression" and "CA graphs 3 > 1 allowed" in failure.get("message")
    assert cases[2].find("failure") is None and "improved" in cases[2].find("system-out").text
    assert cases[3].find("error") is not None
    assert "torch version differs" in suite.find("system-err").text


def test_github_annotations_are_escaped():
    gate = _gate(_results(), ["machine differs: 100%\nreally"])
    lines = github_annotations(gate)
    assert lines[0] == "::error title=cagtool gate%3A max-ca-graphs (ca)::max-ca-graphs (ca): CA graphs 3 > 1 allowed (+2)"
    assert any(line.startswith("::warning title=cagtool gate%3A max-graph-breaks (ca)::") for line in lines)
    assert lines[-1] == "::warning title=cagtool gate%3A environment::machine differs: 100%25%0Areally"
    assert all("\n" not in line for line in lines)


def test_markdown_summary_table():
    text = render_markdown(_gate(_results()))
    assert text.startswith("### cagtool gate: ❌ failed")
    assert "| ❌ | `max-ca-graphs` | ca | 3 | <= 1 | FAIL |" in text
    assert text.count("\n| ") == 5  # header + 4 checks


def test_json_round_trips():
    from cagtool.report.gate.output import render_json

    data = json.loads(render_json(_gate(_results())))
    assert data["passed"] is False and data["exit_code"] == 1
    assert data["summary"] == {"checks": 4, "failed": 2, "pass": 1, "fail": 1, "improved": 1, "error": 1}
    assert [c["outcome"] for c in data["checks"]] == ["pass", "fail", "improved", "error"]


def test_text_report_golden():
    import io

    from cagtool.report.console import make_console
    from cagtool.report.gate.output import render_text

    buffer = io.StringIO()
    gate = _gate(_results(), ["torch version differs: baseline 2.12.0, this run 2.13.0+cpu"])
    render_text(gate, make_console(file=buffer, width=100))
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    assert lines == [
        "cagtool gate: run /runs/r1, mode ca",
        "Check             Mode    Actual    Limit     Result    Source",
        "mode-finished     ca      finished  finished  PASS      run",
        "max-ca-graphs     ca      3         <= 1      FAIL      flag",
        "max-graph-breaks  ca      0         <= 2      IMPROVED  flag",
        "min-speedup       ca/aot  -         >= 1x     ERROR     flag",
        "FAIL: max-ca-graphs (ca): CA graphs 3 > 1 allowed (+2)",
        "IMPROVED: max-graph-breaks (ca): graph breaks 0 < 2 allowed (-2): improved, lower the limit",
        "ERROR: min-speedup (ca/aot): cannot check: the run has no aot mode (it has: ca); record it with --modes including aot",
        "warning: torch version differs: baseline 2.12.0, this run 2.13.0+cpu",
        "improved: tighten the improved limits (flags or [tool.cagtool.gate]) so the gain is kept",
        "gate FAILED: 2 of 4 checks failed, 1 improved",
    ]


def test_the_documented_config_table_parses(tmp_path):
    docs = (ROOT / "docs" / "ci.md").read_text()
    table = docs.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "pyproject.toml").write_text(table)
    settings = load_config(tmp_path / "pyproject.toml")
    assert settings.mode == "ca"
    assert settings.max_recompiles == {"ca": CountLimit("ca", 0), "dynamo": CountLimit("dynamo", 2)}
    assert settings.baseline == tmp_path / "ci" / "cagtool-baseline.json"
    assert settings.max_regression == {"median": TimeThreshold(10, "%"), "p90": TimeThreshold(20, "%", "p90")}
    checks = build_checks(settings, "ca", load_baseline_stub())
    assert [c.name for c in checks] == [
        "mode-finished", "mode-finished", "max-ca-graphs", "max-recompiles:ca", "max-recompiles:dynamo",
        "max-graph-breaks", "min-speedup", "max-memory-ratio", "max-regression", "max-regression:p90", "max-compile-regression",
    ]


def load_baseline_stub():
    from cagtool.report.gate.baseline import Baseline

    return Baseline(modes={"ca": snap()})
