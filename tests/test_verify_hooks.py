"""`--verify` on backward hooks: a patch keeps what the job does (the hook still runs, counted in
every re-run), and a hook that compiled autograd traces and Dynamo recompiles is fixed by running
it eagerly. Counts are torch's own in each re-run; timings are not asserted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.verify.verification import hook_calls

pytestmark = pytest.mark.slow


def _copy(record_run, tmp_path: Path, script: str) -> Path:
    recorded = record_run(script, modes="ca", backend="eager")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    return Path(shutil.copytree(recorded.path, tmp_path / "run"))  # the verification writes into the run


def _verify(run: Path) -> dict:
    proc = cagtool_in_process("recompiles", str(run), "--explain", "--verify", "--repeat", "1", "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)["verification"]


def test_a_one_line_conditional_hook_moves_without_its_condition_and_still_runs(record_run, tmp_path):
    """`if step == 2: model.weight.register_hook(...)` on one line, with `step` defined before the
    loop: moved whole, the condition would be tested once (step 0) and the hook never registered,
    with recompiles 1 -> 0 all the same. Only the registration moves, and the re-runs count the
    hooks run: 3 (steps 2-4) in the baseline, 5 with the patch (it also runs on steps 0-1)."""
    run = _copy(record_run, tmp_path, "conditional_hook.py")
    assert hook_calls(load_run(run).modes["ca"]) == 3
    v = _verify(run)
    [fix] = v["fixes"]
    assert fix["fix"] == "hook-before-loop", fix
    diff = fix["patch"]["diff"]
    assert "+    model.weight.register_hook(lambda grad: grad.clamp(-1.0, 1.0))\n" in diff
    assert "-        if step == 2: model.weight.register_hook(" in diff and "+    if step" not in diff
    assert v["baseline"]["hook_calls"] == [3] and fix["measured"]["hook_calls"] == [5]
    assert v["baseline"]["ca_recompiles"] == [1] and fix["measured"]["ca_recompiles"] == [0]
    assert fix["verdict"] == "verified", fix["reasons"]
    assert "hooks run 3 -> 5: the hook now also runs on the steps before it was registered" in fix["reasons"]
    text = cagtool_in_process("summary", str(run)).stdout
    assert "CA graphs 2 -> 1, hooks run 3 -> 5" in text


def test_a_fix_that_drops_hook_calls_is_harmful():
    """The verdict reads the hooks run: fewer than the baseline's is a change to the job."""
    from cagtool.verify.verification import HARMFUL, Side, judge

    def side(hooks: int, recompiles: int) -> Side:
        return Side("x", "x", "finished", [recompiles], [0], [1 + recompiles], None, None, None, 0, None, 0.0, hook_calls=[hooks])

    verdict, reasons = judge(side(3, 1), side(0, 0), None, True)
    assert verdict == HARMFUL and "hooks run 3 -> 0: the fix dropped hook calls the job makes" in reasons


def test_graph_breaks_a_fix_adds_are_said_beside_its_verdict():
    """A fix that trades recompiles for graph breaks (a hook run eagerly): the breaks are named, the
    verdict stays the counts' and the step time's."""
    from cagtool.verify.verification import VERIFIED, Side, judge

    def side(recompiles: int, breaks: int) -> Side:
        return Side("x", "x", "finished", [recompiles], [0], [1 + recompiles], None, None, None, 0, None, 0.0, graph_breaks=[breaks])

    verdict, reasons = judge(side(3, 0), side(0, 2), None, True)
    assert verdict == VERIFIED and "graph breaks (summed over compiles) 0 -> 2: compiled code split where it breaks, the step time says at what cost" in reasons


def test_a_traced_hook_that_appends_to_a_list_runs_eagerly_and_stops_recompiling(record_run, tmp_path):
    """`logits.register_hook(lambda g: grad_norms.append(g.norm().item()))`: compiled autograd
    traces the hook, Dynamo guards on len(grad_norms) and recompiles the hook every backward until
    recompile_limit (8). No size fix applies (ca-dynamic is not offered); the patch passes
    torch._dynamo.disable(hook): Dynamo recompiles 8 -> 0, the hook runs on every backward (12)."""
    run = _copy(record_run, tmp_path, "grad_norm_hook.py")
    v = _verify(run)
    [fix] = v["fixes"]
    assert fix["fix"] == "hook-dynamo-disable" and fix["who"] == "your code"
    assert ("+        logits.register_hook(torch._dynamo.disable(lambda g: grad_norms.append(g.norm().item())))\n"
            in fix["patch"]["diff"])
    assert v["baseline"]["dynamo_recompiles"] == [8] and fix["measured"]["dynamo_recompiles"] == [0]
    assert v["baseline"]["hook_calls"] == fix["measured"]["hook_calls"] == [12]
    assert fix["verdict"] == "verified" and fix["numerics_agree"] is True, fix["reasons"]
    # torch's graph_break counter moves with the fix (each recompile of the traced hook counted its
    # breaks: 10 -> 2 on torch 2.13): said beside the verdict, as torch counts it.
    [before], [after] = v["baseline"]["graph_breaks"], fix["measured"]["graph_breaks"]
    assert before != after and any(r.startswith(f"graph breaks (summed over compiles) {before} -> {after}, new at ") and "gone from grad_norm_hook.py:" in r for r in fix["reasons"]), fix["reasons"]
    assert (ROOT / "sample_scripts" / "grad_norm_hook.py").read_text().count("torch._dynamo.disable") == 0
    line = cagtool_in_process("summary", str(run)).stdout.splitlines()[1]
    assert line.startswith("what to do: apply fix hook-dynamo-disable") and "(recompiles 8 -> 0, compile " in line, line
