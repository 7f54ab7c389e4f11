"""Steps are numbered from 0, as the script's own `for step in range(n)` numbers them:
the step `recompiles` names is the step the script printed, and records of schemas 1 and 2 (steps
from 1) read as if recorded now."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cagtool.record.loader import load_run
from cagtool.record.upgrade import renumber_steps_from_zero, step_number_shift
from cagtool.record.schema import FIRST_STEP, SCHEMA_VERSION, CacheMissEvent, CAGraphEvent, StepEvent

from conftest import ROOT, as_old_schema, cagtool_cmd, cagtool_in_process, recorded_once

NEW_NODE_STEP = 3

# Prints each step as its loop numbers it, and one extra op (a new autograd node, TanhBackward0)
# in that step only: compiled autograd captures !0 in the first step and !1 in that one.
SCRIPT = f"""\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    print(f"step {{step}}", flush=True)
    out = model(torch.randn(2, 4))
    if step == {NEW_NODE_STEP}:
        print(f"extra op at step {{step}}", flush=True)
        out = torch.tanh(out)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def cagtool(*args: str) -> subprocess.CompletedProcess:
    """`cagtool run` as a real process; the commands that read the record in-process."""
    if args[0] != "run":
        return cagtool_in_process(*args, env={"CI": "true", "COLUMNS": "100"}, unset=("FORCE_COLOR",))
    env = {**os.environ, "CI": "true", "COLUMNS": "100"}
    env.pop("FORCE_COLOR", None)
    return subprocess.run(cagtool_cmd(*args), capture_output=True, text=True, timeout=300, cwd=str(ROOT), env=env)


def _record(root: Path) -> list:
    script = root / "extra_op_at_step.py"
    script.write_text(SCRIPT)
    proc = cagtool("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(root / "run"), str(script))
    return [proc.returncode, proc.stdout, proc.stderr]


@pytest.fixture(scope="module")
def fresh_run(tmp_path_factory) -> tuple[Path, str]:
    """(run directory, the script's stdout) of a real ca-mode run on the eager backend (recorded
    once for all xdist workers, each with its own copy)."""
    root, (returncode, stdout, stderr) = recorded_once(tmp_path_factory, "steps0", _record)
    assert returncode == 0, stderr[-2000:]
    return root / "run", stdout


def printed_step(stdout: str) -> int:
    (match,) = re.findall(r"^extra op at step (\d+)$", stdout, re.MULTILINE)
    return int(match)


def text_of(*args: str, run: Path) -> str:
    proc = cagtool(*args)
    assert proc.returncode == 0, proc.stderr
    # Words, not line breaks: a wrapped line breaks where the run's path (of another length) put it.
    return " ".join(proc.stdout.replace(str(run), "RUN").split())


@pytest.mark.slow
def test_recompiles_name_the_step_the_script_printed(fresh_run):
    run, stdout = fresh_run
    assert printed_step(stdout) == NEW_NODE_STEP
    assert re.findall(r"^step (\d+)$", stdout, re.MULTILINE) == [str(i) for i in range(6)]
    record = load_run(run).mode("ca")
    assert record.manifest.schema_version == SCHEMA_VERSION == 3
    assert [s.step for s in record.of(StepEvent)] == list(range(6)) and FIRST_STEP == 0
    assert [(g.compile_id, g.step) for g in record.of(CAGraphEvent)] == [("!0", 0), ("!1", NEW_NODE_STEP)]

    document = json.loads(text_of("recompiles", str(run), "--explain", "--format", "json", run=run))["modes"]["ca"]
    assert [(r["compile_id"], r["step"]) for r in document["initial"]] == [("!0", 0)]
    (row,) = document["recompiles"]
    assert (row["compile_id"], row["step"], row["node"]) == ("!1", printed_step(stdout), "TanhBackward0")
    (cause,) = document["explanation"]["causes"]
    assert cause["steps"] == [printed_step(stdout)] and cause["last_recompile_step"] == NEW_NODE_STEP
    assert (document["steps"], document["last_step"]) == (6, 5)

    explained = text_of("recompiles", str(run), "--explain", run=run)
    assert "initial compile !0 at step 0" in " ".join(explained.split())  # however the line wraps
    assert f"!1 step {NEW_NODE_STEP}: new TanhBackward0" in explained
    assert f"It has stabilised: no new structure after step {NEW_NODE_STEP}; the last 2 steps reused cached graphs." in explained


def _steps_by_kind(run: Path) -> list[tuple[str, int | None]]:
    return [(e.kind, getattr(e, "step", None)) for e in load_run(run).mode("ca").events if e.kind != "backward"]


def test_schema_2_record_reads_as_a_fresh_one(fresh_run, tmp_path):
    run, _ = fresh_run
    old = as_old_schema(run, tmp_path / "schema2", 2)
    written = [json.loads(line) for line in (old / "ca" / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in written if e["kind"] == "step"] == list(range(1, 7))  # as schema 2 numbered them
    assert _steps_by_kind(old) == _steps_by_kind(run)
    assert load_run(old).mode("ca").manifest.schema_version == 2
    for command in (("summary",), ("recompiles", "--explain"), ("recompiles",)):
        assert text_of(*command, str(old), run=old) == text_of(*command, str(run), run=run), command


def test_schema_1_record_reads_with_steps_from_0(fresh_run, tmp_path):
    run, _ = fresh_run
    old = as_old_schema(run, tmp_path / "schema1", 1)
    record = load_run(old).mode("ca")
    assert [s.step for s in record.of(StepEvent)] == list(range(6))
    assert [(m.compile_id, m.step) for m in record.of(CacheMissEvent)] == [("!0", 0), ("!1", NEW_NODE_STEP)]
    assert _steps_by_kind(old) == _steps_by_kind(run)
    for command in (("recompiles", "--explain"), ("recompiles",)):
        assert text_of(*command, str(old), run=old) == text_of(*command, str(run), run=run), command


def test_newer_schema_is_still_refused(fresh_run, tmp_path):
    run, _ = fresh_run
    newer = tmp_path / "newer"
    shutil.copytree(run, newer)
    manifest = json.loads((newer / "ca" / "manifest.json").read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    (newer / "ca" / "manifest.json").write_text(json.dumps(manifest))
    proc = cagtool("summary", str(newer))
    assert proc.returncode == 3 and f"schema_version {SCHEMA_VERSION + 1}, newer than this cagtool reads" in proc.stderr


def test_the_one_conversion():
    """What a columnar reader of step events calls: the shift per schema, and the in-place renumbering."""
    assert [step_number_shift(v) for v in (1, 2, 3)] == [-1, -1, 0]
    events = [StepEvent(seq=0, t=0.0, step=1, backward_s=0.0), CacheMissEvent(seq=1, t=0.0, ca_id=0, compile_id="!0", step=None, miss_kind="new_node", message="")]
    renumber_steps_from_zero(events, 2)
    assert [e.step for e in events] == [0, None]
    renumber_steps_from_zero(events, 3)
    assert [e.step for e in events] == [0, None]
