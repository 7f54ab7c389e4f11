"""Steps are optimizer steps: gradient accumulation, two optimizers, no optimizer, a step a grad
scaler skips, an optimizer stepping inside compiled code, autograd.grad beside backward, --steps;
and the job's own shapes the tracker must survive: threads calling backward, os.chdir,
torch._dynamo.reset(), CUDA."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cagtool.capture.steps.findings import COMPILED_STEP_FROM_PARAMETERS
from cagtool.record.loader import load_run
from cagtool.record.schema import (
    SCHEMA_VERSION,
    BackwardEvent,
    CacheMissEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    FindingEvent,
    OptimizerStepEvent,
    StepDeviceEvent,
    StepEvent,
)
from cagtool.report.frames import events_frame, steps_frame
from cagtool.report.figures.metrics import mode_metrics
from cagtool.report.summary import steps_text

from conftest import ROOT, cagtool_cmd, cli_in_process

SHAPES = str(Path(__file__).parent / "scripts" / "step_shapes.py")


def _mode(run, mode: str = "eager"):
    assert run.returncode == 0, run.stderr
    return load_run(run.path).mode(mode)


@pytest.mark.slow
def test_gradient_accumulation_4x3_is_3_steps_of_4_backward_calls(record_run):
    run = record_run("grad_accumulation.py", modes="ca")
    ca = _mode(run, "ca")
    steps = ca.of(StepEvent)
    backwards = ca.of(BackwardEvent)
    assert [s.step for s in steps] == [0, 1, 2] and len(backwards) == 12  # as the script prints them
    assert [s.backward_calls for s in steps] == [4, 4, 4] and {s.boundary for s in steps} == {"optimizer"}
    assert [(b.step, b.index) for b in backwards] == [(step, i) for step in (0, 1, 2) for i in range(4)]
    # A step's time spans its four backward calls and the optimizer: more than their sum.
    for step in steps[1:]:
        assert step.wall_s is not None and step.wall_s > step.backward_s + step.optimizer_s
    assert steps[0].wall_s is None
    # CA captures are attributed to the backward call that made them, and add up per step.
    assert sum(b.ca_captures for b in backwards) == len(ca.of(CAGraphEvent)) == sum(s.ca_captures for s in steps)
    metrics = mode_metrics(ca)
    assert (metrics.steps, metrics.backward_calls, metrics.backward_calls_per_step) == (3, 12, (4,))
    assert "3 steps (optimizer steps), 4 backward calls per step (12 in all)" in run.stderr
    # The second micro-batch's backward finds .grad defined: AccumulateGrad's one-time warm-up,
    # in the first step here, is not a recompile (same rule as without accumulation).
    initial, miss = ca.of(CacheMissEvent)  # torch logs the initial capture as a miss too
    assert initial.step == miss.step == 0 and miss.node.endswith("AccumulateGrad")
    assert (metrics.ca_recompiles, metrics.ca_grad_warmup_misses) == (0, 1)
    assert "CA recompiles: 0 counted (1 in all, as `cagtool recompiles` lists them: not counted, the second graph, AccumulateGrad's .grad None -> defined warm-up (captured once))" in run.stderr
    # Both graphs stay in use, one for a step's first backward (.grad None after zero_grad()), one for
    # the others: not a warm-up that happens once (the words said "Once ... this costs one extra graph").
    code, explained, _ = cli_in_process("recompiles", str(run.path), "--explain")
    explained = " ".join(explained.split())
    assert code == 0 and "It came in step 0, the first capture's, at a later backward call of the step" in explained, explained
    assert "every step uses both" in explained and "Once (the first backward" not in explained
    frame = steps_frame(ca)
    assert list(frame["backward_calls"]) == [4, 4, 4]
    assert len(events_frame(ca, "backward")) == 12
    assert ca.manifest.schema_version == SCHEMA_VERSION == 3
    # A reader that skips the backward events (loader `kinds`) still counts them.
    lean = load_run(run.path, kinds=frozenset({StepEvent.kind})).mode("ca")
    assert not lean.of(BackwardEvent) and mode_metrics(lean).backward_calls == 12


@pytest.mark.slow
def test_steps_flag_counts_optimizer_steps(record_run):
    """`--steps 2` on a 3-step script of 4 backward calls a step stops after 2 optimizer steps (8
    backward calls). The same session recording serves test_run_bad_input.py's --steps bound."""
    run = record_run("grad_accumulation.py", modes="eager", extra=("--steps", "2"))
    eager = _mode(run)
    assert eager.manifest.options.get("stopped_by") == "steps"
    assert [s.step for s in eager.of(StepEvent)] == [0, 1] and len(eager.of(BackwardEvent)) == 8


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["gan-dg", "gan-gd"])
def test_two_optimizers_give_one_step_per_training_iteration(record_run, variant):
    run = record_run(SHAPES, variant, "3", modes="eager")
    eager = _mode(run)
    # the summary says what a step is here: not one optimizer step
    assert "3 steps (training iterations: 6 optimizer steps in all), 2 backward calls per step (6 in all)" in run.stderr
    steps = eager.of(StepEvent)
    assert [s.step for s in steps] == [0, 1, 2]
    assert [s.backward_calls for s in steps] == [2, 2, 2]
    # Both optimizers' step() calls fall inside each step, whichever order the script uses.
    by_step: dict[int, list[str]] = {}
    for opt in eager.of(OptimizerStepEvent):
        by_step.setdefault(opt.step, []).append(opt.optimizer)
    assert by_step == {0: ["SGD", "SGD"], 1: ["SGD", "SGD"], 2: ["SGD", "SGD"]}
    assert mode_metrics(eager).backward_calls_after_last_step == 0
    # Backward calls no step closed, where another optimizer stepped after them: not "after the last optimizer step".
    trailing = dataclasses.replace(mode_metrics(eager), backward_calls_after_last_step=2)
    assert steps_text(trailing).endswith(", 2 backward call(s) after the last step ended (not every optimizer stepped after them)")


@pytest.mark.slow
def test_discriminator_stepped_more_often_gives_one_step_per_generator_step(record_run):
    eager = _mode(record_run(SHAPES, "wgan", "3", modes="eager"))
    assert [s.backward_calls for s in eager.of(StepEvent)] == [4, 4, 4]
    assert len(eager.of(OptimizerStepEvent)) == 12


@pytest.mark.slow
@pytest.mark.parametrize("iterations, where", [(12, "module"), (3, "module"), (15, "function")])
def test_one_optimizer_per_layer_trained_in_turn_gives_a_step_per_optimizer_step(record_run, iterations, where):
    """Every layer's optimizer is made first, then each layer trained in turn (forward-forward): an
    optimizer that steps 10 times with no other is a step per step() (12 a layer), counted once the
    10th shows it; a phase shorter than that reads as WGAN's n_critic does, one step that waits for
    the other optimizer: layer 0's 3 steps and layer 1's first, then layer 1's 2 left, each a step
    at the run's end. Optimizers that die with the training function (as a DDP rank's do when
    mp.spawn's function returns) are counted by what was alive when each note was made, not when the
    notes are counted (layer 1's read one step of 10 backwards, then steps of 0 and 1, after the
    function returned before the record's last count)."""
    # 12: the ca mode's recording, shared with test_cause_grouping.py (its steps are eager's: no compile moves a boundary)
    mode = "ca" if iterations == 12 else "eager"
    run = record_run(SHAPES, "layers", str(iterations), *(("--in-function",) if where == "function" else ()), modes=mode)
    eager = _mode(run, mode)
    steps = eager.of(StepEvent)
    optimizer_steps = eager.of(OptimizerStepEvent)
    assert len(optimizer_steps) == 2 * iterations
    if iterations >= 10:
        assert [s.step for s in steps] == list(range(2 * iterations))
        assert [s.backward_calls for s in steps] == [1] * 2 * iterations
        assert [o.step for o in optimizer_steps] == list(range(2 * iterations))
        assert all(s.wall_s is not None for s in steps[1:])
    else:
        assert [s.backward_calls for s in steps] == [4, 1, 1]
        assert [o.step for o in optimizer_steps] == [0, 0, 0, 0, 1, 2]
    assert mode_metrics(eager).backward_calls_after_last_step == 0


@pytest.mark.slow
def test_a_compile_while_the_steps_wait_is_stamped_with_the_step_that_counts_it(record_run):
    """Each layer's forward recompiles for a smaller batch at its 6th step, while the steps wait to
    be told apart (one optimizer stepping alone): the compile's event needs its step's number then,
    so those steps are counted as one that waits for the other optimizer, as before the wait
    (10 backward calls, then the idle rule): every compile event names the step whose line counts
    it, and the step lines count torch's compiles. A documented limit, pinned."""
    aot = _mode(record_run(SHAPES, "layers", "12", "--compile", modes="aot"), "aot")
    steps = aot.of(StepEvent)
    # layer 1's smaller batch compiles nothing (its frame is dynamic by then): its 12 steps are told apart
    assert [s.backward_calls for s in steps] == [10, 1, 1] + [1] * 12
    compiles = aot.of(DynamoCompileEvent)
    assert sum(s.compiles for s in steps) == len(compiles) == 3
    assert sorted({c.step for c in compiles}) == [s.step for s in steps if s.compiles] == [0, 3]


@pytest.mark.slow
def test_a_step_the_grad_scaler_skips_is_a_step_of_its_own(record_run):
    """GradScaler.step skips the optimizer's step() when the gradients are not finite: the loop's
    iteration is still a step (as the script and training frameworks count it), not folded into
    the next one as a second backward call."""
    run = record_run(SHAPES, "scaler", "3", modes="eager")
    eager = _mode(run)
    assert run.stdout.count("iteration") == 3 and "iteration 1 scale 32768.0" in run.stdout  # the scaler backed off once
    steps = eager.of(StepEvent)
    assert [(s.step, s.backward_calls, s.boundary, s.skipped) for s in steps] == [
        (0, 1, "optimizer", False), (1, 1, "optimizer", True), (2, 1, "optimizer", False)]
    assert [o.step for o in eager.of(OptimizerStepEvent)] == [0, 2]  # the optimizer stepped twice
    assert "3 steps (optimizer steps, one backward call each), 1 whose optimizer step the grad scaler skipped (inf/NaN gradients)" in run.stderr
    assert mode_metrics(eager).skipped_steps == 1


@pytest.mark.slow
def test_an_optimizer_stepping_inside_compiled_code_counts_the_scripts_steps(record_run):
    """The compiled-optimizer recipe (torch.compile around `opt.step()`) with gradient accumulation
    (two backwards a step): the step runs inside a compiled graph, where no hook runs (cagtool's
    hooks are no-ops to Dynamo, as plain python has none). The step is seen where the parameters
    changed: four steps of two backwards each, as the script counts them, said so; the optimizer's
    compiles are not in a step time; torch's graphs, graph breaks and recompiles are the plain job's."""
    script = str(Path(__file__).parent / "scripts" / "compiled_optimizer.py")
    plain = subprocess.run([sys.executable, script, "2"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    run = record_run(script, "2", modes="eager,aot")
    aot = _mode(run, "aot")
    assert plain.returncode == 0 and run.stdout.count("step 3 loss") == 2
    steps = aot.of(StepEvent)
    assert [(s.step, s.backward_calls, s.boundary) for s in steps] == [(i, 2, "compiled_optimizer") for i in range(4)]
    assert [(b.step, b.index) for b in aot.of(BackwardEvent)] == [(i, k) for i in range(4) for k in range(2)]
    assert not aot.of(OptimizerStepEvent)  # no hook saw a step() return
    # Each step ends at its last backward's end. Steps 0 and 1 compiled their optimizer step (its
    # momentum buffers made by the first, so once more for the filled state) after that end, in the
    # next step's span: no step time for steps 0 to 2; step 3's is one.
    assert steps[0].compiles >= 1 and [s.compiles for s in steps[1:]] == [1, 0, 0] and [s.wall_s is None for s in steps] == [True, True, True, False]
    # That recompile is the optimizer step of the script's iteration 1: its records say step 1.
    [recompile] = aot.of(DynamoRecompileEvent)
    [compile_] = [c for c in aot.of(DynamoCompileEvent) if c.compile_id == recompile.compile_id]
    assert recompile.step == compile_.step == 1 and "/torch/optim/" in compile_.co_filename
    assert ("4 steps (optimizer steps inside compiled code, seen where the optimizer's state changed), 2 backward calls per step "
            "(8 in all)") in " ".join(run.stderr.split())
    mine, theirs = aot.manifest.torch_counters, json.loads(plain.stdout.strip().splitlines()[-1])
    for kind in ("graph_break", "recompiles"):
        assert {k[:300]: v for k, v in theirs.get(kind, {}).items()} == mine.get(kind, {}), kind
    assert mine["stats"]["unique_graphs"] == theirs["stats"]["unique_graphs"] and mine["stats"]["calls_captured"] == theirs["stats"]["calls_captured"]
    assert plain.stdout.splitlines()[:4] == [line for line in run.stdout.splitlines() if line.startswith("step ")][4:]
    # No hook saw aot's steps start, so it has no gradient digests: said, not passed over.
    assert ("gradients: not compared: aot: no gradient digests (its optimizer steps inside compiled code, where no hook of "
            "cagtool's runs)") in " ".join(run.stderr.split())
    # The optimizer's one recompile is explained as what it is, with nothing to fix, and a single
    # recompile is no trend: no "still compiling", no forecast of the recompile limit.
    code, out, _ = cli_in_process("recompiles", str(run.path), "--explain")
    said = " ".join(out.split())
    assert code == 0 and "Dynamo recompiled the optimizer's step() (frame " in said
    assert "the optimizer's state was filled by its first step() (1 recompile), step 1 " in said
    assert "Fix: Nothing to fix: a compiled optimizer step() is compiled twice, for its empty and its filled state" in said
    _, summary, _ = cli_in_process("summary", str(run.path))
    assert "no steady state" not in summary and "reaches the limit" not in summary + said


@pytest.mark.slow
def test_a_compiled_step_called_again_with_no_backward_between_is_a_step_in_every_mode(record_run):
    """pytorch/tutorials' compiling_optimizer_lr_scheduler recipe: one backward, then a compiled
    `opt.step(); sched.step()` called 5 times, twice (a new optimizer the second time). Dynamo breaks
    the graph at the scheduler's wrapper of step(), so step() runs eagerly inside the compiled call,
    where cagtool's hooks are out of torch's dicts: each call is still a step, as eager's hooks count
    it (it read one step, "no optimizer", in aot and ca), ending where the call returns; the second
    optimizer's recompiles fall in the step of its first call; torch's counters are the plain job's."""
    script = str(Path(__file__).parent / "scripts" / "compiled_scheduler_steps.py")
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    run = record_run(script, modes="eager,aot,ca")
    assert plain.returncode == 0 and run.returncode == 0, run.stderr
    rows = {name: [(s.step, s.backward_calls) for s in _mode(run, name).of(StepEvent)] for name in ("eager", "aot", "ca")}
    assert rows["eager"] == [(0, 1)] + [(i, 0) for i in range(1, 11)], rows
    assert rows["aot"] == rows["ca"] == rows["eager"], rows
    aot = _mode(run, "aot")
    assert [s.boundary for s in aot.of(StepEvent)][1:] == ["compiled_optimizer"] * 10
    assert len(_mode(run, "eager").of(OptimizerStepEvent)) == 10 and not aot.of(OptimizerStepEvent)
    assert {r.step for r in aot.of(DynamoRecompileEvent)} == {6}  # the second optimizer's first call
    mine, theirs = aot.manifest.torch_counters, json.loads(plain.stdout.strip().splitlines()[-1])
    for kind in ("graph_break", "recompiles", "frames"):
        assert {k[:300]: v for k, v in theirs.get(kind, {}).items()} == mine.get(kind, {}), kind
    assert "11 steps (optimizer steps inside compiled code" in " ".join(run.stderr.split())
    # An eager step() first (the hooks have counted one when the first compiled call begins): that
    # call's step is still read, as the others are (it was lost: the hooks' count at its entry was unread).
    first = record_run(script, "--eager-step-first", modes="eager,aot")
    rows = {name: [(s.step, s.backward_calls) for s in _mode(first, name).of(StepEvent)] for name in ("eager", "aot")}
    assert rows["eager"] == rows["aot"] == [(0, 1)] + [(i, 0) for i in range(1, 12)], rows


@pytest.mark.slow
@pytest.mark.parametrize("script, args, backwards", [
    ("compiled_optimizer.py", ("2",), 2),  # torch.compile around opt.step(), two micro-batches a step
    ("compiled_optimizer.py", ("1",), 1),
    ("compiled_whole_step.py", (), 1),  # forward, backward and step() in one compiled function
    ("compiled_own_optimizer.py", (), 3),  # an Optimizer subclass's own step() in a compiled function
])
def test_steps_stops_a_compiled_optimizer_step_where_eager_stops(record_run, script, args, backwards):
    """`--steps 3` where the optimizer steps inside compiled code: the step is seen where the
    script's compiled call returns, so every mode stops at eager's point (inside iteration 2, after
    its optimizer step, before the loop prints it), not one forward and backward later. The final
    norms and the last step's gradients are then those of the same moment, and agree."""
    run = record_run(str(Path(__file__).parent / "scripts" / script), *args, modes="eager,aot,ca", extra=("--steps", "3"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("step 1 loss") == 3 and "step 2 loss" not in run.stdout
    for name in ("eager", "aot", "ca"):
        mode = _mode(run, name)
        assert mode.manifest.options.get("stopped_by") == "steps", name
        assert [s.backward_calls for s in mode.of(StepEvent)] == [backwards] * 3, name
        assert len(mode.of(BackwardEvent)) == 3 * backwards, name  # none after the last step
    assert {s.boundary for s in _mode(run, "aot").of(StepEvent)} == {"compiled_optimizer"}
    if args == ("2",):  # counted in the hooks (--steps) as the drain counts them later (no --steps)
        whole = _mode(record_run(str(Path(__file__).parent / "scripts" / script), *args, modes="eager,aot"), "aot")
        rows = [(s.step, s.backward_calls, s.boundary, s.compiles, s.wall_s is None) for s in _mode(run, "aot").of(StepEvent)]
        assert rows == [(s.step, s.backward_calls, s.boundary, s.compiles, s.wall_s is None) for s in whole.of(StepEvent)][:3]
    code, out, err = cli_in_process("compare", str(run.path), "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["numerics"]["agree"], data["numerics"]
    pairs = data["grad_parity"]["pairs"]
    assert [(p["record"], p["agrees"], 2 in p["steps"]) for p in pairs] == [("aot", True, True), ("ca", True, True)], pairs


@pytest.mark.slow
def test_a_scripts_own_optimizer_stepped_inside_a_compiled_function_counts_the_scripts_steps(record_run):
    """A momentum SGD of the script's own (an Optimizer subclass whose step() is no torch.optim code:
    Dynamo compiles no frame of torch.optim's), stepped inside a compiled function, three backwards
    a step: the compile that traced its step() marks that function, and the step is seen where its
    call returns. Four steps of three backwards in every mode, as the script counts them; numerics
    agree; torch's counters are the plain job's."""
    script = str(Path(__file__).parent / "scripts" / "compiled_own_optimizer.py")
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    run = record_run(script, modes="eager,aot,ca")
    assert plain.returncode == 0 and run.stdout.count("step 3 loss") == 3
    for name in ("eager", "aot", "ca"):
        assert [(s.step, s.backward_calls) for s in _mode(run, name).of(StepEvent)] == [(i, 3) for i in range(4)], name
    aot = _mode(run, "aot")
    assert {s.boundary for s in aot.of(StepEvent)} == {"compiled_optimizer"} and not aot.of(OptimizerStepEvent)
    mine, theirs = aot.manifest.torch_counters, json.loads(plain.stdout.strip().splitlines()[-1])
    assert mine["frames"] == theirs["frames"] and mine["stats"] == theirs["stats"]
    assert mine.get("graph_break", {}) == theirs.get("graph_break", {}) and mine.get("recompiles", {}) == theirs.get("recompiles", {})
    code, out, _ = cli_in_process("compare", str(run.path), "--format", "json")
    assert code == 0 and json.loads(out)["numerics"]["agree"]


@pytest.mark.slow
def test_an_optimizer_made_at_a_collected_ones_address_is_watched_as_a_new_one(record_run):
    """A compiled optimizer step, the optimizer collected, and a new one made at its address (the
    same `id`), stepped inside a whole compiled training step: the compile of its step reads the
    new optimizer, not the collected one whose id it has (the reader kept by id read the gone
    parameter, never changing: its three steps were lost, left as backward calls after the last
    step). Every step is counted, in eager and aot alike."""
    script = str(Path(__file__).parent / "scripts" / "optimizer_at_a_collected_ones_address.py")
    run = record_run(script, modes="eager,aot")
    assert run.returncode == 0, run.stderr[-3000:]
    # each mode's rounds, then the steps it made: the modes' outputs one after the other
    lines = run.stdout.splitlines()
    made = [int(line.removeprefix("steps ")) for line in lines if line.startswith("steps ")]
    ends = [i for i, line in enumerate(lines) if line.startswith("steps ")]
    assert len(made) == 2 and all(lines[i - 1].endswith("address taken again") for i in ends), run.stdout  # four rounds give it every time here
    for name, steps in zip(("eager", "aot"), made):
        mode = _mode(run, name)
        assert [(s.step, s.backward_calls) for s in mode.of(StepEvent)] == [(i, 1) for i in range(steps)], name
        assert len(mode.of(BackwardEvent)) == steps, name
    assert [s.boundary for s in _mode(run, "aot").of(StepEvent)][-3:] == ["compiled_optimizer"] * 3
    assert "after the last step" not in " ".join(run.stderr.split())


@pytest.mark.slow
@pytest.mark.parametrize("kind, modes", [("max_norm", "eager,aot,ca"), ("clamp", "eager,aot")])
def test_parameters_changed_in_compiled_code_beside_a_stateless_optimizer_are_not_its_steps(record_run, kind, modes):
    """Plain SGD keeps no state, so only its parameters show a compiled step; between its steps, two
    backwards each, compiled code changes them too: an `nn.Embedding(max_norm=...)` (the model's last
    parameter) renormalised by every compiled forward, or a compiled weight clipping after each
    backward. Only a call of the function whose compile traced the optimizer's step is watched, from
    its entry to its return: four steps of two backwards, as in eager, not one a backward, and the
    losses compared step for step agree."""
    run = record_run(str(Path(__file__).parent / "scripts" / "compiled_sgd_params_changed.py"), kind, modes=modes)
    for name in modes.split(","):
        assert [s.backward_calls for s in _mode(run, name).of(StepEvent)] == [2] * 4, name
    assert {s.boundary for s in _mode(run, "aot").of(StepEvent)} == {"compiled_optimizer"}
    code, out, _ = cli_in_process("compare", str(run.path), "--format", "json")
    assert code == 0 and json.loads(out)["numerics"]["agree"]
    # its steps were read from a parameter: the record says so (test_a_stateless_optimizer_...)
    [said] = [f for f in _mode(run, "aot").of(FindingEvent) if f.code == COMPILED_STEP_FROM_PARAMETERS]
    assert said.step == 0 and said.detail == {"optimizer": "SGD"}
    assert not [f for f in _mode(run, "eager").of(FindingEvent) if f.code == COMPILED_STEP_FROM_PARAMETERS]


@pytest.mark.slow
def test_a_stateless_optimizer_stepped_where_its_parameters_are_clamped_is_named_as_a_limit(record_run):
    """The limit of reading a stateless optimizer's compiled step from its parameter: one compiled
    function clamps the parameters after every backward and steps plain SGD after a step's last one.
    Its calls that only clamp change the parameter as a step does, so aot counts more steps than the
    script's four (eager, whose step() runs the hooks, counts four), and the record names the
    optimizer whose steps were read that way, from its first compiled step."""
    run = record_run(str(Path(__file__).parent / "scripts" / "compiled_sgd_params_changed.py"), "clamp_in_step", modes="eager,aot")
    assert "steps 4" in run.stdout.splitlines()
    assert [s.backward_calls for s in _mode(run, "eager").of(StepEvent)] == [2] * 4
    assert len(_mode(run, "aot").of(StepEvent)) > 4  # docs/torch-internals.md, "An optimizer without state"
    [said] = [f for f in _mode(run, "aot").of(FindingEvent) if f.code == COMPILED_STEP_FROM_PARAMETERS]
    assert said.step == 0 and said.detail == {"optimizer": "SGD"} and "clamping" in said.message


@pytest.mark.slow
def test_a_parameter_clamped_between_micro_batches_is_not_an_optimizer_step(record_run):
    """Weight clipping under no_grad after each of a step's two backwards changes the parameters
    in place as the compiled optimizer step does; what is watched for that step is the optimizer's
    state (SGD's momentum buffer here), which only a step changes: four steps of two backwards, as
    in eager, not one a backward, and the losses compared step for step agree."""
    run = record_run(str(Path(__file__).parent / "scripts" / "compiled_optimizer.py"), "2", "clamp", modes="eager,aot")
    for name in ("eager", "aot"):
        assert [s.backward_calls for s in _mode(run, name).of(StepEvent)] == [2] * 4, name
    assert {s.boundary for s in _mode(run, "aot").of(StepEvent)} == {"compiled_optimizer"}
    code, out, _ = cli_in_process("compare", str(run.path), "--format", "json")
    assert code == 0 and json.loads(out)["numerics"]["agree"]
    assert not [f for f in _mode(run, "aot").of(FindingEvent) if f.code == COMPILED_STEP_FROM_PARAMETERS]  # read from its state


def test_no_optimizer_falls_back_to_backward_calls_and_says_so(record_run):
    run = record_run("graph_breaks.py", "3")
    ca = _mode(run, "ca")
    steps = ca.of(StepEvent)
    assert [s.step for s in steps] == [0, 1, 2] and {s.boundary for s in steps} == {"backward"}
    assert mode_metrics(ca).step_boundary == "backward"
    assert "3 steps (no optimizer: one per backward call)" in run.stderr


@pytest.mark.slow
def test_autograd_grad_and_backward_in_one_step(record_run):
    eager = _mode(record_run(SHAPES, "grad-and-backward", "2", modes="eager"))
    assert [s.backward_calls for s in eager.of(StepEvent)] == [2, 2]
    assert [(b.step, b.index, b.call) for b in eager.of(BackwardEvent)] == [
        (0, 0, "grad"), (0, 1, "backward"), (1, 0, "grad"), (1, 1, "backward"),
    ]


@pytest.mark.slow
def test_backward_inside_a_backward_is_not_a_call_of_its_own(record_run):
    """Reentrant checkpointing and a hook's autograd.grad run backward inside the engine's work on
    the outer call: one top-level call a step, as the script wrote it."""
    run = record_run(SHAPES, "nested", "3", modes="eager,ca")  # each mode its own process: one job, both modes
    for mode in ("eager", "ca"):
        record = _mode(run, mode)
        assert [(b.step, b.index, b.call) for b in record.of(BackwardEvent)] == [(0, 0, "backward"), (1, 0, "backward"), (2, 0, "backward")], mode
        assert [s.backward_calls for s in record.of(StepEvent)] == [1, 1, 1], mode


@pytest.mark.slow
def test_threads_calling_backward_are_all_counted(record_run):
    eager = _mode(record_run(SHAPES, "threads", "5", modes="eager"))
    backwards = eager.of(BackwardEvent)
    assert len(backwards) == 10 and len(eager.of(StepEvent)) == 10
    assert {b.thread for b in backwards} == {"worker0", "worker1"}
    assert sorted(s.step for s in eager.of(StepEvent)) == list(range(10))
    # No optimizer: each call is its own step, even when another thread's call closed the step it began in.
    assert sorted(b.step for b in backwards) == list(range(10))
    assert [s.backward_calls for s in eager.of(StepEvent)] == [1] * 10


@pytest.mark.slow
def test_record_survives_the_script_changing_directory(tmp_path):
    env = {**os.environ, "CI": "true", "PYTHONPATH": str(ROOT)}
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--torch-trace", "-o", "rec", SHAPES, "chdir", "2")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    ca = load_run(tmp_path / "rec").mode("ca")
    assert ca.manifest.status == "finished" and len(ca.of(StepEvent)) == 2
    graphs = ca.of(CAGraphEvent)
    assert graphs and all((ca.path / g.code_file).is_file() for g in graphs)
    assert (ca.path / "trace").is_dir()


@pytest.mark.slow
def test_dynamo_reset_mid_run_keeps_counting_and_says_compiled_autograd_went_off(record_run):
    ca = _mode(record_run(SHAPES, "reset", "3", modes="ca"), "ca")
    assert [s.step for s in ca.of(StepEvent)] == [0, 1, 2]
    # The reset (the script's step 1) turns compiled autograd off, as inside `_enable` by hand: the
    # later backwards are plain, still counted as steps, and the record says where CA went off.
    assert {g.step for g in ca.of(CAGraphEvent)} == {0}
    [finding] = [f for f in ca.of(FindingEvent) if f.code == "ca_turned_off_by_reset"]
    assert finding.step == 1 and finding.source.file.endswith("step_shapes.py")
    assert finding.message.startswith("at step 1 the script called torch._dynamo.reset()")


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_steps_are_timed_on_the_device_and_losses_read_at_the_end(record_run):
    ca = _mode(record_run(SHAPES, "cuda", "6", modes="ca"), "ca")
    steps = ca.of(StepEvent)
    assert len(steps) == 6 and all(s.loss is None for s in steps)  # never read during the run
    late = ca.of(StepDeviceEvent)
    assert {e.step for e in late if e.loss is not None} == {0, 1, 2, 3, 4, 5}
    assert {e.step for e in late if e.device_s is not None} == {1, 2, 3, 4, 5}
    metrics = mode_metrics(ca)
    assert metrics.peak_device_memory_bytes and metrics.peak_device_memory_bytes > 0
    assert metrics.step_time is not None and metrics.step_time.clock in ("device", "wall")


def test_schema_1_records_still_read(tmp_path):
    """A record written before steps were optimizer steps: one step per backward, timed from
    backward start to backward start."""
    import json

    from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
    from cagtool.record.schema import event_to_dict, json_default

    run = tmp_path / "old"
    (run / "ca").mkdir(parents=True)
    meta = RunMeta(run_id="old", created_at="", cagtool_argv=[], target={"kind": "script", "name": "t.py"},
                   target_argv=["t.py"], cwd=str(tmp_path), modes=["ca"], versions={}, machine={}, status="finished", exit_code=0)
    meta.schema_version = 1
    manifest = ModeManifest(mode="ca", argv=["t.py"], target={}, cwd=str(tmp_path), versions={}, backend="eager",
                            dynamic=False, started_at="", status="finished", exit_code=0)
    manifest.schema_version = 1
    (run / "run.json").write_text(json.dumps(to_dict(meta)))
    (run / "ca" / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    # backward i starts at 1.0 + 0.1 i and lasts 0.02 s; step 1 compiled.
    steps = [StepEvent(seq=i, t=1.0 + 0.1 * i + 0.02, step=i + 1, backward_s=0.02, compiles=int(i == 0)) for i in range(5)]
    (run / "ca" / "events.jsonl").write_text("".join(json.dumps(event_to_dict(e), default=json_default) + "\n" for e in steps))
    metrics = mode_metrics(load_run(run).mode("ca"))
    assert metrics.steps == 5 and metrics.backward_calls == 5 and metrics.step_boundary == ""
    assert metrics.step_time.count == 3 and abs(metrics.step_time.median_s - 0.1) < 1e-9
    frame = steps_frame(load_run(run).mode("ca"))
    assert list(frame.index) == [0, 1, 2, 3, 4]  # written 1..5: schema 1 numbered steps from 1, read from 0
    assert abs(frame.loc[1, "iteration_s"] - 0.1) < 1e-9 and frame.loc[0, "compile_affected"]


@pytest.mark.slow
def test_optimizers_stepped_by_hooks_inside_a_compiled_autograd_backward_are_each_steps(record_run):
    """Optimizer in backward: each parameter's optimizer stepped by its post-accumulate-grad hook.
    Under compiled autograd the hooks run inside the compiled backward graph, where cagtool's
    optimizer hooks are out of torch's dicts: eager counted 6 steps (24 optimizer steps), ca "0
    steps (6 backward calls, no optimizer step ended)", so no step time and no verdict for
    compiled autograd. The optimizers' readings taken where the graph's compiled call returns,
    inside the backward, now end each step at that backward's end, as eager's hooks end it."""
    script = str(Path(__file__).parent / "scripts" / "optimizer_in_backward.py")
    run = record_run(script, modes="eager,ca", backend="aot_eager")
    eager, ca = _mode(run, "eager").of(StepEvent), _mode(run, "ca").of(StepEvent)
    assert len(eager) == len(ca) == 6, (len(eager), len(ca))
    assert len(_mode(run, "eager").of(OptimizerStepEvent)) == 24
    assert [s.boundary for s in ca] == ["compiled_optimizer"] * 6
    assert [s.backward_calls for s in ca] == [1] * 6
    # Steps after the first have a span and the CPU times a verdict reads.
    assert all(s.wall_s is not None and s.cpu_s is not None for s in ca[1:]), ca
    # Every parameter stepped in both modes (its version counter moved; the compiled step bumps it twice).
    versions = [json.loads(line.split(" ", 1)[1]) for line in run.stdout.splitlines() if line.startswith("versions")]
    assert len(versions) == 2 and all(v > 1 for mode in versions for v in mode), versions
