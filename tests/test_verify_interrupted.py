"""Ctrl-C during `recompiles --verify`: typer turned it into a silent exit 130, after the line
starting the baseline re-run and nothing else, with a half-made verify directory left unnamed.
With `--repeat 2` the sides take turns: Ctrl-C in the second round leaves every side's first
round whole."""

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
