"""`cagtool import`: a run record built from TORCH_TRACE logs of a job cagtool did not run.

The record is a normal one with one mode, `imported`: the main process (rank 0, or the only
log) in <run>/imported/, every other rank in <run>/imported/procs/rank<N>/ (the multi-process
layout). Each manifest says where it came from under `imported` (files, envelopes read,
unknown envelopes, truncation, whether CA reasons were logged or inferred) and what a log
cannot hold (`not_in_log`): step times, optimizer steps, numerics, other modes, torch's counters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from cagtool.capture.run_dir import claim_run_dir
from cagtool.capture.versions import record_versions
from cagtool.record.writer import RecordWriter, write_run_meta
from cagtool.errors import UnreadableInput
from cagtool.record.manifest import ModeManifest, RunMeta
from cagtool.record.schema import IMPORTED_MODE, STATUS_FINISHED
from cagtool.trace_import.discover import ProcessLogs, find_logs
from cagtool.trace_import.log_reader import ReadStats, TraceLogReader
from cagtool.trace_import.translate import PEEK, WANTED_KINDS, GraphCache, RankTranslator, TranslationStats

PROCS_DIR = "procs"
NOT_IN_LOG = ["step times", "optimizer steps", "losses and final numerics", "other modes (eager, aot)", "torch counters", "peak RSS"]


@dataclass(frozen=True)
class ImportOptions:
    path: Path
    output: Path | None = None  # default: ./.cagtool/runs/import-<name>-<time>
    runs_root: Path = Path(".cagtool") / "runs"
    strict: bool = False
    cagtool_argv: tuple[str, ...] = ()


@dataclass
class ProcessImport:
    key: str
    rank: int | None
    mode_dir: Path
    read: ReadStats
    translated: TranslationStats


@dataclass
class ImportResult:
    path: Path
    processes: list[ProcessImport] = field(default_factory=list)
    not_logs: list[Path] = field(default_factory=list)  # files named like logs that were not: skipped

    @property
    def unknown_envelopes(self) -> int:
        return sum(sum(p.read.unknown.values()) for p in self.processes)

    @property
    def truncated(self) -> list[str]:
        return [p.key for p in self.processes if p.read.truncated_last_line]


def _run_dir(options: ImportOptions) -> Path:
    """The new record's directory, claimed as `cagtool run` claims its own (capture/run_dir.py)."""
    name = options.path.stem if options.path.is_file() else options.path.name
    return claim_run_dir(options.output, options.runs_root, f"import-{name or 'trace'}", IMPORTED_MODE)


def _iso(ts: float | None) -> str:
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _import_process(proc: ProcessLogs, mode_dir: Path, options: ImportOptions, versions: dict[str, str], world: int | None, cache: GraphCache) -> ProcessImport:
    mode_dir.mkdir(parents=True, exist_ok=True)
    first = proc.files[0]
    year = datetime.fromtimestamp(first.stat().st_mtime).year  # glog lines carry no year
    manifest = ModeManifest(
        mode=IMPORTED_MODE,
        argv=[],
        target={"kind": "trace_log", "name": str(first)},
        cwd=os.getcwd(),
        versions=dict(versions),
        backend="unknown",
        dynamic=False,
        started_at="",
    )
    writer = RecordWriter(mode_dir, manifest, clock_start=0.0)
    translator = RankTranslator(writer, year, cache, strict=options.strict)
    read = ReadStats()
    try:
        for log in proc.files:
            translator.log = str(log)
            reader = TraceLogReader(log, wanted=WANTED_KINDS, strict=options.strict, peek=PEEK)
            for envelope in reader.envelopes():
                translator.feed(envelope)
            read.add(reader.stats)
        translator.finish()
    finally:
        writer.close()
    stats = translator.stats
    if read.envelopes == 0:
        raise UnreadableInput(f"{first} holds no readable TORCH_TRACE envelope")
    if stats.torch_version:
        manifest.versions["torch"] = stats.torch_version
    manifest.started_at = _iso(stats.first_ts)
    manifest.ended_at = _iso(stats.last_ts)
    if stats.first_ts is not None and stats.last_ts is not None:
        # glog's times carry no year: a log read across a new year, or out of order, ends "before" it began.
        manifest.duration_s = max(stats.last_ts - stats.first_ts, 0.0)
    manifest.status = STATUS_FINISHED
    manifest.options = {"imported": True}
    manifest.imported = {
        "files": [str(f) for f in proc.files],
        **read.to_dict(),
        "ca_graphs": stats.ca_graphs,
        "ca_reasons": "logged" if stats.reasons_logged and not stats.reasons_inferred else ("inferred" if stats.reasons_inferred and not stats.reasons_logged else ("mixed" if stats.ca_graphs else "none")),
        "ca_reasons_logged": stats.reasons_logged,
        "ca_reasons_inferred": stats.reasons_inferred,
        "bad_figures": stats.bad_figures,
        "not_in_log": NOT_IN_LOG,
    }
    manifest.process = {
        "key": "main" if mode_dir.parent.name != PROCS_DIR else proc.key,
        "pid": None,
        "ppid": None,
        "rank": proc.rank,
        "local_rank": None,
        "world_size": world,
        "role": "main" if mode_dir.parent.name != PROCS_DIR else "child",
        "argv": [],
        "attempt": proc.attempt,
    }
    if stats.pgo_suggestion:
        manifest.options["pgo_suggestion"] = stats.pgo_suggestion
    if stats.handler_errors:
        manifest.options["structured_log_errors"] = {"count": stats.handler_errors, "last": stats.handler_last_error}
    writer.write_manifest()
    return ProcessImport(proc.key, proc.rank, mode_dir, read, stats)


def import_trace(options: ImportOptions) -> ImportResult:
    """Read the logs under options.path into a new run directory. Raises UnreadableInput (exit 3)
    for a missing or corrupt log (or, with strict, an unknown envelope or a truncated line)."""
    not_logs: list[Path] = []
    processes = find_logs(options.path, not_logs)
    if not_logs and options.strict:
        raise UnreadableInput(f"{not_logs[0]} is not a TORCH_TRACE log (--strict)")
    run_dir = _run_dir(options)
    versions = record_versions(None)  # torch's is read from the logs
    world = len({p.rank for p in processes if p.rank is not None}) or None
    meta = RunMeta(
        run_id=run_dir.name,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cagtool_argv=list(options.cagtool_argv),
        target={"kind": "trace_log", "name": str(options.path)},
        target_argv=[str(options.path)],
        cwd=os.getcwd(),
        modes=[IMPORTED_MODE],
        versions=dict(versions),
        machine={},
        options={
            "imported": True,
            "source": str(options.path),
            "processes": [p.key for p in processes],
            "world_size": world,
            "skipped_files": [str(p) for p in not_logs],
        },
    )
    write_run_meta(run_dir, meta)
    result = ImportResult(run_dir, not_logs=not_logs)
    main_dir = run_dir / IMPORTED_MODE
    cache = GraphCache()  # shared by the ranks: they usually log the same graphs
    try:
        for index, proc in enumerate(processes):
            mode_dir = main_dir if index == 0 else main_dir / PROCS_DIR / proc.key
            result.processes.append(_import_process(proc, mode_dir, options, versions, world, cache))
    except BaseException:
        meta.status = "failed"
        write_run_meta(run_dir, meta)
        raise
    torch_version = next((p.translated.torch_version for p in result.processes if p.translated.torch_version), "")
    if torch_version:
        meta.versions["torch"] = torch_version
    meta.status = STATUS_FINISHED
    meta.ended_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    meta.exit_code = None
    write_run_meta(run_dir, meta)
    return result

