"""Findings as they are shown: a finding repeated (the same code, words and source line, only its
compile id differing: a capture that raises at every step) is one line that says how many times
and where, not one line each."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cagtool.record.schema import (
    FINDING_COMPILED_MODULE_DROPPED,
    FINDING_COMPILED_MODULE_UNUSED,
    FINDING_DYNAMO_DISABLED,
    FINDING_MODULE_COMPILE_SKIPPED,
    FINDING_THREAD_DIED,
    DynamoCompileEvent,
    FindingEvent,
    GraphBreakEvent,
)
from cagtool.record.manifest import typed_compile_calls
from cagtool.report.text.safe_text import safe_line

if TYPE_CHECKING:
    from cagtool.record.loader import ModeRecord

_COMPILE_ID = re.compile(r"![0-9]+")
SHOWN_IDS = 6  # the compile ids named on a repeated finding's line


@dataclass
class ShownFinding:
    first: FindingEvent
    ids: list[str] = field(default_factory=list)  # the compile ids in the message of each repeat, the first's included
    count: int = 1
    last_step: int | None = None

    @property
    def repeats(self) -> str:
        """What to say after the first's words ("" when it happened once)."""
        if self.count == 1:
            return ""
        ids = ", ".join(self.ids[:SHOWN_IDS]) + (f", ... ({len(self.ids)} ids)" if len(self.ids) > SHOWN_IDS else "")
        at = f", the last at step {self.last_step}" if self.last_step is not None else ""
        return f" - {self.count} times in all{at}" + (f" ({ids})" if len(self.ids) > 1 else "")


def shown_findings(findings: Iterable[FindingEvent]) -> list[ShownFinding]:
    """The findings in the order of their first, repeats folded into it."""
    shown: dict[tuple, ShownFinding] = {}
    for finding in findings:
        source = (finding.source.file, finding.source.line) if finding.source else None
        key = (finding.code, _COMPILE_ID.sub("!", finding.message), source)
        ids = _COMPILE_ID.findall(finding.message)[:1]
        found = shown.get(key)
        if found is None:
            shown[key] = ShownFinding(finding, ids, 1, finding.step)
            continue
        found.count += 1
        found.ids += ids
        found.last_step = finding.step if finding.step is not None else found.last_step
    return list(shown.values())


def thread_deaths(record: "ModeRecord") -> list[str]:
    """One line for each thread of the job that died (an uncaught exception), in the mode's main
    process and in each process it followed ("process 1: thread loader ended with ValueError: bad
    shard 3"; "process main" only where it followed others). The process went on without that
    thread's work (it may exit 0): its figures are not the whole job's."""
    said = []
    for key, rec in (("main", record), *record.processes.items()):
        if not rec.kind_counts.get(FindingEvent.kind):
            continue
        for finding in rec.of(FindingEvent):
            if finding.code != FINDING_THREAD_DIED or not isinstance(finding.detail, dict):
                continue
            detail = finding.detail
            error = f": {detail.get('error')}" if detail.get("error") else ""
            where = f"process {key}: " if record.processes else ""
            said.append(safe_line(f"{where}thread {detail.get('thread')} ended with {detail.get('error_type')}{error}"))
    return said


@dataclass(frozen=True)
class SkippedCompile:
    """A compile call of the script that compiled nothing (capture/observe/compile_calls.py), as
    the headline says it: the call, where, why, and the call that compiles."""

    call: str  # "model.compile()", "torch.compile(model)"
    where: str  # "train.py:4" ("" where the line is not known)
    name: str  # the model the call meant to compile ("model"; "module" where unknown)
    why: str  # "Dynamo skips Sequential's call under Module.compile()"
    fix: str  # "model = torch.compile(model, backend='aot_eager')"

    @property
    def words(self) -> str:
        """"model.compile() (train.py:4) compiled nothing: <why>, so model ran eagerly"."""
        at = f" ({self.where})" if self.where else ""
        return f"{self.call}{at} compiled nothing: {self.why}, so {self.name} ran eagerly"


# The findings of a compile call that compiled nothing (capture/observe/compile_calls.py).
_COMPILED_NOTHING = (FINDING_DYNAMO_DISABLED, FINDING_MODULE_COMPILE_SKIPPED, FINDING_COMPILED_MODULE_DROPPED, FINDING_COMPILED_MODULE_UNUSED)


# torch.compile(DDP(module)) under DDP's C++ reducer (torch 2.13-2.15, gloo on CPU): Dynamo breaks
# the graph at `_inside_ddp_forward`, a context manager torch marks not to trace, and compiles no
# graph at all; the module runs eagerly. DDP(torch.compile(module)) compiles its forward (checked:
# graphs 0 -> 2 per rank), and compiled autograd's mode, on DDP's Python reducer, compiles either
# way. accelerate's Accelerator(dynamo_backend=...) compiles after wrapping (multi-process CPU:
# graphs 0); prepare() given a compiled module wraps that in DDP (graphs 0 -> 1 per rank)
# (docs/torch-internals.md, "torch.compile of a DDP module").
_DDP_FILE_END = "torch/nn/parallel/distributed.py"
_DDP_FORWARD_SKIPPED = "DistributedDataParallel._inside_ddp_forward"


def _ddp_compiled_outside(record: "ModeRecord") -> SkippedCompile | None:
    """A compile call whose code is DDP's forward, in a process that compiled no forward graph and
    broke the graph at DDP's `_inside_ddp_forward`."""
    calls = [c for c in typed_compile_calls(record.manifest) if c["code"][0].replace("\\", "/").endswith(_DDP_FILE_END)]
    if not calls or not any(_DDP_FORWARD_SKIPPED in (b.reason or "") for b in record.of(GraphBreakEvent)):
        return None
    if any(not d.is_ca_graph and d.graph_op_count and not d.fail_type for d in record.of(DynamoCompileEvent)):
        return None
    where = f"{os.path.basename(calls[0]['file'])}:{calls[0]['line']}"
    why = f"Dynamo gives up on DDP's forward at `{_DDP_FORWARD_SKIPPED}` (a function torch marks not to trace, on DDP's C++ reducer)"
    if calls[0].get("via", "").startswith("accelerate/"):
        # Accelerator(dynamo_backend=...).prepare() wraps the model in DDP, then compiles the wrapper.
        return SkippedCompile(f"torch.compile(DDP(module)) by {safe_line(calls[0]['via'])}", safe_line(where), "the module", why,
                              "give prepare() the compiled module, accelerator.prepare(torch.compile(model), ...), without "
                              "dynamo_backend: accelerate then wraps it in DDP, and its forward compiles")
    return SkippedCompile("torch.compile(DDP(module))", safe_line(where), "the module", why,
                          "wrap the compiled module instead, DDP(torch.compile(module)), which compiles its forward (DDP's "
                          "`.module` is then torch.compile's wrapper: its state_dict keys start with `_orig_mod.`, and "
                          "`.module._orig_mod` is the module, to save and load as before)")


def skipped_compiles(record: "ModeRecord") -> tuple[SkippedCompile, ...]:
    """The compile calls of the mode's process that compiled nothing, in order."""
    ddp = _ddp_compiled_outside(record) if record.manifest.mode != "eager" else None
    if not record.kind_counts.get(FindingEvent.kind):
        return (ddp,) if ddp is not None else ()
    found = [ddp] if ddp is not None else []
    for finding in record.of(FindingEvent):
        if finding.code not in _COMPILED_NOTHING or not isinstance(finding.detail, dict):
            continue
        detail = finding.detail
        name = detail.get("variable") if isinstance(detail.get("variable"), str) else "module"
        where = f"{os.path.basename(finding.source.file)}:{finding.source.line}" if finding.source is not None else ""
        if finding.code == FINDING_DYNAMO_DISABLED:
            by = str(detail.get("by") or "Dynamo's switch")
            place, fix = (("in the job's environment", f"unset {by.split('=')[0]}") if by.endswith("=1")
                          else ("by the job", "leave torch._dynamo.config.disable unset"))
            found.append(SkippedCompile("torch.compile", safe_line(where), "the compiled code", safe_line(f"Dynamo was off ({by}, {place})"),
                                        safe_line(f"{fix} (the plain job with it set compiles nothing either)")))
            continue
        if finding.code == FINDING_MODULE_COMPILE_SKIPPED and isinstance(detail.get("via"), str) and detail["via"]:
            module = str(detail.get("module") or "?").rsplit(".", 1)[-1]
            found.append(SkippedCompile(safe_line(f"{module}.compile() by {detail['via']}"), safe_line(where), safe_line(f"the {module}"),
                                        safe_line(f"Dynamo skips {module}'s call under Module.compile()"),
                                        safe_line(f"give the library a model whose forward is your own (a Module subclass whose "
                                                  f"forward calls the {module})")))
        elif finding.code == FINDING_MODULE_COMPILE_SKIPPED:
            arguments = detail.get("arguments") if isinstance(detail.get("arguments"), str) else ""
            module = str(detail.get("module") or "?").rsplit(".", 1)[-1]
            found.append(SkippedCompile(safe_line(f"{name}.compile()"), safe_line(where), safe_line(name),
                                        safe_line(f"Dynamo skips {module}'s call under Module.compile()"),
                                        safe_line(f"{name} = torch.compile({name}{', ' + arguments if arguments else ''})")))
        elif finding.code == FINDING_COMPILED_MODULE_UNUSED:
            statement = str(detail.get("statement") or f"torch.compile({name})")
            kept = str(detail.get("kept_as") or "the compiled module")
            found.append(SkippedCompile(safe_line(f"torch.compile({name})"), safe_line(where), safe_line(name),
                                        safe_line(f"the job never called the compiled module it returned ({kept}), only {name}"),
                                        safe_line(f"{name} = {statement}")))
        else:
            statement = str(detail.get("statement") or f"torch.compile({name})")
            found.append(SkippedCompile(safe_line(f"torch.compile({name})"), safe_line(where), safe_line(name),
                                        "the compiled module it returned was dropped (torch.compile is not in place)",
                                        safe_line(f"{name} = {statement}")))
    return tuple(found)
