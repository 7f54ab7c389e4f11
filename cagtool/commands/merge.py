"""`cagtool merge`: the runs of one multi-node job's hosts as one run."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import List

import typer


def merge_command(
    runs: List[Path] = typer.Argument(..., metavar="NODE_RUN...", help="Each node's run directory (at least two)."),
    output: Path = typer.Option(..., "-o", "--output", metavar="DIR", help="The merged run's directory (must not exist)."),
) -> None:
    """Merge the runs a multi-node job's hosts recorded into one run that every report reads.

    Each host records its own node into its own directory (on a shared filesystem or copied
    together afterwards), the ranks keep their global numbers, and merge puts every rank of every
    node into one run: summary, compare, gate and report then see the whole job (per-rank tables,
    divergence across nodes, a gate over every rank).

        \b
        # on host 0 and host 1, the same command but for --node-rank:
        cagtool run -o $SHARED/job/node0 torchrun --nnodes 2 --node-rank 0 --nproc-per-node 8 \\
            --master-addr HOST0 --master-port 29500 train.py
        cagtool run -o $SHARED/job/node1 torchrun --nnodes 2 --node-rank 1 ...
        \b
        cagtool merge $SHARED/job/node0 $SHARED/job/node1 -o $SHARED/job/all
        cagtool gate $SHARED/job/all --max-recompiles ca:0

    The inputs are not changed, and nothing outside them is read: a symbolic link in a node's run
    (wherever it points), a hard link, a FIFO or a device is refused before anything is copied, and
    a link planted while it copies is never followed. Exit codes: 0 merged; 2 not the nodes of one job (another
    target, other arguments than the node rank, other modes, a rank recorded twice), the output exists or cannot be written (a full or
    read-only disk); 3 an unreadable run, or one holding such a link or file.
    """
    from cagtool.record.merge import merge_runs

    from cagtool.report.text.safe_text import safe_line

    merged = merge_runs(list(runs), output)
    # Host names, paths and mode names are the records' data: shown, never obeyed by the terminal.
    for node in merged.nodes:
        ranks = ", ".join(map(str, node["ranks"])) or "none"
        host = safe_line(node["hostname"]) if node["hostname"] else "host ?"
        print(f"node {node['node']}: {safe_line(str(node['run']))} ({host}), {safe_line(str(node['status']))}, ranks {ranks}", file=sys.stderr)
    for mode, ranks in merged.ranks.items():
        print(f"mode {safe_line(mode)}: ranks {', '.join(map(str, ranks)) or 'none'}", file=sys.stderr)
    print(f"merged run: {safe_line(str(merged.path))}", file=sys.stderr)
    print(f"next: cagtool summary {safe_line(shlex.quote(str(merged.path)))}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("merge")(merge_command)
