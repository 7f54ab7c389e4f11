"""DistributedDataParallel under the profiler: which reducer each DDP model got, and whether its
all-reduces made it into the compiled-autograd graphs.

With the Python reducer DDP registers one post-accumulate-grad hook per trainable parameter that
all-reduces its gradient; compiled autograd puts each into the CA graph as
`call_hook(..., hook_type='post_acc_grad_hook')` (Dynamo then inlines the hook, so the compiled
graph holds `_c10d_functional.all_reduce`). A CA graph of a DDP job without those hooks means the
gradients were not synchronised by the graph (docs/torch-internals.md).
"""

from __future__ import annotations

import functools
import json
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from cagtool.capture.modes.mode_setup import CA_OPTIMIZE_DDP, script_config_value
from cagtool.record.schema import EVENTS_FILE, DDPModelEvent, FindingEvent
from cagtool.torch_text import POST_ACC_GRAD_HOOK

DDP_COLLECTIVES_MISSING = "ddp_collectives_not_in_ca_graphs"
DDP_CPP_REDUCER_UNDER_CA = "ddp_cpp_reducer_under_ca"
_MB = 1024 * 1024


def model_event_fields(model: Any, mode: str) -> dict[str, Any]:
    """The ddp_model event's fields, read off a constructed DDP model."""
    import torch
    import torch.distributed as dist

    group = getattr(model, "process_group", None)
    rank = world_size = None
    try:
        rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    except Exception:  # noqa: BLE001 - a group we cannot query: leave them unknown
        pass
    script_value = script_config_value("optimize_ddp")
    cap = getattr(model, "bucket_bytes_cap", None)
    return {
        "reducer": "python" if getattr(model, "_use_python_reducer", False) else "cpp",
        "optimize_ddp": str(torch._dynamo.utils.get_optimize_ddp_mode()),
        "set_by": "cagtool" if mode == "ca" and script_value != CA_OPTIMIZE_DDP else "script",
        "script_optimize_ddp": None if script_value is None else str(script_value),
        "rank": rank,
        "world_size": world_size,
        "num_params": sum(1 for p in model.module.parameters() if p.requires_grad),
        "all_reduce_hooks": len(getattr(model, "_accum_grad_hooks", []) or []),
        "bucket_cap_mb": cap / _MB if isinstance(cap, (int, float)) else None,
        "find_unused_parameters": getattr(model, "find_unused_parameters", None),
        "static_graph": getattr(model, "static_graph", None),
        "gradient_as_bucket_view": getattr(model, "gradient_as_bucket_view", None),
    }


def install(on_model: Callable[[Any], None]) -> None:
    """Call `on_model(model)` after each DistributedDataParallel.__init__ (subclasses included)."""
    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel.__init__
    if getattr(original, "_cagtool_wrapped", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            if uses_gloo(getattr(self, "process_group", None)):
                weakref.finalize(self, let_gloo_workers_finish)
        except Exception:  # noqa: BLE001 - never fail the user's model construction
            pass
        try:
            on_model(self)
        except Exception:  # noqa: BLE001 - never fail the user's model construction
            pass

    __init__._cagtool_wrapped = True  # type: ignore[attr-defined]
    DistributedDataParallel.__init__ = __init__


# torch 2.13's ~ProcessGroupGloo joins gloo's worker threads while holding the GIL, and a worker
# that is still releasing a finished collective's Python-owned tensors needs the GIL: the process
# then hangs for good (docs/reliability.md, "A DDP job's end under gloo"). The last collective's
# tensors are released by a worker just after the call returned, so the hang needs the process
# group to be freed within a few milliseconds of a collective, with the GIL held: a DDP model freed
# right after the job's last barrier, whose Reducer holds the last reference to the group, or
# destroy_process_group() called right then. Before either, cagtool gives the GIL up for this long.
GLOO_SETTLE_S = 0.02


def uses_gloo(group: Any) -> bool:
    """Whether `group` (None: the default group) runs on gloo, for any device."""
    import torch.distributed as dist

    try:
        return "gloo" in str(dist.get_backend(group)).lower()
    except Exception:  # noqa: BLE001 - not initialised, or a group we cannot query
        return False


settles = 0  # how many times this process gave the GIL up for gloo (tests/test_ddp_teardown.py)


def let_gloo_workers_finish() -> None:
    """Give the GIL up for GLOO_SETTLE_S (a DDP model's finalizer and destroy_process_group's
    wrapper): a gloo worker waiting for it finishes releasing its tensors before the group goes."""
    global settles
    settles += 1
    time.sleep(GLOO_SETTLE_S)


def install_destroy_guard() -> None:
    """destroy_process_group() gives the GIL up first when a gloo group is about to be destroyed."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    c10d = dist.distributed_c10d
    original = c10d.destroy_process_group
    if getattr(original, "_cagtool_wrapped", False):
        return

    @functools.wraps(original)
    def destroy_process_group(group: Any = None) -> Any:
        try:
            if dist.is_initialized() and uses_gloo(group):
                let_gloo_workers_finish()
        except Exception:  # noqa: BLE001 - never fail the user's teardown
            pass
        return original(group)

    destroy_process_group._cagtool_wrapped = True  # type: ignore[attr-defined]
    c10d.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group


class DDPWatch:
    """One process's DDP models: their events, the run-output line, the end-of-run check."""

    def __init__(self, mode: str, emit: Callable[..., Any], current_step: Callable[[], int | None], announce: bool) -> None:
        self.mode = mode
        self.emit = emit
        self.current_step = current_step
        self.announce = announce  # print the one line about the reducer (rank 0 / single process)
        self.models: list[dict[str, Any]] = []

    def on_model(self, model: Any) -> None:
        fields = model_event_fields(model, self.mode)
        self.models.append(fields)
        self.emit(DDPModelEvent, step=self.current_step(), **fields)
        if self.mode == "ca" and fields["reducer"] == "cpp":
            self.emit(
                FindingEvent,
                code=DDP_CPP_REDUCER_UNDER_CA,
                message=(
                    "a DistributedDataParallel model uses the C++ reducer in ca mode; compiled autograd "
                    "refuses it. Fix: build DDP with torch._dynamo.config.optimize_ddp = \"python_reducer\" in effect."
                ),
                step=self.current_step(),
            )
        if self.announce and len(self.models) == 1 and self.mode == "ca":
            self.announce = False
            where = f"rank {fields['rank']}" if fields["rank"] is not None else "this process"
            if fields["script_optimize_ddp"] == CA_OPTIMIZE_DDP:  # the script's own choice: say so
                who = f"the script set torch._dynamo.config.optimize_ddp = {CA_OPTIMIZE_DDP!r} itself"
            else:
                who = f"cagtool set torch._dynamo.config.optimize_ddp = {CA_OPTIMIZE_DDP!r}"
            print(
                f"cagtool: ca mode: DDP ({where}) uses the Python reducer: {who} (the C++ reducer does not work "
                "under compiled autograd); aot and eager keep the script's setting",
                file=sys.stderr,
                flush=True,
            )

    def check_collectives(self, record_dir: Path) -> None:
        """At the end of a ca-mode process: a DDP model with the Python reducer whose CA graphs hold
        no post-accumulate-grad hook had its gradients all-reduced outside compiled autograd, or not at all."""
        if self.mode != "ca" or not any(m["reducer"] == "python" for m in self.models):
            return
        graphs, with_hooks = 0, 0
        try:
            with (record_dir / EVENTS_FILE).open() as handle:
                for line in handle:
                    if '"ca_graph"' not in line:
                        continue
                    event = json.loads(line)
                    if event.get("kind") != "ca_graph":
                        continue
                    graphs += 1
                    if any(h.get("hook_type") == POST_ACC_GRAD_HOOK for h in event.get("hooks", [])):
                        with_hooks += 1
        except (OSError, ValueError):
            return
        if graphs and not with_hooks:
            self.emit(
                FindingEvent,
                code=DDP_COLLECTIVES_MISSING,
                message=(
                    f"DDP (Python reducer) trained under compiled autograd, but none of this process's {graphs} "
                    "CA graph(s) holds DDP's all-reduce hooks (call_hook post_acc_grad_hook): gradients were not "
                    "synchronised inside the compiled backward. Fix: build the DDP model after compiled autograd and "
                    "optimize_ddp=\"python_reducer\" are in effect, and do not remove its _accum_grad_hooks."
                ),
            )
