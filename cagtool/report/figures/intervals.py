"""Confidence intervals of timing ratios, and what a check can resolve with the evidence it has.

Every timing verdict (compare's speedups, `gate --min-speedup`, `--max-regression`,
`--max-compile-regression`, the HTML verdict) rests on one interval: that of the ratio of a
statistic (the median, mean, p10 or p90 of the steady step times, or the compile time) between two
sides, never on the spread of the step times themselves. The spread says how wide the
distribution is; the interval says how well the statistic is known, and it narrows with evidence.

Units. Step times drift and are autocorrelated: consecutive steps are not independent samples, and
an interval that treats them so is far too narrow on a long run. Each side's steady series is cut
into batches of consecutive steps (about sqrt(n) batches, at most `MAX_BATCHES`, and each at least
`BATCH_TAUS` integrated autocorrelation times long: the method of batch means, standard for the
output of a simulation) and the statistic of each batch is one unit; a slow drift makes the batches
differ and the interval wider. While the batch statistics are still autocorrelated, adjacent
batches are merged: fewer, longer units and a wider interval. With `MIN_REPETITION_UNITS` or more
repetitions (`cagtool run --repeat K`) the side's units are its repetitions instead: runs differ
from each other more than batches of one run do (compile cache, memory layout, the machine's
load), and only repetitions can see that. With one run a side, that run-to-run noise is not
measured, and the check says so.

Interval. Step-time statistics: distribution-free, the Hodges-Lehmann interval of the shift of the
log unit statistics (the pairwise differences, k cut at each end, k from Mann-Whitney's exact null
distribution), around the ratio of the statistics pooled over all of a side's steps. Unit
statistics of a busy runner are skewed and heavy-tailed, where Student's t on a few of them fails
several times more often than its confidence says. Compile times are one figure per run: Student's
t with Welch's degrees of freedom on the log figures, exp(d -/+ t * se); a side with one figure
borrows the other side's noise (same runner, same code path); with one figure on both sides there
is no interval, and the check judges the figures alone and says the noise was not measured. Both
are two-sided at `CONFIDENCE` (90%: a check that fails only when the whole interval is beyond its
bound is wrong at most 5% of the time when the truth sits on the bound).

Resolution (power). A check that fails when the interval's far end passes a bound catches a true
change of (t(1 - alpha/2) + t(power)) * se beyond that bound with probability `POWER`: that
distance is what the check can resolve. A regression check *resolves its threshold* when it would
catch a regression of twice the threshold 95% of the time; `units_needed` says how much more
evidence would make it so (se shrinks as 1/sqrt(units)).

The calibration of all this against realistic step-time shapes (skewed, drifting, autocorrelated,
with outliers, and real recorded runs) is `benchmarks/gate_calibration.py`, with its table in
benchmarks/README.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

CONFIDENCE = 0.90
POWER = 0.95
MAX_BATCHES = 30
# A side measured by repetitions needs this many: with two, one difference estimates the noise.
MIN_REPETITION_UNITS = 3
# Step-time statistics a check can hold to a threshold.
FIELDS = ("median", "mean", "p10", "p90")


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile, P(T <= x) = p (Hill 1970, CACM Algorithm 396): within 1e-4 relative
    of scipy.stats.t.ppf for df = 1, 2 and every real df >= 2, pinned by a test. Between 1 and 2
    the algorithm is off by up to 4%, so df is taken down to 1 there: a wider, never a narrower,
    interval. Hand-written because `import scipy.special` alone costs 0.6 s of CPU, more than the
    whole `gate` command on a 20,000-step record (benchmarks/README.md)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if math.isinf(df) or df > 1e7:
        return NormalDist().inv_cdf(p)
    n = float(df) if df >= 2.0 else 1.0
    if p == 0.5:
        return 0.0
    two_tail = 2.0 * min(p, 1.0 - p)
    sign = 1.0 if p > 0.5 else -1.0
    if n == 1.0:
        x = 1.0 / math.tan(two_tail * math.pi / 2.0)
        return sign * x
    if n == 2.0:
        return sign * math.sqrt(2.0 / (two_tail * (2.0 - two_tail)) - 2.0)
    a = 1.0 / (n - 0.5)
    b = 48.0 / (a * a)
    c = ((20700.0 * a / b - 98.0) * a - 16.0) * a + 96.36
    d = ((94.5 / (b + c) - 3.0) / b + 1.0) * math.sqrt(a * math.pi / 2.0) * n
    x = d * two_tail
    y = x ** (2.0 / n)
    if y > 0.05 + a:
        x = NormalDist().inv_cdf(two_tail * 0.5)
        y = x * x
        if n < 5.0:
            c += 0.3 * (n - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5.0) * x - 7.0) * x - 2.0) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36.0) * y + 94.5) / c - y - 3.0) / b + 1.0) * x
        y = math.expm1(a * y * y)
    else:
        y = ((1.0 / (((n + 6.0) / (n * y) - 0.089 * d - 0.822) * (n + 2.0) * 3.0) + 0.5 / (n + 4.0)) * y - 1.0) * (n + 1.0) / (n + 2.0) + 1.0 / y
    return sign * math.sqrt(n * y)


def _statistic(values: Sequence[float], field_name: str) -> float:
    import numpy as np

    array = np.asarray(values, dtype=float)
    if field_name == "median":
        return float(np.median(array))
    if field_name == "mean":
        return float(array.mean())
    if field_name in ("p10", "p90"):
        return float(np.percentile(array, 10.0 if field_name == "p10" else 90.0))
    raise ValueError(f"unknown statistic {field_name!r}")


def batch_count(n: int, tau: float = 1.0) -> int:
    """How many batches a series of n steps is cut into: about sqrt(n) (enough of them to estimate
    a spread), at most MAX_BATCHES, and no more than leaves each batch `BATCH_TAUS` integrated
    autocorrelation times `tau` long (steps), so that batch statistics are about independent."""
    if n < 2:
        return 0
    k = min(MAX_BATCHES, math.isqrt(n))
    if tau > 1.0:
        k = min(k, int(n // (BATCH_TAUS * tau)))
        if tau >= SUSPECT_TAU and n < MIN_STEPS_PER_TAU * tau:
            # Too short a series to know its own autocorrelation: a phase longer than the run
            # looks, from inside it, like a short one (the estimate is biased low), and batches cut
            # by it would all see one phase. Two units: no verdict, a request for more evidence.
            k = 2
    return max(2, k)


# The autocorrelation time read from fewer steps than this many times itself is not trusted
# (Sokal's rule of thumb for the estimate, from MCMC practice).
MIN_STEPS_PER_TAU = 50.0
# ...for a time this long or longer: independent steps read 1 to about 1.5 from a few dozen steps,
# and a short run of them must still get its verdict (a step time 8 times its baseline's fails).
SUSPECT_TAU = 2.0
# A batch this many integrated autocorrelation times long has statistics about independent of its
# neighbours' (the lag-1 correlation of AR(1) batch means is about tau / (2 * length)).
BATCH_TAUS = 3.0
# The autocorrelation is read on at most this many consecutive means of the log step times (a
# 100,000-step series in means of 50): enough lags for any phase shorter than a batch, and cheap.
_TAU_POINTS = 2048


def autocorrelation_time(series: Sequence[float]) -> float:
    """The integrated autocorrelation time of the log step times less their linear trend, in
    steps (1 for independent steps): 1 + 2 * sum of the autocorrelations, summed by Geyer's initial monotone sequence (pairs
    of lags while their sum stays positive and decreasing), the estimator MCMC practice uses for
    the effective sample size. A phase of slow steps (a neighbour on the runner) makes it long. Read
    on means of consecutive steps when the series is long (each mean is `chunk` steps: the time is
    then chunk times the means' own, an over- rather than an under-estimate)."""
    import numpy as np

    array = np.log(np.clip(np.asarray(series, dtype=float), 1e-12, None))
    chunk = max(1, math.ceil(len(array) / _TAU_POINTS))
    if chunk > 1:
        usable = (len(array) // chunk) * chunk
        array = array[:usable].reshape(-1, chunk).mean(axis=1)
    n = len(array)
    if n < 4:
        return float(chunk)
    # Less its straight-line trend: a drift over the run (allocator warm-up, a learning-rate
    # schedule) is not autocorrelated noise, and read as such it would make the time as long as
    # the run. The drift still widens the interval: it makes the batches differ.
    position = np.arange(n, dtype=float) - (n - 1) / 2.0
    slope = float(position @ (array - array.mean())) / float(position @ position)
    centred = array - array.mean() - slope * position
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(centred, size)
    acov = np.fft.irfft(spectrum * np.conj(spectrum), size)[:n]
    if acov[0] <= 0.0:
        return float(chunk)
    rho = acov / acov[0]
    total, previous = -1.0, math.inf
    for m in range(0, n // 2):
        pair = float(rho[2 * m] + rho[2 * m + 1]) if 2 * m + 1 < n else float(rho[2 * m])
        if pair <= 0.0:
            break
        pair = min(pair, previous)
        total += 2.0 * pair
        previous = pair
    return max(1.0, total) * chunk


# Batches are long enough when their statistics are about independent: while the lag-1
# autocorrelation of the log batch statistics exceeds what chance gives independent ones (one-sided
# 5%: 1.645 / sqrt(k)), adjacent batches are merged (the number halved). A job whose speed shifts in
# phases (a neighbour on the runner, a data loader stalling for minutes) is judged on fewer, longer
# batches and a wider interval, never on many batches that all see the same phase.
_AUTOCORRELATION_Z = 1.645


def _batches(array, k: int, field_name: str) -> list[float]:
    import numpy as np

    if field_name == "mean":
        return [float(part.mean()) for part in np.array_split(array, k)]
    if field_name == "median":
        return [float(np.median(part)) for part in np.array_split(array, k)]
    q = 10.0 if field_name == "p10" else 90.0
    return [float(np.percentile(part, q)) for part in np.array_split(array, k)]


def lag1_autocorrelation(values: Sequence[float]) -> float:
    """r1 of a sequence (0 for a constant one)."""
    k = len(values)
    if k < 3:
        return 0.0
    mean = sum(values) / k
    centred = [v - mean for v in values]
    denominator = sum(c * c for c in centred)
    if denominator == 0.0:
        return 0.0
    return sum(a * b for a, b in zip(centred, centred[1:])) / denominator


def batch_statistics(series: Sequence[float], field_name: str, tau: float | None = None) -> list[float]:
    """The statistic of each batch of consecutive steps (batches differ in length by at most 1),
    about sqrt(n) of them, fewer where the steps are autocorrelated (`tau`, computed when not
    given) and while the batch statistics still are (see above)."""
    import numpy as np

    if tau is None:
        tau = autocorrelation_time(series) if len(series) >= 4 else 1.0
    k = batch_count(len(series), tau)
    if k == 0:
        return []
    array = np.asarray(series, dtype=float)
    stats = _batches(array, k, field_name)
    while k > 2 and lag1_autocorrelation([math.log(v) if v > 0 else 0.0 for v in stats]) > _AUTOCORRELATION_Z / math.sqrt(k):
        k = max(2, k // 2)
        stats = _batches(array, k, field_name)
    return stats


@dataclass(frozen=True)
class TimingSample:
    """One side of a comparison, as an interval needs it: per statistic, its value over all of the
    side's steps and its value per unit (a batch of consecutive steps, or a repetition), seconds.
    This is what a baseline file keeps of the step times (a few dozen numbers a statistic)."""

    count: int  # steady steps, all repetitions
    repetitions: int
    unit: str  # "batch" | "repetition"
    values: dict[str, float]  # statistic -> pooled value
    units: dict[str, tuple[float, ...]]  # statistic -> per-unit values

    def log_units(self, field_name: str) -> list[float]:
        return [math.log(v) for v in self.units.get(field_name, ()) if v > 0]


def timing_sample(repetitions: Sequence[Sequence[float]]) -> TimingSample | None:
    """The sample of one side from its repetitions' steady step times, each in step order. None
    without a step. Repetitions are the units when MIN_REPETITION_UNITS or more have steps; else
    batches of each repetition's own series (never across a repetition boundary)."""
    import numpy as np

    # Each series made an array once (the statistics below took a list each and converted it
    # again: eight conversions of 100,000 floats per side); the same float64 values, so the same
    # results.
    series = [np.asarray(rep, dtype=float) for rep in repetitions if len(rep) > 0]
    if not series:
        return None
    pooled = series[0] if len(series) == 1 else np.concatenate(series)
    by_repetition = len(series) >= MIN_REPETITION_UNITS
    taus = [] if by_repetition else [autocorrelation_time(rep) if len(rep) >= 4 else 1.0 for rep in series]
    values: dict[str, float] = {}
    units: dict[str, tuple[float, ...]] = {}
    for name in FIELDS:
        values[name] = _statistic(pooled, name)
        if by_repetition:
            units[name] = tuple(_statistic(rep, name) for rep in series)
        else:
            units[name] = tuple(v for rep, tau in zip(series, taus) for v in batch_statistics(rep, name, tau))
    return TimingSample(len(pooled), len(series), "repetition" if by_repetition else "batch", values, units)


def compile_sample(samples: Sequence[float]) -> TimingSample | None:
    """Compile times, one per run: each run is a unit."""
    kept = tuple(float(s) for s in samples if s is not None and s > 0)
    if not kept:
        return None
    median = sorted(kept)[len(kept) // 2] if len(kept) % 2 else sum(sorted(kept)[len(kept) // 2 - 1 : len(kept) // 2 + 1]) / 2
    return TimingSample(len(kept), len(kept), "run", {"total": median}, {"total": kept})


def _sd_upper_factor(df: float, confidence: float = 0.90) -> float:
    """sqrt(df / chi2_(1-confidence)(df)): how much a standard deviation estimated with `df`
    degrees of freedom may be under the true one, at `confidence` (Wilson-Hilferty's chi-square
    quantile, within 1% of the exact one from df = 2)."""
    if not math.isfinite(df) or df <= 0:
        return 1.0
    z = NormalDist().inv_cdf(1.0 - confidence)
    term = 2.0 / (9.0 * df)
    quantile = df * max(1.0 - term + z * math.sqrt(term), 1e-3) ** 3
    return math.sqrt(df / quantile)


def _mean_var(values: list[float]) -> tuple[float, float]:
    k = len(values)
    mean = sum(values) / k
    return mean, (sum((v - mean) ** 2 for v in values) / (k - 1) if k > 1 else math.nan)


@dataclass(frozen=True)
class RatioInterval:
    """top / bottom for one statistic, with its two-sided CONFIDENCE interval."""

    ratio: float
    low: float
    high: float
    se: float  # standard error of log(ratio); nan when the noise was not measured
    df: float
    units: tuple[int, int]  # units on each side
    unit: str  # how the units were made: "batch", "repetition", "run", or "top batch / bottom repetition"
    confidence: float = CONFIDENCE
    method: str = "welch"  # "rank": Hodges-Lehmann / Mann-Whitney on the units; "welch": Student's t

    @property
    def measured(self) -> bool:
        """False when neither side had two units: the ratio's noise is unknown."""
        return not math.isnan(self.se)

    @property
    def bounded(self) -> bool:
        """False when the units are too few for a distribution-free interval at this confidence
        (2 against 2): the interval is then the whole line, and no verdict rests on it."""
        return self.low > 0.0 and math.isfinite(self.high)

    def resolution(self, power: float = POWER) -> float:
        """The smallest log-distance beyond a bound that a check on this interval catches with
        probability `power` (inf when the noise was not measured). The noise is taken at a 90%
        upper bound of its estimate (chi-square with the interval's degrees of freedom): with few
        units the estimate is itself noisy, and a power claim must not rest on a lucky one."""
        if not self.measured or not self.bounded:
            return math.inf
        alpha = 1.0 - self.confidence
        distance = (t_quantile(1.0 - alpha / 2.0, self.df) + t_quantile(power, self.df)) * self.se * _sd_upper_factor(self.df)
        # The rank interval's efficiency against Student's t on normal data is 3/pi (0.955): the
        # same power needs 1/0.955 times the units, a 2.3% longer distance.
        return distance / math.sqrt(3.0 / math.pi) if self.method == "rank" else distance

    def evidence_factor(self, wanted: float, power: float = POWER) -> float:
        """How many times the present units a side would need for the resolution to be `wanted`
        (log-distance); se shrinks as 1/sqrt(units). inf when unmeasured."""
        if self.measured and not self.bounded:
            # Too few units for the rank interval (a series too short for its own autocorrelation):
            # more steps of the same run may not help; repetitions do.
            return math.inf
        have = self.resolution(power)
        if not math.isfinite(have):
            return math.inf
        if have <= wanted:
            return 1.0
        return (have / wanted) ** 2


# A distribution-free interval at 90% needs three units a side (3 against 3: the extreme pairwise
# differences, exactly 90%); with two a side no choice of differences reaches it.
MIN_RANK_UNITS = 3


def _gaussian_binomial(m: int, n: int) -> list[int]:
    """Coefficients of the Gaussian binomial [m+n choose m]_q: entry u is the number of orderings
    of m + n distinct values in which the Mann-Whitney U of the m is u (0 <= u <= m * n)."""
    poly = [1]
    for i in range(1, m + 1):
        # multiply by (1 - q^(n+i)), then divide by (1 - q^i): exact, the quotient is a polynomial
        grown = poly + [0] * (n + i)
        for u in range(len(poly) - 1, -1, -1):
            grown[u + n + i] -= poly[u]
        for u in range(i, len(grown)):
            grown[u] += grown[u - i]
        poly = grown[: len(grown) - i]
    return poly


_RANK_CUTS: dict[tuple[int, int, float], int] = {}


def rank_cut(m: int, n: int, confidence: float = CONFIDENCE) -> int:
    """How many of the m * n pairwise differences to leave out at each end for a two-sided
    `confidence` interval of a shift (Hodges-Lehmann; Mann-Whitney's exact null distribution):
    the largest k with P(U <= k - 1) <= (1 - confidence) / 2. 0 when no k reaches it."""
    key = (min(m, n), max(m, n), confidence)
    if key not in _RANK_CUTS:
        counts = _gaussian_binomial(*key[:2])
        total = sum(counts)
        tail = (1.0 - confidence) / 2.0
        k, below = 0, 0
        while k < len(counts) and (below + counts[k]) / total <= tail * (1.0 + 1e-9):
            below += counts[k]
            k += 1
        _RANK_CUTS[key] = k
    return _RANK_CUTS[key]


def _rank_bounds(la: list[float], lb: list[float], confidence: float) -> tuple[float, float] | None:
    """The distribution-free interval of the shift of log statistics, top minus bottom, from the
    pairwise differences of the units; None when the units are too few to reach `confidence`."""
    k = rank_cut(len(la), len(lb), confidence)
    if k == 0:
        return None
    differences = sorted(a - b for a in la for b in lb)
    return differences[k - 1], differences[len(differences) - k]


def ratio_interval(top: TimingSample, bottom: TimingSample, field_name: str, confidence: float = CONFIDENCE) -> RatioInterval | None:
    """The interval of top/bottom for `field_name` (see the module docstring). None when a side
    has no value."""
    a, b = top.values.get(field_name), bottom.values.get(field_name)
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    d = math.log(a) - math.log(b)
    la, lb = top.log_units(field_name), bottom.log_units(field_name)
    unit = top.unit if top.unit == bottom.unit else f"{top.unit} / {bottom.unit}"
    counts = (len(la), len(lb))
    _, va = _mean_var(la) if la else (0.0, math.nan)
    _, vb = _mean_var(lb) if lb else (0.0, math.nan)
    if math.isnan(va) and math.isnan(vb):
        return RatioInterval(math.exp(d), math.exp(d), math.exp(d), math.nan, math.nan, counts, unit, confidence)
    if math.isnan(va) or math.isnan(vb):
        # One side has a single unit: it borrows the other side's noise (same runner, same code).
        known, k_known = (vb, len(lb)) if math.isnan(va) else (va, len(la))
        se = math.sqrt(known / max(len(la), 1) + known / max(len(lb), 1))
        df = float(k_known - 1)
    else:
        qa, qb = va / len(la), vb / len(lb)
        se = math.sqrt(qa + qb)
        if se == 0.0:
            df = float(len(la) + len(lb) - 2)
        else:
            df = (qa + qb) ** 2 / ((qa * qa / (len(la) - 1) if qa else 0.0) + (qb * qb / (len(lb) - 1) if qb else 0.0))
    df = max(df, 1.0)
    if top.unit != "run" and bottom.unit != "run" and min(counts) >= 2:
        # Step-time statistics: the distribution-free interval of the shift (rank method above).
        # Batch or repetition statistics of a busy runner are skewed and heavy-tailed, where
        # Student's t with a few units fails far more often than its confidence says. The pooled
        # ratio always lies inside its interval.
        bounds = _rank_bounds(la, lb, confidence)
        if bounds is None:
            return RatioInterval(math.exp(d), 0.0, math.inf, se, df, counts, unit, confidence, "rank")
        low, high = min(bounds[0], d), max(bounds[1], d)
        return RatioInterval(math.exp(d), math.exp(low), math.exp(high), se, df, counts, unit, confidence, "rank")
    t = t_quantile(1.0 - (1.0 - confidence) / 2.0, df)
    return RatioInterval(math.exp(d), math.exp(d - t * se), math.exp(d + t * se), se, df, counts, unit, confidence)


def evidence_text(interval: RatioInterval, factor: float, sample: TimingSample | None) -> str:
    """"about N steady steps a side" / "about K repetitions a side" for an evidence factor."""
    if not math.isfinite(factor):
        return "repetitions on both sides (run --repeat 3) to measure the noise"
    if sample is None or interval.unit.startswith("run"):
        return f"about {math.ceil(factor * max(interval.units))} runs a side"
    if sample.unit == "repetition":
        return f"about {math.ceil(factor * sample.repetitions)} repetitions a side (run --repeat)"
    return f"about {math.ceil(factor * sample.count):,} steady steps a side"


def pct(log_distance: float) -> str:
    """A log-distance as the relative change it means, e.g. 0.0953 -> "10.0%"."""
    if not math.isfinite(log_distance):
        return "unbounded"
    return f"{100.0 * math.expm1(log_distance):.1f}%"
