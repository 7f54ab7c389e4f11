"""Writes one mode record: the manifest (atomically replaced), the event stream (appended and
flushed per event, so a crash loses nothing written so far) and the graph files.

A write error (disk full, quota, permission) never reaches the user's code: the writer stops
recording with one line on stderr, keeps what it wrote, and the manifest says where it stopped
(`recording_stopped`). A small reserve file, deleted at that moment, leaves room for that
manifest on a full disk."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from cagtool.record.columns import write_sidecar
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.graph_file import GRAPH_FORMAT, GraphNode, graph_node_to_dict
from cagtool.record.schema import (
    EVENTS_FILE,
    GRAPHS_DIR,
    MANIFEST_FILE,
    RUN_META_FILE,
    SCHEMA_VERSION,
    STATUS_KILLED,
    STATUS_RUNNING,
    Event,
    event_to_dict,
    json_default,
)


# One encoder for all events: json.dumps(default=...) builds a new encoder per call (~5 us a step).
_ENCODER = json.JSONEncoder(default=json_default)


RESERVE_FILE = ".cagtool-reserve"
RESERVE_BYTES = 64 * 1024


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Replace path with data, or leave the old file as it was (never a half-written one)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()  # a partial temp file would only take more of a full disk
        except OSError:
            pass
        raise


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
    path = run_dir / RUN_META_FILE
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("status") != STATUS_RUNNING:
            return
        data["status"] = STATUS_KILLED
        data["ended_at"] = ended_at
        data["exit_code"] = exit_code
        codes = data.get("mode_exit_codes")
        if isinstance(codes, dict):
            codes[mode_name] = exit_code
        write_json_atomic(path, data)
    except (OSError, ValueError):
        pass


class RecordWriter:
    """Appends typed events for one mode. Thread-safe; `seq` and `t` are assigned here."""

    def __init__(self, mode_dir: Path, manifest: ModeManifest, clock_start: float | None = None) -> None:
        self.mode_dir = Path(mode_dir).resolve()  # absolute: the script may os.chdir
        self.manifest = manifest
        self.t0 = time.perf_counter() if clock_start is None else clock_start
        self._lock = threading.Lock()
        self._seq = 0
        self.stopped: dict[str, Any] | None = None  # set when a write failed: recording ended there
        self._events: Any = None
        self._open()

    def _open(self) -> None:
        try:
            (self.mode_dir / GRAPHS_DIR).mkdir(parents=True, exist_ok=True)
            self._events = open(self.mode_dir / EVENTS_FILE, "a", buffering=1)  # noqa: SIM115 - lives as long as the run
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

    def _stop(self, exc: OSError, what: str) -> None:
        """Called with the lock held, on the first write error: recording ends here."""
        if self.stopped is not None:
            return
        reason = f"{exc.strerror or exc}" + (f" [{errno.errorcode.get(exc.errno, exc.errno)}]" if exc.errno else "")
        self.stopped = {"at_seq": self._seq, "error": reason, "file": what}
        self.manifest.recording_stopped = self.stopped
        self._discard_events_file()
        self._drop_reserve()
        warn(f"recording stopped at event {self._seq}: cannot write {self.mode_dir / what}: {reason}; the script goes on, the record up to here stays readable")
        self._write_manifest_quietly()

    def _discard_events_file(self) -> None:
        """Close it, dropping what the failed write left buffered (a later flush would only fail
        again, at exit, with a traceback)."""
        events, self._events = self._events, None
        if events is None:
            return
        try:
            os.close(events.fileno())  # close the fd first: the buffered tail is given up
        except (OSError, ValueError):
            pass
        try:
            events.close()
        except (OSError, ValueError):
            pass

    def _write_manifest_quietly(self) -> OSError | None:
        try:
            write_json_atomic(self.mode_dir / MANIFEST_FILE, to_dict(self.manifest))
            return None
        except OSError as exc:
            return exc

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def emit(self, event_cls: type[Event], **fields: Any) -> Event:
        """Append one event. The file is line-buffered: each event reaches the OS as it is written."""
        with self._lock:
            t = fields.pop("t", None)  # given when the time is not now (an imported log's timestamps)
            event = event_cls(seq=self._seq, t=self.now() if t is None else t, **fields)
            if self.stopped is None and self._events is not None:
                try:
                    self._events.write(_ENCODER.encode(event_to_dict(event)) + "\n")
                except OSError as exc:
                    self._stop(exc, EVENTS_FILE)
            self._seq += 1
        return event

    def write_graph(self, ca_id: int, compile_id: str, code: str, nodes: list[GraphNode]) -> tuple[str, str]:
        """The graph's two files; ("", "") when recording has stopped (or stops here)."""
        code_rel = f"{GRAPHS_DIR}/ca_{ca_id}.py"
        nodes_rel = f"{GRAPHS_DIR}/ca_{ca_id}.json"
        payload = {
            "format": GRAPH_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "ca_id": ca_id,
            "compile_id": compile_id,
            "nodes": [graph_node_to_dict(n) for n in nodes],
        }
        with self._lock:
            if self.stopped is not None:
                return "", ""
            for rel, text in ((code_rel, code), (nodes_rel, json.dumps(payload, default=str) + "\n")):
                try:
                    (self.mode_dir / rel).write_text(text)
                except OSError as exc:
                    try:
                        (self.mode_dir / rel).unlink()  # no half-written graph file
                    except OSError:
                        pass
                    self._stop(exc, rel)
                    return "", ""
        return code_rel, nodes_rel

    def write_manifest(self) -> None:
        """Never raises: on a full disk the reserve is given up for it; if even that fails, one
        line says so and the parent or the loader reads the record as it was left."""
        with self._lock:
            if self._write_manifest_quietly() is None:
                return
            self._drop_reserve()
            error = self._write_manifest_quietly()
            if error is not None:
                warn(f"could not write {self.mode_dir / MANIFEST_FILE}: {error.strerror or error}; its status is not up to date")

    def reopen(self, mode_dir: Path) -> None:
        """In a forked child: the same writer object (whoever holds it keeps writing through it),
        now writing a new record at `mode_dir`. The inherited lock may be held by a thread that
        did not survive the fork, and the inherited file is the parent's: close only our copy of
        its descriptor, dropping any unflushed parent bytes (as torch's trace handler does)."""
        self._lock = threading.Lock()
        self._seq = 0
        self.t0 = time.perf_counter()
        self._discard_events_file()
        self.stopped = None
        self.manifest.recording_stopped = None
        self.mode_dir = Path(mode_dir).resolve()
        self._open()

    @property
    def events_written(self) -> int:
        return self._seq

    def close(self) -> None:
        with self._lock:
            if self._events is not None:
                try:
                    self._events.close()
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
