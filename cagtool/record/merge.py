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
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from cagtool.errors import UsageError
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
    runs = [load_run(path) for path in inputs]
    paths = [run.path.resolve() for run in runs]
    if len(set(paths)) != len(paths):
        raise UsageError("a run is given twice")
    output = Path(output)
    if output.exists():
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
    head = runs[0]

    staging = output.with_name(f".{output.name}.merging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(head.path, staging, symlinks=True)
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
            for child in sorted(procs.iterdir()) if procs.is_dir() else ():
                target = dest / PROCS_DIR / child.name
                if target.exists():  # a pid-keyed child of two hosts can share a number
                    target = dest / PROCS_DIR / f"node{index}-{child.name}"
                shutil.copytree(child, target, symlinks=True)
            launcher = dest / PROCS_DIR / f"node{index}"
            launcher.mkdir()
            for item in source.iterdir():
                if item.name != PROCS_DIR:
                    (shutil.copytree if item.is_dir() else shutil.copy2)(item, launcher / item.name)
            meta.mode_exit_codes[mode_name] = _worse(meta.mode_exit_codes.get(mode_name), run.meta.mode_exit_codes.get(mode_name))
        if run.meta.status != "finished" and meta.status == "finished":
            meta.status = run.meta.status
        meta.exit_code = _worse(meta.exit_code, run.meta.exit_code)
    meta.options = {**meta.options, "merged_from": nodes}
    (staging / RUN_META_FILE).write_text(json.dumps(to_dict(meta), indent=2) + "\n")
    os.rename(staging, output)  # the merged run appears whole or not at all
    merged = load_run(output)
    return MergedRun(output, nodes, {name: sorted(record.ranks()) for name, record in merged.modes.items()})


def _node_entry(index: int, run: RunRecord) -> dict:
    return {
        "node": index,
        "run": str(run.path),
        "hostname": (run.meta.process or {}).get("hostname") or run.meta.machine.get("hostname"),
        "status": run.meta.status,
        "exit_code": run.meta.exit_code,
        "ranks": sorted(_ranks_of(run)),
    }
