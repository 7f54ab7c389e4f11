"""cagtool's command line: parses arguments, calls one function, maps errors to exit codes."""

from __future__ import annotations

import copy
import inspect
import os
import sys
import traceback
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
import typer.core
import typer.main

from cagtool.errors import EXIT_INTERNAL, EXIT_UNREADABLE, CagtoolError

# Each command's module under cagtool/commands/, in the order `cagtool --help` lists them (typer
# lists a group, `baseline`, after the plain commands). A module is imported, and its command
# built by typer, only when that command is looked up: `cagtool runs` pays for `runs` alone, not
# for twelve modules and typer's reading of twelve signatures (~30 ms of a 0.15 s target).
# `cagtool --help` lists every command's first help line, so it still imports them all.
_COMMAND_MODULES = {
    "run": "run",
    "summary": "summary",
    "runs": "runs",
    "compare": "compare",
    "recompiles": "recompiles",
    "diff-graphs": "diff_graphs",
    "gate": "gate",
    "report": "report",
    "export": "export",
    "doctor": "doctor",
    "import": "import_trace",
    "merge": "merge",
    "baseline": "baseline",
}


class _CommandsOnDemand(MutableMapping[str, Any]):
    """The root group's `commands`: every name is there from the start (usage errors suggest
    them), the click command is built the first time its name is looked up."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}
        # True while the root help lists the commands: a command not built yet is then built
        # without its parameters and not kept (see _build_command's `listing`).
        self.listing = False

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in _COMMAND_MODULES:
                raise KeyError(name)
            if self.listing:
                return _build_command(name, listing=True)
            self._built[name] = _build_command(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("cagtool's commands are fixed")

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*_COMMAND_MODULES, *self._built]))

    def __len__(self) -> int:
        return len(set(_COMMAND_MODULES) | set(self._built))


class _LazyGroup(typer.core.TyperGroup):
    """cagtool's root group: typer's, with its commands built on demand."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _CommandsOnDemand()

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names only: TyperGroup's .items() would build them all

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        self.commands.listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self.commands.listing = False


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
    cls=_LazyGroup,
)

_state = {"debug": False}


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors."),
) -> None:
    _state["debug"] = debug


def _build_command(name: str, listing: bool = False) -> Any:
    """The click command `name`, built from its module's `register` exactly as typer builds the
    commands and groups of an app registered up front (same help, options and settings). With
    `listing`, a plain command comes without its parameters: `cagtool --help` shows only each
    command's name and first help line, and typer reading the twelve signatures was ~4 ms of
    it. A group (`baseline`) is built whole either way."""
    # __import__ rather than importlib.import_module: `python -X importtime` only reports the former.
    module = __import__(f"cagtool.commands.{_COMMAND_MODULES[name]}", fromlist=["register"])
    holder = typer.Typer(rich_markup_mode=None)
    module.register(holder)
    _plain_help(holder)
    built = [
        typer.main.get_command_from_info(
            _without_parameters(info) if listing else info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode
        )
        for info in holder.registered_commands
    ] + [
        typer.main.get_group_from_info(info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=app.rich_markup_mode, suggest_commands=app.suggest_commands)
        for info in holder.registered_groups
    ]
    if [command.name for command in built] != [name]:
        raise RuntimeError(f"cagtool.commands.{_COMMAND_MODULES[name]} registered {[c.name for c in built]}, not {name!r}")
    return built[0]


def _without_parameters(info: Any) -> Any:
    """A copy of typer's CommandInfo `info` whose callback takes nothing: the command typer builds
    from it has the same name, help and settings, and no parameters to read."""
    callback = info.callback

    def nothing() -> None:
        raise RuntimeError(f"cagtool: {callback.__name__} was built for the command list only")

    nothing.__name__ = callback.__name__  # typer names a command without `name` after its callback
    light = copy.copy(info)
    light.callback = nothing
    light.help = info.help if info.help is not None else inspect.getdoc(callback)
    return light


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


def _shown(line: str) -> str:
    """An error line may quote record text: shown as the reports show it (imported only here, so
    `--help` loads nothing from report/)."""
    from cagtool.report.safe_text import safe_text

    return safe_text(line)


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
        print(_shown(f"cagtool: error: {exc}"), file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("cagtool: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if debug:
            traceback.print_exc()
        print(_shown(f"cagtool: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"), file=sys.stderr)
        sys.exit(EXIT_UNREADABLE if isinstance(exc, OSError) else EXIT_INTERNAL)
    finally:
        if isinstance(sys.stdout, _ClosedPipeSafe):
            sys.stdout.flush()  # a reader that left during the last lines is noticed here, quietly
            sys.stdout = stdout


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
