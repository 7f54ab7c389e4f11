"""record/liveness.py: telling a record whose writer is still running from one whose writer vanished."""

from __future__ import annotations

import socket
import subprocess
import sys

from cagtool.record.liveness import hostname, process_gone, this_process


def test_hostname_is_what_socket_gives_and_older_records_wrote():
    # Records written before liveness stopped importing socket hold socket.gethostname().
    assert hostname() == socket.gethostname()


def test_this_process_is_not_gone_and_a_finished_one_is():
    assert not process_gone(this_process())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    record = {"pid": child.pid, "hostname": hostname(), "start_ticks": this_process()["start_ticks"]}
    child.wait()
    assert process_gone(record)
    assert not process_gone({**record, "hostname": hostname() + "-elsewhere"})  # another host: cannot know
