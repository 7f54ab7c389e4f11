"""Reading just what `recompiles` needs from a run, fast enough for 100,000-event records.

The one loader (`cagtool.record.loader`) parses every event line into a dataclass: about 3 s for
100,000 lines here, most of them step and optimizer-step events that `recompiles` only counts.
This reader keeps the loader's checks (it uses the loader's own run resolution, format/version
checks and manifest parsing) and its lenient contract (lines that are not JSON objects are counted
as skipped, unknown kinds are counted), but fully parses only the kinds `recompiles` reads; step
lines are counted and their step number read without building events.

`--strict` does not come here: it goes through the one loader, which validates every line.
(The loader could take a `kinds` filter and do this itself; see the note in `load_filtered`.)
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from cagtool.record.loader import ModeRecord, RunRecord, _check_format, _read_json, resolve_run_path
from cagtool.record.manifest import mode_manifest_from_dict, run_meta_from_dict
from cagtool.record.schema import (
    EVENT_TYPES,
    EVENTS_FILE,
    MANIFEST_FILE,
    MODE_FORMAT,
    RUN_FORMAT,
    RUN_META_FILE,
    CacheMissEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    Event,
    FindingEvent,
    StepEvent,
    event_from_dict,
)
from cagtool.report.recompiles import StepSummary

NEEDED_KINDS = frozenset(
    cls.kind for cls in (CacheMissEvent, CAGraphEvent, DynamoCompileEvent, DynamoRecompileEvent, FindingEvent)
)
# A line as the writer writes it starts `{"kind": "<kind>", ` and ends `}`. Prefix tests on split
# lines and one anchored regex for step numbers: a Python loop over 100,000 lines doing more than
# that would take most of the time budget.
_KNOWN_PREFIXES = tuple(f'{{"kind": "{kind}", ' for kind in EVENT_TYPES)
_NEEDED_PREFIXES = tuple(f'{{"kind": "{kind}", ' for kind in sorted(NEEDED_KINDS))
_STEP_PREFIX = f'{{"kind": "{StepEvent.kind}", '


class _Reader:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.skipped = 0
        self.unknown: Counter[str] = Counter()
        self.steps: list[int] = []

    def parse(self, text: str) -> None:
        """One line the loader's way: not a JSON object -> skipped; unknown kind -> counted."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            self.skipped += 1
            return
        if not isinstance(raw, dict):
            self.skipped += 1
            return
        try:
            event = event_from_dict(raw)
        except (TypeError, ValueError):
            self.skipped += 1
            return
        if event is None:
            self.unknown[str(raw.get("kind"))] += 1
        elif isinstance(event, StepEvent):
            self.steps.append(event.step)
        elif event.kind in NEEDED_KINDS:
            self.events.append(event)


def _mode_events(path: Path) -> tuple[list[Event], StepSummary, int, Counter[str]]:
    events_path = path / EVENTS_FILE
    if not events_path.exists():
        return [], StepSummary(0, None), 0, Counter()
    text = events_path.read_text()
    lines = text.splitlines()
    reader = _Reader()
    odd_steps = 0
    for line in lines:
        if line.startswith(_NEEDED_PREFIXES):
            reader.parse(line)
        elif not (line.startswith(_KNOWN_PREFIXES) and line.endswith("}")) and line.strip():
            # Not shaped like the writer's line (truncated, garbage, an unknown kind): the loader's
            # full treatment, so skipped lines and unknown kinds are counted the same way.
            reader.parse(line)
            odd_steps += line.startswith(_STEP_PREFIX)
    # Steps: recompiles needs how many there are and the last number, not the events. Raw newlines
    # cannot occur inside a JSON line, so "\n" + prefix counts lines; steps are numbered in write
    # order (schema: step N is the N-th backward), so the last shaped step line has the last number.
    shaped_steps = f"\n{text}".count("\n" + _STEP_PREFIX) - odd_steps
    last_step = None
    if shaped_steps:
        for line in reversed(lines):
            if line.startswith(_STEP_PREFIX) and line.endswith("}"):
                last = _Reader()
                last.parse(line)
                last_step = last.steps[-1] if last.steps else None
                break
    candidates = reader.steps + ([last_step] if last_step is not None else [])
    summary = StepSummary(shaped_steps + len(reader.steps), max(candidates) if candidates else None)
    reader.events.sort(key=lambda e: e.seq)
    return reader.events, summary, reader.skipped, reader.unknown


def load_filtered(path: str | Path | None) -> tuple[RunRecord, dict[str, StepSummary]]:
    """A RunRecord whose mode records hold only the events `recompiles` reads, with each mode's
    step count and last step. Raises UnreadableInput like `load_run` for a missing, corrupt or
    newer record.

    Note for the loader: `load_mode(path, strict, kinds=...)` skipping the parse of other kinds
    (the kind is the first key of every line) would make this module unnecessary."""
    run_path = resolve_run_path(path)
    data = _read_json(run_path / RUN_META_FILE, "run record")
    _check_format(data, RUN_FORMAT, run_path / RUN_META_FILE)
    meta = run_meta_from_dict(data)
    modes: dict[str, ModeRecord] = {}
    steps: dict[str, StepSummary] = {}
    for mode in meta.modes:
        mode_path = run_path / mode
        if not (mode_path / MANIFEST_FILE).exists():
            continue
        manifest_data = _read_json(mode_path / MANIFEST_FILE, "mode manifest")
        _check_format(manifest_data, MODE_FORMAT, mode_path / MANIFEST_FILE)
        events, summary, skipped, unknown = _mode_events(mode_path)
        modes[mode] = ModeRecord(
            path=mode_path, manifest=mode_manifest_from_dict(manifest_data), events=events, skipped_lines=skipped, unknown_kinds=unknown
        )
        steps[mode] = summary
    return RunRecord(path=run_path, meta=meta, modes=modes), steps
