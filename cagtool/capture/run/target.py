"""The user's program: checked before anything starts, then run exactly as `python` would."""

from __future__ import annotations

import ast
import atexit
import importlib.util
import os
import re
import runpy
import shutil
import sys
import traceback
from dataclasses import asdict, dataclass, field

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


def _check_module(module: str) -> None:
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())  # python -m puts the cwd first
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(module + ".__main__")  # a package runs its __main__
            if spec is None:
                raise UsageError(f"{module} is a package without __main__; give its module, e.g. -m {module}.train")
    except SyntaxError as exc:  # a parent package's __init__ does not parse
        raise UsageError(f"{exc.filename} is not valid Python: {exc.msg} (line {exc.lineno})") from None
    except (ImportError, ValueError) as exc:
        raise UsageError(f"module not found: {module} ({exc})") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    if spec is None:
        raise UsageError(f"module not found: {module}")
    # Like a script: a module that is not valid Python fails here, with one line and no record.
    if spec.origin and spec.origin.endswith(".py") and os.path.isfile(spec.origin):
        try:
            with open(spec.origin, "rb") as handle:
                ast.parse(handle.read(), filename=spec.origin)
        except SyntaxError as exc:
            raise UsageError(f"{spec.origin} is not valid Python: {exc.msg} (line {exc.lineno})") from None
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {spec.origin}: {exc}") from None


def module_file(target: Target) -> str | None:
    """The file `python -m` runs for a module target (found as check_target found it), else None."""
    if target.kind != "module":
        return None
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(target.name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(target.name + ".__main__")
    except (ImportError, ValueError, SyntaxError):
        return None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    return spec.origin if spec is not None and spec.origin and os.path.isfile(spec.origin) else None


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
    """Run it as `python SCRIPT ARGS` / `python -m MODULE ARGS` would: __name__ == "__main__",
    sys.argv, sys.path[0], cwd untouched. Exceptions propagate to the caller."""
    if target.kind == "script":
        sys.argv = [target.name, *target.args]
        sys.path[0] = os.path.dirname(os.path.realpath(target.name))
        # python 3.11 makes __file__ absolute
        checked = checked_digest(target)
        _exec_as_main(os.path.abspath(target.name), code_path=patched_source_for(target), digest=checked[0] if checked else None)
    else:
        sys.argv = [target.name, *target.args]  # runpy replaces argv[0] with the module's file
        sys.path[0] = os.getcwd()
        checked = checked_digest(target)
        if checked is None:
            runpy.run_module(target.name, run_name="__main__", alter_sys=True)
        else:
            _run_checked_module(target.name, *checked)


def _run_checked_module(name: str, digest: str, path: str) -> None:
    """What runpy.run_module(name, run_name="__main__", alter_sys=True) does, on the module's file
    only when it is `path` and its bytes have the SHA-256 `digest` (SourceChanged otherwise): the
    bytes checked are the bytes compiled, read once, never a cached .pyc of other bytes. Its
    parent packages are imported as runpy imports them (find_spec imports them)."""
    import hashlib
    import types

    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations is not None:
        spec = importlib.util.find_spec(name + ".__main__")  # a package runs its __main__
    origin = spec.origin if spec is not None else None
    if origin is None or os.path.abspath(origin) != path:
        raise SourceChanged(f"-m {name} now finds {origin or 'no file'}, not {path} that `recompiles --verify` checked: not run")
    with open(origin, "rb") as handle:
        source = handle.read()
    if hashlib.sha256(source).hexdigest() != digest:
        raise SourceChanged(f"{origin} changed after `recompiles --verify` checked it: not run")
    code = compile(source, origin, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update({"__file__": origin, "__cached__": spec.cached, "__loader__": spec.loader, "__package__": spec.parent,
                          "__spec__": spec})
    previous, argv0 = sys.modules.get("__main__"), sys.argv[0]
    sys.modules["__main__"], sys.argv[0] = main, origin
    try:
        exec(code, main.__dict__)
    finally:
        sys.argv[0] = argv0
        if previous is not None:
            sys.modules["__main__"] = previous


def _exec_as_main(path: str, code_path: str | None = None, digest: str | None = None) -> None:
    """What `python path` does: a fresh __main__ module (so pickling classes from the script
    works) whose code runs with sys.argv[0] left as the user typed it (runpy.run_path rewrites it).
    `code_path`: run that file's code instead, as `path` (its tracebacks name the file they ran).
    `digest`: the SHA-256 the bytes read must have (SourceChanged otherwise): the bytes checked are
    the bytes compiled, read once."""
    import builtins
    import types

    with open(code_path or path, "rb") as handle:
        source = handle.read()
    if digest is not None:
        import hashlib

        if hashlib.sha256(source).hexdigest() != digest:
            raise SourceChanged(f"{code_path or path} changed after `recompiles --verify` checked it: not run")
    code = compile(source, code_path or path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update({"__file__": path, "__builtins__": builtins, "__cached__": None, "__spec__": None, "__loader__": None, "__package__": None})
    # Registered before the script registers its own: atexit runs handlers last-in first-out.
    atexit.register(_clear_namespace, main.__dict__)
    previous = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if previous is not None:
            sys.modules["__main__"] = previous


def _clear_namespace(namespace: dict) -> None:
    """At exit, after the script's own atexit handlers, what the interpreter does to
    sys.modules["__main__"] as it finalizes: the script's globals set to None (names with one
    leading underscore first, as _PyModule_ClearDict does). Under `python` that is what runs the
    finalizer of an object only the script's globals hold, e.g. flushes a file it never closed. The
    script's module is not sys.modules["__main__"] by then (the child's own is back), so without this
    only the cyclic collector (its functions' __globals__ make the namespace a cycle) would free
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
    """Print the target's exception the way python would, without cagtool's and runpy's frames."""
    tb = exc.__traceback__
    cagtool_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
    runpy_file = os.path.realpath(runpy.__file__)

    def ours(filename: str) -> bool:
        real = os.path.realpath(filename)
        return real.startswith(cagtool_root + os.sep) or real == runpy_file or filename.startswith("<frozen runpy")

    while tb is not None and ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    sys.stderr.write(text)
    sys.stderr.flush()
    return text
