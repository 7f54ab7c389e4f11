"""Signals between the cagtool parent and a mode child, and dying together.

The mode child's signal handling is the script's, as under python: SIGINT raises
KeyboardInterrupt, SIGTERM and SIGHUP keep their default action (the process dies at once, even
blocked in C code; `signal.getsignal` says SIG_DFL, so a framework that chains the previous
handler calls nothing of cagtool's), and a handler the script sets is the only one. While they
keep the default action, faulthandler's C-level handler leaves every thread's stack beside the
record (StopStacks) and the parent closes the record of the process that died (orchestrate.py).

The parent forwards SIGINT, SIGTERM and SIGHUP to the mode child unless the child already got
the same signal (a terminal's Ctrl-C or a `kill -- -PGID` reaches both): the child reports every
signal a Python handler receives on a pipe (Python's wakeup fd, written from the C-level handler,
so it works while the child is busy in C code). A script that sets its own wakeup fd (asyncio's
`add_signal_handler` does) gets it through a relay that reports to the parent first (WakeupRelay),
so the parent still knows. A signal at its default action needs no report: the child is gone.

The child asks the kernel for PARENT_DIED when the parent dies (PR_SET_PDEATHSIG): a signal the
script has no business with, so a SIGKILLed parent leaves no orphan training on and SIGTERM stays
the script's.
"""

from __future__ import annotations

import _thread
import ctypes
import os
import select
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cagtool.record.liveness import proc_stat

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# What the kernel sends the mode child when cagtool's process dies: a real-time signal that no
# script or library handles (glibc keeps the first two for itself; torch and its libraries use none).
# None where there are no real-time signals (macOS, which has no PR_SET_PDEATHSIG either).
PARENT_DIED: int | None = signal.SIGRTMAX - 2 if hasattr(signal, "SIGRTMAX") else None
# Sent by the mode child on its ack pipe once its record is closed (a byte no signal number takes):
# the parent may then start the next mode process beside this one's exit (orchestrate.py).
RECORD_CLOSED = 0
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class SignalStop(BaseException):
    """Raised in the target's main thread when cagtool's own process died (PARENT_DIED; `signum` is
    SIGTERM, what the job is stopped as): unwinds the script so the record closes as interrupted.
    A BaseException, so `except Exception` in the script does not swallow it."""

    def __init__(self, signum: int, parent_died: bool = False) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.parent_died = parent_died


def exit_code_for(signum: int) -> int:
    """The shell's convention: 128 + N (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + int(signum)


def killed_words(signum: int) -> str:
    """How a process's death by a signal is said: a SIGKILL nobody on the job sent is most often the
    kernel's out-of-memory killer's, which only the kernel's log tells."""
    name = signal.Signals(signum).name
    if signum == signal.SIGKILL:
        return f"killed by {name} (the kernel's out-of-memory killer sends it too: the kernel's log, `dmesg`, says whether it did)"
    return f"killed by {name}"


def descendants(pid: int) -> list[int]:
    """Every living process below pid (children first), read from /proc; [] where there is none."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = proc_stat(int(entry))
        try:
            ppid = int(fields[1]) if fields is not None else None
        except (IndexError, ValueError):
            continue
        if ppid is None:
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in parents.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def signal_tree(pid: int, signum: int, include_root: bool = True) -> None:
    """What a signal to the whole process group would have done, for the job's process tree: the
    workers the script started (mp.spawn, torchrun, DataLoader) get it too."""
    for target in ([pid] if include_root else []) + descendants(pid):
        try:
            os.kill(target, signum)
        except (ProcessLookupError, PermissionError):
            pass


class StopStacks:
    """How a followed process stopped by SIGTERM or SIGHUP is told apart from one that vanished.

    Python installs no handler for these two signals. A followed process (an mp.spawn rank, a
    torchrun worker) therefore dies of the signal's default action at once, as under python, and
    its record stays unclosed. Readers took such a record for one whose process was SIGKILLed.
    A Python-level handler would tell, but it runs only when the main thread returns to Python:
    a rank waiting in a collective would not die, or not in time.

    So, while the process keeps the default action, `arm` registers faulthandler's C-level handler
    for the signal (`faulthandler.register(chain=True)`). When the signal comes, the handler
    writes the stacks of every thread to `<record>/signal_stacks/<SIGNAME>.txt`, restores the
    default action and raises the signal again. The process dies as before: same signal, same
    exit status, no delay worth the name, nothing on its stderr. `signal.getsignal` still says
    SIG_DFL. A script that sets its own handler replaces this one, as it would replace the
    default. The loader reads an unclosed record of a dead process whose file is not empty as
    interrupted by that signal (record/liveness.py).
    """

    SIGNALS = ("SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self._armed: dict[str, tuple[int, str]] = {}  # signal name -> (its file's descriptor, its path)

    def arm(self, record_dir: str | os.PathLike[str]) -> None:
        """Watch the signals still at their default action, writing into `record_dir`. Called
        again in a forked child: the parent's files are left to the parent."""
        self.disarm(remove=False)
        import faulthandler

        if not hasattr(faulthandler, "register"):  # Windows
            return
        from cagtool.record.schema import SIGNAL_STACKS_DIR

        folder = os.path.join(os.fspath(record_dir), SIGNAL_STACKS_DIR)
        for name in self.SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None or signal.getsignal(signum) != signal.SIG_DFL:
                continue  # ignored (nohup) or the script's own handler: left as it is
            try:
                os.makedirs(folder, exist_ok=True)
                path = os.path.join(folder, f"{name}.txt")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            except OSError:
                continue  # a full disk or a read-only record: the record reads as before
            try:
                faulthandler.register(signum, file=fd, all_threads=True, chain=True)
            except (OSError, RuntimeError, ValueError):
                os.close(fd)
                continue
            self._armed[name] = (fd, path)

    def disarm(self, remove: bool = True) -> None:
        """Stop watching (the record is closing): the default action is back where the script
        left it, and the empty files and their directory are removed (`remove`)."""
        armed, self._armed = self._armed, {}
        if not armed:
            return
        import faulthandler

        for name, (fd, path) in armed.items():
            signum = getattr(signal, name)
            if signal.getsignal(signum) == signal.SIG_DFL:
                # Only while no Python handler was set since: unregister puts back the C-level action
                # it found (the default), which would silently undo the script's own handler.
                try:
                    faulthandler.unregister(signum)
                except (OSError, RuntimeError, ValueError):
                    pass
            try:
                os.close(fd)
            except OSError:
                pass
            if remove:
                try:
                    if os.path.getsize(path) == 0:
                        os.unlink(path)
                    os.rmdir(os.path.dirname(path))
                except OSError:
                    pass


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def adopt_orphans() -> bool:
    """Linux: processes the job leaves behind when a mode process dies are re-parented to cagtool
    (PR_SET_CHILD_SUBREAPER) instead of init, so end_orphans can stop them."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def end_orphans(grace_s: float = 2.0, signalled: bool = False) -> list[int]:
    """After a mode process was killed or interrupted: stop what it left running (SIGTERM, then
    SIGKILL after grace_s) and reap it. Only call once the mode process itself was waited for.
    `signalled`: they have the stop signal already (a group's, or the one cagtool gave the whole
    tree): first they get grace_s to act on it, so that none gets a second copy while it handles
    the first (a rank writing its stacks, a worker's own handler), as none would under python."""
    left = descendants(os.getpid())
    if signalled:
        left = _wait_gone(left, time.monotonic() + grace_s)
    for pid in left:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    left = _wait_gone(left, time.monotonic() + grace_s)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(0.05)
    _reap()
    return left


def _wait_gone(pids: list[int], deadline: float) -> list[int]:
    """Reap until every pid is gone or the deadline passes; returns those still alive."""
    while pids and time.monotonic() < deadline:
        _reap()
        pids = [pid for pid in pids if _exists(pid)]
        if pids:
            time.sleep(0.05)
    return pids


def _exists(pid: int) -> bool:
    fields = proc_stat(pid)
    return bool(fields) and fields[0] != b"Z"


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def die_with_parent(parent_pid: int) -> None:
    """Linux: PARENT_DIED to this process when the parent dies, including by SIGKILL. If the parent
    is already gone (it died before this ran), act as if the signal came now."""
    if PARENT_DIED is None or not _prctl(_PR_SET_PDEATHSIG, int(PARENT_DIED)):
        return  # not Linux: the parent still forwards its signals
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), PARENT_DIED)


def install_child_handlers(parent_pid: int, ack_fd: int | None, ack_hold_fd: int | None = None) -> None:
    """In the mode child, before the target runs: PARENT_DIED raises SignalStop; the stop signals
    are left as python leaves them (module docstring), and one the child was started with ignored
    (nohup, a background job) stays ignored. Every signal a Python handler receives is reported
    on ack_fd (WakeupRelay). ack_hold_fd, the same pipe's read end, is held open and never read:
    once the parent is gone the pipe still has a reader, so the C-level handler's write of each
    signal cannot fail with EPIPE (which Python prints on the script's stderr as an ignored
    BrokenPipeError); a full pipe fails quietly (warn_on_full_buffer=False)."""
    global _parent_died

    if PARENT_DIED is not None:
        _parent_died = ParentDiedHandler()
        signal.signal(PARENT_DIED, _parent_died)
    for fd in (ack_fd, ack_hold_fd):
        if fd is not None:
            try:
                os.set_inheritable(fd, False)  # the script's own children must not hold it open
            except OSError:
                pass
    if ack_fd is not None:
        try:
            os.set_blocking(ack_fd, False)
            WakeupRelay(ack_fd).install()
        except (OSError, ValueError):
            pass


class ParentDiedHandler:
    """PARENT_DIED's handler: raises SignalStop at the first delivery; later copies raise nothing,
    except the handler's own re-delivery of a stop the script never let through.

    The kernel can deliver PARENT_DIED more than once for one death. The "parent" of
    PR_SET_PDEATHSIG is the thread that started this process, and the signal is sent each time
    this process is handed to a new parent: when cagtool's process is SIGKILLed, its threads exit
    one by one, this process may first be handed to another of its threads (still exiting) and
    then to the reaper, a copy each time. A real-time signal is queued, not merged, so the second
    copy comes on its own, a moment after the first, while the script or this process's own
    wind-down is handling the first (2 of 20 SIGKILLs of a 5-thread parent delivered it twice
    here). Raised again there, it aborted the closing of the record (the process exited 143 with
    its manifest and run.json left open) or kept the script's workers from being stopped. So a
    kernel copy raises nothing.

    A stop can be lost on its way, though: Python runs the handler wherever the main thread is,
    and an exception raised inside a `__del__`, a weakref callback or a gc callback is printed
    ("Exception ignored in ...") and dropped; the script then trained on with no cagtool (2 of 8
    SIGKILLs of cagtool on a script whose objects' `__del__` ran a loop). So from the first
    delivery a thread re-delivers the signal every REDELIVER_S seconds, and that copy raises
    again, until the mode process takes the stop (stop_taken: it caught SignalStop, or its
    wind-down began)."""

    REDELIVER_S = 1.0

    def __init__(self) -> None:
        self.deliveries = 0
        self.raised = 0
        self.taken = False
        self._redelivered = False
        self._main = threading.main_thread().ident

    def __call__(self, signum: int, frame: Any) -> None:
        self.deliveries += 1
        if self.taken:
            return
        if self.raised == 0:
            # A bare thread, not threading.Thread: this runs wherever the main thread was, maybe
            # inside threading's own non-reentrant locks (Thread.start holds one), and the job's
            # threading.enumerate() is left as it was.
            _thread.start_new_thread(self._redeliver, ())
        elif not self._redelivered:
            return  # the kernel's copy of a death already being handled
        self._redelivered = False
        self.raised += 1
        raise SignalStop(signal.SIGTERM, parent_died=True)

    def _redeliver(self) -> None:
        while True:
            time.sleep(self.REDELIVER_S)
            if self.taken or PARENT_DIED is None:
                return
            self._redelivered = True
            try:
                signal.pthread_kill(self._main, PARENT_DIED)
            except (OSError, ValueError):
                return


_parent_died: ParentDiedHandler | None = None


def stop_taken() -> None:
    """The mode process has the stop in hand (it caught SignalStop, or is winding down another
    way): PARENT_DIED raises nothing more."""
    if _parent_died is not None:
        _parent_died.taken = True


class WakeupRelay:
    """Keeps the parent told of every signal the child's Python handlers receive, whatever wakeup
    fd the script sets.

    Python has one wakeup fd, which its C-level handler writes each signal's number to. The
    child's is the ack pipe to the parent. A script may set its own (asyncio's
    `loop.add_signal_handler` does, and `set_wakeup_fd(-1)` when its loop closes): the parent
    would then take a group Ctrl-C for one sent to cagtool alone and forward a second copy, which
    interrupts the script's own handling of the first (a checkpoint saved on Ctrl-C).

    So `signal.set_wakeup_fd` is replaced by `set_wakeup_fd` below, which behaves as python's for
    the script (the same checks and errors, the previous fd returned) and does this: while the
    script has no fd of its own the real one is the ack pipe, as before; once it has one, the real
    one is a pipe that a daemon thread (started then, not before) reads, writing each byte first to
    the ack pipe and then to the script's fd. The thread needs the GIL only for the moment of a
    relay; an event loop waiting in select holds none.
    """

    def __init__(self, ack_fd: int) -> None:
        self.ack_fd = ack_fd
        self.script_fd = -1
        self._original = signal.set_wakeup_fd
        self._relay_w: int | None = None
        self._lock = threading.Lock()

    def install(self) -> None:
        self._original(self.ack_fd, warn_on_full_buffer=False)
        signal.set_wakeup_fd = self.set_wakeup_fd  # type: ignore[assignment]

    def set_wakeup_fd(self, fd: int, /, *, warn_on_full_buffer: bool = True) -> int:
        if threading.current_thread() is not threading.main_thread():
            return self._original(fd, warn_on_full_buffer=warn_on_full_buffer)  # raises python's ValueError
        fd = int(fd)
        if fd != -1:
            os.fstat(fd)  # OSError for a closed fd, as python raises
            if os.get_blocking(fd):
                raise ValueError(f"the fd {fd} must be in non-blocking mode")
        with self._lock:
            previous, self.script_fd = self.script_fd, fd
            if fd == -1:
                self._original(self.ack_fd, warn_on_full_buffer=False)
            else:
                self._original(self._relay_fd(), warn_on_full_buffer=False)
        return previous

    def _relay_fd(self) -> int:
        if self._relay_w is None:
            relay_r, relay_w = os.pipe2(os.O_CLOEXEC) if hasattr(os, "pipe2") else os.pipe()
            os.set_blocking(relay_w, False)
            self._relay_w = relay_w
            threading.Thread(target=self._relay, args=(relay_r,), name="cagtool-signal-relay", daemon=True).start()
        return self._relay_w

    def _relay(self, relay_r: int) -> None:
        while True:
            try:
                data = os.read(relay_r, 512)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            for fd in (self.ack_fd, self.script_fd):
                if fd == -1:
                    continue
                try:
                    os.write(fd, data)
                except OSError:
                    pass  # a full or closed fd: python's own handler drops the byte too


def ignore_further_stops() -> None:
    """While the record is being closed, a second signal (the forwarded copy of one the child
    already got, a second Ctrl-C, cagtool's death) must not abort the manifest write.

    Ignored, not blocked with pthread_sigmask: a mask is the calling thread's, and a signal sent to
    the process while the main thread blocks it goes to another thread (torch starts several),
    whose C-level handler still has the main thread run the Python handler."""
    stop_taken()
    for signum in STOP_SIGNALS + ((PARENT_DIED,) if PARENT_DIED is not None else ()):
        try:
            signal.signal(signum, signal.SIG_IGN)
        except (OSError, ValueError):
            pass


@dataclass
class ChildSupervisor:
    """The parent's side while one mode child runs: receives the parent's stop signals, forwards
    each to the child once (unless the child reported the same signal), and kills the child if it
    on a second, later signal (asked twice: stop now). A child that handles the first signal and
    goes on (a checkpointing or requeueing handler) is left to do so, as under python: the signal
    is the script's to act on, and at its default action the child is already gone. `grace_s`
    (None here) would kill a child that has not ended that long after the first signal."""

    forward_delay_s: float = 0.3  # how long to wait for the child's own copy of a group signal
    repeat_window_s: float = 1.0  # deliveries closer than this are one event (timeout sends two)
    grace_s: float | None = None
    first_signal: int | None = None
    first_at: float | None = None
    killed: bool = False  # the parent SIGKILLed the child
    _pending: list[tuple[int, float]] = field(default_factory=list)
    _child_got: dict[int, float] = field(default_factory=dict)
    _previous: dict[int, Any] = field(default_factory=dict)
    _wake_r: int | None = None
    _wake_w: int | None = None
    _old_wakeup: int = -1

    def __enter__(self) -> "ChildSupervisor":
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers live in the main thread: just wait for the child
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        self._old_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            current = signal.getsignal(signum)
            if current == signal.SIG_IGN:
                continue  # started ignored (nohup, background job): stays ignored, like the child
            self._previous[signum] = current
            signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._wake_r is None:
            return
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        signal.set_wakeup_fd(self._old_wakeup)
        for fd in (self._wake_r, self._wake_w):
            if fd is not None:
                os.close(fd)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._pending.append((signum, time.monotonic()))

    @property
    def stop_requested(self) -> bool:
        return self.first_signal is not None or bool(self._pending)

    def settle(self) -> None:
        """Account for signals that came while no mode process ran (between modes)."""
        while self._pending:
            signum, at = self._pending.pop(0)
            if self.first_at is None:
                self.first_signal, self.first_at = signum, at

    def wait(self, proc: Any, ack_r: int | None, on_record_closed: Callable[[], None] | None = None) -> int:
        """Wait for the child, handling signals; returns its wait status code (Popen.returncode).
        `on_record_closed()` runs (once, in this loop) when the child says its record is closed."""
        # The child's exit wakes the select below through a pidfd (Linux 5.3+): without it the ack
        # pipe's end of file often came just before the exit status, and the loop slept another
        # 0.2 s timeout after every mode (~0.3 s of a 3-mode run).
        exited = _pidfd(proc.pid)
        try:
            return self._wait(proc, ack_r, exited, on_record_closed)
        finally:
            if exited is not None:
                os.close(exited)

    def _wait(self, proc: Any, ack_r: int | None, exited: int | None, on_record_closed: Callable[[], None] | None) -> int:
        watch = [fd for fd in (ack_r, self._wake_r, exited) if fd is not None]
        forward_at: dict[int, float] = {}
        while True:
            code = proc.poll()
            if code is not None:
                return code
            timeout = 0.2
            if forward_at:
                timeout = max(0.0, min(timeout, min(forward_at.values()) - time.monotonic()))
            try:
                ready, _, _ = select.select(watch, [], [], timeout)
            except InterruptedError:
                ready = []
            now = time.monotonic()
            for fd in ready:
                if fd == exited:
                    continue  # the exit status is read at the top of the loop
                try:
                    data = os.read(fd, 512)
                except BlockingIOError:
                    continue
                if fd == ack_r:
                    if not data:  # the child closed it (exited, or exec'd something else)
                        watch.remove(fd)
                    for signum in data:
                        if signum == RECORD_CLOSED:
                            if on_record_closed is not None:
                                on_record_closed()
                                on_record_closed = None
                            continue
                        self._child_got[signum] = now
            while self._pending:
                signum, at = self._pending.pop(0)
                if self.first_at is None:
                    self.first_signal, self.first_at = signum, at
                elif at - self.first_at > self.repeat_window_s:
                    self._kill(proc)  # asked twice: stop now
                    continue
                if signum not in forward_at:
                    forward_at[signum] = at + self.forward_delay_s
            for signum, due in list(forward_at.items()):
                got = self._child_got.get(signum)
                if got is not None and got >= due - self.forward_delay_s - self.repeat_window_s:
                    del forward_at[signum]  # the child has its own copy
                elif now >= due:
                    del forward_at[signum]
                    # Nobody in the job got this one (it was sent to cagtool's pid only): give it
                    # to the whole tree, as a signal to the process group would have.
                    signal_tree(proc.pid, signum)
            if self.grace_s is not None and self.first_at is not None and now - self.first_at > self.grace_s:
                self._kill(proc)

    def _kill(self, proc: Any) -> None:
        if proc.poll() is None:
            self.killed = True
            proc.kill()

    def child_received(self, signum: int, ack_r: int, since: float) -> bool:
        """Whether the child's Python handlers received `signum` at or after `since` (monotonic),
        as its ack pipe reported: read to its end first, since the child may have ended before the
        wait's loop read its last report. A KeyboardInterrupt with no SIGINT behind it is the
        script's own `raise`, not a Ctrl-C."""
        while select.select([ack_r], [], [], 0)[0]:
            try:
                data = os.read(ack_r, 512)
            except OSError:
                break
            if not data:
                break
            now = time.monotonic()
            for got in data:
                if got != RECORD_CLOSED:
                    self._child_got[got] = now
        got_at = self._child_got.get(signum)
        return got_at is not None and got_at >= since


def _pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when process `pid` exits, or None where the
    platform has none (not Linux, a kernel before 5.3, a sandbox refusing pidfd_open)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:
        return None
