"""The phase of each recompile and the recompile budget, end to end on real `cagtool run` records
of the sample scripts: a compiled block under reentrant checkpointing recompiles inside the
checkpoint's recompute (aot and ca), and a job that recompiles every step is forecast to reach
`recompile_limit` at the step where torch, run longer, does hit it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, cli_in_process

pytestmark = pytest.mark.slow

SCRIPT = "sample_scripts/checkpoint_recompute.py"


def cagtool(*args: str) -> subprocess.CompletedProcess:
    code, out, err = cli_in_process(*args, env={"CI": "true", "COLUMNS": "200"}, cwd=ROOT, unset=("FORCE_COLOR",))
    return subprocess.CompletedProcess(["cagtool", *args], code, out, err)


def recorded(record_run, script: str, *args: str, modes: str) -> Path:
    run = record_run(script, *args, modes=modes)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


def backward_line() -> int:
    lines = (ROOT / SCRIPT).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.strip() == "loss.backward()")


@pytest.fixture(scope="module")
def checkpointed(record_run) -> dict:
    run = recorded(record_run, "checkpoint_recompute.py", modes="aot,ca")
    proc = cagtool("recompiles", str(run), "--explain", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    text = cagtool("recompiles", str(run), "--explain")
    return {"json": json.loads(proc.stdout)["modes"], "text": " ".join(text.stdout.split())}  # as read, unwrapped


@pytest.mark.parametrize("mode, compile_id", [("aot", "0/1"), ("ca", "!0/0/1")])
def test_the_recompile_inside_a_reentrant_checkpoint_is_named_with_step_function_and_line(checkpointed, mode, compile_id):
    phases = checkpointed["json"][mode]["phases"]
    (recompile,) = [c for c in phases["compiles"] if c["recompile"] and c["phase"] != "ca_graph"]
    assert recompile["compile_id"] == compile_id
    assert recompile["phase"] == "checkpoint_recompute" and recompile["checkpoint"] == "reentrant"
    assert recompile["step"] == 0
    assert recompile["function"]["function"] == "Block.forward"
    assert recompile["caller"]["line"] == backward_line() and recompile["caller"]["code"] == "loss.backward()"
    # the forward's own compile of the block ran in the forward
    assert next(c for c in phases["compiles"] if c["compile_id"] == "0/0")["phase"] == "forward"
    assert phases["recompile_counts"].get("checkpoint_recompute") == 1


def test_the_explanation_says_the_phase_in_words(checkpointed):
    text = checkpointed["text"]
    assert re.search(rf"0/1 at step 0: activation-checkpoint recompute in the backward \(use_reentrant=True\) of Block\.forward "
                     rf"\(defined at sample_scripts/checkpoint_recompute\.py:\d+\), called at sample_scripts/checkpoint_recompute\.py:{backward_line()}", text)
    assert "!0/0/1 at step 0: activation-checkpoint recompute" in text
    # one recompile in step 0 and none after: no forecast, and the budget is not worth a word
    assert "recompile budget:" not in text and "did not reach a steady state" not in text
    (frame,) = [f for f in checkpointed["json"]["aot"]["budget"]["frames"]]
    assert frame["text"].endswith("2 of recompile_limit 8 compiles used; stopped recompiling after step 0")


@pytest.fixture(scope="module")
def budget(record_run) -> dict:
    short = recorded(record_run, "recompile_budget.py", modes="aot")
    long = recorded(record_run, "recompile_budget.py", "--steps", "11", modes="aot")
    out = {}
    for name, run in (("short", short), ("long", long)):
        proc = cagtool("recompiles", str(run), "--explain", "--format", "json")
        assert proc.returncode == 0, proc.stderr
        out[name] = json.loads(proc.stdout)["modes"]["aot"]
    out["text"] = " ".join(cagtool("recompiles", str(short), "--explain").stdout.split())  # as read, unwrapped
    return out


def test_the_forecast_from_five_steps_is_the_step_torch_hits_the_limit_at(budget):
    (frame,) = [f for f in budget["short"]["budget"]["frames"] if f["function"] == "scaled_loss"]
    assert (frame["entries"], frame["recompile_limit"], frame["limit_known"]) == (5, 8, True)
    assert frame["rate_per_step"] == 1.0 and frame["still_compiling"]
    assert frame["forecast_limit_step"] == 8
    assert budget["short"]["budget"]["steady"] is False
    assert "at this rate it reaches the limit at about step 8" in budget["text"]
    assert "The job did not reach a steady state: frame 0 still compiling at its last step (4)" in budget["text"]
    # run longer, torch refuses the compile at exactly that step and runs the loss eager after it
    (hit,) = budget["long"]["limit_hits"]
    assert hit["step"] == 8
    (long_frame,) = [f for f in budget["long"]["budget"]["frames"] if f["function"] == "scaled_loss"]
    assert long_frame["limit_hit_step"] == 8 and long_frame["entries"] == 8
    (cost,) = budget["long"]["budget"]["eager_after_limit"]
    assert cost["hit_step"] == 8 and cost["steps_after"] == 2


def test_perfetto_marks_the_recompute_with_its_phase(record_run, tmp_path):
    run = recorded(record_run, "checkpoint_recompute.py", modes="aot,ca")
    out = tmp_path / "trace.json"
    proc = cagtool("export", str(run), "--perfetto", str(out))
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text())
    events = document["traceEvents"] if isinstance(document, dict) else document
    recompiles = {e["name"]: e["args"] for e in events if e["name"].startswith("Dynamo recompile")}
    for name in ("Dynamo recompile 0/1 (checkpoint recompute)", "Dynamo recompile !0/0/1 (checkpoint recompute)"):
        args = recompiles[name]
        assert args["phase"] == "checkpoint_recompute" and args["checkpoint"] == "reentrant"
        assert args["checkpointed_function"].startswith("Block.forward (")
    compiles = [e["args"] for e in events if e["name"].startswith("Dynamo compile 0/0")]
    assert compiles and all(a["phase"] == "forward" for a in compiles)


def test_perfetto_carries_the_budget_and_its_forecast(record_run, tmp_path):
    """The trace's metadata (otherData, Perfetto's "Info and stats") holds each mode's budget: the
    same figures and words as `recompiles --explain`."""
    run = recorded(record_run, "recompile_budget.py", modes="aot")
    out = tmp_path / "trace.json"
    proc = cagtool("export", str(run), "--perfetto", str(out))
    assert proc.returncode == 0, proc.stderr
    budget = json.loads(out.read_text())["otherData"]["recompile_budget"]["aot"]
    (frame,) = [f for f in budget["frames"] if f["function"] == "scaled_loss"]
    assert frame["forecast_limit_step"] == 8 and frame["recompile_limit"] == 8 and budget["steady"] is False
    assert any("at this rate it reaches the limit at about step 8" in line for line in budget["words"])
    explained = json.loads(cagtool("recompiles", str(run), "--explain", "--format", "json").stdout)["modes"]["aot"]["budget"]
    assert [f["text"] for f in budget["frames"]] == [f["text"] for f in explained["frames"]]


def script_line(script: str, text: str) -> int:
    lines = (ROOT / "sample_scripts" / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip().startswith(text))


def test_thread_count_train_eval_and_grad_mode_are_named_with_their_lines(record_run):
    run = recorded(record_run, "unexpected_causes.py", modes="aot")
    proc = cagtool("recompiles", str(run), "--explain", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    mode = json.loads(proc.stdout)["modes"]["aot"]
    causes = mode["unexpected_causes"]
    assert [(c["cause"], c["compile_id"]) for c in causes] == [("num_threads", "0/1"), ("train_eval", "0/2"), ("grad_mode", "0/3")]
    # every recompile of the job is one of them, in torch's own count
    assert mode["counts"]["dynamo_frame_recompiles"] == len(causes) == 3
    threads, train_eval, grad = causes
    # the thread count is tied to the line that changed it (cagtool's tap), not to the compiled call
    assert threads["changed_at"].startswith(f"sample_scripts/unexpected_causes.py:{script_line('unexpected_causes.py', 'torch.set_num_threads(1)')} ")
    assert threads["how"] == "changed" and threads["detail"].endswith("to 1")
    assert "training == True" in train_eval["guard"] and train_eval["how"] == "called in the new state"
    assert grad["guard"].startswith("GLOBAL_STATE changed: grad_mode")
    text = " ".join(cagtool("recompiles", str(run), "--explain").stdout.split())
    line = script_line('unexpected_causes.py', 'torch.set_num_threads(1)')
    assert re.search(rf"The state was changed \(from \d+ to 1\) at sample_scripts/unexpected_causes\.py:{line} torch\.set_num_threads\(1\)", text), text
    # each is said once, in its numbered block: not again as a cause one may not expect (the summary lists them)
    assert "may not expect" not in text, text
    summary = " ".join(cagtool("summary", str(run)).stdout.split())
    assert "cause of 0/1 at step 1: the intra-op thread count changed (torch.set_num_threads) (from" in summary, summary
    assert "changed at sample_scripts/unexpected_causes.py" in summary


def test_the_budget_and_the_unexpected_causes_read_in_the_html_report_and_perfetto(record_run, tmp_path):
    """The forecast and the three causes named with their lines, as Chromium shows the report's
    phases section, and in the Perfetto trace's metadata."""
    import os
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "report" / "html"))
    from browser import Browser, find_chromium

    budget_run = recorded(record_run, "recompile_budget.py", modes="aot")
    causes_run = recorded(record_run, "unexpected_causes.py", modes="aot")
    trace = tmp_path / "trace.json"
    assert cagtool("export", str(causes_run), "--perfetto", str(trace)).returncode == 0
    kept = json.loads(trace.read_text())["otherData"]["unexpected_causes"]["aot"]
    assert [c["cause"] for c in kept["causes"]] == ["num_threads", "train_eval", "grad_mode"]
    assert any("torch.set_num_threads(1)" in line for line in kept["words"])
    if find_chromium() is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is not installed under CI=true: the browser tests cannot run")
        pytest.skip("chromium is not installed")
    pages = {}
    for name, run in (("budget", budget_run), ("causes", causes_run)):
        html = tmp_path / f"{name}.html"
        proc = cagtool("report", str(run), "-o", str(html))
        assert proc.returncode == 0, proc.stderr
        with Browser.start() as browser:
            page = browser.open(html)
            pages[name] = " ".join(page.evaluate("document.querySelector('#phases').innerText").split())
            assert page.console_errors == []
    assert "at this rate it reaches the limit at about step 8" in pages["budget"]
    assert "did not reach a steady state" in pages["budget"]
    assert "recompiles from causes you may not expect:" in pages["causes"]
    line = script_line("unexpected_causes.py", "torch.set_num_threads(1)")
    assert f"sample_scripts/unexpected_causes.py:{line}" in pages["causes"] and "torch.set_num_threads(1)" in pages["causes"]


def test_two_planned_recompiles_are_no_rate_and_a_third_is():
    """A backbone unfrozen at step 6 and a layer frozen again at step 11 of a 16-step job (a user's
    job): two recompiles are no trend, so no "still compiling" and no forecast beside "it has
    stabilised"; a third at the same pace is a rate that reaches the limit."""
    from cagtool.report.recompiles.budget import FrameBudget

    two = FrameBudget("0", "forward", "train.py", 3, entries=3, limit=8, limit_known=True, first_step=0, last_recompile_step=11, last_step=15)
    assert two.recompiles == 2 and two.rate is None and not two.still_compiling and two.forecast_step is None
    three = FrameBudget("0", "forward", "train.py", 3, entries=4, limit=8, limit_known=True, first_step=0, last_recompile_step=12, last_step=15)
    assert three.rate == pytest.approx(0.25) and three.still_compiling and three.forecast_step == 12 + 20


def test_three_changes_made_once_each_are_no_rate_and_one_guard_failing_three_times_is():
    """sample_scripts/unexpected_causes.py: a thread count set, a train/eval switch and a no_grad
    evaluation, each one recompile of the same frame in 4 steps, read "0.75 recompiles per step; it
    reaches the limit at about step 11" although --explain calls each cached. Recompiles that each
    failed on a guard of its own are no rate; a value failing the same guard each time is."""
    from cagtool.report.recompiles.budget import FrameBudget

    once_each = FrameBudget("0", "forward", "train.py", 3, entries=4, limit=8, limit_known=True, first_step=0, last_recompile_step=4,
                            last_step=4, guards=("GLOBAL_STATE changed: num_threads", "fn._modules['N'].training == True",
                                                 "GLOBAL_STATE changed: grad_mode"))
    assert once_each.one_offs and once_each.rate is None and not once_each.still_compiling and once_each.forecast_step is None
    storm = FrameBudget("0", "forward", "train.py", 3, entries=4, limit=8, limit_known=True, first_step=0, last_recompile_step=4,
                        last_step=4, guards=("self.scale == N.N",) * 3)
    assert not storm.one_offs and storm.rate == pytest.approx(0.75) and storm.forecast_step == 4 + 7


def test_a_frame_that_last_recompiled_before_the_last_step_is_not_said_to_compile_there():
    """An evaluation every 15 steps and a longer sequence from step 30 (a user's 60-step job):
    compiles at steps 0, 15, 30, 45, none after. The pace leaves no sign it stopped, but nothing
    compiled at step 59, and the words say what the record shows."""
    from cagtool.report.recompiles.budget import FrameBudget, ModeBudget
    from cagtool.report.recompiles.budget_words import budget_lines, not_steady_text

    periodic = FrameBudget("0", "forward", "train.py", 3, entries=4, limit=8, limit_known=True, first_step=0, last_recompile_step=45, last_step=59)
    budget = ModeBudget("aot", frames=[periodic], last_step=59)
    assert periodic.still_compiling and not budget.steady
    words = not_steady_text(budget)
    assert "still compiling at" not in words
    assert words == ("no steady state: frame 0 recompiling about every 15 steps, the last at step 45, 14 steps before the job's "
                     "last (59): no sign it stopped")
    assert "still compiling at" not in " ".join(budget_lines(budget, "/"))
    storm = FrameBudget("0", "forward", "train.py", 3, entries=5, limit=8, limit_known=True, first_step=0, last_recompile_step=4, last_step=4)
    assert not_steady_text(ModeBudget("aot", frames=[storm], last_step=4)) == "no steady state: frame 0 still compiling at the last step (4)"
