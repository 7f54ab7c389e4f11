"""Which causes each fix `recompiles --explain --verify` applies answers, and how a cause no fix
answers is worded: a size guard on a keyword input (`kwargs['input_ids']`, every HF model's) is
answered by the fixes that make that input dynamic; a cause the explanation finds nothing to
change in the user's code for (a library's hook state, the one-time .grad warm-up) never reads
"your code". On hand-built causes and records (the shapes of a Trainer job and a DeepSpeed ZeRO
job, as recorded by `cagtool run`), without a torch process."""

from __future__ import annotations

from pathlib import Path

from cagtool.record.loader import ModeRecord
from cagtool.record.manifest import ModeManifest
from cagtool.record.schema import (
    CACompileEvent,
    CacheMissEvent,
    CAGraphEvent,
    AutogradNodeRef,
    DynamoRecompileEvent,
    HookRef,
    HookSite,
    SourceRef,
    StepEvent,
)
from cagtool.report.recompiles.explain import (
    CAUSE_DYNAMO_CA_GRAPH,
    CAUSE_DYNAMO_FRAME,
    CAUSE_GRAD_DEFINED,
    CAUSE_SHAPES,
    CAUSE_STRUCTURE,
    Cause,
    Explanation,
    cause_words,
    explain,
)
from cagtool.report.recompiles.table import recompile_table
from cagtool.report.recompiles.verification import verification_lines
from cagtool.verify.fixes import NO_CHANGE, RUN_CONFIG, fixes_for, unanswered_causes, who_fixes
from cagtool.verify.patch import YOUR_CODE
from cagtool.verify.patches import patch_for

# torch's PGO line at the end of the HF Trainer job's ca mode (transformers' Trainer over a
# DataLoader whose last batch is smaller), verbatim.
HF_PGO = ("PGO detected a recompilation due to dynamic shapes. To reduce shape recompilations by compiling dynamically to start, "
          "set environment variable TORCH_COMPILE_DYNAMIC_SOURCES=\"L['kwargs']['attention_mask'],L['kwargs']['input_ids'],"
          "L['kwargs']['labels'],L['attention_mask'],L['input_ids'],L['labels'],L['logits'],L['kwargs']['logits']\"")


def _size_cause(number: int, compile_id: str, tensor: str) -> Cause:
    guard = f"tensor '{tensor}' size mismatch at index 0. expected 4, actual 2"
    return Cause(CAUSE_DYNAMO_FRAME, [], number=number, facts={"failures": [(compile_id, guard)], "guard": guard, "kind": "size"})


def _trainer_explanation() -> Explanation:
    """The causes of the Trainer job's smaller last batch, as its explanation numbers them: five
    forward frames recompiled on a size guard, three on keyword inputs and two on a plain local;
    the backward captured again after #1; compiled autograd's own sizes."""
    causes = [
        _size_cause(1, "5/1", "kwargs['logits']"),
        Cause(CAUSE_STRUCTURE, [], number=2, caused_by=1),
        _size_cause(3, "0/1", "kwargs['input_ids']"),
        _size_cause(4, "1/1", "kwargs['input_ids']"),
        _size_cause(5, "2/1", "labels"),
        _size_cause(6, "4/1", "labels"),
        Cause(CAUSE_SHAPES, [], number=7),
    ]
    causes[0].consequences = [2]
    return Explanation(None, [], causes)  # type: ignore[arg-type]


def test_a_size_guard_on_a_keyword_input_is_answered_by_the_fixes_that_make_it_dynamic():
    explanation = _trainer_explanation()
    fixes = {f.name: f for f in fixes_for(explanation, pgo_suggestion=HF_PGO)}
    # Every cause whose failing guard's tensor the fix's list makes dynamic, keyword inputs too.
    assert fixes["dynamic-sources"].causes == (1, 3, 4, 5, 6)
    # torch's list names no CA graph input (L['sizes']): compiled autograd's own miss (#7) is ca-dynamic's alone.
    assert fixes["torch-pgo"].causes == (1, 3, 4, 5, 6) and "torch-pgo-ca-dynamic" not in fixes
    assert fixes["ca-dynamic"].causes == (7,)
    listed = fixes["dynamic-sources"].env["TORCH_COMPILE_DYNAMIC_SOURCES"].split(",")
    assert {"L['kwargs']['logits']", "L['kwargs']['input_ids']", "L['labels']"} <= set(listed)
    assert all(who_fixes(c) == RUN_CONFIG for c in explanation.causes if c.code == CAUSE_DYNAMO_FRAME)
    # What no fix answers is only the backward captured again after #1, which goes with it.
    verified = {n for f in fixes.values() for n in f.causes}
    (item,) = unanswered_causes(explanation, verified, verified, {}, "/proj")
    assert item["cause"] == 2 and item["why"] == "follows from #1: answered by the fix of #1" and item["who"] == RUN_CONFIG


def test_a_keyword_inputs_size_guard_alone_is_linked_without_torchs_list():
    """Without torch's PGO line, the source is read from the guard: `kwargs['input_ids']` is
    `L['kwargs']['input_ids']`, as TORCH_COMPILE_DYNAMIC_SOURCES names it."""
    explanation = Explanation(None, [], [_size_cause(1, "0/1", "kwargs['input_ids']")])  # type: ignore[arg-type]
    (fix,) = fixes_for(explanation)
    assert fix.name == "dynamic-sources" and fix.causes == (1,)
    assert fix.env == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['kwargs']['input_ids']"}


def test_a_size_cause_left_out_by_another_fix_is_not_verified_this_time_not_a_local_edit():
    explanation = _trainer_explanation()
    fixes = fixes_for(explanation, pgo_suggestion=HF_PGO)
    applicable = {n for f in fixes for n in f.causes}
    items = {i["cause"]: i for i in unanswered_causes(explanation, {7}, applicable, {}, "/proj", asked="ca-dynamic")}
    assert set(items) == {1, 2, 3, 4, 5, 6}
    for number in (1, 3, 4, 5, 6):
        assert items[number]["why"] == "not verified this time: --fix ca-dynamic asked for another fix"
        assert items[number]["who"] == RUN_CONFIG


def _mode(tmp_path: Path, events: list, steps: int) -> Explanation:
    """The explanation of a hand-built ca mode: `events` (classes and fields, in order), then `steps` steps."""
    built = [cls(seq=seq, t=0.01 * seq, **fields) for seq, (cls, fields) in enumerate(events)]
    for step in range(steps):
        built.append(StepEvent(seq=len(built), t=0.01 * len(built), step=step, backward_s=0.01, ca_captures=0, boundary="optimizer"))
    manifest = ModeManifest(mode="ca", argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/proj", versions={},
                            backend="eager", dynamic=False, started_at="2026-01-01T00:00:00+00:00", status="finished", exit_code=0)
    return explain(recompile_table(ModeRecord(path=tmp_path / "ca", manifest=manifest, events=built)))


def test_a_guard_name_that_is_no_source_never_reaches_the_environment(tmp_path):
    """A name with a comma would split TORCH_COMPILE_DYNAMIC_SOURCES's list in two (a forged
    record), and one torch wrote through a call (`___from_numpy(...)`) names no input: neither is
    linked, and the size cause is worded as a size, never as a missing local edit."""
    for tensor in ("kwargs['a'],L['b']", "___from_numpy(L['x'])"):
        guard = f"0/0: tensor '{tensor}' size mismatch at index 0. expected 4, actual 2"
        explanation = _mode(tmp_path, [(DynamoRecompileEvent, {"compile_id": "0/1", "is_ca_graph": False, "step": 2, "reasons": [guard],
                                                               "source": CALLER})], 6)
        (cause,) = explanation.causes
        assert cause.code == CAUSE_DYNAMO_FRAME and cause.facts["kind"] == "size"
        assert fixes_for(explanation) == []
        assert patch_for(cause, None, None, None) is None  # a tensor's size: no edit of the script
        (item,) = unanswered_causes(explanation, set(), set(), {}, "/proj")
        assert "tensor's size, which dynamic shapes answer" in item["why"] and "no local edit makes it hold" not in item["why"]
        assert not item["nothing_to_change"]


# -- a DeepSpeed ZeRO job: its hooks' own state, and the .grad warm-up --------------------------

BACKWARD = SourceRef(file="/proj/train_ds.py", line=23, code="engine.backward(loss)", function="<module>", how="backward_call")
CALLER = SourceRef(file="/proj/train_ds.py", line=23, code="engine.backward(loss)", function="<module>", how="caller")
SITE = "/venv/lib/python3.11/site-packages/deepspeed/runtime"
HOOKS = [HookSite("tensor_pre_hook", "DeepSpeedEngine.backward.<locals>.<lambda>", f"{SITE}/engine.py", 3424),
         HookSite("post_acc_grad_hook", "DeepSpeedZeroOptimizer.create_gradient_handling_hooks.<locals>.wrapper.<locals>.grad_handling_hook",
                  f"{SITE}/zero/stage_1_and_2.py", 1368, count=6)]
BUCKET_GUARD = "not self.ipg_buckets[torch.float32].buffer"


def _zero_job(tmp_path: Path, bucket_steps: tuple[int, ...], steps: int = 4) -> Explanation:
    """ZeRO stage 2's shape as `cagtool run` records it: the first backward captures !0, the
    second (.grad now defined) !1, and Dynamo recompiles !1's code (`!1/8/N`) each time the
    optimizer's bucket, a list its gradient hook reads, goes from empty to filled."""
    events: list = []
    for ca_id, node, node_call, key_size, previous in ((0, "torch::autograd::GraphRoot", 0, 39, []),
                                                       (1, "torch::autograd::AccumulateGrad", 5, 34, [23])):
        events.append((CacheMissEvent, {
            "ca_id": ca_id, "compile_id": f"!{ca_id}", "step": 0, "miss_kind": "new_node",
            "message": f"Cache miss due to new autograd node: {node} (NodeCall {node_call}) with key size {key_size}, previous key sizes={previous}",
            "node": node, "node_call": node_call, "key_size": key_size, "previous_key_sizes": previous, "source": BACKWARD, "backward_call": BACKWARD}))
        events.append((CAGraphEvent, {
            "ca_id": ca_id, "compile_id": f"!{ca_id}", "step": 0, "node_count": 10, "op_histogram": {},
            "autograd_nodes": [AutogradNodeRef(0, "torch::autograd::GraphRoot"), AutogradNodeRef(5, "torch::autograd::AccumulateGrad")],
            "aot_ids": [], "hooks": [HookRef("tensor_pre_hook", "hook"), HookRef("post_acc_grad_hook", "hook")], "num_sizes": 0,
            "capture_s": 0.01, "code_file": f"graphs/ca_{ca_id}.py", "nodes_file": f"graphs/ca_{ca_id}.json"}))
        if ca_id == 0:
            events.append((CACompileEvent, {"ca_id": 0, "first_call_s": 1.0, "step": 0, "hooks": HOOKS}))
    for n, step in enumerate(bucket_steps, start=1):
        events.append((DynamoRecompileEvent, {"compile_id": f"!1/8/{n}", "is_ca_graph": True, "step": step,
                                              "reasons": [f"!1/8/{n - 1}: {BUCKET_GUARD}"], "source": CALLER}))
        if n == 1:
            events.append((CACompileEvent, {"ca_id": 1, "first_call_s": 1.0, "step": step, "hooks": HOOKS}))
    return _mode(tmp_path, events, steps)


def test_a_librarys_hook_state_and_the_grad_warm_up_never_ask_for_a_change_in_your_code(tmp_path):
    explanation = _zero_job(tmp_path, (0,))
    by_code = {c.code: c for c in explanation.causes}
    library, warmup = by_code[CAUSE_DYNAMO_CA_GRAPH], by_code[CAUSE_GRAD_DEFINED]
    assert library.facts["library_hooks"][0] == "deepspeed"
    assert cause_words(library, "/proj").fix[0].startswith("Nothing to change in your code: the value is deepspeed's")
    assert fixes_for(explanation) == [] and patch_for(library, None, None, None) is None
    items = {i["cause"]: i for i in unanswered_causes(explanation, set(), set(), {}, "/proj")}
    said = items[library.number]
    assert said["why"].startswith("nothing to change in your code: the value is deepspeed's, read by its hooks")
    assert said["who"] == "deepspeed's code, not yours" and said["nothing_to_change"]
    said = items[warmup.number]
    assert said["why"].startswith("nothing to fix: the explanation finds these recompiles one-time")
    assert said["who"] == NO_CHANGE and said["nothing_to_change"]
    assert not any(i["who"] == YOUR_CODE or "needs a change to the code" in i["why"] for i in items.values())
    # As `recompiles --verify` prints it: nothing to verify, and why.
    data = {"mode": "ca", "repeat": 1, "fixes": [], "not_applied": list(items.values()), "run": "runs/r1", "wall_s": 0.0}
    lines = verification_lines(data)
    assert lines[1] == "  nothing to verify: the explanation finds nothing to change in your code for these causes"
    assert f"  cause #{library.number} (dynamo_ca_graph_guard_failure): nothing to change in your code: the value is deepspeed's" in "\n".join(lines)
    assert not any(line.endswith(" - your code") for line in lines), lines


def test_a_librarys_hook_state_that_keeps_changing_is_the_librarys_to_fix(tmp_path):
    """Where the library's value changes every step, the explanation says to report it to the
    library: the verification says the same, and names the library as the one to change."""
    explanation = _zero_job(tmp_path, tuple(range(8)), steps=8)
    (library,) = [c for c in explanation.causes if c.code == CAUSE_DYNAMO_CA_GRAPH]
    assert cause_words(library, "/proj").fix[0].startswith("Not your code: deepspeed's hooks")
    items = {i["cause"]: i for i in unanswered_causes(explanation, set(), set(), {}, "/proj")}
    assert items[library.number]["why"].startswith("not your code: deepspeed's hooks read a value that keeps changing")
    assert items[library.number]["who"] == "deepspeed's code, not yours"


def test_a_kept_verification_of_an_older_cagtool_keeps_its_words():
    """verification.json written before `nothing_to_change` existed reads as it did."""
    data = {"mode": "ca", "repeat": 1, "fixes": [], "run": "r", "not_applied": [
        {"cause": 1, "code": CAUSE_GRAD_DEFINED, "why": "nothing to fix: ...", "who": YOUR_CODE, "patch": None}]}
    assert verification_lines(data)[1] == "  no fix cagtool can apply (a run setting, or a local edit of the script) answers these causes"


def test_a_cause_at_a_line_of_the_patched_copy_is_the_same_cause_as_at_the_scripts_line():
    """A patch re-run runs `drop-last-main.py` in `main.py`'s place (the same lines): its causes name
    the copy's file. Keyed by the script's name, a cause the fix did not remove (a layer's new sizes,
    not a last batch: mnist_forward_forward) is "still there", never "gone" and "uncovered"."""
    from types import SimpleNamespace

    from cagtool.report.recompiles.explain import cause_key
    from cagtool.verify.verification import rerun_cause_key

    line = SourceRef(file="/job/main.py", line=81, code="loss.backward()", function="train", how="backward_call")
    copied = SourceRef(file="/job/run/verify/20261205-144515/drop-last-main.py", line=81, code="loss.backward()", function="train",
                       how="backward_call")
    recorded = Cause(CAUSE_SHAPES, [], number=1, source=line)
    rerun = Cause(CAUSE_SHAPES, [], number=1, source=copied)
    patched = SimpleNamespace(manifest=SimpleNamespace(options={"patched_source": copied.file, "patch_target": line.file}))
    plain = SimpleNamespace(manifest=SimpleNamespace(options={}))
    assert cause_key(rerun) != cause_key(recorded)
    assert rerun_cause_key(patched, rerun) == cause_key(recorded) == rerun_cause_key(plain, recorded)
    # A re-run that ran no copy keeps its own names: another file is another cause.
    assert rerun_cause_key(plain, rerun) != cause_key(recorded)


def test_a_forward_size_cause_is_keyed_by_its_dimension_and_a_follower_by_its_root():
    """--verify on a job with a last batch (x's dim 0, 8 -> 4) and a longer sequence (dim 1, 16 -> 24)
    at the same call: drop-last removed the first, whose key was the second's (code, kind, line), so
    "cause #4 is still there" though the re-run had no dim-0 change; and the backward captured again
    after it matched the captures after the sequence change. Keyed by the dimension, and a follower
    by its root, they are told apart."""
    call = SourceRef(file="/job/phased.py", line=54, code="logits = cmodel(x)", function="<module>", how="caller")
    back = SourceRef(file="/job/phased.py", line=59, code="loss.backward()", function="<module>", how="backward_call")
    batch = Cause(CAUSE_DYNAMO_FRAME, [], number=4, source=call,
                  facts={"kind": "size", "failures": [("0/1", "tensor 'L['x']' size mismatch at index 0. expected 8, actual 4")]})
    length = Cause(CAUSE_DYNAMO_FRAME, [], number=6, source=call,
                   facts={"kind": "size", "failures": [("0/3", "tensor 'L['x']' size mismatch at index 1. expected 16, actual 24")]})
    after_batch = Cause(CAUSE_STRUCTURE, [], number=5, source=back, caused_by=4, facts={"variants": {5: ["CompiledFunctionBackward0", "CompiledFunctionBackward2"]}})
    after_length = Cause(CAUSE_STRUCTURE, [], number=7, source=back, caused_by=6, facts={"variants": {5: ["CompiledFunctionBackward2", "CompiledFunctionBackward7"]}})
    causes = [batch, after_batch, length, after_length]
    from cagtool.report.recompiles.explain import cause_key

    assert cause_key(batch) != cause_key(length)
    assert cause_key(after_batch) == cause_key(after_length)  # alone they read alike: the same node, the same line
    assert cause_key(after_batch, causes) != cause_key(after_length, causes)
    # The re-run's cause after the sequence change, numbered otherwise, is the record's #7.
    rerun_length = Cause(CAUSE_DYNAMO_FRAME, [], number=1, source=call, facts=length.facts)
    rerun_after = Cause(CAUSE_STRUCTURE, [], number=2, source=back, caused_by=1, facts=after_length.facts)
    assert cause_key(rerun_after, [rerun_length, rerun_after]) == cause_key(after_length, causes)


def test_an_evaluations_last_batch_and_trainings_at_one_forward_line_are_two_causes():
    """A LightningModule's forward calls the compiled net for training and for the evaluation (one
    line). The record's size cause was the evaluation's last batch (grad off); the eval-uncompiled
    fix removed it, and training's last batch, which the evaluation's sizes had made dynamic before,
    recompiled in the re-run instead (grad on): not "cause #2 is still there" but a cause the fix
    uncovered. Keyed by the grad mode it recompiled in, they are told apart; unknown stays one key."""
    from cagtool.report.recompiles.explain import cause_key

    call = SourceRef(file="/job/train_lit.py", line=16, code="return self.net(x)", function="forward", how="caller")
    guard = "tensor 'args[0]' size mismatch at index 0. expected 64, actual 8"
    evaluation = Cause(CAUSE_DYNAMO_FRAME, [], number=2, source=call, facts={"kind": "size", "failures": [("0/2", guard)], "grad_mode_after": False})
    training = Cause(CAUSE_DYNAMO_FRAME, [], number=1, source=call, facts={"kind": "size", "failures": [("0/1", guard)], "grad_mode_after": True})
    unknown = Cause(CAUSE_DYNAMO_FRAME, [], number=1, source=call, facts={"kind": "size", "failures": [("0/1", guard)]})
    assert cause_key(evaluation) != cause_key(training)
    assert cause_key(unknown) == cause_key(Cause(CAUSE_DYNAMO_FRAME, [], number=3, source=call, facts=dict(unknown.facts)))


def test_a_resume_frame_recompiled_on_what_item_returned_is_answered_by_capture_scalar_outputs():
    """`scale = h.abs().mean().item()` in a compiled forward: the frame resuming after the break
    recompiled on `___stack0 == 0.2468...` (the number .item() returned). torch's own hint for the
    break is capture_scalar_outputs, which --verify applies by its environment variable (checked on
    such a job: Dynamo recompiles 2 -> 1, graph breaks 1 -> 0, VERIFIED). Another guard of the same
    resume frame (a Python string), or a stack value after another break, is not answered by it."""
    resume = SourceRef(file="/w/itemfwd.py", line=9, code="scale = h.abs().mean().item()", function="forward", how="resume", via="")
    item = "Unsupported Tensor.item() call with capture_scalar_outputs=False: Dynamo does not support tracing `Tensor.item()`"

    def cause(number: int, guard: str, reason: str = item) -> Cause:
        return Cause(CAUSE_DYNAMO_FRAME, [], number=number, facts={"failures": [("1/1", guard)], "guard": guard, "kind": "value",
                                                                   "resume": resume, "break_reason": reason})

    explanation = Explanation(None, [], [cause(1, "split == 'warmup'"), cause(3, "___stack0 == 0.24682775139808655"),  # type: ignore[arg-type]
                                         cause(4, "___stack1 == 3", "call to print")])
    (fix,) = fixes_for(explanation)
    assert (fix.name, fix.causes, fix.env) == ("capture-scalars", (3,), {"TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS": "1"})
