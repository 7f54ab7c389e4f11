"""The reliability guarantees (docs/reliability.md) as tests: what cagtool guarantees when the job, the machine or the record
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
import getpass
import json
import re
import os
import pty
import resource
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import ROOT, cagtool_cmd, can_mount_tmpfs, private_copy, recorded_once
from conftest import cli_in_process as cagtool

from cagtool.record.loader import load_run
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.seal import with_document_seal
from cagtool.record.schema import FindingEvent, StepEvent
from cagtool.report.figures.metrics import mode_metrics

# ------------------------------------------------------------------ reading: hand-built records




def _manifest(mode: str, status: str = "finished", **extra) -> dict:
    manifest = ModeManifest(mode=mode, argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/",
                            versions={"torch": "2.13.0"}, backend="eager" if mode == "ca" else "none", dynamic=False,
                            started_at="2026-01-01T00:00:00Z", status=status, exit_code=0 if status == "finished" else 1,
                            duration_s=1.0)
    data = to_dict(manifest)
    data.update(extra)
    return data


def _steps(n: int = 8, ms: float = 10.0) -> list[dict]:
    """n steps as a schema-3 record numbers them: from 0, like the script's loop."""
    events, t = [], 0.0
    for i in range(1, n + 1):
        t += ms / 1000
        events.append({"kind": "step", "seq": i, "t": t, "step": i - 1, "backward_s": ms / 3000, "loss": 1.0 / i})
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


def _start_endless(tmp_path: Path, env: dict[str, str] | None = None, nohup: bool = False) -> tuple[subprocess.Popen, int, int]:
    """cagtool on a script that trains until stopped and has a worker process of its own; returns
    once it has trained 2 steps, with the mode process's and the worker's pids. SIGINT back to
    default (a CI runner may start the suite with it ignored); `nohup`: started with SIGHUP
    ignored, as `nohup cagtool run ...` starts it."""

    def preexec() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if nohup:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)

    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "with_worker.py"))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env or ENV, start_new_session=True,
        preexec_fn=preexec,
    )
    ready, worker = proc.stdout.readline().split()
    assert ready == "READY"
    children = _children(proc.pid)
    assert len(children) == 1, children
    assert int(worker) in _children(children[0])
    return proc, children[0], int(worker)


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


# --- 1. the script's stdout and stderr are its own, on a terminal too -----------------------


@pytest.mark.slow
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


def _signal_to_parent_closes_the_record(tmp_path: Path, proc: subprocess.Popen, child: int, worker: int, signum: int) -> None:
    """`signum` to cagtool's pid only (a job from _start_endless): it reaches the mode process and
    the job's own worker, as a signal to the process group would, and the record closes."""
    sent = time.monotonic()
    os.kill(proc.pid, signum)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr
    assert not _alive(child) and _gone_within(worker, 5)
    assert time.monotonic() - sent < 60  # closed by the signal, not by the 20 s kill fallback
    run = load_run(tmp_path / "r")
    ca = run.modes["ca"]
    assert ca.manifest.status == "interrupted" and ca.manifest.exit_code == 128 + signum
    assert run.meta.status == "interrupted" and run.meta.exit_code == 128 + signum
    assert run.meta.mode_exit_codes == {"ca": 128 + signum}
    assert "Traceback" not in stderr
    if signum == signal.SIGINT:  # KeyboardInterrupt unwinds the script: the record closes itself, whole
        assert len(ca.of(StepEvent)) >= 2 and "closed_by" not in ca.manifest.options
    else:
        # SIGTERM and SIGHUP end the process at once (their default action, as under python):
        # cagtool closes the record, which says where the script was and what may be missing.
        assert ca.manifest.exception.type == signal.Signals(signum).name
        assert ca.manifest.exception.message.startswith(f"stopped by {signal.Signals(signum).name}")
        metrics = mode_metrics(ca)
        assert metrics.steps_lost_s == 0.5
        # torch's counters died with the process: unknown, never read as 0; how long it ran, from its times
        assert metrics.autograd_captures is None
        code, out, _ = cagtool("summary", str(tmp_path / "r"))
        said = " ".join(out.split())
        assert code == 0 and "torch counted" not in said and re.search(r"in \d+ s \(from its start and end times\)", said), said


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_signal_to_parent_pid_reaches_the_mode_and_closes_the_record(tmp_path, signum):
    """kill, `timeout -s INT`, a closed terminal: the signal goes to cagtool's pid only. It reaches
    the mode process and the job's own worker, as a signal to the process group would. (SIGTERM,
    `kill`'s default, is the end of test_sighup_ignored_at_start_stays_ignored_as_under_nohup's
    job: the same assertions, on a job that also shows SIGHUP ignored.)"""
    proc, child, worker = _start_endless(tmp_path)
    _signal_to_parent_closes_the_record(tmp_path, proc, child, worker, signum)


@pytest.mark.slow
def test_sigkill_of_parent_the_mode_process_closes_its_record_and_run_json(tmp_path):
    """SIGKILL of cagtool (one job, several claims): neither the mode process nor the job's worker
    outlives it; the mode process closes its own record and run.json, with its exit code, though
    the kernel may deliver cagtool's death to it twice (test_parent_died.py pins that a second copy
    raises nothing; this race showed here in about 1 run in 10 before); the run reads as killed, and
    so does a run.json left "running" by a writer that vanished; and the run's temporary Inductor
    cache, which only cagtool removed, is removed by the mode process."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc, child, worker = _start_endless(tmp_path, env={**ENV, "TMPDIR": str(temp)})
    assert len(list(temp.glob("cagtool-inductor-*"))) == 1
    proc.kill()
    proc.wait(timeout=30)
    assert _gone_within(child, 60), "the mode process outlived a SIGKILLed cagtool"
    assert _gone_within(worker, 30), "the job's worker outlived a SIGKILLed cagtool"
    assert list(temp.glob("cagtool-inductor-*")) == []
    # Read run.json as another reader would, before cagtool's loader has looked at it.
    on_disk = json.loads((tmp_path / "r" / "run.json").read_text())
    assert on_disk["status"] == "killed" and on_disk["mode_exit_codes"] == {"ca": 143}, on_disk
    run = load_run(tmp_path / "r")
    assert run.meta.status == "killed" and run.meta.mode_exit_codes == {"ca": 143}
    ca = run.modes["ca"]
    assert ca.manifest.status == "interrupted" and "cagtool's own process died" in ca.manifest.exception.message
    # and a run.json left "running" by a writer that vanished reads as killed too
    on_disk["status"] = "running"
    (tmp_path / "r" / "run.json").write_text(json.dumps(on_disk))
    assert load_run(tmp_path / "r").meta.status == "killed"


# --- 4. a full disk never reaches the user's code --------------------------------------------


@pytest.mark.slow
def test_disk_full_stops_recording_not_the_job(tmp_path):
    """A real small tmpfs when the test may mount one (root). Otherwise ENOSPC is emulated with
    RLIMIT_FSIZE (the write fails with EFBIG once a file passes 200 KiB): the same code path, a
    different errno."""
    mount = tmp_path / "small"
    mounted = can_mount_tmpfs(mount)
    preexec = None
    if not mounted:
        mount.mkdir(exist_ok=True)

        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (200 * 1024, 200 * 1024))

    try:
        proc = subprocess.run(
            # 1,000 steps write about 540 KB of step lines: the 200 KiB limit is passed at a third.
            cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(mount / "r"), str(SCRIPTS / "steady_training.py"), "1000"),
            capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300, preexec_fn=preexec,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout == "DONE 1000\n"  # the job ran to its end
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


@pytest.mark.slow
def test_stdin_is_given_to_every_mode_and_caches_are_removed(tmp_path):
    """3 lines piped to a script that reads stdin, 3 modes: each mode reads the same 3 lines. The
    per-mode Inductor caches (a temporary directory) are gone when the run ends; --json FILE
    holds the summary while stdout stays the script's."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.run(
        cagtool_cmd("run", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), "--json", str(tmp_path / "s.json"), str(SCRIPTS / "reads_stdin.py")),
        input="one\ntwo\nthree\n", capture_output=True, text=True, cwd=ROOT, env={**ENV, "TMPDIR": str(tmpdir)}, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and len(set(lines)) == 1 and lines[0].startswith("LINES 3 "), proc.stdout
    assert list(tmpdir.iterdir()) == []
    summary = json.loads((tmp_path / "s.json").read_text())
    assert set(summary["modes"]) == {"eager", "aot", "ca"}


@pytest.mark.slow
def test_an_inductor_run_leaves_only_what_the_plain_job_keeps_per_machine_in_the_temporary_directory(tmp_path):
    """The Inductor backend (the default) on a real training step, in a temporary directory of its
    own, torch's default Inductor cache there: the per-mode caches are removed, and what is left is
    what the plain job keeps past itself per machine (inductor_machine.py): torch's precompiled C++
    headers (<tmp>/torchinductor_<user>/precompiled_headers, outside the per-mode cache), and in the
    job's own cache the ISA checks the mode compiled, whole, for the next run's modes and the plain
    job to find. cagtool no longer switches the headers off (that made the compiles ~45 % slower than
    the plain job's); the mode that built them is recorded."""
    from cagtool.capture.run.inductor_machine import isa_checks

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {key: value for key, value in ENV.items() if key not in ("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "TORCHINDUCTOR_CACHE_DIR")}
    proc = subprocess.run(
        cagtool_cmd("run", "--modes", "ca", "--no-report", "-o", str(tmp_path / "r"), str(ROOT / "sample_scripts" / "linear_train_step.py")),
        capture_output=True, text=True, cwd=ROOT, env={**env, "TMPDIR": str(tmpdir)}, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ca = load_run(tmp_path / "r").mode("ca")
    assert ca.manifest.backend == "inductor" and mode_metrics(ca).ca_graphs >= 1
    job_cache = tmpdir / f"torchinductor_{getpass.getuser()}"  # torch's default_cache_dir under TMPDIR
    checks = isa_checks(str(job_cache))
    kept = {str(job_cache / path) for c in checks for path in (c.source, c.library)}
    assert checks and all(c.data.startswith(b"\x7fELF") for c in checks)
    left = {p for p in tmpdir.rglob("*") if p.is_file() and not p.is_relative_to(job_cache / "precompiled_headers")}
    assert {str(p) for p in left} == kept, sorted(left)
    assert any(p.suffix == ".gch" for p in (job_cache / "precompiled_headers").iterdir())
    assert load_run(tmp_path / "r").meta.built_headers == ["ca"]
    code, text, _ = cagtool("compare", str(tmp_path / "r"), env={"CI": "true", "COLUMNS": "400"})
    assert code == 0 and "ca built Inductor's precompiled C++ headers" in " ".join(text.split())


@pytest.mark.slow
def test_stdin_file_rewound_per_mode(tmp_path):
    """`< data.txt` with two modes: each reads the file from where cagtool found it."""
    data = tmp_path / "data.txt"
    data.write_text("skip me\none\ntwo\nthree\n")
    with open(data, "rb", buffering=0) as handle:
        handle.seek(len("skip me\n"))  # cagtool finds the file past its first line, as a shell script might leave it
        from_file = subprocess.run(
            cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "f"), str(SCRIPTS / "reads_stdin.py")),
            stdin=handle, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300,
        )
    assert from_file.returncode == 0, from_file.stderr[-2000:]
    lines = from_file.stdout.splitlines()
    assert len(lines) == 2 and len(set(lines)) == 1 and lines[0].startswith("LINES 3 "), from_file.stdout


# An Inductor cache as torch lays it out (inductor_machine.py): an ISA check's source and library,
# and a kernel's.
_JOB_CACHE = {
    "ab/cabcheck.cpp": 'extern "C" void __avx_chk_kernel() {}\n',
    "ab/cabcheck.so": "not a library: never loaded by these tests\n",
    "cd/ccdkernel.main.cpp": 'extern "C" void kernel() {}\n',
    "cd/ccdkernel.main.so": "a kernel\n",
}


def _record_silent_stdin_run(base: Path) -> list:
    """An unseeded two-mode script (it never reads stdin) run with --keep-cache and an open pipe on
    stdin that never sends anything (`docker run -i` in CI): the run is shared by the tests below,
    each of which reads what it is about (the same processes, several claims). The job's own
    Inductor cache holds an ISA check, a kernel and a link, in the layout torch writes them."""
    job_cache = base / "job-cache"
    for name, text in _JOB_CACHE.items():
        (job_cache / name).parent.mkdir(parents=True, exist_ok=True)
        (job_cache / name).write_text(text)
    (job_cache / "ln").mkdir()
    (job_cache / "ln" / "clinked.cpp").symlink_to(job_cache / "ab" / "cabcheck.cpp")
    (job_cache / "ln" / "clinked.so").symlink_to(job_cache / "ab" / "cabcheck.so")
    (job_cache / "ef").mkdir()
    (job_cache / "ef" / "cefcheck.cpp").write_text(_JOB_CACHE["ab/cabcheck.cpp"])
    (job_cache / "ef" / "cefcheck.so").symlink_to("/etc/passwd")  # a check's library planted as a link: not read
    with open(base / "stdout", "w") as out, open(base / "stderr", "w") as err:
        silent = subprocess.Popen(
            cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "--keep-cache", "-o", str(base / "r"), str(SCRIPTS / "unseeded_training.py")),
            stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=ROOT, env={**ENV, "TORCHINDUCTOR_CACHE_DIR": str(job_cache)},
        )
        try:
            code = silent.wait(timeout=300)  # stdin is still open while we wait: communicate() would close it
        finally:
            silent.stdin.close()
            if silent.poll() is None:
                silent.kill()
                silent.wait()
    return [code, (base / "stderr").read_text()[-3000:]]


@pytest.fixture(scope="module")
def silent_stdin_run(tmp_path_factory) -> tuple[Path, int, str]:
    """(run directory, exit code, stderr tail) of _record_silent_stdin_run, recorded once per session."""
    base, (code, stderr) = recorded_once(tmp_path_factory, "reliability-silent-stdin", _record_silent_stdin_run)
    return base / "r", code, stderr


@pytest.mark.slow
def test_silent_stdin_pipe_is_never_waited_for(silent_stdin_run):
    """An open pipe that never sends anything does not hold up a script that never reads stdin,
    with two modes (where a pipe is kept for the later mode): the run ends by itself."""
    _, code, stderr = silent_stdin_run
    assert code == 0, stderr  # stdin was still open when it ended: nothing was waited for


@pytest.mark.slow
def test_keep_cache_keeps_inductor_caches_under_the_run(silent_stdin_run):
    run, code, stderr = silent_stdin_run
    assert code == 0, stderr
    assert (run / "inductor-cache").is_dir()
    assert json.loads((run / "run.json").read_text())["options"]["keep_cache"] is True


@pytest.mark.slow
def test_each_modes_fresh_inductor_cache_starts_with_the_isa_checks_the_jobs_cache_holds(silent_stdin_run):
    """inductor_machine.py: a plain job finds Inductor's ISA checks in its own cache after its first
    run; each mode's fresh cache gets a copy of them (not a link), and nothing else of the job's
    cache: neither its kernels, nor a link, nor a check whose library is a link."""
    run, code, stderr = silent_stdin_run
    assert code == 0, stderr
    for mode in ("eager", "ca"):
        cache = run / "inductor-cache" / mode
        files = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file() or p.is_symlink())
        assert files == ["ab/cabcheck.cpp", "ab/cabcheck.so"], files
        assert not any((cache / f).is_symlink() for f in files)
        assert (cache / "ab" / "cabcheck.cpp").read_text() == _JOB_CACHE["ab/cabcheck.cpp"]


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
    no_main = subprocess.run(cagtool_cmd("run", "-o", str(tmp_path / "r"), "-m", "badpkg"), capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert no_main.returncode == 2 and "badpkg is a package without __main__" in no_main.stderr
    assert not (tmp_path / "r").exists()


def _with_closed_stdout(*args: str) -> subprocess.CompletedProcess:
    """The reader has gone before cagtool writes (`... | head -1`, `... | true`)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(cagtool_cmd(*args), stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.slow
def test_closed_stdout_pipe_is_not_a_failure(record_run, tmp_path):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    path = private_copy(run.path, tmp_path / "run")  # the gates write gate.json into it
    summary = _with_closed_stdout("summary", str(path))
    assert summary.returncode == 0 and summary.stderr == ""
    passing = _with_closed_stdout("gate", str(path), "--max-ca-graphs", "100", "--no-config")
    assert passing.returncode == 0 and passing.stderr == ""
    failing = _with_closed_stdout("gate", str(path), "--max-ca-graphs", "1", "--no-config")
    assert failing.returncode == 1 and "Traceback" not in failing.stderr


@pytest.mark.slow
def test_a_closed_stderr_pipe_runs_every_mode(tmp_path):
    """`cagtool run train.py 2>&1 >/dev/null | head -1`: the reader of the progress lines leaves
    after the first. Every mode still runs, and run.json says what each did (it had said
    "finished" with the second mode never started)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "exit_code.py"), "0"),
                              stdout=subprocess.DEVNULL, stderr=write_end, cwd=ROOT, env=ENV, timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == 0
    run = load_run(tmp_path / "r")
    assert run.meta.status == "finished" and run.meta.mode_exit_codes == {"eager": 0, "ca": 0}
    assert run.modes["ca"].manifest.status == "finished"


@pytest.mark.slow
def test_a_job_killed_by_its_closed_output_pipe_is_recorded_as_failed(tmp_path):
    """`cagtool run train.py 2>&1 | head -4`: the reader leaves, the job's next print raises
    BrokenPipeError and the job ends with it, exit 1, as under python. Its record says so: failed,
    exit 1, the exception, and the steps before it (the traceback could not be printed to the same
    pipe; that failure had left the record "finished", exit 0, behind a process that exited 1)."""
    script = tmp_path / "prints_late.py"
    script.write_text("import torch\n"
                      "w = torch.ones(3, requires_grad=True)\n"
                      "opt = torch.optim.SGD([w], lr=0.1)\n"
                      "for step in range(3):\n"
                      "    (w * 2).sum().backward()\n"
                      "    opt.step()\n"
                      "    opt.zero_grad()\n"
                      "print('done')\n")
    codes = {}
    for name, cmd in (("python", [sys.executable, str(script)]),
                      ("cagtool", cagtool_cmd("run", "--modes", "eager", "--no-report", "-o", str(tmp_path / "r"), str(script)))):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            codes[name] = subprocess.run(cmd, stdout=write_end, stderr=write_end, cwd=tmp_path, env=ENV, timeout=300).returncode
        finally:
            os.close(write_end)
    assert codes == {"python": 1, "cagtool": 1}
    run = load_run(tmp_path / "r")
    eager = run.modes["eager"].manifest
    assert eager.status == "failed" and eager.exit_code == 1 and eager.exception.type == "BrokenPipeError", eager
    assert run.meta.mode_exit_codes == {"eager": 1}
    assert len(run.modes["eager"].of(StepEvent)) == 3


@pytest.mark.slow
def test_mode_process_killed_alone_is_closed_as_killed(tmp_path):
    """The OOM killer's SIGKILL to the mode process: cagtool closes its manifest as killed, and
    run.json agrees (exit 137); the worker the job left behind is stopped (cagtool adopts it)."""
    proc, child, worker = _start_endless(tmp_path)
    os.kill(child, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 137, stderr
    run = load_run(tmp_path / "r")
    ca = run.modes["ca"]
    assert ca.manifest.status == "killed" and ca.manifest.exit_code == 137 and ca.manifest.exception.type == "SIGKILL"
    # Most often the kernel's out-of-memory killer's: said where to look
    assert ca.manifest.exception.message == ("killed by SIGKILL (the kernel's out-of-memory killer sends it too: the kernel's "
                                             "log, `dmesg`, says whether it did)")
    assert run.meta.status == "finished" and run.meta.exit_code == 137 and run.meta.mode_exit_codes == {"ca": 137}
    assert not _alive(worker)


@pytest.mark.slow
def test_group_ctrl_c_is_seen_once_by_a_script_that_handles_it(tmp_path):
    """A terminal's Ctrl-C reaches cagtool and the mode process both (the process group): cagtool
    must not forward a second copy. The script catches it, tidies up and exits 0: so does cagtool."""
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "catches_ctrl_c.py"))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline().strip() == "READY"
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert stdout == "CAUGHT\nCLEAN EXIT\n", stderr
    assert proc.returncode == 0, stderr
    run = load_run(tmp_path / "r")
    assert run.meta.status == "finished" and run.modes["ca"].manifest.status == "finished"


def _start_script(tmp_path: Path, script: str, *runner: str) -> subprocess.Popen:
    """`cagtool run` (or `runner`, e.g. plain python) on tests/scripts/`script` in a session of its
    own, SIGINT at its default action; returns once the script printed READY."""
    cmd = list(runner) + [str(SCRIPTS / script)] if runner else cagtool_cmd(
        "run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), str(SCRIPTS / script))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    ready = proc.stdout.readline()
    assert ready.startswith("READY"), (ready, proc.stderr.read() if proc.poll() is not None else "")
    proc.ready_line = ready.strip()  # type: ignore[attr-defined]
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["python", "cagtool"])
def test_ctrl_c_to_an_asyncio_script_is_one_sigint(tmp_path, runner):
    """asyncio's add_signal_handler takes Python's wakeup fd, through which cagtool learnt that the
    mode process had its own copy of a group Ctrl-C: without it cagtool forwarded a second SIGINT,
    which interrupted the script's checkpoint save. The script's own outcome, under python and
    under cagtool: the save completes and it exits 0."""
    proc = _start_script(tmp_path, "asyncio_checkpoint.py", *([sys.executable] if runner == "python" else []))
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert stdout == "SAVING\nSAVED\n", stderr
    assert proc.returncode == 0, stderr
    if runner == "cagtool":
        assert load_run(tmp_path / "r").modes["ca"].manifest.status == "finished"


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["python", "cagtool"])
def test_a_chaining_sigterm_handler_keeps_the_job_alive_as_under_python(tmp_path, runner):
    """A SLURM-requeue handler chains to the SIGTERM handler it found: SIG_DFL (not callable) under
    python and under cagtool alike, so the job trains on to its end and exits 0 (cagtool neither
    raises into it nor kills it later)."""
    proc = _start_script(tmp_path, "requeue_on_sigterm.py", *([sys.executable] if runner == "python" else []))
    os.killpg(proc.pid, signal.SIGTERM)  # what scancel does: every process of the job
    stdout, stderr = proc.communicate(timeout=120)
    assert stdout == "REQUEUE previous=<Handlers.SIG_DFL: 0>\nDONE\n", stderr
    assert proc.returncode == 0, stderr
    if runner == "cagtool":
        ca = load_run(tmp_path / "r").modes["ca"].manifest
        assert (ca.status, ca.exit_code) == ("finished", 0)


@pytest.mark.slow
def test_sigterm_ends_a_process_blocked_in_c_at_once_as_under_python(tmp_path):
    """A script blocked in C code that no signal interrupts (sigwait) cannot run a Python handler:
    under cagtool SIGTERM keeps its default action, so the process ends by the signal itself (not by
    cagtool's SIGKILL after a grace period), and cagtool closes its record as interrupted at the
    script's line, from the stacks faulthandler left."""
    proc = _start_script(tmp_path, "blocked_in_c.py")
    assert proc.ready_line == "READY <Handlers.SIG_DFL: 0>"  # what the script sees, as under python
    os.killpg(proc.pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "UNBLOCKED" not in stdout, stderr
    run = load_run(tmp_path / "r")
    ca = run.modes["ca"].manifest
    assert (ca.status, ca.exit_code, ca.exception.type) == ("interrupted", 143, "SIGTERM"), ca.exception
    # The script's line: the sigwait (13), or the print just before it when the signal arrives
    # between READY and the block (the test does not race the process to the C call).
    assert re.search(r"blocked_in_c\.py:1[23] \(<module>\)", ca.exception.message), ca.exception.message
    assert ca.options["closed_by"] == "cagtool"
    assert run.meta.status == "interrupted" and run.meta.mode_exit_codes == {"ca": 143}
    summary = subprocess.run(cagtool_cmd("summary", str(tmp_path / "r"), "--format", "json"), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
    assert json.loads(summary.stdout)["modes"]["ca"]["steps_lost_with_process_s"] == 0.5


@pytest.mark.slow
def test_second_signal_later_kills_the_mode_and_closes_it_as_killed(tmp_path):
    """A CI runner's cancel: SIGINT, then SIGTERM while the script is still tidying up. The second
    signal, a second or more after the first, stops the mode process at once (SIGKILL); cagtool
    closes its manifest as killed and exits with the first signal's code."""
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "catches_ctrl_c.py"))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline().strip() == "READY"
    os.kill(proc.pid, signal.SIGINT)
    assert proc.stdout.readline().strip() == "CAUGHT"  # forwarded: the script is tidying up (3 s)
    time.sleep(1.2)
    os.kill(proc.pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert "CLEAN EXIT" not in stdout, stdout
    assert proc.returncode == 130, stderr
    run = load_run(tmp_path / "r")
    ca = run.modes["ca"].manifest
    assert ca.status == "killed" and ca.exit_code == 137
    assert run.meta.status == "interrupted" and run.meta.mode_exit_codes == {"ca": 137}


@pytest.mark.slow
def test_sighup_ignored_at_start_stays_ignored_as_under_nohup(tmp_path):
    """`nohup cagtool run ...`: SIGHUP to cagtool or to the mode process changes nothing, as
    under `nohup python`; a later SIGTERM to cagtool's pid (`kill`) still stops the run cleanly:
    it reaches the mode process and the job's own worker, and closes the record as interrupted by
    SIGTERM (one job for both claims: the SIGTERM case of
    test_signal_to_parent_pid_reaches_the_mode_and_closes_the_record)."""
    proc, child, worker = _start_endless(tmp_path, nohup=True)
    os.kill(proc.pid, signal.SIGHUP)
    os.kill(child, signal.SIGHUP)
    time.sleep(1.5)
    assert proc.poll() is None and _alive(child) and _alive(worker)
    _signal_to_parent_closes_the_record(tmp_path, proc, child, worker, signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize("code,status", [(3, 3), (300, 44)])
def test_os_exit_in_the_script_is_closed_by_its_exit_code(tmp_path, code, status):
    """os._exit(3) skips every finally of the mode process: the record is closed on the way out by
    the exit code (failed, 3), not as killed or running, and run.json agrees. os._exit(300): the
    process's status holds 44, as a shell sees it under python, and so does the record."""
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "hard_exit.py"), str(code)),
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert proc.returncode == status and proc.stdout == "BYE\n", proc.stderr
    run = load_run(tmp_path / "r")
    ca = run.modes["ca"].manifest
    assert ca.status == "failed" and ca.exit_code == status and "closed_by" not in ca.options
    assert ca.exception is not None and ca.exception.message == f"the script called os._exit({status})"
    assert run.meta.exit_code == status and run.meta.mode_exit_codes == {"ca": status}


@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 2])
def test_os_exit_keeps_every_step_of_the_job_and_of_its_fork(tmp_path, code):
    """A fork child that ends with os._exit(0), the way a fork ends, finished cleanly: its record
    says so (not killed) and the gate passes it; the main process's os._exit at the end keeps every
    step (none lost with the lines held in memory), closed by its code."""
    out = tmp_path / "r"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager", "-o", str(out), str(SCRIPTS / "fork_then_os_exit.py"), str(code)),
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout.splitlines() == ["child done", "parent done, child exit 0"], proc.stdout
    record = load_run(out).modes["eager"]
    assert record.manifest.status == ("finished" if code == 0 else "failed") and record.manifest.exit_code == code
    assert len(record.of(StepEvent)) == 7  # 3 before the fork, 4 after it
    [child] = record.processes.values()
    assert child.manifest.status == "finished" and child.manifest.exit_code == 0 and len(child.of(StepEvent)) == 5
    if code == 0:
        gate = subprocess.run(cagtool_cmd("gate", str(out), "--max-recompiles", "0", "--no-config"), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
        assert gate.returncode == 0 and "killed" not in gate.stdout, gate.stdout + gate.stderr


@pytest.mark.slow
def test_a_thread_that_died_is_in_the_record_and_fails_the_gate(tmp_path):
    """A worker thread's uncaught exception: python prints it and the process exits 0, as under
    python; the record names the thread, what it raised and the script's line, and the gate does
    not pass a mode whose figures lack that thread's work, nor does the headline give its speed."""
    out = tmp_path / "r"
    script = SCRIPTS / "thread_dies.py"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,ca", "--backend", "eager", "-o", str(out), str(script), "30"),
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "steps 30\nsteps 30\n", proc.stderr
    assert 'Exception in thread loader' in proc.stderr and "ValueError: bad shard 3" in proc.stderr  # python's own report
    record = load_run(out).modes["eager"]
    assert record.manifest.status == "finished" and len(record.of(StepEvent)) == 30
    [died] = [f for f in record.of(FindingEvent) if f.code == "thread_died"]
    assert died.detail == {"thread": "loader", "error_type": "ValueError", "error": "bad shard 3"}
    assert died.source is not None and died.source.file == str(script) and died.source.line == 12
    summary = subprocess.run(cagtool_cmd("summary", str(out)), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert "thread loader ended with ValueError: bad shard 3" in " ".join(summary.stdout.split()), summary.stdout
    gate = subprocess.run(cagtool_cmd("gate", str(out), "--max-recompiles", "0", "--no-config"), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert gate.returncode == 1 and "thread loader ended with ValueError" in gate.stdout, gate.stdout + gate.stderr
    # The speed of part of the job is no speed: the headline names the death, never a ratio.
    compare = subprocess.run(cagtool_cmd("compare", str(out), "--format", "json"), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    headline = json.loads(compare.stdout)["headline"]
    assert "in eager and ca, thread loader ended with ValueError: bad shard 3" in headline["text"] and headline["tone"] == "bad", headline
    assert "the speed of" not in headline["text"] and "not compared: in ca, thread loader ended" in headline["text"], headline
    # Nor does a timing check time it (0.58x PASS before), and the rows say what happened.
    gate = subprocess.run(cagtool_cmd("gate", str(out), "--min-speedup", "ca/eager:0.01", "--no-config"), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    rows = {(c["check"], c["mode"]): c for c in json.loads((out / "gate.json").read_text())["checks"]}
    speed = rows["min-speedup", "ca/eager"]
    assert gate.returncode == 1 and speed["outcome"] == "error", gate.stdout
    assert "cannot check: mode ca's steps are not the whole job's: ca process main: thread loader ended" in speed["message"], speed
    assert rows["mode-finished", "ca"]["actual"] == "finished, 1 problem", rows
    table = subprocess.run(cagtool_cmd("compare", str(out)), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    [status] = [line for line in table.stdout.splitlines() if " status " in line]
    assert status.count("THREAD DIED") == 2 and " ok " not in status, table.stdout


TRACE_ON_FULL_DISK = """
import json, os
from torch._logging import _internal, trace_structured
from cagtool.capture.observe.torch_logs import guard_trace_output
stopped = []
guard_trace_output(stopped.append)
handler = _internal.LOG_TRACE_HANDLER
handler.stream = open("/dev/full", "w")  # every write fails with ENOSPC, as on a full disk
handler._pid = os.getpid()
for _ in range(20):
    trace_structured("artifact", metadata_fn=lambda: {"name": "cagtool_test", "encoding": "string"}, payload_fn=lambda: "y" * 20000)
print(json.dumps(stopped))
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (writes fail with ENOSPC)")
def test_torch_trace_on_full_disk_stops_with_one_line(tmp_path):
    """torch's own TORCH_TRACE handler, writing to /dev/full: one line, then no more trace output,
    instead of a logging traceback per record."""
    proc = subprocess.run([sys.executable, "-c", TRACE_ON_FULL_DISK], capture_output=True, text=True, cwd=ROOT,
                          env={**ENV, "TORCH_TRACE": str(tmp_path)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"error": "No space left on device", "file": ""}]
    assert proc.stderr.splitlines() == ["cagtool: TORCH_TRACE output stopped: No space left on device; the script goes on, the trace up to here stays readable"]

# ------------------------------------------------------------------ reading: hostile and damaged records, honest output

def test_corrupt_bytes_in_events_are_counted_or_fatal_with_line(tmp_path):
    """Random bytes in events.jsonl: lenient readers skip and count the line; --strict is exit 3
    naming the file and line; never an internal error."""
    run = write_run(tmp_path / "r", {"ca": _manifest("ca")})
    events = run / "ca" / "events.jsonl"
    events.write_bytes(events.read_bytes() + b"\xff\xfe\x00garbage\x9c\n" + json.dumps(_steps(9)[-1]).encode() + b"\n")
    code, out, err = cagtool("summary", str(run), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["modes"]["ca"]["skipped_lines"] == 1
    code, out, err = cagtool("summary", str(run), "--strict")
    assert code == 3 and f"{events}: line 9 is not UTF-8" in err


def test_wrong_field_types_in_well_formed_lines(tmp_path):
    """`"step": "three"` in a well-formed line: skipped and counted, --strict names the line."""
    bad = {"kind": "step", "seq": 99, "t": 1.0, "step": "three", "backward_s": [1]}
    run = write_run(tmp_path / "r", {"ca": _manifest("ca")}, events={"ca": [*_steps(3), bad]})
    code, out, err = cagtool("summary", str(run), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["modes"]["ca"]["skipped_lines"] == 1
    code, _, err = cagtool("gate", str(run), "--max-ca-graphs", "0", "--no-config", "--strict")
    assert code == 3 and "line 4: StepEvent: Expected `int`, got `str` - at `$.step`" in err
    # a manifest field of the wrong type: exit 3 with the file, not a TypeError
    run2 = write_run(tmp_path / "r2", {"ca": _manifest("ca", torch_counters={"compiled_autograd": {"captures": "two"}})})
    code, _, err = cagtool("summary", str(run2))
    assert code == 3 and "manifest.json is malformed" in err and "internal error" not in err


def test_json_nested_too_deep_is_a_damaged_line_or_file_never_an_internal_error(tmp_path):
    """200,000 `[` (json's and msgspec's decoders raise RecursionError): in events.jsonl the line
    is skipped and counted like any unreadable line; as run.json, exit 3 naming the file."""
    run = write_run(tmp_path / "r", {"ca": _manifest("ca")}, events={"ca": _steps(3)})
    with open(run / "ca" / "events.jsonl", "a") as handle:
        handle.write('{"kind": "step", "x": ' + "[" * 200_000 + "\n")
    code, out, err = cagtool("summary", str(run), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["modes"]["ca"]["skipped_lines"] == 1
    (run / "run.json").write_text('{"run_id": ' + "[" * 200_000 + "]" * 200_000 + "}")
    code, _, err = cagtool("summary", str(run))
    assert code == 3 and "run.json is not valid JSON (nested too deeply" in err and err.count("\n") == 1


@pytest.mark.parametrize("field, value, said", [
    ("compile_time_s", float("inf"), "mode 'ca' has a bad value (Expected `float` <= 1000000.0 - at `$.compile_time_s`)"),
    ("ca_recompiles", -1, "mode 'ca' has a bad value (Expected `int` >= 0 - at `$.ca_recompiles`)"),
    ("steps", float("nan"), "mode 'ca' has a bad value (Expected `int`, got `float` - at `$.steps`)"),
])
def test_a_baseline_with_infinity_or_a_negative_limit_is_refused(record_run, tmp_path, field, value, said):
    """A forged baseline (json reads Infinity and NaN; a count below zero would be a limit no run
    meets): `gate` and `baseline show` exit 3 naming the file and the field, never exit 4."""
    recorded = record_run("op_loop.py", modes="ca", backend="eager")
    baseline = tmp_path / "baseline.json"
    code, _, err = cagtool("baseline", "save", str(recorded.path), "-o", str(baseline))
    assert code == 0, err
    data = json.loads(baseline.read_text())
    data["modes"]["ca"][field] = value
    baseline.write_text(json.dumps(data))
    for args in (("gate", str(recorded.path), "--baseline", str(baseline), "--max-regression", "10%", "--no-config"),
                 ("baseline", "show", str(baseline))):
        code, _, err = cagtool(*args)
        assert code == 3, (args, err)
        assert err.count("\n") == 1 and str(baseline) in err and said in err


def test_report_commands_never_write_through_a_link_planted_in_the_run(tmp_path):
    """gate.json and report.html planted as links to a victim file: `gate` keeps its own verdict
    and says in one line that its result was not saved; `report` refuses (exit 3) to read the gate
    result through the link, and to write the report through the other; the victim is unchanged."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = write_run(tmp_path / "r", {"ca": _manifest("ca")}, events={"ca": _steps(3)})
    (run / "gate.json").symlink_to(victim)
    (run / "report.html").symlink_to(victim)
    code, _, err = cagtool("gate", str(run), "--max-recompiles", "ca:5", "--no-config")
    assert code == 0, err
    assert "gate result not saved in the run" in err and "gate.json is a symbolic link" in err
    code, _, err = cagtool("report", str(run))  # nor is a gate result read through one
    assert code == 3 and f"gate result: {run / 'gate.json'} is a symbolic link; a record's files are read only as regular files, never through a link" in err and err.count("\n") == 1, err
    (run / "gate.json").unlink()
    code, _, err = cagtool("report", str(run))
    assert code == 3 and "report.html is a symbolic link" in err and err.count("\n") == 1, err
    assert victim.read_text() == "precious\n"
    assert (run / "report.html").is_symlink()


def test_runs_lists_unreadable_run_among_others(tmp_path):
    """A non-UTF-8 run.json among several runs is listed as unreadable; the others are listed."""
    root = tmp_path / "runs"
    for i in range(3):
        write_run(root / f"good-{i}", {"ca": _manifest("ca")})
    bad = write_run(root / "bad", {"ca": _manifest("ca")})
    (bad / "run.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xff")
    wrong = write_run(root / "wrong-types", {"ca": _manifest("ca")}, meta_extra={"target": ["not", "a", "dict"]})
    code, out, err = cagtool("runs", str(root))
    assert code == 0, err
    for i in range(3):
        assert str(root / f"good-{i}") in out
    assert f"{bad}" in out and "not UTF-8" in out
    assert f"{wrong}" in out and "malformed" in out
    assert "…" not in out
    # and reading it directly is exit 3, with the file
    code, _, err = cagtool("summary", str(bad))
    assert code == 3 and "run.json is not UTF-8" in err


def test_internal_error_has_its_own_exit_code(tmp_path, monkeypatch):
    """An exception cagtool did not expect: exit 4 (README), one line, not 2 (usage) or 3."""
    import cagtool.commands.summary as summary

    def boom(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(summary, "print_run_report", boom)
    code, _, err = cagtool("summary", str(tmp_path))
    assert code == 4 and "internal error: ZeroDivisionError: a bug" in err
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "| 4 | internal error" in readme


MARKUP = "[b, c] and [/x] and [bold red]not bold[/]"


def test_markup_in_record_text_is_shown_verbatim(tmp_path):
    """Record text with rich markup: shown as is, never eaten, never a MarkupError."""
    manifest = _manifest("ca", status="failed", exception={"type": "ValueError", "message": MARKUP, "traceback": ""})
    finding = {"kind": "finding", "seq": 50, "t": 1.0, "code": "x", "message": f"finding {MARKUP}"}
    run = write_run(tmp_path / "r", {"eager": _manifest("eager"), "ca": manifest}, events={"ca": [*_steps(3), finding]})
    code, out, err = cagtool("summary", str(run))
    assert code == 0, err
    assert f"ValueError: {MARKUP}" in out and f"finding {MARKUP}" in out
    code, out, err = cagtool("gate", str(run), "--max-ca-graphs", "1", "--no-config")
    assert code == 1 and MARKUP in out and "MarkupError" not in err
    code, out, err = cagtool("compare", str(run))
    assert code == 0 and MARKUP in out


def test_help_shows_brackets_and_full_option_names():
    code, out, _ = cagtool("run", "--help")
    assert code == 0 and "[tool.cagtool.gate]" in out and "\\[" not in out
    code, out, _ = cagtool("gate", "--help")
    assert "--fail-on-improvement / --no-fail-on-improvement" in out and "--max-compile-regression" in out
    assert "<bool>" not in out and "…" not in out


def test_off_terminal_lines_are_not_wrapped(tmp_path):
    """CI logs: a long line stays one line (greppable), whatever its length."""
    long_reason = "a reason " * 30
    finding = {"kind": "finding", "seq": 50, "t": 1.0, "code": "x", "message": long_reason.strip()}
    run = write_run(tmp_path / "r", {"ca": _manifest("ca")}, events={"ca": [*_steps(3), finding]})
    code, out, _ = cagtool("summary", str(run))
    assert code == 0
    assert any(line.strip() == f"finding: {long_reason.strip()}" for line in out.splitlines())


def test_path_escape_from_record_is_refused(tmp_path):
    """run.json `modes: ["../../other/ca"]` and a graph event with code_file outside the mode dir."""
    other = write_run(tmp_path / "other", {"ca": _manifest("ca")})
    run = write_run(tmp_path / "a" / "b" / "r", {"ca": _manifest("ca")}, meta_extra={"modes": ["../../../other/ca"]})
    assert (run / "../../../other/ca/manifest.json").resolve() == (other / "ca" / "manifest.json").resolve()
    code, _, err = cagtool("summary", str(run))
    assert code == 3 and "lists a mode named '../../../other/ca'" in err  # not a mode's name: refused before any path is made of it
    # a mode's directory planted as a link out of the run
    linked = write_run(tmp_path / "l", {"eager": _manifest("eager")}, meta_extra={"modes": ["ca"]})
    (linked / "ca").symlink_to(other / "ca")
    code, _, err = cagtool("summary", str(linked))
    assert code == 3 and "is a symbolic link; a record's files are read only as regular files, never through a link" in err
    graph = {"kind": "ca_graph", "seq": 40, "t": 1.0, "ca_id": 0, "compile_id": "!0", "step": 1, "node_count": 1,
             "op_histogram": {}, "autograd_nodes": [], "aot_ids": [], "hooks": [], "num_sizes": 0, "capture_s": 0.1,
             "code_file": "../../../../etc/passwd", "nodes_file": "../../../../etc/passwd"}
    run2 = write_run(tmp_path / "r2", {"ca": _manifest("ca")}, events={"ca": [*_steps(2), graph, {**graph, "seq": 41, "ca_id": 1, "compile_id": "!1"}]})
    code, out, err = cagtool("diff-graphs", str(run2), "0", "1")
    assert code == 3 and "points outside the record" in err and "root:" not in out


def test_graph_file_with_newer_schema_is_refused(tmp_path):
    from cagtool.record.loader import load_graph_nodes
    from cagtool.errors import UnreadableInput

    path = tmp_path / "ca_0.json"
    path.write_text(json.dumps({"format": "cagtool-ca-graph", "schema_version": 99, "ca_id": 0, "nodes": []}))
    with pytest.raises(UnreadableInput, match="schema_version 99, newer"):
        load_graph_nodes(path)
    path.write_text(json.dumps({"format": "cagtool-ca-graph", "schema_version": 1, "ca_id": 0, "nodes": [{"name": 3, "op": "x", "target": "y"}]}))
    with pytest.raises(UnreadableInput, match="malformed"):
        load_graph_nodes(path)


HOSTILE = '<img src=x onerror=alert(1)> [link](http://x) `code` **b** | cell\n::warning::injected'


def test_markdown_outputs_escape_record_text(tmp_path):
    """A script and an exception text with HTML/Markdown: `compare --format markdown` and the
    GitHub step summary show them as text (no tag, no link, no new cell or line)."""
    from cagtool.report.text.markdown import md_text

    assert md_text("<= 1 and p10 - p90") == "<= 1 and p10 - p90"
    escaped = md_text(HOSTILE)
    assert "<img" not in escaped and "&lt;img" in escaped and "\\[link\\]" in escaped and "\\|" in escaped
    assert "\n" not in escaped
    manifest = _manifest("ca", status="failed", exception={"type": "RuntimeError", "message": HOSTILE, "traceback": ""})
    run = write_run(tmp_path / "r", {"eager": _manifest("eager"), "ca": manifest},
                    meta_extra={"target": {"kind": "script", "name": "<img src=x onerror=alert(1)>.py"}})
    code, out, err = cagtool("compare", str(run), "--format", "markdown")
    assert code == 0, err
    assert "<img" not in out and "&lt;img src=x onerror=alert(1)>.py" in out
    assert not any(line.startswith("::") for line in out.splitlines())
    summary = tmp_path / "summary.md"
    code, out, err = cagtool("gate", str(run), "--max-ca-graphs", "1", "--no-config",
                             env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert code == 1, err
    text = summary.read_text()
    assert "<img" not in text and "&lt;img" in text
    assert not any(line.startswith("::") for line in text.splitlines())
    # the workflow commands on stdout carry it escaped, on their own line
    assert not any(line.startswith("::warning::injected") for line in out.splitlines())


# What a job can put in record text: an ANSI colour (256-colour, which no report style uses), a
# window-title change, a screen clear, an OSC 8 hyperlink, a bell; a non-UTF-8 byte as Python
# carries it (surrogateescape) and a lone surrogate from an exception.
TERMINAL_CONTROL = "\x1b[38;5;201mcoloured\x1b[0m \x1b]0;pwned-title\x07 \x1b[2J \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\ bell\x07"
UNDECODABLE = "caf\udce9 \ud800"


def _hostile_run(tmp_path: Path) -> Path:
    message = f"{TERMINAL_CONTROL} {UNDECODABLE}"
    manifest = _manifest("ca", status="failed", exception={"type": "ValueError", "message": message, "traceback": ""})
    finding = {"kind": "finding", "seq": 50, "t": 1.0, "code": "x", "message": f"finding {message}"}
    return write_run(tmp_path / "r", {"eager": _manifest("eager"), "ca": manifest}, events={"ca": [*_steps(3), finding]},
                     meta_extra={"target_argv": ["train.py", "caf\udce9"]})


def test_terminal_control_and_undecodable_text_never_break_the_output(tmp_path):
    """Every report command on such a record, with a strict UTF-8 stdout (as under an en_US.UTF-8
    locale): its own exit code (never 4), no escape sequence or control character from the record
    on stdout or in a file, the undecodable byte shown as `\\xe9`, and a JUnit file that parses."""
    import xml.dom.minidom

    run = _hostile_run(tmp_path)
    junit, step_summary = tmp_path / "gate.xml", tmp_path / "summary.md"
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(step_summary)}
    env.pop("COLUMNS", None)
    commands = {
        ("summary",): 0, ("compare",): 0, ("compare", "--format", "markdown"): 0, ("compare", "--format", "csv"): 0,
        ("recompiles", "--explain"): 0, ("runs", str(tmp_path)): 0, ("report",): 0,
        ("gate", "--max-ca-graphs", "1", "--no-config", "--junit", str(junit)): 1,
    }
    outputs = []
    for command, expected in commands.items():
        args = [command[0], *([] if command[0] == "runs" else [str(run)]), *command[1:]]
        proc = subprocess.run(cagtool_cmd(*args), capture_output=True, cwd=ROOT, env=env, timeout=300)
        assert proc.returncode == expected, (command, proc.stderr.decode(errors="replace"))
        outputs.append((command, proc.stdout.decode("utf-8")))
    for path in (junit, step_summary, run / "report.html"):
        outputs.append((path.name, path.read_bytes().decode("utf-8")))
    for where, text in outputs:
        assert "\x1b" not in text and "\x07" not in text, where
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in text), where
    summary = dict(outputs)[("summary",)]
    assert "cagtool run train.py caf\\xe9" in summary
    assert "exception: ValueError: coloured " in summary and " link bell caf\\xe9 \\ud800" in summary
    assert "pwned-title" not in summary and "evil.example" not in summary
    xml.dom.minidom.parseString(junit.read_bytes())


def test_colour_stays_on_a_terminal_but_record_escapes_do_not(tmp_path):
    """On a terminal the console keeps its own styles (bold, colours) and drops the record's."""
    import io

    from cagtool.record.loader import load_run as load
    from cagtool.report.text.console import make_console
    from cagtool.report.summary import render_summary

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    render_summary(make_console(file=stream, width=200), load(_hostile_run(tmp_path)))
    out = stream.getvalue()
    assert "\x1b[1m" in out  # the summary's bold mode headings
    for sequence in ("\x1b[38;5;201m", "\x1b]0;", "\x1b[2J", "\x1b]8;", "\x07"):
        assert sequence not in out, sequence
    assert "coloured" in out and "caf\\xe9" in out


def test_record_contradicting_torch_counters_is_refused(tmp_path):
    """events.jsonl deleted while torch counted 2 captures: gate and baseline save refuse (exit 3)."""
    counters = {"compiled_autograd": {"captures": 2}, "graph_break": {}}
    run = write_run(tmp_path / "r", {"ca": _manifest("ca", torch_counters=counters)})
    (run / "ca" / "events.jsonl").unlink()
    code, _, err = cagtool("gate", str(run), "--max-ca-graphs", "2", "--no-config")
    assert code == 3 and "is damaged" in err and "events.jsonl is missing" in err
    code, _, err = cagtool("baseline", "save", str(run), "-o", str(tmp_path / "b.json"))
    assert code == 3 and "is damaged" in err and not (tmp_path / "b.json").exists()
    # events present but short of torch's count: damaged too
    run2 = write_run(tmp_path / "r2", {"ca": _manifest("ca", torch_counters=counters)})
    code, _, err = cagtool("gate", str(run2), "--max-ca-graphs", "2", "--no-config")
    assert code == 3 and "has 0 CA graph events, but torch counted 2 captures" in err


# A field a pull request can forge with a line break: on a line of its own in a CI log it would be
# a workflow command (a fake annotation saying the gate passed). The right-to-left override
# reorders what follows it on the line.
FORGED_LINE = "\n::error title=gate::all checks passed\u202e"


def _forged_fields_run(tmp_path: Path) -> Path:
    """A record whose run.json (target name, arguments, torch version), failed mode's exception,
    compiled frame's name, cache miss's node and verification.json strings each end in FORGED_LINE."""
    forged = lambda text: f"{text}{FORGED_LINE}"  # noqa: E731
    exception = {"type": forged("RuntimeError"), "message": forged("boom"), "traceback": ""}
    manifest = _manifest("ca", status="failed", exception=exception)
    compiled = {"kind": "dynamo_compile", "seq": 20, "t": 0.5, "compile_id": "0/0", "is_ca_graph": False, "step": 0,
                "co_name": forged("inner"), "co_filename": "/job/train.py", "co_firstlineno": 3, "entire_frame_compile_time_s": 0.1}
    artifact = {"kind": "compile_artifact", "seq": 21, "t": 0.5, "compile_id": "0/0", "artifact": "dynamo_start",
                "file": "compiles/0_0/dynamo_start.txt", "step": 0, "lines": 1}
    miss = {"kind": "ca_cache_miss", "seq": 22, "t": 0.6, "ca_id": 0, "compile_id": "!0", "step": 0, "miss_kind": "new_node",
            "message": "", "node": forged("torch::autograd::GraphRoot"), "node_call": 0, "key_size": 39, "previous_key_sizes": []}
    graph = {"kind": "ca_graph", "seq": 23, "t": 0.7, "ca_id": 0, "compile_id": "!0", "step": 0, "node_count": 3, "op_histogram": {},
             "autograd_nodes": [], "aot_ids": [], "hooks": [], "num_sizes": 0, "capture_s": 0.1, "code_file": "graphs/ca_0.py",
             "nodes_file": "graphs/ca_0.json", "compiler": "cagtool:eager"}
    run = write_run(tmp_path / "r", {"eager": _manifest("eager"), "ca": manifest}, events={"ca": [*_steps(3), compiled, artifact, miss, graph]},
                    meta_extra={"target": {"kind": "script", "name": forged("train.py")},
                                "target_argv": [forged("train.py"), forged("--lr")], "versions": {"torch": forged("2.13.0")}})
    (run / "ca" / "compiles" / "0_0").mkdir(parents=True)
    (run / "ca" / "compiles" / "0_0" / "dynamo_start.txt").write_text("Step 1: torchdynamo start tracing inner\n")
    def measured(name: str, recompiles: int) -> dict:
        return {"name": forged(name), "run": forged(f"/runs/{name}"), "status": forged("finished"), "ca_recompiles": [recompiles],
                "dynamo_recompiles": [1], "ca_graphs": [recompiles + 1], "compile_time_s": 3.9, "first_step_s": 14.3,
                "step_time_median_s": 0.007, "steady_steps": 1, "peak_memory_bytes": 2**28, "wall_s": 20.3, "hook_calls": [0],
                "compile_times_s": [3.9]}

    fix = {"fix": forged("ca-dynamic"), "title": forged("sizes start dynamic"), "who": forged("run configuration"), "causes": [1],
           "run_flags": [forged("--dynamic")], "env": {}, "measured": measured("ca-dynamic", 0), "verdict": forged("verified"),
           "reasons": [forged("recompiles 2 -> 1")], "speedup": None, "speedup_low": None, "speedup_high": None,
           "speedup_verdict": forged("n/a"), "numerics_agree": True, "patch": None, "patched_copy": None,
           "torch_says": forged("PGO detected a recompilation"), "same_as": None}
    verification = {"format": "cagtool-verification", "version": 1, "run": forged("r"), "mode": forged("ca"), "repeat": 1,
                    "baseline": measured("baseline", 1), "fixes": [fix], "not_applied": [], "estimated_s": 1.0, "wall_s": 2.0}
    (run / "verification.json").write_text(json.dumps(with_document_seal(verification)))
    return run


def _no_line_of_its_own(where: str, text: str) -> None:
    """No line a log viewer shows (split at every line break Python knows, blanks stripped) starts
    with a workflow command, and no bidirectional control reaches it."""
    for line in text.splitlines():
        assert not line.strip().startswith("::"), (where, line)
    assert "\u202e" not in text, where


def test_a_forged_field_never_prints_a_line_of_its_own(tmp_path):
    """Every forgeable field a report command prints within a line (run.json's target, arguments and
    torch version, an exception's type and message, a compiled frame's name, a cache miss's node,
    verification.json's words) stays within it: the line break and the override shown escaped."""
    run = _forged_fields_run(tmp_path)
    clean = write_run(tmp_path / "clean", {"eager": _manifest("eager"), "ca": _manifest("ca")})
    shown = "\\n::error title=gate::all checks passed\\u202e"
    expected = {
        ("summary",): ["cagtool run train.py" + shown, "exception: RuntimeError" + shown, "torch::autograd::GraphRoot" + shown,
                       "Fixes verified by re-running (mode ca" + shown, "(recompiles 2 -> 1" + shown],
        ("compare",): ["Modes side by side: train.py" + shown, "RuntimeError" + shown],
        ("compare", str(clean)): ["the runs ran different commands: A `train.py" + shown, "torch differs: A 2.13.0" + shown],
        ("compile", "0/0"): ["compiled: inner" + shown + " at /job/train.py:3"],
        ("recompiles",): ["GraphRoot" + shown + " (NodeCall 0)"],
        ("recompiles", "--explain"): [],
    }
    for command, said in expected.items():
        code, out, err = cagtool(command[0], str(run), *command[1:], "--strict")
        assert code == 0, (command, err)
        _no_line_of_its_own(" ".join(command), out + err)
        for text in said:
            assert text in out, (command, text, out)


def test_a_run_directory_name_is_shown_escaped_in_every_hint(tmp_path):
    """The latest run (no RUN given) is whatever directory a job or a pull request planted under
    .cagtool/runs: its name, with a line break, a window-title escape and a right-to-left override,
    is shown escaped where a command names the run (`report: PATH`, the `next:` and `cagtool
    compile` hints), never obeyed."""
    name = "x\n::error::DIRNAME\x1b]0;PWNED\x07\u202eY"
    run = _forged_fields_run(tmp_path)
    work = tmp_path / "work"
    (work / ".cagtool" / "runs").mkdir(parents=True)
    run.rename(work / ".cagtool" / "runs" / name)
    # What follows an unended title escape is part of it (rich drops the BEL from a Text): cut.
    shown = "x\\n::error::DIRNAME"
    for command in (("report",), ("summary",), ("recompiles", "--explain"), ("diff-graphs",)):
        code, out, err = cagtool(*command, cwd=work)
        assert code in (0, 1), (command, err)
        for where, text in (("stdout", out), ("stderr", err)):
            _no_line_of_its_own(f"{' '.join(command)} {where}", text)
            assert "\x1b" not in text and "\x07" not in text and "PWNED" not in text, (command, where, text)
        assert shown in out + err, (command, out + err)


# ------------------------------------------------------------------ headlines

def _ca_events(nodes: list[tuple[str, str]], steps: int = 8) -> list[dict]:
    """Steps plus one CA graph per (miss kind, node) entry, graph i captured at step i."""
    events = _steps(steps)
    for ca_id, (kind, node) in enumerate(nodes):
        seq = 100 + 2 * ca_id
        events.append({"kind": "ca_cache_miss", "seq": seq, "t": 0.0, "ca_id": ca_id, "compile_id": f"!{ca_id}", "step": ca_id,
                       "miss_kind": kind, "message": f"Cache miss due to {kind}", "node": node, "node_call": 1})
        events.append({"kind": "ca_graph", "seq": seq + 1, "t": 0.0, "ca_id": ca_id, "compile_id": f"!{ca_id}", "step": ca_id,
                       "node_count": 5, "op_histogram": {}, "autograd_nodes": [], "aot_ids": [], "hooks": [], "num_sizes": 0,
                       "capture_s": 0.01, "code_file": f"graphs/ca_{ca_id}.py", "nodes_file": f"graphs/ca_{ca_id}.json"})
    return events


def _ca_run(root: Path, nodes: list[tuple[str, str]]) -> Path:
    counters = {"compiled_autograd": {"captures": len(nodes)}, "graph_break": {}}
    return write_run(root, {"eager": _manifest("eager"), "ca": _manifest("ca", torch_counters=counters)},
                     events={"ca": _ca_events(nodes)})


ROOT_MISS = ("new_node", "torch::autograd::GraphRoot")


def test_recompiles_use_torchs_words_and_gate_counts_what_users_expect(tmp_path):
    """An ordinary loop that keeps .grad: !1 at step 1 is AccumulateGrad's .grad None -> defined
    miss, explained and not counted by `--max-recompiles ca:0`; a new node every step, or a size
    change, are counted."""
    ordinary = _ca_run(tmp_path / "ordinary", [ROOT_MISS, ("new_node", "torch::autograd::AccumulateGrad")])
    code, out, _ = cagtool("summary", str(ordinary))
    assert "CA graphs: 2 (1 initial, 1 for a new autograd node)" in out
    assert "CA recompiles: 0 counted (1 in all, as `cagtool recompiles` lists them: not counted, the second graph, AccumulateGrad's .grad None -> defined warm-up (captured once))" in out
    assert "(CA backend eager)" in out and "mode eager: finished in 1.0 s, 8 steps\n" in out  # no backend on eager
    assert "0 forward graphs, 2 CA graphs, 0 graph breaks, 0 recompiles" in out
    # eager (Dynamo off) saves no counters: nothing to qualify its 0 graph breaks with
    assert "Dynamo: 0 forward graphs, 0 backward graphs, 0 graph breaks, 0 recompiles\n" in out
    assert "(torch counted 2 captures)" in out
    code, out, _ = cagtool("gate", str(ordinary), "--max-recompiles", "ca:0", "--no-config", "--format", "json")
    assert code == 0, out
    check = [c for c in json.loads(out)["checks"] if c["check"] == "max-recompiles:ca"][0]
    assert check["outcome"] == "pass" and "AccumulateGrad's .grad None -> defined warm-up (the first backward" in check["notes"][0]

    storm = _ca_run(tmp_path / "storm", [ROOT_MISS, *[("new_node", f"{op}Backward0") for op in ("Sub", "Mul", "Div")]])
    code, out, _ = cagtool("gate", str(storm), "--max-recompiles", "ca:0", "--no-config")
    assert code == 1 and "CA recompiles 3 > 0 allowed" in out
    shapes = _ca_run(tmp_path / "shapes", [ROOT_MISS, ("changed_shapes", None)])
    code, out, _ = cagtool("summary", str(shapes))
    assert "CA graphs: 2 (1 initial, 1 recompile for changed sizes)" in out and "CA recompiles: 1" in out
    code, out, _ = cagtool("gate", str(shapes), "--max-recompiles", "ca:0", "--no-config")
    assert code == 1
    code, out, _ = cagtool("summary", str(write_run(tmp_path / "one", {"eager": _manifest("eager")},
                                                    events={"eager": _steps(8)})))
    assert "1 forward graphs" not in out


def test_speedup_noise_is_the_same_in_compare_and_gate(tmp_path):
    """A ca/aot ratio of one process per mode near 1.0: compare says inconclusive, and a gate with
    that minimum neither fails nor passes it (exit 5, no flapping); a clear shortfall fails."""
    import random

    rng = random.Random(0)

    def noisy(ms: float) -> list[dict]:
        events, t = [], 0.0
        for i in range(1, 41):
            t += ms * rng.uniform(0.7, 1.3) / 1000
            events.append({"kind": "step", "seq": i, "t": t, "step": i - 1, "backward_s": 0.001, "loss": 1.0})
        return events

    run = write_run(tmp_path / "r", {"aot": _manifest("aot"), "ca": _manifest("ca")}, events={"aot": noisy(10.0), "ca": noisy(10.0)})
    code, out, _ = cagtool("compare", str(run), "--format", "json")
    ca_aot = json.loads(out)["speedups"]["ca/aot"]
    assert ca_aot["verdict"] == "inconclusive" and ca_aot["noise_measured"] is False
    code, out, _ = cagtool("gate", str(run), "--min-speedup", "1.0", "--no-config", "--format", "json")
    assert code == 5, out
    speed = [c for c in json.loads(out)["checks"] if c["check"] == "min-speedup"][0]
    assert speed["outcome"] == "inconclusive" and speed["data"]["verdict"] == "inconclusive"
    assert "run-to-run noise not measured" in speed["notes"][0]
    code, out, _ = cagtool("gate", str(run), "--min-speedup", "3.0", "--no-config")
    assert code == 1 and "< 3x required" in out


@pytest.mark.slow
def test_unseeded_script_modes_compare_and_seed_is_recorded(silent_stdin_run):
    """An unseeded script under eager and ca: every mode starts from the same seed, so the
    numerics agree (no DISAGREE from random inputs), and the manifest records the seed."""
    out, code, stderr = silent_stdin_run
    assert code == 0, stderr
    for mode in ("eager", "ca"):
        seed = json.loads((out / mode / "manifest.json").read_text())["options"]["seed"]
        assert seed["seed"] == 0 and "torch" in seed["seeded"] and seed["script_reseeded"] is False
    code, text, _ = cagtool("compare", str(out), "--format", "json")
    numerics = json.loads(text)["numerics"]
    assert numerics["agree"] is True, numerics


def test_first_step_loss_difference_is_inputs_not_a_disagreement(tmp_path):
    """Modes whose first-step (step 0) losses already differ computed on other inputs: 'inputs differ
    (unseeded?)', never DISAGREE; a difference that starts later is a real disagreement."""
    def losses(values: list[float]) -> list[dict]:
        return [{**e, "loss": v} for e, v in zip(_steps(len(values)), values)]

    base = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]
    other_inputs = write_run(tmp_path / "a", {"eager": _manifest("eager"), "ca": _manifest("ca")},
                             events={"eager": losses(base), "ca": losses([1.7, 1.2, 0.6, 0.9, 0.4, 0.45])})
    code, out, _ = cagtool("compare", str(other_inputs))
    assert code == 0 and "inputs differ (unseeded?)" in out and "DISAGREE" not in out
    real = write_run(tmp_path / "b", {"eager": _manifest("eager"), "ca": _manifest("ca")},
                     events={"eager": losses(base), "ca": losses([1.0, 0.9, 0.95, 1.1, 1.3, 1.5])})
    code, out, _ = cagtool("compare", str(real))
    assert "Numerics DISAGREE with eager" in out and "inputs differ" not in out


def test_explain_words_are_honest(tmp_path):
    """explain: a size seen before is not "earlier value not recorded"; a 3-step run is not "has
    not stabilised"; a one-time warm-up gets no "Fix:" that is not a fix."""
    def miss_with_sizes(ca_id: int, step: int, sizes: list[dict]) -> list[dict]:
        events = _ca_events([ROOT_MISS, *[("changed_shapes", None)] * ca_id])[-2:]
        events[0].update(step=step, changed_sizes=sizes, total_changed=len(sizes), node=None, node_call=None)
        events[1].update(step=step)
        return events

    events = [*_steps(3), *_ca_events([ROOT_MISS])[-2:],
              *miss_with_sizes(1, 1, [{"index": 0, "value": 100, "previous": 10}]),
              *miss_with_sizes(2, 2, [{"index": 0, "value": 10}])]
    counters = {"compiled_autograd": {"captures": 3}, "graph_break": {}}
    run = write_run(tmp_path / "shapes", {"ca": _manifest("ca", torch_counters=counters)}, events={"ca": events})
    code, out, err = cagtool("recompiles", str(run), "--explain")
    assert code == 0, err
    assert "not in the record" not in out and "sizes[0]: 10, 100" in out
    assert "has not stabilised" not in out and "too few steps to tell" in out
    ordinary = _ca_run(tmp_path / "ordinary", [ROOT_MISS, ("new_node", "torch::autograd::AccumulateGrad")])
    code, out, _ = cagtool("recompiles", str(ordinary), "--explain")
    assert ".grad switched between None and a tensor" in out and "No fix needed." in out
    assert "!1 is the .grad warm-up (captured once), not counted by gate --max-recompiles" in out
    assert "Fix: Once" not in out and "user source lines:" not in out


def test_a_hook_added_on_accumulategrad_is_not_the_grad_warmup(tmp_path):
    """AccumulateGrad's key also changes when a hook is added: that is a hook change, counted,
    not the one-time .grad warm-up (same rule in summary, gate and recompiles)."""
    events = _ca_events([ROOT_MISS, ("new_node", "torch::autograd::AccumulateGrad")])
    events[-1]["hooks"] = [{"name": "call_hook", "hook_type": "tensor_pre_hook"}]
    counters = {"compiled_autograd": {"captures": 2}, "graph_break": {}}
    run = write_run(tmp_path / "hook", {"ca": _manifest("ca", torch_counters=counters)}, events={"ca": events})
    code, out, _ = cagtool("gate", str(run), "--max-recompiles", "ca:0", "--no-config")
    assert code == 1 and "CA recompiles 1 > 0 allowed" in out
    code, out, _ = cagtool("recompiles", str(run), "--explain")
    assert "warm-up" not in out and "A backward hook was added or removed" in out


def test_keep_isa_checks_leaves_a_truncated_library_and_a_file_there_as_they_are(tmp_path):
    """inductor_machine.keep_isa_checks: of the checks a mode compiled, the job's cache gets the
    whole ones it lacks (beside a source torch wrote there before a compile that never finished); a
    library cut short (its ELF section table past its end: a compile killed while linking) is not
    kept, a check the job's cache has is not written over, and no temporary file is left."""
    import _json

    from cagtool.capture.run.inductor_machine import isa_checks, keep_isa_checks

    library = Path(_json.__file__).read_bytes()  # a real ELF shared library
    code = b'extern "C" void __avx_chk_kernel() {}\n'
    mode, job = tmp_path / "mode", tmp_path / "job"
    for key, data in (("whole", library), ("cut", library[: len(library) // 2]), ("there", library)):
        (mode / key[:2]).mkdir(parents=True)
        (mode / key[:2] / f"c{key}.cpp").write_bytes(code)
        (mode / key[:2] / f"c{key}.so").write_bytes(data)
    (job / "th").mkdir(parents=True)
    (job / "th" / "cthere.cpp").write_bytes(code)
    (job / "th" / "cthere.so").write_bytes(b"\x7fELF torch's own")
    (job / "wh").mkdir()
    (job / "wh" / "cwhole.cpp").write_bytes(code)  # a source torch wrote, its compile never finished
    assert keep_isa_checks(str(mode), str(job)) == 1
    assert (job / "wh" / "cwhole.so").read_bytes() == library and (job / "wh" / "cwhole.cpp").read_bytes() == code
    assert not (job / "cu").exists() or not any((job / "cu").iterdir())
    assert (job / "th" / "cthere.so").read_bytes() == b"\x7fELF torch's own"
    assert sorted(p.name for p in job.rglob("*") if p.is_file()) == ["cthere.cpp", "cthere.so", "cwhole.cpp", "cwhole.so"]
    assert {c.source for c in isa_checks(str(job))} == {"th/cthere.cpp", "wh/cwhole.cpp"}
