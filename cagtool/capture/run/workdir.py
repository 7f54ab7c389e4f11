"""What the job wrote in its working directory between one mode and the next.

Every mode runs the script in the same working directory, as `python` would. A job that keeps
state there (a checkpoint it resumes from, a cache it fills: pytorch/examples' DDP tutorial
writes snapshot.pt and resumes from it) starts the second mode from the first one's files, and
the modes then compute different things (fewer steps, other weights). The directory is listed
(names, sizes, modification times; never contents) before the first mode and before each later
one; what is new or changed was written by the modes before, and the comparison says so.

With `cagtool run --isolate-workdir`, what a mode created there (a file the first listing did not
hold) is moved into the run directory, under workdir/<mode>/, before the next mode and after the
last: every mode starts from the directory as the first one found it, and the job's directory is
left as it was. A file that was there before and that a mode changed cannot be put back (nothing
kept its old content): it is listed as written before the next mode, as without the flag. Only
regular files this listing saw are moved (never a symbolic link, never past the listing's bounds);
directories a mode created are left, empty.

The listing is bounded (MAX_ENTRIES entries, MAX_DEPTH levels) and skips hidden directories
(.git, .cagtool, virtualenvs), __pycache__ and the run directory itself: a dataset tree is not
walked whole. Files this process's standard streams go to (`cagtool run train.py > log.txt`) are
left out too: every mode writes there through cagtool, not the job from its own state.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

MAX_ENTRIES = 20_000
MAX_DEPTH = 3
MAX_NAMED = 20  # paths kept per mode in run.json; `count` says how many in all
SET_ASIDE_DIR = "workdir"  # <run>/workdir/<mode>/: what --isolate-workdir moved out of the job's directory

Listing = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns)


def list_workdir(cwd: str, skip: Path) -> Listing:
    """The files under `cwd` (relative paths), their sizes and modification times; `skip` (the
    run directory) and hidden or cache directories are left out."""
    found: Listing = {}
    skip_real = os.path.realpath(skip)
    streams = _stream_files()
    stack: list[tuple[str, int]] = [(cwd, 0)]
    while stack and len(found) < MAX_ENTRIES:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if len(found) >= MAX_ENTRIES:
                break
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth + 1 < MAX_DEPTH and not entry.name.startswith(".") and entry.name != "__pycache__" \
                            and os.path.realpath(entry.path) != skip_real:
                        stack.append((entry.path, depth + 1))
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) not in streams:
                        found[os.path.relpath(entry.path, cwd)] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue
    return found


def _stream_files() -> set[tuple[int, int]]:
    """(device, inode) of the regular files this process's stdin, stdout and stderr are."""
    found = set()
    for fd in (0, 1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.add((st.st_dev, st.st_ino))
    return found


def written_since(before: Listing, now: Listing) -> list[str]:
    """The files new in `now` or changed since `before`, sorted."""
    return sorted(path for path, stat in now.items() if before.get(path) != stat)


def written_record(paths: list[str]) -> dict[str, object]:
    """What run.json keeps of them: the first MAX_NAMED paths and how many in all."""
    return {"paths": paths[:MAX_NAMED], "count": len(paths)}


def set_aside(cwd: str, first: Listing, now: Listing, dest: Path) -> tuple[list[str], list[str]]:
    """Move the files of `now` that `first` did not hold from `cwd` into `dest` (the same relative
    paths): (moved, not moved), each sorted. A path that is no longer a regular file, or that has
    another name too, is not moved."""
    moved: list[str] = []
    left: list[str] = []
    for path in sorted(set(now) - set(first)):
        source = os.path.join(cwd, path)
        try:
            st = os.lstat(source)
            # a link, or a file with another name too (a hard link): not the mode's own file to carry
            # into the record, whose readers refuse both (record/merge.py)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                left.append(path)
                continue
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
            moved.append(path)
        except OSError:
            left.append(path)
    return moved, left
