"""What the recompile views read from a mode record besides its recompiles: the steps, the
frames Dynamo gave up on (recompile-limit hits), the step a forward compile belongs to, and how a
source line is shown. Shared by the table (table.py) and the long-job views (budget.py,
unexpected.py, phases.py), which the table holds."""

from __future__ import annotations

import re

import bisect
import os
from dataclasses import dataclass

import msgspec

from cagtool.record.loader import ModeRecord, load_mode
from cagtool.record.schema import (
    FIRST_STEP,
    STATUS_FINISHED,
    BackwardEvent,
    IMPORTED_MODE,
    CacheMissEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    FindingEvent,
    GraphBreakEvent,
    SourceRef,
    StepEvent,
)
from cagtool.torch_text import ca_id_of, compile_frame, compile_id_in, looks_like_torch_or_stdlib_file, recompile_limit


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


def step_list(steps: list[int]) -> str:
    """2, 3, 4, 7 -> '2-4, 7' (ranges of consecutive numbers; steps, size indices)."""
    parts: list[str] = []
    start = prev = None
    for step in steps:
        if prev is not None and step == prev + 1:
            prev = step
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = step
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


# A function whose calls are an evaluation's, by its name (Lightning's validation_step, its sanity
# check's too; HF Trainer's evaluate): a compile called from one with grad off is no training step's.
EVALUATION_FUNCTION = re.compile(r"^(?:validation|test|predict|val)_step$|^(?:evaluate|evaluation|validate|eval)\w*$")


def steps_place(steps: list[int], between: bool) -> str:
    """Where recompiles came, by the steps they were stamped with: "step 4", "steps 2-4, 7"; for an
    evaluation's (`between`: compiled with grad off, after step k-1 ended and before step k's
    backward, stamped k as whatever runs before a step's backward is), "between steps 3 and 4" or
    "before step 0". "" for no step."""
    if not steps:
        return ""
    if not between:
        return f"{'step' if len(steps) == 1 else 'steps'} {step_list(steps)}"
    spans = [f"{s - 1} and {s}" for s in steps if s != FIRST_STEP]
    return ", ".join(([f"between steps {', '.join(spans)}"] if spans else []) + ([f"before step {FIRST_STEP}"] if FIRST_STEP in steps else []))


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


def holding(record: ModeRecord, cls: type) -> ModeRecord:
    """The record, or where it was read without the events of `cls` that it holds (the summary's
    kinds), those events read now (from the columns sidecar where it holds them)."""
    if record.kind_counts.get(cls.kind) and cls.kind not in record.columns and not record.of(cls):
        return load_mode(record.path, kinds={cls.kind}, columns=True)
    return record


def steps_and_seqs(record: ModeRecord, cls: type) -> tuple[list[int], list[int]]:
    """Each event of `cls` (a column kind) by its step and seq: from the columns sidecar where it
    holds them (no event built per line), else from the events."""
    held = record.columns.get(cls.kind)
    if held is not None:
        return held.column("step"), held.column("seq")
    events = record.of(cls)
    return [e.step for e in events], [e.seq for e in events]


def training_end(record: ModeRecord) -> int | None:
    """The seq of the job's last backward call (BackwardEvent, written as the call returns): a
    compile after it, stamped with a step after the last one, came in calls no backward followed
    (an evaluation or prediction after training). None where no backward ran, or where the job
    did not finish (a crash or a signal in a step's forward is no evaluation)."""
    manifest = record.manifest
    if manifest.status != STATUS_FINISHED or manifest.exit_code not in (0, None):
        return None
    _, seqs = steps_and_seqs(holding(record, BackwardEvent), BackwardEvent)
    return max(seqs) if len(seqs) else None


def after_training(step: int | None, seq: int, last_step: int | None, end: int | None) -> bool:
    """A compile (its step stamp and seq) came after training ended: in the step the job ended in,
    after its last backward call returned (`training_end`)."""
    return step is not None and last_step is not None and end is not None and step > last_step and seq > end


def step_summary(record: ModeRecord) -> StepSummary:
    held = record.columns.get(StepEvent.kind)
    numbers = held.column("step") if held is not None else [s.step for s in record.of(StepEvent)]
    return StepSummary(len(numbers), max(numbers) if numbers else None)


def inside_captures(seqs: list[int], starts: dict[int, int], graphs: dict[int, CAGraphEvent],
                    compile_events: list[DynamoCompileEvent]) -> dict[int, int]:
    """seq of an event of Dynamo's (a compile, a graph break) in a frame that is not the user's ->
    the ca_id of the capture it happened in: after the capture's cache miss (`starts`: ca_id -> its
    seq) and before Dynamo's first compile of the graph it captured (its `ca_graph` event where no
    Dynamo compile of it was recorded). Code torch runs to build the captured graph, compiled because
    the backward runs inside a compiled function, where Dynamo's frame evaluation stays on (torch
    2.14 compiles frames of Python's inspect module there, and recompiles them at every capture:
    docs/torch-internals.md). A live record has the `ca_graph` event after those frames, an imported
    TORCH_TRACE log before them: the graph's own Dynamo compile comes after them in both."""
    compiled: dict[int, int] = {}
    for event in compile_events:
        if event.is_ca_graph and event.compile_id.startswith("!") and (ca_id := ca_id_of(event.compile_id)) is not None:
            compiled.setdefault(ca_id, event.seq)
    ends = sorted((compiled.get(ca_id, graph.seq), ca_id) for ca_id, graph in graphs.items())
    found: dict[int, int] = {}
    for seq in seqs:
        at = bisect.bisect_right(ends, (seq, float("inf")))  # the first capture to end after it
        if at < len(ends) and ends[at][1] in starts and starts[ends[at][1]] < seq:
            found[seq] = ends[at][1]
    return found


# What summary and the recompile budget say of such frames, after "torch's frame(s) ".
INSIDE_CAPTURES_WORDS = "inside compiled autograd's captures: nothing to change in your code"


@dataclass(frozen=True)
class TorchFramesInCaptures:
    """Dynamo's work in frames of torch's or the standard library's, done while compiled autograd
    captured a backward (`inside_captures`): what summary, the gate and the recompile budget say is
    torch's own."""

    frames: dict[str, int]  # torch's frame id F (of F/C), every compile of it inside a capture -> the first capture's ca_id
    # (file, line) of each graph-break site whose every logged break was in such a frame inside a capture
    break_places: frozenset[tuple[str, int | None]]


_NONE_INSIDE = TorchFramesInCaptures({}, frozenset())


def torch_frames_in_captures(record: ModeRecord) -> TorchFramesInCaptures:
    """The record's compiles and graph breaks of torch's frames made inside compiled autograd's
    captures; empty in eager and where nothing was captured. Read once per record (summary, its
    JSON, the gate and the budget ask)."""
    return record.derived("torch_frames_in_captures", _torch_frames_in_captures)


def _torch_frames_in_captures(record: ModeRecord) -> TorchFramesInCaptures:
    graphs = {e.ca_id: e for e in record.of(CAGraphEvent)}
    if record.mode == "eager" or not graphs:
        return _NONE_INSIDE
    starts: dict[int, int] = {}
    for miss in record.of(CacheMissEvent):
        starts.setdefault(miss.ca_id, miss.seq)
    for ca_id, graph in graphs.items():
        starts.setdefault(ca_id, graph.seq)
    compile_events = record.of(DynamoCompileEvent)
    theirs = [e for e in compile_events if not e.is_ca_graph and looks_like_torch_or_stdlib_file(e.co_filename)]
    breaks = record.of(GraphBreakEvent)
    inside = inside_captures([e.seq for e in theirs] + [e.seq for e in breaks if looks_like_torch_or_stdlib_file(e.file)],
                             starts, graphs, compile_events)
    by_frame: dict[str, list[int | None]] = {}
    for event in theirs:
        if (frame := compile_frame(event.compile_id)) is not None:
            by_frame.setdefault(frame, []).append(inside.get(event.seq))
    frames = {frame: ca_ids[0] for frame, ca_ids in by_frame.items() if ca_ids[0] is not None and all(c is not None for c in ca_ids)}
    places: dict[tuple[str, int | None], bool] = {}
    for event in breaks:
        key = (event.file, event.line)
        places[key] = places.get(key, True) and event.seq in inside
    return TorchFramesInCaptures(frames, frozenset(key for key, all_inside in places.items() if all_inside))
