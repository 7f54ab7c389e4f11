"""Torch's text formats (cagtool/torch_text.py), each pinned on a string torch 2.13 wrote: copied
from a TORCH_TRACE log or a record of tests/scripts/trace_jobs (single_job.py, batch_size_job.py)
and sample_scripts, or made by torch in the test itself (a tiny compiled-autograd backward)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cagtool import torch_text as tt

# -- compiled autograd's cache-miss messages ----------------------------------------------------


def test_a_new_node_miss():
    # A TORCH_TRACE log's `compiled_autograd_compile_reasons` (single_job.py verbose).
    reason = "!1: Cache miss due to new autograd node: torch::autograd::AccumulateGrad (NodeCall 4) with key size 33, previous key sizes=[22]"
    ca_id, message = tt.split_ca_reason(reason)
    assert ca_id == 1 and message.startswith("Cache miss due to new autograd node")
    assert tt.parse_miss(message) == {
        "miss_kind": "new_node",
        "node": "torch::autograd::AccumulateGrad",
        "node_call": 4,
        "key_size": 33,
        "previous_key_sizes": [22],
    }
    assert tt.split_ca_reason(message) == (None, message)


def test_a_changed_shapes_miss():
    # A live record's ca_cache_miss (a batch size 32 -> 48).
    message = "Cache miss due to 8 changed tensor shapes (total of 8): sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6], sizes[7]"
    assert tt.parse_miss(message) == {
        "miss_kind": "changed_shapes",
        "indices": list(range(8)),
        "total_changed": 8,
        "dynamic_sizes": 8,
    }
    assert tt.parse_miss("something torch has not said yet") == {"miss_kind": "unknown"}


def test_the_messages_torch_makes_now_parse():
    """The same formats, made by the installed torch: a backward captured for 2 rows, again for 2
    (a hit), then for 3 (changed shapes)."""
    from cagtool.doctor import tiny_capture

    capture = tiny_capture()
    misses = [m for m in capture.verbose_messages if m.startswith("Cache miss")]
    assert [tt.parse_miss(m)["miss_kind"] for m in misses] == ["new_node", "changed_shapes"]
    reasons = [tt.split_ca_reason(r[-1]) for r in capture.compile_reasons]
    assert [ca_id for ca_id, _ in reasons] == [0, 1]
    assert tt.parse_miss(reasons[0][1])["node"] == "torch::autograd::GraphRoot"


# -- compile ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "compile_id, frame, attempt, ca_id",
    [("0/0", "0", 0, None), ("0/1", "0", 1, None), ("!0/1/0", "1", 0, 0), ("!1/2/3", "2", 3, 1), ("!3", None, None, 3), ("?", None, None, None)],
)
def test_compile_ids(compile_id, frame, attempt, ca_id):
    assert tt.compile_frame(compile_id) == frame
    assert tt.compile_attempt(compile_id) == attempt
    assert tt.ca_id_of(compile_id) == ca_id


def test_compile_id_from_a_records_fields():
    # The envelope fields torch writes with each structured record.
    assert tt.compile_id_of({"frame_id": 0, "frame_compile_id": 1, "attempt": 0}) == "0/1"
    assert tt.compile_id_of({"compiled_autograd_id": 0, "attempt": 0}) == "!0"
    assert tt.compile_id_of({"compiled_autograd_id": 1, "frame_id": 2, "frame_compile_id": 0}) == "!1/2/0"
    assert tt.compile_id_of({}) == "?"


def test_a_guard_failure_line_and_its_user_stack():
    # guards.py's reason string (TORCH_LOGS=recompiles), with the user stack torch appends.
    reason = ("0/0: tensor 'args[0]' size mismatch at index 0. expected 32, actual 48\n"
              "User stack trace:\n"
              '  File "/work/job/train.py", line 8, in <module>\n'
              "    loss = model(x).pow(2).mean()\n"
              '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1776, in _call_impl\n'
              "    return forward_call(*args, **kwargs)")
    first = reason.splitlines()[0]
    assert tt.strip_reason_id(first) == "tensor 'args[0]' size mismatch at index 0. expected 32, actual 48"
    assert tt.strip_reason_id("- 0/1: ___check_obj_id(L['self'], 1)") == "___check_obj_id(L['self'], 1)"
    frames = tt.traceback_frames(reason)
    assert frames[0] == ("/work/job/train.py", 8, "<module>", "loss = model(x).pow(2).mean()")
    assert [tt.looks_like_user_file(f[0]) for f in frames] == [True, False]


def test_a_reason_reads_as_one_line_with_the_jobs_line_that_installed_the_guard():
    # torch 2.13's reason (guards.py), as recorded from a job whose compiled `f` multiplies by an
    # int argument: the guard with its comments (a path torch cut to its last characters), then
    # the user stack it appends.
    reason = ("0/0: k == 1                                                   # return m(x) * k  # mp/ov/scal.py:5 in f\n"
              "User stack trace:\n"
              '  File "/tmp/ov/scal.py", line 5, in f\n'
              "    return m(x) * k")
    assert tt.reason_line(reason) == "0/0: k == 1 (guarded at /tmp/ov/scal.py:5 in f: return m(x) * k)"
    # No stack: the guard alone; two reasons of one entry (verbose recompiles) each without comments.
    assert tt.reason_line("0/0: tensor 'args[0]' size mismatch at index 0. expected 2, actual 3") == "0/0: tensor 'args[0]' size mismatch at index 0. expected 2, actual 3"
    assert tt.reason_line("0/1: a == 1  # x = a  # j/f.py:3 in g; b == 2  # y = b  # j/f.py:4 in g") == "0/1: a == 1; b == 2"
    # The job's frame, not torch's below it.
    stacked = ("0/0: n == 3\nUser stack trace:\n"
               '  File "/work/job/train.py", line 8, in step\n    return model(x, n)\n'
               '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1776, in _call_impl\n'
               "    return forward_call(*args, **kwargs)")
    assert tt.reason_line(stacked) == "0/0: n == 3 (guarded at /work/job/train.py:8 in step: return model(x, n))"


def test_a_guard_on_a_python_value():
    # torch 2.13's words (TORCH_LOGS=recompiles) for a float argument, a bool argument, a module
    # attribute and a global read in the compiled code; an older torch's bracketed local.
    assert tt.value_guard("scale == 1.0") == ("local", "scale", "1.0")
    assert tt.value_guard("flag == True") == ("local", "flag", "True")
    assert tt.value_guard("n == 3") == ("local", "n", "3")
    assert tt.value_guard("self.use_relu == True") == ("attribute", "self.use_relu", "True")
    assert tt.value_guard("G['FLAG'] == True") == ("global", "FLAG", "True")
    assert tt.value_guard("L['scale'] == -0.5") == ("local", "scale", "-0.5")
    assert tt.value_guard("L['self'].p == 4") == ("attribute", "self.p", "4")
    assert tt.value_guard("tensor 'x' size mismatch at index 0. expected 32, actual 48") is None
    assert tt.value_guard("___check_obj_id(L['self'], 1)") is None
    assert tt.value_guard("len(L['xs']) == 3") is None


def test_recompile_limit_messages():
    # convert_frame.py's warning and the graph break it raises.
    warning = "[0/8] torch._dynamo hit config.recompile_limit (8)\n   function: 'fwd' (/proj/m.py:5)"
    assert tt.recompile_limit(warning) == ("recompile_limit", 8)
    assert tt.compile_id_in(warning) == "0/8"
    explanation = ("Dynamo attempted to recompile the code object too many times, exceeding the "
                   "accumulated_recompile_limit cache size limit (currently set to 256).")
    assert tt.recompile_limit(explanation) == ("accumulated_recompile_limit", 256)
    assert tt.recompile_limit("tensor 'x' size mismatch") is None


# -- compiled-autograd graphs ---------------------------------------------------------------------


def test_node_origins():
    # The last line of an FX node's stack trace, and the comment print_readable writes above a
    # group of nodes in the logged graph code (single_job.py's TORCH_TRACE log).
    assert tt.node_origin("SumBackward0 (NodeCall 1)") == (1, "SumBackward0")
    assert tt.node_origin("torch::autograd::GraphRoot (NodeCall 0)") == (0, "torch::autograd::GraphRoot")
    comment = ("# File: /work/main/.venv/lib/python3.11/site-packages/torch/_dynamo/compiled_autograd.py:1582 "
               "in set_node_origin, code: AddmmBackward0 (NodeCall 2)")
    assert tt.node_origin_in_comment(comment) == (2, "AddmmBackward0")
    assert tt.node_origin(comment) == (2, "AddmmBackward0")
    assert tt.node_origin_in_comment("# No stacktrace found for following nodes") is None


def test_aot_prefixes_and_node_references():
    # Nodes inlined from AOT backward graph 0 (batch_size_job.py under aot_eager), and the
    # printed arguments of a graph node.
    assert tt.aot_graph_id("aot0_primals_3") == 0 and tt.aot_graph_id("aot12_mm") == 12
    assert tt.aot_graph_id("getitem_3") is None
    assert tt.strip_aot_prefix("aot0_primals_3") == "primals_3"
    args = "(%aot0_mm, [32, 64], %getitem_1)"
    assert tt.NODE_REF.findall(args) == ["aot0_mm", "getitem_1"]
    assert tt.REF_OR_INT.findall(args) == ["%aot0_mm", "32", "64", "%getitem_1"]
    assert tt.INT_CONSTANT.findall("(%sym_size_int, 1.5, -3)") == ["-3"]


def test_the_graph_class_names_its_id():
    assert tt.graph_class_id("class CompiledAutograd3(torch.nn.Module):\n    def forward(self, inputs):") == 3
    assert tt.graph_class_id("class GraphModule(torch.nn.Module):") is None


def test_graph_break_location():
    # A TORCH_TRACE log's `dynamo_graph_break_reason` (single_job.py).
    payload = ("Graph break in user code at /work/wt/causes/tests/scripts/trace_jobs/single_job.py:26\n"
               "Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):\n\n"
               "Unsupported Tensor.backward() call")
    assert tt.graph_break_at(payload) == ("/work/wt/causes/tests/scripts/trace_jobs/single_job.py", 26)
    assert tt.graph_break_at("Graph Break Reason: no location") is None


def test_library_paths_are_not_the_users():
    assert not tt.looks_like_user_file("/work/main/.venv/lib/python3.11/site-packages/torch/_dynamo/external_utils.py")
    assert not tt.looks_like_user_file("/usr/lib/python3.11/runpy.py")
    assert not tt.looks_like_user_file("<eval_with_key>.5")
    assert not tt.looks_like_user_file(tt.__file__)  # cagtool's own code
    assert tt.looks_like_user_file("/home/me/project/train.py")


def test_the_importer_reads_torch_text_without_the_capture_observer():
    """Reading a trace log parses miss lines without importing the capture's observer or step tracker."""
    code = ("import sys, cagtool.trace_import.translate, cagtool.trace_import.importer\n"
            "print(sorted(m for m in sys.modules if m in ('cagtool.capture.steps.tracker', 'cagtool.capture.observe.ca_observer')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert json.loads(out.strip().replace("'", '"')) == []


def test_graph_break_words_of_a_real_break():
    """Torch 2.13's graph-break message for a `print` in compiled code (the counter's key, as
    Dynamo formats it), cut into its parts; the id from the message's link agrees with the
    installed torch's registry."""
    import torch
    from torch._dynamo.utils import counters

    def f(x):
        print("hi")
        return x * 2

    torch.compile(f, backend="eager")(torch.ones(2))
    (reason,) = counters["graph_break"]
    words = tt.graph_break_words(reason)
    assert words.gb_type == "Failed to trace builtin operator" and words.gb_id == "GB0059"
    assert words.explanation.startswith("Dynamo does not know how to trace builtin operator `print`")
    assert words.headline == f"{words.gb_type}: {words.explanation}"
    assert len(words.hints) == 3 and words.hints[0].startswith("Avoid calling builtin `print`")
    without_link = reason.split("\n\n For more details")[0]
    assert tt.graph_break_words(without_link).gb_id == "GB0059"  # from the registry
    assert tt.graph_break_words("some other text\nsecond").headline == "some other text"


def test_global_state_changes_are_the_parts_torchs_one_guard_names():
    assert tt.global_state_changes("GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled ") == ["grad_mode", "autocast(cpu)_enabled"]
    assert tt.global_state_changes("GLOBAL_STATE changed: num_threads") == ["num_threads"]
    assert tt.global_state_changes("tensor 'x' size mismatch at index 0. expected 3, actual 4") == []
    assert tt.guard_kind("GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled") == tt.GUARD_GRAD_MODE


@pytest.mark.parametrize("reason, kind", [
    # torch 2.13's own reasons, as TORCH_LOGS=recompiles printed them on sample_scripts/
    ("GLOBAL_STATE changed: grad_mode ", tt.GUARD_GRAD_MODE),  # eval_no_grad.py
    ("tensor 'fn._modules['0']._modules['0']._parameters['bias']' requires_grad mismatch. expected requires_grad=0. Guard failed "
     "on a parameter, consider using torch._dynamo.config.force_parameter_static_shapes = False to allow dynamism on parameters.",
     tt.GUARD_REQUIRES_GRAD),  # unfreeze_backbone.py
    ("tensor 'args[0]' size mismatch at index 0. expected 32, actual 4", tt.GUARD_SIZE),  # ragged_batches.py
    ("tensor 'x' rank mismatch. expected 1, actual 2", tt.GUARD_SIZE),  # tests/scripts/trace_jobs/single_job.py
    ("len(grad_norms) == 7", tt.GUARD_LENGTH),  # grad_norm_hook.py
    ("not grad_norms", tt.GUARD_LENGTH),
    ("scale == 1.0", tt.GUARD_VALUE),
    ("G['FLAG'] == True", tt.GUARD_VALUE),
])
def test_the_kind_of_a_guard_is_read_from_torchs_reason(reason, kind):
    assert tt.guard_kind(reason) == kind


def test_a_length_guard_names_its_container():
    assert tt.length_guard_name("len(grad_norms) == 3") == "grad_norms"
    assert tt.length_guard_name("not grad_norms") == "grad_norms"
    assert tt.length_guard_name("scale == 1.0") is None


def test_the_module_a_compile_of_the_shared_module_wrapper_was_for():
    """From the guard tree (`dynamo_cpp_guards_str`) of torch's `inner`, recorded by `cagtool run` on
    tests/scripts/nested_compiled_modules.py: the class of `fn` and of each submodule, by path."""
    guards = "\n".join([
        "| +- GuardManager: source=L['fn'], accessed_by=FrameLocalsGuardAccessor(key='fn', framelocals_idx=2), "
        "type=<class 'torch.nn.modules.container.Sequential'>, tag_safe=(False, False)",
        "| | +- TYPE_MATCH: ___check_type_id(L['fn'], 94112943889184), type=<class 'torch.nn.modules.container.Sequential'> (HINT: type Sequential)",
        "| | | +- DictGuardManager: source=L['fn']._modules, accessed_by=DictGetItemGuardAccessor('_modules'), type=<class 'dict'>, tag_safe=(False, False)",
        "| | | | | +- KeyManager: GuardManager: source=list(dict.keys(L['fn']._modules))[0], type=<class 'str'>, tag_safe=(False, False)",
        "| | | | | +- ValueManager: GuardManager: source=L['fn']._modules['0'], type=<class 'torch.nn.modules.linear.Linear'>, tag_safe=(False, False)",
        "| | | | | | | +- GuardManager: source=L['fn']._modules['0']._parameters, accessed_by=DictGetItemGuardAccessor('_parameters'), "
        "type=<class 'dict'>, tag_safe=(False, False)",
        "| | | | | +- ValueManager: GuardManager: source=L['fn']._modules['1'], type=<class 'torch.nn.modules.activation.Tanh'>, tag_safe=(False, False)",
    ])
    assert tt.wrapped_module(guards) == ("Sequential", "0=Linear", "1=Tanh")
    linear = ("| +- GuardManager: source=L['fn'], accessed_by=FrameLocalsGuardAccessor(key='fn', framelocals_idx=2), "
              "type=<class 'torch.nn.modules.linear.Linear'>, tag_safe=(False, False)")
    assert tt.wrapped_module(linear) == ("Linear",)
    assert tt.wrapped_module("| +- GuardManager: source=L['x'], type=<class 'torch.Tensor'>") == ()
    # Each guarded parameter with its size, after the classes: two modules of one architecture
    # and other widths (a GAN's G and D) differ there.
    weight = ("| | | | | | | | | +- TENSOR_MATCH: check_tensor(L['fn']._modules['0']._parameters['weight'], Parameter, "
              "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU), torch.float32, device=None, requires_grad=True, "
              "size=[8, 4], stride=[4, 1])  # return F.linear(input, self.weight, self.bias)  # nn/modules/linear.py:134 in forward")
    assert tt.wrapped_module(guards + "\n" + weight) == ("Sequential", "0=Linear", "1=Tanh", "0.weight:[8, 4]")
    assert tt.wrapped_module(weight) == ()  # no module guarded: no parameter of one


def test_a_guard_on_none_and_a_guard_on_a_constant_name_their_value():
    """torch 2.13's reasons, as TORCH_LOGS=recompiles printed them: transformers' BERT classifier
    (`problem_type` set on the first forward), a compiled AdamW step under DeepSpeed's WarmupLR."""
    assert tt.guard_kind("self.config.problem_type is None") == tt.GUARD_NONE
    assert tt.none_guard("self.config.problem_type is None") == "self.config.problem_type"
    assert tt.none_guard("scale == 1.0") is None
    assert tt.equals_guard("self.param_groups[0]['lr'] == 0") == ("self.param_groups[0]['lr']", "0")
    assert tt.equals_guard("hook_name == 'training_step'") == ("hook_name", "'training_step'")
    assert tt.equals_guard("tensor 'x' size mismatch at index 0. expected 32, actual 4") is None
    assert [tt.python_type_of(v) for v in ("0", "0.0", "1e-05", "'a'", "True", "None", "x")] == \
        ["int", "float", "float", "str", "bool", "NoneType", ""]
    assert tt.source_prefixes("self.config.problem_type") == ["self", "self.config"]
    assert tt.source_prefixes("self.param_groups[0]['lr']") == ["self", "self.param_groups", "self.param_groups[0]"]
    assert tt.reason_compile_id("19/0: self.param_groups[0]['lr'] == 0") == "19/0"
    assert tt.reason_compile_id("self.x == 0") is None


def test_what_a_guard_tree_holds_on_a_python_value():
    """Lines of torch 2.13's guard trees (`dynamo_cpp_guards_str`), recorded by `cagtool run`: the
    rate an AdamW step was compiled for (an int, a float, then only its type: an input), and a BERT
    classifier's `problem_type` (None, then a str), with the line of the forward that sets it."""
    lr = "L['self'].param_groups[0]['lr']"
    manager = f"| | | | +- GuardManager: source={lr}, accessed_by=DictGetItemGuardAccessor('lr'), type=<class '{{}}'>, tag_safe=(False, False)"
    comment = "  # for group in self.param_groups:  # optim/adam.py:229 in step"
    as_int = manager.format("int") + f"\n| | | | | +- EQUALS_MATCH: {lr} == 0                          " + comment
    as_input = manager.format("float") + f"\n| | | | | +- TYPE_MATCH: ___check_type_id({lr}, 140620624908800), type=<class 'float'>" + comment
    assert tt.guarded_value(as_int, "self.param_groups[0]['lr']") == tt.GuardedValue("int", "0")
    assert tt.guarded_value(as_input, "self.param_groups[0]['lr']") == tt.GuardedValue("float", None)
    assert tt.guarded_value(as_int, "self.param_groups[1]['lr']") is None
    config = ("| | | +- GuardManager: source=L['self'].config, accessed_by=GetAttrGuardAccessor(config), "
              "type=<class 'transformers.models.bert.configuration_bert.BertConfig'>, tag_safe=(False, False)\n"
              "| | | | | +- DICT_CONTAINS: not ___dict_contains('__setattr__', L['self'].config.__dict__)  # self.config.problem_type = "
              "\"single_label_classification\"  # transformers/models/bert/modeling_bert.py:1119 in forward\n"
              "| | | | +- GuardManager: source=L['self'].config.problem_type, accessed_by=GetAttrGuardAccessor(problem_type), "
              "type=<class 'NoneType'>, tag_safe=(False, False)\n"
              "| | | | | +- NONE_MATCH: L['self'].config.problem_type is None                         # if self.config.problem_type is None:  "
              "# transformers/models/bert/modeling_bert.py:1115 in forward")
    assert tt.guarded_value(config, "self.config") == tt.GuardedValue("BertConfig", None)
    assert tt.guarded_value(config, "self.config.problem_type") == tt.GuardedValue("NoneType", "None")
    assert tt.assigned_at(config, "self.config.problem_type") == (
        'self.config.problem_type = "single_label_classification"', "transformers/models/bert/modeling_bert.py:1119")
    assert tt.assigned_at(config, "self.config.num_labels") is None
    # A bool is guarded on its value by TRUE_MATCH / FALSE_MATCH (torch 2.13), never taken as an input.
    for value in ("True", "False"):
        flag = ("| | +- GuardManager: source=L['self'].use_bias_trick, accessed_by=DictGetItemGuardAccessor('use_bias_trick'), "
                f"type=<class 'bool'>, tag_safe=(True, False)\n| | | +- {value.upper()}_MATCH: L['self'].use_bias_trick == {value}"
                "   # if self.use_bias_trick:  # job.py:14 in forward")
        assert tt.guarded_value(flag, "self.use_bias_trick") == tt.GuardedValue("bool", value)


def test_a_resume_function_names_the_function_and_the_break():
    """Dynamo's names for the rest of a function after a graph break (torch/_dynamo/resume_execution.py)."""
    assert tt.resume_function("torch_dynamo_resume_in__call_strategy_hook_at_318") == ("_call_strategy_hook", 318)
    assert tt.resume_function("torch_dynamo_resume_in_torch_dynamo_resume_in_f_at_5_at_8") == ("f", 8)
    assert tt.resume_function("training_step") is None


def test_the_grad_mode_a_compile_was_made_for_is_read_from_its_guard_trees_global_state():
    """torch 2.13's GLOBAL_STATE guard line, as a compile's dynamo_cpp_guards_str prints it."""
    line = ('| +- GLOBAL_STATE: ___check_global_state() against {"allow_bf16_reduce":0,"allow_tf32":true,'
            '"autocast_state":{"cached_enabled":true,"enabled":[false,false]},"default_dtype":6,"grad_mode":%s,"num_threads":2}')
    assert tt.compiled_grad_mode("+- TREE_GUARD_MANAGER\n" + line % "true") is True
    assert tt.compiled_grad_mode(line % "false") is False
    assert tt.compiled_grad_mode("| +- TENSOR_MATCH: check_tensor(L['x'], requires_grad=False)") is None


def test_an_evaluations_compile_says_inference_mode_or_no_grad_by_its_tensor_guards_dispatch_keys():
    """torch 2.13's tree of a compile made with grad off (tests/scripts/train_eval_modes.py's
    record): under torch.inference_mode() a tensor guard's keys hold no autograd key (the thread's
    exclude set drops them), under torch.no_grad() they do; with grad on the tree says nothing."""
    state = '| +- GLOBAL_STATE: ___check_global_state() against {"autocast_state":{"enabled":[false]},"grad_mode":%s,"num_threads":2}\n'
    tensor = ("| | | +- TENSOR_MATCH: check_tensor(L['fn']._modules['0']._parameters['bias'], Parameter, DispatchKeySet(%s), "
              "torch.float32, device=None, requires_grad=True, size=[32], stride=[1])  # return F.linear(input, self.weight, self.bias)\n")
    no_grad = state % "false" + tensor % "CPU, BackendSelect, ADInplaceOrView, AutogradCPU"
    inference = state % "false" + tensor % "CPU, BackendSelect, ADInplaceOrView" + tensor % "CPU, BackendSelect"
    assert tt.compiled_inference_mode(inference) is True
    assert tt.compiled_inference_mode(no_grad) is False
    assert tt.compiled_inference_mode(state % "true" + tensor % "CPU, BackendSelect, ADInplaceOrView, AutogradCPU") is None
    assert tt.compiled_inference_mode(state % "false") is None  # no tensor guard: not known


def test_a_dispatch_key_guard_that_lost_or_gained_the_autograd_keys_is_an_inference_mode_switch():
    """torch 2.13's reason when a call under torch.inference_mode() meets an entry compiled under
    no_grad (tests/scripts/no_grad_then_inference.py's record), the other way round, and another
    device's keys (no switch)."""
    into = ("tensor 'args[0]' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, "
            "AutogradCPU), actual DispatchKeySet(CPU, BackendSelect)")
    out = ("tensor 'args[0]' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect), actual "
           "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU)")
    device = ("tensor 'x' dispatch key set mismatch. expected DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU), "
              "actual DispatchKeySet(CUDA, BackendSelect, ADInplaceOrView, AutogradCUDA)")
    assert tt.inference_mode_switch(into) is True and tt.inference_mode_switch(out) is False
    assert tt.inference_mode_switch(device) is None and tt.inference_mode_switch("x == 1") is None


def test_the_calls_own_guard_passes_over_an_entry_made_with_an_optional_argument_none_or_a_tensor():
    """torch 2.13's reasons of one recompile (tests/scripts/optional_mask.py's record): the entry
    made without the mask fails on it, the one made with it on the dropout's p; the call's own is p.
    An attribute that was None is a value set later, not an optional argument."""
    is_none = "attention_mask is None"
    typed = "expected type of 'attention_mask' to be a tensor type, ' but found <class 'NoneType'>"
    p = "self._modules['drop'].p == 0.1"
    assert tt.none_variant(is_none) == tt.none_variant(typed) == "attention_mask"
    assert tt.none_variant("self.config.problem_type is None") is None and tt.none_variant(p) is None
    assert tt.call_guard([is_none, p]) == p and tt.call_guard([typed, p, typed]) == p
    assert tt.call_guard([is_none]) == is_none  # no entry of the call's form: the argument is the change


def test_a_modules_train_eval_guard_names_the_submodule_as_named_modules_does():
    assert tt.training_guard("fn._modules['1'].training == True") == ("fn._modules['1']", True)
    assert tt.training_guard("self.training == False  # if self.training:  # m.py:3") == ("self", False)
    assert tt.training_guard("self.use_relu == True") is None and tt.training_guard("p == 0.1") is None
    assert tt.submodule_name("fn._modules['1']") == "1"
    assert tt.submodule_name("L['self']._modules['encoder']._modules['drop']") == "encoder.drop"
    assert tt.submodule_name("self.layers[0]") == "layers.0"
    assert tt.submodule_name("fn") == tt.submodule_name("self") == ""


def test_the_autograd_node_a_compiled_autograd_graph_failed_on_is_read_from_torchs_error():
    """torch 2.13's TorchRuntimeError when compiled autograd's graph runs pack_padded_sequence's
    backward with fake tensors (an LSTM over packed sequences): the node is only in its text."""
    from cagtool.torch_text import ca_node_in_error

    message = ("RuntimeError when making fake tensor call\n  Explanation: Dynamo failed to run FX node with fake tensors: "
               "call_function torch._dynamo.compiled_autograd.ops.PackPaddedSequenceBackward0(*([FakeTensor(..., size=(65, 16))], "
               "[True], True, [8, 11, 16]), **{}): got RuntimeError(\"The tensor has a non-zero number of elements\")\n"
               "from user code:\n   File \"<eval_with_key>.6\", line 1117, in forward\n"
               "    pack_padded_sequence_backward0 = torch__dynamo_compiled_autograd_ops_PackPaddedSequenceBackward0(getitem_3)")
    assert ca_node_in_error(message) == "PackPaddedSequenceBackward0"
    assert ca_node_in_error("torch__dynamo_compiled_autograd_ops_CatBackward0(x)") == "CatBackward0"
    assert ca_node_in_error("RuntimeError: boom") is None


def test_a_guard_on_a_hooks_code_names_the_hook():
    # torch 2.13's guard when another hook function ran in a compiled-autograd graph (tests/scripts/two_calls_hook_added.py)
    assert tt.hook_code_guard("___check_obj_id(hooks[0].__code__, 139676458485424), type=<class 'code'>") == 0
    assert tt.hook_code_guard("___check_obj_id(hooks[12].__code__, 1)") == 12
    assert tt.hook_code_guard("___check_obj_id(self.fn.__code__, 1)") is None
    assert tt.hook_code_guard("___check_obj_id(hooks[0], 1)") is None


def test_a_size_guard_on_a_keyword_argument_is_read():
    # torch 2.13's guard on a tensor passed as `model(**batch)` (every HF model's forward): quotes inside the name
    assert tt.size_guard("tensor 'kwargs['input_ids']' size mismatch at index 0. expected 4, actual 1") == ("kwargs['input_ids']", 0, 4, 1)
    assert tt.size_guard("tensor 'x' size mismatch at index 1. expected 8, actual 12") == ("x", 1, 8, 12)


def test_a_stride_guard_is_a_tensors_dimension_but_no_size():
    # torch 2.13's text for `f(a)` then `f(a.t())` compiled static
    text = "tensor 'x' stride mismatch at index 0. expected 4, actual 1"
    assert tt.size_guard(text) is None
    assert tt.size_or_stride_guard(text) == "x"
    assert tt.size_or_stride_guard("tensor 'kwargs['input_ids']' size mismatch at index 0. expected 4, actual 1") == "kwargs['input_ids']"
    assert tt.size_or_stride_guard("tensor 'x' rank mismatch. expected 2, actual 3") is None


def test_a_guard_on_a_tensor_inputs_type_is_read_with_the_type_it_has_now():
    from cagtool.torch_text import GUARD_TYPE, guard_kind, tensor_type_guard

    # torch 2.13's text, stray quote and all (guards.cpp TensorCheck)
    text = "expected type of 't' to be a tensor type, ' but found <class 'torch.nn.parameter.Parameter'>"
    assert guard_kind(text) == GUARD_TYPE
    assert tensor_type_guard(text) == ("t", "nn.Parameter")
    assert tensor_type_guard("expected type of 'args[0]' to be a tensor type, but found a different type") == ("args[0]", None)
    # torch 2.14 and 2.15's words for the same guard.
    assert tensor_type_guard("expected type of 'attention_mask' to be <class 'torch.Tensor'>, but found <class 'NoneType'>") == (
        "attention_mask", "NoneType")
    assert tensor_type_guard("tensor 'x' size mismatch at index 0. expected 4, actual 1") is None


def test_torchs_lists_of_a_modules_full_backward_hooks_are_told_from_a_users_list():
    from cagtool.torch_text import module_hooks_list

    # the module run eagerly (BackwardHook.user_hooks) / its hooks handed by a compiled forward (BackwardState)
    assert module_hooks_list("hooks[0].__closure__[0].cell_contents.user_hooks")
    assert module_hooks_list("hooks[0].__closure__[0].cell_contents.user_pre_hooks[0].keywords['bw_state'].hook2")
    assert not module_hooks_list("grad_norms") and not module_hooks_list(None)



def test_a_break_logged_again_when_dynamo_falls_back_to_eager_reads_as_the_break():
    # torch 2.13 logs the same break under a second first line when it skips the whole frame
    reason = ("Failed to handle graph break gracefully. Skipping the function and falling back to eager. Graph break encountered:\n"
              "Call to `torch._dynamo.graph_break()`\n  Explanation: User-inserted graph break. Message: None\n"
              "  Hint: Remove the `torch._dynamo.graph_break()` call.")
    words = tt.graph_break_words(reason)
    assert (words.gb_type, words.gb_id) == ("Call to `torch._dynamo.graph_break()`", "GB0025")
    assert words.headline == "Call to `torch._dynamo.graph_break()`: User-inserted graph break. Message: None"


def test_a_dimension_a_compile_took_dynamic_reads_none_in_its_tensor_guard():
    """torch 2.13's guard tree after a recompile on a length (tests/scripts/longer_last_batch.py's
    record): automatic dynamic shapes print the dynamic size as None; the first compile's is a number."""
    line = ("| | | +- TENSOR_MATCH: check_tensor(L['args'][0], Tensor, DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, "
            "AutogradCPU), torch.int64, device=None, requires_grad=False, size=[4, %s], stride=[%s, 1])  # return F.embedding(\n")
    dynamic, static = line % ("None", "None"), line % ("8", "8")
    assert tt.compiled_dynamic_dim(dynamic, "args[0]", 1) is True and tt.compiled_dynamic_dim(dynamic, "args[0]", 0) is False
    assert tt.compiled_dynamic_dim(static, "args[0]", 1) is False
    assert tt.compiled_dynamic_dim(dynamic, "x", 1) is None and tt.compiled_dynamic_dim(dynamic, "args[0]", 2) is None


def test_a_graph_break_on_pythons_random_module_names_the_call():
    """torch 2.13's two ways of saying it does not trace a call of Python's random module: a builtin
    (random.random()) and a function it skips (random.choice())."""
    builtin = ("Attempted to call function marked as skipped\n  Explanation: Dynamo does not know how to trace the builtin "
               "`<unknown module>.Random.random.` This function is either a Python builtin (e.g. _warnings.warn) or ...")
    skipped = ("Attempted to call function marked as skipped\n  Explanation: Dynamo developers have intentionally marked that "
               "the function `Random.choice` in file `/usr/lib/python3.11/random.py` should not be traced.")
    assert tt.random_module_call(builtin) == "Random.random" and tt.random_module_call(skipped) == "Random.choice"
    assert tt.random_module_call("Data-dependent branching") is None
    assert tt.random_module_call("the builtin `<unknown module>.SystemRandom.` ...") is None
    # torch 2.14+: the draw traced, the branch on it a "Data-dependent branching" break at the line.
    assert tt.random_draw_in_code("if self.training and random.random() < self.p:") == "Random.random"
    assert tt.random_draw_in_code("k = random.choice(self.blocks)") == "Random.choice"
    assert tt.random_draw_in_code("if torch.rand(()) < p:") == "torch.rand"  # a branch on a tensor draw, any torch
    assert tt.random_draw_in_code("if x.random() > 0:") is None and tt.random_draw_in_code("if mask.sum() > 0:") is None


def test_a_guard_on_the_class_a_compiled_autograd_graph_calls_names_the_backward_class():
    """torch 2.13's failing guard of a compiled-autograd graph's code when the custom
    autograd.Function it calls is another class of the same name (tests/scripts/grad_reverse.py)."""
    guard = ("___check_type_id(backward_c_function, 94859876021120), type=<class "
             "'torch.autograd.function.ApplyTemplateBackward'> (HINT: type ApplyTemplateBackward)")
    assert tt.backward_function_class(guard) == "ApplyTemplateBackward"
    assert tt.backward_function_class("___check_type_id(L['x'], 9485), type=<class 'torch.Tensor'>") is None
    assert tt.backward_function_class("___check_obj_id(hooks[0].__code__, 1396)") is None


def test_a_guards_source_reads_as_the_jobs_code_names_it():
    # A hook's global as a compiled-autograd graph's Dynamo reaches it (torch 2.13's guard text).
    assert tt.length_guard_name("not G['__import___main__'].norms") == "norms"
    assert tt.length_guard_is_emptiness("not G['__import___main__'].norms")
    assert tt.length_guard_name("len(grad_norms) == 3") == "grad_norms" and not tt.length_guard_is_emptiness("len(grad_norms) == 3")
    assert tt.readable_source("G['__import_mypkg_dot_stats'].seen") == "mypkg.stats.seen"
    assert tt.readable_source("L['self'].xs") == "self.xs" and tt.readable_source("G['FLAG']") == "FLAG"


def test_an_entry_made_for_an_input_that_requires_grad_tells_entries_apart_a_parameters_does_not():
    """torch 2.13's reasons for dcgan's discriminator on its smaller last batch of real data
    (tests/scripts/gan_compiled_last_batch.py), newest entry first: the entry made for the
    generator's output fails on requires_grad, the entry made for real data on the size, which is
    the call's own failure. A compiled module's input reads `args[0]` or `kwargs['x']` as well. A
    parameter's requires_grad (a module frozen or unfrozen) is the call's own failure."""
    assert tt.call_guard(["tensor 'input' requires_grad mismatch. expected requires_grad=1",
                          "tensor 'input' size mismatch at index 0. expected 8, actual 3"]) == (
        "tensor 'input' size mismatch at index 0. expected 8, actual 3")
    assert tt.requires_grad_variant("tensor 'args[0]' requires_grad mismatch. expected requires_grad=0") == "args[0]"
    assert tt.requires_grad_variant("tensor 'kwargs['x']' requires_grad mismatch. expected requires_grad=0") == "kwargs['x']"
    frozen = "tensor 'self._modules['0']._parameters['weight']' requires_grad mismatch. expected requires_grad=0"
    assert tt.requires_grad_variant(frozen) is None
    assert tt.call_guard([frozen, "tensor 'x' size mismatch at index 0. expected 8, actual 3"]) == frozen
    # one entry, one failure: the requires_grad change is the call's own
    assert tt.call_guard(["tensor 'input' requires_grad mismatch. expected requires_grad=0"]).endswith("requires_grad=0")


def test_a_dynamic_size_that_met_0_or_1_is_a_size_guard():
    """torch 2.13's guard on a dynamic dimension (marked, or made dynamic by a recompile), as its
    recompiles log prints it for a DataLoader's last batch of one row (tests/scripts/last_batch_of_one.py
    --mark; an HF Trainer's collator marking `input_ids`): a size guard on that tensor and dim."""
    line = ("2 <= kwargs['input_ids'].size()[0]  # output = func(self, *args, **kwargs)  # transformers/utils/generic.py:1036 "
            "in wrapper (user code shown is first use of this value--the guard itself is not due user code but due to 0/1 "
            "specialization in the framework; to avoid specialization try torch._dynamo.decorators.mark_unbacked(tensor, dim))")
    from cagtool.report.recompiles.table import guard_text

    guard = guard_text(line)
    assert guard == "2 <= kwargs['input_ids'].size()[0]"
    assert tt.specialised_size(guard) == ("kwargs['input_ids']", 0) and tt.guard_kind(guard) == tt.GUARD_SIZE
    assert tt.specialised_size("2 <= h.size()[1]") == ("h", 1)
    # A branch on sizes and an int made dynamic are not it.
    assert tt.specialised_size("self.src_mask.size()[0] != src.size()[0]") is None and tt.specialised_size("2 <= step") is None
    assert tt.guard_kind("self.src_mask.size()[0] != src.size()[0]") != tt.GUARD_SIZE


def test_an_entry_made_for_a_bools_other_value_tells_entries_apart():
    """torch 2.13's recompile of a CA graph's code under DDP's no_sync() accumulation, on a smaller
    last batch: the entry made for `require_backward_grad_sync` False fails on the flag, the one made
    for True on the size; the size is the call's own failure. A bool's guard alone stays the cause."""
    flag = ("hooks[1].func.__closure__[1].cell_contents.require_backward_grad_sync == False  # if not self.require_backward_grad_sync:"
            "  # nn/parallel/distributed.py:1173 in compiled_accum_grad_hook")
    size = "tensor 'sizes[0]' size mismatch at index 1. expected 16, actual 5"
    assert tt.bool_value_guard(flag) and tt.bool_value_guard("self.training_flag == True")
    assert not tt.bool_value_guard("self.step == 0") and not tt.bool_value_guard(size)
    assert tt.call_guard([flag, size]) == size
    assert tt.call_guard([flag]) == flag


def test_an_entry_made_for_another_class_of_the_calls_own_input_tells_entries_apart():
    """torch 2.13's recompile of transformers' `deprecate_kwarg` wrapper (one code object for
    LlamaForCausalLM's and LlamaModel's forwards, a frame of its own after a graph break) on a
    smaller last batch: the LlamaModel entry fails on the type of `args[0]`, the LlamaForCausalLM one
    on the size; the size is the call's own failure. A type guard on something not the call's input
    (an attribute) is no form of the call."""
    kind = ("___check_type_id(args[0], 94406415581552), type=<class 'transformers.models.llama.modeling_llama.LlamaModel'>  "
            "# func_name = f\"{args[0].__class__.__name__}.{func_name}\"  # transformers/utils/deprecation.py:131 in wrapped_func")
    size = "tensor 'kwargs['input_ids']' size mismatch at index 0. expected 8, actual 4"
    assert tt.type_variant(kind) == "args[0]" and tt.tells_entries_apart(kind)
    assert tt.type_variant("___check_type_id(self.cache, 1234), type=<class 'dict'>") is None and tt.type_variant(size) is None
    assert tt.call_guard([kind, size]) == size


def test_an_entry_made_for_another_number_of_the_calls_own_arguments_tells_entries_apart():
    """The same wrapper called by keyword (`self.gate(x=h)`: its *args holds `self` alone) has an
    entry per number of positional arguments; on a smaller last batch one entry fails on
    `len(args) == 2`, the call's own on the size. A length guard on a module's list is no form of the call."""
    size = "tensor 'kwargs['x']' size mismatch at index 0. expected 8, actual 4"
    assert tt.length_variant("len(args) == 2") == "args" and tt.length_variant("not args") == "args"
    assert tt.length_variant("len(self.norms) == 2") is None and tt.length_variant(size) is None
    assert tt.call_guard(["len(args) == 2", size]) == size and tt.call_guard(["len(args) == 2"]) == "len(args) == 2"
