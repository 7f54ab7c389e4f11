"""Reads one TORCH_TRACE log (torch's structured trace, the input of tlparse) as a stream of
envelopes, leniently: unknown envelopes and unreadable lines are counted and skipped, a truncated
last line is tolerated and reported; `strict=True` makes either an error.

The format, as torch 2.13 writes it (`torch/_logging/structured.py`) and tlparse reads it: one
glog-prefixed line per envelope,

    V1123 10:52:27.235000 6116 torch/_dynamo/utils.py:2350] {"chromium_event": {}, ..., "has_payload": "<md5>"}

followed, when `has_payload` is set, by the payload, one line per payload line, each prefixed by
a tab. The envelope's first key names its kind (`artifact` envelopes carry their own name).

Speed is the point of this module (a job's log reaches gigabytes): lines are read as bytes, the
kind is read off the first key without parsing, and only the envelopes the caller wants are
parsed as JSON; the payloads of the others are skipped line by line without being decoded.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterator

from cagtool.errors import UnreadableInput

# Envelope kinds torch 2.13 writes (every trace_structured name in its sources) plus those tlparse
# 0.4.3 knows; anything else is "unknown": counted and skipped (fatal with strict).
KNOWN_KINDS = frozenset(
    {
        "aot_autograd_backward_compilation_metrics", "aot_backward_graph", "aot_forward_graph", "aot_inference_graph",
        "aot_joint_graph", "artifact", "bwd_compilation_metrics", "chromium_event", "compilation_metrics",
        "compiled_autograd_graph", "create_symbol", "create_unbacked_symbol", "describe_source", "describe_storage",
        "describe_tensor", "dump_file", "dynamo_cpp_guards_str", "dynamo_guards", "dynamo_output_graph", "dynamo_start",
        "export", "exported_program", "expression_created", "graph_dump", "guard_added", "guard_added_fast",
        "guard_on_data_dependent_error", "inductor_input_graph", "inductor_output_code", "inductor_post_grad_graph",
        "inductor_pre_grad_graph", "link", "mismatched_fake_kernel", "missing_fake_kernel", "optimize_ddp_split_child",
        "optimize_ddp_split_graph", "propagate_real_tensors", "propagate_real_tensors_provenance", "str",
        "symbolic_shape_specialization",
    }
)
# Keys every kind may carry besides its own (the compile id, flattened, and bookkeeping).
META_KEYS = frozenset({"rank", "frame_id", "frame_compile_id", "attempt", "compiled_autograd_id", "has_payload", "stack"})

_SEPARATOR = b"] {"
# An envelope line: glog prefix (level, MMDD, time, thread, file:line), then the JSON envelope.
# Matched with the newline before it (a literal first character makes the scan ~7x faster); the
# file is read as if it began with a newline.
_HEADER = re.compile(rb"\n[VIWEC]\d{4} [^\n]*?\] (?=\{)")
# A line inside a payload region that is not a payload line (payload lines start with a tab).
_STRAY = re.compile(rb"\n[^\t\n]")
_BLOCK = 8 << 20
_MAX_ENVELOPE = 64 << 20  # bounded memory: a larger envelope is skipped and reported


@dataclass(frozen=True)
class Envelope:
    kind: str  # the envelope's kind; for artifacts "artifact" (the name is in data["artifact"]["name"])
    data: dict  # the envelope JSON (compile id fields included)
    payload: str | None  # the payload lines, tabs removed, joined by "\n"; None when there is none
    line: int  # 1-based line of the envelope in its file
    header: bytes  # the glog prefix: level, date, time, thread, file:line

    @property
    def artifact_name(self) -> str:
        artifact = self.data.get("artifact")
        return str(artifact.get("name", "")) if isinstance(artifact, dict) else ""

    def timestamp(self, year: int) -> float | None:
        """Seconds since the epoch from the glog prefix (`V1123 10:52:27.235000`; glog has no year)."""
        h = self.header
        try:
            stamp = datetime(year, int(h[1:3]), int(h[3:5]), int(h[6:8]), int(h[9:11]), int(h[12:14]), int(h[15:21]))
        except ValueError:
            return None
        return stamp.timestamp()


@dataclass
class ReadStats:
    """What a read saw, for the manifest and for --strict."""

    lines: int = 0
    envelopes: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    unknown: Counter[str] = field(default_factory=Counter)  # envelope kinds this reader does not know
    bad_lines: int = 0  # neither an envelope nor a payload line, or an envelope that is not JSON
    first_bad_line: int | None = None
    truncated_last_line: bool = False  # the file does not end with a newline: the job was cut off mid-write
    payload_mismatches: int = 0  # payloads (of the envelopes read) whose md5 differs from has_payload
    ranks: set[int] = field(default_factory=set)  # `rank` values seen in envelopes

    def add(self, other: "ReadStats") -> None:
        self.lines += other.lines
        self.envelopes += other.envelopes
        self.kinds.update(other.kinds)
        self.unknown.update(other.unknown)
        self.bad_lines += other.bad_lines
        if self.first_bad_line is None:
            self.first_bad_line = other.first_bad_line
        self.truncated_last_line = self.truncated_last_line or other.truncated_last_line
        self.payload_mismatches += other.payload_mismatches
        self.ranks |= other.ranks

    def to_dict(self) -> dict:
        return {
            "lines": self.lines,
            "envelopes": self.envelopes,
            "unknown_envelopes": dict(self.unknown),
            "bad_lines": self.bad_lines,
            "first_bad_line": self.first_bad_line,
            "truncated_last_line": self.truncated_last_line,
            "payload_mismatches": self.payload_mismatches,
        }


def _kind_of(data: dict) -> str | None:
    for key in data:
        if key not in META_KEYS:
            return key
    return None


class TraceLogReader:
    """Iterate `envelopes()` once; `stats` is complete when the iteration ends.

    `wanted` names the kinds that are parsed and yielded (default: every known kind). `peek`
    narrows a kind further without parsing it: {kind: bytes} yields an envelope of that kind only
    when the bytes occur in its first payload lines (chromium events: one name out of dozens)."""

    def __init__(self, path: Path, wanted: frozenset[str] | None = None, strict: bool = False, peek: dict[str, bytes] | None = None) -> None:
        self.path = Path(path)
        self.wanted = wanted
        self.peek = peek or {}
        self.strict = strict
        self.stats = ReadStats()

    def _bad(self, lineno: int, why: str) -> None:
        if self.strict:
            raise UnreadableInput(f"{self.path}: line {lineno}: {why} (--strict)")
        self.stats.bad_lines += 1
        if self.stats.first_bad_line is None:
            self.stats.first_bad_line = lineno

    def envelopes(self) -> Iterator[Envelope]:
        """Scan the file block by block: the regex finds the envelope lines (in C), so the payload
        lines between them, most of a log's bytes, are never touched one by one in Python."""
        try:
            handle = self.path.open("rb")
        except OSError as exc:
            raise UnreadableInput(f"cannot read trace log {self.path}: {exc.strerror or exc}") from None
        buf = b"\n"
        line_base = 0  # line number of buf[0] (the newline put before the file)
        last_byte = b""
        with handle:
            while True:
                chunk = handle.read(_BLOCK)
                eof = not chunk
                if chunk:
                    last_byte = chunk[-1:]
                buf += chunk
                matches = list(_HEADER.finditer(buf))
                if not eof and len(buf) > _MAX_ENVELOPE and len(matches) <= 1 and (not matches or matches[0].start() == 0):
                    # One envelope (or stray text) larger than memory should hold: skip it whole.
                    cut = buf.rfind(b"\n") + 1
                    self._bad(line_base, f"an envelope larger than {_MAX_ENVELOPE >> 20} MiB: skipped")
                    line_base += buf.count(b"\n", 0, cut)
                    buf = buf[cut:]
                    continue
                if not eof and matches:
                    # The last envelope may go on in the next block: keep it for then.
                    keep = matches.pop().start()
                elif not eof:
                    continue  # no envelope start yet: one envelope's payload is longer than a block
                else:
                    keep = len(buf)
                yield from self._scan(buf, matches, keep, line_base)
                line_base += buf.count(b"\n", 0, keep)
                buf = buf[keep:]
                if eof:
                    break
        self.stats.lines = line_base - 1 + (1 if last_byte and last_byte != b"\n" else 0)
        if last_byte and last_byte != b"\n":
            if self.strict:
                raise UnreadableInput(f"{self.path}: the last line (line {self.stats.lines or line_base}) is truncated (--strict)")
            self.stats.truncated_last_line = True

    def _scan(self, buf: bytes, matches: list[re.Match[bytes]], end: int, line_base: int) -> Iterator[Envelope]:
        stats = self.stats
        wanted = self.wanted
        peek = self.peek
        strict = self.strict
        kinds = stats.kinds
        cursor, line = 0, line_base
        first = matches[0].start() if matches else end
        if first > 0:
            self._stray(buf[:first], line_base)
        for index, match in enumerate(matches):
            start = match.start() + 1
            line += buf.count(b"\n", cursor, start)
            cursor = start
            line_end = buf.find(b"\n", match.end(), end)
            next_start = matches[index + 1].start() if index + 1 < len(matches) else end
            if line_end < 0 or line_end > next_start:
                line_end = next_start  # a header line cut short (the end of a truncated file)
            body = buf[match.end() : line_end]
            region = buf[line_end + 1 : next_start]
            if next_start == end and region.endswith(b"\n"):
                region = region[:-1]  # the newline that ends the file (or this block's last line)
            if region and (region[0] != 9 or _STRAY.search(region)):
                region = self._split_stray(region, line + 1)
            close = body.find(b'"', 2)
            kind = body[2:close].decode("utf-8", "replace") if close > 2 else ""
            data: dict | None = None
            if kind in META_KEYS or strict:
                data = self._parse(body, line, line_end < len(buf))
                if data is None:
                    continue
                kind = _kind_of(data) or ""
            stats.envelopes += 1
            if kind not in KNOWN_KINDS:
                if strict:
                    raise UnreadableInput(f"{self.path}: line {line}: unknown envelope {kind!r} (--strict)")
                stats.unknown[kind] += 1
                continue
            kinds[kind] += 1
            if wanted is not None and kind not in wanted:
                continue
            needle = peek.get(kind)
            if needle is not None and needle not in region[:300]:
                continue  # not one the caller wants: neither parsed nor checked
            if data is None:
                data = self._parse(body, line, line_end < len(buf))
                if data is None:
                    continue
            rank = data.get("rank")
            if isinstance(rank, int):
                stats.ranks.add(rank)
            header = buf[start : match.end() - 1]
            if "has_payload" not in data:
                yield Envelope(kind, data, None, line, header)
                continue
            text = region[1:].replace(b"\n\t", b"\n") if region else b""
            expected = data["has_payload"]
            if isinstance(expected, str) and hashlib.md5(text).hexdigest() != expected:
                if strict and next_start < len(buf):
                    raise UnreadableInput(f"{self.path}: line {line}: the payload does not match its md5 (--strict)")
                stats.payload_mismatches += 1
            yield Envelope(kind, data, text.decode("utf-8", "replace"), line, header)

    def _stray(self, text: bytes, line: int) -> None:
        """Lines before the first envelope (or between envelopes) that are not payload lines."""
        for offset, raw in enumerate(text.split(b"\n")):
            if raw.strip() and raw[:1] != b"\t":  # tab lines: the rest of a skipped envelope's payload
                self._bad(line + offset, "not a TORCH_TRACE envelope line")

    def _split_stray(self, region: bytes, line: int) -> bytes:
        """An envelope's payload lines (tab-prefixed, right after it); other lines are bad."""
        lines = region.split(b"\n")
        kept = 0
        while kept < len(lines) and lines[kept][:1] == b"\t":
            kept += 1
        self._stray(b"\n".join(lines[kept:]), line + kept)
        return b"\n".join(lines[:kept]) + (b"\n" if kept else b"")

    def _parse(self, body: bytes, line: int, complete: bool) -> dict | None:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than json's C decoder goes
            data = None
        if not isinstance(data, dict):
            if not complete:
                return None  # a truncated last line: reported once the file ends
            self._bad(line, "envelope is not a JSON object")
            return None
        return data


def looks_like_trace_log(path: Path, probe_bytes: int = 65536) -> bool:
    """True when the file's first lines hold at least one glog-prefixed JSON envelope."""
    try:
        with Path(path).open("rb") as handle:
            head = handle.read(probe_bytes)
    except OSError:
        return False
    for line in head.splitlines()[:50]:
        cut = line.find(_SEPARATOR)
        if cut > 0 and line[:1] in b"VIWEC":
            return True
    return False
