"""The record's events as msgspec Structs: one tag per class, the constructors the rest of cagtool
calls, frozen values, lines that read back equal, and a damaged line refused with the field named."""

from __future__ import annotations

import inspect
import json

import msgspec
import pytest

from cagtool.record import schema
from cagtool.record.schema import EVENT_TYPES, CacheMissEvent, ChangedSize, SourceRef, StepEvent, decode_event, event_from_value, event_line


def _sample(hint) -> object:
    """A value of a field's type (msgspec resolves the annotations)."""
    for kind, value in ((list, []), (dict, {}), (bool, False), (int, 0), (float, 0.5), (str, "")):
        if hint is kind or getattr(hint, "__origin__", None) is kind or kind in getattr(hint, "__args__", ()):
            return value
    raise AssertionError(hint)


def test_every_event_class_is_decoded_by_its_kind():
    assert len(set(EVENT_TYPES)) == len(EVENT_TYPES) == 17
    for kind, cls in EVENT_TYPES.items():
        assert cls.kind == kind == cls.__struct_config__.tag and issubclass(cls, schema.Event)
        fields = msgspec.structs.fields(cls)
        required = {f.name: _sample(f.type) for f in fields if f.required}
        assert type(decode_event(event_line(cls(**required)))) is cls


def test_constructors_take_seq_and_t_first_then_the_fields_in_order():
    assert list(inspect.signature(StepEvent).parameters)[:4] == ["seq", "t", "step", "backward_s"]
    assert StepEvent(1, 2.0, 3, 0.5) == StepEvent(seq=1, t=2.0, step=3, backward_s=0.5)
    with pytest.raises(TypeError):
        StepEvent(seq=1, t=2.0, step=3)  # backward_s is required
    with pytest.raises(TypeError):
        StepEvent(seq=1, t=2.0, step=3, backward_s=0.5, not_a_field=1)


def test_events_are_frozen_hashable_values_with_fresh_defaults():
    event = StepEvent(seq=1, t=2.0, step=3, backward_s=0.5)
    with pytest.raises(AttributeError):
        event.step = 4  # type: ignore[misc]
    assert hash(event) == hash(StepEvent(seq=1, t=2.0, step=3, backward_s=0.5))
    a = CacheMissEvent(seq=0, t=0.0, ca_id=0, compile_id="!0", step=0, miss_kind="new_node", message="m")
    b = CacheMissEvent(seq=0, t=0.0, ca_id=0, compile_id="!0", step=0, miss_kind="new_node", message="m")
    assert a.previous_key_sizes == [] and a.previous_key_sizes is not b.previous_key_sizes


def test_lines_read_back_equal_nested_records_included():
    events = [
        StepEvent(seq=0, t=1.0, step=0, backward_s=0.5, loss=2.5, wall_s=None),
        CacheMissEvent(seq=1, t=1.0, ca_id=1, compile_id="!1", step=0, miss_kind="changed_shapes", message="m",
                       changed_sizes=[ChangedSize(index=0, value=3, previous=2)], source=SourceRef(file="train.py", line=3, code="loss.backward()")),
        schema.FindingEvent(seq=2, t=1.0, code="x", message="y", detail={"argv": ["a"]}),
    ]
    for event in events:
        assert decode_event(event_line(event)) == event
        assert event_from_value(json.loads(event_line(event))) == event


def test_a_line_of_a_later_cagtool_reads_its_known_fields():
    line = '{"kind": "step", "seq": 9, "t": 1, "step": 5, "backward_s": 0.5, "added_later": "ignored"}'
    assert decode_event(line) == StepEvent(seq=9, t=1.0, step=5, backward_s=0.5)


@pytest.mark.parametrize(
    "line, names",
    [
        ('{"kind": "step", "seq": 1, "t": 1.0, "step": "3", "backward_s": 0.5}', "`int`, got `str` - at `$.step`"),
        ('{"kind": "step", "seq": 1, "t": 1.0, "step": true, "backward_s": 0.5}', "`int`, got `bool` - at `$.step`"),
        ('{"kind": "step", "seq": 1, "t": 1.0, "step": 3}', "missing required field `backward_s`"),
        ('{"kind": "ca_cache_miss", "seq": 1, "t": 1.0, "ca_id": 0, "compile_id": "!0", "step": 0, "miss_kind": "x", "message": "m", "changed_sizes": 4}',
         "`array`, got `int` - at `$.changed_sizes`"),
        ('{"kind": "ca_cache_miss", "seq": 1, "t": 1.0, "ca_id": 0, "compile_id": "!0", "step": 0, "miss_kind": "x", "message": "m", "source": {"file": 1, "line": 2}}',
         "`str`, got `int` - at `$.source.file`"),
    ],
)
def test_a_damaged_line_is_refused_naming_the_field(line, names):
    with pytest.raises(msgspec.ValidationError, match=names.replace("$", r"\$").replace("`", ".")):
        decode_event(line)
    with pytest.raises(msgspec.ValidationError):
        event_from_value(json.loads(line))


def test_an_unknown_kind_is_none_from_a_value_and_an_error_from_a_line():
    assert event_from_value({"kind": "from_the_future", "seq": 1}) is None
    assert event_from_value({"kind": ["not", "a", "name"], "seq": 1}) is None
    with pytest.raises(msgspec.ValidationError):
        decode_event('{"kind": "from_the_future", "seq": 1, "t": 0}')
