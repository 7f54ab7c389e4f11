"""The CA graph's autograd-node list names the parameter each AccumulateGrad accumulates into, on a
recorded real job (grad_accumulation.py: a compiled nn.Sequential(Linear, ReLU, Linear), so the
names drop torch.compile's `_orig_mod.` and read as in eager)."""

from __future__ import annotations

import pytest

from cagtool.record.loader import load_run
from cagtool.record.schema import CAGraphEvent

PARAMS = ["0.bias", "0.weight", "2.bias", "2.weight"]


@pytest.mark.slow
def test_each_accumulate_grad_names_its_parameter_and_nothing_else_is_named(record_run):
    run = record_run("grad_accumulation.py", modes="ca")
    assert run.returncode == 0, run.stderr
    mode = load_run(run.path).mode("ca")
    graphs = mode.of(CAGraphEvent)
    assert len(graphs) == 2  # the first backward, and AccumulateGrad's .grad None -> defined
    for graph in graphs:
        accumulate = [ref for ref in graph.autograd_nodes if ref.name.endswith("AccumulateGrad")]
        assert sorted(ref.param for ref in accumulate) == PARAMS
        assert all(ref.param is None for ref in graph.autograd_nodes if ref not in accumulate)
        # Each NodeCall keeps the name torch stamped on its own graph nodes (the graph file).
        stamped = {}
        for node in mode.graph_nodes(graph.ca_id):
            if node.origin is not None:
                stamped.setdefault(node.origin.node_call, set()).add(node.origin.name)
        assert all(stamped[ref.node_call] == {ref.name} for ref in graph.autograd_nodes)
