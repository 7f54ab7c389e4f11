"""`recompiles --explain` and `--verify`'s reading of a re-run on ordinary training scripts: a
non-reentrant activation checkpoint of a compiled block under compiled autograd started dynamic
(tests/scripts/checkpoint_pieces.py, one `cagtool run --dynamic`, 3 steps), a list of tensors passed
to a compiled function, and the recompile budget of a compiled module."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT

from cagtool.record.loader import load_run
from cagtool.record.schema import SourceRef
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_CA_GRAPH, CAUSE_DYNAMO_FRAME, CAUSE_STRUCTURE, _guard_fixes, cause_words, explain
from cagtool.report.recompiles.table import recompile_table
from cagtool.torch_text import GUARD_LENGTH, GUARD_REQUIRES_GRAD, GUARD_SIZE, GUARD_VALUE

PIECES = ROOT / "tests" / "scripts" / "checkpoint_pieces.py"


def _explained(run: Path):
    record = load_run(run)
    table = recompile_table(record.modes["ca"])
    return record, table, explain(table)


@pytest.mark.slow
def test_the_pieces_of_a_ca_graph_recompiled_for_one_size_change_are_one_cause(checkpoint_pieces_run):
    """Compiled autograd started dynamic (`--verify --fix ca-dynamic`'s re-run of such a job): no CA
    recompile gathers Dynamo's recompiles of the graph's pieces, which were one cause each (10
    causes of 1 recompile, each "one recompile in all")."""
    _, table, explanation = _explained(checkpoint_pieces_run)
    on_graph = [row for row in table.recompiles if row.source == "dynamo_ca_graph"]
    assert len(on_graph) > 2
    causes = [c for c in explanation.causes if c.code == CAUSE_DYNAMO_CA_GRAPH]
    assert len(causes) == 1 and causes[0].count == len(on_graph), [(c.number, c.count) for c in causes]
    words = cause_words(causes[0], table.cwd)
    why, fix = " ".join(words.why), " ".join(words.fix)
    assert f"{len(on_graph)} of those recompiles came in one step" in why and "one recompile in all" not in why, why
    # Measured by hand (27 breaks -> 0 on a 2-block job, with aot_eager and inductor): the fix that removes the pieces.
    assert "call the checkpoint inside the compiled function" in fix and 'compiles with backend="eager"' in fix, fix


@pytest.mark.slow
def test_verify_counts_every_recompile_left_of_a_cause_the_rerun_splits(checkpoint_pieces_run):
    """--verify matched the recorded cause "backward sizes at the backward's line" to the re-run's
    causes of that key and kept the last one's count: "cause #2 is still there (1 recompile in the
    re-run)" where 10 remained."""
    from cagtool.verify.verification import causes_left

    record, table, _ = _explained(checkpoint_pieces_run)
    line = next(n for n, text in enumerate(PIECES.read_text().splitlines(), start=1) if text.strip() == "loss.backward()")
    on_graph = sum(1 for row in table.recompiles if row.source == "dynamo_ca_graph")
    assert causes_left(record, "ca", {2: ("backward sizes", PIECES.name, line)}) == {2: on_graph}


@pytest.mark.slow
def test_a_loop_over_blocks_is_told_as_a_loop_not_a_gans_detached_input(checkpoint_pieces_run):
    """The compiled block is called at one line, its first call of a step on the data (no grad),
    the next on the first block's output: the words told of a GAN's `fake.detach()`."""
    _, table, explanation = _explained(checkpoint_pieces_run)
    cause = next(c for c in explanation.causes if c.code == CAUSE_DYNAMO_FRAME and c.facts.get("kind") == GUARD_REQUIRES_GRAD)
    words = cause_words(cause, table.cwd)
    why, fix = " ".join(words.why), " ".join(words.fix)
    assert "GAN" not in why and "Every call of the compiled code comes from that one line" in why, why
    assert fix.startswith("Nothing to fix: the loop's first call"), fix


def test_a_list_passed_in_is_not_told_to_append_outside():
    """A list of views passed to the compiled function, read there (`for v in views`), its length
    2, 3, 4: "read and append to it outside the compiled function" named nothing the script does."""
    read = {"kind": GUARD_LENGTH, "guard": "len(views) == 2", "container": "views", "stabilised": True}
    fixes = " ".join(_guard_fixes(read, False, "return sum(model(v).pow(2).mean() for v in views) / len(views)"))
    assert "append" not in fixes and fixes.startswith("Nothing to fix when `views` takes a few lengths") and "torch.stack" in fixes
    grows = {"kind": GUARD_LENGTH, "guard": "len(seen) == 3", "container": "seen"}
    assert "append to it outside the compiled function" in " ".join(_guard_fixes(grows, False, "seen.append(x.sum())"))
    assert "append" not in " ".join(_guard_fixes({**read, "stabilised": False}, False, "for v in views:"))


@pytest.mark.slow
def test_the_budget_names_the_compiled_module_not_torchs_wrapper(record_run):
    """sample_scripts/unexpected_causes.py compiles an nn.Sequential: its frame is torch's wrapper
    `inner` (torch/_dynamo/external_utils.py), which the budget named as the frame."""
    from cagtool.report.recompiles.budget import budget_of
    from cagtool.report.recompiles.budget_words import frame_budget_text

    run = record_run("unexpected_causes.py")
    assert run.returncode == 0, run.stderr[-2000:]
    record = load_run(run.path).modes["ca"]
    frame = next(f for f in budget_of(record).frames if f.frame == "0")
    text = frame_budget_text(frame, record.manifest.cwd)
    assert text.startswith("frame 0, the compiled module `Sequential` called at ") and "unexpected_causes.py:32" in text, text
    assert "external_utils.py" not in text


@pytest.mark.slow
def test_ragged_batches_accumulated_root_the_backwards_sizes_and_leave_the_first_warm_up_its_own(record_run):
    """tests/scripts/ragged_accumulation.py (HF Trainer's ragged batches with gradient accumulation,
    seen on the Trainer job): the forward recompiles for a length at the step's second micro-batch,
    whose backward is the run's first .grad warm-up, and the backward's sizes change at the third.
    The warm-up read as "caused by" the forward's recompile (it comes whatever the forward does),
    and the backward's sizes as a root of their own, led by "pad or bucket", because they changed
    in the step of the forward's recompile rather than a later one."""
    run = record_run(str(ROOT / "tests" / "scripts" / "ragged_accumulation.py"))
    assert run.returncode == 0, run.stderr[-2000:]
    _, table, explanation = _explained(run.path)
    by_code = {c.code: c for c in explanation.causes}
    assert sorted(by_code) == ["changed_shapes", "dynamo_guard_failure", "grad_defined_changed"], sorted(by_code)
    forward, sizes, warm_up = by_code["dynamo_guard_failure"], by_code["changed_shapes"], by_code["grad_defined_changed"]
    assert sizes.caused_by == forward.number and warm_up.caused_by is None
    assert explanation.causes[0] is forward  # the root first: its fix leads the headline
    words = " ".join(cause_words(warm_up, table.cwd).why)
    assert "every step uses both" in words and "Follows from" not in words, words


@pytest.mark.slow
def test_a_new_backward_graphs_warm_up_after_a_last_batch_follows_the_forwards_recompile(record_run):
    """tests/scripts/accumulate_last_batch.py (accelerate's `accumulate` over a DataLoader with a
    smaller last batch, seen on an accelerate job): the next epoch's first micro-batch recaptures the
    backward for the new sizes (.grad None), and its second captures that graph's .grad warm-up. The
    warm-up read as a root of its own, ".grad switched between None and a tensor ... Fix: Clear
    gradients the same way every step", though the job clears them alike every step."""
    run = record_run(str(ROOT / "tests" / "scripts" / "accumulate_last_batch.py"), backend="aot_eager")
    assert run.returncode == 0, run.stderr[-2000:]
    _, table, explanation = _explained(run.path)
    forward = next(c for c in explanation.causes if c.code == CAUSE_DYNAMO_FRAME)
    warm_ups = [c for c in explanation.causes if c.code == "grad_defined_changed"]
    later = [c for c in warm_ups if c.steps != [0]]
    assert len(later) == 1 and later[0].caused_by == forward.number, [(c.number, c.steps, c.caused_by) for c in warm_ups]
    said = " ".join([*cause_words(later[0], table.cwd).why, *cause_words(later[0], table.cwd).fix])
    assert "Clear gradients the same way every step" not in said and "warms up" in said, said
    assert [c for c in explanation.causes if c.caused_by is None] == [forward, *[c for c in warm_ups if c.steps == [0]]]


def test_a_wrapper_that_two_modules_forwards_share_is_one_entry_per_class_and_its_last_batch_a_size_change(record_run):
    """tests/scripts/shared_forward_wrapper.py, the shape of an HF Trainer job on a tiny Llama
    (transformers' `deprecate_kwarg` wrapper around LlamaForCausalLM's and LlamaModel's forwards, a
    frame of its own after a graph break): the last batch's recompiles of that frame (torch lists
    another entry first, failing on the type or on `len(args)`) were put with a module's first call,
    "a value of another type ... keep argument types fixed" and "pass `args` as one tensor
    (torch.stack ...)". The type and the length of the call's own input tell the entries apart: the
    last batch's are the size change's, and a class's or a call form's first call is compiled once
    for each, nothing to fix."""
    run = record_run(str(ROOT / "tests" / "scripts" / "shared_forward_wrapper.py"), modes="aot")
    assert run.returncode == 0, run.stderr[-2000:]
    record = load_run(run.path)
    table = recompile_table(record.modes["aot"])
    explanation = explain(table)
    by_kind = {c.facts.get("kind"): c for c in explanation.causes if c.caused_by is None}
    size, kind, length = by_kind["size"], by_kind["type"], by_kind["length"]
    # The last batch recompiles the wrapper once per entry (Outer, Inner, Gate): the size's three.
    assert (size.count, kind.count, length.count) == (3, 1, 1) and kind.steps == length.steps == [0], \
        [(c.number, c.facts.get("kind"), c.count, c.steps) for c in explanation.causes]
    words = cause_words(kind, table.cwd)
    assert words.fix[0].startswith("Nothing to fix: the compiled code is called with `args[0]` of another class than `Outer`"), words.fix
    assert "keep argument types fixed" not in " ".join(words.fix)
    # The wrapper's own *args holds self alone where the gate is called by keyword: nothing to stack.
    fix = cause_words(length, table.cwd).fix
    assert fix == ["Nothing to fix: `args` is the compiled function's own *args, and its callers pass it another number of "
                   "positional arguments: Dynamo compiles it once for each number and caches each."], fix


def test_a_new_graphs_warm_up_says_which_side_of_the_grad_this_backward_met():
    """HF Trainer on a tiny BERT with gradient accumulation 2: the forward recompiled at step 1
    (config.problem_type set on the first call), and the new backward graph's first capture was
    step 1's first backward, which met .grad None (AccumulateGrad's key 22, the graph before it 33:
    the first step's accumulating backward). Its words said "the step's first backward found .grad
    None and this one accumulates into it", the other side; a key larger than the one before is that."""
    from cagtool.report.recompiles.explain import CAUSE_GRAD_DEFINED, Cause
    from cagtool.report.recompiles.table import RecompileRow

    def warm_up(key: int, previous: int) -> str:
        row = RecompileRow(mode="ca", source="ca", compile_id="!2", step=1, kind="new_node", seqs=(33,), ca_id=2,
                           node="torch::autograd::AccumulateGrad", node_call=4, key_size=key, previous_key_sizes=(previous,))
        return " ".join(cause_words(Cause(CAUSE_GRAD_DEFINED, [row], number=7, caused_by=5), "/work").why)

    none_side = warm_up(22, 33)
    assert "this backward found the parameters' .grad None (after zero_grad), where the graph captured before it met them defined" \
        in none_side and "this one accumulates into it" not in none_side, none_side
    assert "the step's first backward found the parameters' .grad None (after zero_grad) and this one accumulates into it" \
        in warm_up(33, 22)


def test_a_recompile_whose_compile_ended_the_job_is_said_to_have_stopped_it(record_run):
    """A DeepSpeed ZeRO-2 rank under compiled autograd ended on torch's assert in compiling a
    recompile of call_hook (`!0/19/2`: "sources must not be empty for symbol s81"); its cause read
    "Nothing to fix ... compiled once per kind of argument and caches". tests/scripts/recompile_fails.py
    is that shape with a backend that fails on its second compile: the cause says the compile raised
    the error the process ended with, and that it was not cached."""
    run = record_run(str(ROOT / "tests" / "scripts" / "recompile_fails.py"), modes="aot")
    assert run.returncode != 0  # the job's own failure
    record = load_run(run.path)
    table = recompile_table(record.modes["aot"])
    (cause,) = explain(table).causes
    assert cause.facts["failed_compile"][0] == "0/1"
    words = cause_words(cause, table.cwd)
    assert words.why[-1].startswith("Its compile (0/1) raised BackendCompilerFailed: backend='backend' raised: RuntimeError: the "
                                    "backend cannot compile this graph, and the process ended with that error"), words.why
    assert words.fix[0].startswith("The error is the compiler backend's, in compiling 0/1"), words.fix


def test_a_smaller_batch_the_record_shows_between_full_ones_is_the_last_batch_for_certain(record_run):
    """pytorch/examples' vae over 2 epochs (600 rows by 128: a last batch of 88): the backward's
    sizes went 128 -> 88 at step 4 and Dynamo compiled the CA graph's code again for 128 at step 5,
    yet the fix read "If it is the last batch". The size that came back is said, and the fix is
    the last batch's (tests/scripts/epochs_last_batch.py: 20 rows by 8, 2 epochs)."""
    run = record_run(str(ROOT / "tests" / "scripts" / "epochs_last_batch.py"))
    assert run.returncode == 0, run.stderr[-2000:]
    _, table, explanation = _explained(run.path)
    root = next(c for c in explanation.causes if c.caused_by is None and c.code == "changed_shapes")
    words = cause_words(root, table.cwd)
    assert any(w.startswith("The size came back (4 -> 8 at step 3") for w in words.why), words.why
    assert words.fix[0].startswith("It is the last batch: drop it (DataLoader(..., drop_last=True)"), words.fix


def test_compiled_autograd_started_dynamic_is_advised_by_enable_where_backward_runs_outside_compiled_code(record_run):
    """A backward called outside any torch.compile'd function (an eager loop's loss.backward(); HF
    Trainer's and Lightning's, called by the library) gets no compiled autograd from
    torch.compile(..., dynamic=True): the fix there is `_enable(..., dynamic=True)` around it, and
    torch.compile's `dynamic` is offered only where the backward runs inside a compiled function
    (sample_scripts/shape_loop.py: `torch.compile(lambda: loss.backward())`)."""
    outside = record_run(str(ROOT / "tests" / "scripts" / "epochs_last_batch.py"))
    inside = record_run("shape_loop.py")
    assert outside.returncode == 0 and inside.returncode == 0, outside.stderr[-2000:] + inside.stderr[-2000:]
    fixes = {}
    for name, run in (("outside", outside), ("inside", inside)):
        _, table, explanation = _explained(run.path)
        root = next(c for c in explanation.causes if c.caused_by is None and c.code == "changed_shapes")
        fixes[name] = next(f for f in cause_words(root, table.cwd).fix if f.startswith("Start compiled autograd dynamic"))
    assert "_enable(torch.compile(backend=...), dynamic=True)" in fixes["outside"], fixes["outside"]
    # the script's own backward is named, though the cause's line is Dynamo's recompile's caller (the
    # CA graph's code compiled again when the size came back): no Trainer's fit() in an eager loop
    assert ("around the backward (here `nn.functional.mse_loss(model(x), y).backward()` at "
            "tests/scripts/epochs_last_batch.py:15)") in fixes["outside"], fixes["outside"]
    assert "Trainer" not in fixes["outside"], fixes["outside"]
    assert "torch.compile(..., dynamic=True) on the compiled function" not in fixes["outside"], fixes["outside"]
    assert "torch.compile(..., dynamic=True) on the compiled function that runs backward" in fixes["inside"], fixes["inside"]


def test_compiled_autograd_started_dynamic_around_a_librarys_backward_names_the_scripts_line_that_runs_it():
    """HF Trainer's backward is accelerate's, called from the script's `trainer.train()`: `_enable`
    goes around that line, named as the record holds it; a backward the script calls itself is named
    as that backward (no Trainer's fit() to speak of); one the record holds no line for keeps the
    words that say where in general."""
    from cagtool.report.recompiles.explain import CA_ENABLE_DYNAMIC_OUTSIDE, ca_enable_dynamic_outside

    library = SourceRef(file="/w/train.py", line=24, code="trainer.train()", function="<module>", how="backward_call",
                        via="accelerate/accelerator.py:2740")
    words = ca_enable_dynamic_outside(library, "/w")
    assert "around the call that runs it (here `trainer.train()` at train.py:24):" in words, words
    assert "a Trainer's fit() or train()" not in words
    own = SourceRef(file="/w/train.py", line=30, code="loss.backward()", function="<module>", how="backward_call", via="")
    words = ca_enable_dynamic_outside(own, "/w")
    assert "dynamic=True):` around the backward (here `loss.backward()` at train.py:30): the backward runs outside" in words, words
    assert "Trainer" not in words and "the call that runs it" not in words, words
    assert ca_enable_dynamic_outside(None, "/w") == CA_ENABLE_DYNAMIC_OUTSIDE


def test_an_evaluations_last_batch_that_recompiled_once_is_kept_first_and_marked_only_to_skip_that_compile():
    """Lightning's validation loader ends with a batch of 4 (its sanity check meets it before step 0):
    one recompile, cached after. Keeping it leads; the mark comes second, as the way to skip even that
    compile. Where it kept recompiling, the mark leads."""
    guard = "tensor 'args[0]' size mismatch at index 0. expected 16, actual 4"
    caller = SourceRef(file="/w/train.py", line=21, code="loss = mse(self.net(x), y)", function="validation_step", how="caller", via="")
    facts = {"kind": GUARD_SIZE, "guard": guard, "caller": caller, "called_in": "validation_step"}
    once = _guard_fixes({**facts, "stabilised": True, "recompiling_steps": 1}, False, "", "/w")
    assert once[0].startswith("If it is the evaluation's last batch (the call is in `validation_step`), keep it"), once
    assert once[1].startswith("To skip even that recompile, mark the dimension dynamic"), once
    again = _guard_fixes({**facts, "stabilised": False, "recompiling_steps": 3}, False, "", "/w")
    assert again[0].startswith("Mark the dimension dynamic") and again[-1].startswith("If it is the evaluation's last batch"), again


def test_a_length_padded_by_hf_trainers_collator_is_told_the_padding_that_removes_it_and_a_scripts_stays_generic():
    """A sequence length that changed in a forward HF Trainer calls (`via` transformers/): the
    collator pads each batch to its longest. DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8)
    removes the length's recompile only where the two lengths round to one multiple (29 and 30);
    padding="max_length" removes it either way, where the texts are tokenized (every collator) or as
    the padding collators' arguments. A script's own call keeps the generic advice (mark
    dynamic; pad or bucket)."""
    guard = "tensor 'kwargs['input_ids']' size mismatch at index 1. expected 29, actual 30"

    def fixes(via: str) -> str:
        caller = SourceRef(file="/w/train.py", line=37, code="trainer.train()", function="<module>", how="caller", via=via)
        return " ".join(_guard_fixes({"kind": GUARD_SIZE, "guard": guard, "caller": caller, "stabilised": True}, False, "", "/w"))

    trainer = fixes("transformers/trainer.py:2209")
    assert "pad_to_multiple_of=8 on the data_collator (every HF collator takes it) rounds 29 and 30 up to 32, one length" in trainer, trainer
    assert 'to leave no other length, pad every batch to one length N' in trainer, trainer
    # 46 -> 59 rounds to 48 and 64: the multiple leaves the recompile (an HF Trainer job whose texts
    # were 5-60 words: 4 recompiles with it as without), one fixed length removes it.
    guard = guard.replace("expected 29, actual 30", "expected 46, actual 59")
    trainer = fixes("transformers/trainer.py:2209")
    assert ('pad every batch to one length N, which removes this size guard: padding="max_length", max_length=N where the '
            "texts are tokenized") in trainer, trainer
    # A causal LM's DataCollatorForLanguageModeling takes no padding: the tokenizer's is named (GPT-2: 7 recompiles -> 0).
    assert "DataCollatorForLanguageModeling takes neither: pad where the texts are tokenized" in trainer, trainer
    assert "pad_to_multiple_of=8 does not: it rounds 46 and 59 up to 48 and 64, still two lengths" in trainer, trainer
    guard = guard.replace("expected 46, actual 59", "expected 48, actual 64")  # the same job with pad_to_multiple_of=8
    trainer = fixes("transformers/trainer.py:2209")
    assert "(DataCollatorForLanguageModeling takes neither: pad where the texts are tokenized). The lengths 48 and 64 are multiples of 8 already" in trainer, trainer
    assert "rounds" not in trainer, trainer
    script = fixes("")
    assert "DataCollatorWithPadding" not in script and "pad or bucket if it takes many values" in script, script


def test_a_length_the_jobs_own_collate_function_makes_is_fixed_there_and_an_hf_collator_is_named_with_how_it_pads():
    """The record names what the job's DataLoaders batched with (the manifest's `collate_functions`,
    capture/steps/collate.py): a length that changed in a forward HF Trainer calls, where the job
    passed its own data_collator (a function in its file, inside Trainer's RemoveColumnsCollator),
    is fixed in that function, not with the HF collators' arguments; where an HF collator batched,
    it is named with how it pads. A script's own DataLoader collate_fn is named for a length (dim
    1), never for a batch size (dim 0)."""
    guard = "tensor 'kwargs['input_ids']' size mismatch at index 1. expected 29, actual 30"
    own = {"name": "main.<locals>.pad_batch", "module": "__main__", "file": "/w/train.py", "line": 16, "kind": "function", "user": True,
           "settings": {}, "wrapped_by": "RemoveColumnsCollator"}
    default = {"name": "default_collate", "module": "torch.utils.data._utils.collate", "file": "/v/torch/utils/data/_utils/collate.py",
               "line": 340, "kind": "function", "user": False, "settings": {}, "wrapped_by": None}
    hf = {"name": "DataCollatorWithPadding", "module": "transformers.data.data_collator", "file": "/v/transformers/data/data_collator.py",
          "line": 225, "kind": "instance", "user": False, "settings": {"padding": True, "pad_to_multiple_of": None, "max_length": None},
          "wrapped_by": "RemoveColumnsCollator"}

    def fixes(via: str, collates: tuple, guard: str = guard) -> str:
        caller = SourceRef(file="/w/train.py", line=37, code="trainer.train()", function="<module>", how="caller", via=via)
        facts = {"kind": GUARD_SIZE, "guard": guard, "caller": caller, "stabilised": True, "collate_functions": collates}
        return " ".join(_guard_fixes(facts, False, "", "/w"))

    trainer = fixes("transformers/trainer.py:2209", (own, default))
    assert ("Your data_collator, `pad_batch` at train.py:16, makes the batches, whose lengths differ (29, then 30): pad every batch "
            "there to one length N (at least the longest kept), which removes this size guard; rounding each batch's length up to a "
            "multiple of 8 there takes 29 and 30 to 32, one length") in trainer, trainer
    assert "maybe_mark_dynamic where the batch is made (your `pad_batch` at train.py:16)" in trainer, trainer
    assert "padded by its data_collator" not in trainer and "DataCollatorWithPadding" not in trainer, trainer
    trainer = fixes("transformers/trainer.py:2209", (hf,))
    assert "HF Trainer's batches are padded by its data_collator, DataCollatorWithPadding(padding=True), each to its longest" in trainer, trainer
    assert "Your data_collator" not in trainer, trainer
    multiple = {**hf, "settings": {**hf["settings"], "pad_to_multiple_of": 8}}
    trainer = fixes("transformers/trainer.py:2209", (multiple,), guard.replace("expected 29, actual 30", "expected 48, actual 64"))
    assert ("HF Trainer's batches are padded by its data_collator, DataCollatorWithPadding(padding=True, pad_to_multiple_of=8): "
            "pad every batch to one length N") in trainer and "The lengths 48 and 64 are multiples of 8 already" in trainer, trainer
    trainer = fixes("transformers/trainer.py:2209", ())  # a record that names none: HF's default words
    assert "HF Trainer's batches are padded by its data_collator, each to its longest (its default)" in trainer, trainer
    # A model's own frame (split by graph breaks) reached through transformers' code in a loop that
    # makes its batches by hand (a Wav2Vec2ForCTC fine-tuned by a plain loop: no DataLoader ran):
    # no HF Trainer, no data_collator.
    caller = SourceRef(file="/w/train.py", line=24, code="loss = cmodel(input_values=audio).loss", function="<module>", how="caller",
                       via="transformers/models/wav2vec2/modeling_wav2vec2.py:673")
    loop = " ".join(_guard_fixes({"kind": GUARD_SIZE, "guard": guard, "caller": caller, "stabilised": True, "collate_functions": (),
                                  "data_loaders": 0}, False, "", "/w"))
    assert "HF Trainer" not in loop and "data_collator" not in loop, loop
    assert "maybe_mark_dynamic where the batch is made (your loop's own: no DataLoader ran)" in loop, loop

    lambda_ = {**own, "name": "<lambda>", "wrapped_by": None}
    script = fixes("", (lambda_,))
    assert ("Your DataLoader's collate_fn, the lambda at train.py:16, makes the batches, whose lengths differ (29, then 30)") in script, script
    assert "pad or bucket if it takes many values" in script, script  # the generic advice stays first
    rows = fixes("", (lambda_,), guard.replace("index 1", "index 0"))
    assert "collate_fn" not in rows, rows  # a batch size: not the collate function's


def test_hf_trainers_last_batch_is_told_by_its_training_arguments_and_a_scripts_by_its_dataloader():
    """A batch that got smaller in a forward HF Trainer calls (`via` transformers/): the script has
    no DataLoader(...) to edit, Trainer builds it from TrainingArguments, so the fix names
    `TrainingArguments(..., dataloader_drop_last=True)` first; a script's own call keeps the
    DataLoader's words. Both for a last batch of 4 and of one row (a size Dynamo specialises)."""

    def fixes(via: str, actual: int) -> str:
        guard = f"tensor 'kwargs['input_ids']' size mismatch at index 0. expected 8, actual {actual}"
        caller = SourceRef(file="/w/train.py", line=37, code="trainer.train()", function="<module>", how="caller", via=via)
        return " ".join(_guard_fixes({"kind": GUARD_SIZE, "guard": guard, "caller": caller, "stabilised": True}, False, "", "/w"))

    for actual in (4, 1):
        trainer = fixes("transformers/trainer.py:2209", actual)
        assert "If it is the training loader's last batch: TrainingArguments(..., dataloader_drop_last=True) drops it" in trainer, trainer
        assert "DataLoader(..., drop_last=True)" not in trainer, trainer
        script = fixes("", actual)
        assert "If it is a DataLoader's last batch: DataLoader(..., drop_last=True) drops it" in script, script


def test_a_training_loaders_last_batch_is_named_where_the_compiled_forwards_sizes_are_in_the_cache_key_only(record_run):
    """Lightning's fit() in plain torch (tests/scripts/sanity_check_then_last_batch.py): the sanity
    check made the forward's batch dimension dynamic, so the training loader's last batch of 4
    recompiles only the backward, and the compiled forward's backward node holds its sizes in the
    cache key only (one value seen). Those sizes neither show nor contradict the batch that got
    smaller: the cause is the last batch, with drop_last, as a plain loop's is."""
    run = record_run(str(ROOT / "tests" / "scripts" / "sanity_check_then_last_batch.py"))
    assert run.returncode == 0, run.stderr[-2000:]
    _, table, explanation = _explained(run.path)
    root = next(c for c in explanation.causes if c.caused_by is None and c.code == "changed_shapes")
    assert root.steps == [6, 7]
    words = cause_words(root, table.cwd)
    why = " ".join(words.why)
    assert "torch holds them in its cache key only" in why, why
    assert "Every size that changed got smaller, once" in why and "The size came back (4 -> 16 at step 7" in why, why
    assert words.fix[0].startswith("It is the last batch: drop it (DataLoader(..., drop_last=True)"), words.fix


def test_a_backward_captured_again_for_a_lists_length_is_removed_by_the_list_passed_as_one_tensor():
    """A compiled forward summing a list of 1-4 feature maps: each length recompiled the forward and
    its backward was captured again (a new AddBackward0). Its words said a fix that only stops
    Dynamo recompiling ("the value passed as a tensor") leaves the capture, beside the root's advice
    to pass the list as one tensor; passed stacked, the job's CA recompiles went 3 -> 1. A value's
    root (a Python number the forward branches on) keeps those words."""
    from cagtool.report.recompiles.explain import CAUSE_STRUCTURE, Cause
    from cagtool.report.recompiles.table import RecompileRow

    def fix(**facts) -> str:
        row = RecompileRow(mode="ca", source="ca", compile_id="!1", step=1, kind="new_node", seqs=(19,), ca_id=1,
                           node="AddBackward0", node_call=5, key_size=30, previous_key_sizes=(24,))
        cause = Cause(CAUSE_STRUCTURE, [row], number=2, caused_by=1)
        cause.facts.update(root_code=CAUSE_DYNAMO_FRAME, changes=[], **facts)
        return " ".join(cause_words(cause, "/work").fix)

    listed = fix(root_kind=GUARD_LENGTH, root_list=True)
    assert "A fix of #1 that passes the items as one tensor makes the forward compute one way for every length, and these " \
           "captures go" in listed, listed
    assert "the value passed as a tensor" not in listed, listed
    valued = fix(root_kind="value", root_list=False)
    assert "one that only stops Dynamo recompiling (the value passed as a tensor) does not" in valued, valued


def test_a_value_dynamo_carried_across_a_graph_break_is_said_to_be_dynamos_name():
    """`scale = h.abs().mean().item()` in a compiled forward breaks the graph, and the frame that
    resumes there recompiled on `___stack0 == 0.24682775139808655`: the guard names no variable of
    the script. The words say what `___stack0` is, and, a number after a Tensor.item() break, what
    returned it; another stack value is said to be Dynamo's without the guess."""
    from cagtool.report.recompiles.explain import _resume_why

    resume = SourceRef(file="/w/itemfwd.py", line=9, code="scale = h.abs().mean().item()", function="forward", how="resume", via="")
    facts = {"kind": GUARD_VALUE, "guard": "___stack0 == 0.24682775139808655", "resume": resume, "frame": 1,
             "function": "torch_dynamo_resume_in_forward_at_9",
             "break_reason": "Unsupported Tensor.item() call with capture_scalar_outputs=False"}
    why = _resume_why(facts, "/w")
    assert ("`___stack0` is no variable of yours: it is Dynamo's name for a value the code at line 9 was computing with when "
            "the graph broke, carried into the resume function (here, a number: what the `.item()` Dynamo broke on returned).") in why, why
    other = _resume_why({**facts, "guard": "___stack1 == 3", "break_reason": "call to print"}, "/w")
    assert "`___stack1` is no variable of yours" in other and ".item()" not in other, other
    assert "no variable of yours" not in _resume_why({**facts, "guard": "split == 'warmup'"}, "/w")


def test_a_backward_that_gains_nodes_when_a_data_dependent_branch_first_takes_its_other_side_names_the_branch(tmp_path):
    """`if h.mean() > 0.3: return self.b(h)` / `return self.c(h) * 0.5` in a compiled forward:
    Dynamo breaks the graph on the branch and compiles each side's resume function (its code from
    the branch's line on) when a step first takes it; the backward then has other nodes, captured
    once more. The words said only "ops that run on some steps only (a loss term, a branch with no
    else)" and to weight by zero; they name torch's branch and the torch.where that keeps one graph.
    A capture in a step where no side's resume function was first compiled keeps the old words.
    Hand-built as `cagtool run --modes ca --backend eager` recorded it (torch 2.13)."""
    from cagtool.record.loader import ModeRecord
    from cagtool.record.manifest import ModeManifest
    from cagtool.record.schema import AutogradNodeRef, CacheMissEvent, CAGraphEvent, DynamoCompileEvent, GraphBreakEvent, StepEvent

    call = SourceRef(file="/proj/datadep.py", line=18, code="loss.backward()", function="<module>", how="backward_call", via="")

    def capture(ca_id: int, step: int, node: str, node_call: int, nodes: list[str]) -> list:
        message = f"Cache miss due to new autograd node: {node} (NodeCall {node_call}) with key size 39, previous key sizes=[]"
        return [(CacheMissEvent, {"ca_id": ca_id, "compile_id": f"!{ca_id}", "step": step, "miss_kind": "new_node", "message": message,
                                  "node": node, "node_call": node_call, "key_size": 39, "source": call, "backward_call": call}),
                (CAGraphEvent, {"ca_id": ca_id, "compile_id": f"!{ca_id}", "step": step, "node_count": 10, "op_histogram": {},
                                "autograd_nodes": [AutogradNodeRef(i, n) for i, n in enumerate(nodes)], "aot_ids": [], "hooks": [],
                                "num_sizes": 0, "capture_s": 0.01, "code_file": f"graphs/ca_{ca_id}.py", "nodes_file": f"graphs/ca_{ca_id}.json"})]

    def frame(compile_id: str, step: int, name: str, line: int) -> tuple:
        return (DynamoCompileEvent, {"compile_id": compile_id, "is_ca_graph": False, "step": step, "co_name": name,
                                     "co_filename": "/proj/datadep.py", "co_firstlineno": line})

    def words(side_step: int | None) -> tuple[str, str]:
        events = [(GraphBreakEvent, {"compile_id": "0/0", "step": 0, "reason": "Data-dependent branching", "file": "/proj/datadep.py",
                                     "line": 9, "code": "if h.mean() > 0.3:"}),
                  frame("0/0", 0, "forward", 7), frame("1/0", 0, "torch_dynamo_resume_in_forward_at_9", 9),
                  *capture(0, 0, "torch::autograd::GraphRoot", 0, ["torch::autograd::GraphRoot", "MseLossBackward0", "MulBackward0",
                                                                  "AddmmBackward0", "TBackward0", "ReluBackward0", "AddmmBackward0"])]
        if side_step is not None:
            events.append(frame("3/0", side_step, "torch_dynamo_resume_in_forward_at_9", 9))
        events += capture(1, 1, "AddmmBackward0", 2, ["torch::autograd::GraphRoot", "MseLossBackward0", "AddmmBackward0", "TBackward0",
                                                      "ReluBackward0", "AddmmBackward0"])
        built = [cls(seq=seq, t=0.01 * seq, **fields) for seq, (cls, fields) in enumerate(events)]
        built += [StepEvent(seq=len(built) + s, t=1.0 + s, step=s, backward_s=0.01, ca_captures=0, boundary="optimizer") for s in range(20)]
        manifest = ModeManifest(mode="ca", argv=["datadep.py"], target={"kind": "script", "name": "datadep.py"}, cwd="/proj", versions={},
                                backend="eager", dynamic=False, started_at="2026-01-01T00:00:00+00:00", status="finished", exit_code=0)
        table = recompile_table(ModeRecord(path=tmp_path / "ca", manifest=manifest, events=built))
        (cause,) = explain(table).causes
        said = cause_words(cause, "/proj")
        return " ".join(said.why), " ".join(said.fix)

    why, fix = words(side_step=1)
    assert "in a step whose forward took a side of that branch (a graph break, \"Data-dependent branching\") for the first time" in why, why
    assert fix.startswith("Computing both sides of the branch at datadep.py:9") and "torch.where(cond, a, b)" in fix, fix
    why, fix = words(side_step=None)  # no side first taken in the capture's step: not tied to the branch
    assert "ops that run on some steps only (a loss term, a branch with no else)" in why, why
    assert fix.startswith("If a branch adds the ops"), fix


def test_a_prediction_after_training_is_told_as_such_not_as_a_loaders_last_batch(record_run):
    """pytorch/examples' mnist_forward_forward, compiled: the prediction after training (a test set
    of another size, grad on, no backward) read "a smaller batch. A DataLoader whose dataset size is
    not a multiple of batch_size ..." with drop_last as its fix, and its recompiles made a storm
    forecast ("reaches the limit at about step 120", "-1 steps before the job's last"). What came
    after the last backward is the prediction's, listed after training's causes, and no rate."""
    run = record_run(str(ROOT / "tests" / "scripts" / "predict_after_training.py"), modes="aot")
    assert run.returncode == 0, run.stderr[-2000:]
    record = load_run(run.path)
    table = recompile_table(record.modes["aot"])
    explanation = explain(table)
    (cause,) = [c for c in explanation.causes if c.code == CAUSE_DYNAMO_FRAME]
    assert table.last_step == 3 and cause.steps == [4] and cause.facts["after_training"] is True
    words = cause_words(cause, table.cwd)
    why, fix = " ".join(words.why), " ".join(words.fix)
    assert "another batch, in calls after training's last step that no backward followed" in why, why
    assert "DataLoader whose dataset size" not in why, why
    assert "drop_last=True" not in fix and "keep it or mark it" in fix, fix
    from cagtool.report.recompiles.explain import stability_sentence

    # Said where no sentence on automatic dynamic shapes takes its place (mnist_forward_forward's requires_grad recompile).
    assert stability_sentence(cause.facts, "recompile").startswith(
        "It came after training ended, after its last step (3) in calls no backward followed")
    assert cause.place_said == "step 4 (after training: calls no backward followed)"
    frame = next(f for f in table.budget.frames if f.recompiles)
    assert frame.after_training == frame.recompiles == 1 and frame.rate is None and frame.last_recompile_step is None


def test_a_recompile_in_the_forward_a_job_died_in_is_not_told_as_after_training(record_run, tmp_path):
    """The same record, its process said to have failed (a crash in the last step's forward, after
    the recompile): no backward followed because the job died, not because training had ended."""
    import json

    from conftest import private_copy

    run = private_copy(record_run(str(ROOT / "tests" / "scripts" / "predict_after_training.py"), modes="aot").path, tmp_path / "run")
    manifest = json.loads((run / "aot" / "manifest.json").read_text())
    manifest.update(status="failed", exit_code=1)
    (run / "aot" / "manifest.json").write_text(json.dumps(manifest))
    table = recompile_table(load_run(run).modes["aot"])
    (cause,) = [c for c in explain(table).causes if c.code == CAUSE_DYNAMO_FRAME]
    assert table.training_end is None and cause.facts["after_training"] is False
    assert "after training" not in " ".join(cause_words(cause, table.cwd).why)


def test_recompiles_after_training_set_no_rate_and_training_s_own_do():
    """Three recompiles of a frame make a rate (TREND_RECOMPILES); those after training count in
    its budget, not in its pace."""
    from cagtool.report.recompiles.budget import TREND_RECOMPILES, FrameBudget

    def frame(after: int) -> FrameBudget:
        return FrameBudget(frame="0", function="forward", file="train.py", line=1, entries=4, limit=8, limit_known=True,
                           first_step=0, last_recompile_step=30, last_step=35, guards=("a", "a", "b"), after_training=after)

    assert TREND_RECOMPILES == 3
    assert frame(0).rate == 3 / 30 and frame(0).still_compiling
    assert frame(1).rate is None and not frame(1).still_compiling and frame(1).recompiles == 3


def test_hooks_that_left_with_their_parameters_are_a_branch_not_taken_and_a_bool_in_a_tuple_is_a_bool(record_run):
    """DDP(find_unused_parameters=True) over a compiled model whose auxiliary head runs on even
    steps: under compiled autograd the odd steps' backward read "A backward hook was added or
    removed ... DDP's compiled_accum_grad_hook is removed on step 1", and the flag, `inputs[1]` to
    Dynamo through DDP's `forward(*inputs)`, had no bool's words. The hooks left with their
    parameters' AccumulateGrad nodes: the backward of the recompiled forward (the branch not taken)."""
    run = record_run(str(ROOT / "tests" / "scripts" / "unused_branch_hooked.py"))
    assert run.returncode == 0, run.stderr[-2000:]
    _, table, explanation = _explained(run.path)
    codes = [(c.code, c.caused_by) for c in explanation.causes]
    assert [code for code, _ in codes] == [CAUSE_DYNAMO_FRAME, CAUSE_STRUCTURE] and codes[1][1] is not None, codes
    graphs = sorted(table.graphs.values(), key=lambda g: g.ca_id)
    assert [len(g.hooks) for g in graphs] == [6, 4]  # two hooks fewer, with the head's two parameters
    root = explanation.causes[0]
    words = cause_words(root, table.cwd)
    assert " ".join(words.why).count("`inputs[1]` is a bool, which Dynamo never takes as an input of the graph") == 1, words.why
    assert words.fix[0].startswith("Nothing to fix: each of the two values of `inputs[1]` is compiled once and cached"), words.fix
    assert "torch.where(flag, a, b)" in " ".join(words.fix)
