"""`cagtool report`: one self-contained HTML file for a run, or for two runs before/after."""

from __future__ import annotations

import sys
import webbrowser
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from cagtool.commands._common import STRICT_OPT
from cagtool.errors import UnreadableInput

if TYPE_CHECKING:
    from cagtool.record.loader import RunRecord
    from cagtool.report.gate.run import GateResult
    from cagtool.report.html.document import Written


@dataclass(frozen=True)
class ReportOptions:
    run: Optional[str] = None  # None: the latest run
    run_b: Optional[str] = None  # a second run: A (before) against B (after)
    output: Optional[Path] = None  # default: <run>/report.html (<run B>/report-vs-A.html... see below)
    open_browser: bool = False
    strict: bool = False


def write_run_report(run: "RunRecord", output: Path | None = None, gate: "GateResult | None" = None, run_b: "RunRecord | None" = None) -> "Written":
    """Write the report; an unwritable destination is exit 3 like any unwritable output."""
    from cagtool.report.html.document import write_report

    try:
        return write_report(run, output, gate=gate, run_b=run_b)
    except OSError as exc:
        where = output or run.path
        raise UnreadableInput(f"cannot write the report to {where}: {exc.strerror or exc}") from None


REPORT_DEPS_HINT = "pip install vl-convert-python"


def report_after_run(run_path: Path, gate: "GateResult | None" = None, run: "RunRecord | None" = None) -> Path | None:
    """`cagtool run`'s report.html, from `run` when the record was already read (else read here).
    A report that cannot be written costs one line on stderr, never the run's exit code: the
    record is already safe and `cagtool report` can retry."""
    from cagtool.record.loader import load_run

    try:
        written = write_run_report(run if run is not None else load_run(run_path, columns=True), gate=gate)
    except ImportError as exc:
        if not (exc.name or "").startswith("vl_convert"):  # cagtool's own modules (an install changed under the run): no hint
            _say(f"cagtool: report not written: {type(exc).__name__}: {exc} (retry with: cagtool report {run_path})")
            return None
        _say(f"cagtool: report skipped: {exc.name} is not installed ({REPORT_DEPS_HINT})")
        return None
    except Exception as exc:  # noqa: BLE001 - see the docstring
        _say(f"cagtool: report not written: {type(exc).__name__}: {exc} (retry with: cagtool report {run_path})")
        return None
    _say(f"report: {written.path}")
    return written.path


def _say(line: str) -> None:
    """One line on stderr: the run directory's name in it is any name a job or a pull request gave
    it (a line break, a terminal escape), shown as `runs` shows it."""
    from cagtool.report.text.safe_text import safe_line

    print(safe_line(line), file=sys.stderr)


def report(options: ReportOptions) -> "Written":
    from cagtool.record.loader import load_run

    run = load_run(options.run, strict=options.strict, columns=True)
    run_b = load_run(options.run_b, strict=options.strict, columns=True) if options.run_b is not None else None
    output = options.output
    if output is None and run_b is not None:
        output = run_b.path / f"report-vs-{run.path.name}.html"
    written = write_run_report(run, output, run_b=run_b)
    _say(f"report: {written.path}  ({written.bytes / 2**20:.1f} MiB, {written.seconds:.1f} s)")
    if options.open_browser:
        webbrowser.open(written.path.resolve().as_uri())
    return written


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_command(
        run_a: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run directory (default: the latest under ./.cagtool/runs)."),
        run_b: Optional[str] = typer.Argument(None, metavar="[RUN_B]", help="A second run: report RUN (before) against RUN_B (after)."),
        output: Optional[Path] = typer.Option(None, "-o", "--output", help="HTML file to write (default: RUN/report.html; with RUN_B: RUN_B/report-vs-<RUN>.html)."),
        open_browser: bool = typer.Option(False, "--open", help="Open the report in the default browser."),
        strict: bool = STRICT_OPT,
    ) -> None:
        """Write one self-contained HTML report of a run: the verdict (modes side by side,
        speedups, numerics, findings), step time per mode with every recompile and graph break
        marked, compile time by phase, the recompiles and their causes, and every CA graph with
        its code and its diff against the graph it replaced.

        The file works offline: no CDN, no request to any host; send it, attach it to CI.

            cagtool report                              # the latest run -> RUN/report.html
            cagtool report RUN -o report.html --open
            cagtool report RUN_BEFORE RUN_AFTER         # before/after
        """
        report(ReportOptions(run_a, run_b, output, open_browser, strict))
