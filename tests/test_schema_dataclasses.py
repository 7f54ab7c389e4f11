"""schema.py's record types are frozen dataclasses whose methods are compiled on first use
(schema.dataclass, issue 12): every class must behave exactly as the standard
`@dataclasses.dataclass(frozen=True)` makes it, since other code reads, builds, compares and
derives from them."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import pickle
import subprocess
import sys

import pytest

from cagtool.record import schema

RECORD_TYPES = [
    cls
    for cls in vars(schema).values()
    if isinstance(cls, type) and cls.__module__ == schema.__name__ and dataclasses.is_dataclass(cls) and not cls.__name__.startswith("_")
]


def test_the_record_types_are_the_events_and_their_parts():
    assert set(schema.EVENT_TYPES.values()) | {schema.Event, schema.SourceRef, schema.ChangedSize, schema.AutogradNodeRef, schema.HookRef} == set(RECORD_TYPES)


_REFERENCES: dict[type, type] = {}


def standard(cls: type) -> type:
    """`cls` made again from its fields by the standard decorator (its bases too)."""
    if cls not in _REFERENCES:
        base = next((b for b in cls.__mro__[1:] if dataclasses.is_dataclass(b)), None)
        bases = (standard(base),) if base is not None else ()
        inherited = {f.name for f in dataclasses.fields(base)} if base is not None else set()
        own = []
        for f in dataclasses.fields(cls):
            if f.name in inherited:
                continue
            if f.default is not dataclasses.MISSING:
                own.append((f.name, f.type, dataclasses.field(default=f.default)))
            elif f.default_factory is not dataclasses.MISSING:
                own.append((f.name, f.type, dataclasses.field(default_factory=f.default_factory)))
            else:
                own.append((f.name, f.type))
        generated_doc = cls.__doc__.startswith(cls.__name__ + "(")
        namespace = {} if generated_doc else {"__doc__": cls.__doc__}
        if "kind" in vars(cls):
            namespace["kind"] = cls.kind
        _REFERENCES[cls] = dataclasses.make_dataclass(cls.__name__, own, bases=bases, namespace=namespace, frozen=True)
    return _REFERENCES[cls]


def sample(cls: type, offset: int = 0) -> dict:
    """Hashable values for every required field, and some defaulted ones."""
    values = {}
    for number, f in enumerate(dataclasses.fields(cls)):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = number + offset
    return values


def outcome(call):
    try:
        return ("ok", call())
    except Exception as exc:  # noqa: BLE001 - comparing what both raise
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("cls", RECORD_TYPES, ids=lambda c: c.__name__)
def test_record_type_matches_the_standard_frozen_dataclass(cls):
    ref = standard(cls)
    describe = lambda c: [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash, f.kw_only) for f in dataclasses.fields(c)]  # noqa: E731
    assert describe(cls) == describe(ref)
    assert repr(cls.__dataclass_params__) == repr(ref.__dataclass_params__)
    assert cls.__match_args__ == ref.__match_args__
    assert cls.__doc__ == ref.__doc__
    assert str(inspect.signature(cls)) == str(inspect.signature(ref))
    assert cls.__init__.__qualname__ == f"{cls.__name__}.__init__" and cls.__init__.__annotations__ == ref.__init__.__annotations__

    values = sample(cls)
    ours, theirs = cls(**values), ref(**values)
    assert repr(ours) == repr(theirs)
    assert ours == cls(**values) and not ours != cls(**values)
    assert ours != cls(**sample(cls, offset=1))
    assert ours.__eq__(theirs) is NotImplemented and ours != theirs
    assert outcome(lambda: hash(ours)) == outcome(lambda: hash(theirs))
    for name in (*values, "not_a_field"):
        assert outcome(lambda: setattr(ours, name, 5)) == outcome(lambda: setattr(theirs, name, 5))
        assert outcome(lambda: delattr(ours, name)) == outcome(lambda: delattr(theirs, name))
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)
    assert dataclasses.astuple(ours) == dataclasses.astuple(theirs)
    changed = dataclasses.replace(ours, **{next(iter(values)): 99})
    assert type(changed) is cls and changed != ours
    assert pickle.loads(pickle.dumps(ours)) == ours and copy.deepcopy(ours) == ours
    # Wrong calls fail with the standard messages: missing, unknown, too many arguments.
    assert outcome(lambda: cls()) == outcome(lambda: ref())
    assert outcome(lambda: cls(**values, nope=1)) == outcome(lambda: ref(**values, nope=1))
    arguments = list(range(len(dataclasses.fields(cls)) + 1))
    assert outcome(lambda: cls(*arguments)) == outcome(lambda: ref(*arguments))


def test_defaults_and_factories_are_fresh_per_event():
    a = schema.FindingEvent(seq=0, t=0.0, code="c", message="m")
    b = schema.FindingEvent(seq=1, t=0.0, code="c", message="m")
    assert a.detail == {} and a.detail is not b.detail
    miss = schema.CacheMissEvent(seq=0, t=0.0, ca_id=0, compile_id="!0", step=None, miss_kind="new_node", message="m")
    assert miss.changed_sizes == [] and miss.previous_key_sizes == [] and miss.inferred is False


def test_classes_derived_from_record_types_follow_the_standard_rules():
    @dataclasses.dataclass(frozen=True)
    class TaggedStep(schema.StepEvent):
        tag: str = ""

    tagged = TaggedStep(seq=0, t=1.0, step=0, backward_s=0.5, tag="x")
    assert tagged.tag == "x" and tagged.step == 0 and "tag='x'" in repr(tagged)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tagged.step = 1  # type: ignore[misc]
    assert isinstance(tagged, schema.Event)
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):

        @dataclasses.dataclass
        class Mutable(schema.StepEvent):
            pass


def test_a_record_type_with_unsupported_field_settings_is_refused():
    @dataclasses.dataclass(init=False, repr=False, eq=False)
    class Hidden:
        seq: int
        cache: int = dataclasses.field(default=0, repr=False)

    with pytest.raises(TypeError, match="plain frozen fields only"):
        schema._install_methods([Hidden])
    late = schema.dataclass(frozen=True)(type("Late", (), {"__annotations__": {"a": "int"}}))  # after the module's own: standard
    assert late(a=1) == late(a=1) and dataclasses.is_dataclass(late)


def test_events_written_and_read_back_are_equal():
    from cagtool.record.schema import event_from_dict, event_to_dict, json_default

    source = schema.SourceRef(file="train.py", line=3, code="loss.backward()")
    events = [
        schema.StepEvent(seq=0, t=1.0, step=0, backward_s=0.5, loss=2.5, wall_s=None),
        schema.CacheMissEvent(seq=1, t=1.0, ca_id=1, compile_id="!1", step=0, miss_kind="changed_shapes", message="m",
                              changed_sizes=[schema.ChangedSize(index=0, value=3, previous=2)], source=source),
        schema.FindingEvent(seq=2, t=1.0, code="x", message="y", detail={"argv": ["a"]}),
    ]
    for event in events:
        line = json.dumps(event_to_dict(event), default=json_default)
        assert event_from_dict(json.loads(line)) == event


def test_importing_the_schema_compiles_no_method_and_loading_events_needs_none(tmp_path):
    # The point of schema.dataclass: import costs no compile, and the loader builds events
    # without __init__, so reading a record compiles nothing either.
    probe = (
        "import json\n"
        "from cagtool.record import schema\n"
        "from cagtool.record.schema import event_builder\n"
        "line = {'kind': 'step', 'seq': 0, 't': 1.0, 'step': 0, 'backward_s': 0.5}\n"
        "event = event_builder('step')(dict(line))\n"
        "assert event.step == 0 and event.backward_s == 0.5\n"
        "print(json.dumps(sorted(f'{c.__name__}.{m}' for c in schema.EVENT_TYPES.values() for m in schema._METHODS\n"
        "                        if not isinstance(vars(c)[m], schema._CompiledOnFirstUse))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
