"""The statistics every timing verdict rests on (report.figures.intervals), pinned on fixed samples: the t
quantiles and the Welch interval against scipy's, the batching, the units, and the sizes of real
jobs (no overflow, an interval that narrows)."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from cagtool.report.figures.intervals import (
    MAX_BATCHES,
    RatioInterval,
    TimingSample,
    autocorrelation_time,
    rank_cut,
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
    # Batches at least 3 autocorrelation times long; an autocorrelation time read from fewer than
    # 50 times as many steps is not trusted: two units, no verdict.
    assert [batch_count(1_000, tau) for tau in (1.0, 10.0, 20.0, 21.0, 50.0)] == [30, 30, 16, 2, 2]
    # ...but independent steps read 1 to 1.5 from a few dozen: those keep their batches.
    assert [batch_count(100, tau) for tau in (1.0, 1.9, 2.1, 2.5)] == [10, 10, 2, 2]
    assert batch_count(59, 1.4) == 7
    # A shift in phases longer than a batch: ten batches would all see one phase or the other
    # (autocorrelated steps: a long autocorrelation time), so the batches are as long as the
    # phases: two units, and a wide interval.
    series = [1.0] * 50 + [3.0] * 50
    assert autocorrelation_time(series) > 10.0
    assert batch_statistics(series, "median") == [1.0, 3.0]
    # Given a short autocorrelation time, the batch statistics' own lag-1 correlation still merges
    # adjacent batches: ten become five.
    assert batch_statistics(series, "median", tau=1.0) == [1.0, 1.0, 2.0, 3.0, 3.0]
    alternating = [1.0, 3.0] * 50  # no phases: ten batches, each of both kinds
    assert len(batch_statistics(alternating, "median")) == 10
    assert lag1_autocorrelation([1.0, 2.0, 3.0, 4.0]) > 0.2 and lag1_autocorrelation([5.0] * 6) == 0.0
    assert batch_statistics([1.0, 2.0, 3.0, 4.0, 10.0], "mean") == [2.0, 7.0]
    assert batch_statistics([5.0], "median") == []


def test_rank_interval_is_the_hodges_lehmann_interval_of_the_units():
    """Step-time statistics: the interval is the distribution-free one of the shift of the log
    units (the k-th smallest and largest pairwise differences, k from Mann-Whitney's exact null
    distribution), exponentiated; the pooled ratio lies inside it."""
    top_units = (0.0110, 0.0104, 0.0121, 0.0108, 0.0115)
    bottom_units = (0.0100, 0.0098, 0.0103, 0.0101)

    def side(units: tuple[float, ...]) -> TimingSample:
        centre = math.exp(sum(math.log(u) for u in units) / len(units))
        return TimingSample(len(units) * 10, 1, "batch", {"median": centre}, {"median": units})

    got = ratio_interval(side(top_units), side(bottom_units), "median")
    differences = sorted(math.log(a) - math.log(b) for a in top_units for b in bottom_units)
    k = rank_cut(5, 4)
    assert k == 3  # P(U <= 2) = 4/126 <= 5% < P(U <= 3) = 7/126 (enumerated in the next test)
    assert got is not None and got.method == "rank" and got.unit == "batch" and got.units == (5, 4)
    assert math.log(got.low) == pytest.approx(differences[k - 1]) and math.log(got.high) == pytest.approx(differences[-k])
    assert got.low <= got.ratio <= got.high and got.bounded


@pytest.mark.parametrize("m,n", [(3, 3), (4, 3), (5, 4), (5, 5), (6, 7)])
def test_rank_cut_matches_mann_whitney_by_enumeration(m, n):
    """The cut is the largest k with P(U <= k - 1) <= 5% under the null, U counted over every way
    of splitting m + n ranks (an independent computation of the exact distribution)."""
    import itertools

    total, counts = 0, {}
    for chosen in itertools.combinations(range(m + n), m):
        u = sum(1 for a in chosen for b in set(range(m + n)) - set(chosen) if a < b)
        counts[u] = counts.get(u, 0) + 1
        total += 1
    k = rank_cut(m, n)
    assert sum(counts.get(u, 0) for u in range(k)) / total <= 0.05 + 1e-12
    assert sum(counts.get(u, 0) for u in range(k + 1)) / total > 0.05
    assert stats.mannwhitneyu(list(range(m)), list(range(m, m + n)), alternative="less", method="exact").pvalue == pytest.approx(counts[0] / total)


def test_two_units_a_side_give_no_rank_interval():
    """2 against 2: no choice of pairwise differences reaches 90%, so the interval is unbounded and
    the check says how many units it needs instead of judging on them."""
    two = TimingSample(20, 1, "batch", {"median": 1.0}, {"median": (0.9, 1.1)})
    got = ratio_interval(two, two, "median")
    assert got is not None and got.measured and not got.bounded and got.low == 0.0 and got.high == math.inf
    assert got.resolution() == math.inf and got.evidence_factor(0.05) == math.inf


def test_welch_interval_equals_scipys_on_compile_times():
    """Compile times (one per run) keep Student's t: with each side's value at the geometric mean
    of its runs, exactly scipy's Welch interval, exponentiated."""
    top_units = (11.0, 10.4, 12.1, 10.8, 11.5)
    bottom_units = (10.0, 9.8, 10.3, 10.1)

    def side(units: tuple[float, ...]) -> TimingSample:
        centre = math.exp(sum(math.log(u) for u in units) / len(units))
        return TimingSample(len(units), len(units), "run", {"total": centre}, {"total": units})

    got = ratio_interval(side(top_units), side(bottom_units), "total")
    la, lb = [math.log(u) for u in top_units], [math.log(u) for u in bottom_units]
    want = stats.ttest_ind(la, lb, equal_var=False).confidence_interval(0.90)
    assert got is not None and got.method == "welch" and got.units == (5, 4)
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


def test_autocorrelation_time_of_independent_and_ar1_steps():
    """Independent steps: about 1. AR(1) steps with phi 0.7: the textbook (1 + phi) / (1 - phi) =
    5.7, read within 25% from 20,000 steps (means of 10 steps: an over- rather than an
    under-estimate, never below the truth by more than the estimate's own noise)."""
    import numpy as np
    from scipy.signal import lfilter

    rng = np.random.default_rng(7)
    assert autocorrelation_time(np.exp(rng.normal(0.0, 0.05, 1_000))) < 1.3
    ar1 = np.exp(lfilter([1.0], [1.0, -0.7], rng.normal(0.0, 0.04, 2_000)))
    assert 0.75 * 5.67 < autocorrelation_time(ar1) < 1.25 * 5.67
    long_ar1 = np.exp(lfilter([1.0], [1.0, -0.7], rng.normal(0.0, 0.04, 20_000)))
    assert 0.75 * 5.67 < autocorrelation_time(long_ar1) < 3.0 * 5.67
