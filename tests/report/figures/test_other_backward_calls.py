"""A step's other backward calls' first graphs (a GAN's generator after its discriminator): captured
once each, not counted as CA recompiles (report.figures.metrics.CAMisses.other_calls)."""

from __future__ import annotations

from cagtool.record.schema import MISS_CHANGED_SHAPES, MISS_NEW_NODE, CacheMissEvent, CAGraphEvent, SourceRef
from cagtool.report.figures.metrics import ca_misses, other_backward_calls


def _miss(ca_id: int, step: int, line: int | None, kind: str = MISS_NEW_NODE) -> CacheMissEvent:
    call = SourceRef(file="/job/train.py", line=line, how="backward_call") if line is not None else None
    return CacheMissEvent(seq=ca_id, t=0.0, ca_id=ca_id, compile_id=f"!{ca_id}", step=step, miss_kind=kind, message="",
                          node="AccumulateGrad" if ca_id == 1 else None, backward_call=call)


def test_the_first_graph_of_each_other_backward_call_of_the_first_step_is_told_apart():
    # !0 errD_real (line 10), !1 errD_fake (line 12, the .grad warm-up), !2 errG (line 20), then a
    # ragged last batch recaptures each at step 9: those are recompiles.
    misses = [_miss(0, 0, 10), _miss(1, 0, 12), _miss(2, 0, 20), _miss(3, 9, 10, MISS_CHANGED_SHAPES), _miss(4, 9, 20, MISS_CHANGED_SHAPES)]
    assert other_backward_calls(misses, 0) == {1, 2}
    assert other_backward_calls(misses, 0, skip=frozenset({1})) == {2}
    # A line first seen at a later step (an evaluation's backward at step 5) is a recompile, counted.
    assert other_backward_calls([_miss(0, 0, 10), _miss(1, 5, 30)], 0) == set()
    # Lines not known from a capture on: nothing after it is told apart.
    assert other_backward_calls([_miss(0, 0, 10), _miss(1, 0, None), _miss(2, 0, 20)], 0) == set()
    assert other_backward_calls([_miss(0, 0, None), _miss(1, 0, 20)], 0) == set()


def test_ca_misses_leaves_them_out_of_the_recompiles():
    misses = [_miss(0, 0, 10), _miss(2, 0, 20), _miss(3, 9, 10, MISS_CHANGED_SHAPES)]
    counted = ca_misses([], misses)  # no graphs: nothing is counted at all
    assert counted.total == 0
    graphs = [CAGraphEvent(seq=i, t=0.0, ca_id=i, compile_id=f"!{i}", step=m.step, node_count=1, op_histogram={}, autograd_nodes=[],
                           aot_ids=[], hooks=[], num_sizes=0, capture_s=0.0, code_file="", nodes_file="") for i, m in zip((0, 2, 3), misses)]
    counted = ca_misses(graphs, misses)
    assert (counted.total, counted.grad_warmup, counted.other_calls, counted.recompiles) == (2, 0, 1, 1)
