"""cagtool's command line: parses arguments, calls one function, maps errors to exit codes."""

from __future__ import annotations

import errno
import inspect
import os
import sys
import traceback
from functools import cache
from typing import Any

import typer
import typer.core

from cagtool.errors import EXIT_INTERNAL, EXIT_UNREADABLE, EXIT_USAGE, CagtoolError

# Each command's module under cagtool/commands/, in the order `cagtool --help` lists them. A
# module is imported, and its command built by typer, only when that command is looked up (click's
# documented lazy loading: the group's `list_commands` names them, `get_command` builds one), so
# `cagtool runs` imports the `runs` module alone. `cagtool --help` lists every command's first
# help line, so it builds them all.
_COMMAND_MODULES = {
    "run": "run",
    "summary": "summary",
    "runs": "runs",
    "compare": "compare",
    "recompiles": "recompiles",
    "diff-graphs": "diff_graphs",
    "compile": "compile_detail",
    "gate": "gate",
    "report": "report",
    "export": "export",
    "doctor": "doctor",
    "import": "import_trace",
    "merge": "merge",
    "baseline": "baseline",
    "checkpointing": "checkpointing",
}


class _LazyGroup(typer.core.TyperGroup):
    """cagtool's root group: typer's, with its commands built when looked up."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(_COMMAND_MODULES)

    def get_command(self, ctx: Any, name: str) -> Any:
        return _build_command(name) if name in _COMMAND_MODULES else None


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
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    cls=_LazyGroup,
)

_state = {"debug": False}

DEBUG_HELP = "Show full tracebacks for errors (before or after the command name: `cagtool --debug summary RUN`, `cagtool summary RUN --debug`)."


def version_line() -> str:
    """`cagtool --version`: cagtool's version and torch's, both from the installed packages'
    metadata: reading torch's costs a few files, importing it a second of CPU."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    from cagtool import __version__

    torch = installed("torch")
    return f"cagtool {installed('cagtool') or __version__} (torch {torch or 'not installed'})"


def _print_version(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help=DEBUG_HELP),
    _version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version, help="Print cagtool's version and torch's, and exit."),
) -> None:
    _state["debug"] = debug


def _debug_flag(value: bool) -> bool:
    if value:
        _state["debug"] = True
    return value


@cache
def _debug_param() -> Any:
    """The `--debug` option each command carries, as typer itself builds an option (its public API:
    a one-command app, then `typer.main.get_command`), so that it is made right by whichever typer
    is installed (typer 0.29.2's TyperOption takes arguments 0.28's did not)."""
    holder = typer.Typer(add_completion=False)

    @holder.command()
    def command(debug: bool = typer.Option(False, "--debug", is_eager=True, callback=_debug_flag,
                                           help="Show full tracebacks for errors (also accepted before the command name).")) -> None:
        """Only here to build the option."""

    param = next(p for p in typer.main.get_command(holder).params if "--debug" in getattr(p, "opts", ()))
    param.expose_value = False  # no command function takes it: the callback sets the root's flag
    return param


def _add_debug_option(command: Any) -> None:
    """`--debug` on every command too, so it may follow the command's own arguments (where a user
    adds it to a command that just failed). A click option of the command that sets the root's
    flag: no command function takes it. On `run` it counts before SCRIPT only: everything after
    SCRIPT is the script's (run's parser stops at its first argument)."""
    for sub in getattr(command, "commands", {}).values():  # a group's (`baseline`): the group's own and each one's
        _add_debug_option(sub)
    if any("--debug" in getattr(param, "opts", ()) for param in command.params):
        return
    command.params.append(_debug_param())


@cache
def _build_command(name: str) -> Any:
    """The click command `name`, built by typer from its module's `register`, with the same help
    settings as the root app."""
    # __import__ rather than importlib.import_module: `python -X importtime` only reports the former.
    module = __import__(f"cagtool.commands.{_COMMAND_MODULES[name]}", fromlist=["register"])
    holder = typer.Typer(rich_markup_mode=None, add_completion=False)
    module.register(holder)
    # typer gives a one-command app as that command, and an app holding a group (`baseline`) as a
    # group around it.
    built = typer.main.get_command(holder)
    command = built if built.name == name else getattr(built, "commands", {}).get(name)
    if command is None or (command is not built and list(built.commands) != [name]):
        raise RuntimeError(f"cagtool.commands.{_COMMAND_MODULES[name]} did not register exactly {name!r}")
    _keep_example_blocks(command)
    _add_debug_option(command)
    return command


def _keep_example_blocks(command: Any) -> None:
    """Help whose indented paragraphs (examples, commands to copy) click prints verbatim: a `\\b`
    line before a paragraph stops click from re-wrapping it."""
    if command.help:
        paragraphs = inspect.cleandoc(command.help).split("\n\n")
        command.help = "\n\n".join(f"\b\n{p}" if p[:1].isspace() else p for p in paragraphs)
    for sub in getattr(command, "commands", {}).values():
        _keep_example_blocks(sub)


# A write the machine refused: exit 2, as an output directory that is not writable (README).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG})


def _debug_requested(args: list[str]) -> bool:
    """--debug before the command name, read from argv before click parses it. After the command name it is the command's own option (`_add_debug_option`),
    except after `run`'s SCRIPT: `cagtool run train.py --debug` passes --debug to the script."""
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
    """stdout and stderr both: `cagtool run train.py 2>&1 >/dev/null | head -1` keeps running every
    mode after its reader of the progress lines has gone."""
    if not isinstance(sys.stdout, _ClosedPipeSafe) and sys.stdout is not None:
        sys.stdout = _ClosedPipeSafe(sys.stdout)
    if not isinstance(sys.stderr, _ClosedPipeSafe) and sys.stderr is not None:
        sys.stderr = _ClosedPipeSafe(sys.stderr)


def _shown(line: str) -> str:
    """An error is one line, and it may quote record text: shown as a report shows a field within a
    line, so a record's data cannot start a line of its own (a forged `::error` in a CI log).
    Imported only here, so `--help` loads nothing from report/."""
    from cagtool.report.text.safe_text import safe_line

    return safe_line(line)


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Exits with the documented code."""
    args = sys.argv[1:] if argv is None else argv
    _state["debug"] = _debug_requested(args)  # `--debug` after the command name is the command's option: it sets this too
    stdout, stderr = sys.stdout, sys.stderr
    _survive_closed_stdout()
    try:
        app(args=args, prog_name="cagtool", standalone_mode=True)
    except SystemExit as exc:
        if exc.code == 130 and isinstance(getattr(exc.__context__, "__cause__", None), KeyboardInterrupt):
            # typer turns Ctrl-C in a command into a silent exit 130: said, as every other end is.
            print("cagtool: interrupted", file=sys.stderr)
        raise
    except CagtoolError as exc:
        if _state["debug"]:
            traceback.print_exc()
        print(_shown(f"cagtool: error: {exc}"), file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("cagtool: interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as exc:  # the machine's answer (a full disk, a permission) no command worded: still one line, with the path
        if _state["debug"]:
            traceback.print_exc()
        where = f": {exc.filename}" if exc.filename else ""
        print(_shown(f"cagtool: error: {exc.strerror or exc}{where}"), file=sys.stderr)
        sys.exit(EXIT_USAGE if exc.errno in _WRITE_ERRNOS else EXIT_UNREADABLE)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if _state["debug"]:
            traceback.print_exc()
        print(_shown(f"cagtool: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"), file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    finally:
        if isinstance(sys.stdout, _ClosedPipeSafe):
            sys.stdout.flush()  # a reader that left during the last lines is noticed here, quietly
            sys.stdout = stdout
        if isinstance(sys.stderr, _ClosedPipeSafe):
            sys.stderr.flush()
            sys.stderr = stderr


# Commands that only read records and write to stdout/stderr. Once one has returned and its output
# is flushed, all the interpreter's teardown has left to do is free the heap object by object and
# run atexit handlers no such command registers: 20-30 ms of CPU for `cagtool runs`, more after a
# diff of two large graphs (each of these commands has a whole-process time target).
# Commands that write files, start processes or import torch (run, report, gate, baseline,
# export, doctor, import) exit the usual way.
_READ_ONLY_COMMANDS = frozenset({"runs", "summary", "recompiles", "diff-graphs", "compare"})


def _command_name(args: list[str]) -> str | None:
    """The command in argv: the first argument that is not one of cagtool's own options (None for
    `cagtool`, `cagtool --help`)."""
    for arg in args:
        if not arg.startswith("-"):
            return arg
    return None


def _exit_code(exc: SystemExit) -> int | None:
    """What the interpreter would exit with for this SystemExit, when it is a plain number."""
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else None


def console_main() -> None:
    """The `cagtool` console script and `python -m cagtool`: `main`, then, for the commands in
    `_READ_ONLY_COMMANDS` and the root help, an immediate exit once stdout and stderr are
    flushed. `main` itself always returns or raises (tests and the API call it in-process)."""
    args = sys.argv[1:]
    name = _command_name(args)
    root_help = name is None and set(args) <= {"--help", "-h", "--debug"}
    if name not in _READ_ONLY_COMMANDS and not root_help:
        main(args)
        return
    # numpy's OpenBLAS starts a thread per core when numpy is imported; a report's arrays are a
    # few thousand numbers, which one thread sorts as fast, and starting the pool costs more CPU
    # than the sorting (`import numpy`: 0.19 -> 0.15 s CPU on the 2-core VM, more with more
    # cores; `summary` of 3 x 20,000 steps: 0.49 -> 0.46 s, medians of 11 interleaved runs at
    # load 8, 2026-11-26).
    # These commands start no process, so the setting reaches nothing else; a user's own
    # setting is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        main(args)
        code: int | None = 0
    except SystemExit as exc:
        code = _exit_code(exc)
        if code is None:
            raise
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # a reader gone mid-flush: the usual exit reports it as Python does
        sys.exit(code)
    os._exit(code)
