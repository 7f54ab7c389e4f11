"""Names the hooks a compiled-autograd graph calls: for each `call_hook` node of the graph, the
function behind `hooks[i]` (its qualname, file and first line), read off the hook objects torch
hands the graph's first call, without calling them or any code of the script's (no attribute
lookup that could reach a user's `__getattr__` or property). docs/torch-internals.md, "The hooks a
CA graph calls"."""

from __future__ import annotations

import functools
import linecache
import types
from collections import Counter
from typing import Any, Sequence

from cagtool.capture.observe import source
from cagtool.record.schema import HookSite

_MAX_CODE = 200  # characters of a site's line kept
_MAX_UNWRAP = 8  # wrappers followed (partial, bound method, functools.wraps) before naming what is left


def _function_of(obj: Any) -> Any:
    """The Python function a hook object runs, where it can be read without running anything:
    through functools.partial, bound methods, torch's `_WrappedHook` and functools.wraps
    (`__wrapped__`, as torch._dynamo.disable(hook) leaves it); a callable instance's class
    `__call__`. The object itself when nothing leads further."""
    wrapped_hook = _torch_wrapped_hook()
    for _ in range(_MAX_UNWRAP):
        kind = type(obj)
        if kind is types.FunctionType:
            inner = obj.__dict__.get("__wrapped__")
            if inner is None:
                return obj
            obj = inner
        elif kind is types.MethodType:
            obj = obj.__func__
        elif kind is functools.partial:
            obj = obj.func
        elif wrapped_hook is not None and kind is wrapped_hook:
            obj = object.__getattribute__(obj, "__dict__").get("hook", obj)
        elif kind in (types.BuiltinFunctionType, types.BuiltinMethodType):
            return obj
        else:
            call = next((klass.__dict__["__call__"] for klass in kind.__mro__ if "__call__" in klass.__dict__), None)
            return call if type(call) is types.FunctionType else obj
    return obj


def _torch_wrapped_hook() -> type | None:
    from torch.nn.modules import module

    return getattr(module, "_WrappedHook", None)


def _name(obj: Any, module: str = "") -> tuple[str, str, int, str]:
    fn = _function_of(obj)
    code = fn.__code__ if type(fn) is types.FunctionType else None
    if code is not None:
        return fn.__qualname__, code.co_filename, code.co_firstlineno, module
    if type(fn) in (types.BuiltinFunctionType, types.BuiltinMethodType):
        return fn.__qualname__, "", 0, module
    return type(fn).__qualname__, "", 0, module


def _runs(obj: Any, depth: int = 0) -> tuple[Any, list[Any]] | None:
    """(module or None, the user's callables) when `obj` is one of torch's own hooks that run the
    user's: torch's hook on a module's BackwardHookFunctionBackward node (torch/utils/hooks.py,
    BackwardHook: `_set_user_hook`'s runs the module's full backward hooks; `setup_output_hook`'s
    its full backward pre-hooks, and exists for the full backward hooks when there are none); or,
    under a compiled forward, Dynamo's `partial(trace_wrapped, fn=call_*_from_backward_state,
    bw_state=...)`, whose BackwardState holds the hook (`hook_name`) or the module and its hooks
    (`module_name`, `hooks_name`). None for any other object."""
    if depth > 2:
        return None
    if type(obj) is functools.partial:
        keywords = obj.keywords
        state = keywords.get("bw_state")
        if state is None or getattr(obj.func, "__module__", "") != "torch._dynamo._trace_wrapped_higher_order_op":
            return None
        held = object.__getattribute__(state, "__dict__")
        if isinstance(keywords.get("hook_name"), str):
            return None, [held[keywords["hook_name"]]] if keywords["hook_name"] in held else []
        if isinstance(keywords.get("hooks_name"), str):
            module = held.get(keywords.get("module_name")) if isinstance(keywords.get("module_name"), str) else None
            return module, list(held.get(keywords["hooks_name"]) or ())
        return None
    if type(obj) is not types.FunctionType or not obj.__closure__:
        return None
    from torch.utils.hooks import BackwardHook

    for cell in obj.__closure__:
        try:
            held = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if type(held) is BackwardHook:
            state = object.__getattribute__(held, "__dict__")
            module = state.get("module")

            def resolved(functions: Any) -> list[Any]:
                nonlocal module
                found: list[Any] = []
                for function in functions or ():  # under a compiled forward: Dynamo's partials, naming the user's hooks
                    inner = _runs(function, depth + 1)
                    if inner is None:
                        found.append(function)
                    else:
                        module = inner[0] if inner[0] is not None else module
                        found.extend(inner[1])
                return found

            user_hooks, pre_hooks = resolved(state.get("user_hooks")), resolved(state.get("user_pre_hooks"))
            # Each of the two hooks is there for the module's other kind when it has none of its own.
            if "_set_user_hook" in obj.__qualname__:
                return module, user_hooks or pre_hooks
            return module, pre_hooks or user_hooks
    return None


def hook_sites(hooks: Sequence[Any], slots: Sequence[tuple[str, int]]) -> list[HookSite]:
    """`slots`: (hook_type, i) of each call_hook node reading `hooks[i]` (graph_dump.summarize_graph).
    Hooks defined at one place are one site with their count (a clamp registered on every
    parameter by one lambda: one site), in the graph's order."""
    counts: Counter[tuple[str, str, str, int, str]] = Counter()
    for hook_type, index in slots:
        if not 0 <= index < len(hooks):
            continue
        hook = hooks[index]
        runs = _runs(hook)
        if runs is None:
            counts[(hook_type, *_name(hook))] += 1
            continue
        module, functions = runs
        owner = type(module).__qualname__ if module is not None else ""
        for function in functions or [hook]:
            counts[(hook_type, *_name(function, owner))] += 1
    return [HookSite(hook_type=t, function=f, file=file, line=line, module=m, count=n,
                     code=linecache.getline(file, line).strip()[:_MAX_CODE] if line and source.is_user_file(file) else "")
            for (t, f, file, line, m), n in counts.items()]
