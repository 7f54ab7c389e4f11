"""Finding the user's source line behind an autograd node or a backward call."""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from types import FrameType
from typing import Any, Iterator

import cagtool
from cagtool.record.schema import SourceRef

_LIBRARY_ROOTS = tuple(
    {os.path.realpath(p) + os.sep for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
)
# Installed packages (not the standard library): a frame in one, other than torch's, is a library
# calling torch for the user (`via`).
_PACKAGE_ROOTS = tuple({os.path.realpath(p) + os.sep for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])})
_TORCH_PACKAGES = frozenset({"torch", "functorch", "torchgen", "cagtool"})
_CAGTOOL_ROOT = os.path.dirname(os.path.realpath(cagtool.__file__)) + os.sep  # the package: every module of it
# Folders of code a tool wrote while the job ran: depyf points the code objects Dynamo transforms
# at its decompiled dumps, so a compiled function's frame names a dump, not the user's file.
_DUMP_ROOTS: tuple[str, ...] = ()


def not_user_code(directory: str) -> None:
    """Files under `directory` are a tool's dumps (depyf's), never the user's code: the source
    of a line is looked for further out, in the frame that called the compiled function."""
    global _DUMP_ROOTS
    _DUMP_ROOTS = (*_DUMP_ROOTS, os.path.realpath(directory) + os.sep)


def is_user_file(filename: str) -> bool:
    if not filename or filename.startswith("<"):
        return False
    real = os.path.realpath(filename)
    if real.startswith(_CAGTOOL_ROOT) or (_DUMP_ROOTS and real.startswith(_DUMP_ROOTS)):
        return False
    return not real.startswith(_LIBRARY_ROOTS)


def ref(filename: str, line: int, function: str, how: str, via: str = "", wrapper: str = "") -> SourceRef:
    code = linecache.getline(filename, line).strip()
    return SourceRef(file=filename, line=line, code=code, function=function, how=how, via=via, wrapper=wrapper)


# torch's module wrappers that hold the module they run as `.module` (their forward calls it), by
# the file of their forward: a call of the wrapper reaches a compiled module inside it.
_TORCH_WRAPPERS = {
    os.path.join("torch", "nn", "parallel", "distributed.py"): "DistributedDataParallel",
    os.path.join("torch", "nn", "parallel", "data_parallel.py"): "DataParallel",
}


# The frame of a compiled module's call (OptimizedModule's `_fn`): a wrapper met after it, walking
# out, wraps the compiled module (DDP(torch.compile(m))); one met before it is inside what was
# compiled (torch.compile(DDP(m)), whose `_orig_mod` is the DDP).
_COMPILED_CALL_FILE = os.path.join("torch", "_dynamo", "eval_frame.py")


def _wrapper_of(filename: str) -> str:
    for tail, name in _TORCH_WRAPPERS.items():
        if filename.endswith(tail):
            return name
    return ""


def library_file(filename: str) -> str | None:
    """`transformers/trainer.py` for a file of an installed package other than torch's (and
    cagtool's), by its path under site-packages; None for anything else."""
    if not filename or filename.startswith("<"):
        return None
    real = os.path.realpath(filename)
    for root in _PACKAGE_ROOTS:
        if real.startswith(root):
            inside = real[len(root):]
            top = inside.split(os.sep, 1)[0]
            return None if top in _TORCH_PACKAGES or os.sep not in inside else inside.replace(os.sep, "/")
    return None


def user_caller(frame: FrameType | None = None, how: str = "backward_call") -> SourceRef | None:
    """The innermost frame on the current stack that belongs to the user's code, with the
    innermost line of another package on the way to it (`via`: a library made the call) and the
    torch wrapper whose forward it went through to the compiled module's call (`wrapper`: DDP around a
    compiled module)."""
    frame = frame or sys._getframe(1)
    via = wrapper = ""
    compiled_call = False
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            return ref(filename, frame.f_lineno, frame.f_code.co_name, how, via, wrapper)
        if not via and (library := library_file(filename)) is not None:
            via = f"{library}:{frame.f_lineno}"
        if not compiled_call:
            compiled_call = filename.endswith(_COMPILED_CALL_FILE)
        elif not wrapper and frame.f_code.co_name == "forward":
            wrapper = _wrapper_of(filename)
        frame = frame.f_back
    return None


def walk_graph(roots: list[Any], limit: int = 20000) -> Iterator[Any]:
    """The autograd nodes reachable from roots (each once), at most `limit` of them."""
    seen: set[int] = set()
    stack = [r for r in roots if r is not None]
    while stack and len(seen) < limit:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        for child, _ in getattr(node, "next_functions", ()):
            if child is not None:
                stack.append(child)


def node_creation(roots: list[Any], node_name: str) -> SourceRef | None:
    """Where the forward op behind autograd node `node_name` ran, from the node's creation
    traceback (recorded by anomaly mode, i.e. --trace-nodes). None when it is not available."""
    base = node_name.split(" ")[0]
    for node in walk_graph(roots):
        try:
            name = node.name()
        except Exception:  # noqa: BLE001
            continue
        if name != base and not name.endswith(base.split("::")[-1]):
            continue
        trace = getattr(node, "metadata", {}).get("traceback_") if hasattr(node, "metadata") else None
        if not trace:
            continue
        text = "".join(trace) if isinstance(trace, list) else str(trace)
        found = _from_text_traceback(text)
        if found is not None:
            return found
    return None


def _from_text_traceback(text: str) -> SourceRef | None:
    best = None
    for raw in text.splitlines():
        raw = raw.strip()
        if raw.startswith('File "'):
            try:
                filename = raw.split('"')[1]
                line = int(raw.split("line ")[1].split(",")[0])
                function = raw.split(" in ")[-1] if " in " in raw else ""
            except (IndexError, ValueError):
                continue
            if is_user_file(filename):
                best = ref(filename, line, function, "node_traceback")
    return best
