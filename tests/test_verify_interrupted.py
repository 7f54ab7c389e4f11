"""Ctrl-C during `recompiles --verify`: typer turned it into a silent exit 130, after the line
starting the baseline re-run and nothing else, with a half-made verify directory left unnamed."""

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
    recorded = record_run("shape_loop.py")  # shared with the explanation tests
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = Path(shutil.copytree(recorded.path, tmp_path / "shape_loop"))  # the verification writes into the run
    # Its own session, as a terminal's foreground job: Ctrl-C reaches cagtool and its re-run alike.
    proc = subprocess.Popen(cagtool_cmd("recompiles", str(run), "--verify", "--repeat", "1"), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        said = []
        assert proc.stderr is not None
        for line in proc.stderr:  # the baseline re-run has started: no clock raced
            said.append(line)
            if "cagtool: baseline: run" in line:
                break
        assert any("cagtool: baseline: run" in line for line in said), "".join(said)
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
    assert "Traceback" not in rest
