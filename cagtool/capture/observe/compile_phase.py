"""The phase of a Dynamo compile, read from the Python stack while torch compiles: a forward frame,
a frame compiled inside a backward, a compiled-autograd graph, or a forward re-run by activation
checkpointing in the backward (which checkpoint, which function).

torch 2.13 sets no flag for "inside a checkpoint recompute" that covers both checkpoints, but its
recompute always runs from a known function of torch/utils/checkpoint.py, which is on the stack
while Dynamo compiles anything the recompute calls (docs/torch-internals.md, "Knowing a compile
runs inside an activation-checkpoint recompute"):

| checkpoint | frame on the stack | the checkpointed function |
| --- | --- | --- |
| `use_reentrant=True` | `CheckpointFunction.backward` (co_name `backward`) | `ctx.run_function` |
| `use_reentrant=False` | `recompute_fn`, the closure `_checkpoint_without_reentrant_generator` made | its free variable `fn` |
| selective (`context_fn`) | the same `recompute_fn`, whose `recompute_context` is a `_CachedTorchDispatchMode` | `fn` |

A backward is running when `torch.autograd.graph._engine_run_backward` is on the stack (every
`Tensor.backward`, `autograd.backward` and `autograd.grad` goes through it). Reading frames and
their locals changes nothing the job sees; a failure here leaves the phase unknown (None).
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

from cagtool.capture.observe import source
from cagtool.record.schema import (
    CHECKPOINT_NON_REENTRANT,
    CHECKPOINT_REENTRANT,
    CHECKPOINT_SELECTIVE,
    PHASE_BACKWARD,
    PHASE_CA_GRAPH,
    PHASE_CHECKPOINT_RECOMPUTE,
    PHASE_FORWARD,
    CompilePhase,
    SourceRef,
)

_CHECKPOINT_TAIL = os.path.join("torch", "utils", "checkpoint.py")
_AUTOGRAD_GRAPH_TAIL = os.path.join("torch", "autograd", "graph.py")
# torch's backward entry point, and the step tracker's copy of it that replaces it in a recorded
# process (capture/steps/hooks.py): a backward runs below one of them.
_ENGINE_FILES = (_AUTOGRAD_GRAPH_TAIL, os.path.join("cagtool", "capture", "steps", "hooks.py"))
ENGINE_FRAME = "_engine_run_backward"
REENTRANT_FRAME = "backward"  # CheckpointFunction.backward
NON_REENTRANT_FRAME = "recompute_fn"


def _function_ref(fn: Any) -> SourceRef | None:
    """Where the checkpointed function is defined: a module's forward, a function, a partial's
    function; a compiled module (OptimizedModule) is named by the module it wraps."""
    target = getattr(fn, "_orig_mod", fn)  # torch.compile(module)
    while hasattr(target, "func") and callable(getattr(target, "func")):  # functools.partial
        target = target.func
    name = getattr(target, "__qualname__", "") or type(target).__qualname__
    code_owner = target
    if not hasattr(target, "__code__"):
        forward = getattr(target, "forward", None)  # an nn.Module
        if forward is not None:
            name = f"{type(target).__qualname__}.forward"
            code_owner = forward
    code_owner = getattr(code_owner, "_torchdynamo_orig_callable", code_owner)  # a torch.compile'd function
    code = getattr(getattr(code_owner, "__func__", code_owner), "__code__", None)
    if code is None:
        return None
    return source.ref(code.co_filename, code.co_firstlineno, name, "checkpointed_function")


def _checkpoint_of(frame: FrameType) -> tuple[str, SourceRef | None] | None:
    name = frame.f_code.co_name
    if name not in (REENTRANT_FRAME, NON_REENTRANT_FRAME) or not frame.f_code.co_filename.endswith(_CHECKPOINT_TAIL):
        return None
    local = frame.f_locals
    if name == REENTRANT_FRAME:
        run_function = getattr(local.get("ctx"), "run_function", None)
        return (CHECKPOINT_REENTRANT, _function_ref(run_function)) if run_function is not None else None
    context = local.get("recompute_context")
    selective = type(context).__name__ == "_CachedTorchDispatchMode"
    return (CHECKPOINT_SELECTIVE if selective else CHECKPOINT_NON_REENTRANT), _function_ref(local.get("fn"))


def phase_now(compile_id: str, frame: FrameType | None = None) -> CompilePhase | None:
    """The phase of the compile `compile_id` that is running on this thread now."""
    try:
        frame = frame or sys._getframe(1)
        checkpoint: tuple[str, SourceRef | None] | None = None
        checkpoint_frame: FrameType | None = None
        in_backward = False
        walk: FrameType | None = frame
        while walk is not None:
            if checkpoint is None:
                checkpoint = _checkpoint_of(walk)
                checkpoint_frame = walk if checkpoint is not None else None
            if walk.f_code.co_name == ENGINE_FRAME and walk.f_code.co_filename.endswith(_ENGINE_FILES):
                in_backward = True
                break  # the recompute runs inside the backward: nothing further out matters
            walk = walk.f_back
        if checkpoint is not None:
            # the user's line is the one whose backward ran the recompute, outside the checkpoint
            # (inside it, the checkpointed function itself may be the user's)
            caller = source.user_caller(checkpoint_frame, how="caller")
            return CompilePhase(PHASE_CHECKPOINT_RECOMPUTE, checkpoint[0], checkpoint[1], caller, True)
        caller = source.user_caller(frame, how="caller")
        if compile_id.startswith("!"):
            return CompilePhase(PHASE_CA_GRAPH, caller=caller, in_backward=in_backward)
        return CompilePhase(PHASE_BACKWARD if in_backward else PHASE_FORWARD, caller=caller, in_backward=in_backward)
    except Exception:  # noqa: BLE001 - a changed torch layout: the phase is unknown, the compile goes on
        return None


def assume_static_now() -> bool | None:
    """torch._dynamo.config.assume_static_by_default as it is now: inside a compile of a function
    compiled with dynamic=True, False (torch.compile patches it around the call)."""
    try:
        import torch

        value = torch._dynamo.config.assume_static_by_default
        return value if isinstance(value, bool) else None
    except Exception:  # noqa: BLE001
        return None


def recompile_limit_now() -> int | None:
    """torch._dynamo.config.recompile_limit as it is now (a script may change it as it runs)."""
    try:
        import torch

        value = torch._dynamo.config.recompile_limit
        return int(value) if isinstance(value, int) else None
    except Exception:  # noqa: BLE001
        return None


def fullgraph_now() -> bool | None:
    """Whether the frame Dynamo compiles now is compiled so that a graph break is an error:
    `torch.compile(..., fullgraph=True)` (Dynamo's `_compile` runs with `one_graph` True, read from
    its frame on the stack) or inside `torch._dynamo.error_on_graph_break(True)`. None where
    neither can be read (a torch whose `_compile` is not found): not known."""
    try:
        import sys

        from torch._dynamo import convert_frame

        one_graph = None
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == "_compile" and frame.f_code.co_filename == convert_frame.__file__:
                one_graph = frame.f_locals.get("one_graph")
                break
            frame = frame.f_back
        if not isinstance(one_graph, bool):
            return None
        error_on_graph_break = getattr(convert_frame, "_get_error_on_graph_break", None)
        return one_graph or (error_on_graph_break() is True if callable(error_on_graph_break) else False)
    except Exception:  # noqa: BLE001 - the job's compile goes on
        return None
