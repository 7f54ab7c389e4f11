"""A job of real length, end to end: 2,000 steps through `cagtool run --gate`, `baseline save` and a
gate against that baseline. The gate's quantile bands once overflowed past ~1,030 steady steps
(exit 4 after the whole job had trained); this pins that a long job is gated, a process one unit."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import cagtool_cmd, cagtool_in_process

pytestmark = pytest.mark.slow

STEPS = 2_000

# aot_eager: the job's length is the point, not Inductor (whose cold compiles, one set per mode,
# were most of this test's CPU); the forward and backward are still compiled graphs.
SCRIPT = """\
import sys
import torch

torch.manual_seed(0)
model = torch.compile(torch.nn.Linear(8, 8), backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(4, 8)
for step in range(int(sys.argv[1])):
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
"""


def _cagtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "true"}
    return subprocess.run(cagtool_cmd(*map(str, args)), capture_output=True, text=True, timeout=600, cwd=str(cwd), env=env)


def _report(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`baseline save` and `gate` read the record and write no process of their own: in-process,
    through the CLI's entry point (a new interpreter each cost ~0.6 s of CPU)."""
    return cagtool_in_process(*args, cwd=cwd, env={"CI": "true"})


def test_a_2000_step_job_runs_through_run_gate_baseline_and_gate(tmp_path):
    script = tmp_path / "tiny_train.py"
    script.write_text(SCRIPT)
    run = tmp_path / "run"
    recorded = _cagtool("run", "--modes", "aot,ca", "--backend", "eager", "-o", run, "--gate", "--max-recompiles", "ca:0",
                        "--min-speedup", "ca/aot:0.01", script, STEPS, cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    gate = json.loads((run / "gate.json").read_text())
    assert gate["passed"] is True
    speedup = next(c for c in gate["checks"] if c["check"] == "min-speedup")
    # One process per mode: a process is one unit, however many steps it ran; the run-to-run
    # noise is assumed, and a ratio near 1 is clear of a 0.01x minimum all the same.
    assert speedup["outcome"] == "pass" and speedup["data"]["unit"] == "process" and speedup["data"]["units"] == [1, 1]
    assert speedup["data"]["noise_measured"] is False and any("not measured, assumed" in note for note in speedup["notes"])

    baseline = tmp_path / "baseline.json"
    saved = _report("baseline", "save", run, "-o", baseline, cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    sample = json.loads(baseline.read_text())["modes"]["ca"]["step_time"]["sample"]
    assert sample["unit"] == "process" and sample["count"] > 1_900 and len(sample["units_s"]["median"]) == 1

    # The run against its own baseline: ratio exactly 1, one process a side. No timing check can
    # fail; at 50% the assumed noise cannot tell (exit 5, and --require-power fails exactly those
    # checks), at 200% it can.
    args = ("gate", run, "--baseline", baseline, "--max-regression", "50%", "--max-regression", "p90:50%", "--format", "json")
    again = _report(*args, cwd=tmp_path)
    assert again.returncode == 5, again.stdout[-3000:] + again.stderr[-2000:]
    checks = {c["check"]: c for c in json.loads(again.stdout)["checks"]}
    for name in ("max-regression", "max-regression:p90"):
        assert checks[name]["outcome"] == "inconclusive" and checks[name]["data"]["ratio"] == pytest.approx(1.0, rel=1e-5)  # the baseline keeps 6 digits
        assert checks[name]["data"]["units"] == [1, 1]
    strict = _report(*args, "--require-power", cwd=tmp_path)
    assert strict.returncode == 1
    errors = [c["check"] for c in json.loads(strict.stdout)["checks"] if c["outcome"] == "error"]
    assert errors == ["max-regression", "max-regression:p90"]
    wide = _report("gate", run, "--baseline", baseline, "--max-regression", "200%", "--max-regression", "p90:200%", cwd=tmp_path)
    # A PASS rests on the baseline's steps not having been slowed: where the gate says they waited
    # for a CPU half their runnable time or more (a busy CI runner: 52% seen), INCONCLUSIVE, never a
    # FAIL. So too where the process's own wall-time p90 is unsettled: on a busy runner the steps
    # near it spread widely (2,000 steps, the 44 ranks around the p90 2.7x apart: seen in CI), and
    # the wall-time interval that must confirm the CPU time's then reaches past +200%.
    said = " ".join(wide.stdout.split())
    if wide.returncode == 5:
        assert ("load: the baseline's median step waited for a CPU" in said or "each process's own figure is unsettled" in said) \
            and "FAIL" not in said, wide.stdout[-3000:]
    else:
        assert wide.returncode == 0, wide.stdout[-3000:]
