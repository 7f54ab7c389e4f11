"""Python processes started in a way cagtool cannot follow, seen as they start.

A `sys.addaudithook` in every followed process sees `subprocess.Popen`, `os.exec*`,
`os.posix_spawn` and `os.system`. A launch of a Python interpreter (or of a console script whose
shebang is one) escapes following when its environment lacks cagtool's bootstrap entry on
PYTHONPATH (an explicit `env=` without it), or when interpreter flags skip it (`-I`, `-E`, `-S`).
Each such launch is reported once, with what was started, why, and how to fix it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

_PYTHON_NAME = re.compile(r"^(python|pypy)[\d.]*m?$")
_EVENTS = frozenset({"subprocess.Popen", "os.exec", "os.posix_spawn", "os.system"})
# torch's own helper interpreters: not the user's training, not followed on purpose.
_TORCH_HELPERS = ("torch._inductor.compile_worker", os.path.join("_inductor", "compile_worker"))
# Launches made by torch's compiler stack (Inductor checks that a compiled kernel loads in a fresh
# `python -c` with an env of its own; Triton does similar): the compiler's business, not the job's.
_COMPILER_DIRS = (f"{os.sep}torch{os.sep}_inductor{os.sep}", f"{os.sep}triton{os.sep}", f"{os.sep}cagtool{os.sep}capture{os.sep}")
_STDLIB = os.path.dirname(os.path.realpath(os.__file__)) + os.sep


@dataclass(frozen=True)
class UnfollowedLaunch:
    argv: list[str]
    executable: str
    reason: str
    fix: str

    def message(self) -> str:
        shown = shlex.join(_short(a) for a in self.argv)
        if len(shown) > 300:
            shown = shown[:297] + "..."
        return (
            f"a Python process was started that cagtool cannot follow: `{shown}`: {self.reason}. "
            f"It runs without the mode's setup and leaves no record. Fix: {self.fix}"
        )


def _short(arg: str) -> str:
    """One line of a long argument (a `-c` program), for a message."""
    first = arg.strip().splitlines()[0] if arg.strip() else arg
    return first if len(first) <= 80 and first == arg else first[:77] + "..."


def started_by_compiler(frame: Any) -> bool:
    """Whether the code that made this launch (the first frame from `frame` outwards that is
    outside the standard library) belongs to torch's compiler stack or to cagtool."""
    while frame is not None:
        filename = os.path.realpath(frame.f_code.co_filename) if not frame.f_code.co_filename.startswith("<") else ""
        in_stdlib = filename.startswith(_STDLIB) and "-packages" + os.sep not in filename
        if filename and not in_stdlib:
            return any(part in filename for part in _COMPILER_DIRS)
        frame = frame.f_back
    return False


def _interpreter_flags(argv: Sequence[str]) -> set[str]:
    """The single-letter options given to python before the script / -c / -m."""
    flags: set[str] = set()
    for arg in argv[1:]:
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            continue
        letters = arg[1:]
        for index, letter in enumerate(letters):
            flags.add(letter)
            if letter in "cmWXQ":  # takes a value (rest of this arg or the next): stop here
                return flags
    return flags


def _shebang(path: str) -> list[str] | None:
    """`#!/.../python3 -I` -> ["/.../python3", "-I"]; None when the file does not start a Python."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    parts = first[2:].decode("utf-8", "replace").split()
    if parts and os.path.basename(parts[0]) == "env":
        parts = parts[1:]
    if parts and _PYTHON_NAME.match(os.path.basename(parts[0])):
        return parts
    return None


def _python_argv(program: str, argv: Sequence[str], env: Mapping[str, str]) -> list[str] | None:
    """The interpreter's own argv when this launch starts Python (directly or through a console
    script's shebang), else None."""
    name = os.path.basename(program)
    if _PYTHON_NAME.match(name) or os.path.realpath(program) == os.path.realpath(sys.executable):
        return list(argv)
    path = program if os.sep in program else shutil.which(program, path=env.get("PATH"))
    if path and os.path.isfile(path):
        shebang = _shebang(path)
        if shebang is not None:
            return [*shebang, path, *argv[1:]]
    return None


def check_launch(program: str, argv: Sequence[str], env: Mapping[str, str] | None, bootstrap_dir: str, follow_env: str) -> UnfollowedLaunch | None:
    """Why this launch escapes following, or None (not Python, or it will be followed)."""
    environment = os.environ if env is None else env
    argv = [os.fsdecode(a) for a in argv]
    program = os.fsdecode(program) if program else (argv[0] if argv else "")
    if any(helper in " ".join(argv) for helper in _TORCH_HELPERS):
        return None
    python_argv = _python_argv(program, argv, environment)
    if python_argv is None:
        return None
    flags = _interpreter_flags(python_argv)
    shown = argv or [program]
    for flag, what in (("I", "isolated mode (-I) ignores PYTHONPATH and skips sitecustomize"),
                       ("E", "-E ignores PYTHONPATH"),
                       ("S", "-S skips the site module, so sitecustomize never runs")):
        if flag in flags:
            return UnfollowedLaunch(shown, program, what, f"start it without -{flag} (cagtool follows children through sitecustomize on PYTHONPATH)")
    entries = [os.path.abspath(p) for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p]
    if not any(_is_bootstrap(entry, bootstrap_dir) for entry in entries) or follow_env not in environment:
        reason = "its environment lacks cagtool's bootstrap entry on PYTHONPATH" + (" (env= was given without it)" if env is not None else "")
        return UnfollowedLaunch(
            shown, program, reason,
            "build the child's environment from the parent's (env={**os.environ, ...}), keeping PYTHONPATH and CAGTOOL_FOLLOW",
        )
    return None


_BOOTSTRAP_TAIL = os.path.join("cagtool", "capture", "processes", "bootstrap")


def _is_bootstrap(entry: str, bootstrap_dir: str) -> bool:
    """This PYTHONPATH entry is cagtool's bootstrap: this copy's, or another copy's (the parent put its
    own copy's there; a process whose sys.path finds a second copy of cagtool, e.g. an editable
    install in the launcher's environment, checks with that copy's path). Either follows the child."""
    if entry == os.path.abspath(bootstrap_dir):
        return True
    return entry.endswith(os.sep + _BOOTSTRAP_TAIL) and os.path.isfile(os.path.join(entry, "sitecustomize.py"))


def _launch_of(event: str, args: tuple[Any, ...]) -> tuple[str, Sequence[str], Mapping[str, str] | None] | None:
    if event == "subprocess.Popen":
        executable, argv, _cwd, env = args
        if isinstance(argv, (str, bytes)):
            argv = [argv]
        return os.fsdecode(executable) if executable else "", list(argv), env
    if event == "os.exec":
        path, argv, env = args
        return os.fsdecode(path), list(argv), env
    if event == "os.posix_spawn":
        path, argv, env = args
        return os.fsdecode(path), list(argv), env
    if event == "os.system":
        return "/bin/sh", ["/bin/sh", "-c", os.fsdecode(args[0])], None
    return None


def _shell_commands(program: str, argv: Sequence[str]) -> list[list[str]] | None:
    """`sh -c "python -I x.py && ..."`: the simple commands of the shell line (best effort)."""
    if os.path.basename(program) not in ("sh", "bash", "dash", "zsh") or len(argv) < 3 or argv[1] != "-c":
        return None
    try:
        tokens = shlex.split(argv[2])
    except ValueError:
        return []
    commands, current = [], []
    for token in tokens:
        if token in ("&&", "||", ";", "|", "&"):
            commands.append(current)
            current = []
        elif not current and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", token):
            continue  # VAR=value prefix
        else:
            current.append(token)
    commands.append(current)
    return [c for c in commands if c]


def install(report: Callable[[UnfollowedLaunch], None], bootstrap_dir: str, follow_env: str) -> None:
    """Audit every launch in this process for the rest of its life (audit hooks cannot be removed)."""
    seen: set[tuple[str, ...]] = set()
    # The hook is called for every audit event until the process ends, also while the interpreter
    # clears the modules' globals at exit (a finalizer calling id() then is an event): what its first
    # test reads is held here, and the rest runs under its `try`.
    events = _EVENTS

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in events:
            return
        try:
            launch = _launch_of(event, args)
            if launch is None:
                return
            program, argv, env = launch
            if started_by_compiler(sys._getframe(1)):
                return
            commands = _shell_commands(program, argv)
            candidates = [(c[0], c, env) for c in commands] if commands is not None else [(program, argv, env)]
            for cand_program, cand_argv, cand_env in candidates:
                found = check_launch(cand_program, cand_argv, cand_env, bootstrap_dir, follow_env)
                if found is not None and tuple(found.argv) not in seen:
                    seen.add(tuple(found.argv))
                    report(found)
        except Exception:  # noqa: BLE001 - the user's launch must go on whatever happens here
            pass

    sys.addaudithook(hook)
