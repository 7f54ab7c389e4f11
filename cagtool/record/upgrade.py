"""Old record schemas read as the current one: converted once, as the loader reads a mode record,
so no report asks which schema a record was written in.

What the older schemas wrote differently from the current one (schema.py's docstring):
- schemas 1 and 2 numbered steps from 1: every event's `step` is shifted to number from
  FIRST_STEP (the step, backward and optimizer-step events a columns sidecar holds get the same
  shift through `EventColumns.step_shift`);
- schema 1 had one step per top-level backward call, and no `backward` events: each step event
  stands for its one backward call, which is the backward event (index 0) the current writer
  writes beside it;
- schema 1 stamped events with the step last begun (None before the first backward), where the
  current schema stamps the step in progress. The two agree for what happens inside a backward
  (a CA capture, a CA graph's Dynamo compile) and for the optimizer step that follows it; a forward
  frame's compile, recompile, graph break and AOT backward graph ran before the backward of the
  step they belong to, so they get the next step (FIRST_STEP before any backward).

What a schema 1 record never measured stays absent: its step events have no `boundary` and no
`wall_s` (the figures time such steps from one backward's start to the next, report/figures/metrics.py).
"""

from __future__ import annotations

from collections import Counter

import msgspec

from cagtool.record.schema import (
    FIRST_STEP,
    FIRST_STEP_BEFORE_SCHEMA_3,
    STEPS_FROM_ZERO_VERSION,
    BackwardEvent,
    Event,
    StepEvent,
)

# Records before this version stamped events with the step last begun and wrote no backward events.
STEP_IN_PROGRESS_VERSION = 2


def step_number_shift(schema_version: int) -> int:
    """What to add to a step number read from a record of `schema_version` to number it from
    FIRST_STEP: -1 for schemas 1 and 2 (steps from 1), 0 from schema 3 on (steps from 0, as the
    script's own `for step in range(n)` numbers them)."""
    return 0 if schema_version >= STEPS_FROM_ZERO_VERSION else FIRST_STEP - FIRST_STEP_BEFORE_SCHEMA_3


def renumber_steps_from_zero(events: list[Event], schema_version: int) -> None:
    """The conversion of an old record's step numbers, in place: every event's `step` (the only
    field of an event or manifest that holds a step number) is shifted by `step_number_shift`."""
    shift = step_number_shift(schema_version)
    if not shift:
        return
    set_field = msgspec.structs.force_setattr  # events just built, that no reader has seen (frozen for everyone else)
    for event in events:
        step = getattr(event, "step", None)
        if step is not None:
            set_field(event, "step", step + shift)


def kinds_to_read(schema_version: int, kinds: frozenset[str] | set[str] | None) -> frozenset[str] | set[str] | None:
    """The event kinds the loader must build to give `kinds` once converted: a schema 1 record's
    backward events are made from its step events."""
    if kinds is None or schema_version >= STEP_IN_PROGRESS_VERSION or BackwardEvent.kind not in kinds:
        return kinds
    return frozenset(kinds) | {StepEvent.kind}


def reads_columns(schema_version: int) -> bool:
    """Whether a record's columns sidecar can stand for its lines: not for a schema 1 record,
    whose step events are converted one by one (no cagtool writing schema 1 wrote a sidecar)."""
    return schema_version >= STEP_IN_PROGRESS_VERSION


def upgrade_events(events: list[Event], counts: Counter[str], schema_version: int, kinds: frozenset[str] | set[str] | None) -> list[Event]:
    """A mode record's events (just decoded, seen by no reader yet) in the current schema's shape,
    and `counts` (every known line, by kind) as the converted stream's. `kinds`: the kinds the
    caller asked for (the loader read `kinds_to_read`), None for all. Returns the events to keep."""
    renumber_steps_from_zero(events, schema_version)
    if schema_version >= STEP_IN_PROGRESS_VERSION:
        return events
    set_field = msgspec.structs.force_setattr
    converted: list[Event] = []
    for event in events:
        if isinstance(event, StepEvent):
            if kinds is None or BackwardEvent.kind in kinds:
                converted.append(
                    BackwardEvent(seq=event.seq, t=event.t, step=event.step, index=0, backward_s=event.backward_s, ca_captures=event.ca_captures, loss=event.loss)
                )
            if kinds is not None and StepEvent.kind not in kinds:
                continue
        elif _in_forward_frame(event):
            step = getattr(event, "step")
            set_field(event, "step", FIRST_STEP if step is None else step + 1)
        converted.append(event)
    counts[BackwardEvent.kind] += counts.get(StepEvent.kind, 0)
    return converted


def _in_forward_frame(event: Event) -> bool:
    """An event of a forward frame's compile (its compile id is torch's `F/C`, not a CA graph's
    `!N...`) that carries a step."""
    compile_id = getattr(event, "compile_id", None)
    return isinstance(compile_id, str) and not compile_id.startswith("!") and hasattr(event, "step")
