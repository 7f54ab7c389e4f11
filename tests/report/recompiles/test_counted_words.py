"""What `summary`'s headline, `recompiles --explain`'s group headers and `gate --max-recompiles`
count, read off real recordings (`cagtool run --modes ca --backend eager`): the same figures, in
words that say what each counts, and fixes that remove the recompile they are given for."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd, cli_in_process

pytestmark = pytest.mark.slow


def run_cagtool(where: Path, script: Path) -> subprocess.CompletedProcess:
    """`cagtool run --modes ca --backend eager -o where/fixed script`, as a user runs it."""
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(where / "fixed"), str(script)),
                          capture_output=True, text=True, cwd=str(ROOT), timeout=900, env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


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
    backward from a new line, then a batch that grows. The recapture of the failed graph is named
    for what it is, in the same words, by the explanation's title, the headline, the summary's
    count of captures and the gate (torch gives no reason for it by design: "no reason recorded"
    read as a recording fault); the new line's first graph is not "the backward's autograd graph
    changed"; every group counts recompiles."""
    run = _recorded(record_run, "../tests/scripts/ca_failed_capture_then_misses.py")
    mode = _explained(run)
    causes = mode["explanation"]["causes"]
    assert mode["counts"]["ca_recompiles"] == 3 and [c["count"] for c in causes] == [1, 1, 1]
    for cause in causes:  # every group header counts recompiles, as the totals do
        assert re.search(r"\(1 recompile\b", cause["title"]), cause["title"]
    assert "A backward called from a new line: its first graph (1 recompile, a first capture)" in causes[1]["title"]
    assert causes[0]["title"] == "Recaptured after a failed capture (1 recompile)"
    headline = _headline(run)["text"]
    # Three one-off causes on steps 1, 2 and 4 of 0-5: no storm, but when they came.
    assert headline.startswith("3 CA recompiles in the first 5 of 6 steps, from 3 causes: a graph recaptured after a failed "
                               "capture at step 1 (the backward call at ca_failed_capture_then_misses.py:13)"), headline
    assert "a backward called from a new line, its graph's first capture at step 2" in headline
    assert "autograd graph changed" not in headline and "no reason recorded" not in headline and "storm" not in headline
    assert mode["explanation"]["alerts"] == []
    gate = _gate_line(run)
    assert "CA recompiles 3 > 0 allowed (+3): a graph recaptured after a failed capture at step 1" in gate
    assert "and 2 more causes" in gate
    code, out, _ = cli_in_process("summary", str(run), "--format", "json")
    assert json.loads(out)["modes"]["ca"]["ca_recompiles"] == 3
    code, out, _ = cli_in_process("summary", str(run))
    assert "1 recaptured after a failed capture; 2 raised before a graph" in " ".join(out.split())
    assert "for a reason torch did not log" not in out


def test_a_failed_capture_says_what_raised_where_and_what_to_do(record_run, tmp_path):
    """The recapture after the failed capture said "Fix that capture (its error reached the script)".
    The record keeps what the capture raised and the backward's line; for this kind of error (a
    backward with create_graph=True through a torch.compile'd function) the fix is to run that
    backward without compiled autograd, which the re-recorded edit shows: no capture raises and the
    recapture goes, leaving the one recompile of the batch that grows."""
    run = _recorded(record_run, "../tests/scripts/ca_failed_capture_then_misses.py")
    error = "torch.compile does not currently support higher order gradients."
    code, out, _ = cli_in_process("summary", str(run))
    assert code == 0
    assert (f"finding: the compiled-autograd capture of !0 raised RuntimeError: {error} (ca_failed_capture_then_misses.py:13)"
            in " ".join(out.split()))
    [recapture] = [c for c in _explained(run)["explanation"]["causes"] if c["code"] == "unknown"]
    line = "tests/scripts/ca_failed_capture_then_misses.py:13"
    # the graph failed twice (its recapture too), with the same error from the same line: one sentence
    assert recapture["why"][0].startswith(f"The captures of !0 and !1 (the backward called at {line}  torch.autograd.grad(f(x), x, "
                                          f'create_graph=True)) each raised RuntimeError: "{error}"'), recapture["why"][0]
    [fix] = recapture["fix"]
    assert fix == ("Fix the failed capture and this recapture goes with it: compiled autograd cannot capture a backward that "
                   "builds the graph for higher-order gradients (create_graph=True) through a torch.compile'd function: run "
                   "that backward without compiled autograd, `with torch._dynamo.compiled_autograd._disable():` around the "
                   f"call at {line}.")
    assert _headline(run)["advice"] == fix  # the error the script met comes before a one-time shape recompile
    # A record without the error (an earlier cagtool's, or an error that left the backward another way): the line, and that.
    older = tmp_path / "older"
    shutil.copytree(run, older)
    events = older / "ca" / "events.jsonl"
    events.write_text("".join(line for line in events.read_text().splitlines(keepends=True) if '"ca_capture_error"' not in line))
    [recapture] = [c for c in _explained(older)["explanation"]["causes"] if c["code"] == "unknown"]
    assert recapture["fix"] == [f"Fix the failed capture and this recapture goes with it: the capture of !0 (the backward called at "
                                f"{line}  torch.autograd.grad(f(x), x, create_graph=True)) raised an error the record does not "
                                "have (it reached the script)."]
    script = (ROOT / "tests" / "scripts" / "ca_failed_capture_then_misses.py").read_text()
    call = "        torch.autograd.grad(f(x), x, create_graph=True)\n"
    assert script.count(call) == 1
    edited = tmp_path / "ca_failed_capture_then_misses.py"
    edited.write_text(script.replace(call, "        with torch._dynamo.compiled_autograd._disable():\n    " + call))
    fixed = run_cagtool(tmp_path, edited)
    assert fixed.stdout.splitlines()[:2] == ["ok", "ok"]
    mode = _explained(tmp_path / "fixed")
    assert mode["counts"]["ca_recompiles"] == 1 and [c["code"] for c in mode["explanation"]["causes"]] == ["changed_shapes"]


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
    # the script's own call, as the module before torch.compile, in each cause's own block (said once:
    # not again among causes one may not expect)
    assert ("To skip even that compile, evaluate with the module as it was before torch.compile "
            "(`compiled._orig_mod(torch.randn(4, 8))`; `.eval()` and `.train()` on either switch the same modules") in text
    assert "(`compiled._orig_mod(torch.randn(4, 8))` under torch.no_grad())" in text and "may not expect" not in text
    # the report's list of those causes: the grad mode's reason says not which way it went, so the module alone
    from cagtool.record.loader import load_run
    from cagtool.report.recompiles.table import recompile_table
    from cagtool.report.recompiles.unexpected import unexpected_lines

    table = recompile_table(load_run(run).modes["ca"])
    listed = " ".join(" ".join(unexpected_lines(table.unexpected, table.cwd)).split())
    assert "Fix (train/eval): for an evaluation, evaluate with the uncompiled module (`compiled._orig_mod(torch.randn(4, 8))`" in listed
    assert "Fix (grad mode): evaluate with the uncompiled module (`compiled._orig_mod(...)` at the evaluation's call, grad still off there)" in listed
    headline = _headline(run)["text"]
    # The line that changed the thread count is the cause; the others' lines are the compiled calls, said so.
    assert headline.startswith("4 Dynamo recompiles in 5 steps, from 3 causes (#1, #3 and #4 in --explain; #2 follows from them): global state changed (`num_threads`) at step 1 "
                               "(`torch.set_num_threads(1)` at unexpected_causes.py:17) and submodule `1` (a Dropout) was switched "
                               "to eval() at step 3 (the compiled call at unexpected_causes.py:38)"), headline
    assert "The state was changed (from 2 to 1) at sample_scripts/unexpected_causes.py:17  torch.set_num_threads(1), before that call" in first["why"][1]
    # Three one-off causes (each cached after its one recompile) on 3 of the 4 steps after the first: no storm.
    assert "storm" not in headline and mode["explanation"]["alerts"] == []
    code, out, _ = cli_in_process("gate", str(run), "--max-recompiles", "dynamo:0", "--no-config", "--format", "json")
    [check] = [c for c in json.loads(out)["checks"] if c["check"] == "max-recompiles:dynamo"]
    assert code == 1 and check["data"]["source"]["line"] == 17, check


def test_the_gate_on_ca_recompiles_names_only_causes_with_ca_recompiles(record_run):
    """sample_scripts/recompile_storm.py: 5 CA recompiles from the growing backward and 4 Dynamo
    recompiles of the forward for `depth`. `gate --max-recompiles ca:0` named the first and
    "1 more cause", the Dynamo one, which has no CA recompile. Its fix said to call "the call that
    needs `depth`" through torch.compiler.disable: `depth` is a loop bound, no call."""
    run = _recorded(record_run, "recompile_storm.py")
    gate = _gate_line(run)
    assert "CA recompiles 5 > 0 allowed (+5): the backward's size followed a loop's trip count at steps 1-5 (the backward call at recompile_storm.py:25)" in gate
    assert "more cause" not in gate
    causes = _explained(run)["explanation"]["causes"]
    assert [(c["code"], c["count"]) for c in causes] == [("graph_structure", 5), ("dynamo_guard_failure", 4)]
    [fix] = causes[1]["fix"]
    assert fix.startswith("`depth` is a loop's bound in the compiled code: Dynamo unrolls the loop, so each value of `depth` is "
                          "another graph, compiled anew. Run the loop a fixed number of times"), fix
    assert "torch.compiler.disable" not in fix
    assert _headline(run)["text"].startswith("5 CA recompiles and 4 Dynamo recompiles, from 2 causes:")
    assert "recompile storm: recompiles on every step after the first" in _headline(run)["text"]  # still coming, past the limit


def test_the_dynamo_listing_adds_up_to_its_count_and_says_which_were_refused_at_the_limit(record_run):
    """summary counted 4 Dynamo recompiles and listed 3; the 4th, 0/4, was refused at
    recompile_limit (4): torch logged its reasons, then compiled nothing."""
    run = _recorded(record_run, "recompile_storm.py")
    code, out, _ = cli_in_process("summary", str(run), env={"COLUMNS": "300"})
    assert code == 0
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  Dynamo: "))
    assert lines[at].endswith(", 4 recompiles"), lines[at]
    assert [line.split(":")[0].strip() for line in lines[at + 1:at + 4]] == ["recompile 0/1 at step 1", "recompile 0/2 at step 2",
                                                                             "recompile 0/3 at step 3"]
    assert lines[at + 4] == (f"    ... 1 more, refused at the recompile limit of 4 (0/4 at step 4), compiling nothing: "
                             f"cagtool recompiles {run}")
    hook = _recorded(record_run, "grad_norm_hook.py")
    out = " ".join(cli_in_process("summary", str(hook))[1].split())
    assert "10 graph breaks at 1 site, 8 recompiles" in out and out.count("recompile !0/3/") == 3
    assert "... 5 more, 1 of them refused at the recompile limit of 8 (!0/3/8 at step 8), compiling nothing" in out


def test_a_grad_warmup_is_one_recompile_in_the_headline_as_torch_and_the_explanation_count_it(record_run):
    """sample_scripts/tensor_hook.py: torch counts 2 compiled-autograd captures (the second is
    AccumulateGrad's .grad None -> defined warm-up); `--explain` opened with "1 recompile", the
    headline said "no recompiles". Both say one, in the same words; the gate still leaves it out."""
    run = _recorded(record_run, "tensor_hook.py")
    captures = json.loads((run / "ca" / "manifest.json").read_text())["torch_counters"]["compiled_autograd"]["captures"]
    mode = _explained(run)
    assert captures == 2 and mode["counts"]["recompiles"] == captures - 1
    words = "!1 is the .grad warm-up (captured once), not counted by gate --max-recompiles"
    headline = _headline(run)["text"]
    assert headline.startswith(f"1 CA recompile ({words}); "), headline
    code, text, _ = cli_in_process("recompiles", str(run), "--explain")
    assert code == 0 and " ".join(text.split()).startswith(f"mode ca: 1 recompile in 3 steps (CA: 1, ") and words in " ".join(text.split())
    code, out, _ = cli_in_process("gate", str(run), "--max-recompiles", "ca:0", "--no-config")
    assert code == 0, out


def test_a_float_scale_is_told_to_become_a_tensor_at_the_call(record_run):
    """sample_scripts/scalar_per_step.py (compiled with dynamic=False): the fix was torch's general
    "if it only feeds shapes, Dynamo makes it dynamic after one change", not true here; passed as
    torch.tensor(scale) at the call, the forward compiles once (`recompiles --verify`'s scalar-to-tensor)."""
    run = _recorded(record_run, "scalar_per_step.py", "4", "aot_eager")
    root = _explained(run)["explanation"]["causes"][0]
    assert root["guard_kind"] == "value" and root["count"] == 3
    [fix] = root["fix"]
    assert fix.startswith("Pass `scale` as a tensor where the compiled code is called (sample_scripts/scalar_per_step.py:28 "
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


def test_a_grad_warm_up_across_an_evaluation_follows_the_batch_that_made_its_graph(record_run):
    """tests/scripts/accumulate_across_evaluation.py (a DeepSpeed job's shape: gradient accumulation
    across epochs, an evaluation after each): the 8-row micro-batch recompiles the forward, its
    backward graph is captured with .grad None, the evaluation recompiles the forward for grad off,
    and the next micro-batch's backward accumulates into .grad: that capture is the new graph's
    .grad warm-up and follows the batch's cause. It was a cause of its own here, and on the DeepSpeed
    job it followed the evaluation's recompile, whose fix does not remove it (a forward compiled
    with grad off makes no backward graph). The evaluation's skip names set_stance where the
    module is compiled in place (no `_orig_mod`)."""
    run = _recorded(record_run, "../tests/scripts/accumulate_across_evaluation.py")
    causes = _explained(run)["explanation"]["causes"]
    size = next(c for c in causes if c["code"] == "dynamo_guard_failure" and "size" in c["title"])
    warmups = [c for c in causes if c["code"] == "grad_defined_changed"]
    followers = [c for c in warmups if c.get("caused_by") is not None]
    assert [c["caused_by"] for c in followers] == [size["number"]] and "warm-up" in followers[0]["title"], causes
    grad_mode = next(c for c in causes if "grad mode" in c["title"])
    assert all(c.get("caused_by") != grad_mode["number"] for c in causes)
    assert any('torch.compiler.set_stance("force_eager")' in fix for fix in grad_mode["fix"])
