"""One run out of the runs of one multi-node job: each host records its own node with
`cagtool run -o DIR torchrun --nnodes N --node-rank K ...`, and `cagtool merge` puts every
node's ranks into one run directory that every report reads as a single job.

Why one directory per node, merged after, rather than every host writing into one shared
directory while the job runs: each host's cagtool owns its run's `run.json` and each mode's
launcher record (`<mode>/manifest.json`), written as the modes start and end; two writers of those
files would race. The ranks' own records are named by their global rank (`procs/rank<N>/`, torchrun
sets RANK), so across nodes they never collide and merge by copying.

The merged run is node 0's run (the node holding rank 0) with, in each mode, every other node's
rank records added under `procs/`, and that node's launcher record kept as `procs/node<K>/` (so its
status, exit code and any failure count like a process's). `run.json` keeps node 0's metadata,
with the worst status and exit code of all nodes, per mode too, and `options.merged_from` lists
each node's run, host and status. Nothing of the inputs is changed.

A node's run may come from shared storage or another host (a CI artifact someone else made), and
nothing read from it may come from outside it, nor anything written land outside the output:
before anything is read, each node's run folder (the whole run, whatever part of it was named) is
walked, and a symbolic link anywhere in it is refused (UnreadableInput, exit 3: cagtool writes no
links, and a link judged where it lies in the input can lead elsewhere from where the copy lies),
as is a file with another name elsewhere (a hard link: it may be any file of the machine) and a
file that is not a regular file (a FIFO would block the copy, a device would be read). The copy
walks each node run by file descriptor, never following a link, so one planted while the merge
runs (a folder swapped for a link to another) is refused too, never read through. Every file is
created anew in the staging directory (O_EXCL | O_NOFOLLOW: nothing is written through a name
that exists), the output may not lie in an input, and a failed merge leaves no staging directory
behind.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cagtool.errors import CannotWrite, UnreadableInput, UsageError
from cagtool.record.atomic import write_atomic
from cagtool.record.loader import RunRecord, load_run, resolve_run_path
from cagtool.record.regular_files import open_record_file
from cagtool.record.manifest import document_text, to_dict
from cagtool.record.schema import PROCS_DIR, RUN_META_FILE

# Files of a run that describe the run as a whole and are rebuilt, not carried over.
_DERIVED_FILES = ("gate.json", "report.html")


@dataclass(frozen=True)
class MergedRun:
    path: Path
    nodes: list[dict]  # per input: path, hostname, status, exit_code, ranks
    ranks: dict[str, list[int]]  # mode -> the ranks now in the merged run


def _ranks_of(run: RunRecord) -> set[int]:
    """The distributed ranks the node's records hold: a training worker without a rank
    (ModeRecord.worker, numbered on each node from 0) is none."""
    return {rank for record in run.modes.values() for rank, rec in record.ranks().items() if rec.worker is None}


def _worse(a: int | None, b: int | None) -> int | None:
    return b if a in (None, 0) else a


# torchrun's node rank, the one argument the nodes of one job are launched with differently (it may
# also come from the environment: NODE_RANK).
_NODE_RANK = ("--node-rank", "--node_rank")


def _job_argv(argv: Any) -> list[str]:
    """The target's arguments less the node rank (`--node-rank K`, `--node_rank=K`)."""
    words = [str(word) for word in argv] if isinstance(argv, (list, tuple)) else []
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in _NODE_RANK:
            skip = True
        elif not word.startswith(tuple(f"{flag}=" for flag in _NODE_RANK)):
            kept.append(word)
    return kept


def _shown(argv: list[str]) -> str:
    text = " ".join(argv)
    return repr(text if len(text) <= 200 else text[:197] + "...")


def merge_runs(inputs: list[str | Path], output: Path) -> MergedRun:
    """Merge the runs of one job's nodes into `output` (a new directory). UsageError (exit 2) when
    the inputs are not the nodes of one job: fewer than two, another target, other arguments (the
    node rank apart) or modes, a rank
    recorded twice, or `output` already exists; UnreadableInput (exit 3) for an unreadable run."""
    if len(inputs) < 2:
        raise UsageError("give the runs of at least two nodes to merge")
    folders = [resolve_run_path(path) for path in inputs]  # the run a mode folder or a file belongs to: all of it is copied
    for folder in folders:
        check_node_links(folder)
    runs = [load_run(folder) for folder in folders]
    paths = [run.path.resolve() for run in runs]
    if len(set(paths)) != len(paths):
        raise UsageError("a run is given twice")
    output = Path(output)
    if os.path.lexists(output):
        raise UsageError(f"{output} already exists: merge into a new directory")
    landing = Path(os.path.realpath(output.parent)) / output.name
    for path in paths:
        if landing == path or path in landing.parents:
            raise UsageError(f"{output} lies in the node run {path}: merge into a directory outside every input")
    first = runs[0]
    for run in runs[1:]:
        # The target's arguments differ between nodes (--node-rank K): the target itself must not.
        if run.meta.target.get("name") != first.meta.target.get("name"):
            raise UsageError(f"{run.path} ran {run.meta.target.get('name')}, {first.path} ran {first.meta.target.get('name')}: not the nodes of one job")
        mine, theirs = _job_argv(run.meta.target_argv), _job_argv(first.meta.target_argv)
        if mine != theirs:
            raise UsageError(f"{run.path} ran {_shown(mine)}, {first.path} {_shown(theirs)} (the node rank apart): not the nodes of one job")
        if list(run.meta.modes) != list(first.meta.modes):
            raise UsageError(f"{run.path} recorded modes {', '.join(run.meta.modes)}, {first.path} {', '.join(first.meta.modes)}: not the nodes of one job")
    sizes = {size for run in runs for size in _world_sizes(run)}
    if len(sizes) > 1:
        raise UsageError(f"the node runs say world sizes {', '.join(str(n) for n in sorted(sizes))}: not the nodes of one job")
    for run in runs:
        # A node that finished holds its ranks' records; one that failed may have started none.
        if not _ranks_of(run) and run.meta.status == "finished":
            raise UsageError(f"{run.path} finished without a rank's record (no process with a rank): not a node of a multi-node job")
        wrong = [rank for rank in _ranks_of(run) if rank < 0 or (sizes and rank >= max(sizes))]
        if wrong:
            raise UsageError(f"{run.path} holds rank {wrong[0]}, not a rank of a job of world size {max(sizes) if sizes else 'unknown'}")
    seen: dict[int, Path] = {}
    for run in runs:
        for rank in sorted(_ranks_of(run)):
            if rank in seen:
                raise UsageError(f"rank {rank} was recorded by both {seen[rank]} and {run.path}: not two nodes of one job")
            seen[rank] = run.path
    # Node 0 first: the node holding the lowest rank provides the run's metadata and launcher.
    order = sorted(range(len(runs)), key=lambda i: min(_ranks_of(runs[i]), default=1 << 30))
    runs = [runs[i] for i in order]

    _clear_stale_staging(output)
    staging = output.with_name(f"{_staging_prefix(output)}{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.parent.mkdir(parents=True, exist_ok=True)
        meta, nodes = _build(runs, staging)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, OSError):
            where = exc.filename or staging
            if str(where).startswith(str(staging)) or exc.errno in _WRITE_ERRORS:
                raise CannotWrite(f"cannot write the merged run {output}: {exc.strerror or exc} ({where})") from None
            raise UnreadableInput(f"cannot read {where}: {exc.strerror or exc}") from None
        raise
    try:
        os.rename(staging, output)  # the merged run appears whole or not at all
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise CannotWrite(f"cannot write the merged run {output}: {exc.strerror or exc}") from None
    merged = load_run(output)
    return MergedRun(output, nodes, {name: sorted(record.ranks()) for name, record in merged.modes.items()})


def _staging_prefix(output: Path) -> str:
    """The name of a merge's staging folder beside `output`, less its process id: the host's name
    is in it, for a folder on storage that several hosts share."""
    host = "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname()) or "host"
    return f".{output.name}.merging-{host}-"


def _clear_stale_staging(output: Path) -> None:
    """Remove the staging folders an earlier merge into `output` on this host left when it was
    killed (SIGKILL, a lost session: no chance to clean up), where its process is gone. Only
    folders (a link of that name is left, and never followed), only this host's."""
    prefix = _staging_prefix(output)
    try:
        entries = list(os.scandir(output.parent))
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(prefix):] if entry.name.startswith(prefix) else ""
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def _build(runs: list[RunRecord], staging: Path) -> tuple[object, list[dict]]:
    """The merged run, written into `staging`: node 0's run with every other node's records added."""
    head = runs[0]
    _copy_from(head.path, (), staging)
    for name in _DERIVED_FILES:
        (staging / name).unlink(missing_ok=True)
    nodes = [_node_entry(0, head)]
    meta = head.meta
    for index, run in enumerate(runs[1:], start=1):
        nodes.append(_node_entry(index, run))
        for mode_name in run.meta.modes:
            source = run.path / mode_name
            dest = staging / mode_name
            if not (source / "manifest.json").exists():
                continue
            (dest / PROCS_DIR).mkdir(parents=True, exist_ok=True)
            procs = source / PROCS_DIR
            for child in sorted(procs.iterdir()) if procs.is_dir() and not procs.is_symlink() else ():
                # a pid-keyed child of two hosts can share a number
                _copy_from(run.path, (*Path(mode_name).parts, PROCS_DIR, child.name), _free_name(dest / PROCS_DIR, child.name, index))
            # A node run that is itself a merged run already holds a `procs/node<K>`.
            launcher = _free_name(dest / PROCS_DIR, f"node{index}", index)
            launcher.mkdir()
            for item in source.iterdir():
                if item.name != PROCS_DIR:
                    _copy_from(run.path, (*Path(mode_name).parts, item.name), launcher / item.name)
            meta.mode_exit_codes[mode_name] = _worse(meta.mode_exit_codes.get(mode_name), run.meta.mode_exit_codes.get(mode_name))
        if run.meta.status != "finished" and meta.status == "finished":
            meta.status = run.meta.status
        meta.exit_code = _worse(meta.exit_code, run.meta.exit_code)
    meta.options = {**meta.options, "merged_from": nodes}
    write_atomic(staging / RUN_META_FILE, document_text(to_dict(meta)), root=staging)
    return meta, nodes


def _free_name(folder: Path, name: str, index: int) -> Path:
    """`folder/name`, or `node<index>-name[-N]` when that is taken."""
    target, clash = folder / name, 1
    while os.path.lexists(target):
        target = folder / (f"node{index}-{name}" + (f"-{clash}" if clash > 1 else ""))
        clash += 1
    return target


_WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _refuse(path: str | Path, why: str) -> UnreadableInput:
    return UnreadableInput(f"{path} {why}: a node run is merged only from the files inside it; refusing (nothing was copied)")


def _copy_from(run: Path, parts: tuple[str, ...], dest: Path) -> None:
    """Copy `run/parts...` (a folder, whole, or a file; the run itself when `parts` is empty) to
    `dest`, a name that does not exist yet. The node run is walked by descriptor from `run`, never
    following a link: check_node_links refused every link and hard link before, and one planted
    since (a folder swapped for a link while the merge runs) is refused here, never read through."""
    fd = os.open(run, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))  # the run the user named, through their own link if they typed one
    try:
        if not parts:
            _copy_dir(fd, run, dest)
            return
        for depth, part in enumerate(parts):
            shown = run.joinpath(*parts[: depth + 1])
            if depth == len(parts) - 1 and not stat.S_ISDIR(_lstat(part, fd, shown).st_mode):
                _copy_file(fd, shown, dest)
                return
            child = _open_dir(part, fd, shown)
            os.close(fd)
            fd = child
        _copy_dir(fd, run.joinpath(*parts), dest)
    finally:
        os.close(fd)


def _lstat(name: str, dir_fd: int, shown: Path) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        raise UnreadableInput(f"cannot read {shown}: {exc.strerror or exc}") from None


def _open_dir(name: str, dir_fd: int, shown: Path) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refuse(shown, "is a symbolic link" if stat.S_ISLNK(_lstat(name, dir_fd, shown).st_mode) else "is not a directory") from None
        raise UnreadableInput(f"cannot read {shown}: {exc.strerror or exc}") from None


def _copy_dir(fd: int, shown: Path, dest: Path) -> None:
    """The folder open as `fd` copied to the new folder `dest`, every entry by descriptor, with its mode and times."""
    try:
        os.mkdir(dest, 0o700)
    except OSError as exc:
        raise CannotWrite(f"cannot write the merged run: {exc.strerror or exc} ({dest})") from None
    for name in sorted(os.listdir(fd)):
        here = shown / name
        if stat.S_ISDIR(_lstat(name, fd, here).st_mode):
            child = _open_dir(name, fd, here)
            try:
                _copy_dir(child, here, dest / name)
            finally:
                os.close(child)
        else:
            _copy_file(fd, here, dest / name)
    _copy_stat(os.fstat(fd), dest)


def _copy_stat(st: os.stat_result, dest: Path | int) -> None:
    try:
        os.chmod(dest, stat.S_IMODE(st.st_mode))
        os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))  # the columns sidecar knows its events file by size and time
    except OSError as exc:
        raise CannotWrite(f"cannot write the merged run: {exc.strerror or exc} ({dest})") from None


def _copy_file(dir_fd: int, source: Path, dest: Path) -> None:
    """One regular file (`source`, in the folder open as `dir_fd`) copied into a name that does
    not exist yet (never through a link, never over a file), with its mode and times. A file
    with another name elsewhere (a hard link) is refused: it is not only the node run's. A disk
    that is full or read-only stops the merge at its first file, said as the write it is."""
    try:
        src = open_record_file(source, dir_fd=dir_fd)
    except OSError as exc:
        raise UnreadableInput(f"cannot read {source}: {exc.strerror or exc}") from None
    with os.fdopen(src, "rb"):  # closes it
        st = os.fstat(src)
        if st.st_nlink > 1:
            raise _refuse(source, f"is a hard link ({st.st_nlink} names)")
        try:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
            with os.fdopen(fd, "wb"):  # closes it
                _copy_data(src, fd, st.st_size)
                _copy_stat(st, fd)
        except OSError as exc:
            if exc.errno in _WRITE_ERRORS or exc.filename in (None, str(dest)):
                raise CannotWrite(f"cannot write the merged run: {exc.strerror or exc} ({dest})") from None
            raise UnreadableInput(f"cannot read {source}: {exc.strerror or exc}") from None


_CHUNK = 1 << 20


def _copy_data(src: int, dest: int, size: int) -> None:
    """The first `size` bytes of `src` (its size when it was opened) written to `dest`, holes kept
    as holes. Copied to its end as it grows instead, a file its writer keeps extending (sparsely:
    `truncate -s +1G` costs nothing) never ends the merge but fills the output's disk; and a sparse
    file of terabytes planted in a node run would be as many bytes of zeros written."""
    offset, length = 0, size
    while offset < length:
        try:
            start = os.lseek(src, offset, os.SEEK_DATA)
            end = min(os.lseek(src, start, os.SEEK_HOLE), length)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole from here (or the file shrank)
                break
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            start, end = offset, length  # a filesystem that does not say where its holes are: read it all
        while start < end:
            block = os.pread(src, min(_CHUNK, end - start), start)
            if not block:  # the file shrank while it was copied: the copy ends where it did
                length = end = start
                break
            written = 0
            while written < len(block):
                written += os.pwrite(dest, block[written:], start + written)
            start += len(block)
        offset = end
    os.ftruncate(dest, length)


def check_node_links(root: Path) -> None:
    """Refuse (UnreadableInput, exit 3) a node run that holds a symbolic link or a hard link
    (cagtool writes neither: a file with another name may be any file of the machine), or a file
    that is neither regular nor a directory. `root` itself may be a link the user typed."""
    def failed(exc: OSError) -> None:
        raise UnreadableInput(f"cannot read {exc.filename or root}: {exc.strerror or exc}")

    root = Path(os.path.realpath(root))  # the folder the user named, through their own link if they typed one
    for folder, dirs, files in os.walk(root, onerror=failed, followlinks=False):
        for name in dirs + files:
            path = os.path.join(folder, name)
            try:
                found = os.lstat(path)
                mode, links = found.st_mode, found.st_nlink
            except OSError as exc:
                raise UnreadableInput(f"cannot read {path}: {exc.strerror or exc}") from None
            if stat.S_ISLNK(mode):
                raise _refuse(path, f"is a symbolic link ({os.readlink(path)})")
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise _refuse(path, "is not a regular file")
            if stat.S_ISREG(mode) and links > 1:
                raise _refuse(path, f"is a hard link ({links} names)")


def _world_sizes(run: RunRecord) -> set[int]:
    return {rec.world_size for record in run.modes.values() for rec in (record, *record.processes.values()) if rec.world_size is not None}


def _node_entry(index: int, run: RunRecord) -> dict:
    return {
        "node": index,
        "run": str(run.path),
        "hostname": (run.meta.process or {}).get("hostname") or run.meta.machine.get("hostname"),
        "status": run.meta.status,
        "exit_code": run.meta.exit_code,
        "ranks": sorted(_ranks_of(run)),
    }
