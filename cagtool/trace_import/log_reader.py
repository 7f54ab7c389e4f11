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

    `wanted(kind, first_payload_lines)` decides which envelopes are parsed and yielded; the
    default is every known kind. It sees the kind only, so it must be cheap."""

    def __init__(self, path: Path, wanted: frozenset[str] | None = None, strict: bool = False) -> None:
        self.path = Path(path)
        self.wanted = wanted
        self.strict = strict
        self.stats = ReadStats()

    def _bad(self, lineno: int, why: str) -> None:
        if self.strict:
            raise UnreadableInput(f"{self.path}: line {lineno}: {why} (--strict)")
        self.stats.bad_lines += 1
        if self.stats.first_bad_line is None:
            self.stats.first_bad_line = lineno

    def envelopes(self) -> Iterator[Envelope]:
        stats = self.stats
        wanted = self.wanted
        known = KNOWN_KINDS
        strict = self.strict
        kinds = stats.kinds
        try:
            handle = self.path.open("rb")
        except OSError as exc:
            raise UnreadableInput(f"cannot read trace log {self.path}: {exc.strerror or exc}") from None
        # The envelope waiting for its payload lines.
        pending: tuple[str, dict, int, bytes, bytes] | None = None
        payload: list[bytes] = []
        collecting = False
        lineno = 0
        last = b""
        with handle:
            for lineno, raw in enumerate(handle, start=1):
                last = raw
                if raw[:1] == b"\t":
                    if collecting:
                        payload.append(raw)
                    continue
                if pending is not None:
                    yield self._finish(pending, payload)
                    pending = None
                    payload = []
                collecting = False
                cut = raw.find(_SEPARATOR)
                if cut < 0:
                    if raw.strip():
                        self._bad(lineno, "not a TORCH_TRACE envelope line")
                    continue
                body = raw[cut + 2 :]
                end = body.find(b'"', 2)
                kind = body[2:end].decode("utf-8", "replace") if end > 2 else ""
                data: dict | None = None
                if kind in META_KEYS or strict:
                    data = self._parse(body, lineno, raw)
                    if data is None:
                        continue
                    kind = _kind_of(data) or ""
                stats.envelopes += 1
                if kind not in known:
                    if strict:
                        raise UnreadableInput(f"{self.path}: line {lineno}: unknown envelope {kind!r} (--strict)")
                    stats.unknown[kind] += 1
                    continue
                kinds[kind] += 1
                if wanted is not None and kind not in wanted:
                    continue
                if data is None:
                    data = self._parse(body, lineno, raw)
                    if data is None:
                        continue
                rank = data.get("rank")
                if isinstance(rank, int):
                    stats.ranks.add(rank)
                if "has_payload" in data:
                    pending = (kind, data, lineno, raw[:cut], data["has_payload"])
                    collecting = True
                else:
                    yield Envelope(kind, data, None, lineno, raw[:cut])
            if pending is not None:
                yield self._finish(pending, payload)
        stats.lines = lineno
        if last and not last.endswith(b"\n"):
            if strict:
                raise UnreadableInput(f"{self.path}: the last line (line {lineno}) is truncated (--strict)")
            stats.truncated_last_line = True

    def _parse(self, body: bytes, lineno: int, raw: bytes) -> dict | None:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            if not raw.endswith(b"\n"):
                return None  # a truncated last line: reported once the file ends
            self._bad(lineno, "envelope is not a JSON object")
            return None
        return data

    def _finish(self, pending: tuple[str, dict, int, bytes, bytes], lines: list[bytes]) -> Envelope:
        kind, data, lineno, header, expected = pending
        text = b"".join(line[1:] for line in lines)
        if text.endswith(b"\n"):
            text = text[:-1]
        if isinstance(expected, str) and hashlib.md5(text).hexdigest() != expected:
            if self.strict and not (lines and not lines[-1].endswith(b"\n")):
                raise UnreadableInput(f"{self.path}: line {lineno}: the payload does not match its md5 (--strict)")
            self.stats.payload_mismatches += 1
        return Envelope(kind, data, text.decode("utf-8", "replace"), lineno, header)


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
