"""`recompiles --explain` on the recompiles ordinary training scripts meet (tests/scripts, each
recorded once in the ca mode): a backbone frozen mid-run, Python floats scheduled per step, a
collate function padding to each batch's longest, autocast turned on after warm-up, a loss term
with a custom autograd.Function on some steps, a custom autograd.Function that is another class at
every call (a DANN's gradient reversal), an int attribute of the module (MoCo's queue pointer),
LayerDrop, an episode-length loop, experts routed by the data. Each cause is checked against torch's own guard
text as recorded, and a fix the words give is verified by re-running the job with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import cagtool_in_process, cli_in_process

from cagtool.record.loader import load_run
from cagtool.record.schema import CAGraphEvent, DynamoCompileEvent
from cagtool.report.recompiles.explain import explain
from cagtool.report.recompiles.table import recompile_table
from cagtool.verify.fixes import fixes_for

pytestmark = pytest.mark.slow


def _recorded(record_run, script: str, *args: str) -> Path:
    run = record_run(f"../tests/scripts/{script}", *args)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


def _causes(run: Path) -> list[dict]:
    code, out, err = cli_in_process("recompiles", str(run), "--explain", "--format", "json")
    assert code == 0, err
    return json.loads(out)["modes"]["ca"]["explanation"]["causes"]


def _torch_reasons(run: Path) -> dict[str, list[str]]:
    """Each Dynamo recompile's failing guards as torch logged them (`0/1: p == 0.05`), by compile id."""
    events = [json.loads(line) for line in (run / "ca" / "events.jsonl").read_text().splitlines()]
    return {e["compile_id"]: e["reasons"] for e in events if e.get("kind") == "dynamo_recompile"}


def _said(cause: dict) -> str:
    return " ".join([cause["title"], *cause["why"], *cause["fix"]])


def test_a_backbone_frozen_mid_run_is_a_freeze_not_an_unfreeze(record_run):
    run = _recorded(record_run, "freeze_after_warmup.py")
    root, follower = _causes(run)
    [reason] = _torch_reasons(run)["0/1"]
    assert "requires_grad mismatch. expected requires_grad=1" in reason  # torch: it required grad, now it does not
    assert "a parameter's requires_grad changed (frozen)" in root["title"]
    assert "loses the nodes that accumulated the frozen parameters' gradients" in " ".join(root["why"])
    assert "force_parameter_static_shapes = False) is about parameters' sizes" in " ".join(root["why"])
    assert root["fix"][0].startswith("Nothing to fix for a freeze done once")
    assert "the frozen parameters have no gradients to accumulate any more" in root["fix"][1]
    assert follower["caused_by"] == 1 and "The frozen parameters have no gradients to accumulate" in " ".join(follower["why"])
    assert "unfreeze" not in _said(root) and "now train" not in _said(root) + _said(follower)
    assert root["source"]["code"] == "loss = nn.functional.cross_entropy(model(x), y)"


def test_a_float_taken_as_an_input_and_one_specialised_per_value_get_their_own_words(record_run):
    run = _recorded(record_run, "float_schedules.py")
    reasons = _torch_reasons(run)
    causes = {c["source"]["function"]: c for c in _causes(run) if c["code"] == "dynamo_guard_failure"}
    temperature, rate = causes["distill"], causes["forward"]
    # The temperature: one recompile, and no later recompile guards its value again.
    assert [e["compile_id"] for e in temperature["evidence_ids"]] == ["1/1"]
    assert not any("temperature ==" in r for cid, rs in reasons.items() if cid != "1/1" for r in rs)
    assert "compiled the frame again with the number as an input of the graph" in " ".join(temperature["why"])
    assert temperature["fix"][0] == "Nothing to fix: one recompile, then `temperature` is an input of the compiled graph and its later values reuse it."
    # The rate: torch's reasons for each recompile name the compile before it guarding the rate again.
    ids = [e["compile_id"] for e in rate["evidence_ids"]]
    assert ids == ["0/1", "0/2", "0/3"]
    assert any(r.startswith("0/1: p == 0.05") for r in reasons["0/2"]) and any(r.startswith("0/2: p == 0.1") for r in reasons["0/3"])
    said = _said(rate)
    assert "each new compile guards it again" in said and "takes it as an input" not in said
    assert "`0.0` became `0.05`, 0/2: `0.05` became `0.1`" in said
    assert rate["fix"][0].startswith("Nothing to fix if `p` takes a few values")
    # The model is compiled with fullgraph=True: a call under torch.compiler.disable would be an error
    # there (torch 2.13: "Skip calling `torch.compiler.disable()`d function"), never the fix given.
    assert rate["fix"][1].startswith("To stop recompiling per value, the call that needs `p` as a constant must run outside")
    assert "compiled with fullgraph=True, where a graph break is an error" in rate["fix"][1]
    assert "a graph break there, and it runs eagerly" not in said + " ".join(rate["fix"])
    assert "fullgraph" not in " ".join(temperature["fix"])  # distill is compiled without it
    assert rate["source"]["line"] == 20 and "F.dropout" in rate["source"]["code"]


def test_a_padded_length_names_every_input_it_ties_and_dynamic_sources_remove_it(record_run, tmp_path):
    run = _recorded(record_run, "padded_sequences.py")
    root = _causes(run)[0]
    assert "Dim 1 of `mask` went from 7 to 12: a length, not the batch size; one that varies per batch" in " ".join(root["why"])
    assert "or that changed for good at a phase" in " ".join(root["why"])  # the record cannot tell the two apart
    assert "automatic dynamic shapes" in " ".join(root["why"])
    assert "torch._dynamo.maybe_mark_dynamic(mask, 1), and the same on every other input" in root["fix"][0]
    # the backward's shapes: two of the four sizes torch holds dynamic are read by no node (its cache key only)
    (shapes,) = [c for c in _causes(run) if c["code"] == "changed_shapes"]
    said = " ".join(shapes["why"])
    assert "takes 2 dynamic sizes (torch holds 4 dynamic in its cache key: no node reads the others)" in said, said
    # The capture recorded the sizes the graph's code reads (sizes[0-1]): the changed ones are not
    # among them, so their earlier values are in no graph's code, and the cause says why, once.
    graph = load_run(run).modes["ca"].of(CAGraphEvent)[-1]
    assert graph.used_sizes == [0, 1] and graph.num_sizes == 2, graph
    assert ("sizes[2-3] of CompiledFunctionBackward1 (NodeCall 3): 9. No node of the graph reads sizes[2-3]: torch holds them in its "
            "cache key only, so no graph's code shows their earlier values.") in said, said
    assert said.count("earlier value") == 1 and "not in the record" not in said  # said once for the cause, not once per size
    mode = load_run(run).modes["ca"]
    fixes = {f.name: f for f in fixes_for(explain(recompile_table(mode)), pgo_suggestion=mode.manifest.options["pgo_suggestion"])}
    # The failing guard names `mask` alone; torch's PGO list names `tokens` too, which `mask` is tied to.
    assert fixes["dynamic-sources"].env == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['mask'],L['tokens']"}
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    proc = cagtool_in_process("recompiles", str(copy), "--explain", "--verify", "--repeat", "1", "--fix", "dynamic-sources",
                              "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    verification = json.loads(proc.stdout)["verification"]
    [fix] = verification["fixes"]
    assert verification["baseline"]["dynamo_recompiles"] == [1] and fix["measured"]["dynamo_recompiles"] == [0]
    assert fix["verdict"] == "verified" and fix["numerics_agree"] is True, fix["reasons"]


def test_autocast_switched_on_once_needs_no_fix_and_verify_says_so(record_run, tmp_path):
    run = _recorded(record_run, "autocast_after_warmup.py")
    root = _causes(run)[0]
    assert [r.strip() for r in _torch_reasons(run)["0/1"]] == ["0/0: GLOBAL_STATE changed: autocast(cpu)_enabled"]
    # Said so that it holds however often the setting alternates (one recompile either way).
    assert root["fix"][0].startswith("Nothing to fix for autocast on in some calls and off in others")
    assert "one recompile, however often the setting alternates" in root["fix"][0]
    assert "changes what the steps under the other setting compute" in root["fix"][1]
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    proc = cagtool_in_process("recompiles", str(copy), "--explain", "--verify", "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [first, *_] = json.loads(proc.stdout)["verification"]["not_applied"]
    assert first["cause"] == 1 and first["why"].startswith("nothing to fix: the explanation finds these recompiles one-time")


def test_a_loss_term_on_some_steps_names_its_nodes_and_a_new_backward_line_is_its_own_graph(record_run):
    run = _recorded(record_run, "loss_terms_per_step.py")
    causes = _causes(run)
    structure = next(c for c in causes if c["title"].startswith("The autograd graph's structure changes"))
    said = " ".join(structure["why"])
    assert "GradReverseBackward" in said and "BinaryCrossEntropyWithLogitsBackward0" in said
    assert "`GradReverse`: a torch.autograd.Function subclass whose backward is in it" in said
    assert structure["steps"] == [1]  # odd steps after the first reuse the graph
    probe = next(c for c in causes if c["title"].startswith("A backward called from a new line"))
    assert probe["source"]["code"] == "domain(probe).pow(2).mean().backward()"
    assert probe["fix"] == ["Nothing to fix: each backward call's graph is captured once and reused."]
    assert "a Python branch" not in said + _said(probe)


def test_clip_hooks_registered_after_warmup_are_switched_by_a_tensor_and_not_moved(record_run, tmp_path):
    """Hooks registered on each parameter under `if step == 3:`: one CA recompile. Moved before the
    loop they would clamp from the first step; the fix switches them with a tensor (checked by
    hand: a tensor bound, no recompile and the same loss; a Python flag, a Dynamo recompile)."""
    run = _recorded(record_run, "clip_hooks_after_warmup.py")
    [hook] = _causes(run)
    assert hook["code"] == "hook_changed" and hook["steps"] == [3]
    assert "switch what it does with a tensor it reads" in hook["fix"][0] and "cheaper" not in hook["fix"][0]
    # The lambda named by its line, the registration under the `if`: one site for the 4 parameters' hooks.
    [named] = hook["hooks"]
    assert (named["function"], named["file"], named["line"]) == ("<lambda>", "tests/scripts/clip_hooks_after_warmup.py", 14)
    assert named["code"] == "p.register_hook(lambda g: g.clamp(-0.1, 0.1))" and named["added"] == [3] and named["counts"] == [4]
    assert ("The lambda at tests/scripts/clip_hooks_after_warmup.py:14 (`p.register_hook(lambda g: g.clamp(-0.1, 0.1))`), "
            "a tensor hook (`register_hook`), is registered on step 3: 4 hooks of it in the new graph.") in hook["why"]
    assert hook["fix"][0].startswith("Register the lambda at tests/scripts/clip_hooks_after_warmup.py:14 once, before the first backward")
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    proc = cagtool_in_process("recompiles", str(copy), "--explain", "--verify", "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [skipped] = json.loads(proc.stdout)["verification"]["not_applied"]
    assert "registers hooks in the loop at line 13, under the `if` at line 12 of its training loop" in skipped["why"]
    assert "every iteration" not in skipped["why"]


def test_hooks_that_join_late_are_named_each_with_the_steps_it_joined_and_a_fix_for_how(record_run):
    """A named tensor hook (step 2), a post-accumulate-grad hook (step 3), a module's full backward
    hook (step 4) and a hook registered on every step from step 5 and never removed: each named by
    its function and line, with the steps its graphs were captured; the one that piles up gets the
    fix that says so."""
    run = _recorded(record_run, "hooks_joining_late.py")
    causes = {c["steps"][0]: c for c in _causes(run)}
    accumulate, module = causes[2], causes[4]
    assert accumulate["code"] == module["code"] == "hook_changed" and accumulate["steps"] == [2, 3, 5, 6, 7]
    named = {h["function"]: h for h in accumulate["hooks"]}
    assert set(named) == {"clip_grad", "decay_grad", "scale_grad"}
    assert (named["clip_grad"]["line"], named["clip_grad"]["added"], named["clip_grad"]["hook_types"]) == (10, [2], ["tensor_pre_hook"])
    assert (named["decay_grad"]["added"], named["decay_grad"]["hook_types"]) == ([3], ["post_acc_grad_hook"])
    assert (named["scale_grad"]["added"], named["scale_grad"]["counts"]) == ([5, 6, 7], [1, 2, 3])
    why = " ".join(accumulate["why"])
    assert ("The hook `clip_grad` (defined at tests/scripts/hooks_joining_late.py:10), a tensor hook (`register_hook`), is "
            "registered on step 2. That line is its `def`, not where it is registered: look in the training loop for the "
            "`register_hook` call given `clip_grad` that runs on step 2") in why
    assert "a post-accumulate-grad hook (`register_post_accumulate_grad_hook`), is registered on step 3." in why
    assert "is registered on steps 5-7: 3 hooks of it in the new graph. Each registration adds one more" in why
    once, piling = accumulate["fix"]
    assert once.startswith("Register the hook `clip_grad` (defined at tests/scripts/hooks_joining_late.py:10) and the hook "
                           "`decay_grad` (defined at tests/scripts/hooks_joining_late.py:18) once, before the first backward, "
                           "and keep them (move the `register_hook` call given `clip_grad` and the "
                           "`register_post_accumulate_grad_hook` call given `decay_grad` above the training loop).")
    assert piling.startswith("Register the hook `scale_grad` (defined at tests/scripts/hooks_joining_late.py:14) once, before the "
                             "training loop (move the `register_hook` call given `scale_grad` out of the loop)")
    assert "`handle.remove()` after the backward" in piling
    [hook] = module["hooks"]
    assert (hook["function"], hook["line"], hook["module"], hook["added"]) == ("<lambda>", 31, "Linear", [4])
    assert "a full backward hook of a `Linear` module" in " ".join(module["why"])
    assert module["fix"][0].startswith("Register the lambda at tests/scripts/hooks_joining_late.py:31 "
                                       "(`module.register_full_backward_hook(...)` on the `Linear`) once")


def test_layers_skipped_on_a_random_draw_are_named_with_the_draw_and_fixed_with_a_tensor_draw(record_run):
    """tests/scripts/layer_drop.py: LayerDrop's `random.random() < p` skips blocks per step, and each
    set of blocks that ran is another CA graph. The graph grows and shrinks by copies of a block's
    nodes, which alone reads as a loop's trip count set by the data; torch's graph break on
    `Random.random` in the forward says it is a random draw: named so, with its line, not "quiet
    steps: stabilised", and fixed with torch.where on a tensor draw, not by padding a loop."""
    run = _recorded(record_run, "layer_drop.py")
    [drop] = _causes(run)
    said = _said(drop)
    assert drop["code"] == "graph_structure" and drop["count"] >= 2
    draw = "torch reports a call of Python's random module at tests/scripts/layer_drop.py:23  if self.training and random.random() < self.p: "
    # torch 2.13 breaks on the call; 2.14 and 2.15 trace it and break on the branch on its value.
    assert (draw + "(a graph break: Dynamo does not trace `Random.random`" in said
            or draw + "(a graph break: Dynamo traces `Random.random` but not the branch on the value it draws" in said), said
    assert ": more or fewer layers (or a loop's iterations) ran." in said and "trip count" not in said and "pad to a maximum" not in said
    assert "a later draw can still bring one" in said and "It has stabilised" not in said
    assert "`x = torch.where(torch.rand(()) < p, x, layer(x))`" in drop["fix"][0]
    head = cli_in_process("summary", str(run))[1].splitlines()[0]
    assert "the layers that ran changed, beside a random draw at layer_drop.py:23 (LayerDrop?)" in head
    # The draw a tensor compared in Python (`if torch.rand(()) < self.p:`): a data-dependent branch on a random draw.
    [drop] = _causes(_recorded(record_run, "layer_drop_tensor_draw.py"))
    said = _said(drop)
    assert ("torch reports a branch on a tensor drawn with `torch.rand` at tests/scripts/layer_drop_tensor_draw.py:22  "
            "if self.training and torch.rand(()) < self.p: (a graph break, \"Data-dependent branching\"") in said
    assert "trip count" not in said and "`x = torch.where(torch.rand(()) < p, x, layer(x))`" in drop["fix"][0]


def test_an_episode_length_loop_is_a_trip_count_and_expert_routing_is_ops_picked_per_step(record_run):
    """REINFORCE's torch.cat of one loss term per time step (episodes of 6, 4, 8 steps) grows and
    shrinks the graph by copies of the policy's nodes: a loop's trip count, not a branch; the fix of
    one forward on the stacked states leaves a size change only. A
    mixture of experts routed by the data swaps ops at the same places, and one AccumulateGrad
    fewer where one expert serves both slots: ops picked per step, not a loop, and not .grad."""
    episodes = _causes(_recorded(record_run, "episode_returns.py"))
    [loop] = episodes
    said = _said(loop)
    assert loop["code"] == "graph_structure" and loop["count"] == 2 and loop["steps"] == [1, 2]
    assert "(91, 63, 119 autograd nodes): the backward's size follows a loop whose trip count changes per step" in said
    assert "CatBackward0 at NodeCall 2 (91 -> 63 nodes)" in said
    assert "a Python branch" not in said and "torch.where" not in said and "recurrent" not in said
    assert "run the module once on them stacked (torch.stack)" in loop["fix"][1]
    # That fix, run: the policy once on the episode's stacked states keeps one graph structure;
    # only its sizes change, once compiled autograd's and once Dynamo's recompile.
    [sizes] = _causes(_recorded(record_run, "episode_returns.py", "--batched"))
    assert sizes["code"] != "graph_structure" and "Tensor shapes changed" in sizes["title"]
    assert "(2 recompiles: 1 CA cache miss" in sizes["title"] and "1 Dynamo recompile of the graph" in sizes["title"]
    experts = _causes(_recorded(record_run, "expert_routing.py"))
    [routing] = experts  # the AccumulateGrad miss of step 4 is another routing, not .grad switching
    said = _said(routing)
    assert routing["code"] == "graph_structure" and routing["count"] == 4
    assert "a Python branch or an op picked per step" in said
    assert "a loop whose trip count" not in said and "pad to a maximum" not in said and "the same way every step" not in said


def test_an_int_attribute_of_the_module_is_specialised_per_value_and_not_passed_as_a_tensor(record_run):
    """tests/scripts/moco_queue.py: MoCo's queue pointer, an int attribute the compiled forward
    advances and slices with, cycles through 4 values, each a compile. Dynamo specialises an int on
    an nn.Module (allow_unspec_int_on_nn_module False): said so, with that setting as the fix, not
    "pass it as a tensor where the compiled code is called" (no call passes it, and a slice needs an
    int)."""
    [cause] = _causes(_recorded(record_run, "moco_queue.py"))
    said = _said(cause)
    assert cause["count"] == 3 and "`self.queue_ptr` is an int attribute of the compiled module (a MoCo)" in said
    assert "allow_unspec_int_on_nn_module is False by default" in said
    assert cause["fix"][0].startswith("Nothing to fix if `self.queue_ptr` takes a few values") and "(4 seen)" in cause["fix"][0]
    assert "torch._dynamo.config.allow_unspec_int_on_nn_module = True" in cause["fix"][1]
    assert "torch.tensor(self.queue_ptr)" not in said and "where the compiled code is called" not in said
    # A call counter branched on keeps taking values: the recompile limit, then eager; never "pass it as a tensor".
    counter = _causes(_recorded(record_run, "call_counter.py"))[0]
    said = _said(counter)
    assert counter["count"] == 8 and "`self.calls` is an int attribute of the compiled module (a Net)" in said
    assert counter["fix"][0].startswith("`self.calls` keeps taking new values")
    assert "allow_unspec_int_on_nn_module = True" in counter["fix"][1] and "torch.tensor(self.calls)" not in said


def test_a_function_compiled_with_the_eager_backend_is_a_new_class_each_call_and_aot_is_the_fix(record_run):
    """torch.compile(model, backend="eager") over a model whose forward calls a custom Function:
    torch's autograd_function_apply builds ApplyTemplate at every call, so each backward misses on
    `ApplyTemplateBackward` and Dynamo's compile of the graph's code fails its guard on that class.
    Both causes say so and give the backend that runs AOTAutograd as the fix; the summary's advice is it."""
    run = _recorded(record_run, "grad_reverse.py")
    causes = _causes(run)
    structure, guard = causes[0], causes[1]
    assert structure["code"] == "graph_structure" and structure["count"] == 7
    said = _said(structure)
    assert structure["title"].startswith("The backward's custom autograd.Function is another class at every call")
    assert "`ApplyTemplateBackward` is the node of the class torch builds at every call" in said
    assert "`___check_type_id(backward_c_function, ...)` for `ApplyTemplateBackward`, failed at !1/2/1" in said
    assert "saved" not in structure["title"] and "keep it the same on every step" not in said
    assert 'backend="aot_eager"' in structure["fix"][0] and "torch.compiler.disable" in structure["fix"][0]
    assert guard["code"] == "dynamo_ca_graph_guard_failure" and "another class of the same name (`ApplyTemplateBackward`)" in guard["title"]
    assert guard["fix"] == structure["fix"] and "keep argument types fixed" not in _said(guard)
    head = cli_in_process("summary", str(run))[1].splitlines()
    assert "a custom autograd.Function was another class at each call (`ApplyTemplateBackward`)" in head[0]
    assert head[1].startswith("what to do: Compile the code that calls the custom autograd.Function with a backend that runs AOTAutograd")


def test_a_function_class_defined_in_the_forward_is_likely_a_new_class_and_defined_once_is_the_fix(record_run):
    """The Function class defined inside the function the forward calls, nothing compiled but the
    CA graphs: no Dynamo guard names the class (each graph's code is new), and the graphs' files read
    alike, so the class is the likeliest difference, said as such, with the class defined once."""
    [cause] = _causes(_recorded(record_run, "grad_reverse.py", "--inner"))
    said = _said(cause)
    assert cause["title"].startswith("The backward's custom autograd.Function is likely another class at every call (7 recompiles)")
    assert "`ReverseBackward` is a custom autograd.Function's node, and the graphs it was captured in hold nothing different" in said
    assert cause["fix"][0].startswith("Define the autograd.Function class once, at module level")


def test_a_functions_ctx_value_made_an_input_after_one_recompile_is_nothing_to_fix(record_run):
    """The Function applied outside the compiled feature extractor, its weight annealed every step
    and kept on `ctx`: Dynamo compiles its backward inside the CA graph, guards the first weight,
    recompiles once taking it as an input, and no step after recompiles. The explanation said "each
    new value compiles it once more" beside "later values reuse it", and "Nothing to fix if
    `hooks[0].weight` takes a few values" of a value new at every step."""
    [cause] = _causes(_recorded(record_run, "grad_reverse.py", "--outside"))
    why = " ".join(cause["why"])
    assert cause["code"] == "dynamo_ca_graph_guard_failure" and cause["count"] == 1, cause["title"]
    assert "compiled the frame again with the number as an input of the graph (automatic dynamic)" in why, why
    assert "compiles it once more" not in why, why
    assert cause["fix"] == ["Nothing to fix: one recompile, then `hooks[0].weight` is an input of the compiled graph and its "
                            "later values reuse it."]


def test_a_last_chunk_sliced_by_hand_is_no_dataloaders_last_batch_and_gets_no_drop_last(record_run):
    """word_language_model's shape (tests/scripts/hand_sliced_chunks.py): the data cut into chunks
    by the script, no DataLoader. The record counts the DataLoader iterators the loop made (0 here,
    2 for ragged_batches.py's two epochs through one), and explain, its headline and --verify's fixes
    then speak of a slice made by hand, never of a DataLoader's last batch or drop_last."""
    from cagtool.report.compare.headline import cause_phrase

    run = _recorded(record_run, "hand_sliced_chunks.py")
    mode = load_run(run).modes["ca"]
    assert mode.manifest.options["dataloader_iterators"] == 0
    [reason] = _torch_reasons(run)["0/1"]
    assert "size mismatch at index 0. expected 7, actual 2" in reason  # torch's guard: the last chunk of 2 rows
    root = _causes(run)[0]
    said = _said(root)
    assert "No DataLoader ran in this job: the script slices its data itself" in " ".join(root["why"]), said
    assert any(fix.startswith("If it is the last batch: no DataLoader ran in this job, so it is a slice the script makes "
                              "itself") and "Skip a slice shorter than the others" in fix for fix in root["fix"]), root["fix"]
    assert "drop_last" not in said and "A DataLoader whose" not in said, said
    # The guard names forward's parameter `src`; the call passes the batch first, positionally, beside
    # the state: the compile recorded forward's parameters, so the mark names the caller's `data`.
    assert [e.co_argnames for e in mode.of(DynamoCompileEvent) if e.compile_id == "0/0"] == [["self", "src", "state"]]
    assert "torch._dynamo.maybe_mark_dynamic(data, 0)" in " ".join(root["fix"]), root["fix"]
    explanation = explain(recompile_table(mode))
    assert cause_phrase(explanation.causes[0]).startswith("a smaller batch (the last slice of the data?): the size of `src`")
    assert "drop-last" not in {f.name for f in fixes_for(explanation, pgo_suggestion=mode.manifest.options.get("pgo_suggestion"))}

    # Through a DataLoader, one iterator an epoch, and its words stay a DataLoader's.
    loaded = record_run("ragged_batches.py")
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    ragged = load_run(loaded.path).modes["ca"]
    assert ragged.manifest.options["dataloader_iterators"] == 2
    assert "DataLoader's last?" in cause_phrase(explain(recompile_table(ragged)).causes[0])


def test_a_module_compiled_inside_ddp_is_evaluated_uncompiled_through_ddps_module(record_run, tmp_path):
    """DDP(torch.compile(net)) is called as `model`: the fix that skips the evaluation's grad-mode
    compile said `model._orig_mod(x)`, an AttributeError on a DDP. The call went through DDP's forward
    (SourceRef.wrapper), so the compiled module is `model.module`; the fix verified by re-running
    the job with it removes the recompile (checked by hand: torch's unique_graphs 2 -> 1)."""
    run = _recorded(record_run, "ddp_compiled_module_eval.py")
    events = [json.loads(line) for line in (run / "ca" / "events.jsonl").read_text().splitlines()]
    [recompile] = [e for e in events if e.get("kind") == "dynamo_recompile"]
    assert recompile["source"]["wrapper"] == "DistributedDataParallel" and recompile["source"]["code"].endswith("(model(x), y)")
    said = " ".join(_said(cause) for cause in _causes(run))
    assert "`model(x) if torch.is_grad_enabled() else model.module._orig_mod(x)`" in said, said
    assert "model._orig_mod" not in said
    copy = Path(shutil.copytree(run, tmp_path / "run"))
    proc = cagtool_in_process("recompiles", str(copy), "--explain", "--verify", "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    [fix] = [f for f in data["verification"]["fixes"] if f["fix"] == "eval-uncompiled"]
    assert 'getattr(model.module, "_orig_mod", model.module)(x)' in fix["patch"]["diff"]
    assert fix["verdict"] == "verified" and max(fix["measured"]["dynamo_recompiles"]) == 0, fix
    # torch.compile(DDP(net)): the compiled module is the one called, its `_orig_mod` the DDP (a
    # DDP forward met inside the compiled call is no wrapper of it)
    outside = _recorded(record_run, "ddp_compiled_module_eval.py", "--compile-outside")
    events = [json.loads(line) for line in (outside / "ca" / "events.jsonl").read_text().splitlines()]
    assert {e["source"]["wrapper"] for e in events if e.get("kind") == "dynamo_recompile"} == {""}
    said = " ".join(_said(cause) for cause in _causes(outside))
    assert "else model._orig_mod(x)`" in said and "model.module" not in said, said


def test_a_grus_time_steps_and_ctcs_saved_lengths_are_named_and_the_ctc_fix_captures_once(record_run):
    """A speech recogniser (tests/scripts/speech_lengths.py). An nn.GRU that Dynamo runs eagerly
    records one cell per time step on CPU, so utterances of 6, 9, 5 frames make three structures:
    the loop is named as the GRU's call (torch's graph break on it) with padding as the fix, not
    the stacked-states fix of a loop whose iterations do not feed each other. nn.CTCLoss saves its
    lengths as integers: a capture per batch of targets, named as CTCLoss's; the fix it gives, the
    tensor-lengths overload, run: one capture, and no cause of CtcLossBackward0 left."""
    script = Path(__file__).parents[2] / "scripts" / "speech_lengths.py"
    rnn_line = next(n for n, line in enumerate(script.read_text().splitlines(), 1) if "x, _ = self.rnn(x)" in line)
    gru_run = _recorded(record_run, "speech_lengths.py", "--model", "gru")
    gru, features = _causes(gru_run)  # the features' layer, compiled, recompiles for the length once
    assert features["code"] != "graph_structure" and features["steps"] == [1]
    said = _said(gru)
    assert gru["code"] == "graph_structure" and gru["count"] == 2 and gru["steps"] == [1, 2]
    assert "The loop is a recurrent layer's time steps: torch reports an RNN module at" in said
    assert f"speech_lengths.py:{rnn_line}" in said and "x, _ = self.rnn(x)" in said
    assert gru["fix"][0].startswith("Give every batch one sequence length: pad the sequences to a fixed maximum")
    assert "torch.stack" not in said and "a branch inside it" not in said
    events = [json.loads(line) for line in (gru_run / "ca" / "events.jsonl").read_text().splitlines()]
    assert any("Attempted to wrap RNN, GRU, or LSTM" in e.get("reason", "") for e in events if e.get("kind") == "graph_break")
    code, out, _ = cli_in_process("summary", str(gru_run))
    assert code == 0 and f"a recurrent layer's time steps followed the sequence length (the RNN at speech_lengths.py:{rnn_line})" in out

    # Not compiled (compiled autograd alone): no graph break names the GRU; the copies, a GRU cell's
    # nodes and nothing else, do.
    [cells] = _causes(_recorded(record_run, "speech_lengths.py", "--uncompiled"))
    said = _said(cells)
    assert cells["code"] == "graph_structure" and cells["count"] == 2
    assert "The copies are an nn.GRU cell's nodes and nothing else" in said and "torch reports an RNN module" not in said
    assert cells["fix"][0].startswith("Give every batch one sequence length") and "torch.stack" not in said

    ctc_run = _recorded(record_run, "speech_lengths.py", "--model", "linear")
    [ctc] = _causes(ctc_run)
    said = _said(ctc)
    assert ctc["code"] == "graph_structure" and ctc["count"] == 3 and "A number the backward's nodes saved changes" in ctc["title"]
    assert "CtcLossBackward0 is nn.CTCLoss's (F.ctc_loss's) node" in said
    assert ctc["fix"][0].startswith("Call the overload of torch's CTC loss that keeps the lengths tensors")
    code, out, _ = cli_in_process("summary", str(ctc_run))
    assert code == 0 and "the lengths nn.CTCLoss saved as numbers changed (its CtcLossBackward0 node)" in out

    fixed = _recorded(record_run, "speech_lengths.py", "--model", "linear", "--ctc-tensor-lengths")
    events = [json.loads(line) for line in (fixed / "ca" / "events.jsonl").read_text().splitlines()]
    assert sum(1 for e in events if e.get("kind") == "ca_graph") == 1  # one capture in 4 steps, against 4
    assert all("CtcLoss" not in _said(c) for c in _causes(fixed))
