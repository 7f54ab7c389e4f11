"""`cagtool compare` end to end on real records of the sample scripts (eager backends, small step counts)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd, cagtool_in_process

THREE = "eager,aot,ca"

# Crashes under compiled autograd only, after two good steps: aot and eager finish.
CRASH_UNDER_CA = '''\
import torch
from torch._dynamo import compiled_autograd

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
step_fn = torch.compile(model, backend="eager")
for step in range(5):
    loss = step_fn(torch.randn(2, 4)).pow(2).sum()
    loss.backward()
    if step == 1 and compiled_autograd.compiled_autograd_enabled:
        raise RuntimeError("boom under compiled autograd")
'''


def compare(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = cagtool_in_process("compare", *args, env={"CI": "true", "COLUMNS": "120"})
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def compare_json(*args: str) -> dict:
    return json.loads(compare(*args, "--format", "json").stdout)


@pytest.fixture(scope="module")
def graph_breaks_run(record_run):
    run = record_run("graph_breaks.py", "3", modes=THREE)
    assert run.returncode == 0, run.stderr
    return run


@pytest.fixture(scope="module")
def transformer_run(record_run):
    run = record_run("transformer_lm.py", "--steps", "6", "--backend", "eager", modes=THREE)
    assert run.returncode == 0, run.stderr
    return run


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory, inductor_cache):
    root = tmp_path_factory.mktemp("crash")
    script = root / "crash_under_ca.py"
    script.write_text(CRASH_UNDER_CA)
    out = root / "run"
    env = {**os.environ, "CI": "true", "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache)}
    cmd = cagtool_cmd("run", "--modes", THREE, "--backend", "eager", "-o", str(out), str(script))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(ROOT))
    return out, proc


@pytest.mark.slow
def test_graph_break_script_backward_graphs_aot_3_ca_1(graph_breaks_run):
    """The tutorial's claim, in the tool's own JSON: two graph breaks give 3 backward graphs under
    torch.compile alone and 1 under compiled autograd."""
    data = compare_json(str(graph_breaks_run.path))
    modes = data["modes"]
    assert modes["aot"]["backward_graphs"] == 3
    assert modes["ca"]["backward_graphs"] == 1
    assert modes["ca"]["ca_graphs"] == 1
    assert modes["aot"]["forward_graphs"] == 3 and modes["aot"]["graph_breaks"] == 2
    assert modes["eager"]["forward_graphs"] == 0 and modes["eager"]["backward_graphs"] == 0
    assert data["numerics"]["agree"] is True


@pytest.mark.slow
def test_json_schema_on_a_real_run(graph_breaks_run):
    data = compare_json(str(graph_breaks_run.path))
    assert data["format"] == "cagtool-compare" and data["schema_version"] == 1
    ints = ("forward_graphs", "backward_graphs", "ca_graphs", "graph_breaks", "recompiles", "peak_rss_bytes", "exit_code")
    floats = ("compile_time_s", "first_step_s", "step_time_median_s", "step_time_p10_s", "step_time_p90_s")
    assert list(data["modes"]) == ["eager", "aot", "ca"]
    for name, mode in data["modes"].items():
        for key in ints:
            assert isinstance(mode[key], int) and not isinstance(mode[key], bool), (name, key)
        for key in floats:
            assert isinstance(mode[key], (int, float)), (name, key)
        assert mode["exit_code"] == 0 and mode["status"] == "finished"
        assert mode["step_time_p10_s"] <= mode["step_time_median_s"] <= mode["step_time_p90_s"]
        assert set(mode["compile_phases_s"]) == {"dynamo", "aot", "inductor", "ca_capture", "backward"}
    assert set(data["speedups"]) == {"aot/eager", "ca/eager", "ca/aot"}
    for pair in data["speedups"].values():
        assert pair["speedup"] > 0 and pair["low"] <= pair["speedup"] <= pair["high"]
        assert isinstance(pair["within_noise"], bool)
    # Compilation touched the first step (0) in the compiled modes: left out of the steady state, and said so.
    assert 0 in data["modes"]["ca"]["excluded_steps"]


@pytest.mark.slow
def test_transformer_numerics_agree(transformer_run):
    data = compare_json(str(transformer_run.path))
    numerics = data["numerics"]
    assert numerics["reference"] == "eager"
    assert numerics["agree"] is True, numerics
    assert numerics["max_rel_diff"] <= numerics["rtol"]
    losses = {d["record"]: d["compared"] for d in numerics["diffs"] if d["quantity"] == "loss"}
    assert losses == {"aot": 6, "ca": 6}
    norms = {(d["record"], d["quantity"]) for d in numerics["diffs"]}
    assert ("ca", "param_norm") in norms and ("ca", "grad_norm") in norms
    table = compare(str(transformer_run.path)).stdout
    assert "Numerics: losses and final norms agree with eager" in table
    assert "ca/eager" in table and "Problems" not in table


@pytest.mark.slow
def test_a_crashing_mode_is_shown_as_failed_while_the_others_report(crash_run):
    out, proc = crash_run
    assert proc.returncode == 1, proc.stderr  # `cagtool run` says so in its exit code
    data = compare_json(str(out))
    ca = data["modes"]["ca"]
    assert ca["status"] == "failed" and ca["exit_code"] == 1
    assert ca["failures"][0]["reason"] == "RuntimeError: boom under compiled autograd"
    for other in ("eager", "aot"):
        assert data["modes"][other]["status"] == "finished"
        assert data["modes"][other]["step_time_median_s"] is not None
    assert data["speedups"]["aot/eager"]["speedup"] is not None
    assert any("ca: failed, exit code 1: RuntimeError: boom under compiled autograd" in p for p in data["problems"])
    # The two steps ca ran before the crash still have their losses compared.
    ca_loss = next(d for d in data["numerics"]["diffs"] if d["record"] == "ca" and d["quantity"] == "loss")
    assert ca_loss["compared"] == 2 and ca_loss["agrees"] is True
    table = compare(str(out)).stdout
    assert "FAILED, exit 1" in table and "Problems:" in table


@pytest.mark.slow
def test_two_runs_before_after(graph_breaks_run):
    a, b = str(graph_breaks_run.path), str(graph_breaks_run.path)
    table = compare(a, b).stdout
    assert "A (before)" in table and "B (after)" in table and "speedup B over A" in table
    data = compare_json(a, b)
    assert data["format"] == "cagtool-compare-runs"
    assert data["changes"]["ca"]["deltas"]["backward_graphs"] == 0
    assert data["changes"]["ca"]["numerics"][0]["max_rel_diff"] == 0.0


def test_a_forged_reference_loop_is_refused_as_the_gate_refuses_it(graph_breaks_run, tmp_path):
    """A machine that ran the reference loop 1.6x slower is noted; a loop of 1000 s, which no
    machine gives, read "797766.25x slower" and is now refused (exit 3), naming the field."""
    import shutil

    a = str(graph_breaks_run.path)
    loop = json.loads((graph_breaks_run.path / "run.json").read_text())["machine"]["reference_loop_s"]
    for name, value in (("slower", loop * 1.6), ("forged", 1000.0)):
        copy = Path(shutil.copytree(graph_breaks_run.path, tmp_path / name))
        meta = json.loads((copy / "run.json").read_text())
        meta["machine"]["reference_loop_s"] = value
        (copy / "run.json").write_text(json.dumps(meta))
    assert "reference loop 1.60x slower than A's" in compare(a, str(tmp_path / "slower")).stdout
    for args in ((a, str(tmp_path / "forged")), (str(tmp_path / "forged"), a)):
        refused = compare(*args, check=False)
        assert refused.returncode == 3 and refused.stderr.count("\n") == 1, refused.stdout + refused.stderr
        assert "machine.reference_loop_s is 1000.0, not a reference loop's CPU seconds" in refused.stderr


@pytest.mark.slow
def test_csv_and_markdown(graph_breaks_run):
    rows = list(csv.DictReader(io.StringIO(compare(str(graph_breaks_run.path), "--format", "csv").stdout)))
    assert [r["mode"] for r in rows] == ["eager", "aot", "ca"]
    for column in ("unique_graphs", "graph_breaks", "autograd_captures", "compilation_latency", "speedup", "abs_latency"):
        assert column in rows[0]
    assert rows[2]["autograd_captures"] == "1" and rows[1]["graph_breaks"] == "2"
    md = compare(str(graph_breaks_run.path), "--format", "markdown").stdout
    assert "| backward graphs | 0 | 3 (AOT) | 1 (CA) |" in md


def test_bad_input_exits_3(tmp_path: Path):
    missing = compare(str(tmp_path / "nope"), check=False)
    assert missing.returncode == 3 and missing.stderr.startswith("cagtool: error: no run at")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "run.json").write_text("not json {")
    bad = compare(str(garbage), check=False)
    assert bad.returncode == 3 and "not valid JSON" in bad.stderr
    assert "Traceback" not in bad.stderr
    empty = tmp_path / "runs"
    env_proc = cagtool_in_process("compare", env={"CAGTOOL_RUNS_DIR": str(empty)})
    assert env_proc.returncode == 3 and "no runs recorded yet" in env_proc.stderr


@pytest.mark.slow
def test_bad_format_is_a_usage_error(graph_breaks_run):
    proc = compare(str(graph_breaks_run.path), "--format", "yaml", check=False)
    assert proc.returncode == 2


@pytest.mark.parametrize("flag, value", [("--rtol", "nan"), ("--rtol", "-1"), ("--atol", "inf"), ("--atol", "nan")])
def test_a_tolerance_that_compares_nothing_is_a_usage_error(tmp_path, flag, value):
    """NaN agrees with nothing (the losses read as "inputs differ" against themselves) and an
    infinite tolerance with everything: refused before any record is read."""
    proc = compare(str(tmp_path / "no-run"), flag, value, check=False)
    assert proc.returncode == 2 and "--rtol and --atol take a finite number, not negative" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_first_step_that_already_differs_is_quoted_at_the_first_step(record_run):
    """A compiled forward that computes differently: the first step's losses already differ, and
    the words quote those (each mode's step-0 loss, as the script printed it), not the losses of
    the step where they differ most; the compiled forward is named among the possible reasons.
    aot's forward is compiled alike: ca is compared with it, which says compiled autograd changed
    nothing on top of the forward (the headline too)."""
    run = record_run("../tests/scripts/compiled_forward_differs.py", modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr
    printed = [line.split() for line in run.stdout.splitlines() if line[:1].isdigit()]
    eager_0, aot_0, ca_0 = [float(v) for s, v in printed if s == "0"]  # in run order
    assert aot_0 == ca_0 != eager_0
    text = " ".join(compare(str(run.path)).stdout.split())
    assert f"ca's first-step loss already differs from eager's ({ca_0!r} vs {eager_0!r}" in text, text
    assert "or the compiled forward computes differently" in text
    assert ("Numerics: ca against aot (compiled alike): losses and final norms agree within rtol 0.001, atol 1e-06; "
            "largest relative difference 0: compiled autograd changed nothing beyond the compiled program's difference from eager") in text, text
    assert "numerics: ca agrees with aot; both differ from eager from the first step" in text.split("Modes side by side")[0], text


@pytest.mark.slow
def test_compiled_gradients_that_differ_from_eager_alike_in_aot_and_ca_are_not_blamed_on_ca(record_run):
    """The first step's losses agree and the later ones part (the compiled program computes other
    gradients; a library behaving otherwise under eager's TORCHDYNAMO_DISABLE does the same: HF
    GPT-2 with gradient checkpointing), aot and ca alike: the headline does not say "numerics
    DISAGREE" of compiled autograd, and ca's speed against aot is still a verdict (the same job)."""
    run = record_run("../tests/scripts/compiled_gradient_differs.py", modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr
    printed = [line.split() for line in run.stdout.splitlines() if line[:1].isdigit()]
    eager_1, aot_1, ca_1 = [float(v) for s, v in printed if s == "1"]
    assert aot_1 == ca_1 != eager_1
    text = " ".join(compare(str(run.path)).stdout.split())
    headline = text.split("Modes side by side")[0]
    assert ("numerics: ca agrees with aot; both differ from eager: the compiled program computes otherwise than eager, "
            "not compiled autograd") in headline, headline
    assert "numerics DISAGREE" not in headline and "not a verdict: its numerics differ" not in headline, headline
    assert "Numerics: ca against aot (compiled alike): losses and final norms agree" in text
    # The gradients, parameter by parameter, say the same (they read "ca differs from eager" alone).
    assert ("gradients: ca agrees with aot on all 4 parameters at 2 digested steps (steps 0, 4; worst 0x the tolerance); "
            "both differ from eager (first at step 0, in 1 of 4 parameters): the compiled program computes otherwise than eager, "
            "not compiled autograd") in text, text
    # ca's parameters are aot's: listed once, under aot (they were listed again under ca, word for word).
    assert "ca differs from eager as aot does: its gradients are aot's (the line below)" in text, text
    assert "ca differs from eager first at step" not in text and text.count("differs from eager first at step 0") == 1, text
    [against] = json.loads(compare(str(run.path), "--format", "json").stdout)["grad_parity"]["against_aot"]
    assert against["record"] == "ca" and against["reference"] == "aot" and against["agrees"], against


@pytest.mark.slow
def test_without_the_aot_mode_a_disagreement_names_eagers_disabled_dynamo(record_run):
    """`--modes eager,ca` of the same job: nothing to compare ca with but eager, so the disagreement
    stands, and a note says why eager may be the one that differs and how to tell (the aot mode)."""
    run = record_run("../tests/scripts/compiled_gradient_differs.py", modes="eager,ca")
    assert run.returncode == 0, run.stderr
    text = " ".join(compare(str(run.path)).stdout.split())
    assert "Numerics DISAGREE with eager" in text
    assert ("note: eager runs the script with Dynamo disabled (TORCHDYNAMO_DISABLE=1), and a library that behaves otherwise "
            "under it differs there with nothing compiled") in text, text
    three = " ".join(compare(str(record_run("../tests/scripts/compiled_gradient_differs.py", modes="eager,aot,ca").path)).stdout.split())
    assert "TORCHDYNAMO_DISABLE" not in three  # with aot, ca is compared with it instead


def test_a_compile_time_between_two_runs_is_a_figure_not_a_verdict(record_run, tmp_path):
    """`compare A B` said "compile 231% slower" (and "30% slower" of two runs of one unchanged job):
    one compile a process, under whatever load each run met, stated as a change. The headline gives
    the two figures and says the gate's compile check judges them."""
    import json
    import shutil

    from conftest import cli_in_process

    run = record_run("op_loop.py", modes="aot", backend="eager")
    assert run.returncode == 0, run.stderr[-2000:]
    later = tmp_path / "B"
    shutil.copytree(run.path, later, symlinks=True)
    events = later / "aot" / "events.jsonl"
    lines = []
    for text in events.read_text().splitlines():
        event = json.loads(text)
        if event.get("kind") == "dynamo_compile" and event.get("entire_frame_compile_time_s"):
            event["entire_frame_compile_time_s"] *= 3.3
        lines.append(json.dumps(event))
    events.write_text("\n".join(lines) + "\n")
    code, text, err = cli_in_process("compare", str(run.path), str(later), env={"CI": "true", "COLUMNS": "300"})
    assert code == 0, err
    headline = " ".join(text.split("Before/after")[0].split())
    assert "(a figure, not a verdict: gate --max-compile-regression judges it against the load)" in headline, headline
    assert "% slower" not in headline and "% faster" not in headline, headline
