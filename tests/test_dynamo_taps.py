"""cagtool reads Dynamo (compiles, recompile reasons, graph breaks, AOT backward graphs) without a
handler on torch's structured logger, and what it reads equals what a handler would have got.
Real torch, in process: one job run twice, once tapped, once with a handler on `torch.__trace`."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from cagtool.capture.observe import dynamo_taps
from cagtool.capture.observe.torch_logs import TRACE_LOGGER, StructuredLogHandler
from cagtool.capture.steps.tracker import StepTracker
from cagtool.record.writer import RecordWriter
from cagtool.record.loader import load_mode
from cagtool.record.manifest import ModeManifest
from cagtool.record.schema import AotBackwardGraphEvent, DynamoCompileEvent, DynamoRecompileEvent, GraphBreakEvent

ROOT = Path(__file__).resolve().parent.parent


def _job() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = x + 1
        print("", end="")  # a graph break: Dynamo cannot trace print
        return (x * 2).sin()

    compiled = torch.compile(f, backend="aot_eager")
    with torch._dynamo.config.patch(recompile_limit=2):
        for n in (1, 2, 3):
            compiled(torch.ones(3, requires_grad=True), n).sum().backward()


def _record(tmp_path: Path, name: str, tapped: bool) -> tuple[Any, StructuredLogHandler]:
    torch._dynamo.reset()
    manifest = ModeManifest(mode="aot", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
    writer = RecordWriter(tmp_path / name, manifest)
    handler = StructuredLogHandler(writer, StepTracker(writer, "aot"))
    logger = logging.getLogger(TRACE_LOGGER)
    old_level, taps = logger.level, None
    if tapped:
        taps = dynamo_taps.install(handler)
    else:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        with torch._guards.compile_context(None):  # no compile context left over by an earlier test
            _job()
    finally:
        if taps is not None:
            taps.uninstall()
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        writer.close()
    return load_mode(tmp_path / name), handler


def _summary(record: Any) -> dict[str, Any]:
    return {
        "compiles": [(c.compile_id, c.co_name, c.fail_type, c.graph_op_count, c.has_guarded_code) for c in record.of(DynamoCompileEvent)],
        "recompiles": [(r.compile_id, r.reasons) for r in record.of(DynamoRecompileEvent)],
        "breaks": [(b.compile_id, b.file, b.line, b.code) for b in record.of(GraphBreakEvent)],
        "aot_backward": [a.compile_id for a in record.of(AotBackwardGraphEvent)],
    }


def _compare(tmp_path: Path) -> dict[str, Any]:
    handled, handler = _record(tmp_path, "handler", tapped=False)
    tapped, tap_handler = _record(tmp_path, "taps", tapped=True)
    first = lambda record: record.of(GraphBreakEvent)[0].reason.splitlines()[0]  # noqa: E731
    return {
        "errors": [handler.errors, tap_handler.errors, handler.last_error, tap_handler.last_error],
        "want": _summary(handled),
        "got": _summary(tapped),
        "reasons": [first(handled), first(tapped)],
    }


@pytest.mark.slow
def test_tapped_records_equal_the_structured_logs(tmp_path):
    # In a fresh interpreter: a capture that raised earlier in this one leaves torch's compile and
    # metrics contexts entered, and torch's own records then carry that capture's id.
    proc = subprocess.run([sys.executable, __file__, str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["errors"][:2] == [0, 0], result["errors"]
    want, got = result["want"], result["got"]
    assert want["compiles"] and want["recompiles"] and want["breaks"] and want["aot_backward"]
    assert got == want
    # the reasons' text too (the tap's payload is torch's reason without the user traceback)
    assert result["reasons"][0] == result["reasons"][1]


def test_every_tapped_function_exists_and_taps_come_off():
    every = dynamo_taps.TAPPED + dynamo_taps.ARTIFACT_TAPPED
    originals = [dynamo_taps._resolve(module, path)[2] for module, path in every]
    taps = dynamo_taps.install(StructuredLogHandler.__new__(StructuredLogHandler))
    assert len(taps._installed) == len(every)
    taps.uninstall()
    assert [dynamo_taps._resolve(module, path)[2] for module, path in every] == originals
    # without the artifacts, their taps are left out
    taps = dynamo_taps.install(StructuredLogHandler.__new__(StructuredLogHandler), record_artifacts=False)
    assert len(taps._installed) == len(dynamo_taps.TAPPED)
    taps.uninstall()


_TAP_ON_IMPORT = """
import sys, json
import torch  # not torch._dynamo: a followed process's taps may go on before the job imports it
from cagtool.capture.observe import dynamo_taps
from cagtool.capture.observe.torch_logs import StructuredLogHandler
taps = dynamo_taps.install(StructuredLogHandler.__new__(StructuredLogHandler))
out = {"imported_by_install": [m in sys.modules for m in ("torch._dynamo.convert_frame", "torch._inductor.graph")]}
import torch._dynamo
from torch._dynamo import convert_frame, guards
# convert_frame binds guards' function by name when it is imported, after guards was tapped: tapped once
once = convert_frame.get_and_maybe_log_recompilation_reasons
out["tapped_once"] = [hasattr(once, "__wrapped__"), not hasattr(once.__wrapped__, "__wrapped__")]
from torch._inductor.graph import GraphLowering
from torch._functorch._aot_autograd import graph_compile
out["tapped_on_import"] = [hasattr(GraphLowering._compile_to_module_lines, "__wrapped__"), hasattr(graph_compile._log_fw_bw_graphs, "__wrapped__")]
out["installed"] = len(taps._installed)
taps.uninstall()
out["after_uninstall"] = [hasattr(GraphLowering._compile_to_module_lines, "__wrapped__"), hasattr(graph_compile._log_fw_bw_graphs, "__wrapped__"),
                        hasattr(convert_frame.get_and_maybe_log_recompilation_reasons, "__wrapped__"), hasattr(guards.get_and_maybe_log_recompilation_reasons, "__wrapped__")]
out["finder_left"] = any(type(f).__name__ == "OnImport" for f in sys.meta_path)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_module_not_imported_yet_is_tapped_when_torch_imports_it():
    """Installing the taps imports nothing of torch's (Inductor's graph module alone is ~0.8 s of
    CPU a process): a module imported later is tapped as it is imported, once even where it binds
    a name another tapped module holds (each recompile was recorded twice in a DDP rank when it
    was not), and untapped at the end."""
    proc = subprocess.run([sys.executable, "-c", _TAP_ON_IMPORT], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"imported_by_install": [False, False], "tapped_once": [True, True], "tapped_on_import": [True, True],
                   "installed": len(dynamo_taps.TAPPED + dynamo_taps.ARTIFACT_TAPPED), "after_uninstall": [False] * 4, "finder_left": False}


def test_no_handler_on_torchs_structured_logger_while_tapped(tmp_path):
    logger = logging.getLogger(TRACE_LOGGER)
    before = list(logger.handlers)  # torch's own LazyTraceHandler until the first record, which it leaves at
    _record(tmp_path, "taps", tapped=True)
    assert set(logger.handlers) <= set(before)
    assert not any(isinstance(h, StructuredLogHandler) for h in logger.handlers)


def test_doctor_checks_every_tapped_name():
    from cagtool.doctor import CA_ENTRY_POINTS

    assert {f"{module}.{path}" for module, path in dynamo_taps.TAPPED + dynamo_taps.ARTIFACT_TAPPED} <= set(CA_ENTRY_POINTS)


if __name__ == "__main__":
    print(json.dumps(_compare(Path(sys.argv[1])), default=list))
