"""Runs the target and writes the run record (see README, Development).

`cagtool.capture(...)` is also the Python API's entry point (cagtool/api.py). Why the package is
callable, rather than a plainer way: Python's import system binds `cagtool.capture` to this
package whenever any capture module is imported (`import cagtool.capture.recorder` sets the
attribute on `cagtool`), so a function of that name in cagtool/__init__.py would be replaced by
the package as soon as a capture started. The two plainer ways both break something: renaming the
package moves every capture module, and renaming the API breaks `cagtool.capture(...)` in users'
code. So the package forwards a call to `cagtool.api.capture`; the import is deferred to the call,
and api.py imports capture's modules, never this package, so no import circle comes of it
(tests/test_import_circles.py)."""

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from cagtool.api import capture

        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
