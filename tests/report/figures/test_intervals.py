"""The statistics every timing verdict rests on (report.figures.intervals), pinned on fixed
samples: the t quantiles against scipy's, the sign and rank cuts against exact enumerations, the
process as the unit (paired blocks, independent sides, the assumed noise where none was
measured), and figures that never go beyond what a process can show."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from cagtool.report.figures.intervals import (
    ASSUMED_NOISE,
    MIN_SIGN_BLOCKS,
    NOISE_FLOOR,
    OUTLIER_NOISES,
    ONE_THREAD_CPU,
    ProcessSteps,
    TimingSample,
    change_text,
    compile_sample,
    measure_of,
    method_words,
    outlier_words,
    rank_cut,
    ratio_interval,
    ratio_text,
    sign_cut,
    spread_text,
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


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30])
def test_sign_cut_matches_the_binomial(n):
    """[x_(j), x_(n+1-j)] covers the median with probability 1 - 2 P(Bin(n, 1/2) < j): the largest
    j keeping that at 90% or more; none below 5 blocks."""
    j = sign_cut(n)
    if n < MIN_SIGN_BLOCKS:
        assert j == 0
        return
    assert 1 - 2 * stats.binom.cdf(j - 1, n, 0.5) >= 0.90 - 1e-12
    assert 1 - 2 * stats.binom.cdf(j, n, 0.5) < 0.90


def sample(wall, cpu=None, cpu_bound=False, blocks=None) -> TimingSample:
    """A side of processes, one figure each (every statistic the same figure)."""
    units = {f: tuple(wall) for f in ("median", "mean", "p10", "p90")}
    cpu_units = {f: tuple(cpu) for f in ("median", "mean", "p10", "p90")} if cpu else {}
    return TimingSample(len(wall) * 100, len(wall), "process", {f: sorted(wall)[len(wall) // 2] for f in units}, units, cpu_units,
                        cpu_bound, tuple(blocks or range(1, len(wall) + 1)))


def test_one_process_a_side_rests_on_the_assumed_noise():
    """One run a side: the run-to-run noise is not measured, the assumed one is used, and it is
    said; a 13x or a 3x slowdown is beyond it, an unchanged run cannot be told from +5%."""
    base = sample([0.004])
    for slowed in (0.054, 0.012):
        r = ratio_interval(sample([slowed]), base, "median")
        assert r.method == "assumed" and not r.measured and r.units == (1, 1)
        assert r.low > 1.05, r
    same = ratio_interval(sample([0.0041]), base, "median")
    assert same.low < 1.05 < same.high
    half = math.log(same.high / same.ratio)
    assert half == pytest.approx(1.6448536 * ASSUMED_NOISE["wall"] * math.sqrt(2), rel=1e-6)
    assert "not measured, assumed" in method_words(same)


def test_a_baseline_of_several_processes_measures_the_noise_for_one_run():
    """A baseline of 5 processes a few percent apart: the noise is measured (Student's t on its 4
    degrees of freedom, the spread taken at its 75% upper bound), and one unchanged run is clear of
    a 25% threshold."""
    base = sample([0.0040, 0.0041, 0.0039, 0.00405, 0.00398])
    r = ratio_interval(sample([0.00402]), base, "median")
    assert r.method == "t" and r.measured and r.noise_df == 4
    assert r.high < 1.25 and r.low > 1 / 1.25
    logs = [math.log(v) for v in (0.0040, 0.0041, 0.0039, 0.00405, 0.00398)]
    sd = stats.tstd(logs)
    d = math.log(0.00402) - sum(logs) / 5
    upper = math.sqrt(4 / stats.chi2.ppf(0.25, 4))
    assert math.log(r.high) == pytest.approx(d + stats.t.ppf(0.95, 4) * sd * upper * math.sqrt(1 + 1 / 5), rel=2e-2)


def test_paired_blocks_from_five_use_the_sign_interval():
    top = sample([1.0, 1.1, 0.9, 1.05, 0.95], blocks=[1, 2, 3, 4, 5])
    bottom = sample([2.0, 2.3, 1.7, 2.1, 1.9], blocks=[1, 2, 3, 4, 5])
    r = ratio_interval(bottom, top, "median", paired=True)
    ratios = sorted(b / a for a, b in zip([1.0, 1.1, 0.9, 1.05, 0.95], [2.0, 2.3, 1.7, 2.1, 1.9]))
    assert r.method == "sign" and r.paired and r.units == (5, 5)
    assert (r.low, r.high) == pytest.approx((ratios[0], ratios[-1]))
    assert r.ratio == pytest.approx(ratios[2])


def test_fewer_blocks_than_five_are_not_a_measured_verdict_and_a_seen_spread_widens_them():
    """Three blocks: no distribution-free interval reaches 90%; the assumed noise is used, or the
    blocks' own spread where it is larger (two blocks that read 0.60x and 10.4x are no verdict)."""
    steady = ratio_interval(sample([2.0, 2.0, 2.0], blocks=[1, 2, 3]), sample([1.0, 1.0, 1.0], blocks=[1, 2, 3]), "median", paired=True)
    assert steady.method == "assumed" and not steady.seen and steady.low > 1.0
    wild = ratio_interval(sample([0.6, 10.4], blocks=[1, 2]), sample([1.0, 1.0], blocks=[1, 2]), "median", paired=True)
    assert wild.method == "assumed" and wild.seen
    assert wild.low < 1.0 < wild.high
    assert "already differ by over +/-100%" in method_words(wild)


def test_no_zero_width_interval_from_identical_processes():
    r = ratio_interval(sample([1.0] * 5, blocks=range(1, 6)), sample([1.0] * 5, blocks=range(1, 6)), "median", paired=True)
    assert r.high > r.low and math.log(r.high) == pytest.approx(1.6448536 * NOISE_FLOOR, rel=1e-3)
    r = ratio_interval(sample([1.0] * 3), sample([1.0] * 3), "median")
    assert r.method == "rank" and r.high > r.low


def test_cpu_time_is_the_measure_only_where_both_sides_spent_their_steps_on_the_cpu():
    on = timing_sample([ProcessSteps(1, [0.010] * 20, cpu=[0.0102] * 20, thread_cpu=[0.0097] * 20)])
    sleeping = timing_sample([ProcessSteps(1, [0.060] * 20, cpu=[0.0102] * 20, thread_cpu=[0.0097] * 20)])
    waited = timing_sample([ProcessSteps(1, [0.020] * 20, cpu=[0.0102] * 20, thread_cpu=[0.0097] * 20, wait_share=[0.5] * 20)])
    assert on.cpu_bound and not sleeping.cpu_bound and waited.cpu_bound
    assert measure_of(on, waited) == "cpu"
    assert measure_of(sleeping, on) == "wall"  # the sleep is off the CPU: only wall time sees it
    r = ratio_interval(sleeping, on, "median")
    assert r.measure == "wall" and r.low > 1.05
    no_cpu = timing_sample([ProcessSteps(1, [0.010] * 20)])
    assert measure_of(no_cpu, on) == "wall"
    # Steps that burn CPU in an intra-op pool (the process's CPU time twice its training thread's):
    # its threads spin at each barrier while a neighbour delays one, so CPU time is not the
    # load-proof figure; wall time it is, on both sides.
    pool = timing_sample([ProcessSteps(1, [0.010] * 20, cpu=[0.019] * 20, thread_cpu=[0.0097] * 20)])
    assert not pool.cpu_bound and measure_of(pool, on) == measure_of(on, pool) == "wall"
    at_bound = timing_sample([ProcessSteps(1, [0.010] * 20, cpu=[0.0097 * ONE_THREAD_CPU] * 20, thread_cpu=[0.0097] * 20)])
    assert at_bound.cpu_bound


def test_compile_times_are_one_figure_per_process():
    top, bottom = compile_sample([12.0, 13.0, 12.5]), compile_sample([10.0, 10.2, 9.9])
    r = ratio_interval(top, bottom, "total")
    assert r.measure == "compile" and r.method == "rank" and r.low > 1.1
    one = ratio_interval(compile_sample([30.0]), compile_sample([10.0]), "total")
    assert one.method == "assumed" and one.low > 1.5


def test_figures_never_go_beyond_what_a_process_can_show():
    assert ratio_text(0.0001) == "<0.01x" and ratio_text(1e164) == ">100x" and ratio_text(float("inf")) == ">100x"
    assert ratio_text(1.234) == "1.23x"
    assert change_text(1e164) == ">+9900%" and change_text(0.0) == "<-99%" and change_text(1.05) == "+5.0%"
    assert spread_text(58.9) == "over +/-100%" and spread_text(0.12) == "+/-12%"
    needed = ratio_interval(sample([1.0001]), sample([1.0]), "median").processes_needed(1e-4)
    assert needed is None  # not "needs 5,282,937,232 steady steps a side"


def test_one_process_just_under_the_share_keeps_a_cpu_bound_side_on_cpu_time_and_a_sleeping_one_does_not():
    """A side is CPU-bound by its median process (CPU_BOUND_SHARE) with every process above
    CPU_BOUND_FLOOR: an unchanged process read 0.898 beside a busy runner (its wait an estimate),
    which must not send five processes to wall time; a process that sleeps half its step does."""
    def side(shares: list[float]) -> TimingSample:
        return timing_sample([ProcessSteps(i, [0.010] * 20, cpu=[0.010 * s] * 20, thread_cpu=[0.010 * s] * 20)
                              for i, s in enumerate(shares, 1)])

    assert side([0.97, 0.95, 0.898, 0.96, 0.94]).cpu_bound
    assert not side([0.97, 0.95, 0.5, 0.96, 0.94]).cpu_bound  # half a step off the CPU in one process
    assert not side([0.89, 0.88, 0.95, 0.87, 0.86]).cpu_bound  # the median process under the share


def test_what_would_resolve_an_inconclusive_interval_is_never_what_it_already_has():
    """Five paired blocks whose sign interval (their extremes) contains the bound: more blocks, 8
    or more (from 8 the 90% sign interval leaves the extremes out), never `--repeat 5` again."""
    r = ratio_interval(sample([1.0, 1.3, 0.8, 1.5, 0.7], blocks=range(1, 6)), sample([1.0] * 5, blocks=range(1, 6)), "median", paired=True)
    assert r.units == (5, 5)
    needed = r.processes_needed(1.0)  # far from the bound: the normal-theory figure alone says 5
    assert needed is not None and needed >= 8


def test_one_process_far_from_its_sides_others_is_set_apart_and_the_interval_stays_finite():
    """A baseline of three processes, one of which ran beside heavy load (its steps 37x the
    others'), against one run: the t interval on the three's spread (df 2) read 7e-07x..1.3e+05x.
    The odd process is named, and the interval is that of the processes that agree, stretched to
    the ratio the odd one reads: every figure a process could show."""
    base = sample([0.010, 0.0102, 0.37])
    r = ratio_interval(sample([0.0101]), base, "median")
    assert [(o.side, o.process) for o in r.outliers] == [("bottom", 3)]
    assert r.outliers[0].factor == pytest.approx(0.37 / math.sqrt(0.010 * 0.0102), rel=1e-9)  # over the others' median
    assert r.units == (1, 2) and r.method == "assumed"  # the two that agree: their noise is not measured
    assert r.ratio == pytest.approx(0.0101 / math.sqrt(0.010 * 0.0102), rel=1e-9)
    assert r.low == pytest.approx(0.0101 / 0.37, rel=1e-9)  # what the odd process reads
    half = 1.6448536 * ASSUMED_NOISE["wall"] * math.sqrt(1 + 1 / 2)
    assert r.high == pytest.approx(r.ratio * math.exp(half), rel=1e-6)  # the agreeing processes' bound
    assert 0.01 < r.low < 1.1 < r.high < 100.0  # a +10% bound: inconclusive, on bounds that mean something
    assert "1 process set apart" in method_words(r)
    # A verdict that holds on both readings stands: a run 100x slower than the baseline's typical
    # processes is slower than even the odd one.
    assert ratio_interval(sample([1.0]), base, "median").low > 1.1
    # The same odd process on the run's side, against a quiet baseline of three.
    r = ratio_interval(sample([0.010, 0.0101, 0.37]), sample([0.010, 0.0102, 0.0099]), "median")
    assert r.method == "rank" and [(o.side, o.process) for o in r.outliers] == [("top", 3)] and r.high < 40


def test_a_process_within_the_noise_a_loaded_machine_shows_is_not_set_apart():
    """Set apart only beyond OUTLIER_NOISES assumed noises from the side's median (5.4x on wall
    time, 2.7x on CPU or compile time), and only a minority of a side of three or more."""
    wall = math.exp(OUTLIER_NOISES * ASSUMED_NOISE["wall"])
    assert not ratio_interval(sample([0.010]), sample([0.010, 0.010, 0.010 * wall * 0.97]), "median").outliers
    assert ratio_interval(sample([0.010]), sample([0.010, 0.010, 0.010 * wall * 1.03]), "median").outliers
    compile_ = math.exp(OUTLIER_NOISES * ASSUMED_NOISE["compile"])
    assert ratio_interval(compile_sample([2.0]), compile_sample([2.0, 2.0, 2.0 * compile_ * 1.03]), "total").outliers
    assert not ratio_interval(sample([0.010]), sample([0.010, 0.5]), "median").outliers  # two: which one is odd?
    assert not ratio_interval(sample([0.010]), sample([0.010, 0.5, 0.010, 0.5]), "median").outliers  # half a side
    # Modes of one run in five blocks or more are left to the sign interval's order statistics.
    five = ratio_interval(sample([1.0, 1.0, 37.0, 1.0, 1.0], blocks=range(1, 6)), sample([1.0] * 5, blocks=range(1, 6)), "median", paired=True)
    assert five.method == "sign" and not five.outliers


def test_an_odd_block_of_fewer_than_five_is_set_apart_and_the_others_stretched_to_it():
    """Modes of one run in three blocks that read 1x, 1x and 37x: the third block's ratio lies
    beyond OUTLIER_NOISES assumed noises of a ratio (two processes': sqrt 2 of one's) from the
    others'. It is set apart and named; the interval is the two agreeing blocks', stretched to 37x
    (it was their spread's, 0.20x..55x); a verdict that holds on both readings stands."""
    paired = ratio_interval(sample([1.0, 1.0, 37.0], blocks=[1, 2, 3]), sample([1.0, 1.0, 1.0], blocks=[1, 2, 3]), "median", paired=True)
    assert [(o.side, o.process) for o in paired.outliers] == [("block", 3)] and paired.outliers[0].factor == pytest.approx(37.0)
    half = 1.6448536 * ASSUMED_NOISE["wall"] * math.sqrt(2 / 2)
    assert paired.units == (2, 2) and paired.low == pytest.approx(math.exp(-half), rel=1e-6) and paired.high == pytest.approx(37.0)
    assert paired.stretched and "1 block set apart" in method_words(paired)
    assert outlier_words(paired, "ca", "aot", "median step time") == [
        "block 3 (the processes of repetition 3): its ratio of median step time was 37x the others'"]
    # 3x in two blocks and 100x in the third: faster on both readings, a verdict that stands.
    faster = ratio_interval(sample([3.0, 3.0, 100.0], blocks=[1, 2, 3]), sample([1.0, 1.0, 1.0], blocks=[1, 2, 3]), "median", paired=True)
    assert faster.outliers and faster.low > 1.2
    # Within the noise a ratio shows (4 assumed noises of a ratio: 10.8x on wall time), not set apart.
    within = math.exp(OUTLIER_NOISES * ASSUMED_NOISE["wall"] * math.sqrt(2)) * 0.97
    assert not ratio_interval(sample([1.0, 1.0, within], blocks=[1, 2, 3]), sample([1.0] * 3, blocks=[1, 2, 3]), "median", paired=True).outliers
    # One process slowed with its block's other one (both beside the same load): the block's ratio is
    # the others', and nothing is set apart.
    both = ratio_interval(sample([1.0, 1.0, 37.0], blocks=[1, 2, 3]), sample([1.0, 1.0, 37.0], blocks=[1, 2, 3]), "median", paired=True)
    assert not both.outliers


def test_a_t_intervals_words_give_the_noise_the_processes_showed_and_what_it_was_taken_at():
    """One run against a baseline of five: `baseline save` reports the five processes' spread
    ("26% apart 90% of the time"), and the gate's interval takes it at its 75 % upper bound (few
    processes); the gate's words give both, the first as `baseline save` gave it."""
    from cagtool.report.gate.baseline import ModeSnapshot, StepTimeSnapshot, suggested_threshold

    base = sample([0.0100, 0.0112, 0.0095, 0.0121, 0.0104])
    r = ratio_interval(sample([0.0105]), base, "median")
    assert r.method == "t" and r.noise_factor > 1.0
    logs = [math.log(v) for v in (0.0100, 0.0112, 0.0095, 0.0121, 0.0104)]
    mean = sum(logs) / 5
    apart = math.expm1(1.645 * math.sqrt(sum((x - mean) ** 2 for x in logs) / 4) * math.sqrt(2))
    assert r.seen_spread == pytest.approx(apart, rel=1e-3) and r.spread > r.seen_spread
    words = method_words(r)
    assert f"run-to-run noise measured ({spread_text(r.seen_spread)} A/A, taken at {spread_text(r.spread)}: the most it may be" in words
    snap = ModeSnapshot("ca", "finished", 5, 1, 1, 0, 0, 0, 0, 0, 1.0, StepTimeSnapshot(5, 0.0104, 0.0095, 0.0121, 0.0106, base), 0, 5, "")
    assert f"{100 * apart:.0f}% apart 90% of the time (A/A)" in suggested_threshold(snap)[1]


# The steady steps (ms) of one `cagtool run` process per mode of a job whose DataLoader has two
# workers on a 2-core VM (aot, then ca): some steps wait for a batch, some do not. One process a
# side read ca 0.22x "slower"; three a side of the same job read 0.93x, inconclusive.
_WAITS_AOT = [9.97, 1.32, 2.55, 13.39, 1.31, 2.16, 1.52]
_WAITS_CA = [10.44, 1.69, 14.11, 11.77, 3.31, 9.89, 1.84]


def test_a_process_of_few_widely_spread_steps_carries_its_own_uncertainty():
    aot = timing_sample([ProcessSteps(1, [v / 1e3 for v in _WAITS_AOT])])
    ca = timing_sample([ProcessSteps(1, [v / 1e3 for v in _WAITS_CA])])
    assert aot is not None and ca is not None
    r = ratio_interval(aot, ca, "median", measure="wall")
    assert r.ratio == pytest.approx(2.16 / 9.89) and r.low < 1.0 < r.high, r  # inconclusive, not "slower"
    assert "each process's own figure is unsettled" in method_words(r)
    # The same as modes of one run (one block: paired, fewer blocks than the sign interval needs).
    together = ratio_interval(aot, ca, "median", paired=True, measure="wall")
    assert together.low < 1.0 < together.high and together.low == pytest.approx(r.low), together
    # The same figures without what their steps say of them (a baseline file of an older cagtool):
    # the assumed noise alone calls it.
    bare = ratio_interval(sample([aot.values["median"]]), sample([ca.values["median"]]), "median")
    assert bare.high < 1.0


def test_many_tight_steps_leave_the_assumed_interval_as_it_was():
    """A CPU-bound job's process of 100 steps within +/-3%: its own median is settled (the order
    statistics' interval is a few tenths of a percent), and the interval is the assumed noise's."""
    steps = [0.004 * (1.0 + 0.03 * math.sin(i * 1.7)) for i in range(100)]
    one = timing_sample([ProcessSteps(1, steps)])
    other = timing_sample([ProcessSteps(1, [1.2 * v for v in steps])])
    assert one is not None and other is not None and max(one.unit_noise["median"]) < 0.01
    r = ratio_interval(other, one, "median", measure="wall")
    half = math.log(r.high / r.ratio)
    assert half == pytest.approx(1.6448536 * ASSUMED_NOISE["wall"] * math.sqrt(2), rel=1e-3)
    assert "unsettled" not in method_words(r)


def test_what_would_resolve_it_counts_each_processs_own_uncertainty_too():
    """Processes of a few widely spread steps need more of them to resolve a ratio than the noise
    between processes alone says: each one's own figure is unsettled too."""
    aot = timing_sample([ProcessSteps(1, [v / 1e3 for v in _WAITS_AOT])])
    ca = timing_sample([ProcessSteps(1, [v / 1e3 for v in _WAITS_CA])])
    r = ratio_interval(aot, ca, "median", measure="wall")
    plain = ratio_interval(sample([aot.values["median"]]), sample([ca.values["median"] * 0.5]), "median")
    # The same distance to resolve, with and without the processes' own uncertainty.
    assert r.own > 0.5 and plain.own == 0.0
    with_own, without = r.processes_needed(0.4), plain.processes_needed(0.4)
    assert with_own is not None and without is not None and with_own > without
    expected = 2.0 * ((1.6448536 + 0.8416212) / 0.4) ** 2 * (r.noise ** 2 + r.own ** 2 / 2.0)
    assert with_own == max(3, math.ceil(expected))


def test_a_slowdown_bound_reads_as_a_figure_never_in_scientific_notation():
    """The heavy-load bound (a wait's factor cubed on wall time) read "up to 3.6e+02x here" at an
    86% wait (pytorch/examples' gat beside another job): past 100x it is extrapolated beyond any
    measurement, and says so as "over 100x"; below, two figures, whole from 10x."""
    from cagtool.report.figures.intervals import bound_text
    from cagtool.report.figures.metrics import heavy_load_bound

    assert bound_text(heavy_load_bound(0.86, "wall")) == "over 100x"
    assert [bound_text(v) for v in (1.23, 9.96, 11.4, 46.0, 100.0, float("inf"))] == ["1.2x", "10x", "11x", "46x", "100x", "over 100x"]
