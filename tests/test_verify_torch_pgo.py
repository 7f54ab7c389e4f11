"""`torch-pgo` is torch's own PGO suggestion applied as torch words it: TORCH_COMPILE_DYNAMIC_SOURCES
and nothing else. Started with compiled autograd dynamic too (`cagtool run --dynamic`, which is
`ca-dynamic`), it paid ca-dynamic's cost on the jobs where that is harmful: an HF Trainer job with
gradient accumulation (compile 22 s -> 143 s) and a reentrant checkpoint (recompiles went up), where
the same list alone was verified. A list naming the same inputs as dynamic-sources is one re-run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import cagtool_in_process

from cagtool.report.recompiles.explain import CAUSE_DYNAMO_CA_GRAPH, CAUSE_DYNAMO_FRAME, CAUSE_SHAPES, Cause, Explanation
from cagtool.verify.fixes import fixes_for
from cagtool.verify.verification import rerun_key


def _pgo(sources: str) -> str:
    return ("PGO detected a recompilation due to dynamic shapes. To reduce shape recompilations by compiling dynamically to start, "
            f"set environment variable TORCH_COMPILE_DYNAMIC_SOURCES=\"{sources}\"")


def _frame(number: int, tensor: str) -> Cause:
    guard = f"tensor '{tensor}' size mismatch at index 0. expected 8, actual 7"
    return Cause(CAUSE_DYNAMO_FRAME, [], number=number, facts={"failures": [("0/1", guard)], "guard": guard, "kind": "size"})


def _explanation(*causes: Cause) -> Explanation:
    return Explanation(None, [], list(causes))  # type: ignore[arg-type]


def test_torchs_list_is_applied_alone_and_answers_what_it_names():
    # The shape loop: torch names the CA graph's size inputs; its advice is the variable alone, which
    # answers Dynamo's recompile of that graph (folded into the shapes cause), never with --dynamic.
    shapes = _explanation(Cause(CAUSE_SHAPES, [], number=1))
    fixes = {f.name: f for f in fixes_for(shapes, pgo_suggestion=_pgo("L['inputs'][1],L['sizes'][0],L['sizes'][1]"))}
    assert fixes["torch-pgo"].run_flags == () and fixes["torch-pgo"].causes == (1,)
    assert fixes["torch-pgo"].env == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['inputs'][1],L['sizes'][0],L['sizes'][1]"}
    assert fixes["torch-pgo"].title == "torch's own PGO suggestion, as it words it"
    assert fixes["ca-dynamic"].run_flags == ("--dynamic",)
    # A forward's inputs only: the compiled-autograd cache miss (#3) is ca-dynamic's, not torch's list's.
    mixed = _explanation(_frame(1, "x"), Cause(CAUSE_DYNAMO_CA_GRAPH, [], number=2, facts={"kind": "size"}), Cause(CAUSE_SHAPES, [], number=3))
    fixes = {f.name: f for f in fixes_for(mixed, pgo_suggestion=_pgo("L['x'],L['saved_tensors'][0]"))}
    assert fixes["torch-pgo"].causes == (1,) and fixes["torch-pgo"].run_flags == ()
    assert fixes["ca-dynamic"].causes == (2, 3)
    # Under dynamic=False the forward's input is absent from torch's list: nothing of it to verify.
    assert [f.name for f in fixes_for(_explanation(_frame(1, "x")), pgo_suggestion=_pgo("L['y']"))] == ["dynamic-sources"]


def test_a_forged_list_or_tensor_name_never_reaches_a_re_runs_environment():
    """torch 2.13 reads each item of TORCH_COMPILE_DYNAMIC_SOURCES as a regular expression (`re.match`
    for every source Dynamo builds): a forged record's `(((.+)+)+)+!`, in its PGO words or in a
    guard's tensor name, kept a fix's re-run compiling for minutes. Neither is offered; torch's own
    names are."""
    redos = "(((.+)+)+)+!"
    shapes = _explanation(Cause(CAUSE_SHAPES, [], number=1))
    assert "torch-pgo" not in {f.name for f in fixes_for(shapes, pgo_suggestion=_pgo(f"L['sizes'][0],{redos}"))}
    assert "torch-pgo" not in {f.name for f in fixes_for(_explanation(_frame(1, "x")), pgo_suggestion=_pgo(f"L['x'],L['{redos}']"))}
    assert [f.name for f in fixes_for(_explanation(_frame(1, f"L['[]{redos}']")))] == []
    assert [f.name for f in fixes_for(_explanation(_frame(1, "x.*")))] == []
    listed = "L['self']._modules['layers.0']._parameters['weight'],L['args'][0],G['cache'].k"
    fixes = {f.name: f for f in fixes_for(shapes, pgo_suggestion=_pgo(listed + ",L['sizes'][0]"))}
    assert fixes["torch-pgo"].env == {"TORCH_COMPILE_DYNAMIC_SOURCES": listed + ",L['sizes'][0]"}
    named = fixes_for(_explanation(_frame(1, "self._modules['0']._parameters['weight']")))
    assert named[0].env == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['self']._modules['0']._parameters['weight']"}


def test_the_same_inputs_in_another_order_are_one_re_run():
    run = SimpleNamespace(meta=SimpleNamespace(options={"backend": "eager"}, target={"kind": "script", "name": "job.py"},
                                               target_argv=["job.py"]))
    fixes = {f.name: f for f in fixes_for(_explanation(_frame(1, "x")), pgo_suggestion=_pgo("L['saved_tensors'][0],L['args'][0],L['x']"))}
    pgo, sources = fixes["torch-pgo"], fixes["dynamic-sources"]
    assert pgo.env["TORCH_COMPILE_DYNAMIC_SOURCES"] != sources.env["TORCH_COMPILE_DYNAMIC_SOURCES"]
    assert rerun_key(run, "ca", 1, pgo) == rerun_key(run, "ca", 1, sources)  # type: ignore[arg-type]


@pytest.mark.slow
def test_torchs_advice_is_verified_where_compiled_autograd_started_dynamic_is_harmful(record_run, tmp_path):
    """tests/scripts/reentrant_checkpoint_length.py (the sequence grows at step 4 under a reentrant
    checkpoint; recorded once per session): ca-dynamic's re-run recompiles more than the baseline,
    torch's list alone (the inputs dynamic-sources names: one re-run for both) recompiles less.
    Recorded by hand with both, as torch-pgo ran before: 3 recompiles and compile 2.8 s -> 7.8 s,
    against 2 and 2.0 s with the list alone."""
    recorded = record_run("../tests/scripts/reentrant_checkpoint_length.py")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = Path(shutil.copytree(recorded.path, tmp_path / "run"))  # the verification writes into the run
    proc = cagtool_in_process("recompiles", str(run), "--explain", "--verify", "--repeat", "1", "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = json.loads(proc.stdout)["verification"]
    fixes = {f["fix"]: f for f in v["fixes"]}
    assert set(fixes) == {"ca-dynamic", "torch-pgo", "dynamic-sources"}
    pgo, sources, dynamic = fixes["torch-pgo"], fixes["dynamic-sources"], fixes["ca-dynamic"]
    assert pgo["run_flags"] == [] and set(pgo["env"]) == {"TORCH_COMPILE_DYNAMIC_SOURCES"}
    assert sources["same_as"] == "torch-pgo"

    def total(side: dict) -> int:
        return side["ca_recompiles"][0] + side["dynamo_recompiles"][0]

    base = total(v["baseline"])
    assert total(dynamic["measured"]) > base and dynamic["verdict"] == "harmful", dynamic["reasons"]
    assert total(pgo["measured"]) < base and pgo["verdict"] == "verified", pgo["reasons"]
    # Its fewer compiles of the checkpoint's break are no break removed from the code.
    [breaks] = [r for r in pgo["reasons"] if r.startswith("graph breaks")]
    assert breaks.endswith("at the same site: the code breaks where it did, compiled fewer times"), breaks


def test_a_long_list_in_a_re_runs_environment_is_cut_in_its_progress_line():
    """A CA graph's torch-pgo list names hundreds of sources (pytorch/examples' fast_neural_style:
    203): the progress line says the first few and the count, as the explanation does, not a
    4,000-character line per re-run; a short list is said whole."""
    from cagtool.verify.verification import _value_shown

    long = ",".join(f"L['inputs'][{i}]" for i in range(203))
    assert _value_shown(long) == "L['inputs'][0],L['inputs'][1],L['inputs'][2],L['inputs'][3],L['inputs'][4],L['inputs'][5],... (203 in all)"
    assert _value_shown("L['x'],L['sizes'][0]") == "L['x'],L['sizes'][0]"
