"""The multi-process record layout as the loader reads it: <mode>/procs/<key>/ records, ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cagtool.errors import UnreadableInput
from cagtool.record.loader import load_run
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict


def _manifest(key: str, rank: int | None, role: str) -> dict:
    manifest = ModeManifest(mode="ca", argv=["train.py"], target={}, cwd="/", versions={}, backend="eager",
                            dynamic=False, started_at="2026-01-01T00:00:00Z", status="finished",
                            process={"key": key, "pid": 1, "ppid": 0, "rank": rank, "local_rank": rank,
                                     "world_size": 2 if rank is not None else None, "role": role, "argv": []})
    return to_dict(manifest)


def _write_run(root: Path, procs: dict[str, int | None]) -> Path:
    meta = RunMeta(run_id="t", created_at="2026-01-01T00:00:00Z", cagtool_argv=[], target={}, target_argv=[],
                   cwd="/", modes=["ca"], versions={}, machine={}, status="finished", exit_code=0)
    (root / "ca").mkdir(parents=True)
    (root / "run.json").write_text(json.dumps(to_dict(meta)))
    (root / "ca" / "manifest.json").write_text(json.dumps(_manifest("main", None, "main")))
    (root / "ca" / "events.jsonl").write_text("")
    for key, rank in procs.items():
        (root / "ca" / "procs" / key).mkdir(parents=True)
        (root / "ca" / "procs" / key / "manifest.json").write_text(json.dumps(_manifest(key, rank, "child")))
        (root / "ca" / "procs" / key / "events.jsonl").write_text("")
    return root


def test_processes_and_ranks(tmp_path):
    run = load_run(_write_run(tmp_path / "run", {"rank1": 1, "rank0": 0, "pid77": None}))
    ca = run.mode("ca")
    assert list(ca.processes) == ["rank0", "rank1", "pid77"]
    assert ca.rank is None and ca.process_key == "main"
    assert {r: rec.process_key for r, rec in ca.ranks().items()} == {0: "rank0", 1: "rank1"}
    assert run.mode("ca", rank=1).path == tmp_path / "run" / "ca" / "procs" / "rank1"
    assert run.mode(rank=0).rank == 0
    with pytest.raises(UnreadableInput, match="no rank 5"):
        run.mode("ca", rank=5)


def test_single_process_record_has_no_ranks(tmp_path):
    run = load_run(_write_run(tmp_path / "run", {}))
    assert run.mode("ca").processes == {} and run.mode("ca").ranks() == {}


def test_process_dir_without_manifest_is_skipped_unless_strict(tmp_path):
    root = _write_run(tmp_path / "run", {"rank0": 0})
    (root / "ca" / "procs" / "pid9").mkdir()
    assert list(load_run(root).mode("ca").processes) == ["rank0"]
    with pytest.raises(UnreadableInput, match="pid9"):
        load_run(root, strict=True)


def test_followed_process_that_vanished_reads_as_killed_and_is_a_finding(tmp_path):
    """A rank-less worker SIGKILLed (the OOM killer) while the job went on never closed its record:
    it reads as killed, with a finding that names it, never as "running". A worker that is still
    alive keeps "running" (a run read while it is going)."""
    import os
    import signal
    import subprocess
    import sys

    from cagtool.capture.processes.identity import ROLE_CHILD, process_info
    from cagtool.report.ranks.analysis import PROCESS_FAILED, analyze_ranks

    root = _write_run(tmp_path / "run", {"pid1": None, "pid2": None})
    workers = {}
    for key in ("pid1", "pid2"):
        # the process_info a real child writes, with a real process's identity in it
        worker = subprocess.Popen([sys.executable, "-c", "import os, sys; print(os.getpid(), flush=True); sys.stdin.read()"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        pid = int(worker.stdout.readline())
        info = process_info(ROLE_CHILD, key)
        assert {"hostname", "start_ticks"} <= set(info)
        info["pid"] = pid
        with open(f"/proc/{pid}/stat") as handle:
            info["start_ticks"] = int(handle.read().rsplit(")", 1)[1].split()[19])
        path = root / "ca" / "procs" / key / "manifest.json"
        data = json.loads(path.read_text())
        data.update(status="running", process=info)
        path.write_text(json.dumps(data))
        workers[key] = worker
    os.kill(workers["pid1"].pid, signal.SIGKILL)
    workers["pid1"].wait()
    try:
        ca = load_run(root).mode("ca")
        assert ca.processes["pid1"].manifest.status == "killed"
        assert "vanished" in ca.processes["pid1"].manifest.exception.message
        assert ca.processes["pid2"].manifest.status == "running"
        failed = [f for f in analyze_ranks(ca).findings if f.code == PROCESS_FAILED]
        assert [f.data["process"] for f in failed] == ["pid1", "pid2"]
        assert "status killed" in failed[0].message and "status running" in failed[1].message
    finally:
        workers["pid2"].kill()
        workers["pid2"].wait()
