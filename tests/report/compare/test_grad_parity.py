"""Gradient parity (report/compare/grad_parity.py) on hand-built digests: what counts as agreement,
and what each kind of mismatch reads as."""

from __future__ import annotations

import math
import random

import pytest

from cagtool.report.compare.grad_parity import (
    DIFFERS,
    MISSING,
    SCALE,
    SIGN,
    SWAPPED,
    ZERO,
    Digest,
    GradTolerance,
    compare_digests,
    held_by_both,
)


def digest(values: list[float], dtype: str = "float32") -> Digest:
    """What capture/steps/grad_digest.py computes, in Python."""
    norm = math.sqrt(sum(v * v for v in values))
    checksum = sum(v * (1 + (i % 1021) / 1021) for i, v in enumerate(values))
    return Digest(norm, max(abs(v) for v in values), checksum, dtype, len(values))


def grads(seed: int, shapes: dict[str, int]) -> dict[str, list[float]]:
    rng = random.Random(seed)
    return {name: [rng.gauss(0, 1) for _ in range(n)] for name, n in shapes.items()}


SHAPES = {"fc1.weight": 256, "fc1.bias": 16, "fc2.weight": 256, "fc2.bias": 16}


def step_digests(values: dict[str, list[float]]) -> dict[str, Digest]:
    return {name: digest(v) for name, v in values.items()}


def test_round_off_agrees_and_says_so_per_parameter():
    base = grads(0, SHAPES)
    # float32 round-off of a reordered reduction: a few ulps per element
    noisy = {name: [x * (1 + random.Random(i).uniform(-3e-7, 3e-7)) for i, x in enumerate(v)] for name, v in base.items()}
    pair = compare_digests("ca", "eager", {0: step_digests(noisy), 5: step_digests(noisy)}, {0: step_digests(base), 5: step_digests(base)}, GradTolerance())
    assert pair.agrees and pair.first_bad_step is None
    assert pair.params == 4 and pair.steps == (0, 5)
    assert "agrees with eager on all 4 parameters at 2 digested steps" in pair.verdict()
    assert pair.max_excess < 1


def test_scale_is_named_with_its_factor_and_the_first_step():
    base = grads(1, SHAPES)
    scaled = {**base, "fc2.weight": [2 * x for x in base["fc2.weight"]]}
    got = {0: step_digests(base), 3: step_digests(scaled), 6: step_digests(scaled)}
    ref = {0: step_digests(base), 3: step_digests(base), 6: step_digests(base)}
    pair = compare_digests("ca", "eager", got, ref, GradTolerance())
    assert pair.first_bad_step == 3 and pair.bad_steps == (3, 6)
    [mismatch] = pair.first_bad
    assert (mismatch.name, mismatch.kind) == ("fc2.weight", SCALE)
    assert mismatch.ratio == pytest.approx(2.0)
    assert "scaled by 2" in mismatch.describe()


def test_a_factor_indistinguishable_from_one_is_a_difference_not_a_scaling():
    """pytorch/examples' time_sequence_prediction (float64 LSTM cells, LBFGS) on Inductor: after two
    steps every gradient differs from eager's by ~2e-6 relative, beyond float64's tolerance, and
    each read "scaled by 1": a difference, shown with its ratio's telling digits."""
    base = {name: [x * 1e-3 for x in values] for name, values in grads(3, {"lstm.weight": 64}).items()}
    off = {name: [x * (1 + 2e-6) for x in values] for name, values in base.items()}
    pair = compare_digests("aot", "eager", {2: {n: digest(v, "float64") for n, v in off.items()}},
                           {2: {n: digest(v, "float64") for n, v in base.items()}}, GradTolerance())
    [mismatch] = pair.first_bad
    assert mismatch.kind == DIFFERS, mismatch
    said = mismatch.describe()
    assert "scaled by" not in said and said.endswith("norm ratio 1.000002)"), said


def test_sign_flip_keeps_every_norm_but_not_the_checksum():
    base = grads(2, SHAPES)
    flipped = {**base, "fc1.bias": [-x for x in base["fc1.bias"]]}
    pair = compare_digests("aot", "eager", {0: step_digests(flipped)}, {0: step_digests(base)}, GradTolerance())
    [mismatch] = pair.first_bad
    assert (mismatch.name, mismatch.kind) == ("fc1.bias", SIGN)
    assert mismatch.norm == pytest.approx(mismatch.reference_norm)


def test_zero_and_missing_gradients_read_as_a_hook_or_branch_in_one_mode():
    base = grads(3, SHAPES)
    got = step_digests({**base, "fc1.weight": [0.0] * 256})
    got["fc2.bias"] = Digest(None, None, None, "float32", 16)
    pair = compare_digests("ca", "eager", {0: got}, {0: step_digests(base)}, GradTolerance())
    kinds = {m.name: m.kind for m in pair.first_bad}
    assert kinds == {"fc1.weight": ZERO, "fc2.bias": MISSING}


def test_swapped_gradients_cancel_in_the_global_norm_but_not_per_parameter():
    base = grads(4, SHAPES)
    swapped = {**base, "fc1.weight": base["fc2.weight"], "fc2.weight": base["fc1.weight"]}
    total = lambda g: math.sqrt(sum(x * x for v in g.values() for x in v))  # noqa: E731
    assert total(swapped) == pytest.approx(total(base))
    pair = compare_digests("ca", "eager", {0: step_digests(swapped)}, {0: step_digests(base)}, GradTolerance())
    assert {(m.name, m.kind, m.other) for m in pair.first_bad} == {("fc1.weight", SWAPPED, "fc2.weight"), ("fc2.weight", SWAPPED, "fc1.weight")}


def test_a_swap_is_one_to_one_and_unambiguous():
    """Two parameters that both match one other parameter's reference gradient (small gradients of
    a chaotic run, a transformer's two norm vectors matching one bias) are no swap: a gradient that
    moved is in one place. Nor is a gradient that matches two reference gradients alike."""
    shapes = {**SHAPES, "fc3.bias": 16}
    base = grads(5, shapes)
    both = {**base, "fc1.bias": base["fc3.bias"], "fc2.bias": base["fc3.bias"]}
    pair = compare_digests("ca", "eager", {0: step_digests(both)}, {0: step_digests(base)}, GradTolerance())
    assert {(m.name, m.kind, m.other) for m in pair.first_bad} == {("fc1.bias", "differs", ""), ("fc2.bias", "differs", "")}
    alike = {**base, "fc3.bias": base["fc2.bias"]}
    pair = compare_digests("ca", "eager", {0: step_digests({**alike, "fc1.bias": base["fc2.bias"]})}, {0: step_digests(alike)}, GradTolerance())
    assert [(m.name, m.kind, m.other) for m in pair.first_bad] == [("fc1.bias", "differs", "")]


def test_tolerance_depends_on_dtype_size_and_step():
    tol = GradTolerance()
    assert tol.rtol("bfloat16", 100, 0) > tol.rtol("float32", 100, 0) > tol.rtol("float64", 100, 0)
    assert tol.rtol("float32", 10**8, 0) > tol.rtol("float32", 100, 0)
    assert tol.rtol("float32", 100, 10) > tol.rtol("float32", 100, 0)
    assert GradTolerance(2.0).rtol("float32", 100, 0) == pytest.approx(2 * tol.rtol("float32", 100, 0))


def test_steps_digested_on_one_side_are_listed_not_compared():
    base = step_digests(grads(5, SHAPES))
    pair = compare_digests("ca", "eager", {0: base, 7: base}, {0: base, 9: base}, GradTolerance())
    assert pair.steps == (0,) and pair.only_record == (7,) and pair.only_reference == (9,)
    assert pair.agrees
    from cagtool.report.compare.grad_parity import GradParity
    from cagtool.report.compare.render import grad_parity_lines

    said = [line for line, _ in grad_parity_lines(GradParity("eager", (pair,)))]
    assert said[-1] == "    not compared: steps digested only in ca: 7; only in eager: 9"
    # a side with none is not listed (it read "only in eager []")
    one_side = compare_digests("ca", "eager", {0: base, **{s: base for s in range(80, 88)}}, {0: base}, GradTolerance())
    said = [line for line, _ in grad_parity_lines(GradParity("eager", (one_side,)))]
    assert said[-1] == "    not compared: steps digested only in ca: 80, 81, 82, 83, 84, 85 and 2 more"


def test_repetitions_of_a_mode_are_counted_as_processes_not_as_modes():
    """`--repeat 3` of aot and ca: six records (`aot`, `aot.2`, ..., `ca.3`) of two modes; the
    summary counted each record as a mode ("the 6 modes agree")."""
    from cagtool.report.compare.grad_parity import GradParity

    base = step_digests(grads(2, SHAPES))
    records = ["ca", "ca.2", "aot.2", "ca.3", "aot.3"]
    pairs = tuple(compare_digests(record, "aot", {0: base}, {0: base}, GradTolerance()) for record in records)
    assert GradParity("aot", pairs).summary() == "gradients: the 2 modes agree on all 4 parameters at 1 digested step (6 processes)"
    one_each = GradParity("aot", pairs[:1]).summary()
    assert one_each == "gradients: the 2 modes agree on all 4 parameters at 1 digested step"
    # one mode's repetitions (`--repeat 5 --modes aot`) are that mode's processes ("the 1 modes")
    one_mode = tuple(compare_digests(record, "aot", {0: base}, {0: base}, GradTolerance()) for record in ["aot.2", "aot.3"])
    assert GradParity("aot", one_mode).summary() == "gradients: the 3 processes of aot agree on all 4 parameters at 1 digested step"


def test_random_ops_are_found_across_chunks_and_never_through_a_link_or_fifo(tmp_path):
    """Graph code and trace logs are scanned a chunk at a time (8 MiB, memory bounded): an op name
    that a chunk's end would split is found whole, a shorter name it starts with is not reported
    from the split, and a file planted as a link or a FIFO is refused, not read."""
    import os

    from cagtool.errors import UnreadableInput
    from cagtool.report.compare.grad_parity import _RANDOM_OP_BYTES, _named_in_file

    log = tmp_path / "trace.log"
    filler = "x = torch.ops.aten.add.Tensor(a, b)\n"
    line = "y = torch.ops.aten.randn_like.default(x)\n"
    start = 8 * 2**20 - 4 - line.index("randn_like")  # the first chunk ends in "rand", an op of its own
    head = filler * ((start - 100) // len(filler))
    log.write_text(head + "#" * (start - len(head) - 1) + "\n" + line + "z = native_dropout(y)\n")
    assert log.read_bytes()[8 * 2**20 - 4 : 8 * 2**20 + 6] == b"randn_like"
    assert sorted(_named_in_file(log, _RANDOM_OP_BYTES)) == ["native_dropout", "randn_like"]
    (tmp_path / "linked.py").symlink_to(log)
    os.mkfifo(tmp_path / "fifo.py")
    for planted in ("linked.py", "fifo.py"):
        with pytest.raises(UnreadableInput):
            _named_in_file(tmp_path / planted, _RANDOM_OP_BYTES)


def test_gradients_zero_on_both_sides_agree_but_say_nothing_and_the_gate_cannot_pass_on_them():
    """All-zero gradients in both modes (a job resumed past its last step; digests taken after a
    zero_grad) read "the modes agree" and passed --max-grad-diff: they are said to compare nothing."""
    from cagtool.report.compare.grad_parity import GradParity

    zeros = step_digests({name: [0.0] * n for name, n in SHAPES.items()})
    pair = compare_digests("ca", "eager", {0: zeros, 5: zeros}, {0: zeros, 5: zeros}, GradTolerance())
    assert pair.agrees and pair.all_zero and (pair.compared, pair.zero) == (8, 8)
    said = GradParity("eager", (pair,)).summary()
    assert said.startswith("gradients: ca vs eager: every gradient compared is zero on both sides (4 parameters at 2 digested steps)")
    assert "agree" not in said
    base = step_digests(grads(5, SHAPES))
    some = compare_digests("ca", "eager", {0: zeros, 5: base}, {0: zeros, 5: base}, GradTolerance())
    assert some.agrees and not some.all_zero and "agree on all 4 parameters" in GradParity("eager", (some,)).summary()


def test_all_zero_gradients_of_several_modes_are_said_once_and_a_pair_not_compared_is_not_counted_as_agreeing():
    """pytorch/examples' ddp-tutorial-series (cross_entropy over one class: every gradient zero),
    three modes: the summary repeated aot's own line ("gradients: aot vs eager: every gradient ...")
    above that same line; and where ca was not comparable (it resumed from aot's snapshot), the
    summary read "the 2 modes agree" of a run of three. Now the modes are named."""
    from dataclasses import replace

    from cagtool.report.compare.grad_parity import GradParity

    zeros = step_digests({name: [0.0] * n for name, n in SHAPES.items()})
    pairs = tuple(compare_digests(record, "eager", {0: zeros}, {0: zeros}, GradTolerance()) for record in ("aot", "ca"))
    said = GradParity("eager", pairs).summary()
    assert said == ("gradients: nothing to compare: every gradient compared is zero in aot, ca and eager (4 parameters at 1 digested "
                    "step): the loss does not reach the parameters, or they were digested after the job zeroed them")
    base = step_digests(grads(5, SHAPES))
    aot = compare_digests("aot", "eager", {0: base}, {0: base}, GradTolerance())
    ca = replace(compare_digests("ca", "eager", {0: base}, {0: base}, GradTolerance()), not_comparable="inputs differ")
    assert GradParity("eager", (aot, ca)).summary() == "gradients: aot and eager agree on all 4 parameters at 1 digested step"
    assert GradParity("eager", (aot,)).summary() == "gradients: the 2 modes agree on all 4 parameters at 1 digested step"

def test_one_mode_of_a_multi_rank_run_says_it_compares_its_ranks_not_modes():
    """An HF Trainer job under torchrun recorded in aot alone: the only pair is rank 1 against rank 0,
    and the summary read "gradients: nothing compared (aot rank1 agrees with aot rank0 on all ...)"."""
    from cagtool.report.compare.grad_parity import GradParity

    base = step_digests(grads(6, SHAPES))
    ranks = compare_digests("aot rank1", "aot rank0", {0: base}, {0: base}, GradTolerance(), across_ranks=True)
    assert GradParity("aot rank0", (ranks,)).summary() == (
        "gradients: nothing to compare across modes (only aot recorded); its 2 ranks agree on all 4 parameters at 1 digested step")
    zeros = step_digests({name: [0.0] * n for name, n in SHAPES.items()})
    zero = compare_digests("aot rank1", "aot rank0", {0: zeros}, {0: zeros}, GradTolerance(), across_ranks=True)
    assert GradParity("aot rank0", (zero,)).summary() == (
        "gradients: nothing to compare across modes (only aot recorded); its 2 ranks: every gradient compared is zero "
        "(4 parameters at 1 digested step)")


def test_random_ops_in_several_modes_graphs_are_one_reason_said_once_naming_each_mode():
    """pytorch/examples' mnist with torch.compile on Inductor: dropout in aot's and in ca's compiled
    graphs. The summary held both pairs' reasons in full ("nothing compared (aot vs eager: not
    comparable: random ops ...; ca vs eager: not comparable: random ops ...)") and each pair's line
    said it again below. Now one reason names every mode that drew them (across ranks too), and
    no pair line repeats it; reasons that differ otherwise are still each said."""
    from dataclasses import replace

    from cagtool.report.compare.grad_parity import GradParity, _random_ops_reason
    from cagtool.report.compare.render import grad_parity_lines

    base = step_digests(grads(7, SHAPES))
    pairs = []
    for record, ops in (("aot rank0", ("dropout", "inductor_seeds")), ("aot rank1", ("dropout", "inductor_seeds")),
                        ("ca rank0", ("inductor_random", "dropout")), ("ca rank1", ("dropout",))):
        pair = compare_digests(record, record.replace(record.split(" ")[0], "eager"), {0: base}, {0: base}, GradTolerance())
        pairs.append(replace(pair, not_comparable=_random_ops_reason([record], list(ops)), random_ops=(record, ops)))
    assert pairs[0].not_comparable.startswith("random ops (dropout, inductor_seeds) in aot rank0's compiled graphs draw other")
    parity = GradParity("eager rank0", tuple(pairs))
    lines = [line for line, _ in grad_parity_lines(parity)]
    assert lines == ["gradients: nothing compared (aot rank0 vs eager rank0, aot rank1 vs eager rank1, ca rank0 vs eager rank0, "
                     "ca rank1 vs eager rank1): not comparable: random ops (dropout, inductor_seeds, inductor_random) in aot's and "
                     "ca's compiled graphs draw other numbers than eager; rerun with cagtool run --parity "
                     "(torch._inductor.config.fallback_random) to compare gradients"], lines
    other = (pairs[0], replace(pairs[2], not_comparable="inputs differ", random_ops=None))
    lines = [line for line, _ in grad_parity_lines(GradParity("eager rank0", other))]
    assert lines[0] == "gradients: nothing compared (aot rank0 vs eager rank0, ca rank0 vs eager rank0): none comparable, each for the reason below"
    assert len(lines) == 3 and lines[1].startswith("  aot rank0 vs eager rank0: not comparable: random ops") and lines[2] == (
        "  ca rank0 vs eager rank0: not comparable: inputs differ"), lines

def test_a_parameter_only_one_sides_end_of_run_digest_holds_is_not_a_missing_gradient():
    """At a step both sides digested only at the run's end, the parameters are those cagtool chose
    there: before it chose the live optimizers', the ones of the steps digested earlier, which
    differ by mode (ca digests its recapture step, layer-wise training's second layer, alone). A
    parameter only one side holds there is not compared; at any other step it is a missing gradient."""
    first = step_digests(grads(1, {"0.weight": 6, "0.bias": 2}))
    both = step_digests(grads(2, {"0.weight": 6, "0.bias": 2, "1.weight": 4, "1.bias": 2}))
    only_first = {name: d for name, d in both.items() if name.startswith("0.")}
    got, ref = {0: first, 23: both}, {0: first, 23: only_first}
    at_end = compare_digests("ca", "eager", *held_by_both(got, ref, {23}), GradTolerance())
    assert at_end.agrees and at_end.steps == (0, 23) and at_end.params == 2
    anywhere = compare_digests("ca", "eager", got, ref, GradTolerance())
    assert not anywhere.agrees and {m.kind for m in anywhere.first_bad} == {MISSING} and anywhere.first_bad_step == 23


def test_parameters_without_a_gradient_on_either_side_are_not_counted_as_agreeing():
    """A frozen parameter handed to the optimizer (or one the loss does not reach) has no gradient
    in any mode: "agree on all 6 parameters" counted it. It is left out of the count and said apart;
    where no parameter has a gradient, nothing is compared and the gate cannot pass on it."""
    from cagtool.report.compare.grad_parity import GradParity

    none = Digest(None, None, None, "float32", 16)
    base = {**step_digests(grads(3, SHAPES)), "frozen.weight": none, "frozen.bias": none}
    pair = compare_digests("ca", "eager", {0: base, 4: base}, {0: base, 4: base}, GradTolerance())
    assert pair.agrees and (pair.params, pair.gradless, pair.compared) == (4, 2, 8)
    assert "on all 4 parameters at 2 digested steps (steps 0, 4; worst 0x the tolerance; 2 more parameters have no gradient on either side)" in pair.verdict()
    said = GradParity("eager", (pair,)).summary()
    assert said == "gradients: the 2 modes agree on all 4 parameters at 2 digested steps (2 more parameters without a gradient in any mode)"
    # one side has a gradient the other has not: still a missing gradient, counted
    one_side = {**base, "frozen.bias": step_digests(grads(4, {"frozen.bias": 16}))["frozen.bias"]}
    missing = compare_digests("ca", "eager", {0: one_side}, {0: base}, GradTolerance())
    assert not missing.agrees and [m.kind for m in missing.first_bad] == [MISSING] and (missing.params, missing.gradless) == (5, 1)
    # no parameter has a gradient anywhere: nothing compared, not "agree on all 0 parameters"
    nothing = {name: none for name in base}
    empty = compare_digests("ca", "eager", {0: nothing}, {0: nothing}, GradTolerance())
    assert empty.all_zero and (empty.params, empty.gradless) == (0, 6)
    assert GradParity("eager", (empty,)).summary() == (
        "gradients: ca vs eager: no parameter has a gradient on either side (6 parameters at 1 digested step): nothing to compare "
        "(the loss does not reach the parameters, or they were digested after the job set their gradients to None)")
