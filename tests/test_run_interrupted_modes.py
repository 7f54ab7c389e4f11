"""Ctrl-C during a run of several modes: the modes the run never started read as not run, in
summary, its headline and compare, and the run says it was interrupted even where the mode that
ran caught the interrupt and finished (only run.json holds the stop). A real run: torch, eager
backend, a script that says READY after a few steps and is then sent SIGINT, to cagtool's pid only.

Reading side on hand-built records: a killed cagtool's unstarted modes, and a mode with no record
in a run that ended normally, which stays `missing`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import cagtool_cmd, cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.record.manifest import RunMeta, to_dict
from cagtool.report.compare.analysis import compare_modes
from cagtool.report.compare.headline import run_headline

ENV = {**os.environ, "CI": "true"}

# Trains until interrupted; READY on stdout after 3 steps, so the test signals a job in its loop.
# CATCH: the script catches KeyboardInterrupt and exits 0 (its mode's record says "finished").
_SCRIPT = """\
import torch

CATCH = {catch}
model = torch.nn.Linear(4, 4)
step = 0
try:
    while True:
        model(torch.randn(2, 4)).sum().backward()
        step += 1
        if step == 3:
            print("READY", flush=True)
except KeyboardInterrupt:
    if not CATCH:
        raise
    print("CAUGHT", flush=True)
"""

_NOT_RUN = "not run: the run was interrupted"


def _dead_words(text: str, mode: str) -> list[str]:
    """The phrases about `mode` that call it failed or dead ("mode ca: failed", "ca: it failed
    before a steady step", "(the process died ...)")."""
    bad = re.compile(r"fail|died|dead|killed|crash", re.IGNORECASE)
    phrases = re.split(r"[;\n]|\(\+", text)
    return [p for p in phrases if re.search(rf"\b{re.escape(mode)}\b", p) and bad.search(p)]


@pytest.mark.slow
@pytest.mark.parametrize("catch", [True, False], ids=["script-catches-ctrl-c", "script-interrupted"])
def test_modes_never_started_read_as_not_run(tmp_path, catch):
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT.format(catch=catch))
    run_dir = tmp_path / "r"
    proc = subprocess.Popen(
        cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "-o", str(run_dir), str(script)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=ENV, start_new_session=True,
        # A runner that starts the suite without job control leaves SIGINT ignored in its children.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout.readline().strip() == "READY"
        os.kill(proc.pid, signal.SIGINT)  # cagtool's pid only: it passes the signal on, once
        out, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    run = load_run(run_dir)
    assert (run.meta.status, list(run.modes), run.meta.mode_exit_codes) == ("interrupted", ["eager"], {"eager": 0 if catch else 130})
    assert run.modes["eager"].manifest.status == ("finished" if catch else "interrupted")
    assert not (run_dir / "ca").exists()

    summary = cagtool_in_process("summary", run_dir)
    assert summary.returncode == 0, summary.stderr
    text = summary.stdout
    headline = text.splitlines()[0]
    assert headline.startswith(f"mode ca: {_NOT_RUN}" if catch else "mode eager: interrupted, exit code 130"), headline
    assert f"compiled autograd vs eager: not timed (ca: {_NOT_RUN})" in headline
    assert "note: the run was interrupted (exit code 130) before mode ca ran" in text
    assert f"mode ca: {_NOT_RUN}" in text.splitlines()
    assert _dead_words(text, "ca") == [], text

    body = json.loads(cagtool_in_process("summary", "--format", "json", run_dir).stdout)
    assert (body["status"], body["not_run"], body["exit_code"]) == ("interrupted", ["ca"], 130)
    assert body["headline"]["tone"] == ("neutral" if catch else "bad")

    compare = cagtool_in_process("compare", run_dir)
    assert compare.returncode == 0, compare.stderr
    status_row = next(line for line in compare.stdout.splitlines() if line.strip("│ ").startswith("status"))
    assert "not run" in status_row and "MISSING" not in status_row, status_row
    assert f"mode ca: {_NOT_RUN}" in compare.stdout and f"ca: {_NOT_RUN}" in compare.stdout
    assert _dead_words(compare.stdout, "ca") == [], compare.stdout
    data = json.loads(cagtool_in_process("compare", "--format", "json", run_dir).stdout)
    assert data["modes"]["ca"]["failures"] == [
        {"record": "ca", "status": "missing", "exit_code": None, "reason": "the run was interrupted", "not_run": True}
    ]


# ------------------------------------------------------------------ reading: hand-built records


def _run_json(path: Path, status: str, exit_codes: dict[str, int | None], exit_code: int | None = None) -> None:
    meta = RunMeta(run_id=path.name, created_at="2026-01-01T00:00:00Z", cagtool_argv=["cagtool", "run"],
                   target={"kind": "script", "name": "train.py"}, target_argv=["train.py"], cwd="/",
                   modes=["eager", "ca"], versions={"torch": "2.13.0"}, machine={}, status=status,
                   exit_code=exit_code, mode_exit_codes=exit_codes)
    path.mkdir()
    (path / "run.json").write_text(json.dumps(to_dict(meta)))


def test_killed_run_says_its_unstarted_mode_was_not_run(tmp_path):
    # A cagtool killed (SIGKILL, the OOM killer) before any mode ran: the reader marks run.json
    # `killed` (no process left alive); its modes never started.
    _run_json(tmp_path / "k", "killed", {})
    failure = compare_modes(load_run(tmp_path / "k")).modes["ca"].failures[0]
    assert failure.not_run and failure.describe() == "ca: not run: cagtool's process was killed"


def test_missing_record_of_a_run_that_ended_normally_stays_missing(tmp_path):
    # The mode's process ran (its exit code is in run.json) but left no record: that one did die.
    _run_json(tmp_path / "m", "finished", {"eager": 1, "ca": 1}, exit_code=1)
    comparison = compare_modes(load_run(tmp_path / "m"))
    failure = comparison.modes["ca"].failures[0]
    assert not failure.not_run and failure.status == "missing"
    assert "died before starting the target" in failure.describe()
    assert run_headline(comparison).tone == "bad"


def test_the_gates_snapshot_of_a_mode_without_a_record_keeps_why_and_its_exit_code(tmp_path):
    # A stopped run's unstarted mode, and a mode whose process exited 3 without a record: the gate
    # says why each left nothing, and its fields are the mode's (no figure in another's place).
    from cagtool.report.gate.baseline import run_snapshots

    _run_json(tmp_path / "k", "killed", {})
    never = run_snapshots(load_run(tmp_path / "k"))["ca"]
    assert (never.status, never.problem, never.exit_code) == ("missing", "ca: not run: cagtool's process was killed", None)
    assert (never.step_time, never.repetitions, never.peak_rss_bytes, never.peak_device_memory_bytes) == (None, 1, None, None)
    _run_json(tmp_path / "m", "finished", {"eager": 0, "ca": 3}, exit_code=3)
    died = run_snapshots(load_run(tmp_path / "m"))["ca"]
    assert (died.exit_code, died.repetitions, died.step_time) == (3, 1, None) and died.problem.startswith("ca: ")


def test_a_keyboardinterrupt_the_script_raises_is_its_failure_not_a_ctrl_c(tmp_path):
    """`raise KeyboardInterrupt` in the script, no signal anywhere: the process exits 130 as under
    python, but no one pressed Ctrl-C. The mode failed (its record says the script raised it), and
    the run goes on to the next mode, as after any failure of the script."""
    script = tmp_path / "gives_up.py"
    script.write_text("import torch\n"
                      "model = torch.nn.Linear(4, 4)\n"
                      "for step in range(3):\n"
                      "    model(torch.randn(2, 4)).sum().backward()\n"
                      "print('giving up', flush=True)\n"
                      "raise KeyboardInterrupt('out of patience')\n")
    out = tmp_path / "r"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "-o", str(out), str(script)),
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 130 and proc.stdout.count("giving up") == 2, proc.stdout + proc.stderr  # both modes ran
    # Its traceback, as python prints it, once a mode.
    assert proc.stderr.count("    raise KeyboardInterrupt('out of patience')\nKeyboardInterrupt: out of patience\n") == 2, proc.stderr
    run = load_run(out)
    assert run.meta.status == "finished" and run.meta.exit_code == 130
    for mode in ("eager", "ca"):
        manifest = run.modes[mode].manifest
        assert manifest.status == "failed" and manifest.exit_code == 130, manifest
        assert manifest.exception.message == "the script raised KeyboardInterrupt itself (no SIGINT reached the process): out of patience"
