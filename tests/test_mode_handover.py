"""One mode process to the next: the next is started as soon as the current one has closed its
record, so its torch import runs beside the current process's exit; its script starts only once
that process is gone, and a run stopped in between leaves neither a process nor a directory of it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, cagtool_cmd

from cagtool.record.loader import load_run
from cagtool.record.schema import StepEvent

SCRIPT = Path(__file__).parent / "scripts" / "slow_exit.py"
ENV = {**os.environ, "CI": "true"}

pytestmark = pytest.mark.slow


def _log(path: Path) -> dict[str, list[list[str]]]:
    lines: dict[str, list[list[str]]] = {}
    for line in path.read_text().splitlines():
        kind, *fields = line.split()
        lines.setdefault(kind, []).append(fields)
    return lines


def test_next_mode_imports_beside_the_exit_and_runs_after_it(tmp_path):
    """Two processes of one mode (--repeat 2): one handover, from a process that exits slowly."""
    log = tmp_path / "log"
    proc = subprocess.run(
        cagtool_cmd("run", "--modes", "eager", "--repeat", "2", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPT), str(log), "3"),
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "TRAINED\n" * 2
    events = _log(log)
    starts, exits, trained = events["start"], events["exit"], events["trained"]
    assert len(starts) == len(exits) == len(trained) == 2
    run = load_run(tmp_path / "r")
    for previous, (pid, process_started, script_started, alive), exited in zip(exits[:-1], starts[1:], exits[1:]):
        # Started while the previous process was still in its 3 s exit...
        assert float(process_started) < float(previous[2]), (previous, process_started)
        # ...and its script only once that process was gone.
        assert float(script_started) > float(previous[2]) and alive == "-", (previous, script_started, alive)
    for name, (pid, process_started, _, _), (_, trained_at) in zip(["eager", "eager.2"], starts, trained, strict=True):
        mode = run.modes[name]
        assert mode.manifest.status == "finished"
        waited = mode.manifest.options["waited_to_start_s"]
        assert waited >= 0
        # The record's clock leaves the wait out. Asserted as order, not against a wall-clock
        # margin (a busy CI machine delays the interpreter's start by any amount): the first step
        # comes after the record's start and before the script's backward as timed from the
        # process's creation; and where the process waited long (the previous mode's 3 s exit),
        # at least half of that wait is not on the record's clock.
        (step,) = mode.of(StepEvent)
        total = float(trained_at) - float(process_started)
        assert 0.0 < step.t < total, (name, step.t, total, waited)
        if waited > 1.0:
            assert step.t < total - waited / 2, (name, step.t, total, waited)


def _mode_processes(root_pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == root_pid and b"cagtool.capture.run.child" in cmdline and stat[0] != "Z":
                found.append(int(entry))
    return found


def _session_processes(sid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[3]) == sid and stat[0] != "Z":
                found.append(int(entry))
    return found


def test_ctrl_c_during_an_exit_stops_the_run_before_the_next_mode(tmp_path):
    log = tmp_path / "log"
    proc = subprocess.Popen(
        cagtool_cmd("run", "--modes", "eager,aot", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPT), str(log), "4"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout.readline() == "TRAINED\n"
        deadline = time.monotonic() + 60
        while len(_mode_processes(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_mode_processes(proc.pid)) == 2, "the aot process was not started during eager's exit"
        assert "exit" not in _log(log)  # still in eager's exit
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: cagtool and both mode processes
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "r").iterdir() if p.is_dir()) == ["eager"]
    run = load_run(tmp_path / "r")
    assert run.meta.status == "interrupted"
    assert run.modes["eager"].manifest.status == "finished"
    assert len(_log(log)["start"]) == 1  # aot's script never ran
    assert _session_processes(proc.pid) == []
