"""The tutorial's facts, asserted on records that `cagtool run` made of the sample scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.record.schema import CacheMissEvent, CAGraphEvent, FindingEvent, StepEvent
from cagtool.report.figures.metrics import mode_metrics

pytestmark = pytest.mark.slow  # every test reads a real `cagtool run` record


def _ca(run):
    assert run.returncode == 0, run.stderr
    return load_run(run.path).modes["ca"]


def test_op_loop_new_node_misses_match_tutorial(record_run):
    ca = _ca(record_run("op_loop.py"))
    misses = ca.of(CacheMissEvent)
    assert [(m.node, m.node_call, m.key_size) for m in misses] == [
        ("torch::autograd::GraphRoot", 0, 39),
        ("SubBackward0", 2, 56),
        ("MulBackward0", 2, 71),
        ("DivBackward0", 2, 70),
    ]
    assert all(m.miss_kind == "new_node" for m in misses)
    assert [m.step for m in misses] == [0, 1, 2, 3]  # the loop's iterations over add, sub, mul, div
    assert [m.ca_id for m in misses] == [0, 1, 2, 3]
    # The source line is the user's backward call in op_loop.py.
    assert all(m.source and m.source.file.endswith("op_loop.py") and m.source.line == 12 for m in misses)
    # Counts equal torch's own counter.
    graphs = ca.of(CAGraphEvent)
    assert len(graphs) == ca.manifest.torch_counters["compiled_autograd"]["captures"] == 4
    # Each graph covers the autograd nodes NodeCall -> name, the op that changed at NodeCall 2.
    assert [(n.node_call, n.name) for n in graphs[2].autograd_nodes] == [
        (0, "torch::autograd::GraphRoot"),
        (1, "SumBackward0"),
        (2, "MulBackward0"),
        (3, "torch::autograd::AccumulateGrad"),
    ]
    assert any(n.origin is not None and n.origin.name == "MulBackward0" for n in ca.graph_nodes(2))


def test_shape_loop_one_changed_shapes_miss_then_none(record_run):
    ca = _ca(record_run("shape_loop.py"))
    misses = ca.of(CacheMissEvent)
    assert [m.miss_kind for m in misses] == ["new_node", "changed_shapes"]
    changed = misses[1]
    assert changed.step == 1 and changed.total_changed == 4  # the second iteration (size 100)
    assert [s.index for s in changed.changed_sizes] == [0, 1, 2, 3]
    assert {(s.node, s.node_call, s.value) for s in changed.changed_sizes} == {("SumBackward0", 1, 100)}
    assert len(ca.of(StepEvent)) == 3  # the third step (10 again) hits the cache
    assert ca.manifest.torch_counters["compiled_autograd"]["captures"] == 2


def test_graph_breaks_give_one_ca_graph_covering_whole_backward(record_run):
    ca = _ca(record_run("graph_breaks.py", "3"))
    graphs = ca.of(CAGraphEvent)
    assert len(graphs) == 1
    # The three AOT backward graphs of the three forward graphs are inlined into the one CA graph.
    assert len(graphs[0].aot_ids) == 3
    metrics = mode_metrics(ca)
    assert metrics.graph_breaks == 2 and metrics.forward_graphs == 3 and metrics.backward_graphs == 1
    # The same counts torch keeps: graph breaks, and unique graphs = 3 forward + 1 CA graph.
    counters = ca.manifest.torch_counters
    assert sum(counters["graph_break"].values()) == metrics.graph_breaks
    assert counters["stats"]["unique_graphs"] == metrics.forward_graphs + metrics.ca_graphs


def test_tensor_hook_appears_as_call_hook_node(record_run):
    ca = _ca(record_run("tensor_hook.py"))
    graph = ca.of(CAGraphEvent)[0]
    assert [h.hook_type for h in graph.hooks] == ["tensor_pre_hook"]
    nodes = ca.graph_nodes(graph.ca_id)
    assert any(n.hook_type == "tensor_pre_hook" and n.target.endswith("call_hook") for n in nodes)
    assert "call_hook" in (ca.path / graph.code_file).read_text()


def test_record_layout_and_summary_json(record_run):
    run = record_run("op_loop.py")
    assert (run.path / "run.json").is_file()
    mode_dir = run.path / "ca"
    for name in ("manifest.json", "events.jsonl", "graphs/ca_0.py", "graphs/ca_0.json"):
        assert (mode_dir / name).is_file(), name
    # No TORCH_TRACE unless --torch-trace asks: torch would build every structured record of every
    # compile, work the job does not do (docs/torch-internals.md)
    assert not (mode_dir / "trace").exists()
    manifest = json.loads((mode_dir / "manifest.json").read_text())
    assert manifest["schema_version"] == 3 and manifest["status"] == "finished" and manifest["exit_code"] == 0
    assert set(manifest["versions"]) == {"cagtool", "torch", "depyf", "python"}
    # The end-of-run summary names the record and the next commands.
    assert f"record: {run.path}" in run.stderr and "cagtool recompiles --explain" in run.stderr


def test_summary_command_json_rerenders_without_rerun(record_run):
    run = record_run("op_loop.py")
    proc = cagtool_in_process("summary", str(run.path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ca_graphs"] == 4 and data["exit_code"] == 0 and data["steps"] == 4
    assert data["cache_misses"][1] | {"source": None, "changed_sizes": []} == data["cache_misses"][1] | {"source": None, "changed_sizes": []}
    miss = data["cache_misses"][2]
    assert (miss["kind"], miss["node"], miss["node_call"], miss["key_size"], miss["previous_key_sizes"], miss["step"]) == ("new_node", "MulBackward0", 2, 71, [], 2)
    assert miss["source"]["line"] == 12
    for key in ("unique_graphs", "graph_breaks", "dynamo_recompiles"):
        assert key in data


def _ca_flag_outside(record_run):
    """tests/scripts/ca_flag_outside.py in ca mode through cagtool's default backend, Inductor, with
    the session's Inductor cache (--warm-cache): the job of the two tests below."""
    return record_run("../tests/scripts/ca_flag_outside.py", backend="inductor", extra=("--warm-cache",))


def test_flag_set_but_backward_outside_compiled_region_is_a_finding(record_run):
    run = _ca_flag_outside(record_run)
    ca = _ca(run)
    findings = ca.of(FindingEvent)
    assert [f.code for f in findings] == ["ca_flag_without_compiled_backward"]
    assert findings[0].source is not None and findings[0].source.file.endswith("ca_flag_outside.py")
    assert findings[0].detail == {"inside_compiled_call": False} and "outside any torch.compile'd function" in findings[0].message
    # cagtool still compiled every backward: graph 0, then graph 1 once .grad went from None to
    # defined (AccumulateGrad's key changes), then a cache hit.
    misses = ca.of(CacheMissEvent)
    assert [(m.node, m.step) for m in misses] == [("torch::autograd::GraphRoot", 0), ("torch::autograd::AccumulateGrad", 1)]
    assert len(ca.of(CAGraphEvent)) == ca.manifest.torch_counters["compiled_autograd"]["captures"] == 2
    assert len(ca.of(StepEvent)) == 3
    # `recompiles` (its table and --explain) says first that these captures are the ca mode's, not the job's.
    for args in ((), ("--explain",)):
        said = " ".join(cagtool_in_process("recompiles", str(run.path), *args).stdout.split())
        assert "note: without cagtool this job gets no compiled autograd" in said, said[:600]
        before = said.split("note: without cagtool")[0]
        assert before.startswith("mode ca:") and "CA miss" not in before and "Evidence" not in before
    headline = cagtool_in_process("summary", str(run.path)).stdout.splitlines()[0]
    assert "CA recompile (compiled autograd on by cagtool's ca mode only: the job as written gets none;" in headline, headline


def _gated_ca(run):
    """The ca mode of the session's gated `--trace-nodes --depyf` recording of op_loop.py (conftest's
    _SERVED_BY): the job finished, exit 0; the run's exit code, 1, is its gate's (4 CA graphs, 1
    allowed), which the gate's own tests read."""
    assert run.returncode == 1 and "max-ca-graphs" in run.stderr, run.stderr
    assert load_run(run.path).meta.mode_exit_codes == {"ca": 0}, run.stderr
    return load_run(run.path).modes["ca"]


def test_trace_nodes_ties_new_node_to_the_line_that_created_it(record_run):
    # With --depyf on as well: depyf points the compiled lambda's code at its decompiled dump, and
    # the backward call must still be the user's line, not the dump's.
    ca = _gated_ca(record_run("op_loop.py", extra=("--trace-nodes", "--depyf")))
    sub = [m for m in ca.of(CacheMissEvent) if m.node == "SubBackward0"][0]
    assert (sub.source.how, sub.source.line, sub.source.code) == ("node_traceback", 11, "loss = op(x, x).sum()")
    assert sub.backward_call is not None
    assert (Path(sub.backward_call.file).name, sub.backward_call.line) == ("op_loop.py", 12), sub.backward_call


def test_depyf_dump_lands_in_the_run_dir(record_run):
    ca = _gated_ca(record_run("op_loop.py", extra=("--trace-nodes", "--depyf")))
    files = [p.name for p in (ca.path / "depyf").iterdir()]
    assert any("Compiled_autograd_graph" in name for name in files), files
    assert any(name.startswith("__transformed_code_") for name in files), files  # the dumps the source skips


def test_runs_lists_recorded_runs_and_latest_is_the_default(record_run, tmp_path):
    import shutil

    run = record_run("op_loop.py")
    root = tmp_path / ".cagtool" / "runs"
    shutil.copytree(run.path, root / "op_loop-1")
    listed = cagtool_in_process("runs", cwd=tmp_path, env={"COLUMNS": "200"})
    assert listed.returncode == 0 and "op_loop-1" in listed.stdout and "ca:finished" in listed.stdout
    latest = cagtool_in_process("summary", "--format", "json", cwd=tmp_path)
    assert latest.returncode == 0, latest.stderr
    assert json.loads(latest.stdout)["ca_graphs"] == 4


def test_different_flags_context_manager_is_observed(record_run):
    """The tutorial's `_enable(torch.compile(fullgraph=True))` around backward: the script's own
    compiler compiles the CA graphs, and cagtool still records them."""
    ca = _ca(record_run("different_flags.py", "context"))
    graphs = ca.of(CAGraphEvent)
    assert len(graphs) == ca.manifest.torch_counters["compiled_autograd"]["captures"] == 2
    assert {g.compiler.split(":")[0] for g in graphs} == {"script"}
    assert len(ca.of(StepEvent)) == 3


def test_different_flags_traced_backward_is_explained(record_run):
    ca = _ca(record_run("different_flags.py", "flag"))
    assert ca.of(StepEvent) == [] and ca.of(CAGraphEvent) == []
    assert [f.code for f in ca.of(FindingEvent)] == ["backward_traced_by_dynamo"]


def test_flag_set_after_torch_compile_is_named_as_the_cause_not_a_backward_outside(record_run):
    """tests/scripts/ca_flag_outside.py after: backward runs inside the compiled step, but the flag
    was set after torch.compile(step), which reads it (test_torch_internals pins it): the finding
    said "its backward runs outside any torch.compile'd function" and told it to call backward
    inside one, which it does. It names the order, and `recompiles` tells to set the flag first."""
    run = record_run("../tests/scripts/ca_flag_outside.py", "after")
    [finding] = [f for f in _ca(run).of(FindingEvent) if f.code == "ca_flag_without_compiled_backward"]
    assert finding.detail == {"inside_compiled_call": True}
    assert "its backward runs inside a function torch.compile made before the flag was set" in finding.message
    assert "outside any" not in finding.message
    said = " ".join(cagtool_in_process("recompiles", str(run.path)).stdout.split())
    assert "calls backward inside a function torch.compile made before the flag was set" in said
    assert "To get them in the job, set the flag before torch.compile(...)" in said


def test_ca_graphs_compile_through_inductor_by_default(record_run):
    """The default backend: cagtool's compiler sends each CA graph through Inductor (the session's
    shared Inductor cache keeps this to seconds). Asserted on the ca_flag_outside job, recorded
    with Inductor for this test: its backward is compiled only by cagtool (the script's own
    torch.compile covers the forward alone), two CA graphs."""
    from cagtool.record.schema import DynamoCompileEvent

    ca = _ca(_ca_flag_outside(record_run))
    graphs = ca.of(CAGraphEvent)
    assert graphs and {g.compiler for g in graphs} == {"cagtool:inductor"}
    ca_compiles = [d for d in ca.of(DynamoCompileEvent) if d.is_ca_graph]
    assert len(ca_compiles) == len(graphs)
    assert all((d.inductor_cumulative_compile_time_s or 0) > 0 for d in ca_compiles)
    assert ca.manifest.backend == "inductor"
