"""Writes one mode record: the manifest (atomically replaced), the event stream (appended and
flushed per event, so a crash loses nothing written so far) and the graph files."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.graph_file import GRAPH_FORMAT, GraphNode, graph_node_to_dict
from cagtool.record.schema import (
    EVENTS_FILE,
    GRAPHS_DIR,
    MANIFEST_FILE,
    RUN_META_FILE,
    SCHEMA_VERSION,
    Event,
    event_to_dict,
    json_default,
)


# One encoder for all events: json.dumps(default=...) builds a new encoder per call (~5 us a step).
_ENCODER = json.JSONEncoder(default=json_default)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def write_run_meta(run_dir: Path, meta: RunMeta) -> None:
    write_json_atomic(run_dir / RUN_META_FILE, to_dict(meta))


class RecordWriter:
    """Appends typed events for one mode. Thread-safe; `seq` and `t` are assigned here."""

    def __init__(self, mode_dir: Path, manifest: ModeManifest, clock_start: float | None = None) -> None:
        self.mode_dir = mode_dir
        self.manifest = manifest
        self.t0 = time.perf_counter() if clock_start is None else clock_start
        (mode_dir / GRAPHS_DIR).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._seq = 0
        self._events = open(mode_dir / EVENTS_FILE, "a", buffering=1)  # noqa: SIM115 - lives as long as the run
        self.write_manifest()

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def emit(self, event_cls: type[Event], **fields: Any) -> Event:
        """Append one event. The file is line-buffered: each event reaches the OS as it is written."""
        with self._lock:
            t = fields.pop("t", None)  # given when the time is not now (an imported log's timestamps)
            event = event_cls(seq=self._seq, t=self.now() if t is None else t, **fields)
            self._seq += 1
            if not self._events.closed:
                self._events.write(_ENCODER.encode(event_to_dict(event)) + "\n")
        return event

    def write_graph(self, ca_id: int, compile_id: str, code: str, nodes: list[GraphNode]) -> tuple[str, str]:
        code_rel = f"{GRAPHS_DIR}/ca_{ca_id}.py"
        nodes_rel = f"{GRAPHS_DIR}/ca_{ca_id}.json"
        (self.mode_dir / code_rel).write_text(code)
        payload = {
            "format": GRAPH_FORMAT,
            "schema_version": SCHEMA_VERSION,
            "ca_id": ca_id,
            "compile_id": compile_id,
            "nodes": [graph_node_to_dict(n) for n in nodes],
        }
        (self.mode_dir / nodes_rel).write_text(json.dumps(payload, default=str) + "\n")
        return code_rel, nodes_rel

    def write_manifest(self) -> None:
        write_json_atomic(self.mode_dir / MANIFEST_FILE, to_dict(self.manifest))

    def reopen(self, mode_dir: Path) -> None:
        """In a forked child: the same writer object (whoever holds it keeps writing through it),
        now writing a new record at `mode_dir`. The inherited lock may be held by a thread that
        did not survive the fork, and the inherited file is the parent's: close only our copy of
        its descriptor, dropping any unflushed parent bytes (as torch's trace handler does)."""
        self._lock = threading.Lock()
        self._seq = 0
        self.t0 = time.perf_counter()
        try:
            os.close(self._events.fileno())
            self._events.close()
        except (OSError, ValueError):
            pass
        self.mode_dir = mode_dir
        (mode_dir / GRAPHS_DIR).mkdir(parents=True, exist_ok=True)
        self._events = open(mode_dir / EVENTS_FILE, "a", buffering=1)  # noqa: SIM115 - lives as long as the run
        self.write_manifest()

    @property
    def events_written(self) -> int:
        return self._seq

    def close(self) -> None:
        with self._lock:
            if not self._events.closed:
                self._events.close()
