"""The torch function whose body capture/steps/hooks.py copies, pinned.

hooks.py replaces `torch.autograd._engine_run_backward` with a copy of torch 2.13's body (from
torch/autograd/graph.py) plus its step bookkeeping, rather than wrapping it (docs/torch-internals.md
says why). A torch whose body differs would have its backward run by the old body under cagtool:
the job would change. So the body as it was copied is kept here, and `compare_with_installed`
reads the installed torch's from its source file (not the live function, which cagtool may have
replaced) and compares the two as code: comments, formatting, docstrings and type annotations
aside. `cagtool doctor` and tests/test_torch_internals.py run it.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from pathlib import Path

FUNCTION = "_engine_run_backward"
MODULE = "torch.autograd.graph"

# torch 2.13.0's torch/autograd/graph.py, `_engine_run_backward`, as hooks.py copies it.
COPIED_FROM_TORCH_2_13 = '''
def _engine_run_backward(t_outputs, *args, **kwargs):
    attach_logging_hooks = log.getEffectiveLevel() <= logging.DEBUG
    if attach_logging_hooks:
        unregister_hooks = _register_logging_hooks_on_whole_graph(t_outputs)
    torch._C._stash_obj_in_tls("context", contextvars.copy_context())
    try:
        return Variable._execution_engine.run_backward(t_outputs, *args, **kwargs)
    finally:
        if attach_logging_hooks:
            unregister_hooks()
        torch._C._remove_obj_from_tls("context")
'''


@dataclass(frozen=True)
class EngineCopyCheck:
    same: bool
    source_file: str  # where the installed torch's function was read
    diff: str  # unified diff, copied body -> installed body ("" when the same)
    problem: str = ""  # why no comparison could be made ("" when it was)


def normalized(source: str, name: str = FUNCTION) -> str | None:
    """The function `name` in `source` as code only: ast.unparse without its docstring and its
    type annotations (comments and layout never reach the AST). None when there is no such function."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            node.returns = None
            node.decorator_list = []
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]:
                if arg is not None:
                    arg.annotation = None
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
            return ast.unparse(node)
    return None


def installed_source_file() -> Path:
    import importlib.util

    spec = importlib.util.find_spec(MODULE)
    if spec is None or spec.origin is None:
        raise ImportError(f"{MODULE} not found")
    return Path(spec.origin)


def compare_with_installed() -> EngineCopyCheck:
    """The copied body against the installed torch's."""
    try:
        path = installed_source_file()
        installed = normalized(path.read_text(encoding="utf-8"))
    except (ImportError, OSError, SyntaxError, ValueError) as exc:
        return EngineCopyCheck(False, "", "", f"cannot read {MODULE}'s source: {type(exc).__name__}: {exc}")
    if installed is None:
        return EngineCopyCheck(False, str(path), "", f"{path} has no function {FUNCTION}")
    copied = normalized(COPIED_FROM_TORCH_2_13)
    assert copied is not None
    if installed == copied:
        return EngineCopyCheck(True, str(path), "")
    diff = "".join(difflib.unified_diff(copied.splitlines(keepends=True), installed.splitlines(keepends=True),
                                        "copied by cagtool (torch 2.13)", f"installed ({path})"))
    return EngineCopyCheck(False, str(path), diff)
