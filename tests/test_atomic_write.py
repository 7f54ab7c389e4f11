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


def test_a_confined_write_refuses_a_link_on_the_way_or_at_the_name(tmp_path):
    """write_atomic(root=RUN): the directories between RUN and the file are made as needed, and a
    symbolic link among them or at the name is refused (exit 3), the link's target untouched."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.atomic import make_new_dir, open_new

    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    write_atomic(run / "a" / "b" / "c.json", "{}", root=run)
    assert (run / "a" / "b" / "c.json").read_text() == "{}"
    (run / "verification.json").symlink_to(victim)
    (run / "verify").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UnreadableInput, match="verification.json is a symbolic link"):
        write_atomic(run / "verification.json", "x", root=run)
    for attempt in (lambda: write_atomic(run / "verify" / "x" / "f", "x", root=run),
                    lambda: make_new_dir(run, run / "verify" / "stamp"),
                    lambda: open_new(run, run / "verify" / "out.stdout")):
        with pytest.raises(UnreadableInput, match="verify is a symbolic link"):
            attempt()
    assert victim.read_text() == "precious" and list(elsewhere.iterdir()) == []
    with pytest.raises(UnreadableInput, match="is not under"):
        write_atomic(tmp_path / "outside.json", "x", root=run)
    make_new_dir(run, run / "new")
    with pytest.raises(FileExistsError):
        make_new_dir(run, run / "new")
    with open_new(run, run / "new" / "out") as handle:
        handle.write(b"ok")
    with pytest.raises(UnreadableInput, match="already exists"):
        open_new(run, run / "new" / "out")


def test_a_move_inside_the_run_refuses_whatever_was_planted_at_its_destination_or_on_the_way(tmp_path):
    """move_new: a directory moves to a new name under the run; a link, a directory or a file at the
    destination, a link on the way to it, or a source that is a link is refused (exit 3), and
    neither the planted thing nor what a link points at is touched or moved into."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.atomic import move_new

    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    (run / "single" / "ca").mkdir(parents=True)
    (run / "single" / "ca" / "steps.jsonl").write_text("{}\n")
    (run / "side").mkdir()
    elsewhere.mkdir()
    (run / "side" / "ca.2").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UnreadableInput, match="ca.2 already exists"):
        move_new(run, run / "single" / "ca", run / "side" / "ca.2")
    (run / "side" / "ca.2").unlink()
    (run / "side" / "ca.2").mkdir()
    (run / "side" / "ca.2" / "planted").write_text("x")
    with pytest.raises(UnreadableInput, match="ca.2 already exists"):
        move_new(run, run / "single" / "ca", run / "side" / "ca.2")
    (run / "linked").symlink_to(run / "side", target_is_directory=True)
    with pytest.raises(UnreadableInput, match="linked is a symbolic link"):
        move_new(run, run / "single" / "ca", run / "linked" / "ca.3")
    (run / "other").mkdir()
    (run / "other" / "ca").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UnreadableInput, match="ca is a symbolic link"):
        move_new(run, run / "other" / "ca", run / "side" / "ca.3")
    assert list(elsewhere.iterdir()) == [] and (run / "single" / "ca" / "steps.jsonl").is_file()
    assert (run / "side" / "ca.2" / "planted").read_text() == "x"
    move_new(run, run / "single" / "ca", run / "side" / "ca.3")
    assert (run / "side" / "ca.3" / "steps.jsonl").read_text() == "{}\n" and not (run / "single" / "ca").exists()
