"""The mode comparison on small hand-built records: pooling, speedups and noise, numerics, failures,
before/after, and the four renderers on a fixed-width, colourless console."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.manifest import ExceptionInfo, ModeManifest, RunMeta
from cagtool.record.schema import (
    AotBackwardGraphEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    Event,
    FinalStateEvent,
    GraphBreakEvent,
    StepEvent,
)
from cagtool.report.compare.analysis import (
    MIN_STEADY_STEPS,
    Tolerance,
    base_mode,
    compare_modes,
    compare_runs,
    relative_difference,
)
from cagtool.report.compare.export import CSV_COLUMNS
from cagtool.report.compare.render import format_comparison, numerics_lines, render_comparison
from cagtool.report.text.console import make_console

BACKWARD_S = 0.0001


def make_steps(intervals: list[float], losses: list[float] | None = None, compiling: tuple[int, ...] = (0,)) -> list[Event]:
    """Steps whose iteration times (start to next start) are `intervals`; one more step closes the
    last interval. Steps in `compiling` compiled something (so they and the step before are not steady)."""
    events: list[Event] = []
    start = 1.0
    count = len(intervals) + 1
    for i in range(count):
        step = i  # from 0, as cagtool numbers steps
        loss = losses[i] if losses is not None and i < len(losses) else None
        events.append(
            StepEvent(
                seq=i, t=start + BACKWARD_S, step=step, backward_s=BACKWARD_S, loss=loss,
                compiles=1 if step in compiling else 0, compile_s=0.5 if step in compiling else 0.0,
            )
        )
        if i < len(intervals):
            start += intervals[i]
    return events


def mode_record(
    name: str,
    events: list[Event],
    status: str = "finished",
    exit_code: int | None = 0,
    exception: ExceptionInfo | None = None,
    peak: int = 100 * 2**20,
    options: dict | None = None,
    backend: str = "eager",
) -> ModeRecord:
    manifest = ModeManifest(
        mode=base_mode(name), argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/",
        versions={}, backend=backend, dynamic=False, started_at="2026-01-01T00:00:00+00:00",
        status=status, exit_code=exit_code, exception=exception, peak_rss_bytes=peak, **({"options": options} if options else {}),
        # What torch counted, as a finished process saves it: one capture per CA graph recorded, one
        # graph break per break recorded.
        torch_counters={
            **({"compiled_autograd": {"captures": n}} if (n := sum(isinstance(e, CAGraphEvent) for e in events)) else {}),
            **({"graph_break": {"graph_break()": b}} if (b := sum(isinstance(e, GraphBreakEvent) for e in events)) else {}),
        },
    )
    return ModeRecord(path=Path("/runs/r") / name, manifest=manifest, events=events)


def run_record(records: dict[str, ModeRecord | None], path: str = "/runs/r") -> RunRecord:
    """`None` for a mode listed in run.json whose process never wrote a manifest."""
    meta = RunMeta(
        run_id="r", created_at="2026-01-01T00:00:00+00:00", cagtool_argv=[], target={"kind": "script", "name": "train.py"},
        target_argv=["train.py"], cwd="/", modes=list(records), versions={}, machine={},
        mode_exit_codes={n: (r.manifest.exit_code if r else -9) for n, r in records.items()},
    )
    return RunRecord(path=Path(path), meta=meta, modes={n: r for n, r in records.items() if r is not None})


def final(param: float = 10.0, grad: float | None = 1.0) -> FinalStateEvent:
    return FinalStateEvent(seq=999, t=99.0, param_norm=param, grad_norm=grad, num_params=3)


LOSSES = [2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1, 1.05, 1.0]


def steady(ms: float, n: int = 10, jitter: float = 0.02) -> list[float]:
    """n iteration times around `ms` milliseconds (+-jitter relative, deterministic)."""
    return [ms / 1000 * (1 + jitter * ((i % 3) - 1)) for i in range(n)]


def three_modes(eager_ms: float = 10.0, aot_ms: float = 8.0, ca_ms: float = 6.0, repeat: int = 1, **ca_kwargs) -> RunRecord:
    """Eager, aot and ca, each `repeat` times (blocks ca, ca.2, ...: each block's times 0.5%
    apart from the next, the run-to-run noise of a quiet machine)."""
    compile_event = DynamoCompileEvent(seq=0, t=0.5, compile_id="0/0", is_ca_graph=False, step=0,
                                        entire_frame_compile_time_s=1.5, dynamo_cumulative_compile_time_s=1.5,
                                        aot_autograd_cumulative_compile_time_s=1.0, graph_op_count=5)
    ca_events = ca_kwargs.pop("events", None)
    modes = {}
    for rep in range(1, repeat + 1):
        suffix = "" if rep == 1 else f".{rep}"
        jitter = 1.0 + 0.005 * ((rep * 7) % 5 - 2)
        modes[f"eager{suffix}"] = mode_record(f"eager{suffix}", [*make_steps([0.05, *steady(eager_ms * jitter)], LOSSES, compiling=()), final()], peak=100 * 2**20)
        modes[f"aot{suffix}"] = mode_record(f"aot{suffix}", [compile_event, *[AotBackwardGraphEvent(seq=1 + i, t=0.6, compile_id=f"{i}/0", step=0) for i in range(3)],
                                   GraphBreakEvent(seq=5, t=0.6, compile_id="0/0", step=0, reason="graph_break()"),
                                   *make_steps([0.05, *steady(aot_ms * jitter)], LOSSES), final()], peak=120 * 2**20)
        modes[f"ca{suffix}"] = mode_record(f"ca{suffix}", ca_events if ca_events is not None else [compile_event, ca_graph(0), *make_steps([0.05, *steady(ca_ms / jitter)], LOSSES), final()],
                          **ca_kwargs)
    return run_record(modes)


def ca_graph(ca_id: int) -> CAGraphEvent:
    return CAGraphEvent(seq=10 + ca_id, t=0.7, ca_id=ca_id, compile_id=f"!{ca_id}", step=0, node_count=5, op_histogram={},
                        autograd_nodes=[], aot_ids=[], hooks=[], num_sizes=0, capture_s=0.05, code_file="", nodes_file="")


# ---------------------------------------------------------------------------------------------


def test_base_mode_and_relative_difference():
    assert [base_mode(n) for n in ("ca", "ca.2", "aot.10", "eager")] == ["ca", "ca", "aot", "eager"]
    assert relative_difference(1.001, 1.0) == pytest.approx(1e-3)
    assert relative_difference(0.0, 0.0) == 0.0
    assert relative_difference(1.0, 0.0) == float("inf")
    assert Tolerance().agrees(1.0005, 1.0) and not Tolerance().agrees(1.002, 1.0)


def test_columns_carry_counts_per_mode():
    comparison = compare_modes(three_modes())
    assert list(comparison.modes) == ["eager", "aot", "ca"]
    aot, ca = comparison.modes["aot"].metrics, comparison.modes["ca"].metrics
    assert aot.backward_graphs == 3 and aot.graph_breaks == 1
    assert ca.backward_graphs == 1 and ca.ca_graphs == 1
    assert comparison.modes["aot"].compile_time_s == pytest.approx(1.5)
    # The first step (0) compiled in aot: it is left out of the steady state, and shown.
    assert comparison.modes["aot"].step_time.excluded == [0]
    assert comparison.modes["eager"].step_time.excluded == []


def test_speedups_clear_difference_is_not_noise():
    comparison = compare_modes(three_modes(eager_ms=10, aot_ms=8, ca_ms=5, repeat=5))
    by_label = {s.label: s for s in comparison.speedups}
    assert set(by_label) == {"aot/eager", "ca/eager", "ca/aot"}
    ca_eager = by_label["ca/eager"]
    assert ca_eager.ratio == pytest.approx(2.0, rel=0.02)
    assert ca_eager.low < ca_eager.ratio < ca_eager.high
    assert ca_eager.within_noise is False and ca_eager.verdict == "faster"
    assert by_label["ca/aot"].ratio == pytest.approx(1.6, rel=0.02)


def test_one_process_per_mode_is_a_figure_unless_beyond_the_assumed_noise():
    """One process per mode: the run-to-run noise is assumed, so 1.5% apart is inconclusive (with
    the blocks that would resolve it) and 3x apart is still a verdict."""
    comparison = compare_modes(three_modes(eager_ms=10, aot_ms=10.05, ca_ms=9.95))
    for s in comparison.speedups:
        assert s.within_noise is True and s.verdict == "inconclusive" and not s.measured, s
        assert s.blocks_needed is None or s.blocks_needed >= 5
        assert "not measured, assumed" in s.evidence()
    far = compare_modes(three_modes(eager_ms=30, aot_ms=10, ca_ms=10))
    assert next(s for s in far.speedups if s.label == "ca/eager").verdict == "faster"


def test_five_blocks_give_measured_verdicts_and_no_change():
    comparison = compare_modes(three_modes(eager_ms=10, aot_ms=8, ca_ms=8.1, repeat=5))
    by = {s.label: s for s in comparison.speedups}
    assert by["ca/eager"].verdict == "faster" and by["ca/eager"].measured and by["ca/eager"].interval.method == "sign"
    assert len(by["ca/eager"].repetition_ratios) == 5
    assert by["ca/aot"].verdict == "no change" and by["ca/aot"].low >= 1 / 1.05 and by["ca/aot"].high <= 1.05


def test_slower_mode_is_called_slower():
    comparison = compare_modes(three_modes(eager_ms=5, aot_ms=5, ca_ms=8, repeat=5))
    ca_eager = next(s for s in comparison.speedups if s.label == "ca/eager")
    assert ca_eager.ratio < 1 and ca_eager.verdict == "slower"


def test_too_few_steady_steps_is_not_claimed():
    run = run_record({
        "eager": mode_record("eager", make_steps([0.05, 0.010, 0.010], compiling=())),
        "ca": mode_record("ca", make_steps([0.05, 0.001, 0.001])),
    })
    s = compare_modes(run).speedups[0]
    assert s.label == "ca/eager" and s.ratio == pytest.approx(10.0)
    assert min(s.steady_steps) < MIN_STEADY_STEPS
    assert s.within_noise is True and s.verdict == "too few steady steps" and "steady step" in s.note


def test_repetitions_pool_into_their_mode():
    run = run_record({
        "eager": mode_record("eager", make_steps([0.05, *steady(10, n=6)], compiling=())),
        "ca": mode_record("ca", make_steps([0.05, *steady(5, n=6)])),
        "eager.2": mode_record("eager.2", make_steps([0.05, *steady(10, n=6)], compiling=())),
        "ca.2": mode_record("ca.2", make_steps([0.05, *steady(5.5, n=6)])),
    })
    comparison = compare_modes(run)
    assert list(comparison.modes) == ["eager", "ca"]
    ca = comparison.modes["ca"]
    assert ca.records == ("ca", "ca.2")
    assert ca.step_time.count == 12  # 6 steady intervals from each repetition
    assert len(ca.repetition_medians) == 2
    s = comparison.speedups[0]
    assert len(s.repetition_ratios) == 2
    assert s.repetition_ratios[0] == pytest.approx(2.0, rel=1e-6)
    assert s.repetition_ratios[1] == pytest.approx(10 / 5.5, rel=1e-6)


def test_numerics_agree_within_tolerance():
    comparison = compare_modes(three_modes())
    numerics = comparison.numerics
    assert numerics.reference == "eager"
    assert numerics.agree and numerics.max_rel_diff == 0.0
    quantities = {(d.record, d.quantity) for d in numerics.diffs}
    assert ("ca", "loss") in quantities and ("ca", "param_norm") in quantities and ("aot", "grad_norm") in quantities
    assert comparison.problems == []


def test_a_mode_that_ends_without_gradients_has_its_grad_norm_said_not_compared():
    """A whole compiled training step with zero_grad() inside: --steps stops eager in step() and
    the compiled modes where the call returns, with no gradient held. Its grad_norm is said not
    compared, not passed over as if it agreed."""
    events = [*make_steps([0.05, *steady(6)], LOSSES), final(grad=None)]
    numerics = compare_modes(three_modes(events=events)).numerics
    [said] = [d for d in numerics.diffs if d.record == "ca" and d.quantity == "grad_norm"]
    assert said.compared == 0 and said.max_rel_diff is None and numerics.agree
    assert said.note.startswith("grad_norm not compared: ca holds no gradient at its end, eager does")
    assert f"  note: {said.note}" in [line for line, _ in numerics_lines(numerics)]


def test_numerics_disagreement_is_a_problem():
    off = [*LOSSES[:4], LOSSES[4] * 1.01, *LOSSES[5:]]
    events = [*make_steps([0.05, *steady(6)], off), final()]
    comparison = compare_modes(three_modes(events=events))
    numerics = comparison.numerics
    assert not numerics.agree
    (bad,) = numerics.disagreements
    assert bad.record == "ca" and bad.quantity == "loss" and bad.worst_step == 4  # LOSSES[4]
    assert bad.max_rel_diff == pytest.approx(0.01, rel=1e-6)
    assert any("numerics: loss of ca differs from eager at step 4" in p for p in comparison.problems)
    # A looser tolerance accepts it.
    assert compare_modes(three_modes(events=events), Tolerance(rtol=0.02)).numerics.agree


def test_numerics_small_float_noise_agrees():
    noisy = [v * (1 + 3e-6) for v in LOSSES]
    events = [*make_steps([0.05, *steady(6)], noisy), final(param=10.0 * (1 + 1e-7))]
    numerics = compare_modes(three_modes(events=events)).numerics
    assert numerics.agree
    assert numerics.worst_for("ca") == pytest.approx(3e-6, rel=1e-3)


def test_numerics_of_a_failed_mode_compare_common_steps_only():
    events = [*make_steps([0.05, 0.006, 0.006], LOSSES[:4]), final(param=55.0)]
    comparison = compare_modes(three_modes(events=events, status="failed", exit_code=1,
                                           exception=ExceptionInfo("RuntimeError", "boom\nmore")))
    ca_diffs = [d for d in comparison.numerics.diffs if d.record == "ca"]
    # Losses of the 4 steps it ran agree; its final norms (at the crash) are not compared.
    assert [(d.quantity, d.compared, d.agrees) for d in ca_diffs] == [("loss", 4, True)]
    assert "compared the 4 steps both ran" in ca_diffs[0].note


def test_a_mode_stopped_by_max_time_at_another_step_has_its_final_norms_said_not_compared():
    """pytorch/examples' REINFORCE under `--max-time 240`: the ca mode, recompiling every episode, was
    stopped after 32 steps where aot and eager ran 377 and 485. Its final parameters were compared
    with theirs and read "Numerics DISAGREE ... compiled autograd computes otherwise: param_norm
    0.38 relative"; the losses of the steps both ran agreed. Final norms at other points of training
    are said not compared, and what agreed is said as the losses alone."""
    run = three_modes(events=[*make_steps([0.05, 0.006, 0.006], LOSSES[:4]), final(param=55.0)], options={"stopped_by": "max_time"})
    numerics = compare_modes(run).numerics
    assert numerics.agree, numerics.disagreements
    [said] = [d for d in numerics.diffs if d.record == "ca" and d.quantity == "param_norm"]
    assert said.compared == 0 and said.note == ("final norms not compared: ca was stopped after 4 steps, eager ran 12 steps "
                                                "(a --steps or --max-time bound): their parameters are at other points of training")
    assert not [d for d in numerics.diffs if d.record == "ca" and d.quantity == "grad_norm"]
    lines = [line for line, _ in numerics_lines(numerics)]
    assert f"  note: {said.note}" in lines
    # A bound that stops every mode at the same step (--steps) leaves the final norms compared.
    for name in ("eager", "aot"):
        run.modes[name] = mode_record(name, [*make_steps([0.05, 0.006, 0.006], LOSSES[:4]), final()], options={"stopped_by": "steps"})
    numerics = compare_modes(run).numerics
    [bad] = numerics.disagreements
    assert (bad.record, bad.quantity) == ("ca", "param_norm")


def test_a_ca_mode_that_agrees_with_aot_is_not_told_how_to_rule_out_inductors_rounding():
    """pytorch/examples' dcgan with its nets compiled: aot and ca (CA graphs on Inductor) part from
    eager growing from round-off, and ca equals aot bit for bit. compare said ca agrees with aot
    ("compiled autograd changed nothing") and, as a note, that ca's parting from eager may be
    Inductor's rounding of its CA graphs, to be told by a run on `--backend eager`: what ca's
    agreement with aot has told already. Without aot the note stays."""
    growth = [0, 1e-7, 2e-7, 4e-7, 1e-6, 3e-6, 9e-6, 2e-5, 6e-5, 2e-4, 1e-3, 1e-2]
    parted = [v * (1 + g) for v, g in zip(LOSSES, growth)]
    eager = mode_record("eager", [*make_steps([0.05, *steady(10)], LOSSES, compiling=()), final()])
    aot = mode_record("aot", [*make_steps([0.05, *steady(8)], parted), final()])
    graph = CAGraphEvent(seq=10, t=0.7, ca_id=0, compile_id="!0", step=0, node_count=5, op_histogram={}, autograd_nodes=[],
                         aot_ids=[], hooks=[], num_sizes=0, capture_s=0.05, code_file="", nodes_file="", compiler="cagtool:inductor")
    ca = mode_record("ca", [graph, *make_steps([0.05, *steady(6)], parted), final()], backend="inductor")
    alone = compare_modes(run_record({"eager": eager, "ca": ca})).numerics
    [hinted] = [d for d in alone.diffs if d.record == "ca" and d.quantity == "loss"]
    assert "To tell, record it without Inductor" in hinted.note and hinted.parts_growing_from == 7
    numerics = compare_modes(run_record({"eager": eager, "aot": aot, "ca": ca})).numerics
    assert numerics.against_aot and all(d.agrees for d in numerics.against_aot)
    [loss] = [d for d in numerics.diffs if d.record == "ca" and d.quantity == "loss"]
    assert loss.note == "" and not loss.agrees
    assert not [line for line, _ in numerics_lines(numerics) if "without Inductor" in line]


def test_modes_that_ran_to_the_jobs_end_in_other_numbers_of_steps_get_no_speed_verdict():
    """pytorch/examples' REINFORCE: a step is an episode, whose length follows the policy's numbers;
    eager solved CartPole in 485 episodes and aot, whose compiled dropout draws other numbers, in
    377. The per-step ratio compared episodes of other lengths. Each side ran to the job's own end in
    another number of steps, its losses other from the first step: said with the ratio, and the
    headline gives no verdict. A --steps or --max-time bound, which stops a mode where it is, is no
    such evidence, nor are other step counts of losses that agree."""
    from cagtool.report.compare.headline import run_headline

    other_course = [loss * 1.5 for loss in LOSSES]  # other numbers from the first step (its dropout's draws)
    run = three_modes(events=[compile_event_for_test(), ca_graph(0), *make_steps([0.05, *steady(3, n=30)], other_course), final()])
    comparison = compare_modes(run)
    ca_aot = next(s for s in comparison.speedups if s.label == "ca/aot")
    assert ca_aot.courses == (12, 32) and ca_aot.verdict == "faster"
    assert "aot ran 12 steps to the job's own end and ca 32: the job's course follows its numbers" in ca_aot.evidence()
    headline = run_headline(comparison).text
    assert "compiled autograd: 2.67x the speed of torch.compile alone (90% CI " in headline, headline
    assert ("), not a verdict: it ran 32 steps to the job's own end where torch.compile alone ran 12, so a step's work may "
            "differ") in headline and "faster" not in headline, headline
    assert json.loads(rendered(comparison, "json"))["speedups"]["ca/aot"]["courses"] == {"baseline": 12, "mode": 32}
    assert not next(s for s in comparison.speedups if s.label == "aot/eager").courses
    bounded = three_modes(events=[ca_graph(0), *make_steps([0.05, *steady(3, n=30)], other_course), final()], options={"stopped_by": "max_time"})
    assert not next(s for s in compare_modes(bounded).speedups if s.label == "ca/aot").courses
    # Losses that agree on the steps both ran: one course, stopped sooner on one side by what the
    # script does (a job that trains for a time): the verdict stands.
    timed = three_modes(events=[ca_graph(0), *make_steps([0.05, *steady(3, n=30)], LOSSES), final()])
    assert not next(s for s in compare_modes(timed).speedups if s.label == "ca/aot").courses


def compile_event_for_test() -> DynamoCompileEvent:
    return DynamoCompileEvent(seq=0, t=0.5, compile_id="0/0", is_ca_graph=False, step=0, entire_frame_compile_time_s=1.5,
                              dynamo_cumulative_compile_time_s=1.5, aot_autograd_cumulative_compile_time_s=1.0, graph_op_count=5)


def test_ca_parting_from_aot_growing_where_their_backwards_compilers_differ_is_not_called_compiled_autogradss():
    """word_language_model's Transformer at lr 5, its model compiled (Inductor), recorded with
    `--backend eager`: ca's losses equal aot's bit for bit for 20 steps and part growing, 5e-2 apart
    by step 91. compare said "Numerics DISAGREE between ca and aot (compiled alike ...): compiled
    autograd computes otherwise", though ca's CA graphs ran eager's kernels and aot's backward
    Inductor's. The two are said compiled apart, the parting as round-off not told apart yet, and
    how to compare like with like."""
    aot_losses = [v * 1.1 for v in LOSSES]  # the compiled forward's dropout: other numbers than eager's from the first step
    growth = [0, 0, 0, 0, 1e-7, 3e-7, 1e-6, 3e-6, 9e-6, 2e-5, 6e-5, 2e-3]
    inductor = DynamoCompileEvent(seq=0, t=0.5, compile_id="0/0", is_ca_graph=False, step=0, entire_frame_compile_time_s=1.5,
                                  dynamo_cumulative_compile_time_s=1.5, aot_autograd_cumulative_compile_time_s=1.0,
                                  inductor_cumulative_compile_time_s=0.8, graph_op_count=5)
    eager = mode_record("eager", [*make_steps([0.05, *steady(10)], LOSSES, compiling=()), final()])
    aot = mode_record("aot", [inductor, AotBackwardGraphEvent(seq=1, t=0.6, compile_id="0/0", step=0),
                              *make_steps([0.05, *steady(8)], aot_losses), final()])
    ca = mode_record("ca", [ca_graph(0), *make_steps([0.05, *steady(6)], [v * (1 + g) for v, g in zip(aot_losses, growth)]), final()])
    numerics = compare_modes(run_record({"eager": eager, "aot": aot, "ca": ca})).numerics
    assert numerics.compilers == ("eager", "Inductor")
    [apart] = [d for d in numerics.against_aot if not d.agrees]
    assert apart.quantity == "loss" and apart.parts_growing_from == 9, apart
    assert apart.note.startswith("ca's losses agree with aot's to 9e-06 for the first 9 steps, then part growing past 1e-05 (no "
                                 "jump): what round-off looks like once training amplifies it, and the two backwards were compiled "
                                 "apart (ca's CA graphs by eager, aot's backward by Inductor)"), apart.note
    text = " ".join(line for line, _ in numerics_lines(numerics))
    assert ("Numerics DISAGREE between ca and aot (forwards compiled alike, backwards by eager and Inductor, rtol 0.001, atol "
            "1e-06): the losses part growing, not at a jump") in text, text
    assert "compiled autograd computes otherwise" not in text and "record with --backend inductor (the default)" in text


def test_ca_parting_from_aot_at_a_jump_too_soon_with_equal_step_0_gradients_is_undecided_not_compiled_autograds():
    """pytorch/examples' imagenet (resnet18 on random labels, lr 0.1, losses 6.8 -> 19 in 8 steps) on
    Inductor: aot and ca both differ from eager; ca's losses equal aot's to 1e-7 at step 1 and part
    136x that at step 2, past the jump rule's 100x, and 3e-2 apart by step 7, while their gradients
    agree at step 0. compare said "compiled autograd computes otherwise". Two steps agreeing are too
    few for the rule: said undecided, with how to tell (--parity-every 1). Without a gradient check
    at step 0, or one that differs there, the verdict stands."""
    from types import SimpleNamespace

    from cagtool.report.compare.analysis import NumericsSample, modes_numerics

    eager = {0: 6.81868, 1: 10.08121, 2: 11.43154, 3: 15.50511, 4: 17.43337, 5: 17.58493, 6: 19.2219, 7: 17.56594}
    aot = {0: 6.81868, 1: 10.08129, 2: 11.49489, 3: 15.53118, 4: 17.5587, 5: 17.758, 6: 19.81981, 7: 18.61026}
    ca = {0: 6.81868, 1: 10.08129 * (1 + 9.5e-8), 2: 11.49489 * (1 - 1.36e-5), 3: 15.51893, 4: 17.54977, 5: 17.6554, 6: 19.68678,
          7: 18.11333}
    samples = [NumericsSample("eager", eager, 114.333, 13.94, True), NumericsSample("aot", aot, 114.334, 14.56, True),
               NumericsSample("ca", ca, 114.338, 14.36, True, ca_inductor=True)]
    check = SimpleNamespace(not_comparable="", steps=(0, 7), bad_steps=(7,), across_ranks=False)
    numerics = modes_numerics(samples, Tolerance(), against_checks={"ca": check})
    [loss] = [d for d in numerics.against_aot if d.quantity == "loss"]
    assert not loss.agrees and loss.undecided_at == 2, loss
    assert loss.note.startswith("ca's losses agree with aot's to 1e-07 for the first 2 steps, then part at step 2 (136x the "
                                "difference before it, past the 100x the rule reads as a change), and its gradients agree with "
                                "aot's at step 0, the only step digested before they parted"), loss.note
    text = " ".join(line for line, _ in numerics_lines(numerics))
    assert "compiled autograd computes otherwise:" not in text and "record it with cagtool run --parity-every 1" in text, text
    assert "the losses part at a jump after too few steps agreeing, with the gradients within round-off before it" in text, text
    # Digested at every step (--parity-every 1): step 1 differs near the tolerance, round-off's size.
    near = SimpleNamespace(kind="differs", excess=1.7)
    every = SimpleNamespace(not_comparable="", steps=tuple(range(8)), bad_steps=tuple(range(1, 8)), across_ranks=False,
                            first_bad_step=1, first_bad=(near,), params=62)
    [loss] = [d for d in modes_numerics(samples, Tolerance(), against_checks={"ca": every}).against_aot if d.quantity == "loss"]
    assert loss.undecided_at == 2 and ("its gradients agree with aot's at step 0 and first differ at step 1, in 1 of 62 parameters "
                                       "by at most 1.7x the tolerance: round-off's size") in loss.note, loss.note
    assert "--parity-every" not in loss.note
    # ... one that differs by far more, or in kind, before the losses part; none at step 0; one that differs there.
    far = SimpleNamespace(**{**vars(every), "first_bad": (SimpleNamespace(kind="differs", excess=40.0),)})
    scaled = SimpleNamespace(**{**vars(every), "first_bad": (SimpleNamespace(kind="scale", excess=1.5),)})
    for against in (None, {"ca": far}, {"ca": scaled},
                    {"ca": SimpleNamespace(not_comparable="", steps=(0, 7), bad_steps=(0, 7), across_ranks=False)}):
        said = " ".join(line for line, _ in numerics_lines(modes_numerics(samples, Tolerance(), against_checks=against)))
        assert "compiled autograd computes otherwise:" in said and "--parity-every 1" not in said, said


def test_failed_mode_is_carried_with_its_reason():
    comparison = compare_modes(three_modes(status="failed", exit_code=1, exception=ExceptionInfo("RuntimeError", "boom\ntraceback...")))
    ca = comparison.modes["ca"]
    assert not ca.ok and ca.status == "failed" and ca.exit_code == 1
    (failure,) = ca.failures
    assert failure.reason == "RuntimeError: boom"
    assert comparison.problems == ["mode ca: failed, exit code 1: RuntimeError: boom"]
    # The others still report.
    assert comparison.modes["aot"].ok and comparison.modes["aot"].step_time.median_s is not None


def test_a_mode_that_failed_before_any_value_is_not_in_the_numerics_that_agree():
    """GCN's shape (pytorch/examples, sparse adjacency): ca fails compiling its first graph, before
    any loss; eager and aot agree. The headline said "numerics agree", as if ca were among them."""
    from cagtool.report.compare.headline import run_headline

    comparison = compare_modes(three_modes(events=[ca_graph(0)], status="failed", exit_code=1,
                                           exception=ExceptionInfo("IndexError", "tuple index out of range")))
    text = run_headline(comparison).text
    assert text.endswith("numerics agree between eager and aot (ca not compared: no values recorded)."), text
    assert "numerics agree" in run_headline(compare_modes(three_modes())).text.split(";")[-1]


def test_missing_and_killed_modes():
    run = run_record({
        "eager": mode_record("eager", make_steps([0.05, *steady(10)], compiling=())),
        "aot": mode_record("aot", make_steps([0.05, 0.01]), status="running", exit_code=None),
        "ca": None,
    })
    comparison = compare_modes(run)
    assert comparison.modes["aot"].status == "running"
    assert "killed" in comparison.modes["aot"].failures[0].reason
    ca = comparison.modes["ca"]
    assert ca.metrics is None and ca.status == "missing" and ca.exit_code == -9
    s = next(s for s in comparison.speedups if s.label == "ca/eager")
    assert s.ratio is None and s.verdict == "n/a" and "ca" in s.note


def test_timeout_reason():
    comparison = compare_modes(three_modes(status="timeout", exit_code=0,
                                           exception=ExceptionInfo("TimeLimitReached", "stopped after 5.0 s (--max-time)")))
    (failure,) = comparison.modes["ca"].failures
    assert failure.status == "timeout" and "--max-time" in failure.reason


def test_compare_runs_before_after():
    before = three_modes(eager_ms=10, aot_ms=8, ca_ms=8, repeat=3)
    after = three_modes(eager_ms=10, aot_ms=8, ca_ms=4, repeat=3)
    rc = compare_runs(before, after)
    assert [c.mode for c in rc.changes] == ["eager", "aot", "ca"]
    ca = next(c for c in rc.changes if c.mode == "ca")
    assert ca.speedup.ratio == pytest.approx(2.0, rel=0.02) and ca.speedup.verdict == "faster" and ca.speedup.interval.method == "rank"
    assert ca.deltas["step_time_median_s"] == pytest.approx(-0.004, rel=0.02)
    assert ca.deltas["backward_graphs"] == 0
    assert all(d.agrees for d in ca.numerics) and ca.numerics
    eager = next(c for c in rc.changes if c.mode == "eager")
    assert eager.speedup.verdict == "no change"
    assert rc.problems == []


def test_steady_steps_of_runs_with_different_numbers_of_processes_change_per_process():
    """A run of 3 processes against one of 1, the same steps in each: the row read `steady steps
    30 | 10 | -20`, 20 steps lost that no process lost (they are pooled over each run's
    processes). Each cell names its processes, the change is a process's, and a note says so."""
    from cagtool.report.compare.render import change_grid

    rc = compare_runs(three_modes(repeat=3), three_modes(repeat=1))
    ca = next(c for c in rc.changes if c.mode == "ca")
    assert ca.processes == (3, 1)
    a, b = ca.before.step_time.count, ca.after.step_time.count
    assert a == 3 * b and ca.deltas["steady_steps"] is None and ca.deltas["steady_steps_per_process"] == 0
    rows = [row for row in change_grid(rc).rows if row[1] == "steady steps"]
    assert rows[-1][2:] == [f"{a} (3 processes)", f"{b} (1 process)", "= per process"]
    assert "ca: A ran it in 3 processes, B in 1: the steady steps row pools each run's processes, and its change is per process" in rc.notes
    # As many processes a side: the pooled counts' difference, as before, and no note.
    same = compare_runs(three_modes(repeat=3), three_modes(repeat=3))
    assert next(c for c in same.changes if c.mode == "ca").deltas["steady_steps"] == 0
    assert [row for row in change_grid(same).rows if row[1] == "steady steps"][-1][2:] == [str(a), str(a), "="]
    assert not any("the steady steps row" in note for note in same.notes)


def test_compare_runs_mode_only_in_one_run():
    before = run_record({"eager": mode_record("eager", make_steps([0.05, *steady(10)], compiling=()))})
    rc = compare_runs(before, three_modes())
    ca = next(c for c in rc.changes if c.mode == "ca")
    assert ca.before is None and ca.after is not None and ca.speedup is None and ca.deltas == {}


# ---------------------------------------------------------------------------------------------
# Renderers


def rendered(comparison, fmt: str) -> str:
    buffer = io.StringIO()
    render_comparison(comparison, fmt, make_console(file=buffer, width=120))
    return buffer.getvalue()


def test_table_shows_modes_speedups_numerics_and_failures():
    comparison = compare_modes(three_modes(ca_ms=5, status="failed", exit_code=1, exception=ExceptionInfo("RuntimeError", "boom")))
    text = rendered(comparison, "table")
    assert "\x1b[" not in text  # colourless off a terminal
    for expected in ("eager", "aot", "ca", "backward graphs", "3 (AOT)", "1 (CA)", "FAILED, exit 1", "ca/eager",
                     "2.00x", "Numerics: losses and final norms agree with eager", "Problems:",
                     "ca: failed, exit code 1: RuntimeError: boom", "Steps left out of the steady state"):
        assert expected in text, expected


def test_table_flags_numerics_disagreement():
    # Step 1 agrees (the same inputs), later steps drift: a real disagreement, not other inputs.
    off = [LOSSES[0], *(v * 1.05 for v in LOSSES[1:])]
    comparison = compare_modes(three_modes(events=[*make_steps([0.05, *steady(6)], off), final()]))
    text = rendered(comparison, "table")
    assert "Numerics DISAGREE with eager" in text and "DISAGREES" in text
    assert "loss of ca: 5.00e-02 relative" in text


def test_json_schema():
    data = json.loads(rendered(compare_modes(three_modes()), "json"))
    assert data["format"] == "cagtool-compare" and data["schema_version"] == 1
    required = {
        "forward_graphs": int, "backward_graphs": int, "ca_graphs": int, "graph_breaks": int, "recompiles": int,
        "compile_time_s": (int, float), "first_step_s": float, "step_time_median_s": float, "step_time_p10_s": float,
        "step_time_p90_s": float, "peak_rss_bytes": int, "exit_code": int,
    }
    assert list(data["modes"]) == ["eager", "aot", "ca"]
    for name, mode in data["modes"].items():
        for key, kind in required.items():
            assert isinstance(mode[key], kind), (name, key, mode[key])
    assert set(data["speedups"]) == {"aot/eager", "ca/eager", "ca/aot"}
    for s in data["speedups"].values():
        assert {"speedup", "low", "high", "within_noise", "verdict"} <= set(s)
    assert data["numerics"]["agree"] is True and data["numerics"]["reference"] == "eager"
    assert data["problems"] == []


def test_json_of_failed_mode_has_nulls_and_reason():
    run = run_record({"eager": mode_record("eager", make_steps([0.05, *steady(10)], compiling=())), "ca": None})
    data = json.loads(format_comparison(compare_modes(run), "json"))
    ca = data["modes"]["ca"]
    assert ca["status"] == "missing" and ca["backward_graphs"] is None and ca["failures"][0]["status"] == "missing"
    assert data["speedups"]["ca/eager"]["speedup"] is None


def test_csv_columns_follow_pytorch_names():
    text = format_comparison(compare_modes(three_modes(ca_ms=5)), "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == CSV_COLUMNS
    for name in ("unique_graphs", "graph_breaks", "autograd_captures", "compilation_latency", "speedup", "abs_latency"):
        assert name in CSV_COLUMNS
    by_mode = {r["mode"]: r for r in rows}
    assert float(by_mode["eager"]["speedup"]) == 1.0
    assert float(by_mode["ca"]["speedup"]) == pytest.approx(2.0, rel=1e-6)
    assert float(by_mode["ca"]["abs_latency"]) == pytest.approx(5.0, rel=1e-6)  # ms, as benchmarks/dynamo writes it
    assert by_mode["ca"]["autograd_captures"] == "1"


def test_markdown_and_before_after_formats():
    md = rendered(compare_modes(three_modes()), "markdown")
    assert "| backward graphs | 0 | 3 (AOT) | 1 (CA) |" in md
    rc = compare_runs(three_modes(ca_ms=8), three_modes(ca_ms=4))
    table = rendered(rc, "table")
    assert "A (before)" in table and "speedup B over A" in table and "2.00x" in table
    runs_json = json.loads(rendered(rc, "json"))
    assert runs_json["format"] == "cagtool-compare-runs"
    assert runs_json["changes"]["ca"]["speedup"]["speedup"] == pytest.approx(2.0, rel=1e-6)
    rows = list(csv.DictReader(io.StringIO(rendered(rc, "csv"))))
    assert [(r["run"], r["mode"]) for r in rows] == [("A", "eager"), ("A", "aot"), ("A", "ca"), ("B", "eager"), ("B", "aot"), ("B", "ca")]
    assert float(rows[5]["speedup_vs_baseline"]) == pytest.approx(2.0, rel=1e-6)
    assert "| ca | status | ok | ok |" in rendered(rc, "markdown")


def test_compare_runs_notes_what_makes_runs_incomparable():
    before, after = three_modes(), three_modes()
    assert compare_runs(before, after).notes == []
    after.meta.target_argv = ["train.py", "--lr", "1"]
    after.meta.machine = {"hostname": "other", "cpu_count": 64}
    before.meta.machine = {"hostname": "laptop", "cpu_count": 8}
    notes = compare_runs(before, after).notes
    assert any("different commands" in n for n in notes)
    assert any("different machines" in n for n in notes)
    assert "note: the runs were recorded on different machines" in rendered(compare_runs(before, after), "table")
    # One machine that ran the reference loop 1.6x slower than the other (a CPU clocked down).
    before.meta.machine, after.meta.machine = {"hostname": "r", "reference_loop_s": 0.0015}, {"hostname": "r", "reference_loop_s": 0.0024}
    assert [n for n in compare_runs(before, after).notes if "reference loop" in n] == [
        "B's machine ran cagtool's reference loop 1.60x slower than A's (2.40 ms against 1.50 ms of CPU): the machine alone can make "
        "B's timings differ by as much"]
    after.meta.machine = {"hostname": "r", "reference_loop_s": 0.00155}
    assert not any("reference loop" in n for n in compare_runs(before, after).notes)  # 3% apart: the loop's own spread


def test_repetitions_that_differ_point_at_an_unseeded_script():
    run = run_record({
        "eager": mode_record("eager", make_steps([0.05, *steady(10)], LOSSES, compiling=())),
        "eager.2": mode_record("eager.2", make_steps([0.05, *steady(10)], [v * 1.1 for v in LOSSES], compiling=())),
    })
    (problem,) = compare_modes(run).problems
    assert "loss of eager.2 differs from eager" in problem and "not deterministic" in problem
    # Before/after: the same mode differing between two runs is the change, not nondeterminism.
    rc = compare_runs(three_modes(), three_modes(events=[*make_steps([0.05, *steady(6)], [v * 1.1 for v in LOSSES]), final()]))
    assert rc.problems and not any("deterministic" in p for p in rc.problems)


GOLDEN_TABLE = """\
mode ca: failed, exit code 1: RuntimeError: boom; eager and aot ran and ca failed: the job fails
only with compiled autograd on; no recompiles in ca before it failed; ca: 1 CA graph, 0 graph
breaks; compile aot 1.5 s, ca 1.6 s; first step aot 1.0 s, ca 1.0 s; peak memory aot 120.0 MiB, ca
100.0 MiB; compiled autograd: 1.60x the speed of torch.compile alone, inconclusive (90% CI
0.60x-4.25x, one process per mode: run-to-run noise assumed, not measured; run --repeat 5 to resolve
it); numerics agree.
what to do: the failure first: compiled autograd fails on this job's backward, which torch.compile
alone runs (the ca mode's exception, in `cagtool summary`); report it to PyTorch with that error,
and keep compiled autograd off that backward meanwhile (torch._dynamo.compiled_autograd._disable()
around it)
Modes side by side: train.py
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━┓
┃                                  ┃             eager ┃              aot ┃               ca ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━┩
│ status                           │                ok │               ok │   FAILED, exit 1 │
│ forward graphs                   │                 0 │                1 │                1 │
│ backward graphs                  │                 0 │          3 (AOT) │           1 (CA) │
│ graph breaks                     │                 0 │                1 │                0 │
│ recompiles                       │                 0 │                0 │                0 │
│ compile time                     │               0 s │          1.500 s │          1.550 s │
│   Dynamo                         │               0 s │          1.500 s │          1.500 s │
│   AOTAutograd                    │               0 s │          1.000 s │          1.000 s │
│   Inductor                       │               0 s │              0 s │              0 s │
│   CA capture                     │               0 s │              0 s │          0.050 s │
│ time to first step               │           1.000 s │          1.000 s │          1.000 s │
│ step time (median)               │         10.000 ms │         8.000 ms │         5.000 ms │
│ step time p10 - p90              │ 9.800 - 10.200 ms │ 7.840 - 8.160 ms │ 4.900 - 5.100 ms │
│ steady steps                     │                11 │  10 (1 excluded) │  10 (1 excluded) │
│ peak RSS                         │           100 MiB │          120 MiB │          100 MiB │
│ numerics vs eager (max rel diff) │         reference │                0 │                0 │
└──────────────────────────────────┴───────────────────┴──────────────────┴──────────────────┘
Speedups (steady-state step time)
┏━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓
┃           ┃ speedup ┃       90% CI ┃ verdict      ┃ note                                         ┃
┡━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩
│ aot/eager │   1.25x │ 0.47 - 3.32x │ inconclusive │ wall time per step, 1 vs 1 process:          │
│           │         │              │              │ run-to-run noise not measured, assumed over  │
│           │         │              │              │ +/-100% A/A; run --repeat 5 to resolve it;   │
│           │         │              │              │ on the 10 steps steady in both (left out:    │
│           │         │              │              │ step 0)                                      │
│ ca/eager  │   2.00x │ 0.75 - 5.32x │ inconclusive │ wall time per step, 1 vs 1 process:          │
│           │         │              │              │ run-to-run noise not measured, assumed over  │
│           │         │              │              │ +/-100% A/A; run --repeat 5 to resolve it;   │
│           │         │              │              │ from a mode that did not finish cleanly; on  │
│           │         │              │              │ the 10 steps steady in both (left out: step  │
│           │         │              │              │ 0)                                           │
│ ca/aot    │   1.60x │ 0.60 - 4.25x │ inconclusive │ wall time per step, 1 vs 1 process:          │
│           │         │              │              │ run-to-run noise not measured, assumed over  │
│           │         │              │              │ +/-100% A/A; run --repeat 5 to resolve it;   │
│           │         │              │              │ from a mode that did not finish cleanly      │
└───────────┴─────────┴──────────────┴──────────────┴──────────────────────────────────────────────┘
speedup = baseline median step time / mode median step time (> 1: faster; CPU time per step where
both modes' steps were CPU-bound on one thread), with its 90% confidence interval: each process is
one piece of evidence (the blocks of --repeat K, paired, from K = 5; below that only a change beyond
the assumed run-to-run noise is called). faster / slower: clear of 1.0; no change: within +/-5%;
inconclusive: neither (docs/ci.md).
Steps left out of the steady state because compilation touched them: aot: step 0; ca: step 0
Numerics: losses and final norms agree with eager within rtol 0.001, atol 1e-06; largest relative
difference 0
Problems:
  mode ca: failed, exit code 1: RuntimeError: boom
"""


def test_table_golden_text():
    """The whole table of a hand-built run with a failed ca mode, on a 100-column colourless console."""
    comparison = compare_modes(three_modes(ca_ms=5, status="failed", exit_code=1, exception=ExceptionInfo("RuntimeError", "boom")))
    buffer = io.StringIO()
    render_comparison(comparison, "table", make_console(file=buffer, width=100))
    text = "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
    assert text + "\n" == GOLDEN_TABLE


def test_the_headline_does_not_call_an_aot_mode_that_compiled_nothing_torch_compile():
    """A script that calls no torch.compile (it relies on the ca mode): its aot mode runs it eagerly,
    and the headline's base says so, not "torch.compile alone"."""
    from cagtool.report.compare.headline import run_headline

    run = three_modes(ca_ms=5)
    run.modes["aot"] = mode_record("aot", [*make_steps([0.05, *steady(8.0)], LOSSES, compiling=()), final()], peak=120 * 2**20)
    text = run_headline(compare_modes(run)).text
    assert "the speed of the script without it (it compiles nothing itself: the aot mode ran it eagerly)" in text
    assert "torch.compile alone" not in text
    assert "torch.compile alone" in run_headline(compare_modes(three_modes(ca_ms=5))).text


def test_the_headline_answers_first_in_words():
    """One sentence a user pastes into a pull request: ca's speed against torch.compile alone with
    its interval and verdict, the recompiles, the numerics; coloured by verdict."""
    from cagtool.report.compare.headline import change_headline, run_headline

    faster = run_headline(compare_modes(three_modes(ca_ms=5, repeat=5)))
    assert faster.tone == "good"
    # What replicates leads (counts, compile, first step, memory), then the time verdict.
    assert faster.text == ("no recompiles; ca: 1 CA graph, 0 graph breaks; compile aot 1.5 s, ca 1.6 s; first step aot 1.0 s, ca 1.0 s; peak memory aot 120.0 MiB, ca 100.0 MiB; "
                           "compiled autograd: 1.60x the speed of torch.compile alone (faster, 90% CI 1.57x-1.63x); numerics agree.")
    slower = run_headline(compare_modes(three_modes(ca_ms=8.2, repeat=5)))
    assert slower.tone == "bad" and "(slower, 90% CI" in slower.text
    one = run_headline(compare_modes(three_modes(ca_ms=5)))
    assert one.tone == "neutral" and "inconclusive" in one.text and "one process per mode: run-to-run noise assumed, not measured" in one.text
    failed = run_headline(compare_modes(three_modes(ca_ms=5, status="failed", exit_code=1, exception=ExceptionInfo("RuntimeError", "boom"))))
    assert failed.tone == "bad" and failed.text.startswith("mode ca: failed, exit code 1: RuntimeError: boom; ")
    verified = run_headline(compare_modes(three_modes(ca_ms=5, repeat=5)), {"fixes": [{"fix": "ca-dynamic", "verdict": "verified"}]})
    assert verified.text == faster.text  # no recompiles: nothing for a fix to have answered
    ab = change_headline(compare_runs(three_modes(ca_ms=6, repeat=3), three_modes(ca_ms=5, repeat=3)))
    assert ab.tone == "good" and "B ca: step time faster" in ab.text
    data = json.loads(format_comparison(compare_modes(three_modes(ca_ms=5, repeat=5)), "json"))
    assert data["headline"] == {"text": faster.text, "tone": "good"}


def test_a_mode_that_trained_otherwise_has_a_speed_figure_but_no_verdict():
    """ca 1.6x faster in time but with other losses (it skipped work, as FSDP2 under compiled
    autograd does): the headline keeps the figure and withholds the verdict, never "faster"."""
    from cagtool.report.compare.headline import run_headline

    other = [LOSSES[0], *(loss * 1.5 for loss in LOSSES[1:])]
    run = three_modes(ca_ms=5, repeat=5)
    for name in [m for m in run.modes if m.startswith("ca")]:
        run.modes[name] = mode_record(name, [ca_graph(0), *make_steps([0.05, *steady(5)], other), final()])
    headline = run_headline(compare_modes(run))
    assert "numerics DISAGREE" in headline.text and headline.tone == "bad"
    assert "not a verdict: its numerics differ" in headline.text and "(faster," not in headline.text


def test_the_one_pass_loss_comparison_equals_the_definitions():
    """A run's losses are compared in one pass (`_worst_and_agreement`): its worst step, its
    difference and the agreement equal the definitions' (the first step with the largest
    relative_difference; Tolerance.agrees at every step), NaN, infinities, zeros, overflowing
    differences and ties included."""
    import math
    import random

    from cagtool.report.compare.analysis import _worst_and_agreement

    rng = random.Random(7)
    specials = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, -1e308, 1.0, 2.0]
    tol = Tolerance()
    for _ in range(400):
        n = rng.randint(1, 12)
        steps = list(range(n))
        ref = {s: rng.choice(specials) if rng.random() < 0.3 else rng.uniform(-3, 3) for s in steps}
        val = {s: (rng.choice(specials) if rng.random() < 0.3 else ref[s] * (1 + rng.choice([0.0, 1e-5, 2e-3, -0.5]))) for s in steps}
        worst_step = max(steps, key=lambda s: relative_difference(val[s], ref[s]))
        expected = (worst_step, relative_difference(val[worst_step], ref[worst_step]), all(tol.agrees(val[s], ref[s]) for s in steps))
        assert _worst_and_agreement(steps, val, ref, tol) == expected, (val, ref)


def test_compare_runs_names_a_process_far_from_its_runs_others():
    """Run A's third ca process ran beside heavy load (its steps 37x the others'), run B has one
    process: the t interval on A's spread read 7e-06x..1.5e+06x and "3.32x the speed". Now the
    speed is the agreeing processes' and its interval theirs, stretched to what the odd one reads;
    the process is named in the evidence, the headline and the JSON."""
    before = three_modes(ca_ms=8, repeat=3)
    before.modes["ca.3"] = mode_record("ca.3", [*make_steps([0.05, *steady(8 * 37)], LOSSES), final()])
    rc = compare_runs(before, three_modes(ca_ms=8))
    s = next(c for c in rc.changes if c.mode == "ca").speedup
    assert s.verdict == "inconclusive" and s.ratio == pytest.approx(1.0, rel=0.01)
    assert 0.3 < s.low < 0.6 and s.high == pytest.approx(37, rel=0.01)  # the agreeing processes' bound; what the odd one reads
    assert s.blocks_needed is None and "run --repeat" not in s.evidence()
    assert "process 3 of A ca: its median step time was 37.2x the others'" in s.evidence()
    assert s.evidence().endswith("rerun on a quieter machine")
    assert "one process of A took 37.18x the others' time, it ran under other conditions (rerun)" in rendered(rc, "table").replace("\n", " ")
    speed = json.loads(rendered(rc, "json"))["changes"]["ca"]["speedup"]
    assert speed["outliers"] == [{"side": "A ca", "process": 3, "times_others": pytest.approx(37.18, rel=1e-3)}]
    assert 0.01 < speed["low"] < speed["high"] < 100 and speed["interval_units"] == [2, 1]


def _cpu_run(ms: float, on_cpu: float = 0.97) -> RunRecord:
    """Three ca processes whose steady steps take `ms` of wall time, the loop's thread on the CPU
    `on_cpu` of it (0.97: CPU-bound; 0.3: most of a step off the CPU, a sleep or a read)."""
    def process(rep: int) -> list[Event]:
        events: list[Event] = []
        t = 1.0
        for i, wall in enumerate([None, 0.05, *steady(ms * (1 + 0.005 * rep))]):
            t += wall or 0.0
            events.append(StepEvent(seq=i, t=t, step=i, backward_s=BACKWARD_S, loss=LOSSES[i] if i < len(LOSSES) else None,
                                    compiles=1 if i == 1 else 0, wall_s=wall, boundary="optimizer",
                                    cpu_s=None if wall is None else wall * 0.98, thread_cpu_s=None if wall is None else wall * on_cpu))
        return [*events, final()]

    return run_record({name: mode_record(name, process(rep)) for rep, name in enumerate(("ca", "ca.2", "ca.3"), 1)})


def test_compare_runs_labels_a_verdict_on_cpu_time_and_only_that():
    """`compare A B` of CPU-bound processes judges CPU time per step, while its table's step-time
    rows are wall time: the verdict's row, the headline and the JSON say CPU time; steps spent
    mostly off the CPU are judged on wall time, and nothing says CPU."""
    rc = compare_runs(_cpu_run(8), _cpu_run(4))
    s = rc.changes[0].speedup
    assert s.on_cpu and s.verdict == "faster" and s.ratio == pytest.approx(2.0, rel=0.01)
    table = rendered(rc, "table")
    assert "speedup B over A (CPU time per step)" in table
    assert "B ca: step time faster (2.00x the speed, 90% CI 1.98x-2.02x, in CPU time per step)." in table
    assert "| speedup B over A (CPU time per step) |" in rendered(rc, "markdown")
    assert json.loads(rendered(rc, "json"))["changes"]["ca"]["speedup"]["measure"] == "cpu"
    off = compare_runs(_cpu_run(8, on_cpu=0.3), _cpu_run(4, on_cpu=0.3))
    assert not off.changes[0].speedup.on_cpu and off.changes[0].speedup.verdict == "faster"
    assert "CPU time" not in rendered(off, "table") and json.loads(rendered(off, "json"))["changes"]["ca"]["speedup"]["measure"] == "wall"


def _phased(walls: dict[int, float], compiling: tuple[int, ...], rep: int = 1) -> list[Event]:
    """Schema-2 steps 0..max(walls): step n's wall time `walls[n]` (step 0 untimed), those in
    `compiling` compiled something; `rep` moves every time by 0.5 % per repetition."""
    events: list[Event] = []
    t = 1.0
    for n in range(max(walls) + 1):
        wall = walls.get(n)
        wall = None if wall is None else wall * (1 + 0.005 * rep)
        t += wall or 0.05
        events.append(StepEvent(seq=n, t=t, step=n, backward_s=BACKWARD_S, loss=LOSSES[n % len(LOSSES)], compiles=1 if n in compiling else 0,
                                wall_s=wall, boundary="optimizer"))
    return [*events, final()]


def test_two_modes_are_compared_on_the_steps_steady_in_both():
    """A job whose steps double in cost at step 6 (a longer sequence), where ca recompiles at step
    6 and eager does not: each mode's own steady set would put eager's slow step 6 against nothing
    on ca's side, ca 2x faster on every step read 3x; compare and gate read the same steps of both."""
    from cagtool.report.figures.pooled import mode_columns
    from cagtool.report.gate.baseline import snapshot_of
    from cagtool.report.gate.checks import MinSpeedupCheck, SpeedupThreshold

    eager = {n: (0.010 if n < 6 else 0.020) for n in range(1, 11)}
    ca = {n: (0.005 if n < 6 else 0.010) for n in range(1, 11)}
    run = run_record({"eager": mode_record("eager", _phased(eager, ())), "ca": mode_record("ca", _phased(ca, (0, 6)))})
    speed = next(s for s in compare_modes(run).speedups if s.label == "ca/eager")
    assert speed.ratio == pytest.approx(2.0, rel=1e-9) and speed.steady_steps == (9, 9)
    assert "on the 9 steps steady in both (left out: step 6)" in speed.note
    # The columns themselves keep each mode's own steady steps: eager's 10, ca's 9.
    columns = mode_columns(run)
    assert columns["eager"].step_time.count == 10 and columns["ca"].step_time.count == 9
    result = MinSpeedupCheck(SpeedupThreshold("ca", "eager", 1.5)).evaluate({m: snapshot_of(c) for m, c in columns.items()}, None)
    assert result.data["speedup"] == pytest.approx(2.0, rel=1e-9)
    assert any("on the 9 steps steady in both modes (left out: step 6)" in note for note in result.notes)
    # Repetitions: a step touched in any process of either mode is left out of every process.
    reps = {"eager": mode_record("eager", _phased(eager, ())), "ca": mode_record("ca", _phased(ca, (0, 6))),
            "eager.2": mode_record("eager.2", _phased(eager, (), rep=2)), "ca.2": mode_record("ca.2", _phased(ca, (0, 6, 9), rep=2))}
    speed = next(s for s in compare_modes(run_record(reps)).speedups if s.label == "ca/eager")
    assert speed.steady_steps == (16, 16) and "(left out: steps 6, 9)" in speed.note
    assert speed.ratio == pytest.approx(2.0, rel=1e-9)


def test_a_run_is_gated_against_its_baseline_on_the_steps_the_baseline_timed(tmp_path):
    """A baseline whose ca recaptured on every odd step (heavy steps: hooks added there) times only
    the light even steps; the fixed job, no recapture, times them all. On each side's own steady
    steps the unchanged light steps read +50 % (a FAIL of a fix); on the steps the baseline timed,
    no regression. The other way round, a run that compiles in most of the steps its baseline
    timed is not judged on step time (its steady steps are other steps of the script)."""
    from cagtool.report.gate.baseline import baseline_from_run, load_baseline, run_snapshots, save_baseline
    from cagtool.report.gate.checks import Outcome, StepTimeRegressionCheck, TimeThreshold

    def walls(rep: int) -> dict[int, float]:
        return {n: (0.004 if n % 2 == 0 else 0.010) * (1 + 0.003 * ((n * 7 + rep) % 5)) for n in range(1, 21)}

    def run(odd_compiles: bool, path: str) -> RunRecord:
        compiling = (0, *range(1, 21, 2)) if odd_compiles else (0,)
        return run_record({name: mode_record(name, _phased(walls(rep), compiling, rep=rep))
                           for rep, name in enumerate(("ca", "ca.2", "ca.3"), 1)}, path=path)

    stormy, fixed = run(True, str(tmp_path / "stormy")), run(False, str(tmp_path / "fixed"))
    saved = load_baseline(save_baseline(baseline_from_run(stormy), tmp_path / "b.json"))
    assert saved.modes["ca"].step_time.steady_steps.tolist() == list(range(2, 21, 2))
    check = StepTimeRegressionCheck(TimeThreshold(25, "%"), "ca")
    result = check.evaluate(run_snapshots(fixed), saved.modes)
    assert result.outcome is Outcome.PASS, result.message
    assert result.data["ratio"] == pytest.approx(1.0, abs=0.02)
    assert any("on the steps the baseline timed: this run's steps 1, 3, 5, 7, 9, 11 and 4 more left out" in n for n in result.notes), result.notes
    # compare A B reads the same steps.
    change = compare_runs(stormy, fixed).changes[0].speedup
    assert change.ratio == pytest.approx(1.0, abs=0.02) and "(left out: steps 1, 3, 5" in change.note
    # The other way: the fixed job's baseline, the stormy run.
    held = load_baseline(save_baseline(baseline_from_run(fixed), tmp_path / "f.json"))
    back = check.evaluate(run_snapshots(stormy), held.modes)
    assert back.outcome is Outcome.INCONCLUSIVE and not back.failed
    assert "this run compiled or captured in 10 of the 20 steps the baseline timed" in back.message
    # A run stopped early (`--steps 8`) never reached most of the steps its baseline timed: it did
    # not compile in them, and its steady steps are the script's first.
    short = run_record({name: mode_record(name, _phased({n: w for n, w in walls(rep).items() if n < 8}, (0,), rep=rep))
                        for rep, name in enumerate(("ca", "ca.2", "ca.3"), 1)}, path=str(tmp_path / "short"))
    cut = check.evaluate(run_snapshots(short), held.modes)
    assert cut.outcome is Outcome.INCONCLUSIVE and "compiled or captured" not in cut.message, cut.message
    assert "this run ran 8 steps and never reached 13 of the 20 steps the baseline timed (steps 8, 9" in cut.message
    # With fewer than 5 steady steps, the check cannot be made: an error, as --help says.
    tiny = run_record({"ca": mode_record("ca", _phased({n: 0.004 for n in range(1, 5)}, (0,)))}, path=str(tmp_path / "tiny"))
    few = check.evaluate(run_snapshots(tiny), held.modes)
    assert few.outcome is Outcome.ERROR and "only 4 steady steps (this run 4, baseline 60): too few to judge a regression" in few.message


@pytest.mark.parametrize("ranges", [[[5, 2]], [[0, 10**9]], [[-1, 3]]])
def test_a_baseline_with_steady_steps_no_run_gives_is_refused(tmp_path, ranges):
    from cagtool.errors import UnreadableInput
    from cagtool.report.gate.baseline import baseline_from_run, load_baseline, save_baseline

    record = run_record({"ca": mode_record("ca", _phased({n: 0.004 for n in range(1, 11)}, (0,)))}, path=str(tmp_path / "r"))
    path = save_baseline(baseline_from_run(record), tmp_path / "b.json")
    data = json.loads(path.read_text())
    assert data["modes"]["ca"]["step_time"]["steady_steps"] == [[1, 10]]
    data["modes"]["ca"]["step_time"]["steady_steps"] = ranges
    path.write_text(json.dumps(data))
    with pytest.raises(UnreadableInput, match="steady_steps"):
        load_baseline(path)


def test_two_runs_with_too_few_common_steps_show_no_speedup_figure(tmp_path):
    """compare A B of runs with 4 steady steps: no ratio is shown as the speedup (a ratio of a few
    steps, steps the two medians above need not share, read as a verdict against them)."""
    a = run_record({"ca": mode_record("ca", _phased({n: 0.004 for n in range(1, 5)}, (0,)))}, path=str(tmp_path / "a"))
    b = run_record({"ca": mode_record("ca", _phased({n: 0.002 for n in range(1, 5)}, (0,)))}, path=str(tmp_path / "b"))
    table = rendered(compare_runs(a, b), "table")
    row = next(line for line in table.splitlines() if "speedup B over A" in line)
    assert "not judged: 4 steps steady in both (at least 5)" in row and "2.00x" not in row, row


def test_a_loss_that_is_nan_at_one_step_only_is_said_at_that_step_not_from_it():
    """A grad scaler's overflow makes one step's loss NaN and the next finite again: "loss is NaN
    from step 3" read as if training had gone NaN for good. Said as what the record shows."""
    from cagtool.report.compare.analysis import NumericsSample, nonfinite_notes

    nan, inf = float("nan"), float("inf")

    def sample(record: str, losses: list[float]) -> NumericsSample:
        return NumericsSample(record, dict(enumerate(losses)), None, None, True)

    once = [0.5, 0.4, 0.3, nan, 0.2, 0.1]
    assert nonfinite_notes([sample("eager", once), sample("ca", once)]) == ["loss is NaN at step 3 in eager and ca"]
    assert nonfinite_notes([sample("ca", [0.5, nan, 0.3, inf, 0.2])]) == ["loss is NaN at 2 steps (1, 3) in ca"]
    assert nonfinite_notes([sample("aot", [0.5, 0.4, nan, nan, nan])]) == ["loss is NaN from step 2 in aot"]


def test_a_mode_that_trained_no_step_agrees_in_nothing():
    """A mode that ran to its end without one loss where eager trained (its final norms whatever it
    started with): no "losses and final norms agree" is read into it, with or without the files an
    earlier mode wrote."""
    from cagtool.record.manifest import WrittenFiles
    from cagtool.report.compare.analysis import NumericsSample, modes_numerics

    eager = NumericsSample("eager", {0: 0.5, 1: 0.4}, 3.0, 1.0, True)
    ca = NumericsSample("ca", {}, 3.0, None, True)
    lines = [text for text, _ in numerics_lines(modes_numerics([eager, ca], Tolerance()))]
    assert not any("agree" in text for text in lines), lines
    assert ("Numerics: ca ran to its end without a training step (no loss) where eager trained: nothing of its training to compare, "
            "and its final norms are whatever it loaded or started with") in lines
    written = {"ca": WrittenFiles(paths=["ckpt.pt"], count=1)}
    numerics = modes_numerics([eager, ca], Tolerance(), written=written)
    assert numerics.resumed == written and numerics.stepless == ("ca",)
    lines = [text for text, _ in numerics_lines(numerics)]
    assert lines[0].startswith("Numerics: ca started after an earlier mode wrote ckpt.pt in the job's working directory and trained no step")
    # a mode bounded by --steps, or one that trained, is no such mode
    trained = NumericsSample("aot", {0: 0.5, 1: 0.4}, 3.0, 1.0, True)
    lines = [text for text, _ in numerics_lines(modes_numerics([eager, trained], Tolerance()))]
    assert lines[0].startswith("Numerics: losses and final norms agree with eager")


def test_a_speedup_not_judged_for_a_load_too_heavy_on_both_sides_does_not_say_the_load_differed():
    """Two modes whose median steps both waited ~70% for a CPU: the speedup is withheld because no
    correction holds at that load, not because the load differed. The words say which."""
    from types import SimpleNamespace

    from cagtool.report.compare.headline import load_words

    heavy = SimpleNamespace(load_too_heavy=True, load_changes_verdict=False)
    differed = SimpleNamespace(load_too_heavy=False, load_changes_verdict=True)
    assert load_words(heavy, "modes").startswith("the machine's load was too heavy") and "differed" not in load_words(heavy, "modes")
    assert load_words(differed, "runs") == "the machine's load differed between the runs"


def test_ca_parting_from_aot_growing_is_not_called_compiled_autograds_error():
    """pytorch/examples' word language model (Transformer, dropout, SGD at lr 20), torch.compile'd:
    both compiled modes draw Inductor's dropout (eager differs from step 0), and ca agrees with aot
    to 1e-6 for 9 steps, then parts growing (1e-5, 2e-4, ..., 2e-3 at step 17, 0.4 at step 23): the
    text said "compiled autograd computes otherwise" where the rule cannot yet tell round-off of two
    Inductor backwards amplified by training from an error. It says so and how to tell; a jump
    keeps the accusation."""
    from cagtool.report.compare.analysis import NumericsSample, modes_numerics

    aot = [6.290896892547607, 9.77807331085205, 7.954372882843018, 6.35642671585083, 7.051969051361084, 9.428288459777832,
           9.931890487670898, 6.183899879455566, 6.183628082275391, 10.017701148986816, 13.496696472167969, 7.55326509475708,
           21.47162437438965, 6.37346887588501, 19.716720581054688, 9.833014488220215, 7.08595609664917, 30.520465850830078,
           8.865574836730957, 10.255168914794922, 23.79953384399414, 6.545293807983398, 7.882776260375977, 10.689224243164062]
    ca = [6.290896892547607, 9.77807331085205, 7.954372882843018, 6.35642671585083, 7.051968574523926, 9.42829418182373,
          9.931878089904785, 6.183900833129883, 6.183620452880859, 10.017414093017578, 13.499611854553223, 7.5532145500183105,
          21.47802734375, 6.373533248901367, 19.708513259887695, 9.833112716674805, 7.082313537597656, 30.46157455444336,
          8.890310287475586, 10.056574821472168, 23.75899887084961, 6.574613571166992, 7.448270797729492, 6.3305206298828125]
    eager = [6.284392356872559, *aot[1:]]  # differs at step 0: Inductor's dropout draws other numbers

    def lines(ca_losses: list[float]) -> str:
        samples = [NumericsSample("eager", dict(enumerate(eager)), None, None, True),
                   NumericsSample("aot", dict(enumerate(aot)), None, None, True),
                   NumericsSample("ca", dict(enumerate(ca_losses)), None, None, True, ca_inductor=True)]
        return "\n".join(text for text, _ in numerics_lines(modes_numerics(samples, Tolerance())))

    growing = lines(ca)
    assert "Numerics DISAGREE between ca and aot" in growing and "compiled autograd computes otherwise" not in growing, growing
    assert ("note: ca's losses agree with aot's to 1e-06 for the first 9 steps, then part growing past 1e-05 (no jump), beyond the "
            "tolerance from step 17") in growing, growing
    assert "cagtool run --modes eager,ca --backend eager (with --parity" in growing
    jumped = lines([*aot[:9], aot[9] * 1.01, *aot[10:]])  # bit for bit, then 1e-2 at once
    assert "compiled autograd computes otherwise" in jumped and "part growing" not in jumped, jumped


def test_random_ops_that_part_the_losses_after_a_first_step_that_agrees_are_not_a_disagreement():
    """pytorch/examples' GAT on Inductor: dropout in the compiled graphs draws from Inductor's
    generator, but the first predictions are near uniform, so the first losses agree (1.9459 both)
    and part from step 1 (6e-3 at step 8). The gradient check knew why (random ops); the numerics
    read DISAGREE. Now: not comparable, said with the step they part at, in every place; and a
    mode whose gradients are comparable still disagrees."""
    from types import SimpleNamespace

    from cagtool.report.compare.analysis import NumericsSample, modes_numerics
    from cagtool.report.compare.grad_parity import RANDOM_OPS_WORDS

    why = (f"{RANDOM_OPS_WORDS}(dropout, inductor_seeds) in aot's compiled graphs draw other numbers than eager; rerun with "
           "cagtool run --parity (torch._inductor.config.fallback_random) to compare gradients")
    eager = NumericsSample("eager", {0: 1.9459, 1: 1.9400, 2: 1.9300}, 12.35, 0.0525, True)
    aot = NumericsSample("aot", {0: 1.9459, 1: 1.9500, 2: 1.9420}, 12.30, 0.0438, True)
    ca = NumericsSample("ca", {0: 1.9459, 1: 1.9500, 2: 1.9420}, 12.30, 0.0438, True)
    gradients = {"aot": SimpleNamespace(not_comparable=why), "ca": SimpleNamespace(not_comparable=why.replace("aot's", "ca's"))}
    numerics = modes_numerics([eager, aot, ca], Tolerance(), gradients)
    assert numerics.disagreements == [] and numerics.inputs_differ == ["aot", "ca"] and numerics.random_ops_only
    assert numerics.first_losses == {} and numerics.parted_at == {"aot": 1, "ca": 1}
    assert numerics.against_aot and all(d.agrees for d in numerics.against_aot)
    lines = [text for text, _ in numerics_lines(numerics)]
    assert ("Numerics: not comparable: aot's losses agree with eager's at the first step and part from step 1: random ops "
            "(dropout, inductor_seeds) in aot's compiled graphs draw other numbers than eager, so their numerics say nothing "
            "about compiled autograd; rerun with cagtool run --parity (torch._inductor.config.fallback_random) to compare them") in lines
    assert "  loss of aot: 6.22e-03 relative at step 2 (1.942 vs 1.93)" in lines, lines
    assert not any("DISAGREE" in text or "unseeded" in text for text in lines), lines
    # without the gradient check's cause the same losses are a disagreement
    plain = modes_numerics([eager, aot, ca], Tolerance())
    assert {d.record for d in plain.disagreements} == {"aot", "ca"} and plain.random_ops == {} and plain.parted_at == {}


def test_random_ops_alike_in_aot_and_ca_from_the_first_step_are_said_in_one_line():
    """tests/scripts/dropout_train.py on Inductor, modes eager,aot,ca: aot's and ca's first-step
    losses both differ from eager's (their dropout draws from Inductor's generator), for the same
    ops: one line names both, with their losses, where each had its own line saying the same; ops
    that differ keep a line each."""
    from types import SimpleNamespace

    from cagtool.report.compare.analysis import NumericsSample, modes_numerics
    from cagtool.report.compare.grad_parity import RANDOM_OPS_WORDS

    def why(record: str, ops: str = "dropout, inductor_seeds") -> str:
        return (f"{RANDOM_OPS_WORDS}({ops}) in {record}'s compiled graphs draw other numbers than eager; rerun with "
                "cagtool run --parity (torch._inductor.config.fallback_random) to compare gradients")

    eager = NumericsSample("eager", {0: 0.5975, 1: 0.58, 2: 0.57}, 12.35, 0.0525, True)
    aot = NumericsSample("aot", {0: 0.6686, 1: 0.61, 2: 0.60}, 12.30, 0.0438, True)
    ca = NumericsSample("ca", {0: 0.6686, 1: 0.61, 2: 0.60}, 12.30, 0.0438, True)
    gradients = {r: SimpleNamespace(not_comparable=why(r)) for r in ("aot", "ca")}
    numerics = modes_numerics([eager, aot, ca], Tolerance(), gradients)
    assert numerics.inputs_differ == ["aot", "ca"] and set(numerics.first_losses) == {"aot", "ca"}
    lines = [text for text, _ in numerics_lines(numerics)]
    said = [line for line in lines if line.startswith("Numerics: not comparable")]
    assert said == ["Numerics: not comparable: aot's and ca's first-step losses already differ from eager's (0.6686 in each vs "
                    "0.5975): random ops (dropout, inductor_seeds) in aot's and ca's compiled graphs draw other numbers than "
                    "eager, so their numerics say nothing about compiled autograd; rerun with cagtool run --parity "
                    "(torch._inductor.config.fallback_random) to compare them"], lines
    # Other first losses are each quoted; other ops are each said.
    ca_other = NumericsSample("ca", {0: 0.6601, 1: 0.61, 2: 0.60}, 12.30, 0.0438, True)
    lines = [text for text, _ in numerics_lines(modes_numerics([eager, aot, ca_other], Tolerance(), gradients))]
    assert any(line.startswith("Numerics: not comparable: aot's and ca's first-step losses already differ from eager's "
                               "(aot 0.6686, ca 0.6601 vs 0.5975)") for line in lines), lines
    gradients["ca"] = SimpleNamespace(not_comparable=why("ca", "dropout, inductor_seeds, inductor_random"))
    lines = [text for text, _ in numerics_lines(modes_numerics([eager, aot, ca], Tolerance(), gradients))]
    said = [line for line in lines if line.startswith("Numerics: not comparable")]
    assert [line.split(" first-step")[0] for line in said] == ["Numerics: not comparable: aot's", "Numerics: not comparable: ca's"], lines


def test_a_first_step_that_parts_in_its_backward_is_said_so_not_unseeded():
    """An HF Trainer job, gradient checkpointing, torch_compile_backend="eager", 2 micro-batches a
    step: the first backward's losses agree in every mode, the step's loss (its last backward's)
    differs, because the compiled checkpoint's recompute drew from the generator. It read "inputs
    differ (unseeded?) ... before any backward could matter". A first backward whose loss differs
    too is still "inputs differ"."""
    from cagtool.report.compare.analysis import NumericsSample, modes_numerics

    def sample(record: str, losses: dict[int, float], first: float | None) -> NumericsSample:
        return NumericsSample(record, losses, 3.0, 1.0, True, first_backward=lambda: first)

    eager = sample("eager", {0: 1.96384, 1: 1.9562}, 1.95397556)
    aot = sample("aot", {0: 1.95540, 1: 1.9570}, 1.95397556)
    ca = sample("ca", {0: 1.95540, 1: 1.9570}, 1.95397556)
    numerics = modes_numerics([eager, aot, ca], Tolerance())
    assert numerics.inputs_differ == ["aot", "ca"] and numerics.first_backward_agrees == {"aot": 1.95397556, "ca": 1.95397556}
    lines = [text for text, _ in numerics_lines(numerics)]
    assert lines[0].startswith("Numerics: not comparable: aot's first step parts from eager's in its backward: the loss of its "
                               "first backward call agrees (1.95397556 in both), the loss after it already differs (1.9554 vs "
                               "1.96384): what that backward did changed what the next forward computed"), lines[0]
    assert not any("unseeded" in text for text in lines), lines
    other = modes_numerics([eager, sample("aot", {0: 1.95540, 1: 1.9570}, 1.9)], Tolerance())
    assert other.inputs_differ == ["aot"] and other.first_backward_agrees == {}
    assert any(text.startswith("Numerics: inputs differ (unseeded?)") for text, _ in numerics_lines(other))
