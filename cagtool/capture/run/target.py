"""The user's program: checked before anything starts, then run exactly as `python` would."""

from __future__ import annotations

import ast
import atexit
import contextlib
import os
import re
import shutil
import sys
import traceback
from dataclasses import asdict, dataclass, field
from importlib.machinery import ModuleSpec, SourceFileLoader
from types import CodeType
from typing import Any, Iterator

from cagtool.capture.job_traceback import leave_out_our_frames
from cagtool.capture.run.main_module import ModuleNotRunnable, is_bytecode_alone, main_spec, module_source, package_specs
from cagtool.errors import UsageError
from cagtool.record.target_name import target_label


@dataclass(frozen=True)
class Target:
    kind: str  # "script" | "module"
    name: str  # the script path as given, or the module name
    args: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return target_label(self.kind, self.name, self.args)

    def to_dict(self) -> dict[str, str]:
        data = asdict(self)
        data.pop("args")
        return data


def check_target(script: str | None, module: str | None, args: list[str]) -> Target:
    """Fail fast, with one clear line, on a script that is missing or is not valid Python, or a
    module that cannot be found."""
    if script and module:
        raise UsageError("give a script or -m MODULE, not both")
    if module:
        _check_module(module)
        return Target("module", module, list(args))
    if not script:
        raise UsageError("no script given: cagtool run train.py [ARGS...]  or  cagtool run -m package.module [ARGS...]")
    if not os.path.exists(script):
        console = _console_script(script)
        if console is not None:
            return Target(console.kind, console.name, list(args))
        raise UsageError(f"script not found: {script}")
    if os.path.isdir(script):
        raise UsageError(f"{script} is a directory; give a .py file, or -m for a package with __main__")
    try:
        with open(script, "rb") as handle:
            ast.parse(handle.read(), filename=script)
    except SyntaxError as exc:
        raise UsageError(f"{script} is not valid Python: {exc.msg} (line {exc.lineno})") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {script}: {exc}") from None
    return Target("script", script, list(args))


# Console scripts whose module runs the same entry point under `python -m` (torchrun's does).
_CONSOLE_MODULES = {"torch.distributed.run": "main"}
_ENTRY = re.compile(r"^from\s+([\w.]+)\s+import\s+(\w+)\s*$", re.MULTILINE)


def _console_script(name: str) -> Target | None:
    """`torchrun` and other console scripts beside this interpreter (or on PATH): torchrun as
    `-m torch.distributed.run`, any other Python console script as the script file itself."""
    if os.sep in name:
        return None
    path = shutil.which(name, path=os.path.dirname(sys.executable)) or shutil.which(name)
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            text = handle.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    if not text.startswith("#!") or "python" not in text.splitlines()[0]:
        return None
    entry = _ENTRY.search(text)
    if entry and _CONSOLE_MODULES.get(entry.group(1)) == entry.group(2):
        return Target("module", entry.group(1))
    return Target("script", path)


@contextlib.contextmanager
def _cwd_first() -> Iterator[None]:
    """sys.path as `python -m` has it while the module is found: the current directory first
    (none under -P, PYTHONSAFEPATH)."""
    added = os.getcwd() not in sys.path and not getattr(sys.flags, "safe_path", False)
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        yield
    finally:
        if added:
            sys.path.remove(os.getcwd())


def _found_module(module: str) -> ModuleSpec:
    """The spec `python -m module` would run, found in cagtool's own process without importing
    any of the job's packages (main_module.py); where that finds nothing (a package whose
    `__init__` extends its `__path__`), found by importing its packages, as python does."""
    with _cwd_first():
        try:
            return main_spec(module, import_parents=False)
        except ModuleNotRunnable:
            return main_spec(module, import_parents=True)


def _check_module(module: str) -> None:
    try:
        spec = _found_module(module)
    except SyntaxError as exc:  # a parent package's __init__ does not parse (found by importing it)
        raise UsageError(f"{exc.filename} is not valid Python: {exc.msg} (line {exc.lineno})") from None
    except ModuleNotRunnable as exc:
        said = str(exc)
        if said.startswith("No module named ") and said.endswith("is a package and cannot be directly executed"):
            raise UsageError(f"{module} is a package without __main__; give its module, e.g. -m {module}.train") from None
        if said.startswith(("No module named ", "Error while finding", "Relative module names")):
            raise UsageError(f"module not found: {module} ({said})") from None
        raise UsageError(f"-m {module}: {said}") from None
    except (ImportError, ValueError) as exc:
        raise UsageError(f"module not found: {module} ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - a package's __init__ raised while it was imported to find the module
        raise UsageError(f"-m {module}: its package raised {type(exc).__name__} while it was imported: {exc}") from None
    if is_bytecode_alone(spec):
        return  # python -m runs it; its code is checked as it loads
    try:
        source = module_source(spec)
    except ModuleNotRunnable as exc:
        raise UsageError(f"-m {module}: {exc}") from None
    except (ImportError, OSError) as exc:
        raise UsageError(f"cannot read {spec.origin}: {exc}") from None
    # Like a script: a module (or one of its packages' __init__) that is not valid Python fails
    # here, with one line and no record.
    with _cwd_first():
        packages = package_specs(spec.name)
    for found, text in [*((p, _package_source(p)) for p in packages), (spec, source)]:
        if text is None:
            continue
        try:
            ast.parse(text, filename=found.origin or found.name)
        except SyntaxError as exc:
            raise UsageError(f"{found.origin or found.name} is not valid Python: {exc.msg} (line {exc.lineno})") from None
        except ValueError as exc:
            raise UsageError(f"cannot read {found.origin or found.name}: {exc}") from None


def _package_source(spec: ModuleSpec) -> bytes | str | None:
    """A package's `__init__` source, or None (a namespace package has none)."""
    try:
        return module_source(spec) if spec.loader is not None and spec.origin else None
    except (ModuleNotRunnable, OSError):
        return None


def module_file(target: Target) -> str | None:
    """The file `python -m` runs for a module target (found as check_target found it), else None."""
    if target.kind != "module":
        return None
    try:
        spec = _found_module(target.name)
    except Exception:  # noqa: BLE001 - check_target said why; a file not found here is not sealed
        return None
    return spec.origin if spec.origin and os.path.isfile(spec.origin) else None


# `recompiles --verify` runs a patched copy of the script in its place: the copy's code, with
# everything else the script's own (sys.argv, sys.path[0], __file__, cwd), so the patched job
# imports and finds its files as the script does. Both names are needed: a process the job
# starts inherits the environment, and runs its own script unless it is the one patched.
PATCH_TARGET_ENV = "CAGTOOL_PATCH_TARGET"  # realpath of the script the copy stands in for
PATCHED_SOURCE_ENV = "CAGTOOL_PATCHED_SOURCE"  # the patched copy
# `--verify` checked the code its re-runs run (the script or a `-m` module's file against its seal,
# or the copy it wrote), but a re-run reads it later, by path: a file swapped meanwhile (the copy
# under a run directory others can write, the script in a shared folder) must not run in its place.
# "<sha256> <script's absolute path>": the code run for that script must have that digest;
# "<sha256> -m <module> <file's absolute path>": `-m module` must find that file, with that digest.
SOURCE_DIGEST_ENV = "CAGTOOL_SOURCE_DIGEST"
_MODULE_MARK = "-m "


class SourceChanged(Exception):
    """The code `--verify` checked is not what its re-run found: nothing of it was run."""


def source_digest(target_kind: str, target_name: str, digest: str, path: str) -> str:
    """SOURCE_DIGEST_ENV's value: the code run for the target (a script, or a module found at
    `path`) must have the SHA-256 `digest`."""
    return f"{digest} {_MODULE_MARK}{target_name} {path}" if target_kind == "module" else f"{digest} {path}"


def checked_digest(target: Target) -> tuple[str, str] | None:
    """(SHA-256, absolute path) of the code run for `target`, when `--verify` checked it: the
    script itself, or the file a module was found at."""
    digest, _, named = os.environ.get(SOURCE_DIGEST_ENV, "").partition(" ")
    if not digest:
        return None
    if target.kind == "module":
        module, _, path = named[len(_MODULE_MARK):].partition(" ") if named.startswith(_MODULE_MARK) else ("", "", "")
        return (digest, path) if module == target.name and path else None
    return (digest, named) if named == os.path.abspath(target.name) else None


def patched_source_for(target: Target) -> str | None:
    """The patched copy to run in place of `target`, when `recompiles --verify` asked for one."""
    source, script = os.environ.get(PATCHED_SOURCE_ENV), os.environ.get(PATCH_TARGET_ENV)
    if target.kind != "script" or not source or not script:
        return None
    return source if os.path.realpath(target.name) == os.path.realpath(script) and os.path.isfile(source) else None


def run_target(target: Target) -> None:
    """Run it as `python SCRIPT ARGS` / `python -m MODULE ARGS` would: one path for both, and for
    a plain run and a `--verify` re-run alike (that one also checks the code's digest, from
    SOURCE_DIGEST_ENV). What python does, and what of it this relies on: docs/reliability.md,
    "How the target runs". Exceptions propagate to the caller."""
    checked = checked_digest(target)
    digest = checked[0] if checked else None
    if target.kind == "script":
        sys.argv = [target.name, *target.args]
        _set_path0(os.path.dirname(os.path.realpath(target.name)))
        # python makes __file__ (and the code's file name) absolute without normalising it: ./a.py -> /cwd/./a.py
        path = target.name if os.path.isabs(target.name) else os.path.join(os.getcwd(), target.name)
        code_path = patched_source_for(target) or path
        with open(code_path, "rb") as handle:
            source: bytes | str = handle.read()
        code = _compiled(source, code_path, digest)
        _exec_as_main(code, {"__loader__": SourceFileLoader("__main__", path), "__file__": path, "__cached__": None})
        return
    sys.argv = ["-m", *target.args]  # what python -m leaves in sys.argv[0] while it finds the module
    _set_path0(os.getcwd())
    try:
        spec = main_spec(target.name, import_parents=True)
        if checked is not None and (spec.origin is None or os.path.abspath(spec.origin) != checked[1]):
            raise SourceChanged(f"-m {target.name} now finds {spec.origin or 'no file'}, not {checked[1]} that `recompiles --verify` checked: not run")
        source = None if checked is None and is_bytecode_alone(spec) else module_source(spec)
    except ModuleNotRunnable as exc:
        if checked is not None:
            raise SourceChanged(f"-m {target.name} now finds no file ({exc}), not {checked[1]} that `recompiles --verify` checked: not run") from None
        raise SystemExit(f"{sys.executable}: {exc}") from None  # python -m's own exit: the message, code 1
    code = spec.loader.get_code(spec.name) if source is None else _compiled(source, spec.origin or target.name, digest)
    sys.argv[0] = spec.origin
    _exec_as_main(code, {"__package__": spec.parent, "__loader__": spec.loader, "__spec__": spec,
                         "__file__": spec.origin, "__cached__": spec.cached})


def _set_path0(entry: str) -> None:
    """Put the target's entry first on sys.path, where cagtool's own process put its interpreter's
    folder (self_launch.py) and python puts the script's folder or the current one; under -P
    (PYTHONSAFEPATH) python puts none, so cagtool's entry is taken out and none put."""
    if getattr(sys.flags, "safe_path", False):
        del sys.path[0]
    else:
        sys.path[0] = entry


def _compiled(source: bytes | str, filename: str, digest: str | None) -> CodeType:
    """The code of `source`, compiled as the import system compiles a module's source. `digest`:
    the SHA-256 the bytes read must have (SourceChanged otherwise): the bytes checked are the bytes
    compiled, read once, never a cached .pyc of other bytes."""
    if digest is not None:
        import hashlib

        if not isinstance(source, bytes) or hashlib.sha256(source).hexdigest() != digest:
            raise SourceChanged(f"{filename} changed after `recompiles --verify` checked it: not run")
    return compile(source, filename, "exec", dont_inherit=True)


def _exec_as_main(code: CodeType, names: dict[str, Any]) -> None:
    """Run `code` as python runs its main module: in a fresh `__main__` module (so pickling
    classes from it works), sys.modules["__main__"] while it runs, whose namespace starts as the
    interpreter's `__main__` does (`__builtins__` the module, `__annotations__` before 3.14), with
    `names` (`__file__`, `__loader__`, ...) as python or runpy sets them."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    namespace = main.__dict__
    if sys.version_info < (3, 14):
        namespace["__annotations__"] = {}
    namespace.update({"__builtins__": builtins, "__file__": None, "__cached__": None})
    namespace.update(names)
    # Registered before the script registers its own: atexit runs handlers last-in first-out.
    atexit.register(_clear_namespace, namespace)
    previous = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, namespace)
    finally:
        if previous is not None:
            sys.modules["__main__"] = previous
        # Run first at exit, before the target's own handlers (last-in first-out).
        atexit.register(_as_python_leaves_it, main, sys.argv, sys.argv[0] if sys.argv else None)


def _as_python_leaves_it(main: Any, argv: list[str], argv0: str | None) -> None:
    """At exit, sys.argv and sys.modules["__main__"] as the target left them, as python has them
    for its atexit handlers: runpy, which ran this process's own module, puts its own argv[0] ("-c")
    back into sys.argv and its own module in sys.modules as that module ends."""
    sys.argv = argv
    if argv and argv0 is not None:
        argv[0] = argv0
    sys.modules["__main__"] = main


def _clear_namespace(namespace: dict) -> None:
    """At exit, after the script's own atexit handlers, what the interpreter does to
    sys.modules["__main__"] as it finalizes: the script's globals set to None (names with one
    leading underscore first, as _PyModule_ClearDict does). Under `python` that is what runs the
    finalizer of an object only the script's globals hold, e.g. flushes a file it never closed.
    Without this, only the cyclic collector (its functions' __globals__ make the namespace a cycle) would free
    it, and at exit that collection can be skipped: the file's buffered text was lost
    (tests/test_run_transparency.py test_exit_duties_run_as_under_python, seen under load)."""
    try:
        for first in (True, False):
            for name in list(namespace):
                if name != "__builtins__" and (name.startswith("_") and not name.startswith("__")) == first:
                    namespace[name] = None
    except Exception:  # noqa: BLE001 - a finalizer's error is the script's, printed by Python; never stop here
        pass


def print_user_traceback(exc: BaseException) -> str:
    """Print the target's exception the way python would, without cagtool's and runpy's frames.
    Where stderr cannot take it (a pipe whose reader has gone: `cagtool run train.py 2>&1 | head`),
    it goes unprinted, as python's own print of an uncaught exception does: the caller records the
    exception all the same."""
    text = user_traceback(exc)
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):  # BrokenPipeError; a stderr the script closed
        pass
    return text


def user_traceback(exc: BaseException) -> str:
    """The target's exception as python prints it, without cagtool's and runpy's frames
    (capture/job_traceback.py)."""
    leave_out_our_frames(exc)
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
