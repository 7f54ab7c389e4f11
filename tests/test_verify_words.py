"""`recompiles --explain --verify`'s counts in words: one run is "1 time", one process "1 process"
(the gate's and compare's "1 vs 1 process"), never "1 times" or "1 vs 1 processes"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cagtool.errors import UsageError
from cagtool.verify import verification
from cagtool.verify.verification import Side, judge, processes_text

from conftest import cagtool_in_process


def _side(ca: int, dynamo: int, graphs: int) -> Side:
    return Side("x", "run", "finished", [ca], [dynamo], [graphs], None, None, None, 0, None, 1.0)


def _speedup(ratio: float, low: float, high: float, units: tuple[int, int]):
    from cagtool.report.compare.analysis import Speedup
    from cagtool.report.figures.intervals import RatioInterval

    interval = RatioInterval(ratio, low, high, units, "cpu", "assumed", 0.35, float("inf"))
    return Speedup("ca", "ca", ratio, low, high, steady_steps=(30, 30), interval=interval)


def test_the_processes_a_speedup_rests_on_are_counted_in_words():
    assert [processes_text(units) for units in ((1, 1), (3, 3), (1, 3), (3, 1))] == [
        "1 vs 1 process", "3 vs 3 processes", "1 vs 3 processes", "3 vs 1 process"]
    # The verdict's words of a fix measured on one re-run process a side (`--repeat 1`).
    _, reasons = judge(_side(4, 1, 5), _side(2, 1, 3), _speedup(0.99, 0.37, 2.64, (1, 1)), True)
    assert "steady step 0.99x (inconclusive, 90% CI 0.37x-2.64x, 1 vs 1 process)" in reasons, reasons
    _, reasons = judge(_side(4, 1, 5), _side(2, 1, 3), _speedup(0.99, 0.9, 1.1, (3, 3)), True)
    assert any(r.endswith("3 vs 3 processes)") for r in reasons), reasons


@pytest.mark.slow
def test_the_announced_reruns_are_counted_in_words(record_run, tmp_path, monkeypatch):
    """The line before the re-runs start, on shape_loop.py's recording (three fixes apply); the
    re-runs themselves are not started: this is about the words."""
    recorded = record_run("shape_loop.py")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = Path(shutil.copytree(recorded.path, tmp_path / "run"))

    def announced_only(*args, **kwargs):
        raise UsageError("stopped after the announcement")

    monkeypatch.setattr(verification, "verify", announced_only)
    said = {}
    for repeat, fix in (("1", None), ("2", None), ("1", "ca-dynamic")):
        proc = cagtool_in_process("recompiles", str(run), "--explain", "--verify", "--repeat", repeat, *(("--fix", fix) if fix else ()),
                                  env={"CI": "true"})
        assert proc.returncode == 2 and "stopped after the announcement" in proc.stderr, proc.stderr[-2000:]
        said[(repeat, fix)] = next(line for line in proc.stderr.splitlines() if line.startswith("cagtool: verifying "))
    assert said[("1", None)].startswith("cagtool: verifying 3 fixes in mode ca: the baseline and each fix 1 time, each its own process")
    assert said[("2", None)].startswith("cagtool: verifying 3 fixes in mode ca: the baseline and each fix 2 times, each its own process")
    assert said[("1", "ca-dynamic")].startswith("cagtool: verifying 1 fix in mode ca: the baseline and each fix 1 time, each its own process")


def test_a_fix_whose_re_run_failed_says_why_in_its_verdict():
    """A patch that makes the job raise (a disabled hook under a fullgraph=True compiler): the FAILED
    verdict quotes the re-run's exception, its first line, not only "see its record"."""
    import dataclasses

    failed = dataclasses.replace(_side(0, 0, 1), status="failed",
                                 failure="Unsupported: Skip calling `torch.compiler.disable()`d function")
    verdict, reasons = judge(_side(0, 3, 1), failed, None, None)
    assert verdict == verification.FAILED
    assert reasons == ["the re-run with the fix did not finish (Unsupported: Skip calling `torch.compiler.disable()`d function): "
                       "see its record"]
    verdict, reasons = judge(_side(0, 3, 1), dataclasses.replace(failed, failure=None), None, None)
    assert reasons == ["the re-run with the fix did not finish: see its record"]


def test_what_to_do_is_the_fix_with_the_fewest_recompiles_then_the_fewest_changes():
    """mnist_rnn (pytorch/examples): torch's PGO list of 32 compiled-autograd inputs with --dynamic
    and a one-line drop_last=True both left 0 recompiles; the line is the one to apply. Between a
    run setting and an edit of one change each, the run setting (no code changes)."""
    from cagtool.report.recompiles.verification import best_fix

    def fix(name: str, left: int, env: dict | None = None, flags: tuple = (), patch: bool = False) -> dict:
        return {"fix": name, "verdict": "verified", "env": env or {}, "run_flags": list(flags), "patch": {"diff": "-a\n+b\n"} if patch else None,
                "measured": {"ca_recompiles": [left], "dynamo_recompiles": [0], "ca_graphs": [1]}}

    pgo = fix("torch-pgo-ca-dynamic", 0, {"TORCH_COMPILE_DYNAMIC_SOURCES": ",".join(f"L['inputs'][{i}]" for i in range(32))}, ("--dynamic",))
    dropped = fix("drop-last", 0, patch=True)
    assert best_fix({"fixes": [pgo, dropped]})["fix"] == "drop-last"
    assert best_fix({"fixes": [dropped, fix("ca-dynamic", 1, flags=("--dynamic",))]})["fix"] == "drop-last"  # fewer recompiles first
    assert best_fix({"fixes": [dropped, fix("dynamic-sources", 0, {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['x']"})]})["fix"] == "dynamic-sources"
    assert best_fix({"fixes": [{**pgo, "verdict": "harmful"}]}) is None


def test_edits_not_made_for_two_causes_keep_each_causes_own_reason():
    """Two causes of one kind whose edit cannot be made for different reasons (word_language_model:
    `self.src_mask` None then set, and its size guard) are two items, each with its own reason; two
    causes of one edit that runs share it (one re-run)."""
    from cagtool.commands.recompiles import _one_run_a_patch
    from cagtool.verify.patch import Patch

    def edit(cause: int, why: str | None, patched: str | None = None) -> Patch:
        return Patch("dynamo_guard_failure-edit", (cause,), "change the code", "main.py", None, "" if patched is None else "diff",
                     patched is not None, why, patched=patched)

    patches = {4: edit(4, "no local edit: `self.src_mask` was None"), 7: edit(7, "no local edit: a guard on self.src_mask's size"),
               8: edit(8, "no local edit: `self.src_mask` was None")}
    _one_run_a_patch(patches)
    assert patches[4].why_not.endswith("was None") and patches[7].why_not.endswith("size") and patches[8] is patches[4]
    assert patches[4].causes == (4, 8) and patches[7].causes == (7,) and patches[7].name == "dynamo_guard_failure-edit-2"
    same = {1: edit(1, None, "x = 1\n"), 2: edit(2, None, "x = 1\n")}
    _one_run_a_patch(same)
    assert same[1] is same[2] and same[1].causes == (1, 2)
