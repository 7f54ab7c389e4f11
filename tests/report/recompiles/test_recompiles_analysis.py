"""`recompiles` analysis on small hand-built records: rows, root-cause groups, alerts, JSON.

The records are written in the documented layout (run.json + ca/manifest.json + ca/events.jsonl)
from the schema's own event classes and read back with the one loader, so these tests exercise the
same path as a real run without running torch.
"""

from __future__ import annotations

import io
import json

import pytest
from recompile_records import BACKWARD_LINE, CWD, ROOT, RecordBuilder, table_of

from cagtool.commands.recompiles import RecompilesOptions, run_recompiles
from cagtool.record.loader import load_run
from cagtool.record.schema import ChangedSize, DynamoCompileEvent, DynamoRecompileEvent, FindingEvent, GraphBreakEvent, SourceRef
from cagtool.report.recompiles.explain import (
    BATCHED_LOOP_FIX,
    ALERT_LIMIT,
    ALERT_STORM,
    CAUSE_DYNAMO_FRAME,
    CAUSE_GRAD_DEFINED,
    CAUSE_HOOK,
    CAUSE_SHAPES,
    CAUSE_STRUCTURE,
    CAUSE_UNKNOWN,
    alert_words,
    cause_words,
    elide,
    explain,
    guard_shape,
    guard_text,
    nothing_to_fix,
    step_list,
)
from cagtool.report.recompiles.render import (
    JSON_SCHEMA,
    JSON_SCHEMA_VERSION,
    RecompilesJsonRenderer,
)
from cagtool.report.recompiles.reads import display_path
from cagtool.report.recompiles.table import (
    SOURCE_CA,
    SOURCE_DYNAMO_CA_GRAPH,
    SOURCE_DYNAMO_FRAME,
    compile_attempt,
    recompile_table,
)

def op_loop_builder(with_node_map: bool = True) -> RecordBuilder:
    """The tutorial's add/sub/mul/div loop: a new node at NodeCall 2 every step."""
    b = RecordBuilder()
    for step, op in enumerate(["AddBackward0", "SubBackward0", "MulBackward0", "DivBackward0"], start=1):
        ca_id = step - 1
        b.miss(ca_id, step, ROOT if step == 1 else op, 0 if step == 1 else 2, key_size=39 if step == 1 else 56)
        nodes = [ROOT, "SumBackward0", op, "torch::autograd::AccumulateGrad"]
        if with_node_map:
            b.graph(ca_id, step, nodes)
        else:
            b.graph(ca_id, step, histogram={"getitem": 9, "SumBackward0": 1, op: 1, "call_accumulate_grad": 1})
        b.step(step, captures=1)
    return b


# -- rows --------------------------------------------------------------------------------------

def test_initial_capture_is_listed_but_not_counted(tmp_path):
    table = table_of(op_loop_builder(), tmp_path)
    assert [r.compile_id for r in table.initial] == ["!0"]
    assert [r.compile_id for r in table.recompiles] == ["!1", "!2", "!3"]
    assert [r.step for r in table.recompiles] == [1, 2, 3]  # written 2, 3, 4
    assert table.count(SOURCE_CA) == 3 and table.count(SOURCE_DYNAMO_FRAME) == 0
    assert table.recompiles[0].produced == "!1"
    assert table.steps == 4 and table.last_step == 3


def test_a_graph_without_a_miss_event_is_an_unknown_recompile(tmp_path):
    b = op_loop_builder()
    b.graph(4, 5, [ROOT])
    b.step(5, captures=1)
    table = table_of(b, tmp_path)
    assert len(table.recompiles) == 4
    assert table.recompiles[-1].kind == "unknown" and table.recompiles[-1].compile_id == "!4"
    assert [c.code for c in explain(table).causes] == [CAUSE_STRUCTURE, CAUSE_UNKNOWN]


def test_dynamo_recompiles_from_events_and_from_compile_attempts(tmp_path):
    b = RecordBuilder()
    b.add(DynamoCompileEvent, compile_id="0/0", is_ca_graph=False, step=None, co_name="fwd", co_filename="/proj/m.py", co_firstlineno=5)
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT])
    b.step(1, captures=1)
    # 0/1 has no dynamo_recompile event (reason lost), 0/2 has one: both are recompiles, once each.
    b.add(DynamoCompileEvent, compile_id="0/1", is_ca_graph=False, step=1, co_name="fwd", co_filename="/proj/m.py", co_firstlineno=5)
    b.step(2)
    reason = '0/1: n == 2  # for _ in range(n):  # m.py:7 in fwd\nUser stack trace:\n  File "/proj/m.py", line 7, in fwd\n    for _ in range(n):'
    b.add(DynamoRecompileEvent, compile_id="0/2", is_ca_graph=False, step=2, reasons=[reason])
    b.add(DynamoCompileEvent, compile_id="0/2", is_ca_graph=False, step=2, co_name="fwd", co_filename="/proj/m.py", co_firstlineno=5)
    b.add(DynamoRecompileEvent, compile_id="!0/1/1", is_ca_graph=True, step=3, reasons=["L['sizes'][0] == 10"])
    b.step(3)
    table = table_of(b, tmp_path)
    ids = [(r.compile_id, r.source) for r in table.recompiles]
    assert ids == [("0/1", SOURCE_DYNAMO_FRAME), ("0/2", SOURCE_DYNAMO_FRAME), ("!0/1/1", SOURCE_DYNAMO_CA_GRAPH)]
    # A forward frame compiles before its step's backward: stamped with the step last begun, it belongs to the next.
    assert [r.step for r in table.recompiles] == [1, 2, 2]

    guarded = table.recompiles[1]
    assert guarded.failing_guard.startswith("0/1: n == 2")
    assert (guarded.user_source.file, guarded.user_source.line, guarded.user_source.code) == ("/proj/m.py", 7, "for _ in range(n):")
    assert table.recompiles[0].user_source.how == "compiled_frame"


def test_schema_2_forward_compiles_carry_their_own_step(tmp_path):
    """Schema 2 stamps every event with the step in progress: a forward recompile stays in its step."""
    b = RecordBuilder()
    b.add(DynamoCompileEvent, compile_id="0/0", is_ca_graph=False, step=1, co_name="fwd", co_filename="/proj/m.py", co_firstlineno=5)
    b.step(1)
    b.add(DynamoCompileEvent, compile_id="0/1", is_ca_graph=False, step=2, co_name="fwd", co_filename="/proj/m.py", co_firstlineno=5)
    b.step(2)
    table = recompile_table(load_run(b.write(tmp_path / "run", schema_version=2)).mode("ca"))
    assert [(r.compile_id, r.step) for r in table.recompiles] == [("0/1", 1)]


def test_compile_attempt_and_paths():
    assert compile_attempt("0/0") == 0 and compile_attempt("3/2") == 2 and compile_attempt("!1/2/1") == 1
    assert compile_attempt("!4") is None
    assert display_path("/proj/sub/train.py", "/proj") == "sub/train.py"
    assert display_path("/elsewhere/x.py", "/proj") == "/elsewhere/x.py"
    assert display_path("rel.py", "/proj") == "rel.py"


def test_guard_text_and_shape():
    message = "0/3: depth == 4  # for _ in range(depth):  # m.py:14 in forward (_dynamo/variables/tensor.py:2606 in evaluate_expr)"
    assert guard_text(message) == "depth == 4"
    assert guard_shape(message) == guard_shape("0/1: depth == 2  # x") == "depth == N"
    assert guard_text("tensor 'x' size mismatch at index 0. expected 10, actual 100") == "tensor 'x' size mismatch at index 0. expected 10, actual 100"


# -- causes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("with_node_map", [True, False])
def test_structure_change_names_the_node_that_differs(tmp_path, with_node_map):
    explanation = explain(table_of(op_loop_builder(with_node_map), tmp_path))
    assert [c.code for c in explanation.causes] == [CAUSE_STRUCTURE]
    cause = explanation.causes[0]
    assert cause.count == 3 and cause.steps == [1, 2, 3]
    changes = [(c.node_call, c.before, c.after) for c in cause.facts["changes"]]
    assert changes == [(2, "AddBackward0", "SubBackward0"), (2, "SubBackward0", "MulBackward0"), (2, "MulBackward0", "DivBackward0")]
    assert cause.facts["distinct_structures"] == 4
    assert cause.facts["stabilised"] is False
    assert cause.source == BACKWARD_LINE
    # Every step after the first recompiled: a storm, and it comes first.
    assert [a.code for a in explanation.alerts] == [ALERT_STORM]
    assert explanation.alerts[0].facts["every_step"] and explanation.alerts[0].causes == [1]


def test_growing_graph_and_stabilised_branch(tmp_path):
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, histogram={"MulBackward0": 1, "SumBackward0": 1})
    b.step(1, 1)
    for step in (2, 3):
        b.miss(step - 1, step, "MulBackward0", step + 1)
        b.graph(step - 1, step, histogram={"MulBackward0": step, "SumBackward0": 1})
        b.step(step, 1)
    cause = explain(table_of(b, tmp_path / "grow")).causes[0]
    assert cause.facts["grew"] == 2 and [c.before for c in cause.facts["changes"]] == [None, None]
    assert cause.facts["graph_shape"] == "repeats" and cause.facts["node_counts"] == [2, 3, 4]
    words = cause_words(cause, CWD)
    assert "a loop whose trip count changes per step" in " ".join(words.why) and "(2, 3, 4 autograd nodes)" in " ".join(words.why)
    assert "run the loop a fixed number of times" in words.fix[0] and words.fix[1] == BATCHED_LOOP_FIX

    b = RecordBuilder()
    tanh_line = SourceRef(file="/proj/model.py", line=21, code="h = torch.tanh(h)", function="forward", how="node_traceback")
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT, "SumBackward0", "ReluBackward0"])
    b.step(1, 1)
    b.miss(1, 2, "TanhBackward0", 2, source=tanh_line, backward_call=BACKWARD_LINE)
    b.graph(1, 2, [ROOT, "SumBackward0", "TanhBackward0"])
    for step in range(2, 7):
        b.step(step, 1 if step == 2 else 0)
    explanation = explain(table_of(b, tmp_path / "branch"))
    cause = explanation.causes[0]
    assert explanation.alerts == []
    assert cause.source == tanh_line
    assert cause.facts["stabilised"] is True and cause.facts["quiet_steps_after"] == 4
    assert cause.facts["variants"] == {2: ["ReluBackward0", "TanhBackward0"]}
    words = cause_words(cause, CWD)
    assert any("model.py:21  h = torch.tanh(h)" in w for w in words.why)
    assert any(w.startswith("Nothing urgent") for w in words.why)  # information, not a fix
    assert all(not f.startswith("Nothing urgent") for f in words.fix)


def test_a_loop_that_stopped_recapturing_is_still_padded_where_the_data_sets_its_trip_count(tmp_path):
    """actor_critic: episodes of 35, 17, 11, 10 steps, then two of a length seen before: quiet last
    steps say nothing of the lengths a learning policy reaches later. Not "nothing urgent": each
    new length is captured anew, and padding the loop is the fix."""
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, histogram={"MulBackward0": 4, "SumBackward0": 1})
    b.step(1, 1)
    for step, copies in ((2, 3), (3, 2)):
        b.miss(step - 1, step, "MulBackward0", step + 1)
        b.graph(step - 1, step, histogram={"MulBackward0": copies, "SumBackward0": 1})
        b.step(step, 1)
    for step in (4, 5, 6):
        b.step(step, 0)
    cause = explain(table_of(b, tmp_path / "episodes")).causes[0]
    assert cause.facts["graph_shape"] == "repeats" and cause.facts["stabilised"] is True
    words = cause_words(cause, CWD)
    why = " ".join(words.why)
    assert "a loop whose trip count changes per step" in why and "one not seen yet is captured anew" in why
    assert not any(w.startswith("Nothing urgent") for w in words.why)
    assert words.fix and "run the loop a fixed number of times" in words.fix[0] and BATCHED_LOOP_FIX in words.fix


def test_hook_added_and_grad_defined(tmp_path):
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT])
    b.step(1, 1)
    # step 2: .grad defined now (AccumulateGrad key grows, no hook change)
    b.miss(1, 2, "torch::autograd::AccumulateGrad", 4, key_size=33, previous_key_sizes=[22])
    b.graph(1, 2, [ROOT])
    b.step(2, 1)
    # step 3: a tensor hook appears
    b.miss(2, 3, "torch::autograd::AccumulateGrad", 4, key_size=35, previous_key_sizes=[22, 33])
    b.graph(2, 3, [ROOT], hooks=("tensor_pre_hook",))
    for step in (3, 4, 5):
        b.step(step, 1 if step == 3 else 0)
    causes = {c.code: c for c in explain(table_of(b, tmp_path)).causes}
    assert set(causes) == {CAUSE_GRAD_DEFINED, CAUSE_HOOK}
    assert causes[CAUSE_GRAD_DEFINED].steps == [1]
    hook = causes[CAUSE_HOOK]
    assert hook.steps == [2]
    assert hook.facts["hook_diffs"] == [
        {"compile_id": "!2", "step": 2, "added": ["tensor_pre_hook"], "removed": [], "previous_graph": "!1"}
    ]
    assert "AccumulateGrad (NodeCall 4)" in cause_words(hook, CWD).why[0]


@pytest.mark.parametrize("reason_recorded", [False, True])
def test_changed_shapes_and_dynamo_recompile_of_that_graph_are_one_cause(tmp_path, reason_recorded):
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT])
    b.step(1, 1)
    sizes = [ChangedSize(index=i, value=100, previous=10, node="SumBackward0", node_call=1) for i in range(2)]
    b.miss(1, 2, None, None, kind="changed_shapes", changed_sizes=sizes, total_changed=2)
    b.graph(1, 2, [ROOT], num_sizes=2)
    b.step(2, 1)
    if reason_recorded:  # as torch 2.13 words it for the tutorial's shape loop
        b.add(DynamoRecompileEvent, compile_id="!1/2/1", is_ca_graph=True, step=3,
              reasons=["!1/2/0: tensor 'sizes[0]' size mismatch at index 1. expected 100, actual 10"])
    b.add(DynamoCompileEvent, compile_id="!1/2/1", is_ca_graph=True, step=3)
    b.step(3)
    b.step(4)
    table = table_of(b, tmp_path)
    assert [r.compile_id for r in table.recompiles] == ["!1", "!1/2/1"]
    explanation = explain(table)
    assert len(explanation.causes) == 1
    cause = explanation.causes[0]
    assert cause.code == CAUSE_SHAPES and cause.count == 2 and cause.steps == [1, 2]
    assert cause.facts["sizes"][0]["values"] == [10, 100]
    assert cause.facts["dynamic_graphs"] == {"!1": 2}
    assert cause.facts["stabilised"] is True
    text = " ".join(cause_words(cause, CWD).why + cause_words(cause, CWD).fix)
    assert "sizes[0-1] of SumBackward0 (NodeCall 1): 10, 100" in text
    assert "Start compiled autograd dynamic" in text and "mark_dynamic" not in text and "!1/2/1 at step 2" in text
    if reason_recorded:
        assert "(`tensor 'sizes[0]' size mismatch at index 1. expected 100, actual 10`)" in text


def test_recompile_limit_comes_first_and_names_the_cause(tmp_path):
    b = RecordBuilder()
    b.add(DynamoCompileEvent, compile_id="0/0", is_ca_graph=False, step=None, co_name="fwd", co_filename="/proj/m.py", co_firstlineno=5)
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT])
    b.step(1, 1)
    for attempt in range(1, 5):
        b.add(DynamoRecompileEvent, compile_id=f"0/{attempt}", is_ca_graph=False, step=attempt,
              reasons=[f"0/{attempt - 1}: n == {attempt}  # for _ in range(n):  # m.py:7 in fwd"])
        if attempt < 4:
            b.add(DynamoCompileEvent, compile_id=f"0/{attempt}", is_ca_graph=False, step=attempt, co_name="fwd",
                  co_filename="/proj/m.py", co_firstlineno=5)
        b.step(attempt + 1)
    b.add(DynamoCompileEvent, compile_id="0/4", is_ca_graph=False, step=4, fail_type="Unsupported",
          fail_reason="Dynamo recompile limit exceeded\n  Explanation: Dynamo attempted to recompile the code object too many "
                      "times, exceeding the recompile_limit cache size limit (currently set to 4).")
    b.step(6)
    table = table_of(b, tmp_path)
    assert [(h.compile_id, h.limit_type, h.limit_value, h.function, h.step) for h in table.limit_hits] == [
        ("0/4", "recompile_limit", 4, "fwd", 4)
    ]
    explanation = explain(table)
    assert [a.code for a in explanation.alerts] == [ALERT_LIMIT, ALERT_STORM]
    (cause,) = explanation.causes
    assert cause.code == CAUSE_DYNAMO_FRAME and cause.count == 4
    assert explanation.alerts[0].causes == [1]
    assert cause.facts["stopped_by_limit"] is True and cause.facts["stabilised"] is False
    words = alert_words(explanation.alerts[0], CWD)
    assert words.title == "Dynamo hit config.recompile_limit (4) and fell back to eager"
    assert "`fwd` (m.py:5)" in words.why[0]
    guard_words = cause_words(cause, CWD)
    assert "`n == 1`" in guard_words.why[0] and "Python number" in guard_words.fix[0]


def test_recompile_limit_on_a_ca_graph_frame_names_its_cause(tmp_path):
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT])
    b.step(1, 1)
    for attempt in (1, 2):
        b.add(DynamoRecompileEvent, compile_id=f"!0/1/{attempt}", is_ca_graph=True, step=attempt + 1,
              reasons=[f"!0/1/{attempt - 1}: L['ctx'] == {attempt}"])
        b.step(attempt + 1)
    b.add(DynamoCompileEvent, compile_id="!0/1/2", is_ca_graph=True, step=3, fail_type="Unsupported",
          fail_reason="Dynamo recompile limit exceeded ... exceeding the accumulated_recompile_limit cache size limit (currently set to 256).")
    explanation = explain(table_of(b, tmp_path))
    (cause,) = explanation.causes
    assert cause.code == "dynamo_ca_graph_guard_failure" and cause.facts["frame"] == "1"
    limit = explanation.alerts[0]
    assert limit.code == ALERT_LIMIT and limit.causes == [1]
    assert (limit.limit_hits[0].limit_type, limit.limit_hits[0].limit_value) == ("accumulated_recompile_limit", 256)
    assert "gave up recompiling the code of compiled-autograd graph !0 (compile !0/1/2)" in alert_words(limit, CWD).why[0]


def test_recompile_limit_from_a_finding(tmp_path):
    b = op_loop_builder()
    b.add(FindingEvent, code="recompile_limit_hit", step=3,
          message="[0/8] torch._dynamo hit config.recompile_limit (8)\n   function: 'fwd' (/proj/m.py:5)")
    (hit,) = table_of(b, tmp_path).limit_hits
    assert (hit.compile_id, hit.limit_type, hit.limit_value, hit.step) == ("0/8", "recompile_limit", 8, 2)


def test_not_a_storm_below_three_recompiling_steps(tmp_path):
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT, "A"])
    b.step(1, 1)
    for step in (2, 3):
        b.miss(step - 1, step, f"Op{step}Backward0", 1)
        b.graph(step - 1, step, [ROOT, f"Op{step}Backward0"])
        b.step(step, 1)
    assert explain(table_of(b, tmp_path)).alerts == []


def test_text_helpers():
    assert step_list([2, 3, 4, 7, 9, 10]) == "2-4, 7, 9-10"
    assert step_list([]) == ""
    assert elide([str(i) for i in range(10)]) == "0, 1, 2, 3, ... (6 more), 8, 9"


# -- JSON and the in-process command ---------------------------------------------------------------

def test_json_document_is_versioned_and_counts_match(tmp_path):
    run = op_loop_builder().write(tmp_path / "run")
    out, err = io.StringIO(), io.StringIO()
    assert run_recompiles(RecompilesOptions(run=str(run), explain=True, format="json"), out, err) == 0
    document = json.loads(out.getvalue())
    assert document["schema"] == JSON_SCHEMA == "cagtool-recompiles"
    assert document["schema_version"] == JSON_SCHEMA_VERSION == 1
    mode = document["modes"]["ca"]
    assert mode["counts"] == {
        # torch's count of cache misses (one per capture) holds the initial compile's
        "recompiles": 3, "ca_cache_misses": 4, "ca_recompiles": 3, "dynamo_frame_recompiles": 0, "dynamo_ca_graph_recompiles": 0,
        "initial_compiles": 1, "recompile_limit_hits": 0,
    }
    assert [r["compile_id"] for r in mode["recompiles"]] == ["!1", "!2", "!3"]
    assert mode["initial"][0]["initial"] is True
    assert mode["recompiles"][0]["source_line"] == {"file": "train.py", "line": 30, "code": "loss.backward()", "function": "main", "how": "backward_call"}
    causes = mode["explanation"]["causes"]
    assert [(c["number"], c["code"], c["count"], c["steps"]) for c in causes] == [(1, "graph_structure", 3, [1, 2, 3])]
    assert [e["compile_id"] for e in causes[0]["evidence_ids"]] == ["!1", "!2", "!3"]
    assert mode["explanation"]["alerts"][0]["code"] == "recompile_storm"
    assert err.getvalue() == ""


def test_json_without_explain_has_no_explanation(tmp_path):
    table = recompile_table(load_run(op_loop_builder().write(tmp_path / "run")).mode("ca"))
    document = json.loads(RecompilesJsonRenderer().render("run", [table]))
    assert "explanation" not in document["modes"]["ca"]


def test_no_recompiles_says_so(tmp_path):
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT])
    for step in (1, 2, 3):
        b.step(step, 1 if step == 1 else 0)
    out = io.StringIO()
    run_recompiles(RecompilesOptions(run=str(b.write(tmp_path / "run")), explain=True, width=100), out)
    assert "0 recompiles in 3 steps" in out.getvalue()
    assert "No recompiles" in out.getvalue()


def test_a_mode_that_compiled_nothing_says_so_not_that_it_reused_graphs(tmp_path):
    """pytorch/examples' regression/main.py calls no torch.compile: its aot mode compiled nothing,
    and said every step "reused the cached graphs"."""
    from cagtool.report.recompiles.render import no_recompiles_text
    from cagtool.report.recompiles.table import RecompileTable

    nothing = RecompileTable(mode="aot", rows=[], steps=830, last_step=829)
    assert no_recompiles_text(nothing) == "No recompiles: this mode compiled nothing (no torch.compile'd code ran)."
    b = RecordBuilder()
    b.miss(0, 1, "torch::autograd::GraphRoot", 0)
    b.graph(0, 1)
    for step in (1, 2, 3):
        b.step(step)
    assert no_recompiles_text(table_of(b, tmp_path)) == "No recompiles: every step after the first reused the cached graphs."


def test_an_aot_mode_that_compiled_its_forward_once_is_not_said_to_have_compiled_nothing(record_run):
    """The aot mode of a compiled job with no recompile (no CA graph: compiled autograd is
    off there) read "this mode compiled nothing (no torch.compile'd code ran)" beside the summary's
    "Dynamo: 1 forward graph"."""
    from cagtool.record.loader import load_run
    from cagtool.report.recompiles.render import no_recompiles_text
    from cagtool.report.recompiles.table import recompile_table

    run = record_run("graph_breaks.py", "3", modes="eager,aot,ca")  # shared with the graph-break tests
    assert run.returncode == 0, run.stderr[-2000:]
    table = recompile_table(load_run(run.path).modes["aot"])
    assert table.dynamo_compiles >= 1 and not table.graphs
    assert no_recompiles_text(table) == "No recompiles: every step after the first reused the cached graphs."


def test_same_nodes_joined_another_way_and_nodes_on_some_steps_are_told_apart(tmp_path):
    """Two experts swapped between two slots: the same autograd nodes, another graph (a router);
    a term on some steps only: nodes the graph before had none of (not a loop, not a branch's swap)."""
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT, "SumBackward0", "ReluBackward0", "TanhBackward0"])
    b.step(1, 1)
    b.miss(1, 2, "TanhBackward0", 2)
    b.graph(1, 2, [ROOT, "SumBackward0", "TanhBackward0", "ReluBackward0"])
    b.step(2, 1)
    [cause] = explain(table_of(b, tmp_path / "routed")).causes
    assert cause.facts["graph_shape"] == "rearranged"
    words = cause_words(cause, CWD)
    assert "the data picks which module runs where" in " ".join(words.why)
    assert "run every expert or side on every step" in words.fix[0]

    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT, "SumBackward0", "MulBackward0"])
    b.step(1, 1)
    b.miss(1, 2, "GradReverseBackward", 3)
    b.graph(1, 2, [ROOT, "SumBackward0", "MulBackward0", "AddBackward0", "GradReverseBackward"])
    b.step(2, 1)
    [cause] = explain(table_of(b, tmp_path / "term")).causes
    assert cause.facts["graph_shape"] == "extra"
    words = cause_words(cause, CWD)
    said = " ".join(words.why)
    assert "ops that run on some steps only" in said and "a loop whose trip count" not in said
    assert "new GradReverseBackward at NodeCall 3 (3 -> 5 nodes)" in said
    assert "weight them by zero where they are not wanted" in words.fix[0]


def test_one_backwards_structure_is_one_cause_whichever_forward_line_made_the_node_that_differs(tmp_path):
    """--trace-nodes ties each miss to the forward line that made the first differing node: a
    random-depth loop (pytorch/examples' dynamic_net) meets it at the line before the loop on one
    step and in the loop's body on another. Both are the one backward's structure: one cause."""
    before_loop = SourceRef(file="/proj/dynamic_net.py", line=16, code="y = self.a + self.b * x", function="forward", how="node_traceback")
    in_loop = SourceRef(file="/proj/dynamic_net.py", line=18, code="y = y + self.e * x ** exp", function="forward", how="node_traceback")
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT, "SumBackward0", "AddBackward0", "AddBackward0", "MulBackward0"])
    b.step(1, 1)
    b.miss(1, 2, "AddBackward0", 2, source=before_loop, backward_call=BACKWARD_LINE)
    b.graph(1, 2, [ROOT, "SumBackward0", "AddBackward0", "MulBackward0"])
    b.step(2, 1)
    b.miss(2, 3, "AddBackward0", 3, source=in_loop, backward_call=BACKWARD_LINE)
    b.graph(2, 3, [ROOT, "SumBackward0", "AddBackward0", "AddBackward0", "AddBackward0", "MulBackward0", "MulBackward0"])
    b.step(3, 1)
    [cause] = explain(table_of(b, tmp_path / "r")).causes
    assert cause.count == 2 and cause.facts["graph_shape"] == "repeats"


INSPECT = "/usr/lib/python3.11/inspect.py"
CALLER = SourceRef(file="/proj/train.py", line=12, code='torch.compile(lambda: loss.backward(), backend="eager")()',
                   function="<lambda>", how="caller")


def _inspect_frame_recompile(b: RecordBuilder, compile_id: str, step: int, guard: str, function: str) -> None:
    """Dynamo recompiling a frame of Python's inspect module, as torch 2.14 does while compiled
    autograd captures a backward that runs inside a compiled function (its words verbatim)."""
    b.add(DynamoRecompileEvent, compile_id=compile_id, is_ca_graph=False, step=step, source=CALLER,
          reasons=[f"{compile_id.split('/')[0]}/0: {guard}  # return entry.__dict__[attr]  # {INSPECT}:1782 in {function}\n"
                   f"User stack trace:\n  File \"{INSPECT}\", line 1782, in {function}\n    return entry.__dict__[attr]"])
    b.add(DynamoCompileEvent, compile_id=compile_id, is_ca_graph=False, step=step, co_name=function, co_filename=INSPECT,
          co_firstlineno=1778)


def _captures_with_torchs_frames(imported: bool, breaks: bool = False) -> RecordBuilder:
    """The op loop on torch 2.14 (four captures, inspect's frames recompiled inside each, a frame of
    the script's recompiled after them); `breaks`: with the graph breaks torch logs in those frames
    and one in the script's compiled lambda, before the first capture."""
    b = RecordBuilder()
    ops = ["AddBackward0", "SubBackward0", "MulBackward0", "DivBackward0"]
    for step, op in enumerate(ops, start=1):
        ca_id = step - 1
        b.miss(ca_id, step, ROOT if step == 1 else op, 0 if step == 1 else 2)
        if imported:
            b.graph(ca_id, step, [ROOT, "SumBackward0", op, "torch::autograd::AccumulateGrad"])
        # a miss written at step N reads as step N - 1 (RecordBuilder), a Dynamo recompile as written: the same step
        if step == 1 and breaks:
            b.add(GraphBreakEvent, compile_id="0/0", step=0, reason="[GB0123] Unsupported Tensor.backward() call",
                  file="/proj/train.py", line=12, code=CALLER.code)
        _inspect_frame_recompile(b, f"6/{2 * ca_id + 1}", step - 1, "attr == '_initialize_hook'", "_check_class")
        if breaks:
            b.add(GraphBreakEvent, compile_id=f"6/{2 * ca_id + 1}", step=step - 1, file=INSPECT, line=1772,
                  reason="[GB0088] Observed exception: Dynamo found no exception handler at the top-level compiled function")
        if step > 1:
            _inspect_frame_recompile(b, f"4/{ca_id}", step - 1, "___check_obj_id(klass, 94057368428672), type=<class "
                                     "'torch.fx.graph_module.GraphModule.__new__.<locals>.GraphModuleImpl'>", "_shadowed_dict")
        if not imported:
            b.graph(ca_id, step, [ROOT, "SumBackward0", op, "torch::autograd::AccumulateGrad"])
        b.add(DynamoCompileEvent, compile_id=f"!{ca_id}/{7 + ca_id}/0", is_ca_graph=True, step=step - 1, co_name="forward",
              co_filename=f"<eval_with_key>.{ca_id}")
        b.step(step, captures=1)
    # A frame of the script's own recompiled after the captures: not inside one, told as before.
    b.add(DynamoRecompileEvent, compile_id="0/1", is_ca_graph=False, step=3, source=CALLER,
          reasons=["0/0: tensor 'x' size mismatch at index 0. expected 4, actual 5"])
    b.add(DynamoCompileEvent, compile_id="0/1", is_ca_graph=False, step=3, co_name="train_step", co_filename="/proj/train.py",
          co_firstlineno=6)
    return b


@pytest.mark.parametrize("imported", [False, True], ids=["recorded", "imported"])
def test_torchs_frames_compiled_inside_compiled_autograds_captures_are_not_the_scripts(tmp_path, imported):
    """torch 2.14, the tutorial's op loop: the backward runs inside a compiled function, so while
    compiled autograd captures each new graph Dynamo compiles frames of Python's inspect module that
    torch's capture calls, and recompiles them on every capture (`attr == '_initialize_hook'`, the
    new GraphModule class). One cause, after the captures' own, said to be torch's with nothing to
    change in the script; never "keep `attr` constant" or "create it once, outside the loop". A live
    record has each capture's `ca_graph` event after those frames; a TORCH_TRACE log imported has it
    before them, and the graph's own Dynamo compile after them in both."""
    b = _captures_with_torchs_frames(imported)
    table = table_of(b, tmp_path)
    explanation = explain(table)
    by_code = [(c.code, bool(c.facts.get("inside_capture"))) for c in explanation.causes]
    assert by_code == [("graph_structure", False), ("dynamo_guard_failure", False), ("dynamo_guard_failure", True)]
    structure, own, inside = explanation.causes
    assert [r.compile_id for r in inside.rows] == ["6/1", "6/3", "4/1", "6/5", "4/2", "6/7", "4/3"]
    assert inside.facts["inside_capture"]["captures"] == ["!0", "!1", "!2", "!3"]
    assert inside.facts["inside_capture"]["capture_causes"] == [structure.number]
    words = cause_words(inside, CWD)
    assert words.title == "Dynamo compiled torch's helper frames inside compiled autograd's captures, not your code (7 recompiles)"
    assert "`_check_class` and `_shadowed_dict` in inspect.py (Python's standard library)" in words.why[0]
    assert words.fix[0] == ("Nothing to change in your code: these are torch's frames, compiled once or more per capture; "
                            f"fixing #{structure.number}, which made compiled autograd capture again, ends them.")
    assert nothing_to_fix(inside, CWD)
    # A recompile every step: the storm is fixed by the captures' cause (which ends these too) and the script's own.
    (storm,) = explanation.alerts
    assert storm.code == ALERT_STORM and storm.causes == sorted([structure.number, own.number])
    text = json.dumps([words.title, words.why, words.fix])
    for wrong in ("keep it constant", "create it once", "outside the loop"):
        assert wrong not in text, wrong
    assert "tensor 'x' size mismatch" in cause_words(own, CWD).why[0]  # the script's frame, as before
    # `recompiles --verify`'s line for it: the explanation's own words, never "one-time".
    from cagtool.verify.fixes import unanswered_causes

    (item,) = [i for i in unanswered_causes(explanation, set(), set(), {}, CWD) if i["cause"] == inside.number]
    assert item["why"].startswith("nothing to change in your code: these are torch's frames") and item["who"] == "no change needed"


@pytest.mark.parametrize("imported", [False, True], ids=["recorded", "imported"])
def test_the_summary_and_budget_say_which_graph_breaks_and_recompiles_are_torchs_frames_inside_captures(tmp_path, imported):
    """torch 2.14's inspect frames, compiled inside each capture, break the graph (`[GB0088] Observed
    exception`) and recompile towards the recompile limit: `summary` listed those breaks and
    recompiles, and the budget's forecast for `_check_class`, as the script's, pointing at its line.
    Each is now said to be torch's frame inside compiled autograd's captures, with nothing to change;
    the script's own break and recompile are said as before."""
    from rich.console import Console

    from cagtool.report.recompiles.budget import budget_of
    from cagtool.report.recompiles.reads import torch_frames_in_captures
    from cagtool.report.summary import mode_summary_json, render_mode

    record = load_run(_captures_with_torchs_frames(imported, breaks=True).write(tmp_path / "run")).mode("ca")
    found = torch_frames_in_captures(record)
    assert found.frames == {"6": 0, "4": 1}  # the script's frame 0 is not among them
    assert found.break_places == {(INSPECT, 1772)}  # its 4 breaks all inside captures; the script's break at train.py:12 is not
    budget = {f.frame: f.inside_capture for f in budget_of(record).frames}
    assert budget["6"] == 0 and budget["4"] == 1 and budget["0"] is None
    out = io.StringIO()
    render_mode(Console(file=out, width=400, color_system=None), record)
    lines = out.getvalue().splitlines()
    torch_says = "[torch's frame inside compiled autograd's captures: nothing to change in your code]"
    (inspect_break,) = [line for line in lines if "graph break site" in line and "inspect.py:1772" in line]
    assert "[torch's frames inside compiled autograd's captures: nothing to change in your code]" in inspect_break
    (own_break,) = [line for line in lines if "graph break site" in line and "train.py:12" in line]
    assert "torch's frames" not in own_break
    recompiles = [line.strip() for line in lines if line.strip().startswith("recompile ")]
    assert recompiles[0].startswith(f"recompile 6/1 at step 0 {torch_says}: attr == '_initialize_hook'"), recompiles
    assert all(torch_says in line for line in recompiles[:3])
    sites = {(s["file"], s["line"]): s["inside_capture"] for s in mode_summary_json(record)["graph_break_sites"]}
    assert sites == {("/proj/train.py", 12): False, (INSPECT, 1772): True}
    # A failed graph-break gate says the same, and annotates the script's line, not torch's.
    from conftest import cagtool_in_process

    run_dir = str(tmp_path / "run")
    manifest_path = tmp_path / "run" / "ca" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())  # torch's count, as torch 2.14 keeps it: one per reason
    manifest["torch_counters"] = {"graph_break": {"Observed exception": 4, "Unsupported Tensor.backward() call": 1}}
    manifest_path.write_text(json.dumps(manifest))
    proc = cagtool_in_process("gate", run_dir, "--max-graph-breaks", "0", "--no-config", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (failed,) = [text for text in proc.stdout.splitlines() if text.startswith("FAIL: max-graph-breaks")]
    assert "4 at inspect.py:1772 (torch's frames inside compiled autograd's captures): [GB0088]" in failed
    assert "1 at train.py:12: [GB0123]" in failed
    data = json.loads(cagtool_in_process("gate", "--format", "json", run_dir, "--max-graph-breaks", "0", "--no-config", cwd=tmp_path).stdout)
    (check,) = [c for c in data["checks"] if c["check"] == "max-graph-breaks"]
    assert check["data"]["source"] == {"file": "/proj/train.py", "line": 12}


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph-breaks-allowed", "fullgraph"])
def test_a_fix_that_adds_a_graph_break_is_not_given_for_a_frame_compiled_with_fullgraph(fullgraph):
    """A dropout rate F.dropout needs as a constant, changed every step: the fix moved the call out
    through torch.compiler.disable, a graph break, which under torch.compile(..., fullgraph=True) is an
    error (torch 2.13: "Skip calling `torch.compiler.disable()`d function"); the same for a module
    hook run under torch._dynamo.disable and a module's int read in a disabled function. Where the
    record says the frame was compiled with fullgraph=True, none of them is the fix."""
    from cagtool.report.recompiles.explain import ValueChange, _guard_fixes
    from cagtool.torch_text import GUARD_VALUE

    changes = [ValueChange(f"0/{i}", "p", f"0.{i}", "float", f"0.{i + 1}", "float", False, (), None, specialised_again=True)
               for i in (1, 2, 3)]
    facts = {"kind": GUARD_VALUE, "guard": "p == 0.1", "value_changes": changes, "fullgraph": fullgraph, "function": "forward"}
    fixes = " ".join(_guard_fixes(facts, False, "return F.dropout(x, p=p, training=True)"))
    assert ("a graph break there, and it runs eagerly" in fixes) is not fullgraph
    assert ("compiled with fullgraph=True, where a graph break is an error" in fixes) is fullgraph
    pointer = [ValueChange(f"0/{i}", "self.ptr", str(i), "int", str(i + 1), "int", False, (), None) for i in (1, 2, 3)]
    facts = {"kind": GUARD_VALUE, "guard": "self.ptr == 1", "value_changes": pointer, "fullgraph": fullgraph, "function": "forward"}
    fixes = " ".join(_guard_fixes(facts, False, "self.queue[self.ptr] = k"))
    assert ("or in a function under torch.compiler.disable" in fixes) is not fullgraph
    hook = {"kind": "other", "guard": "L['self']._forward_hooks[0].__closure__[0].cell_contents.calls == 3", "fullgraph": fullgraph}
    fixes = " ".join(_guard_fixes(hook, False, ""))
    assert ("run the hook eagerly (torch._dynamo.disable on it)" in fixes) is not fullgraph


def test_a_backward_hook_shared_by_parameters_is_not_told_of_batches_or_constants():
    """pytorch/examples' VAE with a grad-norm hook on each parameter (`p.register_hook(lambda g,
    name=name: ...)`), under compiled autograd: the hook, compiled inside the graph, met the
    gradients of fc4.weight (784 x 400) and fc3.weight (400 x 20) and was told "Dim 0 of `g` went from
    784 to 400: a smaller batch" with DataLoader(drop_last=True); its `name == 'fc3.weight'` guard
    "keep it constant in the compiled code"; its rank guard "pass tensors of one rank". Each hook's
    call brings its own tensor and its own default: the fix is to keep the hook out of Dynamo
    (`--verify`'s hook-dynamo-disable: 10 -> 2 recompiles on that script)."""
    from cagtool.report.recompiles.explain import ValueChange, _guard_fixes, _guard_why
    from cagtool.torch_text import GUARD_OTHER, GUARD_SIZE

    code = "p.register_hook(lambda g, name=name: grad_norms.__setitem__(name, g.norm().item()) or g)"
    size = {"kind": GUARD_SIZE, "guard": "tensor 'g' size mismatch at index 0. expected 784, actual 400", "hook": True}
    why = " ".join(_guard_why(size, code, on_ca=True))
    assert "Dim 0 of `g` went from 784 to 400 in the backward hook" in why and "smaller batch" not in why.replace("not a smaller batch", "")
    fixes = _guard_fixes(size, True, code)
    assert fixes[0].startswith("Keep the hook out of Dynamo: register `torch._dynamo.disable(hook)`") and "drop_last" not in " ".join(fixes)
    rank = dict(size, guard="tensor 'g' rank mismatch. expected 2, actual 1")
    assert _guard_fixes(rank, True, code)[0].startswith("Keep the hook out of Dynamo")
    changes = [ValueChange(f"!1/3/{i}", "name", f"'fc{i}.weight'", "str", f"'fc{i + 1}.weight'", "str", False, (), None) for i in (1, 2, 3)]
    value = {"kind": GUARD_OTHER, "guard": "name == 'fc1.weight'", "hook": True, "value_changes": changes}
    fixes = _guard_fixes(value, True, code)
    assert fixes[0].startswith("Keep the hook out of Dynamo") and "`name` takes another value at each call of the hook" in fixes[0]
    assert "keep it constant in the compiled code" not in " ".join(fixes)
    # Under a fullgraph=True compiler a disabled hook is an error: the tensor fix comes first there.
    assert _guard_fixes(dict(size, ca_fullgraph=True), True, code)[0].startswith("Keep the value a tensor")
    # A hook whose recompiles stopped (a few parameters, each compiled once): not told to change.
    assert not _guard_fixes(dict(value, stabilised=True), True, code)[0].startswith("Keep the hook out of Dynamo")


def test_the_summary_says_a_recompiles_reason_once_where_torch_gave_it_per_cache_entry(tmp_path):
    """An evaluation under no_grad after two training compiles: torch gives the reason for each
    cache entry that failed (`0/0: GLOBAL_STATE changed: grad_mode`, `0/1: ...`), and the summary
    printed "GLOBAL_STATE changed: grad_mode; GLOBAL_STATE changed: grad_mode"."""
    from rich.console import Console

    from cagtool.report.summary import render_mode

    b = RecordBuilder()
    b.add(DynamoRecompileEvent, compile_id="0/2", is_ca_graph=False, step=7,
          reasons=["0/0: GLOBAL_STATE changed: grad_mode", "0/1: GLOBAL_STATE changed: grad_mode", "0/1: tensor 'x' size mismatch at index 0. expected 32, actual 8"])
    b.step(7)
    record = load_run(b.write(tmp_path / "run")).mode("ca")
    out = io.StringIO()
    render_mode(Console(file=out, width=300, color_system=None), record)
    (line,) = [text.strip() for text in out.getvalue().splitlines() if text.strip().startswith("recompile 0/2")]
    assert line.count("GLOBAL_STATE changed: grad_mode") == 1 and "size mismatch" in line, line


def test_a_backward_hooks_recompiles_are_one_cause_whether_or_not_torch_named_its_line(tmp_path):
    """pytorch/examples' VAE with a grad-norm hook per parameter: the hook's frame (`!1/3/C`),
    recompiled inside compiled-autograd graph !1 for each parameter's rank. torch's first two
    reasons name no line of the script (a bare `tensor 'g' rank mismatch`), the later ones the
    hook's; the first two were put at the backward call and read as "the code of compiled-autograd
    graph !1", a cause apart from the hook's own. The frame compiled is the script's: its line."""
    b = RecordBuilder()
    b.miss(0, 1, ROOT, 0)
    b.graph(0, 1, [ROOT, "SumBackward0"])
    b.step(1, 1)
    b.miss(1, 2, "AccumulateGrad", 3)
    b.graph(1, 2, [ROOT, "SumBackward0", "AccumulateGrad"])
    hook_line = '    p.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item()) or g)'
    for attempt in range(1, 5):
        expected, actual = (1, 2) if attempt % 2 else (2, 1)
        named = attempt > 2  # torch names the hook's line from the third on
        tail = (f"  # /proj/train.py:93 in <lambda>\nUser stack trace:\n  File \"/proj/train.py\", line 93, in <lambda>\n{hook_line}"
                if named else "")
        b.add(DynamoRecompileEvent, compile_id=f"!1/3/{attempt}", is_ca_graph=True, step=1, source=BACKWARD_LINE,
              reasons=[f"!1/3/{attempt - 1}: tensor 'g' rank mismatch. expected {expected}, actual {actual}{tail}"])
        b.add(DynamoCompileEvent, compile_id=f"!1/3/{attempt}", is_ca_graph=True, step=1, co_name="<lambda>",
              co_filename="/proj/train.py", co_firstlineno=93)
    b.step(2, 1)
    table = table_of(b, tmp_path)
    rows = [r for r in table.rows if r.compile_id.startswith("!1/3/")]
    assert [(r.user_source.file, r.user_source.line) for r in rows] == [("/proj/train.py", 93)] * 4
    causes = [c for c in explain(table).causes if any(r.compile_id.startswith("!1/3/") for r in c.rows)]
    assert len(causes) == 1 and [r.compile_id for r in causes[0].rows] == ["!1/3/1", "!1/3/2", "!1/3/3", "!1/3/4"]


def test_torchs_call_hook_given_each_parameters_gradient_is_not_told_of_a_smaller_batch():
    """torch's call_hook (the compiled-autograd graph's runner of its hooks) met fc4.weight's then
    fc3.weight's gradient, 784 then 400 rows: it read "a smaller batch" with drop_last=True."""
    from cagtool.report.recompiles.explain import _guard_fixes, _guard_why
    from cagtool.torch_text import GUARD_SIZE

    facts = {"kind": GUARD_SIZE, "guard": "tensor 'args[0]' size mismatch at index 0. expected 784, actual 400",
             "hook_runner": (("tensor_pre_hook",), "")}
    why = " ".join(_guard_why(facts, "", on_ca=True))
    assert "in torch's call_hook" in why and "not a smaller batch" in why and "DataLoader" not in why
    assert _guard_fixes(dict(facts, stabilised=True), True, "")[0].startswith("Nothing to fix: torch's call_hook met each hook's tensor size once")
    fixes = " ".join(_guard_fixes(facts, True, ""))
    assert fixes.startswith("Keep the hook out of Dynamo") and "drop_last" not in fixes


def test_a_backward_size_going_back_to_the_forwards_smaller_batch_is_a_last_batch_that_recurs():
    """The facts of pytorch/examples' siamese network over two epochs (36 samples by 8, torch 2.13,
    aot_eager, recorded by `cagtool run --modes ca`): the forward recompiled for the first epoch's
    last batch (8 -> 4); the backward captured again for 8 at the second epoch's start, and Dynamo
    compiled that graph again at its last batch (8 -> 4). An HF Trainer's batches padded to their
    longest (18, 19, then 17: tests/test_library_graph_break_counts.py) are no such batch."""
    from cagtool.report.recompiles.explain import _recurring_smaller_batch

    siamese = {"ca_misses": 1, "new_sizes_after": [(8, 4)], "forward_smaller_batches": [(8, 4)]}
    assert _recurring_smaller_batch(siamese) == (8, 4)
    padded = {"ca_misses": 1, "new_sizes_after": [(19, 17)], "forward_smaller_batches": []}
    assert _recurring_smaller_batch(padded) is None
    assert _recurring_smaller_batch({**siamese, "new_sizes_after": [(8, 4), (8, 2)]}) is None
    assert _recurring_smaller_batch({**siamese, "ca_misses": 2}) is None
