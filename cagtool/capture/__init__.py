"""Runs the target and writes the run record (see README, Development).

`cagtool.capture(...)` is also the Python API's entry point (cagtool/api.py): the name belongs to
this package (Python binds `cagtool.capture` to it on first import of any capture module), so the
package itself is made callable and forwards to `cagtool.api.capture`."""

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from cagtool.api import capture

        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
