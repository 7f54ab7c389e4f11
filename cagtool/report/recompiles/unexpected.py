"""Recompiles from causes a user does not expect, named one by one: the intra-op thread count
changed (`torch.set_num_threads`, often by a library, each change one recompile of the budget), a
module switched between train() and eval() around a compiled call, and grad mode turned off for
an evaluation pass. Read from the call's own failing guard (torch_text.call_guard: the newest cache
entry's, unless it was made for another grad mode and an older one fails on something else)
and tied to the line that changed the state where the record has it: the thread count's change is
recorded by cagtool's tap (capture/observe/global_state.py); for train/eval and grad mode torch's
frames hold only the compiled call made in the new state, which is the line given."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cagtool.errors import UnreadableInput
from cagtool.record.loader import ModeRecord
from cagtool.record.manifest import typed_compile_calls
from cagtool.record.schema import (
    ARTIFACT_GUARDS,
    CHECKPOINT_REENTRANT,
    PHASE_CHECKPOINT_RECOMPUTE,
    CompileArtifactEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    FindingEvent,
    SourceRef,
)
from cagtool.report.recompiles.calls import FORCE_EAGER, uncompiled_call
from cagtool.report.recompiles.reads import forward_step, format_source, steps_place
from cagtool.torch_text import call_guard, compiled_grad_mode, inference_mode_switch

FINDING_NUM_THREADS = "num_threads_changed"  # capture/observe/global_state.py's code

CAUSE_NUM_THREADS = "num_threads"
CAUSE_TRAIN_EVAL = "train_eval"
CAUSE_GRAD_MODE = "grad_mode"
CAUSE_INFERENCE_MODE = "inference_mode"
CAUSE_REENTRANT_CHECKPOINT = "reentrant_checkpoint"

_TRAINING_GUARD = re.compile(r"(?P<module>\S*)\.training == (?P<value>True|False)")

WORDS = {
    CAUSE_NUM_THREADS: "the intra-op thread count changed (torch.set_num_threads)",
    CAUSE_TRAIN_EVAL: "a module switched between train() and eval() around the compiled call",
    CAUSE_GRAD_MODE: "grad mode changed around the compiled call (training, and an evaluation under torch.no_grad or "
                     "torch.inference_mode, call the same compiled code)",
    CAUSE_INFERENCE_MODE: "a call under torch.inference_mode() and calls outside it reach the same compiled code "
                          "(its tensors carry no autograd keys there)",
    CAUSE_REENTRANT_CHECKPOINT: "a reentrant checkpoint re-ran its compiled forward in the backward with grad enabled, "
                                "after running it under no_grad in the forward",
}
FIXES = {
    CAUSE_NUM_THREADS: "set the thread count once, before the first compiled call (or stop the library resetting it: "
                       "each new count is a new compile of every compiled frame, out of its recompile_limit)",
    # torch 2.13, checked by hand: a second torch.compile of the same model shares its code's cache, and its
    # eval call recompiles frame 0 all the same; the module torch.compile wrapped (`_orig_mod`) compiles nothing.
    CAUSE_TRAIN_EVAL: "for an evaluation, evaluate with the uncompiled module (`{call}`, or the model you passed to "
                      "torch.compile): no compile for it; for a module frozen in training (a BatchNorm's statistics), switch it "
                      "before the first compiled call. Or accept one cached graph per mode: it costs one "
                      "recompile, then both are cached (a second torch.compile of the same model recompiles all the same: "
                      "it shares the first one's cache)",
    CAUSE_GRAD_MODE: "evaluate with the uncompiled module (`{call}` at the evaluation's call, grad still off there): no compile for "
                     "the evaluation (a module compiled in place, by `module.compile()` or a library's `engine.compile()`, has no "
                     f"`_orig_mod`: {FORCE_EAGER} there). Or accept it: the first "
                     "evaluation costs one recompile, then both graphs are cached",
    CAUSE_INFERENCE_MODE: "evaluate under one context everywhere (torch.no_grad() for every evaluation, or "
                          "torch.inference_mode() for every one; Lightning: Trainer(inference_mode=False)). Or accept it: one "
                          "recompile, then both graphs are cached",
    CAUSE_REENTRANT_CHECKPOINT: "checkpoint(..., use_reentrant=False): its forward runs with grad enabled, as its "
                                "recompute does, so the compiled function is not compiled twice "
                                "(`cagtool checkpointing` verifies it on your job)",
}

# The module compiled in place (`model.compile()`): it has no `_orig_mod` (explain.py `_in_place_skip`).
IN_PLACE_FIX = (f"for an evaluation, run it eagerly: the module is compiled in place (`.compile()`), so it has no `_orig_mod`; "
                f"{FORCE_EAGER}. Or accept it: the first evaluation costs one recompile, then both graphs are cached")


@dataclass(frozen=True)
class UnexpectedCause:
    cause: str  # CAUSE_*
    compile_id: str
    step: int | None
    guard: str  # torch's failing guard, verbatim
    changed_at: SourceRef | None  # the line that changed the state (the tap's) or made the call in it
    how: str  # "changed here" | "called in the new state"
    detail: str = ""  # `from 2 to 1`, `fn._modules['1'].training == True`
    # Compiled for an evaluation (grad off: its guard tree says so, or into inference mode): it came
    # between step - 1 and step (reads.steps_place).
    between_steps: bool = False
    argnames: tuple[str, ...] = ()  # the recompiled function's parameters, in order (its compile's co_argnames)
    # Every torch.compile call of the job compiled a module in place (`model.compile()`, the manifest's
    # compile_calls): no `_orig_mod` to evaluate with.
    in_place: bool = False

    def text(self, cwd: str, ids: str = "") -> str:
        """Its line; `ids`: the compile ids it stands for where it is said once for several (texts)."""
        at = "at step ?" if self.step is None else steps_place([self.step], self.between_steps)
        at = at if at.startswith(("between", "before")) else f"at {at}"
        where = f"; {self.how} at {format_source(self.changed_at, cwd)}" if self.changed_at is not None else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"{ids or self.compile_id} {at}: {WORDS[self.cause]}{detail}{where}"


def texts(causes: list[UnexpectedCause], cwd: str) -> list[str]:
    """Each cause's line, in order; the recompiles of one change that follow each other (one per
    frame of a forward split by graph breaks) on one line with their compile ids, at the first's
    place (the evaluation's call; a later frame's caller is the forward's own line where it broke):
    `0/2, 1/2, 2/2 between steps 5 and 6: grad mode changed ...`."""
    groups: list[tuple[tuple, list[UnexpectedCause]]] = []  # (the change, its causes)
    for cause in causes:
        change = (cause.cause, cause.step, cause.between_steps, cause.guard, cause.detail, cause.how)
        if groups and groups[-1][0] == change:
            groups[-1][1].append(cause)
        else:
            groups.append((change, [cause]))
    return [group[0].text(cwd, ", ".join(c.compile_id for c in group)) for _, group in groups]


def _classify(guard: str) -> tuple[str, str] | None:
    if "GLOBAL_STATE changed:" in guard:
        changed = guard.split("GLOBAL_STATE changed:", 1)[1].split()
        if "num_threads" in changed:
            return CAUSE_NUM_THREADS, ""
        if "grad_mode" in changed:
            also = [f"`{part}`" for part in changed if part != "grad_mode"]
            return CAUSE_GRAD_MODE, f"{', '.join(also)} changed with it" if also else ""
    match = _TRAINING_GUARD.search(guard)
    if match:
        return CAUSE_TRAIN_EVAL, f"guard {match.group(0)} failed"
    switch = inference_mode_switch(guard)
    if switch is not None:
        return CAUSE_INFERENCE_MODE, "into inference mode" if switch else "out of inference mode"
    return None


def unexpected_causes(record: ModeRecord) -> list[UnexpectedCause]:
    """Every Dynamo recompile whose failing guard is one of the causes above, in record order.
    Computed once per record (the summary reads them twice, a recompile table once)."""
    return list(record.derived("unexpected_causes", _unexpected_causes))


def _unexpected_causes(record: ModeRecord) -> list[UnexpectedCause]:
    thread_changes = [f for f in record.of(FindingEvent) if f.code == FINDING_NUM_THREADS]
    argnames = {e.compile_id: tuple(e.co_argnames) for e in record.of(DynamoCompileEvent) if e.co_argnames}
    calls = typed_compile_calls(record.manifest)
    in_place = bool(calls) and all(c.get("in_place") is True for c in calls)
    out: list[UnexpectedCause] = []
    for event in record.of(DynamoRecompileEvent):
        guard = call_guard([r.split(":", 1)[-1].strip().split("  #")[0] for r in event.reasons])
        found = _classify(guard)
        if found is None:
            continue
        cause, detail = found
        phase = event.phase
        if phase is not None and phase.phase == PHASE_CHECKPOINT_RECOMPUTE:
            if cause != CAUSE_GRAD_MODE or phase.checkpoint != CHECKPOINT_REENTRANT:
                continue  # a recompute's own recompile: its phase says where, explain.py why
            cause = CAUSE_REENTRANT_CHECKPOINT
            detail = f"checkpointed {phase.function.function}" if phase.function is not None and phase.function.function else ""
        step = event.step if event.is_ca_graph else forward_step(event.step, record.mode)
        changed_at, how = event.source, "called in the new state"
        if cause == CAUSE_NUM_THREADS:
            before = [f for f in thread_changes if f.seq < event.seq]
            if before:
                change = before[-1]
                changed_at, how = change.source, "changed"
                detail = f"from {change.detail.get('before')} to {change.detail.get('after')}"
        between = (cause == CAUSE_GRAD_MODE and compiled_grad_off(record, event.compile_id)) or (
            cause == CAUSE_INFERENCE_MODE and detail == "into inference mode")
        out.append(UnexpectedCause(cause, event.compile_id, step, guard.split("  #")[0].strip(), changed_at, how, detail,
                                   between_steps=between and step is not None, argnames=argnames.get(event.compile_id, ()),
                                   in_place=in_place))
    return out


def compiled_grad_off(record: ModeRecord, compile_id: str) -> bool:
    """Whether the recompile's own compile was made with grad off, as its recorded guard tree says
    (an evaluation's); False where the tree is not in the record (left out, or gone: detail)."""
    for event in record.of(CompileArtifactEvent):
        if event.artifact == ARTIFACT_GUARDS and event.compile_id == compile_id:
            try:
                return compiled_grad_mode(record.artifact_text(event)) is False
            except UnreadableInput:
                return False
    return False


def fix_text(cause: UnexpectedCause) -> str:
    """The fix of a cause, naming the call made in the new state as the module before torch.compile
    (`cmodel._orig_mod(xv)`) where the line holds one."""
    if cause.in_place and cause.cause in (CAUSE_GRAD_MODE, CAUSE_TRAIN_EVAL):
        return IN_PLACE_FIX
    code = cause.changed_at.code if cause.changed_at is not None and cause.how == "called in the new state" else ""
    call = uncompiled_call(code, cause.argnames, cause.changed_at.wrapper if cause.changed_at is not None and code else "")
    # The call made in the new state is the evaluation's only where the state went to eval (a
    # `training == True` guard failed); the grad mode's reason says neither way: the module alone.
    if not (cause.cause == CAUSE_TRAIN_EVAL and cause.detail.endswith("== True failed")):
        call = call.split("._orig_mod(", 1)[0] + "._orig_mod(...)"
    return FIXES[cause.cause].replace("{call}", call)


SHORT = {CAUSE_NUM_THREADS: "thread count", CAUSE_TRAIN_EVAL: "train/eval", CAUSE_GRAD_MODE: "grad mode",
         CAUSE_INFERENCE_MODE: "inference mode",
         CAUSE_REENTRANT_CHECKPOINT: "reentrant checkpoint"}


def unexpected_lines(causes: list[UnexpectedCause], cwd: str) -> list[str]:
    if not causes:
        return []
    lines = ["recompiles from causes you may not expect:"]
    lines += [f"  {text}" for text in texts(causes, cwd)]
    first = {c.cause: c for c in reversed(causes)}
    for cause in dict.fromkeys(c.cause for c in causes):
        lines.append(f"  Fix ({SHORT[cause]}): {fix_text(first[cause])}")
    return lines


def unexpected_json(causes: list[UnexpectedCause], cwd: str) -> list[dict[str, object]]:
    return [
        {"cause": c.cause, "compile_id": c.compile_id, "step": c.step, "between_steps": c.between_steps, "guard": c.guard, "detail": c.detail or None,
         "changed_at": format_source(c.changed_at, cwd) or None, "how": c.how, "words": WORDS[c.cause], "fix": fix_text(c),
         "text": c.text(cwd)}
        for c in causes
    ]
