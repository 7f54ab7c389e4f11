"""What the step tracker finds about the job's backward calls and says as findings: the CA flag
set where it has no effect, a backward traced by Dynamo (no steps to record), and the backward
entry point replaced by the job."""

from __future__ import annotations

from typing import Any, Callable

from cagtool.capture.observe import source
from cagtool.record.schema import FINDING_CA_FLAG_WITHOUT_COMPILED_BACKWARD, FindingEvent
from cagtool.record.writer import RecordWriter

FLAG_WITHOUT_COMPILED_BACKWARD = FINDING_CA_FLAG_WITHOUT_COMPILED_BACKWARD
TRACED_BACKWARD = "backward_traced_by_dynamo"
# Something put torch's own backward entry point back over cagtool's (code that saved it before
# cagtool ran): cagtool put its own back, backward calls in between were not recorded.
BACKWARD_ENTRY_RESTORED = "backward_entry_restored"
# Something else replaced the backward entry point: backward calls that do not reach cagtool's are
# not recorded (the record says from when).
BACKWARD_ENTRY_REPLACED = "backward_entry_replaced"
# torch._dynamo.reset() inside the ca mode's compiled autograd: the backwards after it run
# without compiled autograd, as they do inside `_enable` by hand.
CA_RESET = "ca_turned_off_by_reset"
# An optimizer without state (SGD without momentum) stepped inside compiled code: its steps were read
# from its last parameter's version counter, which anything changing that parameter in place in the
# same compiled call also moves (docs/torch-internals.md, "An optimizer without state").
COMPILED_STEP_FROM_PARAMETERS = "compiled_step_read_from_parameters"
FLAG_CHECK_EVERY = 64  # backward calls between two looks at the script's CA flag (check_flag)


class StepFindings:
    """Findings of one record; `current_step`: the step in progress, asked when one is written."""

    def __init__(self, writer: RecordWriter, mode: str, current_step: Callable[[], int]) -> None:
        self.writer = writer
        self.mode = mode
        self.current_step = current_step
        self.flag_done = mode != "ca"  # the CA-flag finding was written, or cannot apply
        self.entry_findings: set[str] = set()
        self.dynamo_config: Any = None  # torch._dynamo.config and compiled_autograd, set at install
        self.compiled_autograd: Any = None

    def check_flag(self, inside_compiled_call: bool) -> None:
        """The script set the CA flag but this backward runs with no compiled autograd of its own, so
        as written it would get none (only cagtool's own enable is active): torch 2.13 reads the flag
        when torch.compile(...) is called, and a function it made with the flag set turns compiled
        autograd on around each of its calls (eval_frame.py, OptimizeContext). So either the backward
        runs outside any compiled function, or inside one torch.compile made before the flag was set
        (`inside_compiled_call`: a compiled call is in progress in this thread). Asked at the first
        backward and every FLAG_CHECK_EVERY-th after it: reading a Dynamo config value is several
        Python calls, and a script sets the flag once, usually before training."""
        if self.flag_done or self.mode != "ca":
            return
        if self.dynamo_config.compiled_autograd and self.compiled_autograd.depth <= 1:
            self.flag_done = True
            where = source.user_caller()
            why = ("its backward runs inside a function torch.compile made before the flag was set (torch 2.13 reads the flag "
                   "when torch.compile(...) is called), so without cagtool it gets no compiled autograd. Set the flag before "
                   "torch.compile(...)" if inside_compiled_call else
                   "its backward runs outside any torch.compile'd function, so without cagtool it gets no compiled autograd "
                   "(torch 2.13 turns it on only around the calls of functions torch.compile made after the flag was set). Call "
                   "backward inside such a function (the flag set before torch.compile(...))")
            self.writer.emit(
                FindingEvent,
                code=FLAG_WITHOUT_COMPILED_BACKWARD,
                message=(f"the script sets torch._dynamo.config.compiled_autograd = True, but {why}, or wrap the loop in "
                         "torch._dynamo.compiled_autograd._enable(...)."),
                step=self.current_step(),
                source=where,
                detail={"inside_compiled_call": inside_compiled_call},
            )

    def ca_reset(self) -> None:
        """The script called torch._dynamo.reset() while compiled autograd was on: said once, at
        the first such reset (a test suite resets before every test)."""
        if CA_RESET in self.entry_findings:
            return
        self.entry_findings.add(CA_RESET)
        step = self.current_step()
        self.writer.emit(
            FindingEvent,
            code=CA_RESET,
            message=(
                f"at step {step} the script called torch._dynamo.reset(), which turns compiled autograd off inside an _enable block: "
                "as with compiled autograd enabled by hand, the backwards after it run without it unless the script "
                "enables it again. To keep it on across a reset, re-enter torch._dynamo.compiled_autograd._enable(...) "
                "after the reset, or set torch._dynamo.config.compiled_autograd = True and call backward inside the "
                "torch.compile'd function (the flag survives a reset)."
            ),
            step=step,
            source=source.user_caller(how="caller"),
        )

    def compiled_step_from_parameters(self, step: int, optimizer: str) -> None:
        """Steps of an optimizer without state inside compiled code were counted (boundaries.py,
        `StepCounter.read_from_parameters`: the first such step and the optimizer's class): said once,
        at the end of the watch."""
        self.writer.emit(
            FindingEvent,
            code=COMPILED_STEP_FROM_PARAMETERS,
            message=(
                f"{optimizer} steps inside compiled code from step {step} on; it keeps no state cagtool can read (e.g. "
                "SGD without momentum), so cagtool saw each of those steps as a change of its last parameter between the entry "
                "and the return of the compiled call. If that compiled function also changes the parameter in place "
                "on calls that do not step the optimizer (clamping, renormalising), those calls count as steps too: "
                "compare the step count with the script's own"
            ),
            step=step,
            detail={"optimizer": optimizer},
        )

    def entry_changed(self, hooks: Any, reinstall: bool) -> None:
        """torch.autograd._engine_run_backward is not cagtool's any more (seen at an optimizer step
        and at the end). Torch's own put back over it (by code that saved it before cagtool ran) is
        replaced by cagtool's again: the two run the same body. Anything else is left in place, as
        the job set it; backward calls that do not reach cagtool's are not recorded, and a finding
        says so, once, from the step it was first seen. `hooks`: hooks.InstalledHooks, None once
        uninstalled. The caller turns Dynamo's frame callback off."""
        import torch.autograd
        from torch.autograd import graph as autograd_graph

        entry = hooks.entry if hooks is not None else None
        current = torch.autograd.__dict__.get("_engine_run_backward")
        wrapped, hops = current, 0
        while wrapped is not None and wrapped is not entry and hops < 16:
            wrapped, hops = getattr(wrapped, "__wrapped__", None), hops + 1  # functools.wraps
        if wrapped is entry or hooks is None:
            return  # cagtool's, or a wrapper around it: every backward still reaches it
        name = f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', type(current).__name__)}"
        restored = current is hooks.original or current is hooks.original_graph
        if restored and reinstall:
            torch.autograd._engine_run_backward = entry
            autograd_graph._engine_run_backward = entry
        code = BACKWARD_ENTRY_RESTORED if restored else BACKWARD_ENTRY_REPLACED
        if code in self.entry_findings:
            return
        self.entry_findings.add(code)
        if restored:
            message = (
                "something put torch's own torch.autograd._engine_run_backward back in place of cagtool's "
                "(code that saved it before cagtool started); backward calls made between that and this "
                f"step were not recorded. cagtool put its own back{'' if reinstall else ' (at the end of the run)'}: "
                "from here on every backward is recorded again"
            )
        else:
            message = (
                f"torch.autograd._engine_run_backward was replaced by {name}; backward calls that do not "
                "go through cagtool's entry point (which it replaced) are not recorded from here on. "
                "cagtool leaves the job's replacement in place"
            )
        self.writer.emit(FindingEvent, code=code, message=message, step=self.current_step(), detail={"entry_point": name})

    def traced_backward(self, backward_calls: int) -> None:
        """With trace_autograd_ops, Dynamo traces `loss.backward()` into its own graph: no backward
        reaches the autograd engine's entry point, so there are no steps and no CA graphs to record."""
        import torch

        if backward_calls == 0 and getattr(torch._dynamo.config, "trace_autograd_ops", False):
            self.writer.emit(
                FindingEvent,
                code=TRACED_BACKWARD,
                message=(
                    "the script sets torch._dynamo.config.trace_autograd_ops = True: Dynamo traced its "
                    "backward calls into the compiled graphs, so no backward ran through the autograd "
                    "engine (no steps, no compiled-autograd graphs to record)"
                ),
            )
