"""Is the process that wrote a record still alive? Lets a reader tell a run that is still going
from one whose process vanished (SIGKILL, OOM killer, a machine reboot): the latter reads as
"killed", never as "running"."""

from __future__ import annotations

import os
from typing import Any


def hostname() -> str:
    """This machine's name, as socket.gethostname() gives it (on Linux and macOS both read the
    kernel's nodename): without importing socket, ~5 ms of every report command's start (issue 12)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket  # Windows

    return socket.gethostname()


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): a pid reused
    by another process has a different one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def this_process() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "hostname": hostname(), "start_ticks": _start_ticks(pid)}


def process_gone(process: dict[str, Any] | None) -> bool:
    """True when the recorded process is certainly not running any more: same host, and no
    process with that pid and start time. False when it runs, or cannot be known (another host,
    an old record without the field)."""
    if not isinstance(process, dict):
        return False
    pid = process.get("pid")
    if not isinstance(pid, int) or pid <= 0 or process.get("hostname") != hostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # exists, owned by someone else
    ticks = process.get("start_ticks")
    now = _start_ticks(pid)
    return isinstance(ticks, int) and now is not None and now != ticks


def read_vanished_as_killed(meta: Any, manifests: list[Any]) -> None:
    """A run.json still "running" whose cagtool process is gone was killed (SIGKILL, OOM killer):
    say so, and so do its mode manifests that were never closed (their process died with it)."""
    from cagtool.record.manifest import ExceptionInfo
    from cagtool.record.schema import STATUS_KILLED, STATUS_RUNNING

    if meta.status != STATUS_RUNNING or not process_gone(meta.process):
        return
    meta.status = STATUS_KILLED
    for manifest in manifests:
        if manifest.status == STATUS_RUNNING:
            manifest.status = STATUS_KILLED
            if manifest.exception is None:
                manifest.exception = ExceptionInfo("killed", "the cagtool process vanished before this record was closed")


def read_dead_writer_as_killed(manifest: Any) -> None:
    """A mode record still "running" whose own process is gone (a followed rank or worker killed
    by SIGKILL or the OOM killer, while the rest of the job went on): it was killed. Needs the
    manifest's `process` to carry hostname and start_ticks (process_info adds them); older records
    are judged by the pid alone only when it is certainly gone."""
    from cagtool.record.manifest import ExceptionInfo
    from cagtool.record.schema import STATUS_KILLED, STATUS_RUNNING

    if manifest.status != STATUS_RUNNING or not process_gone(manifest.process):
        return
    manifest.status = STATUS_KILLED
    if manifest.exception is None:
        manifest.exception = ExceptionInfo("killed", "its process vanished before it closed this record (SIGKILL, OOM killer)")
