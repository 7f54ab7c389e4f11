"""Issue 14's table as tests: what cagtool guarantees when the job, the machine or the record
misbehaves (docs/reliability.md lists the guarantees).

Reading side (hostile or damaged records): hand-built run directories, read through the real CLI
in-process (fast: no torch run). Each test names the row of the table it covers.

Process and I/O side (capture): a terminal with stdout redirected, signals to the cagtool parent,
SIGKILL of the parent, a full disk, stdin with several modes, closed pipes, bad -o, --debug after
the script, -m with a syntax error, temporary caches. Tiny scripts, eager backend; these tests
are the functions after the "process and I/O" line below.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import ROOT, cagtool_cmd

from cagtool.record.loader import load_run
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.schema import StepEvent

# ------------------------------------------------------------------ reading: hand-built records


def cagtool(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run cli.main in-process; returns (exit code, stdout, stderr)."""
    import contextlib
    import io
    import sys

    from cagtool.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_env = dict(os.environ)
    old_cwd = os.getcwd()
    os.environ.update(env or {})
    if "GITHUB_ACTIONS" not in (env or {}):
        os.environ.pop("GITHUB_ACTIONS", None)
        os.environ.pop("GITHUB_STEP_SUMMARY", None)
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
        sys.stdout.flush()
    return code, out.getvalue(), err.getvalue()


def _manifest(mode: str, status: str = "finished", **extra) -> dict:
    manifest = ModeManifest(mode=mode, argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/",
                            versions={"torch": "2.13.0"}, backend="eager" if mode == "ca" else "none", dynamic=False,
                            started_at="2026-01-01T00:00:00Z", status=status, exit_code=0 if status == "finished" else 1,
                            duration_s=1.0)
    data = to_dict(manifest)
    data.update(extra)
    return data


def _steps(n: int = 8, ms: float = 10.0) -> list[dict]:
    events, t = [], 0.0
    for i in range(1, n + 1):
        t += ms / 1000
        events.append({"kind": "step", "seq": i, "t": t, "step": i, "loss": 1.0 / i})
    return events


def write_run(root: Path, modes: dict[str, dict | None], asked: list[str] | None = None, events: dict[str, list] | None = None,
              meta_extra: dict | None = None) -> Path:
    """A run directory: `modes` maps a mode to its manifest (None: listed in run.json, no record)."""
    meta = RunMeta(run_id=root.name, created_at="2026-01-01T00:00:00Z", cagtool_argv=["cagtool", "run", "train.py"],
                   target={"kind": "script", "name": "train.py"}, target_argv=["train.py"], cwd="/",
                   modes=asked or list(modes), versions={"torch": "2.13.0"}, machine={}, status="finished", exit_code=0)
    data = to_dict(meta)
    data.update(meta_extra or {})
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.json").write_text(json.dumps(data))
    for mode, manifest in modes.items():
        if manifest is None:
            continue
        (root / mode).mkdir()
        (root / mode / "manifest.json").write_text(json.dumps(manifest))
        lines = (events or {}).get(mode, _steps())
        (root / mode / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return root


def test_gate_on_missing_mode_fails_never_reads_another(tmp_path):
    """`gate RUN --max-ca-graphs 1` on a run whose ca mode never ran: fails, naming ca."""
    run = write_run(tmp_path / "r", {"eager": _manifest("eager"), "ca": None})
    code, out, err = cagtool("gate", str(run), "--max-ca-graphs", "1", "--no-config", "--format", "json")
    assert code == 1, (out, err)
    report = json.loads(out)
    assert report["mode"] == "ca"
    failed = {c["check"]: c["message"] for c in report["checks"] if c["failed"]}
    assert "left no record" in failed["max-ca-graphs"]
    assert "mode-finished" in failed
    # the summary's top-level figures are not eager's under the ca name either
    code, out, _ = cagtool("summary", str(run), "--format", "json")
    body = json.loads(out)
    assert code == 0 and body["mode"] == "ca" and body["mode_recorded"] is False and body["ca_graphs"] is None


def test_gate_on_interrupted_or_failed_mode_fails_with_reason(tmp_path):
    for status in ("interrupted", "failed"):
        run = write_run(tmp_path / status, {"eager": _manifest("eager"), "ca": _manifest("ca", status=status)})
        code, out, _ = cagtool("gate", str(run), "--max-ca-graphs", "1", "--no-config")
        assert code == 1
        assert f"mode-finished (ca): status {status}" in out


def test_gate_on_missing_rank_fails(tmp_path):
    """Rank 1 of 2 left no record and rank 0 failed: the gate says so, though main finished."""
    proc = {"key": "rank0", "pid": 2, "ppid": 1, "rank": 0, "local_rank": 0, "world_size": 2, "role": "child", "argv": []}
    run = write_run(tmp_path / "r", {"ca": _manifest("ca")})
    (run / "ca" / "procs" / "rank0").mkdir(parents=True)
    (run / "ca" / "procs" / "rank0" / "manifest.json").write_text(json.dumps(_manifest("ca", status="failed", process=proc)))
    code, out, _ = cagtool("gate", str(run), "--max-ca-graphs", "5", "--no-config")
    assert code == 1
    assert "process rank0: failed" in out and "rank 1 of world size 2 left no record" in out


# ------------------------------------------------------------------ process and I/O: real runs of tiny scripts

SCRIPTS = Path(__file__).parent / "scripts"
ENV = {**os.environ, "CI": "true"}


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_endless(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """cagtool on a script that trains until stopped; returns once it has trained 2 steps, with
    the mode process's pid. SIGINT back to default (a CI runner may start the suite with it ignored)."""
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "endless_training.py"))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline().strip() == "READY"
    children = _children(proc.pid)
    assert len(children) == 1, children
    return proc, children[0]


# --- 1. the script's stdout and stderr are its own, on a terminal too -----------------------


def test_terminal_stdout_redirected_keeps_the_scripts_prints(tmp_path):
    """`cagtool run x.py > out.txt` on a terminal: out.txt is exactly the script's stdout, while the
    live status is drawn on the terminal (stderr) and the script's stderr reaches the terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["TERM"] = "xterm"
    out_path = tmp_path / "out.txt"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "prints_both.py")),
            stdin=slave, stdout=out, stderr=slave, cwd=ROOT, env=env, start_new_session=True,
        )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            seen += data
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=30) == 0, seen[-2000:]
    assert out_path.read_text() == "".join(f"out {i}\n" for i in range(4))
    terminal = seen.decode(errors="replace")
    assert all(f"err {i}" in terminal for i in range(4))
    assert "\x1b[1;23r" in terminal and "cagtool ca: step" in terminal  # the status was drawn...
    assert "\x1b[r" in terminal  # ...and the terminal's scroll region given back
    assert "out 0" not in terminal


def test_run_format_json_refused_json_file_written(tmp_path):
    refused = subprocess.run(cagtool_cmd("run", "--format", "json", str(SCRIPTS / "exit_code.py")), capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert refused.returncode == 2 and "--json FILE" in refused.stderr and refused.stdout == ""


# --- 2. signals, orphans, exit codes ----------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_signal_to_parent_pid_reaches_the_mode_and_closes_the_record(tmp_path, signum):
    """kill, `timeout -s INT`, a closed terminal: the signal goes to cagtool's pid only."""
    proc, child = _start_endless(tmp_path)
    sent = time.monotonic()
    os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr
    assert not _alive(child)
    assert time.monotonic() - sent < 60  # closed by the signal, not by the 20 s kill fallback
    run = load_run(tmp_path / "r")
    ca = run.modes["ca"]
    assert ca.manifest.status == "interrupted" and ca.manifest.exit_code == 128 + signum
    assert run.meta.status == "interrupted" and run.meta.exit_code == 128 + signum
    assert run.meta.mode_exit_codes == {"ca": 128 + signum}
    assert len(ca.of(StepEvent)) >= 2
    assert "Traceback" not in stderr


def test_sigkill_of_parent_leaves_no_orphan_and_reads_as_killed(tmp_path):
    proc, child = _start_endless(tmp_path)
    proc.kill()
    proc.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the mode process outlived a SIGKILLed cagtool"
    run = load_run(tmp_path / "r")
    assert run.meta.status == "killed"  # run.json still says running: its writer vanished
    ca = run.modes["ca"]
    assert ca.manifest.status == "interrupted" and "cagtool's own process died" in ca.manifest.exception.message


# --- 4. a full disk never reaches the user's code --------------------------------------------


def _can_mount_tmpfs(where: Path) -> bool:
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(where)], capture_output=True).returncode == 0


def test_disk_full_stops_recording_not_the_job(tmp_path):
    """A real small tmpfs when the test may mount one (root). Otherwise ENOSPC is emulated with
    RLIMIT_FSIZE (the write fails with EFBIG once a file passes 200 KiB): the same code path, a
    different errno."""
    mount = tmp_path / "small"
    mounted = _can_mount_tmpfs(mount)
    preexec = None
    if not mounted:
        mount.mkdir(exist_ok=True)

        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (200 * 1024, 200 * 1024))

    try:
        proc = subprocess.run(
            cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(mount / "r"), str(SCRIPTS / "steady_training.py"), "3000"),
            capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300, preexec_fn=preexec,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout == "DONE 3000\n"  # the job ran to its end
        assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr
        stopped_lines = [l for l in proc.stderr.splitlines() if l.startswith("cagtool: recording stopped at event")]
        assert len(stopped_lines) == 1, proc.stderr[-3000:]
        run = load_run(mount / "r")
        ca = run.modes["ca"]
        stop = ca.manifest.recording_stopped
        assert stop is not None and stop["at_seq"] > 0
        assert ("No space left" in stop["error"]) if mounted else ("too large" in stop["error"])
        assert ca.manifest.status == "finished" and ca.manifest.exit_code == 0
        assert run.meta.status == "finished" and run.meta.exit_code == 0
        assert 0 < len(ca.events) <= stop["at_seq"]
        assert "note: recording stopped at event" in proc.stderr  # the summary says so too
    finally:
        if mounted:
            subprocess.run(["umount", str(mount)], check=False)


# --- 6. caches, --debug, -m, closed pipes, -o "", stdin ---------------------------------------


def test_stdin_is_given_to_every_mode_and_caches_are_removed(tmp_path):
    """3 lines piped to a script that reads stdin, 3 modes: each mode reads the same 3 lines. The
    per-mode Inductor caches (a temporary directory) are gone when the run ends; --json FILE
    holds the summary while stdout stays the script's."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.run(
        cagtool_cmd("run", "--backend", "eager", "-o", str(tmp_path / "r"), "--json", str(tmp_path / "s.json"), str(SCRIPTS / "reads_stdin.py")),
        input="one\ntwo\nthree\n", capture_output=True, text=True, cwd=ROOT, env={**ENV, "TMPDIR": str(tmpdir)}, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and len(set(lines)) == 1 and lines[0].startswith("LINES 3 "), proc.stdout
    assert list(tmpdir.iterdir()) == []
    summary = json.loads((tmp_path / "s.json").read_text())
    assert set(summary["modes"]) == {"eager", "aot", "ca"}


def test_keep_cache_keeps_inductor_caches_under_the_run(tmp_path):
    proc = subprocess.run(
        cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--keep-cache", "-o", str(tmp_path / "r"), str(SCRIPTS / "exit_code.py"), "0"),
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r" / "inductor-cache").is_dir()
    assert json.loads((tmp_path / "r" / "run.json").read_text())["options"]["keep_cache"] is True


def test_empty_output_option_is_refused(tmp_path):
    proc = subprocess.run(cagtool_cmd("run", "-o", "", str(SCRIPTS / "exit_code.py")), capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert proc.returncode == 2
    assert proc.stderr.startswith("cagtool: error: -o/--output is empty") and proc.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_debug_after_the_script_belongs_to_the_script(tmp_path):
    """Only `cagtool --debug CMD` turns on tracebacks; `--debug` after the script is the script's."""
    after = subprocess.run(cagtool_cmd("run", "-o", "", str(SCRIPTS / "exit_code.py"), "--debug"), capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert after.returncode == 2 and "Traceback" not in after.stderr
    before = subprocess.run(cagtool_cmd("--debug", "run", "-o", "", str(SCRIPTS / "exit_code.py")), capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert before.returncode == 2 and "Traceback" in before.stderr


def test_module_with_syntax_error_is_a_usage_error(tmp_path):
    pkg = tmp_path / "badpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("def broken(:\n")
    proc = subprocess.run(cagtool_cmd("run", "-o", str(tmp_path / "r"), "-m", "badpkg.train"), capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "train.py is not valid Python" in proc.stderr
    assert not (tmp_path / "r").exists()


def _with_closed_stdout(*args: str) -> subprocess.CompletedProcess:
    """The reader has gone before cagtool writes (`... | head -1`, `... | true`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(cagtool_cmd(*args), stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)


def test_closed_stdout_pipe_is_not_a_failure(record_run):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    summary = _with_closed_stdout("summary", str(run.path))
    assert summary.returncode == 0 and summary.stderr == ""
    passing = _with_closed_stdout("gate", str(run.path), "--max-ca-graphs", "100", "--no-config")
    assert passing.returncode == 0 and passing.stderr == ""
    failing = _with_closed_stdout("gate", str(run.path), "--max-ca-graphs", "1", "--no-config")
    assert failing.returncode == 1 and "Traceback" not in failing.stderr


def test_mode_process_killed_alone_is_closed_as_killed(tmp_path):
    """The OOM killer's SIGKILL to the mode process: cagtool closes its manifest as killed, and
    run.json agrees (exit 137)."""
    proc, child = _start_endless(tmp_path)
    os.kill(child, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 137, stderr
    run = load_run(tmp_path / "r")
    ca = run.modes["ca"]
    assert ca.manifest.status == "killed" and ca.manifest.exit_code == 137 and ca.manifest.exception.type == "SIGKILL"
    assert run.meta.status == "finished" and run.meta.exit_code == 137 and run.meta.mode_exit_codes == {"ca": 137}
