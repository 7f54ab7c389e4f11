"""The job's heap in use around each top-level backward, read only in the re-runs that measure
activation checkpointing (`cagtool checkpointing` sets HEAP_READINGS_ENV in them; a plain
`cagtool run` never reads it): what the forward kept alive for the backward, which is what
checkpointing is meant to shrink.

Peak RSS cannot say it on CPU: it is dominated by compile memory (Dynamo, AOT, Inductor) and by
what glibc keeps of freed memory, and it read both ways for the same job. glibc's `mallinfo2()`
counts the bytes in use now: `uordblks` (heap chunks in use, every arena) plus `hblkhd` (mmapped
chunks: torch's CPU allocator takes large tensors with posix_memalign, which glibc mmaps above its
threshold) (docs/torch-internals.md, "Heap in use on CPU"). Read at each top-level backward's
entry, minus the reading at the previous step's end (an optimizer's step() returning, or the
previous backward's end), it is what that step's forward left held for its backward, once the
gradients freed in between are counted back: `zero_grad()` (set_to_none, the default) after the
step, or before the next forward, frees every .grad after the first reading, and the forward's held
memory read net of them came out negative (-6.8 MiB checkpointed against 10.5 MiB plain, read as
"saves 100%"). So the bytes of the optimizers' parameters' .grad are read at both points too, and
`held_grads` keeps what was freed between them (the report adds it back).

Inside the backward the in-use maximum is sampled by a thread every SAMPLE_S while a backward runs
(idle otherwise): where the recompute of every checkpointed block runs before any of its gradients
(as compiled autograd does) the saving at the entry is gone at the backward's peak, and only this
shows it. A sample can miss a short peak; the maximum is a lower bound of the true one.

Where mallinfo2 is missing (not glibc) nothing is read and the report falls back to peak RSS."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any

HEAP_READINGS_ENV = "CAGTOOL_HEAP_READINGS"
SAMPLE_S = 0.001
MAX_READINGS = 10_000  # top-level backward calls read; later ones are counted only
HEAP_SOURCE = "glibc mallinfo2 (uordblks + hblkhd)"


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def mallinfo2() -> Any:
    """glibc's mallinfo2 as a function returning _Mallinfo2, or None where the C library lacks it."""
    try:
        function = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _Mallinfo2
    function.argtypes = []
    return function


def requested() -> bool:
    return os.environ.get(HEAP_READINGS_ENV) == "1"


class HeapReadings:
    """Per top-level backward call, in order: the heap in use before it (the last step end; None
    for the first), at its entry, and the sampled maximum while it ran."""

    def __init__(self, read: Any, grads: Any = None) -> None:
        self._read = read
        # The bytes of the live optimizers' parameters' .grad now (the tracker's), or None
        self._grads = grads
        self.grads_freed: list[int] = []  # per reading: .grad bytes freed between `before` and the entry
        self._grads_mark: int | None = None
        self.before: list[int | None] = []
        self.at_entry: list[int] = []
        self.max_inside: list[int] = []
        self.calls = 0
        self.errors = 0
        self._mark: int | None = None
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._generation = 0
        self._max = 0
        self._sampler: threading.Thread | None = None

    def _in_use(self) -> int:
        info = self._read()
        return int(info.uordblks) + int(info.hblkhd)

    # The three hooks never raise into the job's backward or step(): a failed reading is counted.
    def backward_began(self) -> None:
        try:
            self._began()
        except Exception:  # noqa: BLE001 - a profiler never fails the job it watches
            self.errors += 1

    def backward_ended(self) -> None:
        try:
            self._ended()
        except Exception:  # noqa: BLE001
            self.errors += 1

    def step_ended(self) -> None:
        try:
            self._mark = self._in_use()
            self._grads_mark = self._grad_bytes()
        except Exception:  # noqa: BLE001
            self.errors += 1

    def _grad_bytes(self) -> int | None:
        return None if self._grads is None else int(self._grads())

    def _began(self) -> None:
        self.calls += 1
        if len(self.at_entry) >= MAX_READINGS:
            return
        now = self._in_use()
        with self._lock:
            self._generation += 1
            self._max = now
        grads = self._grad_bytes()
        self.grads_freed.append(max(self._grads_mark - grads, 0) if self._grads_mark is not None and grads is not None else 0)
        self.before.append(self._mark)
        self.at_entry.append(now)
        if self._sampler is None:
            self._sampler = threading.Thread(target=self._sample, name="cagtool-heap-sampler", daemon=True)
            self._sampler.start()
        self._running.set()

    def _ended(self) -> None:
        if not self._running.is_set():
            return
        self._running.clear()
        now = self._in_use()
        with self._lock:
            self._generation += 1
            self.max_inside.append(max(self._max, now))
        self._mark = now
        self._grads_mark = self._grad_bytes()

    def _sample(self) -> None:
        while True:
            self._running.wait()
            with self._lock:
                generation = self._generation
            now = self._in_use()
            with self._lock:
                if generation == self._generation and now > self._max:
                    self._max = now
            time.sleep(SAMPLE_S)

    def summary(self) -> dict[str, Any]:
        """For the manifest (options["heap_in_use"])."""
        count = min(len(self.at_entry), len(self.max_inside))
        return {"source": HEAP_SOURCE, "sample_s": SAMPLE_S, "backward_calls": self.calls, "errors": self.errors,
                "before": self.before[:count], "at_entry": self.at_entry[:count], "max_inside": self.max_inside[:count],
                "grads_freed": self.grads_freed[:count]}


def unavailable() -> dict[str, Any]:
    """For the manifest where the readings were asked for but the C library has no mallinfo2."""
    return {"source": None, "why": "the C library has no mallinfo2 (not glibc >= 2.33)"}


def readings_if_requested(optimizers: Any = None) -> HeapReadings | None:
    """The readings for this process when HEAP_READINGS_ENV asks for them and glibc has mallinfo2.
    `optimizers`: id -> weak reference of every live optimizer (the tracker's `known`), whose
    parameters' .grad bytes are read beside the heap."""
    if not requested():
        return None
    read = mallinfo2()
    if read is None:
        return None
    grads = None
    if optimizers is not None:
        def grads() -> int:
            total, seen = 0, set()
            for ref in list(optimizers.values()):
                optimizer = ref()
                for group in getattr(optimizer, "param_groups", None) or ():
                    for p in group.get("params", ()):
                        g = getattr(p, "grad", None)
                        if g is not None and id(g) not in seen:
                            seen.add(id(g))
                            total += g.numel() * g.element_size()
            return total
    return HeapReadings(read, grads)
