"""Gradient parity end to end: `cagtool run` records digests in every mode, `compare` names the
first bad step and parameter of real compile-dependent mismatches (tests/scripts/grad_mismatch.py:
the script behaves differently under torch.compile, as hooks and branches on is_compiling() do),
`gate --max-grad-diff` fails on them, and jobs whose modes agree read as agreeing."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, cagtool_in_process

MISMATCH = str(ROOT / "tests" / "scripts" / "grad_mismatch.py")
DROPOUT = str(ROOT / "tests" / "scripts" / "dropout_train.py")

pytestmark = pytest.mark.slow  # every test records a real job


def cagtool(*args: str) -> subprocess.CompletedProcess:
    return cagtool_in_process(*args, env={"CI": "true", "COLUMNS": "200"})


def parity_json(run) -> dict:
    proc = cagtool("compare", str(run.path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def pair(data: dict, record: str) -> dict:
    return next(p for p in data["grad_parity"]["pairs"] if p["record"] == record)


def test_hooks_that_scale_or_zero_only_under_compiled_autograd_are_named_at_step_0(record_run):
    """One job, two compile-only hooks: head.weight's gradient doubled and head.bias's zeroed under
    compiled autograd (ca mode); in eager and aot the hooks run eagerly and change nothing. Each
    parameter is named at step 0 with its own kind of mismatch."""
    run = record_run(MISMATCH, "--kind", "scale_and_zero", modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    assert pair(data, "aot")["agrees"]
    ca = pair(data, "ca")
    assert ca["first_bad_step"] == 0
    assert [(m["name"], m["kind"]) for m in ca["first_bad"]] == [("head.weight", "scale"), ("head.bias", "zero")]
    assert ca["first_bad"][0]["ratio"] == pytest.approx(2.0, rel=1e-4)
    text = cagtool("compare", str(run.path)).stdout
    assert "ca differs from eager first at step 0, in 2 of 6 parameters (head.weight, head.bias)" in text
    assert "head.weight: scaled by 2" in text
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path))
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "max-grad-diff" in gate.stdout and "head.weight" in gate.stdout and "head.bias" in gate.stdout


def test_swapped_gradients_that_cancel_in_the_global_norm_are_named(record_run):
    run = record_run(MISMATCH, "--kind", "swap", modes="eager,aot")
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    # The loss and the global norms agree: only the per-parameter digests see it, and the summary's
    # first line says so rather than "numerics agree".
    assert data["numerics"]["agree"]
    first = " ".join(cagtool("summary", str(run.path)).stdout.split("\ncagtool run ")[0].split())  # the headline, however wrapped
    assert "losses agree but gradients DIFFER: aot from eager first at step 0, in 4 of 6 parameters" in first, first
    assert "numerics agree" not in first
    aot = pair(data, "aot")
    assert aot["first_bad_step"] == 0
    swapped = {(m["name"], m["other"]) for m in aot["first_bad"] if m["kind"] == "swapped"}
    assert ("left.weight", "right.weight") in swapped and ("right.weight", "left.weight") in swapped


def test_seeded_job_with_gradient_accumulation_agrees_in_every_mode(record_run):
    run = record_run("grad_accumulation.py", "--steps", "4", modes="eager,aot,ca", extra=("--parity-every", "1"))
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    parity = data["grad_parity"]
    assert parity["agree"], parity
    assert parity["summary"] == "gradients: the 3 modes agree on all 4 parameters at 4 digested steps"
    assert all(p["steps"] == [0, 1, 2, 3] for p in parity["pairs"])
    assert not [p for p in data["problems"] if p.startswith("gradients")]
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path))
    assert gate.returncode == 0, gate.stdout + gate.stderr
    # Why each step was digested: the compiled modes' first step compiled, the later modes also
    # digest what an earlier one did, the last step is marked.
    reasons = {mode: {e["step"]: e["reasons"] for e in map(json.loads, (run.path / mode / "events.jsonl").read_text().splitlines())
                      if e["kind"] == "grad_digest"} for mode in ("eager", "aot", "ca")}
    assert reasons["eager"][0] == ["first", "every"] and "last" in reasons["eager"][3]
    assert "recompile" in reasons["ca"][0] and "earlier_mode" in reasons["ca"][2]


def test_dropout_drawn_alike_agrees(record_run):
    """aot_eager runs the forward's aten.native_dropout on the same seeded generator as eager: the
    masks are the same, and so are the gradients (random ops in the graph are no alarm then)."""
    run = record_run(DROPOUT, "--backend", "aot_eager", modes="eager,aot")
    assert run.returncode == 0, run.stderr
    aot = pair(parity_json(run), "aot")
    assert aot["agrees"] and not aot["not_comparable"] and aot["steps"] == [0, 2]


def test_dropout_under_aot_eager_is_never_blamed_for_inputs_that_differ(record_run):
    """minGPT's shape: inputs that differ per process (here os.urandom; there Python's hash
    randomization) and dropout compiled with aot_eager, whose masks are eager's. Not comparable
    for the inputs, with PYTHONHASHSEED named; never "random ops draw other numbers" nor --parity,
    an Inductor setting that cannot change an aot_eager job."""
    run = record_run(DROPOUT, "--backend", "aot_eager", "--unseeded-input", modes="eager,aot")
    assert run.returncode == 0, run.stderr
    aot = pair(parity_json(run), "aot")
    why = aot["not_comparable"]
    assert why.startswith("inputs differ: the first step's losses already differ"), why
    assert "PYTHONHASHSEED=0" in why and "random ops" not in why and "--parity" not in why, why


def test_inductor_dropout_is_not_comparable_without_parity_and_agrees_with_it(record_run):
    # The forward's random ops are found in its compile's AOT forward graph, a compile artifact
    # recorded by default (they were looked for only in the CA graphs' code and a TORCH_TRACE log:
    # HF Trainer's BERT on Inductor read "aot differs from eager" on its dropout, and failed the gate).
    # --warm-cache: both recordings compile into the session's Inductor cache, so the second
    # (fallback_random: a new forward) reuses the first's backward kernel and CPU checks. This
    # one is cold all the same: no other test compiles this model with Inductor.
    run = record_run(DROPOUT, "--backend", "inductor", modes="eager,aot", extra=("--warm-cache",))
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    aot = pair(data, "aot")
    assert aot["not_comparable"] and "random ops" in aot["not_comparable"] and "--parity" in aot["not_comparable"]
    assert aot["agrees"] and not [p for p in data["problems"] if p.startswith("gradients")]
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path))
    assert gate.returncode == 1 and "cannot check" in gate.stdout
    # The losses' numerics say the same cause, never "inputs differ (unseeded?)" of a seeded job.
    summary = " ".join(cagtool("summary", str(run.path)).stdout.split())
    assert "unseeded?" not in summary and "random ops differ (--parity)" in summary, summary
    assert "Numerics: not comparable: aot's first-step loss already differs from eager's" in summary, summary

    run = record_run(DROPOUT, "--backend", "inductor", modes="eager,aot", extra=("--parity", "--warm-cache"))
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    aot = pair(data, "aot")
    assert aot["agrees"] and not aot["not_comparable"] and aot["first_bad_step"] is None
    assert data["grad_parity"]["summary"] == "gradients: the 2 modes agree on all 4 parameters at 2 digested steps"


def test_ddp_ranks_compared_per_rank_and_an_unsynchronised_parameter_named_across_ranks(ddp_unsynced_ragged):
    """A 2-rank DDP job (tests/scripts/ddp_unsynced_ragged.py) whose fc2.bias DDP leaves out of
    the all-reduce: each rank's modes agree, and across ranks that one parameter is named from
    step 0. (The job's ragged last batch is for test_verify_ddp.py, which reads the same record.)"""
    run = ddp_unsynced_ragged
    assert run.returncode == 0, run.stderr
    parity = parity_json(run)["grad_parity"]
    by_pair = {(p["record"], p["reference"]): p for p in parity["pairs"]}
    # Each rank's modes agree with each other...
    assert by_pair[("ca rank0", "eager rank0")]["agrees"] and by_pair[("ca rank1", "eager rank1")]["agrees"]
    # ...and in every mode rank 1's fc2.bias is its own from step 0: DDP left it out of the all-reduce.
    for mode in ("eager", "ca"):
        across = by_pair[(f"{mode} rank1", f"{mode} rank0")]
        assert across["across_ranks"] and across["first_bad_step"] == 0
        assert [m["name"] for m in across["first_bad"]] == ["module.fc2.bias"]
        assert "not synchronised across ranks" in across["verdict"]
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path))
    assert gate.returncode == 1 and "module.fc2.bias" in gate.stdout


NAN_LOSS = str(ROOT / "tests" / "scripts" / "nan_loss.py")
SPARSE = str(ROOT / "tests" / "scripts" / "sparse_embedding.py")


@pytest.mark.parametrize("from_step", ["0", "2"])
def test_nan_losses_are_said_per_mode_never_inputs_differ_or_a_disagreement(record_run, from_step):
    """A seeded job whose loss is NaN from step 0 (it read "inputs differ (unseeded?)") or step 2
    (it read "DISAGREE ... nan vs nan"), while the gradient line said the modes agree: the modes
    agree (they computed the same NaN), and where the NaN first appeared is said per mode, for the
    loss, the final norms and the gradients."""
    run = record_run(NAN_LOSS, "--from-step", from_step, modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr
    text = cagtool("compare", str(run.path)).stdout
    assert "inputs differ" not in text and "DISAGREE" not in text, text
    assert f"loss is NaN from step {from_step} in eager, aot and ca" in text
    data = parity_json(run)
    assert f"loss is NaN from step {from_step} in eager, aot and ca" in data["numerics"]["notes"]
    nonfinite = data["grad_parity"]["nonfinite"]
    assert nonfinite and all("NaN from step" in line and "(weight, bias)" in line for line in nonfinite)
    assert "eager" in " ".join(nonfinite) and "ca" in " ".join(nonfinite)
    assert "not finite: NaN from step" in text


def test_sparse_gradients_are_compared_and_same_named_parameters_kept_apart(record_run):
    """nn.Embedding(sparse=True) beside a dense head: all 3 parameters are digested and compared
    (the embedding's was left out, and the head's "weight" hid it under the same name)."""
    run = record_run(SPARSE, modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    assert data["grad_parity"]["summary"].startswith("gradients: the 3 modes agree on all 3 parameters"), data["grad_parity"]["summary"]
    ca = pair(data, "ca")
    assert ca["params"] == 3 and ca["first_bad_step"] is None


CLOSURE_STEP = str(ROOT / "tests" / "scripts" / "closure_step.py")


def test_a_step_given_a_closure_is_digested_after_the_closure_made_its_gradients(record_run):
    """`opt.step(closure)` (Lightning's automatic optimization): the step's zero_grad, forward and
    backward run inside step(), so at its pre-hook the gradients are the previous step's (None at
    step 0). Each digest is of its own step's gradients: step 0's are real numbers, the compile
    inside the closure makes step 0 a recompile step, and the ca mode's digest of the last step
    equals eager's, both read from the gradients still held at the end (it once read the step
    before's, and the modes seemed to differ at the last step)."""
    run = record_run(CLOSURE_STEP, "--steps", "4", modes="eager,ca")
    assert run.returncode == 0, run.stderr
    digests = {mode: {e["step"]: e for e in map(json.loads, (run.path / mode / "events.jsonl").read_text().splitlines()) if e["kind"] == "grad_digest"}
               for mode in ("eager", "ca")}
    for mode in ("eager", "ca"):
        assert all(norm is not None and norm > 0 for norm in digests[mode][0]["norm"]), digests[mode][0]
    assert "recompile" in digests["ca"][0]["reasons"]
    # Both modes digest the last step at the run's end, the same moment (a later mode no longer takes
    # an earlier mode's end digest in its pre-hook).
    assert digests["eager"][3]["reasons"] == ["last"] == digests["ca"][3]["reasons"]
    assert digests["ca"][3]["norm"] == pytest.approx(digests["eager"][3]["norm"], rel=1e-5)
    parity = parity_json(run)["grad_parity"]
    assert parity["agree"], parity
    assert parity["summary"] == "gradients: the 2 modes agree on all 4 parameters at 2 digested steps"


def test_a_last_step_digested_at_the_end_is_compared_at_the_same_moment_in_every_mode(record_run):
    """The job zeroes its gradients in place after its last step. Eager digests step 3 at the run's
    end (the last step, not due before): zeros. The next mode digests its own last step at its end
    too, not in its optimizer's pre-hook (the real gradients), so the modes agree where they did."""
    run = record_run("../tests/scripts/final_zero_grad.py", modes="eager,ca")
    assert run.returncode == 0, run.stderr
    reasons = {mode: {e["step"]: e["reasons"] for e in map(json.loads, (run.path / mode / "events.jsonl").read_text().splitlines())
                      if e["kind"] == "grad_digest"} for mode in ("eager", "ca")}
    assert reasons["eager"][3] == ["last"] and reasons["ca"][3] == ["last"]
    parity = parity_json(run)["grad_parity"]
    assert parity["agree"] and parity["pairs"][0]["steps"] == [0, 3], parity


def test_an_optimizer_compiled_beside_one_stepped_eagerly_is_not_named_missing(record_run):
    """The critic's optimizer steps inside compiled code, the generator's eagerly: in aot the
    critic's parameters are never digested (no hook sees its step; the generator's closes the
    steps), which is the recorder's blindness, not a gradient missing: the parameters both sides
    hold are compared, and agree; the gate passes."""
    run = record_run("../tests/scripts/gan_one_step_compiled.py", modes="eager,aot")
    assert run.returncode == 0, run.stderr
    parity = parity_json(run)["grad_parity"]
    assert parity["agree"], parity
    gate = cagtool("gate", str(run.path), "--max-grad-diff", "1", "--no-config")
    assert gate.returncode == 0, gate.stdout


CHAOTIC = str(ROOT / "tests" / "scripts" / "chaotic_lstm.py")


def test_a_hook_that_is_wrong_only_under_compiled_autograd_from_step_30_is_not_drift(record_run):
    """The modes agree bit for bit for 31 steps and the step-0 gradients agree; then a hook
    registered at step 30 doubles head.weight's gradient under compiled autograd only. The losses
    jump from equal to 1e-2 apart in one step: DISAGREE, named at that step (it read "drift apart:
    round-off amplified by training, not wrong gradients"), and the gate fails."""
    run = record_run(MISMATCH, "--kind", "late_scale_hook", "--steps", "40", modes="eager,ca")
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    assert data["numerics"]["disagree"] and not data["numerics"]["drift"]
    assert "numerics DISAGREE (the losses of ca jump apart at step 31)" in data["headline"]["text"]
    [loss] = [d for d in data["numerics"]["diffs"] if d["quantity"] == "loss"]
    assert loss["jumped_at"] == 31
    assert loss["note"].startswith("losses agree bit for bit for the first 31 steps, then differ by ") and \
        "at step 31" in loss["note"] and "a change at step 31, not round-off amplified by training" in loss["note"]
    # the new graph the hook made, captured at step 30, is named
    assert loss["note"].endswith("; ca compiled at step 30 (!1): the first place to look (`cagtool diff-graphs`, `cagtool compile`)")
    ca = pair(data, "ca")
    assert not ca["agrees"] and not ca["drifted"]
    text = " ".join(cagtool("compare", str(run.path)).stdout.split())
    assert "drift" not in text and "a change at step 31" in text
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path))
    assert gate.returncode == 1, gate.stdout + gate.stderr
    # a speed gate between the two modes says it times two different computations
    speed = cagtool("gate", "--no-config", "--min-speedup", "ca/eager:0.01", str(run.path))
    assert ("warning: numerics of ca DISAGREE with eager (its losses jump apart at step 31): min-speedup (ca/eager) times two "
            "different computations") in " ".join(speed.stdout.split()), speed.stdout


def test_a_job_that_parts_from_eager_too_soon_to_call_drift_is_told_how_to_rule_inductor_out(record_run):
    """tests/scripts/chaotic_lstm.py at lr 80 (word_language_model's shape at a learning rate that
    parts the losses within 20 steps): the ca mode on Inductor leaves eager's losses by round-off
    after ~13 steps, growing, no jump, and differs beyond the tolerance soon after. Too few steps
    for the drift rule: it stays DISAGREE, and compare says what the losses show and how to tell
    Inductor's rounding from compiled autograd: the same job on `--backend eager`, which here
    matches eager bit for bit (the claim the words make, checked)."""
    run = record_run(CHAOTIC, "--kind", "plain", "--lr", "80", "--steps", "40", modes="eager,ca", backend="inductor")
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    assert data["numerics"]["disagree"] and not data["numerics"]["drift"]
    [loss] = [d for d in data["numerics"]["diffs"] if d["quantity"] == "loss"]
    note = loss["note"]
    assert note.startswith("ca's losses agree with eager's to ") and " (no jump), beyond the tolerance from step " in note, note
    tight = int(note.split(" for the first ")[1].split(" ")[0])
    assert 2 <= tight < 20 and f"but {tight} steps are fewer than the 20 that tell it from an error" in note, note
    assert loss["parts_growing_from"] == tight and loss["jumped_at"] is None
    assert (f"numerics DISAGREE (the losses of ca part growing from step {tight}, not at a jump: `cagtool compare` says how "
            "to rule out Inductor's rounding)") in data["headline"]["text"]
    assert "To tell, record it without Inductor: cagtool run --modes eager,ca --backend eager, the same script and arguments" in note
    text = " ".join(cagtool("compare", str(run.path)).stdout.split())
    assert f"note: {note}" in text and "Numerics DISAGREE with eager" in text
    # The last step's gradients differ, of weights the parted losses show apart: counted, but said as
    # such (the step-0 digest agrees), and no swap, scale or sign read into them.
    ca = pair(data, "ca")
    parted = int(note.split(" beyond the tolerance from step ")[1].split(":")[0])
    assert not ca["agrees"] and ca["first_bad_step"] > parted and ca["after_parting"] == parted, ca
    assert {m["kind"] for m in ca["first_bad"]} <= {"differs"}, ca["first_bad"]
    assert (f"that step comes after the losses parted (beyond rtol 0.001 from step {parted}): gradients of parameters that had "
            f"already moved apart") in ca["verdict"] and f"the difference began after step 0 and by step {parted}" in ca["verdict"]
    without = record_run(CHAOTIC, "--kind", "plain", "--lr", "80", "--steps", "40", modes="eager,ca", backend="eager")
    assert without.returncode == 0, without.stderr
    numerics = parity_json(without)["numerics"]
    assert numerics["agree"] and numerics["max_rel_diff"] == 0, numerics
    # a job wrong from its first backward on Inductor (losses apart at a jump) is not told it may be rounding
    wrong = record_run(CHAOTIC, "--kind", "wrong_hook", "--steps", "30", modes="eager,ca", backend="inductor")
    assert wrong.returncode == 0, wrong.stderr
    data = parity_json(wrong)
    assert data["numerics"]["disagree"] and pair(data, "ca")["first_bad_step"] == 0 and pair(data, "ca")["after_parting"] is None
    assert not [d for d in data["numerics"]["diffs"] if "without Inductor" in d.get("note", "") or d["parts_growing_from"] is not None]
    assert "rule out Inductor's rounding" not in data["headline"]["text"]


def test_a_chaotic_backward_only_job_drifts_and_a_wrong_hook_in_it_disagrees(record_run):
    """word_language_model's shape, small (tests/scripts/chaotic_lstm.py: no optimizer, lr 35, the
    model rebound before the end). `--kind drift`: the ca mode's losses equal eager's to round-off
    for ~40 steps and part beyond 1e-3 later; its step-0 gradients, digested where the backward
    returned and named by module path, agree: drift in every place that says it, never DISAGREE.
    `--kind wrong_hook`: the same job with a hook that scales head.weight's gradient only under
    compiled autograd: DISAGREE, head.weight named at step 0."""
    run = record_run(CHAOTIC, "--kind", "drift", modes="eager,ca")
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    words = data["numerics"]["drift"]["ca"]
    assert words.startswith("losses agree to ") and words.endswith(
        "then drift apart: round-off amplified by training, not wrong gradients; the step-0 gradients agree on all 7 parameters"), words
    assert not data["numerics"]["disagree"] and data["headline"]["text"].count(words) == 1 and "DISAGREE" not in data["headline"]["text"]
    ca = pair(data, "ca")
    assert ca["agrees"] and ca["steps"][0] == 0 and ca["params"] == 7
    digests = [json.loads(line) for line in (run.path / "ca" / "events.jsonl").read_text().splitlines() if '"grad_digest"' in line]
    assert digests[0]["step"] == 0 and digests[0]["names"] == ["encoder.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0",
                                                               "rnn.bias_ih_l0", "rnn.bias_hh_l0", "head.weight", "head.bias"]
    text = " ".join(cagtool("compare", str(run.path)).stdout.split())  # the console wraps long lines
    assert f"Numerics: ca drifts from eager beyond rtol 0.001, atol 1e-06: {words}" in text and "DISAGREE" not in text
    assert "not a verdict: its numerics differ" not in text and " drifts │" in text
    summary = " ".join(cagtool("summary", str(run.path)).stdout.split())
    assert f"numerics of ca drift from eager: {words}" in summary and "DISAGREE" not in summary
    assert f"numerics of ca drift from eager: {words}" in " ".join((run.path / "report.html").read_text().split())
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path))
    assert gate.returncode == 0, gate.stdout + gate.stderr

    wrong = record_run(CHAOTIC, "--kind", "wrong_hook", "--steps", "30", modes="eager,ca")
    assert wrong.returncode == 0, wrong.stderr
    data = parity_json(wrong)
    assert data["numerics"]["disagree"] and not data["numerics"]["drift"] and "numerics DISAGREE" in data["headline"]["text"]
    ca = pair(data, "ca")
    assert ca["first_bad_step"] == 0 and [(m["name"], m["kind"]) for m in ca["first_bad"]] == [("head.weight", "scale")]
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(wrong.path))
    assert gate.returncode == 1 and "head.weight" in gate.stdout


AUTOCAST = str(ROOT / "tests" / "scripts" / "autocast_bf16.py")


def test_a_job_under_bf16_autocast_is_held_to_bf16_rounding_and_a_real_difference_still_fails(record_run):
    """An ordinary job under CPU bfloat16 autocast, its forward compiled with Inductor: the
    gradients of its float32 parameters differ from eager's by bfloat16's rounding (up to 4x the
    float32 tolerance on a transformer), and `gate --max-grad-diff` failed the job. The compiled
    graphs compute in bfloat16, so each pair is held to that precision; a compiled program whose
    fc2.weight gradient is 1.02x eager's still fails, named at step 0. (--warm-cache: the modes
    and both recordings compile this model's kernels into the session's Inductor cache once; no
    compile time is read here.)"""
    run = record_run(AUTOCAST, modes="eager,aot,ca", extra=("--warm-cache",))
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    for mode in ("aot", "ca"):
        held = pair(data, mode)
        assert held["agrees"] and held["compute_dtype"] == "bfloat16", held
    assert data["grad_parity"]["summary"].endswith("(at bfloat16's precision, which the compiled graphs compute in)")
    assert cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path)).returncode == 0
    wrong = record_run(AUTOCAST, "--wrong", modes="eager,aot", extra=("--warm-cache",))
    assert wrong.returncode == 0, wrong.stderr
    aot = pair(parity_json(wrong), "aot")
    assert not aot["agrees"] and aot["compute_dtype"] == "bfloat16" and aot["first_bad_step"] == 0
    assert [(m["name"], m["kind"]) for m in aot["first_bad"]] == [("fc2.weight", "scale")]
    assert aot["first_bad"][0]["ratio"] == pytest.approx(1.02, rel=2e-3)
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(wrong.path))
    assert gate.returncode == 1 and "fc2.weight" in gate.stdout


def test_a_ca_over_aot_ratio_whose_backwards_two_compilers_compiled_says_so(record_run):
    """The aot mode's backward is Inductor's (the script's torch.compile), the ca mode's CA graph
    ran on cagtool's --backend eager: the ca/aot ratio compares compilers as well as compiled
    autograd, and compare's headline and note and the gate's min-speedup say so; where neither
    backward ran on Inductor, nothing is said."""
    run = record_run(AUTOCAST, modes="eager,aot,ca", extra=("--warm-cache",))  # the recording of the test above
    assert run.returncode == 0, run.stderr
    speedups = parity_json(run)["speedups"]
    assert speedups["ca/aot"]["compilers"] == {"ca": "eager", "aot": "Inductor"} and speedups["ca/eager"]["compilers"] is None
    assert "(its backward compiled by eager, aot's by Inductor: compilers differ)" in cagtool("compare", str(run.path)).stdout
    gate = cagtool("gate", "--no-config", "--min-speedup", "ca/aot:0.01", str(run.path))
    assert "warning: min-speedup (ca/aot): the ca mode's backward was compiled by eager, the aot mode's by Inductor (the script's torch.compile)" in gate.stdout + gate.stderr
    like = record_run(AUTOCAST, "--backend", "aot_eager", "--steps", "3", modes="aot,ca")
    assert like.returncode == 0, like.stderr
    assert parity_json(like)["speedups"]["ca/aot"]["compilers"] is None  # neither backward on Inductor


def test_a_multi_rank_jobs_ca_mode_that_trains_otherwise_is_warned_of_by_the_speed_gate(record_run):
    """A 2-rank DDP job whose ca mode doubles a gradient (a hook traced only under compile): the
    gate's min-speedup warns that it times two different computations, as for one process; it read
    the launcher's record, which has no losses, and said nothing. --max-grad-diff fails on it."""
    run = record_run(str(ROOT / "tests" / "scripts" / "ddp_compile_only_hook.py"), modes="eager,ca")
    assert run.returncode == 0, run.stderr
    gate = cagtool("gate", "--no-config", "--min-speedup", "ca/eager:0.01", str(run.path))
    assert ("warning: numerics of ca DISAGREE with eager: min-speedup (ca/eager) times two different computations"
            in gate.stdout + gate.stderr), gate.stdout + gate.stderr
    grads = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path))
    assert grads.returncode == 1 and "FAIL: max-grad-diff" in grads.stdout and "weight" in grads.stdout, grads.stdout


def test_layerwise_training_with_a_recapture_in_ca_alone_agrees_at_the_runs_end(record_run):
    """pytorch/examples' mnist_forward_forward: one optimizer per layer, the layers trained in turn.
    ca recaptures at the second layer's first step and digests it; eager does not. The run's last
    step was digested of the parameters of the steps digested before, so ca's held both layers' and
    eager's the first's: "ca differs from eager ... weight (2): no gradient in the reference", and
    the gate failed. It is digested of the live optimizers' parameters, alike in every mode."""
    run = record_run(str(ROOT / "tests" / "scripts" / "layerwise_training.py"), modes="eager,ca")
    assert run.returncode == 0, run.stderr
    digests = {mode: {e["step"]: e for e in map(json.loads, (run.path / mode / "events.jsonl").read_text().splitlines())
                      if e["kind"] == "grad_digest"} for mode in ("eager", "ca")}
    assert 12 in digests["ca"] and 12 not in digests["eager"]  # the recapture step, digested in ca alone
    assert digests["ca"][23]["reasons"] == digests["eager"][23]["reasons"] == ["last"]
    assert digests["ca"][23]["numels"] == digests["eager"][23]["numels"] == [96, 8, 48, 6]
    parity = parity_json(run)["grad_parity"]
    assert parity["agree"] and parity["summary"] == "gradients: the 2 modes agree on all 4 parameters at 2 digested steps", parity
    gate = cagtool("gate", "--no-config", "--max-grad-diff", "1", str(run.path))
    assert gate.returncode == 0, gate.stdout + gate.stderr


def test_frozen_parameters_in_the_optimizer_are_not_counted_as_agreeing(record_run):
    """A frozen layer's two parameters, handed to the optimizer, have no gradient in either mode:
    they were counted in "agree on all 6 parameters"; they are said apart."""
    run = record_run(str(ROOT / "tests" / "scripts" / "frozen_in_optimizer.py"), modes="eager,ca")
    assert run.returncode == 0, run.stderr
    data = parity_json(run)
    ca = pair(data, "ca")
    assert ca["agrees"] and (ca["params"], ca["params_without_gradient"]) == (4, 2)
    assert data["grad_parity"]["summary"].startswith(
        "gradients: the 2 modes agree on all 4 parameters at ") and data["grad_parity"]["summary"].endswith(
        "(2 more parameters without a gradient in any mode)")


def test_a_last_step_one_mode_digested_during_the_run_and_another_at_its_end_is_compared_where_the_gradients_held(record_run):
    """tests/scripts/last_batch_at_end.py: ca digests the last step (its short batch, a capture) in its
    optimizer's pre-hook, eager at the run's end. The gradients were still the step's at the end (ca
    digested them again there: the same numbers), so the step is compared, not left out as two moments."""
    run = record_run(str(ROOT / "tests" / "scripts" / "last_batch_at_end.py"), modes="eager,ca")
    assert run.returncode == 0, run.stderr[-2000:]
    reasons = {mode: {e["step"]: e["reasons"] for e in map(json.loads, (run.path / mode / "events.jsonl").read_text().splitlines())
                      if e.get("kind") == "grad_digest"} for mode in ("eager", "ca")}
    assert reasons["eager"][2] == ["last"] and reasons["ca"][2] == ["recompile", "last", "same_at_end"], reasons
    ca = pair(parity_json(run), "ca")
    assert ca["agrees"] and ca["steps"] == [0, 2], ca
    text = cagtool("compare", str(run.path)).stdout
    assert "at 2 digested steps (steps 0, 2;" in text and "not compared with eager" not in text, text
