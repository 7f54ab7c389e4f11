"""Changed sizes in torch's numbers: "Cache miss due to N changed tensor shapes (total of M)" is N
sizes that changed (and became dynamic) among M dynamic sizes; each changed size's earlier value
is the constant the previous graph of the same structure held in its place."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import msgspec
import pytest

from conftest import ROOT, cagtool_cmd, cagtool_in_process

from cagtool.torch_text import parse_miss
from cagtool.record.graph_file import GraphNode
from cagtool.record.schema import AutogradNodeRef, CacheMissEvent, ChangedSize
from cagtool.report.changed_sizes import earlier_values

SCRIPT = Path(__file__).parents[2] / "scripts" / "sizes_dynamic_in_two_rounds.py"


def test_torchs_n_is_the_changed_count_and_its_total_the_dynamic_sizes():
    parsed = parse_miss("Cache miss due to 2 changed tensor shapes (total of 3): sizes[1], sizes[2]")
    assert (parsed["total_changed"], parsed["dynamic_sizes"], parsed["indices"]) == (2, 3, [1, 2])


def test_records_without_dynamic_sizes_still_count_torchs_n():
    """Older records hold torch's M in total_changed and list every changed index."""
    old = CacheMissEvent(seq=1, t=0.0, ca_id=3, compile_id="!3", step=4, miss_kind="changed_shapes", message="",
                         changed_sizes=[ChangedSize(index=1), ChangedSize(index=2)], total_changed=3)
    assert old.changed_count == 2


def _node(name: str, target: str, args: str, call: int | None = None, owner: str = "SumBackward0") -> GraphNode:
    return GraphNode(name=name, op="call_function", target=target, args=args,
                     origin=AutogradNodeRef(call, owner) if call is not None else None)


def test_earlier_values_are_the_constants_the_previous_graph_held():
    previous = [
        _node("getitem", "_operator.getitem", "%inputs, 0", 0, "torch::autograd::GraphRoot"),
        _node("getitem_1", "_operator.getitem", "%sizes, 0", 1),  # already dynamic: not a change
        _node("sum_backward0", "torch._dynamo.compiled_autograd.ops.SumBackward0", "[%getitem], [True], [%getitem_1, 4, 7]", 1),
    ]
    current = [
        _node("getitem", "_operator.getitem", "%inputs, 0", 0, "torch::autograd::GraphRoot"),
        _node("getitem_1", "_operator.getitem", "%sizes, 0", 1),
        _node("getitem_2", "_operator.getitem", "%sizes, 1", 1),
        _node("getitem_3", "_operator.getitem", "%sizes, 2", 1),
        _node("unwrap", "torch._dynamo.external_utils.unwrap_maybe_dynamic_int", "%getitem_3", 1),
        _node("sum_backward0", "torch._dynamo.compiled_autograd.ops.SumBackward0", "[%getitem], [True], [%getitem_1, %getitem_2, %unwrap]", 1),
    ]
    assert earlier_values(previous, current) == {1: 4, 2: 7}


@pytest.mark.slow
def test_a_run_whose_sizes_become_dynamic_in_two_rounds(tmp_path):
    """Round one: the batch (2 -> 3) makes 5 sizes dynamic. Round two: the features (4 -> 6) make
    3 more, torch says "3 changed tensor shapes (total of 8)": cagtool says 3, with 4 -> 6."""
    out = tmp_path / "r"
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"} | {"CI": "true"}
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(out), str(SCRIPT)),
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    messages = [json.loads(line)["message"] for line in (out / "ca" / "events.jsonl").read_text().splitlines() if '"ca_cache_miss"' in line]
    assert messages[-1].startswith("Cache miss due to 3 changed tensor shapes (total of 8): "), messages
    proc = cagtool_in_process("summary", str(out), "--format", "json", env={"CI": "true"})
    misses = [m for m in json.loads(proc.stdout)["cache_misses"] if m["kind"] == "changed_shapes"]
    assert [(m["changed_count"], m["dynamic_sizes"]) for m in misses] == [(5, 5), (3, 8)]
    assert [(s["previous"], s["value"]) for s in misses[0]["changed_sizes"]] == [(2, 3)] * 5
    assert [(s["index"], s["previous"], s["value"]) for s in misses[1]["changed_sizes"]] == [(4, 4, 6), (6, 4, 6), (7, 4, 6)]
    proc = cagtool_in_process("summary", str(out), env={"CI": "true"})
    assert "3 changed sizes (torch: total of 8): sizes[4=4->6, 6=4->6, 7=4->6]" in proc.stdout  # earlier value, then new
    proc = cagtool_in_process("recompiles", str(out), env={"CI": "true"})
    # read by MmBackward0 at NodeCall 4 in the graph's code (torch's origins name it AccumulateGrad's)
    assert "3 changed sizes: sizes[4,6-7] of MmBackward0 4->6" in proc.stdout


def test_a_miss_of_many_nodes_names_the_first_and_counts_the_rest():
    """A batch size in every node of a large model (244 sizes in 169 nodes of a VGG-in-the-loss job):
    the summary's line names the first nodes and counts the others, where it ran to 10,525 characters."""
    from cagtool.record.schema import CacheMissEvent, ChangedSize
    from cagtool.report.summary import MISS_NODES_SHOWN, miss_text

    sizes = [ChangedSize(index=i, value=1, previous=2, node=f"Node{i}Backward0", node_call=i + 1) for i in range(20)]
    miss = CacheMissEvent(seq=1, t=0.0, ca_id=1, compile_id="!1", step=3, miss_kind="changed_shapes", message="m",
                          changed_sizes=sizes, total_changed=20, dynamic_sizes=20)
    text = miss_text(miss)
    assert text.startswith("20 changed sizes (torch: total of 20): sizes[0=2->1] of Node0Backward0 (NodeCall 1); ")
    assert f"Node{MISS_NODES_SHOWN - 1}Backward0" in text and f"Node{MISS_NODES_SHOWN}Backward0" not in text
    assert text.endswith(f"... and the sizes of {20 - MISS_NODES_SHOWN} more nodes (cagtool recompiles --explain)")
    assert len(text) < 500


def test_a_graph_that_reads_fewer_sizes_than_torch_holds_dynamic_is_read_by_the_numbering_its_capture_recorded():
    # "2 changed tensor shapes (total of 4)" and a graph whose code reads 2 sizes (the padded
    # sequences of tests/scripts/padded_sequences.py): torch numbered the 2 it reads anew, so its
    # sizes[0] need not be the miss's sizes[0]. The capture records which it kept (used_sizes):
    # the code's sizes[k] is the miss's sizes[used_sizes[k]]. Without it (an older record) a graph
    # that reads fewer is not read by index; one that reads all 4 numbers them as the miss.
    from cagtool.record.schema import CAGraphEvent
    from cagtool.report.changed_sizes import miss_numbering

    miss = CacheMissEvent(seq=1, t=0.0, ca_id=2, compile_id="!2", step=2, miss_kind="changed_shapes", message="",
                          changed_sizes=[ChangedSize(index=2), ChangedSize(index=3)], total_changed=2, dynamic_sizes=4)

    def graph(num_sizes: int, used: list[int] | None = None) -> CAGraphEvent:
        return CAGraphEvent(seq=2, t=0.0, ca_id=2, compile_id="!2", step=2, node_count=10, op_histogram={}, autograd_nodes=[],
                            aot_ids=[], hooks=[], num_sizes=num_sizes, capture_s=0.01, code_file="graphs/ca_2.py",
                            nodes_file="graphs/ca_2.json", used_sizes=used)
    assert miss_numbering(miss, graph(2)) is None and miss_numbering(miss, graph(4)) == []
    assert miss_numbering(msgspec.structs.replace(miss, dynamic_sizes=None), graph(2)) == []  # an older record: as before
    assert miss_numbering(miss, graph(2, [2, 3])) == [2, 3] and miss_numbering(miss, graph(2, [0, 1])) == []
