"""When two recorded numbers agree, and how far apart they are: the one rule every numerics comparison
uses (the modes' losses and final norms, ranks against each other, drift)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """When two values agree: |x - ref| <= atol + rtol * |ref| (torch.allclose's rule).

    rtol 1e-3: in float32, a compiled forward/backward reorders reductions and fuses ops, which
    moves a loss by about 1e-7..1e-5 relative per step, and training trajectories drift apart
    slowly after that; 1e-3 leaves room for that drift over tens of steps while a real error (a
    hook that did not run, a stale or missing gradient) moves the loss by 1e-2 or more within a
    few steps. atol 1e-6 only matters for values near zero (a loss that converged to 0)."""

    rtol: float = 1e-3
    atol: float = 1e-6

    def agrees(self, value: float, reference: float) -> bool:
        if not (math.isfinite(value) and math.isfinite(reference)):
            return same_nonfinite(value, reference)
        return abs(value - reference) <= self.atol + self.rtol * abs(reference)


def same_nonfinite(value: float, reference: float) -> bool:
    """Both NaN, or the same infinity: the modes computed the same thing (said apart, as a NaN)."""
    if math.isnan(value) or math.isnan(reference):
        return math.isnan(value) and math.isnan(reference)
    return value == reference


def relative_difference(value: float, reference: float) -> float:
    """|value - reference| / |reference|; 0 when both are 0 (or the same NaN or infinity), inf
    when only the reference is 0 or only one is not finite."""
    if not (math.isfinite(value) and math.isfinite(reference)):
        return 0.0 if same_nonfinite(value, reference) else float("inf")
    diff = abs(value - reference)
    if diff == 0:
        return 0.0
    scale = abs(reference)
    return diff / scale if scale > 0 else float("inf")
