"""Where the job changed global state that Dynamo guards on and a user does not expect to cost a
recompile: `torch.set_num_threads` (Dynamo's GLOBAL_STATE guard holds the thread count). When a
call changes the count, a `finding` event (code FINDING_NUM_THREADS) records the user's line that
made it, the values before and after and the step, so a `GLOBAL_STATE changed: num_threads`
recompile is tied to that line (report/recompiles/unexpected.py). torch's own frames cannot: at the
recompile, the line on the stack is the compiled model's call, not the change.

The tap calls torch's function first, unchanged, and only reads `torch.get_num_threads()` around it;
a failure in it is counted by the handler, never raised into the job."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from cagtool.capture.observe import source
from cagtool.record.schema import FindingEvent

if TYPE_CHECKING:
    from cagtool.capture.observe.torch_logs import StructuredLogHandler

FINDING_NUM_THREADS = "num_threads_changed"


def install(handler: "StructuredLogHandler") -> Callable[[], None]:
    """Tap torch.set_num_threads; returns the function that removes the tap."""
    import torch

    original = torch.set_num_threads

    def set_num_threads(n: Any) -> Any:
        before = torch.get_num_threads()
        result = original(n)
        try:
            after = torch.get_num_threads()
            if after != before:
                where = source.user_caller(how="caller")
                handler.writer.emit(
                    FindingEvent,
                    code=FINDING_NUM_THREADS,
                    message=f"torch.set_num_threads changed the intra-op thread count from {before} to {after}",
                    step=handler.steps.current_step,
                    source=where,
                    detail={"before": before, "after": after},
                )
        except Exception as exc:  # noqa: BLE001 - counted, never raised into the job
            handler.errors += 1
            handler.last_error = f"{type(exc).__name__}: {exc}"
        return result

    set_num_threads.__wrapped__ = original  # type: ignore[attr-defined]
    set_num_threads.__doc__ = original.__doc__
    torch.set_num_threads = set_num_threads  # type: ignore[assignment]

    def uninstall() -> None:
        if torch.set_num_threads is set_num_threads:
            torch.set_num_threads = original  # type: ignore[assignment]

    return uninstall
