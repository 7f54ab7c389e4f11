"""`cagtool compare`: modes side by side, or two runs before/after."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Optional

import typer

from cagtool.errors import UsageError

if TYPE_CHECKING:
    from cagtool.record.loader import RunRecord
    from cagtool.report.ranks.analysis import RankAnalysis


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
    rank: Optional[int] = None  # multi-rank runs: compare this rank's records; None: rank 0


def compare(options: CompareOptions) -> None:
    from cagtool.record.loader import load_run
    from cagtool.report.compare import Tolerance, compare_modes, compare_runs, comparison_to_json, render_comparison
    from cagtool.report.text.console import make_console
    from cagtool.report.ranks.analysis import analysis_json, focused_run, trains_in_workers
    from cagtool.report.ranks.render import render_ranks

    if not (0 <= options.rtol < math.inf and 0 <= options.atol < math.inf):  # NaN fails too: it would compare nothing
        raise UsageError(f"--rtol and --atol take a finite number, not negative (got {options.rtol!r}, {options.atol!r})")
    tolerance = Tolerance(rtol=options.rtol, atol=options.atol)
    # A multi-rank run is compared on one rank's records (its launcher ran no steps); the per-rank
    # tables of every mode follow (in JSON: `ranks`).
    runs = [load_run(options.run_a, strict=options.strict, columns=True)]
    if options.run_b is not None:
        runs.append(load_run(options.run_b, strict=options.strict, columns=True))
    focused = [focused_run(run, options.rank) for run in runs]
    if len(focused) == 1:
        comparison = compare_modes(focused[0][0], tolerance)
        if focused[0][1] is not None:  # gradients are compared rank by rank, and across ranks
            from dataclasses import replace

            from cagtool.report.compare.grad_parity import grad_parity

            comparison = replace(comparison, grad_parity=grad_parity(runs[0]).naming_resumes(comparison.numerics.resumed))
    else:
        comparison = compare_runs(focused[0][0], focused[1][0], tolerance)
    labels = [""] if len(runs) == 1 else ["A ", "B "]
    rank_parts = [(label, run, focus) for label, run, (_, focus) in zip(labels, runs, focused) if focus is not None]
    console = make_console()
    headline, line = True, None
    if len(focused) == 1:
        # One run: the headline names the root causes of its recompiles and what to do (the
        # record, not the comparison, holds them), as the run's summary does, in every format.
        from cagtool.report.compare.headline import ca_explanation, run_headline

        line = run_headline(comparison, None, ca_explanation(comparison, focused[0][0]))
        if options.fmt == "table":
            from cagtool.report.compare.render import print_headline

            print_headline(console, line, str(runs[0].path))
            headline = False
    if not rank_parts:
        render_comparison(comparison, options.fmt, console, headline=headline, line=line)
        return
    if options.fmt == "json":
        data = comparison_to_json(comparison, line)
        data["ranks"] = {
            f"{label.strip() or 'run'}": {"compared_rank": focus, "modes": {name: analysis_json(a) for name, a in _analyses(run)}}
            for label, run, focus in rank_parts
        }
        console.file.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    if options.fmt == "table":
        for label, run, focus in rank_parts:
            have = sorted({r for record in run.modes.values() for r in record.ranks()})
            if trains_in_workers(run):
                console.print(f"{label}{run.path}: training ran in processes the job started without a rank (numbered "
                              f"{', '.join(map(str, have))} by start): comparing {focus}'s records (--rank N for another)", markup=False)
            else:
                console.print(f"{label}{run.path}: a multi-rank run (ranks {', '.join(map(str, have))}): comparing rank {focus}'s records (--rank N for another)", markup=False)
    render_comparison(comparison, options.fmt, console, headline=headline, line=line)
    if options.fmt == "table":
        for label, run, _ in rank_parts:
            for name, analysis in _analyses(run):
                console.print(f"{label}mode {name}:", style="bold")
                render_ranks(console, analysis)


def _analyses(run: RunRecord) -> list[tuple[str, RankAnalysis]]:
    from cagtool.report.ranks.analysis import analyze_ranks

    return [(name, a) for name, record in run.modes.items() if (a := analyze_ranks(record)) is not None]


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare_command(
        run_a: Optional[str] = typer.Argument(None, metavar="RUN_A", help="Run directory (default: the latest under ./.cagtool/runs)."),
        run_b: Optional[str] = typer.Argument(None, metavar="RUN_B", help="A second run: compare A (before) with B (after)."),
        fmt: CompareFormat = typer.Option(CompareFormat.table, "--format", "-f", help="table, json, csv or markdown."),
        rtol: float = typer.Option(1e-3, "--rtol", help="Relative tolerance for losses and final norms."),
        atol: float = typer.Option(1e-6, "--atol", help="Absolute tolerance for losses and final norms."),
        strict: bool = typer.Option(False, "--strict", help="Fail on any unreadable line or unknown event instead of skipping it."),
        rank: Optional[int] = typer.Option(None, "--rank", min=0, metavar="N", help="Multi-rank runs: compare rank N's records (default: rank 0)."),
    ) -> None:
        """Compare eager, aot (torch.compile alone) and ca (compiled autograd) side by side.

        With one run: its modes side by side (graphs, graph breaks, recompiles, compile time by
        phase, time to first step, steady-state step time p10/median/p90, peak memory), the
        speedups aot/eager, ca/eager and ca/aot with their 90% confidence intervals, and whether
        the losses and final parameter/gradient norms agree. Repetitions (--repeat) are pooled
        into their mode. Each process is one piece of evidence: with --repeat K (K >= 5) the
        blocks' ratios are paired; with fewer, the run-to-run noise is assumed and only a change
        beyond it is called. A speedup reads faster or slower when its interval is clear of 1.0,
        no change when within +/-5%, inconclusive otherwise, with the --repeat that would resolve
        it (docs/ci.md). A mode that failed is shown with its reason.

        With two runs: the same figures for run A (before) and run B (after), with changes.

        A multi-rank run (DDP) is compared on rank 0's records (--rank N for another), followed by
        each mode's per-rank table and what the ranks disagree on (JSON: `ranks`).

        Examples:

          \b
          cagtool run --modes eager,aot,ca train.py     # record the three modes

          \b
          cagtool compare                               # the latest run, modes side by side

          \b
          cagtool compare .cagtool/runs/train-20260101-120000 --format json

          \b
          cagtool compare RUN_BEFORE RUN_AFTER --format markdown > change.md

        The exit code is 0 when the report was written, 3 when a run cannot be read; failed
        modes and numerics that disagree are reported, not turned into an exit code (use
        `cagtool gate` for that).
        """
        compare(CompareOptions(run_a, run_b, fmt.value, rtol, atol, strict, rank))
