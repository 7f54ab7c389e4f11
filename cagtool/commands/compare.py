"""`cagtool compare`: modes side by side, or two runs before/after."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

import typer

from cagtool.errors import UsageError
from cagtool.record.loader import load_run


class CompareFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


@dataclass(frozen=True)
class CompareOptions:
    run_a: Optional[str]
    run_b: Optional[str]
    fmt: str = "table"
    rtol: float = 1e-3
    atol: float = 1e-6
    strict: bool = False


def compare(options: CompareOptions) -> None:
    from cagtool.report.compare.analysis import Tolerance, compare_modes, compare_runs
    from cagtool.report.compare.render import render_comparison
    from cagtool.report.console import make_console

    if options.rtol < 0 or options.atol < 0:
        raise UsageError("--rtol and --atol must not be negative")
    tolerance = Tolerance(rtol=options.rtol, atol=options.atol)
    run_a = load_run(options.run_a, strict=options.strict)
    if options.run_b is None:
        comparison = compare_modes(run_a, tolerance)
    else:
        run_b = load_run(options.run_b, strict=options.strict)
        comparison = compare_runs(run_a, run_b, tolerance)
    render_comparison(comparison, options.fmt, make_console())


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare_command(
        run_a: Optional[str] = typer.Argument(None, metavar="RUN_A", help="Run directory (default: the latest under ./.cagtool/runs)."),
        run_b: Optional[str] = typer.Argument(None, metavar="RUN_B", help="A second run: compare A (before) with B (after)."),
        fmt: CompareFormat = typer.Option(CompareFormat.table, "--format", "-f", help="table, json, csv or markdown."),
        rtol: float = typer.Option(1e-3, "--rtol", help="Relative tolerance for losses and final norms."),
        atol: float = typer.Option(1e-6, "--atol", help="Absolute tolerance for losses and final norms."),
        strict: bool = typer.Option(False, "--strict", help="Fail on any unreadable line or unknown event instead of skipping it."),
    ) -> None:
        """Compare eager, aot (torch.compile alone) and ca (compiled autograd) side by side.

        With one run: its modes side by side (graphs, graph breaks, recompiles, compile time by
        phase, time to first step, steady-state step time p10/median/p90, peak memory), the
        speedups aot/eager, ca/eager and ca/aot with their spread, and whether the losses and
        final parameter/gradient norms agree. Repetitions (--repeat) are pooled into their mode.
        A speedup whose p10/p90 range contains 1.0 is reported as within noise. A mode that
        failed is shown with its reason.

        With two runs: the same figures for run A (before) and run B (after), with changes.

        Examples:

          cagtool run --modes eager,aot,ca train.py     # record the three modes

          cagtool compare                               # the latest run, modes side by side

          cagtool compare .cagtool/runs/train-20260101-120000 --format json

          cagtool compare RUN_BEFORE RUN_AFTER --format markdown > change.md

        The exit code is 0 when the report was written, 3 when a run cannot be read; failed
        modes and numerics that disagree are reported, not turned into an exit code (use
        `cagtool gate` for that).
        """
        compare(CompareOptions(run_a, run_b, fmt.value, rtol, atol, strict))
