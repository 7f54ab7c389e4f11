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
