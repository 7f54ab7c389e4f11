"""`cagtool export`: a run in another tool's format (a Perfetto / chrome://tracing trace)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from cagtool.commands._common import RUN_ARG, STRICT_OPT
from cagtool.errors import UnreadableInput, UsageError


# `--perfetto -`: the trace on stdout (`cagtool export --perfetto - | gzip`), as `-` means for most
# tools; a file of that name is `./-`.
STDOUT = "-"


def export_perfetto(run: Optional[str], output: Path, strict: bool = False) -> Path | None:
    """Write the run's trace to `output` and return its path; `-`: to stdout, returning None."""
    from cagtool.record.loader import load_run
    from cagtool.report.perfetto import write_trace

    record = load_run(run, strict=strict, columns=True)
    if str(output) == STDOUT:
        import json

        from cagtool.report.perfetto import perfetto_trace

        sys.stdout.write(json.dumps(perfetto_trace(record), allow_nan=False, default=str) + "\n")
        return None
    try:
        return write_trace(record, output)
    except OSError as exc:
        raise UnreadableInput(f"cannot write {output}: {exc.strerror or exc}") from None


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export_command(
        run: Optional[str] = RUN_ARG,
        perfetto: Optional[Path] = typer.Option(None, "--perfetto", metavar="FILE", help="Write a Chrome trace-event JSON (opens in Perfetto and chrome://tracing) to FILE; - writes it to stdout (a file named - is ./-)."),
        strict: bool = STRICT_OPT,
    ) -> None:
        """Export a recorded run for another tool.

        --perfetto FILE: one process per mode (and rank), each mode from time 0 of its own run
        (side by side), tracks for steps (step 0 included), backward calls, optimizer steps, CA
        captures, CA graph first calls and Dynamo compiles, in microseconds, and an instant event
        for every CA cache miss, Dynamo recompile and graph break (torch's reason, the node and
        the source line in its args); open it at ui.perfetto.dev or chrome://tracing, next to a
        torch.profiler trace. A long job draws at most 24,000 steps one by one (every step with a compile,
        capture or recompile, and the fastest and slowest of each stretch); the others become one
        span per stretch (count, mean, min, max), as otherData.aggregated says.

            cagtool export RUN --perfetto trace.json
            cagtool export RUN --perfetto - | gzip > trace.json.gz
        """
        if perfetto is None:
            raise UsageError("say what to export: --perfetto FILE (or - for stdout)")
        path = export_perfetto(run, perfetto, strict)
        if path is not None:
            print(f"trace: {path}", file=sys.stderr)
