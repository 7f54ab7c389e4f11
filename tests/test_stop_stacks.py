"""A followed process stopped by SIGTERM or SIGHUP (the signal's default action, as under python)
reads as interrupted by that signal, with where it was, not as killed by SIGKILL or the OOM killer
(capture/processes/lifeline.py StopStacks; record/liveness.py). Real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd

from cagtool.record.liveness import hostname, read_dead_writer_as_killed
from cagtool.record.loader import load_run
from cagtool.record.manifest import ModeManifest
from cagtool.record.schema import SIGNAL_STACKS_DIR, StepEvent

SCRIPTS = Path(__file__).parent / "scripts"
ENV = {**os.environ, "CI": "true", "PYTHONPATH": str(ROOT)}


def _armed_process(tmp_path: Path, body: str) -> subprocess.Popen:
    """A python process that arms StopStacks into tmp_path, runs `body`, prints READY and waits."""
    code = textwrap.dedent(f"""
        import signal, sys, time
        from cagtool.capture.processes.lifeline import StopStacks
        stacks = StopStacks()
        stacks.arm({str(tmp_path)!r})
        def waiting_in_the_script():
            {body}
            print("READY", flush=True)
            time.sleep(60)
        waiting_in_the_script()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    assert proc.stdout.readline().strip() == "READY"
    return proc


def test_sigterm_still_kills_at_once_and_leaves_the_stacks(tmp_path):
    proc = _armed_process(tmp_path, "assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the script sees the default")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM  # died of the signal, as under python
    stacks = (tmp_path / SIGNAL_STACKS_DIR / "SIGTERM.txt").read_text()
    assert "Current thread" in stacks and "in waiting_in_the_script" in stacks
    assert (tmp_path / SIGNAL_STACKS_DIR / "SIGHUP.txt").read_text() == ""


def test_a_handler_the_script_sets_wins_and_survives_disarm(tmp_path):
    """The script's own SIGTERM handler replaces the watch, and closing the record (disarm) does not
    put the default action back under it; the empty files are removed."""
    code = textwrap.dedent(f"""
        import os, signal, time
        from cagtool.capture.processes.lifeline import StopStacks
        stacks = StopStacks()
        stacks.arm({str(tmp_path)!r})
        signal.signal(signal.SIGTERM, lambda *a: print("HANDLED", flush=True))
        stacks.disarm()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        print("ALIVE", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=30)
    assert (done.returncode, done.stdout.split()) == (0, ["HANDLED", "ALIVE"]), done.stderr
    assert not (tmp_path / SIGNAL_STACKS_DIR).exists()


def test_ignored_signal_stays_ignored_and_unwatched(tmp_path):
    code = textwrap.dedent(f"""
        import os, signal
        from cagtool.capture.processes.lifeline import StopStacks
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
        StopStacks().arm({str(tmp_path)!r})
        os.kill(os.getpid(), signal.SIGHUP)
        print("ALIVE", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "ALIVE"), done.stderr
    assert sorted(p.name for p in (tmp_path / SIGNAL_STACKS_DIR).iterdir()) == ["SIGTERM.txt"]


def _dead_record(tmp_path: Path) -> ModeManifest:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return ModeManifest(mode="ca", argv=[], target={}, cwd="", versions={}, backend="eager", dynamic=False, started_at="",
                        status="running", process={"pid": child.pid, "hostname": hostname()})


def test_dead_writer_reads_as_interrupted_only_with_its_stacks(tmp_path):
    manifest = _dead_record(tmp_path)
    read_dead_writer_as_killed(manifest, tmp_path)  # no stacks: it vanished
    assert manifest.status == "killed" and "SIGKILL" in manifest.exception.message
    (tmp_path / SIGNAL_STACKS_DIR).mkdir()
    (tmp_path / SIGNAL_STACKS_DIR / "SIGTERM.txt").write_text("")  # armed, never signalled
    manifest = _dead_record(tmp_path)
    read_dead_writer_as_killed(manifest, tmp_path)
    assert manifest.status == "killed"
    (tmp_path / SIGNAL_STACKS_DIR / "SIGHUP.txt").write_text(
        'Current thread 0x1 (most recent call first):\n  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        '  File "/home/me/train.py", line 46 in train\n  File "<string>", line 1 in <module>\n')
    manifest = _dead_record(tmp_path)
    read_dead_writer_as_killed(manifest, tmp_path)
    assert (manifest.status, manifest.exit_code, manifest.exception.type) == ("interrupted", 129, "SIGHUP")
    assert "in /home/me/train.py:46 (train)" in manifest.exception.message
    assert "line 320 in wait" in manifest.exception.traceback
    assert manifest.options["closed_by"] == "reader"  # what it held in memory died with it
    from cagtool.report.figures.metrics import steps_lost_with_process

    manifest.options["held_events"] = {"kinds": ["step"], "up_to_s": 0.5}
    assert steps_lost_with_process(manifest) == 0.5


def test_stacks_name_the_script_line_when_a_thread_without_python_took_the_signal(tmp_path):
    """The kernel may give a process's SIGTERM to a thread with no Python frames (a gloo worker):
    faulthandler then marks no thread as current, and the script's line is the main thread's."""
    from cagtool.record.liveness import signal_stop_exception

    (tmp_path / SIGNAL_STACKS_DIR).mkdir()
    (tmp_path / SIGNAL_STACKS_DIR / "SIGTERM.txt").write_text(
        'Thread 0x2 (most recent call first):\n  File "/usr/lib/python3.11/threading.py", line 331 in wait\n'
        '  File "/x/site-packages/cagtool/record/writer.py", line 495 in _run\n\n'
        'Thread 0x1 (most recent call first):\n  File "/x/site-packages/torch/_tensor.py", line 623 in backward\n'
        '  File "/home/me/train.py", line 21 in train\n  File "<string>", line 1 in <module>\n')
    stopped = signal_stop_exception("SIGTERM", tmp_path)
    assert stopped["type"] == "SIGTERM" and "in /home/me/train.py:21 (train)" in stopped["message"]


def test_stacks_skip_cagtool_frames_anywhere_in_its_package(tmp_path):
    """The signal may land while cagtool writes the event the script's step made (a checkout's
    cagtool/record/schema.py, not under site-packages): the line named is still the script's. A
    user's own folder named cagtool is not taken for the package."""
    from cagtool.record.liveness import signal_stop_exception

    (tmp_path / SIGNAL_STACKS_DIR).mkdir()
    stacks = tmp_path / SIGNAL_STACKS_DIR / "SIGTERM.txt"
    stacks.write_text(
        'Current thread 0x1 (most recent call first):\n  File "/src/cagtool/cagtool/record/schema.py", line 453 in event_line\n'
        '  File "/src/cagtool/cagtool/record/writer.py", line 300 in write\n  File "/src/cagtool/cagtool/api.py", line 80 in step\n'
        '  File "/home/me/cagtool/train.py", line 33 in train\n  File "<string>", line 1 in <module>\n')
    assert "in /home/me/cagtool/train.py:33 (train);" in signal_stop_exception("SIGTERM", tmp_path)["message"]
    assert signal_stop_exception("SIGHUP", tmp_path) == {"type": "SIGHUP", "message": "stopped by SIGHUP before it closed this record", "traceback": ""}


def _stopped_in_a_backend(tmp_path: Path, when: str) -> str:
    """The message of a process SIGTERMed while a torch.compile backend of its own waits, `when`
    "compiling" (inside the backend: Dynamo's compile of the frame) or "running" (inside the
    compiled function the backend returned, on its second call)."""
    from cagtool.record.liveness import signal_stop_exception

    code = textwrap.dedent(f"""
        import time, torch
        from cagtool.capture.processes.lifeline import StopStacks
        StopStacks().arm({str(tmp_path)!r})
        def wait():
            print("READY", flush=True)
            time.sleep(60)
        def backend(gm, example_inputs):
            if {when!r} == "compiling":
                wait()
            calls = []
            def run(*args):
                calls.append(1)
                if len(calls) == 2:
                    wait()
                return gm(*args)
            return run
        f = torch.compile(lambda x: x.sin() + 1, backend=backend)
        f(torch.randn(3)); f(torch.randn(3))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        proc.kill()
    return signal_stop_exception("SIGTERM", tmp_path)["message"]


@pytest.mark.slow
def test_a_job_stopped_inside_a_compile_is_told_so_and_one_running_compiled_code_is_not(tmp_path):
    """A job stopped after minutes in one compile (Dynamo tracing a compiled-autograd graph of
    thousands of nodes) is told torch was compiling, from the stacks it left; a compiled function
    running is no compile, though torch's frames wrap it too. Real torch.compile, real signals."""
    assert ", while torch was compiling (Dynamo);" in _stopped_in_a_backend(tmp_path / "compiling", "compiling")
    assert "compiling" not in _stopped_in_a_backend(tmp_path / "running", "running")


@pytest.mark.slow
def test_ddp_ranks_stopped_by_sigterm_read_as_interrupted(tmp_path):
    """A CI runner's SIGTERM to the job's process group while both mp.spawn ranks train: the job
    ends as under python (exit 143, no process left), every rank's steps are kept, and each rank
    reads as interrupted by SIGTERM at its line of the script, not as SIGKILLed."""
    cmd = cagtool_cmd("run", "--modes", "aot", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "ddp_until_stopped.py"))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, start_new_session=True)
    try:
        ready = {proc.stdout.readline().strip() for _ in range(2)}
        assert ready == {"READY 0", "READY 1"}, proc.stderr.read() if proc.poll() is not None else ready
        time.sleep(0.5)  # past the ranks' first held lines (writer hold_s 0.1)
        os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, stderr[-3000:]
    aot = load_run(tmp_path / "r").mode("aot")
    assert sorted(aot.ranks()) == [0, 1]
    for rank, record in aot.ranks().items():
        manifest = record.manifest
        assert (manifest.status, manifest.exit_code, manifest.exception.type) == ("interrupted", 143, "SIGTERM"), manifest.exception
        assert f"{SCRIPTS / 'ddp_until_stopped.py'}:" in manifest.exception.message
        assert len(record.of(StepEvent)) >= 3
        # Every thread's stack. Which thread took the signal is the kernel's choice: often a gloo
        # worker with no Python frames, and then faulthandler marks none as current.
        assert "Thread 0x" in manifest.exception.traceback
