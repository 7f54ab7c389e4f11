"""What `summary`'s headline, `recompiles --explain`'s group headers and `gate --max-recompiles`
count, read off real recordings (`cagtool run --modes ca --backend eager`): the same figures, in
words that say what each counts, and fixes that remove the recompile they are given for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import cli_in_process

pytestmark = pytest.mark.slow


def _recorded(record_run, script: str, *args: str) -> Path:
    run = record_run(script, *args)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


def _explained(run: Path) -> dict:
    code, out, err = cli_in_process("recompiles", str(run), "--explain", "--format", "json")
    assert code == 0, err
    return json.loads(out)["modes"]["ca"]


def _headline(run: Path) -> dict:
    code, out, err = cli_in_process("summary", str(run), "--format", "json")
    assert code == 0, err
    return json.loads(out)["headline"]


def _gate_line(run: Path, limit: str = "ca:0") -> str:
    code, out, err = cli_in_process("gate", str(run), "--max-recompiles", limit)
    text = " ".join((out + err).split())
    assert code == 1, text
    return text


def test_a_failed_capture_is_counted_alike_and_named_in_the_headline_as_the_explanation_names_it(record_run):
    """tests/scripts/ca_failed_capture_then_misses.py: a capture that raises twice, then a model's
    backward from a new line, then a batch that grows. The headline named the recapture "no reason
    recorded" and the new line's first graph "the backward's autograd graph changed", which the
    explanation says it is not; the new line's group counted "1 capture" among 3 recompiles."""
    run = _recorded(record_run, "../tests/scripts/ca_failed_capture_then_misses.py")
    mode = _explained(run)
    causes = mode["explanation"]["causes"]
    assert mode["counts"]["ca_recompiles"] == 3 and [c["count"] for c in causes] == [1, 1, 1]
    for cause in causes:  # every group header counts recompiles, as the totals do
        assert re.search(r"\(1 recompile\b", cause["title"]), cause["title"]
    assert "A backward called from a new line: its first graph (1 recompile, a first capture)" in causes[1]["title"]
    headline = _headline(run)["text"]
    assert headline.startswith("3 CA recompiles, from 3 causes: a recapture after a compiled-autograd capture that raised at step 1"), headline
    assert "a backward called from a new line, its graph's first capture at step 2" in headline
    assert "autograd graph changed" not in headline and "no reason recorded" not in headline
    gate = _gate_line(run)
    assert "CA recompiles 3 > 0 allowed (+3): a recapture after a compiled-autograd capture that raised" in gate
    assert "and 2 more causes" in gate
    code, out, _ = cli_in_process("summary", str(run), "--format", "json")
    assert json.loads(out)["modes"]["ca"]["ca_recompiles"] == 3


def test_one_thread_count_change_is_one_cause_and_its_fix_is_concrete(record_run):
    """sample_scripts/unexpected_causes.py: torch.set_num_threads(1) at step 1 fails the same guard
    of the compiled forward and of the compiled-autograd graph's code: one change, counted as two
    causes ("4 Dynamo recompiles, from 4 causes" for three changes), with a fix ("or compile one
    function per setting") that recompiles all the same. The evaluation's fixes said to compile it
    separately: a second torch.compile of the same model shares its cache and recompiles too."""
    run = _recorded(record_run, "unexpected_causes.py")
    mode = _explained(run)
    causes = mode["explanation"]["causes"]
    assert sum(c["count"] for c in causes) == 4
    first, second = causes[0], causes[1]
    assert first["guard_kind"] == second["guard_kind"] == "global_state"
    assert first["caused_by"] is None and second["caused_by"] == 1 and first["consequences"] == [2]
    assert second["title"].startswith("Caused by #1, the same change: Dynamo recompiled the code of compiled-autograd graph !0")
    assert first["fix"] == ["Call torch.set_num_threads(n) once, before the first compiled call, and never again (or stop "
                            "the library that resets it each step): each new thread count recompiles every compiled frame and graph."]
    assert second["fix"] == ["Fixing #1 removes this one too: the same change made both."]
    said = json.dumps(mode)
    assert "one function per setting" not in said and "separately" not in said
    code, text, _ = cli_in_process("recompiles", str(run), "--explain")
    assert code == 0
    text = " ".join(text.split())
    assert "Fix (train/eval): evaluate with the uncompiled module (`compiled._orig_mod(x)`" in text
    assert "Fix (grad mode): evaluate with the uncompiled module (`compiled._orig_mod(x)` under torch.no_grad)" in text
    headline = _headline(run)["text"]
    assert headline.startswith("4 Dynamo recompiles, from 3 causes: global state changed (`num_threads`) at step 1"), headline


def test_the_gate_on_ca_recompiles_names_only_causes_with_ca_recompiles(record_run):
    """sample_scripts/recompile_storm.py: 5 CA recompiles from the growing backward and 4 Dynamo
    recompiles of the forward for `depth`. `gate --max-recompiles ca:0` named the first and
    "1 more cause", the Dynamo one, which has no CA recompile. Its fix said to call "the call that
    needs `depth`" through torch.compiler.disable: `depth` is a loop bound, no call."""
    run = _recorded(record_run, "recompile_storm.py")
    gate = _gate_line(run)
    assert "CA recompiles 5 > 0 allowed (+5): the backward's autograd graph changed at steps 1-5 (recompile_storm.py:25)" in gate
    assert "more cause" not in gate
    causes = _explained(run)["explanation"]["causes"]
    assert [(c["code"], c["count"]) for c in causes] == [("graph_structure", 5), ("dynamo_guard_failure", 4)]
    [fix] = causes[1]["fix"]
    assert fix.startswith("`depth` is a loop's bound in the compiled code: Dynamo unrolls the loop, so each value of `depth` is "
                          "another graph, compiled anew. Run the loop a fixed number of times"), fix
    assert "torch.compiler.disable" not in fix
    assert _headline(run)["text"].startswith("5 CA recompiles and 4 Dynamo recompiles, from 2 causes:")


def test_a_float_scale_is_told_to_become_a_tensor_at_the_call(record_run):
    """sample_scripts/scalar_per_step.py (compiled with dynamic=False): the fix was torch's general
    "if it only feeds shapes, Dynamo makes it dynamic after one change", not true here; passed as
    torch.tensor(scale) at the call, the forward compiles once (`recompiles --verify`'s scalar-to-tensor)."""
    run = _recorded(record_run, "scalar_per_step.py", "4", "aot_eager")
    root = _explained(run)["explanation"]["causes"][0]
    assert root["guard_kind"] == "value" and root["count"] == 3
    [fix] = root["fix"]
    assert fix.startswith("Pass `scale` as a tensor where the compiled code is called (scalar_per_step.py:28 "
                          "`loss = model(x, scale).sum()`): `torch.tensor(scale)` in place of `scale`."), fix
    assert "only feeds shapes" not in fix


def test_hook_recompiles_name_their_hooks_in_the_headline_and_gate(record_run):
    """The headline said "a backward hook was added or removed ... (the backward's line)": it names
    the hooks now, a lambda by its line (its registration), a function by its name."""
    lam = _recorded(record_run, "hook_added_midrun.py")
    assert _headline(lam)["text"].startswith(
        "1 CA recompile, from 1 cause: a backward hook registered on step 2 (the lambda at hook_added_midrun.py:16);")
    assert "CA recompiles 1 > 0 allowed (+1): a backward hook registered on step 2 (the lambda at hook_added_midrun.py:16)" in _gate_line(lam)
    named = _recorded(record_run, "../tests/scripts/hooks_joining_late.py")
    headline = _headline(named)["text"]
    assert headline.startswith("6 CA recompiles, from 2 causes: backward hooks registered on steps 2-3, 5-7 "
                               "(`clip_grad`, `decay_grad`, `scale_grad`) and a backward hook registered on step 4 "
                               "(the lambda at hooks_joining_late.py:31)"), headline
