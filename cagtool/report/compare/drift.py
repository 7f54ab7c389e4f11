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

3. the losses leave DRIFT_RTOL growing, not at a jump: at the first step beyond it, the difference
   is at most JUMP times the largest of the JUMP_WINDOW steps before it (and of ROUND_OFF, float32's
   relative round-off). Round-off amplified by training grows by a bounded factor a step: at that
   step 1.1x (word_language_model), 2.2x and 4.2x (chaotic_lstm.py, two recordings), and no step of
   those runs, to their end, rose past 16x its five steps before. An error that starts mid-run (a
   hook registered at step 30 that halves a gradient only under compiled autograd) takes the losses
   from bit for bit equal to 6.5e-3 apart in one step: 65,000x; chaotic_lstm.py --kind wrong_hook
   from step 0 to 1: 255,000x. JUMP = 100 sits 6x above the one and 650x below the other.

Not told apart: an error that starts after the first DRIFT_STEPS steps at a step no digest of both
modes covers and whose first effect on the loss is small (under JUMP times the round-off before it);
`cagtool run --parity-every K` digests every K steps in every mode, and a gradient that differs at
one of them before the losses part is a disagreement again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from cagtool.record.schema import FIRST_STEP
from cagtool.report.compare.closeness import Tolerance, relative_difference

DRIFT_RTOL = 1e-5
DRIFT_STEPS = 20
ROUND_OFF = 1e-7
JUMP = 100.0
JUMP_WINDOW = 5


@dataclass(frozen=True)
class LossDrift:
    """How one record's losses follow the reference's."""

    tight_steps: int  # the first steps (consecutive from FIRST_STEP) whose losses agree within DRIFT_RTOL
    tight_worst: float  # the largest relative difference over those steps
    parted_at: int | None  # the first step whose losses differ beyond the tolerance (None: none does)
    compared: int  # the steps both recorded
    # At the first step beyond DRIFT_RTOL (right after the tight prefix): its difference over the
    # largest of the JUMP_WINDOW steps before it and ROUND_OFF (None: no such step, or one missing).
    jump: float | None = None
    jump_difference: float = 0.0  # the relative difference at that step

    @property
    def early_agreement(self) -> bool:
        """Condition 1 of the rule: the first DRIFT_STEPS steps agree within DRIFT_RTOL."""
        return self.tight_steps >= DRIFT_STEPS

    @property
    def jumped(self) -> bool:
        """Condition 3 fails: the losses left DRIFT_RTOL at a jump, a change at that step."""
        return self.jump is not None and self.jump > JUMP

    @property
    def may_be_drift(self) -> bool:
        """Conditions 1 and 3: what the losses alone can say (2 is the gradient check's)."""
        return self.early_agreement and not self.jumped

    @property
    def jumped_at(self) -> int:
        """The step the losses jumped at (where `jumped`)."""
        return FIRST_STEP + self.tight_steps

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
    jump, jump_difference = None, 0.0
    window: deque[float] = deque(maxlen=JUMP_WINDOW)
    in_prefix = True
    tolerance = Tolerance(rtol, atol)
    for index, step in enumerate(steps):
        value, ref = losses[step], reference[step]
        if in_prefix:
            relative = relative_difference(value, ref)
            contiguous = step == FIRST_STEP + index
            if contiguous and relative <= DRIFT_RTOL:
                tight, worst = tight + 1, max(worst, relative)
                window.append(relative)
            else:
                in_prefix = False
                if contiguous and tight:
                    jump, jump_difference = relative / max(ROUND_OFF, *window), relative
        if parted is None and not tolerance.agrees(value, ref):
            parted = step
            if not in_prefix:
                break
    return LossDrift(tight, worst, parted, len(steps), jump, jump_difference)


def jump_words(drift: LossDrift, record: str = "", compiled_at: dict[int, tuple[str, ...]] | None = None) -> str:
    """Why a later difference is not drift, where the losses jumped: "losses agree bit for bit for
    the first 31 steps, then differ by 6.5e-03 at step 31, 65,364x the largest difference of the 5
    steps before: a change at step 31, not round-off amplified by training", and what `record`
    compiled at that step or the one before (`compiled_at`: step -> compile ids), whose update
    the jump's loss is the first to see."""
    to = "bit for bit" if drift.tight_worst == 0 else f"to {drift.tight_worst:.0e}"
    step = drift.jumped_at
    words = (f"losses agree {to} for the first {drift.tight_steps} steps, then differ by {drift.jump_difference:.1e} at step {step}, "
             f"{drift.jump:,.0f}x the largest difference of the {min(JUMP_WINDOW, drift.tight_steps)} steps before (or float32's "
             f"round-off): a change at step {step}, not round-off amplified by training (which grows by at most ~16x a step in the runs measured)")
    near = [(s, ids) for s in (step - 1, step) if (ids := (compiled_at or {}).get(s))]
    if near:
        said = "; ".join(f"at step {s} ({', '.join(ids)})" for s, ids in near)
        words += f"; {record} compiled {said}: the first place to look (`cagtool diff-graphs`, `cagtool compile`)"
    return words


def drift_words(drift: LossDrift, check_step: int, params: int) -> str:
    """The drift, in words: "losses agree to 9e-07 for the first 339 steps, then drift apart:
    round-off amplified by training, not wrong gradients; the step-0 gradients agree on all 11
    parameters"."""
    to = "bit for bit" if drift.tight_worst == 0 else f"to {drift.tight_worst:.0e}"
    return (f"losses agree {to} for the first {drift.tight_steps} steps, then drift apart: round-off amplified by training, "
            f"not wrong gradients; the step-{check_step} gradients agree on all {params} parameter{'s' if params != 1 else ''}")
