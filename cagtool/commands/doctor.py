"""`cagtool doctor`: can this machine record compiled autograd? One line per check."""

from __future__ import annotations

import json

import typer

from cagtool.commands._common import TextOrJson
from cagtool.errors import EXIT_GATE_FAILED, EXIT_OK


def doctor_command(
    format: TextOrJson = typer.Option(TextOrJson.text, "--format", help="text (one line per check) or json."),
) -> None:
    """Check this machine in seconds: torch and compiled autograd, a C++ compiler, a tiny capture, the runs directory.

    \b
      python        the interpreter cagtool runs under
      torch         version, and the private compiled-autograd entry points cagtool wraps
      c++ compiler  the one Inductor would use (its own search, else $CXX / g++ on PATH),
                    and that it compiles a small C++17 file
      ca capture    a tiny real compiled-autograd backward (eager backend): its cache-miss
                    messages must still parse with cagtool's parser
      runs dir      where `cagtool run` writes (./.cagtool/runs), writable, free space

    Exit codes: 0 every check passed (warnings allowed); 1 a check failed.
    JSON (`--format json`): {"format": "cagtool-doctor", "version": 1, "ok", "checks": [{name, status, detail, seconds, facts}]}.
    """
    from cagtool.doctor import FAIL, WARN, run_checks

    report = run_checks()
    if format is TextOrJson.json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        label = {FAIL: "FAIL", WARN: "warn"}
        width = max(len(c.name) for c in report.checks)
        for check in report.checks:
            typer.echo(f"{label.get(check.status, 'ok'):4}  {check.name:<{width}}  {check.detail}")
        failed = sum(c.status == FAIL for c in report.checks)
        verdict = "all checks passed" if not failed else f"{failed} check{'s' if failed > 1 else ''} failed"
        typer.echo(f"{verdict} ({report.seconds:.1f} s)")
    raise typer.Exit(EXIT_OK if report.ok else EXIT_GATE_FAILED)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_command)
