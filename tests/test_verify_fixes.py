"""`recompiles --explain --verify`: fixes proven on the job itself by re-running it, with the counts
before and after equal to torch's own in every re-run (each re-run is an ordinary cagtool run),
never by editing the script. Timings are not asserted (they are the machine's); counts are exact."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, TORCH_2_14, cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.report.compare.analysis import numerics_sample
from cagtool.report.figures.metrics import mode_metrics

pytestmark = pytest.mark.slow


def _verify(run: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    # In-process: the re-runs are `cagtool run` processes all the same (what is measured); only
    # the command that starts them and reads their records saves a new interpreter.
    proc = cagtool_in_process("recompiles", str(run), "--explain", "--verify", "--repeat", "1", "--format", "json", *extra,
                              env={"CI": "true"})
    return proc, (json.loads(proc.stdout) if proc.returncode == 0 else {})


def _copy(record_run, tmp_path: Path, script: str, *args: str) -> Path:
    recorded = record_run(script, *args, modes="ca", backend="eager")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    return Path(shutil.copytree(recorded.path, tmp_path / "run"))  # the verification writes into the run


def test_dynamic_sizes_remove_the_shape_loops_ca_recompile(record_run, tmp_path):
    """10/100/10 with the script's own CA flag: static first graph, one changed-shapes recompile,
    then Dynamo recompiles that graph's code for the next size. ca-dynamic (cagtool run --dynamic,
    reaching the flag's own _enable) makes the CA recompile 0 and leaves Dynamo's (partly verified);
    torch's own PGO suggestion applied as it words it (torch-pgo: its sources, which name the CA
    graph's size inputs, and nothing else) removes Dynamo's and leaves compiled autograd's own
    (partly verified); the two together (torch-pgo-ca-dynamic) remove both."""
    if TORCH_2_14:
        pytest.skip("torch 2.14 recompiles frames of its own in this job (the baseline's Dynamo recompiles read 5, not 1: "
                    "docs/compat.md); these counts are pinned on 2.13 and hold on 2.15")
    run = _copy(record_run, tmp_path, "shape_loop.py")
    proc, data = _verify(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cagtool: verifying 3 fixes in mode ca" in proc.stderr and "estimated" in proc.stderr
    v = data["verification"]
    fix, torch_pgo, both = v["fixes"]
    assert fix["fix"] == "ca-dynamic" and fix["run_flags"] == ["--dynamic"] and fix["causes"] == [1]
    # Fewer recompiles, but the re-run's own explanation still finds the backward's sizes recompiling (Dynamo's).
    assert fix["verdict"] == "partly verified", fix["reasons"]
    assert fix["reasons"][-1] == "cause #1 is still there (1 recompile in the re-run)", fix["reasons"]
    assert v["baseline"]["ca_recompiles"] == [1] and fix["measured"]["ca_recompiles"] == [0]
    assert v["baseline"]["ca_graphs"] == [2] and fix["measured"]["ca_graphs"] == [1]
    assert v["baseline"]["dynamo_recompiles"] == [1] and fix["measured"]["dynamo_recompiles"] == [1]
    said = load_run(run).modes["ca"].manifest.options["pgo_suggestion"]
    assert torch_pgo["fix"] == "torch-pgo" and torch_pgo["torch_says"] == said and torch_pgo["run_flags"] == []
    assert said.endswith(f'TORCH_COMPILE_DYNAMIC_SOURCES="{torch_pgo["env"]["TORCH_COMPILE_DYNAMIC_SOURCES"]}"')
    assert "L['sizes'][0]" in torch_pgo["env"]["TORCH_COMPILE_DYNAMIC_SOURCES"]
    assert (torch_pgo["measured"]["ca_recompiles"], torch_pgo["measured"]["dynamo_recompiles"]) == ([1], [0])
    assert torch_pgo["verdict"] == "partly verified", torch_pgo["reasons"]
    assert both["fix"] == "torch-pgo-ca-dynamic" and both["run_flags"] == ["--dynamic"] and both["env"] == torch_pgo["env"]
    assert (both["measured"]["ca_recompiles"], both["measured"]["dynamo_recompiles"]) == ([0], [0])
    assert both["verdict"] == "verified", both["reasons"]
    # Torch's own counter in the re-run's record says the same.
    fixed = load_run(fix["measured"]["run"])
    assert fixed.modes["ca"].manifest.torch_counters["compiled_autograd"]["captures"] == 1
    assert mode_metrics(fixed.modes["ca"]).ca_recompiles == 0
    assert (run / "verification.json").is_file()
    # summary and the HTML report: test_a_hook_added_mid_run_is_patched_on_a_copy_and_verified.


def test_dynamic_sources_remove_a_ragged_batchs_forward_recompile(record_run, tmp_path):
    """A DataLoader's ragged last batch: Dynamo's size guard on the forward's input fails once.
    dynamic-sources (TORCH_COMPILE_DYNAMIC_SOURCES, the input named as torch names it) removes it.
    drop-last, the explanation's own fix for a last batch, adds drop_last=True to the loader on a
    copy: no smaller batch, so neither the forward nor the backward compiles again, and the losses
    are not compared (the last batch is no longer trained on: steps 8 -> 6). The script also clears
    gradients with set_to_none=False (a .grad warm-up capture): the patch zero-grad-to-none, run on
    a copy, removes that capture."""
    run = _copy(record_run, tmp_path, "ragged_batches.py")
    before = mode_metrics(load_run(run).modes["ca"])
    proc, data = _verify(run, "--fix", "dynamic-sources,zero-grad-to-none,drop-last")
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = data["verification"]
    sources, zero_grad, dropped = v["fixes"]
    assert sources["fix"] == "dynamic-sources" and sources["env"] == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['args'][0]"}
    assert v["baseline"]["dynamo_recompiles"] == [before.dynamo_recompiles] == [2]
    assert sources["measured"]["dynamo_recompiles"] == [1] and sources["verdict"] == "verified", sources["reasons"]
    assert sources["who"].startswith("run configuration")
    assert zero_grad["fix"] == "zero-grad-to-none" and zero_grad["who"] == "your code"
    assert "+            opt.zero_grad(set_to_none=True)\n" in zero_grad["patch"]["diff"]
    # The warm-up capture is gone (3 CA graphs -> 2); the recompile count never counted it.
    assert v["baseline"]["ca_graphs"] == [3] and zero_grad["measured"]["ca_graphs"] == [2]
    assert v["baseline"]["ca_recompiles"] == zero_grad["measured"]["ca_recompiles"] == [1]
    assert zero_grad["verdict"] == "verified" and zero_grad["numerics_agree"] is True, zero_grad["reasons"]
    # drop-last answers the forward's recompile and the backward's that follows from it.
    assert dropped["fix"] == "drop-last" and dropped["causes"] == [1, 2] and dropped["who"] == "your code"
    assert "+    loader = DataLoader(data, batch_size=32, shuffle=False, drop_last=True)\n" in dropped["patch"]["diff"]
    assert (dropped["measured"]["ca_recompiles"], dropped["measured"]["dynamo_recompiles"]) == ([0], [0])
    assert v["baseline"]["steps"] == [8] and dropped["measured"]["steps"] == [6]
    assert dropped["verdict"] == "verified" and dropped["numerics_agree"] is None, dropped["reasons"]
    assert any(r.startswith("numerics not compared: drop_last=True leaves each epoch's last batch untrained (steps 8 -> 6)")
               for r in dropped["reasons"])
    assert v["not_applied"] == []
    # What to do: the fix that left no recompile, with what it changes in the training said beside it.
    advice = next(line for line in cagtool_in_process("summary", str(run)).stdout.splitlines() if line.startswith("what to do:"))
    assert advice.startswith("what to do: apply fix drop-last") and "numerics not compared: drop_last=True" in advice, advice


def test_a_hook_added_mid_run_is_patched_on_a_copy_and_verified(record_run, tmp_path):
    """A hook registered at step 2 costs one CA recompile. The patch registers it before the loop;
    --verify runs the patched copy in place of the script (never editing it): CA recompiles 1 -> 0."""
    run = _copy(record_run, tmp_path, "hook_added_midrun.py")
    script = ROOT / "sample_scripts" / "hook_added_midrun.py"
    original = script.read_text()
    bad = cagtool_in_process("recompiles", str(run), "--verify", "--fix", "nonsense")  # refused before any re-run
    assert bad.returncode == 2 and "--fix nonsense: no such fix applies to this run's causes (applicable: hook-before-loop)" in bad.stderr
    proc, data = _verify(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runs the patched copy" in proc.stderr and "your file is not changed" in proc.stderr
    v = data["verification"]
    [fix] = v["fixes"]
    assert fix["fix"] == "hook-before-loop" and fix["who"] == "your code" and fix["causes"] == [1] and v["not_applied"] == []
    assert fix["patch"]["file"] == "sample_scripts/hook_added_midrun.py" and fix["patch"]["line"] == 15
    assert "+    model.weight.register_hook(lambda grad: grad.clamp(-1.0, 1.0))\n" in fix["patch"]["diff"]
    assert "-        if step == 2:\n" in fix["patch"]["diff"]
    assert v["baseline"]["ca_recompiles"] == [1] and fix["measured"]["ca_recompiles"] == [0]
    assert v["baseline"]["ca_graphs"] == [2] and fix["measured"]["ca_graphs"] == [1]
    assert fix["verdict"] == "verified" and fix["numerics_agree"] is True, fix["reasons"]
    # The re-run ran the copy, and says so in its record; the user's file is untouched.
    fixed = load_run(fix["measured"]["run"])
    copy = Path(fix["patched_copy"])
    assert fixed.modes["ca"].manifest.options["patched_source"] == str(copy.resolve())
    assert copy.parent.parent == run / "verify" and "if step == 2" not in copy.read_text()
    assert fixed.modes["ca"].manifest.torch_counters["compiled_autograd"]["captures"] == 1
    assert script.read_text() == original
    text = cagtool_in_process("summary", str(run)).stdout
    assert "hook-before-loop (cause #1)" in text and "applied to a copy" in text and "verdict: VERIFIED" in text
    page = tmp_path / "report.html"
    assert cagtool_in_process("report", str(run), "-o", str(page)).returncode == 0
    html = page.read_text()
    assert '<section id="verify">' in html and '<td class="ok">VERIFIED</td>' in html and "<td>1 → 0</td>" in html
    assert '<pre class="patch">--- a/sample_scripts/hook_added_midrun.py' in html


def test_a_python_float_changing_per_step_is_passed_as_a_tensor_on_a_copy(record_run, tmp_path):
    """`model(x, scale)` with a new Python float each step under dynamic=False: Dynamo's guard
    `scale == 1.0` fails every step (3 forward recompiles in 4 steps) and each recompiled forward
    brings a new backward graph (3 CA recompiles). The patch passes torch.tensor(scale, dtype=torch.get_default_dtype())
    at the call site Dynamo recorded; --verify runs it on a copy: every recompile gone, and the losses
    and final norms bit for bit the job's (the float scales a 0-dim float32 loss: a float64 tensor
    made the loss float64, its values different in the 8th digit).
    The script compiles with aot_eager (its second argument): the graphs and guards Inductor's would
    be, a compiled backward per forward, without compiling C++ in each run and re-run."""
    run = _copy(record_run, tmp_path, "scalar_per_step.py", "4", "aot_eager")
    script = ROOT / "sample_scripts" / "scalar_per_step.py"
    original = script.read_text()
    proc, data = _verify(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = data["verification"]
    [fix] = v["fixes"]
    assert fix["fix"] == "scalar-to-tensor" and fix["who"] == "your code" and fix["causes"] == [1, 2] and v["not_applied"] == []
    assert fix["patch"]["line"] == 28 and fix["patch"]["applicable"] is True
    assert "-        loss = model(x, scale).sum()\n+        loss = model(x, torch.tensor(scale, dtype=torch.get_default_dtype())).sum()\n" in fix["patch"]["diff"]
    assert (v["baseline"]["dynamo_recompiles"], fix["measured"]["dynamo_recompiles"]) == ([3], [0])
    assert (v["baseline"]["ca_recompiles"], fix["measured"]["ca_recompiles"]) == ([3], [0])
    assert (v["baseline"]["ca_graphs"], fix["measured"]["ca_graphs"]) == ([4], [1])
    assert fix["verdict"] == "verified" and fix["numerics_agree"] is True, fix["reasons"]
    fixed = load_run(fix["measured"]["run"]).modes["ca"]
    plain = numerics_sample("ca", load_run(v["baseline"]["run"]).modes["ca"])
    patched = numerics_sample("ca", fixed)
    assert len(plain.losses) == 4 and patched.losses == plain.losses, (plain.losses, patched.losses)
    assert patched.param_norm == plain.param_norm is not None
    assert fixed.manifest.options["patched_source"] == str(Path(fix["patched_copy"]).resolve())
    assert fixed.manifest.torch_counters["compiled_autograd"]["captures"] == 1
    assert script.read_text() == original


def test_dynamic_sources_end_a_recompile_storm_past_the_limit(record_run, tmp_path):
    """A sequence one token longer every step under dynamic=False: Dynamo recompiles the forward
    each step until recompile_limit (4) sends it to eager. With the input dynamic from its first
    compile the forward never recompiles: Dynamo recompiles 5 -> 1 (the CA graph's, which the
    other fix, ca-dynamic, answers), the limit is not hit."""
    from cagtool.report.recompiles import explain, recompile_table, step_summary

    run = _copy(record_run, tmp_path, "sequence_storm.py")
    before = explain(recompile_table(load_run(run).modes["ca"], step_summary(load_run(run).modes["ca"])))
    assert {a.code for a in before.alerts} == {"recompile_limit", "recompile_storm"}
    proc, data = _verify(run, "--fix", "dynamic-sources")
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = data["verification"]
    [fix] = v["fixes"]
    assert fix["env"] == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['args'][0]"}
    assert v["baseline"]["dynamo_recompiles"] == [5] and fix["measured"]["dynamo_recompiles"] == [1]
    assert v["baseline"]["ca_recompiles"] == [1] and fix["measured"]["ca_recompiles"] == [1]
    assert fix["verdict"] == "verified", fix["reasons"]
    after = load_run(fix["measured"]["run"]).modes["ca"]
    assert recompile_table(after, step_summary(after)).limit_hits == []
    # Torch's own PGO words are carried beside the fix, verbatim as the run recorded them.
    said = load_run(run).modes["ca"].manifest.options["pgo_suggestion"]
    assert fix["torch_says"] == said and said.startswith("PGO detected a recompilation due to dynamic shapes.")


def test_a_custom_function_compiled_with_the_eager_backend_is_verified_with_aot_eager_on_a_copy(record_run, tmp_path):
    """tests/scripts/grad_reverse.py: a gradient reversal layer in a model compiled with
    backend="eager" is captured anew at every backward (a Function class torch defines at each
    call). The patch makes the script's backend "aot_eager" and answers both causes (compiled
    autograd's misses and Dynamo's recompiles of the graph's code on the class); the re-run of the
    copy captures twice, recompiles the graph's code no more, and computes the same numbers."""
    run = _copy(record_run, tmp_path, "../tests/scripts/grad_reverse.py")
    proc, data = _verify(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = data["verification"]
    [fix] = v["fixes"]
    assert fix["fix"] == "backend-aot-eager" and fix["causes"] == [1, 2] and fix["who"] == "your code"
    assert '-run = model if INNER or OUTSIDE else torch.compile(model, backend="eager")\n' in fix["patch"]["diff"]
    assert '+run = model if INNER or OUTSIDE else torch.compile(model, backend="aot_eager")\n' in fix["patch"]["diff"]
    assert v["baseline"]["ca_graphs"] == [8] and fix["measured"]["ca_graphs"] == [2]
    assert v["baseline"]["ca_recompiles"] == [7] and fix["measured"]["ca_recompiles"] == [1]
    assert fix["verdict"] == "verified" and fix["numerics_agree"] is True, fix["reasons"]
    fixed = load_run(fix["measured"]["run"])
    assert fixed.modes["ca"].manifest.torch_counters["compiled_autograd"]["captures"] == 2


def test_with_several_repetitions_the_sides_take_turns_and_each_keeps_its_repetitions(record_run, tmp_path):
    """--repeat 2: round 1 runs the baseline, then the fix; round 2 runs each once more (in a
    shuffled order), each folded into its side's record as `ca.2`, as `run --repeat 2` names it. A
    load that comes and goes during the verification then falls on both sides alike."""
    run = _copy(record_run, tmp_path, "hook_added_midrun.py")
    proc = cagtool_in_process("recompiles", str(run), "--verify", "--repeat", "2", "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    turns = [line.split(":", 2)[1].strip() for line in proc.stderr.splitlines() if " run --modes ca --repeat 1 " in line]
    assert turns[:2] == ["baseline (1/2)", "hook-before-loop (1/2)"], proc.stderr
    assert sorted(turns[2:]) == ["baseline (2/2)", "hook-before-loop (2/2)"], proc.stderr
    v = json.loads(proc.stdout)["verification"]
    [fix] = v["fixes"]
    assert v["baseline"]["ca_recompiles"] == [1, 1] and fix["measured"]["ca_recompiles"] == [0, 0]
    assert fix["verdict"] == "verified", fix["reasons"]
    for side in (Path(v["baseline"]["run"]), Path(fix["measured"]["run"])):
        record = load_run(side)
        assert sorted(record.modes) == ["ca", "ca.2"] and record.meta.mode_exit_codes == {"ca": 0, "ca.2": 0}
        pids = {record.modes[m].manifest.process["pid"] for m in record.modes}
        assert len(pids) == 2  # two processes, one a repetition
        assert not (side.parent / f"{side.name}.2").exists() and (side.parent / f"{side.name}.2.stderr").is_file()


def test_a_fix_that_uncovers_a_guard_the_record_never_named_is_partly_verified_and_names_it(record_run, tmp_path):
    """tests/scripts/set_on_first_call.py: at step 1 the batch's length changes and the forward's
    `self.kind`, None at the first compile, is set; torch names the size guard only (one failing
    guard per recompile). dynamic-sources removes the size's recompile and the frame recompiles for
    `self.kind` instead: the count is unchanged, the cause it answers is gone, and the verdict
    says what took its place, not "no effect". The size's fix names the script's torch.compile line."""
    run = _copy(record_run, tmp_path, str(ROOT / "tests" / "scripts" / "set_on_first_call.py"))
    proc = cagtool_in_process("recompiles", str(run), "--explain", "--format", "json", env={"CI": "true"})
    size = json.loads(proc.stdout)["modes"]["ca"]["explanation"]["causes"][0]
    assert size["compiled_by"] == {"file": size["source"]["file"], "line": 22, "via": "", "dynamic": None, "in_place": False}
    assert "Or compile with dynamic=True (your torch.compile at tests/scripts/set_on_first_call.py:22)" in size["fix"][0]
    proc, data = _verify(run, "--fix", "dynamic-sources")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (fix,) = data["verification"]["fixes"]
    assert fix["fix"] == "dynamic-sources" and fix["causes"] == [1]
    assert data["verification"]["baseline"]["dynamo_recompiles"] == [1] and fix["measured"]["dynamo_recompiles"] == [1]
    assert fix["verdict"] == "partly verified", fix["reasons"]
    assert fix["reasons"][-1].startswith("cause #1 gone from the re-run, which recompiles instead for what the record did not show: "
                                         "Dynamo recompiled forward frame 0 `forward`: `self.kind` was None"), fix["reasons"]


def test_drop_last_in_a_loop_that_counts_steps_trains_other_batches_and_is_not_judged_on_its_losses(record_run, tmp_path):
    """tests/scripts/steps_counted_last_batch.py: a loop of 6 steps over epochs of 8, 8, 4 rows (HF
    Trainer's max_steps counts so). drop_last=True keeps the 6 steps and trains other batches: the
    losses differ by design, as where it drops steps; never a numerics verdict (it read HARMFUL,
    "losses or final norms changed", for the change the fix exists to make). Its batches come from
    a worker process, forked each of its 2 epochs (the record follows it): a fork runs the patched copy its
    parent runs, so the patch is applied (it read "the job's worker processes re-import the script
    by its path" and ran nothing)."""
    run = _copy(record_run, tmp_path, str(ROOT / "tests" / "scripts" / "steps_counted_last_batch.py"), "--workers", "1")
    ca = load_run(run).modes["ca"]
    assert [p.manifest.process["forked_from"] for p in ca.processes.values()] == [ca.manifest.process["pid"]] * 2  # one a epoch
    from cagtool.verify.patch import reimports_script

    assert not reimports_script(ca)
    proc, data = _verify(run, "--fix", "drop-last")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (fix,) = data["verification"]["fixes"]
    assert fix["fix"] == "drop-last" and fix["verdict"] == "verified", fix
    assert any(r.startswith("numerics not compared: drop_last=True leaves each epoch's last batch untrained (the same 6 steps, "
                            "over other batches: the loop counts steps, not epochs)") for r in fix["reasons"]), fix["reasons"]


def test_a_fix_that_moves_a_recompile_into_the_evaluation_says_what_it_brings(record_run, tmp_path):
    """tests/scripts/drop_last_moves_to_evaluation.py (pytorch/examples' vae in small): drop-last
    removes the training's last-batch recompiles, and the evaluation, whose graph the training no
    longer made dynamic, recompiles for its own last batch instead. Verified for what it answers,
    and the cause it brings is named, not hidden in the total."""
    run = _copy(record_run, tmp_path, str(ROOT / "tests" / "scripts" / "drop_last_moves_to_evaluation.py"))
    proc, data = _verify(run, "--fix", "drop-last")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (fix,) = data["verification"]["fixes"]
    assert fix["fix"] == "drop-last" and fix["verdict"] in ("verified", "partly verified"), fix
    (brings,) = [r for r in fix["reasons"] if r.startswith("its re-run has 1 cause the baseline re-run did not show: ")]
    # named as the evaluation's, at the script's line (not the patched copy's), as its own explanation places it
    assert "Dynamo recompiled forward frame 0: a tensor's size changed (1 recompile), between steps " in brings, brings
    assert "(grad off: an evaluation, not a training step) (drop_last_moves_to_evaluation.py:" in brings and "drop-last-" not in brings.split("`")[0], brings
    side = load_run(fix["measured"]["run"]).modes["ca"]
    from cagtool.report.recompiles.table import recompile_table

    # the re-run's own table: the evaluation's size recompile, compiled with grad off between steps
    sizes = [row for row in recompile_table(side).recompiles if "size mismatch" in " ".join(row.messages)]
    assert len(sizes) == 1 and sizes[0].user_source.line == 24, [(r.compile_id, r.messages) for r in sizes]


def test_an_evaluation_before_training_run_uncompiled_on_a_copy_compiles_no_graph_for_it(record_run, tmp_path):
    """sample_scripts/eval_no_grad.py --evaluate-first (nanoGPT's estimate_loss at its first step):
    the evaluation under no_grad compiles the model first, and training's first call recompiles it
    on the grad mode. eval-uncompiled calls the module before torch.compile at every call made with
    grad off: Dynamo's grad-mode recompile is gone, the size causes stay, and the numbers agree."""
    run = _copy(record_run, tmp_path, "eval_no_grad.py", "--evaluate-first")
    proc, data = _verify(run, "--fix", "eval-uncompiled")
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = data["verification"]
    (fix,) = v["fixes"]
    grad_mode = next(c for c in data["modes"]["ca"]["explanation"]["causes"] if c["guard_kind"] == "grad_mode")
    assert fix["fix"] == "eval-uncompiled" and fix["causes"] == [grad_mode["number"]] and fix["who"] == "your code"
    assert fix["patch"]["diff"].count("getattr(model, '_orig_mod', model)(held_out)") == 2
    assert (v["baseline"]["dynamo_recompiles"], fix["measured"]["dynamo_recompiles"]) == ([3], [2])
    assert (v["baseline"]["ca_recompiles"], fix["measured"]["ca_recompiles"]) == ([1], [1])
    assert fix["verdict"] == "verified" and fix["numerics_agree"] is True, fix["reasons"]
    fixed = load_run(fix["measured"]["run"]).modes["ca"]
    baseline = load_run(v["baseline"]["run"]).modes["ca"]
    # torch's own count: one graph fewer than the baseline re-run's
    assert (baseline.manifest.torch_counters["stats"]["unique_graphs"], fixed.manifest.torch_counters["stats"]["unique_graphs"]) == (6, 5)


def test_an_evaluation_run_uncompiled_answers_its_own_last_batch_recompile_too(record_run, tmp_path):
    """tests/scripts/sanity_validation_first.py (Lightning's sanity check in plain torch): the
    validation under no_grad compiles 16 rows, recompiles for its last 14, and training recompiles
    on the grad mode. eval-uncompiled edits validation_step's call (the function is called only
    under no_grad), and answers both causes: Dynamo recompiles 2 -> 0."""
    run = _copy(record_run, tmp_path, str(ROOT / "tests" / "scripts" / "sanity_validation_first.py"))
    proc, data = _verify(run, "--fix", "eval-uncompiled")
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = data["verification"]
    (fix,) = v["fixes"]
    kinds = {c["number"]: c["guard_kind"] for c in data["modes"]["ca"]["explanation"]["causes"]}
    assert sorted(kinds[n] for n in fix["causes"]) == ["grad_mode", "size"], (fix["causes"], kinds)
    assert '+    return float(nn.functional.cross_entropy(getattr(model, "_orig_mod", model)(x), y))' in fix["patch"]["diff"]
    assert (v["baseline"]["dynamo_recompiles"], fix["measured"]["dynamo_recompiles"]) == ([2], [0])
    assert fix["verdict"] == "verified" and fix["numerics_agree"] is True, fix["reasons"]
