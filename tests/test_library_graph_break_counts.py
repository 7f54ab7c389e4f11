"""torch's own counters of a job with a library-style nested graph break are the same under
`cagtool run` as under plain python: aot against the script as written, ca against the script run
inside compiled autograd by hand (benchmarks/ca_by_hand.py's wrapper). cagtool reads Dynamo without
a handler on torch's structured logger (docs/torch-internals.md). Two jobs: the shape in a small
script, and transformers' own Trainer (run where transformers is installed beside the pinned torch)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cagtool.record.loader import load_run
from cagtool.record.schema import StepEvent
from plain_counters import WRAPPER, key_counts

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
NO_TRANSFORMERS = importlib.util.find_spec("transformers") is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [
        "library_graph_break.py",
        pytest.param(
            "hf_trainer_job.py",
            marks=pytest.mark.skipif(NO_TRANSFORMERS, reason="transformers is not installed (pip install transformers beside the pinned torch)"),
        ),
    ],
)
def test_counters_equal_plain_python_in_aot_and_ca(script, tmp_path):
    script = str(SCRIPTS / script)
    plain = {
        under_ca: subprocess.Popen([sys.executable, "-c", WRAPPER, under_ca, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for under_ca in ("0", "1")
    }
    try:
        run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "aot,ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), script],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        counts = {}
        for under_ca, proc in plain.items():
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, stderr[-2000:]
            counts[under_ca] = key_counts(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for proc in plain.values():
            proc.kill()
            proc.wait()
    record = load_run(tmp_path / "r")
    aot, ca = (key_counts(record.mode(m).manifest.torch_counters) for m in ("aot", "ca"))
    assert counts["0"]["graph_breaks"] and sum(n for _, n in counts["0"]["graph_breaks"]) >= 2  # the shape this pins: nested breaks
    assert aot == counts["0"]
    assert ca == counts["1"]
    if script.endswith("hf_trainer_job.py"):  # evaluate() after optimizer steps 4 and 8: the steps after span it
        for mode in ("aot", "ca"):
            assert [s.step for s in record.mode(mode).of(StepEvent) if s.evaluation] == [4, 8], mode


@pytest.mark.slow
@pytest.mark.skipif(NO_TRANSFORMERS, reason="transformers is not installed (pip install transformers beside the pinned torch)")
def test_a_classifiers_problem_type_set_on_its_first_forward_is_named_with_the_value_to_set(tmp_path):
    """tests/scripts/hf_trainer_classifier.py: BERT's forward sets `config.problem_type` from the
    labels on its first call, so torch recompiles it once. `recompiles --explain` names that
    attribute of the model's BertConfig, set by the first call, and the line to write before
    training, which plain python confirms: with it, torch recompiles nothing."""
    from conftest import cli_in_process

    script = str(SCRIPTS / "hf_trainer_classifier.py")
    run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "aot", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), script],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    code, out, _ = cli_in_process("recompiles", str(tmp_path / "r"), "--explain", "--format", "json")
    assert code == 0
    [cause] = json.loads(out)["modes"]["aot"]["explanation"]["causes"]
    assert "`self.config.problem_type` was None, then set by the first call (a Python attribute of a BertConfig, not a tensor)" in cause["title"]
    assert cause["count"] == 1 and cause["guard_kind"] == "none"
    assert "`model.config.problem_type = 'single_label_classification'`" in cause["fix"][0]
    assert cause["fix"][1].startswith("Or accept it: a one-time recompile")
    fixed = subprocess.run([sys.executable, script, "--problem-type", "single_label_classification"], capture_output=True, text=True, cwd=ROOT,
                           timeout=600, env={**os.environ, "TORCH_LOGS": "recompiles"})
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "Recompiling function" not in fixed.stderr


@pytest.mark.slow
@pytest.mark.skipif(NO_TRANSFORMERS, reason="transformers is not installed (pip install transformers beside the pinned torch)")
def test_a_trainers_last_batch_is_dropped_through_its_training_arguments_and_verified(tmp_path):
    """hf_trainer_classifier.py --last-batch: each epoch of Trainer's loader ends with a batch of 2.
    The script makes no DataLoader(...): the fix names TrainingArguments(..., dataloader_drop_last=True),
    which Trainer passes to every loader it builds (the evaluation's too), and --verify applies it
    there and measures every recompile gone."""
    from conftest import cli_in_process

    script = str(SCRIPTS / "hf_trainer_classifier.py")
    args = [script, "--last-batch", "--problem-type", "single_label_classification"]
    run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"),
                          *args], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    code, out, _ = cli_in_process("recompiles", str(tmp_path / "r"), "--explain", "--format", "json")
    assert code == 0
    roots = [c for c in json.loads(out)["modes"]["ca"]["explanation"]["causes"] if c["caused_by"] is None]
    fixes = " ".join(f for c in roots for f in c["fix"])
    assert "If it is the training loader's last batch: TrainingArguments(..., dataloader_drop_last=True) drops it" in fixes, fixes
    assert "the evaluation's too" in fixes and "DataLoader(..., drop_last=True)" not in fixes, fixes
    verified = subprocess.run([sys.executable, "-m", "cagtool", "recompiles", str(tmp_path / "r"), "--verify", "--fix", "drop-last", "--repeat", "1"],
                              capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert verified.returncode == 0, verified.stderr[-3000:]
    said = " ".join(verified.stdout.split())  # lines wrapped to the terminal's width
    assert "drop each epoch's smaller last batch (TrainingArguments(dataloader_drop_last=True))" in said, said[-3000:]
    assert "dataloader_drop_last=True)" in said and "verdict: VERIFIED (recompiles" in said, said[-3000:]
    assert "the evaluation's last batch out of its metrics" in said, said[-3000:]
    # Trainer's max_steps keeps the step count: the same steps over other batches, never a numerics
    # verdict (it read HARMFUL: "losses or final norms changed", where that is what dropping does).
    assert "the same 6 steps, over other batches: the loop counts steps, not epochs" in said and "HARMFUL" not in said, said[-3000:]


@pytest.mark.skipif(NO_TRANSFORMERS, reason="transformers is not installed (pip install transformers beside the pinned torch)")
def test_a_trainers_batches_padded_to_their_longest_are_sizes_that_vary_not_a_last_batch(tmp_path):
    """hf_trainer_classifier.py --ragged under compiled autograd: the sequence length changes from
    batch to batch (18, 19, then 17), so compiled autograd captures the backward dynamic once and
    Dynamo compiles that graph's code again for the next length. Not "a last batch ... drop_last":
    the sizes vary. torch's PGO line lists 152 sources: the text shows the first few and says
    where the whole line is."""
    from conftest import cli_in_process

    script = str(SCRIPTS / "hf_trainer_classifier.py")
    run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"),
                          script, "--ragged"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    # Trainer's DataLoader (accelerate's DataLoaderShard, a subclass) is counted: explain may name a DataLoader here.
    assert load_run(tmp_path / "r").mode("ca").manifest.options["dataloader_iterators"] >= 1
    code, out, _ = cli_in_process("recompiles", str(tmp_path / "r"), "--explain", "--format", "json")
    assert code == 0
    root, sizes = json.loads(out)["modes"]["ca"]["explanation"]["causes"]
    assert sizes["caused_by"] == root["number"] and sizes["code"] == "changed_shapes"
    said = " ".join(sizes["why"] + sizes["fix"])
    assert "The sizes vary from batch to batch (then 19 -> 17), not only in a last batch" in said
    assert "drop_last" not in said and "got smaller, once" not in said
    # Trainer makes the compiled call, not the script's `trainer.train()`: its line, and the script's that led there;
    # and the fix says where a mark can go, since no line of the script passes the tensor.
    why = " ".join(root["why"])
    assert root["source"]["via"].startswith("transformers/trainer.py:") and root["source"]["file"].endswith("hf_trainer_classifier.py")
    assert "called at transformers/trainer.py:" in why and re.search(r"\(a library's call\), reached from \S*hf_trainer_classifier\.py:\d+", why), why
    # Trainer compiled the model through accelerate with dynamic unset: accelerate's own switch first.
    assert root["compiled_by"]["via"].startswith("accelerate/accelerator.py:") and root["compiled_by"]["dynamic"] is None
    assert root["fix"][0].startswith("accelerate made the compile call (HF Trainer's, with torch_compile=True) at accelerate/accelerator.py:")
    assert "ACCELERATE_DYNAMO_USE_DYNAMIC=1" in root["fix"][0]
    # It names what remains by its words: the headline's advice shows this fix alone, with nothing "below".
    assert root["fix"][0].endswith('not the recompile, in which another guard failed too ("What remains" in `recompiles --explain`).')
    assert root["fix"][1].startswith("Or: the compiled call is a library's (transformers/trainer.py:") and "TORCH_COMPILE_DYNAMIC_SOURCES" in root["fix"][1]
    # The script's own data_collator (`padded`, found inside Trainer's RemoveColumnsCollator) pads each
    # batch to its longest: padded to one length there, the length's guard goes; the HF collators'
    # arguments are not its.
    [own] = [f for f in root["fix"] if f.startswith("Your data_collator, `padded` at ")]
    assert re.search(r"hf_trainer_classifier\.py:\d+, makes the batches, whose lengths differ \(\d+, then \d+\): pad every batch "
                     r"there to one length N \(at least the longest kept\), which removes this size guard", own), own
    assert "DataCollatorWithPadding" not in " ".join(root["fix"]), root["fix"]
    # problem_type's guard failed in the same recompile, unnamed: no fix of the size claims the recompile goes.
    assert "this recompile goes" not in " ".join(root["fix"]) and "To skip even that recompile" not in " ".join(root["fix"])
    assert any(f.startswith("What remains: recompile") and "`self.config.problem_type`" in f for f in root["fix"]), root["fix"]
    code, text, _ = cli_in_process("recompiles", str(tmp_path / "r"), "--explain")
    [pgo] = [line for line in text.splitlines() if line.startswith("Torch's own words (its PGO")]
    # torch's own count of sources (152 on 2.13.0, 151 on 2.15.0), from the whole line the manifest keeps
    whole = load_run(tmp_path / "r").mode("ca").manifest.options["pgo_suggestion"]
    total = len(re.search(r'TORCH_COMPILE_DYNAMIC_SOURCES="([^"]*)"', whole)[1].split(","))
    assert total > 100, whole
    assert "\"L['kwargs']['attention_mask'],L['kwargs']['input_ids']," in pgo and f",...\" [cagtool: {total - 6} more of {total} sources not shown" in pgo
    assert len(pgo) < 700
    # Verified on the job: the size's recompile goes, and the frame recompiles instead for the
    # problem_type the record never named (torch names one failing guard per recompile).
    code, out, err = cli_in_process("recompiles", str(tmp_path / "r"), "--explain", "--verify", "--fix", "accelerate-dynamic",
                                    "--repeat", "1", "--format", "json")
    assert code == 0, err[-3000:]
    (fix,) = json.loads(out)["verification"]["fixes"]
    assert fix["fix"] == "accelerate-dynamic" and fix["env"] == {"ACCELERATE_DYNAMO_USE_DYNAMIC": "1"} and fix["causes"] == [root["number"]]
    assert fix["verdict"] == "partly verified" and "`self.config.problem_type` was None" in fix["reasons"][-1], fix["reasons"]


NO_ACCELERATE = importlib.util.find_spec("accelerate") is None


@pytest.mark.slow
@pytest.mark.skipif(NO_ACCELERATE, reason="accelerate is not installed (pip install accelerate beside the pinned torch)")
def test_accelerates_compile_of_its_ddp_wrapper_that_compiles_nothing_is_told_to_give_prepare_the_compiled_model(tmp_path):
    """accelerate on 2 CPU processes (torchrun) with dynamo_backend: prepare() compiles its DDP
    wrapper, which compiles no graph on torch 2.13 (torch's own count, in the job's output), and the
    advice for torch.compile(DDP(module)) would have the user reorder a DDP they never wrote. It
    names accelerate's call and what compiles: prepare() given the compiled model (graphs 0 -> 1)."""
    script = str(SCRIPTS / "accelerate_ddp_dynamo.py")
    env = {**os.environ, "CI": "true"}
    said = {}
    for fixed in (False, True):
        out = tmp_path / ("fixed" if fixed else "as_written")
        run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "aot", "--no-report", "-o", str(out),
                              "-m", "torch.distributed.run", "--", "--nproc-per-node", "2", script, *(["--fixed"] if fixed else [])],
                             capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        graphs = sorted(int(g) for g in re.findall(r"graphs (\d+)", run.stdout))  # the ranks share stdout: lines may interleave
        assert graphs == ([1, 1] if fixed else [0, 0]), run.stdout
        said[fixed] = " ".join(run.stderr.split())
    assert "compiled nothing" not in said[True], said[True]
    assert "torch.compile(DDP(module)) by accelerate/accelerator.py:" in said[False], said[False]
    assert ("what to do: compile it: give prepare() the compiled module, accelerator.prepare(torch.compile(model), ...), "
            "without dynamo_backend") in said[False], said[False]
