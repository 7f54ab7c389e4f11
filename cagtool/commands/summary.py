"""`cagtool summary`: re-render a recorded run's summary, without re-running anything."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from cagtool.commands._common import RANK_OPT, RUN_ARG, STRICT_OPT
from cagtool.errors import UsageError

if TYPE_CHECKING:
    from cagtool.record.loader import RunRecord

def print_run_report(run_path: Path | str | None, fmt: str = "text", after_run: bool = False, strict: bool = False, rank: int | None = None, loaded: "RunRecord | None" = None) -> None:
    """`loaded`: the run already read (`cagtool run` reads its record once for the summary, --json
    and report.html); else it is read here."""
    from cagtool.record.loader import load_run
    from cagtool.report.text.console import make_console
    from cagtool.report.ranks.analysis import focused_run, run_for_rank, trains_in_workers
    from cagtool.report.summary import SUMMARY_KINDS, damaged_headline, next_steps, render_summary, summary_json

    # Optimizer-step events are half of a long run's lines and no summary figure reads them: they
    # are counted, not built; steps and backward calls are read as columns from the record's
    # sidecar when it matches events.jsonl (a 20,000-step summary in under 0.5 s).
    run = loaded if loaded is not None else load_run(run_path, strict=strict, kinds=SUMMARY_KINDS, columns=True)
    verification = None
    unread = None  # a verification.json that is there but not verify's: said, never silently dropped
    if (Path(run.path) / "verification.json").exists():
        from cagtool.report.recompiles.verification import UNREAD_NOTE, load_verification

        verification = load_verification(run.path)
        unread = UNREAD_NOTE if verification is None else None
    from cagtool.report.checkpointing import checkpointing_lines, load_checkpointing

    checkpointing = load_checkpointing(Path(run.path))  # `cagtool checkpointing`'s measurement, when made
    if fmt == "json":
        data = summary_json(run, rank=rank)
        from cagtool.report.compare.analysis import compare_modes
        from cagtool.report.compare.headline import ca_explanation, run_headline
        from cagtool.report.ranks.analysis import focused_run as _focused

        view = _focused(run, None)[0]
        comparison = compare_modes(view)
        line = damaged_headline(view) or run_headline(comparison, verification, ca_explanation(comparison, view))
        data = {"headline": {"text": line.text, "tone": line.tone, "advice": line.advice}, **data}
        if verification is not None:
            data["verification"] = verification
        elif unread is not None:
            data["verification_unread"] = unread
        if checkpointing is not None:
            data["checkpointing"] = checkpointing
        print(json.dumps(data, indent=2, default=str))
        return
    run = run_for_rank(run, rank)
    # After a run the script owns stdout; the report goes to stderr.
    console = make_console(stderr=after_run)
    from cagtool.report.compare.analysis import compare_modes
    from cagtool.report.compare.headline import ca_explanation, run_headline
    from cagtool.report.compare.render import print_headline, render_comparison

    compared, focus = focused_run(run, None)  # a multi-rank run's launchers ran no steps
    comparison = compare_modes(compared)
    # The answer first: what a user pastes into a pull request, then what to do about it.
    headline = damaged_headline(compared) or run_headline(comparison, verification, ca_explanation(comparison, compared))
    print_headline(console, headline, str(run.path))
    render_summary(console, run, rank=rank)
    if len(run.modes) > 1:
        if focus is not None and rank is None:
            whose = f"training process {focus}'s" if trains_in_workers(run) else f"rank {focus}'s"
            console.print(f"modes compared on {whose} records (cagtool compare --rank N for another)", markup=False)
        render_comparison(comparison, "table", console, headline=False)
    if verification is not None:
        from cagtool.report.recompiles.verification import verification_lines

        for line in verification_lines(verification):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    elif unread is not None:
        console.print(unread, markup=False, highlight=False, soft_wrap=True)
    if checkpointing is not None:
        console.print("activation checkpointing, measured (cagtool checkpointing):", markup=False)
        for line in checkpointing_lines(checkpointing):
            console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"record: {run.path}")
    if after_run:
        # Quoted as a shell reads it, so a path with a space or `$` pastes as one argument; the
        # console then shows the line through safe_line (shlex.quote leaves a control character in).
        for i, step in enumerate(next_steps(shlex.quote(str(run.path)))):  # the console prints a string as one line
            console.print(("next: " if i == 0 else "      ") + step)


def summary_command(
    run: Optional[str] = RUN_ARG,
    fmt: str = typer.Option("text", "--format", help="text or json."),
    strict: bool = STRICT_OPT,
    rank: Optional[int] = RANK_OPT,
) -> None:
    """Print the summary of a recorded run (the one `cagtool run` printed at the end).

    JSON (`--format json`) has ca_graphs, cache_misses (kind, node, node_call, key_size,
    previous_key_sizes, changed_sizes with value and previous, changed_count and dynamic_sizes:
    torch's N and M in "N changed tensor shapes (total of M)", step, source), unique_graphs,
    graph_breaks, dynamo_recompiles, steps, exit_code, and every mode under `modes` (each with
    ddp_hook_graphs: DDP's all-reduce hook compiled by Dynamo in a backward without compiled
    autograd, not counted in forward_graphs).

    A multi-process job (DDP over mp.spawn or torchrun) adds, per mode, a table of its ranks
    (steps, CA graphs, cache misses, graph breaks, step time, peak RSS) with totals, and findings
    where the ranks disagree: different CA graphs or cache misses (named by the first step and
    miss where they part: what hangs collectives), different final norms (gradients not
    synchronised), a missing or failed rank, a process cagtool could not follow. JSON carries
    them under `ranks` (top level: the main mode's). `--rank N` shows rank N's own record; its
    JSON keeps the whole job's `ranks` analysis, with `shown_rank`.

        \b
        cagtool summary                     # the latest run
        cagtool summary .cagtool/runs/train-20260101-120000 --format json
    """
    if fmt not in ("text", "json"):
        raise UsageError(f"--format takes text or json (got {fmt!r})")
    print_run_report(run, fmt=fmt, strict=strict, rank=rank)


def register(app: typer.Typer) -> None:
    app.command("summary")(summary_command)
