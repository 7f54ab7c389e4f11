"""cagtool: profiling and diagnosis for PyTorch compiled autograd.

From Python: `with cagtool.capture(...) as cap:` records a block, `cagtool.load(path)` reads any
record (cagtool/api.py). Both load on first use, through the module `__getattr__` below (PEP 562),
not an import here: `import cagtool` runs in every process cagtool follows and before every CLI
command, and must stay cheap (no torch). `cagtool.capture` is the capture/ package
itself, callable (capture/__init__.py says why)."""

from typing import Any

__version__ = "0.1.0"
__all__ = ["capture", "load", "Capture", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "capture":
        # The capture/ package, callable (see its __init__): the same object whether or not a
        # capture module was imported before.
        import cagtool.capture

        return cagtool.capture
    if name in ("load", "Capture"):
        from cagtool import api

        return getattr(api, name)
    raise AttributeError(f"module 'cagtool' has no attribute {name!r}")
