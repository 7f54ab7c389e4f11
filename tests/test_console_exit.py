"""The console script's quick exit (cli.console_main): the read-only commands leave without the
interpreter's teardown once their output is flushed. What a user sees must not change: the same
stdout, stderr and exit code as `main` in-process, nothing lost when the output is a pipe, and
the other commands still exit the usual way."""

from __future__ import annotations

import subprocess

import pytest

import os

from conftest import ROOT, cagtool_cmd
from conftest import cli_in_process as cagtool


def _console(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m cagtool ARGS` (the console script's code path) in the environment the in-process
    helper gives `main`: CI, no COLUMNS or GitHub variables unless asked for."""
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    return subprocess.run(cagtool_cmd(*args), capture_output=True, text=True, cwd=ROOT, env={**base, "CI": "true", **(env or {})}, timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        ("summary", "{run}"),
        ("recompiles", "{run}", "--explain"),
        ("recompiles", "{run}", "--format", "json"),
        ("diff-graphs", "{run}", "0", "1"),
        ("compare", "{run}", "{run}"),
        ("runs", "{runs}"),
        ("recompiles", "{runs}/missing", "--explain"),  # exit 3, one line
        ("--help",),
    ],
)
def test_console_script_prints_and_exits_as_main_does(record_run, args):
    run = record_run("shape_loop.py")
    assert run.returncode == 0, run.stderr
    argv = [a.format(run=run.path, runs=run.path.parent) for a in args]
    code, out, err = cagtool(*argv)
    proc = _console(*argv)
    assert (proc.returncode, proc.stdout, proc.stderr) == (code, out, err)
    assert out or err  # each case prints something: a comparison of two empty outputs proves nothing


def test_quick_exit_codes_and_large_output_through_a_pipe(record_run):
    """diff-graphs exits 1 when the graphs differ, after all of a long side-by-side diff reached
    the pipe (os._exit drops anything still buffered, so the flush must come first)."""
    run = record_run("shape_loop.py")
    proc = _console("diff-graphs", str(run.path), "0", "1", "--format", "unified", env={"COLUMNS": "60"})
    code, out, _ = cagtool("diff-graphs", str(run.path), "0", "1", "--format", "unified", env={"COLUMNS": "60"})
    assert proc.returncode == code == 1
    assert proc.stdout == out and out.count("\n") > 10


def test_commands_that_write_exit_the_usual_way():
    """Only read-only commands and the root help take the quick exit (a command writing files or
    running processes keeps the interpreter's teardown: atexit handlers, unclosed files flushed)."""
    from cagtool import cli

    assert cli._READ_ONLY_COMMANDS == {"runs", "summary", "recompiles", "diff-graphs", "compare"}
    assert cli._command_name(["--debug", "run", "train.py"]) == "run"
    assert cli._command_name(["--help"]) is None
