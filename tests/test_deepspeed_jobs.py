"""DeepSpeed jobs that turn compiled autograd on themselves (`engine.compile(compiled_autograd_enabled=True)`,
sample_scripts/deepspeed_zero.py), ZeRO stages 0, 1 and 2: 2 ranks on CPU over gloo under torchrun and
under DeepSpeed's own launcher, and one process: torch's counters per rank are the plain job's, the ranks agree (the model's parameters,
by name: a ZeRO 1/2 optimizer steps each rank's own flat partition), the gate passes, and the CA
compiler named is the one DeepSpeed compiled with (the accelerator's compile backend), not
cagtool's --backend. Run where deepspeed is installed beside the pinned torch; the first run
JIT-builds a small C++ op (about a minute, cached after)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLES, cagtool_cmd, cagtool_in_process, recorded_once
from cagtool.record.loader import load_run
from cagtool.record.schema import FINDING_MODULE_COMPILE_SKIPPED, CAGraphEvent, FinalStateEvent, FindingEvent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                       reason="deepspeed is not installed (pip install deepspeed beside the pinned torch)"),
]
SCRIPT = str(SAMPLES / "deepspeed_zero.py")
ENV = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _printed(stdout: str) -> list[dict]:
    """The ranks' JSON lines, in the order they were printed."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"rank"')]


def _counters(counters: dict) -> dict:
    """Torch's counters as the record keeps them: each reason cut to its first 300 characters
    (capture/torch_counters.py)."""
    out: dict = {}
    for kind, values in counters.items():
        if values:
            cut = out.setdefault(kind, {})
            for key, value in values.items():
                cut[str(key)[:300]] = cut.get(str(key)[:300], 0) + value
    return out


@pytest.fixture(scope="module", params=[0, 1, 2], ids=["zero0", "zero1", "zero2"])
def zero2_torchrun(request, tmp_path_factory):
    """ZeRO 0, 1 and 2 under torchrun: cagtool run aot,ca beside the plain job (compiled autograd
    on, as the script sets it up)."""
    stage = request.param

    def record(directory):
        script = [SCRIPT, "--stage", str(stage), "--ca-backend", "eager"]
        plain = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", _port(), *script],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=ENV, cwd=ROOT)
        try:
            run = subprocess.run(cagtool_cmd("run", "--modes", "aot,ca", "--backend", "aot_eager", "--no-report", "-o", str(directory / "r"),
                                             "torchrun", "--nproc-per-node", "2", "--master-port", _port(), *script),
                                 capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=1200)
            plain_out, _ = plain.communicate(timeout=1200)
        finally:
            plain.kill()
            plain.wait()
        return {"rc": run.returncode, "stdout": run.stdout, "stderr": run.stderr[-4000:], "plain_rc": plain.returncode, "plain": plain_out}

    path, value = recorded_once(tmp_path_factory, f"deepspeed-zero{stage}-torchrun", record)
    assert value["rc"] == 0 and value["plain_rc"] == 0, value["stderr"]
    return path / "r", {**value, "stage": stage}


def test_counts_per_rank_are_the_plain_jobs(zero2_torchrun):
    path, value = zero2_torchrun
    run = load_run(path)
    plain = {line["rank"]: line for line in _printed(value["plain"])}
    printed = _printed(value["stdout"])  # aot's two ranks, then ca's
    aot = {line["rank"]: line for line in printed[:2]}
    assert sorted(plain) == sorted(aot) == [0, 1]
    for rank, record in run.mode("ca").ranks().items():
        assert _counters(record.manifest.torch_counters) == _counters(plain[rank]["counters"])
        assert record.manifest.torch_counters["compiled_autograd"]["captures"] >= 1
    for rank, record in run.mode("aot").ranks().items():
        # compiled autograd forced off in aot: the job's own counters at its end, no CA capture
        assert _counters(record.manifest.torch_counters) == _counters(aot[rank]["counters"])
        assert "compiled_autograd" not in _counters(record.manifest.torch_counters)


def test_the_ranks_agree_on_the_models_parameters_and_the_gate_passes(zero2_torchrun):
    path, value = zero2_torchrun
    run = load_run(path)
    plain = {line["rank"]: line for line in _printed(value["plain"])}
    for mode in ("aot", "ca"):
        for rank, record in run.mode(mode).ranks().items():
            [final] = record.of(FinalStateEvent)
            # ZeRO 2: the model's six, not the one flat partition the optimizer steps; ZeRO 0: the
            # optimizer steps the model's own six
            assert final.of == ("model" if value["stage"] else "optimizer") and final.num_params == 6
            assert final.param_norm == pytest.approx(plain[rank]["param_norm"], rel=1e-9)
    summary = cagtool_in_process("summary", path)
    assert "ranks_norms_diverge" not in summary.stdout and "final norm differs" not in summary.stdout
    assert summary.stdout.count("the ranks agree: same CA graphs and cache misses, same final norms") == 2
    compare = cagtool_in_process("compare", path)
    assert "not synchronised" not in compare.stdout
    sharded = "rank1 vs ca rank0: not compared: the optimizer stepped tensors no module holds" in compare.stdout
    assert sharded == bool(value["stage"])
    gate = cagtool_in_process("gate", path, "--max-recompiles", "20")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "ranks" in gate.stdout


def test_the_compiler_named_is_the_one_deepspeed_compiled_with(zero2_torchrun):
    path, _ = zero2_torchrun
    run = load_run(path)
    compilers = {g.compiler for record in run.mode("ca").ranks().values() for g in record.of(CAGraphEvent)}
    assert compilers == {"script:eager"}  # DeepSpeed's accelerator backend, not engine.compile's or cagtool's aot_eager
    summary = cagtool_in_process("summary", path)
    assert "CA compiler eager, the script's own; cagtool's --backend aot_eager unused" in summary.stdout
    assert "CA backend aot_eager" not in summary.stdout


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_deepspeeds_own_launcher_ranks_agree_and_pass_the_gate(tmp_path, stage):
    out = tmp_path / "r"
    run = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "aot_eager", "--no-report", "-o", str(out),
                                     "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", _port(),
                                     SCRIPT, "--stage", str(stage), "--ca-backend", "eager"),
                         capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    record = load_run(out).mode("ca")
    printed = {line["rank"]: line for line in _printed(run.stdout)}
    ranks = record.ranks()
    assert sorted(ranks) == sorted(printed) == [0, 1]
    for rank, rec in ranks.items():
        assert rec.manifest.torch_counters["compiled_autograd"] == printed[rank]["counters"]["compiled_autograd"]
        assert sum(rec.manifest.torch_counters["graph_break"].values()) == sum(printed[rank]["counters"]["graph_break"].values())
        assert {g.compiler for g in rec.of(CAGraphEvent)} == {"script:eager"}
    summary = cagtool_in_process("summary", out)
    assert "the ranks agree: same CA graphs and cache misses, same final norms" in summary.stdout
    assert cagtool_in_process("gate", out, "--max-recompiles", "20").returncode == 0


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_one_process_counts_and_norm_are_the_plain_jobs(tmp_path, stage):
    """`python deepspeed_zero.py` as one process (DeepSpeed sets up a world of one): under cagtool's
    ca mode torch's counters and the final norm are the plain job's, the compiler is DeepSpeed's."""
    script = [SCRIPT, "--stage", str(stage), "--ca-backend", "eager"]
    env = {**ENV, "MASTER_PORT": _port()}
    plain = subprocess.run([sys.executable, *script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    assert plain.returncode == 0, plain.stderr[-4000:]
    out = tmp_path / "r"
    env = {**ENV, "MASTER_PORT": _port()}
    run = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "aot_eager", "--no-report", "-o", str(out), *script),
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    [expected] = _printed(plain.stdout)
    [printed] = _printed(run.stdout)
    assert printed["counters"] == expected["counters"] and printed["param_norm"] == pytest.approx(expected["param_norm"], rel=1e-9)
    record = load_run(out).mode("ca")
    assert _counters(record.manifest.torch_counters) == _counters(expected["counters"])
    assert {g.compiler for g in record.of(CAGraphEvent)} == {"script:eager"}
    # engine.compile() calls module.compile() on the script's nn.Sequential, whose forward compiles
    # with the engine's hooks on it (docs/torch-internals.md, "A compile call that compiles nothing")
    assert [f for f in record.of(FindingEvent) if f.code == FINDING_MODULE_COMPILE_SKIPPED] == []
    [final] = record.of(FinalStateEvent)
    assert final.param_norm == pytest.approx(expected["param_norm"], rel=1e-9)
    assert cagtool_in_process("gate", out, "--max-recompiles", "20").returncode == 0


def test_a_warmup_rates_type_then_value_recompiles_are_each_named_and_a_tensor_rate_ends_them(tmp_path):
    """tests/scripts/deepspeed_warmup_compiled_step.py: DeepSpeed's WarmupLR writes the rate as the
    int 0 (`warmup_min_lr: 0`), then floats, into a compiled AdamW step's param group: torch
    recompiles step() for the type (0 -> 0.0), then for the value, after which the rate is an
    input. `recompiles --explain` names each from torch's guards, and the tensor rate it gives as
    the fix leaves step() without a recompile under plain python."""
    script = str(ROOT / "tests" / "scripts" / "deepspeed_warmup_compiled_step.py")
    env = {**ENV, "MASTER_PORT": _port()}
    run = subprocess.run(cagtool_cmd("run", "--modes", "aot", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), script),
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    explained = cagtool_in_process("recompiles", tmp_path / "r", "--explain", "--format", "json")
    [lr] = [c for c in json.loads(explained.stdout)["modes"]["aot"]["explanation"]["causes"] if "the learning rate changed" in c["title"]]
    first, second = (e["compile_id"] for e in lr["evidence_ids"])
    per = next(line for line in lr["why"] if line.startswith("Per recompile:"))
    assert f"{first}: the int `0` became the float `0.0`" in per and f"{second}: the rate changed from `0.0`, and {second} takes it as an input" in per
    assert "lr=torch.tensor(0.01)" in lr["fix"][0] and "its first rate was the int `0`" in lr["fix"][1]
    events = [json.loads(line) for line in (tmp_path / "r" / "aot" / "events.jsonl").read_text().splitlines()]
    assert [e["compile_id"] for e in events if e["kind"] == "dynamo_recompile"] == [first, second]  # torch's count
    fixed = subprocess.run([sys.executable, script, "--tensor-lr"], capture_output=True, text=True, cwd=ROOT, timeout=1200,
                           env={**ENV, "MASTER_PORT": _port(), "TORCH_LOGS": "recompiles"})
    assert fixed.returncode == 0, fixed.stderr[-4000:]
    assert "Recompiling function" not in fixed.stderr
