"""A call right after a module is executed by whoever imports it, for a module the process has not
imported yet: cagtool never imports torch, numpy or one of torch's submodules for itself (each
costs the job CPU it would not spend under plain python: Inductor's graph module alone ~0.8 s).

`OnImport` is a finder first on `sys.meta_path` that finds nothing itself: for a module it waits
for, it asks the finders after it for the module's spec and wraps that spec's loader's
`exec_module` (a loader is made per module by the path finder). Each module's call runs once,
after the module's code; an error in it never fails the job's import. It leaves `sys.meta_path`
when nothing is left to wait for."""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any


class OnImport(importlib.abc.MetaPathFinder):
    """Calls `pending[name](module)` right after the module `name` is executed, once."""

    def __init__(self, pending: dict[str, Callable[[ModuleType], None]]) -> None:
        self.pending = dict(pending)
        self._lock = threading.Lock()

    @classmethod
    def install(cls, pending: dict[str, Callable[[ModuleType], None]]) -> "OnImport":
        """A finder for `pending`, first on `sys.meta_path`."""
        finder = cls(pending)
        sys.meta_path.insert(0, finder)
        return finder

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.pending:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_call(module: ModuleType) -> None:
            exec_module(module)
            with self._lock:
                call = self.pending.pop(fullname, None)
                done = not self.pending
            if done:
                self.remove()
            if call is not None:
                try:
                    call(module)
                except Exception:  # noqa: BLE001 - never fail the job's import over cagtool's call
                    pass

        try:
            loader.exec_module = exec_and_call  # type: ignore[union-attr]
        except AttributeError:  # a loader that takes no attribute: called at the next import of it, or not at all
            pass
        return spec

    def remove(self) -> None:
        """Waits for nothing more, and leaves `sys.meta_path`."""
        with self._lock:
            self.pending.clear()
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
