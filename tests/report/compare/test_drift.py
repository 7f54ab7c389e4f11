"""Drift against disagreement (report/compare/drift.py) on hand-built records: losses that agree to
round-off over the first steps, with the gradients checked early and agreeing, and part later, read
as drift in every place that says it (headline, compare's text and table, JSON, the gate); without
that early check, with an early gradient or loss difference, they stay a disagreement."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.manifest import ModeManifest, RunMeta
from cagtool.record.schema import STEP_BOUNDARY_BACKWARD, FinalStateEvent, GradDigestEvent, StepEvent
from cagtool.report.compare.analysis import compare_modes
from cagtool.report.compare.drift import DRIFT_RTOL, DRIFT_STEPS, JUMP, ROUND_OFF, drift_words, loss_drift
from cagtool.report.compare.export import comparison_to_json
from cagtool.report.compare.headline import run_headline
from cagtool.report.compare.render import render_comparison
from cagtool.report.gate.checks import Outcome
from cagtool.report.gate.grad_parity_check import grad_parity_result
from cagtool.report.text.console import make_console

STEPS = 120
NAMES = ["encoder.weight", "rnn.weight_hh_l0", "head.weight"]


def reference_losses() -> list[float]:
    return [5.0 - 0.01 * i + 0.3 * math.sin(i) for i in range(STEPS)]


def drifting(start: int = 40, growth: float = 1.25, first: float = 1e-7) -> list[float]:
    """The reference's losses moved by `first` relative until `start`, then by a difference that
    grows `growth`-fold a step: round-off that training amplifies (beyond 1e-3 some 40 steps on)."""
    out = []
    for i, value in enumerate(reference_losses()):
        rel = first * (-1) ** i if i < start else min(first * growth ** (i - start + 1), 0.05)
        out.append(value * (1 + rel))
    return out


def digest(step: int, scale: float = 1.0, reasons: tuple[str, ...] = ("first",)) -> GradDigestEvent:
    norms = [0.5, 0.25, 0.125]
    return GradDigestEvent(seq=10_000 + step, t=99.0, step=step, reasons=list(reasons), names=NAMES, dtypes=["float32"] * 3,
                           numels=[1600, 4096, 1600], norm=[n * scale for n in norms], max_abs=[n / 10 * scale for n in norms],
                           checksum=[n * 3 * scale for n in norms])


def mode(name: str, losses: list[float], digests: list[GradDigestEvent], param_norm: float = 50.0) -> ModeRecord:
    steps = [StepEvent(seq=i, t=1.0 + 0.01 * i, step=i, backward_s=0.001, loss=loss, boundary=STEP_BOUNDARY_BACKWARD)
             for i, loss in enumerate(losses)]
    final = FinalStateEvent(seq=9_999, t=98.0, param_norm=param_norm, grad_norm=1.0, num_params=3)
    manifest = ModeManifest(mode=name, argv=["main.py"], target={"kind": "script", "name": "main.py"}, cwd="/", versions={},
                            backend="inductor", dynamic=False, started_at="2026-01-01T00:00:00+00:00", status="finished", exit_code=0)
    return ModeRecord(path=Path("/runs/r") / name, manifest=manifest, events=[*steps, final, *digests])


def run(ca: ModeRecord, eager_digests: list[GradDigestEvent] | None = None) -> RunRecord:
    eager = mode("eager", reference_losses(), eager_digests if eager_digests is not None else [digest(0), digest(STEPS - 1, reasons=("last",))])
    meta = RunMeta(run_id="r", created_at="2026-01-01T00:00:00+00:00", cagtool_argv=[], target={"kind": "script", "name": "main.py"},
                   target_argv=["main.py"], cwd="/", modes=["eager", "ca"], versions={}, machine={}, mode_exit_codes={"eager": 0, "ca": 0})
    return RunRecord(path=Path("/runs/r"), meta=meta, modes={"eager": eager, "ca": ca})


def text(comparison) -> str:
    buffer = io.StringIO()
    render_comparison(comparison, "table", make_console(file=buffer, width=400))
    return buffer.getvalue()


def test_loss_drift_counts_the_tight_first_steps_and_where_the_losses_part():
    reference = dict(enumerate(reference_losses()))
    drift = loss_drift(dict(enumerate(drifting())), reference, 1e-3, 1e-6)
    # 1e-7 * 1.25 ** k passes DRIFT_RTOL at k = 21 (step 60) and the 1e-3 tolerance at k = 42 (step 81)
    assert (drift.tight_steps, drift.parted_at, drift.compared) == (60, 81, STEPS)
    assert drift.early_agreement and drift.left_tight and drift.in_window(59) and not drift.in_window(60)
    assert drift.tight_worst == pytest.approx(1e-7 * 1.25 ** 20, rel=1e-6)
    # A step missing from one side ends the tight prefix there: no window is assumed across it.
    gappy = {s: v for s, v in enumerate(drifting()) if s != 5}
    assert loss_drift(gappy, reference, 1e-3, 1e-6).tight_steps == 5
    assert drift_words(drift, 0, 11) == ("losses agree to 9e-06 for the first 60 steps, then drift apart: round-off amplified by "
                                         "training, not wrong gradients; the step-0 gradients agree on all 11 parameters")
    assert loss_drift(reference, reference, 1e-3, 1e-6).tight_worst == 0
    assert "agree bit for bit for the first 120 steps" in drift_words(loss_drift(reference, reference, 1e-3, 1e-6), 0, 1)


def test_late_drift_after_an_early_gradient_check_that_agrees_is_drift_in_every_word():
    """word_language_model's shape: losses within 1e-7 at first, beyond the 1e-3 tolerance ~80 steps
    later; the step-0 gradients agree, the last step's (digested after the parting) do not."""
    ca = mode("ca", drifting(), [digest(0), digest(STEPS - 1, scale=1.3, reasons=("last",))], param_norm=50.2)
    comparison = compare_modes(run(ca))
    numerics = comparison.numerics
    assert not numerics.disagreements
    assert {(d.record, d.quantity) for d in numerics.drifted} == {("ca", "loss"), ("ca", "param_norm")}
    words = numerics.drift_words["ca"]
    assert words == ("losses agree to 9e-06 for the first 60 steps, then drift apart: round-off amplified by training, "
                     "not wrong gradients; the step-0 gradients agree on all 3 parameters")
    [pair] = comparison.grad_parity.pairs
    assert pair.agrees and pair.steps == (0,) and pair.drifted == (STEPS - 1,) and pair.parted_at == 81
    assert not [p for p in comparison.problems if "numerics" in p or "gradients" in p]
    headline = run_headline(comparison).text
    assert f"numerics of ca drift from eager: {words}" in headline and "DISAGREE" not in headline
    out = text(comparison)
    assert f"Numerics: ca drifts from eager beyond rtol 0.001, atol 1e-06: {words}" in out
    assert "DISAGREE" not in out and "e-02 drifts" in out  # the table's cell
    assert "at step 119 they differ, after the losses drifted apart (beyond rtol 0.001 from step 81)" in out
    data = comparison_to_json(comparison)
    assert data["numerics"]["drift"] == {"ca": words} and not data["numerics"]["disagree"]
    assert {d["quantity"]: d["drift"] for d in data["numerics"]["diffs"]} == {"loss": words, "param_norm": words, "grad_norm": None}
    gate = grad_parity_result(run(ca), 1.0)
    assert gate.outcome == Outcome.PASS and "later steps differ after the losses drifted apart" in gate.message


@pytest.mark.parametrize("case", ["no_early_digest", "early_gradients_differ", "early_losses_differ", "digest_before_parting_differs",
                                  "window_too_short"])
def test_without_an_early_check_that_agrees_a_late_difference_stays_a_disagreement(case):
    losses, ca_digests, eager_digests = drifting(), [digest(0), digest(STEPS - 1, scale=1.3, reasons=("last",))], None
    if case == "no_early_digest":  # a record from before step-0 digests of backward-only jobs
        ca_digests, eager_digests = ca_digests[1:], [digest(STEPS - 1, reasons=("last",))]
    elif case == "early_gradients_differ":  # a hook that ran in one mode only: wrong from step 0, losses still tight
        ca_digests = [digest(0, scale=1.5), *ca_digests[1:]]
    elif case == "early_losses_differ":  # 3e-5 at step 12: beyond DRIFT_RTOL within the first DRIFT_STEPS steps
        losses = [v * (1 + 3e-5) if i == 12 else v for i, v in enumerate(losses)]
    elif case == "digest_before_parting_differs":  # a later capture's graph is wrong while the losses still agree
        ca_digests = [*ca_digests, digest(70, scale=1.5, reasons=("every",))]
        eager_digests = [digest(0), digest(70, reasons=("every",)), digest(STEPS - 1, reasons=("last",))]
    elif case == "window_too_short":  # the losses leave 1e-5 before DRIFT_STEPS steps: too fast for round-off
        losses = drifting(start=DRIFT_STEPS - 10, growth=2.0)
    comparison = compare_modes(run(mode("ca", losses, ca_digests, param_norm=50.2), eager_digests))
    numerics = comparison.numerics
    assert not numerics.drifted and {d.quantity for d in numerics.disagreements} == {"loss", "param_norm"}
    assert "numerics DISAGREE" in run_headline(comparison).text
    assert "Numerics DISAGREE with eager" in text(comparison)


def test_a_final_norm_difference_with_losses_that_never_left_round_off_is_a_disagreement():
    """Drift moves the losses first: a final parameter norm 0.4% off while every loss stays within
    1e-7 is something else."""
    ca = mode("ca", drifting(start=STEPS), [digest(0), digest(STEPS - 1, reasons=("last",))], param_norm=50.2)
    numerics = compare_modes(run(ca)).numerics
    assert [(d.quantity, bool(d.drift)) for d in numerics.diffs if not d.agrees] == [("param_norm", False)]


def jumping(at: int = 50, size: float = 6.5e-3) -> list[float]:
    """The reference's losses, bit for bit until `at`, then `size` relative apart and growing: an
    error that starts mid-run (a hook registered at step at - 1 that is wrong only under compiled
    autograd), not round-off."""
    return [value if i < at else value * (1 + min(size * 1.1 ** (i - at), 0.05)) for i, value in enumerate(reference_losses())]


def test_loss_drift_measures_the_step_that_leaves_round_off_against_the_steps_before_it():
    reference = dict(enumerate(reference_losses()))
    growing = loss_drift(dict(enumerate(drifting())), reference, 1e-3, 1e-6)
    assert growing.jump == pytest.approx(1.25 ** 21 / 1.25 ** 20) and not growing.jumped and growing.may_be_drift
    jump = loss_drift(dict(enumerate(jumping())), reference, 1e-3, 1e-6)
    assert (jump.tight_steps, jump.jumped_at, jump.parted_at) == (50, 50, 50)
    assert jump.jump == pytest.approx(6.5e-3 / ROUND_OFF, rel=1e-3) and jump.jumped and not jump.may_be_drift
    # a step missing right after the prefix: nothing measured across it
    gappy = {s: v for s, v in enumerate(jumping()) if s != 50}
    assert loss_drift(gappy, reference, 1e-3, 1e-6).jump is None
    # within JUMP of the largest of the steps before: growth, not a jump
    near = [v * (1 + 1e-6) if 45 <= i < 50 else v for i, v in enumerate(jumping(size=1e-6 * JUMP * 0.9))]
    assert not loss_drift(dict(enumerate(near)), reference, 1e-3, 1e-6).jumped


def test_losses_that_jump_from_round_off_after_the_first_steps_disagree_whatever_the_early_check_says():
    """A wrong hook registered at step 49: the losses equal eager's bit for bit for 50 steps and the
    step-0 gradients agree, then the losses are 6.5e-3 apart at once: DISAGREE, named at the jump,
    and the last step's gradient difference is counted, not set apart as drift."""
    ca = mode("ca", jumping(), [digest(0), digest(STEPS - 1, scale=1.3, reasons=("last",))], param_norm=50.2)
    comparison = compare_modes(run(ca))
    numerics = comparison.numerics
    assert not numerics.drifted and {d.quantity for d in numerics.disagreements} == {"loss", "param_norm"}
    [loss] = [d for d in numerics.diffs if d.quantity == "loss"]
    assert loss.note.startswith("losses agree bit for bit for the first 50 steps, then differ by 6.5e-03 at step 50, 65,000x the "
                                "largest difference of the 5 steps before (or float32's round-off): a change at step 50, not round-off")
    [pair] = comparison.grad_parity.pairs
    assert not pair.agrees and not pair.drifted and pair.first_bad_step == STEPS - 1
    assert "numerics DISAGREE" in run_headline(comparison).text and "drift" not in run_headline(comparison).text
    out = text(comparison)
    assert "Numerics DISAGREE with eager" in out and f"note: {loss.note}" in out and "drifted apart" not in out
    assert comparison_to_json(comparison)["numerics"]["drift"] == {}
    assert grad_parity_result(run(ca), 1.0).outcome == Outcome.FAIL


def test_the_gate_on_gradients_zero_in_both_modes_is_not_measured_never_a_pass():
    zeros = [digest(0, scale=0.0), digest(STEPS - 1, scale=0.0, reasons=("last",))]
    result = grad_parity_result(run(mode("ca", reference_losses(), list(zeros)), eager_digests=list(zeros)), 1.0)
    assert result.outcome != Outcome.PASS and result.outcome == Outcome.ERROR
    assert "every gradient compared is zero on both sides (3 parameters at 2 digested steps): nothing to compare" in result.message


def test_a_short_run_whose_losses_left_round_off_growing_before_a_differing_step_says_so_and_still_counts_it():
    """pytorch/examples' fast_neural_style over 6 steps under Adam: ca's step-0 gradients agree to
    round-off, Adam turns the near-zero gradients of the biases before an InstanceNorm into full-size
    steps, and the losses leave 1e-5 at step 3 (1.1e-7, 1e-6, 1.05e-5, growing) without passing 1e-3;
    the last step's gradients differ 30 %. Too few steps for the drift rule: still a difference, said
    as one of parameters already apart, with no kind read into it. A loss that jumps there is not."""
    reference = [71797.6, 69204.4, 66712.9, 64345.1, 61365.1, 58680.2]
    ca_losses = [71797.6, 69204.4 * (1 + 1.1e-7), 66712.9 * (1 - 1e-6), 64345.1 * (1 + 1.05e-5), 61365.1 * (1 + 5e-6),
                 58680.2 * (1 - 2.7e-5)]

    def short_run(losses: list[float]) -> RunRecord:
        last = len(reference) - 1
        eager = mode("eager", reference, [digest(0), digest(last, reasons=("last",))])
        ca = mode("ca", losses, [digest(0), digest(last, scale=2.0, reasons=("recompile", "last", "same_at_end"))])
        meta = RunMeta(run_id="r", created_at="2026-01-01T00:00:00+00:00", cagtool_argv=[], target={"kind": "script", "name": "main.py"},
                       target_argv=["main.py"], cwd="/", modes=["eager", "ca"], versions={}, machine={}, mode_exit_codes={"eager": 0, "ca": 0})
        return RunRecord(path=Path("/runs/r"), meta=meta, modes={"eager": eager, "ca": ca})

    comparison = compare_modes(short_run(ca_losses))
    [pair] = comparison.grad_parity.pairs
    assert not pair.agrees and pair.steps == (0, 5) and pair.first_bad_step == 5
    assert pair.after_parting == 3 and pair.parted_by_round_off
    assert {m.kind for m in pair.first_bad} == {"differs"}  # not "scale": a factor read into parameters already apart is chance
    assert ("that step comes after the losses left round-off (beyond 1e-05 relative from step 3, growing, not at a jump; within "
            "rtol 0.001 all the same): gradients of parameters that had already moved apart") in pair.verdict(), pair.verdict()
    assert "the difference began after step 0 and by step 3" in pair.verdict()
    assert grad_parity_result(short_run(ca_losses), 1.0).outcome == Outcome.FAIL  # counted: the rule cannot call it drift
    assert comparison_to_json(comparison)["grad_parity"]["pairs"][0]["parted_by_round_off"] is True
    # The headline says so too: the losses agree, so "numerics agree" alone would hide it.
    headline = run_headline(comparison)
    assert ("losses agree but gradients DIFFER: ca from eager first at step 5, in 3 of 3 parameters, after the losses left "
            "round-off at step 3: of parameters already apart (`cagtool compare` names them)") in headline.text, headline.text
    assert "numerics agree" not in headline.text and headline.tone == "bad"
    # Leaving round-off at a jump (a change at step 3) is said as nothing of the kind.
    jumped = [*ca_losses[:3], 64345.1 * (1 + 5e-4), 61365.1 * (1 + 6e-4), 58680.2 * (1 + 7e-4)]
    [pair] = compare_modes(short_run(jumped)).grad_parity.pairs
    assert not pair.agrees and pair.after_parting is None and not pair.parted_by_round_off
    assert {m.kind for m in pair.first_bad} == {"scale"}
