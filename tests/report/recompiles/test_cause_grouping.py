"""How recompiles are grouped into causes, on ordinary scripts: guards on two Python values of one
frame are two causes, each named by its value (checked against torch's own failing guard of each
recompile); a second backward call in a step is its own graph, not a structure that changes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import cli_in_process
from cagtool.record.loader import load_run
from cagtool.report.recompiles.explain import explain
from cagtool.report.recompiles.table import recompile_table
from cagtool.torch_text import guarded_names
from cagtool.verify.fixes import fixes_for

SHAPES = str(Path(__file__).parents[2] / "scripts" / "step_shapes.py")

def test_guarded_names_reads_the_python_values_a_guard_is_on():
    assert guarded_names("p == 0.1") == ("p",)
    assert guarded_names("self.use_relu == True") == ("self.use_relu",)
    assert guarded_names("(step % 2) != 0") == ("step",)
    assert guarded_names("step < 10") == ("step",)
    assert guarded_names("tensor 'x' size mismatch at index 0. expected 16, actual 8") == ()
    assert guarded_names("___check_obj_id(L['fn'], 140)") == ()


def _explained(record_run, script: str, *args: str, backend: str = "eager") -> tuple:
    """tests/scripts/SCRIPT recorded in the ca mode, and its causes as `recompiles --explain` gives them."""
    run = record_run(f"../tests/scripts/{script}", *args, backend=backend)
    assert run.returncode == 0, run.stderr[-2000:]
    code, out, _ = cli_in_process("recompiles", str(run.path), "--explain", "--format", "json")
    assert code == 0
    return run, json.loads(out)["modes"]["ca"]["explanation"]["causes"]


@pytest.mark.slow
def test_two_python_values_are_two_causes_each_named_by_its_value(record_run):
    run, causes = _explained(record_run, "two_python_values.py")
    causes = [c for c in causes if c["code"] == "dynamo_guard_failure"]
    # torch's failing guard of each recompile (its recompiles log, as recorded) names the value of its cause
    events = [json.loads(line) for line in (run.path / "ca" / "events.jsonl").read_text().splitlines()]
    first_guard = {e["compile_id"]: e["reasons"][0].split(":", 1)[1].split("#")[0].strip() for e in events if e.get("kind") == "dynamo_recompile"}
    named = {}
    for cause in causes:
        names = {guarded_names(first_guard[e["compile_id"]]) for e in cause["evidence_ids"]}
        assert len(names) == 1, (cause["title"], names)  # one value a cause
        named[names.pop()] = cause
    assert set(named) == {("step",), ("p",)}, [c["title"] for c in causes]
    assert "a Python value changed (`p == 0.0`)" in named[("p",)]["title"]
    assert "a guard on the Python value `step` failed" in named[("step",)]["title"]
    assert [e["step"] for e in named[("p",)]["evidence_ids"]] == [3, 6, 9]  # where p changed: 0.0, 0.1, 0.2, 0.3


@pytest.mark.slow
def test_a_second_backward_call_in_a_step_is_its_own_graph_not_a_structure_that_changes(record_run):
    run, causes = _explained(record_run, "two_backward_calls.py")
    second = next(c for c in causes if c["code"] == "graph_structure")
    assert second["title"] == "A step calls backward more than once: each call is its own graph (1 recompile, one first capture per call)"
    assert second["steps"] == [0] and second["source"]["line"] == 16  # l2.backward()
    assert second["fix"][0].startswith("Nothing to fix.") and "torch.where" not in " ".join(second["fix"])
    assert "sum the losses and call backward once" in second["fix"][0]  # no optimizer steps between the two calls
    code, summary, _ = cli_in_process("summary", str(run.path))
    assert "another backward call of the step, captured once as its own graph at step 0" in " ".join(summary.split())


@pytest.mark.slow
def test_a_module_hook_registered_every_step_is_named_with_its_fix(record_run):
    run, causes = _explained(record_run, "module_hook_every_step.py")
    hooks = next(c for c in causes if "a module's hooks changed" in c["title"])
    assert "_backward_hooks" in hooks["title"] and hooks["fix"][0].startswith(
        "Register the module's hook (the lambda at tests/scripts/module_hook_every_step.py:12, a full backward hook of a "
        "`Linear`) once, before the training loop")
    assert "Keep the guarded value the same" not in " ".join(hooks["fix"])


def test_an_autocast_switch_and_the_uncompiled_call_are_worded_from_the_scripts_own_text():
    from cagtool.report.recompiles.calls import uncompiled_call
    from cagtool.report.recompiles.explain import _guard_fixes, guard_label
    from cagtool.torch_text import GUARD_GLOBAL_STATE

    facts = {"kind": GUARD_GLOBAL_STATE, "guard": "GLOBAL_STATE changed: autocast(cpu)_enabled"}
    assert guard_label(facts) == "autocast was turned on or off around the compiled call (`autocast(cpu)_enabled`)"
    assert _guard_fixes(facts, False, "")[0].startswith("Run every step under the same autocast setting")
    assert uncompiled_call("vl = nn.functional.mse_loss(cmodel(xv), yv)") == "cmodel._orig_mod(xv)"
    assert uncompiled_call("print(len(x))") == "model._orig_mod(x)"
    # the module's own call, outermost, not a helper called for its arguments (a tiny GPT-2's evaluation)
    assert uncompiled_call("ev = cmodel(input_ids=batch(), labels=batch()).loss") == "cmodel._orig_mod(input_ids=batch(), labels=batch())"
    assert uncompiled_call("val = F.cross_entropy(cmodel(torch.randn(64, 32)), y)") == "cmodel._orig_mod(torch.randn(64, 32))"


def test_a_keyword_inputs_size_guard_is_fixed_on_the_tensor_the_call_passes():
    from cagtool.report.recompiles.explain import _guard_fixes
    from cagtool.torch_text import GUARD_SIZE

    # torch 2.13's guard on `model(input_ids=x)` / `model(**batch)` (an HF model's forward takes keywords)
    facts = {"kind": GUARD_SIZE, "guard": "tensor 'kwargs['input_ids']' size mismatch at index 0. expected 4, actual 3"}
    assert "maybe_mark_dynamic(x, 0)" in _guard_fixes(facts, False, "out = f(input_ids=x, labels=y)")[0]
    assert 'maybe_mark_dynamic(batch["input_ids"], 0)' in _guard_fixes(facts, False, "loss = model(**batch).loss")[0]
    # the call is inside the library (HF Trainer): no variable is made up
    inside = _guard_fixes(facts, False, "res = trainer.train()")
    assert "maybe_mark_dynamic(tensor, 0) on the tensor passed as `input_ids=`" in inside[0]
    assert "TrainingArguments(dataloader_drop_last=True)" in inside[1]
    # A last batch of one row: no dimension marked dynamic takes a size of 1 (0/1 specialisation), the batch is the fix.
    one = _guard_fixes({**facts, "guard": facts["guard"].replace("actual 3", "actual 1")}, False, "out = f(input_ids=x, labels=y)")
    assert "TrainingArguments(dataloader_drop_last=True)" in one[0] and "maybe_mark_dynamic(x" not in " ".join(one)
    # ... unless it is an evaluation's (Lightning's validation_step, its sanity check too): its samples count in the metric.
    evaluation = _guard_fixes({**facts, "guard": facts["guard"].replace("actual 3", "actual 1"), "called_in": "validation_step"}, False, "")
    assert evaluation[0].startswith("If it is the evaluation's last batch (the call is in `validation_step`), keep it")
    assert "drop_last=True" not in " ".join(evaluation)


def test_an_evaluation_in_the_modules_own_method_is_fixed_without_orig_mod_or_drop_last():
    # Lightning: `m.forward = torch.compile(m.forward)`, and validation_step calls `self(x)` under
    # no_grad with a last batch of 4 (checked by hand: `self._orig_mod` raises AttributeError there)
    from cagtool.report.recompiles.explain import _guard_fixes
    from cagtool.torch_text import GUARD_GRAD_MODE, GUARD_SIZE

    code = 'self.log("val_loss", nn.functional.cross_entropy(self(x), y))'
    grad = _guard_fixes({"kind": GUARD_GRAD_MODE, "guard": "GLOBAL_STATE changed: grad_mode", "stabilised": True}, False, code)
    assert "_orig_mod(" not in grad[1] and "forward = m.forward; m.forward = torch.compile(forward)" in grad[1]
    size = {"kind": GUARD_SIZE, "guard": "tensor 'x' size mismatch at index 0. expected 8, actual 4", "called_in": "validation_step"}
    fixes = _guard_fixes(size, False, code)
    assert "drop_last=True" not in " ".join(fixes) and "keep it: drop_last there would leave its samples out of the metric" in fixes[1]
    # in the training loop, the last batch's drop_last stays; a compiled module's call keeps its _orig_mod
    assert "DataLoader(..., drop_last=True) drops it" in _guard_fixes({**size, "called_in": "<module>"}, False, "out = cmodel(x)")[1]
    assert "`cmodel._orig_mod(xv)`" in _guard_fixes({"kind": GUARD_GRAD_MODE, "guard": "GLOBAL_STATE changed: grad_mode"}, False,
                                                   "ev = cmodel(xv)")[1]


def test_a_size_guard_on_the_compiled_frames_parameter_is_fixed_on_what_the_caller_passes():
    from cagtool.report.recompiles.explain import _guard_fixes
    from cagtool.torch_text import GUARD_SIZE

    # the guard names forward(self, x)'s parameter; the caller's line names the tensor otherwise
    facts = {"kind": GUARD_SIZE, "guard": "tensor 'x' size mismatch at index 1. expected 8, actual 12"}
    def mark(code: str) -> str:
        return _guard_fixes(facts, False, code)[0]
    assert "maybe_mark_dynamic(h, 1)" in mark("h = checkpoint(b, h, use_reentrant=True)")  # checkpoint's function left out
    assert "maybe_mark_dynamic(batch, 1)" in mark("out = model(batch, mask=m)")
    assert "maybe_mark_dynamic(inp, 1)" in mark("loss = loss_fn(model(x=inp), y)")
    assert "maybe_mark_dynamic(x, 1)" in mark("out = model(x)")
    # two positional inputs, or a value made on the line: no variable is made up
    assert "maybe_mark_dynamic(tensor, 1) on the tensor passed as `x`" in mark("y = step(a, b)")
    assert "maybe_mark_dynamic(tensor, 1)" in mark("out = model(x.to(device))")
    # ... unless the record has the compiled function's parameters: then a positional one is the
    # caller's argument at its place, a method's `self` not passed (word_language_model's `model(data, hidden)`)
    def mark_with(code: str, argnames: list[str]) -> str:
        return _guard_fixes({**facts, "argnames": argnames}, False, code)[0]
    assert "maybe_mark_dynamic(a, 1)" in mark_with("y = step(a, b)", ["x", "y"])
    assert "maybe_mark_dynamic(b, 1)" in mark_with("y = step(a, b)", ["y", "x"])
    assert "maybe_mark_dynamic(data, 1)" in mark_with("output, hidden = model(data, hidden)", ["self", "x", "hidden"])
    assert "maybe_mark_dynamic(data, 1)" in mark_with("out = model(data, h, mask=m)", ["self", "x", "h", "mask"])
    # a parameter past what the call passes positionally, or an argument made on the line: none made up
    assert "on the tensor passed as `x`" in mark_with("out = model(a)", ["self", "h", "x"])
    assert "maybe_mark_dynamic(h, 1)" in mark_with("h = checkpoint(block, h, use_reentrant=True)", ["self", "x"])
    assert "maybe_mark_dynamic(tensor, 1)" in mark_with("out = model(a.float(), b)", ["self", "x", "y"])
    # the compiled call is the innermost call of a name that is no builtin: not `len(...)` in its
    # arguments, whose own argument is no input of the compiled function
    assert "maybe_mark_dynamic(tensor, 1)" in mark_with("output = model(data[:len(src)], hidden)", ["self", "x", "hidden"])
    assert "maybe_mark_dynamic(data, 1)" in mark_with("out = model(data, len(lengths))", ["self", "x", "n"])
    assert "maybe_mark_dynamic(data, 1)" in mark_with("loss = criterion(model(data, hidden), targets)", ["self", "x", "hidden"])
    # the caller's `len(x)` names a variable of the caller's, not the compiled function's parameter
    from cagtool.record.schema import SourceRef

    caller = SourceRef(file="/job/train.py", line=9, code="out = model(batch[:len(x)], h)", function="train", how="caller")
    fix = _guard_fixes({**facts, "argnames": ["self", "x", "h"], "caller": caller}, False, "return self.net(x)")[0]
    assert "maybe_mark_dynamic(tensor, 1)" in fix


@pytest.mark.slow
def test_a_script_whose_compiled_autograd_started_dynamic_is_not_told_to_start_it_dynamic(record_run):
    run, causes = _explained(record_run, "enable_dynamic_by_hand.py")
    on_ca = next(c for c in causes if c["code"] == "dynamo_ca_graph_guard_failure")
    said = " ".join(on_ca["fix"])
    assert "Compiled autograd already started dynamic here" in said and "start compiled autograd dynamic" not in said
    code, _, err = cli_in_process("recompiles", str(run.path), "--explain", "--verify", "--fix", "ca-dynamic")
    assert code == 2 and "no such fix applies" in err and "ca-dynamic" not in err.split("applicable:")[1]


@pytest.mark.slow
def test_a_size_that_dynamic_true_kept_static_is_not_fixed_by_dynamic_true(record_run):
    """torch.compile(dynamic=True), first batch 16 rows = the Linear's in_features: torch 2.13
    recompiles the forward on the next batch size (plain python too), and maybe_mark_dynamic on the
    batch dimension keeps one graph. The cause says the frame was compiled dynamic and why a size
    stayed static; its fix is maybe_mark_dynamic, never "compile with dynamic=True"."""
    # The torch facts the fix rests on are pinned in tests/test_torch_internals.py.
    _, causes = _explained(record_run, "dynamic_true_duck_size.py")
    [forward] = [c for c in causes if c["code"] == "dynamo_guard_failure"]
    said = " ".join(forward["why"] + forward["fix"])
    assert "compiled with dynamic shapes (torch.compile(..., dynamic=True)), yet dim 0 of `args[0]` was static at 16" in said
    assert "duck sizing" in said and "maybe_mark_dynamic" in forward["fix"][0]
    assert "compile with dynamic=True" not in said and "drop_last" not in said


@pytest.mark.slow
def test_an_lr_scheduler_under_a_compiled_optimizer_step_is_fixed_by_a_tensor_rate(record_run):
    """torch 2.13: a float learning rate an LR scheduler changes recompiles a compiled step() once,
    a tensor rate not at all (plain python, torch's own counters). The cause is named as the
    optimizer's step() and the learning rate, and its fix is the tensor rate."""
    # The torch facts the fix rests on are pinned in tests/test_torch_internals.py.
    _, causes = _explained(record_run, "compiled_optimizer_lr_schedule.py")
    [lr] = [c for c in causes if c["code"] == "dynamo_guard_failure"]
    assert lr["title"].startswith("Dynamo recompiled the optimizer's step() (frame ") and "the learning rate changed" in lr["title"]
    assert "lr=torch.tensor(0.01)" in lr["fix"][0] and "Keep the guarded value" not in " ".join(lr["fix"])


@pytest.mark.slow
def test_a_second_compiled_module_and_a_detached_input_are_named_as_what_they_are(record_run):
    """Two compiled modules share torch's wrapper frame: the second's first call is a recompile of
    it, named so with nothing to fix (never "mark the dimension dynamic"); a discriminator called on
    a detached and an undetached input recompiles on that input's requires_grad, not a parameter's."""
    _, causes = _explained(record_run, "two_compiled_modules.py")
    guards = [c for c in causes if c["code"] == "dynamo_guard_failure"]
    [other] = [c for c in guards if "another compiled module's first call" in c["title"]]
    said = " ".join(other["why"] + other["fix"])
    assert "torch's wrapper of every torch.compile'd module's call" in said and other["source"]["line"] == 16
    # the guards of each compile of the shared frame name its module: G, then D
    assert "0/0 a Sequential(Linear, Tanh), then 0/1 a Sequential(Linear)" in said
    assert other["fix"][0].startswith("Nothing to fix") and "mark_dynamic" not in said
    [detached] = [c for c in guards if "requires_grad" in c["title"]]
    assert "an input's requires_grad changed (`args[0]`)" in detached["title"] and "unfrozen" not in " ".join(detached["why"])


def _torch_recompiles(run) -> dict[str, list[str]]:
    """Every recompile torch logged in the record (its `Recompiling function` reasons, verbatim): id -> reasons."""
    events = [json.loads(line) for line in (run.path / "ca" / "events.jsonl").read_text().splitlines()]
    return {e["compile_id"]: e["reasons"] for e in events if e.get("kind") == "dynamo_recompile"}


@pytest.mark.slow
def test_a_second_compiled_optimizer_is_named_as_another_optimizer_not_an_object_made_anew(record_run):
    """torch.optim's step code is shared by every optimizer: the second one's first step() recompiles
    it on the optimizer's identity, and each optimizer's filled state once more; torch's first failing
    guard of those is the newer entry's identity guard, the optimizer's own entry failed on its state."""
    run, causes = _explained(record_run, "two_compiled_optimizers.py")
    logged = _torch_recompiles(run)
    # torch's own, as under plain python (TORCH_LOGS=recompiles): one wrapper, SGD.step three times
    # (a fifth, the resume frame after _use_grad's graph break, was cagtool's optimizer hook's doing)
    assert sorted(logged) == ["2/1", "3/1", "3/2", "3/3"]
    assert sum(c["count"] for c in causes) == len(logged)
    by_title = {c["title"]: c for c in causes}
    [other] = [c for t, c in by_title.items() if "another optimizer's first step()" in t]
    assert [e["compile_id"] for e in other["evidence_ids"]] == ["2/1", "3/1"]
    assert all("___check_obj_id" in logged[e["compile_id"]][0] for e in other["evidence_ids"])
    said = " ".join(other["why"] + other["fix"])
    assert other["fix"][0].startswith("Nothing to fix") and "create it once" not in said and "a different object" not in other["title"]
    [state] = [c for t, c in by_title.items() if "the optimizer's state was filled by its first step()" in t]
    assert [e["compile_id"] for e in state["evidence_ids"]] == ["3/2", "3/3"]
    # torch lists the other optimizer's entry first; the state guard is the optimizer's own entry's
    assert all(any("self.state" in r for r in logged[e["compile_id"]][1:]) for e in state["evidence_ids"])
    assert "another optimizer's" in " ".join(state["why"])


@pytest.mark.slow
def test_nested_compiled_modules_are_named_as_another_module_not_a_detached_input(record_run):
    """`c2(c1(x))`: c2's first call recompiles the wrapper frame both modules share, on its input's
    requires_grad (c1's output); one line calls both, so only each compile's guards (which module it
    was for) tell that it is another module and not a GAN's discriminator fed a detached tensor."""
    run, causes = _explained(record_run, "nested_compiled_modules.py")
    logged = _torch_recompiles(run)
    assert list(logged) == ["0/1"] and "requires_grad mismatch" in logged["0/1"][0]  # torch's own
    [cause] = causes
    assert cause["count"] == 1 and cause["title"].startswith("Dynamo recompiled forward frame 0: another compiled module's first call (a Linear)")
    said = " ".join(cause["why"] + cause["fix"])
    assert "0/0 a Sequential(Linear, Tanh), then 0/1 a Linear" in said and "`c2(c1(x))`" in said
    assert "GAN" not in said and "detached" not in said and cause["fix"][0].startswith("Nothing to fix")


@pytest.mark.slow
def test_a_gans_grads_kept_after_the_first_step_are_named_as_one_warm_up_per_backward_graph(record_run):
    """zero_grad(set_to_none=False) in a GAN: torch captures each of the two backward graphs once more
    at step 1 (.grad None, then a kept tensor). The count stays torch's; the cause is the warm-up,
    not a .grad that switches, and not "clear gradients the same way every step"."""
    run, causes = _explained(record_run, "gan_grads_kept.py")
    captures = json.loads(run.stdout.strip().splitlines()[-1])["compiled_autograd"]["captures"]
    assert captures == 4  # torch's own count, in the recorded job itself
    code, out, _ = cli_in_process("recompiles", str(run.path), "--format", "json")
    assert json.loads(out)["modes"]["ca"]["counts"]["ca_recompiles"] == captures - 1
    [warmup] = [c for c in causes if c["code"] == "grad_defined_changed"]
    assert warmup["count"] == 2 and warmup["steps"] == [1]
    assert warmup["title"].startswith(".grad made at the first step, then kept: each backward graph captured once more")
    said = " ".join(warmup["why"] + warmup["fix"])
    assert "gan_grads_kept.py:20" in said and "gan_grads_kept.py:24" in said  # lossD.backward(), lossG.backward()
    assert warmup["fix"][0].startswith("Nothing to fix") and "the same way every step" not in said
    code, summary, _ = cli_in_process("summary", str(run.path))
    assert "one warm-up capture per backward graph" in " ".join(summary.split())


@pytest.mark.slow
def test_a_compiled_step_an_lr_scheduler_wrapped_is_named_as_sharing_the_models_frame(record_run):
    """torch.compile(opt.step) after an LR scheduler: the step is a plain function of torch's, run
    through the compiled model's wrapper frame, which it recompiles on `len(args) == 1`: not a Python
    list whose length changes."""
    run, causes = _explained(record_run, "compiled_model_and_step.py")
    logged = _torch_recompiles(run)
    assert sorted(logged) == ["0/1", "3/1"] and logged["0/1"][0].split(":", 1)[1].strip().startswith("len(args) == 1")  # torch's own
    assert sum(c["count"] for c in causes) == len(logged)
    [shared] = [c for c in causes if c["evidence_ids"][0]["compile_id"] == "0/1"]
    assert "the compiled optimizer step() runs through the compiled modules' shared frame" in shared["title"]
    said = " ".join(shared["why"] + shared["fix"])
    assert "the length of" not in shared["title"] and "LR scheduler" in said and "0/1 a function (the optimizer's step())" in said
    assert shared["fix"][0].startswith("Nothing to fix") and "def opt_step(): opt.step()" in shared["fix"][0]
    assert any("the optimizer's state was filled" in c["title"] for c in causes)


@pytest.mark.slow
def test_two_compiled_modules_alike_but_for_their_widths_are_named_as_another_module(record_run):
    """A GAN's G and D, both compiled, alike in architecture, not in width: G's first call through
    the wrapper frame they share fails D's guard on the input's size. Each compile's guarded
    parameter sizes tell the modules apart: another module's first call, not "mark the dimension
    dynamic"."""
    run, causes = _explained(record_run, "gan_two_widths.py")
    logged = _torch_recompiles(run)
    assert "size mismatch at index 1. expected 4, actual 8" in logged["0/1"][0]  # torch's own
    [cause] = [c for c in causes if "0/1" in json.dumps(c["evidence"])]
    assert "another compiled module's first call (a Sequential(Linear, ReLU, Linear) with 0.weight [16, 8])" in cause["title"]
    said = " ".join(cause["why"] + cause["fix"])
    assert "0/0 a Sequential(Linear, ReLU, Linear) with 0.weight [16, 4], then 0/1 a Sequential(Linear, ReLU, Linear) with 0.weight [16, 8]" in said
    assert "mark the dimension dynamic" not in said and cause["fix"][0].startswith("Nothing to fix")
    # --verify offers no input to make dynamic for it either (the size guard names G's input).
    explanation = explain(recompile_table(load_run(run.path).modes["ca"]))
    (number,) = [c.number for c in explanation.causes if c.facts.get("other_module_by_guards")]
    assert not [f for f in fixes_for(explanation, pgo_suggestion="TORCH_COMPILE_DYNAMIC_SOURCES=\"L['args'][0]\"")
                if number in f.causes and f.name in ("dynamic-sources", "torch-pgo")]
    # Nor does the line that shows torch's own PGO suggestion (its profile saw the size change) let
    # it stand as a fix: every size recompile was the other module's first call.
    from cagtool.commands.recompiles import pgo_scope

    assert "was another compiled module's first call on the frame the compiled modules share" in pgo_scope(explanation)


@pytest.mark.slow
def test_a_recompile_of_a_resume_frame_is_named_the_rest_of_its_function_after_the_graph_break(record_run):
    """A compiled hook dispatcher logs (a graph break at line 29), then calls the hook: Dynamo
    compiles the rest of `call_hook` as a resume function, first for the training step's call,
    then for the backward hook's. The recompile is the resume frame's, after the break, one-time;
    not `training_step`'s (where the failing guard was installed), not "keep argument types fixed"."""
    run, causes = _explained(record_run, "hook_call_after_break.py")
    # (torch 2.14 also recompiles its own frames inside the captures: a cause of their own)
    [resumed] = [c for c in causes if c["code"] == "dynamo_guard_failure" and not c["inside_capture"]]
    assert resumed["title"].startswith("Dynamo recompiled frame 1, the rest of `call_hook` after its graph break at ")
    assert "hook_call_after_break.py:29: a value of another type reached the compiled code" in resumed["title"]
    said = " ".join(resumed["why"])
    assert "Frame 1 is the rest of `call_hook`" in said and "a resume function" in said and "logging.Logger" in said
    assert resumed["fix"][0].startswith("Nothing to fix: a one-time recompile.")
    assert "torch._dynamo.config.ignore_logging_functions" in resumed["fix"][1]
    assert "keep argument types fixed" not in " ".join(resumed["fix"])
    recompiled = _torch_recompiles(run)
    inside = [e["compile_id"] for c in causes if c["inside_capture"] for e in c["evidence_ids"]]
    assert [e["compile_id"] for e in resumed["evidence_ids"]] == [r for r in recompiled if r not in inside] == ["1/1"]  # torch's count
    assert sorted(recompiled) == sorted(["1/1", *inside])


@pytest.mark.slow
def test_a_learning_rate_that_changes_type_then_value_is_read_from_what_torch_guarded(record_run):
    """A warmup that writes its first rate as the int 0, then floats: torch recompiles the compiled
    step twice (int 0 -> float 0.0, then a new value, after which the rate is an input). Each
    recompile is named for what it was, never "taken as an input" beside a second rate recompile."""
    run, causes = _explained(record_run, "compiled_optimizer_int_lr_warmup.py")
    [lr] = [c for c in causes if c["code"] == "dynamo_guard_failure"]
    assert "the learning rate changed" in lr["title"] and "first its type" in lr["title"]
    per = next(line for line in lr["why"] if line.startswith("Per recompile:"))
    first, second = (e["compile_id"] for e in lr["evidence_ids"])
    assert f"{first}: the int `0` became the float `0.0`, the same value of another type" in per
    assert f"{second}: the rate changed from `0.0`, and {second} takes it as an input" in per
    assert "lr=torch.tensor(0.01)" in lr["fix"][0]
    assert "its first rate was the int `0`" in lr["fix"][1] and f"from {second} on, step() takes the rate as an input" in lr["fix"][2]
    assert list(_torch_recompiles(run)) == [first, second]  # torch's count


@pytest.mark.slow
def test_an_attribute_the_forward_sets_on_its_first_call_is_named_with_the_value_to_set_first(record_run):
    """A forward that sets `self.config.problem_type` while it is None (transformers' classifiers
    do): one recompile, named as that attribute set on first use, with the value to set before
    training, read from the guard tree of the new compile."""
    run, causes = _explained(record_run, "config_set_on_first_call.py")
    [none] = [c for c in causes if c["code"] == "dynamo_guard_failure"]
    assert "`self.config.problem_type` was None, then set (a Python attribute of a Config, not a tensor)" in none["title"]
    assert "at the next call it was `'single_label_classification'` (a str)" in " ".join(none["why"])
    assert "`model.config.problem_type = 'single_label_classification'` (`model` being the Classifier" in none["fix"][0]
    assert none["fix"][1].startswith("Or accept it: a one-time recompile")
    assert list(_torch_recompiles(run)) == [e["compile_id"] for e in none["evidence_ids"]]  # torch's count


@pytest.mark.slow
def test_a_size_fix_does_not_claim_the_recompile_goes_where_a_none_guard_failed_in_it_too(record_run):
    """The same forward, its batches 6 rows after a first of 4 (BERT under HF Trainer with dynamic
    padding): torch's reason for 0/1 names the size guard only, but the attribute set by the first
    call failed too. Making the size dynamic removes that cause, not the recompile (--verify's
    ACCELERATE_DYNAMO_USE_DYNAMIC re-run of such a job still recompiles on `config.problem_type`):
    the fix says what remains and how to remove it."""
    run, causes = _explained(record_run, "config_set_on_first_call.py", "--wider-after-first")
    [size] = [c for c in causes if c["code"] == "dynamo_guard_failure"]
    assert "size mismatch at index 0. expected 4, actual 6" in " ".join(size["why"])
    fix = " ".join(size["fix"])
    assert "To skip even that recompile" not in fix and "this recompile goes" not in fix, fix
    assert fix.startswith("To remove this size guard, mark the dimension dynamic"), fix
    assert ("What remains: recompile 0/1 also failed on the guard of `self.config.problem_type`, None when the failed entry "
            "compiled and `'single_label_classification'` at this call") in fix, fix
    assert "`model.config.problem_type = 'single_label_classification'`" in fix
    assert list(_torch_recompiles(run)) == [e["compile_id"] for e in size["evidence_ids"]]  # torch's count


@pytest.mark.slow
def test_an_autograd_grad_whose_gradients_feed_the_loss_is_never_told_to_be_summed_with_it(record_run):
    """An input-gradient penalty: autograd.grad(create_graph=True), then the loss's backward. Two
    calls, each its own graph captured once; summing the losses (the advice for two backward calls
    into the same .grad) cannot compute the first call's gradients, which the loss is made of."""
    _, causes = _explained(record_run, "input_gradient_then_backward.py")
    [second] = [c for c in causes if c["code"] == "graph_structure"]
    assert second["steps"] == [0] and second["source"]["line"] == 17  # loss.backward()
    fix = " ".join(second["fix"])
    assert fix.startswith("Nothing to fix") and "One of the calls is torch.autograd.grad" in fix
    assert "sum the losses" not in fix


@pytest.mark.slow
def test_a_backward_whose_recompiled_forward_computes_more_is_not_removed_by_any_fix_of_the_recompile(record_run):
    """A forward branching on a Python int step: Dynamo recompiles it on the value, and at step 3
    the forward computes one more add, so its backward is a new graph. The step as a tensor stops
    the recompiles, not the add (checked by hand: still 2 captures): the CA cause goes with the
    root's fix only where that fix keeps the forward computing one way, never "removes this too"."""
    _, causes = _explained(record_run, "warmup_branch_on_step.py")
    [follower] = [c for c in causes if c["caused_by"] is not None and c["code"] == "graph_structure"]
    fix = " ".join(follower["fix"])
    assert fix.startswith(f"Goes with #{follower['caused_by']}: the recompiled forward computes differently"), fix
    assert "removes this one too; one that only stops Dynamo recompiling (the value passed as a tensor) does not" in fix
    assert "the backward changed only because its forward was recompiled" not in fix


@pytest.mark.slow
def test_a_gradient_penaltys_graph_captured_again_is_the_root_of_the_losss_new_node(record_run):
    """WGAN-GP's shape (tests/scripts/gradient_penalty.py, aot_eager): the penalty's autograd.grad
    with create_graph=True is captured by compiled autograd, and the loss's backward differentiates
    its compiled graph (a CompiledFunctionBackward node). At the ragged last batch the penalty's
    graph is captured again, then its code recompiled by Dynamo, and each time the loss's backward
    meets a new CompiledFunctionBackward: those captures follow from the penalty's shapes, not
    from "a Python branch or an op picked per step" (what they read, with a torch.where fix)."""
    run = record_run("../tests/scripts/gradient_penalty.py", backend="aot_eager")
    assert run.returncode == 0, run.stderr[-2000:]
    code, out, _ = cli_in_process("recompiles", str(run.path), "--explain", "--format", "json")
    assert code == 0
    causes = json.loads(out)["modes"]["ca"]["explanation"]["causes"]
    [root] = [c for c in causes if c["code"] == "changed_shapes" and c["source"]["line"] == 30]
    [follower] = [c for c in causes if c["caused_by"] == root["number"]]
    assert follower["code"] == "graph_structure"
    text = " ".join(cli_in_process("recompiles", str(run.path), "--explain")[1].split())
    assert f"#{follower['number']} Caused by #{root['number']}: compiled autograd captured the backward again" in text
    assert "a backward taken with create_graph=True (a gradient penalty's autograd.grad) is itself captured" in text
    assert "torch.where" not in text and "a Python branch or an op picked per step" not in text


@pytest.mark.slow
def test_a_size_change_that_stays_is_told_as_maybe_the_next_layers_phase(record_run):
    """One optimizer per layer, each layer trained in turn (forward-forward): layer 1's backward
    has smaller weights from step 12 on, one recompile, never again. That is either a last batch or
    a phase of other shapes: both are said, and the steps are the script's (24, not lumps)."""
    run = record_run(SHAPES, "layers", "12")  # the recording test_steps.py counts the steps of
    assert run.returncode == 0, run.stderr[-2000:]
    code, out, _ = cli_in_process("recompiles", str(run.path), "--explain", "--format", "json")
    assert code == 0
    (cause,) = json.loads(out)["modes"]["ca"]["explanation"]["causes"]
    assert cause["code"] == "changed_shapes"
    why = " ".join(cause["why"])
    assert "Every size that changed got smaller, once" in why
    assert "Or, with 11 steps after it and no recompile, the sizes changed for good at step 12" in why
    assert "the next layer trained in turn" in why
    # The fix says what to do under each reading, not only that the last batch is to be dropped.
    # No DataLoader in this job (the record counts none): the last batch is a slice the script made.
    assert cause["fix"][0].startswith("If it is the last batch: no DataLoader ran in this job, so it is a slice the script "
                                      "makes itself") and "drop_last" not in cause["fix"][0] and (
        "Or, if the sizes changed for good at step 12 (a phase of other shapes: the next layer trained in turn" in cause["fix"][0]), cause["fix"]


@pytest.mark.slow
def test_a_gans_second_backward_after_an_optimizer_step_is_not_told_to_sum_the_losses(record_run):
    """dcgan: optimizerD.step() runs between errD's and errG's backward calls, and errG's backward
    fills netD's .grad too: summing the losses into one backward would change what the
    discriminator steps on. The second call's graph is its own, and no sum is advised."""
    run = record_run(SHAPES, "gan-dg", "3")
    assert run.returncode == 0, run.stderr[-2000:]
    code, out, _ = cli_in_process("recompiles", str(run.path), "--explain", "--format", "json")
    assert code == 0
    causes = json.loads(out)["modes"]["ca"]["explanation"]["causes"]
    second = next(c for c in causes if c["title"].startswith("A step calls backward more than once"))
    fix = " ".join(second["fix"])
    assert "sum the losses and call backward once" not in fix and "Do not sum these losses" in fix
    assert "An optimizer stepped between them in step 0" in " ".join(second["why"])
    # The summary reads the record without its optimizer steps: its advice is the same.
    code, out, _ = cli_in_process("summary", str(run.path), env={"COLUMNS": "250"})
    assert code == 0
    advice = next(line for line in out.splitlines() if line.startswith("what to do:"))
    assert "Do not sum these losses" in advice and "sum the losses and call backward once" not in advice, advice
    # Captured once each: the gate does not count the generator's first graph as a recompile.
    code, out, _ = cli_in_process("gate", str(run.path), "--max-recompiles", "ca:0", env={"COLUMNS": "250"})
    assert code == 0 and "not counted: " in out and "the first graph of a step's other backward call" in out, out


@pytest.mark.slow
def test_a_model_compiled_from_a_step_on_is_a_change_of_phase_not_a_branch(record_run):
    """The forward runs compiled from step 3 on: its backward is one CompiledFunctionBackward node
    where it had eager nodes. One structure change, told as a phase, with no torch.where advice."""
    run, causes = _explained(record_run, "compiled_from_a_step.py")
    (cause,) = [c for c in causes if c["code"] == "graph_structure"]
    why, fix = " ".join(cause["why"]), " ".join(cause["fix"])
    assert "From step 3 the backward holds one CompiledFunctionBackward node where it had eager nodes" in why
    assert "a change of phase, not a branch" in why and "a Python branch" not in why
    assert "torch.where" not in fix and fix.startswith("Nothing to fix")


@pytest.mark.slow
def test_a_recompile_for_an_object_freed_and_made_anew_is_nothing_to_fix_once(record_run):
    """A new optimizer for a second phase, its step() compiled: torch drops the code compiled for the
    freed one ("Cache line invalidated because G['opt'] got deallocated") and compiles once for the
    new one. Not "keep the guarded value the same": nothing to fix once, create it once if per step."""
    run, causes = _explained(record_run, "new_optimizer_phase.py")
    freed = [c for c in causes if "got deallocated" in " ".join(c["why"])]
    assert freed and all(c["fix"][0].startswith("Nothing to fix if `") and "create it once, before the loop" in c["fix"][0] for c in freed)
    assert not any("Keep the guarded value the same" in f for c in freed for f in c["fix"])


@pytest.mark.slow
def test_a_second_backward_of_the_same_nodes_finds_its_earlier_sizes_past_the_first_ones_dynamic_graph(record_run):
    """dcgan's errD_real and errD_fake: at the last batch (8 -> 3) the first call's graph is captured
    dynamic, then the second's; the second's earlier sizes are in the graph before that dynamic one
    (it reads sizes, no constants). One cause, the last batch met by both calls, with its values and its fix."""
    run, causes = _explained(record_run, "two_backwards_last_batch.py")
    shapes = [c for c in causes if c["code"] == "changed_shapes"]
    assert len(shapes) == 1 and len(shapes[0]["backward_calls"]) == 2, [c["title"] for c in causes]
    for cause in shapes:
        why = " ".join(cause["why"])
        assert "no recorded graph" not in why and "vary from batch to batch" not in why
        assert "sizes[0-2] of MeanBackward0 (NodeCall 1): 8, 3" in why and "Every size that changed got smaller, once" in why
        assert cause["fix"][0].startswith("If it is the last batch: no DataLoader ran in this job")  # its batches are slices
        # each size named by the node its graph runs at that NodeCall (torch's origins gave TBackward0, AccumulateGrad)
        assert "sizes[5] of TanhBackward0 (NodeCall 5): 8, 3, sizes[6] of AddmmBackward0 (NodeCall 6): 8, 3" in why


@pytest.mark.slow
def test_a_reshape_that_views_a_last_batch_of_one_is_the_last_batch_not_a_branch(record_run):
    """A transposed tensor reshaped (an attention layer's heads): with a last batch of one example
    reshape() views it where it copied it before, and the backward's nodes change (HF Trainer's BERT
    on 21 examples in batches of 4). The last batch, not a branch and torch.where; the script slices
    its batches itself (no DataLoader), so the fix skips the slice of one rather than drop_last."""
    run, causes = _explained(record_run, "reshape_last_batch_of_one.py")
    (cause,) = causes
    why, fix = " ".join(cause["why"]), " ".join(cause["fix"])
    assert "At step 2 a reshape() made a view where it had made a copy" in why and "a last batch of one example" in why
    assert "a Python branch" not in why and "torch.where" not in fix
    # Its batches are the script's own slices (no DataLoader ran): no drop_last, the slice of one skipped.
    assert fix.startswith("If a last batch of one example does it: no DataLoader ran in this job") and "drop_last" not in fix, fix


@pytest.mark.slow
def test_a_number_a_node_saved_that_shrinks_with_the_last_batch_is_the_last_batch_not_a_router(record_run):
    """Soft targets (torchvision's classification reference with mixup/CutMix): CrossEntropyLoss's
    DivBackward1 saves the batch size as a number, and the last batch of 5 (45 examples in batches of
    8) misses compiled autograd's cache on it: torch names a new DivBackward1, the graphs' nodes the
    same at the same NodeCalls. It read as "joined another way: a router", with torch.where; the
    graph files show every number that changed shrank 8 -> 5: the last batch, with drop_last."""
    run, causes = _explained(record_run, "soft_target_last_batch.py")
    (cause,) = causes
    why, fix = " ".join(cause["why"]), " ".join(cause["fix"])
    assert cause["title"].startswith("A number the backward's nodes saved changes between iterations (1 recompile)")
    assert "DivBackward1 8 -> 5" in why and "Every number that changed shrank by the same factor, once (8 -> 5" in why
    assert "joined another way" not in why and "router" not in why and "torch.where" not in fix
    assert fix.startswith("If it is the last batch: drop it (DataLoader(..., drop_last=True)")
    code, out, _ = cli_in_process("summary", str(run.path))
    assert code == 0 and "from 1 cause: a number the backward saved changed (8->5: a smaller batch, a DataLoader's last?) at step 5" in out


@pytest.mark.slow
def test_a_resume_frames_stack_value_is_never_named_as_a_variable_to_mark(record_run):
    """The frame that resumes after a graph break in a called block gets the block's output as
    `___stack0`, a name Dynamo made: no fix tells the user to call maybe_mark_dynamic on it, and
    the break is named where it is, inside the called block's file. The place of the attribute the forward sets on its first call is the script's own file, which
    torch's guard comment may cut to its last characters."""
    run, causes = _explained(record_run, "resume_frame_shapes.py")
    fixes = [f for c in causes for f in c["fix"]]
    assert not [f for f in fixes if "maybe_mark_dynamic(___stack0" in f], fixes
    [stack] = [c for c in causes if "___stack0" in " ".join(c["why"])]
    assert stack["fix"][0].startswith("`___stack0` is no variable of yours: it is a value Dynamo carried across a graph break")
    why = " ".join(w for c in causes for w in c["why"])
    place = re.search(r"on its first call \(`self\.mask = mask` at (?P<file>\S+):24\)", why)
    assert place is not None, why
    cwd = json.loads((run.path / "ca" / "manifest.json").read_text())["cwd"]
    assert (Path(cwd) / place["file"]).resolve() == (Path(__file__).parents[2] / "scripts" / "resume_frame_shapes.py").resolve()
    # The break that made the resume frame is inside the called block, in its own file: named there.
    broke = next(f for f in stack["fix"] if f.startswith("The graph break that made the resume frame is at "))
    assert re.search(r"at \S*resume_frame_shapes\.py:25 \(inside the call there, at \S*graph_breaking_block\.py:13\): ", broke), broke


@pytest.mark.slow
def test_a_second_backward_calls_hook_is_its_own_graph_not_a_hook_added(record_run):
    # The second call's first graph has a tensor hook the first call's graph has not: read against
    # the graph captured just before it (the other call's), it looked like a hook added.
    run, causes = _explained(record_run, "two_calls_hook_added.py")
    assert "backward_hook" not in [c["code"] for c in causes], [c["title"] for c in causes]
    second = next(c for c in causes if c["code"] == "graph_structure")
    assert second["title"].startswith("A step calls backward more than once")
    assert second["source"]["line"] == 21  # z.sum().backward()
    code, summary, _ = cli_in_process("summary", str(run.path))
    assert code == 0 and "backward hook" not in summary.split("\n")[0]
    # At step 2 the first call, now with a hook of its own, runs the second call's cache entry (the
    # same structure and hook count): Dynamo compiles that graph once more, for the other hook's
    # code, and the lambda made again each step at line 20 never recompiles it.
    (hook_code,) = [c for c in causes if c["code"] == "dynamo_ca_graph_guard_failure"]
    assert "another hook function ran in the compiled-autograd graph" in hook_code["title"]
    assert [e["step"] for e in hook_code["evidence_ids"]] == [2]
    assert hook_code["fix"][0].startswith("Nothing to fix") and "outside the loop" not in " ".join(hook_code["fix"])


@pytest.mark.slow
def test_a_recompile_is_read_against_the_graph_its_own_backward_call_replaced(record_run):
    # gan_last_batch.py: three backward calls a step (!0, !1, !2), each recaptured for the last batch (!3, !4, !5).
    run = record_run("../tests/scripts/gan_last_batch.py")
    assert run.returncode == 0, run.stderr[-2000:]
    from cagtool.record.loader import load_mode
    from cagtool.report.recompiles.table import recompile_table

    table = recompile_table(load_mode(run.path / "ca"))
    assert sorted(table.graphs) == [0, 1, 2, 3, 4, 5]
    assert {i: table.previous_graph(i).ca_id for i in (1, 2, 3, 4, 5)} == {1: 0, 2: 1, 3: 0, 4: 1, 5: 2}


@pytest.mark.slow
def test_one_shorter_batch_met_by_each_of_a_gans_backward_calls_is_one_cause(record_run):
    # gan_last_batch.py: the last batch (8 -> 3) recaptures each of the step's three backward calls'
    # graphs (!3, !4, !5 at step 2) and Dynamo compiles each again for the next epoch's 8 (step 3):
    # one change of the data, one cause naming the three calls, not three alike.
    run, causes = _explained(record_run, "gan_last_batch.py")
    shapes = [c for c in causes if c["code"] == "changed_shapes"]
    assert len(shapes) == 1, [c["title"] for c in causes]
    (cause,) = shapes
    assert [e["compile_id"] for e in cause["evidence_ids"]] == ["!3", "!4", "!5", "!3/3/1", "!4/4/1", "!5/5/1"]
    assert [(call["file"].rsplit("/", 1)[-1], call["line"]) for call in cause["backward_calls"]] == [("gan_last_batch.py", n) for n in (20, 21, 24)]
    assert cause["title"].startswith("Tensor shapes changed (6 recompiles: 3 CA cache misses, one for each backward call,")
    assert any("met each of the step's 3 backward calls (" in w and "gan_last_batch.py:20, 21 and 24)" in w for w in cause["why"])
    # still a shorter batch that changed once, whose fix is the last batch's
    assert any(w.startswith("Every size that changed got smaller, once") for w in cause["why"])
    assert cause["fix"][0].startswith("If it is the last batch")
    code, summary, _ = cli_in_process("summary", str(run.path))
    assert code == 0 and "(the backward calls at gan_last_batch.py:20, 21, 24)" in summary, summary


@pytest.mark.slow
def test_a_backward_recaptured_after_each_of_two_forward_causes_follows_each(record_run):
    # Each forward recompile (an attribute set by the first call at step 1, a shorter batch at step 3)
    # gives the backward a new CompiledFunctionBackward at the same place: two consequences, not a branch.
    run, causes = _explained(record_run, "two_forward_causes.py", backend="aot_eager")
    by_number = {c["number"]: c for c in causes}
    backward = [c for c in causes if c["code"] == "graph_structure"]
    assert [c["steps"] for c in backward] == [[1], [3]], [c["title"] for c in causes]
    assert all(c["caused_by"] is not None for c in backward)
    assert [by_number[c["caused_by"]]["steps"] for c in backward] == [[1], [3]]
    assert "torch.where" not in " ".join(f for c in causes for f in c["fix"])
    # the node named as its graph's code (and diff-graphs) names it, not as torch's miss message does
    for cause in backward:
        differs = next(w for w in cause["why"] if w.startswith("The node that differs"))
        assert re.search(r"CompiledFunctionBackward\d+ -> CompiledFunctionBackward\d+ ", differs), differs


@pytest.mark.slow
def test_a_reentrant_checkpoints_longer_sequence_is_a_size_change_and_its_recompute_is_named(record_run):
    run, causes = _explained(record_run, "reentrant_checkpoint_length.py")
    events = [json.loads(line) for line in (run.path / "ca" / "events.jsonl").read_text().splitlines()]
    reasons = {e["compile_id"]: e["reasons"] for e in events if e.get("kind") == "dynamo_recompile"}
    # torch lists the recompute's entry (made with grad on) first, failing on the grad mode; the
    # forward's own entry fails on the size
    at_4 = next(r for i, r in reasons.items() if not i.startswith("!") and len(r) > 1)
    assert "grad_mode" in at_4[0] and "size mismatch" in at_4[1], at_4
    size = next(c for c in causes if "a tensor's size changed" in c["title"])
    assert size["steps"] == [4] and len(size["evidence_ids"]) == 2  # the forward's and its recompute's
    # a mark keeps the forward's graph; the recompute's detached inputs keep none (checked by hand, torch 2.13)
    assert "maybe_mark_dynamic(x, 1)" in size["fix"][0]
    assert size["fix"][1].startswith("1 recompile of these is the reentrant checkpoint's recompute") and "use_reentrant=False" in size["fix"][1]
    grad = next(c for c in causes if "grad mode" in c["title"])
    assert "reentrant checkpoint's recompute of `Block.forward`" in grad["title"] and grad["steps"] == [0]
    assert grad["fix"][0].startswith("checkpoint(..., use_reentrant=False)")
    assert "_orig_mod" not in " ".join(f for c in causes for f in c["fix"])
    code, out, _ = cli_in_process("recompiles", str(run.path), "--explain")
    # 0/2 is the size, not an evaluation; the recompute's grad mode is #-numbered above, not said again
    assert "grad mode changed around the compiled call" not in out and "may not expect" not in out, out


@pytest.mark.slow
def test_a_recompile_on_a_librarys_hook_state_is_named_as_the_librarys(record_run):
    # library_hook_state.py: a hook of a package under site-packages (as DeepSpeed's ZeRO hooks, whose
    # `not self.ipg_buckets[...].buffer` fills at the first step) reads its own list; it is no list of the user's.
    run, causes = _explained(record_run, "library_hook_state.py")
    (cause,) = [c for c in causes if c["code"] == "dynamo_ca_graph_guard_failure"]
    assert "`hooks[1].__self__.pending`" in cause["title"] and cause["steps"] == [1]
    assert "all bucketlib's: Buckets.hook (bucketlib/__init__.py:6)" in " ".join(cause["why"])
    assert cause["fix"][0].startswith("Nothing to change in your code: the value is bucketlib's")
    assert "Keep the list out of the compiled code" not in " ".join(cause["fix"])


@pytest.mark.slow
def test_a_tensor_input_that_becomes_a_parameter_is_named_as_its_type(record_run):
    run, causes = _explained(record_run, "parameter_type_change.py")
    events = [json.loads(line) for line in (run.path / "ca" / "events.jsonl").read_text().splitlines()]
    (reasons,) = [e["reasons"] for e in events if e.get("kind") == "dynamo_recompile" and not e["compile_id"].startswith("!")]
    # torch's words, as recorded (2.14 and 2.15: "to be <class 'torch.Tensor'>, but found ...").
    assert "expected type of 't' to be a tensor type" in reasons[0] or "expected type of 't' to be <class 'torch.Tensor'>" in reasons[0], reasons
    (cause,) = [c for c in causes if c["code"] == "dynamo_guard_failure"]
    assert "the tensor passed as `t` is of another type than when compiled (nn.Parameter now)" in cause["title"]
    assert cause["steps"] == [3] and "`p.detach()`" in cause["fix"][0]
    assert "Keep the guarded value" not in " ".join(cause["fix"])


def test_a_cause_whose_recompiles_came_from_two_lines_names_both():
    # a longer sequence recompiles the training call (line 41) and, at the next evaluation, its call (line 52)
    from cagtool.record.schema import SourceRef
    from cagtool.report.recompiles.explain import Cause, _other_lines
    from cagtool.report.recompiles.table import RecompileRow

    def row(compile_id: str, line: int, code: str) -> RecompileRow:
        return RecompileRow("ca", "dynamo_frame", compile_id, 30, "guard_failure", (1,),
                            user_source=SourceRef(file="/w/train.py", line=line, code=code, function="<module>", how="caller"))
    rows = [row("0/2", 41, "logits = cmodel(idx)"), row("0/3", 52, "ev = cmodel(x)"), row("0/4", 41, "logits = cmodel(idx)")]
    cause = Cause(code="dynamo_guard_failure", rows=rows, source=rows[0].user_source)
    assert _other_lines(cause, "/w") == "; 0/3 at train.py:52  ev = cmodel(x)"
    assert _other_lines(Cause(code="dynamo_guard_failure", rows=rows[:1], source=rows[0].user_source), "/w") == ""


@pytest.mark.slow
def test_a_module_hook_registered_every_step_is_named_in_the_ca_graphs_guard_and_where_it_first_shows(record_run):
    run, causes = _explained(record_run, "module_hook_piles_up.py")
    (user_hooks,) = [c for c in causes if c["code"] == "dynamo_ca_graph_guard_failure"]
    assert "the number of a module's full backward hooks changed" in user_hooks["title"] and ".user_hooks" in user_hooks["title"]
    assert user_hooks["fix"][0].startswith("Register the module's full backward hook once, before the training loop")
    assert "Keep the list out of the compiled code" not in " ".join(user_hooks["fix"])
    (added,) = [c for c in causes if c["code"] == "hook_changed"]
    why = " ".join(added["why"])
    # the hook shows first where the recompile limit sent the module's frame to eager, not where it was registered
    assert "first appears in the graph captured at step 8, the step Dynamo's recompile limit sent a frame to eager" in why
    assert "is registered on step 8" not in why


@pytest.mark.slow
def test_torchs_call_hook_given_another_kind_of_argument_is_nothing_to_fix(record_run):
    # Hooks Dynamo cannot trace whole run through torch's call_hook, compiled per kind of argument:
    # the post-accumulate-grad hook's Parameter, then the tensor hook's gradient (DeepSpeed ZeRO's
    # hooks, in a 2-rank job, read "pass the same kind every call" to its user before).
    run, causes = _explained(record_run, "hook_runner_types.py")
    (cause,) = [c for c in causes if c["code"] == "dynamo_ca_graph_guard_failure"]
    assert any(f"expected type of 'args[0]' to be {words}" in " ".join(cause["why"]) for words in ("a tensor type", "<class 'torch."))
    assert cause["title"].endswith("torch's call_hook, which runs the graph's hooks, was given another type of tensor "
                                   "(torch.Tensor now) (1 recompile)"), cause["title"]
    assert cause["fix"][0].startswith("Nothing to fix: the compiled-autograd graph runs its hooks")
    assert "`p.detach()`" not in " ".join(cause["fix"])



@pytest.mark.slow
def test_a_last_batch_through_a_graph_broken_forward_is_one_cause(record_run):
    """Two graph breaks split the forward into three frames and the last batch (2 rows, not 4)
    recompiles each: one change, one root cause (the first frame), the other frames and the
    backward's capture following it; the summary counts one cause, as an HF Trainer's last batch
    through its model's graph-broken forward is (5 frames there)."""
    run, causes = _explained(record_run, "last_batch_broken_forward.py")
    roots = [c for c in causes if c.get("caused_by") is None]
    assert len(roots) == 1 and roots[0]["code"] == "dynamo_guard_failure", [c["title"] for c in causes]
    frames = [c for c in causes if c["code"] == "dynamo_guard_failure" and c.get("caused_by") == roots[0]["number"]]
    assert len(frames) == 2, [c["title"] for c in causes]
    for frame in frames:
        assert frame["title"].startswith(f"Caused by #{roots[0]['number']}, the same change: Dynamo recompiled frame "), frame["title"]
        assert frame["fix"][0].startswith(f"What removes #{roots[0]['number']} by the batch (dropping or padding it) removes this one too.")
    assert all(c.get("caused_by") == roots[0]["number"] for c in causes if c is not roots[0])
    code, summary, _ = cli_in_process("summary", str(run.path))
    assert code == 0 and "1 CA recompile and 3 Dynamo recompiles, all from 1 cause: a smaller batch" in summary.split("\n")[0], summary



@pytest.mark.slow
def test_an_evaluations_size_recompile_before_the_first_step_reads_before_step_0(record_run):
    """Lightning's sanity check runs validation_step under no_grad before the first training step:
    its last batch's size recompile was said "step 0", as if training made it. Called from an
    evaluation's function with grad off, it reads as evaluation recompiles do: before step 0."""
    run, causes = _explained(record_run, "sanity_validation_first.py")
    [size] = [c for c in causes if "size changed" in c["title"]]
    assert [e["compile_id"] for e in size["evidence_ids"]] == ["0/1"]
    text = cli_in_process("recompiles", str(run.path), "--explain")[1]
    heading = next(line for line in text.splitlines() if line.startswith(f"#{size['number']} "))
    assert heading.endswith("before step 0 (grad off: an evaluation, not a training step)"), heading
    assert "Evidence: 0/1 (before step 0, seq" in text
    summary = cli_in_process("summary", str(run.path))[1]
    assert "recompile 0/1 before step 0: tensor 'args[0]' size mismatch" in summary, summary
    assert "changed 16->14 before step 0" in summary.splitlines()[0], summary.splitlines()[0]
    # The training's own recompile (grad mode back on) stays at step 0.
    assert "recompile 0/2 at step 0: GLOBAL_STATE changed: grad_mode" in summary
    assert list(_torch_recompiles(run)) == ["0/1", "0/2"]  # torch's count


@pytest.mark.slow
def test_the_headlines_advice_opens_plainly_on_a_one_time_recompile(record_run):
    """--explain's fix for a one-time size recompile follows its "one recompile in all": "To skip
    even that recompile, mark ...". The headline's what-to-do has no such sentence before it. Here
    the one-time recompile is an evaluation's last batch (the validation loader's, met first): keep
    it leads, the mark comes after it in --explain."""
    run, _ = _explained(record_run, "sanity_validation_first.py")
    lines = cli_in_process("summary", str(run.path))[1].splitlines()
    advice = next(line for line in lines if line.startswith("what to do: "))
    assert advice.startswith("what to do: If it is the evaluation's last batch (the call is in `validation_step`), keep it"), advice
    assert "even that" not in advice
