"""The one loader: finds a run directory, checks format and version, and reads it leniently."""

from __future__ import annotations

import os
import re
from collections import Counter
from functools import lru_cache
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, TypeVar

import msgspec
from msgspec import Struct, field

from cagtool.errors import UnreadableInput, UsageError
from cagtool.record.bounds import REFUSED, below_least_nonzero, bounded_fields, figure_problem, first_out_of_bounds
from cagtool.record.regular_files import confine_reads, open_record_file, read_record_bytes
from cagtool.record.liveness import read_dead_writer_as_killed, read_vanished_as_killed
from cagtool.record.manifest import ModeManifest, RunMeta, mode_manifest_from_dict, process_identity, run_meta_from_dict
from cagtool.record.schema import (
    MAX_EVENT_LINE_BYTES,
    MAX_JSON_FILE_BYTES,
    MAX_TEXT_FILE_BYTES,
    MAX_WORLD_SIZE,
    EVENT_TYPES,
    CompileArtifactEvent,
    EVENTS_FILE,
    GRAPHS_DIR,
    MANIFEST_FILE,
    MODE_FORMAT,
    IMPORTED_MODE,
    MODES,
    PROCS_DIR,
    RUN_FORMAT,
    RUN_META_FILE,
    SCHEMA_VERSION,
    STATUS_INTERRUPTED,
    STATUS_KILLED,
    BackwardEvent,
    Event,
    StepEvent,
    decode_event,
    decode_events,
    event_from_value,
)
from cagtool.record.upgrade import kinds_to_read, reads_columns, step_number_shift, upgrade_events

if TYPE_CHECKING:
    from cagtool.record.columns import EventColumns
    from cagtool.record.graph_file import GraphColumns, GraphFile, GraphNode

DEFAULT_RUNS_DIR = Path(".cagtool") / "runs"
RUNS_DIR_ENV = "CAGTOOL_RUNS_DIR"

E = TypeVar("E", bound=Event)
T = TypeVar("T")


def runs_dir() -> Path:
    return Path(os.environ.get(RUNS_DIR_ENV, DEFAULT_RUNS_DIR))


def _start_order(record: "ModeRecord") -> tuple[str, int, str]:
    """When a record's process started: its host, its start time in clock ticks since that host's
    boot (/proc's, exact on one host), and its manifest's start time."""
    process = record.manifest.process or {}
    ticks = process.get("start_ticks")
    return (str(process.get("hostname") or ""), ticks if isinstance(ticks, int) and not isinstance(ticks, bool) else 0,
            str(record.manifest.started_at or ""))


class ModeRecord(Struct):
    path: Path
    manifest: ModeManifest
    events: list[Event]
    skipped_lines: int = 0  # lines that were not valid JSON (e.g. a truncated last line)
    unknown_kinds: Counter[str] = field(default_factory=Counter)
    kind_counts: Counter[str] = field(default_factory=Counter)  # every known event line, loaded or not
    # The Python processes the target started and cagtool followed (<mode>/procs/<key>/), by key
    # ("rank1", "pid4242"); empty for a single-process job and for the child records themselves.
    processes: dict[str, ModeRecord] = field(default_factory=dict)
    # Events of the column kinds (steps, backward calls, optimizer steps) held as columns instead of
    # in `events` when the loader was asked for columns and the record's sidecar matched its
    # events.jsonl (record/columns.py); `of` builds them when asked.
    columns: dict[str, EventColumns] = field(default_factory=dict)
    _of_cache: dict[tuple[type, int, int], list[Any]] = field(default_factory=dict)
    # The events grouped by class, built in one pass the first time `of` is asked (then each kind
    # is a lookup, not a scan of every event), and figures derived from the events (`derived`).
    _by_type: tuple[tuple[int, int], dict[type, list[Event]]] | None = None
    _derived: dict[tuple[str, int, int], Any] = field(default_factory=dict)
    _built_columns: dict[type, list[Event]] = field(default_factory=dict)
    # The other ranks' records of the same mode (load_mode links them): a step another rank
    # compiled in is no steady step of this one either (it waited for that rank at a collective).
    _peers: tuple[Any, ...] = ()
    # A process the job started without a distributed rank that trained where the job's main
    # process trained nothing (Hogwild: torch.multiprocessing workers on a shared model), numbered
    # by start from 0 (load_mode): reports read the workers as they read ranks.
    worker: int | None = None

    @property
    def mode(self) -> str:
        return self.manifest.mode

    @property
    def rank(self) -> int | None:
        """The process's distributed rank (RANK env, or the process group once it was up); for a
        training worker without one, its number among the workers (`worker`)."""
        rank = (self.manifest.process or {}).get("rank")
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else self.worker

    @property
    def world_size(self) -> int | None:
        """The world size this process's record says (WORLD_SIZE, or the process group once it was
        up); None without one (0, a negative or not an integer: none). The loader refuses one beyond
        MAX_WORLD_SIZE."""
        size = (self.manifest.process or {}).get("world_size")
        return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None

    @property
    def process_key(self) -> str:
        return str((self.manifest.process or {}).get("key") or "main")

    def ranks(self) -> dict[int, ModeRecord]:
        """Every record of this mode that has a rank, this one included, by rank (sorted). A rank
        that a launcher restarted (torchrun --max-restarts) is its last attempt's record; the
        earlier ones are in `attempts`."""
        found: dict[int, ModeRecord] = {}
        for record in sorted((self, *self.processes.values()), key=_start_order):
            if record.rank is not None and (record.rank not in found or record.attempt > found[record.rank].attempt):
                found[record.rank] = record
        return dict(sorted(found.items()))

    def started_again(self, rank: int) -> list[ModeRecord]:
        """The records of rank `rank` with the same attempt as the one `ranks()` keeps (the first
        started), in start order after it: the rank started again, not by a launcher's restart (a
        script that sets up a second process group after the first: pretraining, then fine-tuning).
        Each is a process of its own that `ranks()` does not show."""
        kept = self.ranks().get(rank)
        if kept is None:
            return []
        return [r for r in sorted((self, *self.processes.values()), key=_start_order)
                if r.rank == rank and r is not kept and r.attempt == kept.attempt]

    @property
    def attempt(self) -> int:
        """Which start of this rank by its launcher (torchrun's TORCHELASTIC_RESTART_COUNT): 0, the first."""
        attempt = (self.manifest.process or {}).get("attempt")
        return attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0

    def attempts(self, rank: int) -> list[ModeRecord]:
        """Every record of rank `rank` in this mode, one per attempt, the first first."""
        records = [r for r in (self, *self.processes.values()) if r.rank == rank]
        return sorted(records, key=lambda r: r.attempt)

    def of(self, cls: type[E]) -> list[E]:
        # Reports ask for the same kinds dozens of times over tens of thousands of events: each
        # answer is kept until `events` changes (another list, or appended to).
        key = (cls, id(self.events), len(self.events))
        found = self._of_cache.get(key)
        if found is None:
            found = self._of_cache[key] = self._collect(cls)
        return list(found)

    def _collect(self, cls: type) -> list[Any]:
        state = (id(self.events), len(self.events))
        if self._by_type is None or self._by_type[0] != state:
            self._by_type = (state, _by_type(self.events))
        grouped = self._by_type[1]
        held = [EVENT_TYPES[kind] for kind in self.columns if issubclass(EVENT_TYPES[kind], cls)]
        matching = [t for t in grouped if issubclass(t, cls)]
        if len(matching) + len(held) == 1:
            return list(grouped[matching[0]]) if matching else list(self._column_events(held[0]))
        if not matching and not held:
            return []
        found = [e for e in self.events if isinstance(e, cls)]  # several classes: keep file order
        if held:
            found = sorted(found + [e for t in held for e in self._column_events(t)], key=lambda e: e.seq)
        return found

    def _column_events(self, cls: type) -> list[Event]:
        built = self._built_columns.get(cls)
        if built is None:
            built = self._built_columns[cls] = self.columns[cls.kind].events()  # type: ignore[attr-defined]
        return built

    def derived(self, name: str, compute: Callable[[ModeRecord], T]) -> T:
        """`compute(self)`, kept until `events` changes: the summary and the end-of-run comparison
        both ask for each mode's metrics and step intervals."""
        key = (name, id(self.events), len(self.events))
        if key not in self._derived:
            self._derived[key] = compute(self)
        return self._derived[key]

    def graph_nodes(self, ca_id: int) -> list[GraphNode]:
        return load_graph_nodes(inside(self.path, f"{GRAPHS_DIR}/ca_{ca_id}.json", f"graph !{ca_id}"))

    def compile_artifacts(self) -> dict[str, dict[str, CompileArtifactEvent]]:
        """Per compile id (torch's), its recorded artifacts by name (schema COMPILE_ARTIFACTS), the
        newest of each; empty for a record made before they were kept."""
        found: dict[str, dict[str, CompileArtifactEvent]] = {}
        for event in self.of(CompileArtifactEvent):
            found.setdefault(event.compile_id, {})[event.artifact] = event
        return found

    def artifact_text(self, event: CompileArtifactEvent) -> str:
        """The artifact's text; UnreadableInput when its file is gone, points outside the record or
        is larger than any the writer writes (MAX_TEXT_FILE_BYTES, refused before it is read: its
        readers parse it, a guard tree or a stack, or print it whole, where a part read as if it were
        the whole would mislead)."""
        path = inside(self.path, event.file, f"compile artifact {event.artifact} of {event.compile_id}")
        try:
            return read_record_bytes(path, max_bytes=MAX_TEXT_FILE_BYTES, what="text file").decode("utf-8", errors="replace")
        except OSError as exc:
            raise UnreadableInput(f"compile artifact {event.file} of {event.compile_id}: {exc.strerror or exc}") from None


_ENDED_EARLY_WORDS = {STATUS_INTERRUPTED: "the run was interrupted", STATUS_KILLED: "cagtool's process was killed"}


class RunRecord(Struct):
    path: Path
    meta: RunMeta
    modes: dict[str, ModeRecord]

    def ended_early_words(self) -> str | None:
        """How the run ended early, in words ("the run was interrupted": Ctrl-C, SIGTERM or SIGHUP; or
        its cagtool process was killed), as run.json says; None when it ended normally or still runs."""
        return _ENDED_EARLY_WORDS.get(self.meta.status)

    def not_run(self) -> list[str]:
        """The modes (repetitions: `ca.2`) run.json lists that a stopped run never started. The
        parent notes a mode's exit code as soon as its process ends, and a process started ahead whose
        turn never came is removed unrecorded: no record and no exit code is a mode that never ran,
        not one that died (a mode of a run that ended normally with neither stays `missing`)."""
        if self.ended_early_words() is None:
            return []
        codes = self.meta.mode_exit_codes or {}
        return [name for name in self.meta.modes if name not in self.modes and name not in codes]

    def mode(self, name: str | None = None, rank: int | None = None) -> ModeRecord:
        """The named mode, or the most informative one the run asked for (ca, then aot, then
        eager; an error when that one left no record, never another in its place); with
        `rank`, that rank's record of it (the main process's or a followed process's)."""
        record = self._mode(name)
        if rank is None:
            return record
        ranks = record.ranks()
        if rank not in ranks:
            have = ", ".join(str(r) for r in ranks) or "none"
            raise UnreadableInput(f"run {self.path}, mode {record.mode!r} has no rank {rank} (ranks: {have})")
        return ranks[rank]

    def default_mode_name(self) -> str | None:
        """The most informative mode the run asked for (ca, then aot, then eager), whether or
        not it left a record; a record that run.json does not list counts as asked for."""
        asked = [*self.meta.modes, *self.modes]
        for candidate in reversed(MODES):
            if candidate in asked:
                return candidate
        # A run of another kind of mode: an imported log's one mode, `imported`.
        return asked[0] if asked else None

    def _mode(self, name: str | None) -> ModeRecord:
        if name is not None:
            if name not in self.modes:
                have = ", ".join(self.modes) or "none"
                if name not in (*MODES, IMPORTED_MODE):  # no mode cagtool records: the argument is wrong, not the run
                    raise UsageError(f"--mode: expected one of {', '.join((*MODES, IMPORTED_MODE))}, got {name!r} (run {self.path} has: {have})")
                raise UnreadableInput(f"run {self.path} has no mode {name!r} (it has: {have})")
            return self.modes[name]
        # Never another mode in place of the one asked for: a ca mode that died before writing
        # its record must not be read as eager's "0 CA graphs".
        default = self.default_mode_name()
        if default is None or not self.modes:
            raise UnreadableInput(f"run {self.path} has no mode records")
        if default not in self.modes:
            have = ", ".join(self.modes) or "none"
            raise UnreadableInput(
                f"run {self.path}: mode {default!r} left no record (the process did not start or was killed); "
                f"recorded modes: {have} (--mode to read one)"
            )
        return self.modes[default]


def read_json_object(path: Path, what: str, missing_hint: str = "") -> dict:
    """A JSON object from a file, or one clear UnreadableInput line saying what is wrong (a file over
    MAX_JSON_FILE_BYTES is refused unread)."""
    try:
        text = read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise UnreadableInput(f"{what} not found: {path}{missing_hint}") from None
    except OSError as exc:
        raise UnreadableInput(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UnreadableInput(f"{what} {path} is not UTF-8 text (bad byte at offset {exc.start}): corrupt") from None
    try:
        data = json_loads(text)
    except ValueError as exc:
        raise UnreadableInput(f"{what} {path} is not valid JSON ({json_error_words(exc)})") from None
    if not isinstance(data, dict):
        raise UnreadableInput(f"{what} {path} is not a JSON object")
    return data


def json_error_words(exc: ValueError) -> str:
    """What json said is wrong with a document, for a one-line error: a json.JSONDecodeError's
    message and line, or the ValueError json raises for a number it will not read (an integer of
    more than 4300 digits: Python's int_max_str_digits), without its advice to the programmer."""
    message, line = getattr(exc, "msg", None), getattr(exc, "lineno", None)
    if isinstance(message, str) and isinstance(line, int):
        return f"{message} at line {line}"
    return str(exc).split("; use ")[0] or type(exc).__name__


def json_loads(text: str | bytes) -> Any:
    """`json.loads(text)`, decoded by msgspec where msgspec can (the same value for every document
    both read): every report command reads record files, and `import json` alone is 5 M
    instructions, a third of what `cagtool runs` spends reading its ten runs. What msgspec
    refuses (NaN, which json writes for a float nan, numbers past a float's range, lone
    surrogates, bad JSON) is json's to read, or to word the error of (a json.JSONDecodeError)."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        pass
    import json

    try:
        return json.loads(text)
    except RecursionError:  # nested deeper than either decoder goes: damaged, as bad JSON is
        raise json.JSONDecodeError("nested too deeply", text if isinstance(text, str) else "", 0) from None


def check_format(
    data: dict, expected: str, path: Path, what: str = "cagtool record", version_key: str = "schema_version", readable: int = SCHEMA_VERSION
) -> int:
    """The document's format name and integer version, checked: a newer version than this cagtool
    reads is refused. Returns the version."""
    if data.get("format") != expected:
        raise UnreadableInput(f"{path} is not a {what} (format {data.get('format')!r}, expected {expected!r})")
    version = data.get(version_key)
    if not isinstance(version, int):
        raise UnreadableInput(f"{path} has no integer {version_key}")
    if version > readable:
        raise UnreadableInput(f"{path} has {version_key} {version}, newer than this cagtool reads ({readable}); upgrade cagtool")
    return version


_KIND_PREFIX = '{"kind": "'


def load_mode(path: Path, strict: bool = False, kinds: frozenset[str] | set[str] | None = None, events: bool = True, columns: bool = False) -> ModeRecord:
    """Read one mode directory and the records of the processes it followed (procs/*).
    Lenient by default: bad lines and unknown kinds are counted; with strict=True either is an
    error. With `kinds`, only events of those kinds are built (the others are only counted in
    `kind_counts`): what lets a report over a 100,000-event record stay fast. With events=False
    only the manifests are read (listing runs). With columns=True, a record whose sidecar matches
    its events.jsonl holds its step, backward and optimizer-step events as `columns` (readers of
    `of` see no difference; readers of `events` would miss them, hence opt-in)."""
    confine_reads(path)
    record = _load_one(Path(path), strict, kinds, events, columns)
    procs = Path(path) / PROCS_DIR
    if procs.is_symlink():  # the folder of process records planted as a link to one elsewhere
        raise UnreadableInput(f"{procs} is a symbolic link; a record's files are read only as regular files, never through a link")
    if procs.is_dir():
        for child in sorted(procs.iterdir(), key=_process_sort_key):
            if child.is_symlink():  # a process record planted as a link to one elsewhere
                raise UnreadableInput(f"process record {child} is a symbolic link; refusing to read it")
            if (child / MANIFEST_FILE).exists():
                record.processes[child.name] = _load_one(child, strict, kinds, events, columns)
            elif strict and child.is_dir():
                raise UnreadableInput(f"process record {child} has no manifest (--strict)")
    _number_workers(record)
    ranked = [r for r in record.ranks().values() if r.worker is None]  # workers meet at no collective
    if len(ranked) > 1:
        for rank_record in ranked:
            rank_record._peers = tuple(other for other in ranked if other is not rank_record)
    return record


def _trained(record: ModeRecord) -> bool:
    """Whether the record holds a training step or a backward call (counted, built or not)."""
    return any(record.kind_counts.get(kind, 0) for kind in (StepEvent.kind, BackwardEvent.kind))


def _number_workers(record: ModeRecord) -> None:
    """Number the mode's training workers (ModeRecord.worker): where no process of the mode has a
    rank and its main process trained nothing, the processes it started that trained, in start
    order. A job whose main process trains keeps its children as processes it started."""
    everyone = (record, *record.processes.values())
    if not record.processes or any(r.rank is not None for r in everyone) or _trained(record):
        return
    trainers = [r for r in sorted(record.processes.values(), key=_start_order) if _trained(r)]
    for number, worker in enumerate(trainers):
        worker.worker = number


def peers(record: ModeRecord) -> tuple[ModeRecord, ...]:
    """The other ranks' records of `record`'s mode, where it is one rank of several."""
    return record._peers


def _check_rank_fields(manifest: ModeManifest, where: Path) -> None:
    """Reports count ranks up to a record's world size: one beyond MAX_WORLD_SIZE (a forged or
    damaged 10**15) would hang them, and is refused (exit 3), as is such a rank."""
    process = manifest.process or {}
    for name in ("rank", "world_size"):
        value = process.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_WORLD_SIZE:
            raise UnreadableInput(f"mode manifest {where}: process {name} {value if value < 10**30 else 'over 10**30'} "
                                  f"is beyond any job's ({MAX_WORLD_SIZE} ranks at most)")


def _process_sort_key(path: Path) -> tuple[int, int, int, str]:
    """rank0, rank0.attempt1, rank1, ..., then pid records, each numerically."""
    name, _, attempt = path.name.partition(".attempt")
    later = int(attempt) if attempt.isdigit() else 0
    for order, prefix in enumerate(("rank", "pid")):
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            return (order, int(name[len(prefix) :]), later, path.name)
    return (2, 0, 0, path.name)


def _load_one(path: Path, strict: bool, kinds: frozenset[str] | set[str] | None, read_events: bool = True, columns: bool = False) -> ModeRecord:
    data = read_json_object(path / MANIFEST_FILE, "mode manifest")
    check_format(data, MODE_FORMAT, path / MANIFEST_FILE)
    try:
        manifest = mode_manifest_from_dict(data)
    except TypeError as exc:
        raise UnreadableInput(f"mode manifest {path / MANIFEST_FILE} is malformed: {exc}") from None
    _check_rank_fields(manifest, path / MANIFEST_FILE)
    read_dead_writer_as_killed(manifest, path)
    # An old schema is converted to the current one below (record/upgrade.py): read what that needs.
    asked = kinds
    kinds = kinds_to_read(manifest.schema_version, kinds)
    columns = columns and reads_columns(manifest.schema_version)
    events: list[Event] = []
    skipped = 0
    unknown: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    column_events: dict[str, EventColumns] = {}
    events_path = path / EVENTS_FILE
    if not read_events:
        pass  # manifests only (listing runs): the stream is neither read nor counted
    elif events_path.exists():
        entries: list[tuple[int, str]] = []  # (line number, text) of the lines to build events from
        # The line prefixes of the kinds not asked for: one startswith per line picks them out.
        unwanted = tuple(f'{_KIND_PREFIX}{kind}"' for kind in EVENT_TYPES if kind not in kinds) if kinds is not None and not strict else ()
        # The step, backward and optimizer-step lines as columns, from the sidecar the writer left
        # when it closed the record, used only when derived from exactly these bytes: known from
        # the file's size and time when the sidecar recorded them (then only the other lines are
        # read), else checked against the bytes themselves (record/columns.py, `read_sidecar`).
        sidecar = None
        stream: bytes | None = None
        if columns:
            from cagtool.record.columns import read_sidecar  # only readers that asked for columns pay its import

            if events_path.is_symlink():  # the sidecar is checked against the events' own file, never a link's target
                raise UnreadableInput(f"{events_path} is a symbolic link; a record's files are read only as regular files, never through a link")
            sidecar = read_sidecar(path, events_stat=events_path.stat())
            if sidecar is None:
                stream = read_record_bytes(events_path, MAX_EVENT_LINE_BYTES)
                sidecar = read_sidecar(path, stream)
        else:
            stream = read_record_bytes(events_path, MAX_EVENT_LINE_BYTES)
        lines: Iterable[tuple[int, str | None]]
        if sidecar is not None:
            for kind, held in sidecar.columns.items():
                if held.count:
                    counts[kind] += held.count
                if kinds is None or kind in kinds:
                    column_events[kind] = held
            spans = _read_spans(events_path, [(start, end) for _, start, end in sidecar.other]) if stream is None else [stream[s:e] for _, s, e in sidecar.other]
            lines = [(number, _utf8_or_none(raw)) for (number, _, _), raw in zip(sidecar.other, spans)]
        else:
            assert stream is not None
            lines = enumerate(_stream_lines(stream, kinds, unwanted, counts, entries), start=1)
            if entries:
                unwanted = ()
        kind_at = len(_KIND_PREFIX)
        # Whether every line kept is one JSON object's text (as far as its ends tell), checked in the
        # loop below; lines the kinds filter already collected are checked by _decode_events (None).
        shaped: bool | None = None if entries else True
        for number, line in lines:
            if line is None:
                # Corrupt bytes are a bad line like any other: counted, or fatal with --strict.
                if strict:
                    raise UnreadableInput(f"{events_path}: line {number} is not UTF-8 text (--strict)") from None
                skipped += 1
                continue
            if unwanted and line.startswith(unwanted) and line.rstrip().endswith("}"):
                counts[line[kind_at : line.find('"', kind_at)]] += 1
                continue
            if not (line.startswith("{") and line.endswith("}")):
                if not line.strip():
                    continue
                # Not shaped as the writer writes lines: _decode_events checks them all one by one.
                shaped = bool(shaped) and line.lstrip().startswith("{") and line.rstrip().endswith("}")
            entries.append((number, line))
        for number, event in _decode_events(entries, shaped):
            if not isinstance(event, Event):
                if event.refused:
                    raise UnreadableInput(f"{events_path}: line {number}{event.problem}; {REFUSED}")
                if strict:
                    raise UnreadableInput(f"{events_path}: line {number}{event.problem} (--strict)")
                if event.unknown_kind is not None:
                    unknown[event.unknown_kind] += 1
                else:
                    skipped += 1
                continue
            counts[event.kind] += 1
            if kinds is None or event.kind in kinds:
                events.append(event)
        if sidecar is not None and any(counts[kind] != held.count for kind, held in sidecar.columns.items()):
            # An event of a column kind on a line the sidecar does not hold (its key spelled with a
            # JSON escape): the file order of that kind's events is not known here; read it all.
            return _load_one(path, strict, asked, read_events, columns=False)
    elif strict:
        raise UnreadableInput(f"{events_path} is missing (--strict)")
    # Older schemas are read as the current one: converted here, in the events and the columns alike.
    grouped: dict[type, list[Event]] | None = None
    if read_events:
        events = upgrade_events(events, counts, manifest.schema_version, asked)
        grouped = _by_type(events)
        _refuse_below_a_tick(grouped, events_path)
    for held in column_events.values():
        held.step_shift = step_number_shift(manifest.schema_version)
    record = ModeRecord(path=path, manifest=manifest, events=events, skipped_lines=skipped, unknown_kinds=unknown, kind_counts=counts, columns=column_events)
    if grouped is not None:  # what `of` would build on its first call: built once, here
        record._by_type = ((id(events), len(events)), grouped)
    return record


def _by_type(events: list[Event]) -> dict[type, list[Event]]:
    grouped: dict[type, list[Event]] = {}
    for event in events:
        group = grouped.get(type(event))
        if group is None:
            grouped[type(event)] = [event]
        else:
            group.append(event)
    return grouped


def _refuse_below_a_tick(grouped: dict[type, list[Event]], events_path: Path) -> None:
    """UnreadableInput for an event whose measured time is above 0 but below a nanosecond (the one
    bound a msgspec Meta cannot say; the decoder checked the others as it built the events): a pass
    in C per timed field, not a Python test per line."""
    for cls, group in grouped.items():
        for name, bound in bounded_fields(cls).items():
            if below_least_nonzero(map(attrgetter(name), group), bound):
                index = first_out_of_bounds([getattr(event, name) for event in group], bound)
                problem = figure_problem(getattr(group[index or 0], name), bound)
                raise UnreadableInput(f"{events_path}: seq {group[index or 0].seq}: the {cls.kind} event's {name} {problem}; {REFUSED}")


def _stream_lines(data: bytes, kinds: frozenset[str] | set[str] | None, unwanted: tuple[str, ...], counts: Counter[str], entries: list[tuple[int, str]]) -> list[str | None]:
    """The stream's lines (None: not UTF-8), or none when the kinds filter ran: it counts the
    unwanted lines in `counts` and puts the others, numbered, in `entries`."""
    try:
        text = data.decode("utf-8")
        if unwanted:
            # The per-line filter below, over the whole stream in C: each unwanted line counted
            # and blanked (line numbers kept). The Python loop was most of `recompiles --explain`.
            pattern = _unwanted_lines(tuple(sorted(kind for kind in EVENT_TYPES if kind not in kinds)))  # type: ignore[operator]
            # Each match starts at its line's newline (one is put before the first line): a
            # literal prefix lets the regex engine jump from line to line instead of trying a
            # `^` at every character (3 x 10 MB in `summary`: 0.1 s per mode -> 0.03 s).
            # One split gives [gap, kind, gap, kind, ..., gap]: each unwanted line's kind, and
            # between them the other lines, each "\n" + its text (a gap is "" between two
            # unwanted lines): one regex pass instead of a findall, a sub and a third scan.
            parts = pattern.split("\n" + text)
            counts.update(parts[1::2])
            gaps = parts[::2]
            newlines = 0  # the newlines in the gaps before this one: each unwanted line has one
            for index in [i for i, gap in enumerate(gaps) if gap]:
                lines = gaps[index].split("\n")  # "" first: a gap starts with its first line's newline
                first = index + newlines  # the number of the line before this gap's first
                # Only the lines with text go on, numbered as in the file.
                entries.extend((first + offset, line) for offset, line in enumerate(lines) if offset and line.strip())
                newlines += len(lines) - 1
            return []
        return text.split("\n") if text else []  # the whole stream at once
    except UnicodeDecodeError:
        return [_utf8_or_none(raw) for raw in data.split(b"\n")]


def _read_spans(path: Path, spans: list[tuple[int, int]]) -> list[bytes]:
    """The bytes of each (start, end) span of the file, read where they lie: the few lines a
    sidecar does not hold, without reading the steps between them."""
    if not spans:
        return []
    if len(spans) > 4096:  # many short reads cost more than one long one
        data = read_record_bytes(path, MAX_EVENT_LINE_BYTES)
        return [data[s:e] for s, e in spans]
    fd = open_record_file(path)
    try:
        return [os.pread(fd, e - s, s) for s, e in spans]
    finally:
        os.close(fd)


@lru_cache(maxsize=8)
def _unwanted_lines(kinds: tuple[str, ...]) -> re.Pattern[str]:
    """A whole line the writer wrote for one of `kinds` (group 1: the kind): what the per-line test
    `line.startswith(prefix + kind + '"') and line.rstrip().endswith("}")` accepts."""
    names = "|".join(re.escape(kind) for kind in kinds)
    return re.compile("\n" + re.escape(_KIND_PREFIX) + "(" + names + ')"[^\n]*\\}[^\\S\n]*(?=\n|\\Z)')


def _utf8_or_none(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _BadLine(Struct, frozen=True):
    """A line that gave no event: `problem` ends the loader's --strict message after the line
    number; `unknown_kind` is the kind of a well-formed line of a kind this cagtool does not know
    (counted, not skipped). `refused`: an event whose figure is outside its range (NaN, negative,
    beyond any run: record/bounds.py), which refuses the record, --strict or not: skipped, a forged
    step time would leave the figures of the others unsaid."""

    problem: str
    unknown_kind: str | None = None
    refused: bool = False


def _decode_events(entries: list[tuple[int, str]], shaped: bool | None = None) -> Iterator[tuple[int, Event | _BadLine]]:
    """(line number, its event or what is wrong with it) per line. When every line is one JSON
    object, as the writer writes them, all are decoded and validated in one msgspec call;
    otherwise (or when any line is bad) line by line, so a bad line costs only itself."""
    if shaped is None:  # the caller did not look at the lines' ends while collecting them
        shaped = all(text.lstrip().startswith("{") and text.rstrip().endswith("}") for _, text in entries)
    if entries and shaped:
        events = decode_events([text for _, text in entries])
        if events is not None and len(events) == len(entries):  # not so for a line holding two objects
            yield from zip((number for number, _ in entries), events)
            return
    for number, text in entries:
        yield number, _decode_event(text)


def _decode_event(text: str) -> Event | _BadLine:
    try:
        return decode_event(text)
    except msgspec.DecodeError:
        pass
    # Not a valid event to msgspec: json tells a damaged line from a valid one msgspec does not
    # read (a NaN or Infinity, json's spelling, which the record keeps) and from an unknown kind.
    try:
        value = json_loads(text)
    except ValueError:
        return _BadLine(" is not a JSON object")
    if not isinstance(value, dict):
        return _BadLine(" is not a JSON object")
    kind = value.get("kind")
    try:
        event = event_from_value(value)
    except msgspec.ValidationError as exc:
        cls = EVENT_TYPES[kind]
        for name, bound in bounded_fields(cls).items():
            problem = figure_problem(value.get(name), bound)
            if problem is not None:
                return _BadLine(f": the {kind} event's {name} {problem}", refused=True)
        return _BadLine(f": {cls.__name__}: {exc}")
    if event is None:
        return _BadLine(f": unknown event kind {kind!r}", unknown_kind=str(kind))
    return event


def resolve_run_path(path: str | Path | None) -> Path:
    """A run directory from what the user typed: a run dir, a mode dir inside one, or None for the latest."""
    if path is None or str(path) == "":
        return latest_run()
    candidate = Path(path)
    if not candidate.exists():
        raise UnreadableInput(f"no run at {candidate}")
    given = candidate
    if candidate.is_file():  # a file of a run (report.html, run.json, a mode's events.jsonl): its run
        candidate = candidate.parent
    if (candidate / RUN_META_FILE).exists():
        return candidate
    if (candidate / MANIFEST_FILE).exists() and (candidate.parent / RUN_META_FILE).exists():
        return candidate.parent
    if given.is_file():
        raise UnreadableInput(f"{given} is a file, not a cagtool run directory (nor a file of one: no {RUN_META_FILE} beside it)")
    raise UnreadableInput(f"{candidate} is not a cagtool run directory (no {RUN_META_FILE})")


_MODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def load_run(path: str | Path | None = None, strict: bool = False, kinds: frozenset[str] | set[str] | None = None, events: bool = True, columns: bool = False) -> RunRecord:
    run_path = resolve_run_path(path)
    confine_reads(run_path)
    data = read_json_object(run_path / RUN_META_FILE, "run record")
    check_format(data, RUN_FORMAT, run_path / RUN_META_FILE)
    try:
        meta = run_meta_from_dict(data)
    except TypeError as exc:
        raise UnreadableInput(f"run record {run_path / RUN_META_FILE} is malformed: {exc}") from None
    # Every report pools the records run.json lists: a name listed twice, or a record that is a
    # copy of another (the same process), would count one process as several and narrow the
    # gate's noise to nothing.
    listed = Counter(meta.modes)
    twice = [mode for mode, count in listed.items() if count > 1]
    if twice:
        raise UnreadableInput(f"run record {run_path / RUN_META_FILE} lists mode {twice[0]!r} {listed[twice[0]]} times; a mode is recorded once")
    # A mode's name is a directory's and is printed by every report: cagtool writes eager, aot,
    # ca, imported and their repetitions (ca.3); a name with a terminal's control characters, a
    # path separator or a space is not one of its records.
    odd = [mode for mode in meta.modes if not isinstance(mode, str) or not _MODE_NAME.fullmatch(mode)]
    if odd:
        raise UnreadableInput(f"run record {run_path / RUN_META_FILE} lists a mode named {odd[0]!r}: a mode's name is letters, digits, "
                              "'_', '-' and '.' (eager, ca.3), at most 64 characters; refusing to read it")
    modes: dict[str, ModeRecord] = {}
    for mode in meta.modes:
        mode_path = inside(run_path, mode, f"mode {mode!r} of {run_path / RUN_META_FILE}")
        if (mode_path / MANIFEST_FILE).exists():
            modes[mode] = load_mode(mode_path, strict=strict, kinds=kinds, events=events, columns=columns)
        elif strict:
            raise UnreadableInput(f"mode {mode!r} of {run_path} has no manifest (--strict)")
    _refuse_copies(run_path, modes)
    read_vanished_as_killed(meta, [m.manifest for m in modes.values()])
    return RunRecord(path=run_path, meta=meta, modes=modes)


def _refuse_copies(run_path: Path, modes: dict[str, ModeRecord]) -> None:
    """UnreadableInput when two mode records are the same process (a mode directory copied to
    another name, `ca` to `ca.3`): each repetition is a process of its own, started anew. Only the
    modes' own records are compared: a merged run's followed records come from other hosts."""
    seen: dict[str, str] = {}
    for name, record in modes.items():
        identity = process_identity(record.manifest)
        if identity is None:
            continue
        if identity in seen:
            pid = record.manifest.process.get("pid")
            raise UnreadableInput(
                f"run {run_path}: {name} is a copy of {seen[identity]} (the same process: pid {pid}, started {record.manifest.started_at}); "
                "a repetition is a process of its own"
            )
        seen[identity] = name


def list_runs(root: Path | None = None) -> list[Path]:
    """Run directories under root, oldest first: by when each run says it began (run.json's
    `created_at`), but never later than when its run.json was last written on this machine (the
    file's change time, ctime, which no program can set back: a write, a copy or a checkout sets it
    to the moment it happened). A run.json is a text anyone can write: one planted in a checked-out
    `.cagtool/runs` is at most as new as its checkout, older than the run CI makes after it, and is
    never the latest run that `gate`, `baseline save`, `summary` or `report` read with no RUN. A
    run.json that says it began after it was written (beyond CLOCK_SKEW_S), or says no time
    (unreadable, corrupt), sorts first. Ties (runs begun in the same second) go by ctime, then name."""
    root = root or runs_dir()
    if not root.is_dir():
        return []
    # A link there is not a run cagtool made (it makes each run a directory): one planted in an
    # untrusted checkout's `.cagtool/runs` would be the newest run read, and `report` written into it.
    # A run.json that is no regular file (a FIFO, a link) is listed, and refused where it is read:
    # `runs` says why, rather than leaving the run out.
    found = [p for p in root.iterdir() if not p.is_symlink() and p.is_dir() and os.path.lexists(p / RUN_META_FILE)]
    return sorted(found, key=_run_time)


# How far ahead of this machine's clock the clock of the machine that wrote a run may be (a run
# downloaded from another host): a run.json saying it began later than that after it was written
# is not believed.
CLOCK_SKEW_S = 300.0


def _run_time(run: Path) -> tuple[float, int, str]:
    """(when the run began as far as this machine can tell, its run.json's ctime in ns, its name):
    `list_runs`' order."""
    try:
        written_ns = os.lstat(run / RUN_META_FILE).st_ctime_ns
    except OSError:
        return (0.0, 0, run.name)
    written = written_ns / 1e9
    created = _created_at(run)
    if created is None or created > written + CLOCK_SKEW_S:
        return (0.0, written_ns, run.name)  # no time to trust (a forged "2099"): first
    # created_at is to the second: the run began before its next second, never after its file was written.
    return (min(created + 1.0, written), written_ns, run.name)


def _created_at(run: Path) -> float | None:
    """run.json's `created_at` as seconds since the epoch (UTC where it names no zone); None for a
    run.json that is unreadable, corrupt or has none (its ctime alone then places it)."""
    from datetime import datetime, timezone

    try:
        data = json_loads(read_record_bytes(run / RUN_META_FILE, max_bytes=MAX_JSON_FILE_BYTES))
        text = data.get("created_at") if isinstance(data, dict) else None
        if not isinstance(text, str):
            return None
        stamp = datetime.fromisoformat(text)
        return (stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=timezone.utc)).timestamp()
    except (OSError, ValueError, OverflowError, UnreadableInput):
        return None


def latest_run(root: Path | None = None) -> Path:
    runs = list_runs(root)
    if not runs:
        where = root or runs_dir()
        raise UnreadableInput(f"no runs recorded yet under {where}; start one with: cagtool run train.py")
    return runs[-1]


def inside(root: Path, relative: str, what: str) -> Path:
    """`root / relative`, refused (UnreadableInput) unless it stays inside `root`: names and paths
    read from a record (a mode name in run.json, a graph event's code_file) are data, and a
    `../../other` in one must not make a report read another run or any file on the machine."""
    candidate = Path(relative)
    if not relative or candidate.is_absolute() or ".." in candidate.parts:
        raise UnreadableInput(f"{what}: {relative!r} points outside the record; refusing to read it")
    if "\0" in relative:  # which os.open and os.stat refuse with a ValueError, and os.path.islink below reads as no link
        raise UnreadableInput(f"{what}: {relative!r} holds a NUL byte, which no file name can (a damaged or forged record); refusing to read it")
    # A relative name without `..` leads out of `root` only through a symbolic link under `root`,
    # and cagtool writes none in a record: one there was planted (`ca/graphs -> /elsewhere`, whose
    # files the last name's O_NOFOLLOW would not see), and is refused wherever it leads. An lstat
    # per name below `root` (`root` itself is the user's: a link they typed is theirs).
    path = str(root)
    for part in candidate.parts:
        path = os.path.join(path, part)
        if os.path.islink(path):
            raise UnreadableInput(f"{what}: {path} is a symbolic link; a record's files are read only as regular files, never through a link")
    return root / candidate


def load_graph_nodes(path: Path) -> list[GraphNode]:
    return load_graph_file(path).nodes


def load_graph_columns(path: Path) -> GraphColumns:
    """The graph file's nodes as columns (what diff-graphs reads)."""
    from cagtool.record.graph_file import graph_columns

    document = load_graph_file(path)
    return graph_columns(document.nodes, document.symbols)


def load_graph_file(path: Path) -> GraphFile:
    """A graph file, its nodes typed and checked by msgspec; UnreadableInput, worded as for every
    other record file, for a file that is missing, not JSON, of another format or a newer
    version, or whose nodes are malformed."""
    # The graph file's module is imported by the readers of graphs alone.
    from cagtool.record.graph_file import GRAPH_FORMAT, decode_graph_file, graph_file_from_value

    try:
        document = decode_graph_file(read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES))
    except (OSError, msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
        document = None
    if document is not None and document.format == GRAPH_FORMAT and document.schema_version <= SCHEMA_VERSION:
        return document
    # What msgspec refused (or a foreign format or version): the error every record file gives.
    data = read_json_object(path, "graph file")
    check_format(data, GRAPH_FORMAT, path, what="cagtool graph file")
    if not isinstance(data.get("nodes"), list):
        raise UnreadableInput(f"graph file {path} has no node list")
    try:
        return graph_file_from_value(data)
    except msgspec.ValidationError as exc:
        raise UnreadableInput(f"graph file {path} is malformed: {exc}") from None
