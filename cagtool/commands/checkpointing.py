"""`cagtool checkpointing`: what activation checkpointing saves in each mode, measured by re-running
the recorded job with checkpointing turned into a plain call (verify/checkpointing.py)."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from cagtool.commands._common import RUN_ARG, TextOrJson


def register(app: typer.Typer) -> None:
    @app.command("checkpointing")
    def checkpointing_command(
        run: Optional[str] = RUN_ARG,
        modes: str = typer.Option("aot,ca", "--modes", help="The modes to measure in, comma-separated (aot, ca)."),
        format: TextOrJson = typer.Option(TextOrJson.text, "--format", help="text or json."),
    ) -> None:
        """Measure activation checkpointing's memory saving in aot and ca: EXECUTES the recorded job.

        For each mode, re-runs the job as written and with torch.utils.checkpoint.checkpoint turned
        into a plain call (your file is not changed), one process each, and compares the memory
        each holds for its backward: on CPU the heap in use at each backward's entry and its sampled
        maximum inside it (glibc's mallinfo2), peak RSS beside it; CUDA's max allocated on a GPU.
        Where reentrant checkpoints recompiled in their recompute (or failed under compiled
        autograd), re-runs them with use_reentrant=False too and says whether that fixes it. Where a
        side effect broke the graph inside a checkpoint the compiled code calls (so it ran as eager
        checkpointing does, and under compiled autograd split its graph's code into pieces), re-runs
        the job with torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True and
        compares the graph breaks and compile time. Only a run your own `cagtool run` recorded (as
        --verify). The result is kept in
        RUN/checkpointing.json and shown by `summary` and the HTML report.

            cagtool run --modes aot,ca train.py && cagtool checkpointing
        """
        from cagtool.errors import UsageError
        from cagtool.report.checkpointing import checkpointing_lines
        from cagtool.report.text.safe_text import safe_line
        from cagtool.verify.checkpointing import MEASURED_MODES, measure_checkpointing

        chosen = [m.strip() for m in modes.split(",") if m.strip()]
        if not chosen or any(m not in MEASURED_MODES for m in chosen):
            raise UsageError(f"--modes takes {' and '.join(MEASURED_MODES)} (got {modes!r})")
        # Each line may quote the run's path, a re-run's directory or its error: shown as record text,
        # one line each (a path with a line break would start a line of its own in a CI log).
        result = measure_checkpointing(run, chosen, progress=lambda line: print(safe_line(f"cagtool: {line}"), file=sys.stderr))
        if format == TextOrJson.json:
            print(json.dumps(result.to_dict(), indent=2))
            return
        for line in checkpointing_lines(result):
            print(safe_line(line))
        print(safe_line(f"kept in {result.run}/checkpointing.json"), file=sys.stderr)
