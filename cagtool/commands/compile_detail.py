"""`cagtool compile`: what one compile left (tlparse's per-compile page), by torch's compile id."""

from __future__ import annotations

import json
from typing import List, Optional

import typer

from cagtool.errors import UsageError

from ._common import MODE_OPT, RANK_OPT, STRICT_OPT, TextOrJson

_DEFAULT_SHOW = "dynamo_start,dynamo_output_graph,aot_forward_graph,aot_backward_graph,dynamo_cpp_guards_str"


def compile_command(
    args: List[str] = typer.Argument(..., metavar="[RUN] ID", help="Run directory (default: the latest), then a compile id as torch prints it: 0/1, !0/1/0."),
    show: str = typer.Option(_DEFAULT_SHOW, "--show", help="Artifacts to print, comma-separated, or `all` (adds inductor_output_code)."),
    mode: Optional[str] = MODE_OPT,
    rank: Optional[int] = RANK_OPT,
    fmt: TextOrJson = typer.Option(TextOrJson.text, "--format", help="text or json."),
    strict: bool = STRICT_OPT,
) -> None:
    """Show one compile's detail: the stack it came from, the Dynamo graph, the AOT forward and
    backward graphs, Inductor's output code and the full guard set, as tlparse shows per compile id.

    The ids are torch's: `0/1` is frame 0's second compile (a recompile), `!0/1/0` the Dynamo
    compile of compiled-autograd graph 0. `cagtool summary` and `diff-graphs` print the command for
    the compiles they name.

        \b
        cagtool compile 0/1                          # the latest run
        cagtool compile .cagtool/runs/train-20260101-120000 '!0/1/0' --show dynamo_cpp_guards_str
    """
    from cagtool.record.loader import load_run
    from cagtool.record.schema import COMPILE_ARTIFACTS
    from cagtool.report.compiles.detail import DetailRenderer, detail_json, find_detail, parse_compile_id

    if len(args) > 2:
        raise UsageError(f"give [RUN] ID (got {len(args)} arguments)")
    run_path, ident = (args[0], args[1]) if len(args) == 2 else (None, args[0])
    compile_id = parse_compile_id(ident)
    wanted = tuple(COMPILE_ARTIFACTS) if show.strip() == "all" else tuple(s.strip() for s in show.split(",") if s.strip())
    unknown = [s for s in wanted if s not in COMPILE_ARTIFACTS]
    if unknown:
        raise UsageError(f"--show: unknown artifact {unknown[0]!r} (known: {', '.join(COMPILE_ARTIFACTS)}, all)")
    from cagtool.report.ranks.analysis import lowest_rank

    run = load_run(run_path, strict=strict)
    # A multi-process job's compiles are its ranks' records (the launcher's compiles nothing): rank 0's by default.
    record = run.mode(mode, rank=rank if rank is not None else lowest_rank(run))
    detail = find_detail(record, compile_id)
    if fmt == TextOrJson.json:
        print(json.dumps(detail_json(record, detail, wanted), indent=2))
        return
    from cagtool.report.text.safe_text import safe_text

    print(safe_text(DetailRenderer(wanted).render(record, detail)), end="")


def register(app: typer.Typer) -> None:
    app.command("compile")(compile_command)
