"""A Lightning job under `cagtool run` (tests/scripts/lightning_job.py: automatic optimization, so
each step's forward and backward run inside `optimizer.step(closure)`; gradient accumulation 2):
the steps are Lightning's optimizer steps, each with its two backward calls; the three modes'
gradients are digested from each step's own gradients and agree; and torch's counters equal plain
python's (aot: the script as written; ca: inside compiled autograd by hand). Run where lightning is
installed beside the pinned torch, as the DeepSpeed and HF Trainer jobs are."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from cagtool.record.loader import load_run
from conftest import ROOT
from plain_counters import WRAPPER, key_counts

SCRIPT = str(ROOT / "tests" / "scripts" / "lightning_job.py")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed (pip install lightning beside the pinned torch)"),
]


def test_a_lightning_jobs_steps_gradients_and_counters_are_torchs(tmp_path):
    plain = {
        under_ca: subprocess.Popen([sys.executable, "-c", WRAPPER, under_ca, SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for under_ca in ("0", "1")
    }
    try:
        run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "eager,aot,ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), SCRIPT],
                             capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "CI": "true"})
        assert run.returncode == 0, run.stderr[-3000:]
        counts = {}
        for under_ca, proc in plain.items():
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, stderr[-2000:]
            lines = stdout.strip().splitlines()
            assert lines[-2] == "global_step 6", lines[-3:]
            counts[under_ca] = key_counts(json.loads(lines[-1]))
    finally:
        for proc in plain.values():
            proc.kill()
            proc.wait()
    assert run.stdout.count("global_step 6") == 3
    record = load_run(tmp_path / "r")
    for mode in ("eager", "aot", "ca"):
        steps = [e for e in map(json.loads, (tmp_path / "r" / mode / "events.jsonl").read_text().splitlines()) if e["kind"] == "step"]
        assert [(s["step"], s["backward_calls"], s["boundary"]) for s in steps] == [(i, 2, "optimizer") for i in range(6)], mode
    aot, ca = (key_counts(record.mode(m).manifest.torch_counters) for m in ("aot", "ca"))
    assert aot == counts["0"]
    assert ca == counts["1"] and ca["ca_captures"] >= 1
    assert record.mode("ca").manifest.options["dataloader_iterators"] >= 1  # Lightning's loaders are counted
    compare = subprocess.run([sys.executable, "-m", "cagtool", "compare", str(tmp_path / "r"), "--format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    parity = json.loads(compare.stdout)["grad_parity"]
    assert parity["agree"] and parity["summary"] == "gradients: the 3 modes agree on all 4 parameters at 2 digested steps", parity


def test_a_recompile_of_lightnings_resume_frame_is_named_the_rest_of_its_hook_dispatch(tmp_path):
    """tests/scripts/lightning_compiled_step.py (a compiled opt.step, so Dynamo traces Lightning's
    closure): `_call_strategy_hook` logs (a graph break), and the rest of it, a resume function, is
    compiled for training_step's call and once more for the backward hook's. `recompiles --explain`
    names it so, one-time, with the break's cause: not the user's `training_step`, where the failing
    guard was installed, and never "keep argument types fixed". Its recompiles are torch's."""
    from conftest import cli_in_process

    script = str(ROOT / "tests" / "scripts" / "lightning_compiled_step.py")
    run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "aot", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), script],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "CI": "true"})
    assert run.returncode == 0, run.stderr[-3000:]
    code, out, _ = cli_in_process("recompiles", str(tmp_path / "r"), "--explain", "--format", "json")
    assert code == 0
    causes = json.loads(out)["modes"]["aot"]["explanation"]["causes"]
    [resumed] = [c for c in causes if "the rest of `_call_strategy_hook` after its graph break at lightning/pytorch/trainer/call.py:" in c["title"]]
    said = " ".join(resumed["why"])
    assert "is not `training_step` (where the failing guard was installed): it is the rest of `_call_strategy_hook`" in said
    assert resumed["fix"][0].startswith("Nothing to fix: a one-time recompile.")
    assert "ignore_logging_functions" in resumed["fix"][1] and "keep argument types fixed" not in " ".join(resumed["fix"])
    events = [json.loads(line) for line in (tmp_path / "r" / "aot" / "events.jsonl").read_text().splitlines()]
    recompiled = {e["compile_id"] for e in events if e["kind"] == "dynamo_recompile"}
    assert {e["compile_id"] for e in resumed["evidence_ids"]} <= recompiled
    assert sum(c["count"] for c in causes if c["code"] == "dynamo_guard_failure") == len(recompiled)  # torch's count


def test_lightnings_sanity_check_and_training_loaders_last_batch_are_said_as_they_happened(tmp_path):
    """tests/scripts/lightning_sanity_last_batch.py under compiled autograd: the sanity check's last
    validation batch recompiles the forward before step 0, with grad off (not "step 0"); the
    training loader handed to Trainer.fit ends each epoch with a batch of 4, which recompiles the
    backward at step 6: named the last batch, with drop_last; and the backward, which Lightning calls
    outside any compiled function, is started dynamic with `_enable`, not torch.compile's dynamic."""
    from conftest import cli_in_process

    script = str(ROOT / "tests" / "scripts" / "lightning_sanity_last_batch.py")
    run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "ca", "--backend", "aot_eager", "--no-report", "-o", str(tmp_path / "r"), script],
                         capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, "CI": "true"})
    assert run.returncode == 0, run.stderr[-3000:]
    code, text, _ = cli_in_process("recompiles", str(tmp_path / "r"), "--explain")
    assert code == 0
    headings = [line for line in text.splitlines() if line.startswith("#")]
    [shapes] = [h for h in headings if h.startswith("#1 Tensor shapes changed")]
    assert shapes.endswith("steps 6-7"), headings
    assert any("size changed (1 recompile), before step 0 (grad off: an evaluation, not a training step)" in h for h in headings), headings
    block = text.split(shapes, 1)[1].split("\n#", 1)[0]
    assert "The size came back (4 -> 16 at step 7" in block, block
    fixes = [line.strip() for line in block.splitlines() if line.strip().startswith("Fix: ")]
    assert fixes[0].startswith("Fix: It is the last batch: drop it (DataLoader(..., drop_last=True)"), fixes
    assert "_enable(torch.compile(backend=...), dynamic=True)" in fixes[1] and "on the compiled function that runs backward" not in fixes[1], fixes
    events = [json.loads(line) for line in (tmp_path / "r" / "ca" / "events.jsonl").read_text().splitlines()]
    assert [e["compile_id"] for e in events if e["kind"] == "dynamo_recompile"] == ["0/1", "0/2", "!1/2/1"]  # torch's own
