"""What the step tracker's hooks note, in order, for its drain to count (tracker.py's docstring).

A hook appends one note to the tracker's list and returns. A note is a plain tuple (ENDED: a list)
whose first item is its kind: a tuple display is the cheapest object Python makes on a training step's path (a
NamedTuple's constructor costs about seven times as much, timeit beside a busy machine's training
job). Each kind's layout is named here, once, and the counting (boundaries.py) unpacks a note into
these names; nothing reads a note by index. A top-level backward's start is noted as its
`BackwardCall` itself, the one object that call needs anyway.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

# (ENDED, clock, start, call, loss, accumulate_grad, thread, cpu): a top-level backward returned or
# raised. clock, start: perf_counter at its end and start; call: its BackwardCall; loss: its first
# output when one element (read by the drain), else None; accumulate_grad: False for autograd.grad;
# thread: its thread's name, "" for the main thread; cpu: CpuReading at its end, or None where the
# call could not end a step (an optimizer was alive when it ended). A list, not a tuple: its cpu
# slot is filled after the look at the live optimizers, with nothing allocated in between (hooks.py).
ENDED = 1
# (STEPPED, clock, start, key, optimizer_class, cpu): an optimizer's step() returned; key: id(optimizer).
STEPPED = 2
# (MADE, key, ref): an optimizer exists (ref: a weak reference to it).
MADE = 3
# (GONE, key, ref): it was collected.
GONE = 4

# CpuReading: (process CPU time, the calling thread's CPU time, its ident), read at a note's clock.
CpuReading = tuple[float, float, int]


def _setter(index: int) -> Any:
    def set_item(call: list, value: Any) -> None:
        call[index] = value
    return set_item


class BackwardCall(list):
    """One top-level backward call, noted when it begins: its thread (ident), its outputs (read for
    `current_roots`), the CA captures made in it (note_capture_finished), and where the drain placed
    its start: the step it began in and its index there.

    A list of those five, made in the hook as `BackwardCall((thread, outputs, 0, 0, 0))`: a list
    subclass without an `__init__` of its own is built by C code alone, where a class with one runs
    a Python frame in the training step (its cold code costs microseconds there:
    benchmarks/README.md, the backward entry's pieces). Read and set by name everywhere else."""

    __slots__ = ()
    thread = property(itemgetter(0))
    outputs = property(itemgetter(1))
    captures = property(itemgetter(2), _setter(2))
    step = property(itemgetter(3), _setter(3))
    index = property(itemgetter(4), _setter(4))
