"""How cagtool starts a Python process of its own (a mode process, the re-run of a verification):
`python -c BOOTSTRAP`, which runs the module as `python -m` would, with sys.path as the `cagtool`
console script leaves it: the interpreter's bin directory first, never the current directory.

`python -m cagtool...` puts the current directory first on sys.path, so a `cagtool.py` there (the
user's own helper, or a file planted in a project a verification re-runs in) would be imported in
cagtool's place, and a `json.py` or `msgspec.py` in cagtool's: code that is not cagtool run as
cagtool, where `python train.py` would never have imported it. The script's own directory (or, for
`-m`, the current one) is put first on sys.path only when the target runs (run/target.py), as
python does for it."""

from __future__ import annotations

import sys

_BOOTSTRAP = (
    "import os, sys\n"
    # In place of '' (the current directory), as `python -c` puts it; before the rest where python
    # put none (-P, PYTHONSAFEPATH), so run/target.py's `sys.path[0] = ...` replaces this entry.
    "sys.path[0:1 if sys.path and sys.path[0] in ('', os.getcwd()) else 0] = [os.path.dirname(sys.executable)]\n"
    "import runpy\n"
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
)


def python_module_argv(module: str) -> list[str]:
    """The argv that runs `python -m module` with cagtool imported first, from its install (module
    docstring); the module's own arguments follow it."""
    return [sys.executable, "-c", _BOOTSTRAP.format(module=module)]
