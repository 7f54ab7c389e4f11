"""Each Dynamo recompile's class comes from torch's own guard text, and its words and fixes fit
it, on the shapes ordinary training scripts have (one recording per sample script, shared by the
session): a hook that appends to a list (compiled autograd traces it), a backbone unfrozen
mid-run, an evaluation under no_grad, a DataLoader's smaller last batch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.report.compare.headline import cause_phrase
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_CA_GRAPH, CAUSE_DYNAMO_FRAME, CAUSE_SHAPES, Explanation, cause_words, explain
from cagtool.report.recompiles.render import table_cells
from cagtool.report.recompiles.table import recompile_table
from cagtool.report.recompiles.unexpected import unexpected_lines
from cagtool.torch_text import GUARD_GRAD_MODE, GUARD_LENGTH, GUARD_REQUIRES_GRAD, GUARD_SIZE
from cagtool.verify.fixes import fixes_for
from cagtool.verify.patches import patch_for

pytestmark = pytest.mark.slow  # each script is one `cagtool run` the first time a test asks


def _explained(record_run, script: str, *args: str) -> tuple[Explanation, str]:
    run = record_run(script, *args)
    assert run.returncode == 0, run.stderr[-2000:]
    table = recompile_table(load_run(run.path).modes["ca"])
    return explain(table), table.cwd


def _unexpected_text(path: Path) -> str:
    """The ca mode's lines of causes one may not expect, as the report's page and `summary` list them
    (`recompiles --explain` says each in its numbered block instead), whitespace joined."""
    table = recompile_table(load_run(path).modes["ca"])
    return " ".join(" ".join(unexpected_lines(table.unexpected, table.cwd)).split())


def _all_words(explanation: Explanation, cwd: str) -> list[tuple[str, str, str]]:
    """(title, why, fixes) of every cause, each joined."""
    out = []
    for cause in explanation.causes:
        words = cause_words(cause, cwd)
        out.append((words.title, " ".join(words.why), " ".join(words.fix)))
    return out


def test_a_hook_appending_to_a_list_is_a_hook_recompiled_on_the_list_length(record_run):
    explanation, cwd = _explained(record_run, "grad_norm_hook.py")
    [cause] = explanation.causes
    assert cause.code == CAUSE_DYNAMO_CA_GRAPH and cause.count == 8
    assert cause.facts["kind"] == GUARD_LENGTH and cause.facts["hook"] and cause.facts["function"] == "<lambda>"
    assert cause.facts["container"] == "grad_norms"
    [(title, why, fixes)] = _all_words(explanation, cwd)
    # torch's own words: "Recompiling function <lambda> in grad_norm_hook.py:21"
    assert title.startswith("Dynamo recompiled the backward hook `<lambda>` (sample_scripts/grad_norm_hook.py:21)"), title
    assert "the length of `grad_norms` changed" in title
    assert "Compiled autograd traces backward hooks" in why and "`.item()` is a graph break" in why
    assert "torch._dynamo.disable" in fixes and "logits.retain_grad()" in fixes and "buf.copy_(g.norm())" in fixes
    # Not a size: no dynamic-shape advice, and no size fix for --verify to measure.
    assert "dynamic" not in fixes.replace("torch._dynamo.disable", "") and "Keep the guarded value" not in fixes
    assert fixes_for(explanation) == []
    assert cause_phrase(cause).startswith("the length of `grad_norms` changed in the backward hook `<lambda>` at steps 1-8")
    meta = load_run(record_run("grad_norm_hook.py").path).meta
    patch = patch_for(cause, os.path.join(meta.cwd, meta.target["name"]), meta.target["name"], Path(meta.cwd, meta.target["name"]).read_bytes())
    assert patch is not None and patch.name == "hook-dynamo-disable" and patch.applicable, patch.why_not


def test_an_unfrozen_backbone_is_a_requires_grad_change_and_its_backward_goes_with_it(record_run):
    explanation, cwd = _explained(record_run, "unfreeze_backbone.py")
    root, follower = explanation.causes
    assert root.code == CAUSE_DYNAMO_FRAME and root.facts["kind"] == GUARD_REQUIRES_GRAD
    assert follower.caused_by == root.number and follower.facts["root_kind"] == GUARD_REQUIRES_GRAD
    (title, why, fixes), (f_title, f_why, f_fixes) = _all_words(explanation, cwd)
    assert "a parameter's requires_grad changed (unfrozen)" in title
    assert "once per set of trainable parameters" in why
    assert "Nothing to fix for an unfreeze" in fixes and "size" not in fixes and "mark_dynamic" not in fixes
    assert "every size" not in f_fixes and "Goes with #1" in f_fixes
    # The headline names the class, never torch's text cut mid-word.
    assert cause_phrase(root) == "a parameter's requires_grad changed (unfrozen) at step 3 (the compiled call at unfreeze_backbone.py:25)"
    assert fixes_for(explanation) == [] and patch_for(follower, None, None, None) is None
    meta = load_run(record_run("unfreeze_backbone.py").path).meta
    why_not = patch_for(root, os.path.join(meta.cwd, meta.target["name"]), meta.target["name"], Path(meta.cwd, meta.target["name"]).read_bytes()).why_not
    assert "a parameter's requires_grad changed (unfrozen)" in why_not and "size" not in why_not


def test_an_evaluation_under_no_grad_is_a_grad_mode_change_not_a_size(record_run):
    """One forward frame recompiled for two reasons, a smaller last batch then an evaluation under
    no_grad (a language model's loop): two causes, each with the words and fix of its own class."""
    explanation, cwd = _explained(record_run, "eval_no_grad.py")
    size, follower, grad_mode = explanation.causes
    assert size.facts["kind"] == GUARD_SIZE and follower.caused_by == size.number
    assert grad_mode.facts["kind"] == GUARD_GRAD_MODE and grad_mode.facts["guard"] == "GLOBAL_STATE changed: grad_mode"
    assert [f[0] for f in grad_mode.facts["failures"]] == ["0/2"] and grad_mode.caused_by is None
    title, why, fixes = _all_words(explanation, cwd)[2]
    assert "the grad mode changed (a call under torch.no_grad(), as in an evaluation)" in title
    assert "one compile per grad mode, not one per evaluation" in why
    assert fixes.startswith("Nothing to fix") and "model._orig_mod(held_out)" in fixes and "mark_dynamic" not in fixes  # the script's own call, without torch.compile
    # The size fixes answer the size cause only.
    assert {f.name: f.causes for f in fixes_for(explanation)}["dynamic-sources"] == (size.number,)
    line = cagtool_in_process("summary", str(record_run("eval_no_grad.py").path)).stdout.splitlines()[0]
    assert "from 2 causes (#1 and #3 in --explain; #2 follows from them): a smaller batch (a DataLoader's last?): the size of `args[0]` (dim 0) changed 16->8 at step 2" in line
    # the evaluation after the epoch's steps 0-2: stamped 3, before step 3's backward
    assert (f"and the grad mode changed (a call under torch.no_grad(), as in an evaluation) between steps 2 and 3 "
            f"(the compiled call at eval_no_grad.py:{_evaluation_line()})") in line


def _evaluation_line() -> int:
    """The line of eval_no_grad.py's evaluation after each epoch."""
    lines = (ROOT / "sample_scripts" / "eval_no_grad.py").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if "epoch {epoch}: held-out" in text)


def test_an_evaluation_outside_the_trainings_autocast_names_both_changes(record_run):
    """The same loop training under torch.autocast and evaluating outside it: torch's one guard names
    both (`GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled`), and so do the cause's title,
    its why, the unexpected-cause line and the summary's first line; the fix is the grad mode's."""
    explanation, cwd = _explained(record_run, "eval_no_grad.py", "--autocast")
    grad_mode = next(c for c in explanation.causes if c.facts.get("kind") == GUARD_GRAD_MODE)
    assert grad_mode.facts["guard"] == "GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled"
    title, why, fixes = _all_words(explanation, cwd)[explanation.causes.index(grad_mode)]
    assert title.endswith("the grad mode changed (a call under torch.no_grad(), as in an evaluation), and `autocast(cpu)_enabled` with it (1 recompile)")
    assert "one compile per grad mode" in why and "autocast was on around one of the two calls and off around the other" in why
    assert fixes.startswith("Nothing to fix") and "model._orig_mod(held_out)" in fixes
    run = record_run("eval_no_grad.py", "--autocast")
    assert ("(training, and an evaluation under torch.no_grad or torch.inference_mode, call the same compiled code) "
            "(`autocast(cpu)_enabled` changed with it)") in _unexpected_text(run.path)
    line = cagtool_in_process("summary", str(run.path)).stdout.splitlines()[0]
    assert f"and `autocast(cpu)_enabled` with it between steps 2 and 3 (the compiled call at eval_no_grad.py:{_evaluation_line()})" in line
    # Without autocast the same cause names the grad mode alone.
    plain, plain_cwd = _explained(record_run, "eval_no_grad.py")
    assert "autocast" not in " ".join(" ".join(w) for w in _all_words(plain, plain_cwd))


def test_an_eval_switch_with_grad_on_and_an_inference_mode_evaluation_are_named_as_what_they_are(record_run):
    """tests/scripts/train_eval_modes.py: a validation loss with the model switched to eval() and
    grad on recompiles on its Dropout's `training` flag, which is named as that module switched to
    eval() (not "a Python value changed"); an evaluation in a function decorated with
    @torch.inference_mode() recompiles on the grad mode, named as inference mode (its compile's
    guard tree shows it), not torch.no_grad(). Each fix names the script's own call without
    torch.compile, and so do the unexpected-cause lines."""
    run = record_run("../tests/scripts/train_eval_modes.py")
    explanation, cwd = _explained(record_run, "../tests/scripts/train_eval_modes.py")
    (train_eval, title_te, why_te, fix_te), (grad_mode, title_gm, why_gm, fix_gm) = [
        (c, *words) for c, words in zip(explanation.causes, _all_words(explanation, cwd))]
    assert train_eval.facts["train_eval"] == ("1", "Dropout", False) and train_eval.facts["guard"] == "fn._modules['1'].training == True"
    assert title_te.startswith("Dynamo recompiled forward frame 0: submodule `1` (a Dropout) was switched to eval() (1 recompile)")
    assert "guards on the `training` flag of each module the forward runs" in why_te and "Python value" not in title_te
    assert fix_te.startswith("Nothing to fix") and "`cmodel._orig_mod(x)`" in fix_te
    # ... at the evaluation's own call, the one --verify's eval-uncompiled edits (with the other
    # call made after a `model.eval()`, the inference-mode evaluation's), never training's
    lines = (ROOT / "tests" / "scripts" / "train_eval_modes.py").read_text().splitlines()
    val = next(n for n, text in enumerate(lines, 1) if text.startswith("    val = "))
    assert train_eval.facts["evaluation_call"].line == val
    assert f"at the evaluation's call, tests/scripts/train_eval_modes.py:{val}: `val = nn.functional.mse_loss(cmodel(x), y)`" in fix_te
    script = ROOT / "tests" / "scripts" / "train_eval_modes.py"
    patch = patch_for(train_eval, str(script), script.name, script.read_bytes())
    assert patch is not None and patch.name == "eval-uncompiled" and patch.applicable, patch
    assert patch.edited == (next(n for n, text in enumerate(lines, 1) if "out = cmodel(held_out)" in text), val)
    assert grad_mode.facts["kind"] == GUARD_GRAD_MODE and grad_mode.facts["inference_mode"] is True
    assert "the grad mode changed (a call under torch.inference_mode(), as in an evaluation)" in title_gm and "no_grad" not in title_gm
    assert "grad mode off (torch.inference_mode(), as an evaluation does)" in why_gm
    assert "`cmodel._orig_mod(held_out)` under torch.inference_mode()" in fix_gm
    # The evaluation after the first epoch's 4 steps (0-3) is stamped 4, the step whose backward
    # had not begun; it is named as between steps, not as a training step. The eval() switch with
    # grad on reads no differently from a training forward's: its stamp stands.
    assert grad_mode.steps == [4] and grad_mode.between_steps and not train_eval.between_steps
    text = " ".join(cagtool_in_process("recompiles", str(run.path), "--explain").stdout.split())
    assert "(1 recompile), between steps 3 and 4 (grad off: an evaluation, not a training step)" in text
    assert "(a Dropout) was switched to eval() (1 recompile), step 4" in text
    unexpected = _unexpected_text(run.path)
    assert "0/2 between steps 3 and 4: grad mode changed around the compiled call" in unexpected and "0/1 at step 4: a module switched" in unexpected
    assert "Fix (train/eval): for an evaluation, evaluate with the uncompiled module (`cmodel._orig_mod(x)`, or the model" in unexpected
    assert "may not expect" not in text  # --explain says each in its own block
    # The table's step column says the same: "after 3" for the evaluation's, its stamp for the eval() switch's.
    cells = {c[2]: c[1] for c in table_cells(recompile_table(load_run(run.path).modes["ca"]))}
    assert cells["Dynamo 0/2"] == "after 3" and cells["Dynamo 0/1"] == "4"
    listed = cagtool_in_process("recompiles", str(run.path)).stdout
    assert "after N: compiled with grad off after step N ended, before step N+1's backward" in " ".join(listed.split())
    # The summary lists each recompile once; what the explanation finds behind its guard is its cause's line, not another recompile.
    summary = [line.strip() for line in cagtool_in_process("summary", str(run.path)).stdout.splitlines()]
    assert len([line for line in summary if line.startswith("recompile 0/2 ")]) == 1, summary
    assert any(line.startswith("cause of 0/2 between steps 3 and 4: grad mode changed around the compiled call") for line in summary), summary
    # the grad mode's reason says not which way it went: the module is named, not the line's arguments
    assert "Fix (grad mode): evaluate with the uncompiled module (`cmodel._orig_mod(...)` at the evaluation's call, grad still off there)" in unexpected
    # eval_no_grad.py's evaluation under torch.no_grad() is read as no_grad from the same evidence
    plain = recompile_table(load_run(record_run("eval_no_grad.py").path).modes["ca"])
    assert set(plain.inference_modes.values()) == {False}


def test_a_length_growing_from_one_is_not_told_to_be_marked_dynamic(record_run):
    """tests/scripts/generate_from_one.py: sampling from a one-token prompt recompiles once when the
    length goes from 1 to 2. A first size of 1 is specialised even when marked dynamic (torch 2.13:
    test_torch_internals.py), so maybe_mark_dynamic or torch's own PGO suggestion would not remove
    it: the fix says so and names what does, and the PGO line says it would not remove it."""
    script = "../tests/scripts/generate_from_one.py"
    explanation, cwd = _explained(record_run, script)
    size = next(c for c in explanation.causes if c.facts.get("kind") == GUARD_SIZE)
    assert size.facts["guard"] == "tensor 'args[0]' size mismatch at index 1. expected 1, actual 2"  # the Sequential's input: `idx`
    fixes = " ".join(cause_words(size, cwd).fix)
    # after the run's last step, and its compile took the length dynamic: one recompile in all, nothing to fix
    assert fixes.startswith("Nothing to fix: the first call's size 1 (dim 1) was compiled as a constant: Dynamo always specialises a size of 0 or 1")
    assert "backed_size_oblivious = True before the first call, with torch._dynamo.maybe_mark_dynamic(idx, 1) before each call" in fixes
    assert "Mark the dimension dynamic before the call" not in fixes
    text = " ".join(cagtool_in_process("recompiles", str(record_run(script).path), "--explain").stdout.split())
    assert "[cagtool: every size recompile of this mode was from a first size of 0 or 1, which Dynamo specialises" in text


def test_a_length_that_changed_at_the_last_step_and_was_compiled_dynamic_is_not_too_few_steps_to_tell(record_run):
    """tests/scripts/longer_last_batch.py: the last batch is longer, and the forward recompiles at the
    run's last step. Its guard tree shows the length compiled dynamic (automatic dynamic shapes), so
    later lengths reuse the graph: the explanation says so, not "too few steps to tell whether it
    stabilises (run more steps)", and its fix is the one-time kind ("to skip even that recompile")."""
    script = "../tests/scripts/longer_last_batch.py"
    explanation, cwd = _explained(record_run, script)
    size = next(c for c in explanation.causes if c.facts.get("kind") == GUARD_SIZE)
    assert size.facts["guard"] == "tensor 'args[0]' size mismatch at index 1. expected 8, actual 12"
    assert size.facts["dynamic_after"] is True
    words = cause_words(size, cwd)
    why, fixes = " ".join(words.why), " ".join(words.fix)
    assert "It came at the run's last step (5), and at it Dynamo compiled dim 1 of `args[0]` dynamic (automatic dynamic shapes" in why
    assert "too few steps" not in why and fixes.startswith("To skip even that recompile, mark the dimension dynamic")


def test_an_evaluation_under_inference_mode_after_one_under_no_grad_is_no_dtype_or_device_change(record_run):
    """tests/scripts/no_grad_then_inference.py (Lightning's fit() validating under no_grad, then
    test() under inference_mode): the last evaluation recompiles on a tensor's dispatch keys, which
    inference mode strips of the autograd keys. It is named as inference mode, with the fix of one
    context for every evaluation, not "a tensor's dtype or device changed" and "pass tensors of one
    dtype and device"."""
    script = "../tests/scripts/no_grad_then_inference.py"
    explanation, cwd = _explained(record_run, script)
    switch = next(c for c in explanation.causes if c.facts.get("inference_switch") is not None)
    assert switch.facts["inference_switch"] is True and "dispatch key set mismatch" in switch.facts["guard"]
    words = cause_words(switch, cwd)
    assert words.title.startswith("Dynamo recompiled forward frame 0: a call under torch.inference_mode() after calls outside it")
    assert "It is not a dtype or device change" in " ".join(words.why) and "dtype" not in words.title
    fixes = " ".join(words.fix)
    assert "evaluate under one context everywhere: torch.no_grad() for every evaluation" in fixes
    assert "Pass tensors of one dtype and device" not in fixes
    assert "Fix (inference mode): evaluate under one context everywhere" in _unexpected_text(record_run(script).path)


def test_an_optional_argument_given_as_none_or_a_tensor_is_one_cause_and_a_value_changed_beside_it_another(record_run):
    """tests/scripts/optional_mask.py: an attention mask given as a tensor or None, and a Dropout's p
    raised once. torch lists every cache entry's failing guard; the entry made for the other form
    of the call fails on the mask, whatever else changed, so each recompile's own guard is the entry
    of its form's: one recompile for the optional argument (named so, nothing to fix: not "was None,
    then set" with "set it before the first call", nor a "Tensor subclass (NoneType)"), two for p."""
    script = "../tests/scripts/optional_mask.py"
    explanation, cwd = _explained(record_run, script)
    dynamo = [c for c in explanation.causes if c.code == CAUSE_DYNAMO_FRAME]
    optional, value = dynamo
    assert optional.facts["optional_argument"] == "attention_mask" and [r.compile_id for r in optional.rows] == ["0/1"]
    assert [r.compile_id for r in value.rows] == ["0/2", "0/3"] and value.facts["guard"] == "self._modules['drop'].p == 0.1"
    words = cause_words(optional, cwd)
    assert words.title.endswith("`attention_mask` is passed as None in some calls and as a tensor in others (an optional argument) (1 recompile)")
    assert words.fix[0].startswith("Nothing to fix: each form of the call") and "Set it before the first compiled call" not in " ".join(words.fix)
    text = " ".join(cagtool_in_process("recompiles", str(record_run(script).path), "--explain").stdout.split())
    assert "NoneType" not in text and "Tensor subclass" not in text
    assert "would not remove it" not in text  # torch's PGO line names p, which the value cause is on


def test_a_batchnorm_frozen_for_training_is_not_told_to_evaluate_uncompiled(record_run):
    """tests/scripts/bn_freeze.py: `model[1].eval()` freezes a BatchNorm's statistics and training
    goes on; a backward runs through the eval-mode graph (compiled autograd captures it, the
    follower of the switch). The fix is to switch it before the first compiled call, not "evaluate
    with the module as it was before torch.compile"."""
    explanation, cwd = _explained(record_run, "../tests/scripts/bn_freeze.py")
    switch = next(c for c in explanation.causes if c.facts.get("train_eval"))
    assert switch.facts["train_eval"] == ("1", "BatchNorm1d", False) and switch.facts.get("backward_through") is True
    assert switch.consequences  # compiled autograd's capture of the eval-mode backward follows from it
    words = cause_words(switch, cwd)
    fixes = " ".join(words.fix)
    assert words.title.endswith("submodule `1` (a BatchNorm1d) was switched to eval() (1 recompile)")
    assert "switch it before the first compiled call" in fixes and "_orig_mod" not in fixes


def test_a_train_eval_fix_never_names_a_call_inside_the_compiled_forward():
    """The guard on a submodule's `training` flag is installed at a line inside the compiled forward
    (`return self.body(x)`): the module to call uncompiled is the one the evaluation called, at its
    own line, never `self.body._orig_mod(x)` (no such attribute: self.body was never compiled)."""
    from cagtool.record.schema import SourceRef
    from cagtool.report.recompiles.explain import _guard_fixes

    facts = {"train_eval": ("body.2", "Dropout", False), "kind": "value", "stabilised": True,
             "guard": "self._modules['body']._modules['2'].training == True",
             "caller": SourceRef("/w/train.py", 17, "    loss = model(x)"), "evaluation_call": None}
    for call in (None, SourceRef("/w/train.py", 17, "    loss = model(x)")):
        fix = _guard_fixes({**facts, "evaluation_call": call}, False, "return self.body(x)", "/w")[1]
        assert "`model._orig_mod(x)`" in fix and "self.body" not in fix, fix
        assert ("at the evaluation's call, train.py:17: `loss = model(x)`" in fix) == (call is not None), fix


def test_an_evaluation_before_training_is_said_the_other_way_round(record_run):
    """The same loop evaluating first (nanoGPT's estimate_loss at its first step): the first compile
    is the evaluation's, and the training call is the one that recompiles on the grad mode. torch's
    reason does not say which way the mode went; each compile's guard tree does (`"grad_mode":true`)."""
    run = record_run("eval_no_grad.py", "--evaluate-first")
    assert run.returncode == 0, run.stderr[-2000:]
    table = recompile_table(load_run(run.path).modes["ca"])
    explanation = explain(table)
    grad_mode = next(c for c in explanation.causes if c.facts.get("kind") == GUARD_GRAD_MODE)
    assert grad_mode.facts["grad_mode_after"] is True
    assert set(table.grad_modes.values()) == {True}
    title, why, fixes = _all_words(explanation, table.cwd)[explanation.causes.index(grad_mode)]
    assert "a call with grad on after one under torch.no_grad(), as training after an evaluation" in title
    assert "first called with grad mode off" in why and "after running with it on" not in why
    # the evaluation's own call, from its compile's stack: its arguments, its line, not training's
    first = next(i for i, text in enumerate((ROOT / "sample_scripts" / "eval_no_grad.py").read_text().splitlines(), 1)
                 if "before training: held-out" in text)
    assert grad_mode.facts["evaluation_call"].line == first
    assert f"(`model._orig_mod(held_out)` under torch.no_grad(), at the evaluation's call, sample_scripts/eval_no_grad.py:{first}: `print(" in fixes
    assert "the recompiling call named here is training's" not in fixes
    # --verify's patch edits every call of that module made with grad off (the evaluation after each epoch too)
    script = ROOT / "sample_scripts" / "eval_no_grad.py"
    patch = patch_for(grad_mode, str(script), "eval_no_grad.py", script.read_bytes())
    assert patch is not None and patch.name == "eval-uncompiled" and patch.applicable and patch.line == first, patch
    edited = [line for line in patch.diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert len(edited) == 2 and all("{getattr(model, '_orig_mod', model)(held_out)" in line for line in edited), edited
    assert "getattr" not in next(line for line in patch.patched.splitlines() if "mse_loss(" in line)  # training's call is left compiled
    # the unexpected causes' fix never offers the training call's arguments as the evaluation's
    text = " ".join(cagtool_in_process("recompiles", str(run.path), "--explain").stdout.split())
    unexpected = _unexpected_text(run.path)
    assert "Fix (grad mode): evaluate with the uncompiled module (`model._orig_mod(...)` at the evaluation's call" in unexpected
    assert "model._orig_mod(x)" not in text and "model._orig_mod(x)" not in unexpected
    # The loop evaluating after training: the other way round, from the same kind of evidence.
    plain = recompile_table(load_run(record_run("eval_no_grad.py").path).modes["ca"])
    assert set(plain.grad_modes.values()) == {False}


def test_a_smaller_last_batch_is_named_and_drop_last_offered_beside_dynamic_shapes(record_run):
    explanation, cwd = _explained(record_run, "ragged_batches.py")
    root = explanation.causes[0]
    assert root.facts["kind"] == GUARD_SIZE
    title, why, fixes = _all_words(explanation, cwd)[0]
    assert "Dim 0 of `args[0]` went from 32 to 4: a smaller batch" in why and "DataLoader" in why
    # The tensor as the call at the user's line passes it (`model(x)`: torch's `args[0]`).
    assert "torch._dynamo.maybe_mark_dynamic(x, 0)" in fixes and "torch._dynamo.mark_dynamic(" not in fixes and "DataLoader(..., drop_last=True)" in fixes
    assert cause_phrase(root).startswith("a smaller batch (a DataLoader's last?): the size of `args[0]` (dim 0) changed 32->4")
    # The backward's recompile for the same sizes: every size got smaller once, named so, dropping it offered first.
    [(_, ca_why, ca_fixes)] = [words for cause, words in zip(explanation.causes, _all_words(explanation, cwd)) if cause.code == CAUSE_SHAPES]
    assert ("Every size that changed got smaller, once: a batch (or sequence chunk) shorter than the ones before it, as the last one is "
            "when the data's length is not a multiple of the batch size or chunk length.") in ca_why
    # The next epoch's full batch came back (Dynamo compiled the graph's code again for it): the last batch for certain.
    assert "The size came back" in ca_why and ca_fixes.startswith("It is the last batch: drop it (DataLoader(..., drop_last=True)") and "dynamic=True" in ca_fixes


def test_gate_failure_names_the_cause_step_and_line_in_terminal_junit_and_annotation(record_run, tmp_path):
    run = record_run("ragged_batches.py")
    junit = tmp_path / "gate.xml"
    proc = cagtool_in_process("gate", str(run.path), "--max-recompiles", "ca:0", "--no-config", "--junit", str(junit),
                              cwd=tmp_path, env={"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(tmp_path)})
    assert proc.returncode == 1, proc.stderr
    said = ("CA recompiles 1 > 0 allowed (+1): a smaller batch (a DataLoader's last?): the size of `args[0]` (dim 0) "
            "changed 32->4 at step 3 (the compiled call at ragged_batches.py:27)")
    assert said in proc.stdout
    assert said.replace(">", "&gt;") in junit.read_text()
    [annotation] = [line for line in proc.stdout.splitlines() if line.startswith("::error ")]
    assert annotation.startswith("::error file=") and "ragged_batches.py,line=27,title=" in annotation and said in annotation


def test_a_structural_change_is_tied_to_the_data_dependent_branch_torch_reports(record_run):
    """`if x.mean() > 0:` inside a compiled forward: Dynamo breaks the graph there (torch's
    "Data-dependent branching", GB0170) and the backward holds ReluBackward0 or TanhBackward0:
    the cause names that branch's line, from torch's report, not a line a node traceback names."""
    explanation, cwd = _explained(record_run, "data_branch.py")
    [cause] = explanation.causes
    assert cause.source is not None and cause.source.how == "branch" and cause.source.line == 21
    assert cause.source.code == "if x.mean() > 0:"
    [(title, why, fixes)] = _all_words(explanation, cwd)
    assert "NodeCall 5: ReluBackward0 / TanhBackward0" in why and 'graph break "Data-dependent branching"' in why
    assert "torch.where" in fixes
    assert cause_phrase(cause) == "a data-dependent branch picked other ops for the backward at step 1 (data_branch.py:21)"


def test_the_recompile_limit_on_a_traced_hook_names_the_hook(record_run):
    explanation, cwd = _explained(record_run, "grad_norm_hook.py")
    from cagtool.report.recompiles.explain import ALERT_LIMIT, alert_words

    [limit] = [a for a in explanation.alerts if a.code == ALERT_LIMIT]
    why = " ".join(alert_words(limit, cwd).why)
    assert ("Dynamo gave up recompiling the backward hook `<lambda>` (sample_scripts/grad_norm_hook.py:21), called from "
            "compiled-autograd graph !0 (compile !0/3/8)") in why


def test_a_last_batch_at_the_last_step_and_an_evaluation_after_it_are_ends_not_unknowns(record_run):
    """One epoch: the DataLoader's smaller last batch is the run's last step, and the evaluation
    after it runs after the last step. Each is one compile, then cached: named as what it is, with
    the one-time fixes, never "too few steps to tell whether it stabilises (run more steps)"."""
    explanation, cwd = _explained(record_run, "eval_no_grad.py", "--epochs", "1")
    words = dict(zip((c.facts.get("kind") for c in explanation.causes), _all_words(explanation, cwd)))
    _, why, fixes = words[GUARD_SIZE]
    assert "It came at the run's last step (2): a batch smaller than the ones before it (16 -> 8 rows) at the end is a last batch" in why
    assert "run more steps" not in why and fixes.startswith("To skip even that recompile, mark the dimension dynamic")
    assert "drop_last=True" in fixes
    _, why, fixes = words[GUARD_GRAD_MODE]
    assert "It came after the run's last step (2): an evaluation after training, compiled once" in why and "run more steps" not in why
    assert fixes.startswith("Nothing to fix: the training graph and the evaluation graph are both cached")
    # Two epochs: the same two recompiles come before the run's end, and read as stabilised.
    two, two_cwd = _explained(record_run, "eval_no_grad.py")
    assert all("It has stabilised" in why for _, why, _ in _all_words(two, two_cwd)[::2])


def test_torchs_pgo_line_under_a_grad_mode_recompile_says_it_would_not_remove_it(record_run):
    """Training batches of 16 rows, an evaluation of 64 under no_grad: the one recompile is the grad
    mode's, and torch's PGO (which saw args[0]'s size change across it) suggests starting it
    dynamic. Its line is shown with what it cannot do."""
    run = record_run("eval_no_grad.py", "--rows", "32", "--held-out-rows", "64")
    assert run.returncode == 0, run.stderr[-2000:]
    out = " ".join(cagtool_in_process("recompiles", "--explain", str(run.path)).stdout.split())
    assert "the grad mode changed" in out and "a tensor's size changed" not in out
    assert ("Torch's own words (its PGO, mode ca): PGO detected a recompilation due to dynamic shapes. To reduce shape recompilations "
            "by compiling dynamically to start, set environment variable TORCH_COMPILE_DYNAMIC_SOURCES=\"L['args'][0]\" [cagtool: no "
            "recompile of this mode failed on a tensor's size") in out
    # where a size guard failed, the line is torch's alone
    shaped = " ".join(cagtool_in_process("recompiles", "--explain", str(record_run("eval_no_grad.py").path)).stdout.split())
    assert "Torch's own words (its PGO, mode ca): PGO detected" in shaped and "[cagtool: no recompile" not in shaped


def test_the_headlines_phrase_names_another_module_and_a_backward_causes_line_as_what_they_are():
    # A GAN's discriminator first called (a size guard of torch's shared module frame), and a
    # backward's sizes whose line was found as the call that ran into them (`loss.backward()`).
    from cagtool.record.schema import SourceRef
    from cagtool.report.recompiles.explain import Cause
    from cagtool.report.recompiles.table import RecompileRow

    line = SourceRef(file="/w/train.py", line=14, code="loss.backward()", function="<module>", how="caller")
    row = RecompileRow("ca", "dynamo_frame", "0/1", 0, "guard_failure", (1,), user_source=line)
    other = Cause(code=CAUSE_DYNAMO_FRAME, rows=[row], source=line, facts={
        "kind": GUARD_SIZE, "guard": "tensor 'args[0]' size mismatch at index 1. expected 8, actual 16",
        "other_module_by_guards": [("0/0", "Sequential(Linear, ReLU, Linear)"), ("0/1", "Sequential(Linear, LeakyReLU, Linear)")]})
    phrase = cause_phrase(other)
    assert phrase.startswith("another compiled module's first call (a Sequential(Linear, LeakyReLU, Linear))"), phrase
    assert "changed 8->16" not in phrase
    shapes = Cause(code=CAUSE_SHAPES, rows=[row], source=line)
    assert cause_phrase(shapes).endswith("(the backward call at train.py:14)"), cause_phrase(shapes)


def test_a_value_a_hook_reads_is_no_hook_registered_again(record_run):
    """tests/scripts/library_like_hooks.py: a forward pre-hook branches on a step counter it holds
    in its closure (DeepSpeed's throughput timer): torch's guard names the module's hook dict
    (`fn._forward_pre_hooks[...].__closure__[0].cell_contents.global_step_count == 0`), but no hook
    was registered again: the value it reads changed. Never "register the hook once"."""
    explanation, cwd = _explained(record_run, "../tests/scripts/library_like_hooks.py")
    [frame] = [c for c in explanation.causes if c.code == CAUSE_DYNAMO_FRAME]
    words = cause_words(frame, cwd)
    assert "a value a module's hook reads changed (`fn._forward_pre_hooks[" in words.title, words.title
    assert "registered again" not in words.title and not any("Register the module's hook once" in f for f in words.fix), words.fix
    assert words.fix[0].startswith("A value a module's hook reads keeps changing"), words.fix


def test_a_tensor_of_another_rank_is_never_answered_with_a_dynamic_dimension():
    """torch's `tensor 'args[0]' rank mismatch. expected 1, actual 2` (a CA graph's call_hook given a
    2-D weight after a 1-D bias: DeepSpeed ZeRO's per-parameter hooks) is no size a dimension
    marked dynamic answers."""
    from cagtool.report.recompiles.explain import _guard_fixes, guard_label

    guard = ("tensor 'args[0]' rank mismatch. expected 1, actual 2. Guard failed on a parameter, consider using "
             "torch._dynamo.config.force_parameter_static_shapes = False to allow dynamism on parameters.")
    facts = {"kind": GUARD_SIZE, "guard": guard, "stabilised": True}
    fixes = _guard_fixes(facts, True, "")
    assert fixes == ["Nothing to fix: the compiled code met a tensor with another number of dimensions (1-D, then 2-D), which no "
                     "dynamic dimension answers; Dynamo compiled it once for each and caches both."]
    unstable = " ".join(_guard_fixes({**facts, "stabilised": False}, True, ""))
    assert "no dimension marked dynamic answers that" in unstable and "maybe_mark_dynamic" not in unstable and "--dynamic" not in unstable
    assert guard_label(facts) == "a tensor with another number of dimensions reached the compiled code"


def test_a_gans_discriminator_on_a_smaller_last_batch_recompiles_for_the_size_not_for_requires_grad(record_run):
    """tests/scripts/gan_compiled_last_batch.py (pytorch/examples' dcgan, both networks compiled):
    the discriminator has an entry for real data and one for the generator's output (its input
    requires grad). On the last batch torch lists first the entry of the other form, failing on
    requires_grad, then the call's own, failing on the size: the recompile is the size's, in the
    table and in the explanation, and the backward graphs it brings follow from it, the new graph's
    .grad warm-up among them (not "clear gradients the same way every step": the job does)."""
    script = "../tests/scripts/gan_compiled_last_batch.py"
    run = record_run(script)
    explanation, cwd = _explained(record_run, script)
    table = explanation.table
    by_id = {row.compile_id: row for row in table.rows}
    assert "requires_grad mismatch" in by_id["0/2"].messages[0] and "size mismatch" in by_id["0/2"].messages[1]  # torch's order
    (size,) = [c for c in explanation.causes if c.facts.get("kind") == GUARD_SIZE and c.caused_by is None]
    assert [r.compile_id for r in size.rows] == ["0/2", "0/3"] and size.steps == [2]
    (requires_grad,) = [c for c in explanation.causes if c.facts.get("kind") == GUARD_REQUIRES_GRAD]
    assert [r.compile_id for r in requires_grad.rows] == ["0/1"]  # the generator's output, at step 0: the only one
    warmup = [c for c in explanation.causes if c.caused_by == size.number and cause_words(c, cwd).title.startswith(
        f"Caused by #{size.number}: the new backward graph's .grad warm-up")]
    assert [r.compile_id for c in warmup for r in c.rows] == ["!4"]
    assert "Goes with" in cause_words(warmup[0], cwd).fix[0]
    text = " ".join(cagtool_in_process("recompiles", str(run.path)).stdout.split())
    assert "0/3 guard `tensor 'input' size mismatch at index 0. expected 8, actual 3`" in text
    assert "Clear gradients the same way every step" not in cagtool_in_process("recompiles", str(run.path), "--explain").stdout
    # The next epoch's batch of 8 runs the forward graph made dynamic for 3, whose backward compiled
    # autograd captured with static sizes: one miss at each of the step's three backward calls, one
    # change of the batch, rooted in the size's recompile.
    (back,) = [c for c in explanation.causes if c.code == CAUSE_SHAPES]
    assert back.caused_by == size.number and back.steps == [3]
    assert [r.compile_id for r in back.rows] == ["!6", "!7", "!8"] and len({r.backward_call.line for r in back.rows}) == 3
    words = cause_words(back, cwd)
    assert words.title.startswith(f"Caused by #{size.number}: the same sizes changed in the backward (3 recompiles")
    assert "went 8 -> 3 at step 2 and came back to 8 at step 3" in words.why[0] and "at each backward call of the step" in words.why[0]
    assert "removes this one too" in words.fix[0] and "--dynamic" in words.fix[1]
    # Step 3 compiled again (those captures): #1's steps after it did not all reuse cached graphs.
    assert "It has stabilised: no recompile after step 2, in the last 3 steps (other recompiles came at step 3)." in cause_words(size, cwd).why
    # The generator's frame, recompiled by the same batch: another compiled function (its own
    # torch.compile), not a frame a graph break split off (the job has none).
    (generator,) = [c for c in explanation.causes if c.caused_by == size.number and c.code == CAUSE_DYNAMO_FRAME]
    assert [r.compile_id for r in generator.rows] == ["2/1"]  # the generator's frame
    lead = cause_words(generator, cwd).why[0]
    assert "This frame is another function the step calls, with a torch.compile of its own (" in lead, lead
    assert "gan_compiled_last_batch.py:33), compiled for its own sizes" in lead and "graph break" not in lead, lead


def test_a_last_batch_of_one_row_is_fixed_by_the_batch_and_never_by_a_dynamic_dimension(record_run):
    """tests/scripts/last_batch_of_one.py: a DataLoader's last batch of one row, the forward split by
    a graph break. Dynamo specialises a size of 0 or 1 even in a dynamic dimension, so marking the
    batch dynamic (the usual fix for a smaller last batch) leaves a recompile per frame (`--mark`:
    `2 <= x.size()[0]`), and so would torch's PGO line: dropping or padding the batch is the fix,
    first. Marked, the two frames' recompiles are one cause, a size's, not "a Dynamo guard failed"
    with "Keep the guarded value the same"."""
    for args in ((), ("--mark",)):
        run = record_run("../tests/scripts/last_batch_of_one.py", *args)
        explanation, cwd = _explained(record_run, "../tests/scripts/last_batch_of_one.py", *args)
        roots = [c for c in explanation.causes if c.caused_by is None]
        assert len(roots) == 1, [cause_words(c, cwd).title for c in explanation.causes]
        (root,) = roots
        assert root.facts["kind"] == GUARD_SIZE and root.count == 1 and root.steps == [2]
        frames = [c for c in explanation.causes if c.caused_by == root.number and c.code == CAUSE_DYNAMO_FRAME]
        assert [r.compile_id for c in frames for r in c.rows] == ["1/1"]
        assert "A graph break splits the forward into frames" in cause_words(frames[0], cwd).why[0]
        words = cause_words(root, cwd)
        why, fixes = " ".join(words.why), " ".join(words.fix)
        assert "Dynamo specialises a size of 0 or 1 even in a dynamic dimension" in why
        assert words.fix[0].startswith("If it is a DataLoader's last batch: DataLoader(..., drop_last=True) drops it")
        assert "maybe_mark_dynamic(x" not in fixes and "Keep the guarded value" not in fixes and "mark_unbacked" in fixes
        assert "No dimension marked dynamic does" in " ".join(cause_words(frames[0], cwd).fix)
        text = " ".join(cagtool_in_process("recompiles", str(run.path), "--explain").stdout.split())
        assert "TORCH_COMPILE_DYNAMIC_SOURCES" not in text or "for a size of 0 or 1 (a batch of one row)" in text
        summary = " ".join(cagtool_in_process("summary", str(run.path)).stdout.split())
        assert "all from 1 cause" in summary and "what to do: If it is a DataLoader's last batch" in summary
        if args:
            assert root.facts["guard"] == "2 <= x.size()[0]" and "a size of 0 or 1 in a dynamic dimension (`x`, dim 0" in summary
        else:
            assert "smaller (1 row here)" in why and "changed 4->1" in summary
            # Both frames' backward nodes were swapped: each paired with its own at its NodeCall, as diff-graphs pairs them.
            (backward,) = [c for c in explanation.causes if c.caused_by == root.number and c.code != CAUSE_DYNAMO_FRAME]
            assert ("NodeCall 2 CompiledFunctionBackward1 -> CompiledFunctionBackward3, NodeCall 3 CompiledFunctionBackward0 -> "
                    "CompiledFunctionBackward2") in " ".join(cause_words(backward, cwd).why)


def test_one_evaluation_under_no_grad_recompiling_every_frame_of_a_broken_forward_is_one_cause(record_run):
    """tests/scripts/last_batch_of_one.py --drop-last --evaluate: the forward split by a graph break
    into two frames, an evaluation under no_grad after each epoch. The first evaluation recompiles
    both frames on the grad mode (an HF model's forward: six frames, six recompiles): one change,
    one root, the first frame's, which --verify's eval-uncompiled answers; the other frame follows
    it and is fixed with it, never a cause of its own with the same fix said again."""
    script = "../tests/scripts/last_batch_of_one.py"
    explanation, cwd = _explained(record_run, script, "--drop-last", "--evaluate")
    (root,) = [c for c in explanation.causes if c.caused_by is None]
    assert root.facts["kind"] == GUARD_GRAD_MODE and [r.compile_id for r in root.rows] == ["0/1"]
    (frame,) = [c for c in explanation.causes if c.caused_by == root.number]
    assert frame.code == CAUSE_DYNAMO_FRAME and [r.compile_id for r in frame.rows] == ["1/1"]
    words = cause_words(frame, cwd)
    assert words.title.startswith(f"Caused by #{root.number}, the same change: Dynamo recompiled frame 1, the rest of `forward` after its graph break")
    assert words.why[0].startswith(f"Follows from #{root.number}: the same change of the grad mode reached this frame in the same evaluation.")
    assert words.fix == [f"What removes #{root.number} removes this one too (the frames are compiled for the same calls); nothing to fix on its own."]
    path = ROOT / "tests" / "scripts" / "last_batch_of_one.py"
    assert patch_for(frame, str(path), path.name, path.read_bytes()) is None  # fixed with its root
    patch = patch_for(root, str(path), path.name, path.read_bytes())
    assert patch is not None and patch.name == "eval-uncompiled" and patch.applicable, patch
    assert patch.edited == (next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "held-out" in text),)
    # The summary's lines of causes you may not expect say the two frames' recompiles once.
    run = record_run(script, "--drop-last", "--evaluate")
    summary = [line.strip() for line in cagtool_in_process("summary", str(run.path)).stdout.splitlines() if "cause of " in line]
    assert len(summary) == 1 and summary[0].startswith("cause of 0/1, 1/1 between steps 1 and 2: grad mode changed"), summary


def test_an_evaluation_of_a_module_compiled_in_place_is_told_to_run_eagerly_not_to_call_orig_mod(record_run):
    """The same loop with `model.compile()` (in place, as pytorch/examples' word language model
    compiles): the module has no `_orig_mod`, so the fix that skips the evaluation's compile names
    set_stance("force_eager") at the evaluation's call, and --verify's patch runs that call so."""
    script = "../tests/scripts/last_batch_of_one.py"
    explanation, cwd = _explained(record_run, script, "--drop-last", "--evaluate", "--in-place")
    (root,) = [c for c in explanation.causes if c.caused_by is None]
    assert root.facts["kind"] == GUARD_GRAD_MODE and root.facts["compiled_by"]["in_place"] is True
    path = ROOT / "tests" / "scripts" / "last_batch_of_one.py"
    compile_line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith("    model.compile("))
    held_out = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "held-out" in text)
    [skip] = [fix for fix in cause_words(root, cwd).fix if fix.startswith("To skip even that compile")]
    assert (f"the module is compiled in place (`.compile()` at tests/scripts/{path.name}:{compile_line}), so it has no `_orig_mod`; "
            'evaluate under `with torch.compiler.set_stance("force_eager"):`') in skip and f"{path.name}:{held_out}" in skip, skip
    assert "compiled._orig_mod" not in skip
    patch = patch_for(root, str(path), path.name, path.read_bytes())
    assert patch is not None and patch.applicable and patch.edited == (held_out,), patch
    assert "torch.compiler.set_stance('force_eager')(compiled)(torch.ones(4, 6))" in patch.patched  # the f-string's other quote
    # The lines of causes you may not expect (the report's page) say the same, not `compiled._orig_mod(...)`.
    run = record_run(script, "--drop-last", "--evaluate", "--in-place")
    table = recompile_table(load_run(run.path).modes["ca"])
    [fix] = [line for line in unexpected_lines(table.unexpected, cwd) if line.strip().startswith("Fix (grad mode):")]
    assert "compiled in place" in fix and "_orig_mod(" not in fix, fix
    # --explain says the cause once, in its own block: not again among causes one may not expect.
    text = cagtool_in_process("recompiles", "--explain", str(run.path)).stdout
    assert "may not expect" not in text and text.count("\n#1 Dynamo recompiled forward frame 0 `forward`: the grad mode changed") == 1, text


def test_a_graph_captured_for_a_last_batch_whose_code_recompiles_for_the_next_epoch_follows_the_batch(record_run):
    """tests/scripts/enable_last_batch_back.py (compiled autograd enabled around the loop, as a
    Lightning user wraps trainer.fit): the last batch of 2 rows recompiles the forward and the
    backward is captured anew (!1); the next epoch's 4 rows recompile !1's code in Dynamo. One change
    of the batch, one root cause: the headline says "all from 1 cause", and the graph's recompile
    is fixed by the batch as well as by its own sources."""
    script = "../tests/scripts/enable_last_batch_back.py"
    run = record_run(script)
    explanation, cwd = _explained(record_run, script)
    (root,) = [c for c in explanation.causes if c.caused_by is None]
    assert root.facts["kind"] == GUARD_SIZE and root.steps == [2]
    (graph,) = [c for c in explanation.causes if c.code == CAUSE_DYNAMO_CA_GRAPH]
    assert graph.caused_by == root.number and graph.steps == [3] and [r.compile_id for r in graph.rows] == ["!1/2/1"]
    words = cause_words(graph, cwd)
    assert words.why[0].startswith(f"Follows from #{root.number}: graph !1 was captured for the size #{root.number} recompiled the forward for")
    assert words.fix[0].startswith(f"What removes #{root.number} by the batch (dropping or padding it) removes this one too")
    assert "TORCH_COMPILE_DYNAMIC_SOURCES" in " ".join(words.fix[1:])
    summary = " ".join(cagtool_in_process("summary", str(run.path)).stdout.split())
    assert "all from 1 cause" in summary


def test_an_evaluations_last_batch_below_the_range_a_dynamic_graph_holds_for_is_said_so_between_steps(record_run):
    # mnist in small: the evaluation's graph (grad off, dim 0 dynamic) holds for batches of 16 or more
    # (torch's convolution picks its path by the batch), and the evaluation's last batch of 8 fails it.
    explanation, cwd = _explained(record_run, "../tests/scripts/evaluation_batch_below_bound.py")
    table = explanation.table
    (bound,) = [c for c in explanation.causes if "16 <= x.size()[0]" in cause_words(c, cwd).title]
    words = cause_words(bound, cwd)
    assert words.title.startswith("Dynamo recompiled forward frame 0 `forward`: a dynamic size left the range its graph was "
                                  "compiled for (`16 <= x.size()[0]`)"), words.title
    why, fixes = " ".join(words.why), " ".join(words.fix)
    assert "holds only for sizes at least 16" in why and "Keep the guarded value the same" not in fixes
    assert fixes.startswith("Nothing to fix where it comes once") and "keep dim 0 of `x` at least 16" in fixes
    # compiled with grad off, between training steps 2 and 3 (stamped 3), as the table says
    [row] = bound.rows
    assert [c[1] for c in table_cells(table) if c[0] != "-" and "16 <=" in c[4]] == ["after 2"]
    assert bound.place_said.startswith("between steps 2 and 3 (grad off"), bound.place_said
    assert "between steps 2 and 3" in words.evidence
    assert "between steps 2 and 3" in cause_phrase(bound) and " at between" not in cause_phrase(bound), cause_phrase(bound)


def test_an_evaluation_and_training_calling_through_one_forward_are_told_to_pick_by_the_grad_mode(record_run):
    """tests/scripts/shared_forward_eval.py: a wrapper's forward calls the compiled submodule, as a
    LightningModule's does, and both the evaluation (first, under no_grad) and training call the
    wrapper. Every compile of the frame is called from that one line: it is no evaluation's own call,
    and "evaluate with `self.net._orig_mod(x)` at it" would leave training uncompiled too. The fix
    picks at that line by the grad mode, and so does --verify's patch (one edit, at that line)."""
    script = "../tests/scripts/shared_forward_eval.py"
    explanation, cwd = _explained(record_run, script)
    [grad_mode] = [c for c in explanation.causes if c.facts.get("kind") == GUARD_GRAD_MODE]
    lines = (ROOT / "tests" / "scripts" / "shared_forward_eval.py").read_text().splitlines()
    forward = next(i for i, text in enumerate(lines, 1) if text.strip() == "return self.net(x)")
    assert grad_mode.facts["grad_mode_after"] is True and grad_mode.facts["evaluation_call"] is None
    assert grad_mode.facts["shared_call"].line == forward
    fixes = " ".join(cause_words(grad_mode, cwd).fix)
    assert (f"tests/scripts/shared_forward_eval.py:{forward} (`return self.net(x)`) is training's call too" in fixes
            and "`self.net(x) if torch.is_grad_enabled() else self.net._orig_mod(x)`" in fixes), fixes
    assert "at the evaluation's call" not in fixes
    script_path = ROOT / "tests" / "scripts" / "shared_forward_eval.py"
    patch = patch_for(grad_mode, str(script_path), script_path.name, script_path.read_bytes())
    assert patch is not None and patch.applicable and patch.edited == (forward,), patch
    assert ('+        return (self.net(x) if torch.is_grad_enabled() else getattr(self.net, "_orig_mod", self.net)(x))'
            in patch.diff.splitlines()), patch.diff


def test_a_train_eval_switch_through_one_forward_picks_by_the_modules_mode():
    """The train/eval flag's cause where training and the evaluation call the compiled module from one
    line (`shared_call`): the fix picks there by the module's `training` flag, and never names that
    line as the evaluation's own call."""
    from cagtool.record.schema import SourceRef
    from cagtool.report.recompiles.explain import _guard_fixes

    shared = SourceRef("/w/lit.py", 16, "        return self.net(x)")
    facts = {"train_eval": ("1", "Dropout", True), "kind": "value", "stabilised": True,
             "guard": "self._modules['1'].training == False", "caller": shared, "evaluation_call": None, "shared_call": shared}
    fix = _guard_fixes(facts, False, "return self.net(x)", "/w")[1]
    assert "lit.py:16 (`return self.net(x)`) is training's call too" in fix, fix
    assert "`self.net(x) if self.net.training else self.net._orig_mod(x)`" in fix and "at the evaluation's call" not in fix, fix



def test_a_compiled_method_called_on_another_instance_is_that_instance_not_an_input_to_mark_dynamic(record_run):
    """tests/scripts/layerwise_compiled_method.py (pytorch/examples' mnist_forward_forward, `@torch.compile`
    on Layer.forward): the second layer's first call fails the first layer's entry on its input's
    dim 1 (12 -> 8), and the advice was to mark that dimension dynamic, or compile with
    dynamic=True; neither removes it (torch 2.13, checked by hand: parameters' sizes are static, so
    a weight of [8, 8] after [8, 12] compiles again either way). The guard trees show `self` with
    other parameter sizes: the recompile is the other instance's, nothing to fix, and --verify
    offers no dynamic source for it. The prediction after training, on a smaller batch, is kept
    first: a one-time cost after the last step."""
    script = "../tests/scripts/layerwise_compiled_method.py"
    explanation, cwd = _explained(record_run, script)
    assert explanation.table.self_modules["0/0"] == ("Layer", "relu=ReLU", "bias:[8]", "weight:[8, 12]")
    (instance,) = [c for c in explanation.causes if c.facts.get("other_instance")]
    assert [r.compile_id for r in instance.rows] == ["0/1"] and instance.facts["kind"] == GUARD_SIZE
    words = cause_words(instance, cwd)
    assert words.title.startswith("Dynamo recompiled forward frame 0 `forward`: the compiled method's `self` is another Layer"), words.title
    assert ("this call's `self` is another Layer, with parameters of other sizes: 0/0 a Layer(ReLU) with weight [8, 12], then 0/1 "
            "a Layer(ReLU) with weight [8, 8]") in words.why[1], words.why
    assert words.fix == ["Nothing to fix: each size of Layer is compiled once and cached; no input marked dynamic (maybe_mark_dynamic, "
                         "dynamic=True) removes it, the parameters' sizes stay static. With more sizes than the recompile limit, the "
                         "last ones run eagerly: raise torch._dynamo.config.recompile_limit."]
    assert not [f for f in fixes_for(explanation, pgo_suggestion="TORCH_COMPILE_DYNAMIC_SOURCES=\"L['x']\"")
                if instance.number in f.causes and f.name in ("dynamic-sources", "torch-pgo")]
    # The prediction's smaller batch, after training (grad on: no evaluation under no_grad): kept, then marked.
    (batch,) = [c for c in explanation.causes if c.facts.get("kind") == GUARD_SIZE and c.facts.get("after_training")]
    fixes = cause_words(batch, cwd).fix
    assert fixes[0].startswith("If it is an evaluation's or a prediction's batch") and fixes[1].startswith("To skip even that recompile"), fixes
    # The same layer's own entry for the prediction (its own weight) is no other instance.
    assert not any(c.facts.get("other_instance") for c in explanation.causes if c is not instance)
    text = " ".join(cagtool_in_process("summary", str(record_run(script).path)).stdout.split())
    assert "from 3 causes (#1, #3 and #4 in --explain; #2 follows from them): the compiled method's `self` is another Layer at step 12" in text, text
