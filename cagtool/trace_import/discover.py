"""Which trace logs a PATH names, and which process each belongs to: one log file, a TORCH_TRACE
directory of them, or a multi-rank directory (`dedicated_log_torch_trace_rank_<N>_*.log`).

A job its launcher restarted (torchrun --max-restarts) leaves one log per rank and attempt, all
named by the rank alone: each attempt is a new process, with its own compiled-autograd ids
counting from 0 again. Read as one stream they would invent recompiles, so each attempt is a
process of its own: the rank's logs are told apart by the process id in their glog prefix (or an
`attempt<K>` in the name, where a launcher or a user put one), oldest first."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from cagtool.errors import UnreadableInput
from cagtool.record.schema import MAX_WORLD_SIZE
from cagtool.trace_import.log_reader import looks_like_trace_log

_RANK = re.compile(r"rank_(\d+)")
_ATTEMPT = re.compile(r"attempt_?(\d+)")
_LOG_NAME = re.compile(r"^dedicated_log_torch_trace.*\.log$")


@dataclass
class ProcessLogs:
    """The log files of one process, oldest first."""

    key: str  # "rank<N>" (its later attempts "rank<N>.attempt<K>"), or "pid<N>"/"main" for logs without a rank
    rank: int | None
    files: list[Path] = field(default_factory=list)
    attempt: int = 0  # which start of the rank by its launcher, 0 the first


def _pid_of(path: Path) -> int | None:
    """The thread id of the first glog line: the process id of the job's main thread."""
    try:
        with path.open("rb") as handle:
            first = handle.readline()
    except OSError:
        return None
    parts = first.split(b" ", 3)
    return int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else None


def find_logs(path: Path, not_logs: list[Path] | None = None) -> list[ProcessLogs]:
    """The processes in PATH, the main one first: rank 0 (or the lowest rank; its last attempt)
    when ranks are known, else the first log. Raises UnreadableInput when PATH holds no trace log; files that
    are named like logs but are not go to `not_logs` (the caller reports them)."""
    path = Path(path)
    if not path.exists():
        raise UnreadableInput(f"no trace log at {path}")
    if not (path.is_file() or path.is_dir()):  # a FIFO would block the read, a device never ends
        raise UnreadableInput(f"{path} is not a regular file or a directory: not a TORCH_TRACE log")
    if path.is_file():
        candidates = [path]
    else:
        try:
            entries = sorted(path.iterdir())
        except OSError as exc:
            raise UnreadableInput(f"cannot read {path}: {exc.strerror or exc}") from None
        # A link in the folder is not read (a log folder handed over, a CI artifact, may hold one to
        # any file on the machine); the path named on the command line may be the user's own link.
        kept = [p for p in entries if not p.is_symlink()]
        links, entries = len(entries) - len(kept), kept
        named = [p for p in entries if p.is_file() and _LOG_NAME.match(p.name)]
        candidates = named or [p for p in entries if p.is_file() and p.suffix == ".log"]
        if not candidates:
            raise UnreadableInput(f"{path} holds no TORCH_TRACE log (dedicated_log_torch_trace*.log)"
                                  + (f"; {links} symbolic link{'s' if links != 1 else ''} in it not followed" if links else ""))
    logs = [p for p in candidates if looks_like_trace_log(p)]
    if not_logs is not None:
        not_logs.extend(p for p in candidates if p not in logs)
    if not logs:
        what = candidates[0] if len(candidates) == 1 else f"any of the {len(candidates)} .log files in {path}"
        raise UnreadableInput(f"{what} is not a TORCH_TRACE log (no glog-prefixed JSON envelope in its first lines)")
    by_key: dict[str, ProcessLogs] = {}
    starts: dict[int, list[object]] = {}  # per rank, what tells its attempts apart, in order seen
    for log in sorted(logs, key=lambda p: (p.stat().st_mtime, p.name)):
        match = _RANK.search(log.name)
        attempt = 0
        if match:
            digits = match.group(1)
            rank = int(digits) if len(digits) <= 30 else MAX_WORLD_SIZE + 1
            if rank > MAX_WORLD_SIZE:
                # The readers refuse a record saying such a rank: refused here, before a record is written.
                said = digits if len(digits) <= 30 else "over 10**30"
                raise UnreadableInput(f"{log}: its name says rank {said}, beyond any job's ({MAX_WORLD_SIZE} ranks at most); "
                                      "rename the log or leave it out")
            named = _ATTEMPT.search(log.name)
            start: object = ("named", int(named.group(1))) if named else ("pid", _pid_of(log))
            seen = starts.setdefault(rank, [])
            if start not in seen:
                seen.append(start)
            attempt = int(named.group(1)) if named else seen.index(start)
            key = f"rank{rank}" if attempt == 0 else f"rank{rank}.attempt{attempt}"
        else:
            rank = None
            pid = _pid_of(log)
            key = f"pid{pid}" if pid is not None else f"log{len(by_key)}"
        by_key.setdefault(key, ProcessLogs(key, rank, attempt=attempt)).files.append(log)
    processes = list(by_key.values())
    # The main record is the lowest rank's last attempt: the one a one-rank report shows.
    processes.sort(key=lambda p: (p.rank is None, p.rank if p.rank is not None else 0, -p.attempt))
    return processes
