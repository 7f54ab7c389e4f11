"""diff-graphs reads a graph file as columns (record/graph_file.py, decoded by msgspec into its
nodes): the columns must hold exactly the nodes `load_graph_nodes` builds, a file it refuses must
be refused with the same message, and a diff from columns must equal the diff from nodes, on
hand-built nodes and on a recorded run's graphs. The file's layout is json's, byte for byte as
the writer wrote it before its nodes were msgspec types."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cagtool.errors import UnreadableInput
from cagtool.record.graph_file import GRAPH_FORMAT, GraphNode, graph_columns, graph_file_text, graph_node_to_dict
from cagtool.record.loader import load_graph_columns, load_graph_nodes
from cagtool.record.schema import AutogradNodeRef
from cagtool.report.graphs.diff import diff_graphs
from cagtool.report.graphs.normalize import _FX_COUNTER, _counter_stripped

GOOD = {"name": "mul_backward0", "op": "call_function", "target": "torch._dynamo.compiled_autograd.ops.MulBackward0",
        "args": "[%getitem_3], [True, False]", "origin": {"node_call": 2, "name": "MulBackward0"}, "aot_id": None,
        "hook_type": None, "shape": [4, "s0"], "dtype": "float32", "stride": [1, 4]}


def _write(path: Path, nodes: object) -> Path:
    path.write_text(json.dumps({"format": GRAPH_FORMAT, "schema_version": 1, "ca_id": 0, "nodes": nodes}))
    return path


def _outcome(load, path: Path) -> object:
    try:
        return load(path)
    except UnreadableInput as exc:
        return f"UnreadableInput: {exc}"


@pytest.mark.parametrize(
    "nodes",
    [
        [GOOD, {**GOOD, "origin": None, "shape": None, "stride": None, "dtype": None}, {**GOOD, "aot_id": 3, "hook_type": "tensor_pre_hook"}],
        [],
        [{k: v for k, v in GOOD.items() if k not in ("shape", "dtype")}],  # optional fields left out: defaults
        [{**GOOD, "extra": 1}],  # an unknown field: ignored
        [{k: v for k, v in GOOD.items() if k != "target"}],  # a required field missing
        [{**GOOD, "name": 3}],
        [{**GOOD, "args": None}],
        [{**GOOD, "aot_id": True}],
        [{**GOOD, "aot_id": 1.0}],
        [{**GOOD, "shape": [4.0]}],
        [{**GOOD, "shape": [[4]]}],
        [{**GOOD, "stride": "4, 1"}],
        [{**GOOD, "dtype": 5}],
        [{**GOOD, "origin": {"node_call": 2}}],
        [{**GOOD, "origin": {"node_call": 2, "name": "X", "more": 1}}],
        [{**GOOD, "origin": {"node_call": "2", "name": "X"}}],
        [{**GOOD, "origin": {}}],
        [{**GOOD, "origin": [2, "X"]}],
        [GOOD, "not a node"],
        [GOOD, None],
    ],
)
def test_columns_hold_what_load_graph_nodes_builds_or_refuse_alike(tmp_path, nodes):
    path = _write(tmp_path / "ca_0.json", nodes)
    from_nodes = _outcome(lambda p: graph_columns(load_graph_nodes(p)), path)
    assert _outcome(load_graph_columns, path) == from_nodes
    if isinstance(from_nodes, str):
        assert "malformed" in from_nodes


def test_a_graph_file_is_written_as_before():
    """The layout the writer had when it built each node's dict by hand and json.dumps'ed the file."""
    nodes = [GraphNode("inputs", "placeholder", "inputs"), GraphNode(**{**GOOD, "origin": AutogradNodeRef(2, "MulBackward0"), "args": "caf\u00e9"})]
    by_hand = {"format": GRAPH_FORMAT, "schema_version": 3, "ca_id": 4, "compile_id": "!4",
               "nodes": [{"name": "inputs", "op": "placeholder", "target": "inputs", "args": "", "origin": None, "aot_id": None,
                          "hook_type": None, "shape": None, "dtype": None, "stride": None}, {**GOOD, "args": "caf\u00e9"}]}
    assert graph_file_text(4, "!4", nodes) == json.dumps(by_hand) + "\n"
    # a graph with symbolic sizes keeps each symbol's value after its nodes
    assert graph_file_text(4, "!4", nodes, {"s3": 8}) == json.dumps({**by_hand, "symbols": {"s3": 8}}) + "\n"
    assert graph_node_to_dict(nodes[1]) == {**GOOD, "args": "caf\u00e9"}


def test_a_file_that_is_not_a_graph_is_refused_alike(tmp_path):
    for text in ("{not json", json.dumps({"format": GRAPH_FORMAT, "schema_version": 1, "nodes": {}}), json.dumps({"format": "other", "nodes": []})):
        path = tmp_path / "ca_0.json"
        path.write_text(text)
        refused = _outcome(load_graph_nodes, path)
        assert isinstance(refused, str) and _outcome(load_graph_columns, path) == refused


def test_a_diff_from_columns_equals_the_diff_from_nodes(tmp_path):
    def node(name: str, args: str = "", call: int | None = None, **extra) -> GraphNode:
        origin = AutogradNodeRef(call, f"Op{call}") if call is not None else None
        return GraphNode(name=name, op="call_function", target="_operator.getitem" if name.startswith("getitem") else f"ops.Op{call}", args=args, origin=origin, **extra)

    old = [GraphNode("inputs", "placeholder", "inputs"), node("getitem", "%inputs, 0", shape=[2, 2]), node("op1", "[%getitem]", 1), node("getitem_1", "%op1, 0", 1)]
    new = [*old[:2], node("op2", "[%getitem]", 2, dtype="float16"), node("getitem_5", "%op2, 0", 2), node("op1", "[%getitem_5]", 1), node("getitem_6", "%op1, 0", 1)]
    paths = [_write(tmp_path / f"ca_{i}.json", [graph_node_to_dict(n) for n in g]) for i, g in enumerate((old, new))]
    from_columns = diff_graphs(*(load_graph_columns(p) for p in paths))
    from_nodes = diff_graphs(*(load_graph_nodes(p) for p in paths))
    assert from_columns == from_nodes
    assert from_columns.summary.inserted == 2 and from_columns.summary.autograd_nodes_added == ["Op2 (NodeCall 2)"]


@pytest.mark.slow
def test_recorded_graphs_diff_the_same_from_columns(record_run):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    files = sorted((run.path / "ca" / "graphs").glob("ca_*.json"))
    assert len(files) >= 2
    columns = [load_graph_columns(f) for f in files]
    nodes = [load_graph_nodes(f) for f in files]
    assert columns == [graph_columns(n, c.symbols) for n, c in zip(nodes, columns)]
    for i in range(len(files) - 1):
        diff = diff_graphs(columns[i], columns[i + 1])
        from_nodes = diff_graphs(nodes[i], nodes[i + 1])  # without the symbols' values: op_loop's shapes are numbers
        assert (diff.entries, diff.summary) == (from_nodes.entries, from_nodes.summary)
        assert not diff.identical


def test_counter_stripping_is_the_regex():
    names = ["getitem_7", "getitem", "add_12", "x_", "_5", "12", "a_1_2", "aot3_mul_1", "a_\u0663", "a_\u06635", "b\u00b2", "", "_", "x_0", "\u0663_\u0663"]
    assert _counter_stripped(names) == [_FX_COUNTER.sub("", name) for name in names]
    assert _counter_stripped(["getitem_7", "x_1\n"]) == ["getitem", "x\n"]  # a name with a newline: one by one
    assert _counter_stripped([]) == [] and _counter_stripped([""]) == [""]
