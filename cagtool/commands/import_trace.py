"""`cagtool import`: a run record from the TORCH_TRACE logs of a job cagtool did not run."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer


def import_command(
    path: Path = typer.Argument(..., metavar="PATH", help="A TORCH_TRACE log, a directory of them, or a multi-rank directory."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Run directory to write (default: ./.cagtool/runs/import-<name>-<time>)."),
    strict: bool = typer.Option(False, "--strict", help="Fail on an unknown envelope, an unreadable line or a truncated last line instead of skipping it."),
) -> None:
    """Build a cagtool record from TORCH_TRACE logs (jobs run without cagtool: clusters, launchers).

    Run the job with TORCH_TRACE=DIR set (torch writes one log per rank,
    dedicated_log_torch_trace_rank_<N>_*.log), then import DIR. The record has one mode,
    `imported` (rank 0 in <run>/imported/, other ranks in <run>/imported/procs/rank<N>/): the
    compiled-autograd graphs (graphs/ca_<N>.py and .json), their cache misses, Dynamo compiles
    with per-phase times, recompiles with guard-failure reasons and graph breaks, with torch's
    compile ids. `summary`, `recompiles --explain`, `diff-graphs` and `gate` read it like any run.

    Cache-miss reasons are torch's own when the job turned compiled_autograd_verbose on
    (TORCH_LOGS=compiled_autograd_verbose); otherwise they are inferred from the diff of
    consecutive graphs and marked as inferred. A log holds no step times, losses or other modes:
    the record says so instead of inventing them.

    Lenient like tlparse: unknown envelopes are counted and skipped, a truncated last line (a job
    killed mid-write) is tolerated, a figure no job logs (a NaN, negative or 1e308 s compile time)
    is left unknown; each is reported. --strict makes them errors.

        cagtool import /tmp/trace_dir
        cagtool import dedicated_log_torch_trace_rank_0_x.log -o runs/job42
        cagtool import /tmp/trace_dir --strict

    Exit codes: 0 ok; 2 the output directory is not usable; 3 no trace log at PATH, a corrupt log,
    a log whose name says a rank beyond any job's, or (--strict) an unknown envelope, a truncated
    line or a figure out of range.
    """
    from cagtool.report.text.safe_text import safe_line
    from cagtool.trace_import.importer import ImportOptions, import_trace

    options = ImportOptions(path=path, output=output, strict=strict, cagtool_argv=tuple(sys.argv[1:]))
    result = import_trace(options)

    def say(line: str) -> None:
        # A path, a log's name or what a log holds (an envelope's kind, a figure) may carry anything
        # a file name or a log can: shown as record text, one line each.
        print(safe_line(line), file=sys.stderr)

    for proc in result.processes:
        read, tr = proc.read, proc.translated
        reasons = {
            (True, False): "CA reasons logged",
            (False, True): "CA reasons inferred from graph diffs (the job did not log compiled_autograd_verbose)",
        }.get((bool(tr.reasons_logged), bool(tr.reasons_inferred)), f"CA reasons: {tr.reasons_logged} logged, {tr.reasons_inferred} inferred" if tr.ca_graphs else "no CA graphs")
        say(f"cagtool: {proc.key}: {read.envelopes} envelopes, {tr.ca_graphs} CA graphs; {reasons}")
        skipped = sum(read.unknown.values())
        if skipped:
            kinds = ", ".join(f"{k} x{v}" for k, v in read.unknown.most_common(5))
            say(f"cagtool: {proc.key}: skipped {skipped} unknown envelope(s): {kinds}")
        if read.bad_lines:
            say(f"cagtool: {proc.key}: skipped {read.bad_lines} unreadable line(s) (first at line {read.first_bad_line})")
        if read.truncated_last_line:
            say(f"cagtool: {proc.key}: the last line is truncated (the job was cut off mid-write); read up to it")
        if tr.bad_figures:
            say(f"cagtool: {proc.key}: left {tr.bad_figures} out-of-range figure(s) unknown (first: {tr.first_bad_figure})")
        if read.payload_mismatches:
            say(f"cagtool: {proc.key}: {read.payload_mismatches} payload(s) did not match their md5 (incomplete)")
    for path in result.not_logs:
        say(f"cagtool: skipped {path}: not a TORCH_TRACE log")
    say(f"record: {result.path}")
    shown = shlex.quote(str(result.path))  # a shell reads it as one argument, a space in it too
    say(f"next: cagtool summary {shown}")
    say(f"      cagtool recompiles --explain {shown}")
    say(f"      cagtool diff-graphs {shown}")


def register(app: typer.Typer) -> None:
    app.command("import")(import_command)
