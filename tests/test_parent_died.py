"""PARENT_DIED in a process of its own, with the handler the mode process installs
(lifeline.install_child_handlers): one death is one stop. The kernel may deliver the signal twice
for one SIGKILL of cagtool (lifeline.ParentDiedHandler); the second copy, arriving while the
first stop is being handled, must raise nothing. A stop that the script drops (raised inside a
`__del__`, where Python prints and ignores it) is delivered again until the mode process has it.
The end-to-end checks are the last test here and
test_reliability.py::test_sigkill_of_parent_the_mode_process_closes_its_record_and_run_json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT, cagtool_cmd

from cagtool.record.liveness import proc_stat

SCRIPT = textwrap.dedent('''
    import os, signal
    from cagtool.capture.processes.lifeline import PARENT_DIED, SignalStop, install_child_handlers, stop_taken

    def checkpoint():
        """A Python call: where the interpreter runs a pending signal's handler."""
        return None

    install_child_handlers(os.getppid(), None)
    stops = 0
    try:
        os.kill(os.getpid(), PARENT_DIED)
        for _ in range(10_000_000):
            checkpoint()
        raise AssertionError("PARENT_DIED raised nothing")
    except SignalStop as stop:
        stop_taken()  # as the mode process does first (child.py)
        stops += 1
        assert stop.parent_died and stop.signum == signal.SIGTERM
        # the kernel's second copy, while the first is being handled (the wind-down's place)
        os.kill(os.getpid(), PARENT_DIED)
        for _ in range(1000):
            checkpoint()
    finally:
        os.kill(os.getpid(), PARENT_DIED)  # and a third, inside the finally that closes the record
        for _ in range(1000):
            checkpoint()
    handler = signal.getsignal(PARENT_DIED)
    print(f"stops={stops} deliveries={handler.deliveries}")
''')


@pytest.mark.skipif(not hasattr(signal, "SIGRTMAX"), reason="no real-time signals (PARENT_DIED is Linux's)")
def test_parent_died_delivered_again_while_the_first_stop_is_handled_raises_nothing():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "stops=1 deliveries=3\n", proc.stderr


DROPPED = textwrap.dedent('''
    import os, sys, time
    from cagtool.capture.processes.lifeline import PARENT_DIED, SignalStop, install_child_handlers, stop_taken

    class Holder:
        def __del__(self):
            os.kill(os.getpid(), PARENT_DIED)
            while True:  # only the stop ends this; Python prints it and drops it at the __del__'s end
                time.sleep(0.01)

    install_child_handlers(os.getppid(), None)
    try:
        holder = Holder()
        del holder
        print("dropped", flush=True)
        for _ in range(6000):  # a minute: the stop comes back long before
            time.sleep(0.01)
        raise AssertionError("the dropped stop was never delivered again")
    except SignalStop as stop:
        stop_taken()
        assert stop.parent_died
    handler = __import__("signal").getsignal(PARENT_DIED)
    print(f"raised={handler.raised}")
''')


@pytest.mark.skipif(not hasattr(signal, "SIGRTMAX"), reason="no real-time signals (PARENT_DIED is Linux's)")
def test_a_stop_dropped_inside_a_del_is_delivered_again():
    proc = subprocess.run([sys.executable, "-c", DROPPED], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "dropped\nraised=2\n", proc.stderr
    assert "Exception ignored in" in proc.stderr and "Holder.__del__" in proc.stderr, proc.stderr


HELD_IN_DEL = textwrap.dedent('''
    import time
    import torch

    class Holder:
        def __del__(self):
            print("READY", flush=True)
            while True:  # cagtool is SIGKILLed while this runs: its stop is dropped here
                time.sleep(0.01)

    model = torch.nn.Linear(4, 4)
    model(torch.randn(2, 4)).sum().backward()
    holder = Holder()
    del holder
    while True:
        model(torch.randn(2, 4)).sum().backward()
''')


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _gone(pid: int) -> bool:
    fields = proc_stat(pid)
    return fields is None or fields[0] == b"Z"


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGRTMAX"), reason="no real-time signals (PARENT_DIED is Linux's)")
def test_sigkill_of_cagtool_while_a_del_runs_still_ends_the_job_and_closes_its_record(tmp_path):
    """The first PARENT_DIED lands in the script's `__del__`, which drops it: the job still ends
    (the stop is delivered again), its record reads interrupted by cagtool's death, and the
    script's stderr holds no BrokenPipeError from a signal written to the dead parent's pipe."""
    script = tmp_path / "held_in_del.py"
    script.write_text(HELD_IN_DEL)
    run = tmp_path / "r"
    proc = subprocess.Popen(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(run), str(script)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "CI": "true"}, start_new_session=True)
    assert proc.stdout.readline() == "READY\n"
    (child,) = _children(proc.pid)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 60  # the stop comes back within a second; a lost one never does
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child), "the mode process trains on after cagtool's death"
    stderr = proc.stderr.read()
    assert "BrokenPipeError" not in stderr, stderr
    assert "Holder.__del__" in stderr, stderr  # the first stop did land in the __del__
    manifest = json.loads((run / "ca" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted", manifest
    assert manifest["exception"]["message"] == "cagtool's own process died", manifest
    assert json.loads((run / "run.json").read_text())["status"] == "killed"


def test_a_run_json_nested_too_deeply_is_left_as_it_is_by_the_mode_that_outlived_cagtool(tmp_path):
    """close_run_of_dead_parent is best effort: a run.json nested deeper than json goes
    (RecursionError) is left as it was, and nothing reaches the mode process that called it."""
    from cagtool.record.writer import close_run_of_dead_parent

    nested = '{"status": "running", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (tmp_path / "run.json").write_text(nested)
    close_run_of_dead_parent(tmp_path, "ca", -9, "2024-01-01T00:00:00+00:00")
    assert (tmp_path / "run.json").read_text() == nested
