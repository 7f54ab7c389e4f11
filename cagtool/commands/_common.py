"""Arguments and options shared by the report commands."""

from __future__ import annotations

from enum import Enum
from typing import Optional

import typer

RUN_ARG = typer.Argument(None, metavar="[RUN]", help="Run directory (default: the latest under ./.cagtool/runs).")
STRICT_OPT = typer.Option(False, "--strict", help="Fail on any unreadable line or unknown event instead of skipping it.")
RANK_OPT: Optional[int] = typer.Option(
    None, "--rank", min=0, metavar="N", help="Multi-process runs: report rank N's record (default: every rank's table, or rank 0 where one record is shown)."
)
MODE_OPT: Optional[str] = typer.Option(None, "--mode", help="Which mode's record to read: ca, aot or eager (default: the most informative the run asked for, ca first).")


class TextOrJson(str, Enum):
    text = "text"
    json = "json"
