"""The loader's fast paths (one msgspec decode for a whole well-formed stream, kinds skipped by line prefix, `of()` answers kept) give exactly what
the plain path gives, and a bad line still costs only itself."""

from __future__ import annotations

import json

from cagtool.record.loader import load_mode
from cagtool.record.manifest import ModeManifest, to_dict
from cagtool.record.schema import (
    SCHEMA_VERSION,
    CacheMissEvent,
    ChangedSize,
    OptimizerStepEvent,
    SourceRef,
    StepEvent,
    decode_event,
    event_to_dict,
    json_default,
)


def write_mode(path, lines: list[str], schema_version: int = SCHEMA_VERSION):
    path.mkdir(parents=True)
    manifest = ModeManifest(mode="ca", argv=[], target={}, cwd="/", versions={}, backend="eager", dynamic=False, started_at="")
    manifest.schema_version = schema_version
    (path / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    (path / "events.jsonl").write_text("".join(line + "\n" for line in lines))
    return path


def line(event) -> str:
    return json.dumps(event_to_dict(event), default=json_default)


EVENTS = [  # steps numbered from 0, as schema 3 writes them
    CacheMissEvent(seq=0, t=0.1, ca_id=0, compile_id="!0", step=0, miss_kind="changed_shapes", message="Cache miss due to 1 changed tensor shapes (total of 1): sizes[0]",
                   changed_sizes=[ChangedSize(index=0, value=3, previous=2, node="AddBackward0", node_call=2)], total_changed=1,
                   source=SourceRef(file="train.py", line=3, code="loss.backward()", function="main", how="backward_call")),
    StepEvent(seq=1, t=0.2, step=0, backward_s=0.01, loss=2.0, ca_captures=1),
    OptimizerStepEvent(seq=2, t=0.3, step=0, wall_s=0.001, optimizer="SGD"),
    StepEvent(seq=3, t=0.4, step=1, backward_s=0.01),
]


def test_fast_paths_equal_the_dataclass_constructors(tmp_path):
    record = load_mode(write_mode(tmp_path / "ca", [line(e) for e in EVENTS]))
    assert record.events == EVENTS and record.skipped_lines == 0
    # Decoded, the events hash and compare like constructed ones.
    assert hash(record.events[1]) == hash(EVENTS[1])
    built = decode_event('{"kind": "step", "seq": 9, "t": 1.0, "step": 5, "backward_s": 0.5, "added_later": "ignored"}')
    assert built == StepEvent(seq=9, t=1.0, step=5, backward_s=0.5) and not hasattr(built, "added_later")


def test_a_bad_line_costs_only_itself(tmp_path):
    lines = [line(e) for e in EVENTS]
    lines.insert(2, '{"kind": "step", "seq": 7, "t": 0.25, "step": 9, "backw')  # truncated by a crash
    lines.append('{"kind": "step", "seq": 8}')  # valid JSON, missing required fields
    record = load_mode(write_mode(tmp_path / "ca", lines))
    assert record.events == EVENTS and record.skipped_lines == 2


def test_kinds_not_asked_for_are_counted_not_built(tmp_path):
    record = load_mode(write_mode(tmp_path / "ca", [line(e) for e in EVENTS]), kinds=frozenset({"step", "ca_cache_miss"}))
    assert [e.seq for e in record.events] == [0, 1, 3]
    assert record.kind_counts == {"ca_cache_miss": 1, "step": 2, "optimizer_step": 1}


def test_of_answers_follow_the_events(tmp_path):
    record = load_mode(write_mode(tmp_path / "ca", [line(e) for e in EVENTS]))
    assert [s.step for s in record.of(StepEvent)] == [0, 1]
    record.of(StepEvent).clear()  # a caller's list is its own
    record.events.append(StepEvent(seq=4, t=0.5, step=2, backward_s=0.01))
    assert [s.step for s in record.of(StepEvent)] == [0, 1, 2]


def test_events_false_reads_the_manifest_only(tmp_path):
    record = load_mode(write_mode(tmp_path / "ca", [line(e) for e in EVENTS]), events=False)
    assert record.manifest.mode == "ca" and record.events == [] and not record.kind_counts


def test_schema_2_steps_from_1_read_from_0_on_every_path(tmp_path):
    """The same events as a schema-2 record wrote them (steps from 1): the whole stream at once,
    line by line (a bad line), and kinds filtered all give the fresh record's numbering."""
    old = [line(e).replace(f'"step": {e.step},', f'"step": {e.step + 1},') for e in EVENTS]
    assert all('"step": 0,' not in text for text in old)
    assert load_mode(write_mode(tmp_path / "whole", old, 2)).events == EVENTS
    assert load_mode(write_mode(tmp_path / "lines", [*old, '{"kind": "step", "se'], 2)).events == EVENTS
    filtered = load_mode(write_mode(tmp_path / "kinds", old, 2), kinds=frozenset({"step", "ca_cache_miss"}))
    assert filtered.events == [EVENTS[0], EVENTS[1], EVENTS[3]]


def test_the_kinds_filter_keeps_and_numbers_exactly_the_lines_the_per_line_test_keeps():
    """The kinds filter's one regex split (record/loader.py `_stream_lines`) against its definition,
    line by line: a line of an unwanted kind is `{"kind": "<kind>"` ... `}` (trailing whitespace
    allowed) and is counted; every other line with text is kept with its line number."""
    import random
    from collections import Counter

    from cagtool.record.loader import _KIND_PREFIX, _stream_lines
    from cagtool.record.schema import EVENT_TYPES

    kinds = frozenset({"ca_cache_miss", "ca_graph"})
    unwanted = tuple(f'{_KIND_PREFIX}{kind}"' for kind in EVENT_TYPES if kind not in kinds)
    pieces = [line(e) for e in EVENTS] + [
        "", " ", "\t", "\u3000", "\r", "not json", '{"kind": "step", "seq": 7, "t": 0.25, "step": 9, "backw',  # torn
        '{"kind": "step", "seq": 8}  \t', '{"kind": "step", "seq": 8}\r', '{"kind": "step", "seq": 8}\u3000', '{"kind": "step", "seq": 8} x',
        '{"kind": "steps", "seq": 1}', ' {"kind": "step", "seq": 1}', '{"kind": "ca_graph", "seq": 3}', '{"kind": "from_the_future"}',
    ]
    rng = random.Random(12)
    for trial in range(200):
        lines = [rng.choice(pieces) for _ in range(rng.randint(0, 30))]
        text = "\n".join(lines) + rng.choice(["", "\n", "\n\n"])
        counts: Counter[str] = Counter()
        entries: list[tuple[int, str]] = []
        assert _stream_lines(text.encode(), kinds, unwanted, counts, entries) == []
        expected_counts: Counter[str] = Counter()
        expected_entries = []
        for number, one in enumerate(text.split("\n"), start=1):
            if one.startswith(unwanted) and one.rstrip().endswith("}"):
                expected_counts[one[len(_KIND_PREFIX) : one.index('"', len(_KIND_PREFIX))]] += 1
            elif one.strip():
                expected_entries.append((number, one))
        assert (counts, entries) == (expected_counts, expected_entries), (trial, text)


def test_a_line_holding_two_objects_is_one_bad_line_not_two_events(tmp_path):
    lines = [line(e) for e in EVENTS]
    lines.insert(1, line(EVENTS[1]) + ", " + line(EVENTS[2]))  # decoded together, these would be two events
    record = load_mode(write_mode(tmp_path / "ca", lines))
    assert record.events == EVENTS and record.skipped_lines == 1
