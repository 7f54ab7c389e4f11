"""diff-graphs' pure layers on small hand-built graphs: normalising, aligning, summarising, rendering.

The node shapes (targets, `%name` arguments, NodeCall origins) are those `cagtool run` writes
for torch 2.13 compiled-autograd graphs, trimmed; tests/report/graphs/test_diff_graphs_cli.py covers real records.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import msgspec
import pytest

from cagtool.commands.diff_graphs import GraphSpec, parse_graph_args
from cagtool.errors import UsageError
from cagtool.record.graph_file import GraphNode
from cagtool.record.schema import AutogradNodeRef, CacheMissEvent, ChangedSize, SourceRef
from cagtool.report.text.console import UNBOUNDED_WIDTH, make_console
from cagtool.report.graphs.diff import CHANGED, EQUAL, INSERTED, REMOVED, diff_graphs
from cagtool.report.graphs import render
from cagtool.report.graphs.render import JsonRenderer, SideBySideRenderer, UnifiedRenderer, hunks
from cagtool.report.graphs.runs import GraphComparison, GraphSide, describe_recompile, sizes_differ
from cagtool.report.graphs.normalize import normalize_graph, short_target

OPS = "torch._dynamo.compiled_autograd.ops."
UTILS = "torch._dynamo.external_utils."
GETITEM = "_operator.getitem"


def ph(name: str) -> GraphNode:
    return GraphNode(name=name, op="placeholder", target=name)


def fn(name: str, target: str, args: str = "", origin: tuple[int, str] | None = None, **extra) -> GraphNode:
    ref = AutogradNodeRef(node_call=origin[0], name=origin[1]) if origin else None
    return GraphNode(name=name, op="call_function", target=target, args=args, origin=ref, **extra)


def out() -> GraphNode:
    return GraphNode(name="output", op="output", target="output", args="[]")


def inputs_prologue(n_inputs: int = 2) -> list[GraphNode]:
    nodes = [ph(p) for p in ("inputs", "sizes", "scalars", "hooks", "packed_data")]
    first = "getitem"
    nodes.append(fn(first, GETITEM, "%inputs, 0", (0, "torch::autograd::GraphRoot")))
    for i in range(1, n_inputs):
        nodes.append(fn(f"getitem_{i}", GETITEM, f"%inputs, {i}", (9, "torch::autograd::AccumulateGrad")))
    return nodes


def sum_then(op: str | None, counter: int = 2, dims: str = "10") -> list[GraphNode]:
    """GraphRoot -> SumBackward0 -> [op] -> AccumulateGrad, FX counters starting at `counter`."""
    c = counter
    root = (0, "torch::autograd::GraphRoot")
    nodes = [
        fn("validate_outputs", OPS + "validate_outputs", "[%getitem], [((None,), [], False, 6)]", root),
        fn(f"getitem_{c}", GETITEM, "%validate_outputs, 0", root),
        fn("sum_backward0", OPS + "SumBackward0", f"[%getitem_{c}], [True], [{dims}]", (1, "SumBackward0")),
        fn(f"getitem_{c + 1}", GETITEM, "%sum_backward0, 0", (1, "SumBackward0")),
    ]
    grad = f"getitem_{c + 1}"
    call = 2
    if op is not None:
        lower = op.replace("Backward0", "").lower() + "_backward0"
        nodes += [
            fn(lower, OPS + op, f"[%{grad}], [True, True], 1, 6, 6", (2, op)),
            fn(f"getitem_{c + 2}", GETITEM, f"%{lower}, 0", (2, op)),
        ]
        grad, call = f"getitem_{c + 2}", 3
    nodes.append(fn("call_accumulate_grad", UTILS + "call_accumulate_grad", f"%getitem_1, None, %{grad}, False", (call, "torch::autograd::AccumulateGrad")))
    return nodes


def graph(op: str | None = "AddBackward0", counter: int = 2, dims: str = "10") -> list[GraphNode]:
    return inputs_prologue() + sum_then(op, counter, dims) + [out()]


# --- normalising -------------------------------------------------------------------------------


def test_labels_name_nodes_by_what_they_are():
    nodes = inputs_prologue() + [
        fn("getitem_5", GETITEM, "%sizes, 0"),
        fn("unwrap_maybe_dynamic_int", UTILS + "unwrap_maybe_dynamic_int", "%getitem_5"),
        fn("mul_backward0", OPS + "MulBackward0", "[%getitem], [True], %unwrap_maybe_dynamic_int", (1, "MulBackward0")),
        fn("getitem_9", GETITEM, "%mul_backward0, 1", (1, "MulBackward0")),
        fn("aot3_mul_1", "aten.mul.Tensor", "%getitem_9, 2", aot_id=3),
        fn("add", "torch.add", "%aot3_mul_1, %aot3_mul_1", (1, "MulBackward0")),
        fn("add_1", "torch.add", "%add, %add", (1, "MulBackward0")),
    ]
    norm = normalize_graph(nodes)
    labels = [n.label for n in norm.nodes]
    assert labels[5:7] == ["inputs[0]", "inputs[1]"]
    assert labels[7:] == ["sizes[0]", "sizes[0]", "mul_backward0", "mul_backward0[1]", "mul_1", "add", "add#1"]
    assert norm.nodes[9].args == "[inputs[0]], [True], sizes[0]"
    assert norm.nodes[8].is_size
    # the AOT node has no NodeCall of its own: it belongs to the group it sits in
    assert norm.nodes[11].origin == "MulBackward0"


def test_short_targets():
    assert short_target(OPS + "SumBackward0") == "SumBackward0"
    assert short_target("<function call_hook at 0x7f0ee5614900>") == "call_hook"
    assert short_target("aten.mul.Tensor") == "aten.mul.Tensor"
    assert short_target("torch__dynamo_external_utils_call_hook") == "call_hook"


def test_renamed_temporaries_prefixes_and_addresses_are_not_differences():
    old = graph(counter=2)
    new = graph(counter=7)  # every getitem_<k> renamed
    old.insert(-1, fn("aot0_mul_1", "aten.mul.Tensor", "%call_accumulate_grad, 2", aot_id=0))
    old.insert(-1, fn("hook", "<function call_hook at 0x7f0ee5614900>", "%aot0_mul_1, <eval_with_key>.12"))
    new.insert(-1, fn("aot5_mul_1", "aten.mul.Tensor", "%call_accumulate_grad, 2", aot_id=5))
    new.insert(-1, fn("hook", "<function call_hook at 0x7fffffff0000>", "%aot5_mul_1, <eval_with_key>.3"))
    diff = diff_graphs(old, new)
    assert diff.identical, [e for e in diff.entries if e.kind != EQUAL]


def test_input_unpacking_is_one_group_whatever_origin_torch_gave_it():
    old = graph()
    new = graph()
    # torch tags inputs[1] with the first autograd node that uses it; that moves with unrelated changes
    new[6] = fn("getitem_1", GETITEM, "%inputs, 1", (2, "MulBackward0"))
    assert diff_graphs(old, new).identical


# --- aligning ----------------------------------------------------------------------------------


def test_a_new_autograd_node_is_one_inserted_group():
    old = graph(op=None, counter=2)
    new = graph(op="MulBackward0", counter=2)
    diff = diff_graphs(old, new)
    kinds = [(e.kind, (e.new or e.old).label) for e in diff.entries if e.kind != EQUAL]
    assert kinds == [
        (INSERTED, "mul_backward0"),
        (INSERTED, "mul_backward0[0]"),
        (CHANGED, "call_accumulate_grad"),
    ]
    s = diff.summary
    assert s.autograd_nodes_added == ["MulBackward0 (NodeCall 2)"]
    assert s.autograd_nodes_removed == []
    assert s.op_histogram_delta == {"MulBackward0": 1, "getitem": 1}
    assert (s.old_nodes, s.new_nodes, s.inserted, s.removed, s.changed) == (len(old), len(new), 2, 0, 1)


def test_a_replaced_autograd_node_is_one_changed_node_without_ripples():
    diff = diff_graphs(graph("AddBackward0"), graph("SubBackward0"))
    changed = [e for e in diff.entries if e.kind != EQUAL]
    assert len(changed) == 1
    (entry,) = changed
    assert entry.kind == CHANGED
    assert [(c.field, c.old, c.new) for c in entry.changes] == [("target", "AddBackward0", "SubBackward0")]
    # getitem_4 = sub_backward0[0] and the accumulate that reads it are the same nodes as before
    assert diff.summary.autograd_nodes_added == ["SubBackward0 (NodeCall 2)"]
    assert diff.summary.autograd_nodes_removed == ["AddBackward0 (NodeCall 2)"]


def test_autograd_nodes_a_graph_has_as_many_of_are_neither_added_nor_removed():
    """Two real graphs (!0 of each run, torch 2.13, `cagtool run --modes ca` of an MLP of three
    Linear layers under torch.compile(backend="aot_eager"), 30 SGD steps; the second with
    `print(h.sum().item())` before its last layer, a graph break that splits the forward into two
    compiled functions; mlp_ca_0.json and mlp_graph_break_ca_0.json, the records'
    ca/graphs/ca_0.json). The second has one autograd node more, CompiledFunctionBackward1, and
    the same 6 AccumulateGrads, renumbered (NodeCalls 5-10 -> 6-11, the last layer's first). The
    summary read `+CompiledFunctionBackward1 (NodeCall 4), +torch::autograd::AccumulateGrad
    (NodeCall 10), -torch::autograd::AccumulateGrad (NodeCall 5)`: an AccumulateGrad the alignment
    left unmatched on each side. Added and removed go by the names' counts first."""
    from collections import Counter

    from cagtool.record.graph_file import decode_graph_file

    here = Path(__file__).parent
    old, new = (decode_graph_file((here / name).read_bytes()).nodes for name in ("mlp_ca_0.json", "mlp_graph_break_ca_0.json"))

    def names(nodes):
        return Counter(name for name, _ in dict.fromkeys((n.origin.name, n.origin.node_call) for n in nodes if n.origin))

    assert names(new) - names(old) == Counter({"CompiledFunctionBackward1": 1}) and not names(old) - names(new)
    assert names(old)["torch::autograd::AccumulateGrad"] == names(new)["torch::autograd::AccumulateGrad"] == 6
    summary = diff_graphs(old, new).summary
    assert summary.autograd_nodes_added == ["CompiledFunctionBackward1 (NodeCall 4)"]
    assert summary.autograd_nodes_removed == []
    # Where a name's count does change, the alignment still says which NodeCall: one AccumulateGrad fewer.
    fewer = [n for n in new if not (n.origin and n.origin.node_call == 11)]
    fewer_summary = diff_graphs(old, fewer).summary
    assert [a.split(" (")[0] for a in fewer_summary.autograd_nodes_removed] == ["torch::autograd::AccumulateGrad"]


def test_removed_nodes():
    diff = diff_graphs(graph("MulBackward0"), graph(None))
    assert [e.kind for e in diff.entries if e.kind != EQUAL] == [REMOVED, REMOVED, CHANGED]
    assert diff.summary.autograd_nodes_removed == ["MulBackward0 (NodeCall 2)"]


def test_static_sizes_that_became_symbolic_are_listed():
    static = graph(dims="10, 10")
    dynamic = graph(dims="%unwrap_maybe_dynamic_int, %unwrap_maybe_dynamic_int_1")
    sizes = [
        fn("getitem_20", GETITEM, "%sizes, 0"),
        fn("getitem_21", GETITEM, "%sizes, 1"),
        fn("unwrap_maybe_dynamic_int", UTILS + "unwrap_maybe_dynamic_int", "%getitem_20"),
        fn("unwrap_maybe_dynamic_int_1", UTILS + "unwrap_maybe_dynamic_int", "%getitem_21"),
    ]
    dynamic[7:7] = sizes
    diff = diff_graphs(static, dynamic)
    symbolic = [(b.node, b.where, b.old, b.new) for b in diff.summary.became_symbolic]
    assert symbolic == [("sum_backward0", "args", "10", "sizes[0]"), ("sum_backward0", "args", "10", "sizes[1]")]
    assert diff.summary.inserted == 4


def test_shape_dtype_stride_and_hook_changes():
    old = graph(None)
    new = graph(None)
    old[-2] = _with(old[-2], shape=[10, 4], dtype="float32", stride=[4, 1])
    new[-2] = _with(new[-2], shape=[10, "s1"], dtype="bfloat16", stride=["s1", 1])
    diff = diff_graphs(old, new)
    (entry,) = [e for e in diff.entries if e.kind != EQUAL]
    assert [c.field for c in entry.changes] == ["shape", "dtype", "stride"]
    assert [(b.where, b.old, b.new) for b in diff.summary.became_symbolic] == [("shape[1]", "4", "s1"), ("stride[0]", "4", "s1")]


def _with(node: GraphNode, **fields) -> GraphNode:
    return msgspec.structs.replace(node, **fields)


def test_metadata_one_side_did_not_record_is_not_a_change():
    """Unknown is not changed: a dtype (or shape, stride) only one graph holds says nothing."""
    old, new = graph(None), graph(None)
    old[-2] = _with(old[-2], shape=[10, 4], dtype="float32", stride=[4, 1])
    diff = diff_graphs(old, new)  # the new graph recorded no metadata for the node
    assert [e.kind for e in diff.entries if e.kind != EQUAL] == []
    new[-2] = _with(new[-2], dtype="float16")  # now both sides know the dtype, and it differs
    (entry,) = [e for e in diff_graphs(old, new).entries if e.kind != EQUAL]
    assert [(c.field, c.old, c.new) for c in entry.changes] == [("dtype", "float32", "float16")]


def test_size_symbols_renamed_between_graphs_are_not_shape_changes():
    """Each capture numbers its symbols afresh: s0 in one graph may be s1 in the next."""
    old, new = graph(None), graph(None)
    old[-2] = _with(old[-2], shape=["s0", 4], stride=[4, 1], dtype="float32")
    new[-2] = _with(new[-2], shape=["s1", 4], stride=[4, 1], dtype="float32")
    old[-3] = _with(old[-3], shape=["s0", "2*s0"], dtype="float32")
    new[-3] = _with(new[-3], shape=["s1", "2*s1"], dtype="float32")
    assert [e for e in diff_graphs(old, new).entries if e.kind != EQUAL] == []
    # A renaming holds only one to one: s0 -> s1 in one node and s0 -> s2 in the next is a change.
    new[-3] = _with(new[-3], shape=["s2", "2*s2"])
    changed = [e for e in diff_graphs(old, new).entries if e.kind != EQUAL]
    assert len(changed) == 1 and [c.field for c in changed[0].changes] == ["shape"]
    # A number that became a symbol is still a change (and listed as become symbolic).
    new[-3] = _with(new[-3], shape=["s1", 8])
    changed = [e for e in diff_graphs(old, new).entries if e.kind != EQUAL]
    assert [c.field for c in changed[0].changes] == ["shape"]


def test_two_equal_sizes_that_became_two_symbols_are_a_shape_change():
    """A static capture's two equal dims share a symbol ([s58, s58]); the dynamic one's are two
    ([s38, s58]). The second pair's identical text `s58` was taken as equal although s58 had just
    been read as s38: the shape read as unchanged."""
    old, new = graph(None), graph(None)
    old[-2] = _with(old[-2], shape=["s58", "s58"], stride=["s58", 1], dtype="float32")
    new[-2] = _with(new[-2], shape=["s38", "s58"], stride=["s58", 1], dtype="float32")
    changed = [e for e in diff_graphs(old, new).entries if e.kind != EQUAL]
    assert len(changed) == 1 and [(c.field, c.old, c.new) for c in changed[0].changes] == [("shape", "[s58, s58]", "[s38, s58]")]
    # The same symbol on both sides, all through, is the same size.
    new[-2] = _with(new[-2], shape=["s58", "s58"])
    assert [e for e in diff_graphs(old, new).entries if e.kind != EQUAL] == []


def test_a_hook_added_is_an_inserted_call_hook():
    old = graph(None)
    new = graph(None)
    acc = (2, "torch::autograd::AccumulateGrad")
    new[-2:-1] = [
        fn("getitem_30", GETITEM, "%hooks, 0", acc),
        fn("call_hook", UTILS + "call_hook", "%getitem_30, %getitem_3, hook_type='tensor_pre_hook'", acc, hook_type="tensor_pre_hook"),
        fn("call_accumulate_grad", UTILS + "call_accumulate_grad", "%getitem_1, None, %call_hook, False", acc),
    ]
    diff = diff_graphs(old, new)
    inserted = [e.new.label for e in diff.entries if e.kind == INSERTED]
    assert inserted == ["hooks[0]", "call_hook"]
    assert diff.summary.hooks_added == ["tensor_pre_hook"]


def test_empty_graphs():
    assert diff_graphs([], []).identical
    diff = diff_graphs([], graph())
    assert diff.summary.inserted == len(graph())


def test_inputs_renumbered_by_an_insertion_are_not_changes():
    """A new saved tensor at inputs[1] shifts every later input: only the new one is reported."""
    acc = (3, "torch::autograd::AccumulateGrad")
    old = inputs_prologue() + sum_then(None) + [out()]
    new = [ph(p) for p in ("inputs", "sizes", "scalars", "hooks", "packed_data")] + [
        fn("getitem", GETITEM, "%inputs, 0", (0, "torch::autograd::GraphRoot")),
        fn("getitem_1", GETITEM, "%inputs, 1", shape=[3, 3], dtype="float32"),
        fn("getitem_2", GETITEM, "%inputs, 2", acc),
    ] + [n if n.name != "call_accumulate_grad" else fn(n.name, n.target, n.args.replace("%getitem_1", "%getitem_2"), acc) for n in sum_then(None, counter=5)] + [out()]
    diff = diff_graphs(old, new)
    assert [(e.kind, e.new.label) for e in diff.entries if e.kind != EQUAL] == [(INSERTED, "inputs[1]")]
    # The input the insertion renumbered is shown under its new name with its old one.
    lines = _render(UnifiedRenderer(context=1), _comparison(old, new)).splitlines()
    assert " inputs[2] = getitem(inputs, 2)  # was inputs[1]" in lines
    assert not [line for line in lines if "# was" in line and "inputs[2]" not in line]


def test_an_input_of_the_same_shape_as_another_is_paired_by_what_reads_it():
    """The .grad warm-up: a parameter's AccumulateGrad gains its .grad as a new input of the
    parameter's own shape, just after it. The parameter is the one the old graph read as the
    variable; the new input is the one read as the .grad, not the other way round."""
    acc = (3, "torch::autograd::AccumulateGrad")
    root = (0, "torch::autograd::GraphRoot")
    head = [ph(p) for p in ("inputs", "sizes", "scalars", "hooks", "packed_data")] + [fn("getitem", GETITEM, "%inputs, 0", root)]
    grad_of = [fn("validate_outputs", OPS + "validate_outputs", "[%getitem], [((None,), [], False, 6)]", root),
               fn("getitem_9", GETITEM, "%validate_outputs, 0", root)]
    old = head + [fn("getitem_1", GETITEM, "%inputs, 1", acc, shape=[3, 3], dtype="float32")] + grad_of + [
        fn("call_accumulate_grad", UTILS + "call_accumulate_grad", "%getitem_1, None, %getitem_9, False", acc), out()]
    new = head + [fn("getitem_1", GETITEM, "%inputs, 1", acc, shape=[3, 3], dtype="float32"),
                  fn("getitem_2", GETITEM, "%inputs, 2", acc, shape=[3, 3], dtype="float32")] + grad_of + [
        fn("call_accumulate_grad", UTILS + "call_accumulate_grad", "%getitem_1, %getitem_2, %getitem_9, False", acc), out()]
    # The same graph with the new input first: the parameter is inputs[2] now.
    swapped = head + [fn("getitem_1", GETITEM, "%inputs, 1", acc, shape=[3, 3], dtype="float32"),
                      fn("getitem_2", GETITEM, "%inputs, 2", acc, shape=[3, 3], dtype="float32")] + grad_of + [
        fn("call_accumulate_grad", UTILS + "call_accumulate_grad", "%getitem_2, %getitem_1, %getitem_9, False", acc), out()]
    for after, added, parameter in ((new, "inputs[2]", "inputs[1]"), (swapped, "inputs[1]", "inputs[2]")):
        diff = diff_graphs(old, after)
        assert [e.new.label for e in diff.entries if e.kind == INSERTED] == [added]
        assert [(e.old.label, e.new.label) for e in diff.entries if e.old is not None and e.new is not None and e.old.label == "inputs[1]"] == [("inputs[1]", parameter)]
        changed = [e for e in diff.entries if e.kind == CHANGED]
        assert [(e.new.label, [c.field for c in e.changes]) for e in changed] == [("call_accumulate_grad", ["args"])]


def test_added_autograd_nodes_are_named_by_the_alignment():
    """Two MulBackward0s where there was one: the added one is the second, at its own NodeCall."""
    mul = lambda call, grad, c: [  # noqa: E731
        fn(f"mul_backward0_{c}", OPS + "MulBackward0", f"[%{grad}], [True], 2", (call, "MulBackward0")),
        fn(f"getitem_{c}", GETITEM, f"%mul_backward0_{c}, 0", (call, "MulBackward0")),
    ]
    base = inputs_prologue() + sum_then(None)[:-1]
    old = base + mul(2, "getitem_3", 10) + [out()]
    new = base + mul(2, "getitem_3", 10) + mul(3, "getitem_10", 11) + [out()]
    diff = diff_graphs(old, new)
    assert diff.summary.autograd_nodes_added == ["MulBackward0 (NodeCall 3)"]
    assert diff.summary.autograd_nodes_removed == []


# --- the run side: origins, recompile headers ------------------------------------------------------

def _miss(**kw) -> CacheMissEvent:
    base = dict(seq=1, t=0.0, ca_id=3, compile_id="!3", step=3, miss_kind="new_node", message="Cache miss due to ...")
    return CacheMissEvent(**{**base, **kw})


def test_recompile_header_for_a_new_node_and_for_changed_shapes():
    src = SourceRef(file="/home/me/train.py", line=14)
    assert describe_recompile(_miss(node="MulBackward0", node_call=2, source=src)) == "new autograd node MulBackward0 at NodeCall 2, step 3, train.py:14"
    shapes = _miss(
        miss_kind="changed_shapes",
        total_changed=2,
        changed_sizes=[ChangedSize(0, 100, 10, "SumBackward0", 1), ChangedSize(1, 100, None, "SumBackward0", 1)],
        backward_call=src,
    )
    assert describe_recompile(shapes) == "2 changed tensor shapes: sizes[0] 10→100, sizes[1]=100 of SumBackward0 at NodeCall 1, step 3, train.py:14"
    assert describe_recompile(_miss(miss_kind="unknown", message="Cache miss due to something", step=None)) == "Cache miss due to something"
    root = _miss(ca_id=0, node="torch::autograd::GraphRoot", node_call=0, step=0, source=src)  # the first step is 0
    assert describe_recompile(root) == "nothing cached yet at the graph root, step 0, train.py:14"


def test_many_autograd_nodes_are_counted_by_name():
    from cagtool.report.graphs.render import _listed

    assert _listed("+", ["A (NodeCall 1)", "B (NodeCall 2)"]) == ["+A (NodeCall 1)", "+B (NodeCall 2)"]
    many = [f"View (NodeCall {i})" for i in range(5)] + ["Mm (NodeCall 9)", "Mm (NodeCall 10)"]
    assert _listed("-", many) == ["-5 View", "-2 Mm"]


# --- rendering ---------------------------------------------------------------------------------------


def _comparison(old, new) -> GraphComparison:
    run = Path("runs/r")
    # !0 in the first step (0), !1 in the next, as op_loop.py records them.
    miss = _miss(ca_id=1, compile_id="!1", step=1, node="SubBackward0", node_call=2, source=SourceRef("train.py", 12))
    return GraphComparison(
        GraphSide(run, "ca", 0, 0, run / "ca/graphs/ca_0.py", None, None),
        GraphSide(run, "ca", 1, 1, run / "ca/graphs/ca_1.py", describe_recompile(miss), miss),
        diff_graphs(old, new),
    )


def _render(renderer, comparison, width: int = 100) -> str:
    buffer = io.StringIO()
    renderer.render([comparison], make_console(file=buffer, width=width))
    return buffer.getvalue()


def test_unified_golden():
    text = _render(UnifiedRenderer(context=1), _comparison(graph("AddBackward0"), graph("SubBackward0")))
    assert text == (
        "--- !0  runs/r/ca/graphs/ca_0.py  (step 0, 15 nodes)\n"
        "+++ !1  runs/r/ca/graphs/ca_1.py  (step 1, 15 nodes)\n"
        "recompile that produced !1: new autograd node SubBackward0 at NodeCall 2, step 1, train.py:12\n"
        "@@ 10 unchanged before @@\n"
        "  # SumBackward0 (NodeCall 1)\n"
        " sum_backward0[0] = getitem(sum_backward0, 0)\n"
        "  # AddBackward0 (NodeCall 2) → SubBackward0 (NodeCall 2)\n"
        "-add_backward0 = AddBackward0([sum_backward0[0]], [True, True], 1, 6, 6)\n"
        "+sub_backward0 = SubBackward0([sum_backward0[0]], [True, True], 1, 6, 6)  # changed: target\n"
        " sub_backward0[0] = getitem(sub_backward0, 0)\n"
        "@@ 2 unchanged after @@\n"
        "0 inserted, 0 removed, 1 changed, 14 unchanged (15 → 15 nodes)\n"
        "autograd nodes: +SubBackward0 (NodeCall 2), -AddBackward0 (NodeCall 2)\n"
        "ops: AddBackward0 -1, SubBackward0 +1\n"
    )


def test_side_by_side_shows_both_graphs_and_no_colour_off_a_terminal():
    text = _render(SideBySideRenderer(context=0), _comparison(graph(None), graph("MulBackward0")), width=200)
    assert "!0 (old)" in text and "!1 (new)" in text
    row = next(line for line in text.splitlines() if "mul_backward0 = MulBackward0(" in line)
    assert row.startswith("│+ │ ")  # nothing on the old side
    assert "⋯ 11 unchanged" in text and "⋯ 1 unchanged" in text
    assert "\x1b[" not in text


@pytest.mark.parametrize("width", [6, 14, 31, 60, 100, UNBOUNDED_WIDTH])
def test_side_by_side_rows_drawn_as_richs_table_draws_them(monkeypatch, width):
    # Off a terminal the rows are drawn by _PlainRows from rich's layout; the text must be what
    # rich's Table prints for the same rows: folded cells (a long shape, a wide character), the
    # narrowest consoles (handed to rich) and the unbounded width of a pipe.
    dims = ", ".join(str(n) for n in range(40)) + ", 長さ"
    comparison = _comparison(graph(None, dims=dims), graph("MulBackward0", dims=dims[:-4]))
    drawn = []
    original = render._PlainRows.__rich_console__

    def counted(self, console, options):
        drawn.append(1)
        yield from original(self, console, options)

    monkeypatch.setattr(render._PlainRows, "__rich_console__", counted)
    plain = _render(SideBySideRenderer(context=2), comparison, width)
    assert drawn == [1]
    monkeypatch.setattr(render, "_plain_layout", lambda console, rows: False)
    assert plain == _render(SideBySideRenderer(context=2), comparison, width)
    assert "~ " in plain and ("長さ" in plain or width < 60)


def test_identical_graphs_render_one_line_and_the_miss_they_do_not_show():
    text = _render(UnifiedRenderer(), _comparison(graph(), graph(counter=5)))
    # the new graph's miss was a new node: the code the two graphs run is the same
    assert text.splitlines()[-2:] == ["identical: 15 nodes, same structure",
                                      "the cache miss that captured !1 was on the key of SubBackward0, which the graph's code "
                                      "does not show: cagtool recompiles --explain says why"]


def _sized(old_miss: CacheMissEvent, new_miss: CacheMissEvent, same_record: bool = True) -> GraphComparison:
    """Two graphs of the same code, captured by the misses given (their ids and steps), each reading 2 sizes."""
    run = Path("runs/r")
    old = GraphSide(run, "ca", old_miss.ca_id, old_miss.step, run / "ca/graphs/ca_1.py", None, old_miss, num_sizes=2)
    other = run if same_record else Path("runs/other")
    new = GraphSide(other, "ca", new_miss.ca_id, new_miss.step, other / "ca/graphs/ca_2.py", None, new_miss, num_sizes=2)
    return GraphComparison(old, new, diff_graphs(graph(), graph(counter=5)), sizes=sizes_differ(old, new, same_record))


def test_the_same_code_taking_other_sizes_dynamic_is_not_identical():
    # torch: "Cache miss due to 2 changed tensor shapes (total of 4): sizes[2], sizes[3]", sizes no node
    # of the graph reads (a padded batch's length in a CompiledFunctionBackward's key): same code.
    node = _miss(ca_id=1, compile_id="!1", step=1, node="CompiledFunctionBackward", node_call=1)
    shapes = _miss(ca_id=2, compile_id="!2", step=2, miss_kind="changed_shapes", total_changed=2, dynamic_sizes=4,
                   changed_sizes=[ChangedSize(2, 12, None, "CompiledFunctionBackward2", 1), ChangedSize(3, 12, None, "CompiledFunctionBackward2", 1)])
    comparison = _sized(node, shapes)
    assert comparison.diff.identical and not comparison.identical
    text = _render(UnifiedRenderer(), comparison)
    assert "identical" not in text
    assert text.splitlines()[-2:] == [
        "same code, not the same graph: 15 nodes, same structure, but the sizes compiled autograd holds dynamic for them differ "
        "(the record shows it, the code does not)",
        "sizes that became dynamic (symbolic) between !1 and !2: sizes[2]=12, sizes[3]=12 of CompiledFunctionBackward2 at NodeCall 1, "
        "at the cache miss that captured !2 (step 2); 4 sizes are dynamic for !2 (torch's count), its code reads 2",
    ]
    (document,) = json.loads(_render(JsonRenderer(), comparison))["comparisons"]
    assert document["identical"] is False and document["same_code"] is True
    assert document["sizes"]["new"]["dynamic_sizes"] == 4 and [s["index"] for s in document["sizes"]["new"]["became_dynamic"]] == [2, 3]
    # The other way round, the same sizes between the same two captures.
    assert _render(UnifiedRenderer(), _sized(shapes, node)).splitlines()[-1].startswith("sizes that became dynamic (symbolic) between !1 and !2: ")
    # Graphs of two runs: each one's capture, as its record gives it.
    assert _render(UnifiedRenderer(), _sized(node, shapes, same_record=False)).splitlines()[-2:] == [
        "!1 of runs/r was captured for: new autograd node CompiledFunctionBackward at NodeCall 1, step 1",
        "!2 of runs/other was captured when 2 sizes became dynamic (symbolic): sizes[2]=12, sizes[3]=12 of CompiledFunctionBackward2 "
        "at NodeCall 1 (step 2); 4 sizes are dynamic for !2 (torch's count), its code reads 2",
    ]
    # Both captured by the same sizes becoming dynamic (one job recorded twice), or neither: nothing differs.
    assert _sized(shapes, shapes, same_record=False).identical
    assert _sized(node, node).identical
    # A miss cagtool inferred from the graphs (an imported log) says no more than the code does.
    assert _sized(node, msgspec.structs.replace(shapes, inferred=True)).identical


def test_json_document():
    document = json.loads(_render(JsonRenderer(), _comparison(graph(None), graph("MulBackward0"))))
    assert document["format"] == "cagtool-graph-diff" and document["schema_version"] == 1
    assert document["identical"] is False
    (comparison,) = document["comparisons"]
    assert comparison["new"]["recompile"].startswith("new autograd node SubBackward0")
    assert [c["kind"] for c in comparison["changes"]] == ["inserted", "inserted", "changed"]
    assert comparison["changes"][0]["new"]["origin"] == "MulBackward0"
    assert comparison["summary"]["autograd_nodes_added"] == ["MulBackward0 (NodeCall 2)"]


def test_hunks_merge_nearby_differences():
    entries = diff_graphs(graph(None), graph("MulBackward0")).entries
    spans, after = hunks(entries, context=1)
    assert len(spans) == 1
    assert spans[0].skipped_before + (spans[0].stop - spans[0].start) + after == len(entries)
    all_spans, none_after = hunks(entries, context=100)
    assert (all_spans[0].start, all_spans[0].stop, none_after) == (0, len(entries), 0)


# --- command-line arguments ---------------------------------------------------------------------------


def test_parse_graph_args():
    assert parse_graph_args([]) == (None, None, None)
    assert parse_graph_args(["runs/a"]) == ("runs/a", None, None)
    assert parse_graph_args(["1", "!2"]) == (None, GraphSpec(None, 1), GraphSpec(None, 2))
    assert parse_graph_args(["runs/a", "ca_0", "3"]) == ("runs/a", GraphSpec(None, 0), GraphSpec(None, 3))
    assert parse_graph_args(["runs/a:0", "runs/b:!1"]) == (None, GraphSpec("runs/a", 0), GraphSpec("runs/b", 1))
    for bad in (["3"], ["runs/a:0"], ["runs/a", "1"], ["runs/a", "x", "y"], ["runs/a:0", "1"]):
        with pytest.raises(UsageError):
            parse_graph_args(bad)


# --- sequence alignment -------------------------------------------------------------------------------


def _tiles(ops, a, b) -> int:
    """Check that opcodes cover both sequences in order; return how many items they match."""
    i = j = matched = 0
    for tag, i1, i2, j1, j2 in ops:
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
            matched += i2 - i1
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    return matched


def test_patience_alignment_matches_as_much_as_difflib_on_edited_sequences():
    import random
    from difflib import SequenceMatcher

    from cagtool.report.graphs.align import opcodes

    ours = theirs = 0
    for seed in range(200):
        rng = random.Random(seed)
        a = [rng.randrange(rng.choice([2, 5, 50])) for _ in range(rng.randrange(0, 60))]
        b = list(a)
        for _ in range(rng.randrange(0, 8)):
            roll = rng.random()
            if roll < 0.3 and b:
                del b[rng.randrange(len(b))]
            elif roll < 0.6:
                b.insert(rng.randrange(len(b) + 1), rng.randrange(60))
            elif b:
                b[rng.randrange(len(b))] = rng.randrange(60)
        ours += _tiles(opcodes(a, b), a, b)
        theirs += sum(size for *_, size in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
    assert ours >= theirs * 0.99
    assert opcodes("abcxdef", "abcdyef") == [("equal", 0, 3, 0, 3), ("delete", 3, 4, 3, 3), ("equal", 4, 5, 3, 4), ("insert", 5, 5, 4, 5), ("equal", 5, 7, 5, 7)]
    assert opcodes([], []) == [] and opcodes([], [1]) == [("insert", 0, 0, 0, 1)]


def test_on_a_terminal_without_colour_rich_draws_the_side_by_side_table(monkeypatch):
    """NO_COLOR on a terminal removes colours, not bold or dim: the borders stay aligned around
    rich's style codes."""
    import re

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    buffer = Terminal()
    SideBySideRenderer(context=2).render([_comparison(graph("AddBackward0"), graph("SubBackward0"))], make_console(file=buffer, width=80))
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in buffer.getvalue().split("\n")]
    table = [line for line in lines if line and line[0] in "┏┃┡│└"]
    assert len(table) > 5 and all(len(line) == len(table[0]) and line[-1] in "┓┃┩│┘" for line in table), table
    assert "\x1b[2m" in buffer.getvalue()  # the dim unchanged rows: rich's styles, no colour


def test_a_names_count_is_the_graphs_own_whatever_the_alignment_paired():
    """REINFORCE's graphs (pytorch/examples, the policy compiled with aot_eager): an episode four
    steps shorter has four CompiledFunctionBackward0 fewer, and the alignment had paired the FX
    nodes of one removed with those of one kept, so the summary said -3. Here: two in the old graph,
    one in the new, the alignment pairing each old one's nodes with the new one's."""
    from cagtool.report.graphs.diff import _added_and_removed

    def compiled(call: int) -> list[GraphNode]:
        return [fn(f"compiled_function_backward0_{call}", OPS + "CompiledFunctionBackward0", "[%getitem]", (call, "CompiledFunctionBackward0")),
                fn(f"getitem_{call}", GETITEM, f"%compiled_function_backward0_{call}, 0", (call, "CompiledFunctionBackward0"))]

    old = normalize_graph(inputs_prologue() + compiled(1) + compiled(2) + [out()])
    new = normalize_graph(inputs_prologue() + compiled(1) + [out()])
    first = len(inputs_prologue())
    old_to_new = {i: i for i in range(first)}
    old_to_new[first] = first  # old call 1's node -> new call 1's
    old_to_new[first + 3] = first + 1  # old call 2's getitem -> new call 1's getitem
    new_to_old = {v: k for k, v in old_to_new.items()}
    added, removed = _added_and_removed(old, new, old_to_new, new_to_old)
    assert added == [] and removed == ["CompiledFunctionBackward0"]


def test_symbolic_sizes_are_compared_by_the_values_each_capture_recorded():
    """pytorch/examples' super_resolution with its last batch of 8: each capture names its symbols
    afresh and duck-sizes equal sizes into one, so `[s35, 1, s20, s20]` held 64 rows at step 0 and
    8 at step 3 (it read unchanged), and a weight `[s35, s35, 3, 3]` that became `[s74, s74, 3, 3]`
    with its stride printed in another order held the same 64x64 (it read "changed: stride"). With
    the values each graph file records, the batch input is the change, named by its values, and
    the weight is not; the code is the same."""
    from cagtool.record.graph_file import graph_columns

    old, new = graph(None), graph(None)
    old[-2] = _with(old[-2], shape=["s35", 1, "s20", "s20"], stride=["s20**2", "s20**2", "s20", 1], dtype="float32")
    new[-2] = _with(new[-2], shape=["s35", 1, "s20", "s20"], stride=["s20**2", "s20**2", "s20", 1], dtype="float32")
    old[-3] = _with(old[-3], shape=["s35", "s35", 3, 3], stride=["9*s35", 9, 3, 1], dtype="float32")
    new[-3] = _with(new[-3], shape=["s74", "s74", 3, 3], stride=["9*s74", 9, 3, 1], dtype="float32")
    old[-4] = _with(old[-4], shape=["s35", "s36"], stride=["s35*s36**2", 1], dtype="float32")
    new[-4] = _with(new[-4], shape=["s74", "s36"], stride=["s36**2*s74", 1], dtype="float32")
    before = [e for e in diff_graphs(old, new).entries if e.kind != EQUAL]
    assert [e.new.label for e in before] != [new[-2].name]  # by symbol names alone: the batch input hidden
    diff = diff_graphs(graph_columns(old, {"s35": 64, "s20": 32, "s36": 3}), graph_columns(new, {"s35": 8, "s20": 32, "s74": 64, "s36": 3}))
    (changed,) = [e for e in diff.entries if e.kind != EQUAL]
    assert changed.new.name == new[-2].name and [(c.field, c.old_values, c.new_values) for c in changed.changes] == [("shape", [64, 1, 32, 32], [8, 1, 32, 32])]
    assert diff.summary.resized == 1 and diff.identical  # the same code, captured for another batch
    assert render.changed_fields(changed) == "shape [64, 1, 32, 32] -> [8, 1, 32, 32]"
    # Dims that shared a symbol and no longer do, at the same values, stay a change of the text.
    new[-3] = _with(new[-3], shape=["s74", "s35", 3, 3])
    diff = diff_graphs(graph_columns(old, {"s35": 64, "s20": 32, "s36": 3}), graph_columns(new, {"s35": 64, "s20": 32, "s74": 64, "s36": 3}))
    assert [(e.new.name, [c.field for c in e.changes]) for e in diff.entries if e.kind != EQUAL] == [(new[-3].name, ["shape"])]
    assert diff.summary.resized == 0 and not diff.identical


def test_dims_that_came_to_share_a_symbol_are_shown_with_their_values_and_symbols():
    """A batch that grew equal to the feature width: duck sizing ties the two dims into one symbol
    (`[s39, s82]` -> `[s39, s39]`). The change was shown as the bare field `shape`; its values
    (48 rows -> 32) are what the user reads, and the new tie is another specialisation, so the
    graphs are not "the same code captured for other sizes"."""
    from cagtool.record.graph_file import graph_columns

    old, new = graph(None), graph(None)
    old[-2] = _with(old[-2], shape=["s39", "s82"], stride=["s82", 1], dtype="float32")
    new[-2] = _with(new[-2], shape=["s39", "s39"], stride=["s39", 1], dtype="float32")
    diff = diff_graphs(graph_columns(old, {"s39": 48, "s82": 32}), graph_columns(new, {"s39": 32}))
    (changed,) = [e for e in diff.entries if e.kind != EQUAL]
    assert [(c.field, c.old_values, c.new_values, c.ties_changed) for c in changed.changes] == [("shape", [48, 32], [32, 32], True)]
    assert render.changed_fields(changed) == "shape [48, 32] -> [32, 32] (symbols [s39, s82] -> [s39, s39])"
    assert diff.summary.resized == 0 and not diff.identical


@pytest.mark.parametrize("text, value", [
    ("s20**2", 1024), ("s35*s36**2", 576), ("(s35//2) + 1", 33), ("-s20", -32), (7, 7),
    ("u0", None),  # an unbacked symbol: no value recorded
    ("9**9**9", None), ("s35**s35", None),  # past any size: never computed
    ("__import__('os')", None), ("Mod(s35, 2)", None), ("s35 if s20 else 0", None), ("x" * 300, None),  # not arithmetic: nothing run
])
def test_a_size_expression_is_read_as_arithmetic_of_recorded_values_and_nothing_else(text, value):
    from cagtool.report.graphs.diff import size_value

    assert size_value(text, {"s35": 64, "s20": 32, "s36": 3}) == value
