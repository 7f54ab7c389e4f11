"""The two JSON documents of a run directory: run.json (the whole run) and a mode's manifest.json."""

# No `from __future__ import annotations` here: msgspec and TypedDict would compile each string
# annotation (about a hundred of them in these classes), at import and again on a report command's
# first read of a manifest (5.8 M instructions), where annotations evaluated at definition cost
# almost nothing.
import re
from typing import Any, Literal, TypedDict

import msgspec
from msgspec import Struct, field

from cagtool.record.bounds import Bytes, Duration, number_text
from cagtool.record.schema import MAX_JSON_FILE_BYTES, MODE_FORMAT, RUN_FORMAT, SCHEMA_VERSION


class ErrorCount(TypedDict):
    """Errors cagtool caught in one of its own parts instead of letting them reach the job."""

    count: int
    last: str | None


class CollateFunction(TypedDict):
    """A DataLoader's collate_fn (capture/steps/collate.py): a function's name and where its code is,
    or an instance's class and where its `__call__` is; whether that code is the job's own; how it
    pads (`settings`: `padding`, `pad_to_multiple_of`, `max_length` where it holds them);
    `wrapped_by`: the class of a library's wrapper it was found in (transformers'
    RemoveColumnsCollator)."""

    name: str
    module: str
    file: str
    line: int
    kind: Literal["function", "instance"]
    user: bool  # its code is the job's own, not an installed package's (capture/observe/source.py, is_user_file)
    settings: dict[str, str | int | bool | None]
    wrapped_by: str | None


class ModeOptions(TypedDict, total=False):
    """The manifest's `options`: how the mode ran and what cagtool noted about its own work. Every
    key written goes here, one line each; the loader checks the types of these keys and keeps any
    other key as it is (a record written by a newer cagtool)."""

    # set when the record is opened (capture/run/child.py, capture/processes/follow.py, api.py)
    waited_to_start_s: Duration  # the mode waited this long for the previous one's process to go
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
    # DataLoader iterators the loop thread made while the record was open (None: steps not tracked)
    dataloader_iterators: int | None
    # ... and the distinct collate functions they batch with (capture/steps/collate.py, the first 8;
    # None: steps not tracked; absent in older records)
    collate_functions: list[CollateFunction] | None
    # The ca mode's top-level backward calls that began with compiled autograd off, so ran uncaptured
    # (inside a torch.func transform, which torch runs under compiled_autograd._disable(); after
    # torch._dynamo.reset()); None where not the ca mode or steps were not tracked; absent in older records.
    backward_calls_outside_ca: int | None
    grad_digest_error: str
    step_tracking_errors: ErrorCount
    structured_log_errors: ErrorCount
    oversized_dropped: ErrorCount  # writer.py: events (and graph nodes files) over what the loader reads, a finding in their place
    observer_errors: ErrorCount
    failed_ca_captures: int  # captures torch began and never ended
    thread_scope_errors: ErrorCount  # api.py: the Python API block's thread gate
    # The job's torch.compile calls (capture/observe/compile_calls.py, the first 16): each
    # {"file", "line", "via", "dynamic": None | bool | "other", "code": [file, first line],
    # "in_place": Module.compile() (no wrapper, no `_orig_mod`; absent in older records),
    # "backend": its name, "inductor" where unset (absent in older records)}
    compile_calls: list[dict[str, Any]]
    pgo_suggestion: str  # torch's PGO words after a shape recompile, verbatim (child, follow, import)
    patched_source: str  # recompiles --verify: the patched copy this mode ran in the script's place
    patch_target: str  # ... and that script (absolute): a line of the copy is this script's line
    # Files under the process's working directory it opened for reading (capture/processes/
    # workdir_reads.py: relative paths, sorted, the first WORKDIR_READS_KEPT, after which later reads
    # are not kept; no Python source); None where not watched (a Python API block), absent in a
    # record made before it was kept.
    workdir_reads: list[str] | None


# How many files of its working directory a process's record keeps as read (ModeOptions.workdir_reads).
WORKDIR_READS_KEPT = 64


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
    isolate_workdir: bool  # what each mode created in the job's directory set aside (capture/run/workdir.py)
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
    # The figures are typed with their range (record/bounds.py): one outside it refuses the record.
    duration_s: Duration | None = None
    exit_code: int | None = None
    exception: ExceptionInfo | None = None
    peak_rss_bytes: Bytes | None = None
    peak_device_memory_bytes: Bytes | None = None  # torch.cuda.max_memory_allocated (all devices), when the job used CUDA
    torch_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    options: ModeOptions = field(default_factory=ModeOptions)  # type: ignore[assignment]
    # Which process of the job this record is (PROTOCOL layout): key "main" | "rank<N>" | "pid<PID>",
    # pid, ppid, rank, local_rank, world_size (None when unknown), role "main" | "child", argv;
    # forked_from: the parent's pid where the process is a fork (it runs its parent's code, never
    # re-imports the script: a DataLoader's workers on Linux), absent where it started afresh.
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
    # Set when the manifest as it stood was over what the readers read (MAX_JSON_FILE_BYTES): what
    # was cut to write it (`document_text`).
    truncated: dict[str, Any] | None = None


class WrittenFiles(Struct):
    """Files of the job's working directory an earlier mode wrote (the first few, and how many)."""

    paths: list[str]
    count: int

    def shown(self) -> str:
        """`snapshot.pt`, or `a.pt, b.pt, c.pt ... (12 files)`."""
        shown = ", ".join(self.paths[:3])
        return shown if self.count <= 3 else f"{shown} ... ({self.count} files)"


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
    truncated: dict[str, Any] | None = None  # as ModeManifest.truncated
    # Mode name -> the files in the job's working directory that were new or changed when it
    # started, written by the modes before it (capture/run/workdir.py): {"paths": [...], "count": N}.
    written_before: dict[str, WrittenFiles] = field(default_factory=dict)
    # With --isolate-workdir: mode name -> the files it created there, moved into <run>/workdir/<mode>/.
    set_aside: dict[str, WrittenFiles] = field(default_factory=dict)
    # The modes during which Inductor's precompiled C++ headers were built (capture/run/
    # inductor_machine.py): their compile time includes that one-time cost, the later modes' not.
    built_headers: list[str] = field(default_factory=list)


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


def typed_compile_calls(manifest: ModeManifest) -> tuple[dict[str, Any], ...]:
    """The manifest's `compile_calls` (ModeOptions) whose fields have their types: a record is read,
    not trusted, and an entry whose line is a list (unhashable) or whose file is no text crashed the
    explanation that matches calls to frames. An entry otherwise typed is left out; `in_place` and
    `backend` may be absent (older records)."""
    calls = manifest.options.get("compile_calls") if isinstance(manifest.options, dict) else None
    if not isinstance(calls, list):
        return ()

    def typed(c: Any) -> bool:
        code = c.get("code")
        return (isinstance(c.get("file"), str) and type(c.get("line")) is int and isinstance(c.get("via", ""), str)
                and c.get("dynamic") in (None, True, False, "other") and type(c.get("dynamic")) in (type(None), bool, str)
                and isinstance(code, list) and len(code) == 2 and isinstance(code[0], str) and type(code[1]) is int
                and type(c.get("in_place", False)) is bool and isinstance(c.get("backend", ""), str))

    return tuple(c for c in calls if isinstance(c, dict) and typed(c))


def typed_collate_functions(manifest: ModeManifest) -> tuple[CollateFunction, ...]:
    """The manifest's `collate_functions` (its types checked at load, ModeOptions); () where the
    record has none."""
    found = manifest.options.get("collate_functions") if isinstance(manifest.options, dict) else None
    return tuple(found) if isinstance(found, list) else ()


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
        raise TypeError(_with_value(str(exc), data)) from None
    if isinstance(options, dict) and len(options) != len(built.options):
        built.options = {**options, **built.options}
    return built


_AT = re.compile(r" - at `\$((?:\.[A-Za-z_][A-Za-z_0-9]*|\[\d+\])*)`$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z_0-9]*)|\[(\d+)\]")


def _with_value(message: str, data: Any) -> str:
    """msgspec's message (which names the field, `- at `$.peak_rss_bytes``) with the value the
    document holds there: a figure out of its range is told by what it is."""
    at = _AT.search(message)
    if at is None:
        return message
    value = data
    for key, index in _STEP.findall(at.group(1)):
        if key and isinstance(value, dict) and key in value:
            value = value[key]
        elif index and isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            return message
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return message  # a wrong type: msgspec's message says which it got
    return f"{message} (it holds {number_text(value)})"


def mode_manifest_from_dict(data: dict[str, Any]) -> ModeManifest:
    """Raises TypeError for a field of the wrong type (the loader names the file)."""
    return _build(ModeManifest, data)  # type: ignore[no-any-return]


def run_meta_from_dict(data: dict[str, Any]) -> RunMeta:
    """Raises TypeError for a field of the wrong type (the loader names the file)."""
    return _build(RunMeta, data)  # type: ignore[no-any-return]



# What `document_text` writes in place of what it cut, and how much room under the bound it leaves
# for its own note (`truncated`: a few hundred entries at most).
CUT_MARKER = " [... cagtool cut {:,} characters here: the document is bounded]"
_HEADROOM = 256 * 1024
_MAX_CUTS_LISTED = 200
# Fields kept whole: what makes the document a record (format, version, status...) is short, and a
# seal's digests are worth nothing once cut.
_KEPT_WHOLE = frozenset({"job_seal", "format", "schema_version", "status", "mode", "started_at", "ended_at", "created_at", "run_id"})
# Objects whose entries are never dropped (their strings may be cut): ExceptionInfo's fields are all required.
_FIXED_FIELDS = frozenset({"exception"})
# (shortest string cut, fewest list items kept, fewest object entries kept): first only what is long,
# then anything, ExceptionInfo's fields and the document's own fields left.
_ROUNDS = ((4096, 64, 64), (0, 0, 16), (0, 0, 0))


def document_text(data: dict[str, Any], limit: int = MAX_JSON_FILE_BYTES) -> str:
    """run.json's or a manifest's text (json, indent 2: the layout records were always written in),
    never over `limit`, what the readers read (schema.MAX_JSON_FILE_BYTES). A document that would be
    larger (an argv of millions of words, a giant exception message or traceback, options or findings
    by the hundred thousand) is written with its longest strings cut, CUT_MARKER in place of the
    rest, then its longest lists and objects cut to their first items, each to the one length that
    saves enough; its `truncated` says so: {"bytes": its size whole, "limit", "cuts": [{"field",
    "kept", "cut", "unit"}...], "more_cuts"}. Under the limit (every real record) it costs
    json.dumps and one length check. `data` is changed in place (to_dict's copy)."""
    import json

    text = json.dumps(data, indent=2, default=str) + "\n"
    if len(text) <= limit:  # ASCII escapes: one byte a character
        return text
    whole = len(text)
    cuts: dict[tuple[int, Any], list[Any]] = {}  # (id(container), key) -> [container, kept, whole length, unit]
    target = max(0, limit - _HEADROOM)
    for strings_floor, items_floor, entries_floor in _ROUNDS:
        for _ in range(8):  # a cut inside a part cut away saves less than counted: measured again
            if len(text) <= target:
                break
            before = len(text)
            _cut_strings(data, len(text) - target, strings_floor, cuts)
            text = json.dumps(data, indent=2, default=str) + "\n"
            if len(text) > target:
                _cut_containers(data, len(text) - target, items_floor, entries_floor, cuts)
                text = json.dumps(data, indent=2, default=str) + "\n"
            if len(text) >= before:
                break
    listed = [{"field": path, "kept": kept, "cut": cut, "unit": unit} for path, kept, cut, unit in _cut_paths(data, cuts)]
    data["truncated"] = {"bytes": whole, "limit": limit, "cuts": listed[:_MAX_CUTS_LISTED], "more_cuts": max(0, len(listed) - _MAX_CUTS_LISTED)}
    return json.dumps(data, indent=2, default=str) + "\n"


def cut_words(truncated: dict[str, Any] | None, what: str, shown: int = 3) -> str | None:
    """What `document_text` cut from `what` (run.json, a mode's manifest), in words for a reader's
    note: None when nothing was cut. Read from the document's own `truncated`, whatever its shape."""
    if not isinstance(truncated, dict):
        return None
    cuts = [c for c in truncated.get("cuts") or [] if isinstance(c, dict)]
    more = truncated.get("more_cuts") if isinstance(truncated.get("more_cuts"), int) else 0
    listed = "; ".join(f"{c.get('field')}: kept {c.get('kept'):,} of {c.get('kept', 0) + c.get('cut', 0):,} {c.get('unit')}"
                       if isinstance(c.get("kept"), int) and isinstance(c.get("cut"), int) else str(c.get("field")) for c in cuts[:shown])
    rest = len(cuts) - shown + more
    size = truncated.get("bytes")
    whole = f" ({size / 2**20:,.0f} MiB whole)" if isinstance(size, int) else ""
    return (f"{what} was cut to fit the readers' bound{whole}" + (f": {listed}" if listed else "")
            + (f"; {rest:,} more cuts" if rest > 0 else ""))


def _slots(data: dict[str, Any]) -> list[tuple[Any, Any, Any, int]]:
    """Every (container, key, value, depth) of the document but its fields kept whole (_KEPT_WHOLE);
    the document's own fields are at depth 1."""
    found: list[tuple[Any, Any, Any, int]] = []
    stack: list[tuple[Any, int]] = []
    for key, value in data.items():
        if key not in _KEPT_WHOLE:
            found.append((data, key, value, 1))
            stack.append((value, 1))
    while stack:
        node, depth = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            found.append((node, key, value, depth + 1))
            if isinstance(value, (dict, list)):
                stack.append((value, depth + 1))
    return found


def _note_cut(cuts: dict, container: Any, key: Any, kept: int, length: int, unit: str) -> None:
    noted = cuts.get((id(container), key))
    if noted is not None and noted[0] is container:  # cut again: the length it had whole
        length = noted[2]
    cuts[(id(container), key)] = [container, kept, length, unit]


def _cut_strings(data: dict[str, Any], excess: int, floor: int, cuts: dict) -> None:
    """The longest strings cut to one length, the longest that saves `excess` characters of JSON
    (a cut one keeps its first part and the marker), none to fewer than `floor` characters."""
    import json

    marker = len(CUT_MARKER.format(10**12))
    strings = [(container, key, value, len(json.dumps(value)) - 2) for container, key, value, _ in _slots(data)
               if isinstance(value, str) and len(value) > floor + marker]
    if not strings:
        return
    strings.sort(key=lambda s: -s[3])
    sizes = [s[3] for s in strings]
    total, cap = 0, floor
    for count, size in enumerate(sizes, 1):  # the top `count` cut to `candidate` save enough, the others need no cut
        total += size
        candidate = (total - excess) // count - marker
        if candidate >= max(sizes[count] if count < len(sizes) else 0, floor):
            cap = candidate
            break
    for container, key, value, size in strings:
        if size - cap <= marker:
            break
        kept = cap * len(value) // size  # escapes make the JSON longer than the text: cut in proportion
        container[key] = value[:kept] + CUT_MARKER.format(len(value) - kept)
        _note_cut(cuts, container, key, kept, len(value), "characters")


def _cut_containers(data: dict[str, Any], excess: int, items_floor: int, entries_floor: int, cuts: dict) -> None:
    """The longest lists and objects cut to their first items, all to one count, the largest that
    saves `excess` characters (measured item by item), none below its floor."""
    import json

    groups = []
    for container, key, value, depth in _slots(data):
        floor = items_floor if isinstance(value, list) else entries_floor
        if isinstance(value, (list, dict)) and len(value) > floor and not (container is data and key in _FIXED_FIELDS):
            items = list(value.items()) if isinstance(value, dict) else value
            sizes = [len(json.dumps(item, default=str)) for item in items]  # compact: json's C encoder
            # What an item takes in the document, indented at its depth: in proportion, per container.
            indented = json.dumps(value, indent=2, default=str)
            scale = (len(indented) + 2 * depth * indented.count("\n")) / max(1, sum(sizes))
            groups.append((container, key, value, floor, [int(size * scale) for size in sizes]))
    if not groups:
        return

    def saved(count: int) -> int:
        return sum(sum(sizes[max(count, floor):]) for _, _, _, floor, sizes in groups)

    low, high = 0, max(len(sizes) for *_, sizes in groups)  # the most items kept that saves enough
    while low < high:
        middle = (low + high + 1) // 2
        if saved(middle) >= excess:
            low = middle
        else:
            high = middle - 1
    for container, key, value, floor, _ in groups:
        keep = max(low, floor)
        if len(value) > keep:
            container[key] = dict(list(value.items())[:keep]) if isinstance(value, dict) else value[:keep]
            _note_cut(cuts, container, key, keep, len(value), "entries" if isinstance(value, dict) else "items")


def _cut_paths(data: dict[str, Any], cuts: dict) -> list[tuple[str, int, int, str]]:
    """The cuts still in the document (one inside a part cut away went with it), by path
    (`argv[3]`, `options.skipped_files`): (path, kept, cut, unit)."""
    found: list[tuple[str, int, int, str]] = []
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        node, path = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            where = f"{path}[{key}]" if isinstance(node, list) else (f"{path}.{key}" if path else str(key))
            noted = cuts.get((id(node), key))
            if noted is not None and noted[0] is node:
                found.append((where, noted[1], noted[2] - noted[1], noted[3]))
            if isinstance(value, (dict, list)):
                stack.append((value, where))
    return sorted(found)
