"""What the step tracker's hooks note, in order, for its drain to count (tracker.py's docstring).

A hook appends one note to the tracker's list and returns. A note is a plain tuple (ENDED: a list)
whose first item is its kind: a tuple display is the cheapest object Python makes on a training step's path (a
NamedTuple's constructor costs about seven times as much, timeit beside a busy machine's training
job). Each kind's layout is named here, once, and the counting (boundaries.py) unpacks a note into
these names; nothing reads a note by index. A top-level backward's start is noted as its
`BackwardCall` itself, the one object that call needs anyway.
"""

from __future__ import annotations

from typing import Any

import msgspec

# (ENDED, clock, start, call, loss, accumulate_grad, thread, cpu): a top-level backward returned or
# raised. clock, start: perf_counter at its end and start; call: its BackwardCall; loss: its first
# output's value when a plain CPU tensor of one element (read in the hook), the tensor itself when
# another one-element tensor (read by the drain), else None; accumulate_grad: False for autograd.grad;
# thread: its thread's name, "" for the main thread; cpu: CpuReading at its end, or None where the
# call could not end a step (an optimizer was alive when it ended). A list, not a tuple: its cpu
# slot is filled after the look at the live optimizers, with nothing allocated in between (hooks.py).
ENDED = 1
# (STEPPED, clock, start, key, optimizer_class, cpu): an optimizer's step() returned; key: id(optimizer).
STEPPED = 2
# (SKIPPED, clock, start, key, optimizer_class, cpu): a grad scaler's step() returned without stepping
# the optimizer (torch.amp.GradScaler found inf or NaN gradients): the step ends there all the same.
SKIPPED = 5
# (COMPILED, version): Dynamo compiled an optimizer's step: a frame of torch.optim's, or a frame
# that traced an optimizer's step() (a step of the script's own Optimizer subclass inlined in a
# compiled function): if no optimizer step is noted after it, the steps run inside a compiled graph,
# where no hook runs (boundaries.py, compiled_optimizer). version: the optimizers' readings
# (tracker.watch_parameters: their state's version counters) at the compile's end, before the
# compiled code first ran (None with no optimizer known): a change seen at the return of that
# compiled call (or, for a function compiled before the hooks, at a later backward's start) is an
# optimizer step in between.
COMPILED = 6
# (RETURNED, before, version, clock, cpu): a call of a function compiled by torch.compile whose
# compiled code steps an optimizer returned (its wrapper's exit hook, hooks.py); before, version: the
# optimizers' readings at its entry and at its return, noted only when they differ; clock, cpu: the
# return's perf_counter and CpuReading (None, None where the hooks saw an optimizer's step() in the
# call). An optimizer step inside the compiled code is seen here, where the script's call of it
# returns, as eager's step() returns.
RETURNED = 7
# (EVALUATED, clock): a module was switched from training to eval mode (`Module.train(False)`, which
# `.eval()` calls: an evaluation begins, as Lightning's validation loop, HF Trainer's evaluate() and
# a script's own evaluation between epochs switch the model); noted once for the module and its
# submodules. The step in progress holds an evaluation: its span is not a training step's alone.
EVALUATED = 8
# (WORKERS_STARTED, clock): a DataLoader made an iterator that starts its worker processes
# (num_workers > 0: a new epoch's, or the first one with persistent_workers): the step in progress
# holds their start-up, and waits for their first batch.
WORKERS_STARTED = 9
# (MADE, key, ref): an optimizer exists (ref: a weak reference to it).
MADE = 3
# (GONE, key, ref): it was collected.
GONE = 4

# CpuReading: (process CPU time, the calling thread's CPU time, its ident), read at a note's clock.
CpuReading = tuple[float, float, int]


class BackwardCall(msgspec.Struct):
    """One top-level backward call, noted when it begins: its thread (ident), its outputs (read for
    `current_roots`; None once it ended, so the note holds no graph), the CA captures made in it (note_capture_finished), and where the drain placed
    its start: the step it began in and its index there. `version`: the optimizers' readings
    (tracker.watch_parameters) at its start, read only once an optimizer's step was compiled in a
    function made before the hooks were installed
    (boundaries.py, `StepCounter.parameters_changed`), else None. `inside`: (the readings at the
    entry of the first compiled call inside it that stepped an optimizer, those at the return of the
    last): an optimizer stepped inside the backward where no hook runs (a compiled autograd graph
    calling a post-accumulate-grad hook that steps it: optimizer in backward), None otherwise.
    `outside_ca`: in the ca mode, compiled autograd was off when it began (torch's Python flag,
    `compiled_autograd_enabled`: a backward inside a torch.func transform, which torch runs under
    `compiled_autograd._disable()`, or after `torch._dynamo.reset()`): the engine ran it uncaptured.
    A msgspec Struct, never encoded: its constructor is C (`BackwardCall(thread, outputs)`, the
    rest at their defaults), half the instructions of a Python `__init__` on every backward. Its
    calls are told apart by identity (`is`), never by `==` (a Struct's compares the fields)."""

    thread: int
    outputs: Any
    captures: int = 0
    step: int = 0
    index: int = 0
    version: Any = None
    inside: Any = None
    outside_ca: bool = False
