"""What a mode does to torch, in any process of the job (the one cagtool started and every one it
follows): `ca` turns compiled autograd on with cagtool's compiler for every backward and selects
DDP's Python reducer; `aot` and `eager` force compiled autograd off whatever the script assigns;
`eager` also turns Dynamo off, and keeps the module torch.compile returns the plain job's wrapper.
See docs/torch-internals.md for the torch internals relied on.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path
from typing import Any, Iterator

from cagtool.record.schema import TRACE_DIR

# DDP picks its reducer in __init__ from this setting; under compiled autograd only the Python
# reducer works (the C++ one raises "Compiled autograd is not compatible with C++ DDP Reducer").
CA_OPTIMIZE_DDP = "python_reducer"


def prepare_environment(mode: str, record_dir: Path | None) -> None:
    """What must be decided before `import torch` (read by torch at import)."""
    if record_dir is not None:
        os.environ["TORCH_TRACE"] = str(record_dir / TRACE_DIR)
    if mode == "eager":
        os.environ["TORCHDYNAMO_DISABLE"] = "1"


def _force_config(name: str, value: Any) -> None:
    """A value the script's own `torch._dynamo.config.<name> = ...` cannot override: the config
    module returns `env_value_force` before any user assignment (utils/_config_module.py)."""
    import torch

    torch._dynamo.config._config[name].env_value_force = value


def script_config_value(name: str) -> Any:
    """What the script itself assigned in this context (None when it assigned nothing)."""
    import torch
    from torch.utils._config_module import _UNSET_SENTINEL

    value = torch._dynamo.config._config[name].user_override.get()
    return None if value is _UNSET_SENTINEL else value


def make_compiler(backend: str) -> Any:
    """The compiler_fn cagtool gives compiled autograd in `ca` mode."""
    import torch

    def cagtool_compiler(gm: Any) -> Any:
        return torch.compile(gm, backend=backend)

    return cagtool_compiler


@contextlib.contextmanager
def mode_context(mode: str, observer: Any, dynamic: bool, scope: Any = None) -> Iterator[None]:
    """ca: cagtool's compiler on for every backward, DDP's Python reducer; aot/eager: compiled
    autograd forced off. Torch's state is restored on exit. `scope` (thread_scope.ThreadScope, ca
    only): compiled autograd for its thread's backwards only, entered around each of them."""
    import torch
    from torch._dynamo import compiled_autograd as ca

    restore_compile = None
    if mode == "eager":
        torch._dynamo.config.disable = True
        restore_compile = _compile_keeps_its_wrapper(torch)
    if mode != "ca":
        original_enable = ca._enable

        @contextlib.contextmanager
        def _forced_off(*args: Any, **kwargs: Any) -> Iterator[None]:
            yield

        # The flag must read False too: with it on, Dynamo traces the forward differently
        # (backward hooks, loss.backward() inside a compiled function) even without _enable.
        _force_config("compiled_autograd", False)
        ca._enable = _forced_off
        try:
            yield
        finally:
            ca._enable = original_enable
            _force_config("compiled_autograd", _unset())
            if restore_compile is not None:
                restore_compile()
        return

    _force_config("optimize_ddp", CA_OPTIMIZE_DDP)
    compiler = observer.cagtool_compiler
    # Each top-level backward's start reads compiled autograd's flag: one it began off ran uncaptured.
    watched = getattr(getattr(observer, "steps", None), "_ca_module", None)
    if watched is not None:
        watched[:] = [ca]
    original_reset = ca.reset

    def reset_as_by_hand() -> None:
        # torch._dynamo.reset() turns compiled autograd off inside an `_enable` block, and so it
        # does in the ca mode: the mode is the script inside `_enable` by hand, reset included
        # (docs/torch-internals.md, "`torch._dynamo.reset()` inside the ca mode"). The record says
        # where it happened; cagtool's verbose logger, which reset drops too, is put back so that
        # the cache misses of a CA the script enables again are still read.
        was_on = ca.depth >= 1 or (scope is not None and scope.enable is not None)
        original_reset()
        if scope is not None:
            scope.enable = None
            scope.after_backward = None
        observer.install_logger()
        if was_on:
            observer.steps.findings.ca_reset()

    ca.reset = reset_as_by_hand
    original_enable = ca._enable
    if dynamic:
        # `--dynamic` is about compiled autograd's sizes whatever route enabled it: the script's
        # own `_enable(...)`, and the config flag, whose torch.compile enters
        # `_enable(compiler_fn, dynamic=<torch.compile's dynamic, else not assume_static_by_default>)`
        # (eval_frame.py), i.e. static by default; the innermost `_enable` decides.
        def _enable_dynamic(compiler_fn: Any, dynamic: bool = True, *args: Any, **kwargs: Any) -> Any:
            return original_enable(compiler_fn, True, *args, **kwargs)

        ca._enable = _enable_dynamic
    try:
        if scope is None:
            with original_enable(compiler, dynamic=dynamic):
                observer.install_logger()
                yield
        else:
            with _scoped(scope, ca, functools.partial(original_enable, compiler, dynamic=dynamic)):
                observer.install_logger()
                yield
    finally:
        ca._enable = original_enable
        ca.reset = original_reset
        _force_config("optimize_ddp", _unset())
        if watched is not None:
            watched.clear()


def _compile_keeps_its_wrapper(torch: Any) -> Any:
    """The eager mode: with Dynamo off torch.compile(module) returns the module itself, where the
    plain job gets an OptimizedModule around it; a script that reads `compiled._orig_mod`, saves or
    loads a state dict with `_orig_mod.` keys, or checks isinstance(m, OptimizedModule) would then
    fail or differ in eager alone. So the module comes back wrapped as torch.compiler.disable wraps
    it: the same OptimizedModule, whose forward runs the module's own with Dynamo off (~3-4 us a
    call). `torch.compile(model, disable=True)`, the script's own no-op, is left as torch has it.
    Installed over cagtool's own tap (compile_calls.py), which sees what torch returned. Returns
    what puts torch.compile back."""
    original = torch.__dict__.get("compile")
    if not callable(original):
        return None

    @functools.wraps(original)
    def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - torch's name
        result = original(*args, **kwargs)
        model = args[0] if args else kwargs.get("model")
        if result is model and isinstance(model, torch.nn.Module) and not kwargs.get("disable", False):
            return torch.compiler.disable(model)
        return result

    torch.compile = compile

    def restore() -> None:
        if torch.__dict__.get("compile") is compile:
            torch.compile = original

    return restore


@contextlib.contextmanager
def _scoped(scope: Any, ca: Any, enable: Any) -> Iterator[None]:
    """The block of a thread scope: `_enable` entered by the scope around each of its thread's
    backwards. Between them torch's Python flag stays on, as inside `_enable`: Dynamo reads it
    while it traces the thread's forwards (hooks on intermediate tensors, module backward hooks),
    so they are traced as under `cagtool run`'s ca mode."""
    prior = ca.compiled_autograd_enabled

    def flag_on() -> None:
        ca.compiled_autograd_enabled = True

    ca.compiled_autograd_enabled = True
    scope.after_backward = flag_on
    scope.enable = enable
    try:
        yield
    finally:
        scope.enable = None
        scope.after_backward = None
        ca.compiled_autograd_enabled = prior


def enter_for_process(mode: str, observer: Any, dynamic: bool) -> contextlib.ExitStack:
    """The mode for the rest of a followed process's life (nothing to wrap: its code is already
    running). The returned stack is left open; the process's exit ends it."""
    stack = contextlib.ExitStack()
    stack.enter_context(mode_context(mode, observer, dynamic))
    return stack


def _unset() -> Any:
    from torch.utils._config_module import _UNSET_SENTINEL

    return _UNSET_SENTINEL
