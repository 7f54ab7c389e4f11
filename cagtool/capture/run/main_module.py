"""Which code `python -m NAME` runs, found as runpy finds it (docs/reliability.md, "How the target
runs"): the module's spec (its package's `__main__` for a package), and the module's source.

Found in two processes. The mode process, where the target runs, imports NAME's parent packages
first, as python does (their `__init__` runs before the module, in the process that runs it).
cagtool's own process (the check before a run, the seal of the module's file) finds the same spec
without running any of the job's code: a package `__init__` that prints would print once more than
under python, and one that imports torch would cost cagtool's process that import."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from importlib.machinery import ModuleSpec


class ModuleNotRunnable(Exception):
    """What `python -m NAME` says instead of running it (runpy's words), one line."""


def main_spec(name: str, import_parents: bool) -> ModuleSpec:
    """The spec of the module `python -m name` runs. import_parents: import name's parent
    packages first, as runpy does (the mode process); else find it without importing anything
    (cagtool's own process), each part looked up in its parent's folder as the import system would."""
    if name.startswith("."):
        raise ModuleNotRunnable("Relative module names not supported")
    parent = name.rpartition(".")[0]
    if parent and import_parents:
        try:
            __import__(parent)
        except ImportError as exc:
            # A missing parent is said by find_spec below; any other error in a parent is the job's.
            if exc.name is None or (exc.name != parent and not parent.startswith(exc.name + ".")):
                raise
        existing = sys.modules.get(name)
        if existing is not None and not hasattr(existing, "__path__"):
            import warnings

            warnings.warn(RuntimeWarning(f"{name!r} found in sys.modules after import of package {parent!r}, but prior to "
                                         f"execution of {name!r}; this may result in unpredictable behaviour"))
    try:
        spec = importlib.util.find_spec(name) if import_parents else _find_spec_unimported(name)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        said = f"Error while finding module specification for {name!r} ({type(exc).__name__}: {exc})"
        if name.endswith(".py"):
            said += f". Try using '{name[:-3]}' instead of '{name}' as the module name."
        raise ModuleNotRunnable(said) from None
    if spec is None:
        raise ModuleNotRunnable(f"No module named {name}")
    if spec.submodule_search_locations is not None:
        if name == "__main__" or name.endswith(".__main__"):
            raise ModuleNotRunnable("Cannot use package as __main__ module")
        try:
            return main_spec(name + ".__main__", import_parents)
        except ModuleNotRunnable as exc:
            if import_parents and name not in sys.modules:
                raise
            raise ModuleNotRunnable(f"{exc}; {name!r} is a package and cannot be directly executed") from None
    if spec.loader is None:
        raise ModuleNotRunnable(f"{name!r} is a namespace package and cannot be executed")
    return spec


def package_specs(name: str) -> list[ModuleSpec]:
    """The specs of `name`'s parent packages, outermost first, found without importing them (for
    the check of their source before a run)."""
    parts = name.split(".")
    specs = []
    for end in range(1, len(parts)):
        try:
            spec = _find_spec_unimported(".".join(parts[:end]))
        except (ImportError, AttributeError, TypeError, ValueError):
            break
        if spec is None:
            break
        specs.append(spec)
    return specs


def _find_spec_unimported(name: str) -> ModuleSpec | None:
    """What importlib.util.find_spec(name) finds in a fresh `python -m` process, without importing
    name's parents: each part is asked of sys.meta_path's finders (an editable install's own finder
    among them) with its parent's search locations, as the import system asks them, and no
    `__init__` runs. What this process has imported is not looked at (cagtool's own imports are not
    the job's). A package whose `__init__` changes its own `__path__` is seen as its folder holds it."""
    path = None
    spec = None
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        fullname = ".".join(parts[:end])
        spec = _ask_finders(fullname, path)
        if spec is None:
            if end < len(parts):  # where importing the parent would have failed
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return None
        locations = spec.submodule_search_locations
        if end < len(parts):
            if locations is None:
                raise ModuleNotFoundError(f"__path__ attribute not found on {fullname!r} while trying to find {name!r}", name=name)
            path = list(locations)
    return spec


def _ask_finders(fullname: str, path: list[str] | None) -> ModuleSpec | None:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(fullname, path)
        if spec is not None:
            return spec
    return None


def module_source(spec: ModuleSpec) -> bytes | str:
    """The source of the module `spec` finds: its file's bytes, read once (so bytes checked are
    the bytes compiled), or the text its loader gives (a module in a zip archive). A module with
    no Python source (a C extension, a `.pyc` alone, one built into Python) is ModuleNotRunnable:
    python -m cannot run an extension either, and cagtool runs a module from its source."""
    origin = spec.origin
    if origin and origin.endswith(tuple(importlib.machinery.SOURCE_SUFFIXES)) and os.path.isfile(origin):
        with open(origin, "rb") as handle:
            return handle.read()
    get_source = getattr(spec.loader, "get_source", None)
    text = None
    if get_source is not None:
        try:
            text = get_source(spec.name)
        except (ImportError, OSError):
            text = None
    if text is not None:
        return text
    if origin and origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        raise ModuleNotRunnable(f"No code object available for {spec.name} ({origin} is a compiled extension, not Python source)")
    if is_bytecode_alone(spec):
        raise ModuleNotRunnable(f"{spec.name} has no source: {origin} is compiled bytecode alone")
    raise ModuleNotRunnable(f"{spec.name} has no Python source to run ({origin or 'no file'})")


def is_bytecode_alone(spec: ModuleSpec) -> bool:
    """A module that is a `.pyc` without its source: python -m runs its code (the loader's
    `get_code`), which a plain `cagtool run` does too; `recompiles --verify` cannot seal it."""
    origin = spec.origin
    return bool(origin and origin.endswith(tuple(importlib.machinery.BYTECODE_SUFFIXES)) and hasattr(spec.loader, "get_code"))
