"""`cagtool baseline save|show`: the small JSON a CI gate compares against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from cagtool.commands._common import RUN_ARG, STRICT_OPT, TextOrJson
from cagtool.errors import UsageError

# cagtool.report.gate.DEFAULT_BASELINE_FILE, spelled out so that registering the command imports
# nothing from report/ (start-up time; tests/test_cli_startup.py checks the two agree).
DEFAULT_BASELINE_FILE = "cagtool-baseline.json"

SAVE_HELP = """Save a run's counts, compile time and step-time statistics as a baseline JSON to commit.

`cagtool gate --baseline FILE` then fails on more CA graphs, recompiles or graph breaks than the baseline had, and with --max-regression / --max-compile-regression on slower steps or compiles. It warns when torch version or machine differ from the baseline's. A run with a failed mode is refused (use --allow-failed to save it anyway). With --accumulate, the compile times already in FILE are kept beside this run's (the gate measures compile-time noise from 3 or more; see docs/ci.md).

Examples:

  \b
  cagtool run --modes aot,ca train.py && cagtool baseline save -o cagtool-baseline.json

  \b
  cagtool baseline save .cagtool/runs/train-20260101-120000 -o ci/cagtool-baseline.json

  \b
  cagtool baseline save RUN2 -o ci/cagtool-baseline.json --accumulate
"""

SHOW_HELP = """Print a baseline file (checks that it reads).

Example:

  \b
  cagtool baseline show cagtool-baseline.json
"""


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Save and inspect the baselines `cagtool gate --baseline` compares against.", no_args_is_help=True)

    @group.command("save", help=SAVE_HELP)
    def save(
        run: Optional[str] = RUN_ARG,
        output: Path = typer.Option(Path(DEFAULT_BASELINE_FILE), "-o", "--output", metavar="FILE", help="Where to write the baseline."),
        allow_failed: bool = typer.Option(False, "--allow-failed", help="Save even when a mode failed or was interrupted."),
        accumulate: bool = typer.Option(False, "--accumulate", help="Keep the compile times of the runs already saved in FILE (up to 20) beside this run's, so --max-compile-regression has a measured spread, the compile time their median; every other figure is this run's."),
        strict: bool = STRICT_OPT,
    ) -> None:
        from cagtool.record.integrity import refuse_damaged
        from cagtool.record.loader import load_run
        from cagtool.report.text.console import make_console
        from cagtool.report.text.safe_text import safe_line
        from cagtool.report.gate import baseline_from_run, save_baseline

        record = load_run(run, strict=strict, columns=True)
        refuse_damaged(record, "saving a baseline from it")
        baseline = baseline_from_run(record)
        bad = {name: snap.status for name, snap in baseline.modes.items() if snap.status not in ("finished", "timeout")}
        bad.update({name: "; ".join(snap.process_problems) for name, snap in baseline.modes.items() if snap.process_problems})
        if bad and not allow_failed:
            listed = ", ".join(f"{name} {status}" for name, status in bad.items())
            raise UsageError(
                f"not saving a baseline from a run whose modes did not finish ({listed}); "
                "fix the run or pass --allow-failed",
            )
        if accumulate:
            from cagtool.record.atomic import locked
            from cagtool.report.gate.baseline import accumulate_baseline, load_baseline

            # Two CI jobs accumulating into one file: each reads what the other wrote, none is lost.
            with locked(output):
                if Path(output).exists():
                    baseline = accumulate_baseline(load_baseline(output), baseline)
                path = save_baseline(baseline, output, source=f"run {record.path}")
        else:
            path = save_baseline(baseline, output, source=f"run {record.path}")
        # Each line is `safe_line`: a mode name or path from the record cannot start a line of its own.
        console = make_console()
        modes = ", ".join(
            f"{name}: {snap.ca_graphs} CA graphs, {snap.recompiles} recompiles, {snap.graph_breaks} graph breaks"
            for name, snap in baseline.modes.items()
        )
        console.print(safe_line(f"baseline saved: {path} ({modes})"), markup=False, soft_wrap=True)
        if accumulate:
            held = ", ".join(f"{name}: {len(snap.compile_samples)}" for name, snap in baseline.modes.items())
            console.print(safe_line(f"compile times held: {held} (3 or more give --max-compile-regression a measured spread)"), markup=False, soft_wrap=True)
        from cagtool.report.gate.baseline import suggested_threshold

        gated = baseline.modes.get("ca") or next(iter(baseline.modes.values()), None)
        threshold, why = suggested_threshold(gated) if gated is not None else (None, "")
        if why:
            console.print(safe_line(f"{gated.mode}: {why}"), markup=False, soft_wrap=True)
        if threshold is not None:
            console.print(safe_line(f"gate against it with: cagtool gate --baseline {path} --max-regression {threshold}%"), markup=False, soft_wrap=True)
        else:  # no threshold the evidence supports: the counts (the baseline's own are the limits), no step-time figure
            console.print(safe_line(f"gate against it with: cagtool gate --baseline {path} (its counts are the limits; a step-time threshold "
                                    "needs a baseline whose processes measured the run-to-run noise, see above)"), markup=False, soft_wrap=True)

    @group.command("show", help=SHOW_HELP)
    def show(
        file: Path = typer.Argument(Path(DEFAULT_BASELINE_FILE), metavar="[FILE]", help="Baseline file."),
        format: TextOrJson = typer.Option(TextOrJson.text, "--format", help="Output format."),
    ) -> None:
        from cagtool.report.text.console import make_console
        from cagtool.report.text.safe_text import safe_line
        from cagtool.report.gate import baseline_to_dict, load_baseline
        from cagtool.report.gate.checks import baseline_figure_words

        baseline = load_baseline(file)
        data = baseline_to_dict(baseline)
        if format is TextOrJson.json:
            typer.echo(json.dumps(data, indent=2))
            return
        # Each line is `safe_line`: the file's own text (a target name, a mode name) cannot start a line of its own.
        console = make_console()
        console.print(safe_line(f"baseline {file}: from run {baseline.source_run}, saved {baseline.created_at}"), markup=False, soft_wrap=True)
        console.print(safe_line(f"torch {baseline.versions.get('torch', '?')}, target {baseline.target.get('name', '?')}"), markup=False, soft_wrap=True)
        for name, snap in baseline.modes.items():
            step = snap.step_time
            # The steps of every process pooled: not what the gate compares with (baseline_figure_words).
            timing = "no steady-state steps" if step is None or step.median_s is None else (
                f"all {step.count} steady steps pooled: median {step.median_s * 1e3:.3f} ms (p10 {step.p10_s * 1e3:.3f}, p90 {step.p90_s * 1e3:.3f})"
                if step.p10_s is not None and step.p90_s is not None else f"all {step.count} steady steps pooled: median {step.median_s * 1e3:.3f} ms"
            )
            samples = snap.compile_time_samples_s
            held = f" ({len(samples)} compile times, {min(samples):.3f}-{max(samples):.3f} s)" if samples else ""
            console.print(
                safe_line(f"  {name}: {snap.status}, {snap.steps} steps, {snap.ca_graphs} CA graphs, "
                          f"recompiles {snap.recompiles} (ca {snap.ca_recompiles}, dynamo {snap.dynamo_recompiles}), "
                          f"{snap.graph_breaks} graph breaks, compile {snap.compile_time_s:.3f} s{held}, {timing}"),
                markup=False,
                soft_wrap=True,
            )
            if step is not None and step.median_s is not None:
                console.print(safe_line(f"    {baseline_figure_words(step)}"), markup=False, soft_wrap=True)

    app.add_typer(group, name="baseline")
