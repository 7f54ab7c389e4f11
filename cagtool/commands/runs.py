"""`cagtool runs`: list recorded runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

if TYPE_CHECKING:
    from cagtool.record.loader import RunRecord


def runs_command(
    root: Optional[Path] = typer.Argument(None, help="Directory holding runs (default: ./.cagtool/runs)."),
) -> None:
    """List recorded runs, oldest first, with their modes and exit codes.

        \b
        cagtool runs
    """
    from cagtool.errors import CagtoolError, UnreadableInput
    from cagtool.record.loader import list_runs, load_run

    # A directory named on the command line that is not there is a typo or a wrong path, not a
    # place with no runs yet: refused, as every other command refuses a missing run (exit 3). The
    # default ./.cagtool/runs missing only means nothing was recorded here yet.
    if root is not None and not root.is_dir():
        what = "no such directory" if not os.path.lexists(root) else "not a directory"
        raise UnreadableInput(f"{what}: {root} (give the directory holding runs, e.g. .cagtool/runs)")
    paths = list_runs(root)
    if not paths:
        from cagtool.report.text.safe_text import safe_line

        print(safe_line(f"no runs under {root or '.cagtool/runs'}; record one with: cagtool run train.py"))
        return
    rows = []
    for path in paths:
        try:
            run = load_run(path, events=False)  # the listing needs the manifests only
        except CagtoolError as exc:
            rows.append((str(path), "?", "?", "?", f"unreadable: {exc}"))
            continue
        rows.append((str(path), run.meta.created_at, run.meta.target.get("name", "?"), _modes_cell(run), str(run.meta.exit_code)))
    _print_listing(("run", "created", "target", "modes", "exit"), rows)


def _modes_cell(run: RunRecord) -> str:
    """Every mode run.json asked for, in its order, with how it ended: its record's status; `not
    run` for one a stopped run never started (RunRecord.not_run, as summary, compare and report
    say it), `pending` for one a run still running has not started yet; `missing` for one whose
    process ran (or whose run ended normally) and left no record."""
    from cagtool.record.schema import STATUS_RUNNING

    never = set(run.not_run())
    codes = run.meta.mode_exit_codes or {}
    names = list(run.meta.modes) + [name for name in run.modes if name not in run.meta.modes]
    cells = []
    for name in names:
        record = run.modes.get(name)
        if record is not None:
            cells.append(f"{name}:{record.manifest.status}")
        elif name in never:
            cells.append(f"{name}:not run")
        else:
            pending = run.meta.status == STATUS_RUNNING and name not in codes
            cells.append(f"{name}:{'pending' if pending else 'missing'}")
    return ", ".join(cells)


def _print_listing(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """One line per run, in columns as wide as their widest cell, nothing folded or cut (the run
    path is the one thing to copy from this list). Plain lines, not rich's console and table: they
    were 29 % of this command's CPU time (benchmarks/README.md, `runs`). Each cell is `safe_line`:
    a run directory's name or a record's field cannot start a line of its own."""
    from rich.cells import cell_len

    from cagtool.report.text.safe_text import safe_line

    lines = [tuple(safe_line(cell) for cell in row) for row in (headers, *rows)]
    widths = [max(cell_len(line[column]) for line in lines) for column in range(len(headers))]
    out = []
    for line in lines:
        cells = [cell + " " * (width - cell_len(cell)) for cell, width in zip(line, widths)]
        out.append("  ".join(cells).rstrip())
    print("\n".join(out))


def register(app: typer.Typer) -> None:
    app.command("runs")(runs_command)
