"""The event stream's high-volume lines (steps, backward calls, optimizer steps) as columns, and
the sidecar file `columns.json` that stores them beside events.jsonl.

A long run's events.jsonl is three lines per step: 10 MB for 20,000 steps, and decoding it into
dicts and events is most of a `cagtool summary`. When the mode's process closes its record, the
writer reads its own events.jsonl back once and stores the values of those lines column by column,
each value the exact JSON text of the line (so decoding a column gives what decoding the lines
gives, type for type), with the size and CRC-32 of the events.jsonl it was read from, and where
every other line starts and ends. A reader trusts the sidecar only when the events.jsonl in front
of it has that size and that CRC-32: a record that was appended to, truncated, edited or never
closed (crash, kill, full disk) has no sidecar or a stale one, and is read line by line as before.

Why a sidecar when msgspec decodes and checks the lines: decoding is not the whole cost. `cagtool
summary` of 3 x 100,000 steps (benchmarks/job_scale.py --steps 100000 --ranks 1, 900,000 lines)
took 0.68 s CPU with the sidecar and 5.7 s without it (10.6 s before msgspec), at load 11 on the
2-core VM; the full job (8 ranks, 7.2 million lines) must stay under 2 s. At the CLI target's size
(3 x 20,000 steps; benchmarks/step_paths.py, benchmarks/README.md) the lines alone take 1.11 s,
the sidecar's columns as lists 0.83 s, as numpy arrays (report/figures/metrics.py `held_steps`)
0.42 s: the 0.5 s target is met only through the sidecar.

Only lines the columns hold exactly go into them: every line of a column kind must have one layout
(the same keys in the same order, as the writer writes them), each value a JSON scalar of the
field's declared type; otherwise no sidecar is written.
"""

from __future__ import annotations

import json
import operator
import os
import re
import sys
import types
import typing
import zlib
from array import array
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import groupby
from pathlib import Path
from typing import Any, Union

import msgspec

from cagtool.errors import UnreadableInput
from cagtool.record.atomic import write_atomic
from cagtool.record.bounds import REFUSED, bounded_fields, figure_problem, first_out_of_bounds, first_out_of_bounds_array
from cagtool.record.regular_files import open_record_file
from cagtool.record.schema import EVENT_TYPES, EVENTS_FILE, MAX_EVENT_LINE_BYTES, MAX_JSON_FILE_BYTES, Event

COLUMNS_FILE = "columns.json"
COLUMNS_FORMAT = "cagtool-event-columns"
# 2: float columns may be stored as binary doubles ("f8"). Version 1 sidecars are still read; a
# cagtool that reads only version 1 ignores a version-2 sidecar and reads the lines.
COLUMNS_VERSION = 2
READABLE_VERSIONS = (1, 2)
COLUMN_KINDS = ("step", "backward", "optimizer_step")

_INT = rb"-?(?:0|[1-9][0-9]*)"
_NUMBER = _INT + rb"(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|NaN|-?Infinity"
_STRING = rb'"[^"\\\x00-\x1f\x80-\xff]*"'  # ASCII, no escapes: the text between the quotes is the value
_PREFIX = b'{"kind": "'


@dataclass
class EventColumns:
    """One kind's lines, in file order, `count` of them. Each column is decoded the first time it
    is asked for (a summary reads 9 of the 20-odd); a field the lines leave out takes its default,
    as when a line is read alone."""

    kind: str
    count: int
    # field -> (encoding, its stored bytes), in line order; bytes still in the file are a `_Stored`
    # span, read the first time the column is asked for (`_text`).
    encoded: dict[str, tuple[str, bytes | _Stored]]
    # Added to every `step` value read: the loader's conversion of an older record's step numbers
    # (the one it applies to the events it builds) reaches the columns through this.
    step_shift: int = 0
    # The events.jsonl the columns stand for: what a refusal of one of their figures names.
    source: Path | None = None
    _decoded: dict[str, list[Any]] = field(default_factory=dict, repr=False)
    _checked: set[str] = field(default_factory=set, repr=False)  # figures found within their bounds

    def column(self, name: str) -> list[Any]:
        """The named field's values (a list the caller must not change)."""
        found = self._decoded.get(name)
        if found is None:
            if name in self.encoded:
                text = self._text(name)
                try:
                    found = _decode_column(self.encoded[name][0], text)
                    if len(found) != self.count:
                        raise ValueError(f"{len(found)} values, not {self.count}")
                except _UNDECODABLE as exc:
                    raise self._undecodable(name, exc) from None
                self._check_types(name, found)
                if name in _float_fields(self.kind):  # as the loader decodes a line: a float field's 1 is 1.0
                    found = [float(v) if v.__class__ is int else v for v in found]
                bound = bounded_fields(EVENT_TYPES[self.kind]).get(name)
                if bound is not None and name not in self._checked:
                    self._refuse(name, first_out_of_bounds(found, bound), found)
            elif not self.count:
                found = []  # a kind with no line (a record with steps but no backward events): no field is held
            else:
                found = _default_column(self.kind, name, self.count)
            if name == "step" and self.step_shift:
                found = [step + self.step_shift for step in found]
            self._decoded[name] = found
        return found

    def numbers(self, name: str) -> tuple[Any, list[int]] | None:
        """The named numeric field as a numpy array (float64, or int64 for integers) and the
        indices of its nulls (NaN in the array), without a Python object per value: what lets the
        step figures of a 100,000-step record cost milliseconds. None when the column is not
        numbers (strings, booleans) or is held in a form with no cheap array (then `column`)."""
        import numpy as np

        if name not in self.encoded or name in self._decoded:
            values = self.column(name)
            if not all(type(v) in (int, float) or v is None for v in values):
                return None
            nulls = [i for i, v in enumerate(values) if v is None]
            if any(type(v) is float for v in values) or nulls:
                array = np.array([np.nan if v is None else v for v in values], dtype=float)
            else:
                array = np.array(values, dtype=np.int64)
            return array, nulls
        encoding, stored = self.encoded[name]
        # Not kept: the array is the caller's, and a report over many records reads a column again
        # rather than holding every record's at once.
        text = stored.read() if isinstance(stored, _Stored) else stored
        if encoding not in ("f8", "deltas", "runs"):
            self.column(name)
            return self.numbers(name)
        try:
            if encoding == "f8":
                if name not in _float_fields(self.kind):  # doubles where the field holds no float
                    self._check_types(name, [0.5])
                cut = text.index(b"\n")
                array = np.frombuffer(text, dtype="<f8", offset=cut + 1)  # no copy of the doubles
                nulls = json.loads(text[:cut])["null"]
            elif encoding == "deltas":
                first, differences = json.loads(text)
                self._check_types(name, [first, *(d for d, _ in differences)])
                steps = np.repeat(np.array([d for d, _ in differences], dtype=np.int64), [n for _, n in differences])
                array = np.concatenate([np.array([first], dtype=np.int64), first + np.cumsum(steps)])
                nulls = []
            else:
                runs = json.loads(text)
                self._check_types(name, [v for v, _ in runs])
                if not all(type(v) in (int, float) or v is None for v, _ in runs):
                    return None
                counts = [n for _, n in runs]
                nulls = [i for (v, n), start in zip(runs, np.cumsum([0, *counts[:-1]]).tolist()) if v is None for i in range(start, start + n)]
                dtype = float if nulls or any(type(v) is float for v, _ in runs) else np.int64
                array = np.repeat(np.array([np.nan if v is None else v for v, _ in runs], dtype=dtype), counts)
            if len(array) != self.count:
                raise ValueError(f"{len(array)} values, not {self.count}")
        except _UNDECODABLE as exc:
            raise self._undecodable(name, exc) from None
        bound = bounded_fields(EVENT_TYPES[self.kind]).get(name)
        if bound is not None and name not in self._checked:
            self._refuse(name, first_out_of_bounds_array(array, bound, nulls), array)
        if name == "step" and self.step_shift:
            array = array + self.step_shift
        return array, nulls

    def _refuse(self, name: str, index: int | None, values: Any) -> None:
        """UnreadableInput for the figure at `index` of column `name` (outside its range: the
        sidecar is checked against its events.jsonl, and both can be forged together), as the
        loader refuses such an event's line; None: the column is checked."""
        if index is None:
            self._checked.add(name)
            return
        bound = bounded_fields(EVENT_TYPES[self.kind])[name]
        seq = self.column("seq")[index]
        value = values[index]
        value = value.item() if hasattr(value, "item") else value  # a numpy scalar, as its Python number
        problem = figure_problem(value, bound) or f"is {value!r}, outside its range ({bound.rule()})"
        raise UnreadableInput(f"{self.source or 'the columns sidecar'}: seq {seq}: the {self.kind} event's {name} {problem}; {REFUSED}")

    def _check_types(self, name: str, values: list[Any]) -> None:
        """UnreadableInput unless each of `values` is of the field's declared type, as the loader
        checks a line's (a float field takes an integer). The writer puts only such values in a
        column (`_layout`); a sidecar forged with its checksums may hold anything: a string where a
        float belongs would reach the figures' arithmetic (a traceback) or stand for a number."""
        column_type = _column_type(self.kind, name)
        if column_type is None:
            raise UnreadableInput(f"{self._where()}: the {self.kind} column {name!r} is no field of a {self.kind} event; {REFUSED}")
        try:
            msgspec.convert(values, type=column_type)
        except msgspec.ValidationError as exc:
            words = (str(exc).splitlines() or ["of another type"])[0][:200]
            raise UnreadableInput(f"{self._where()}: the {self.kind} column {name!r} holds a value of another type ({words}); {REFUSED}") from None

    def _where(self) -> Path | str:
        return self.source.parent / COLUMNS_FILE if self.source is not None else "the columns sidecar"

    def _undecodable(self, name: str, exc: Exception) -> UnreadableInput:
        """The refusal of a column whose bytes matched their checksums but are no column the writer
        writes (not JSON, nested deeper than json goes, of another shape or length): a sidecar
        forged with its checksums, refused in one line as a forged event's line is."""
        where = self.source.parent / COLUMNS_FILE if self.source is not None else "the columns sidecar"
        words = "nested too deeply" if isinstance(exc, RecursionError) else (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        return UnreadableInput(f"{where}: the {self.kind} column {name!r} does not decode as one ({words}); {REFUSED}")

    def distinct(self, name: str) -> set[Any]:
        """The named field's distinct values (for a column of runs, without expanding them)."""
        found = self.encoded.get(name)
        if found is not None and found[0] == "runs" and name not in self._decoded and not (name == "step" and self.step_shift):
            text = self._text(name)
            try:
                return {value for value, _ in json.loads(text)}
            except _UNDECODABLE as exc:
                raise self._undecodable(name, exc) from None
        return set(self.column(name))

    def _text(self, name: str) -> bytes:
        encoding, stored = self.encoded[name]
        if isinstance(stored, _Stored):
            stored = stored.read()
            self.encoded[name] = (encoding, stored)
        return stored

    def events(self) -> list[Event]:
        """The events themselves, with the values the loader gets from their lines (the sidecar
        holds only lines whose every value has its field's type, see `_layout`)."""
        cls = EVENT_TYPES[self.kind]
        names = list(self.encoded)
        values = [self.column(name) for name in names]
        return [cls(**dict(zip(names, row))) for row in zip(*values)] if names else []


# What decoding a column's bytes raises for bytes the writer never wrote (UnicodeDecodeError and
# json's errors are ValueErrors; a list's value unpacked as a pair, TypeError; a header without
# "null", KeyError; nesting deeper than json goes, RecursionError).
_UNDECODABLE = (ValueError, TypeError, KeyError, IndexError, RecursionError)


@dataclass(frozen=True)
class _Stored:
    """A column's bytes where they lie in the sidecar file (version 2 records each column's CRC-32):
    a report over 24 records of 100,000 steps reads the few columns it uses, not 8 MB of each."""

    path: Path
    offset: int  # in the file
    length: int
    crc32: int | None

    def read(self) -> bytes:
        with os.fdopen(open_record_file(self.path), "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(self.length)
        if len(data) != self.length or (self.crc32 is not None and zlib.crc32(data) != self.crc32):
            from cagtool.errors import UnreadableInput

            raise UnreadableInput(f"{self.path} changed while it was being read; read the record again (or delete that file)")
        return data


@lru_cache(maxsize=None)
def _column_type(kind: str, name: str) -> Any:
    """list[the field's declared type], what a column of the field may hold; None for no field."""
    hint = typing.get_type_hints(EVENT_TYPES[kind]).get(name)
    return None if hint is None or name == "kind" else list[hint]


@lru_cache(maxsize=None)
def _required_fields(kind: str) -> frozenset[str]:
    return frozenset(f.name for f in msgspec.structs.fields(EVENT_TYPES[kind]) if f.required)


@lru_cache(maxsize=None)
def _float_fields(kind: str) -> frozenset[str]:
    hints = typing.get_type_hints(EVENT_TYPES[kind])
    return frozenset(name for name, hint in hints.items() if hint is float or float in typing.get_args(hint))


def _default_column(kind: str, name: str, count: int) -> list[Any]:
    for f in msgspec.structs.fields(EVENT_TYPES[kind]):
        if f.name == name:
            if f.default_factory is not msgspec.NODEFAULT:
                return [f.default_factory() for _ in range(count)]
            if f.default is not msgspec.NODEFAULT:
                return [f.default] * count
    raise KeyError(f"{kind} lines hold no {name!r} and it has no default")


# A float's JSON text as the writer writes it (repr: a point or an exponent; NaN, Infinity), or null.
_FLOAT_TOKEN = rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)|NaN|-?Infinity|null"
_FLOATS = re.compile(b"(?:(?:" + _FLOAT_TOKEN + b"),)*(?:" + _FLOAT_TOKEN + b")")

_JSON_NAN = json.loads("NaN")

# How a column's tokens are stored: "values", the JSON array of them; "runs", [[value, n], ...] for a
# column of few runs of one value (a boundary, a thread name, zero compiles); "deltas", [first,
# [[difference, n], ...]] for integers in arithmetic runs (step numbers, seq); "f8", floats (and
# nulls) as little-endian doubles after a JSON line of the nulls' and NaNs' indices. Each decodes to exactly
# the values json.loads gives for the tokens themselves.
def _encode_column(tokens: tuple[bytes, ...]) -> tuple[str, bytes]:
    few = max(1, len(tokens) // 8)
    if len(set(tokens)) <= few:
        runs = [(token, len(list(group))) for token, group in groupby(tokens)]
        if len(runs) <= few:
            return "runs", b"[" + b",".join(b"[" + token + b"," + str(n).encode() + b"]" for token, n in runs) + b"]"
    joined = b",".join(tokens)
    if _FLOATS.fullmatch(joined):
        # Every value a float's text (or null): stored as doubles, which decode to exactly the
        # floats json.loads gives for the text (it parses with float() too), 8 bytes each and
        # without parsing; the nulls' and NaNs' indices go in a JSON line before them.
        nulls = [i for i, token in enumerate(tokens) if token == b"null"]
        nans = [i for i, token in enumerate(tokens) if token == b"NaN"]
        values = array("d", (float("nan") if token == b"null" else float(token) for token in tokens) if nulls else map(float, tokens))
        if sys.byteorder != "little":
            values.byteswap()
        return "f8", json.dumps({"null": nulls, "nan": nans}, separators=(",", ":")).encode() + b"\n" + values.tobytes()
    if _patterns()[1].fullmatch(joined):
        numbers = list(map(int, tokens))
        differences = [(d, len(list(group))) for d, group in groupby(map(operator.sub, numbers[1:], numbers[:-1]))]
        if len(differences) <= few:
            return "deltas", json.dumps([numbers[0], differences], separators=(",", ":")).encode()
    return "values", b"[" + joined + b"]"


def _decode_column(encoding: str, text: bytes) -> list[Any]:
    if encoding == "f8":
        cut = text.index(b"\n")
        header = text[:cut]
        values = array("d")
        values.frombytes(memoryview(text)[cut + 1 :])
        if sys.byteorder != "little":
            values.byteswap()
        out = values.tolist()
        special = json.loads(header)
        for i in special["null"]:
            out[i] = None
        for i in special["nan"]:
            out[i] = _JSON_NAN  # the very object json.loads gives for NaN, so lists compare alike
        return out
    decoded = json.loads(text)
    if encoding == "values":
        return decoded
    out: list[Any] = []
    if encoding == "runs":
        for value, n in decoded:
            out += [value] * n
        return out
    if encoding == "deltas":
        first, differences = decoded
        out.append(first)
        for difference, n in differences:
            last = out[-1]
            out += range(last + difference, last + difference * (n + 1), difference) if difference else [last] * n
        return out
    raise ValueError(f"unknown column encoding {encoding!r}")


@lru_cache(maxsize=None)
def _patterns() -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    """(a line not of a column kind, found by its newline; a comma-separated list of JSON
    integers), compiled when a sidecar is derived, not when a reader imports this module."""
    other = re.compile(b"\n(?!" + re.escape(_PREFIX) + b"(?:" + b"|".join(k.encode() for k in COLUMN_KINDS) + b')")[^\n]*')
    return other, re.compile(b"(?:" + _INT + b",)*" + _INT)


def _token(hint: Any) -> bytes | None:
    """The JSON text of a value of `hint` that decodes to a value passing the loader's type check;
    None for a hint the columns do not hold (lists, nested records)."""
    if hint is int:
        return _INT
    if hint is float:
        return _NUMBER
    if hint is str:
        return _STRING
    if hint is bool:
        return rb"true|false"
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = typing.get_args(hint)
        if type(None) in args and len(args) == 2:
            inner = _token(next(a for a in args if a is not type(None)))
            return None if inner is None else inner + rb"|null"
    return None


def _layout(kind: str, line: bytes) -> tuple[re.Pattern[bytes], list[str]] | None:
    """A pattern matching exactly the lines of `kind` laid out as `line` (same keys, same order),
    with one group per field, and the field names; None when such lines cannot be columns."""
    try:
        decoded = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(decoded, dict) or list(decoded)[:1] != ["kind"] or decoded["kind"] != kind:
        return None
    cls = EVENT_TYPES[kind]
    hints = typing.get_type_hints(cls)
    declared = {f.name for f in msgspec.structs.fields(cls)}
    required = {f.name for f in msgspec.structs.fields(cls) if f.required}
    names = list(decoded)[1:]
    if not set(names) <= declared or not required <= set(names):
        return None
    parts = [re.escape(_PREFIX + kind.encode() + b'"')]
    for name in names:
        token = _token(hints[name])
        if token is None or not re.fullmatch(rb"[a-z_0-9]+", name.encode()):
            return None
        parts.append(b', "' + name.encode() + b'": (' + token + b")")
    parts.append(rb"\}")
    return re.compile(b"".join(parts)), names


def derive(data: bytes, events_mtime_ns: int | None = None) -> bytes | None:
    """The sidecar's bytes for an events.jsonl holding `data`, or None when it has no line of a
    column kind or they cannot all be held exactly (a line of another layout, a corrupt or
    truncated one). `events_mtime_ns`: the file's modification time when it was read (see
    `read_sidecar`)."""
    return _derive(b"\n" + data, events_mtime_ns)


def _derive(text: bytes | bytearray, events_mtime_ns: int | None = None) -> bytes | None:
    """`derive` of the stream with a newline put before it (`text`): each match then starts at its
    line's newline, a literal prefix the regex engine jumps to. Runs when a record closes: each
    kind's lines are matched in one regex pass, then encoded and let go before the next kind's
    (about 0.27 s CPU for a 20,000-step record)."""
    data = memoryview(text)[1:]
    kinds_doc: dict[str, Any] = {}
    body: list[bytes] = []
    offset = 0
    for kind in COLUMN_KINDS:
        prefix = b"\n" + _PREFIX + kind.encode() + b'"'
        lines = text.count(prefix)
        columns: dict[str, list[Any]] = {}
        kinds_doc[kind] = {"count": lines, "columns": columns}
        if not lines:
            continue
        first = text.index(prefix) + 1
        end = text.find(b"\n", first)
        layout = _layout(kind, bytes(text[first : end if end >= 0 else len(text)]))
        if layout is None:
            return None
        found = re.compile(b"\n" + layout[0].pattern + b"(?=\n|\\Z)").findall(text)
        if len(found) != lines:
            return None  # a line of this kind the layout does not hold exactly
        if len(re.findall(rb'"kind"\s*:\s*"' + re.escape(kind.encode()) + b'"', text)) != lines:
            return None  # an event of this kind written otherwise (another key order, spacing)
        for name, tokens in zip(layout[1], zip(*found) if len(layout[1]) > 1 else [tuple(found)]):
            encoding, stored = _encode_column(tokens)
            columns[name] = [encoding, offset, len(stored), zlib.crc32(stored)]
            body.append(stored + b"\n")
            offset += len(stored) + 1
        del found
    if not any(entry["count"] for entry in kinds_doc.values()):
        return None  # nothing to hold (an imported log, a run that never stepped)
    # Every other line, by number and place in the stream (blank ones included: the loader skips them).
    other: list[tuple[int, int, int]] = []
    number, previous = 1, 0
    for match in _patterns()[0].finditer(text):
        number += text.count(b"\n", previous, match.start())
        previous = match.start()
        other.append((number, match.start(), match.end() - 1))
    stored_body = b"".join(body)
    header = {"format": COLUMNS_FORMAT, "version": COLUMNS_VERSION, "events_bytes": len(data), "events_crc32": zlib.crc32(data),
              "body_crc32": zlib.crc32(stored_body), "kinds": kinds_doc, "other": other}
    if events_mtime_ns is not None:
        header["events_mtime_ns"] = events_mtime_ns
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + stored_body


# Above this, a record closes without a sidecar (read line by line, as before): deriving it holds
# the stream and one kind's values in memory at once (about 2.5x the file), at the end of the job.
MAX_EVENTS_BYTES = 64 * 2**20  # about 120,000 steps of three lines


def write_sidecar(mode_dir: Path) -> bool:
    """Derive and write `mode_dir`/columns.json from its events.jsonl (atomically); False when there
    is nothing the columns can hold, or the stream is over MAX_EVENTS_BYTES. Raises OSError on a
    write failure (the caller decides)."""
    target = Path(mode_dir) / COLUMNS_FILE
    try:
        with os.fdopen(open_record_file(Path(mode_dir) / EVENTS_FILE), "rb") as handle:
            stat = os.fstat(handle.fileno())
            size = stat.st_size
            if size > MAX_EVENTS_BYTES:
                return False
            text = bytearray(size + 1)  # the stream with a newline before it, in one buffer
            text[0] = 10
            if handle.readinto(memoryview(text)[1:]) != size or handle.read(1):
                return False  # it changed while being read
    except FileNotFoundError:
        return False
    sidecar = _derive(text, stat.st_mtime_ns)
    if sidecar is None:
        return False
    write_atomic(target, sidecar)
    return True


@dataclass
class Sidecar:
    """A sidecar that matched the events.jsonl it was read beside."""

    columns: dict[str, EventColumns]
    other: list[tuple[int, int, int]]  # (line number, start, end) in events.jsonl


def read_sidecar(mode_dir: Path, data: bytes | None = None, events_stat: os.stat_result | None = None) -> Sidecar | None:
    """The sidecar of the mode whose events.jsonl holds `data`, when one exists and was derived from
    exactly these bytes (size and CRC-32); None otherwise (the caller reads the lines).

    Without `data`, from `events_stat` (os.stat of events.jsonl) alone, the way git trusts its
    index: the sidecar is used only when it recorded the file's size and modification time, both
    still those of the file, and the file was last modified strictly before the sidecar was written
    (a change in the same clock tick as the sidecar cannot hide behind an equal time). A 100,000-step
    record's events.jsonl is about 60 MB: reading and checksumming 24 of them was most of a report
    over an 8-rank job; an append, a truncation or an edit changes the size or the time, and a
    record copied without its times (cp, an artifact download) is checked by its CRC-32 as before."""
    path = Path(mode_dir) / COLUMNS_FILE
    try:
        with os.fdopen(open_record_file(path), "rb") as handle:
            sidecar_stat = os.fstat(handle.fileno())
            if sidecar_stat.st_size > MAX_JSON_FILE_BYTES:
                return None  # none the writer writes: it holds less than the events it was derived from (MAX_EVENTS_BYTES)
            written_ns = sidecar_stat.st_mtime_ns
            header = handle.readline(MAX_EVENT_LINE_BYTES + 1)
            if not header.endswith(b"\n"):
                return None  # no header the writer writes (it holds a few bytes per line of the stream)
            doc = json.loads(header)
            if not isinstance(doc, dict) or doc.get("format") != COLUMNS_FORMAT or doc.get("version") not in READABLE_VERSIONS:
                return None
            if data is None:
                mtime = doc.get("events_mtime_ns")
                if events_stat is None or not isinstance(mtime, int) or doc.get("events_bytes") != events_stat.st_size:
                    return None
                if events_stat.st_mtime_ns != mtime or mtime >= written_ns:
                    return None
            elif doc.get("events_bytes") != len(data) or doc.get("events_crc32") != zlib.crc32(data):
                return None  # stale: derived from another events.jsonl than this one
            # The body checked piece by piece and let go: the columns are read when asked for.
            crc, body_length = 0, 0
            while chunk := handle.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
                body_length += len(chunk)
    # A link or FIFO planted as the sidecar, or a header json will not read (nested deeper than it
    # goes included): read the lines instead.
    except (OSError, ValueError, RecursionError, UnreadableInput):
        return None
    if doc.get("body_crc32") != crc:
        return None  # the sidecar itself was damaged
    body_start = len(header)
    size = len(data) if data is not None else doc["events_bytes"]
    try:
        columns = {}
        for kind in COLUMN_KINDS:
            entry = doc["kinds"][kind]
            count = entry["count"]
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                return None
            if count and not _required_fields(kind) <= set(entry["columns"]):
                return None  # a field every line holds is missing: no sidecar the writer writes
            encoded: dict[str, tuple[str, bytes | _Stored]] = {}
            for name, (encoding, offset, length, *checksum) in entry["columns"].items():
                if not (isinstance(offset, int) and isinstance(length, int) and 0 <= offset and offset + length <= body_length):
                    return None
                encoded[name] = (str(encoding), _Stored(path, body_start + offset, length, int(checksum[0]) if checksum else None))
            columns[kind] = EventColumns(kind, count, encoded, source=Path(mode_dir) / EVENTS_FILE)
        other = [(int(n), int(s), int(e)) for n, s, e in doc["other"]]
        if any(not 0 <= s <= e <= size or e - s > MAX_EVENT_LINE_BYTES for _, s, e in other):
            return None  # the lines are read instead (the loader refuses one that long)
    except (KeyError, TypeError, ValueError, AttributeError):  # a header of another shape (a list where a dict belongs)
        return None
    return Sidecar(columns, other)
