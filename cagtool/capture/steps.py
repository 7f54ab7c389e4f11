"""Steps: every top-level backward is one step, timed; optimizer steps are recorded too.

Wraps `torch.autograd._engine_run_backward`, the entry of Tensor.backward, autograd.backward
and autograd.grad (TORCH_2_13_NOTES.md, "Counting and timing").
"""

from __future__ import annotations

import math
import time
import weakref
from typing import Any, Callable

from cagtool.capture import source
from cagtool.capture.writer import RecordWriter
from cagtool.record.schema import FinalStateEvent, FindingEvent, OptimizerStepEvent, StepEvent

FLAG_WITHOUT_COMPILED_BACKWARD = "ca_flag_without_compiled_backward"
TRACED_BACKWARD = "backward_traced_by_dynamo"


class StepTracker:
    def __init__(self, writer: RecordWriter, mode: str, on_step: Callable[[int], None] | None = None, max_steps: int | None = None) -> None:
        self.writer = writer
        self.mode = mode
        self.on_step = on_step
        self.max_steps = max_steps
        self.current_step: int | None = None  # the step in progress or last finished
        self.current_roots: list[Any] = []
        self.compile_in_progress = False
        self._depth = 0
        self._captures_this_step = 0
        self._compiles_since = 0
        self._compile_s_since = 0.0
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._last_roots_ref: list[Any] = []
        self._flag_finding_done = False
        self._handles: list[Any] = []
        self._original_run_backward: Any = None
        self.step_limit_reached = False

    # -- compile bookkeeping, called by the observers ------------------------------------------
    def note_capture_started(self) -> None:
        self.compile_in_progress = True

    def note_capture_finished(self, seconds: float) -> None:
        self.compile_in_progress = False
        self._captures_this_step += 1
        self._compile_s_since += seconds

    def note_dynamo_compile(self, seconds: float) -> None:
        self._compiles_since += 1
        self._compile_s_since += seconds

    # -- installation -------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        import torch.autograd
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        original = torch.autograd._engine_run_backward
        self._original_run_backward = original
        tracker = self

        def _engine_run_backward(t_outputs, *args, **kwargs):
            if tracker._depth or torch.compiler.is_compiling():
                return original(t_outputs, *args, **kwargs)
            return tracker._top_level_backward(original, t_outputs, args, kwargs)

        torch.autograd._engine_run_backward = torch._dynamo.disable(_engine_run_backward)
        opt_start: dict[int, float] = {}

        def pre_hook(optimizer, args, kwargs):
            opt_start[id(optimizer)] = time.perf_counter()
            self._optimizers.add(optimizer)

        def post_hook(optimizer, args, kwargs):
            start = opt_start.pop(id(optimizer), None)
            if start is not None:
                self.writer.emit(OptimizerStepEvent, step=self.current_step or 0, wall_s=time.perf_counter() - start, optimizer=type(optimizer).__name__)

        self._handles = [
            register_optimizer_step_pre_hook(torch._dynamo.disable(pre_hook)),
            register_optimizer_step_post_hook(torch._dynamo.disable(post_hook)),
        ]

    def uninstall(self) -> None:
        import torch.autograd

        if self._original_run_backward is not None:
            torch.autograd._engine_run_backward = self._original_run_backward
        for handle in self._handles:
            handle.remove()

    # -- the wrapper's body -------------------------------------------------------------------
    def _top_level_backward(self, original: Callable[..., Any], t_outputs: Any, args: tuple, kwargs: dict) -> Any:
        step = (self.current_step or 0) + 1
        self.current_step = step
        roots = [getattr(t, "grad_fn", None) for t in t_outputs] if isinstance(t_outputs, (tuple, list)) else [getattr(t_outputs, "grad_fn", None)]
        self.current_roots = roots
        self._check_flag_finding(step)
        self._depth += 1
        start = time.perf_counter()
        try:
            result = original(t_outputs, *args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            self._depth -= 1
            self._last_roots_ref = roots
            self.current_roots = []
            self.writer.emit(
                StepEvent,
                step=step,
                backward_s=elapsed,
                loss=_scalar(t_outputs),
                ca_captures=self._captures_this_step,
                compiles=self._compiles_since,
                compile_s=self._compile_s_since,
            )
            self._captures_this_step = 0
            self._compiles_since = 0
            self._compile_s_since = 0.0
            if self.on_step is not None:
                self.on_step(step)
        if self.max_steps is not None and step >= self.max_steps and not self.step_limit_reached:
            self.step_limit_reached = True
            raise StepLimitReached(step)
        return result

    def _check_flag_finding(self, step: int) -> None:
        """The script set the CA flag but this backward runs outside any compiled region, so as
        written it would get no compiled autograd (only cagtool's own enable is active)."""
        if self._flag_finding_done or self.mode != "ca":
            return
        import torch
        from torch._dynamo import compiled_autograd as ca

        if torch._dynamo.config.compiled_autograd and ca.depth <= 1:
            self._flag_finding_done = True
            where = source.user_caller()
            self.writer.emit(
                FindingEvent,
                code=FLAG_WITHOUT_COMPILED_BACKWARD,
                message=(
                    "the script sets torch._dynamo.config.compiled_autograd = True, but its backward runs "
                    "outside any torch.compile'd function, so without cagtool it gets no compiled autograd "
                    "(torch 2.13 reads the flag only while a compiled function runs). Call backward inside "
                    "a compiled step function, or wrap the loop in torch._dynamo.compiled_autograd._enable(...)."
                ),
                step=step,
                source=where,
            )

    def note_traced_backward(self) -> None:
        """With trace_autograd_ops, Dynamo traces `loss.backward()` into its own graph: no backward
        reaches the autograd engine's entry point, so there are no steps and no CA graphs to record."""
        import torch

        if self.current_step is None and getattr(torch._dynamo.config, "trace_autograd_ops", False):
            self.writer.emit(
                FindingEvent,
                code=TRACED_BACKWARD,
                message=(
                    "the script sets torch._dynamo.config.trace_autograd_ops = True: Dynamo traced its "
                    "backward calls into the compiled graphs, so no backward ran through the autograd "
                    "engine (no steps, no compiled-autograd graphs to record)"
                ),
            )

    def emit_final_state(self) -> None:
        """Parameter and gradient norms at the end, for comparing modes' numerics."""
        params = _params_of(self._optimizers) or _leaf_params(self._last_roots_ref)
        if not params:
            self.writer.emit(FinalStateEvent, param_norm=None, grad_norm=None, num_params=0)
            return
        import torch

        with torch.no_grad():
            p2 = sum(float(p.detach().double().pow(2).sum()) for p in params)
            grads = [p.grad for p in params if p.grad is not None]
            g2 = sum(float(g.detach().double().pow(2).sum()) for g in grads) if grads else None
        self.writer.emit(
            FinalStateEvent,
            param_norm=math.sqrt(p2),
            grad_norm=math.sqrt(g2) if g2 is not None else None,
            num_params=len(params),
        )


class StepLimitReached(BaseException):
    """Raised out of the target's backward when --steps is reached; the run ends cleanly.
    A BaseException, like KeyboardInterrupt, so the script's `except Exception` lets it through."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped after {step} steps (--steps)")
        self.step = step


def _scalar(t_outputs: Any) -> float | None:
    tensor = t_outputs[0] if isinstance(t_outputs, (tuple, list)) and t_outputs else t_outputs
    try:
        if tensor.numel() == 1 and not tensor.is_complex():
            return float(tensor.detach())
    except Exception:  # noqa: BLE001 - not a tensor, or a subclass without numel
        return None
    return None


def _params_of(optimizers: Any) -> list[Any]:
    seen: dict[int, Any] = {}
    for optimizer in list(optimizers):
        for group in optimizer.param_groups:
            for p in group["params"]:
                seen.setdefault(id(p), p)
    return list(seen.values())


def _leaf_params(roots: list[Any]) -> list[Any]:
    found: dict[int, Any] = {}
    for node in source.walk_graph(roots):
        variable = getattr(node, "variable", None)
        if variable is not None:
            found.setdefault(id(variable), variable)
    return list(found.values())
