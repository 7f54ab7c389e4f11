"""The two JSON documents of a run directory: run.json (the whole run) and a mode's manifest.json."""

# No `from __future__ import annotations` here: msgspec and TypedDict would compile each string
# annotation (about a hundred of them in these classes), at import and again on a report command's
# first read of a manifest (5.8 M instructions), where annotations evaluated at definition cost
# almost nothing.
from typing import Any, TypedDict

import msgspec
from msgspec import Struct, field

from cagtool.record.schema import MODE_FORMAT, RUN_FORMAT, SCHEMA_VERSION


class ErrorCount(TypedDict):
    """Errors cagtool caught in one of its own parts instead of letting them reach the job."""

    count: int
    last: str | None


class ModeOptions(TypedDict, total=False):
    """The manifest's `options`: how the mode ran and what cagtool noted about its own work. Every
    key written goes here, one line each; the loader checks the types of these keys and keeps any
    other key as it is (a record written by a newer cagtool)."""

    # set when the record is opened (capture/run/child.py, capture/processes/follow.py, api.py)
    waited_to_start_s: float  # the mode waited this long for the previous one's process to go
    max_steps: int | None  # --steps
    max_time: float | None  # --max-time
    trace_nodes: bool
    depyf: bool
    torch_trace: bool
    followed: bool  # a process the target started, recorded by cagtool's follower
    python_api: bool  # recorded through cagtool.api, not `cagtool run`
    imported: bool  # built by `cagtool import` (trace_import/importer.py)
    # set while it runs or when it ends
    seed: dict[str, Any]  # capture/run/seeding.py: {"seed", "seeded", "script_reseeded"}
    parity_every: int | None  # --parity-every
    fallback_random: bool  # inductor's fallback_random, as the mode ran
    held_events: dict[str, Any]  # writer.py: {"kinds", "up_to_s"}, what a hard kill can lose
    stopped_by: str  # "steps" | "max_time": a --steps / --max-time bound ended it
    closed_by: str  # "reader": the loader closed the record of a process that vanished
    optimize_ddp: dict[str, Any]  # {"value", "set_by"}: the DDP setting cagtool chose
    cagtool_memory: dict[str, Any]  # what cagtool itself allocated (capture/steps/device_readings.py)
    losses_not_kept: int
    grad_digest_error: str
    step_tracking_errors: ErrorCount
    structured_log_errors: ErrorCount
    oversized_dropped: ErrorCount  # writer.py: events (and graph nodes files) over what the loader reads, a finding in their place
    observer_errors: ErrorCount
    failed_ca_captures: int  # captures torch began and never ended
    thread_scope_errors: ErrorCount  # api.py: the Python API block's thread gate
    pgo_suggestion: str  # torch's PGO words after a shape recompile, verbatim (child, follow, import)
    patched_source: str  # recompiles --verify: the patched copy this mode ran in the script's place


class RunOptions(TypedDict, total=False):
    """run.json's `options`: the command line of `cagtool run` (capture/run/orchestrate.py) or what
    `cagtool import` read (trace_import/importer.py). Same rules as ModeOptions."""

    backend: str
    dynamic: bool
    steps: int | None
    max_time: float | None
    repeat: int
    order_seed: int | None  # the modes' order in each block of --repeat (orchestrate.mode_dirs)
    warm_cache: bool
    keep_cache: bool
    seed: int | None
    parity_every: int | None
    parity: bool
    user: str
    python_api: bool  # recorded through cagtool.api (with backend, dynamic and reset)
    reset: bool
    imported: bool
    source: str
    processes: list[str]
    world_size: int | None
    skipped_files: list[str]


# The two documents are msgspec Structs, as the events are: msgspec checks a document's types as it
# builds it, and a Struct class costs a tenth of a dataclass to define (the record modules are
# imported by every report command, `cagtool runs` included).


class ExceptionInfo(Struct):
    type: str
    message: str
    traceback: str = ""


class ModeManifest(Struct):
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
    options: ModeOptions = field(default_factory=ModeOptions)  # type: ignore[assignment]
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
    # time.perf_counter() (CLOCK_MONOTONIC, shared by the machine's processes) at the record's time
    # 0: event `t` + clock_t0 places an event among readings other processes took (cpu_wait.json).
    clock_t0: float | None = None


class RunMeta(Struct):
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
    options: RunOptions = field(default_factory=RunOptions)  # type: ignore[assignment]
    # The cagtool process writing it: {"pid", "hostname", "start_ticks"} (record/liveness.py), so a
    # reader can tell a run still going from one whose process vanished.
    process: dict[str, Any] = field(default_factory=dict)
    # record/seal.py: the job's files and an HMAC over what a re-run repeats (`recompiles --verify`).
    job_seal: dict[str, Any] | None = None


def process_identity(manifest: ModeManifest) -> str | None:
    """What tells this record's process from every other: its host, pid and kernel start time, and
    when and at what monotonic clock reading the record began (two Python API blocks in one process
    share the pid, never the clock). None where no pid was recorded (an imported log's record).
    Two records with one identity are one process counted twice (a directory copied)."""
    process = manifest.process or {}
    pid = process.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return None
    return f"{process.get('hostname') or ''}/{pid}/{process.get('start_ticks')}/{manifest.started_at}/{manifest.clock_t0!r}"


def to_dict(obj: Any) -> dict[str, Any]:
    """The document as plain data, in field order; what msgspec does not take (a torch version is
    a str subclass) is spelled by str()."""
    return msgspec.to_builtins(obj, enc_hook=str)  # type: ignore[no-any-return]


def _build(cls: type, data: dict[str, Any]) -> Any:
    """`cls` from a document, its types checked by msgspec (unknown keys ignored: additive
    changes); a wrong or missing field raises TypeError naming it (the loader names the file).
    Option keys no TypedDict lists are kept as they are."""
    options = data.get("options")
    try:
        built = msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise TypeError(str(exc)) from None
    if isinstance(options, dict) and len(options) != len(built.options):
        built.options = {**options, **built.options}
    return built


def mode_manifest_from_dict(data: dict[str, Any]) -> ModeManifest:
    """Raises TypeError for a field of the wrong type (the loader names the file)."""
    return _build(ModeManifest, data)  # type: ignore[no-any-return]


def run_meta_from_dict(data: dict[str, Any]) -> RunMeta:
    """Raises TypeError for a field of the wrong type (the loader names the file)."""
    return _build(RunMeta, data)  # type: ignore[no-any-return]
