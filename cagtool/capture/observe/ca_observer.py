"""Observes every compiled-autograd capture, whoever installed the compiler.

Patches `AutogradCompilerInstance.begin_capture` / `log_compile_reasons` / `end_capture` (looked up
on the class by C++, so this sees captures made under cagtool's own compiler and under the
script's `torch._dynamo.config.compiled_autograd` or `_enable`), and installs a verbose logger so
that C++ computes cache-miss reasons at all (TORCH_2_13_NOTES.md, "Cache misses").
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from cagtool.capture.observe import graph_dump, source
from cagtool.capture.steps import StepTracker
from cagtool.capture.writer import RecordWriter
from cagtool.record.schema import (
    MISS_CHANGED_SHAPES,
    MISS_NEW_NODE,
    MISS_UNKNOWN,
    CACompileEvent,
    CacheMissEvent,
    CAGraphEvent,
    ChangedSize,
)

_NEW_NODE = re.compile(
    r"Cache miss due to new autograd node: (?P<node>.+?) \(NodeCall (?P<call>\d+)\) "
    r"with key size (?P<key>\d+), previous key sizes=\[(?P<prev>[^\]]*)\]"
)
_CHANGED = re.compile(r"Cache miss due to (?P<n>\d+) changed tensor shapes \(total of (?P<total>\d+)\): (?P<sizes>.*)")
_SIZE_INDEX = re.compile(r"sizes\[(\d+)\]")
_ID_PREFIX = re.compile(r"^!(\d+): ")


class _VerboseLogger:
    """What C++ calls with each cache-miss message; only its presence matters (reasons then reach
    log_compile_reasons with their graph id). Messages are also kept for graphs whose reasons
    never arrive there."""

    def __init__(self) -> None:
        self.last_message: str | None = None

    def debug(self, message: str, *args: Any) -> None:
        if message.startswith("Cache miss"):
            self.last_message = message


def parse_miss(message: str) -> dict[str, Any]:
    """The fields of a torch 2.13 cache-miss message (verbatim text kept by the caller)."""
    match = _NEW_NODE.search(message)
    if match:
        prev = [int(p) for p in match.group("prev").replace(" ", "").split(",") if p]
        return {
            "miss_kind": MISS_NEW_NODE,
            "node": match.group("node"),
            "node_call": int(match.group("call")),
            "key_size": int(match.group("key")),
            "previous_key_sizes": prev,
        }
    match = _CHANGED.search(message)
    if match:
        return {
            "miss_kind": MISS_CHANGED_SHAPES,
            "indices": [int(i) for i in _SIZE_INDEX.findall(match.group("sizes"))],
            # N sizes changed; "total of M" counts every dynamic size of the new graph.
            "total_changed": int(match.group("n")),
            "dynamic_sizes": int(match.group("total")),
        }
    return {"miss_kind": MISS_UNKNOWN}


class CaptureObserver:
    def __init__(self, writer: RecordWriter, steps: StepTracker, cagtool_compiler: Callable[..., Any] | None) -> None:
        self.writer = writer
        self.steps = steps
        self.cagtool_compiler = cagtool_compiler
        self.logger = _VerboseLogger()
        self._originals: dict[str, Any] = {}
        self._seen_torch_ids: set[int] = set()
        self._next_record_id = 0

    # -- installation -------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        from torch._dynamo import compiled_autograd as ca

        cls = ca.AutogradCompilerInstance
        for name in ("begin_capture", "log_compile_reasons", "end_capture"):
            self._originals[name] = getattr(cls, name)
        observer = self
        disable = torch._dynamo.disable

        orig_begin = self._originals["begin_capture"]
        orig_reasons = self._originals["log_compile_reasons"]
        orig_end = self._originals["end_capture"]

        def begin_capture(inst, inputs, sizes, scalars, origins, *args, **kwargs):
            observer._on_begin(inst, list(sizes), origins)
            return orig_begin(inst, inputs, sizes, scalars, origins, *args, **kwargs)

        def log_compile_reasons(inst, compile_reasons):
            observer._on_reasons(inst, list(compile_reasons))
            return orig_reasons(inst, compile_reasons)

        def end_capture(inst, outputs):
            return observer._on_end(inst, outputs, orig_end)

        cls.begin_capture = disable(begin_capture)
        cls.log_compile_reasons = disable(log_compile_reasons)
        cls.end_capture = disable(end_capture)
        self.install_logger()

    def install_logger(self) -> None:
        import torch

        # C++ keeps a borrowed pointer: self.logger lives as long as this observer.
        torch._C._dynamo.compiled_autograd.set_verbose_logger(self.logger)

    def uninstall(self) -> None:
        from torch._dynamo import compiled_autograd as ca

        for name, original in self._originals.items():
            setattr(ca.AutogradCompilerInstance, name, original)

    # -- events -------------------------------------------------------------------------------
    def _record_id(self, torch_id: int) -> int:
        """torch restarts ids after torch._dynamo.reset(); the record keeps them unique."""
        record_id = torch_id if torch_id not in self._seen_torch_ids and torch_id >= self._next_record_id else self._next_record_id
        self._seen_torch_ids.add(torch_id)
        self._next_record_id = max(self._next_record_id, record_id + 1)
        return record_id

    def _on_begin(self, inst: Any, sizes: list[int], origins: Any) -> None:
        inst._cag_t0 = time.perf_counter()
        inst._cag_sizes = sizes
        try:
            inst._cag_size_origins = [tuple(o) if o else None for o in origins[1]]
        except (IndexError, TypeError):
            inst._cag_size_origins = []
        inst._cag_step = self.steps.current_step
        inst._cag_reason_logged = False
        inst._cag_caller = source.user_caller()
        self.steps.note_capture_started()

    def _on_reasons(self, inst: Any, reasons: list[str]) -> None:
        if not reasons:
            return
        message = _ID_PREFIX.sub("", reasons[-1])
        inst._cag_reason_logged = True
        self._emit_miss(inst, message)

    def _emit_miss(self, inst: Any, message: str) -> None:
        torch_id = int(getattr(inst, "id", -1))
        if not hasattr(inst, "_cag_record_id"):
            inst._cag_record_id = self._record_id(torch_id)
        parsed = parse_miss(message)
        sizes: list[int] = getattr(inst, "_cag_sizes", [])
        origins: list[Any] = getattr(inst, "_cag_size_origins", [])
        changed: list[ChangedSize] = []
        # sizes[i] indexes this capture's dynamic sizes: a size that just became dynamic was a
        # constant of the previous graph, so its earlier value is read off that graph by the
        # reports (report/changed_sizes.py), not guessed here by index.
        for index in parsed.pop("indices", []):
            origin = origins[index] if index < len(origins) else None
            value = sizes[index] if index < len(sizes) else None
            changed.append(
                ChangedSize(
                    index=index,
                    value=value,
                    node=origin[1] if origin else None,
                    node_call=int(origin[0]) if origin else None,
                )
            )
        node_source = None
        if parsed.get("node") and self.steps.current_roots:
            node_source = source.node_creation(self.steps.current_roots, parsed["node"])
        caller = getattr(inst, "_cag_caller", None)
        self.writer.emit(
            CacheMissEvent,
            ca_id=inst._cag_record_id,
            compile_id=f"!{torch_id}",
            step=getattr(inst, "_cag_step", None),
            message=message,
            changed_sizes=changed,
            source=node_source or caller,
            backward_call=caller,
            **parsed,
        )

    def _on_end(self, inst: Any, outputs: Any, orig_end: Callable[..., Any]) -> Any:
        shapes = graph_dump.snapshot_meta(inst.fx_tracer.graph)
        captured: dict[str, Any] = {}
        user_compiler = inst.compiler_fn

        def recording_compiler(gm: Any) -> Any:
            captured["gm"] = gm
            captured["capture_end"] = time.perf_counter()
            return user_compiler(gm)

        inst.compiler_fn = recording_compiler
        runtime_wrapper, compiled_fn = orig_end(inst, outputs)
        torch_id = int(inst.id)
        if not getattr(inst, "_cag_reason_logged", False):
            message = self.logger.last_message or "no cache-miss reason reported by torch"
            self._emit_miss(inst, message)
        self.logger.last_message = None
        record_id = inst._cag_record_id
        capture_s = captured.get("capture_end", time.perf_counter()) - getattr(inst, "_cag_t0", time.perf_counter())
        gm = captured.get("gm")
        if gm is not None:
            self._emit_graph(inst, gm, shapes, record_id, torch_id, capture_s, user_compiler)
        self.steps.note_capture_finished(capture_s)
        return runtime_wrapper, self._time_first_call(compiled_fn, record_id)

    def _emit_graph(self, inst: Any, gm: Any, shapes: dict, record_id: int, torch_id: int, capture_s: float, compiler: Any) -> None:
        summary = graph_dump.summarize_graph(gm, shapes)
        code = gm.print_readable(print_output=False, include_stride=True, include_device=True)
        code_rel, nodes_rel = self.writer.write_graph(record_id, f"!{torch_id}", code, summary.nodes)
        is_ours = self.cagtool_compiler is not None and compiler is self.cagtool_compiler
        self.writer.emit(
            CAGraphEvent,
            ca_id=record_id,
            compile_id=f"!{torch_id}",
            step=getattr(inst, "_cag_step", None),
            node_count=len(summary.nodes),
            op_histogram=summary.op_histogram,
            autograd_nodes=summary.autograd_nodes,
            aot_ids=summary.aot_ids,
            hooks=summary.hooks,
            num_sizes=summary.num_sizes,
            capture_s=capture_s,
            code_file=code_rel,
            nodes_file=nodes_rel,
            compiler="cagtool" if is_ours else "script",
        )

    def _time_first_call(self, compiled_fn: Callable[..., Any], record_id: int) -> Callable[..., Any]:
        import torch

        state = {"first": True}
        writer, steps = self.writer, self.steps

        def first_call_timer(*args: Any, **kwargs: Any) -> Any:
            if not state["first"]:
                return compiled_fn(*args, **kwargs)
            state["first"] = False
            start = time.perf_counter()
            try:
                result = compiled_fn(*args, **kwargs)
            except BaseException as exc:
                writer.emit(CACompileEvent, ca_id=record_id, first_call_s=time.perf_counter() - start, step=steps.current_step, ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
                raise
            writer.emit(CACompileEvent, ca_id=record_id, first_call_s=time.perf_counter() - start, step=steps.current_step)
            return result

        # recursive=False: keep Dynamo off this frame only, so the compiled graph inside still compiles.
        return torch._dynamo.disable(first_call_timer, recursive=False)
