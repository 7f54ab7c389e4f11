"""Type checks of record data read back from JSON: a well-formed line whose `step` is a string or
whose `changed_sizes` is a number is damaged, and must be refused (or skipped and counted) where it
is read, not crash a renderer later with a TypeError far from the file and line it came from."""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import lru_cache
from typing import Any, Callable, Union

Checker = Callable[[Any], bool]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_float(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _checker(hint: Any) -> Checker:
    """A predicate for values of `hint`; permissive (always True) for hints it does not know."""
    if hint is Any:
        return lambda value: True
    if hint is type(None):
        return lambda value: value is None
    if hint is bool:
        return lambda value: isinstance(value, bool)
    if hint is int:
        return _is_int
    if hint is float:
        return _is_float
    if hint is str:
        return lambda value: isinstance(value, str)
    if dataclasses.is_dataclass(hint):
        return lambda value: isinstance(value, hint) and not invalid_fields(value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        options = [_checker(a) for a in args]
        return lambda value: any(check(value) for check in options)
    if origin in (list, tuple) and args:
        item = _checker(args[0])
        return lambda value: isinstance(value, (list, tuple)) and all(item(v) for v in value)
    if origin is dict and len(args) == 2:
        key, val = _checker(args[0]), _checker(args[1])
        return lambda value: isinstance(value, dict) and all(key(k) and val(v) for k, v in value.items())
    if origin is not None and isinstance(origin, type):
        return lambda value: isinstance(value, origin)
    if isinstance(hint, type):
        return lambda value: isinstance(value, hint)
    return lambda value: True


@lru_cache(maxsize=None)
def _field_checkers(cls: type) -> tuple[tuple[str, Checker], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _checker(hints[f.name])) for f in dataclasses.fields(cls) if f.name in hints)


def invalid_fields(obj: Any) -> list[str]:
    """Names of the dataclass `obj`'s fields whose values do not match their annotations."""
    return [name for name, check in _field_checkers(type(obj)) if not check(getattr(obj, name))]


def _expression(hint: Any, value: str) -> str | None:
    """A sufficient check for `_checker(hint)` as a Python expression on `value`, for the simple
    hints record events are made of (exact types, as JSON decodes them; anything else, e.g. a
    subclass, fails it and the general checker decides); None for any other hint."""
    if hint is int:
        return f"type({value}) is int"
    if hint is float:
        return f"type({value}) in _NUMBER"
    if hint is str:
        return f"type({value}) is str"
    if hint is bool:
        return f"type({value}) is bool"
    if hint is type(None):
        return f"{value} is None"
    if typing.get_origin(hint) in (Union, types.UnionType):
        parts = [_expression(arg, value) for arg in typing.get_args(hint)]
        return None if None in parts else "(" + " or ".join(parts) + ")"  # type: ignore[arg-type]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        check = _compiled_check(hint) if hint not in _BUILDING else None  # a class holding itself: general checker
        if check is None:
            return None
        ref = f"_{hint.__name__}_{id(hint)}"
        _NESTED[ref], _NESTED[ref + "_check"] = hint, check
        return f"(type({value}) is {ref} and {ref}_check({value}))"
    # Lists and dicts of simple items (a cache miss's previous_key_sizes, an op histogram): without
    # them, a record's 1,000 cache misses each went through the per-field predicates.
    args = typing.get_args(hint)
    name = f"_i{len(value)}"  # nested comprehensions get distinct names
    if typing.get_origin(hint) is list and len(args) == 1:
        item = _expression(args[0], name)
        return None if item is None else f"(type({value}) is list and all({item} for {name} in {value}))"
    if typing.get_origin(hint) is dict and len(args) == 2:
        key, item = _expression(args[0], name), _expression(args[1], name)
        if key is None or item is None:
            return None
        return f"(type({value}) is dict and all({key} for {name} in {value}) and all({item} for {name} in {value}.values()))"
    return None


_BUILDING: set[type] = set()  # classes whose check is being generated
_NESTED: dict[str, Any] = {}  # the dataclasses nested in checked ones, and their checks, by the names expressions use


@lru_cache(maxsize=None)
def _compiled_check(cls: type) -> Callable[[Any], bool] | None:
    """One generated function that checks every field of `cls` at once, when all its fields have
    simple hints: a 20,000-step record checks 40,000 events, and per-field predicate calls were
    most of loading it. True means valid; False sends the object to the general checker (which
    names what is wrong, or accepts what only the exact-type test refused). None when a hint is
    not simple."""
    hints = typing.get_type_hints(cls)
    parts = []
    _BUILDING.add(cls)
    try:
        for f in dataclasses.fields(cls):
            if f.name not in hints:
                continue
            expression = _expression(hints[f.name], f"d[{f.name!r}]")
            if expression is None:
                return None
            parts.append(expression)
    finally:
        _BUILDING.discard(cls)
    namespace: dict[str, Any] = {"_NUMBER": (int, float), **_NESTED}
    exec("def check(obj):\n    d = obj.__dict__\n    return " + (" and ".join(parts) or "True"), namespace)  # noqa: S102 - built from field names
    return namespace["check"]


def fast_check(cls: type) -> Callable[[Any], bool] | None:
    """The generated all-fields check of `cls` (see `_compiled_check`): True means valid, False
    means ask `check_types`; None when `cls` has a hint it cannot test inline."""
    return _compiled_check(cls)


def check_types(obj: Any) -> Any:
    """`obj` itself, or a TypeError naming each field of the wrong type and its value."""
    fast = _compiled_check(type(obj))
    if fast is not None and fast(obj):
        return obj
    bad = invalid_fields(obj)
    if bad:
        shown = ", ".join(f"{name}={getattr(obj, name)!r:.40}" for name in bad)
        raise TypeError(f"{type(obj).__name__}: wrong type for {shown}")
    return obj
