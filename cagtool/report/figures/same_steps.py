"""Whether two processes' step times are one process's record counted twice (`same_steps`).

A repetition copied from another, with its pid and clock edited so that the loader takes it for a
process of its own, counts one process as two that agree and narrows every interval built on it.
Two processes never time their steps alike: their steps differ by the machine's jitter, which is
microseconds where the clock reads nanoseconds. A copy keeps the copied steps, in order, also when
some were edited, a few nanoseconds added to each, a step dropped at one end or the sequence
rotated; in any order, also when shuffled. Each such agreement is weighed by what the two
processes' own steps say their clocks could give by chance:

- **In step order**, at each alignment of one sequence against the other (shifted by up to
  `OFFSETS` steps: a step dropped or added at an end, a rotation), the steps whose times agree
  within a tolerance (`TOLERANCES_NS`: to the nanosecond, within 10 ns, within 100 ns). The chance
  that two processes' steps agree at one place is bounded by sqrt(q_a * q_b), with q a process's
  own chance of two of its steps agreeing: of two steps drawn at random (the self-pair included,
  so never below 1/n), of two consecutive steps (a job whose steps drift through the run agrees
  with itself more closely at one place than over the whole run), and of a step and the step
  nearest to it in time taken (a job whose steps come in a few sizes agrees within a size), the
  largest. A run of L
  agreeing steps in a row is a copy when its chance n * p^L is below `SAME_STEPS_CHANCE`, and so
  is a count of agreeing steps whose binomial chance is.
- **In any order**, the two sequences sorted and aligned the same way: a shuffled or rotated copy
  has the same sorted times. The chance at one place is bounded the same way, with the gaps
  between a process's sorted steps in place of its consecutive steps (two sorted sequences of
  independent processes agree at a place less often than a gap is that narrow); only the count is
  weighed (agreeing sorted places come in stretches by chance).

Every test made counts against the chance (`SAME_STEPS_CHANCE` is for all of them together). A
coarse clock that reads many steps alike gives large q and is never taken for a copy: the real
steps of 7 processes of `mlp_steps.py` (21 pairs), read at ticks of 1 us to 15.6 ms, were not
(docs/ci.md). A copy whose every step was moved by more than the largest tolerance is not told
apart from a process whose steps replicate another's (a job with the same per-step work in the
same order can); microseconds are the jitter real processes show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

SAME_STEPS_CHANCE = 1e-9
TOLERANCES_NS = (0, 10, 100)
OFFSETS = 8


@dataclass(frozen=True)
class SameSteps:
    """Two processes' step times that agree beyond chance (`same_steps`)."""

    equal: int  # steps that agree within the tolerance, at the alignment found
    compared: int  # steps compared at that alignment
    longest: int  # the longest stretch of agreeing steps in a row (in step order)
    tolerance_ns: int = 0  # 0: to the nanosecond
    offset: int = 0  # steps one sequence is shifted by against the other
    any_order: bool = False  # found with both sequences sorted (a shuffled or rotated copy)

    def words(self) -> str:
        within = "equal to the nanosecond" if self.tolerance_ns == 0 else f"within {self.tolerance_ns} ns of each other"
        if self.any_order:
            return f"{self.equal} of {self.compared} steady step times {within}, in any order"
        shifted = "" if self.offset == 0 else f", one shifted {abs(self.offset)} step{'s' if abs(self.offset) != 1 else ''} against the other"
        return f"{self.equal} of {self.compared} steady steps {within}, {self.longest} in a row{shifted}"


def _nanoseconds(times: Sequence[float]) -> Any:
    import numpy as np

    return np.rint(np.asarray(times, dtype=float) * 1e9)


def _agreement(ns: Any, ordered: Any, tolerance: int) -> float:
    """One process's chance that two of its steps agree within `tolerance` ns: of two drawn at
    random (the self-pair included: at least 1/n), of two neighbours in `ordered` (its step order,
    or its sorted times), or of a step and its nearest other in time taken (a job whose steps come
    in sizes agrees with itself within a size), the largest."""
    import numpy as np

    n = len(ns)
    s = np.sort(ns)
    pairs = np.searchsorted(s, s + tolerance, side="right") - np.searchsorted(s, s - tolerance, side="left")
    random_pair = float(pairs.sum()) / (n * n)
    neighbours = float(np.mean(np.abs(np.diff(ordered)) <= tolerance)) if n > 1 else 1.0
    gaps = np.diff(s) <= tolerance
    twins = float(np.mean(np.concatenate(([False], gaps)) | np.concatenate((gaps, [False])))) if n > 1 else 1.0
    return max(random_pair, neighbours, twins)


def _longest_run(agree: Any) -> int:
    import numpy as np

    edges = np.diff(np.concatenate(([0], agree.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return int((ends - starts).max()) if len(starts) else 0


def _binomial_tail_log10(n: int, m: int, p: float) -> float:
    """log10 P(Binomial(n, p) >= m), bounded above by n times its term at m (at or past its mode)."""
    if m <= n * p:
        return 0.0
    if p <= 0.0:
        return -math.inf
    log_p1 = math.log1p(-p) if p < 1.0 else -math.inf
    if p >= 1.0:
        return 0.0
    term = math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1) + m * math.log(p) + (n - m) * log_p1
    return min(0.0, (term + math.log(n - m + 1)) / math.log(10))


def _aligned(x: Any, y: Any, offset: int) -> tuple[Any, Any]:
    if offset >= 0:
        k = min(len(x), len(y) - offset)
        return x[:k], y[offset:offset + k]
    k = min(len(x) + offset, len(y))
    return x[-offset:-offset + k], y[:k]


@dataclass(frozen=True)
class StepProfile:
    """One process's steps as `same_steps` reads them, computed once for all its pairs."""

    ns: Any  # its steady step times in nanoseconds, in step order
    ordered: Any  # the same, sorted
    agreement: dict[tuple[bool, int], float]  # (sorted, tolerance) -> its own chance of agreeing (_agreement)


def step_profile(times: Sequence[float]) -> StepProfile:
    import numpy as np

    ns = _nanoseconds(times)
    ordered = np.sort(ns)
    agreement = {(any_order, t): _agreement(ns, ordered if any_order else ns, t) if len(ns) > 1 else 1.0
                 for any_order in (False, True) for t in TOLERANCES_NS}
    return StepProfile(ns, ordered, agreement)


def same_steps(a: Sequence[float] | StepProfile, b: Sequence[float] | StepProfile) -> SameSteps | None:
    """What two processes' steady step times (in step order, or their `step_profile`s) share
    beyond chance, or None."""
    import numpy as np

    pa = a if isinstance(a, StepProfile) else step_profile(a)
    pb = b if isinstance(b, StepProfile) else step_profile(b)
    if min(len(pa.ns), len(pb.ns)) < 2:
        return None
    offsets = [k for k in range(-OFFSETS, OFFSETS + 1) if min(len(pa.ns), len(pb.ns) - k, len(pa.ns) + k, len(pb.ns)) >= 2]
    tests = 2 * len(offsets) * len(TOLERANCES_NS)
    bound = math.log10(SAME_STEPS_CHANCE) - math.log10(tests)
    best: tuple[float, SameSteps] | None = None
    for tolerance in TOLERANCES_NS:
        for any_order, u, v in ((False, pa.ns, pb.ns), (True, pa.ordered, pb.ordered)):
            p = math.sqrt(pa.agreement[any_order, tolerance] * pb.agreement[any_order, tolerance])
            if p >= 1.0:
                continue  # a clock that read every step alike: its steps cannot tell processes apart
            for offset in offsets:
                left, right = _aligned(u, v, offset)
                agree = np.abs(left - right) <= tolerance
                n, m = len(left), int(np.count_nonzero(agree))
                if m < 2 or m <= n * p:
                    continue
                longest = _longest_run(agree)
                chance = _binomial_tail_log10(n, m, p)
                if not any_order:
                    chance = min(chance, math.log10(n) + longest * math.log10(p))
                if chance < bound and (best is None or chance < best[0]):
                    best = (chance, SameSteps(m, n, longest, tolerance, offset, any_order))
    return best[1] if best is not None else None
