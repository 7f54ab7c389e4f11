"""Speedup of one mode over another from their steady step times, with its spread and a noise verdict.

The conventions (median ratio, conservative p10/p90 spread, `MIN_STEADY_STEPS`) are set out in
report.compare's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

from cagtool.report.compare.columns import ModeColumn

# Fewer steady steps than this on either side and a speedup is not claimed, whatever its value.
MIN_STEADY_STEPS = 5

# The pairs reported for one run, as (mode, baseline): "aot/eager" is aot's speedup over eager.
SPEEDUP_PAIRS: tuple[tuple[str, str], ...] = (("aot", "eager"), ("ca", "eager"), ("ca", "aot"))


@dataclass(frozen=True)
class Speedup:
    """`mode` over `baseline`: baseline median step time / mode median step time (> 1: faster)."""

    mode: str
    baseline: str
    ratio: float | None
    low: float | None  # baseline p10 / mode p90
    high: float | None  # baseline p90 / mode p10
    repetition_ratios: tuple[float, ...] = ()  # repetition i of baseline / repetition i of mode
    steady_steps: tuple[int, int] = (0, 0)  # (mode, baseline)
    note: str = ""  # why there is no ratio, or why it is not claimed

    @property
    def label(self) -> str:
        return f"{self.mode}/{self.baseline}"

    @property
    def within_noise(self) -> bool | None:
        """True when the spread contains 1.0 (or there are too few steady steps to tell)."""
        if self.ratio is None:
            return None
        if min(self.steady_steps) < MIN_STEADY_STEPS:
            return True
        assert self.low is not None and self.high is not None
        inside = self.low <= 1.0 <= self.high
        if self.repetition_ratios and len(self.repetition_ratios) > 1:
            # Repetitions that disagree on the direction are noise too.
            inside = inside or (min(self.repetition_ratios) <= 1.0 <= max(self.repetition_ratios))
        return inside

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "n/a"
        if self.within_noise:
            if min(self.steady_steps) < MIN_STEADY_STEPS:
                return "too few steady steps"
            return "within noise"
        return "faster" if self.ratio > 1 else "slower"


def speedup(mode: ModeColumn | None, baseline: ModeColumn | None, mode_label: str = "", baseline_label: str = "") -> Speedup:
    mode_label = mode_label or (mode.name if mode else "?")
    baseline_label = baseline_label or (baseline.name if baseline else "?")
    for column, label in ((mode, mode_label), (baseline, baseline_label)):
        if column is None:
            return Speedup(mode_label, baseline_label, None, None, None, note=f"{label} was not run")
        if column.step_time.median_s is None:
            why = "it failed before a steady step" if not column.ok else "no steady-state steps (all were compiling, or fewer than 2 steps)"
            return Speedup(mode_label, baseline_label, None, None, None, note=f"{label}: {why}")
    assert mode is not None and baseline is not None
    m, b = mode.step_time, baseline.step_time
    if not (m.median_s and m.p10_s and m.p90_s and b.median_s and b.p10_s is not None and b.p90_s is not None):
        # Zero-length intervals can only come from a clock that did not move: nothing to divide by.
        return Speedup(mode_label, baseline_label, None, None, None, note="step times of zero length")
    reps = tuple(
        bm / mm
        for bm, mm in zip(baseline.repetition_medians, mode.repetition_medians)
        if bm is not None and mm is not None and mm > 0
    )
    note = ""
    if min(m.count, b.count) < MIN_STEADY_STEPS:
        fewest = min(m.count, b.count)
        note = f"only {fewest} steady step{'s' if fewest != 1 else ''}; run more steps to judge"
    elif not mode.ok or not baseline.ok:
        note = "from a mode that did not finish cleanly"
    return Speedup(
        mode=mode_label,
        baseline=baseline_label,
        ratio=b.median_s / m.median_s,
        low=b.p10_s / m.p90_s,
        high=b.p90_s / m.p10_s,
        repetition_ratios=reps if len(reps) > 1 else (),
        steady_steps=(m.count, b.count),
        note=note,
    )
