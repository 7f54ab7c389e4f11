"""The range of every figure a record or a baseline holds, as msgspec types, and the one rule
msgspec cannot say.

A figure outside its range is no measurement: no recorder writes one, a damaged or forged file
does. NaN or an infinity (which json reads) would pass or fail every comparison a gate makes, a
negative peak memory passed `--max-memory-ratio`, a step of 1e-300 s read as a speed-up and one
of 1e300 s overflowed the interval arithmetic, a compile time of 1e308 s printed 300 digits. The
readers refuse such a file (exit 3), naming it, the field and the value. Bounds are far outside
any run.
"""

from __future__ import annotations

import math
from functools import cache
from types import UnionType
from typing import Annotated, Any, Iterable, NamedTuple, Union, get_args, get_origin

import msgspec
from msgspec import Meta

MIN_SECONDS = 1e-9  # a nanosecond: the finest tick of any clock cagtool reads
MAX_SECONDS = 1e6  # eleven days: a step, a backward call, a compile
STEP_BOUNDS = (MIN_SECONDS, MAX_SECONDS)
MAX_DURATION_S = 1e9  # about 32 years: a process's life
MAX_BYTES = 2**63 - 1

# A measured time: 0 (a clock coarser than what it timed reads some as 0 s) or within STEP_BOUNDS.
# What lies between 0 and a nanosecond is refused by `figure_problem` (a Meta holds one interval).
Seconds = Annotated[float, Meta(ge=0.0, le=MAX_SECONDS, extra={"least_nonzero": MIN_SECONDS})]
# How long a process ran or waited (a manifest's duration_s).
Duration = Annotated[float, Meta(ge=0.0, le=MAX_DURATION_S)]
Bytes = Annotated[int, Meta(ge=0, le=MAX_BYTES)]

# How every refusal of a figure out of its range ends.
REFUSED = "no recorder writes that (a damaged or forged record); refusing to read it"


class Bound(NamedTuple):
    low: float
    high: float
    least_nonzero: float = 0.0  # above 0, nothing below this (0.0: no such rule)

    def rule(self) -> str:
        if self.least_nonzero:
            return f"0 or between {self.least_nonzero:g} and {self.high:g}"
        return f"between {self.low:g} and {self.high:g}"


def bound_of(annotation: Any) -> Bound | None:
    """The range an annotation's Meta gives a number (`Seconds`, `Seconds | None`...), or None."""
    if get_origin(annotation) in (Union, UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return bound_of(inner[0]) if len(inner) == 1 else None
    if get_origin(annotation) is not Annotated:
        return None
    for meta in annotation.__metadata__:
        if isinstance(meta, Meta) and meta.ge is not None and meta.le is not None:
            least = (meta.extra or {}).get("least_nonzero", 0.0)
            return Bound(float(meta.ge), float(meta.le), float(least))
    return None


@cache
def bounded_fields(cls: type) -> dict[str, Bound]:
    """A msgspec Struct's fields that hold a bounded figure, with their bounds."""
    found = {}
    for f in msgspec.structs.fields(cls):
        bound = bound_of(f.type)
        if bound is not None:
            found[f.name] = bound
    return found


def number_text(value: int | float) -> str:
    """A number as an error line shows it: a forged integer of thousands of digits in a few words."""
    if isinstance(value, int) and abs(value) >= 10**30:
        return f"{'-' if value < 0 else ''}over 10**30"
    return repr(value)


def figure_problem(value: Any, bound: Bound) -> str | None:
    """Why `value` is no figure within `bound`, in words ("is nan", "is -0.5, ..."); None when it
    is one (None, a value left unknown, is one; so is anything not a number, whose type the
    decoder checks)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and math.isnan(value):
        return "is NaN, no number"
    if not bound.low <= value <= bound.high or (bound.least_nonzero and 0 < value < bound.least_nonzero):
        return f"is {number_text(value)}, outside its range ({bound.rule()})"
    return None


def first_out_of_bounds(values: list[Any], bound: Bound) -> int | None:
    """The index of the first of `values` (a column of figures, None for one left unknown) outside
    `bound`, NaN included; None when all are in it. In C but for the bad value's own search (no
    numpy: the readers of a few events, `recompiles`, never import it)."""
    least = bound.least_nonzero or bound.low
    try:
        nonzero = list(filter(None, values))  # None and 0 are figures of every bound
        if not nonzero or (least <= min(nonzero) and max(nonzero) <= bound.high and not any(map(math.isnan, nonzero))):
            return None
    except TypeError:  # not numbers: the decoder's to refuse, or the reader's to skip
        pass
    return next((i for i, value in enumerate(values) if figure_problem(value, bound) is not None), None)


def below_least_nonzero(values: Iterable[Any], bound: Bound) -> bool:
    """Whether any of `values` (None for an unknown one) lies between 0 and `bound.least_nonzero`:
    the rule a Meta cannot say, for figures the decoder checked against the rest of `bound` (no
    NaN among them). One pass in C."""
    return bool(bound.least_nonzero) and min(filter(None, values), default=bound.least_nonzero) < bound.least_nonzero


def first_out_of_bounds_array(values: Any, bound: Bound, nulls: Any = ()) -> int | None:
    """`first_out_of_bounds` of a numpy float array, whose values at the indices `nulls` are
    unknown ones (NaN in the array): the columns sidecar's figures, read as arrays."""
    import numpy as np

    ok = (values >= bound.low) & (values <= bound.high)
    if bound.least_nonzero:
        ok &= (values == 0) | (values >= bound.least_nonzero)
    if len(nulls):
        ok[np.asarray(nulls, dtype=np.intp)] = True
    return None if ok.all() else int(np.argmin(ok))
