"""Ctrl-C during `recompiles --verify`: typer turned it into a silent exit 130, after the line
starting the baseline re-run and nothing else, with a half-made verify directory left unnamed.
With `--repeat 2` the sides take turns: Ctrl-C in the second round leaves every side's first
round whole. And a fix whose re-run never ends: stopped at --rerun-timeout, said, judged FAILED,
with no process of it left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd

pytestmark = pytest.mark.slow


def test_ctrl_c_during_a_verification_says_so_names_what_it_left_and_exits_130(record_run, tmp_path):
    from cagtool.record.loader import load_run

    recorded = record_run("shape_loop.py")  # shared with the explanation tests
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = Path(shutil.copytree(recorded.path, tmp_path / "shape_loop"))  # the verification writes into the run
    # Its own session, as a terminal's foreground job: Ctrl-C reaches cagtool and its re-run alike.
    proc = subprocess.Popen(cagtool_cmd("recompiles", str(run), "--verify", "--repeat", "2"), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        said = []
        assert proc.stderr is not None
        for line in proc.stderr:  # a run of the second round has started: no clock raced
            said.append(line)
            if " (2/2): run " in line:
                break
        assert any(" (2/2): run " in line for line in said), "".join(said)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=300)[1], None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, "".join(said) + rest
    lines = rest.strip().splitlines()
    assert lines[-1] == "cagtool: interrupted", rest
    (left,) = [line for line in lines if line.startswith("cagtool: interrupted: no verdict; the re-runs made so far are in ")]
    made = Path(left.rsplit(" are in ", 1)[1])
    made = made if made.is_absolute() else ROOT / made
    assert made.parent == run / "verify" and made.is_dir(), left
    assert not (run / "verification.json").exists()  # no verdict written
    # Each side's first round (its own record, started in round 1) is whole and loads.
    firsts = [line.split(" (1/2): ")[0].removeprefix("cagtool: ") for line in said if " (1/2): run " in line]
    assert firsts[0] == "baseline" and len(firsts) >= 2, "".join(said)
    for side in firsts:
        record = load_run(made / side)
        assert record.meta.status == "finished" and list(record.modes) == ["ca"], side
    assert "Traceback" not in rest


def test_a_fix_whose_rerun_hangs_is_stopped_at_the_timeout_failed_and_leaves_no_process(record_run, tmp_path):
    """tests/scripts/hangs_under_a_fix.py sleeps for an hour after its first step where
    TORCH_COMPILE_DYNAMIC_SOURCES is set, i.e. in torch-pgo's re-run alone. The baseline finishes;
    the fix's re-run is stopped at --rerun-timeout (SIGTERM: its record closed, with the stack it
    hung in), its verdict is FAILED with the reason first, and its process is gone. The limit is
    far above the baseline's ~8 s, and the hang has no end: no clock is raced."""
    import json

    from cagtool.record.loader import load_run
    from cagtool.verify.verification import RERUN_LIMIT_FLOOR_S, rerun_limit_s

    recorded = record_run("../tests/scripts/hangs_under_a_fix.py")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = Path(shutil.copytree(recorded.path, tmp_path / "hangs"))
    assert rerun_limit_s(load_run(run), "ca") == RERUN_LIMIT_FLOOR_S  # a job of seconds: the floor, not 10x its time
    pid_file = tmp_path / "hung.pid"
    proc = subprocess.run(cagtool_cmd("recompiles", str(run), "--verify", "--repeat", "1", "--fix", "torch-pgo",
                                      "--rerun-timeout", "90", "--format", "json"),
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "CI": "true", "HANG_PID_FILE": str(pid_file)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cagtool: torch-pgo: stopped after 90 s (--rerun-timeout; the recorded mode took " in proc.stderr, proc.stderr
    [fix] = json.loads(proc.stdout)["verification"]["fixes"]
    assert fix["fix"] == "torch-pgo" and fix["verdict"] == "failed", fix
    assert fix["reasons"][0].startswith("stopped after 90 s (--rerun-timeout"), fix["reasons"]
    assert any("did not finish" in r and "SIGTERM" in r for r in fix["reasons"]), fix["reasons"]
    # The hung process was the re-run's job, and it is gone: SIGTERM reached it through cagtool run.
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    [stacks] = list((run / "verify").glob("*/torch-pgo/ca/signal_stacks/SIGTERM.txt"))
    assert 'hangs_under_a_fix.py", line 31 in main' in stacks.read_text()  # the line it hung in: time.sleep(3600)
