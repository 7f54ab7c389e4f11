"""The gate's threshold grammar, after pytest-benchmark's `--benchmark-compare-fail=mean:5%`:
a threshold is text, parsed once into a typed value. Every form is accepted in flags and in
`[tool.cagtool.gate]`:

    count      N | KIND:N         --max-recompiles 2, --max-recompiles ca:1 (kinds: total, ca, dynamo)
    speedup    X | NUM/DEN:X      --min-speedup 1.05 (ca/aot), --min-speedup ca/eager:1.2; X may end in x
    time       P | P% | Ps | FIELD:...   --max-regression 10 (percent), 10%, 0.002s (absolute seconds),
                                        p90:15% (FIELD: median, mean, p10, p90; default median)

Unlike pytest-benchmark, a bare number in a time threshold is a percentage (`--max-regression PCT`):
the issue's flags take percentages, and seconds are spelt with an `s`. Bad text is a UsageError (exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cagtool.errors import UsageError

RECOMPILE_KINDS: dict[str, str] = {
    "total": "recompiles",  # CA cache misses + Dynamo recompiles
    "ca": "ca_cache_misses",  # a new CA graph after the first
    "dynamo": "dynamo_recompiles",  # a guard failure of a forward frame or a CA graph
}
STEP_TIME_FIELDS = ("median", "mean", "p10", "p90")
_NUMBER = r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"


@dataclass(frozen=True)
class CountLimit:
    kind: str  # total | ca | dynamo for recompiles; "total" for the others
    limit: int


@dataclass(frozen=True)
class SpeedupThreshold:
    numerator: str  # the faster-hoped mode: speedup = time(denominator) / time(numerator)
    denominator: str
    minimum: float

    def __str__(self) -> str:
        return f"{self.numerator}/{self.denominator}:{self.minimum:g}x"


@dataclass(frozen=True)
class TimeThreshold:
    value: float
    unit: str  # "%" or "s"
    field: str = "median"  # for step time: median | mean | p10 | p90

    def __str__(self) -> str:
        prefix = "" if self.field == "median" else f"{self.field}:"
        return f"{prefix}{self.value:g}{self.unit}"


def parse_count(text: Any, flag: str, kinds: tuple[str, ...] = ("total",)) -> CountLimit:
    """`3` or `KIND:3`. Ints from TOML are accepted as they are."""
    if isinstance(text, bool):
        raise UsageError(f"{flag}: expected a count, got {text!r}")
    if isinstance(text, int):
        kind, number = "total", str(text)
    else:
        raw = str(text).strip()
        kind, _, number = raw.rpartition(":")
        kind = kind.strip().lower() or "total"
    if kind not in kinds:
        raise UsageError(f"{flag}: unknown kind {kind!r} in {text!r} (kinds: {', '.join(kinds)})")
    if not re.fullmatch(r"[0-9]+", number.strip()):
        raise UsageError(f"{flag}: expected a whole number >= 0 or KIND:N, got {text!r}")
    return CountLimit(kind, int(number))


def parse_speedup(text: Any, flag: str = "--min-speedup", modes: tuple[str, ...] = ("eager", "aot", "ca")) -> SpeedupThreshold:
    """`1.05` (ca/aot), `1.05x`, or `ca/eager:1.2`."""
    raw = str(text).strip()
    pair, _, number = raw.rpartition(":")
    numerator, denominator = "ca", "aot"
    if pair:
        num, slash, den = pair.partition("/")
        if not slash or num.strip() not in modes or den.strip() not in modes or num.strip() == den.strip():
            raise UsageError(f"{flag}: expected X or MODE/MODE:X with modes {'/'.join(modes)}, got {text!r}")
        numerator, denominator = num.strip(), den.strip()
    number = number.strip().rstrip("xX")
    if not re.fullmatch(_NUMBER, number) or float(number) <= 0:
        raise UsageError(f"{flag}: expected a positive speedup such as 1.05 or ca/eager:1.2x, got {text!r}")
    return SpeedupThreshold(numerator, denominator, float(number))


def parse_time_threshold(text: Any, flag: str, fields: tuple[str, ...] = ()) -> TimeThreshold:
    """`10`, `10%`, `0.002s`, and with `fields`, `p90:10%`."""
    if isinstance(text, bool):
        raise UsageError(f"{flag}: expected a percentage, got {text!r}")
    raw = str(text).strip()
    field_name, _, rest = raw.rpartition(":")
    field_name = field_name.strip().lower()
    if field_name and field_name not in fields:
        allowed = f" (fields: {', '.join(fields)})" if fields else " (no FIELD: here)"
        raise UsageError(f"{flag}: unknown field {field_name!r} in {text!r}{allowed}")
    match = re.fullmatch(rf"({_NUMBER})\s*(%|s)?", rest.strip())
    if not match:
        raise UsageError(f"{flag}: expected a percentage (10 or 10%) or seconds (0.5s), got {text!r}")
    return TimeThreshold(float(match.group(1)), match.group(2) or "%", field_name or "median")
