"""Recompile causes tied to the user's line and grouped under their root cause, on real records:
a live `cagtool run` of a compiled module whose batch size changes, and the TORCH_TRACE log of a
job whose batch size changes once (no branch, no loop, no hook) imported with `cagtool import`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_in_process

JOBS = ROOT / "tests" / "scripts" / "trace_jobs"


def cagtool(*args: str) -> subprocess.CompletedProcess:
    """In-process (cagtool_in_process): recompiles, report and import read a record or a log and write files."""
    return cagtool_in_process(*args, cwd=ROOT, env={"CI": "true", "COLUMNS": "100"}, unset=("FORCE_COLOR",))


def explanation(run: Path, mode: str) -> dict:
    proc = cagtool("recompiles", str(run), "--explain", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["modes"][mode]


@pytest.fixture(scope="module")
def ragged(record_run) -> Path:
    run = record_run("ragged_batches.py")  # torch.compile(module): Dynamo compiles torch's wrapper frame
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


@pytest.fixture(scope="module")
def imported_batch_job(tmp_path_factory) -> Path:
    trace = tmp_path_factory.mktemp("trace-batch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAGTOOL") and k != "TORCH_LOGS"}
    env["TORCH_TRACE"] = str(trace)
    job = subprocess.run([sys.executable, str(JOBS / "batch_size_job.py")], capture_output=True, text=True, env=env, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    out = tmp_path_factory.mktemp("imported") / "run"
    proc = cagtool("import", str(trace), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow  # records a run or a TORCH_TRACE job
def test_a_dynamo_recompile_names_the_users_call_not_torchs_wrapper(ragged):
    causes = explanation(ragged, "ca")["explanation"]["causes"]
    dynamo = next(c for c in causes if c["code"] == "dynamo_guard_failure")
    source = dynamo["source"]
    assert source["file"].endswith("ragged_batches.py") and "model(x)" in source["code"], source
    assert source["how"] == "caller"
    assert "external_utils" not in json.dumps(dynamo)
    assert "`inner`" not in dynamo["title"]
    # The table names the same line.
    rows = explanation(ragged, "ca")["recompiles"]
    row = next(r for r in rows if r["source"] == "dynamo_frame")
    assert row["source_line"]["file"].endswith("ragged_batches.py")


@pytest.mark.slow  # records a run or a TORCH_TRACE job
def test_the_ca_recompile_of_a_batch_size_change_is_grouped_under_the_dynamo_one(ragged):
    causes = explanation(ragged, "ca")["explanation"]["causes"]
    dynamo = next(c for c in causes if c["code"] == "dynamo_guard_failure")
    shapes = next(c for c in causes if c["code"] == "changed_shapes")
    assert shapes["caused_by"] == dynamo["number"] and dynamo["consequences"] == [shapes["number"]]
    assert shapes["number"] == dynamo["number"] + 1  # listed right under its root
    assert dynamo["caused_by"] is None
    # The .grad warm-up is a cause of its own, not a consequence.
    warmup = next(c for c in causes if c["code"] == "grad_defined_changed")
    assert warmup["caused_by"] is None
    # Changed sizes show the value before and after (32 rows, then the ragged 4).
    rows = explanation(ragged, "ca")["recompiles"]
    sizes = [s for r in rows if r["kind"] == "changed_shapes" for s in r["changed_sizes"]]
    assert sizes and all(s["previous"] == 32 and s["value"] == 4 for s in sizes), sizes


@pytest.mark.slow  # records a run or a TORCH_TRACE job
def test_text_and_html_draw_the_consequence_under_its_root(ragged, tmp_path):
    proc = cagtool("recompiles", str(ragged), "--explain")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    root = next(i for i, l in enumerate(lines) if l.startswith("#1 Dynamo recompiled forward frame"))
    follower = next(i for i, l in enumerate(lines) if re.match(r"\s+#2 ", l))
    assert follower > root and lines[follower].startswith("    #2 ") and lines[follower].startswith("    #2 Caused by #1: ")
    assert "ragged_batches.py:" in "\n".join(lines[root:follower])
    html = tmp_path / "r.html"
    proc = cagtool("report", str(ragged), "-o", str(html))
    assert proc.returncode == 0, proc.stderr
    page = html.read_text()
    start = page.index("<h4>#1 Dynamo recompiled")
    card = page[page.rindex('<div class="cause">', 0, start):]
    # The consequence's card sits inside the root's card (before the root's card closes).
    inner = card.index('<div class="cause consequence"><h4>#2 ')
    assert card.count("</div>", 0, inner) == 0


@pytest.mark.slow  # records a run or a TORCH_TRACE job
def test_an_imported_batch_size_change_is_one_cause_with_no_branch_advice(imported_batch_job):
    entry = explanation(imported_batch_job, "imported")
    # (torch 2.14 also recompiles its own frames inside the captures: a cause of their own, last)
    causes = [c for c in entry["explanation"]["causes"] if not c["inside_capture"]]
    assert [c["code"] for c in causes] == ["dynamo_guard_failure", "graph_structure"]
    root, follower = causes
    assert follower["caused_by"] == root["number"] and root["consequences"] == [follower["number"]]
    words = json.dumps(follower)
    for wrong in ("Python branch", "torch.where", "_disable", "pad the loop", "fixed number of times"):
        assert wrong not in words, wrong
    proc = cagtool("recompiles", str(imported_batch_job), "--explain")
    assert proc.returncode == 0, proc.stderr
    assert "None" not in proc.stdout
    assert "no step boundaries" in proc.stdout


def test_a_size_the_graphs_do_not_show_takes_its_earlier_value_from_the_forwards_guard(tmp_path):
    """A CA size passed on without being read (no constant in the previous graph to read it off)
    gets its earlier value from the forward's size guard of the same step: `expected 32, actual 48`."""
    from recompile_records import RecordBuilder, table_of  # the analysis tests' hand-built records

    from cagtool.record.schema import ChangedSize, DynamoRecompileEvent

    b = RecordBuilder()
    b.miss(0, 1, "torch::autograd::GraphRoot", 0)
    b.graph(0, 1, ["torch::autograd::GraphRoot", "CompiledFunctionBackward0"])
    b.step(1, captures=1)
    b.step(2)
    b.add(DynamoRecompileEvent, compile_id="0/1", is_ca_graph=False, step=2,
          reasons=["0/0: tensor 'args[0]' size mismatch at index 0. expected 32, actual 48"])
    b.miss(1, 3, None, None, kind="changed_shapes",
           changed_sizes=[ChangedSize(index=0, value=48, node="CompiledFunctionBackward0", node_call=1),
                          ChangedSize(index=1, value=64, node="CompiledFunctionBackward0", node_call=1)])
    b.graph(1, 3, ["torch::autograd::GraphRoot", "CompiledFunctionBackward0"], num_sizes=2)
    b.step(3, captures=1)
    table = table_of(b, tmp_path)
    (row,) = [r for r in table.recompiles if r.kind == "changed_shapes"]
    assert [(c.previous, c.value) for c in row.changed_sizes] == [(32, 48), (None, 64)]


def test_a_backward_that_swaps_one_compiled_forwards_backward_for_another_is_no_branch():
    """pytorch/examples' word_language_model (Transformer, compiled): each CA miss swaps the
    CompiledFunctionBackward of one forward graph for another's (a shorter last chunk, the mask an
    evaluation left, then a graph compiled earlier run again), in steps where Dynamo compiled the
    forward again. The cause says so and goes with the forward's causes; never "a data-dependent
    branch ... torch.where", which has nothing to select there. Hand-built from that run's facts."""
    from cagtool.record.schema import SourceRef
    from cagtool.report.recompiles.explain import CAUSE_STRUCTURE, Cause, NodeChange, cause_words, nothing_to_fix
    from cagtool.report.recompiles.table import RecompileRow

    call = SourceRef(file="/job/main.py", line=187, code="loss.backward()", function="train", how="backward_call")
    swaps = [("!1", 1, "CompiledFunctionBackward0", "CompiledFunctionBackward3"), ("!2", 5, "CompiledFunctionBackward3", "CompiledFunctionBackward"),
             ("!3", 6, "CompiledFunctionBackward5", "CompiledFunctionBackward11"), ("!4", 7, "CompiledFunctionBackward11", "CompiledFunctionBackward3")]
    rows = [RecompileRow("ca", "ca", cid, step, "new_node", (10 + step,), ca_id=int(cid[1:]), node="CompiledFunctionBackward",
                         node_call=76, user_source=call) for cid, step, _, _ in swaps]
    facts = {"changes": [NodeChange(cid, step, 76, after, before, None, 84, 84, "swapped") for cid, step, before, after in swaps],
             "graph_shape": "swapped", "forward_recompile_steps": [1, 5, 6], "stabilised": True, "quiet_steps_after": 4,
             "last_recompile_step": 7}
    cause = Cause(CAUSE_STRUCTURE, rows, number=1, source=call, facts=facts)
    words = cause_words(cause, "/job")
    said = " ".join([words.title, *words.why, *words.fix])
    assert words.title == "The backward of another graph of the compiled forward (4 recompiles)"
    assert "!4 step 7: NodeCall 76 CompiledFunctionBackward11 -> CompiledFunctionBackward3" in said
    assert "Dynamo compiled the forward again at steps 1, 5-6" in said and "these captures came at steps 1, 5-7" in said
    assert words.fix[0].startswith("Goes with the forward's recompiles") and not nothing_to_fix(cause, "/job")
    assert "torch.where" not in said and "branch picks" not in said
    # Without a forward recompile in the run the swap is read as before (a branch, a phase).
    plain = Cause(CAUSE_STRUCTURE, rows, number=1, source=call, facts={**facts, "forward_recompile_steps": [], "distinct_structures": 5,
                                                                       "variants": {76: ["CompiledFunctionBackward0"]}, "grew": 0})
    assert not cause_words(plain, "/job").title.startswith("The backward of another graph")


def test_a_loop_whose_odd_capture_came_with_a_forward_recompile_names_that_recompile_not_a_branch():
    """A speech recogniser (conv front end compiled, an nn.GRU run eagerly, utterances of 80-160
    frames): at step 1 Dynamo recompiled the forward for the length, so that capture's first
    difference is a compiled forward's backward node; the others only add or drop the GRU's cells.
    The odd one is said to come with the forward's recompile, not read as a branch inside the loop;
    where it came at no such step, the branch reading stays. Hand-built from that run's facts."""
    from cagtool.record.schema import SourceRef
    from cagtool.report.recompiles.explain import CAUSE_STRUCTURE, Cause, NodeChange, cause_words
    from cagtool.report.recompiles.table import RecompileRow

    call = SourceRef(file="/job/asr.py", line=32, code="loss.backward()", function="<module>", how="backward_call")
    changes = [NodeChange("!1", 1, 4, "CtcLossBackward0", "CompiledFunctionBackward0", None, 1249, 1417, None),
               NodeChange("!2", 2, 4, "CtcLossBackward0", None, None, 1417, 2229, "repeats"),
               NodeChange("!3", 3, 4, "CtcLossBackward0", None, None, 2229, 1809, "repeats")]
    rows = [RecompileRow("ca", "ca", c.compile_id, c.step, "new_node", (10 + c.step,), ca_id=int(c.compile_id[1:]),
                         node="CtcLossBackward0", node_call=4, user_source=call) for c in changes]
    facts = {"changes": changes, "graph_shape": None, "forward_recompile_steps": [1], "stabilised": False,
             "distinct_structures": 4, "variants": {4: ["CompiledFunctionBackward0", "CtcLossBackward0"]}, "grew": 0,
             "node_counts": [1249, 1417, 2229, 1809], "last_step": 7}
    said = " ".join(cause_words(Cause(CAUSE_STRUCTURE, rows, number=1, source=call, facts=facts), "/job").why)
    assert ("2 of the 3 captures have more or fewer copies of the nodes the graph before it had (1249, 1417, 2229, 1809 "
            "autograd nodes): the backward's size follows a loop") in said
    assert "the other came at step 1, where Dynamo recompiled a forward frame: its compiled graph's backward node is another" in said
    assert "a branch inside it" not in said
    elsewhere = " ".join(cause_words(Cause(CAUSE_STRUCTURE, rows, number=1, source=call,
                                           facts={**facts, "forward_recompile_steps": [5]}), "/job").why)
    assert "the others also change which ops run (a branch inside it)" in elsewhere and "Dynamo recompiled" not in elsewhere


def test_transformers_layer_drop_is_a_random_draw_with_its_config_as_the_fix_and_ctc_lengths_say_what_else_changed():
    """A tiny Wav2Vec2ForCTC (transformers 5.25) under compiled autograd: its encoder's LayerDrop
    (config.layerdrop 0.1) skipped a layer at step 6, torch reporting the branch
    `if not skip_the_layer or synced_gpus:` with the draw on a line above it; and CTC's lengths
    changed at steps 3-5 with the sequence's sizes other nodes hold. The branch is read as a random
    draw (known_failures.library_layer_drop), and the fix is the config's layerdrop before the edit
    of the code; the CTC cause says that other nodes' numbers changed too. Hand-built from that run's
    facts (transformers is not among the test dependencies)."""
    from cagtool.record.schema import SourceRef
    from cagtool.report.known_failures import LAYER_DROP_CONFIG_FIX, library_layer_drop
    from cagtool.report.recompiles.explain import CAUSE_STRUCTURE, RANDOM_DROP_FIX, Cause, NodeChange, cause_words
    from cagtool.report.recompiles.table import RecompileRow

    library = "/venv/lib/python3.11/site-packages/transformers/models/wav2vec2/modeling_wav2vec2.py"
    branch = SourceRef(file=library, line=692, code="if not skip_the_layer or synced_gpus:", how="random_branch")
    assert library_layer_drop(branch.file, branch.code)
    assert library_layer_drop(library, "if dropout_probability < self.layerdrop:")
    assert not library_layer_drop("/job/train.py", "if not skip_the_layer:")
    assert not library_layer_drop(library, "if labels is not None and labels.max() >= self.config.vocab_size:")

    call = SourceRef(file="/job/w2v.py", line=25, code="loss.backward()", function="<module>", how="backward_call")
    changes = [NodeChange("!6", 6, 3, "CtcLossBackward0", None, None, 63, 46, "repeats"),
               NodeChange("!7", 7, 3, "CtcLossBackward0", None, None, 46, 63, "repeats")]
    rows = [RecompileRow("ca", "ca", c.compile_id, c.step, "new_node", (10 + c.step,), ca_id=int(c.compile_id[1:]),
                         node="CtcLossBackward0", node_call=3, user_source=call) for c in changes]
    facts = {"changes": changes, "graph_shape": "repeats", "forward_recompile_steps": [], "stabilised": False, "last_step": 7,
             "distinct_structures": 3, "variants": {3: ["CtcLossBackward0"]}, "grew": 1, "node_counts": [63, 46, 63],
             "random_draw": (branch, "torch.rand")}
    words = cause_words(Cause(CAUSE_STRUCTURE, rows, number=1, source=call, facts=facts), "/job")
    assert "torch reports a branch on a tensor drawn with `torch.rand` at" in " ".join(words.why)
    assert words.fix == [LAYER_DROP_CONFIG_FIX + ".", RANDOM_DROP_FIX]
    mine = {**facts, "random_draw": (SourceRef(file="/job/model.py", line=40, code="if torch.rand(()) < self.p:", how="random_branch"),
                                     "torch.rand")}
    assert cause_words(Cause(CAUSE_STRUCTURE, rows, number=1, source=call, facts=mine), "/job").fix == [RANDOM_DROP_FIX]

    same = [NodeChange(f"!{n}", n, 3, "CtcLossBackward0", None, None, 63, 63, "same") for n in (3, 4, 5)]
    saved_rows = [RecompileRow("ca", "ca", c.compile_id, c.step, "new_node", (10 + c.step,), ca_id=int(c.compile_id[1:]),
                               node="CtcLossBackward0", node_call=3, user_source=call) for c in same]
    saved = {"changes": same, "graph_shape": "same", "stabilised": False, "last_step": 7, "distinct_structures": 4,
             "saved_values": [("CtcLossBackward0", 290, 251), ("CtcLossBackward0", 4, 6), ("NativeLayerNormBackward0", 290, 251)]}
    said = " ".join(cause_words(Cause(CAUSE_STRUCTURE, saved_rows, number=2, source=call, facts=saved), "/job").why)
    assert "CtcLossBackward0 is nn.CTCLoss's (F.ctc_loss's) node" in said
    assert "Numbers other nodes saved changed too (NativeLayerNormBackward0): what the fix below removes is CTC's" in said


def test_a_size_guards_fix_names_the_tensor_as_the_calling_line_passes_it():
    """word_language_model: the size guard on `src` was installed at a line inside the compiled
    forward (`len(src)`), and the forward was called as `model(data)`: the fix marks `data`, the
    caller's tensor, not the forward's parameter `src`, which the caller has no name for."""
    from cagtool.record.schema import SourceRef
    from cagtool.report.recompiles.explain import _guard_fixes

    guard = "tensor 'src' size mismatch at index 0. expected 8, actual 3"
    caller = SourceRef(file="/job/main.py", line=181, code="output = model(data)", function="train", how="caller")
    inside = "if self.src_mask is None or self.src_mask.size(0) != len(src):"
    assert "torch._dynamo.maybe_mark_dynamic(data, 0)" in _guard_fixes({"kind": "size", "guard": guard, "caller": caller}, False, inside)[0]
    assert "torch._dynamo.maybe_mark_dynamic(src, 0)" in _guard_fixes({"kind": "size", "guard": guard, "caller": None}, False, inside)[0]


def test_a_tensor_the_module_holds_and_a_branch_on_sizes_are_named_as_what_they_are():
    """word_language_model's Transformer keeps its mask on the module (`self.src_mask`), remade when
    `self.src_mask.size(0) != len(src)`: an evaluation's shorter last chunk leaves it 3 rows, and
    training's next call fails `tensor 'self.src_mask' size mismatch`: a tensor the module holds,
    not a smaller batch of an input, its own cause beside the input's; the branch on the two sizes
    going the other way is a guard on their relation, compiled once a side (torch 2.13's texts)."""
    from cagtool.report.recompiles.explain import _group_key, _guard_fixes, _guard_why, guard_label, module_attribute
    from cagtool.report.recompiles.table import RecompileRow

    held = "tensor 'self.src_mask' size mismatch at index 0. expected 8, actual 3"
    given = "tensor 'src' size mismatch at index 0. expected 8, actual 3"
    assert module_attribute("self.src_mask") and not module_attribute("src") and not module_attribute("args[0]")

    def key(guard: str) -> tuple:
        row = RecompileRow("ca", "dynamo_frame", "0/5", 6, "guard_failure", (1,), messages=(f"0/2: {guard}",))
        return _group_key(None, row, {})  # type: ignore[arg-type]

    assert key(held) != key(given)
    why = " ".join(_guard_why({"kind": "size", "guard": held}, ""))
    assert "`self.src_mask` is a tensor the module holds" in why and "DataLoader" not in why
    assert _guard_fixes({"kind": "size", "guard": held}, False, "")[0].startswith("Make `self.src_mask` from the call's own input")
    relation = "self.src_mask.size()[0] != src.size()[0]"
    assert guard_label({"kind": "other", "guard": relation}) == f"a branch on tensor sizes went the other way (`{relation}`)"
    assert "The code branches on these sizes" in " ".join(_guard_why({"kind": "other", "guard": relation}, ""))
    assert _guard_fixes({"kind": "other", "guard": relation}, False, "")[0].startswith("Nothing to fix: each side of the branch")
