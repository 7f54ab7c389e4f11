"""Per-mode figures computed from a mode record: counts, compile time, step-time statistics.

Pure functions of the record; every renderer (summary, compare, gate) reads these.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, fields, replace
from typing import Any, Sequence

from cagtool.errors import UnreadableInput
from cagtool.record.regular_files import read_record_bytes
from cagtool.record.loader import ModeRecord, peers
from cagtool.record.manifest import ModeManifest
from cagtool.record.schema import (
    FINDING_CA_CAPTURE_ERROR,
    FINDING_CA_CAPTURE_FAILED,
    FIRST_STEP,
    MISS_CHANGED_SHAPES,
    MISS_NEW_NODE,
    MISS_UNKNOWN,
    STATUS_KILLED,
    STATUS_RUNNING,
    STEP_BOUNDARY_BACKWARD,
    STEP_BOUNDARY_COMPILED_OPTIMIZER,
    STEP_BOUNDARY_OPTIMIZER,
    AotBackwardGraphEvent,
    BackwardCompileEvent,
    CACompileEvent,
    CacheMissEvent,
    CAGraphEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    BackwardEvent,
    FinalStateEvent,
    FindingEvent,
    GraphBreakEvent,
    OptimizerStepEvent,
    StepDeviceEvent,
    StepEvent,
)
from cagtool.report.replaced import backward_call
from cagtool.torch_text import ca_id_of, compile_attempt, compile_frame, fell_back_to_eager, hint_advice, unresumable_break

# What a capture with no cache-miss reason is when the capture before it raised: torch captures a
# graph whose capture raised again when it comes back, and by design gives no reason for it. The
# summary, the headline, the gate and `recompiles --explain` name it in these words.
RECAPTURED_AFTER_FAILURE = "recaptured after a failed capture"


def failed_capture_ids(findings: list[FindingEvent]) -> frozenset[int]:
    """The CA ids of the captures that raised (FindingEvents `ca_capture_failed` and `ca_capture_error`)."""
    ids = set()
    for finding in findings:
        if finding.code in (FINDING_CA_CAPTURE_FAILED, FINDING_CA_CAPTURE_ERROR):
            failed_id = str(finding.detail.get("compile_id") or "")
            if failed_id[1:].isdigit():
                ids.add(int(failed_id[1:]))
    return frozenset(ids)


def follows_failed_capture(ca_id: int | None, failed: frozenset[int]) -> bool:
    """The capture right after one that raised: the failed graph captured again (with no reason)."""
    return ca_id is not None and ca_id - 1 in failed


@dataclass(frozen=True)
class StepStats:
    """Steady-state step time over the steps not affected by compilation (no compile or capture
    during the step). Schema 2: a step's time is the interval since the previous step ended
    (forward, every backward, optimizer), measured on the device with CUDA events when the job ran
    on CUDA (`clock == "device"`), else on the wall clock. Schema 1 records: the interval between
    consecutive backward starts."""

    count: int  # steady steps used
    excluded: list[int]  # steps left out: compilation touched them, or other work ran in them (`interrupted`)
    median_s: float | None
    p10_s: float | None
    p90_s: float | None
    mean_s: float | None
    first_step_s: float | None  # from mode start to the end of the first step
    clock: str = "wall"  # wall | device
    interrupted: tuple[int, ...] = ()  # those of `excluded` left out for other work alone (interrupted_steps)
    interruptions: tuple[str, ...] = ()  # what that work was (INTERRUPTION_*)


@dataclass(frozen=True)
class GraphBreakSite:
    """One reason Dynamo broke the graph at one place in the user's code: one line can break for
    two reasons (`print(t.item())`: the `.item()`, then `print` of the float in the resume frame),
    each its own site here. `logged` is how many times torch logged it, which is not a count of
    graph breaks: torch logs one break once per trace attempt (a break inside a loop is logged
    again when Dynamo restarts); `breaks` is the count, torch's own (its counter, by reason) where
    that reason broke at this place alone, else once per compile."""

    file: str
    line: int | None
    reason: str  # what tells this break apart: torch's gb_type and explanation (torch_text.graph_break_words)
    logged: int
    gb_id: str = ""  # torch's stable graph-break id (GBxxxx), from the installed torch's registry
    hints: tuple[str, ...] = ()  # torch's hints, verbatim
    breaks: int = 0  # graph breaks of this reason at this place (see above)
    gb_type: str = ""  # torch's gb_type (the first line of its message), what its counter is keyed by
    # Dynamo gave up on the whole frame there and ran it eagerly ("Skipping the function and falling
    # back to eager"): nothing of that function compiled, whatever the break count says.
    fell_back: bool = False
    # Dynamo could not resume after it (torch_text.unresumable_break): the rest of the function ran
    # eagerly, and torch's graph-break counter does not count it (ModeMetrics.unresumable_breaks).
    unresumable: bool = False

    @property
    def advice(self) -> str | None:
        """Torch's hint that says what to do here (torch_text.hint_advice)."""
        return hint_advice(self.hints)


@dataclass(frozen=True)
class CACodeGraphs:
    """Dynamo's graphs of the compiled-autograd graphs' code, by where they come from."""

    first: int  # at a CA graph's own frame, its first compile: one per CA graph unless it began with a break
    pieces: int  # at the frames graph breaks split off that code, first compiles
    recompiled: int  # recompiles of any of them

    @property
    def total(self) -> int:
        return self.first + self.pieces + self.recompiled


def ca_code_graphs(compiles: Sequence[DynamoCompileEvent]) -> CACodeGraphs:
    """Dynamo's graphs of the CA graphs' code, from the compiles that made one: a CA graph's own
    frame is the lowest frame id under its `!N` (the frames split off by a break come after it)."""
    made = [d for d in compiles if d.is_ca_graph and d.graph_op_count and not d.fail_type]
    own: dict[int | None, int] = {}
    for d in compiles:
        if d.is_ca_graph and (frame := compile_frame(d.compile_id)) is not None:
            ca = ca_id_of(d.compile_id)
            own[ca] = min(own.get(ca, int(frame)), int(frame))
    first = pieces = recompiled = 0
    for d in made:
        frame, attempt = compile_frame(d.compile_id), compile_attempt(d.compile_id)
        if attempt:
            recompiled += 1
        elif frame is not None and int(frame) != own.get(ca_id_of(d.compile_id)):
            pieces += 1
        else:
            first += 1
    return CACodeGraphs(first, pieces, recompiled)


@dataclass(frozen=True)
class ModeMetrics:
    mode: str
    status: str
    exit_code: int | None
    steps: int
    forward_graphs: int  # Dynamo graphs of forward frames (compiles without a CA id that produced code), not DDP's hook's
    backward_graphs: int  # AOT backward graphs in eager/aot; CA graphs in ca
    aot_backward_graphs: int
    ca_graphs: int
    # CA cache misses as torch logs them ("Cache miss due to ..."): one per capture, the run's
    # first included (docs/torch-internals.md, "What a CA cache miss is").
    ca_cache_misses: int
    graph_breaks: int  # torch's counters["graph_break"] total; one per compile and site when torch's counters were not recorded
    # Breaks Dynamo could not resume after (the rest of the function ran eagerly), which torch's
    # graph-break counter leaves out: one per compile and site (torch_text.unresumable_break).
    # `gate --max-graph-breaks` counts them with graph_breaks (report/gate/baseline.py, the snapshot's graph_breaks).
    unresumable_breaks: int
    dynamo_recompiles: int  # forward frames and CA graphs alike
    recompiles: int  # ca_recompiles + dynamo_recompiles: what `gate --max-recompiles N` counts
    unique_graphs: int | None  # torch's own counters["stats"]["unique_graphs"], when recorded
    autograd_captures: int | None  # torch's counters["compiled_autograd"]["captures"]
    # Dynamo entire-frame compile time (forward and CA graphs) + CA capture time + the backwards
    # AOTAutograd compiled at their first call (schema.BackwardCompileEvent)
    compile_time_s: float
    compile_phases_s: dict[str, float] = field(default_factory=dict)  # dynamo, aot, inductor, ca_capture, backward
    step_time: StepStats | None = None
    peak_rss_bytes: int | None = None
    final_param_norm: float | None = None
    final_grad_norm: float | None = None
    losses: list[float] = field(default_factory=list)
    backward_calls: int = 0  # top-level backward calls (schema 1 records: one per step)
    # ... of the ca mode that began with compiled autograd off, so ran uncaptured (the manifest's
    # `backward_calls_outside_ca`; None: not kept, an older record or not the ca mode)
    backward_calls_outside_ca: int | None = None
    step_boundary: str = ""  # "optimizer", "backward" (no optimizer: one step per backward call), "compiled_optimizer" (it steps inside compiled code: one step per backward call), "" unknown
    backward_calls_per_step: tuple[int, ...] = ()  # the distinct counts, e.g. (4,) for 4x gradient accumulation
    backward_calls_after_last_step: int = 0  # calls in a step that never ended (no optimizer step followed)
    skipped_steps: int = 0  # steps whose optimizer step a grad scaler skipped (StepEvent.skipped)
    optimizer_steps: int = 0  # optimizer step() calls recorded (OptimizerStepEvent): more than the steps where several optimizers step in one
    peak_device_memory_bytes: int | None = None  # torch.cuda.max_memory_allocated, when the job used CUDA
    graph_break_sites: list[GraphBreakSite] = field(default_factory=list)
    graph_breaks_from_torch: bool = True  # False: the process died before torch's counters were saved
    # The CA cache misses by torch's reason (see `CAMisses`).
    ca_new_node_misses: int = 0
    ca_shape_recompiles: int = 0
    ca_grad_warmup_misses: int = 0
    ca_other_call_captures: int = 0  # CAMisses.other_calls: not counted in ca_recompiles either
    ca_recompiles: int = 0
    # ... of them, captures with no reason right after a capture that raised (RECAPTURED_AFTER_FAILURE).
    ca_recaptures_after_failure: int = 0
    # Seconds of per-step lines (steps, backward calls) that may have died with the process: it
    # ended without closing its record (SIGKILL, SIGTERM at its default action, os._exit), and the
    # writer holds those lines up to this long before writing them (record/writer.py). None: none lost.
    steps_lost_s: float | None = None
    # ... and, where one optimizer had stepped alone while others were waited for, up to this many of
    # its steps (the step tracker's wait, capture/steps/boundaries.py). None: not held so.
    steps_lost_optimizer_steps: int | None = None
    # Graphs Dynamo compiled of DDP's all-reduce hook (`is_ddp_hook_compile`), and its recompiles
    # (counted in dynamo_recompiles too: they are recompiles torch did).
    ddp_hook_graphs: int = 0
    ddp_hook_recompiles: int = 0
    # Dynamo's graphs of the CA graphs' code (compiles with a CA id that made a graph, counted in
    # torch's unique_graphs): at each CA graph's first frame, at the frames a graph break split off
    # (a non-reentrant checkpoint's unpack hook breaks at every saved tensor), and recompiles of either.
    ca_code_graphs: CACodeGraphs = field(default_factory=lambda: CACodeGraphs(0, 0, 0))

    @property
    def ca_captured_nothing(self) -> bool:
        """The ca mode made backward calls and compiled autograd captured none of them (no graph, torch
        counted no capture): each ran on the autograd engine as in the aot mode (a backward inside a
        torch.func transform, or under compiled_autograd._disable()), so the mode's figures are not
        compiled autograd's."""
        return (self.mode == "ca" and self.backward_calls > 0 and self.ca_graphs == 0 and not self.autograd_captures)

    @property
    def ca_captured_part(self) -> bool:
        """Some, not all, of the ca mode's backward calls began with compiled autograd off (a
        per-sample gradient by torch.func beside the training backward, as a DP-SGD job computes
        it): those ran on the autograd engine as in the aot mode, so the mode's steps are partly
        the job without compiled autograd."""
        off = self.backward_calls_outside_ca
        return self.mode == "ca" and off is not None and 0 < off < self.backward_calls


@dataclass(frozen=True)
class DynamoGraphCount:
    """Dynamo's graphs as torch counts them (counters["stats"]["unique_graphs"]), by where they come from."""

    total: int
    from_torch: bool  # False: torch's counters were not saved, the total is the record's
    forward: int
    ddp_hook: int
    ca_graphs: int  # the compiled-autograd graphs whose code they include
    ca_code: CACodeGraphs

    @property
    def unattributed(self) -> int:
        """Graphs torch counted that the record names none for (negative: the record names more)."""
        return self.total - self.forward - self.ddp_hook - self.ca_code.total

    def parts(self) -> list[tuple[str, int]]:
        """(part, graphs) in the order they are said, the forward always and the others where they
        are any: "forward", "ddp_hook", "ca" (at each CA graph's own frame), "ca_pieces" (frames a
        graph break split off that code), "ca_recompiled", "unattributed" (negative: the record names
        more than torch counted). Summed, they are `total`."""
        code, rest = self.ca_code, self.unattributed
        found = [("forward", self.forward), ("ddp_hook", self.ddp_hook)]
        found += [("ca", code.first)] if code.first or self.ca_graphs else []
        found += [("ca_pieces", code.pieces), ("ca_recompiled", code.recompiled), ("unattributed", rest)]
        return [(part, n) for part, n in found if n or part in ("forward", "ca")]


def dynamo_graph_count(m: ModeMetrics) -> DynamoGraphCount | None:
    """torch's count of Dynamo's graphs and its parts, where the forward and backward counts do not
    make it (None where they do, or say more): graph breaks in a compiled-autograd graph's code split it into
    pieces Dynamo compiles one by one (a non-reentrant checkpoint's unpack hook, at every saved
    tensor), each counted by torch; so is a recompile of that code."""
    code = m.ca_code_graphs
    shown = m.forward_graphs + m.ddp_hook_graphs + (m.ca_graphs if m.mode == "ca" or m.ca_graphs else 0)
    if m.unique_graphs is None:
        if not code.pieces and not code.recompiled:
            return None
        total, from_torch = m.forward_graphs + m.ddp_hook_graphs + code.total, False
    elif m.unique_graphs <= shown and not code.pieces and not code.recompiled:
        # Fewer than the record names: counters saved without the stats (a hand-made or partial
        # record), not graphs the text leaves out.
        return None
    else:
        total, from_torch = m.unique_graphs, True
    return DynamoGraphCount(total, from_torch, m.forward_graphs, m.ddp_hook_graphs, m.ca_graphs, code)


def steps_lost_with_process(manifest: ModeManifest) -> float | None:
    """How many seconds of per-step lines a record may lack because its process died holding
    them: the writer's hold (options["held_events"]) when someone other than the process closed
    the record (options["closed_by"]: cagtool's parent, or a reader that found it dead)."""
    options = manifest.options if isinstance(manifest.options, dict) else {}
    held = options.get("held_events")
    if not options.get("closed_by") or not isinstance(held, dict):
        return None
    up_to = held.get("up_to_s")
    return float(up_to) if isinstance(up_to, (int, float)) and up_to > 0 else None


def _held_optimizer_steps(manifest: ModeManifest) -> int | None:
    """The optimizer steps the step tracker may hold while one optimizer steps alone among several
    (options["held_events"]["up_to_optimizer_steps"]); None in records without it."""
    held = manifest.options.get("held_events") if isinstance(manifest.options, dict) else None
    steps = held.get("up_to_optimizer_steps") if isinstance(held, dict) else None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None


# DDP's Python reducer all-reduces each gradient in this post-accumulate-grad hook
# (torch/nn/parallel/distributed.py). With compiled autograd it is traced into the CA graph; in a
# backward run eagerly from inside a compiled function (aot or eager mode of a script that chose
# optimize_ddp="python_reducer" itself), Dynamo compiles it as a frame of its own, once per
# parameter shape: graphs of the backward's communication, not of the model's forward.
DDP_HOOK_CODE = "compiled_accum_grad_hook"
DDP_HOOK_FILE = "torch/nn/parallel/distributed.py"


def is_ddp_hook_compile(event: DynamoCompileEvent) -> bool:
    return event.co_name == DDP_HOOK_CODE and event.co_filename.replace("\\", "/").endswith(DDP_HOOK_FILE)


@dataclass(frozen=True)
class CAMisses:
    """A mode's compiled-autograd cache misses after the first capture, in torch's words. Torch
    logs the first capture (!0) as a miss too (a new GraphRoot against an empty cache); that one is
    the initial compile, counted in ModeMetrics.ca_cache_misses and not here. After it, torch logs
    each miss as "new autograd node" (the graph's structure changed: a node, a hook,
    AccumulateGrad's key) or "N changed tensor shapes" (a recompile for new sizes, which become
    dynamic).

    `grad_warmup`: the first miss when it is a new node on AccumulateGrad. In an ordinary training
    loop that does not reset .grad to None, the first backward sees every .grad None and the second
    accumulates into the defined .grad: AccumulateGrad's key changes once, torch captures a second
    graph, and that is the last one. It is reported, not counted as a recompile; any later
    AccumulateGrad miss (.grad switching back and forth) counts.

    `other_calls`: the first capture of each other backward call of a step (a GAN's generator after
    its discriminator, `l1.backward(retain_graph=True); l2.backward()`): captured in the step of the
    first capture, from a backward call at a line no capture before it came from, each call its own
    graph, captured once (other_backward_calls; recompiles --explain's cause for them is the same
    reading of its rows, explain._other_backward_calls).

    `recompiles`: every miss but the warm-up and those first captures, i.e. what keeps costing
    compiles in steady state. This is what `gate --max-recompiles ca:N` holds to N (docs/ci.md)."""

    total: int
    new_node: int
    changed_shapes: int
    grad_warmup: int
    other_calls: int = 0

    @property
    def recompiles(self) -> int:
        return self.total - self.grad_warmup - self.other_calls


def is_grad_warmup(miss: CacheMissEvent, produced: CAGraphEvent | None, previous: CAGraphEvent | None, initial_step: int | None,
                   nodes_seen: bool = True) -> bool:
    """The one rule (summary, gate, recompiles) for AccumulateGrad's one-time warm-up miss: the
    first miss, a new node on AccumulateGrad, in the backward right after the initial capture,
    with the same hooks as the graph before (a hook added there is a hook change, not .grad), and
    the autograd nodes of a graph captured before (`nodes_seen`: a graph of other nodes, as where
    the data picks which module runs, is another structure that meets AccumulateGrad first). That
    backward is in the next step, or in the same step under gradient accumulation (the second
    micro-batch's backward finds .grad defined)."""
    if miss.miss_kind != MISS_NEW_NODE or not (miss.node or "").endswith("AccumulateGrad"):
        return False
    if initial_step is not None and miss.step is not None and miss.step not in (initial_step, initial_step + 1):
        return False
    if produced is not None and previous is not None and not nodes_seen:
        return False
    hooks = [sorted(h.hook_type for h in g.hooks) if g is not None else None for g in (produced, previous)]
    return hooks[0] == hooks[1]


def backward_line(miss: CacheMissEvent) -> tuple[str, int] | None:
    """The user's line whose backward call captured the graph a miss made (file, line)."""
    where = backward_call(miss)
    return (where.file, where.line) if where is not None and where.line is not None else None


def other_backward_calls(misses: list[CacheMissEvent], first_step: int | None, skip: frozenset[int] = frozenset()) -> frozenset[int]:
    """The ca ids of the captures that are a step's other backward calls' first graphs (CAMisses
    .other_calls), from `misses` in capture order: in the first capture's step, from a line no
    earlier capture came from; `skip`: the warm-up's id (its own rule). From a capture whose line
    is unknown on, none is told apart."""
    if not misses or first_step is None:
        return frozenset()
    first_line = backward_line(misses[0])
    if first_line is None:
        return frozenset()
    seen, found = {first_line}, set()
    for miss in misses[1:]:
        line = backward_line(miss)
        if line is None:
            break
        if miss.ca_id not in skip and miss.step == first_step and line not in seen:
            found.add(miss.ca_id)
        seen.add(line)
    return frozenset(found)


def ca_misses(graphs: list[CAGraphEvent], misses: list[CacheMissEvent]) -> CAMisses:
    # Every capture torch began after the first: a graph, or a miss whose capture raised before its graph.
    captured = {g.ca_id for g in graphs} | {m.ca_id for m in misses}
    total = max(len(captured) - 1, 0) if graphs else 0
    if not total:
        return CAMisses(0, 0, 0, 0)
    first_id = min(captured)
    # The miss that produced !0 (GraphRoot, first capture) is the initial compile, not a miss.
    later = [m for m in misses if m.ca_id != first_id]
    shapes = sum(1 for m in later if m.miss_kind == MISS_CHANGED_SHAPES)
    new_node = sum(1 for m in later if m.miss_kind == MISS_NEW_NODE)
    warmup, others = _not_recompiles(graphs, misses)
    return CAMisses(total, new_node, shapes, int(warmup is not None), len(others))


def other_call_captures(graphs: list[CAGraphEvent], misses: list[CacheMissEvent]) -> frozenset[int]:
    """The ca ids of a mode's captures that are a step's other backward calls' first graphs
    (CAMisses.other_calls): what `recompiles --explain` reads as those calls, not a recompile."""
    return _not_recompiles(graphs, misses)[1]


def _not_recompiles(graphs: list[CAGraphEvent], misses: list[CacheMissEvent]) -> tuple[int | None, frozenset[int]]:
    """The misses after the first capture that are not recompiles: the .grad warm-up's ca id (or
    None) and the other backward calls' first captures."""
    captured = {g.ca_id for g in graphs} | {m.ca_id for m in misses}
    if not graphs or len(captured) < 2:
        return None, frozenset()
    by_id = {g.ca_id: g for g in graphs}
    first_id = min(captured)
    later = sorted((m for m in misses if m.ca_id != first_id), key=lambda m: m.ca_id)
    warmup: int | None = None
    if later:
        first = later[0]
        earlier = [i for i in by_id if i < first.ca_id]
        previous = by_id[max(earlier)] if earlier else None
        produced = by_id.get(first.ca_id)
        seen = produced is not None and any(by_id[i].autograd_names() == produced.autograd_names() for i in earlier)
        if is_grad_warmup(first, produced, previous, by_id[first_id].step if first_id in by_id else None, seen):
            warmup = first.ca_id
    # The first capture's own miss (its line) begins the order in which the lines appear.
    by_capture: dict[int, CacheMissEvent] = {}
    for miss in sorted(misses, key=lambda m: m.ca_id):
        by_capture.setdefault(miss.ca_id, miss)  # one miss a capture
    in_order = list(by_capture.values())
    first_step = by_id[first_id].step if first_id in by_id else (in_order[0].step if in_order else None)
    skip = frozenset({warmup}) if warmup is not None else frozenset()
    others = other_backward_calls(in_order, first_step, skip) if in_order and in_order[0].ca_id == first_id else frozenset()
    return warmup, others


def _recaptures_after_failure(record: ModeRecord, misses: list[CacheMissEvent]) -> int:
    if not misses or not record.kind_counts.get(FindingEvent.kind):
        return 0
    failed = failed_capture_ids(record.of(FindingEvent))
    return sum(1 for m in misses if m.miss_kind == MISS_UNKNOWN and follows_failed_capture(m.ca_id, failed))


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class StepColumns:
    """A mode's step events as columns, in file order: what the step figures read, without an
    object per step (a 20,000-step summary). From the record's sidecar when the loader
    used it, else from the step events."""

    step: list[int]
    t: list[float]
    backward_s: list[float]
    loss: list[float | None]
    ca_captures: list[int]
    compiles: list[int]
    wall_s: list[float | None]
    backward_calls: list[int]
    boundary: list[str]
    evaluation: list[bool]
    workers_started: list[bool]
    # Steps another rank of the mode compiled or captured in (peer_touched), and steps that held
    # other work than training (interrupted_steps): not steady here either.
    peer_touched: frozenset[int] = frozenset()
    interrupted: frozenset[int] = frozenset()

    @classmethod
    def of_events(cls, steps: list[StepEvent], peer_touched: frozenset[int] = frozenset()) -> StepColumns:
        columns = {name: [getattr(s, name) for s in steps] for name in _STEP_COLUMNS}
        return cls(**columns, peer_touched=peer_touched, interrupted=_left_out_interruptions(*(columns[name] for name in _INTERRUPTION_COLUMNS)).steps)

    def touched(self, i: int) -> bool:
        """Whether step `i` (an index) compiled or captured, here or on another rank, or held other
        work (an evaluation, a DataLoader's workers starting) that the steady figures leave out."""
        return (bool(self.compiles[i] or self.ca_captures[i]) or (bool(self.peer_touched) and self.step[i] in self.peer_touched)
                or (bool(self.interrupted) and self.step[i] in self.interrupted))

    def __len__(self) -> int:
        return len(self.step)


_STEP_COLUMNS = tuple(f.name for f in fields(StepColumns) if f.name not in ("peer_touched", "interrupted"))
# What else a step's span can hold that is not a training step's (StepEvent), and its words.
INTERRUPTION_EVALUATION = "evaluation"
INTERRUPTION_WORKERS = "workers_started"
# What was seen, not what it was for: a switch to eval mode begins an evaluation, and a checkpoint
# saved from eval mode (pytorch/examples' fast_neural_style) makes the same switch with no forward.
INTERRUPTION_WORDS = {INTERRUPTION_EVALUATION: "a switch to eval mode", INTERRUPTION_WORKERS: "a DataLoader's workers starting"}


def interruption_words(kinds: tuple[str, ...]) -> str:
    """`a switch to eval mode`, `a switch to eval mode or a DataLoader's workers starting`: what held steps that
    are not steady (StepStats.interruptions)."""
    return " or ".join(INTERRUPTION_WORDS[kind] for kind in kinds) or "other work"


# What decides whether such a step is left out of the steady figures (_left_out_interruptions).
_INTERRUPTION_COLUMNS = ("step", "compiles", "ca_captures", "wall_s", *INTERRUPTION_WORDS)


@dataclass(frozen=True)
class Interruptions:
    """`interrupted_steps`: the steps left out, and what held them (INTERRUPTION_*, in that order)."""

    steps: frozenset[int] = frozenset()
    kinds: tuple[str, ...] = ()


def interrupted_steps(record: ModeRecord) -> Interruptions:
    """The steps the steady figures leave out because other work than training ran in their span:
    an evaluation (StepEvent.evaluation: a module switched to eval mode, as Lightning's validation
    loop and HF Trainer's evaluate() do between two training steps; a Lightning job's step: 34 ms
    against 4 ms) or a DataLoader's workers starting (StepEvent.workers_started: each epoch's first
    step, 78-95 ms against ~2.5 ms). Such a step's time is that work's and the training step's
    together. None is left out where they are not fewer than the other steady steps: a job that
    evaluates in every step (a rollout between updates) has no steady step without one, and its
    steps are what it does. Computed once."""
    return record.derived("interrupted_steps", _interrupted_steps)


def _interrupted_steps(record: ModeRecord) -> Interruptions:
    held = record.columns.get(StepEvent.kind)
    if held is not None:
        if all(True not in held.distinct(name) for name in INTERRUPTION_WORDS):  # the usual record: runs of false, no list made
            return Interruptions()
        return _left_out_interruptions(*(held.column(name) for name in _INTERRUPTION_COLUMNS))
    steps = record.of(StepEvent)
    if not any(s.evaluation or s.workers_started for s in steps):
        return Interruptions()
    return _left_out_interruptions(*([getattr(s, name) for s in steps] for name in _INTERRUPTION_COLUMNS))


def _left_out_interruptions(step: list[int], compiles: list[int], captures: list[int], wall: list[float | None],
                            *kinds: list[bool]) -> Interruptions:
    """`interrupted_steps` of these columns (one bool column per INTERRUPTION_WORDS): the timed steps
    that held other work and compiled nothing, where they are fewer than the timed steps that did neither."""
    other = [any(flags) for flags in zip(*kinds)]
    if not any(other):
        return Interruptions()
    held = [n for n, c, k, w, o in zip(step, compiles, captures, wall, other) if o and not (c or k) and w is not None]
    plain = sum(1 for c, k, w, o in zip(compiles, captures, wall, other) if not (o or c or k) and w is not None)
    if len(held) >= plain:
        return Interruptions()
    left = frozenset(held)
    present = tuple(name for name, flags in zip(INTERRUPTION_WORDS, kinds) if any(f and n in left for n, f in zip(step, flags)))
    return Interruptions(left, present)


def step_columns(record: ModeRecord) -> StepColumns:
    """The record's steps as columns (computed once per record)."""
    return record.derived("step_columns", _step_columns)


def _step_columns(record: ModeRecord) -> StepColumns:
    held = record.columns.get(StepEvent.kind)
    if held is None:
        return StepColumns.of_events(record.of(StepEvent), peer_touched(record))
    return StepColumns(*(held.column(name) for name in _STEP_COLUMNS), peer_touched=peer_touched(record), interrupted=interrupted_steps(record).steps)


def peer_touched(record: ModeRecord) -> frozenset[int]:
    """The steps in which another rank of the record's mode compiled or captured a graph: a rank
    waits for the others at a collective, so its step there holds their compile (rank 0's step 4
    read 2.35 s, rank 1 compiling 9 frames, against ~9 ms steady) and is no steady step of its own.
    Empty for a single process."""
    if not peers(record):
        return frozenset()
    return record.derived("peer_touched", lambda r: frozenset(step for other in peers(r) for step in own_touched_steps(other)))


def own_touched_steps(record: ModeRecord) -> list[int]:
    """The steps this process compiled or captured in, or left out for other work (interrupted_steps;
    its own, not its peers': a rank that evaluates alone holds the others up at their next
    collective; computed once)."""
    return record.derived("own_touched_steps", _own_touched_steps)


def _own_touched_steps(record: ModeRecord) -> list[int]:
    evaluations = interrupted_steps(record).steps
    held = record.columns.get(StepEvent.kind)
    if held is not None:
        found = [held.numbers(name) for name in ("step", "compiles", "ca_captures")]
        if all(f is not None for f in found):
            (step, _), (compiles, _), (captures, _) = found  # type: ignore[misc]
            touched = step[(compiles != 0) | (captures != 0)].tolist()
            return sorted(set(touched) | evaluations) if evaluations else touched
    return [s.step for s in record.of(StepEvent) if s.compiles or s.ca_captures or s.step in evaluations]


def backward_steps(record: ModeRecord) -> list[int]:
    """The step of each backward event, in file order."""
    held = record.columns.get(BackwardEvent.kind)
    if held is not None:
        return held.column("step")
    return [b.step for b in record.of(BackwardEvent)]


# Seconds no step of a recorded process can have lasted (about 32 years): a larger time is a damaged
# or forged record's, as NaN, infinity and a negative time are.
_NO_STEP_LASTS_S = 1e9


def is_time(value: float | None) -> bool:
    """Whether a step's recorded time is one: not None, and neither NaN, negative nor beyond any
    process's life (_NO_STEP_LASTS_S), which every figure leaves out as it leaves out an unknown time."""
    return value is not None and 0 <= value < _NO_STEP_LASTS_S


def not_times(values: Sequence[float]) -> Any:
    """`not is_time` of each of `values` (floats, NaN allowed), a numpy bool array: in one pass over
    a job's 100,000 steps."""
    import numpy as np

    array = np.asarray(values, dtype=float)
    return ~((array >= 0) & (array < _NO_STEP_LASTS_S))


def steady_intervals(steps: list[StepEvent] | StepColumns, device_s: dict[int, float] | None = None) -> tuple[list[float], list[int]]:
    """(times of the steady steps in step order, steps excluded by compilation). Shared by
    `step_stats` and by the mode comparison, which pools the intervals of repetitions.

    Schema 2 (steps have a `boundary`): a step's time is its `wall_s`, or its device time when
    `device_s` has one for every steady step; a step that compiled or captured is excluded; the
    first step has no previous boundary and is not timed. Schema 1: iteration time of step i =
    start of step i+1 minus start of step i, excluded when it or the next step compiled."""
    intervals, excluded, _numbers = _steady(steps, device_s)
    return intervals, excluded


def _steady(steps: list[StepEvent] | StepColumns, device_s: dict[int, float] | None = None) -> tuple[list[float], list[int], list[int]]:
    """`steady_intervals`, with the step number of each interval (the same order)."""
    c = steps if isinstance(steps, StepColumns) else StepColumns.of_events(steps)
    number = c.step
    # In step order, stable as sorting the events was; written in order, they need no sort.
    ordered = range(len(number)) if all(map(operator.le, number, number[1:])) else sorted(range(len(number)), key=number.__getitem__)
    intervals: list[float] = []
    excluded: list[int] = []
    if any(c.boundary):
        wall = c.wall_s
        steady = []
        for i in ordered:
            if c.touched(i):
                excluded.append(number[i])
            elif is_time(wall[i]):
                steady.append(i)
        use_device = bool(device_s) and all(number[i] in device_s for i in steady)  # type: ignore[operator]
        if use_device and device_s:
            # A device time that is no time is left out as a wall time is (untimed_steps names it).
            timed = [i for i in steady if is_time(device_s[number[i]])]
            return [device_s[number[i]] for i in timed], excluded, [number[i] for i in timed]
        return [wall[i] for i in steady], excluded, [number[i] for i in steady]  # type: ignore[misc]
    t, backward = c.t, c.backward_s
    numbers: list[int] = []
    for current, following in zip(ordered, ordered[1:]):
        start_current = t[current] - backward[current]
        start_following = t[following] - backward[following]
        touched = c.touched(current) or c.touched(following)
        if touched:
            excluded.append(number[current])
            continue
        if is_time(start_following - start_current):
            intervals.append(start_following - start_current)
            numbers.append(number[current])
    if ordered and c.touched(ordered[-1]):
        excluded.append(number[ordered[-1]])
    return intervals, excluded, numbers


def untimed_steps(record: ModeRecord) -> int:
    """Steady steps (no compile or capture) whose recorded wall time, or device time where the
    steps are timed on the device, is no time (NaN, negative, beyond _NO_STEP_LASTS_S): every
    figure leaves them out (is_time), so the verdict names the process they left. A recorder
    writes none (an unknown time is null, and is not counted); they are a damaged or forged record's."""
    if held_steps(record) is not None:  # it holds only times, and no device time
        return 0
    c = step_columns(record)
    if not any(c.boundary):
        return 0
    steady = [(c.step[i], c.wall_s[i]) for i in range(len(c)) if c.wall_s[i] is not None and not c.touched(i)]
    untimed = sum(1 for _, wall in steady if not is_time(wall))
    device = device_step_seconds(record)
    timed = [n for n, wall in steady if is_time(wall)]
    if device and timed and all(n in device for n in timed):  # the steps' clock is the device's (steady_intervals)
        untimed += sum(1 for n in timed if not is_time(device[n]))
    return untimed


def device_step_seconds(record: ModeRecord) -> dict[int, float]:
    """step -> device time (CUDA events at its boundaries), when the job ran on CUDA."""
    return {e.step: e.device_s for e in record.of(StepDeviceEvent) if e.device_s is not None}


def record_step_intervals(record: ModeRecord) -> tuple[list[float], list[int], str]:
    """`steady_intervals` of a mode record, with the clock they were measured on (computed once
    per record: the summary and the comparison both read them)."""
    if held_steps(record) is not None:  # cheap to compute again, costly to keep for every rank
        return _record_step_intervals(record)
    intervals, excluded, clock = record.derived("step_intervals", _record_step_intervals)
    return list(intervals), list(excluded), clock


@dataclass(frozen=True)
class HeldSteps:
    """A record's step figures as numpy arrays, read from the step columns its sidecar holds
    without a Python object per step: what keeps a report over 8 ranks of 100,000 steps within
    seconds. Only for the common shape, where the list path (`StepColumns`) gives the same
    figures: steps ended at a boundary (schema 2), on the wall clock (no device times), in
    increasing step order, no NaN among the times. `held_steps` says None otherwise.
    Measured (benchmarks/step_paths.py, benchmarks/README.md): `cagtool summary` of 3 modes x
    20,000 steps 0.83 -> 0.42 s CPU against the same columns as lists, 8 ranks x 3 modes x
    100,000 steps 6.39 -> 1.45 s."""

    step: Any  # int64
    touched: Any  # bool: a compile or capture in the step
    wall_s: Any  # float64, NaN where null
    wall_null: Any  # bool
    t_min: float | None
    count: int
    boundaries: set[str]
    backward_calls: set[int]


def held_steps(record: ModeRecord) -> HeldSteps | None:
    """Kept with the record (about 2 MB for 100,000 steps: a few arrays, no object per step)."""
    return record.derived("held_steps", _held_steps)


def _held_steps(record: ModeRecord) -> HeldSteps | None:
    held = record.columns.get(StepEvent.kind)
    if held is None or not held.count:
        return None
    boundaries = {b for b in held.distinct("boundary") if b}
    if not boundaries or record.of(StepDeviceEvent):
        return None
    import numpy as np

    found = [held.numbers(name) for name in ("step", "compiles", "ca_captures", "wall_s", "t")]
    if any(f is None for f in found):
        return None
    (step, _), (compiles, _), (captures, _), (wall, wall_nulls), (t, t_nulls) = found  # type: ignore[misc]
    if t_nulls or np.isnan(t).any() or (len(step) > 1 and not bool(np.all(step[1:] >= step[:-1]))):
        return None
    null = np.zeros(len(wall), dtype=bool)
    null[wall_nulls] = True
    timed = wall[~null]
    if np.isnan(timed).any() or not bool(np.all((timed >= 0) & (timed < _NO_STEP_LASTS_S))):
        return None  # the list path leaves out what is no time (is_time)
    touched = (compiles != 0) | (captures != 0)
    others = peer_touched(record) | interrupted_steps(record).steps
    if others:
        touched |= np.isin(step, np.fromiter(others, dtype=np.int64, count=len(others)))
    return HeldSteps(
        step=step, touched=touched, wall_s=wall, wall_null=null, t_min=float(t.min()), count=held.count,
        boundaries=boundaries, backward_calls=held.distinct("backward_calls"),
    )


def _record_step_intervals(record: ModeRecord) -> tuple[list[float], list[int], str]:
    fast = held_steps(record)
    if fast is not None:
        return fast.wall_s[~fast.touched & ~fast.wall_null].tolist(), fast.step[fast.touched].tolist(), "wall"
    steps = step_columns(record)
    device = device_step_seconds(record)
    intervals, excluded = steady_intervals(steps, device)
    steady = {steps.step[i] for i in range(len(steps)) if is_time(steps.wall_s[i]) and not steps.touched(i)}
    clock = "device" if device and steady and steady <= set(device) else "wall"
    return intervals, excluded, clock


def steady_step_numbers(record: ModeRecord) -> Any:
    """The step number of each steady step `record_step_intervals` times, in the same order (a
    numpy int64 array): what a comparison of two modes pairs their steps by (the same step of the
    script in both)."""
    return record.derived("steady_step_numbers", _steady_step_numbers)


def _steady_step_numbers(record: ModeRecord) -> Any:
    import numpy as np

    fast = held_steps(record)
    if fast is not None:
        return fast.step[~fast.touched & ~fast.wall_null]
    return np.asarray(_steady(step_columns(record), device_step_seconds(record))[2], dtype=np.int64)


def steady_cpu_seconds(record: ModeRecord, name: str = "cpu_s") -> list[float] | None:
    """A CPU time of each steady step (the steps `record_step_intervals` times, in the same
    order): `cpu_s`, the process's, or `thread_cpu_s`, the training loop's thread's. None when a
    steady step lacks it (a record written before steps kept it, a schema-1 record, a step whose
    ends were in two threads) or there is none."""
    return record.derived(f"steady_{name}", lambda r: _steady_cpu_seconds(r, name))


def _steady_cpu_seconds(record: ModeRecord, name: str) -> list[float] | None:
    import numpy as np

    held = record.columns.get(StepEvent.kind)
    fast = held_steps(record)
    if fast is not None and held is not None:
        found = held.numbers(name)
        if found is None:
            return None
        cpu, nulls = found
        steady = ~fast.touched & ~fast.wall_null
        if nulls:
            null = np.zeros(len(cpu), dtype=bool)
            null[nulls] = True
            if bool((null & steady).any()):
                return None
        values = cpu[steady].astype(float).tolist()
        return values or None
    steps = record.of(StepEvent)
    if not steps or not any(s.boundary for s in steps):
        return None
    ordered = sorted(steps, key=lambda s: s.step)
    others = peer_touched(record) | interrupted_steps(record).steps
    values = [getattr(s, name) for s in ordered if is_time(s.wall_s) and not (s.compiles or s.ca_captures or s.step in others)]
    if not values or any(v is None for v in values):
        return None
    return values


# What the first step's time is measured from (`FirstStepTime.measured_from`).
FIRST_STEP_FROM_COMPILE = "compile"  # the start of the step's first compile: its first forward's Dynamo compile (or a CA capture)
FIRST_STEP_FROM_BACKWARD = "backward"  # the start of its first backward call: the forward before it is not visible


@dataclass(frozen=True)
class FirstStepTime:
    """The time of a run's first step, which `wall_s` leaves out (no step ended before it) and
    the steady-state figures never use: the step that holds the compiles, usually the most
    expensive of the run. Measured on the record's clock from the earliest moment of the step the
    recorder sees to the step's end: the start of its first compile (Dynamo begins compiling the
    moment the step's first forward calls compiled code; a CA capture begins inside the first
    backward) or, when nothing compiled before it, the start of its first backward call (the
    forward before it is invisible to the recorder: the figure then leaves the forward out)."""

    step: int
    start_t: float  # seconds since the mode started, as every event's `t`
    end_t: float
    measured_from: str  # FIRST_STEP_FROM_COMPILE | FIRST_STEP_FROM_BACKWARD
    compile_affected: bool  # a compile or CA capture happened in the step

    @property
    def seconds(self) -> float:
        return self.end_t - self.start_t

    @property
    def includes_forward(self) -> bool:
        """Whether the figure spans the step's forward (measured from its forward's compile)."""
        return self.measured_from == FIRST_STEP_FROM_COMPILE


def first_step_time(record: ModeRecord) -> FirstStepTime | None:
    """The first step's time (`FirstStepTime`), for records whose steps end at a boundary (schema
    2 on) and whose first step has no `wall_s`; None otherwise (schema 1 records time steps
    between backward starts, their first step included). Computed once per record; reads the
    step and backward columns and the few compile events, so it costs no object per step."""
    return record.derived("first_step_time", _first_step_time)


def step_field(record: ModeRecord, name: str) -> list[Any]:
    """One field of the record's steps, in record order: from the columns sidecar alone when the
    record has one (a 100,000-step rank decodes only this column), else from `step_columns`."""
    held = record.columns.get(StepEvent.kind)
    if held is not None:
        return held.column(name)
    return getattr(step_columns(record), name)


def _first_step_time(record: ModeRecord) -> FirstStepTime | None:
    boundary = step_field(record, "boundary")
    if not boundary or not any(boundary):
        return None
    steps = step_field(record, "step")
    # Steps are in order in every record cagtool writes: the first is then the first line.
    first = 0 if all(map(operator.le, steps, steps[1:])) else min(range(len(steps)), key=lambda i: (steps[i], i))
    if step_field(record, "wall_s")[first] is not None:
        return None
    step, end = steps[first], step_field(record, "t")[first]
    affected = bool(step_field(record, "compiles")[first] or step_field(record, "ca_captures")[first])
    starts: list[tuple[float, str]] = []
    for d in record.of(DynamoCompileEvent):
        if d.step == step and d.entire_frame_compile_time_s:
            starts.append((d.t - d.entire_frame_compile_time_s, FIRST_STEP_FROM_COMPILE))
    for g in record.of(CAGraphEvent):
        if g.step == step:
            starts.append((g.t - g.capture_s, FIRST_STEP_FROM_COMPILE))
    held = record.columns.get(BackwardEvent.kind)
    if held is not None:
        steps, ts, seconds = held.column("step"), held.column("t"), held.column("backward_s")
        begun = next(((ts[i] - seconds[i]) for i, s in enumerate(steps) if s == step), None)
    else:
        begun = next((b.t - b.backward_s for b in record.of(BackwardEvent) if b.step == step), None)
    if begun is not None:
        starts.append((begun, FIRST_STEP_FROM_BACKWARD))
    starts = [(t, why) for t, why in starts if t == t and t <= end]  # not NaN, not after the step ended
    if not starts:
        return None
    start, measured_from = min(starts)
    return FirstStepTime(step=int(step), start_t=start, end_t=end, measured_from=measured_from, compile_affected=affected)


def step_losses(record: ModeRecord) -> dict[int, float]:
    """step -> loss of its last backward: read at once on CPU, at the end of the run on a device
    (computed once per record: the metrics and the numerics comparison both read them)."""
    return dict(record.derived("step_losses", _step_losses))


def first_backward_loss(record: ModeRecord) -> float | None:
    """The loss of the first step's first backward call, where that step made more than one (its
    step loss is the last's, computed after a backward ran: gradient accumulation); None where
    it made one, or the loss was not read (a device's). Read only where the first steps' losses
    differ (compare/analysis.py): it tells a difference the first backward made apart from one
    that was there before any backward."""
    steps = step_columns(record)
    calls = next((c for s, c in zip(steps.step, steps.backward_calls) if s == FIRST_STEP), 0)
    if calls < 2:
        return None
    first = next((b for b in record.of(BackwardEvent) if b.step == FIRST_STEP and b.index == 0), None)
    return first.loss if first is not None and isinstance(first.loss, float) and math.isfinite(first.loss) else None


def params_shared(record: ModeRecord) -> int:
    """How many of the parameters the record trained lay in CPU shared memory that other processes
    wrote too (FinalStateEvent.params_shared, Hogwild), where that is a count within its
    num_params; else 0 (not read, or an older record)."""
    final = record.of(FinalStateEvent)
    shared = final[-1].params_shared if final else None
    if not isinstance(shared, int) or isinstance(shared, bool) or not 0 < shared <= final[-1].num_params:
        return 0
    return shared


def _step_losses(record: ModeRecord) -> dict[int, float]:
    fast = held_steps(record)  # no device losses then
    found = record.columns[StepEvent.kind].numbers("loss") if fast is not None else None
    if found is not None and not found[1] and not found[0].size == 0:
        import numpy as np

        if not np.isnan(found[0]).any():  # a NaN loss: the list path's, so the figures stay json's objects
            return dict(zip(fast.step.tolist(), found[0].tolist()))  # type: ignore[union-attr]
    steps = step_columns(record)
    losses = {step: loss for step, loss in zip(steps.step, steps.loss) if loss is not None}
    for late in record.of(StepDeviceEvent):
        if late.loss is not None:
            losses[late.step] = late.loss
    return losses


def record_step_stats(record: ModeRecord, first_step_s: float | None) -> StepStats:
    """`stats_of_intervals` of the record's steady steps; for a record whose steps are held as
    arrays (`held_steps`), the same figures computed on them (numpy's sort, then the same
    median, percentiles and exactly rounded mean on the sorted values)."""
    fast = held_steps(record)
    interrupted = _interrupted_alone(record)
    if fast is None:
        intervals, excluded, clock = record_step_intervals(record)
        return replace(stats_of_intervals(intervals, excluded, first_step_s, clock), **interrupted)
    import numpy as np

    ordered = np.sort(fast.wall_s[~fast.touched & ~fast.wall_null])
    excluded = fast.step[fast.touched].tolist()
    n = len(ordered)
    if not n:
        return replace(stats_of_intervals([], excluded, first_step_s, "wall"), **interrupted)

    # statistics.median, _percentile and statistics.fmean (fsum / n) on the sorted doubles, as
    # Python floats: the same arithmetic on the same values, without a list of them.
    middle = n // 2
    median = float(ordered[middle]) if n % 2 else (float(ordered[middle - 1]) + float(ordered[middle])) / 2
    return StepStats(
        count=n, excluded=excluded, median_s=median, p10_s=_percentile_of_array(ordered, 0.10), p90_s=_percentile_of_array(ordered, 0.90),
        mean_s=math.fsum(ordered) / n, first_step_s=first_step_s, clock="wall", **interrupted,
    )


def _interrupted_alone(record: ModeRecord) -> dict[str, Any]:
    """StepStats' `interrupted` and `interruptions`: the steps left out for other work alone, this
    process's or another rank's (interrupted_steps), not for a compile or capture made in them here
    or on another rank, in order; and what that work was."""
    own = interrupted_steps(record)
    others = [interrupted_steps(other) for other in peers(record)] if peers(record) else []
    steps = own.steps.union(*(o.steps for o in others))
    if not steps:
        return {}
    compiled = set(own_touched_steps(record)) - own.steps
    peer_compiled = peer_touched(record) - frozenset().union(*(o.steps for o in others))
    kinds = {kind for found in (own, *others) for kind in found.kinds}
    return {"interrupted": tuple(sorted(steps - compiled - peer_compiled)), "interruptions": tuple(k for k in INTERRUPTION_WORDS if k in kinds)}


def _percentile_of_array(ordered: Any, q: float) -> float:
    """`_percentile` of a sorted numpy array, in Python floats."""
    if len(ordered) == 1:
        return float(ordered[0])
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    low, high = float(ordered[lo]), float(ordered[hi])
    return low + (high - low) * (pos - lo)


def stats_of_intervals(intervals: list[float], excluded: list[int], first_step_s: float | None = None, clock: str = "wall", presorted: bool = False) -> StepStats:
    """Median, p10, p90 and mean of steady iteration times (any order; every one a time: is_time)."""
    if not intervals:
        return StepStats(0, list(excluded), None, None, None, None, first_step_s, clock)
    import statistics  # here: `recompiles --explain` imports this module for is_grad_warmup alone (statistics: ~5 ms of start-up)

    ordered = intervals if presorted else _sorted(intervals)
    return StepStats(
        count=len(ordered),
        excluded=list(excluded),
        median_s=statistics.median(ordered),
        p10_s=_percentile(ordered, 0.10),
        p90_s=_percentile(ordered, 0.90),
        mean_s=statistics.fmean(ordered),
        first_step_s=first_step_s,
        clock=clock,
    )


def _sorted(values: list[float]) -> list[float]:
    """sorted(values); numpy's sort for a long list without NaN (the same order then, in a third
    of the time: a gate sorts every rank's steady steps of every mode)."""
    if len(values) < 10_000:
        return sorted(values)
    import numpy as np

    array = np.asarray(values, dtype=float)
    if np.isnan(array).any() or set(map(type, values)) != {float}:
        return sorted(values)
    return np.sort(array).tolist()


def step_stats(steps: list[StepEvent], run_start_to_first_end: float | None = None) -> StepStats:
    """Steady-state statistics of one mode's steps on the wall clock (see `steady_intervals`)."""
    intervals, excluded = steady_intervals(steps)
    return stats_of_intervals(intervals, excluded, run_start_to_first_end)


def graph_break_sites(events: list[GraphBreakEvent], counted: dict[str, int] | None = None) -> list[GraphBreakSite]:
    """The distinct (place, reason) pairs of the graph-break log records, in first-seen order (a
    record without a place is keyed by its reason alone), each with its count of breaks: once per
    compile, as torch counts a break the log may repeat (graph_breaks_per_compile), or torch's own
    count of the reason (`counted`: its counters["graph_break"], keyed by message) where the reason
    broke at that place alone."""
    from cagtool.torch_text import graph_break_words

    sites: dict[tuple[str, int | None, str], GraphBreakSite] = {}
    compiles: dict[tuple[str, int | None, str], set[str]] = {}
    for event in events:
        words = graph_break_words(event.reason or "")
        # A reason is told apart by torch's explanation: the same break is logged again under
        # another first line ("Failed to handle graph break gracefully. Skipping the function ...",
        # when Dynamo falls back to eager for the frame), with the same gb_type and explanation.
        key = (event.file, event.line, words.explanation or words.headline)
        seen = sites.get(key)
        fell_back = fell_back_to_eager(event.reason or "")
        if seen is not None and fell_back and not seen.fell_back:
            seen = sites[key] = replace(seen, fell_back=True)
        if seen is None:
            sites[key] = GraphBreakSite(event.file, event.line, words.headline, 1, words.gb_id, words.hints,
                                        gb_type=words.gb_type or words.headline, fell_back=fell_back,
                                        unresumable=unresumable_break(event.reason or ""))
        elif words.gb_id and not seen.gb_id:  # torch's own words, where the first record had another preface
            sites[key] = replace(seen, reason=words.headline, gb_id=words.gb_id, hints=words.hints, gb_type=words.gb_type,
                                 logged=seen.logged + 1)
        else:
            sites[key] = replace(seen, logged=seen.logged + 1)
        compiles.setdefault(key, set()).add(event.compile_id or f"seq {event.seq}")
    found = [replace(site, breaks=len(compiles[key])) for key, site in sites.items()]
    if counted:
        # torch's counter is keyed by the break's message, whose first line is its gb_type.
        by_type: dict[str, int] = {}
        for message, n in counted.items():
            gb_type = message.splitlines()[0].strip() if message else ""
            by_type[gb_type] = by_type.get(gb_type, 0) + int(n)
        for i, site in enumerate(found):
            alone = sum(1 for other in found if other.gb_type == site.gb_type) == 1
            if alone and by_type.get(site.gb_type):
                found[i] = replace(site, breaks=by_type[site.gb_type])
    return found


@dataclass(frozen=True)
class GraphBreakReason:
    """One reason Dynamo broke the graph, with every place it broke for it (graph_break_reasons)."""

    reason: str  # torch's gb_type and explanation, as GraphBreakSite.reason
    gb_id: str
    gb_type: str
    breaks: int  # its sites' breaks together
    places: tuple[tuple[str, int | None], ...]  # (file, line) of each of its sites, first seen first
    advice: str | None = None  # torch's hint that says what to do (torch_text.hint_advice), the first of its sites'
    fell_back: tuple[tuple[str, int | None], ...] = ()  # its places where Dynamo ran the whole frame eagerly (GraphBreakSite.fell_back)
    unresumable: tuple[tuple[str, int | None], ...] = ()  # its places Dynamo could not resume after (GraphBreakSite.unresumable)

    @property
    def label(self) -> str:
        """"[GB0059] Failed to trace builtin operator": the id and gb_type, for a short line."""
        return f"[{self.gb_id}] {self.gb_type}" if self.gb_id else self.gb_type


def graph_break_reasons(sites: list[GraphBreakSite]) -> list[GraphBreakReason]:
    """The distinct reasons of a mode's graph-break sites, in first-seen order, each with its count
    and its places: what `summary` lists and a failed `gate --max-graph-breaks` names."""
    grouped: dict[str, list[GraphBreakSite]] = {}
    for site in sites:
        grouped.setdefault(site.reason, []).append(site)
    return [GraphBreakReason(reason, group[0].gb_id, group[0].gb_type or reason, sum(s.breaks for s in group),
                             tuple((s.file, s.line) for s in group), next((s.advice for s in group if s.advice), None),
                             tuple((s.file, s.line) for s in group if s.fell_back), tuple((s.file, s.line) for s in group if s.unresumable))
            for reason, group in grouped.items()]


def place_words(places: tuple[tuple[str, int | None], ...], shown: int = 3) -> str:
    """"train.py:10, model.py:42 and 3 more": a reason's places by file name and line."""
    import os

    words = [f"{os.path.basename(file) if file else '?'}:{line if line is not None else '?'}" for file, line in places[:shown]]
    more = f" and {len(places) - shown} more" if len(places) > shown else ""
    return ", ".join(words) + more


def graph_breaks_per_compile(events: list[GraphBreakEvent]) -> int:
    """Graph breaks counted as torch counts them when its counters are missing (a killed process,
    an imported log): once per compile (compile id) and site. Torch logs a break inside a loop
    again when it restarts the frame's analysis, within the same compile, and counts it once."""
    return len({(e.compile_id, e.file, e.line, "" if e.file else e.reason.splitlines()[0] if e.reason else "") for e in events})


def torch_graph_breaks(counters: dict[str, dict[str, int]], saved: bool) -> int | None:
    """torch's own graph-break count (`counters["graph_break"]`, one entry per reason), or None
    when the process never saved its counters (killed, still running). Saved but empty: nothing
    was counted (a job that compiled nothing), 0."""
    if not counters and not saved:
        return None
    return sum(counters.get("graph_break", {}).values())


def backward_compile_s(record: ModeRecord) -> float:
    """The compile time of the backwards AOTAutograd compiled at their first call (part of the
    mode's compile time; 0 in a record made before they were recorded)."""
    return sum((b.compile_time_s or 0.0) for b in record.of(BackwardCompileEvent))


def mode_metrics(record: ModeRecord) -> ModeMetrics:
    """The mode's figures, computed once per record (summary, comparison and ranks ask again)."""
    return record.derived("mode_metrics", _mode_metrics)


def _mode_metrics(record: ModeRecord) -> ModeMetrics:
    fast = held_steps(record)
    manifest = record.manifest
    steps = step_columns(record) if fast is None else None
    dynamo = record.of(DynamoCompileEvent)
    ca_graphs = record.of(CAGraphEvent)
    misses = record.of(CacheMissEvent)
    recompiles = record.of(DynamoRecompileEvent)
    aot_backward = record.of(AotBackwardGraphEvent)
    final = record.of(FinalStateEvent)

    graphs_made = [d for d in dynamo if not d.is_ca_graph and d.graph_op_count and not d.fail_type]
    ddp_hook = [d for d in graphs_made if is_ddp_hook_compile(d)]
    forward_graphs = len(graphs_made) - len(ddp_hook)
    ddp_hook_frames = {d.compile_id.split("/")[0] for d in dynamo if is_ddp_hook_compile(d)}
    phases = {
        "dynamo": sum((d.dynamo_cumulative_compile_time_s or 0.0) for d in dynamo),
        "aot": sum((d.aot_autograd_cumulative_compile_time_s or 0.0) for d in dynamo),
        "inductor": sum((d.inductor_cumulative_compile_time_s or 0.0) for d in dynamo),
        "ca_capture": sum(g.capture_s for g in ca_graphs),
        # A backward AOTAutograd compiled at its first call, outside its frame's compile (Inductor's
        # lazy backward: seconds); a CA graph inlines the AOT backwards, which the ca mode never compiles apart.
        "backward": backward_compile_s(record),
    }
    compile_time = sum((d.entire_frame_compile_time_s or 0.0) for d in dynamo) + phases["ca_capture"] + phases["backward"]
    first_step_end = min(steps.t, default=None) if steps is not None else fast.t_min  # type: ignore[union-attr]
    counters = manifest.torch_counters or {}
    # torch's counters are Counters: a key never incremented reads 0 there and is absent here (and
    # the deltas of followed processes drop zeros). So absent means 0 once the process saved its
    # counters, and unknown only when it never did (killed, still running).
    # An imported log holds no counters at all (trace_import: `not_in_log`): unknown, never 0.
    # A record another process closed (`closed_by`: cagtool's parent or a reader, the job stopped by a
    # signal) never got the counters: unknown too, whatever its status.
    closed_by = manifest.options.get("closed_by") if isinstance(manifest.options, dict) else None
    saved = bool(counters) or (manifest.status not in (STATUS_RUNNING, STATUS_KILLED) and manifest.imported is None
                               and closed_by in (None, "marker"))
    unique = counters.get("stats", {}).get("unique_graphs", 0 if saved else None)
    captures = counters.get("compiled_autograd", {}).get("captures", 0 if saved else None)
    by_reason = ca_misses(ca_graphs, misses)
    # Every capture torch began: a graph, or a miss whose capture failed before its graph.
    ca_misses_total = len({g.ca_id for g in ca_graphs} | {m.ca_id for m in misses})
    breaks = record.of(GraphBreakEvent)
    sites = graph_break_sites(breaks, counters.get("graph_break") if isinstance(counters.get("graph_break"), dict) else None)
    if steps is not None:
        backwards = backward_steps(record)
        step_numbers = set(steps.step)  # once: inside the count below it was rebuilt per backward (quadratic)
        boundaries = {b for b in steps.boundary if b}
        step_count, calls_per_step = len(steps), set(steps.backward_calls)
        backward_count = len(backwards)
        after_last = sum(1 for step in backwards if step not in step_numbers)
        losses = [loss for _, loss in sorted(step_losses(record).items())]
    else:
        boundaries, step_count, calls_per_step = fast.boundaries, fast.count, fast.backward_calls  # type: ignore[union-attr]
        backward_count, after_last = _held_backward_figures(record, fast)  # type: ignore[arg-type]
        losses = _held_losses(record, fast)  # type: ignore[arg-type]
    torch_breaks = torch_graph_breaks(counters, saved and manifest.imported is None)  # a TORCH_TRACE log holds no counters
    uses_ca = manifest.mode == "ca" or bool(ca_graphs)
    return ModeMetrics(
        mode=manifest.mode,
        status=manifest.status,
        exit_code=manifest.exit_code,
        steps=step_count,
        forward_graphs=forward_graphs,
        backward_graphs=len(ca_graphs) if uses_ca else len(aot_backward),
        aot_backward_graphs=len(aot_backward),
        ca_graphs=len(ca_graphs),
        ca_cache_misses=ca_misses_total,
        graph_breaks=torch_breaks if torch_breaks is not None else graph_breaks_per_compile([b for b in breaks if not unresumable_break(b.reason)]),
        unresumable_breaks=graph_breaks_per_compile([b for b in breaks if unresumable_break(b.reason)]),
        dynamo_recompiles=len(recompiles),
        recompiles=by_reason.recompiles + len(recompiles),
        unique_graphs=unique,
        autograd_captures=captures,
        compile_time_s=compile_time,
        compile_phases_s=phases,
        step_time=record_step_stats(record, first_step_end),
        peak_rss_bytes=manifest.peak_rss_bytes,
        final_param_norm=final[-1].param_norm if final else None,
        final_grad_norm=final[-1].grad_norm if final else None,
        losses=losses,
        backward_calls=max(backward_count, record.kind_counts.get(BackwardEvent.kind, 0)),
        # The loader checked its type; a forged value out of 0..backward_calls is never said (ca_captured_part).
        backward_calls_outside_ca=manifest.options.get("backward_calls_outside_ca") if isinstance(manifest.options, dict) else None,
        step_boundary=_step_boundary(boundaries),
        backward_calls_per_step=tuple(sorted(calls_per_step)) if boundaries else ((1,) if step_count else ()),
        backward_calls_after_last_step=after_last,
        peak_device_memory_bytes=manifest.peak_device_memory_bytes,
        graph_break_sites=sites,
        graph_breaks_from_torch=torch_breaks is not None,
        ca_new_node_misses=by_reason.new_node,
        ca_shape_recompiles=by_reason.changed_shapes,
        skipped_steps=_skipped_steps(record),
        optimizer_steps=record.kind_counts.get(OptimizerStepEvent.kind, 0),
        ca_grad_warmup_misses=by_reason.grad_warmup,
        ca_other_call_captures=by_reason.other_calls,
        ca_recompiles=by_reason.recompiles,
        ca_recaptures_after_failure=_recaptures_after_failure(record, misses),
        steps_lost_s=(lost := steps_lost_with_process(manifest)),
        steps_lost_optimizer_steps=_held_optimizer_steps(manifest) if lost else None,
        ddp_hook_graphs=len(ddp_hook),
        ddp_hook_recompiles=sum(1 for r in recompiles if not r.is_ca_graph and r.compile_id.split("/")[0] in ddp_hook_frames),
        ca_code_graphs=ca_code_graphs(dynamo),
    )


def _held_backward_figures(record: ModeRecord, fast: HeldSteps) -> tuple[int, int]:
    """(backward calls, calls whose step never ended) from the held columns, as the list path counts them."""
    held = record.columns.get(BackwardEvent.kind)
    found = held.numbers("step") if held is not None else None
    if found is None:
        backwards = backward_steps(record)
        numbers = set(fast.step.tolist())
        return len(backwards), sum(1 for step in backwards if step not in numbers)
    import numpy as np

    steps = found[0]
    return len(steps), int((~np.isin(steps, fast.step)).sum())


def _held_losses(record: ModeRecord, fast: HeldSteps) -> list[float]:
    """The losses by step, as `step_losses` sorted by step gives them: with the steps strictly
    increasing (one loss per step) and no late device losses, the non-null losses in order."""
    import numpy as np

    held = record.columns[StepEvent.kind]
    found = held.numbers("loss")
    if found is None or (len(fast.step) > 1 and not bool(np.all(fast.step[1:] > fast.step[:-1]))):
        return [loss for _, loss in sorted(step_losses(record).items())]
    values, nulls = found
    keep = np.ones(len(values), dtype=bool)
    keep[nulls] = False
    losses = values[keep]
    if np.isnan(losses).any():  # a NaN loss: the list path's, so the figures stay the same objects
        return [loss for _, loss in sorted(step_losses(record).items())]
    return losses.tolist()


def _skipped_steps(record: ModeRecord) -> int:
    """Steps whose optimizer step a grad scaler skipped; from the sidecar's column without
    expanding it where none was (a column of one run of false)."""
    held = record.columns.get(StepEvent.kind)
    if held is not None:
        return held.column("skipped").count(True) if True in held.distinct("skipped") else 0
    return sum(1 for step in record.of(StepEvent) if step.skipped)


def _step_boundary(boundaries: set[str]) -> str:
    """What ended the run's steps: "optimizer" as soon as one step ended at an optimizer."""
    if STEP_BOUNDARY_OPTIMIZER in boundaries:
        return STEP_BOUNDARY_OPTIMIZER
    if STEP_BOUNDARY_COMPILED_OPTIMIZER in boundaries:
        return STEP_BOUNDARY_COMPILED_OPTIMIZER
    return STEP_BOUNDARY_BACKWARD if boundaries else ""


def ca_first_call_seconds(record: ModeRecord) -> dict[int, float]:
    """ca_id -> wall seconds of the first call of its compiled graph (lazy compile + one run)."""
    return {e.ca_id: e.first_call_s for e in record.of(CACompileEvent)}


# Waiting for a CPU slows a torch step more than the wait itself (spinning threads that meet at
# every parallel region, a neighbour on the sibling hardware thread): benchmarks/load_model.py
# measured the slowdown of transformer_lm's median step, beside 2 busy neighbours, at the CPU-bound
# model's slowdown raised to 1.47 (two intra-op threads, a 51% wait) and 1.56 (one thread, 41%).
# A load's effect is read as lying between the model's factor f and f ** LOAD_EXPONENT, the same
# law on both sides of a comparison (one machine); beyond a 50% wait (1.61-1.72 measured) nothing
# is judged against the loaded side at all (compare's HEAVY_WAIT, the gate's heavy-load warning).
LOAD_EXPONENT = 1.6


# Beyond a 50% wait the law above no longer holds, but a side's figure is not without bound: the
# most the load may have made of it is the model's factor f = 1 / (1 - w) raised to these powers,
# each above the largest measured on the 2-core VM (docs/ci.md): wall time 2.45 (transformer_lm's
# eager beside four busy processes, 9.1x against 2.46x by its wait), CPU time 0.5 (mlp_steps.py
# beside six busy loops, its CPU time 2.0x at a 75% wait). A verdict that holds had the loaded side
# been slowed that much stands; one that would not is the load's, not the code's.
HEAVY_LOAD_EXPONENT = {"cpu": 1.0, "wall": 3.0}

# A step whose process CPU time is this many times its loop thread's ran threads in parallel
# (torch's intra-op pool): past HEAVY_WAIT the load's effect on it has no bound the wait gives
# (heavy_load_bound), read as PARALLEL_HEAVY_BOUND, past which no verdict stands.
PARALLEL_STEP = 1.5
PARALLEL_HEAVY_BOUND = 1000.0


def heavy_load_bound(wait: float, measure: str, runnable: float = 1.0, parallel: float | None = None) -> float:
    """The most waiting for a CPU a share `wait` of its runnable time (HEAVY_WAIT or more) may have
    slowed a side's figure on `measure` ("cpu"; wall or device time otherwise). `runnable`: the
    share of the step's wall time it was runnable (on a CPU or waiting for one, CpuWait.runnable):
    a load slows only that part; the rest (a sleep, a wait for data or for a device) takes as long
    on an idle machine, so on wall time the bound is 1 / ((1 - runnable) + runnable / bound).
    `parallel` (CpuWait.median_parallel): a step whose threads ran in parallel (PARALLEL_STEP or
    more) has no such bound: each parallel region waits for its slowest thread while the others
    spin, on CPU time too (pytorch/examples' dcgan, torch's two intra-op threads beside four busy
    processes: 73x its unloaded step, wall and CPU, at a 52% wait whose bound read 9x)."""
    if parallel is not None and parallel >= PARALLEL_STEP:
        return PARALLEL_HEAVY_BOUND
    factor = 1.0 / max(1.0 - wait, 1e-3)
    if measure == "cpu":
        return factor ** HEAVY_LOAD_EXPONENT["cpu"]
    bound = factor ** HEAVY_LOAD_EXPONENT["wall"]
    runnable = min(max(runnable, 0.0), 1.0)
    return 1.0 / ((1.0 - runnable) + runnable / bound)


# CPU time per step is not lengthened by the wait itself, but a step that waits loses its caches
# to the neighbours: an unchanged mlp_steps.py read 1.2-1.3x its quiet CPU time at a 49% wait (the
# model's factor 1.96 to the power 0.27-0.39) and 2.0x at 75% (4 to the power 0.5). On CPU time a
# load's effect is read as anywhere from none to the model's factor to this power.
CPU_LOAD_EXPONENT = 0.5


def load_range(factor: float, measure: str = "wall") -> tuple[float, float]:
    """What waiting for a CPU may make of a ratio whose CPU-bound model says `factor`, lower first:
    on wall (or device) time, the model's factor and the measured law's (LOAD_EXPONENT); on CPU
    time, from nothing (1) to the factor to CPU_LOAD_EXPONENT."""
    if measure == "cpu":
        other = factor**CPU_LOAD_EXPONENT
        return (min(1.0, other), max(1.0, other))
    other = factor**LOAD_EXPONENT
    return (min(factor, other), max(factor, other))


# Below this many CPU cores used by everything outside the job's processes (on average over its
# steady steps), a wait for a CPU is the job's own: its threads and processes outnumbered the CPUs.
# At 0.05 cores, the machine's other work could have delayed a one-thread step by ~5% at most.
OWN_WAITS_OTHERS = 0.05
# A side's own waits are said (and taken out of the load) from this share of its runnable time.
OWN_WAITS_SAID = 0.02


def waits_own(others_cores: float | None) -> bool:
    """Whether waits read beside `others_cores` (CpuWait.others_cores) were the job's own doing:
    nothing else ran on its CPUs (less than OWN_WAITS_OTHERS cores), so its threads waited for each
    other, which no quieter runner changes. False where not known."""
    return others_cores is not None and others_cores < OWN_WAITS_OTHERS


@dataclass(frozen=True)
class CpuWait:
    """How long the mode's processes waited for a CPU during its steady steps: the machine's other
    load, measured where it slows the job (capture/processes/cpu_wait.py). A CPU-bound step that
    waits a fraction w of its runnable time takes 1 / (1 - w) times as long as on an idle machine
    (a lower bound of what the load does to a torch step: LOAD_EXPONENT)."""

    wait_s: float  # summed over the tree's threads
    run_s: float
    window_s: float  # the steady steps' span of time
    # The stall over the window (capture/processes/cpu_wait.py): each interval's longest wait of one
    # thread, up to what the tree left to others; None in readings made before it was kept.
    stall_s: float | None = None
    # The median steady step's time over the median of the steps' times less each step's own wait
    # (its share w from the readings that bracket it: wall x (1 - w)); None without readings per
    # step. A load that comes and goes weighs on the window's share by time and on the median by
    # steps: 2 s of full load in a 10 s window is a 20% share, yet slows no step of the majority.
    median_slowdown: float | None = None
    # The median step's share of its wall time its threads were runnable (on a CPU or waiting for
    # one; summed over threads, at most 1): below 1 for a step that sleeps or waits for data or a
    # device, which no load lengthens. None without readings per step (taken as 1).
    median_runnable: float | None = None
    # The steady steps' process CPU time over their loop thread's (medians): 2 for a step that
    # keeps two intra-op threads busy (heavy_load_bound); None where the steps do not say.
    median_parallel: float | None = None
    # The CPU cores everything outside the mode's processes used, on average over the window, on the
    # CPUs the job may run on (capture/processes/cpu_wait.py, "others"); pooled, the largest of the
    # repetitions'. None in readings made before it was kept, or where /proc/stat was not read.
    others_cores: float | None = None

    @property
    def own_waits(self) -> bool:
        """Whether the waits are the job's own doing (waits_own)."""
        return waits_own(self.others_cores)

    def machines(self) -> CpuWait:
        """The waits the machine's load made: none where they were the job's own (`own_waits`)."""
        if not self.own_waits:
            return self
        return replace(self, wait_s=0.0, stall_s=0.0 if self.stall_s is not None else None,
                       median_slowdown=1.0 if self.median_slowdown is not None else None)

    @property
    def summed_fraction(self) -> float:
        """Of the time the mode's threads were runnable, the share they waited for a CPU."""
        total = self.wait_s + self.run_s
        return self.wait_s / total if total > 0 else 0.0

    @property
    def stall_fraction(self) -> float:
        """The share of the window the stall held the steps up (0 where not read)."""
        return min(self.stall_s / self.window_s, 1.0) if self.stall_s is not None and self.window_s > 0 else 0.0

    @property
    def fraction(self) -> float:
        """The summed share, or, where larger, the stall's (a thread of a pool waiting while the
        others spin at its barrier)."""
        return max(self.summed_fraction, self.stall_fraction)

    @property
    def slowdown(self) -> float:
        """What the waiting alone makes the median CPU-bound step take, as a factor (1.0: no wait):
        from the steps' own waits where known, else 1 / (1 - the window's share)."""
        if self.median_slowdown is not None:
            return self.median_slowdown
        return 1.0 / max(1.0 - self.fraction, 1e-3)

    @property
    def step_fraction(self) -> float:
        """The share of waiting that makes `slowdown`: the median step's share of its wall time,
        where the steps' own waits are known (a load against which a median is judged), else the
        window's."""
        return 1.0 - 1.0 / self.slowdown

    @property
    def runnable(self) -> float:
        """The median step's runnable share of its wall time (1.0 where not known)."""
        return self.median_runnable if self.median_runnable is not None else 1.0

    @property
    def runnable_fraction(self) -> float:
        """The share of its runnable time the median step waited for a CPU: `step_fraction` for a
        step that is all on the CPU, more for one that also sleeps or waits for a device (what
        HEAVY_WAIT and heavy_load_bound read)."""
        return runnable_wait(self.step_fraction, self.runnable)

    @property
    def cores(self) -> float:
        """CPU cores the mode's processes used on average during its steady steps."""
        return self.run_s / self.window_s if self.window_s > 0 else 0.0


def _sample_at(samples: list[list[float]], t: float) -> tuple[float, ...]:
    """(run s, wait s[, stall s]) at clock time t, between the samples that bracket it."""
    import bisect

    times = [s[0] for s in samples]
    i = bisect.bisect_left(times, t)
    if i <= 0:
        return tuple(samples[0][1:])
    if i >= len(samples):
        return tuple(samples[-1][1:])
    before, after = samples[i - 1], samples[i]
    share = (t - before[0]) / (after[0] - before[0]) if after[0] > before[0] else 1.0
    return tuple(a + (b - a) * share for a, b in zip(before[1:], after[1:]))


def steady_steps(record: ModeRecord) -> tuple[Any, Any] | None:
    """(end `t`, wall s) of the steady steps (a wall time, nothing compiled or captured), numpy
    arrays on the record's clock; None when the steps hold no times."""
    return record.derived("steady_steps", _steady_steps)


def _steady_steps(record: ModeRecord) -> tuple[Any, Any] | None:
    import numpy as np

    fast = held_steps(record)
    if fast is not None:  # a big record: its arrays, not a list per column
        times = record.columns[StepEvent.kind].numbers("t")
        if times is None:
            return None
        steady = ~fast.touched & ~fast.wall_null
        return times[0][steady].astype(float), fast.wall_s[steady].astype(float)
    steps = step_columns(record)
    pairs = [(steps.t[i], steps.wall_s[i]) for i in range(len(steps))
             if steps.wall_s[i] is not None and steps.t[i] is not None and not steps.touched(i)]
    if not pairs:
        return np.zeros(0), np.zeros(0)
    end, wall = (np.array(column, dtype=float) for column in zip(*pairs))
    return end, wall


def steady_window(record: ModeRecord) -> tuple[float, float] | None:
    """(start, end) of the steady steps on the record's clock: the first steady step's start
    (its end `t` less its wall time) to the last steady step's end; None without two."""
    steps = steady_steps(record)
    if steps is None or len(steps[0]) < 2:
        return None
    end, wall = steps
    return float((end - wall).min()), float(end.max())


def cpu_wait(record: ModeRecord) -> CpuWait | None:
    """The mode's CPU wait over its steady steps; None where it was not measured (no readings, an
    older record, readings that do not cover the steps)."""
    return record.derived("cpu_wait", _cpu_wait)


def cpu_wait_readings(record: ModeRecord) -> tuple[list[list[float]], float] | None:
    """The mode's CPU-wait readings ([clock time, cumulative run s, cumulative wait s], in time
    order) and their period; a rank's record reads its mode's. None without two of them."""
    return record.derived("cpu_wait_readings", _cpu_wait_readings)


def _cpu_wait_readings(record: ModeRecord) -> tuple[list[list[float]], float] | None:
    from cagtool.record.cpu_wait_file import read_cpu_wait
    from cagtool.record.schema import CPU_WAIT_FILE, MAX_JSON_FILE_BYTES

    path = record.path / CPU_WAIT_FILE
    if not path.exists() and record.path.parent.name == "procs":  # a rank's record: its mode's readings
        path = record.path.parent.parent / CPU_WAIT_FILE
    try:
        found = read_cpu_wait(read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES))
    except OSError:  # not there (an older record, a process that ended before a reading)
        return None
    # A link or FIFO planted in its place is refused as every record file is (UnreadableInput,
    # exit 3): losing a side's readings would switch the load rules off for it.
    if found is None:
        return None
    samples, sample_s = found
    if len(samples) < 2 or any(b[0] < a[0] for a, b in zip(samples, samples[1:])):
        return None
    return samples, sample_s


def _cpu_wait(record: ModeRecord) -> CpuWait | None:
    t0 = record.manifest.clock_t0
    found = cpu_wait_readings(record)
    window = steady_window(record)
    if t0 is None or found is None or window is None:
        return None
    samples, sample_s = found
    start, end = window[0] + t0, window[1] + t0
    # Readings that cover the window. A window shorter than their period gets the share of the
    # period around it: a coarser figure, but a mode of a few fast steps beside a mode that waited
    # must not read as "not measured", which claims nothing against the other's load.
    if start < samples[0][0] - sample_s or end > samples[-1][0] + sample_s or end <= start:
        return None
    first, last = _sample_at(samples, start), _sample_at(samples, end)
    if last[0] - first[0] <= 0:
        return None
    stall = max(last[2] - first[2], 0.0) if len(first) > 2 else None
    # What else ran, over the part of the window it was read in (not where the tree's total went down).
    span = last[4] - first[4] if len(first) > 4 else 0.0
    others = max(last[3] - first[3], 0.0) / span if span > 0.25 * (end - start) else None
    return CpuWait(wait_s=max(last[1] - first[1], 0.0), run_s=last[0] - first[0], window_s=end - start, stall_s=stall,
                   median_slowdown=median_slowdown([record]), median_runnable=median_runnable([record]),
                   median_parallel=median_parallel([record]), others_cores=others)


def compile_wait(record: ModeRecord) -> float | None:
    """The share of its runnable time the mode's process tree waited for a CPU from its first
    reading to its first steady step: the span of its imports, compiles and first steps, what
    its compile time was measured in (the steady steps' share is `cpu_wait`). None without two
    readings in that span."""
    return record.derived("compile_wait", _compile_wait)


def _compile_wait(record: ModeRecord) -> float | None:
    t0 = record.manifest.clock_t0
    found = cpu_wait_readings(record)
    if t0 is None or found is None:
        return None
    samples = found[0]
    window = steady_window(record)
    end = window[0] + t0 if window is not None else samples[-1][0]
    if end <= samples[0][0]:
        return None
    first, last = tuple(samples[0][1:]), _sample_at(samples, end)
    ran, waited = last[0] - first[0], max(last[1] - first[1], 0.0)
    if ran + waited <= 0:
        return None
    stalled = max(last[2] - first[2], 0.0) / (end - samples[0][0]) if len(first) > 2 else 0.0
    return max(waited / (ran + waited), min(stalled, 1.0))


def step_waits(record: ModeRecord) -> tuple[Any, Any, Any] | None:
    """(wall s, share waited, share runnable) of each steady step, numpy arrays, from the CPU-wait
    readings that bracket the step (interpolated, as for the window; a step shorter than the
    readings' period gets its period's). Both shares are of the step's wall time: runnable, the
    threads' time on a CPU or waiting for one (summed, at most the wall time); waited, the share of
    that runnable time they waited times the runnable share (a step that sleeps half its time and
    waits half the rest waited a quarter of its wall time), or where larger the stall's share. None
    without readings or two steady steps."""
    return record.derived("step_waits", _step_waits)


def _step_waits(record: ModeRecord) -> tuple[Any, Any] | None:
    import numpy as np

    t0 = record.manifest.clock_t0
    found = cpu_wait_readings(record)
    steps = steady_steps(record)
    if t0 is None or found is None or steps is None or len(steps[0]) < 2:
        return None
    readings = np.array(found[0], dtype=float)
    end, wall = steps
    at_end, at_start = end + t0, end - wall + t0
    ran = np.interp(at_end, readings[:, 0], readings[:, 1]) - np.interp(at_start, readings[:, 0], readings[:, 1])
    waited = np.interp(at_end, readings[:, 0], readings[:, 2]) - np.interp(at_start, readings[:, 0], readings[:, 2])
    ran, waited = np.maximum(ran, 0.0), np.maximum(waited, 0.0)
    total = ran + waited
    runnable = np.minimum(np.divide(total, wall, out=np.ones_like(total), where=wall > 0), 1.0)
    share = np.divide(waited, total, out=np.zeros_like(total), where=total > 0) * runnable
    if readings.shape[1] > 3:  # the stall (cpu_wait.py): the share of the step it held up, where larger
        stalled = np.maximum(np.interp(at_end, readings[:, 0], readings[:, 3]) - np.interp(at_start, readings[:, 0], readings[:, 3]), 0.0)
        share = np.maximum(share, np.minimum(np.divide(stalled, wall, out=np.zeros_like(wall), where=wall > 0), 1.0))
    return wall, share, np.maximum(runnable, share)


def median_slowdown(records: list[ModeRecord]) -> float | None:
    """The median steady step's time over the median of the same steps without their wait for a
    CPU (each step's wall x (1 - its share)), pooled over `records` (a mode's repetitions); None
    unless every record has its steps' waits."""
    import numpy as np

    found = [step_waits(record) for record in records]
    if not found or any(f is None for f in found):
        return None
    return slowdown_of(np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]))  # type: ignore[index]


def slowdown_of(wall: Any, share: Any) -> float | None:
    """The median of the steps' wall times over the median of the same steps without their wait for
    a CPU (wall x (1 - share)), numpy arrays; None where that is no time."""
    import numpy as np

    idle = float(np.median(np.asarray(wall, dtype=float) * (1.0 - np.asarray(share, dtype=float))))
    return float(np.median(wall)) / idle if idle > 0 else None


def median_parallel(records: list[ModeRecord]) -> float | None:
    """The steady steps' process CPU time over their loop thread's CPU time (the medians, pooled
    over `records`): about 1 for a step on one thread, 2 for one that kept two threads busy. None
    unless every record has both for its steady steps."""
    process, thread = [], []
    for record in records:
        cpu, own = steady_cpu_seconds(record, "cpu_s"), steady_cpu_seconds(record, "thread_cpu_s")
        if cpu is None or own is None:
            return None
        process += cpu
        thread += own
    if not process or not thread:
        return None
    import statistics

    mine = statistics.median(thread)
    return statistics.median(process) / mine if mine > 0 else None


def median_runnable(records: list[ModeRecord]) -> float | None:
    """The median steady step's runnable share of its wall time (step_waits), pooled over `records`
    as median_slowdown pools them: the median of the steps' runnable seconds over the median of
    their wall times, at most 1; None unless every record has its steps' waits."""
    import numpy as np

    found = [step_waits(record) for record in records]
    if not found or any(f is None for f in found):
        return None
    wall = np.concatenate([f[0] for f in found])  # type: ignore[index]
    runnable = np.concatenate([f[0] * f[2] for f in found])  # type: ignore[index]
    median = float(np.median(wall))
    return min(float(np.median(runnable)) / median, 1.0) if median > 0 else None


def runnable_wait(wall_share: float, runnable: float | None) -> float:
    """The share of its runnable time a step waited for a CPU, from the share of its wall time
    (`wall_share`) and its runnable share (None: 1, a step all on the CPU)."""
    if runnable is None or runnable >= 1.0 or runnable <= 0.0:
        return wall_share
    return min(wall_share / max(runnable, wall_share), 0.999)


# Below a 25% difference in the reference loop, two machines are taken to be as fast: a run's
# fastest reading held within 2% across runs on one shared VM, where single readings moved by up
# to 1.8x (docs/ci.md); the margin is for runs whose every reading met a busy sibling thread.
MACHINE_NEGLIGIBLE = math.log(1.25)


# A reference loop outside these bounds (seconds) is not one cagtool timed: a forged or damaged
# field (about 1.3 ms on a 2026 x86 core; 0.1 s would be a machine 75x slower).
_REFERENCE_BOUNDS = (1e-4, 0.1)


def reference_loop_of(machine: dict[str, Any], where: str) -> float | None:
    """The machine's `reference_loop_s`, None where not recorded (records and baselines from before
    it, the Python API's); UnreadableInput for a value cagtool cannot have written (not a number of
    seconds in _REFERENCE_BOUNDS): a forged figure would otherwise excuse or fake a slowdown (the
    gate) or make a machine read thousands of times slower (compare)."""
    value = machine.get("reference_loop_s")
    if value is None:
        return None
    low, high = _REFERENCE_BOUNDS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise UnreadableInput(f"{where}: machine.reference_loop_s is {value!r}, not a reference loop's CPU seconds ({low:g}-{high:g} s)")
    return float(value)
