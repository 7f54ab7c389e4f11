"""Gate checks, threshold grammar, config merging and renderers on small hand-built snapshots."""

from __future__ import annotations

import json
import math
import random
import statistics
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from conftest import ROOT

from cagtool.errors import UnreadableInput, UsageError
from cagtool.report.figures.metrics import heavy_load_bound
from cagtool.report.gate.baseline import ModeSnapshot, StepTimeSnapshot, load_baseline
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
    finish,
    insist_on_power,
    parse_count,
    parse_speedup,
    parse_time_threshold,
    speedup_interval,
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
from cagtool.report.figures.intervals import ProcessSteps, change_text, timing_sample
from cagtool.report.figures.metrics import load_range


def series(median: float, spread: float = 0.02, count: int = 100, seed: int = 1) -> list[float]:
    """Step times scattered log-normally around `median` (fixed seed: the same list every time)."""
    rng = random.Random(seed)
    return [median * math.exp(rng.gauss(0.0, spread)) for _ in range(count)]


def timed(steps: list[float] | None, mode: str = "ca", *, compile_s: float = 1.0, status: str = "finished",
          processes: list[list[float]] | None = None, **counts: int) -> ModeSnapshot:
    """A snapshot whose step times are `steps` (one process), or `processes` (one list of steps
    each, in blocks 1, 2, ...), as run_snapshots builds it."""
    step = None
    if processes:
        steps = [t for p in processes for t in p]
    if steps:
        sample = timing_sample([ProcessSteps(i, p) for i, p in enumerate(processes or [steps], 1)])
        v = sample.values
        step = StepTimeSnapshot(len(steps), v["median"], v["p10"], v["p90"], v["mean"], sample)
    values = dict(ca_graphs=1, ca_cache_misses=0, dynamo_recompiles=0, recompiles=0, graph_breaks=0)
    values.update(counts)
    return ModeSnapshot(mode=mode, status=status, steps=len(steps or ()) + 2, forward_graphs=1, backward_graphs=values["ca_graphs"],
                        compile_time_s=compile_s, step_time=step, **values)


def snap(mode: str = "ca", *, median: float | None = 0.010, spread: float = 0.0, count: int = 20, seed: int = 1,
         status: str = "finished", compile_s: float = 1.0, processes: int = 5, between: float = 0.01, **counts: int) -> ModeSnapshot:
    """A mode of `processes` processes (blocks 1, 2, ...) of `count` steps each: each process's
    median drawn `between` apart (log-normal run-to-run noise), its steps `spread` around it."""
    if median is None:
        return timed(None, mode, compile_s=compile_s, status=status, **counts)
    rng = random.Random(seed * 7919)
    medians = [median * math.exp(rng.gauss(0.0, between)) if processes > 1 else median for _ in range(processes)]
    runs = [series(m, spread, count, seed * 31 + i) for i, m in enumerate(medians)]
    return timed(None, mode, compile_s=compile_s, status=status, processes=runs, **counts)


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

def test_speedup_interval_pairs_the_modes_blocks():
    """aot/ca of one run: the ratio in each block of processes, and the sign-test interval of
    their median (pinned exactly in tests/report/figures/test_intervals.py)."""
    interval = speedup_interval(snap("ca", median=0.010, spread=0.05, count=100), snap("aot", median=0.020, spread=0.05, count=100, seed=2))
    assert interval is not None and interval.ratio == pytest.approx(2.0, rel=0.05)
    assert interval.low <= interval.ratio <= interval.high
    assert interval.method == "sign" and interval.units == (5, 5) and interval.unit == "process"


def test_min_speedup_pass_fail_and_inconclusive():
    """The same rule as compare (speedup_verdict): an interval wholly under the minimum fails,
    wholly over it passes, one that contains it is INCONCLUSIVE and says what would resolve it."""
    run = {"ca": snap("ca", median=0.010, spread=0.10, count=40), "aot": snap("aot", median=0.011, spread=0.10, count=40, seed=2)}
    clear = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 0.5)).evaluate(run, None)
    assert clear.outcome is Outcome.PASS and clear.notes[0].startswith("evidence: wall time per step, 5 paired blocks")
    speedup, low, high = clear.data["speedup"], clear.data["low"], clear.data["high"]
    assert low <= speedup <= high
    noisy = MinSpeedupCheck(SpeedupThreshold("ca", "aot", round((speedup + high) / 2, 3))).evaluate(run, None)
    assert noisy.outcome is Outcome.INCONCLUSIVE and not noisy.failed
    assert "inconclusive, the interval contains" in noisy.message and "run --repeat" in noisy.notes[0]
    failing = MinSpeedupCheck(SpeedupThreshold("ca", "aot", round(high + 0.05, 2))).evaluate(run, None)
    assert failing.outcome is Outcome.FAIL and failing.failed
    assert failing.message.startswith("min-speedup (ca/aot): speedup ") and "(90% CI " in failing.message
    # One process per mode: a ratio, not a verdict, unless beyond the assumed run-to-run noise.
    one = {"ca": snap("ca", median=0.010, processes=1), "aot": snap("aot", median=0.011, processes=1)}
    assert MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.0)).evaluate(one, None).outcome is Outcome.INCONCLUSIVE
    far = {"ca": snap("ca", median=0.010, processes=1), "aot": snap("aot", median=0.040, processes=1)}
    assert MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.0)).evaluate(far, None).outcome is Outcome.PASS


def test_min_speedup_without_steady_steps_is_an_error():
    run = {"ca": snap("ca", median=None), "aot": snap("aot")}
    result = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.0)).evaluate(run, None)
    assert result.outcome is Outcome.ERROR and result.failed


# ------------------------------------------------------------------ step and compile time

_FIGURES = r"median (\d+\.\d+) ms vs baseline (\d+\.\d+) ms \(the medians of (\d+) and (\d+) processes: ([+-]\d+\.\d)%\)"
_JUDGED = r"; judged on the ratio of the geometric means of every process's median, (\d+\.\d+) ms vs (\d+\.\d+) ms: ([+-]\d+\.\d)%"


def test_no_printed_change_contradicts_the_figures_beside_it():
    """One run against a baseline of three processes whose medians are 2.478, 4.624 and 2.080 ms
    (a CI owner's real baseline): the line printed `median 2.659 ms vs baseline 2.478 ms (the
    medians of 1 and 3 processes): -7.6%`, the sign opposite to its own figures (+7.3%): the
    verdict's ratio is of the geometric means (2.659 / 2.877), not of the medians printed. Each
    change is now printed beside the figures it is of, the verdict's ratio named, and --format
    json's fields agree with each other; the verdict is the ratio's, as before."""
    import re

    from cagtool.report.figures.intervals import ratio_interval
    from cagtool.report.gate.checks import baseline_figure, baseline_figure_words, regression_verdict

    def process(median_ms: float) -> list[float]:
        return [t * median_ms / 1e3 for t in (0.9, 0.95, 1.0, 1.05, 1.1) * 6]

    base = timed(None, processes=[process(2.478), process(4.624), process(2.080)])
    for run_ms in (2.659, 3.991):  # -7.6% / +7.3%, and +38.7% / +61.1% (the graph-break run)
        run = timed(None, processes=[process(run_ms)])
        result = StepTimeRegressionCheck(TimeThreshold(20, "%"), "ca").evaluate({"ca": run}, {"ca": base})
        figures, judged = re.search(_FIGURES, result.message), re.search(_JUDGED, result.message)
        assert figures and judged, result.message
        now, before = float(figures[1]), float(figures[2])
        assert (now, before, figures[3], figures[4]) == (run_ms, 2.478, "1", "3")
        assert float(figures[5]) == pytest.approx(100 * (now / before - 1), abs=0.06)  # the medians' own change
        gm_now, gm_before = float(judged[1]), float(judged[2])
        assert gm_before == pytest.approx((2.478 * 4.624 * 2.080) ** (1 / 3), abs=1e-3)
        assert float(judged[3]) == pytest.approx(100 * (gm_now / gm_before - 1), abs=0.06)  # the ratio's, of its own figures
        d = result.data
        assert d["change_pct"] == pytest.approx(100 * (d["actual_s"] / d["baseline_s"] - 1))
        assert d["ratio_of"] == "geometric_means" and d["ratio"] == pytest.approx(d["ratio_actual_s"] / d["ratio_baseline_s"])
        assert (d["run_figures_s"], sorted(d["baseline_figures_s"])) == (pytest.approx([run_ms / 1e3]), pytest.approx([2.080e-3, 2.478e-3, 4.624e-3]))
        assert result.actual == change_text(d["ratio"])
        # The verdict is the ratio's, unchanged.
        r = ratio_interval(run.step_time.sample, base.step_time.sample, "median")
        assert result.outcome is regression_verdict(r.ratio, r.low, r.high, 30, 1.2, 0.8).outcome
    # `baseline show` says both figures, in the gate's words.
    figure = baseline_figure(base.step_time.sample)
    assert baseline_figure_words(base.step_time).endswith(
        f"median 2.478 ms (the median of 3 processes' medians; judged on their geometric mean {figure.geometric_mean * 1e3:.3f} ms "
        "against a run of fewer than 3 processes)")
    assert f"vs {figure.geometric_mean * 1e3:.3f} ms: " in result.message
    # Three processes a side: the rank interval's ratio is the median of the 9 pairs' ratios, of no
    # two figures, and says so where it differs from the medians' change.
    three = timed(None, processes=[process(2.0), process(2.1), process(5.0)])
    spread = timed(None, processes=[process(1.0), process(2.0), process(3.0)])
    ranked = StepTimeRegressionCheck(TimeThreshold(20, "%"), "ca").evaluate({"ca": three}, {"ca": spread})
    assert "(the medians of 3 and 3 processes: +5.0%); judged on the median of the 9 ratios of a process of this run to one of the baseline's: +66." in ranked.message
    assert ranked.data["ratio_of"] == "pairwise_median" and ranked.data["ratio_actual_s"] is None
    # One process a side: one figure each, one change.
    single = StepTimeRegressionCheck(TimeThreshold(20, "%"), "ca").evaluate({"ca": timed(None, processes=[process(3.0)])},
                                                                            {"ca": timed(None, processes=[process(2.0)])})
    assert ": step time median 3.000 ms vs baseline 2.000 ms: +50.0%" in single.message and "judged on" not in single.message
    # Compile times, by the same words: the medians' change beside them, the verdict's ratio named.
    compiled = CompileTimeRegressionCheck(TimeThreshold(20, "%"), "ca").evaluate(
        {"ca": replace(snap(compile_s=2.1), compile_time_samples_s=(2.0, 2.1, 6.0))},
        {"ca": replace(snap(compile_s=2.0), compile_time_samples_s=(1.0, 2.0, 3.0))})
    assert compiled.message.startswith("max-compile-regression (ca): total compile time median 2.100 s of 3 runs vs baseline median "
                                       "2.000 s of 3 runs: +5.0%; judged on the median of the 9 ratios of a process of this run to one "
                                       "of the baseline's: +")
    assert compiled.actual == change_text(compiled.data["ratio"]) != "+5.0%" and compiled.data["change_pct"] == pytest.approx(5.0)


def test_step_time_regression_beyond_threshold_fails():
    """Five processes a side: +5% passes a 10% threshold, +20% fails it, -20% is an improvement."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": snap(median=0.010, spread=0.02, count=200)}
    assert check.evaluate({"ca": snap(median=0.0105, spread=0.02, count=200, seed=2)}, base).outcome is Outcome.PASS
    worse = check.evaluate({"ca": snap(median=0.012, spread=0.02, count=200, seed=3)}, base)
    assert worse.outcome is Outcome.FAIL and worse.failed
    assert worse.message.startswith("max-regression (ca): step time median ") and " > +10% (90% CI +" in worse.message
    assert worse.notes[0].startswith("evidence: wall time per step, 5 vs 5 processes (rank interval; run-to-run noise +/-")
    better = check.evaluate({"ca": snap(median=0.008, spread=0.02, count=200, seed=4)}, base)
    assert better.outcome is Outcome.IMPROVED


def test_one_run_a_side_catches_13x_and_3x_and_is_inconclusive_on_5_percent():
    """The gate with one run a side, as `baseline save` from one run suggests: the run-to-run noise
    is not measured, so the assumed one is used and said. A job ~13x and ~3x slower fails a 5%
    threshold; an unchanged run is INCONCLUSIVE (exit 5), never PASS, and says the machine's noise
    is wider than the threshold; a threshold beyond that noise passes it."""
    check = StepTimeRegressionCheck(TimeThreshold(5, "%"), "ca")
    base = {"ca": snap(median=0.004, spread=0.05, count=100, processes=1)}
    for slowed in (0.054, 0.014):
        result = check.evaluate({"ca": snap(median=slowed, spread=0.05, count=100, seed=2, processes=1)}, base)
        assert result.outcome is Outcome.FAIL, result.message
        assert "run-to-run noise not measured, assumed " in result.notes[0]
    same = check.evaluate({"ca": snap(median=0.004, spread=0.05, count=100, seed=3, processes=1)}, base)
    assert same.outcome is Outcome.INCONCLUSIVE and not same.failed
    assert any("wider than the +5% threshold" in n for n in same.notes)
    assert "+1e+" not in same.message and "inf" not in same.message
    wide = StepTimeRegressionCheck(TimeThreshold(200, "%"), "ca").evaluate({"ca": snap(median=0.004, spread=0.05, count=100, seed=3, processes=1)}, base)
    assert wide.outcome is Outcome.PASS


def test_a_baseline_of_five_processes_measures_the_noise_one_run_is_judged_against():
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": snap(median=0.004, spread=0.05, count=100, between=0.01)}
    same = check.evaluate({"ca": snap(median=0.004, spread=0.05, count=100, seed=3, processes=1)}, base)
    assert same.outcome is Outcome.PASS and same.data["method"] == "t" and same.data["noise_measured"]
    slowed = check.evaluate({"ca": snap(median=0.0048, spread=0.05, count=100, seed=4, processes=1)}, base)
    assert slowed.outcome is Outcome.FAIL


def test_inconclusive_is_its_own_outcome_and_require_power_fails_it():
    check = StepTimeRegressionCheck(TimeThreshold(5, "%"), "ca")
    result = finish(check.evaluate({"ca": snap(median=0.0104, processes=1)}, {"ca": snap(median=0.010, processes=1)}), False)
    assert result.outcome is Outcome.INCONCLUSIVE and not result.failed
    insisted = insist_on_power(result)
    assert insisted.outcome is Outcome.ERROR and insisted.failed and insisted.message.endswith("(--require-power)")
    gate = GateResult(Path("run"), "ca", GateSettings(), None, Path("b.json"), [result], [])
    assert gate.passed and gate.inconclusive and gate.exit_code == 5
    root = ET.fromstring(render_junit(gate))
    assert root.find(".//skipped").get("type") == "inconclusive" and root.find("testsuite").get("skipped") == "1"
    assert github_annotations(gate)[0].startswith("::warning title=cagtool gate INCONCLUSIVE%3A max-regression (ca)::")
    assert render_markdown(gate).startswith("### cagtool gate: ❔ inconclusive")


def test_step_time_regression_too_few_steps_is_an_error():
    """Fewer than 5 steady steps on either side: the gate cannot judge, which fails it (never a pass)."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    for run, base in ((snap(median=0.050, count=4, processes=1), snap(median=0.010, processes=1)), (snap(median=0.010, processes=1), snap(median=0.010, count=3, processes=1))):
        result = check.evaluate({"ca": run}, {"ca": base})
        assert result.outcome is Outcome.ERROR and result.failed
        assert "too few to judge a regression" in result.message


def test_step_time_against_an_old_baseline_is_an_error_that_says_resave():
    old = {"ca": replace(snap(), step_time=replace(snap().step_time, sample=None))}
    result = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca").evaluate({"ca": snap()}, old)
    assert result.outcome is Outcome.ERROR and "re-save it (cagtool baseline save RUN)" in result.message
    batches = {"ca": replace(snap(), step_time=replace(snap().step_time, sample=replace(snap().step_time.sample, unit="batch")))}
    result = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca").evaluate({"ca": snap()}, batches)
    assert result.outcome is Outcome.ERROR and "not one figure per process" in result.message


def _tail_processes(seed: int, slow_tail: bool, k: int = 5) -> ModeSnapshot:
    runs = []
    for i in range(k):
        steps = series(0.010, 0.02, 400, seed=seed * 17 + i)
        runs.append([t * 1.5 if slow_tail and j % 5 == 0 else t for j, t in enumerate(steps)])
    return timed(None, processes=runs)


def test_step_time_field_and_absolute_threshold():
    """A tail shift under an unchanged median: only the p90 check sees it."""
    base, run = {"ca": _tail_processes(5, False)}, {"ca": _tail_processes(6, True)}
    assert StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca").evaluate(run, base).outcome is Outcome.PASS
    p90 = StepTimeRegressionCheck(TimeThreshold(10, "%", "p90"), "ca").evaluate(run, base)
    assert p90.outcome is Outcome.FAIL and p90.data["field"] == "p90"
    absolute = StepTimeRegressionCheck(TimeThreshold(0.0005, "s"), "ca").evaluate(
        {"ca": snap(median=0.0110, spread=0.01, count=400, seed=7, between=0.002)}, {"ca": snap(median=0.010, spread=0.01, count=400, between=0.002)}
    )
    assert absolute.outcome is Outcome.FAIL and absolute.data["allowed_ratio"] == pytest.approx(1.05, rel=1e-2)


def test_step_time_without_steady_steps_is_an_error():
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    result = check.evaluate({"ca": snap(median=None)}, {"ca": snap()})
    assert result.outcome is Outcome.ERROR and "this run has no steady-state steps" in result.message


def test_compile_time_regression_with_one_figure_a_side():
    """One compile time a side: the run-to-run noise is assumed, so only a change beyond it is
    called: +20% against 10% is inconclusive, 3x fails."""
    check = CompileTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": snap(compile_s=2.0)}
    unsure = check.evaluate({"ca": snap(compile_s=2.4)}, base)
    assert unsure.outcome is Outcome.INCONCLUSIVE and unsure.data["noise_measured"] is False
    assert unsure.message.startswith("max-compile-regression (ca): total compile time 2.400 s vs baseline 2.000 s: +20.0%: inconclusive")
    assert "compile time, 1 vs 1 process: run-to-run noise not measured" in unsure.notes[0]
    assert check.evaluate({"ca": snap(compile_s=6.0)}, base).outcome is Outcome.FAIL
    assert check.evaluate({"ca": snap(compile_s=0.5)}, base).outcome is Outcome.IMPROVED
    from_zero = check.evaluate({"ca": snap(compile_s=0.1)}, {"ca": snap(compile_s=0.0)})
    assert from_zero.outcome is Outcome.FAIL and from_zero.data["change_pct"] is None
    assert check.evaluate({"ca": snap(compile_s=0.0)}, {"ca": snap(compile_s=0.0)}).outcome is Outcome.PASS
    absolute = CompileTimeRegressionCheck(TimeThreshold(0.5, "s"), "ca")
    assert absolute.evaluate({"ca": snap(compile_s=0.1)}, {"ca": snap(compile_s=0.0)}).outcome is Outcome.PASS


def test_compile_time_regression_with_measured_noise():
    """Compile times of several processes (run --repeat, baseline save --accumulate): the rank
    interval of the ratio from the processes' log compile times."""
    check = CompileTimeRegressionCheck(TimeThreshold(25, "%"), "ca")
    base = {"ca": replace(snap(compile_s=2.0), compile_time_samples_s=(1.9, 2.0, 2.1))}
    run = {"ca": replace(snap(compile_s=2.6), compile_time_samples_s=(2.5, 2.6, 2.7))}
    result = check.evaluate(run, base)
    assert result.data["noise_measured"] and result.data["method"] == "rank" and "median 2.000 s of 3 runs" in result.message
    differences = sorted(math.log(a) - math.log(b) for a in (2.5, 2.6, 2.7) for b in (1.9, 2.0, 2.1))
    assert (math.log(result.data["low"]), math.log(result.data["high"])) == pytest.approx((differences[0], differences[-1]))
    assert result.outcome is Outcome.INCONCLUSIVE  # 1.25 inside the interval
    beyond = check.evaluate({"ca": replace(snap(compile_s=3.0), compile_time_samples_s=(2.95, 3.0, 3.05))}, base)
    assert beyond.outcome is Outcome.FAIL and beyond.data["low"] > 1.25


def test_tail_regression_fails_a_p90_threshold_and_warns_under_a_median_one():
    """The p90 +50% with the median unchanged: the p90 check fails on the interval of the p90
    ratio; a median check passes and warns, naming the tail."""
    base, run = {"ca": _tail_processes(21, False)}, {"ca": _tail_processes(22, True)}
    tail = StepTimeRegressionCheck(TimeThreshold(10, "%", "p90"), "ca", name="max-regression:p90").evaluate(run, base)
    assert tail.outcome is Outcome.FAIL and tail.data["range"] == "90% CI"
    assert tail.message.startswith("max-regression:p90 (ca): step time p90 ")
    median = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca", watch_tail=True).evaluate(run, base)
    assert median.outcome is Outcome.PASS and not median.failed
    assert len(median.warnings) == 1 and median.data["tail"]["verdict"] == "above"
    assert median.warnings[0].startswith("max-regression (ca): slower tail: step time p90 ")
    assert median.warnings[0].endswith("while the median is not; gate the tail with --max-regression p90:10%")
    # No warning when the tail did not move, or when the p90 has a threshold of its own.
    assert not StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca", watch_tail=True).evaluate({"ca": _tail_processes(23, False)}, base).warnings
    assert not StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca").evaluate(run, base).warnings
    checks = build_checks(settings_from_values({"max_regression": ["10%", "p90:20%"]}, "flag"), "ca", object())  # type: ignore[arg-type]
    assert [(c.name, c.watch_tail) for c in checks if isinstance(c, StepTimeRegressionCheck)] == [("max-regression", False), ("max-regression:p90", False)]
    checks = build_checks(settings_from_values({"max_regression": "10%"}, "flag"), "ca", object())  # type: ignore[arg-type]
    assert [(c.name, c.watch_tail) for c in checks if isinstance(c, StepTimeRegressionCheck)] == [("max-regression", True)]


def test_tail_warning_reaches_every_output():
    base = {"ca": _tail_processes(21, False)}
    result = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca", watch_tail=True).evaluate({"ca": _tail_processes(22, True)}, base)
    gate = GateResult(Path("run"), "ca", GateSettings(), None, Path("b.json"), [result], [])
    assert gate.passed
    lines = github_annotations(gate)
    assert any(line.startswith("::warning title=cagtool gate%3A max-regression (ca)::max-regression (ca): slower tail") for line in lines)
    assert all("\n" not in line for line in lines)
    assert "> **warning:** max-regression (ca): slower tail" in render_markdown(gate)
    root = ET.fromstring(render_junit(gate))
    assert "warning: max-regression (ca): slower tail" in root.find(".//system-out").text
    from cagtool.report.gate.result_file import gate_from_document, gate_json

    assert gate_from_document(json.loads(gate_json(gate))).results[0].warnings == result.warnings


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
    ('{"format": "cagtool-baseline", "version": 1, "modes": {"ca": {"steps": 1}}}', "missing required field `ca_graphs`"),
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
    assert data["summary"] == {"checks": 4, "failed": 2, "pass": 1, "fail": 1, "improved": 1, "error": 1, "inconclusive": 0}
    assert [c["outcome"] for c in data["checks"]] == ["pass", "fail", "improved", "error"]


def test_text_report_golden():
    import io

    from cagtool.report.text.console import make_console
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


def test_a_ca_threshold_reads_the_ca_mode_and_fails_without_it():
    """--max-ca-graphs 1 on a run recorded without the ca mode must not pass as IMPROVED on aot's
    0 CA graphs: a CA-specific limit reads the ca mode, which the run lacks: an error."""
    settings = settings_from_values({"max_ca_graphs": "1", "max_recompiles": ["ca:0", "dynamo:0"]}, "flag")
    checks = build_checks(settings, "aot", None)
    assert [(type(c).__name__, c.mode) for c in checks] == [
        ("ModeStatusCheck", "aot"), ("ModeStatusCheck", "ca"), ("MaxCountCheck", "ca"), ("MaxCountCheck", "ca"), ("MaxCountCheck", "aot"),
    ]
    results = evaluate_all(checks, {"aot": snap("aot", ca_graphs=0)}, None)
    by_name = {r.check: r for r in results}
    assert by_name["max-ca-graphs"].outcome is Outcome.ERROR and "the run has no ca mode" in by_name["max-ca-graphs"].message
    assert by_name["max-recompiles:dynamo"].outcome is Outcome.PASS


def test_a_ca_limit_on_another_gated_mode_says_which_mode_it_counts():
    """`gate --mode eager --max-ca-graphs 0` counts the ca mode's graphs (eager captures none, so
    its 0 would pass on a run that never measured CA). That is said, never silent: the header
    names the check and its mode beside the gated one, each such check's note says why, and its
    data carries the gated mode for --format json. A check of the gated mode itself says nothing."""
    import io

    from cagtool.report.gate.output import render_json, render_text
    from cagtool.report.text.console import make_console

    settings = settings_from_values({"max_ca_graphs": "0", "max_recompiles": ["ca:0", "1"]}, "flag")
    checks = build_checks(settings, "eager", None)
    for run in ({"eager": snap("eager", ca_graphs=0), "ca": snap(ca_graphs=2)}, {"eager": snap("eager", ca_graphs=0)}):
        results = evaluate_all(checks, run, None)
        by_name = {r.check: r for r in results}
        for name in ("max-ca-graphs", "max-recompiles:ca"):
            r = by_name[name]
            assert r.mode == "ca" and r.data["gated_mode"] == "eager", r
            assert r.notes[0].startswith("counted on mode ca, not on the gated mode eager: only the ca mode captures CA graphs")
        assert by_name["max-recompiles"].mode == "eager" and "gated_mode" not in by_name["max-recompiles"].data
        assert not any(n.startswith("counted on mode") for n in by_name["max-recompiles"].notes)
        gate = GateResult(Path("/runs/r1"), "eager", settings, None, None, results, [])
        buffer = io.StringIO()
        render_text(gate, make_console(file=buffer, width=200))
        assert buffer.getvalue().splitlines()[0] == (
            "cagtool gate: run /runs/r1, mode eager (max-ca-graphs, max-recompiles:ca on mode ca: only ca captures CA graphs)")
        data = json.loads(render_json(gate))
        assert data["mode"] == "eager" and [c["data"].get("gated_mode") for c in data["checks"] if c["mode"] == "ca" and c["check"] != "mode-finished"] == ["eager"] * 2
    # Gating ca itself: nothing to say.
    plain = evaluate_all(build_checks(settings, "ca", None), {"ca": snap(ca_graphs=2)}, None)
    assert not any("gated_mode" in r.data or any(n.startswith("counted on mode") for n in r.notes) for r in plain)
    buffer = io.StringIO()
    render_text(_gate(plain), make_console(file=buffer, width=200))
    assert buffer.getvalue().splitlines()[0] == "cagtool gate: run /runs/r1, mode ca"


def test_baseline_show_reads_the_figure_the_regression_check_compares_with():
    """`baseline show` prints the baseline figure a max-regression check compares against through
    the check's own functions (`baseline_figure`, `side_figure`): the median of the processes'
    figures on the measure the gate chooses, not all steps pooled. It is the figure the check
    prints as `vs baseline`, on wall time, on CPU time, and with an even number of processes (the
    median of the two middle ones)."""
    from cagtool.report.gate.checks import _fmt_s, baseline_figure, baseline_figure_words

    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    wall = snap(median=0.010, spread=0.3, count=60, between=0.2, processes=4)
    cpu = _wall_over_cpu(snap(), 4.0, 1.05, 1)  # CPU-bound, its wall time 5% more
    for base, measure, words in ((wall, "wall", "step time median"), (cpu, "cpu", "CPU time per step median")):
        figure = baseline_figure(base.step_time.sample)
        result = check.evaluate({"ca": base}, {"ca": base})
        assert figure.measure == measure and result.data["measure"] == measure
        assert f"{words} {_fmt_s(result.data['actual_s'])} vs baseline {_fmt_s(figure.seconds)} (the medians of " in result.message
        assert result.data["baseline_s"] == figure.seconds and figure.processes == base.step_time.sample.repetitions
        figures = sorted(base.step_time.sample.figures(measure, "median"))
        assert figure.seconds == statistics.median(figures)
    # Four processes: the median is the mean of the middle two, as `the medians of` says (the gate
    # took the upper one).
    middle = sorted(wall.step_time.sample.units["median"])[1:3]
    assert baseline_figure(wall.step_time.sample).seconds == sum(middle) / 2 != middle[1]
    # CPU time: the wall-time figure is given beside it, for a run whose steps are not CPU-bound.
    cpu_figure = baseline_figure(cpu.step_time.sample)
    assert cpu_figure.otherwise == ("wall", statistics.median(cpu.step_time.sample.figures("wall", "median")))
    assert cpu_figure.otherwise[1] == pytest.approx(1.05 * cpu_figure.seconds)
    assert baseline_figure(wall.step_time.sample).otherwise is None
    # The line `baseline show` prints, in the check's own format.
    assert baseline_figure_words(cpu.step_time) == (
        f"gate --max-regression compares against: CPU time per step median {_fmt_s(cpu_figure.seconds)} (the median of 5 processes' "
        f"medians; judged on their geometric mean {_fmt_s(cpu_figure.geometric_mean)} against a run of fewer than 3 processes; "
        f"wall time per step {_fmt_s(cpu_figure.otherwise[1])} against a run whose steps are not CPU-bound)")
    assert baseline_figure_words(replace(cpu.step_time, sample=None)).endswith("saved by an older cagtool, its step times are not one "
                                                                               "figure per process (re-save it: cagtool baseline save RUN)")


def test_the_advice_asks_only_for_the_processes_a_side_lacks():
    """An inconclusive check of one run against a baseline of 5 processes asked for `about 3
    processes a side ... baseline save from such a run`: the baseline has them already. The
    advice names the side that lacks them."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    five = snap(median=0.010, spread=0.02, count=60, between=0.03)
    one = snap(median=0.012, spread=0.02, count=60, processes=1, seed=3)
    result = check.evaluate({"ca": one}, {"ca": five})
    assert result.outcome is Outcome.INCONCLUSIVE, result.message
    assert result.notes[0].startswith("evidence: wall time per step, 1 vs 5 processes")
    assert result.notes[0].endswith("; about 3 processes of this run would resolve it (run --repeat 3; the baseline's 5 processes are enough)")
    assert "baseline save" not in result.notes[0]
    # The other way round: this run has the processes, the baseline lacks them.
    other = check.evaluate({"ca": snap(median=0.013, spread=0.02, count=60, seed=3, between=0.05)},
                           {"ca": snap(median=0.010, spread=0.02, count=60, processes=1)})
    assert other.outcome is Outcome.INCONCLUSIVE, other.message
    assert "a baseline of about 3 processes would resolve it (this run's 5 are enough)" in other.notes[0]
    # Neither side has them: both are asked for, as before.
    both = check.evaluate({"ca": snap(median=0.0115, spread=0.02, count=60, processes=1, seed=3)},
                          {"ca": snap(median=0.010, spread=0.02, count=60, between=0.05)})
    assert both.notes[0].endswith("about 16 processes a side would resolve it (run --repeat 16, baseline save from such a run)")


@pytest.mark.parametrize("field", ["median", "mean", "p10", "p90"])
def test_with_five_processes_a_side_twice_the_threshold_fails_and_no_change_passes(field):
    """Five processes a side, 2% apart, 1,000 steps each: a +20% regression fails a 10% threshold
    on every statistic; the same job unchanged (other seeds) passes."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%", field), "ca")
    base = {"ca": snap(median=0.005, spread=0.05, count=1_000, seed=11, between=0.02)}
    worse = check.evaluate({"ca": snap(median=0.006, spread=0.05, count=1_000, seed=12, between=0.02)}, base)
    assert worse.outcome is Outcome.FAIL, worse.message
    same = check.evaluate({"ca": snap(median=0.005, spread=0.05, count=1_000, seed=13, between=0.02)}, base)
    assert same.outcome is Outcome.PASS, same.message


# ------------------------------------------------------------------ the machine's load

def _waiting(s: ModeSnapshot, share: float) -> ModeSnapshot:
    return replace(s, step_time=replace(s.step_time, cpu_wait=share))


def test_waits_with_nothing_else_on_the_cpus_are_the_jobs_own_not_the_machines_load():
    """The run's threads waited for a CPU 30% of their time, but nothing outside the job ran on its
    CPUs (0.01 cores): its own threads and processes outnumbered them (a change that starts more
    workers or threads). The +20% that the load words would call the machine's is the code's: a
    FAIL, with a note that says why the wait is not weighed; beside a neighbour (0.9 cores) the same
    figures are inconclusive, as before."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": _waiting(snap(median=0.010, spread=0.02, count=200), 0.05)}
    slower = _waiting(snap(median=0.012, spread=0.02, count=200, seed=3), 0.30)
    own = check.evaluate({"ca": replace(slower, step_time=replace(slower.step_time, others_cores=0.01))}, base)
    assert own.outcome is Outcome.FAIL and own.failed and "load_decided" not in own.data, own.message
    assert any("this run's steps waited for a CPU 30% of their runnable time while nothing else ran on its CPUs (0.01 cores on average)"
               in n for n in own.notes), own.notes
    beside = check.evaluate({"ca": replace(slower, step_time=replace(slower.step_time, others_cores=0.9))}, base)
    assert beside.outcome is Outcome.INCONCLUSIVE and beside.data["load_decided"] == "above", beside.message
    # a baseline that barely waited (0.1%) with nothing else running is not said to have competed with itself
    quiet = {"ca": replace(base["ca"], step_time=replace(_waiting(base["ca"], 0.001).step_time, others_cores=0.0))}
    said = check.evaluate({"ca": replace(slower, step_time=replace(slower.step_time, others_cores=0.01))}, quiet)
    assert not any("the baseline's steps waited" in n for n in said.notes), said.notes


def test_a_cpu_bound_jobs_own_waits_fail_the_mean_on_its_wall_time():
    """A one-thread job's every 4th step waits 30 ms for a CPU its own other processes hold
    (nothing else on its CPUs): less the waits, its steps are the baseline's, but the waits are the
    job's own doing, so the mean FAILs on the wall time, not on the wall time less its waits."""
    stalled = _stalled_side(0.030, 2, wait=30 / 34)
    own = replace(stalled, step_time=replace(stalled.step_time, cpu_wait=0.2, others_cores=0.0))
    result = StepTimeRegressionCheck(TimeThreshold(25, "%", "mean"), "ca").evaluate({"ca": own}, {"ca": _stalled_side(0.0, 1)})
    assert result.outcome is Outcome.FAIL and result.data["measure"] == "wall", result.message
    assert any("its waits for a CPU the job's own (nothing else ran on its CPUs)" in n for n in result.notes), result.notes


def test_a_regression_the_load_alone_could_explain_is_inconclusive_and_says_why():
    """A verdict the machine's load could have decided is neither a FAIL nor a PASS (docs/ci.md):
    the load-corrected interval at either end of the load's range gives another outcome."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": _waiting(snap(median=0.010, spread=0.02, count=200), 0.05)}
    # +20% slower, but this run's threads waited for a CPU 30% of the time against 5%: 1.36x slower from that alone.
    loaded = check.evaluate({"ca": _waiting(snap(median=0.012, spread=0.02, count=200, seed=3), 0.30)}, base)
    assert loaded.outcome is Outcome.INCONCLUSIVE and not loaded.failed
    assert loaded.message.startswith("max-regression (ca): step time median ") and (
        ": inconclusive, the machine's load, not the code, may have decided it: corrected for the load, the outcome would turn (90% CI " in loaded.message)
    assert loaded.data["load_factor"] == pytest.approx(0.95 / 0.70)
    assert loaded.data["verdict"] == "inconclusive" and loaded.data["load_decided"] == "above"
    assert loaded.warnings == ["max-regression (ca): load: this run waited for a CPU 30% of its runnable time, the baseline 5%, "
                               "which alone can make this run's steps 1.36-1.63x slower, and without that difference the check would pass: "
                               "rerun on a quieter runner"]
    # A quieter run hiding a regression: its figures pass, corrected they fail: inconclusive, never a PASS.
    hidden = check.evaluate({"ca": _waiting(snap(median=0.0105, spread=0.02, count=200, seed=2), 0.0)}, {"ca": _waiting(base["ca"], 0.40)})
    assert hidden.outcome is Outcome.INCONCLUSIVE and "the check would FAIL" in hidden.warnings[0]
    # The model's factor is a lower bound (metrics.LOAD_EXPONENT): +35% against a 20% wait is
    # +14% by the model, still a FAIL, and +2.5% by the law measured on torch steps: inconclusive.
    bound = check.evaluate({"ca": _waiting(snap(median=0.0135, spread=0.02, count=200, seed=3), 0.20)}, base)
    assert bound.outcome is Outcome.INCONCLUSIVE and "1.19-1.32x slower" in bound.warnings[0] and "the check would" in bound.warnings[0]
    # A regression far beyond what the load can do still fails, with the load as a note.
    beyond = check.evaluate({"ca": _waiting(snap(median=0.030, spread=0.02, count=200, seed=3), 0.30)}, base)
    assert beyond.outcome is Outcome.FAIL and beyond.failed and not beyond.warnings and any(n.startswith("load: this run waited") for n in beyond.notes)
    # A small load difference that changes nothing: a note, no warning.
    same = check.evaluate({"ca": _waiting(snap(median=0.0105, spread=0.02, count=200, seed=2), 0.08)}, base)
    assert same.outcome is Outcome.PASS and not same.warnings and any(n.startswith("load: this run waited") for n in same.notes)
    # Not measured on one side (an older baseline): nothing said.
    older = check.evaluate({"ca": _waiting(snap(median=0.0105, spread=0.02, count=200, seed=2), 0.30)}, {"ca": snap(median=0.010, spread=0.02, count=200)})
    assert "load_factor" not in older.data and not older.warnings


def test_min_speedup_the_load_alone_could_make_is_inconclusive():
    run = {"ca": _waiting(snap("ca", median=0.008, spread=0.02, count=200), 0.0), "aot": _waiting(snap("aot", median=0.010, spread=0.02, count=200, seed=2), 0.5)}
    result = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.1)).evaluate(run, None)
    assert result.outcome is Outcome.INCONCLUSIVE and result.data["load_factor"] == pytest.approx(2.0) and result.data["load_decided"] == "above"
    assert result.warnings[0].startswith("min-speedup (ca/aot): load: aot waited for a CPU 50% of its runnable time, ca 0%, which alone can make aot's steps 2.00-3.03x slower")
    assert "the check would FAIL" in result.warnings[0]
    assert ": inconclusive, the machine's load, not the code, may have decided it: corrected for the load, the outcome would turn and it rests on steps" in result.message


def test_an_outcome_resting_on_a_side_that_waited_half_its_time_is_inconclusive():
    """Beyond half its time waiting, a step of several threads can slow far more than the wait says
    (docs/ci.md): an outcome that rests on that side is inconclusive; one the load worked against stands."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": _waiting(snap(median=0.010, spread=0.02, count=200), 0.55)}
    # Equal heavy loads (no load factor to speak of): a FAIL rests on this run.
    failed = check.evaluate({"ca": _waiting(snap(median=0.012, spread=0.02, count=200, seed=3), 0.55)}, base)
    assert failed.outcome is Outcome.INCONCLUSIVE and not failed.failed
    assert failed.warnings == ["max-regression (ca): load: this run's median step waited for a CPU 55% of its runnable time: beyond 40%, "
                               "the load can slow a step far more than the wait alone says, its CPU time included (a step that waits that "
                               "long loses its caches to the neighbours), up to 11x on wall time, so the machine's load, not the code, "
                               "may have decided the outcome: rerun on a quieter runner"]
    # A FAIL beyond what the load may have done at its most (1 / (1 - 0.55) cubed: 11x) stands.
    far = check.evaluate({"ca": _waiting(snap(median=0.25, spread=0.02, count=200, seed=3), 0.55)}, base)
    assert far.outcome is Outcome.FAIL and not far.warnings
    assert any("this run's median step waited for a CPU 55%" in n and n.endswith("and the outcome holds even so") for n in far.notes)
    # A PASS rests on the baseline's steps not having been slow.
    passed = check.evaluate({"ca": _waiting(snap(median=0.0101, spread=0.02, count=200, seed=2), 0.0)}, base)
    assert passed.outcome is Outcome.INCONCLUSIVE and any("the baseline's median step waited for a CPU 55%" in w for w in passed.warnings)
    # This run heavily loaded and still no regression: the load worked against the PASS, which stands.
    against = check.evaluate({"ca": _waiting(snap(median=0.0101, spread=0.02, count=200, seed=2), 0.55)}, {"ca": _waiting(base["ca"], 0.0)})
    assert against.outcome is Outcome.PASS and not against.warnings and any(n.startswith("load: this run waited") for n in against.notes)
    quiet = check.evaluate({"ca": _waiting(snap(median=0.0101, spread=0.02, count=200, seed=2), 0.2)}, {"ca": _waiting(base["ca"], 0.2)})
    assert quiet.outcome is Outcome.PASS and not quiet.warnings
    # min-speedup: a clear PASS rests on the denominator (aot) being slow; ca's own load does not weaken it.
    run = {"ca": _waiting(snap("ca", median=0.005, spread=0.02, count=200), 0.6), "aot": _waiting(snap("aot", median=0.010, spread=0.02, count=200, seed=2), 0.6)}
    result = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.1)).evaluate(run, None)
    assert result.outcome is Outcome.INCONCLUSIVE and [w for w in result.warnings if "aot's median step waited" in w] and not [w for w in result.warnings if "ca's median step" in w]
    worked_against = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 1.1)).evaluate({**run, "aot": _waiting(run["aot"], 0.0)}, None)
    assert worked_against.outcome is Outcome.PASS
    # A minimum far below what the load may have done to aot (1 / (1 - 0.6) cubed: 15.6x) stands.
    wide = MinSpeedupCheck(SpeedupThreshold("ca", "aot", 0.01)).evaluate(run, None)
    assert wide.outcome is Outcome.PASS and not wide.warnings and any("and the outcome holds even so" in n for n in wide.notes)


def test_an_unchanged_job_that_waited_49_percent_against_19_is_not_a_regression():
    """Measured: the same one-thread job, 5 processes a side, read 3.03x slower on wall time where
    its median step waited 49 % than where it waited 19 % (the law's bound for the pair: 2.09x).
    A FAIL resting on a run that waited 40 % or more of its runnable time is INCONCLUSIVE; the same
    figures at 35 % are judged by the law, and FAIL."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "aot")
    base = {"aot": _waiting(snap("aot", median=0.003105, spread=0.05, count=25), 0.19)}
    loaded = check.evaluate({"aot": _waiting(snap("aot", median=0.009414, spread=0.05, count=25, seed=2), 0.49)}, base)
    assert loaded.outcome is Outcome.INCONCLUSIVE and not loaded.failed and loaded.data["load_decided"] == "above"
    assert any("waited for a CPU 49% of its runnable time: beyond 40%" in w for w in loaded.warnings), loaded.warnings
    judged = check.evaluate({"aot": _waiting(snap("aot", median=0.009414, spread=0.05, count=25, seed=2), 0.35)}, base)
    assert judged.outcome is Outcome.FAIL


def test_a_step_that_mostly_sleeps_is_bounded_by_the_part_a_load_can_slow(tmp_path):
    """A step of 5.5 ms: 0.5 ms on a CPU, 0.4 ms waiting for one (45% of its runnable time), the
    rest asleep (a wait for data or a device, which no load lengthens): runnable 16% of its time.
    A 5.3x slowdown of such steps, one process a side on wall time, FAILs: the heavy load may have
    made the runnable part 6x as long, the whole step at most 1.18x, not the 6x a step all on the
    CPU could take. The same figures as a step all on the CPU: INCONCLUSIVE, as before."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": _waiting(snap(median=0.0011, spread=0.05, count=60), 0.0)}
    runnable = 0.9 / 5.5
    loaded = _waiting(snap(median=0.0058, spread=0.05, count=60, seed=3), 0.4 / 5.5)  # the share of its wall time it waited
    sleepy = replace(loaded, step_time=replace(loaded.step_time, runnable=runnable))
    assert sleepy.step_time.runnable_wait == pytest.approx(0.4 / 0.9)
    assert heavy_load_bound(0.4 / 0.9, "wall", runnable) == pytest.approx(1 / ((1 - runnable) + runnable * (1 - 0.4 / 0.9) ** 3))
    failed = check.evaluate({"ca": sleepy}, base)
    assert failed.outcome is Outcome.FAIL, failed.message
    assert any("waited for a CPU 44% of its runnable time (runnable 16% of its time: the load lengthens only that part)" in n
               and "up to 1.2x on wall time" in n and n.endswith("the outcome holds even so") for n in failed.notes), failed.notes
    all_on_cpu = check.evaluate({"ca": _waiting(snap(median=0.0058, spread=0.05, count=60, seed=3), 0.4 / 0.9)}, base)
    assert all_on_cpu.outcome is Outcome.INCONCLUSIVE
    # The baseline file keeps the runnable share (a step all on the CPU writes none: 1).
    from cagtool.report.gate.baseline import Baseline, save_baseline

    saved = load_baseline(save_baseline(Baseline(modes={"ca": sleepy}, target={"name": "t.py"}, versions={}), tmp_path / "b.json"))
    assert saved.modes["ca"].step_time.runnable == pytest.approx(runnable, abs=1e-6)
    assert check.evaluate({"ca": base["ca"]}, {"ca": saved.modes["ca"]}).data["load_factor"] == pytest.approx(1 - 0.4 / 5.5, abs=1e-6)
    whole = load_baseline(save_baseline(Baseline(modes=base, target={"name": "t.py"}, versions={}), tmp_path / "c.json"))
    assert whole.modes["ca"].step_time.runnable is None and "runnable" not in (tmp_path / "c.json").read_text()


def test_a_baseline_keeps_the_cpu_wait_of_its_steps(tmp_path):
    from cagtool.report.gate.baseline import Baseline, save_baseline

    saved = save_baseline(Baseline(modes={"ca": _waiting(snap(median=0.010, spread=0.02, count=50), 0.25)}, target={"name": "t.py"}, versions={}), tmp_path / "b.json")
    assert load_baseline(saved).modes["ca"].step_time.cpu_wait == pytest.approx(0.25)


def _cpu_bound(s: ModeSnapshot, cpu_ms: float, seed: int) -> ModeSnapshot:
    """`s` with five CPU-bound processes of 60 steps around `cpu_ms` of CPU each (wall time equal)."""
    processes = [[t / 1000.0 for t in series(cpu_ms * (1 + 0.02 * i), 0.05, 60, seed * 10 + i)] for i in range(5)]
    sample = timing_sample([ProcessSteps(i, p, cpu=p, thread_cpu=p) for i, p in enumerate(processes, 1)])
    v = sample.values
    return replace(s, step_time=StepTimeSnapshot(300, v["median"], v["p10"], v["p90"], v["mean"], sample))


def test_a_cpu_time_verdict_resting_on_a_side_that_waited_half_its_time_is_inconclusive():
    """An unchanged job's CPU time per step doubled beside six busy loops (its median step waiting
    75% of its runnable time): CPU time is no shelter from a heavy load, and such a FAIL is
    INCONCLUSIVE with the heavy-load warning, as on wall time."""
    check = StepTimeRegressionCheck(TimeThreshold(25, "%"), "ca")
    base = {"ca": _waiting(_cpu_bound(snap(), 4.2, 1), 0.09)}
    loaded = {"ca": _waiting(_cpu_bound(snap(), 8.7, 2), 0.75)}
    result = check.evaluate(loaded, base)
    assert result.data["measure"] == "cpu" and result.data["load_decided"] == "above"
    assert result.outcome is Outcome.INCONCLUSIVE and not result.failed
    assert any("this run's median step waited for a CPU 75%" in w and "its CPU time included" in w for w in result.warnings)
    quiet = check.evaluate({"ca": _waiting(loaded["ca"], 0.10)}, base)  # the same figures without the wait: a FAIL
    assert quiet.outcome is Outcome.FAIL


def test_compile_time_the_load_could_explain_is_inconclusive():
    """Compile time is wall time: an unchanged job's compile read +76% beside a busier load. A
    FAIL resting on a run whose steps waited beyond 40 % of their runnable time, or one the load
    difference alone could explain, is INCONCLUSIVE; the same figures on a quiet run still FAIL."""
    check = CompileTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": _waiting(replace(snap(compile_s=2.4), compile_time_samples_s=(2.3, 2.4, 2.5, 2.4, 2.45)), 0.05)}
    figures = replace(snap(compile_s=4.2), compile_time_samples_s=(4.1, 4.2, 4.3))
    loaded = check.evaluate({"ca": _waiting(figures, 0.72)}, base)
    assert loaded.outcome is Outcome.INCONCLUSIVE and loaded.data["load_decided"] == "above"
    assert loaded.message.startswith("max-compile-regression (ca): total compile time median 4.200 s of 3 runs vs baseline median 2.400 s "
                                     "of 5 runs: +75.0%: inconclusive, the machine's load, not the code, may have decided it")
    assert any("waited for a CPU 72%" in w for w in loaded.warnings)
    assert check.evaluate({"ca": _waiting(figures, 0.05)}, base).outcome is Outcome.FAIL


def test_a_threshold_in_seconds_is_a_share_of_the_figure_the_verdict_is_on():
    """`--max-regression 0.003s` on CPU time per step: the share of the baseline's CPU time (4.2
    ms), not of its wall time (8.4 ms, its steps waiting half their runnable time)."""
    def side(cpu_ms: float, seed: int) -> ModeSnapshot:
        processes = [[t / 1000.0 for t in series(cpu_ms, 0.02, 60, seed * 10 + i)] for i in range(5)]
        sample = timing_sample([ProcessSteps(i, [2 * t for t in p], cpu=p, thread_cpu=p, wait_share=[0.5] * len(p))
                                for i, p in enumerate(processes, 1)])
        v = sample.values
        return replace(snap(), step_time=StepTimeSnapshot(300, v["median"], v["p10"], v["p90"], v["mean"], sample))

    result = StepTimeRegressionCheck(TimeThreshold(0.003, "s"), "ca").evaluate({"ca": side(4.6, 2)}, {"ca": side(4.2, 1)})
    assert result.data["measure"] == "cpu"
    assert result.data["allowed_ratio"] == pytest.approx(1 + 0.003 / 0.0042, rel=0.02)


def test_the_threshold_baseline_save_suggests_is_one_an_unchanged_run_passes_and_a_wild_baseline_gets_none():
    from cagtool.report.gate.baseline import suggested_threshold

    base = snap(median=0.010, spread=0.02, count=60, processes=5, between=0.05)
    pct, words = suggested_threshold(base)
    assert pct is not None and f"passes from about --max-regression {pct}%" in words
    unchanged = snap(median=base.step_time.sample.values["median"], spread=0.02, count=60, processes=1)
    assert StepTimeRegressionCheck(TimeThreshold(pct, "%"), "ca").evaluate({"ca": unchanged}, {"ca": base}).outcome is Outcome.PASS
    wild = replace(base, step_time=replace(base.step_time, sample=timing_sample(
        [ProcessSteps(i, series(m, 0.02, 60, i)) for i, m in enumerate((0.010, 0.011, 0.052), 1)])))
    pct, words = suggested_threshold(wild)
    assert pct is None and "too noisy to gate a regression of less than 2x" in words


def test_the_suggested_threshold_holds_on_the_wall_time_that_confirms_a_pass_on_cpu_time():
    """A baseline of CPU-bound processes whose CPU times agree within 1% but whose wall times the
    machine's load spread (each waited for a CPU a share of its steps): a pass on CPU time needs the
    wall time's interval within the threshold too, so the threshold `baseline save` suggests is the
    one an unchanged run passes on both (it said "from about 5%" on CPU time alone, and unchanged
    runs at the baseline's loads read inconclusive there)."""
    from cagtool.report.gate.baseline import suggested_threshold

    loads = (1.0, 1.3, 0.85, 1.5, 1.1)  # each process's wall time over its CPU time

    def process(index: int, load: float, seed: int) -> ProcessSteps:
        cpu = [t / 1000.0 for t in series(4.0, 0.01, 60, seed)]
        return ProcessSteps(index, [max(load, 1.0) * t for t in cpu], cpu=cpu, thread_cpu=cpu,
                            wait_share=[max(0.0, 1.0 - 1.0 / load)] * len(cpu))

    def side(processes: list[ProcessSteps]) -> ModeSnapshot:
        sample = timing_sample(processes)
        v = sample.values
        return replace(snap(), step_time=StepTimeSnapshot(60 * len(processes), v["median"], v["p10"], v["p90"], v["mean"], sample))

    base = side([process(i, load, i) for i, load in enumerate(loads, 1)])
    assert base.step_time.sample.cpu_bound
    pct, words = suggested_threshold(base)
    assert pct is not None and "wall time per step (which confirms a pass on CPU time)" in words, words
    # an unchanged run near the baseline's median load passes at it, as on CPU time alone it did not
    for threshold, outcome in ((pct, Outcome.PASS), (10, Outcome.INCONCLUSIVE)):
        check = StepTimeRegressionCheck(TimeThreshold(threshold, "%"), "ca")
        outcomes = [check.evaluate({"ca": side([process(1, load, 100 + i)])}, {"ca": base}).outcome for i, load in enumerate((1.1, 1.0))]
        assert outcomes == [outcome] * 2, (threshold, outcomes)


def _stalled_side(stall_s: float, seed: int, wait: float = 0.0, processes: int = 5, cpu_factor: float = 1.0) -> ModeSnapshot:
    """Five processes of 60 CPU-bound ~4 ms steps, every 4th step `stall_s` longer off the CPU (a
    sleep, or a wait for a CPU where `wait`: that share of each stalled step's wall time)."""
    found = []
    for i in range(processes):
        cpu = [cpu_factor * t / 1000.0 for t in series(4.0, 0.02, 60, seed * 10 + i)]
        wall = [t + (stall_s if k % 4 == 3 else 0.0) for k, t in enumerate(cpu)]
        shares = [(wait * w if k % 4 == 3 else 0.0) for k, w in enumerate(wall)]
        found.append(ProcessSteps(i, wall, cpu=cpu, thread_cpu=cpu, wait_share=[s / w for s, w in zip(shares, wall)]))
    sample = timing_sample(found)
    v = sample.values
    return replace(snap(), step_time=StepTimeSnapshot(60 * processes, v["median"], v["p10"], v["p90"], v["mean"], sample, cpu_wait=0.0))


def test_a_stall_off_the_cpu_every_few_steps_fails_the_mean():
    """A data stall of 30 ms every 4th step (a sleep: no CPU, no wait for one): the median step is
    CPU-bound, so the mean is judged on CPU time, which the stall does not touch (within +25%),
    while the wall time lies past the threshold beyond its noise. Less each step's wait for a CPU
    (none here) it still does: the job's own time off the CPU, a FAIL that says so. It read
    INCONCLUSIVE, a real slowdown of the mean never caught."""
    result = StepTimeRegressionCheck(TimeThreshold(25, "%", "mean"), "ca").evaluate({"ca": _stalled_side(0.030, 2)}, {"ca": _stalled_side(0.0, 1)})
    assert result.outcome is Outcome.FAIL and result.failed and result.data["measure"] == "unwaited", result.message
    assert result.message.startswith("max-regression (ca): step time less its waits for a CPU mean "), result.message
    off = [n for n in result.notes if "the steps spent time off the CPU that the baseline's did not, by the job's own doing" in n]
    assert len(off) == 1 and off[0].startswith("CPU time per step +") and ", within it; wall time +" in off[0], result.notes
    # an older baseline without the steps' waits: as before, inconclusive, and the note says the measures disagree
    base = _stalled_side(0.0, 1)
    old = replace(base, step_time=replace(base.step_time, sample=replace(base.step_time.sample, unwaited_units={}, unwaited_unit_noise={})))
    result = StepTimeRegressionCheck(TimeThreshold(25, "%", "mean"), "ca").evaluate({"ca": _stalled_side(0.030, 2)}, {"ca": old})
    assert result.outcome is Outcome.INCONCLUSIVE and result.data["measure"] == "cpu", result.message
    assert "but wall time, which also sees a step's time off the CPU, cannot confirm it" in result.message
    off = [n for n in result.notes if "the steps spent time off the CPU that the baseline's did not" in n]
    assert len(off) == 1 and "would resolve it (run --repeat" not in " ".join(result.notes), result.notes


def test_a_stall_fails_the_mean_where_its_cpu_time_is_unresolved():
    """The stall's steps also took ~20% more CPU time (caches lost while asleep), at a 20%
    threshold: the CPU time's interval contains it, the wall time less its waits lies far beyond:
    a FAIL, whose note says the CPU time was not beyond it past its noise (not "within it")."""
    result = StepTimeRegressionCheck(TimeThreshold(20, "%", "mean"), "ca").evaluate(
        {"ca": _stalled_side(0.030, 2, cpu_factor=1.2)}, {"ca": _stalled_side(0.0, 1)})
    assert result.outcome is Outcome.FAIL and result.data["measure"] == "unwaited", result.message
    assert any(", not beyond it past its noise; wall time +" in n for n in result.notes), result.notes


def test_a_stall_that_waited_for_a_cpu_is_the_machines_not_a_fail():
    """The same 30 ms every 4th step, spent waiting for a CPU (a neighbour's burst): less the
    waits, the steps are as long as the baseline's, so the wall time's excess is the machine's
    load and the mean stays inconclusive, as a stall the job made itself does not."""
    check = StepTimeRegressionCheck(TimeThreshold(25, "%", "mean"), "ca")
    result = check.evaluate({"ca": _stalled_side(0.030, 2, wait=30 / 34)}, {"ca": _stalled_side(0.0, 1)})
    assert result.outcome is Outcome.INCONCLUSIVE and result.data["measure"] == "cpu", result.message
    assert "but wall time, which also sees a step's time off the CPU, cannot confirm it" in result.message


def test_a_baseline_keeps_the_steps_time_less_their_waits():
    """The figures the stall's FAIL rests on survive `baseline save` (file written and read back)
    and `--accumulate` (two samples pooled); a side with no waits measured has none."""
    from cagtool.report.gate.baseline import _pooled_sample, _sample_file, _timing_sample

    sample = _stalled_side(0.030, 1).step_time.sample
    assert len(sample.unwaited_units["mean"]) == 5 and len(sample.unwaited_unit_noise["mean"]) == 5
    read = _timing_sample(msgspec.json.decode(msgspec.json.encode(_sample_file(sample)), type=type(_sample_file(sample))), "b.json")
    assert read.unwaited_units["mean"] == pytest.approx(sample.unwaited_units["mean"], rel=1e-5)
    assert read.process_noise("unwaited", "mean") == pytest.approx(sample.unwaited_unit_noise["mean"], rel=1e-3)
    pooled = _pooled_sample(read, _stalled_side(0.0, 2).step_time.sample)
    assert len(pooled.unwaited_units["mean"]) == 10 and len(pooled.process_noise("unwaited", "mean")) == 10
    unmeasured = timing_sample([ProcessSteps(1, [0.004] * 10, cpu=[0.004] * 10)])
    assert unmeasured.unwaited_units == {} and _pooled_sample(read, unmeasured).unwaited_units == {}


def test_compile_time_is_judged_against_the_wait_where_the_compile_ran():
    """Each side's wait before its steady steps (where its compile ran) is the compile check's load,
    not its steady steps': a run whose compile waited 72% of its runnable time is INCONCLUSIVE
    even where its steady steps did not wait."""
    check = CompileTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = {"ca": replace(_waiting(replace(snap(compile_s=2.4), compile_time_samples_s=(2.3, 2.4, 2.5, 2.4, 2.45)), 0.05), compile_wait=0.1)}
    figures = replace(snap(compile_s=4.2), compile_time_samples_s=(4.1, 4.2, 4.3))
    loaded = check.evaluate({"ca": replace(_waiting(figures, 0.05), compile_wait=0.72)}, base)
    assert loaded.outcome is Outcome.INCONCLUSIVE
    assert any("this run's compile (its process before its steady steps) waited for a CPU 72%" in w for w in loaded.warnings)
    assert check.evaluate({"ca": replace(_waiting(figures, 0.72), compile_wait=0.05)}, base).outcome is Outcome.FAIL


def _on(s: ModeSnapshot, reference_ms: float) -> ModeSnapshot:
    return replace(s, reference_loop_s=reference_ms / 1e3)


def test_a_regression_a_slower_machine_alone_could_explain_is_inconclusive():
    """A baseline saved on a faster runner: this run's machine ran the reference loop 1.6x slower.
    A +50% step time it alone could explain is INCONCLUSIVE, with a warning naming both machines'
    loops; a 4x slowdown beyond it still FAILs (a note says the machines differ); under 10% apart
    the machines are taken as one. On compile time too."""
    check = StepTimeRegressionCheck(TimeThreshold(25, "%"), "ca")
    base = {"ca": _on(snap(median=0.010, spread=0.02, count=200), 1.5)}
    slower = check.evaluate({"ca": _on(snap(median=0.015, spread=0.02, count=200, seed=3), 2.4)}, base)
    assert slower.outcome is Outcome.INCONCLUSIVE and not slower.failed and slower.data["load_decided"] == "above"
    assert slower.data["machine_factor"] == pytest.approx(1.6)
    assert slower.warnings == [
        "max-regression (ca): machine: this run's machine ran cagtool's reference loop 1.60x slower than the baseline's (2.40 ms "
        "against 1.50 ms of CPU): another CPU, or one clocked down or shared, which alone can make the job's time differ by as much, "
        "and on machines as fast the check would pass: gate against a baseline saved on this kind of runner"]
    assert "inconclusive, the machine, not the code, may have decided it: corrected for the machine's speed, the outcome would turn" in slower.message
    same = check.evaluate({"ca": _on(snap(median=0.015, spread=0.02, count=200, seed=3), 1.5)}, base)
    assert same.outcome is Outcome.FAIL  # the same figures on machines alike
    far = check.evaluate({"ca": _on(snap(median=0.040, spread=0.02, count=200, seed=3), 2.4)}, base)
    assert far.outcome is Outcome.FAIL and not far.warnings and any(n.startswith("machine: this run's machine ran") for n in far.notes)
    # A faster machine hides a regression: a PASS it alone could explain is not claimed.
    hidden = check.evaluate({"ca": _on(snap(median=0.0105, spread=0.02, count=200, seed=3), 0.9)}, base)
    assert hidden.outcome is Outcome.INCONCLUSIVE and "the check would FAIL" in hidden.warnings[0] and "1.67x faster" in hidden.warnings[0]
    close = check.evaluate({"ca": _on(snap(median=0.015, spread=0.02, count=200, seed=3), 1.6)}, base)
    assert close.outcome is Outcome.FAIL and "machine_factor" not in close.data
    unknown = check.evaluate({"ca": snap(median=0.015, spread=0.02, count=200, seed=3)}, base)
    assert unknown.outcome is Outcome.FAIL and "machine_factor" not in unknown.data
    compile_check = CompileTimeRegressionCheck(TimeThreshold(25, "%"), "ca")
    cbase = {"ca": _on(replace(snap(compile_s=2.4), compile_time_samples_s=(2.3, 2.4, 2.5, 2.4, 2.45)), 1.5)}
    ccur = replace(snap(compile_s=3.6), compile_time_samples_s=(3.5, 3.6, 3.7, 3.6, 3.65))
    assert compile_check.evaluate({"ca": _on(ccur, 1.5)}, cbase).outcome is Outcome.FAIL
    assert compile_check.evaluate({"ca": _on(ccur, 2.4)}, cbase).outcome is Outcome.INCONCLUSIVE


@pytest.mark.parametrize("value", ["fast", -1.0, 0.0, 1e300, True, float("nan")])
def test_a_forged_reference_loop_in_a_baseline_is_refused(tmp_path, value):
    from cagtool.report.gate.baseline import Baseline, save_baseline

    path = save_baseline(Baseline(modes={"ca": snap()}, target={"name": "t.py"}, versions={}, machine={"reference_loop_s": 0.0015}), tmp_path / "b.json")
    assert load_baseline(path).modes["ca"].reference_loop_s == pytest.approx(0.0015)
    data = json.loads(path.read_text())
    data["machine"]["reference_loop_s"] = value
    path.write_text(json.dumps(data))
    with pytest.raises(UnreadableInput, match="machine.reference_loop_s is .*not a reference loop's CPU seconds"):
        load_baseline(path)


# ------------------------------------------------------------------ a process set apart

def test_one_baseline_process_far_from_the_others_is_named_and_its_bounds_mean_something():
    """A baseline of three processes, one beside heavy load (its steps 37x the others'): the t
    interval on the three's spread read `90% CI <-99%..>+9900%` (7e-07..1.3e+05 in JSON) with the
    advice that no number of processes would resolve it. Now: INCONCLUSIVE on the agreeing
    processes' interval stretched to the odd one's reading, the process named, JSON finite."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = timed(None, processes=[series(0.010, 0.02, 50, 1), series(0.0102, 0.02, 50, 2), series(0.37, 0.02, 50, 3)])
    result = check.evaluate({"ca": timed(None, processes=[series(0.0101, 0.02, 50, 4)])}, {"ca": base})
    assert result.outcome is Outcome.INCONCLUSIVE and not result.failed
    assert "<-99%" not in result.message and ">+9900%" not in result.message
    # The two medians and their change, then the ratio the verdict is on: of the agreeing processes' geometric means.
    assert "(the medians of 1 and 3 processes: -0.5%); judged on the ratio of the geometric means of the processes that agree, " in result.message
    assert ": +0.0%: inconclusive, the interval (90% CI -97." in result.message
    assert result.data["ratio_baseline_s"] == pytest.approx(math.sqrt(statistics.median(series(0.010, 0.02, 50, 1)) *
                                                                      statistics.median(series(0.0102, 0.02, 50, 2))))
    assert 0.02 < result.data["low"] < 0.03 and 1.5 < result.data["high"] < 3.0
    [odd] = result.data["outliers"]
    assert odd["side"] == "baseline" and odd["process"] == 3 and odd["times_others"] == pytest.approx(36.5, rel=0.02)
    assert result.data["units"] == [1, 2] and math.isfinite(result.data["run_to_run_noise"])
    json.dumps(result.data, allow_nan=False)
    assert result.warnings[0].startswith("max-regression (ca): process 3 of the baseline: its median step time was 36.")
    assert result.warnings[0].endswith("the others': it ran under other conditions than they did (a busy machine, another input), "
                                       "so the interval is theirs stretched to its reading, and only a verdict that holds on both "
                                       "stands: save the baseline again from a run on a quieter runner")
    assert "too close to the bound" not in result.notes[0] and result.notes[0].endswith("keeps it from a verdict: rerun")
    # A run far slower than even the odd process still fails; one of four with three that agree
    # measures the noise on those three.
    assert check.evaluate({"ca": timed(None, processes=[series(1.5, 0.02, 50, 4)])}, {"ca": base}).outcome is Outcome.FAIL
    four = timed(None, processes=[series(0.010, 0.02, 50, 1), series(0.0102, 0.02, 50, 2), series(0.0099, 0.02, 50, 5), series(0.37, 0.02, 50, 3)])
    measured = check.evaluate({"ca": timed(None, processes=[series(0.0101, 0.02, 50, 4)])}, {"ca": four})
    assert measured.data["method"] == "t" and measured.data["units"] == [1, 3] and measured.data["outliers"][0]["process"] == 4
    # Three against three: the rank interval, whose ends are real figures, is kept, the process named.
    quiet = timed(None, processes=[series(0.010, 0.02, 50, 1), series(0.0102, 0.02, 50, 2), series(0.0099, 0.02, 50, 5)])
    ranked = check.evaluate({"ca": timed(None, processes=[series(0.010, 0.02, 50, 6), series(0.0101, 0.02, 50, 7), series(0.37, 0.02, 50, 8)])},
                            {"ca": quiet})
    assert ranked.outcome is Outcome.INCONCLUSIVE and ranked.data["method"] == "rank" and ranked.data["units"] == [3, 3]
    assert ranked.data["outliers"][0]["side"] == "run" and ranked.data["high"] == pytest.approx(37, rel=0.05)
    assert ranked.warnings[0].startswith("max-regression (ca): process 3 of this run: its median step time was 37.2x the others'")
    assert ranked.warnings[0].endswith("so the rank interval reaches its reading at most: rerun on a quieter runner")


def test_a_compile_time_far_from_the_others_is_named():
    """Compile times of 2.0, 2.1 and 60 s in the baseline: INCONCLUSIVE on finite bounds, the third
    named, where the t interval read <-99%..>+9900%."""
    check = CompileTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    result = check.evaluate({"ca": replace(snap(compile_s=2.0), compile_time_samples_s=(2.0,))},
                            {"ca": replace(snap(compile_s=2.1), compile_time_samples_s=(2.0, 2.1, 60.0))})
    assert result.outcome is Outcome.INCONCLUSIVE and "<-99%" not in result.message and ">+9900%" not in result.message
    assert result.data["outliers"][0]["process"] == 3 and 0.01 < result.data["low"] < result.data["high"] < 100
    assert any(w.startswith("max-compile-regression (ca): process 3 of the baseline: its total compile time was 29.3x the others'") for w in result.warnings)


def test_the_compile_checks_load_words_name_the_compile_not_steps():
    """`--max-compile-regression` judges compile time: its load warnings said "this run's steps
    3.21-6.48x slower", "the load can slow a step", "it rests on steps that waited". They name the
    compile, and where each side's wait was read."""
    check = CompileTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    base = replace(_waiting(replace(snap(compile_s=2.4), compile_time_samples_s=(2.3, 2.4, 2.5, 2.4, 2.45)), 0.05), compile_wait=0.1)
    figures = replace(snap(compile_s=4.2), compile_time_samples_s=(4.1, 4.2, 4.3))
    loaded = check.evaluate({"ca": replace(_waiting(figures, 0.05), compile_wait=0.72)}, {"ca": base})
    assert loaded.message.endswith("may have decided it: corrected for the load, the outcome would turn and it rests on a compile that waited for a "
                                   "CPU 40% of its runnable time or more (90% CI +67.3%..+82.6%)")
    assert loaded.warnings == [
        "max-compile-regression (ca): load: this run waited for a CPU 72% of its runnable time, the baseline 10% where each compiled, "
        "which alone can make this run's compile 3.21-6.48x slower, and without that difference the check would pass: rerun on a quieter runner",
        "max-compile-regression (ca): load: this run's compile (its process before its steady steps) waited for a CPU 72% of its runnable "
        "time: beyond 40%, the load can slow a compile far more than the wait alone says (a compile that waits that long loses its caches "
        "to the neighbours), up to 46x on wall time, so the machine's load, not the code, may have decided the outcome: rerun on a quieter runner",
    ]
    noted = check.evaluate({"ca": replace(_waiting(figures, 0.05), compile_wait=0.30)}, {"ca": base})
    assert noted.outcome is Outcome.FAIL and ("load: this run waited for a CPU 30% of its runnable time, the baseline 10% where each "
                                             "compiled, which alone can make this run's compile 1.29-1.49x slower") in noted.notes
    # Without a reading where they compiled, the steady steps' wait stands in, and the words say so.
    older = check.evaluate({"ca": _waiting(figures, 0.72)}, {"ca": replace(base, compile_wait=None)})
    assert any("the baseline 5% in their steady steps (no reading where they compiled), which alone can make this run's compile" in w
               for w in older.warnings)
    assert any(w.startswith("max-compile-regression (ca): load: this run's median steady step (its wait stands for its compile's, which "
                            "was not read) waited for a CPU 72%") and "the load can slow a compile far more" in w for w in older.warnings)
    for result in (loaded, noted, older):
        for line in [result.message, *result.notes, *result.warnings]:
            assert "'s steps" not in line and "slow a step" not in line and "rests on steps" not in line, line


def test_baseline_save_names_a_process_far_from_the_others():
    """`baseline save` from three processes, one of them 37x the others: it says which, rather
    than only that the baseline is too noisy."""
    from cagtool.report.gate.baseline import suggested_threshold

    odd = timed(None, processes=[series(0.010, 0.02, 60, 1), series(0.0102, 0.02, 60, 2), series(0.37, 0.02, 60, 3)])
    pct, words = suggested_threshold(odd)
    assert pct is None and words.startswith("3 processes, wall time per step: process 3 read 36.")
    assert words.endswith("the others: it ran under other conditions (a busy machine?), so most step-time gates against this baseline "
                          "will be inconclusive; re-save it on a quieter runner")


def test_a_cpu_time_pass_resting_on_a_baseline_that_waited_just_under_half_is_inconclusive():
    """CPU time is not lengthened by the wait, but a step that waits loses its caches: an unchanged
    job's 5 baseline processes, their median step waiting 49%, read 4.3-5.4 ms of CPU a step against
    3.6-4.1 quiet, and a real +33% regression then read +5.5% and PASSed. The load's effect on CPU
    time is read as anywhere up to the model's factor to the power 0.5 (here 1.92 -> 1.39x): a PASS
    it alone could explain is INCONCLUSIVE; the same figures without the wait PASS."""
    assert load_range(1.92, "cpu") == pytest.approx((1.0, 1.92**0.5))
    check = StepTimeRegressionCheck(TimeThreshold(25, "%"), "ca")
    base = {"ca": _waiting(_cpu_bound(snap(), 4.8, 1), 0.49)}
    quiet_run = {"ca": _waiting(_cpu_bound(snap(), 5.06, 2), 0.02)}
    loaded = check.evaluate(quiet_run, base)
    assert loaded.data["measure"] == "cpu" and loaded.outcome is Outcome.INCONCLUSIVE and loaded.data["load_decided"] == "below"
    assert loaded.warnings and "up to 1.39x slower in CPU time" in loaded.warnings[0] and "the check would FAIL" in loaded.warnings[0]
    assert check.evaluate(quiet_run, {"ca": _waiting(base["ca"], 0.02)}).outcome is Outcome.PASS


def _wall_over_cpu(s: ModeSnapshot, cpu_ms: float, wall_share: float, seed: int) -> ModeSnapshot:
    """`s` with five processes of 60 steps around `cpu_ms` of CPU each, wall time `wall_share` times that."""
    cpus = [[t / 1000.0 for t in series(cpu_ms * (1 + 0.01 * i), 0.02, 60, seed * 10 + i)] for i in range(5)]
    sample = timing_sample([ProcessSteps(i, [c * wall_share for c in p], cpu=p, thread_cpu=p) for i, p in enumerate(cpus, 1)])
    v = sample.values
    return replace(s, step_time=StepTimeSnapshot(300, v["median"], v["p10"], v["p90"], v["mean"], sample))


def test_a_cpu_time_pass_the_wall_time_cannot_confirm_says_so():
    """CPU time per step unchanged, wall time +8% (a wait off the CPU): the CPU interval clears a
    5% threshold and the wall one does not. The message says that, not that the CPU interval
    contains +5%."""
    check = StepTimeRegressionCheck(TimeThreshold(5, "%"), "ca")
    result = check.evaluate({"ca": _wall_over_cpu(snap(), 4.0, 1.08, 2)}, {"ca": _wall_over_cpu(snap(), 4.0, 1.0, 1)})
    assert result.data["measure"] == "cpu" and result.outcome is Outcome.INCONCLUSIVE
    assert ": inconclusive, CPU time per step shows no regression beyond +5% (90% CI " in result.message
    assert "but wall time, which also sees a step's time off the CPU, cannot confirm it: wall time +8." in result.message
    assert "contains +5%" not in result.message
    # Each interval's evidence under its own measure: the CPU time's first (the Actual figure is its
    # change), then the wall time's, which keeps it from a verdict. One note that named the wall
    # time alone read as if the Actual figure were wall time.
    assert result.actual == change_text(result.data["ratio"]) and result.data["measure"] == "cpu"
    assert result.notes[0].startswith("evidence: CPU time per step, 5 vs 5 processes")
    assert result.notes[1].startswith("evidence: wall time per step, 5 vs 5 processes")


@pytest.mark.parametrize("slower", [1.12, 1.2, 1.4])
def test_one_process_a_side_asks_to_measure_the_noise_whatever_the_ratio(slower):
    """One process a side: the noise is assumed (+/-100% A/A), so any number of processes worked
    out from it is a guess; the advice was about 58 for one ratio and the minimum for a closer one
    (its guess passed the most advised). Every ratio now asks for the same first step."""
    check = StepTimeRegressionCheck(TimeThreshold(10, "%"), "ca")
    result = check.evaluate({"ca": snap(median=0.010 * slower, spread=0.02, count=60, processes=1, seed=3)},
                            {"ca": snap(median=0.010, spread=0.02, count=60, processes=1)})
    assert result.outcome is Outcome.INCONCLUSIVE, result.message
    assert result.notes[0].startswith("evidence: wall time per step, 1 vs 1 process")
    assert result.notes[0].endswith("; measure the run-to-run noise first: 5 processes a side (run --repeat 5, baseline save from such a run)")


def test_baseline_save_suggests_no_threshold_for_a_baseline_recorded_on_a_loaded_runner():
    """A baseline whose median step waited for a CPU 73% of its runnable time (5 processes beside two
    busy loops) was saved with "one unchanged run passes from about --max-regression 40%", and every
    gate against it read inconclusive up to 200% (the load could explain the difference). It gets no
    threshold, and says why."""
    from cagtool.report.gate.baseline import suggested_threshold

    base = snap(median=0.010, spread=0.02, count=60, processes=5, between=0.05)
    loaded = replace(base, step_time=replace(base.step_time, cpu_wait=0.73))
    assert suggested_threshold(base)[0] is not None
    pct, words = suggested_threshold(loaded)
    assert pct is None and "waited for a CPU 73% of its runnable time" in words and "re-save it on a quieter runner" in words
    unchanged = snap(median=base.step_time.sample.values["median"], spread=0.02, count=60, processes=1)
    assert StepTimeRegressionCheck(TimeThreshold(40, "%"), "ca").evaluate({"ca": unchanged}, {"ca": loaded}).outcome is Outcome.INCONCLUSIVE


def test_a_cpu_pass_the_wall_time_cannot_confirm_is_not_said_to_be_turned_by_a_small_load_difference():
    """`gate u1 --baseline bl1 --max-regression 65%` (one unchanged run against five): CPU time passes,
    wall time cannot confirm it (inconclusive), and the run waited 3% against the baseline's 5%. It
    warned "without that difference the check would pass: rerun on a quieter runner": a correction
    of 1 (none) read as a turn of the inconclusive outcome, which the wall time, not the load, made.
    Here the load is a note; a correction that does turn the CPU verdict still warns (the test above)."""
    check = StepTimeRegressionCheck(TimeThreshold(5, "%"), "ca")
    result = check.evaluate({"ca": _waiting(_wall_over_cpu(snap(), 4.0, 1.08, 2), 0.03)},
                            {"ca": _waiting(_wall_over_cpu(snap(), 4.0, 1.0, 1), 0.05)})
    assert result.outcome is Outcome.INCONCLUSIVE and "cannot confirm it" in result.message
    assert not any("without that difference the check would" in w for w in result.warnings), result.warnings
    assert any(n.startswith("load:") or "load:" in n for n in result.notes), result.notes
