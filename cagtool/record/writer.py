"""Writes one mode record: the manifest (atomically replaced), the event stream (appended as events
happen) and the graph files.

The per-step lines (`step`, `backward`, `optimizer_step`: `emit_held`) wait in memory and are
written together, in one system call, at most `HOLD_S` after the first of them was made: by the
training thread when it holds a line and the oldest waiting one is HOLD_S / 2 old, or by a small
daemon thread (`_Flusher`) that looks every HOLD_S / 4 while the job does something else. Every
other event (`emit`: a cache miss, a finding...) is written at once, the waiting lines first, and
`close` writes what waits. A system call and the encoding of each line at every step end were most
of what recording cost a training step (benchmarks/README.md, step overhead); made together the
lines cost a fraction. The step tracker, the one caller on a training
step's path, skips even `emit_held`: its hooks only note what happened, and its `drain` (the
writer's `source`) turns the notes into lines appended to `queued` (module docstring of steps/tracker.py),
from the training thread every HOLD_S / 2. The writer calls `source` before it numbers anything,
outside its lock, and the flusher asks it for notes left too long; queued lines are numbered
before any other event (`_take_queued`), so their seq and order in the file are those that
`emit_held` at the moments they happened would have given.
SIGTERM, Ctrl-C, a normal exit and an exception
in the script close the record, held lines included; a process killed hard (SIGKILL, os._exit)
loses at most the per-step lines of its last HOLD_S, and the manifest says so
(`options["held_events"]`, set by the step tracker, the one caller of `emit_held`).

An event whose line is longer than the loader reads (schema.MAX_EVENT_LINE_BYTES: a huge graph,
guards text, a string of the job's) is never written as it is: a `finding` of the same seq and time
takes its place, saying which kind of event was left out and its size, and the manifest counts them
(`options["oversized_dropped"]`), so the record stays whole and readable. A graph's nodes file over
MAX_JSON_FILE_BYTES is left out the same way.

A write error (disk full, quota, permission) never reaches the user's code: the writer stops
recording with one line on stderr, keeps what it wrote, and the manifest says where it stopped
(`recording_stopped`). A small reserve file, deleted at that moment, leaves room for that
manifest on a full disk."""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

from cagtool.record.atomic import write_atomic
from cagtool.record.columns import write_sidecar
from cagtool.record.manifest import ModeManifest, RunMeta, document_text, to_dict
from cagtool.record.graph_file import GraphNode, graph_file_text
from cagtool.record.schema import (
    EVENTS_FILE,
    GRAPHS_DIR,
    COMPILES_DIR,
    compile_dir_name,
    MANIFEST_FILE,
    RUN_META_FILE,
    STATUS_KILLED,
    STATUS_RUNNING,
    FINDING_OVERSIZED_EVENT,
    MAX_EVENT_LINE_BYTES,
    MAX_JSON_FILE_BYTES,
    MAX_TEXT_FILE_BYTES,
    Event,
    FindingEvent,
    event_line,
)


# The start of a line as the writer writes it (schema.event_line): its kind and time.
_LINE_HEAD = re.compile(rb'\{"kind": "([A-Za-z0-9_]{1,64})", "seq": -?[0-9]+, "t": (-?[0-9][-+.0-9eE]*|NaN|-?Infinity)')


# Per event class, `encode(seq, t, **fields) -> line`: the event built and encoded (schema.event_line).
_LINE_ENCODERS: dict[type, Callable[..., str]] = {}


def _encoder_of(event_cls: type[Event]) -> Callable[..., str]:
    encode = _LINE_ENCODERS.get(event_cls)
    if encode is None:

        def encode(seq: int, t: float, **fields: Any) -> str:
            return event_line(event_cls(seq=seq, t=t, **fields))

        _LINE_ENCODERS[event_cls] = encode
    return encode


# Per event class, `line(seq, t, fields) -> bytes` (the line's UTF-8) for a held line whose fields are a dict (emit_held).
_KWARGS_LINES: dict[type, Callable[[int, float, Any], bytes]] = {}


def _kwargs_line(event_cls: type[Event]) -> Callable[[int, float, Any], bytes]:
    line = _KWARGS_LINES.get(event_cls)
    if line is None:
        encode = _encoder_of(event_cls)

        def line(seq: int, t: float, fields: Any) -> bytes:
            return encode(seq, t, **fields).encode()

        _KWARGS_LINES[event_cls] = line
    return line


# The most time a held line waits before it is written (module docstring): what a process killed
# hard can lose. About HOLD_S / 2 of steps share one write: at 4 ms steps, some sixty. Half a second
# rather than 0.1 s: a drain and its write cost a training step's thread the most on
# their first lines (their code and data are cold then), so fewer, larger ones cost a step less:
# 30-31 us a 4-5 ms step at 0.1 s, 19-20 us at 0.5 s (`benchmarks/step_hook_pieces.py --hold-s 0.1
# --hold-s 0.5`), and little less at 1 s (benchmarks/README.md). A crash still
# loses at most half a second of steps, a clean end none.
HOLD_S = 0.5
# Held lines are written anyway once this many wait (very short steps), so memory stays bounded.
MAX_HELD_LINES = 1024

RESERVE_FILE = ".cagtool-reserve"
RESERVE_BYTES = 64 * 1024


def ended_marker_name(status: str, exit_code: int | None) -> str:
    """`.cagtool-ended.<status>.<exit code>`: the reader's side is record/liveness.py."""
    from cagtool.record.liveness import ENDED_MARKER_PREFIX

    return f"{ENDED_MARKER_PREFIX}{status}.{'' if exit_code is None else exit_code}"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Replace path with run.json's or a manifest's data, or leave the old file as it was (never a
    half-written one); never over what the loader reads (manifest.document_text cuts it to that)."""
    write_atomic(path, document_text(data))


def warn(message: str) -> None:
    """One line on the real stderr, whatever the script did to sys.stderr."""
    try:
        os.write(2, f"cagtool: {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass


def write_run_meta(run_dir: Path, meta: RunMeta) -> None:
    write_json_atomic(run_dir / RUN_META_FILE, to_dict(meta))


def close_run_of_dead_parent(run_dir: Path, mode_name: str, exit_code: int, ended_at: str) -> None:
    """The mode process outlived cagtool (SIGKILLed): nobody else will close run.json, so it says
    here that the run was killed, with this mode's code. Best effort: the loader reads a dead
    "running" run as killed anyway."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.regular_files import read_record_bytes

    path = run_dir / RUN_META_FILE
    try:
        data = json.loads(read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES))
        if not isinstance(data, dict) or data.get("status") != STATUS_RUNNING:
            return
        data["status"] = STATUS_KILLED
        data["ended_at"] = ended_at
        data["exit_code"] = exit_code
        codes = data.get("mode_exit_codes")
        if isinstance(codes, dict):
            codes[mode_name] = exit_code
        write_json_atomic(path, data)
    except (OSError, ValueError, RecursionError, UnreadableInput):  # RecursionError: nested deeper than json goes
        pass


class RecordWriter:
    """Appends typed events for one mode. Thread-safe; `seq` and `t` are assigned here."""

    def __init__(self, mode_dir: Path, manifest: ModeManifest, clock_start: float | None = None, hold_s: float = HOLD_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.mode_dir = Path(mode_dir).resolve()  # absolute: the script may os.chdir
        self.manifest = manifest
        # perf_counter: the step tracker's times (queued_due) are on the same clock. Tests of the
        # hold window give a clock they move themselves instead of sleeping against it.
        self.clock = clock
        self.t0 = clock() if clock_start is None else clock_start
        if clock is time.perf_counter:  # the machine's monotonic clock: other processes' readings line up
            manifest.clock_t0 = self.t0
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._seq = 0
        self.stopped: dict[str, Any] | None = None  # set when a write failed: recording ended there
        self.oversized = 0  # events (and graph nodes files) left out for their size (module docstring)
        self.last_oversized: str | None = None
        self._events: int | None = None  # events.jsonl's descriptor, opened for appending
        # Numbered held lines, not written yet: (line, t, payload), whose text is line(seq, t, payload);
        # `line` None: an event whose line an entry before it wrote (the step tracker's three lines of a step).
        self._held: list[tuple[Callable[[int, float, Any], bytes] | None, float, Any]] = []
        self._held_from = 0  # the seq of the first of them; the others follow it (nothing is numbered in between)
        # Lines the step tracker holds without the lock, not numbered yet: (line, t, payload) as in _held
        # (the payload whatever its `line` reads: a tuple, made at once, is cheaper than a dict), appended
        # by one thread at a time (the tracker's own lock). Every path that numbers an event takes them
        # first (_take_queued), removing only what it took (`del queued[:n]`: an append racing it is kept).
        # The same list for the writer's life (the tracker keeps a reference): cleared in place.
        self.queued: list[tuple[Callable[[int, float, Any], bytes] | None, float, Any]] = []
        # perf_counter time from which the queued lines are due (the first's + hold_s / 2); set by the
        # appender when it appends to an empty queue. A stale value is an earlier one: written sooner, never later.
        self.queued_due = 0.0
        self._write_after = 0.0  # perf_counter time from which the training thread writes them (the first's + hold_s / 2)
        self._flusher: _Flusher | None = None  # started with the first held or queued line, or with `source`
        self._flusher_lock = threading.Lock()
        # What feeds `queued` (the step tracker's drain): called before anything is numbered, and by
        # the flusher, never with this writer's lock held (it takes the tracker's, which then writes here).
        self.source: Callable[..., Any] | None = None  # drain(late=False)
        self._closed = False
        self._open()

    def set_source(self, source: Callable[..., Any] | None) -> None:
        """The step tracker's drain (None: no more). Its notes wait until it is called: the flusher
        is started now, so they are written within hold_s even when no other event comes."""
        self.source = source
        if source is not None:
            self.start_flusher()

    def _drain_source(self) -> None:
        source = self.source
        if source is not None:
            source()

    def _open(self) -> None:
        try:
            (self.mode_dir / GRAPHS_DIR).mkdir(parents=True, exist_ok=True)
            # A bare descriptor: each write is one os.write of whole lines, no buffer of ours that a
            # crash could lose or a fork could duplicate (and two layers less per step than a text file).
            self._events = os.open(self.mode_dir / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
            error = self._write_manifest_quietly()
        except OSError as exc:
            error = exc
        if error is not None:
            with self._lock:
                self._stop(error, MANIFEST_FILE if self._events is not None else EVENTS_FILE)
        else:
            self._make_reserve()

    def _make_reserve(self) -> None:
        try:
            with open(self.mode_dir / RESERVE_FILE, "wb") as handle:
                handle.write(b"\0" * RESERVE_BYTES)  # real blocks, not a sparse file
        except OSError:
            self._drop_reserve()

    def _drop_reserve(self) -> None:
        try:
            (self.mode_dir / RESERVE_FILE).unlink()
        except OSError:
            pass

    def _stop(self, exc: OSError, what: str, at_seq: int | None = None) -> None:
        """Called with the lock held, on the first write error: recording ends here, at event
        `at_seq` (default: the next one)."""
        if self.stopped is not None:
            return
        reason = f"{exc.strerror or exc}" + (f" [{errno.errorcode.get(exc.errno, exc.errno)}]" if exc.errno else "")
        at_seq = self._seq if at_seq is None else at_seq
        self.stopped = {"at_seq": at_seq, "error": reason, "file": what}
        self.manifest.recording_stopped = self.stopped
        self._discard_events_file()
        self._drop_reserve()
        warn(f"recording stopped at event {at_seq}: cannot write {self.mode_dir / what}: {reason}; the script goes on, the record up to here stays readable")
        self._write_manifest_quietly()

    def _discard_events_file(self) -> None:
        """Close it (in a forked child: our copy of the parent's descriptor)."""
        events, self._events = self._events, None
        if events is None:
            return
        try:
            os.close(events)
        except OSError:
            pass

    def _write_manifest_quietly(self) -> OSError | None:
        try:
            write_json_atomic(self.mode_dir / MANIFEST_FILE, to_dict(self.manifest))
            return None
        except OSError as exc:
            return exc

    def now(self) -> float:
        return self.clock() - self.t0

    def kwargs_line(self, event_cls: type[Event]) -> Callable[[int, float, Any], bytes]:
        """`line(seq, t, fields) -> line` for a `queued` entry whose payload is the fields' dict."""
        return _KWARGS_LINES.get(event_cls) or _kwargs_line(event_cls)

    def _take_queued(self) -> None:
        """Number the queued lines (caller holds the lock): they join the held ones, in order."""
        queued = self.queued
        n = len(queued)
        if n:
            taken = queued[:n]
            del queued[:n]
            if not self._held:
                self._held_from = self._seq
                self._write_after = self.queued_due
                self.start_flusher()
            self._held += taken
            self._seq += n

    def start_flusher(self) -> None:
        """The thread that bounds how long a held or queued line waits, started with the first one."""
        if self._flusher is None and self._events is not None and not self._closed:
            with self._flusher_lock:  # the step tracker calls this without the writer's lock
                if self._flusher is None:
                    self._flusher = _Flusher(self)

    def write_queued(self) -> None:
        """Write the queued and held lines now (the step tracker, when they are due)."""
        self._drain_source()
        with self._lock:
            self._take_queued()
            self._write_held()

    def emit(self, event_cls: type[Event], **fields: Any) -> Event:
        """Append one event, written to the OS now with any held lines before it (one system call)."""
        self._drain_source()
        with self._lock:
            if self.queued:
                self._take_queued()
            if self._held:
                first = self._held_from
                text = self._held_text()
                event, line = self._encode(event_cls, fields)
                self._write(text + line.encode(), first)
            else:
                event, line = self._encode(event_cls, fields)
                self._write(line.encode(), event.seq)
        return event

    def emit_held(self, event_cls: type[Event], **fields: Any) -> None:
        """Append one per-step event whose line may wait in memory up to `hold_s` (module
        docstring). Numbered and timed now; its text is made when it is written, with the other
        waiting lines."""
        self._drain_source()
        with self._lock:
            if self.queued:
                self._take_queued()
            held = self._held
            now = self.clock()
            t = fields.pop("t", None)
            if not held:
                self._held_from = self._seq
                self._write_after = now + self.hold_s / 2
                self.start_flusher()
            held.append((_KWARGS_LINES.get(event_cls) or _kwargs_line(event_cls), now - self.t0 if t is None else t, fields))
            self._seq += 1
            if now >= self._write_after or len(held) >= MAX_HELD_LINES:
                self._write_held()

    def _flush_if_due(self) -> None:
        """The flusher's look: write the held and queued lines when the oldest has waited hold_s / 2.
        Its source is asked only for what the training thread has left too long (`late`)."""
        source = self.source
        if source is not None:
            source(late=True)
        if self._due(self.clock()):  # read without the lock: cheap, and rechecked
            with self._lock:
                if self._due(self.clock()):
                    self._take_queued()
                    self._write_held()

    def _due(self, now: float) -> bool:
        return bool(self._held and now >= self._write_after or self.queued and now >= self.queued_due)

    def _encode(self, event_cls: type[Event], fields: dict[str, Any]) -> tuple[Event, str]:
        """The event and its line, numbered (caller holds the lock)."""
        t = fields.pop("t", None)  # given when the time is not now (an imported log's timestamps)
        event = event_cls(seq=self._seq, t=self.now() if t is None else t, **fields)
        self._seq += 1
        return event, event_line(event)

    def _held_text(self) -> bytes:
        """The held events' lines, taken out of memory (caller holds the lock). Made together, one
        after the other, their code stays in the CPU's caches."""
        held, self._held = self._held, []
        first = self._held_from
        return b"".join([line(first + i, t, payload) for i, (line, t, payload) in enumerate(held) if line is not None])

    def _write(self, data: bytes, first_seq: int) -> None:
        """Caller holds the lock. A failed write stops recording at the first line of `data` (UTF-8
        lines, whose first event is `first_seq`) that did not reach the file whole."""
        if self.stopped is None and self._events is not None:
            if len(data) > MAX_EVENT_LINE_BYTES + 1:  # one compare a write: only then can a line be too long
                data = self._oversized_replaced(data, first_seq)
            done = 0
            try:
                done = os.write(self._events, data)
                while done < len(data):  # a short write (a disk filling up): the rest, or the error
                    done += os.write(self._events, data[done:])
            except OSError as exc:
                # The lines that reached the file whole are in the record; it stops at the next. A
                # line whose text reached it but not its newline reads back whole (the loader takes
                # a last line that ends with its closing brace): it counts as written.
                whole = data.count(b"\n", 0, done) + (data[done:done + 1] == b"\n")
                self._stop(exc, EVENTS_FILE, first_seq + whole)

    def _oversized_replaced(self, data: bytes, first_seq: int) -> bytes:
        """`data` (whole lines, the first event `first_seq`, the others following it) with each line
        longer than the loader reads replaced by a finding of the same seq and time (caller holds the lock)."""
        lines = data.split(b"\n")
        for index, line in enumerate(lines):
            if len(line) > MAX_EVENT_LINE_BYTES:
                head = _LINE_HEAD.match(line)
                kind = head[1].decode() if head else "unknown"
                try:
                    t = float(head[2]) if head else self.now()
                except ValueError:
                    t = self.now()
                what = f"a {kind} event of {len(line):,} bytes"
                self._note_oversized(f"{what} (seq {first_seq + index})")
                finding = FindingEvent(
                    seq=first_seq + index, t=t, code=FINDING_OVERSIZED_EVENT,
                    message=f"{what} was not recorded: one event line is at most {MAX_EVENT_LINE_BYTES:,} bytes "
                            "(what cagtool reads back); what reports show of it is missing",
                    detail={"kind": kind, "bytes": len(line), "limit": MAX_EVENT_LINE_BYTES},
                )
                lines[index] = event_line(finding).encode().rstrip(b"\n")
        return b"\n".join(lines)

    def _note_oversized(self, what: str) -> None:
        """Count one thing left out for its size, in the manifest at once (a process killed later
        keeps the count). Caller holds the lock."""
        self.oversized += 1
        self.last_oversized = what
        self.manifest.options["oversized_dropped"] = {"count": self.oversized, "last": what}
        self._write_manifest_quietly()

    def _write_held(self) -> None:
        """Caller holds the lock."""
        if self._held:
            first = self._held_from
            self._write(self._held_text(), first)

    def flush_held(self) -> None:
        """Write the held (and queued) lines now."""
        self._drain_source()
        with self._lock:
            self._take_queued()
            self._write_held()

    def write_graph(self, ca_id: int, compile_id: str, code: str, nodes: list[GraphNode], symbols: dict[str, int] | None = None) -> tuple[str, str]:
        """The graph's two files; ("", "") when recording has stopped (or stops here). A nodes file
        over MAX_JSON_FILE_BYTES (what the loader reads) is not written: its name is "", and a
        finding says so. Code over MAX_TEXT_FILE_BYTES is cut to it (`_text_file`)."""
        code_rel = f"{GRAPHS_DIR}/ca_{ca_id}.py"
        nodes_rel = f"{GRAPHS_DIR}/ca_{ca_id}.json"
        if self.stopped is not None:
            return "", ""
        nodes_text = graph_file_text(ca_id, compile_id, nodes, symbols)
        left_out = len(nodes_text) if len(nodes_text) > MAX_JSON_FILE_BYTES else 0  # json's ASCII escapes: one byte a character
        code_bytes, code_size = _text_file(code)
        files = ((code_rel, code_bytes),) if left_out else ((code_rel, code_bytes), (nodes_rel, nodes_text.encode()))
        with self._lock:
            if self.stopped is not None:
                return "", ""
            if left_out:
                self._note_oversized(f"graph {compile_id}'s nodes file of {left_out:,} bytes")
            if code_size:
                self._note_oversized(f"graph {compile_id}'s code file of {code_size:,} bytes, cut")
            for rel, data in files:
                try:
                    (self.mode_dir / rel).write_bytes(data)
                except OSError as exc:
                    try:
                        (self.mode_dir / rel).unlink()  # no half-written graph file
                    except OSError:
                        pass
                    self._stop(exc, rel)
                    return "", ""
        if left_out:
            self.emit(FindingEvent, code=FINDING_OVERSIZED_EVENT,
                      message=f"graph {compile_id}'s nodes file ({nodes_rel}) of {left_out:,} bytes was not recorded: a JSON file of a "
                              f"record is at most {MAX_JSON_FILE_BYTES:,} bytes (what cagtool reads back); its code is in {code_rel}",
                      detail={"kind": "graph_nodes_file", "bytes": left_out, "limit": MAX_JSON_FILE_BYTES})
        if code_size:
            self._emit_cut(code_rel, f"graph {compile_id}'s code", "graph_code_file", code_size)
        return (code_rel, "") if left_out else (code_rel, nodes_rel)

    def _emit_cut(self, rel: str, what: str, kind: str, size: int) -> None:
        self.emit(FindingEvent, code=FINDING_OVERSIZED_EVENT,
                  message=f"{what} ({rel}) of {size:,} bytes was cut at its last whole line under {MAX_TEXT_FILE_BYTES:,} bytes: a text file of a "
                          f"record is at most that (what cagtool reads back); its last line says so",
                  detail={"kind": kind, "bytes": size, "limit": MAX_TEXT_FILE_BYTES})

    def write_artifact(self, compile_id: str, artifact: str, text: str) -> str:
        """One compile artifact's file, `compiles/<id>/<artifact>.txt`; "" when recording has
        stopped (or stops here). A compile that makes the artifact again (a retry) replaces it."""
        rel = f"{COMPILES_DIR}/{compile_dir_name(compile_id)}/{artifact}.txt"
        data, size = _text_file(text)
        with self._lock:
            if self.stopped is not None:
                return ""
            path = self.mode_dir / rel
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            except OSError as exc:
                try:
                    path.unlink()
                except OSError:
                    pass
                self._stop(exc, rel)
                return ""
            if size:
                self._note_oversized(f"compile artifact {rel} of {size:,} bytes, cut")
        if size:
            self._emit_cut(rel, f"compile {compile_id}'s {artifact}", "compile_artifact", size)
        return rel

    def write_manifest(self) -> None:
        """Never raises: on a full disk the reserve is given up for it; if even that fails, one
        line says so and the parent or the loader reads the record as it was left."""
        with self._lock:
            if self._write_manifest_quietly() is None:
                return
            self._drop_reserve()
            error = self._write_manifest_quietly()
            if error is not None:
                marked = self._mark_end()
                what = "; how it ended is in the name of an empty file beside it" if marked else "; its status is not up to date"
                warn(f"could not write {self.mode_dir / MANIFEST_FILE}: {error.strerror or error}{what}")

    def _mark_end(self) -> bool:
        """The manifest could not be rewritten (the disk is full and the reserve is gone): an empty
        file named after how the process ended (`ended_marker_name`) needs no data block, so a
        reader can still tell a rank that ended normally from one that was killed."""
        status, code = self.manifest.status, self.manifest.exit_code
        if status == "running":
            return False
        try:
            with open(self.mode_dir / ended_marker_name(status, code), "x"):
                pass
        except FileExistsError:
            pass
        except OSError:
            return False
        return True

    def reopen(self, mode_dir: Path) -> None:
        """In a forked child: the same writer object (whoever holds it keeps writing through it),
        now writing a new record at `mode_dir`. The inherited lock may be held by a thread that
        did not survive the fork (the flusher did not either), and the inherited file is the
        parent's: close only our copy of its descriptor, dropping any unflushed parent bytes (as
        torch's trace handler does)."""
        self._lock = threading.Lock()
        self._flusher_lock = threading.Lock()
        self._seq = 0
        self._held = []  # the parent's: its own record has them
        del self.queued[:]  # likewise (in place: the step tracker holds this list)
        self._flusher = None
        self.t0 = self.clock()
        if self.clock is time.perf_counter:
            self.manifest.clock_t0 = self.t0
        self._discard_events_file()
        self.stopped = None
        self.manifest.recording_stopped = None
        self.oversized = 0
        self.last_oversized = None
        self.manifest.options.pop("oversized_dropped", None)
        self.mode_dir = Path(mode_dir).resolve()
        self._closed = False
        self._open()
        if self.source is not None:
            self.start_flusher()  # the parent's did not survive the fork

    @property
    def events_written(self) -> int:
        self._drain_source()
        return self._seq + len(self.queued)

    def close(self) -> None:
        self._drain_source()
        self._closed = True  # no flusher from here on (_take_queued below would start one)
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.stop()
        with self._lock:
            self._take_queued()
            self._write_held()
            if self._events is not None:
                try:
                    os.close(self._events)
                except OSError as exc:
                    self._stop(exc, EVENTS_FILE)
                self._events = None
            self._drop_reserve()
            if self.stopped is None:
                self._write_columns()

    def _write_columns(self) -> None:
        """The step, backward and optimizer-step lines as columns beside events.jsonl, read back
        from it (record/columns.py): what lets `cagtool summary` of a long run skip decoding them.
        Only a speed-up: readers check it against events.jsonl, so any failure here just leaves
        none (a record that never closes has none either)."""
        try:
            write_sidecar(self.mode_dir)
        except Exception:  # noqa: BLE001 - never the job's problem, nor the record's
            pass


def _text_file(text: str) -> tuple[bytes, int]:
    """A graph's code or a compile artifact as the bytes written (UTF-8), and its size when it was
    cut (0: whole). Over MAX_TEXT_FILE_BYTES, what the readers read (schema.py), it is cut at the
    last line that fits, and a last line says how much was left out."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= MAX_TEXT_FILE_BYTES:
        return data, 0
    marker = (f"\n# cagtool: the rest of this file ({{:,}} of its {len(data):,} bytes) was not recorded: "
              f"a record's text file is at most {MAX_TEXT_FILE_BYTES:,} bytes\n")
    room = MAX_TEXT_FILE_BYTES - len(marker.format(len(data)).encode())
    end = data.rfind(b"\n", 0, room) + 1 or room  # a whole last line where there is one
    while end and (data[end - 1] & 0xC0) == 0x80:  # never inside a character
        end -= 1
    if end and data[end - 1] >= 0xC0:
        end -= 1
    kept = data[:end]
    note = marker.format(len(data) - end).encode()
    return kept + (note[1:] if kept.endswith(b"\n") else note), len(data)


class _Flusher:
    """A daemon thread that writes the writer's held lines when the job stops making them (an
    evaluation phase, a hang, the end of training before the script exits): what bounds in time
    what a process killed hard loses. It wakes every hold_s / 4 and mostly finds nothing due (the
    training thread writes them as it makes more); `stop` ends it. Not one of the script's threads
    to wait for (daemon), nor in Dynamo's way (a new thread has no frame callback)."""

    def __init__(self, writer: RecordWriter) -> None:
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = threading.Thread(target=self._run, args=(writer, writer.hold_s / 4), name="cagtool-writer", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # at interpreter shutdown: the lines are written at close, or with the next step's
            self._thread = None

    def _run(self, writer: RecordWriter, period: float) -> None:
        while not self._stopped.wait(period):
            try:
                writer._flush_if_due()
            except Exception:  # noqa: BLE001 - never a traceback on the script's stderr
                pass

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
