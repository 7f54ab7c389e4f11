"""The two JSON documents of a run directory: run.json (the whole run) and a mode's manifest.json."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from cagtool.record.schema import MODE_FORMAT, RUN_FORMAT, SCHEMA_VERSION
from cagtool.record.validate import check_types


@dataclass
class ExceptionInfo:
    type: str
    message: str
    traceback: str = ""


@dataclass
class ModeManifest:
    mode: str  # eager | aot | ca
    argv: list[str]  # the target's sys.argv
    target: dict[str, str]  # {"kind": "script"|"module", "name": path or module}
    cwd: str
    versions: dict[str, str]  # cagtool, torch, depyf, python
    backend: str  # backend cagtool compiles CA graphs with (ca mode)
    dynamic: bool
    started_at: str  # ISO 8601, UTC
    format: str = MODE_FORMAT
    schema_version: int = SCHEMA_VERSION
    status: str = "running"
    ended_at: str | None = None
    duration_s: float | None = None
    exit_code: int | None = None
    exception: ExceptionInfo | None = None
    peak_rss_bytes: int | None = None
    peak_device_memory_bytes: int | None = None  # torch.cuda.max_memory_allocated (all devices), when the job used CUDA
    torch_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # steps limit, trace-nodes, depyf...
    # Which process of the job this record is (PROTOCOL layout): key "main" | "rank<N>" | "pid<PID>",
    # pid, ppid, rank, local_rank, world_size (None when unknown), role "main" | "child", argv.
    process: dict[str, Any] = field(default_factory=dict)
    # Set on records built by `cagtool import` (mode "imported"): the source logs, what was read,
    # skipped or inferred, and `not_in_log` (what such a record cannot have: step times...).
    imported: dict[str, Any] | None = None
    # A write error ended recording early: {"at_seq": first event not written, "error", "file"};
    # the events before at_seq are in events.jsonl. trace_stopped: the same for TORCH_TRACE.
    recording_stopped: dict[str, Any] | None = None
    trace_stopped: dict[str, Any] | None = None


@dataclass
class RunMeta:
    run_id: str
    created_at: str
    cagtool_argv: list[str]
    target: dict[str, str]
    target_argv: list[str]
    cwd: str
    modes: list[str]
    versions: dict[str, str]
    machine: dict[str, Any]
    format: str = RUN_FORMAT
    schema_version: int = SCHEMA_VERSION
    status: str = "running"
    ended_at: str | None = None
    exit_code: int | None = None
    mode_exit_codes: dict[str, int | None] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    # The cagtool process writing it: {"pid", "hostname", "start_ticks"} (record/liveness.py), so a
    # reader can tell a run still going from one whose process vanished.
    process: dict[str, Any] = field(default_factory=dict)


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def _build(cls: type, data: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def mode_manifest_from_dict(data: dict[str, Any]) -> ModeManifest:
    """Raises TypeError for a field of the wrong type (the loader names the file)."""
    manifest = _build(ModeManifest, data)
    if isinstance(manifest.exception, dict):
        manifest.exception = _build(ExceptionInfo, manifest.exception)
    return check_types(manifest)


def run_meta_from_dict(data: dict[str, Any]) -> RunMeta:
    """Raises TypeError for a field of the wrong type (the loader names the file)."""
    return check_types(_build(RunMeta, data))
