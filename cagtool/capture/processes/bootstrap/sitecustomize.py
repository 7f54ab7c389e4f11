"""cagtool's hook into the Python processes a profiled target starts.

`cagtool run` puts this directory first on PYTHONPATH for the target, so every Python child that
inherits the environment imports this module at start-up (site.py imports the first
`sitecustomize` on sys.path). It runs the user's own sitecustomize, if any, then hands over to
cagtool.capture.processes.follow, which sets the process up lazily (when it imports torch). Nothing here
may stop the user's process: errors become one line on stderr.
"""

import os
import sys

_FOLLOW_ENV = "CAGTOOL_FOLLOW"


def _chain_user_sitecustomize() -> None:
    """The sitecustomize this one shadows, run as `sitecustomize`, the way site.py would."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - what site.py does with a failing sitecustomize
        sys.modules["sitecustomize"] = ours
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}", file=sys.stderr)


def _start_following() -> None:
    config = os.environ.get(_FOLLOW_ENV)
    if not config:
        return
    try:
        try:
            from cagtool.capture.processes import follow
        except ImportError:
            # Another interpreter than cagtool's (a `python` found on PATH): import cagtool from
            # where the parent found it, without leaving that directory on the user's sys.path.
            import json

            root = json.loads(config)["cagtool_root"]
            sys.path.insert(0, root)
            try:
                from cagtool.capture.processes import follow
            finally:
                sys.path.remove(root)
        follow.start_in_child()
    except Exception as exc:  # noqa: BLE001 - never stop the user's process
        print(f"cagtool: this process (pid {os.getpid()}) is not profiled: {type(exc).__name__}: {exc}", file=sys.stderr)


_chain_user_sitecustomize()
_start_following()
