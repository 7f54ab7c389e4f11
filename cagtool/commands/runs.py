"""`cagtool runs`: list recorded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def runs_command(
    root: Optional[Path] = typer.Argument(None, help="Directory holding runs (default: ./.cagtool/runs)."),
) -> None:
    """List recorded runs, oldest first, with their modes and exit codes.

        \b
        cagtool runs
    """
    from cagtool.errors import CagtoolError
    from cagtool.record.loader import list_runs, load_run
    from cagtool.report.text.console import print_table, print_text

    paths = list_runs(root)
    if not paths:
        print_text(f"no runs under {root or '.cagtool/runs'}; record one with: cagtool run train.py")
        return
    rows = []
    for path in paths:
        try:
            run = load_run(path, events=False)  # the listing needs the manifests only
        except CagtoolError as exc:
            rows.append((str(path), "?", "?", "?", f"unreadable: {exc}"))
            continue
        modes = ", ".join(f"{name}:{rec.manifest.status}" for name, rec in run.modes.items())
        rows.append((str(path), run.meta.created_at, run.meta.target.get("name", "?"), modes, str(run.meta.exit_code)))
    # Columns fold, never "…": the run path is the one thing to copy from this list.
    print_table(("run", "created", "target", "modes", "exit"), rows)


def register(app: typer.Typer) -> None:
    app.command("runs")(runs_command)
