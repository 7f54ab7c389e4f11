"""The recompile budget over a job: per compiled frame, the cache entries Dynamo made against
`torch._dynamo.config.recompile_limit`, the rate, a forecast of the step that reaches the limit,
and once it was hit, what ran eager from then on and what that cost in step time; the CA graph
count beside it. Pure functions of the record, no rendering.

torch counts the limit per code object: a frame's compile ids are `F/0, F/1, ...` (or `!N/F/C`
inside compiled-autograd graph N, the same frame F), and the compile that would make entry
`recompile_limit + 1` is refused (torch/_dynamo/cache_size.py, `exceeds_recompile_limit`): the
frame then runs uncompiled whenever its guards fail."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cagtool.record.loader import ModeRecord
from cagtool.errors import UnreadableInput
from cagtool.record.schema import ARTIFACT_GUARDS, CAGraphEvent, CompileArtifactEvent, DynamoCompileEvent, DynamoRecompileEvent, SourceRef, StepEvent
from cagtool.report.recompiles.reads import (LimitHit, after_training, forward_step, limit_hits, step_summary, torch_frames_in_captures,
                                             training_end)
from cagtool.torch_text import compile_attempt, compile_frame, guard_shape, recompile_limit, wrapped_module

# torch 2.13 runs every torch.compile'd module's call through this one function (docs/torch-internals.md,
# "One frame for every compiled module"): its frame is torch's, the user's is the module it wraps.
WRAPPER_FILE_END = "_dynamo/external_utils.py"
WRAPPER_FUNCTION = "inner"

# Recompiles of one frame (or CA recaptures) before a rate, a forecast or "still compiling" is read from them.
TREND_RECOMPILES = 3
DEFAULT_RECOMPILE_LIMIT = 8  # torch 2.13's default, for records made before the limit was kept


@dataclass(frozen=True)
class FrameBudget:
    """One compiled frame (code object) and its use of the recompile budget."""

    frame: str  # torch's frame id, F of F/C
    function: str
    file: str
    line: int | None
    entries: int  # compiles that produced code (cache entries)
    limit: int
    limit_known: bool  # the record kept the limit (else torch's default is assumed)
    first_step: int | None
    last_recompile_step: int | None
    last_step: int | None  # the job's last step
    hit: LimitHit | None = None
    called_at: SourceRef | None = None  # the user's line that called it (a compiled module's frame is torch's wrapper)
    # Each recompile's failing guard, its numbers blanked (`lr == N`): one per recompile whose
    # reason the record kept; empty where it kept none.
    guards: tuple[str, ...] = ()
    # The classes of the modules a frame of torch's module wrapper (`is_module_wrapper`) ran, in the
    # order first compiled, from its compiles' guard trees; empty where the record kept none.
    modules: tuple[str, ...] = ()
    # A frame that is not the user's, every compile of it made inside compiled autograd's captures
    # (reads.py torch_frames_in_captures): the first capture's ca_id; None otherwise.
    inside_capture: int | None = None
    # Recompiles after training ended (mode_budget): counted in `entries`, out of the rate.
    after_training: int = 0

    @property
    def is_module_wrapper(self) -> bool:
        """The frame is torch's wrapper of a compiled module's call (`inner` in
        torch/_dynamo/external_utils.py), not the user's code."""
        return self.function == WRAPPER_FUNCTION and self.file.replace("\\", "/").endswith(WRAPPER_FILE_END)

    @property
    def one_offs(self) -> bool:
        """Every recompile failed on a guard of its own (a thread count set, then train/eval, then
        no_grad): changes made once each, whose number says nothing of the next step's."""
        return len(self.guards) == self.recompiles and len(set(self.guards)) == len(self.guards)

    @property
    def recompiles(self) -> int:
        return max(self.entries - 1, 0)

    @property
    def rate(self) -> float | None:
        """Recompiles per step, from its first compile to its last recompile (None: fewer than
        TREND_RECOMPILES, or all in one step). One or two recompiles are no rate: a one-off (a last
        batch smaller, an optimizer's state filled by its first step) or two planned changes (a
        backbone unfrozen, then a layer frozen again; an evaluation and the training after it) read
        as the start of a storm does, and only a third tells them apart. Nor are recompiles that each
        failed on another guard (one_offs): three changes made once each are no rate."""
        training = self.recompiles - self.after_training
        if training < TREND_RECOMPILES or self.first_step is None or self.last_recompile_step is None or self.one_offs:
            return None
        span = self.last_recompile_step - self.first_step
        return training / span if span > 0 else None

    @property
    def still_compiling(self) -> bool:
        """It recompiled within one interval of its own rate before the job's end: no sign of stopping."""
        if self.hit is not None or self.rate is None or self.last_step is None or self.last_recompile_step is None:
            return False
        return self.last_step - self.last_recompile_step <= max(1.0, 1.0 / self.rate)

    @property
    def forecast_step(self) -> int | None:
        """The step at which, at this rate, its next compile would be refused by the limit."""
        if not self.still_compiling or self.rate is None or self.last_recompile_step is None:
            return None
        left = self.limit - self.entries  # compiles it may still make
        return self.last_recompile_step + math.ceil((left + 1) / self.rate)


@dataclass(frozen=True)
class EagerCost:
    """What the steps after a limit hit cost against the steady steps before it (medians, wall)."""

    hit_step: int
    steps_after: int
    median_after_s: float | None
    median_before_s: float | None

    @property
    def ratio(self) -> float | None:
        if not self.median_after_s or not self.median_before_s:
            return None
        return self.median_after_s / self.median_before_s


@dataclass
class ModeBudget:
    mode: str
    frames: list[FrameBudget] = field(default_factory=list)
    ca_graphs: int = 0
    ca_graph_steps: list[int] = field(default_factory=list)  # the step of each CA capture
    last_step: int | None = None
    eager_costs: list[EagerCost] = field(default_factory=list)

    @property
    def still_compiling(self) -> list[FrameBudget]:
        return [f for f in self.frames if f.still_compiling]

    @property
    def ca_still_capturing(self) -> bool:
        """A CA graph was captured in the last step after at least TREND_RECOMPILES recaptures (one
        is no trend, FrameBudget.rate): the CA cache keeps growing."""
        return (len(self.ca_graph_steps) > TREND_RECOMPILES and self.last_step is not None and self.ca_graph_steps[-1] == self.last_step
                and self.last_step > 0)

    @property
    def steady(self) -> bool:
        """Whether the job reached a steady state: no frame still compiling, no CA graph in its last step."""
        return not self.still_compiling and not self.ca_still_capturing

    @property
    def ca_rate(self) -> float | None:
        if len(self.ca_graph_steps) < 2:
            return None
        span = self.ca_graph_steps[-1] - self.ca_graph_steps[0]
        return (len(self.ca_graph_steps) - 1) / span if span > 0 else None


def _steps(record: ModeRecord) -> tuple[list[int], list[float | None], list[bool]]:
    """(step numbers, wall seconds, whether the step compiled), from the columns or the events."""
    held = record.columns.get(StepEvent.kind)
    if held is not None:
        compiled = [bool(a or b) for a, b in zip(held.column("compiles"), held.column("ca_captures"))]
        return list(held.column("step")), list(held.column("wall_s")), compiled
    events = record.of(StepEvent)
    return [e.step for e in events], [e.wall_s for e in events], [bool(e.compiles or e.ca_captures) for e in events]


def eager_cost(record: ModeRecord, hit: LimitHit) -> EagerCost | None:
    """Steps after the hit (the frame ran eager whenever its guards failed) against steady steps before it."""
    if hit.step is None:
        return None
    numbers, wall, compiled = _steps(record)
    before = [w for n, w, c in zip(numbers, wall, compiled) if n < hit.step and w is not None and not c]
    after = [w for n, w, c in zip(numbers, wall, compiled) if n > hit.step and w is not None and not c]
    if not after:
        return None
    import statistics  # only after a limit hit: `recompiles` loads no more than it prints

    return EagerCost(hit.step, len(after), statistics.median(after), statistics.median(before) if before else None)


def mode_budget(record: ModeRecord, hits: list[LimitHit], last_step: int | None, end: int | None = None) -> ModeBudget:
    """The budget of every frame Dynamo compiled in this mode (CA graphs' own frames included).
    Compiles after training ended (`end`, reads.training_end: an evaluation after the last step)
    use the budget but set no rate: they say nothing of the training steps' pace."""
    by_frame: dict[str, list[DynamoCompileEvent]] = {}
    guards: dict[str, list[str]] = {}
    out = ModeBudget(record.mode, last_step=last_step)
    for event in record.events:
        if isinstance(event, DynamoCompileEvent):
            frame = compile_frame(event.compile_id)
            if frame is not None:
                by_frame.setdefault(frame, []).append(event)
        elif isinstance(event, DynamoRecompileEvent) and event.reasons:
            frame = compile_frame(event.compile_id)
            if frame is not None:
                guards.setdefault(frame, []).append(guard_shape(event.reasons[0]))
        elif isinstance(event, CAGraphEvent):
            out.ca_graphs += 1
            if event.step is not None:
                out.ca_graph_steps.append(event.step)
    hit_of = {compile_frame(h.compile_id): h for h in hits if h.compile_id}
    wrapped = _wrapped_modules(record, by_frame)
    in_captures = torch_frames_in_captures(record)
    for frame, events in by_frame.items():
        made = [e for e in events if not (e.fail_reason and recompile_limit(f"{e.fail_type or ''} {e.fail_reason}"))]
        named = next((e for e in events if e.co_name), events[0])
        limits = [e.recompile_limit for e in events if e.recompile_limit is not None]
        steps = [s for s in (e.step if e.is_ca_graph else forward_step(e.step, record.mode) for e in made) if s is not None]
        attempts = [(e, s) for e, s in zip(made, steps) if compile_attempt(e.compile_id)]
        recompile_steps = [s for e, s in attempts if not after_training(s, e.seq, last_step, end)]
        hit = hit_of.get(frame)
        limit = limits[-1] if limits else (hit.limit_value if hit is not None and hit.limit_value else DEFAULT_RECOMPILE_LIMIT)
        out.frames.append(
            FrameBudget(
                frame=frame,
                function=named.co_name,
                file=named.co_filename,
                line=named.co_firstlineno,
                entries=len(made),
                limit=limit,
                limit_known=bool(limits) or (hit is not None and hit.limit_value is not None),
                first_step=min(steps) if steps else None,
                last_recompile_step=max(recompile_steps) if recompile_steps else None,
                last_step=last_step,
                hit=hit,
                called_at=next((e.phase.caller for e in events if e.phase is not None and e.phase.caller is not None), None),
                guards=tuple(guards.get(frame, ())),
                modules=wrapped.get(frame, ()),
                inside_capture=in_captures.frames.get(frame),
                after_training=len(attempts) - len(recompile_steps),
            )
        )
    out.frames.sort(key=lambda f: (-f.entries, f.frame))
    for hit in hits:
        cost = eager_cost(record, hit)
        # Two frames that hit the limit in one step share its later steps: one figure.
        if cost is not None and all(c.hit_step != cost.hit_step for c in out.eager_costs):
            out.eager_costs.append(cost)
    return out


def _wrapped_modules(record: ModeRecord, by_frame: dict[str, list[DynamoCompileEvent]]) -> dict[str, tuple[str, ...]]:
    """frame -> the classes of the modules each frame of torch's module wrapper ran, from the guard
    trees of its compiles (one small file per compile, only that frame's). A tree the record lost,
    or one planted as a link or led out of the run (refused by the reader), names none."""
    ids = {e.compile_id: frame for frame, events in by_frame.items() for e in events
           if e.co_name == WRAPPER_FUNCTION and e.co_filename.replace("\\", "/").endswith(WRAPPER_FILE_END) and not e.compile_id.startswith("!")}
    if not ids:
        return {}
    found: dict[str, list[str]] = {}
    for event in record.of(CompileArtifactEvent):
        if event.artifact != ARTIFACT_GUARDS or event.compile_id not in ids:
            continue
        try:
            module = wrapped_module(record.artifact_text(event))
        except (UnreadableInput, OSError):
            continue
        names = found.setdefault(ids[event.compile_id], [])
        if module and module[0] not in names:
            names.append(module[0])
    return {frame: tuple(names) for frame, names in found.items() if names}


def budget_of(record: ModeRecord) -> ModeBudget:
    """The budget of a fully loaded mode record (the summary and the HTML report read it this way)."""
    last = step_summary(record).last
    return mode_budget(record, limit_hits(record, record.of(DynamoCompileEvent)), last, training_end(record) if last is not None else None)
