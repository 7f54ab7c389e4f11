"""The step tracker's lines: the `backward`, `optimizer_step` and `step` events its drain counted,
queued for the writer (record/writer.py: `queued`) as (line, t, payload) entries whose text is made
when the writer writes them, several hold_s / 2 of steps at once.

A step of one backward closed by its one optimizer's step() (the usual step) is one entry whose text
is its three lines, made in one call, and two entries without text after it, so the writer numbers
them as three events: `StepLines` holds that backward's line back until it knows whether the next
note closes the step."""

from __future__ import annotations

from typing import Any, Callable

from cagtool.record.schema import BackwardEvent, OptimizerStepEvent, StepEvent, scalar_lines
from cagtool.record.writer import RecordWriter

Line = Callable[[int, float, Any], bytes]  # the line's UTF-8, as the writer writes it


def line_makers(writer: RecordWriter) -> tuple[Line, Line, Line, Line]:
    """The `line(seq, t, payload)` functions of the tracker's queued lines, by payload: backward
    ((step, index, backward_s, captures, call, loss, thread): a BackwardEvent's fields), optimizer
    step ((step, wall_s, optimizer class name)), step ((open step, step, wall_s, boundary, cpu_s,
    thread_cpu_s)) and a step's three lines as one (group: boundaries.py, `StepCounter.close`). Payloads are
    plain tuples, made in the drain once a step: a NamedTuple would cost several times as much.
    Each line is its event's line (record/schema.py, `event_line`), made from the values by
    `scalar_lines` without building the event, so a field added to one of these events is written
    once the drain passes its value. The values go by position, in the order of the classes'
    `__struct_fields__` (`EVENT_FIELDS`, checked by tests/test_event_lines.py)."""
    backward_text = scalar_lines(BackwardEvent)
    optimizer_step_text = scalar_lines(OptimizerStepEvent)
    step_text = scalar_lines(StepEvent)
    group_text = scalar_lines(BackwardEvent, OptimizerStepEvent, StepEvent)

    def backward_line(seq: int, t: float, payload: tuple) -> str:
        return backward_text((seq, t, *payload))

    def optimizer_step_line(seq: int, t: float, payload: tuple) -> str:
        return optimizer_step_text((seq, t, *payload))

    def step_line(seq: int, t: float, payload: tuple) -> str:
        opened, step, wall_s, boundary, cpu_s, thread_cpu_s = payload
        return step_text((seq, t, step, opened.backward_s, opened.loss, opened.captures, opened.compiles, opened.compile_s, wall_s,
                          opened.backward_calls, boundary, opened.optimizer_s, opened.skipped, cpu_s, thread_cpu_s, opened.evaluation,
                          opened.workers_started))

    def group_line(seq: int, t: float, payload: tuple) -> str:
        """A step's backward, optimizer-step and step lines (seq, seq + 1, seq + 2), made together."""
        backward, t_step, optimizer_s, optimizer, opened, _, wall_s, boundary, cpu_s, thread_cpu_s = payload
        step, index, backward_s, captures, call, loss, thread = backward
        return group_text((seq, t, step, index, backward_s, captures, call, loss, thread,
                           seq + 1, t_step, step, optimizer_s, optimizer,
                           seq + 2, t_step, step, opened.backward_s, opened.loss, opened.captures, opened.compiles, opened.compile_s, wall_s,
                           opened.backward_calls, boundary, opened.optimizer_s, opened.skipped, cpu_s, thread_cpu_s, opened.evaluation,
                           opened.workers_started))

    return backward_line, optimizer_step_line, step_line, group_line


# The fields of the tracker's events in the order line_makers passes their values (their `__struct_fields__`).
EVENT_FIELDS = {
    BackwardEvent: ("seq", "t", "step", "index", "backward_s", "ca_captures", "call", "loss", "thread"),
    OptimizerStepEvent: ("seq", "t", "step", "wall_s", "optimizer"),
    StepEvent: ("seq", "t", "step", "backward_s", "loss", "ca_captures", "compiles", "compile_s", "wall_s", "backward_calls", "boundary",
                "optimizer_s", "skipped", "cpu_s", "thread_cpu_s", "evaluation", "workers_started"),
}


# A queued entry without text (the writer makes none): an event whose line a group entry before it wrote.
NO_LINE = (None, 0.0, None)


class StepLines:
    """Queues the drain's lines for the writer, in the order of their events (the caller holds the
    tracker's lock: one thread appends at a time)."""

    def __init__(self, writer: RecordWriter) -> None:
        self.writer = writer
        self.queued = writer.queued  # the writer's list (the same for its life): one append a line
        self._backward, self._optimizer_step, self._step, self.group = line_makers(writer)
        # The step's one backward line, held back in case the step's optimizer step closes it next,
        # so that the three lines go as one entry: (perf_counter clock, payload). Set and taken by
        # the drain (boundaries.py, StepCounter.backward_ended and close), released here.
        self.held_backward: tuple[float, tuple] | None = None

    def reset(self) -> None:
        self.held_backward = None

    def _queue(self, line: Line, clock: float, payload: Any) -> None:
        """A line made at perf_counter time `clock`: when it is the first in the queue, the queue is
        due hold_s / 2 from then. (The writer's flusher runs already: `set_source` started it, and
        `reopen` again in a forked child.) A held-back backward line goes first."""
        if self.held_backward is not None:
            self.release()
        queued = self.queued
        writer = self.writer
        if not queued:
            writer.queued_due = clock + writer.hold_s / 2
        queued.append((line, clock - writer.t0, payload))

    def release(self) -> None:
        """The held-back backward line, on its own after all (the step did not close next)."""
        (clock, payload), self.held_backward = self.held_backward, None  # type: ignore[misc]
        self._queue(self._backward, clock, payload)

    def backward(self, clock: float, payload: tuple) -> None:
        self._queue(self._backward, clock, payload)

    def optimizer_step(self, clock: float, step: int, seconds: float, optimizer: str) -> None:
        self._queue(self._optimizer_step, clock, (step, seconds, optimizer))

    def step(self, clock: float, opened: Any, step: int, boundary: str, wall_s: float | None, cpu_s: float | None,
             thread_cpu_s: float | None) -> None:
        """Step `step`'s line, its span measured by the caller (timing.py). A step closed by the
        optimizer step its one backward's line waits for is one entry, queued by the caller
        (boundaries.py, `StepCounter.close`)."""
        self._queue(self._step, clock, (opened, step, wall_s, boundary, cpu_s, thread_cpu_s))
