"""The phase of every compile and recompile of a mode (forward frame, backward, AOT backward,
compiled-autograd graph, activation-checkpoint recompute) with its step, the user's line and the
checkpointed function: pure functions of the record, no rendering.

The phase is what the live run read from the stack at compile time (`CompilePhase`, see
capture/observe/compile_phase.py). A record without it (an imported log, an older record) gets
the phase its compile id implies: `!N/...` a CA graph, else a forward frame, marked `inferred`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import (
    PHASE_AOT_BACKWARD,
    PHASE_BACKWARD,
    PHASE_CA_GRAPH,
    PHASE_CHECKPOINT_RECOMPUTE,
    PHASE_FORWARD,
    AotBackwardGraphEvent,
    CAGraphEvent,
    CompilePhase,
    DynamoCompileEvent,
    SourceRef,
)
from cagtool.torch_text import compile_attempt

PHASE_WORDS = {
    PHASE_FORWARD: "forward frame",
    PHASE_BACKWARD: "backward (a frame compiled while backward ran)",
    PHASE_AOT_BACKWARD: "AOT backward",
    PHASE_CA_GRAPH: "compiled-autograd graph",
    PHASE_CHECKPOINT_RECOMPUTE: "activation-checkpoint recompute in the backward",
}
PHASE_ORDER = (PHASE_FORWARD, PHASE_CHECKPOINT_RECOMPUTE, PHASE_BACKWARD, PHASE_AOT_BACKWARD, PHASE_CA_GRAPH)
CHECKPOINT_WORDS = {"reentrant": "use_reentrant=True", "non_reentrant": "use_reentrant=False", "selective": "selective"}


@dataclass(frozen=True)
class PhasedCompile:
    """One compile (a recompile when `attempt` > 0) with the phase it ran in."""

    compile_id: str
    step: int | None
    seq: int
    phase: str
    attempt: int | None
    checkpoint: str = ""
    function: SourceRef | None = None  # the checkpointed function
    caller: SourceRef | None = None  # the user's line on the stack
    inferred: bool = False  # the record had no phase: read off the compile id
    capture: bool = False  # a compiled-autograd capture (`!N`), not a Dynamo compile

    @property
    def counted(self) -> bool:
        """Counted once among the compiles by phase: Dynamo's first compile of a CA graph's code
        (`!N/F/0`) is the graph its capture made, counted as that capture; a recompile of it is its own."""
        return not (self.phase == PHASE_CA_GRAPH and not self.capture and not self.recompile)

    @property
    def recompile(self) -> bool:
        return bool(self.attempt)

    def words(self) -> str:
        """`activation-checkpoint recompute in the backward (use_reentrant=True) of Block.forward`."""
        text = PHASE_WORDS.get(self.phase, self.phase)
        if self.phase == PHASE_CHECKPOINT_RECOMPUTE:
            if self.checkpoint:
                text += f" ({CHECKPOINT_WORDS.get(self.checkpoint, self.checkpoint)})"
            if self.function is not None and self.function.function:
                text += f" of {self.function.function}"
        return text


@dataclass
class ModePhases:
    """Every compile of one mode by phase, in record order."""

    mode: str
    compiles: list[PhasedCompile] = field(default_factory=list)

    def counts(self, recompiles_only: bool = False) -> dict[str, int]:
        found = Counter(c.phase for c in self.compiles if c.recompile or (not recompiles_only and c.counted))
        return {p: found[p] for p in PHASE_ORDER if found[p]} | {p: n for p, n in found.items() if p not in PHASE_ORDER}

    @property
    def recompiles(self) -> list[PhasedCompile]:
        return [c for c in self.compiles if c.recompile]

    def of(self, compile_id: str) -> PhasedCompile | None:
        """The compile `compile_id` itself (not the AOT backward graph its compile built, same id)."""
        found = [c for c in self.compiles if c.compile_id == compile_id]
        return next((c for c in found if c.phase != PHASE_AOT_BACKWARD), found[0] if found else None)


def _phased(event: DynamoCompileEvent) -> PhasedCompile:
    phase: CompilePhase | None = event.phase
    if phase is None:
        return PhasedCompile(event.compile_id, event.step, event.seq, PHASE_CA_GRAPH if event.is_ca_graph else PHASE_FORWARD,
                             compile_attempt(event.compile_id), inferred=True)
    return PhasedCompile(event.compile_id, event.step, event.seq, phase.phase, compile_attempt(event.compile_id), phase.checkpoint,
                         phase.function, phase.caller)


def mode_phases(record: ModeRecord) -> ModePhases:
    """Dynamo's compiles (each with its phase), the CA captures and the AOT backward graphs."""
    out = ModePhases(record.mode)
    for event in record.events:
        if isinstance(event, DynamoCompileEvent):
            out.compiles.append(_phased(event))
        elif isinstance(event, CAGraphEvent):
            # every capture after the first is a CA recompile (a cache miss): attempt = its id
            out.compiles.append(PhasedCompile(event.compile_id or f"!{event.ca_id}", event.step, event.seq, PHASE_CA_GRAPH, event.ca_id,
                                              capture=True))
        elif isinstance(event, AotBackwardGraphEvent):
            # built by its forward frame's compile (counted there): a graph, not another recompile
            out.compiles.append(PhasedCompile(event.compile_id, event.step, event.seq, PHASE_AOT_BACKWARD, None))
    return out


PHASE_KINDS = frozenset(cls.kind for cls in (DynamoCompileEvent, CAGraphEvent, AotBackwardGraphEvent))


def phase_args(phase: CompilePhase | None, compile_id: str, is_ca_graph: bool) -> dict[str, object]:
    """The phase as a trace event's or a chart's arguments (Perfetto, the HTML timeline)."""
    found = PhasedCompile(compile_id, None, -1, phase.phase, None, phase.checkpoint, phase.function) if phase is not None else (
        PhasedCompile(compile_id, None, -1, PHASE_CA_GRAPH if is_ca_graph else PHASE_FORWARD, None, inferred=True))
    out: dict[str, object] = {"phase": found.phase, "phase_words": found.words()}
    if found.checkpoint:
        out["checkpoint"] = found.checkpoint
    if found.function is not None:
        out["checkpointed_function"] = f"{found.function.function} ({found.function.file}:{found.function.line})"
    if found.inferred:
        out["phase_inferred"] = True
    return out
