"""record/atomic.py: the one way cagtool replaces a file, and the lock around read-modify-write."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cagtool.record.atomic import locked, write_atomic


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text("old")
    write_atomic(path, "new")
    write_atomic(tmp_path / "bytes.bin", b"\x00\x01")
    assert path.read_text() == "new"
    assert (tmp_path / "bytes.bin").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["baseline.json", "bytes.bin"]


def test_a_failed_replace_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    target = tmp_path / "manifest.json"
    target.mkdir()  # os.replace cannot put a file over a directory
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        write_atomic(target, "data")
    assert (target / "inside").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


_TRY_LOCK = """
import fcntl, sys
with open(sys.argv[1], "a") as handle:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(1)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_locked_excludes_another_process_until_the_block_ends(tmp_path):
    path = tmp_path / "ci" / "cagtool-baseline.json"  # the directory does not exist yet

    def other_process_gets_it() -> bool:
        return subprocess.run([sys.executable, "-c", _TRY_LOCK, str(path) + ".lock"], timeout=60).returncode == 0

    with locked(path):
        assert not other_process_gets_it()
    assert other_process_gets_it()
