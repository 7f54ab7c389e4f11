"""PARENT_DIED in a process of its own, with the handler the mode process installs
(lifeline.install_child_handlers): one death is one stop. The kernel may deliver the signal twice
for one SIGKILL of cagtool (lifeline.ParentDiedHandler); the second copy, arriving while the
first stop is being handled, must raise nothing. The end-to-end check is
test_reliability.py::test_sigkill_of_parent_the_mode_process_closes_its_record_and_run_json."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

SCRIPT = textwrap.dedent('''
    import os, signal
    from cagtool.capture.processes.lifeline import PARENT_DIED, SignalStop, install_child_handlers

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
