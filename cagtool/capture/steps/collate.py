"""What the job's DataLoaders batch with: each distinct `collate_fn` its loop's iterators were made
from, as the manifest's `collate_functions` (what `recompiles --explain` names where a sequence
length padded per batch recompiled a forward: the script's own function, or a library's collator
and how it pads).

Read where an iterator is made (hooks.py, DataLoader's `_get_iterator`: once an epoch or an
evaluation), never per batch. Only what the objects already hold is read: a function's code object
and names, an instance's class and the plain values in its own `__dict__`, never a property or a
`__getattr__` of the job's (no code of the job's runs), and any error leaves the entry out."""

from __future__ import annotations

import functools
import types
from typing import Any

from cagtool.capture.observe.source import is_user_file

# The most collate functions a record lists (distinct ones: a job has one or two).
MAX_COLLATE_FUNCTIONS = 8
# How the padding collators of transformers say how they pad (DataCollatorWithPadding,
# DataCollatorForSeq2Seq, DataCollatorForTokenClassification...): kept where the value is plain.
SETTINGS = ("padding", "pad_to_multiple_of", "max_length")
# transformers' Trainer wraps the job's data_collator (RemoveColumnsCollator, which drops the
# columns the model's forward does not take) in `.data_collator`: the job's is the one inside.
_WRAPPERS = ("RemoveColumnsCollator",)


def _plain(value: Any) -> bool:
    return value is None or type(value) in (bool, int, str) and (type(value) is not str or len(value) <= 64)


def _own_dict(obj: Any) -> dict[str, Any]:
    """`obj.__dict__` without a `__getattr__` of the job's running where it has none."""
    try:
        found = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return {}
    return found if isinstance(found, dict) else {}


def describe(collate: Any) -> dict[str, Any] | None:
    """One collate function as plain data: {"name", "module", "file", "line", "kind": "function" |
    "instance", "user": its code is the job's own (no library's), "settings": {...}, "wrapped_by":
    str | None}; None where it is none of those."""
    wrapped_by = None
    for _ in range(3):
        cls = type(collate)
        inner = _own_dict(collate).get("data_collator") if cls.__name__ in _WRAPPERS else None
        if inner is None:
            break
        wrapped_by, collate = cls.__name__, inner
    while isinstance(collate, functools.partial):
        collate = collate.func
    if isinstance(collate, types.MethodType):
        collate = collate.__func__
    if isinstance(collate, types.FunctionType):
        code = collate.__code__
        return {"name": str(collate.__qualname__), "module": str(collate.__module__ or ""),
                "file": code.co_filename, "line": code.co_firstlineno, "kind": "function", "user": is_user_file(code.co_filename),
                "settings": {}, "wrapped_by": wrapped_by}
    cls = type(collate)
    call = next((k.__dict__["__call__"] for k in cls.__mro__ if "__call__" in k.__dict__), None)
    if not isinstance(call, types.FunctionType):
        return None
    call_code = call.__code__
    own = _own_dict(collate)
    settings = {k: own[k] for k in SETTINGS if k in own and _plain(own[k])}
    return {"name": str(cls.__qualname__), "module": str(cls.__module__), "file": call_code.co_filename, "line": call_code.co_firstlineno,
            "kind": "instance", "user": is_user_file(call_code.co_filename), "settings": settings, "wrapped_by": wrapped_by}


def note_collate(found: list[dict[str, Any]], loader: Any) -> None:
    """Add the collate function of `loader` to `found` where it is not there yet."""
    collate = _own_dict(loader).get("collate_fn")
    if collate is None or len(found) >= MAX_COLLATE_FUNCTIONS:
        return
    described = describe(collate)
    if described is not None and described not in found:
        found.append(described)
