"""Explanations checked against shapes real stacks gave: a compiled submodule called from a
LightningModule's one-line forward (`def forward(self, x): return self.net(x)`) with validation's
ragged last batch under no_grad; an HF Trainer whose padded length and ragged last batch both
recompile the forward (two dims, two causes); DeepSpeed ZeRO's per-parameter hooks giving torch's
call_hook parameters of two ranks ("Guard failed on a parameter")."""

from __future__ import annotations

from cagtool.record.schema import SourceRef
from cagtool.report.recompiles.calls import uncompiled_call
from cagtool.report.recompiles.explain import _group_key, _guard_fixes, _guard_why, guard_label
from cagtool.report.recompiles.table import RecompileRow
from cagtool.torch_text import GUARD_GRAD_MODE, GUARD_SIZE

LIGHTNING_FORWARD = "def forward(self, x): return self.net(x)"
PARAMETER_RANK = ("tensor 'args[0]' rank mismatch. expected 1, actual 2. Guard failed on a parameter, consider using "
                  "torch._dynamo.config.force_parameter_static_shapes = False to allow dynamism on parameters.")


def _row(compile_id: str, guard: str, source: str = "dynamo_frame", hook_runner: bool = False) -> RecompileRow:
    return RecompileRow("ca", source, compile_id, 30, "guard_failure", (1,), messages=(f"{compile_id[:-1]}0: {guard}",),
                        user_source=SourceRef(file="/w/train.py", line=41, code="out = tr.train()", function="<module>", how="caller"),
                        hook_runner=hook_runner)


def test_args_0_of_a_submodule_called_in_a_one_line_forward_is_the_tensor_not_self():
    facts = {"kind": GUARD_SIZE, "guard": "tensor 'args[0]' size mismatch at index 0. expected 8, actual 4", "stabilised": True}
    mark = _guard_fixes(facts, False, LIGHTNING_FORWARD)[0]
    assert "maybe_mark_dynamic(x, 0)" in mark and "maybe_mark_dynamic(self" not in mark, mark
    # the module compiled is the one the body calls, not the function the line defines
    assert uncompiled_call(LIGHTNING_FORWARD) == "self.net._orig_mod(x)"
    grad = _guard_fixes({"kind": GUARD_GRAD_MODE, "guard": "GLOBAL_STATE changed: grad_mode", "stabilised": True}, False, LIGHTNING_FORWARD)
    assert "`self.net._orig_mod(x)`" in grad[1] and "forward._orig_mod" not in grad[1], grad


def test_a_smaller_batch_that_ran_with_grad_off_is_an_evaluations_not_untrained_samples():
    facts = {"kind": GUARD_SIZE, "guard": "tensor 'args[0]' size mismatch at index 0. expected 8, actual 4", "stabilised": True,
             "called_in": "forward", "grad_mode_after": False}
    said = " ".join(_guard_fixes(facts, False, LIGHTNING_FORWARD))
    assert "not trained on that epoch" not in said and "drop_last=True) drops it" not in said, said
    assert "If it is the evaluation's last batch (it ran with grad mode off), keep it" in said
    assert "the smaller batch is an evaluation's, not training's" in " ".join(_guard_why(facts, LIGHTNING_FORWARD))
    # with grad on, or not known, a training loader's last batch keeps its drop_last
    for mode in (True, None):
        assert "not trained on that epoch" in " ".join(_guard_fixes({**facts, "grad_mode_after": mode}, False, LIGHTNING_FORWARD))


def test_a_padded_length_and_a_ragged_last_batch_of_one_frame_are_two_causes():
    length = _row("0/1", "tensor 'kwargs['input_ids']' size mismatch at index 1. expected 17, actual 20")
    longer = _row("0/3", "tensor 'kwargs['input_ids']' size mismatch at index 1. expected 20, actual 24")
    last = _row("0/2", "tensor 'kwargs['input_ids']' size mismatch at index 0. expected 4, actual 2")
    assert _group_key(None, length, {}) == _group_key(None, longer, {})  # a length that varies per batch: one cause
    assert _group_key(None, length, {}) != _group_key(None, last, {})


def test_a_librarys_per_parameter_hooks_given_parameters_of_two_ranks_are_not_your_code():
    hooked = _row("!0/24/2", PARAMETER_RANK, source="dynamo_ca_graph", hook_runner=True)
    refused = _row("!0/24/8", PARAMETER_RANK, source="dynamo_ca_graph")  # refused at the limit: no code recorded
    sized = _row("!0/23/1", "tensor 'inputs[3]' size mismatch at index 0. expected 24, actual 32", source="dynamo_ca_graph")
    frames = frozenset({"!0/24"})
    assert _group_key(None, hooked, {}, frames) == _group_key(None, refused, {}, frames)
    assert _group_key(None, hooked, {}, frames) != _group_key(None, sized, {}, frames)
    facts = {"kind": GUARD_SIZE, "guard": PARAMETER_RANK, "stabilised": False,
             "hook_runner": (["tensor_pre_hook", "post_acc_grad_hook"], "deepspeed")}
    fixes = _guard_fixes(facts, True, "engine.backward(loss)")
    assert fixes[0].startswith("Not your code: deepspeed's hooks, each given its parameter (1-D, then 2-D)"), fixes
    assert "pass tensors of one rank" not in " ".join(fixes)
    why = " ".join(_guard_why(facts, "engine.backward(loss)", on_ca=True))
    assert "torch._dynamo.config.force_parameter_static_shapes = False, lets a parameter's sizes be dynamic, not its number" in why
    assert guard_label(facts).startswith("torch's call_hook, which runs the graph's hooks, was given a tensor with another number")


def test_a_size_guard_that_failed_on_a_parameter_names_torchs_hint():
    guard = ("tensor 'p' size mismatch at index 0. expected 4, actual 6. Guard failed on a parameter, consider using "
             "torch._dynamo.config.force_parameter_static_shapes = False to allow dynamism on parameters.")
    fixes = _guard_fixes({"kind": GUARD_SIZE, "guard": guard}, False, "out = f(p)")
    assert any("torch._dynamo.config.force_parameter_static_shapes = False before the first compiled call" in f for f in fixes), fixes


def test_the_compiled_call_on_a_line_of_several_is_the_one_whose_arguments_bind_to_the_compiled_forward():
    """A line that calls the compiled model inside another call (`criterion(model(x), y)`) or with
    the results of others (`model(input_ids=batch(32), labels=batch(32))`): the fix names the
    compiled model, from the parameters of the function Dynamo compiled (the record's co_argnames),
    never the loss (`criterion._orig_mod`, no such attribute) nor the batch maker."""
    from cagtool.report.recompiles.calls import compiled_call

    assert uncompiled_call("loss = criterion(model(x), y)", ("self", "x")) == "model._orig_mod(x)"
    gpt2 = ("self", "input_ids", "past_key_values", "attention_mask", "labels")
    assert uncompiled_call("val = model(input_ids=batch(32), labels=batch(32)).loss", gpt2) == "model._orig_mod(input_ids=batch(32), labels=batch(32))"
    assert uncompiled_call('self.log("v", loss_fn(self.model(x), y))', ("self", "x")) == "self.model._orig_mod(x)"
    assert uncompiled_call("y = model(batch(32))", ("self", "x")) == "model._orig_mod(batch(32))"  # the outermost of equals
    # the parameters not known: the line's own reading, as before
    assert uncompiled_call("loss = criterion(model(x), y)") == "criterion._orig_mod(model(x), y)"
    # the script's own names for compiled code decide first (verify/patches.py reads them)
    assert compiled_call("loss = criterion(model(x), y)", (), {"model"}) == ("model", "x")
    assert compiled_call("loss = criterion(model(x), y)", ()) is None
