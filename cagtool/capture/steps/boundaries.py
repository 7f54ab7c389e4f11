"""Where steps begin and end: the drain's count of the hooks' notes (notes.py), in the order they
were made. What a step is, with one, several or no optimizers: record/schema.py's docstring.

A step ends when every optimizer it waits for has stepped (`STEP_BOUNDARY_OPTIMIZER`), or, with no
optimizer alive, at each top-level backward's end (`STEP_BOUNDARY_BACKWARD`). Whether an optimizer
is alive is ordered by the notes a weak reference's callback appends when one is collected, so a
count made later counts what a count made in the hook would have (tests/test_step_bookkeeping.py).

Several optimizers, one stepping first: whether the others step in the same iteration is known only
from what follows. A discriminator stepped k times before its generator (WGAN's n_critic) is one
step; one optimizer per layer, each trained in turn for many iterations (the forward-forward
algorithm), is a step per optimizer step. So where an optimizer steps first in a step with others
waited for, the notes wait (`StepCounter.held`) until another optimizer steps, or something else
happens that the usual count handles (one step, as before), or until that optimizer has stepped
IDLE_OPTIMIZER_STEPS times alone: the others stop being waited for, and each of its steps is a step.
Where a step's number is needed while the notes wait (an event stamped with it: a compile, a capture;
a gradient digest), they are counted at once as one step that waits for every optimizer, as a
discriminator's are: no event names a step that its lines do not (tracker.py, `_count_held`). A
hook draining for itself (`--steps`, CUDA) counts the steps when the wait ends: `--steps` stops
there, and a step boundary's CUDA event is recorded for the last of them only."""

from __future__ import annotations

import weakref
from typing import Any, Callable

from cagtool.capture.steps.device_readings import DeviceReadings
from cagtool.capture.steps.lines import NO_LINE, StepLines
from cagtool.capture.steps.losses import read_loss
from cagtool.capture.steps.notes import COMPILED, ENDED, EVALUATED, GONE, MADE, RETURNED, SKIPPED, STEPPED, WORKERS_STARTED, BackwardCall, CpuReading
from cagtool.capture.steps.timing import BoundaryTimes
from cagtool.record.schema import FIRST_STEP, STEP_BOUNDARY_BACKWARD, STEP_BOUNDARY_COMPILED_OPTIMIZER, STEP_BOUNDARY_OPTIMIZER
from cagtool.record.writer import RecordWriter

# An optimizer that does not step while another steps this many times in one open step stops
# being waited for (e.g. a second optimizer used only in a later phase of training), and each of
# those steps is a step of its own (the module docstring).
IDLE_OPTIMIZER_STEPS = 10
# Notes held while it is unknown whether a pre-existing optimizer will step (expect_optimizers):
# two a backward call (its begin and end), so 256 backward calls.
UNDECIDED_NOTES = 512


class OpenStep:
    """The step in progress: what it has done so far. A closed step's line reads its figures when it
    is written: nothing changes it once it is closed (every update goes to the step in progress,
    under the tracker's lock)."""

    __slots__ = ("next_index", "backward_calls", "backward_s", "captures", "compiles", "compile_s", "optimizer_s", "loss",
                 "loss_tensor", "skipped", "late_compiles", "stepped", "together", "evaluation", "workers_started")

    def __init__(self) -> None:
        self.next_index = 0  # the next backward call's index (taken when it starts)
        self.backward_calls = 0  # calls that finished
        self.backward_s = 0.0
        self.captures = 0
        self.compiles = 0
        self.compile_s = 0.0
        self.optimizer_s = 0.0
        self.loss: float | None = None
        self.loss_tensor: Any = None  # the last loss when it lives on an accelerator
        self.skipped = False  # a grad scaler skipped an optimizer's step() in it
        self.late_compiles = 0
        self.stepped: dict[int, int] = {}  # id(optimizer) -> step() calls in this step
        self.together = False  # its optimizers step together: the notes waited and another optimizer stepped (StepCounter.held)
        self.evaluation = False  # a module was switched to eval mode in it (notes.py, EVALUATED): an evaluation ran in its span
        self.workers_started = False  # a DataLoader started its workers in it (notes.py, WORKERS_STARTED)


class StepCounter:
    """Counts the notes into steps (the caller holds the tracker's lock) and queues their lines."""

    def __init__(self, writer: RecordWriter, device: DeviceReadings, on_step: Callable[[int], None] | None,
                 max_steps: int | None) -> None:
        self.device = device
        self.on_step = on_step
        self.max_steps = max_steps
        self.lines = StepLines(writer)
        self.times = BoundaryTimes(writer)
        self.closed_steps = 0
        self.backward_calls = 0  # every top-level backward of the run
        self.outside_ca = 0  # ... of which began with compiled autograd off in the ca mode (BackwardCall.outside_ca)
        self.open = OpenStep()
        self.limit_reached = False  # --steps stopped the job (set by the hook that raised)
        self.required: dict[int, weakref.ref[Any]] = {}  # the optimizers a step waits for, as of the notes counted
        # Every optimizer alive as of the notes counted (MADE, GONE): `known` is now's, and the
        # notes are counted later than they were made (an optimizer of a function that has
        # returned is gone by the final count, but not in the steps it stepped in).
        self.alive: dict[int, weakref.ref[Any]] = {}
        # Optimizers that existed before the tracker (expect): until one of them steps, or one is
        # made, whether a backward ends a step is undecided and its notes wait in `undecided`.
        self.candidates: dict[int, weakref.ref[Any]] = {}
        self.undecided: list[Any] | None = None
        # An optimizer stepped first in a step that waits for others: the notes from its step()
        # on wait here until it is known whether the others step in this step (resolve).
        self.held: list[Any] | None = None
        self.held_key = 0  # that optimizer's id
        self.held_steps = 0  # its step() calls among the held notes
        self.held_seen = 0  # the held notes looked at so far
        self.last_backward_clock: float | None = None  # the last top-level backward's end (perf_counter)
        self.last_backward_cpu: CpuReading | None = None  # and its CPU reading, where it read one
        # The optimizer steps inside a compiled graph (compiled_optimizer): each backward ends a
        # step. `compiled_pending`: a torch.optim frame was compiled, no optimizer step noted since.
        self.compiled_optimizer = False
        self.compiled_pending = False
        # The watched readings at the last backward's start (or at the compile of an optimizer's
        # code, before it first ran): (the optimizers' ids, one reading each), None until then
        # (parameters_changed; tracker.watch_parameters).
        self.watch_version: tuple[Any, ...] | None = None
        # (the step, the optimizer's class name) of the first step counted from an optimizer's
        # parameter rather than its state (it keeps none): findings.py, COMPILED_STEP_FROM_PARAMETERS.
        self.read_from_parameters: tuple[int, str] | None = None

    def restart(self, device: DeviceReadings) -> None:
        """A forked child's record counts its steps from the first again."""
        self.device = device
        self.lines.reset()
        self.closed_steps = 0
        self.backward_calls = 0
        self.open = OpenStep()
        self.times.last_t = self.times.last_cpu = None
        self.last_backward_clock = self.last_backward_cpu = None
        self.read_from_parameters = None
        self.held = None

    @property
    def current_step(self) -> int:
        return FIRST_STEP + self.closed_steps

    # -- one note each ---------------------------------------------------------------------------
    def begun(self, call: BackwardCall) -> bool:
        """A top-level backward began: it belongs to the step in progress, at the next index (after
        the step an optimizer step inside compiled code ended since the last backward, if one did).
        True when that reached --steps."""
        limit = False if call.version is None else self.parameters_changed(call.version, live=False)
        opened = self.open
        call.step, call.index = FIRST_STEP + self.closed_steps, opened.next_index
        if call.outside_ca:
            self.outside_ca += 1
        opened.next_index += 1
        return limit

    def parameters_changed(self, version: tuple[Any, ...], live: bool, before: tuple[Any, ...] | None = None,
                           clock: float | None = None, cpu: CpuReading | None = None) -> bool:
        """The watched readings where a call of a compiled function that steps an optimizer returned
        (notes.py, RETURNED: `before`, those at its entry), or, for a function compiled before the
        hooks were installed, at a backward's start or at the run's end (against the last such
        reading): each optimizer whose reading changed, with no step() of its own noted in the step
        in progress, stepped inside a compiled graph after the step's last backward. Each is counted
        as an optimizer step there (_stepped_unseen: the step ends once every optimizer it waits for
        has stepped, as with hooks), so gradient accumulation over several backwards is one step,
        and a GAN's two compiled steps one; it ends at that backward's end. With no backward in the
        step in progress, only a change of an optimizer's state (a tuple reading: tracker._step_reading)
        seen where a compiled call returned (`clock`, `cpu`: that return's readings) is a step, ending
        there: a compiled step() called again with no backward between (an LR scheduler's warm-up, as
        eager's hooks count each call); a parameter's own version counter is not (weight clipping
        under no_grad changes it too). True when --steps is reached."""
        if before is None:
            before = self.watch_version
        self.watch_version = version
        opened = self.open
        if before is None or before[0] is not version[0] or version == before:
            return False  # readings of other optimizers (another reader: one made since), or no change: no step read
        if opened.backward_calls:
            stepped = [key for key, old, new in zip(version[0], before[1:], version[1:]) if old != new and key not in opened.stepped]
            assert self.last_backward_clock is not None  # the open step has a backward that ended
            clock, cpu = self.last_backward_clock, self.last_backward_cpu
        elif clock is not None:
            stepped = [key for key, old, new in zip(version[0], before[1:], version[1:])
                       if old != new and new.__class__ is tuple and key not in opened.stepped]
        else:
            return False
        if not stepped:
            return False  # only optimizers whose step() the hooks noted changed them
        self.compiled_pending = False
        if self.read_from_parameters is None:
            self._note_parameter_readings(stepped, before, version)
        limit = False
        for key in stepped:
            if self.open is not opened:  # a step closed already: the rest stepped in it too
                break
            limit = self._stepped_unseen(key, clock, cpu, live, STEP_BOUNDARY_COMPILED_OPTIMIZER) or limit
        if self.open is not opened and opened.late_compiles:
            # Its optimizer compiled after its last backward: in the next step's span, not a step time.
            self.times.last_t = self.times.last_cpu = None
        return limit

    def _note_parameter_readings(self, stepped: list[int], before: tuple[Any, ...], version: tuple[Any, ...]) -> None:
        """The first step read from a parameter's version counter on both sides (an optimizer with
        no state before or after it: tracker._step_reading), noted for a finding."""
        for key, old, new in zip(version[0], before[1:], version[1:]):
            if key in stepped and isinstance(old, int) and isinstance(new, int) and new >= 0:
                ref = self.alive.get(key) or self.candidates.get(key)
                optimizer = None if ref is None else ref()
                self.read_from_parameters = (FIRST_STEP + self.closed_steps, type(optimizer).__name__ if optimizer is not None else "an optimizer")
                return

    def made(self, note: tuple) -> None:
        _, key, ref = note
        self.required[key] = self.alive[key] = ref

    def gone(self, note: tuple) -> None:
        _, key, ref = note
        if self.required.get(key) is ref:
            del self.required[key]
        if self.alive.get(key) is ref:
            del self.alive[key]

    def backward_ended(self, note: tuple, live: bool) -> bool:
        """A top-level backward returned or raised. True when --steps is reached."""
        _, clock, start, call, loss, accumulate_grad, thread, cpu = note
        limit = False
        watched = self.watch_version is not None  # an optimizer step in a graph is seen at the next backward's start
        if self.compiled_pending and self.open.backward_calls and not self.open.stepped and not watched:
            limit = self.compiled_optimizer_found(live)
        self.last_backward_clock, self.last_backward_cpu = clock, cpu
        # A plain CPU loss's value was read in the hook (hooks.py): only other tensors are read here.
        value, device_tensor = (loss, None) if loss is None or loss.__class__ is float else read_loss(loss)
        elapsed = clock - start
        self.backward_calls += 1
        opened = self.open
        current = FIRST_STEP + self.closed_steps
        step, index = call.step, call.index
        # This call is a step of its own: no optimizer waited for, or one stepping inside compiled
        # code without parameters to watch (compiled_optimizer_found).
        by_backward = not self.required or self.compiled_optimizer
        if by_backward and step != current:
            # Another thread's backward closed the step this one began in: it closes the next.
            step, index = current, opened.backward_calls
        payload = (step, index, elapsed, call.captures, "backward" if accumulate_grad else "grad", value, thread)
        if step == current:  # not a backward that outlived its step (optimizer stepped in another thread)
            opened.backward_calls += 1
            opened.backward_s += elapsed
            opened.loss, opened.loss_tensor = value, device_tensor
            if opened.backward_calls == 1 and not by_backward and not opened.stepped and call.inside is None:
                # The step's first backward, no optimizer stepped yet: if the next note closes the
                # step, its three lines go as one entry (optimizer_stepped). Queued otherwise.
                lines = self.lines
                if lines.held_backward is not None:
                    lines.release()
                lines.held_backward = (clock, payload)
                return False
        self.lines.backward(clock, payload)
        if call.inside is not None and not by_backward and step == current:
            # Optimizers stepped inside this backward, where no hook runs (notes.py, BackwardCall.inside):
            # each that changed is a step of it, ending the step at this backward's end once every
            # optimizer waited for has stepped, as their hooks would have.
            before, version = call.inside
            limit = self.parameters_changed(version, live, before=before, clock=clock, cpu=cpu) or limit
        if not by_backward:
            return limit
        boundary = STEP_BOUNDARY_COMPILED_OPTIMIZER if self.compiled_optimizer else STEP_BOUNDARY_BACKWARD
        return self.close(boundary, clock, cpu, live) or limit

    def optimizer_stepped(self, note: tuple, live: bool) -> bool:
        """An optimizer's step() returned. True when that ended the step and --steps is reached."""
        _, clock, start, key, optimizer_class, cpu = note
        self.compiled_pending = False  # its hooks run: steps are seen
        if self.compiled_optimizer:
            # Steps seen again after a stretch inside a compiled graph (the optimizer's compiled
            # code changed): each ended at its backward's end till now. One that opens no backward
            # is the step that backward ended: not counted twice.
            self.compiled_optimizer = False
            if not self.open.backward_calls:
                return False
        seconds = clock - start
        waiting = self.required
        if key not in waiting:  # stepping again after it stopped being waited for
            ref = self.alive.get(key)
            if ref is not None:
                waiting[key] = ref
        opened = self.open
        stepped = opened.stepped
        lines = self.lines
        if lines.held_backward is not None and not stepped and len(waiting) == 1 and key in waiting and opened.backward_calls == 1:
            # The usual step: one backward, then the one optimizer steps and closes it: its
            # backward, optimizer-step and step lines go as one entry, the same text.
            opened.optimizer_s += seconds
            stepped[key] = 1
            return self.close(STEP_BOUNDARY_OPTIMIZER, clock, cpu, live, (seconds, optimizer_class.__name__))
        if not stepped and not opened.together and len(waiting) > 1:
            # The first optimizer to step in a step that waits for others: this note and those
            # after it wait until it is known whether they step in this step (resolve).
            self.held, self.held_key, self.held_steps, self.held_seen = [note], key, 1, 1
            return False
        lines.optimizer_step(clock, FIRST_STEP + self.closed_steps, seconds, optimizer_class.__name__)
        opened.optimizer_s += seconds
        stepped[key] = stepped.get(key, 0) + 1
        if waiting.keys() <= stepped.keys():  # every optimizer waited for has stepped
            return self.close(STEP_BOUNDARY_OPTIMIZER, clock, cpu, live)
        if stepped[key] >= IDLE_OPTIMIZER_STEPS:
            for other in [k for k in waiting if k not in stepped]:
                del waiting[other]
            return self.close(STEP_BOUNDARY_OPTIMIZER, clock, cpu, live)
        return False

    def optimizer_skipped(self, note: tuple, live: bool) -> bool:
        """A grad scaler's step() skipped the optimizer's: the step ends as if it had stepped (no
        optimizer_step line: it did not). True when that ended the step and --steps is reached."""
        _, clock, _start, key, _optimizer_class, cpu = note
        self.open.skipped = True
        return self._stepped_unseen(key, clock, cpu, live)

    def compiled_noted(self, note: tuple) -> None:
        """Dynamo compiled an optimizer's step (notes.py, COMPILED). Whether the optimizer now steps
        inside a compiled graph is known where the call of the function compiled returns (or, for a
        function compiled before the hooks, at the next backward's start), where the watched
        readings changed with no optimizer step noted
        (parameters_changed), or without them at
        the next backward's end: no optimizer step noted by then (compiled_optimizer_found); or one
        noted (its hooks run: nothing changes)."""
        _, version = note
        if self.watch_version is None or (version is not None and self.watch_version[0] is not version[0]):
            self.watch_version = version  # before the compiled code first ran (read anew: of other optimizers)
        if not self.compiled_optimizer:
            self.compiled_pending = True

    def compiled_optimizer_found(self, live: bool) -> bool:
        """A backward began and ended after a torch.optim frame was compiled, no optimizer step
        noted since the step's own backward ended: the optimizer steps inside a compiled graph,
        where no hook runs. The open step ends at its last backward's end (no clock was read at its
        optimizer's: consecutive steps keep the loop's period), and from now on each backward ends
        a step (a job that accumulates gradients over several backwards a compiled step is
        counted one step a backward). True when --steps is reached."""
        self.compiled_pending = False
        self.compiled_optimizer = True
        opened = self.open
        self.required.clear()
        assert self.last_backward_clock is not None  # the open step has a backward that ended
        limit = self.close(STEP_BOUNDARY_COMPILED_OPTIMIZER, self.last_backward_clock, self.last_backward_cpu, live)
        if opened.late_compiles:
            # Its optimizer compiled after the backward's end, where the step now ends: that
            # compile's time falls in the next step's span, which is therefore not a step time (its
            # wall and CPU time unknown, as the first step's). The compiles stay counted in the
            # step whose iteration made them, as their events say.
            self.times.last_t = self.times.last_cpu = None
        return limit

    def _stepped_unseen(self, key: int, clock: float, cpu: CpuReading | None, live: bool, boundary: str = STEP_BOUNDARY_OPTIMIZER) -> bool:
        """An optimizer's step() whose own time is not known (skipped, or inside a graph) counted
        as a step of that optimizer. True when that ended the step and --steps is reached."""
        waiting = self.required
        if key not in waiting:
            ref = self.alive.get(key)
            if ref is None:
                ref = self.candidates.get(key)
                ref = None if ref is None or ref() is None else ref
            if ref is not None:
                waiting[key] = ref
        stepped = self.open.stepped
        stepped[key] = stepped.get(key, 0) + 1
        if waiting.keys() <= stepped.keys() or stepped[key] >= IDLE_OPTIMIZER_STEPS:
            for other in [k for k in waiting if k not in stepped]:
                del waiting[other]
            return self.close(boundary, clock, cpu, live)
        return False

    def close(self, boundary: str, clock: float, cpu: CpuReading | None, live: bool, group: tuple[float, str] | None = None) -> bool:
        """End the step in progress at perf_counter time `clock`, with the CPU reading `cpu`. True
        when --steps is reached. `group`: (seconds, class name) of the optimizer step that closed a
        step whose one backward's line is held back (`StepLines.held_backward`): the three lines go
        as one entry (lines.py)."""
        opened = self.open
        step = FIRST_STEP + self.closed_steps
        # The step's span from the previous boundary (timing.py, BoundaryTimes), and its lines
        # queued (lines.py), written out here: two Python calls less on every step.
        times = self.times
        t = clock - times.writer.t0
        last_t, last = times.last_t, times.last_cpu
        if last_t is not None and t < last_t:
            # Two threads' backwards: the other thread read its clock later but its note was
            # counted first. This step's span is unknown (no negative time), and the later
            # boundary stays the one the next step is measured from.
            wall_s = cpu_s = thread_cpu_s = None
        else:
            wall_s = None if last_t is None else t - last_t
            if last is None or cpu is None:
                cpu_s = thread_cpu_s = None
            else:
                cpu_s = cpu[0] - last[0]
                thread_cpu_s = cpu[1] - last[1] if cpu[2] == last[2] else None
                if cpu_s < 0:  # each thread read its clock, then the CPU clock: another's came between
                    cpu_s = None
            times.last_t, times.last_cpu = t, cpu
        lines = self.lines
        if group is None:
            lines.step(clock, opened, step, boundary, wall_s, cpu_s, thread_cpu_s)
        else:
            # The held-back backward line, the optimizer step that closed its step and the step's
            # line: one entry whose text is the three lines, and two without text, queued in one
            # extend so that they are numbered together whatever another thread takes meanwhile.
            (backward_clock, backward), lines.held_backward = lines.held_backward, None  # type: ignore[misc]
            seconds, optimizer = group
            writer = lines.writer
            queued = lines.queued
            if not queued:
                writer.queued_due = backward_clock + writer.hold_s / 2
            queued += [(lines.group, backward_clock - writer.t0,
                        (backward, t, seconds, optimizer, opened, step, wall_s, boundary, cpu_s, thread_cpu_s)), NO_LINE, NO_LINE]
        if opened.loss_tensor is not None:
            self.device.defer_loss(step, opened.loss_tensor)
        if live:  # in the hook (with CUDA in use, or --steps): the stream is marked at the step's end
            self.device.boundary(step)
        self.closed_steps += 1
        self.open = OpenStep()
        if self.on_step is not None:
            self.on_step(step)
        return self.max_steps is not None and self.closed_steps >= self.max_steps and not self.limit_reached

    # -- optimizers made before the tracker --------------------------------------------------------
    def expect(self, optimizers: list[Any]) -> None:
        """Optimizers made before the tracker was installed (the Python API's block starts in a
        running process): a backward before their first step() must not be counted as a step of
        its own (no optimizer known yet). The notes of such backwards wait until one of them steps
        (they are its step's), an optimizer is made, or the end (each backward a step of its own,
        as with no optimizer); at most UNDECIDED_NOTES notes."""
        self.candidates = {id(o): weakref.ref(o) for o in optimizers}
        if self.candidates and not self.closed_steps:
            self.undecided = []

    def decide(self, taken: list[Any]) -> list[Any]:
        """The notes to count now: none while undecided; once decided, the held ones first, in
        their order."""
        held = self.undecided
        assert held is not None
        for i, note in enumerate(taken):
            kind = None if note.__class__ is BackwardCall else note[0]
            if kind == GONE or kind == EVALUATED or kind == WORKERS_STARTED or ((kind is None or kind == ENDED or kind == RETURNED) and len(held) < UNDECIDED_NOTES):
                held.append(note)
                continue
            # Decided: an optimizer made or stepping, or too many backwards without one.
            self.undecided = None
            key = None
            if kind == MADE:
                _, key, _ref = note
            elif kind == STEPPED or kind == SKIPPED:
                _, _clock, _start, key, _class, _cpu = note
            ref = self.candidates.get(key) if key is not None else None
            if ref is not None and ref() is not None:  # not another object at a collected one's id
                # A pre-existing optimizer's first step (its pre-hook notes it as made): the
                # waiting backwards are its step's.
                self.required[key] = ref
            elif kind == COMPILED:
                # An optimizer's code compiled: a pre-existing one steps inside compiled code, where
                # its hooks never run (parameters_changed); the waiting backwards are its step's.
                self.required.update((k, r) for k, r in self.candidates.items() if r() is not None)
            return held + taken[i:]
        return []

    # -- one optimizer stepping first among several (the module docstring) ------------------------
    def resolve(self, taken: list[Any]) -> list[Any]:
        """`taken` joins the held notes; the notes to count now: none while it is unknown whether
        the other optimizers step in the held step, else every held note, in order."""
        held = self.held
        assert held is not None
        held += taken
        key = self.held_key
        for i in range(self.held_seen, len(held)):
            note = held[i]
            kind = None if note.__class__ is BackwardCall else note[0]
            if kind is None or kind == ENDED or kind == EVALUATED or kind == WORKERS_STARTED:
                continue
            if (kind == STEPPED or kind == SKIPPED) and note[3] == key:
                self.held_steps += 1
                if self.held_steps >= IDLE_OPTIMIZER_STEPS:
                    return self.release(alone=True)
                continue
            # Another optimizer stepped (or one was made or collected, or an optimizer's code
            # compiled): counted as before, the held step waiting for every optimizer.
            return self.release(alone=False)
        self.held_seen = len(held)
        if len(held) > UNDECIDED_NOTES:
            return self.release(alone=False)
        return []

    def release(self, alone: bool) -> list[Any]:
        """The held notes, to count now. `alone`: the optimizer that stepped first stepped
        IDLE_OPTIMIZER_STEPS times with no other (or the watch ended after it stepped more than
        once): the others stop being waited for, and each of its steps is a step; else the held
        step waits for every optimizer, as without the wait."""
        held, self.held = self.held or [], None
        if alone:
            for other in [k for k in self.required if k != self.held_key]:
                del self.required[other]
        else:
            self.open.together = True
        return held

    def undecided_notes(self) -> list[Any]:
        """The end of the watch: the notes still undecided, to be counted (no optimizer stepped)."""
        held, self.undecided = self.undecided or [], None
        return held
