"""How cagtool starts a Python process of its own (a mode process, the re-run of a verification):
`python -c BOOTSTRAP`, which imports cagtool with the current directory off sys.path, then puts it
back and runs the module as `python -m` would.

`python -m cagtool...` puts the current directory first on sys.path, so a `cagtool.py` or
`cagtool/` there (the user's own helper, or a file planted in a project a verification re-runs in)
would be imported in cagtool's place: a crash, or code that is not cagtool run as cagtool. Once the
real package is imported, its submodules are found through the package, not sys.path, so only that
first import needs the directory off the path; the module then runs with sys.path as `-m` leaves it
(the script's own sys.path[0] is set where the target runs, run/target.py)."""

from __future__ import annotations

import sys

_BOOTSTRAP = (
    "import sys\n"
    "first = sys.path.pop(0)\n"  # '' (the current directory), as `python -c` puts it
    "import cagtool, runpy\n"
    "sys.path.insert(0, first)\n"
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
)


def python_module_argv(module: str) -> list[str]:
    """The argv that runs `python -m module` with cagtool imported first, from its install (module
    docstring); the module's own arguments follow it."""
    return [sys.executable, "-c", _BOOTSTRAP.format(module=module)]
