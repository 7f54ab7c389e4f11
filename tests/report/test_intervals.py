"""The statistics every timing verdict rests on (report.intervals), pinned on fixed samples: the t
quantiles and the Welch interval against scipy's, the batching, the units, and the sizes of real
jobs (no overflow, an interval that narrows)."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from cagtool.report.intervals import (
    MAX_BATCHES,
    RatioInterval,
    TimingSample,
    batch_count,
    batch_statistics,
    compile_sample,
    lag1_autocorrelation,
    ratio_interval,
    t_quantile,
    timing_sample,
)


@pytest.mark.parametrize("df", [1, 2, 2.5, 3, 4, 5.5, 7, 10, 19, 29, 58, 100, 1_000, 1e6])
@pytest.mark.parametrize("p", [0.6, 0.9, 0.95, 0.975, 0.99, 0.05])
def test_t_quantile_matches_scipy(df, p):
    assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=2e-3 if df < 3 else 1e-4)


@pytest.mark.parametrize("df", [1.2, 1.5, 1.9])
def test_t_quantile_between_1_and_2_degrees_is_never_narrower(df):
    assert t_quantile(0.95, df) == pytest.approx(stats.t.ppf(0.95, 1))
    assert t_quantile(0.95, df) >= stats.t.ppf(0.95, df)


def test_batches_are_about_the_square_root_of_n_and_keep_step_order():
    assert [batch_count(n) for n in (0, 1, 2, 5, 100, 400, 1_000, 100_000)] == [0, 0, 2, 2, 10, 20, MAX_BATCHES, MAX_BATCHES]
    # A shift in phases longer than a batch: ten batches would all see one phase or the other
    # (autocorrelated), so adjacent ones are merged: five units, and a wider interval.
    series = [1.0] * 50 + [3.0] * 50
    assert batch_statistics(series, "median") == [1.0, 1.0, 2.0, 3.0, 3.0]
    alternating = [1.0, 3.0] * 50  # no phases: ten batches, each of both kinds
    assert len(batch_statistics(alternating, "median")) == 10
    assert lag1_autocorrelation([1.0, 2.0, 3.0, 4.0]) > 0.2 and lag1_autocorrelation([5.0] * 6) == 0.0
    assert batch_statistics([1.0, 2.0, 3.0, 4.0, 10.0], "mean") == [2.0, 7.0]
    assert batch_statistics([5.0], "median") == []


def test_welch_interval_equals_scipys_on_the_units():
    """With each side's pooled value at the geometric mean of its units, the interval is exactly
    scipy's Welch interval of the difference of the log units' means, exponentiated."""
    top_units = (0.0110, 0.0104, 0.0121, 0.0108, 0.0115)
    bottom_units = (0.0100, 0.0098, 0.0103, 0.0101)

    def side(units: tuple[float, ...]) -> TimingSample:
        centre = math.exp(sum(math.log(u) for u in units) / len(units))
        return TimingSample(len(units) * 10, 1, "batch", {"median": centre}, {"median": units})

    got = ratio_interval(side(top_units), side(bottom_units), "median")
    la, lb = [math.log(u) for u in top_units], [math.log(u) for u in bottom_units]
    want = stats.ttest_ind(la, lb, equal_var=False).confidence_interval(0.90)
    assert got is not None and got.unit == "batch" and got.units == (5, 4)
    assert math.log(got.low) == pytest.approx(want.low, rel=1e-6, abs=1e-9)
    assert math.log(got.high) == pytest.approx(want.high, rel=1e-6, abs=1e-9)


def test_one_unit_a_side_is_no_interval_and_one_unit_borrows_the_others_noise():
    lone = compile_sample([2.0])
    assert lone is not None and lone.unit == "run"
    none = ratio_interval(compile_sample([2.4]), lone, "total")
    assert none is not None and not none.measured and none.low == none.high == pytest.approx(1.2)
    assert none.resolution() == math.inf and none.evidence_factor(0.05) == math.inf
    borrowed = ratio_interval(compile_sample([2.4]), compile_sample([1.9, 2.0, 2.1]), "total")
    assert borrowed is not None and borrowed.measured and borrowed.df == 2.0
    assert borrowed.low < 1.2 < borrowed.high


def test_three_repetitions_are_the_units():
    rng = random.Random(3)
    reps = [[0.01 * (1 + 0.02 * k) * math.exp(rng.gauss(0, 0.01)) for _ in range(200)] for k in range(3)]
    sample = timing_sample(reps)
    assert sample is not None and sample.unit == "repetition" and sample.repetitions == 3 and sample.count == 600
    assert len(sample.units["median"]) == 3
    two = timing_sample(reps[:2])
    assert two is not None and two.unit == "batch" and len(two.units["median"]) == 2 * batch_count(200)
    assert timing_sample([[], []]) is None


def test_the_interval_narrows_with_evidence_and_covers_at_real_job_sizes():
    """AR(1) step times (phi 0.6, the autocorrelation of a real CPU job) with a slow drift: the
    interval of a 0% change contains 1.0 and narrows from 1,000 to 100,000 steps; computing it
    never overflows (the binomial quantile bands it replaces did past ~1,030 steps)."""
    def job(n: int, seed: int) -> list[float]:
        rng = random.Random(seed)
        out, e = [], 0.0
        for i in range(n):
            e = 0.6 * e + rng.gauss(0.0, 0.04)
            out.append(0.005 * math.exp(e + 0.02 * i / n))
        return out

    widths = []
    for n in (1_000, 100_000):
        got = ratio_interval(timing_sample([job(n, 1)]), timing_sample([job(n, 2)]), "median")  # type: ignore[arg-type]
        assert isinstance(got, RatioInterval) and got.low < 1.0 < got.high
        widths.append(got.high / got.low)
    assert widths[1] < widths[0]
