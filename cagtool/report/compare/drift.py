"""Drift: a mode whose losses equal the reference's to round-off over the first steps and move
apart later, in a long or chaotic run, is told from a mode that computes something else.

A compiled backward reorders and fuses the same float operations (Inductor's reductions, a fused
kernel), so each step's values move by round-off: ~1e-7 relative in float32. Training amplifies
that: two trajectories that start 1e-7 apart part by 1e-3 and more after tens to thousands of steps
(pytorch/examples' word_language_model at lr 20: losses within 9e-6 for the first 284 steps, beyond
1e-3 from step 489, 6.4e-2 at worst; 339, 492 and 4.5e-2 in another recording of the same job). A
real error (a hook that did not run, a stale or missing gradient) is wrong from the step it starts:
its gradients differ at once and the losses by 1e-2 within a few steps.

The rule, for one record against its reference: a loss (or final norm) difference beyond the
tolerance is *drift*, not a disagreement, when
1. the losses agree within DRIFT_RTOL relative at each of the first DRIFT_STEPS steps (from the
   first step, none missing), and
2. the per-parameter gradient check (grad_parity.py) compared a step among those and every step it
   compared before the losses parted agrees (a step at or after the first step whose losses differ
   beyond the tolerance compares gradients of parameters that already differ: not counted).
Without a gradient check in that window, or with one that disagrees, the difference stays a
disagreement; a final norm's difference is drift only where the losses left DRIFT_RTOL too.

The bounds, measured with torch 2.13 on CPU, ca (Inductor) against eager, as the largest relative
loss difference over the first 20 steps: 1.6e-6 (sample_scripts/mlp_steps.py, AdamW), 8.9e-7
(word_language_model), 6.6e-7 (tests/scripts/chaotic_lstm.py), 1.1e-7 (branching_model.py),
8.4e-8 (transformer_lm.py); a wrong gradient (chaotic_lstm.py --kind wrong_hook) differs by 2.6e-2
at step 1. DRIFT_RTOL sits 6x above the largest round-off seen and 1000x below the error. Round-off
reached DRIFT_RTOL at step 44 at the soonest (chaotic_lstm.py at lr 35; word_language_model at 284;
the others never in their 40-60 steps): DRIFT_STEPS = 20 asks for half that, so that a job faster
to diverge (the same LSTM at lr 80 leaves 1e-5 at step 12) stays a disagreement rather than an
error passing as drift.

Not told apart: an error that starts after the first DRIFT_STEPS steps at a step no digest of both
modes covers; `cagtool run --parity-every K` digests every K steps in every mode, and a gradient
that differs at one of them before the losses part is a disagreement again.
"""

from __future__ import annotations

from dataclasses import dataclass

from cagtool.record.schema import FIRST_STEP
from cagtool.report.compare.closeness import Tolerance, relative_difference

DRIFT_RTOL = 1e-5
DRIFT_STEPS = 20


@dataclass(frozen=True)
class LossDrift:
    """How one record's losses follow the reference's."""

    tight_steps: int  # the first steps (consecutive from FIRST_STEP) whose losses agree within DRIFT_RTOL
    tight_worst: float  # the largest relative difference over those steps
    parted_at: int | None  # the first step whose losses differ beyond the tolerance (None: none does)
    compared: int  # the steps both recorded

    @property
    def early_agreement(self) -> bool:
        """Condition 1 of the rule: the first DRIFT_STEPS steps agree within DRIFT_RTOL."""
        return self.tight_steps >= DRIFT_STEPS

    @property
    def left_tight(self) -> bool:
        """Whether the losses moved beyond DRIFT_RTOL at some step."""
        return self.tight_steps < self.compared

    def in_window(self, step: int) -> bool:
        """Whether `step` is one of the steps whose losses agree within DRIFT_RTOL."""
        return FIRST_STEP <= step < FIRST_STEP + self.tight_steps


def loss_drift(losses: dict[int, float], reference: dict[int, float], rtol: float, atol: float) -> LossDrift:
    """The tight prefix of `losses` against `reference` and where they part beyond rtol/atol (the
    loss numerics' rule: |x - ref| <= atol + rtol * |ref|), in one pass over the common steps."""
    steps = sorted(set(losses) & set(reference))
    tight, worst, parted = 0, 0.0, None
    in_prefix = True
    tolerance = Tolerance(rtol, atol)
    for index, step in enumerate(steps):
        value, ref = losses[step], reference[step]
        if in_prefix:
            relative = relative_difference(value, ref)
            if step == FIRST_STEP + index and relative <= DRIFT_RTOL:
                tight, worst = tight + 1, max(worst, relative)
            else:
                in_prefix = False
        if parted is None and not tolerance.agrees(value, ref):
            parted = step
            if not in_prefix:
                break
    return LossDrift(tight, worst, parted, len(steps))


def drift_words(drift: LossDrift, check_step: int, params: int) -> str:
    """The drift, in words: "losses agree to 9e-07 for the first 339 steps, then drift apart:
    round-off amplified by training, not wrong gradients; the step-0 gradients agree on all 11
    parameters"."""
    to = "bit for bit" if drift.tight_worst == 0 else f"to {drift.tight_worst:.0e}"
    return (f"losses agree {to} for the first {drift.tight_steps} steps, then drift apart: round-off amplified by training, "
            f"not wrong gradients; the step-{check_step} gradients agree on all {params} parameter{'s' if params != 1 else ''}")
