"""Is the process that wrote a record still alive? Lets a reader tell a run that is still going
from one whose process vanished (SIGKILL, OOM killer, a machine reboot): the latter reads as
"killed", never as "running"."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def hostname() -> str:
    """This machine's name, as socket.gethostname() gives it (on Linux and macOS both read the
    kernel's nodename): without importing socket, ~5 ms of every report command's start."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket  # Windows

    return socket.gethostname()


def proc_stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses,
    so the split is at its last `)`): [0] is the state, [1] the parent's pid, [19] the start time.
    None where there is no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    _, paren, fields = stat.rpartition(b")")
    return fields.split() if paren else None


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): a pid reused
    by another process has a different one."""
    fields = proc_stat(pid)
    try:
        return int(fields[19]) if fields is not None else None
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
            if isinstance(manifest.options, dict):
                manifest.options["closed_by"] = "reader"  # what the process held in memory died with it
            if manifest.exception is None:
                manifest.exception = ExceptionInfo("killed", "the cagtool process vanished before this record was closed")


def read_dead_writer_as_killed(manifest: Any, record_dir: Path | None = None) -> None:
    """A mode record still "running" whose own process is gone: a followed rank or worker stopped
    by SIGTERM or SIGHUP when its threads' stacks are in `record_dir`/signal_stacks (the signal's
    default action: capture/processes/lifeline.py, StopStacks), else killed by SIGKILL or the OOM
    killer while the rest of the job went on. Needs the manifest's `process` to carry hostname and
    start_ticks (process_info adds them); older records are judged by the pid alone only when it
    is certainly gone."""
    from cagtool.record.manifest import ExceptionInfo
    from cagtool.record.schema import STATUS_INTERRUPTED, STATUS_KILLED, STATUS_RUNNING

    if manifest.status != STATUS_RUNNING or not process_gone(manifest.process):
        return
    if isinstance(manifest.options, dict):
        manifest.options["closed_by"] = "reader"  # what the process held in memory died with it
    ended = ended_marker(record_dir) if record_dir is not None else None
    if ended is not None:
        status, code = ended
        manifest.status, manifest.exit_code = status, code
        if manifest.exception is None and status != "finished":
            manifest.exception = ExceptionInfo(status, f"ended with exit code {code}; its manifest could not be rewritten (disk full)")
        if isinstance(manifest.options, dict):
            manifest.options["closed_by"] = "marker"  # ended normally; only its last figures could not be written
        return
    for name, number in STOP_SIGNALS_BY_NAME.items():
        stopped = signal_stop_exception(name, record_dir) if record_dir is not None else None
        if stopped is None or not stopped["traceback"]:
            continue
        manifest.status = STATUS_INTERRUPTED
        manifest.exit_code = 128 + number  # the shell's convention, as for the main process
        if manifest.exception is None:
            manifest.exception = ExceptionInfo(**stopped)
        return
    manifest.status = STATUS_KILLED
    if manifest.exception is None:
        manifest.exception = ExceptionInfo("killed", "its process vanished before it closed this record (SIGKILL, OOM killer)")


ENDED_MARKER_PREFIX = ".cagtool-ended."  # record/writer.py: ended_marker_name


def ended_marker(record_dir: Path) -> tuple[str, int | None] | None:
    """(status, exit code) from the empty file a process leaves when it ended but its full disk
    had no room to rewrite its manifest; None when there is none."""
    from cagtool.record.schema import STATUS_FAILED, STATUS_FINISHED, STATUS_INTERRUPTED

    try:
        names = [entry.name for entry in os.scandir(record_dir) if entry.name.startswith(ENDED_MARKER_PREFIX)]
    except OSError:
        return None
    for name in sorted(names):
        status, _, code = name[len(ENDED_MARKER_PREFIX):].partition(".")
        if status not in (STATUS_FINISHED, STATUS_FAILED, STATUS_INTERRUPTED):
            continue
        try:
            return status, int(code) if code else None
        except ValueError:
            continue
    return None


def signal_stop_exception(name: str, record_dir: Path) -> dict[str, str]:
    """The `exception` of a record whose process a stop signal ended at its default action: where
    the script was, from the stacks it left (`record_dir`/signal_stacks/NAME.txt; traceback ""
    when there are none)."""
    from cagtool.record.schema import SIGNAL_STACKS_DIR

    stacks = Path(record_dir) / SIGNAL_STACKS_DIR / f"{name}.txt"
    text = _read_text(stacks)
    if not text:
        return {"type": name, "message": f"stopped by {name} before it closed this record", "traceback": ""}
    where = _script_frame(text)
    doing = torch_activity(text)
    return {"type": name, "message": f"stopped by {name} before it closed this record{f', in {where}' if where else ''}"
                                     f"{f', while {doing}' if doing else ''}; every thread's stack then: {stacks}",
            "traceback": text}


# A compile on the signalled thread's stack: Dynamo's entry (convert_frame.py `_compile`, every
# compile of a frame, a compiled-autograd graph's first call included), then the innermost compiler
# inside it. A job stopped after minutes in one compile is told so.
_COMPILERS_INSIDE_DYNAMO = (("/torch/_inductor/compile_fx.py", "Inductor"), ("/torch/_functorch/aot_autograd.py", "AOTAutograd"))


def torch_activity(stacks: str) -> str:
    """"torch was compiling (Dynamo / AOTAutograd / Inductor)" when the signalled thread (faulthandler's
    "Current thread" block) was inside Dynamo's compile of a frame; "" otherwise: a compiled
    function running (its wrappers are torch's too) is no compile."""
    import re

    blocks = re.split(r"^(?=(?:Current thread|Thread) 0x)", stacks, flags=re.M)
    current = next((block for block in blocks if block.startswith("Current thread")), "")
    frames = [(file.replace("\\", "/"), function) for file, function in re.findall(r'^\s+File "(.*)", line \d+ in (.*)$', current, flags=re.M)]
    if not any(file.endswith("/torch/_dynamo/convert_frame.py") and function == "_compile" for file, function in frames):
        return ""
    for file, _ in frames:  # innermost first
        for part, name in _COMPILERS_INSIDE_DYNAMO:
            if file.endswith(part):
                return f"torch was compiling ({name}, inside Dynamo's compile)"
    return "torch was compiling (Dynamo)"


# The stop signals whose stacks a process leaves (lifeline.StopStacks.SIGNALS), by number
# (Linux's; without importing signal).
STOP_SIGNALS_BY_NAME = {"SIGTERM": 15, "SIGHUP": 1}


def _read_text(path: Path, limit: int = 20000) -> str:
    """The start of a record's stacks file; "" when there is none, or it is not a regular file (a
    link planted there is not followed, a FIFO never waits for a writer): the stacks only add to
    what the record says, they are never worth refusing it for."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.regular_files import read_record_prefix

    try:
        return read_record_prefix(path, limit)[0].decode("utf-8", "replace")
    except (OSError, UnreadableInput):
        return ""


def _cagtool_path_pattern() -> str:
    """A regex part matching a path inside cagtool's package on any machine: `cagtool/` followed by
    one of the package's own entries (its subpackages and top-level modules, as this install has
    them). The recording machine's package may sit anywhere (a checkout, a venv), so its path is
    matched by shape; a user's own folder named cagtool holds other names."""
    import re

    package = Path(__file__).resolve().parent.parent
    try:
        entries = sorted(entry.name for entry in os.scandir(package) if not entry.name.startswith((".", "__pycache__")))
    except OSError:
        entries = []
    names = [re.escape(name) + ("$" if name.endswith(".py") else r"[/\\]") for name in entries] or [r"capture[/\\]"]
    return r"cagtool[/\\](?:" + "|".join(names) + ")"


def _script_frame(stacks: str) -> str:
    """`file:line (function)` of the innermost frame that is the script's own, judged by its path
    as written on the machine that ran it: not Python's library (`.../lib/pythonX.Y/`), an
    installed package, cagtool's own code (the stop signal may land while cagtool writes an event
    the script's step made), or `<string>`. Taken from the signalled thread
    (faulthandler's "Current thread" block), else from the first thread that has one: the kernel
    may hand a process's signal to a thread with no Python frames (a gloo or NCCL worker), and
    faulthandler then marks no thread as current. "" when there is none."""
    import re

    not_script = re.compile(r"[/\\](?:lib[/\\]python\d|site-packages[/\\]|dist-packages[/\\]|" + _cagtool_path_pattern() + ")")

    def innermost(block: str) -> str:
        for file, line, function in re.findall(r'^\s+File "(.*)", line (\d+) in (.*)$', block, flags=re.M):
            if file.startswith("<") or not_script.search(file):
                continue
            return f"{file}:{line} ({function})"
        return ""

    blocks = re.split(r"^(?=(?:Current thread|Thread) 0x)", stacks, flags=re.M)
    current = [block for block in blocks if block.startswith("Current thread")]
    for block in current + [block for block in blocks if not block.startswith("Current thread")]:
        found = innermost(block)
        if found:
            return found
    return ""
