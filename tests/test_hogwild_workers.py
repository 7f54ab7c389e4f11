"""Hogwild training (pytorch/examples' mnist_hogwild): the main process trains nothing and starts
torch.multiprocessing workers, without a rank, that train one model in shared memory. Their
records are the job's training: read as the mode's ranks (numbered by start), never as a mode that
trained nothing, and their numerics, decided by the order the OS ran the workers, are compared with
nothing; with private weights each worker's numerics are compared across the modes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import cagtool_cmd, cli_in_process, recorded_once

from cagtool.record.loader import load_run
from cagtool.record.schema import FinalStateEvent

SCRIPT = Path(__file__).parent / "scripts" / "hogwild_workers.py"
ENV = {**os.environ, "CI": "true"}


def _record(*extra: str):
    def record(base: Path) -> dict:
        proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "-o", str(base / "run"),
                                          str(SCRIPT), *extra), cwd=base, capture_output=True, text=True, timeout=600, env=ENV)
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-4000:]}
    return record


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory) -> Path:
    base, value = recorded_once(tmp_path_factory, "hogwild-shared", _record())
    assert value["rc"] == 0, value["stderr"]
    assert value["stdout"].count("worker 0 loss") == 2  # each mode's workers trained
    return base / "run"


@pytest.fixture(scope="module")
def private_run(tmp_path_factory) -> Path:
    base, value = recorded_once(tmp_path_factory, "hogwild-private", _record("--private"))
    assert value["rc"] == 0, value["stderr"]
    return base / "run"


def test_workers_are_the_modes_ranks_with_torchs_own_counts(shared_run):
    run = load_run(shared_run)
    for name in ("eager", "ca"):
        record = run.modes[name]
        workers = record.ranks()
        assert sorted(workers) == [0, 1] and all(w.worker is not None and w.manifest.process["rank"] is None for w in workers.values())
        assert record.worker is None and record.rank is None  # the main process trained nothing and stays the launcher
        for worker in workers.values():
            final = worker.of(FinalStateEvent)[-1]
            assert final.params_shared == final.num_params == 4  # the model's 4 tensors, in shared memory
    code, text, _ = cli_in_process("summary", str(shared_run), "--format", "json", env={"CI": "true"})
    data = json.loads(text)
    ca = data["ranks"]  # the summary's mode, ca
    assert ca["mode"] == "ca" and ca["workers"] is True
    # Each worker's CA graph count is the one torch counted in that process.
    for row in ca["ranks"]:
        record = run.modes["ca"].processes[row["process"]]
        assert row["ca_graphs"] == record.manifest.torch_counters["compiled_autograd"]["captures"] == 1
        assert row["steps"] == 12


def test_the_gate_checks_each_worker_and_never_reads_the_main_process_as_a_mode_that_trained_nothing(shared_run):
    code, text, _ = cli_in_process("gate", str(shared_run), "--max-recompiles", "ca:0", "--format", "json", env={"CI": "true"})
    data = json.loads(text)
    assert code == 0, text
    checks = {(c["check"], c["mode"]): c["outcome"] for c in data["checks"]}
    assert checks[("mode-finished", "ca")] == "pass"
    assert checks[("max-recompiles:ca", "ca@rank0")] == checks[("max-recompiles:ca", "ca@rank1")] == "pass"
    assert ("ranks-agree", "ca") not in checks  # workers are held to nothing of each other's: no check claims they agree


def test_shared_weights_are_not_compared_and_private_ones_are(shared_run, private_run):
    code, text, _ = cli_in_process("compare", str(shared_run), env={"CI": "true"})
    flat = " ".join(text.split())
    assert code == 0
    assert "numerics not comparable: eager and ca trained weights in shared memory that other processes wrote too" in flat
    assert "Numerics: not compared: eager and ca trained parameters in shared memory" in flat
    assert "unseeded" not in flat and "DISAGREE" not in flat and "DIVERGE" not in flat
    # Gradients that differ are not comparable (computed on weights the OS's order decided); digests
    # equal bit for bit (no other worker wrote before a digested step) are what they are: no verdict
    # of a difference either way, and the gate never fails on a difference.
    gradients = flat.split("gradients:")[1]
    assert ("ca rank0 vs eager rank0" in gradients.split(": not comparable: trained parameters in shared memory")[0]
            or "agree" in gradients.split("  ")[0]), gradients
    # One reason for every pair: said once, not once per pair, and no step's alignment note for
    # pairs compared on nothing.
    assert gradients.count("shared memory") <= 1 and "not compared with eager" not in gradients, gradients
    assert "differs from eager" not in gradients, gradients
    code, text, _ = cli_in_process("gate", str(shared_run), "--max-grad-diff", "1", env={"CI": "true"})
    assert (code == 1 and "ERROR: max-grad-diff" in text and "shared memory" in text) or code == 0, text
    code, text, _ = cli_in_process("compare", str(private_run), env={"CI": "true"})
    flat = " ".join(text.split())
    assert "Numerics: losses and final norms agree with eager" in flat and "shared memory" not in flat
    code, text, _ = cli_in_process("gate", str(private_run), "--max-grad-diff", "1", env={"CI": "true"})
    assert code == 0, text
