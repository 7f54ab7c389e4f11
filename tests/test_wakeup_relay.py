"""lifeline.WakeupRelay in a process of its own (it replaces signal.set_wakeup_fd there): the
script's wakeup fd gets every signal byte as python would give it, and the parent's pipe gets it
first; python's own checks and return values stand."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ROOT

SCRIPT = textwrap.dedent('''
    import os, select, signal, socket, threading
    from cagtool.capture.processes.lifeline import WakeupRelay

    ack_r, ack_w = os.pipe()
    os.set_blocking(ack_w, False)
    WakeupRelay(ack_w).install()
    signal.signal(signal.SIGUSR1, lambda *a: None)

    def read(fd):
        assert select.select([fd], [], [], 60)[0], "nothing came"
        return os.read(fd, 16)

    os.kill(os.getpid(), signal.SIGUSR1)        # no fd of the script's: straight to the parent's pipe
    assert read(ack_r) == bytes([signal.SIGUSR1])
    mine, theirs = socket.socketpair()
    mine.setblocking(False)
    assert signal.set_wakeup_fd(mine.fileno()) == -1
    os.kill(os.getpid(), signal.SIGUSR1)        # relayed: the parent's pipe and the script's socket
    assert read(ack_r) == bytes([signal.SIGUSR1])
    assert read(theirs.fileno()) == bytes([signal.SIGUSR1])
    assert signal.set_wakeup_fd(-1) == mine.fileno()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert read(ack_r) == bytes([signal.SIGUSR1])
    r, w = os.pipe()
    try:
        signal.set_wakeup_fd(w)
    except ValueError as exc:
        assert "non-blocking" in str(exc)
    else:
        raise AssertionError("a blocking fd was taken")
    errors = []
    def other_thread():
        try:
            signal.set_wakeup_fd(-1)
        except ValueError as exc:
            errors.append(exc)
    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1
    print("OK")
''')


def test_relay_gives_the_script_its_bytes_and_tells_the_parent_first():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.stdout == "OK\n", proc.stderr
