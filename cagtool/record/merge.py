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

A node's run may come from shared storage or another host, and nothing read from it may come from
outside it: before anything is read, every symbolic link in each node run is resolved, and one that
leads out of that run, loops, leads nowhere, is absolute or names a directory is refused
(UnreadableInput, exit 3), as is a file that is not a regular file (a FIFO would block the copy, a
device would be read). A relative link to a file inside is copied as a link, never followed. A
failed merge leaves no staging directory behind.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from cagtool.errors import CannotWrite, UnreadableInput, UsageError
from cagtool.record.atomic import write_atomic
from cagtool.record.loader import RunRecord, load_run
from cagtool.record.manifest import to_dict
from cagtool.record.schema import PROCS_DIR, RUN_META_FILE

# Files of a run that describe the run as a whole and are rebuilt, not carried over.
_DERIVED_FILES = ("gate.json", "report.html")


@dataclass(frozen=True)
class MergedRun:
    path: Path
    nodes: list[dict]  # per input: path, hostname, status, exit_code, ranks
    ranks: dict[str, list[int]]  # mode -> the ranks now in the merged run


def _ranks_of(run: RunRecord) -> set[int]:
    return {rank for record in run.modes.values() for rank in record.ranks()}


def _worse(a: int | None, b: int | None) -> int | None:
    return b if a in (None, 0) else a


def merge_runs(inputs: list[str | Path], output: Path) -> MergedRun:
    """Merge the runs of one job's nodes into `output` (a new directory). UsageError (exit 2) when
    the inputs are not the nodes of one job: fewer than two, another target or modes, a rank
    recorded twice, or `output` already exists; UnreadableInput (exit 3) for an unreadable run."""
    if len(inputs) < 2:
        raise UsageError("give the runs of at least two nodes to merge")
    for path in inputs:
        check_node_links(Path(path))
    runs = [load_run(path) for path in inputs]
    paths = [run.path.resolve() for run in runs]
    if len(set(paths)) != len(paths):
        raise UsageError("a run is given twice")
    output = Path(output)
    if os.path.lexists(output):
        raise UsageError(f"{output} already exists: merge into a new directory")
    first = runs[0]
    for run in runs[1:]:
        # The target's arguments differ between nodes (--node-rank K): the target itself must not.
        if run.meta.target.get("name") != first.meta.target.get("name"):
            raise UsageError(f"{run.path} ran {run.meta.target.get('name')}, {first.path} ran {first.meta.target.get('name')}: not the nodes of one job")
        if list(run.meta.modes) != list(first.meta.modes):
            raise UsageError(f"{run.path} recorded modes {', '.join(run.meta.modes)}, {first.path} {', '.join(first.meta.modes)}: not the nodes of one job")
    seen: dict[int, Path] = {}
    for run in runs:
        for rank in sorted(_ranks_of(run)):
            if rank in seen:
                raise UsageError(f"rank {rank} was recorded by both {seen[rank]} and {run.path}: not two nodes of one job")
            seen[rank] = run.path
    # Node 0 first: the node holding the lowest rank provides the run's metadata and launcher.
    order = sorted(range(len(runs)), key=lambda i: min(_ranks_of(runs[i]), default=1 << 30))
    runs = [runs[i] for i in order]

    staging = output.with_name(f".{output.name}.merging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        meta, nodes = _build(runs, staging)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, shutil.Error):
            src, _dst, why = exc.args[0][0] if exc.args and exc.args[0] else ("?", "?", str(exc))
            raise UnreadableInput(f"cannot copy {src}: {why}") from None
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


def _build(runs: list[RunRecord], staging: Path) -> tuple[object, list[dict]]:
    """The merged run, written into `staging`: node 0's run with every other node's records added."""
    head = runs[0]
    shutil.copytree(head.path, staging, symlinks=True, copy_function=_copy_file)
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
                target = dest / PROCS_DIR / child.name
                if os.path.lexists(target):  # a pid-keyed child of two hosts can share a number
                    target = dest / PROCS_DIR / f"node{index}-{child.name}"
                _copy(child, target)
            launcher = dest / PROCS_DIR / f"node{index}"
            launcher.mkdir()
            for item in source.iterdir():
                if item.name != PROCS_DIR:
                    _copy(item, launcher / item.name)
            meta.mode_exit_codes[mode_name] = _worse(meta.mode_exit_codes.get(mode_name), run.meta.mode_exit_codes.get(mode_name))
        if run.meta.status != "finished" and meta.status == "finished":
            meta.status = run.meta.status
        meta.exit_code = _worse(meta.exit_code, run.meta.exit_code)
    meta.options = {**meta.options, "merged_from": nodes}
    write_atomic(staging / RUN_META_FILE, json.dumps(to_dict(meta), indent=2) + "\n", root=staging)
    return meta, nodes


def _copy(source: Path, dest: Path) -> None:
    """A file, directory or link of a node run, links copied as links (check_node_links has
    refused every one that leaves the run)."""
    if source.is_symlink() or not source.is_dir():
        _copy_file(source, dest)
    else:
        shutil.copytree(source, dest, symlinks=True, copy_function=_copy_file)


_WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


def _copy_file(source: str | Path, dest: str | Path) -> object:
    # copytree collects a copy's OSError into one shutil.Error for the end; a disk that is full or
    # read-only stops the merge at its first file instead, said as the write it is.
    try:
        return shutil.copy2(source, dest, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in _WRITE_ERRORS:
            raise CannotWrite(f"cannot write the merged run: {exc.strerror} ({dest})") from None
        raise UnreadableInput(f"cannot read {source}: {exc.strerror or exc}") from None


def check_node_links(root: Path) -> None:
    """Refuse (UnreadableInput, exit 3) a node run that holds a symbolic link leading out of it
    (or looping, or leading nowhere), or a file that is neither regular, a directory nor a link."""
    try:
        base = Path(os.path.realpath(root, strict=True))
    except OSError as exc:
        raise UnreadableInput(f"cannot read the node run {root}: {exc.strerror or exc}") from None

    def refuse(path: str, why: str) -> UnreadableInput:
        return UnreadableInput(f"{path} {why}: a node run is merged only from what is inside it; refusing (nothing was copied)")

    def failed(exc: OSError) -> None:
        raise UnreadableInput(f"cannot read {exc.filename or root}: {exc.strerror or exc}")

    for folder, dirs, files in os.walk(root, onerror=failed, followlinks=False):
        for name in dirs + files:
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError as exc:
                raise UnreadableInput(f"cannot read {path}: {exc.strerror or exc}") from None
            if stat.S_ISLNK(mode):
                try:
                    target = Path(os.path.realpath(path, strict=True))
                except OSError:
                    raise refuse(path, f"is a symbolic link ({os.readlink(path)}) that loops or leads nowhere") from None
                if target != base and base not in target.parents:
                    raise refuse(path, f"is a symbolic link to {target}, outside the node run {root}")
                # Copied as a link, an absolute one would lead back into the input, and the merge
                # writes into the directories it copies: only a relative link to a file is kept.
                if os.path.isabs(os.readlink(path)) or target.is_dir():
                    raise refuse(path, "is an absolute symbolic link or one to a directory")
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise refuse(path, "is not a regular file")


def _node_entry(index: int, run: RunRecord) -> dict:
    return {
        "node": index,
        "run": str(run.path),
        "hostname": (run.meta.process or {}).get("hostname") or run.meta.machine.get("hostname"),
        "status": run.meta.status,
        "exit_code": run.meta.exit_code,
        "ranks": sorted(_ranks_of(run)),
    }
