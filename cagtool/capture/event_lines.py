"""The JSON line of an event written every training step, made straight from its fields: the same
text as `json` gives for the event's dataclass (record/schema.py, `event_to_dict`), without
building the dataclass or running the generic encoder.

Why: in a real training step the recorder's code runs with cold caches (the step's tensor work
evicted them), and there building a frozen dataclass and encoding it with `json` cost about 40 us
per event, three events a step, against about 5 us in a tight loop (benchmarks/README.md, step
overhead). A function generated once per event class from the dataclass's own fields (names,
order, defaults: one source of truth, so a field added to the schema appears here too) does the
same in one f-string. Only classes whose fields are all scalars (int, float, str, bool, None) get
one; the others take the dataclass and `json`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from json.encoder import encode_basestring_ascii
from typing import Any, Callable

from cagtool.record.schema import Event

LineEncoder = Callable[..., str]

_SCALAR_TYPES = {"int", "float", "str", "bool", "None"}
_JSON = json.JSONEncoder()  # the writer's own options: ensure_ascii, allow_nan, ", " and ": "
_FLOAT_REPR = float.__repr__


def _value(value: Any) -> str:
    """One scalar as `json` writes it (float repr, NaN/Infinity, null, true/false, ASCII-escaped
    strings); anything else through `json` itself."""
    kind = value.__class__
    if kind is float:
        return _FLOAT_REPR(value) if math.isfinite(value) else _JSON.encode(value)
    if kind is int:
        return int.__repr__(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    return _JSON.encode(value)


def _expression(name: str, annotation: str) -> str:
    """The f-string expression for one field: the usual type inline, anything else via _value."""
    kinds = {part.strip() for part in annotation.split("|")}
    if "float" in kinds:  # x - x == 0.0: finite (NaN and infinities go to json's spelling)
        return f"_float_repr({name}) if {name}.__class__ is float and {name} - {name} == 0.0 else _value({name})"
    if "int" in kinds:  # not a bool, whose repr is not JSON
        return f"{name} if {name}.__class__ is int else _value({name})"
    if "str" in kinds:
        return f"_ascii({name}) if {name}.__class__ is str else _value({name})"
    return f"_value({name})"


def _is_scalar(annotation: Any) -> bool:
    if not isinstance(annotation, str):
        return False
    return all(part.strip() in _SCALAR_TYPES for part in annotation.split("|"))


def line_encoder(cls: type[Event]) -> LineEncoder | None:
    """`encode(seq, t, **fields) -> str`, the event's line with its newline, taking the fields as the
    dataclass's __init__ does (the same names and defaults: a missing or unknown field raises
    TypeError); None when a field of `cls` is not a scalar."""
    fields = dataclasses.fields(cls)
    if not all(_is_scalar(f.type) for f in fields) or any(f.default_factory is not dataclasses.MISSING for f in fields):
        return None
    defaults: dict[str, Any] = {}
    params, parts = [], [f'"kind": {encode_basestring_ascii(cls.kind)}']
    for f in fields:
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            defaults[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        parts.append(f"{encode_basestring_ascii(f.name)}: {{{_expression(f.name, f.type)}}}")
    body = ", ".join(parts)
    source = f"def encode({', '.join(params)}):\n    return f'{{{{{body}}}}}\\n'\n"
    namespace: dict[str, Any] = {"_value": _value, "_float_repr": _FLOAT_REPR, "_ascii": encode_basestring_ascii, **defaults}
    exec(compile(source, f"<event line {cls.kind}>", "exec"), namespace)  # noqa: S102 - our own generated text
    return namespace["encode"]
