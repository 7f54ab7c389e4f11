"""verify's bound on a re-run (verify/verification.py `wait_bounded`): a process past its time is
stopped with SIGTERM, as `kill` would stop `cagtool run` (which closes its record on it), and one
that ignores SIGTERM is killed after the grace. Real processes; no clock raced: each would run for
a minute, the bound is a fraction of a second, and the readiness is read from the process itself."""

from __future__ import annotations

import signal
import subprocess
import sys

from cagtool.verify import verification
from cagtool.verify.verification import wait_bounded


def _ready(code: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_a_process_that_ends_in_time_gives_its_exit_code():
    with subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]) as process:
        assert wait_bounded(process, 60) == 3
    with subprocess.Popen([sys.executable, "-c", "pass"]) as process:
        assert wait_bounded(process, None) == 0


def test_a_process_past_its_time_is_stopped_with_sigterm():
    with _ready("import time; print('ready', flush=True); time.sleep(60)") as process:
        assert wait_bounded(process, 0.2) is None
        assert process.returncode == -signal.SIGTERM


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(monkeypatch):
    monkeypatch.setattr(verification, "RERUN_STOP_GRACE_S", 0.2)
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    with _ready(code) as process:
        assert wait_bounded(process, 0.2) is None
        assert process.returncode == -signal.SIGKILL
