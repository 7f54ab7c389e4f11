"""cagtool's command line: parses arguments, calls one function, maps errors to exit codes."""

from __future__ import annotations

import inspect
import os
import sys
import traceback
from typing import Any

import typer

from cagtool.errors import EXIT_INTERNAL, EXIT_UNREADABLE, CagtoolError

app = typer.Typer(
    name="cagtool",
    help=(
        "Profile and diagnose PyTorch compiled autograd.\n\n"
        "Start with `cagtool run train.py`, then `cagtool summary`, `cagtool recompiles --explain`, "
        "`cagtool diff-graphs` and `cagtool gate`. Exit codes: 0 ok; 1 gate failed, graphs differ, "
        "or the target's own non-zero code on `run`; 2 usage error; 3 unreadable input; 4 internal error (a bug)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain (click) help: no rich markup to eat `[tool.cagtool.gate]`, no boxed table that cuts
    # option names or adds a `<bool>` metavar on flags, nothing wrapped mid-word in a CI log.
    # It is also fast: typer's rich help cost ~0.15 s of imports and layout per `--help`.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False}


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors."),
) -> None:
    _state["debug"] = debug


def _register_commands() -> None:
    from cagtool.commands import baseline, compare, diff_graphs, doctor, export, gate, recompiles, report, run, runs, summary

    for module in (run, summary, runs, compare, recompiles, diff_graphs, gate, baseline, report, export, doctor):
        module.register(app)
    from cagtool.commands import import_trace

    import_trace.register(app)


def _keep_example_blocks(text: str) -> str:
    """Help text whose indented paragraphs (examples, commands to copy) click prints verbatim:
    a `\\b` line before a paragraph stops click from re-wrapping it."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(f"\b\n{p}" if p[:1].isspace() else p for p in paragraphs)


def _plain_help(app_: typer.Typer) -> None:
    for info in app_.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if doc:
            info.help = _keep_example_blocks(doc)
    for group in app_.registered_groups:
        if group.typer_instance is not None:
            group.typer_instance.rich_markup_mode = None
            _plain_help(group.typer_instance)


_register_commands()
_plain_help(app)


def _debug_requested(args: list[str]) -> bool:
    """--debug is cagtool's own option only before the command name: `cagtool run train.py
    --debug` passes --debug to the script."""
    for arg in args:
        if arg == "--debug":
            return True
        if not arg.startswith("-"):
            return False
    return False


class _ClosedPipeSafe:
    """sys.stdout that stops writing, silently, once the reader has gone (`cagtool summary | head -1`):
    the command finishes and exits with the code it would have had, as if all was written."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._closed = False

    def _reader_gone(self) -> None:
        self._closed = True
        try:  # later writes and the interpreter's final flush go nowhere, quietly
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if not self._closed:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self._closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _survive_closed_stdout() -> None:
    if not isinstance(sys.stdout, _ClosedPipeSafe) and sys.stdout is not None:
        sys.stdout = _ClosedPipeSafe(sys.stdout)


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Exits with the documented code."""
    args = sys.argv[1:] if argv is None else argv
    debug = _debug_requested(args)
    stdout = sys.stdout
    _survive_closed_stdout()
    try:
        app(args=args, prog_name="cagtool", standalone_mode=True)
    except SystemExit:
        raise
    except CagtoolError as exc:
        if debug:
            traceback.print_exc()
        print(f"cagtool: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("cagtool: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if debug:
            traceback.print_exc()
        print(f"cagtool: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", file=sys.stderr)
        sys.exit(EXIT_UNREADABLE if isinstance(exc, OSError) else EXIT_INTERNAL)
    finally:
        if isinstance(sys.stdout, _ClosedPipeSafe):
            sys.stdout.flush()  # a reader that left during the last lines is noticed here, quietly
            sys.stdout = stdout
