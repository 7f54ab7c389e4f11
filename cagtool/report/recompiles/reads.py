"""What the recompile views read from a mode record besides its recompiles: the steps, the
frames Dynamo gave up on (recompile-limit hits), the step a forward compile belongs to, and how a
source line is shown. Shared by the table (table.py) and the long-job views (budget.py,
unexpected.py, phases.py), which the table holds."""

from __future__ import annotations

import os
from dataclasses import dataclass

import msgspec

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import FIRST_STEP, IMPORTED_MODE, DynamoCompileEvent, FindingEvent, SourceRef, StepEvent
from cagtool.torch_text import compile_id_in, recompile_limit


@dataclass(frozen=True)
class StepSummary:
    """What `recompiles` needs from the step events: how many, and the last step number."""

    count: int
    last: int | None

    @classmethod
    def counted(cls, count: int) -> StepSummary:
        """From the number of step events alone (a record read without them): steps are numbered
        FIRST_STEP, FIRST_STEP + 1, ... in write order."""
        return cls(count, FIRST_STEP + count - 1 if count else None)


@dataclass(frozen=True)
class LimitHit:
    """Dynamo gave up compiling a frame: it runs without compiling (eager) from then on."""

    mode: str
    compile_id: str
    step: int | None
    seq: int
    limit_type: str  # recompile_limit | accumulated_recompile_limit
    limit_value: int | None
    function: str = ""
    file: str = ""
    line: int | None = None


def display_path(path: str, cwd: str) -> str:
    """A path relative to the run's working directory when it is inside it (stable across machines)."""
    if not path or not cwd or not os.path.isabs(path):
        return path
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def short_file(path: str, cwd: str) -> str:
    shown = display_path(path, cwd)
    return shown if shown else "?"


def format_source(ref: SourceRef | None, cwd: str, with_code: bool = True) -> str:
    if ref is None:
        return ""
    where = f"{short_file(ref.file, cwd)}:{ref.line}"
    if with_code and ref.code:
        return f"{where}  {ref.code.strip()}"
    return where


def forward_step(step: int | None, mode: str = "") -> int | None:
    """The step a forward-frame compile belongs to: the step in progress it was stamped with (the
    loader gives older records that stamping), FIRST_STEP when it carries none. An imported log
    has no steps: None."""
    if mode == IMPORTED_MODE:
        return None
    return FIRST_STEP if step is None else step


def _frame_key(compile_id: str) -> str:
    """`0/3` -> `0`, `!1/2/0` -> `!1/2`: the frame a compile id belongs to."""
    return compile_id.rsplit("/", 1)[0]


def _limit_from_text(text: str) -> tuple[str, int | None] | None:
    return recompile_limit(text)


def limit_hits(record: ModeRecord, compiles: list[DynamoCompileEvent]) -> list[LimitHit]:
    """Frames Dynamo gave up on: compiles that failed with "recompile limit exceeded" (torch's
    compilation metrics), and findings about a recompile limit, once per compile id."""
    hits: list[LimitHit] = []
    seen: set[str] = set()
    # A compile that failed on the limit has no code info; an earlier compile of its frame does.
    named = {_frame_key(c.compile_id): c for c in compiles if c.co_name}
    for event in compiles:
        found = _limit_from_text(f"{event.fail_type or ''} {event.fail_reason or ''}") if event.fail_reason else None
        if found is None or event.compile_id in seen:
            continue
        seen.add(event.compile_id)
        earlier = named.get(_frame_key(event.compile_id))
        if not event.co_name and earlier is not None:
            event = msgspec.structs.replace(
                event, co_name=earlier.co_name, co_filename=earlier.co_filename, co_firstlineno=earlier.co_firstlineno
            )
        hits.append(
            LimitHit(
                mode=record.mode,
                compile_id=event.compile_id,
                step=event.step if event.is_ca_graph else forward_step(event.step, record.mode),
                seq=event.seq,
                limit_type=found[0],
                limit_value=found[1],
                function=event.co_name,
                file=event.co_filename,
                line=event.co_firstlineno,
            )
        )
    for finding in record.of(FindingEvent):
        found = _limit_from_text(f"{finding.code} {finding.message}")
        if found is None:
            continue
        compile_id = compile_id_in(finding.message)
        key = compile_id or f"finding:{finding.seq}"
        if key in seen:
            continue
        seen.add(key)
        src = finding.source
        hits.append(
            LimitHit(
                mode=record.mode,
                compile_id=key if compile_id else "",
                step=finding.step,
                seq=finding.seq,
                limit_type=found[0],
                limit_value=found[1],
                file=src.file if src else "",
                line=src.line if src else None,
                function=src.function if src else "",
            )
        )
    return hits


def step_summary(record: ModeRecord) -> StepSummary:
    held = record.columns.get(StepEvent.kind)
    numbers = held.column("step") if held is not None else [s.step for s in record.of(StepEvent)]
    return StepSummary(len(numbers), max(numbers) if numbers else None)
