"""Node runs handed over for `cagtool merge` (shared storage, another host's CI artifact) whose
files cost their maker nothing and the merging machine everything: a sparse file of gigabytes, and
a file its writer keeps extending while the merge copies it. The merge copies each file as it was
when opened, its holes kept as holes: the output takes no more disk than the input, and the merge
ends. Real node runs of a real two-node torchrun job (test_multi_node.py's, recorded once)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import cagtool_in_process, recorded_once
from test_multi_node import _record_two_nodes

pytestmark = pytest.mark.slow

GIB = 1 << 30


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> tuple[Path, Path]:
    base, _ = recorded_once(tmp_path_factory, "two-nodes", _record_two_nodes)  # the same recording as test_multi_node's
    return base / "node0", base / "node1"


def _rank_folder(node: Path) -> Path:
    return next((node / "ca" / "procs").glob("rank*"))


def _merge(node0: Path, node1: Path, output: Path):
    return cagtool_in_process("merge", node0, node1, "-o", output, cwd=output.parent, env={"CI": "true"})


def test_merge_keeps_a_sparse_files_holes_and_writes_no_gigabytes_of_zeros(two_nodes, tmp_path):
    node0, node1 = two_nodes
    node = Path(shutil.copytree(node1, tmp_path / "node1"))
    planted = _rank_folder(node) / "blob.bin"
    with open(planted, "wb") as handle:
        handle.truncate(GIB)  # a gigabyte that takes no disk
        handle.seek(GIB // 2)
        handle.write(b"the only data")
    proc = _merge(node0, node, tmp_path / "job")
    assert proc.returncode == 0, proc.stderr
    copy = tmp_path / "job" / "ca" / "procs" / planted.parent.name / planted.name
    assert copy.stat().st_size == GIB and copy.read_bytes()[GIB // 2 : GIB // 2 + 13] == b"the only data"
    assert copy.stat().st_blocks * 512 < 16 << 20, f"the copy took {copy.stat().st_blocks * 512:,} bytes of disk"


def test_merge_copies_a_file_as_it_was_when_opened_though_its_writer_extends_it(two_nodes, tmp_path, monkeypatch):
    import cagtool.record.merge as merge

    node0, node1 = two_nodes
    node = Path(shutil.copytree(node1, tmp_path / "node1"))
    planted = _rank_folder(node) / "growing.log"
    planted.write_bytes(b"line\n" * 10)
    opened, looked, armed = merge.open_record_file, os.fstat, set()

    def open_record_file(path, *args, **kwargs):
        fd = opened(path, *args, **kwargs)
        if Path(path).name == planted.name:
            armed.add(fd)
        return fd

    def fstat(fd, *args, **kwargs):
        found = looked(fd, *args, **kwargs)
        if fd in armed:  # the merge has the file open and has looked at it: its writer extends it (sparsely: free)
            armed.discard(fd)
            os.truncate(planted, 256 << 20)
        return found

    monkeypatch.setattr(merge, "open_record_file", open_record_file)
    monkeypatch.setattr(merge.os, "fstat", fstat)
    proc = _merge(node0, node, tmp_path / "job")
    assert proc.returncode == 0, proc.stderr
    copy = tmp_path / "job" / "ca" / "procs" / planted.parent.name / planted.name
    assert copy.read_bytes() == b"line\n" * 10
