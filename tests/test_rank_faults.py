"""Faults across the ranks of a real 2-rank DDP job over gloo (mp.spawn and torchrun, CPU,
`--backend eager`): Ctrl-C, a full disk, a worker that dies and is restarted. Whatever happens,
each rank's record says how it ended, and the cross-rank verdicts only compare what the ranks
both reached."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd, cagtool_in_process, can_mount_tmpfs

from cagtool.record.loader import load_run
from cagtool.record.schema import StepEvent

SCRIPTS = Path(__file__).parent / "scripts"
ENV = {**os.environ, "CI": "true"}

pytestmark = pytest.mark.slow


def _stop_when_ready(cmd: list[str], signum: int, ready_lines: int = 2) -> subprocess.CompletedProcess:
    """Start `cmd` in its own process group, wait until the ranks print READY, then send `signum`
    to the whole group (a terminal's Ctrl-C)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, start_new_session=True)
    try:
        ready = set()
        while len(ready) < ready_lines:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("READY"):
                ready.add(line.strip())
        assert len(ready) == ready_lines, proc.communicate(timeout=120)[1][-3000:]
        os.killpg(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def test_ctrl_c_to_mp_spawn_ranks_is_interrupted_not_finished(tmp_path):
    """mp.spawn's worker wrapper swallows the KeyboardInterrupt of a Ctrl-C and the rank exits 0:
    each rank's record still says interrupted by SIGINT at its line, how many steps it ran, the
    run exits 130, and the summary claims no agreement of final norms no rank reached."""
    out = tmp_path / "r"
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(out), str(SCRIPTS / "ddp_waits_at_step.py"), "--steps", "10")
    proc = _stop_when_ready(cmd, signal.SIGINT)
    assert proc.returncode == 130, proc.stderr[-3000:]
    run = load_run(out)
    assert run.meta.status == "interrupted"
    ca = run.mode("ca")
    assert sorted(ca.ranks()) == [0, 1]
    for rank, record in ca.ranks().items():
        manifest = record.manifest
        assert manifest.status == "interrupted", (rank, manifest.status, manifest.exception)
        assert manifest.exception.type == "KeyboardInterrupt"
        assert "SIGINT" in manifest.exception.message and f"{SCRIPTS / 'ddp_waits_at_step.py'}:" in manifest.exception.message
        assert len(record.of(StepEvent)) == 3
    summary = cagtool_in_process("summary", str(out), env={"CI": "true"})
    text = " ".join(summary.stdout.split())
    assert "rank 0 did not finish (status interrupted) after 3 steps" in text, text
    assert "same final norms" not in text and "final norms not compared" in text


def test_ctrl_c_to_torchrun_workers_is_interrupted_not_failed(tmp_path):
    """Ctrl-C to a torchrun job: each worker's KeyboardInterrupt goes uncaught, and torchrun's
    launcher turns its own SIGINT into a SignalException and exits 1. The workers read as
    interrupted by SIGINT, exit 130, at their line of the script (they read as failed, exit 1), the
    launcher's record as interrupted, and the run exits 130 (it exited 1, recorded as finished)."""
    out = tmp_path / "r"
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(out), "-m", "torch.distributed.run", "--",
                      "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "ddp_waits_at_step.py"), "--launcher", "env", "--steps", "10")
    proc = _stop_when_ready(cmd, signal.SIGINT)
    assert proc.returncode == 130, proc.stderr[-3000:]
    ca = load_run(out).mode("ca")
    assert sorted(ca.ranks()) == [0, 1]
    for rank, record in ca.ranks().items():
        manifest = record.manifest
        assert (manifest.status, manifest.exit_code, manifest.exception.type) == ("interrupted", 130, "KeyboardInterrupt"), (rank, manifest.exception)
        assert f"{SCRIPTS / 'ddp_waits_at_step.py'}:" in manifest.exception.message
        assert len(record.of(StepEvent)) == 3
    assert ca.manifest.status == "interrupted" and ca.manifest.exception.type == "SignalException"
    assert load_run(out).meta.status == "interrupted"

def test_torchrun_restarted_workers_are_followed_by_rank_and_attempt(tmp_path):
    """torchrun --max-restarts 1 with rank 1 dying once (os._exit(1)): the restarted workers get
    records of their own, named by rank and attempt (rank1 / rank1.attempt1), the first attempt's
    rank 1 reads as failed with its exit code (not as SIGKILLed), the ranks' figures are the last
    attempt's, and a finding says which attempt did what. The run ends with the launcher's code."""
    out = tmp_path / "r"
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(out), "-m", "torch.distributed.run", "--",
                      "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--monitor-interval", "0.1",
                      str(SCRIPTS / "ddp_dies_once.py"), "--steps", "4", "--die-after", "2")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ca = load_run(out).mode("ca")
    assert sorted(ca.processes) == ["rank0", "rank0.attempt1", "rank1", "rank1.attempt1"]
    died = ca.processes["rank1"].manifest
    assert (died.status, died.exit_code, died.process["attempt"]) == ("failed", 1, 0), (died.status, died.exception)
    assert len(ca.processes["rank1"].of(StepEvent)) == 2  # its steps before os._exit, none held back and lost
    for rank, record in ca.ranks().items():
        assert record.attempt == 1 and record.process_key == f"rank{rank}.attempt1"
        assert (record.manifest.status, record.manifest.exit_code) == ("finished", 0)
        assert len(record.of(StepEvent)) == 4
    summary = cagtool_in_process("summary", str(out), env={"CI": "true"})
    text = " ".join(summary.stdout.split())
    assert "rank 1 was started 2 times by its launcher: attempt 0 (rank1) failed, exit 1 after 2 steps; attempt 1 (rank1.attempt1) finished after 4 steps" in text, text


def test_full_disk_during_a_two_rank_run_one_line_per_process_and_true_ends(tmp_path):
    """A 2-rank job recording its TORCH_TRACE onto a small filesystem that fills up: the job runs
    to its end; torch's trace handler in each rank, left alone, prints a logging traceback per record
    (~3,000 lines of stderr); each process says once that its trace or record stopped, and
    each rank reads as finished, exit 0, with its recording stop noted, compared with the other
    only up to what it recorded."""
    mount = tmp_path / "small"
    if not can_mount_tmpfs(mount):
        pytest.skip("needs root to mount a small tmpfs (a real full disk)")
    try:
        subprocess.run(["mount", "-o", "remount,size=250k", str(mount)], check=True)
        cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--torch-trace", "-o", str(mount / "r"),
                          str(SCRIPTS / "ddp_waits_at_step.py"), "--steps", "30", "--wait-at", "99")
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr[-3000:]
        # The processes' own one-line notices; the summary after them names the stops again, as
        # findings, as many as the point where the disk filled makes (a graph the rank never wrote).
        stops = [line for line in proc.stderr.splitlines() if line.startswith("cagtool: ") and ("output stopped" in line or "recording stopped" in line)]
        assert 1 <= len(stops) <= 2 * 3, proc.stderr  # at most one per kind and process (main, rank 0, rank 1)
        assert len(proc.stderr.splitlines()) < 60
        ca = load_run(mount / "r").mode("ca")
        assert sorted(ca.ranks()) == [0, 1]
        for record in ca.ranks().values():
            assert (record.manifest.status, record.manifest.exit_code) == ("finished", 0), record.manifest.exception
        stopped = [r for r in ca.ranks().values() if r.manifest.recording_stopped or r.manifest.trace_stopped]
        assert stopped, "the disk did not fill"
    finally:
        subprocess.run(["umount", str(mount)], check=False)


ENDS_ON_A_FULL_DISK = """
import os, sys
from pathlib import Path
from cagtool.record.writer import RecordWriter
from cagtool.record.manifest import ModeManifest
from cagtool.capture.processes.identity import process_info
record = Path(sys.argv[1])
manifest = ModeManifest(mode="ca", argv=[], target={}, cwd="/", versions={}, backend="eager", dynamic=False, started_at="",
                        process=process_info("child", "rank1", rank=1))
writer = RecordWriter(record, manifest)
try:  # something else fills the disk, the reserve included once the writer gives it up
    with open(record.parent / "filler", "ab", buffering=0) as filler:
        while True:
            filler.write(b"\\0" * 4096)
except OSError:
    pass
manifest.status, manifest.exit_code = "finished", 0
manifest.options["big"] = "x" * 200000  # the closing manifest no longer fits where the first one was
writer.write_manifest()
writer.close()
"""


def test_a_rank_that_ended_on_a_full_disk_does_not_read_as_killed(tmp_path):
    """A rank that ends normally while its disk has no room left for its closing manifest (the
    reserve given up, the space taken by something else) leaves an empty file named after how it
    ended: readers show it finished with its exit code, not "killed (SIGKILL, OOM killer)"."""
    from cagtool.record.liveness import read_dead_writer_as_killed
    from cagtool.record.manifest import mode_manifest_from_dict

    mount = tmp_path / "small"
    if not can_mount_tmpfs(mount):
        pytest.skip("needs root to mount a small tmpfs (a real full disk)")
    try:
        record = mount / "rank1"
        proc = subprocess.run([sys.executable, "-c", ENDS_ON_A_FULL_DISK, str(record)], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "could not write" in proc.stderr and "how it ended is in the name" in proc.stderr
        manifest = mode_manifest_from_dict(json.loads((record / "manifest.json").read_text()))
        assert manifest.status == "running"  # the manifest itself could not say it
        read_dead_writer_as_killed(manifest, record)
        assert (manifest.status, manifest.exit_code) == ("finished", 0)
        assert manifest.options["closed_by"] == "marker"
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_rank_whose_record_was_never_closed_on_a_full_disk_is_refused_by_gate_and_baseline(tmp_path):
    """A real 2-rank job whose gate passes; then rank 1's record is what a rank leaves on a full
    disk (a real writer on a real full tmpfs: no steps, no graphs, its closing manifest unwritten,
    only the end marker). Read as finished, it made the gate pass every check ("ranks agree") and
    `baseline save` exit 0: both refuse it now (exit 3, naming the record), and the summary says
    it is damaged."""
    import shutil

    mount = tmp_path / "small"
    if not can_mount_tmpfs(mount):
        pytest.skip("needs root to mount a small tmpfs (a real full disk)")
    run = tmp_path / "r"
    try:
        proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(run),
                                          str(SCRIPTS / "ddp_waits_at_step.py"), "--steps", "3", "--wait-at", "99"),
                              capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        gate = ("gate", str(run), "--max-recompiles", "ca:5", "--no-config")
        assert cagtool_in_process(*gate, env={"CI": "true"}).returncode == 0
        proc = subprocess.run([sys.executable, "-c", ENDS_ON_A_FULL_DISK, str(mount / "rank1")], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
        assert proc.returncode == 0 and "how it ended is in the name" in proc.stderr, proc.stderr
        rank1 = run / "ca" / "procs" / "rank1"
        shutil.rmtree(rank1)
        shutil.copytree(mount / "rank1", rank1)
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    assert load_run(run).mode("ca").ranks()[1].manifest.options["closed_by"] == "marker"
    refused = cagtool_in_process(*gate, env={"CI": "true"})
    assert refused.returncode == 3 and "is damaged, not gating it" in refused.stderr and f"{rank1}/manifest.json was never closed" in refused.stderr
    saved = cagtool_in_process("baseline", "save", str(run), "-o", str(tmp_path / "b.json"), env={"CI": "true"})
    assert saved.returncode == 3 and "not saving a baseline" in saved.stderr and not (tmp_path / "b.json").exists()
    assert "damaged:" in cagtool_in_process("summary", str(run), env={"CI": "true"}).stdout


def test_a_run_on_fewer_ranks_than_its_baseline_fails_the_gate(tmp_path):
    """A 2-rank job's baseline (it holds how many ranks trained), then the same job launched on one
    rank: every check of the one rank passes against rank 0's figures, and the run's own rank checks
    pass (1 of 1), so the gate passed on a job that lost a rank. `ranks-as-baseline` fails it; the
    same 2-rank job again passes it; and --accumulate refuses to pool the two."""
    def record(name: str, world_size: int) -> Path:
        run = tmp_path / name
        proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(run),
                                          str(SCRIPTS / "ddp_waits_at_step.py"), "--steps", "3", "--wait-at", "99",
                                          "--world-size", str(world_size)),
                              capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return run

    baseline = tmp_path / "b.json"
    saved = cagtool_in_process("baseline", "save", str(record("two", 2)), "-o", str(baseline), env={"CI": "true"})
    assert saved.returncode == 0, saved.stderr
    assert json.loads(baseline.read_text())["modes"]["ca"]["ranks"] == 2
    one = record("one", 1)
    gate = cagtool_in_process("gate", str(one), "--baseline", str(baseline), "--no-config", "--format", "json", env={"CI": "true"})
    assert gate.returncode == 1, gate.stdout[-3000:]
    checks = {(c["check"], c["mode"]): c for c in json.loads(gate.stdout)["checks"]}
    held = checks[("ranks-as-baseline", "ca")]
    assert held["outcome"] == "fail" and "this run trained on 1 rank, its baseline on 2 ranks" in held["message"], held
    assert checks[("ranks-present", "ca")]["outcome"] == "pass"  # its own world size (1) was all there
    again = cagtool_in_process("gate", str(record("again", 2)), "--baseline", str(baseline), "--no-config", "--format", "json",
                               env={"CI": "true"})
    assert {c["outcome"] for c in json.loads(again.stdout)["checks"] if c["check"] == "ranks-as-baseline"} == {"pass"}, again.stdout[-2000:]
    pooled = cagtool_in_process("baseline", "save", str(one), "-o", str(baseline), "--accumulate", env={"CI": "true"})
    assert pooled.returncode == 2 and "trained on 2 ranks, this run's on 1 rank" in pooled.stderr, pooled.stderr
