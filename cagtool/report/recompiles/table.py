"""Every recompile of a mode record, one row each: pure functions of the record, no rendering.

`recompile_table(mode_record)` is the entry point; below, in order: the row and
table types; Dynamo's rows and recompile-limit hits; the filtered load; the table itself.
"""

from __future__ import annotations

import dataclasses
import bisect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import msgspec

from cagtool.errors import UnreadableInput
from cagtool.record.integrity import mode_damage
from cagtool.record.loader import ModeRecord, RunRecord, inside, load_run
from cagtool.record.manifest import typed_collate_functions, typed_compile_calls
from cagtool.record.schema import (
    PHASE_CHECKPOINT_RECOMPUTE,
    BackwardEvent,
    FINDING_CA_CAPTURE_ERROR,
    FINDING_CA_CAPTURE_FAILED,
    FINDING_CA_FLAG_WITHOUT_COMPILED_BACKWARD,
    MISS_UNKNOWN,
    CacheMissEvent,
    ARTIFACT_GUARDS,
    CACompileEvent,
    CAGraphEvent,
    ChangedSize,
    CompileArtifactEvent,
    DynamoCompileEvent,
    DynamoRecompileEvent,
    GradDigestEvent,
    OptimizerStepEvent,
    FinalStateEvent,
    FindingEvent,
    GraphBreakEvent,
    HookSite,
    SourceRef,
    StepEvent,
)
from cagtool.report.changed_sizes import misses_with_earlier_values, saved_values_changed
from cagtool.report.figures.metrics import other_call_captures
from cagtool.report.findings import SkippedCompile, skipped_compiles
from cagtool.report.known_failures import library_layer_drop
from cagtool.report.replaced import replaced_by
from cagtool.report.recompiles.reads import (EVALUATION_FUNCTION, LimitHit, StepSummary, after_training, forward_step, inside_captures,
                                             holding, limit_hits, short_file, step_summary, steps_and_seqs, training_end)
from cagtool.torch_text import (
    GUARD_GRAD_MODE,
    GuardedValue,
    assigned_at,
    compile_attempt,
    compile_frame,
    compiled_dynamic_dim,
    compiled_grad_mode,
    compiled_inference_mode,
    equals_guard,
    guard_kind,
    guarded_value,
    in_torch_optim,
    looks_like_torch_or_stdlib_file,
    looks_like_user_file,
    none_guard,
    random_draw_in_code,
    random_module_call,
    recompile_limit,
    reason_compile_id,
    resume_function,
    source_prefixes,
    none_guards_broken,
    size_guard,
    guard_shape,
    guard_text,
    traceback_frames,
    wrapped_module,
)

if TYPE_CHECKING:
    from cagtool.report.recompiles.budget import ModeBudget
    from cagtool.report.recompiles.phases import ModePhases

SOURCE_CA = "ca_cache_miss"
SOURCE_DYNAMO_FRAME = "dynamo_frame"
SOURCE_DYNAMO_CA_GRAPH = "dynamo_ca_graph"
KIND_GUARD = "guard_failure"
GRAPH_ROOT = "torch::autograd::GraphRoot"


@dataclass(frozen=True)
class RecompileRow:
    """One recompile (or the initial CA capture). `seqs` are the events it was read from."""

    mode: str
    source: str  # SOURCE_CA | SOURCE_DYNAMO_FRAME | SOURCE_DYNAMO_CA_GRAPH
    compile_id: str  # the id of what was (re)compiled: "!3", "0/2", "!0/1/1"
    step: int | None
    kind: str  # new_node | changed_shapes | unknown | guard_failure
    seqs: tuple[int, ...]
    initial: bool = False
    ca_id: int | None = None
    node: str | None = None
    node_call: int | None = None
    key_size: int | None = None
    previous_key_sizes: tuple[int, ...] = ()
    changed_sizes: tuple[ChangedSize, ...] = ()
    total_changed: int | None = None
    dynamic_sizes: int | None = None  # a CA miss's sizes torch holds dynamic in the graph it captured ("total of M")
    messages: tuple[str, ...] = ()  # torch's reasons, verbatim (CA message or Dynamo guard failures)
    user_source: SourceRef | None = None
    produced: str | None = None  # the graph this recompile produced: "!N" or the Dynamo compile id
    frame_name: str = ""  # the function Dynamo recompiled, when it is the user's (not torch's wrapper)
    # The user's line that called the recompiled code (`model(x, scale)`), kept beside the more
    # specific `user_source`: a guard on an argument is fixed where the argument is passed.
    caller: SourceRef | None = None
    optimizer_frame: bool = False  # the recompiled frame is torch.optim's (an optimizer's step() compiled)
    # The recompiled frame is torch's `call_hook` (external_utils.py), through which a compiled-autograd
    # graph runs its hooks: its inputs are the hooks' arguments, not the user's.
    hook_runner: bool = False
    # The recompiled frame is a resume function Dynamo made after a graph break: the function it
    # continues, its file, and the line of the break (how="graph_break").
    resume_of: SourceRef | None = None
    # A CA capture's backward call (the user's `loss.backward()`), kept beside `user_source`, which
    # with --trace-nodes is the forward line that made the node that differs.
    backward_call: SourceRef | None = None
    # The frame Dynamo (re)compiled, whoever's code it is (`frame_name` is set for the user's only):
    # its file and function; "" for a CA graph's code or where its compile was not recorded.
    frame_file: str = ""
    frame_function: str = ""
    frame_argnames: tuple[str, ...] = ()  # its parameters, in order (DynamoCompileEvent.co_argnames; () where not recorded)
    # A frame Dynamo compiled inside a compiled-autograd graph whose code is torch's own (a custom
    # autograd Function's backward the graph calls through torch's `call_backward`, DTensor's say, or
    # the function Dynamo resumes after a graph break in it): (its function, its file); () otherwise.
    torch_frame: tuple[str, str] = ()

    @property
    def seq(self) -> int:
        return self.seqs[0] if self.seqs else -1

    @property
    def failing_guard(self) -> str | None:
        """The first guard-failure line of a Dynamo recompile (the newest cache entry's), verbatim."""
        if self.kind != KIND_GUARD or not self.messages:
            return None
        return self.messages[0].splitlines()[0].strip() if self.messages[0].strip() else None


@dataclass
class RecompileTable:
    """The processed view of one mode: rows in record order, plus what the explanation needs."""

    mode: str
    rows: list[RecompileRow]  # initial capture(s) and recompiles, in event order
    steps: int  # steps recorded (top-level backwards)
    last_step: int | None
    limit_hits: list[LimitHit] = field(default_factory=list)
    # The seq of the job's last backward call (reads.training_end): what compiled after it, in the
    # step the job ended in, compiled for calls no backward followed.
    training_end: int | None = None
    graphs: dict[int, CAGraphEvent] = field(default_factory=dict)  # ca_id -> graph
    # ca_id -> the graph it replaced (report/replaced.py: by backward call, then autograd nodes)
    replaced: dict[int, int] = field(default_factory=dict)
    # The captures that are a step's other backward calls' first graphs, each captured once
    # (metrics.other_call_captures: what the summary and the gate leave out of CA recompiles).
    other_calls: frozenset[int] = frozenset()
    # ca_id -> the hooks the graph calls, named (CACompileEvent.hooks); graphs without hooks are absent
    hook_sites: dict[int, list[HookSite]] = field(default_factory=dict)
    cwd: str = ""
    skipped_lines: int = 0
    unknown_kinds: dict[str, int] = field(default_factory=dict)
    status: str = ""
    dynamo_compiles: int = 0  # Dynamo's compiles of the mode's frames (DynamoCompileEvent), first ones included
    imported: dict | None = None  # the manifest's `imported` (a record built by `cagtool import`)
    # DataLoader iterators the job's loop made (the manifest's `dataloader_iterators`; None in a
    # record that does not say): 0, and a smaller batch is no DataLoader's last but a slice made by hand.
    data_loaders: int | None = None
    # ... and the collate functions they batched with (the manifest's `collate_functions`, typed:
    # record.manifest.typed_collate_functions).
    collate_functions: tuple[dict[str, Any], ...] = ()
    # The job's torch.compile calls (the manifest's `compile_calls`: where each was made, `dynamic`
    # as passed, the code it compiles first), and each frame's code (compile_frame id -> (file,
    # first line) of its compiles): which call compiled a recompiled frame (explain's `compiled_by`).
    compile_calls: tuple[dict[str, Any], ...] = ()
    frame_codes: dict[str, tuple[str, int]] = field(default_factory=dict)
    # The job's module.compile() calls that compiled nothing (report.findings.skipped_compiles).
    skipped_compiles: "tuple[SkippedCompile, ...]" = ()
    # Where torch reported a data-dependent branch (graph break "Data-dependent branching"), in
    # record order: a branch picks the ops of the backward, so a structural change is tied to it.
    branch_sites: list[SourceRef] = field(default_factory=list)
    # Where torch reported a graph break on a call of Python's random module (random.random() in a
    # LayerDrop), in record order, with the call torch names ("Random.random"): a random draw that
    # picks which layers run changes the backward's structure.
    random_sites: list[tuple[SourceRef, str]] = field(default_factory=list)
    # Where torch reported a recurrent module's call it does not compile (graph break "Attempted to
    # wrap RNN, GRU, or LSTM"), in record order: on CPU an nn.GRU or nn.RNN run eagerly records its
    # cell's nodes once per time step, so a sequence's length sets the backward's structure.
    rnn_sites: list[SourceRef] = field(default_factory=list)
    # Every compile by phase, and the recompile budget per frame (phases.py, budget.py).
    phases: "ModePhases | None" = None
    budget: "ModeBudget | None" = None
    unexpected: list = field(default_factory=list)  # UnexpectedCause (unexpected.py)
    # Frames (compile_frame ids; a CA graph's own frames apart) compiled with dynamic shapes (torch.compile(..., dynamic=True):
    # DynamoCompileEvent.assume_static_by_default False).
    dynamic_frames: frozenset[str] = frozenset()
    # Frames (compile_frame ids) where a graph break is an error: compiled with fullgraph=True
    # (DynamoCompileEvent.fullgraph True); a fix that adds a graph break there fails the job.
    fullgraph_frames: frozenset[str] = frozenset()
    # seq of a Dynamo recompile of a frame that is not the user's, made while compiled autograd
    # captured a backward -> that capture's ca_id (`frames_inside_captures`)
    inside_captures: dict[int, int] = field(default_factory=dict)
    # Per frame of torch's wrapper of a compiled module's call (`inner` in
    # torch/_dynamo/external_utils.py, one code object for every torch.compile'd module): compile id
    # -> the user's line that called it, in compile order.
    wrapper_callers: dict[str, list[tuple[str, SourceRef | None]]] = field(default_factory=dict)
    # The module each of those compiles was for (torch_text.wrapped_module, read from its guards):
    # compile id -> ("Sequential", "0=Linear", ...); absent where the record kept no guards.
    wrapper_modules: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # The module a compiled method's `self` was (torch_text.wrapped_module(..., "self")), for each
    # Dynamo recompile of a method and each cache entry it failed: compile id -> ("Layer",
    # "relu=ReLU", "weight:[500, 784]", ...). Instances of one class with parameters of other sizes
    # (a layer-wise net's `@torch.compile def forward`) each compile once: no input's change.
    self_modules: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # ... those that wrapped an optimizer's step(): the next compile, from the same line, is torch.optim's
    # (torch.compile(opt.step) after an LR scheduler made opt.step a plain function of torch's).
    wrapper_optimizer_steps: frozenset[str] = frozenset()
    # The mode ran compiled autograd over parameters each rank holds a shard of (FSDP2's DTensors,
    # GradDigestEvent.shard): a setup torch has no compiled-autograd path for (record_notes).
    sharded_under_ca: bool = False
    # The script's backward runs outside any compiled function with the CA flag set: without cagtool
    # the job gets no compiled autograd, and every CA capture here is cagtool's ca mode's own.
    ca_by_cagtool_only: bool = False
    # ... because the function whose call runs backward was compiled before the flag was set.
    ca_flag_after_compile: bool = False
    # Every backward compiled autograd captured was called outside any function torch.compile made
    # (a library's loss.backward(), as HF Trainer's and Lightning's): torch.compile's `dynamic`
    # never reaches compiled autograd there, only `_enable`'s does. False where the record cannot
    # tell (no Dynamo compile of a CA graph with its caller).
    backward_outside_compiled: bool = False
    # What in the record contradicts torch's own counters (record/integrity.py): its counts are then
    # what the record holds, not what ran, and no renderer states them as the job's (record_notes).
    damage: list[str] = field(default_factory=list)
    # Compile artifacts (guard trees) the record lists but whose file is gone: guard detail, left out
    # with a note, never the end of the report.
    missing_artifacts: list[str] = field(default_factory=list)
    # CA graphs whose capture raised (FindingEvent `ca_capture_failed`): torch captures such a graph
    # again when it comes back, with no cache-miss reason, cagtool or not.
    failed_captures: frozenset[int] = frozenset()
    # ... and the error each raised, where the record has it (FindingEvent `ca_capture_error`): ca id -> finding.
    capture_errors: dict[int, FindingEvent] = field(default_factory=dict)
    # The Dynamo compile that raised the error the process ended with (DynamoCompileEvent.fail_type,
    # past the recompile limit's own message): (compile id, "Type: reason"), or None. Such a
    # recompile is not cached: it is what stopped the job (`failed_compile` in its cause's facts).
    stopping_compile: tuple[str, str] | None = None
    # torch's first message of the graph break at each (file, line): what a resume frame follows.
    break_reasons: dict[tuple[str, int], str] = field(default_factory=dict)
    # The graph breaks inside a call a function made, by the function whose compile broke (its
    # file, its name): (file, line, torch's message) where its compiles broke at one such place
    # only (`self.encoder(src)` breaking in nn.TransformerEncoder's code): the break a resume frame
    # of that function follows, where torch's message names the inner line, not the call's.
    nested_breaks: dict[tuple[str, str], tuple[str, int, str]] = field(default_factory=dict)
    # What each compile's guard tree holds on a Python value a failed guard is on (and on the
    # objects it is reached through): (compile id, source as the reason prints it) -> its type and
    # constant; and where the compiled code assigns that value, (compile id, source) -> (code, place).
    guarded: dict[tuple[str, str], GuardedValue] = field(default_factory=dict)
    assignments: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    # A Dynamo recompile whose every failed entry also held a value to be None that the recompile
    # holds as another value (none_guards_broken): compile id -> (source, value, assignment or None)
    # of those values. That guard failed too, unnamed (torch names the first failing guard): a fix
    # of the named guard alone leaves this recompile.
    none_guards_broken: dict[str, list[tuple[str, str, tuple[str, str] | None]]] = field(default_factory=dict)
    # The grad mode each recompile on the grad mode was made for (its guard tree's GLOBAL_STATE):
    # compile id -> True (grad on: training after an evaluation) / False (under no_grad or inference_mode).
    grad_modes: dict[str, bool] = field(default_factory=dict)
    # Of those recompiles, whether the evaluation's compile (grad off: the recompile's own, or the
    # entry that failed when grad came back on) was made under torch.inference_mode() (True) or
    # torch.no_grad() (False), from its tree's tensor guards: compile id of the recompile -> flag.
    inference_modes: dict[str, bool] = field(default_factory=dict)
    # The tensor dimensions a Dynamo recompile on a failed size guard compiled dynamic (automatic
    # dynamic shapes), from its guard tree: compile id -> {(tensor as the reason names it, dim)}.
    dynamic_dims: dict[str, frozenset[tuple[str, int]]] = field(default_factory=dict)
    # Reads the steps in which an optimizer stepped before a later backward call of the same step
    # (stepped_between_backwards), on first use: only a second backward call's cause asks.
    _read_stepped_between: Callable[[], frozenset[int]] | None = field(default=None, repr=False, compare=False)
    _stepped_between: frozenset[int] | None = field(default=None, repr=False, compare=False)
    # Reads the steps with a torch.autograd.grad call (grad_call_steps), on first use: the same cause asks.
    _read_grad_calls: Callable[[], frozenset[int]] | None = field(default=None, repr=False, compare=False)
    _grad_calls: frozenset[int] | None = field(default=None, repr=False, compare=False)
    # Reads the step gradient accumulation began at (accumulation_from), on first use: a .grad cause asks.
    _read_accumulation: Callable[[], int | None] | None = field(default=None, repr=False, compare=False)
    _accumulation: tuple[int | None] | None = field(default=None, repr=False, compare=False)
    # Reads the integer constants that differ between two graphs of the same nodes (changed_sizes.py,
    # saved_values_changed), on first use: only a miss on a graph of unchanged nodes asks.
    _read_saved_values: Callable[[CAGraphEvent, CAGraphEvent], list[tuple[str, int, int]] | None] | None = field(
        default=None, repr=False, compare=False)
    # The record's name in its run where it differs from its mode (a repetition of --repeat K: "eager.2").
    label: str = ""
    # Sorted graph ids, built on first use (explanations of 1,000s of graphs).
    _graph_ids: list[int] | None = field(default=None, repr=False, compare=False)
    # Each graph's autograd nodes as a hashable multiset, read on first use.
    _node_sets: dict[int, frozenset] = field(default_factory=dict, repr=False, compare=False)

    def after_training(self, row: RecompileRow) -> bool:
        """The row compiled after training ended (reads.after_training): for calls no backward followed."""
        return bool(row.seqs) and after_training(row.step, min(row.seqs), self.last_step, self.training_end)

    @property
    def name(self) -> str:
        """What the table is called where it is shown: its record's name in the run (`eager.2`), else its mode."""
        return self.label or self.mode

    def previous_graph(self, ca_id: int | None) -> CAGraphEvent | None:
        """The graph `!ca_id` replaced (`replaced`: the latest earlier graph of its backward call,
        the pairing `diff-graphs` shows); where nothing ties it, the graph captured just before it."""
        if ca_id is None:
            return None
        if ca_id in self.replaced:
            return self.graphs.get(self.replaced[ca_id])
        ids = self._ids()
        index = bisect.bisect_left(ids, ca_id)
        return self.graphs[ids[index - 1]] if index > 0 else None

    @property
    def stepped_between_backwards(self) -> frozenset[int]:
        """The steps in which an optimizer stepped before a later backward call of the same step (a
        GAN's discriminator, then its generator's backward): their backward calls cannot be one."""
        if self._stepped_between is None:
            self._stepped_between = self._read_stepped_between() if self._read_stepped_between is not None else frozenset()
        return self._stepped_between

    @property
    def accumulation_from(self) -> int | None:
        """The step from which the job ran several backward calls a step after running one (gradient
        accumulation switched on at a later phase), or None."""
        if self._accumulation is None:
            self._accumulation = (self._read_accumulation() if self._read_accumulation is not None else None,)
        return self._accumulation[0]

    @property
    def grad_call_steps(self) -> frozenset[int]:
        """The steps with a torch.autograd.grad call among their backward calls: its gradients are
        returned, not accumulated into .grad (a gradient penalty's feed the step's next loss), so
        the calls of such a step cannot be summed into one backward."""
        if self._grad_calls is None:
            self._grad_calls = self._read_grad_calls() if self._read_grad_calls is not None else frozenset()
        return self._grad_calls

    def saved_values(self, before: CAGraphEvent, after: CAGraphEvent) -> list[tuple[str, int, int]] | None:
        """The integer constants that differ between two graphs of the same nodes (None: unread, or
        they differ in more than those)."""
        return self._read_saved_values(before, after) if self._read_saved_values is not None else None

    def nodes_captured_before(self, ca_id: int | None) -> bool:
        """Whether a graph captured before `!ca_id` has the same autograd nodes (by name and count):
        a miss on a graph of known nodes changed a key (.grad defined, a hook), not the structure."""
        graph = self.graphs.get(ca_id) if ca_id is not None else None
        if graph is None:
            return False
        mine = self._node_set(ca_id)
        return any(self._node_set(i) == mine for i in self._ids() if i < ca_id)

    def _node_set(self, ca_id: int) -> frozenset:
        found = self._node_sets.get(ca_id)
        if found is None:
            found = self._node_sets[ca_id] = frozenset(self.graphs[ca_id].autograd_names().items())
        return found

    def _ids(self) -> list[int]:
        if self._graph_ids is None or len(self._graph_ids) != len(self.graphs):
            self._graph_ids = sorted(self.graphs)
        return self._graph_ids

    @property
    def recompiles(self) -> list[RecompileRow]:
        return [r for r in self.rows if not r.initial]

    @property
    def initial(self) -> list[RecompileRow]:
        return [r for r in self.rows if r.initial]

    def count(self, source: str | None = None) -> int:
        return sum(1 for r in self.rows if not r.initial and (source is None or r.source == source))


def node_label(name: str | None, node_call: int | None) -> str:
    if not name:
        return ""
    short = name.replace("torch::autograd::", "")
    return f"{short} (NodeCall {node_call})" if node_call is not None else short




def _user_frame_from_reasons(reasons: list[str]) -> SourceRef | None:
    """The last user frame Dynamo names in its 'User stack trace' (the line that installed the guard)."""
    found = [f for f in traceback_frames("\n".join(reasons)) if looks_like_user_file(f[0])]
    if not found:
        return None
    file, line, function, code = found[-1]
    return SourceRef(file=file, line=line, code=code, function=function, how="guard")


def _compiled_frame(event: DynamoCompileEvent) -> SourceRef | None:
    """The function Dynamo compiled, when it is the user's code (not torch's wrapper of a module)."""
    if not looks_like_user_file(event.co_filename):
        return None
    return SourceRef(file=event.co_filename, line=event.co_firstlineno or 0, function=event.co_name, how="compiled_frame")


def dynamo_rows(record: ModeRecord, compile_events: list[DynamoCompileEvent]) -> list[RecompileRow]:
    """Dynamo recompiles: one per `dynamo_recompile` event, plus compiles with attempt > 0 that have
    none (their guard-failure reason was not recorded, but the recompile happened)."""
    compiles = {c.compile_id: c for c in compile_events}
    recompile_events = record.of(DynamoRecompileEvent)
    seen = {e.compile_id for e in recompile_events}
    rows = []
    for event in recompile_events:
        # The user's own line, most specific first: the frame the failing guard names, the line
        # that called the recompiled code (`model(x)`), the compiled function when it is the user's
        # (a compiled module's frame is torch's own wrapper, `external_utils.py` `inner`).
        compiled = compiles.get(event.compile_id)
        source = _user_frame_from_reasons(event.reasons)
        if source is None and event.is_ca_graph and compiled is not None and compile_frame(event.compile_id) is not None:
            # A frame of the user's compiled inside a compiled-autograd graph (a backward hook: `!1/3/1`),
            # whose guard names no line: the frame itself, not the backward call that ran the graph.
            source = _compiled_frame(compiled)
        source = source or event.source
        if source is None and compiled is not None and not event.is_ca_graph:
            source = _compiled_frame(compiled)
        caller = event.source if event.source is not None and event.source.how == "caller" else None
        rows.append(_dynamo_row(record, event.compile_id, event.is_ca_graph, event.step, event.seq, tuple(event.reasons), source, compiled,
                                caller))
    for event in compile_events:
        attempt = compile_attempt(event.compile_id)
        if not attempt or event.compile_id in seen:
            continue
        seen.add(event.compile_id)
        source = None if event.is_ca_graph else _compiled_frame(event)
        rows.append(_dynamo_row(record, event.compile_id, event.is_ca_graph, event.step, event.seq, (), source, event))
    return rows


def _dynamo_row(
    record: ModeRecord,
    compile_id: str,
    is_ca_graph: bool,
    step: int | None,
    seq: int,
    reasons: tuple[str, ...],
    source: SourceRef | None,
    compiled: DynamoCompileEvent | None,
    caller: SourceRef | None = None,
) -> RecompileRow:
    frame = _compiled_frame(compiled) if compiled is not None and not is_ca_graph else None
    resumed = resume_function(compiled.co_name) if compiled is not None and not is_ca_graph else None
    resume_of = None
    if compiled is not None and resumed is not None:
        resume_of = SourceRef(file=compiled.co_filename, line=compiled.co_firstlineno or resumed[1], function=resumed[0], how="graph_break")
    return RecompileRow(
        mode=record.mode,
        source=SOURCE_DYNAMO_CA_GRAPH if is_ca_graph else SOURCE_DYNAMO_FRAME,
        compile_id=compile_id,
        step=step if is_ca_graph else forward_step(step, record.mode),
        kind=KIND_GUARD,
        seqs=(seq,),
        messages=reasons,
        user_source=source,
        produced=compile_id,
        frame_name=frame.function if frame is not None else "",
        caller=caller,
        optimizer_frame=compiled is not None and not is_ca_graph and in_torch_optim(compiled.co_filename),
        resume_of=resume_of,
        hook_runner=compiled is not None and is_ca_graph and compiled.co_name == HOOK_RUNNER_FUNCTION
        and compiled.co_filename.replace("\\", "/").endswith(WRAPPER_FILE_END),
        frame_file=compiled.co_filename if compiled is not None and not is_ca_graph else "",
        frame_function=compiled.co_name if compiled is not None and not is_ca_graph else "",
        frame_argnames=tuple(compiled.co_argnames or ()) if compiled is not None and not is_ca_graph else (),
        torch_frame=(compiled.co_name, compiled.co_filename) if compiled is not None and is_ca_graph
        and looks_like_torch_or_stdlib_file(compiled.co_filename) else (),
    )



NEEDED_KINDS = frozenset(
    # FinalStateEvent: one per process, for the ranks' divergence line of a multi-rank run.
    # GraphBreakEvent: where torch reports a data-dependent branch, the line a structural change is tied to.
    # GradDigestEvent: a handful per process, whether the parameters are each rank's shard (sharded_under_ca).
    # CompileArtifactEvent: the guards of each compile of torch's module wrapper, which module it was for.
    # CACompileEvent: one per CA graph, naming the hooks it calls.
    # FindingEvent: `ca_capture_failed`, the captures that raised (a recapture after one has no reason).
    cls.kind for cls in (CacheMissEvent, CACompileEvent, CAGraphEvent, CompileArtifactEvent, DynamoCompileEvent, DynamoRecompileEvent, FindingEvent, FinalStateEvent,
                         GradDigestEvent, GraphBreakEvent)
) | {
    "aot_backward_graph",  # phases.py: the AOT backward graphs, one phase of the compiles
    StepEvent.kind,  # budget.py: the step times after a recompile-limit hit (from the columns sidecar when it matches)
    # an optimizer's step() before a later backward of its step (from the columns sidecar when it matches)
    BackwardEvent.kind, OptimizerStepEvent.kind,
}


def load_filtered(path: str | Path | None) -> tuple[RunRecord, dict[str, StepSummary]]:
    """A RunRecord holding only the events `recompiles` reads, with each mode's step count and
    last step (steps are numbered FIRST_STEP.. in write order). Raises UnreadableInput like `load_run`.
    A record whose columns sidecar matches its events.jsonl (every record a mode process closed)
    is read through it: the step, backward and optimizer-step lines, most of a long record, are
    counted from the sidecar and never scanned; only the other lines' spans are read."""
    run = load_run(path, kinds=NEEDED_KINDS, columns=True)
    steps = {}
    for name, mode in run.modes.items():
        steps[name] = StepSummary.counted(mode.kind_counts[StepEvent.kind])
    return run, steps


def _ca_rows(record: ModeRecord, misses: list[CacheMissEvent], graphs: dict[int, CAGraphEvent]) -> list[RecompileRow]:
    """One row per CA capture id: its miss event(s), or the graph alone when no reason was recorded."""
    by_id: dict[int, list[CacheMissEvent]] = {}
    for miss in misses:
        by_id.setdefault(miss.ca_id, []).append(miss)
    ids = sorted(set(by_id) | set(graphs))
    first_id = ids[0] if ids else None
    rows: list[RecompileRow] = []
    for ca_id in ids:
        events = by_id.get(ca_id, [])
        graph = graphs.get(ca_id)
        produced = f"!{ca_id}" if graph is not None else None
        if not events:
            rows.append(
                RecompileRow(
                    mode=record.mode,
                    source=SOURCE_CA,
                    compile_id=graph.compile_id or f"!{ca_id}",
                    step=graph.step,
                    kind=MISS_UNKNOWN,
                    seqs=(graph.seq,),
                    initial=ca_id == first_id,
                    ca_id=ca_id,
                    produced=produced,
                )
            )
            continue
        main = events[0]
        rows.append(
            RecompileRow(
                mode=record.mode,
                source=SOURCE_CA,
                compile_id=main.compile_id or f"!{ca_id}",
                step=main.step,
                kind=main.miss_kind,
                seqs=tuple(e.seq for e in events),
                initial=ca_id == first_id,
                ca_id=ca_id,
                node=main.node,
                node_call=main.node_call,
                key_size=main.key_size,
                previous_key_sizes=tuple(main.previous_key_sizes),
                changed_sizes=tuple(c for e in events for c in e.changed_sizes),
                total_changed=main.changed_count,
                dynamic_sizes=main.dynamic_sizes,
                messages=tuple(e.message for e in events),
                user_source=main.source or main.backward_call,
                backward_call=main.backward_call,
                produced=produced,
            )
        )
    return rows


def _earlier_values_from_guards(rows: list[RecompileRow]) -> list[RecompileRow]:
    """A changed size whose earlier value the graphs do not show (a size the graph passes on
    without reading it, e.g. to an AOT backward) takes it from the forward's size guard when the
    forward was recompiled just before, in the same step, for the same new value: `expected 32,
    actual 48` says a 48 was 32. Where no forward was recompiled (an uncompiled forward), the
    size guards of the code the new graph ran, recompiled right after its capture in the same step
    (a reentrant checkpoint's backward and recompute, compiled for the old batch), say it as well."""
    rows = _earlier_values_from_forward_guards(rows)
    out: list[RecompileRow] = []
    for i, row in enumerate(rows):
        if row.source == SOURCE_CA and row.ca_id is not None and any(c.previous is None for c in row.changed_sizes):
            earlier: dict[int, set[int]] = {}
            for later in rows[i + 1:]:
                if later.source == SOURCE_CA or later.step != row.step:
                    break
                found = size_guard(later.messages[0]) if later.messages and later.compile_id.startswith(f"!{row.ca_id}/") else None
                if found is not None:
                    earlier.setdefault(found[3], set()).add(found[2])
            sizes = tuple(
                msgspec.structs.replace(c, previous=next(iter(earlier[c.value])))
                if c.previous is None and len(earlier.get(c.value, ())) == 1 else c for c in row.changed_sizes
            )
            row = dataclasses.replace(row, changed_sizes=sizes)
        out.append(row)
    return out


def _earlier_values_from_forward_guards(rows: list[RecompileRow]) -> list[RecompileRow]:
    out: list[RecompileRow] = []
    guard: tuple[str, int, int, int] | None = None
    guard_step: int | None = None
    for row in rows:
        if row.source == SOURCE_DYNAMO_FRAME:
            found = size_guard(row.messages[0]) if row.messages else None
            guard, guard_step = (found, row.step) if found else (guard, guard_step)
        elif row.source == SOURCE_CA:
            if guard is not None and guard_step == row.step and any(c.previous is None and c.value == guard[3] for c in row.changed_sizes):
                sizes = tuple(
                    msgspec.structs.replace(c, previous=guard[2]) if c.previous is None and c.value == guard[3] else c for c in row.changed_sizes
                )
                row = dataclasses.replace(row, changed_sizes=sizes)
            guard = None
        out.append(row)
    return out


# torch 2.13's gb_type for an `if` on a tensor's value (GB0170, torch/_dynamo/graph_break_registry.json).
DATA_DEPENDENT_BRANCH = "Data-dependent branching"
# ... and for a call of an nn.RNN, nn.GRU or nn.LSTM module (GB0014; torch/_dynamo/variables/builder.py): the
# module runs eagerly.
RNN_MODULE_CALL = "Attempted to wrap RNN, GRU, or LSTM"


# torch 2.13 runs every torch.compile'd module's call through this one function: its frame is
# shared by all of them (docs/torch-internals.md, "One frame for every compiled module").
WRAPPER_FILE_END = "_dynamo/external_utils.py"
WRAPPER_FUNCTION = "inner"
HOOK_RUNNER_FUNCTION = "call_hook"  # torch._dynamo.external_utils.call_hook: a CA graph's hook, called


def _wrapper_callers(compile_events: list[DynamoCompileEvent]) -> dict[str, list[tuple[str, SourceRef | None]]]:
    callers: dict[str, list[tuple[str, SourceRef | None]]] = {}
    for event in compile_events:
        if event.co_name != WRAPPER_FUNCTION or not event.co_filename.replace("\\", "/").endswith(WRAPPER_FILE_END):
            continue
        frame = compile_frame(event.compile_id)
        if frame is not None and not event.compile_id.startswith("!"):
            callers.setdefault(frame, []).append((event.compile_id, event.phase.caller if event.phase is not None else None))
    return callers


def _wrapper_optimizer_steps(compile_events: list[DynamoCompileEvent], callers: dict[str, list[tuple[str, SourceRef | None]]]) -> frozenset[str]:
    ids = {cid for compiles in callers.values() for cid, _ in compiles}
    frames = [e for e in compile_events if not e.compile_id.startswith("!")]
    found = set()
    for event, following in zip(frames, frames[1:]):
        caller = event.phase.caller if event.phase is not None else None
        if event.compile_id in ids and caller is not None and in_torch_optim(following.co_filename) \
                and following.phase is not None and following.phase.caller == caller:
            found.add(event.compile_id)
    return frozenset(found)


def _guard_tree(record: ModeRecord, event: CompileArtifactEvent, missing: list[str]) -> str | None:
    """The artifact's text; None, its path added to `missing`, when its file is gone. A guard tree
    is detail (a value, a module name, a grad mode): a report goes on without it. A file planted as a
    link, led out of the run or too large is still refused (UnreadableInput), as every record file is.
    Read once per record: the table's readings (values, modules, grad modes, sizes) each ask for it."""
    text, path = record.derived(f"guard tree {event.file}", lambda r: _read_guard_tree(r, event))
    if text is None and path not in missing:
        missing.append(path)
    return text


def _read_guard_tree(record: ModeRecord, event: CompileArtifactEvent) -> tuple[str | None, str]:
    try:
        return record.artifact_text(event), ""
    except UnreadableInput:
        path = inside(record.path, event.file, f"compile artifact {event.artifact} of {event.compile_id}")  # re-raises a refusal
        if os.path.lexists(path):
            raise
        return None, str(path)


def _wrapper_modules(record: ModeRecord, callers: dict[str, list[tuple[str, SourceRef | None]]], missing: list[str]) -> dict[str, tuple[str, ...]]:
    """Which module each compile of torch's module wrapper was for, from its recorded guards (a
    small file per compile, only for that frame's compiles: at most its recompile limit)."""
    ids = {cid for compiles in callers.values() for cid, _ in compiles}
    if not ids:
        return {}
    modules: dict[str, tuple[str, ...]] = {}
    for event in record.of(CompileArtifactEvent):
        if event.artifact != ARTIFACT_GUARDS or event.compile_id not in ids:
            continue
        # A guard file planted as a link or led out of the run is refused (UnreadableInput), as every
        # record file a report reads is.
        text = _guard_tree(record, event, missing)
        module = wrapped_module(text) if text is not None else None
        if module:
            modules[event.compile_id] = module
    return modules


MAX_GUARD_TREES = 64  # guard trees read for value guards, the first compiles': a storm's later ones add nothing


def _guarded_values(record: ModeRecord, rows: list[RecompileRow], missing: list[str]) -> tuple[dict, dict]:
    """What the guard trees of the compiles a value guard failed between hold on that value: for
    each Dynamo recompile whose failing guard is `X == v` or `X is None`, the failed entry's tree and
    the new compile's (a small file each, read only for these)."""
    wanted: dict[str, set[str]] = {}
    for row in rows:
        if row.source == SOURCE_CA:
            continue
        for message in row.messages:
            guard = guard_text(message)
            source = none_guard(guard) or (found[0] if (found := equals_guard(guard)) else None)
            if source is None:
                continue
            for cid in (row.compile_id, reason_compile_id(message.strip().splitlines()[0])):
                if cid and (cid in wanted or len(wanted) < MAX_GUARD_TREES):
                    wanted.setdefault(cid, set()).add(source)
    guarded: dict[tuple[str, str], GuardedValue] = {}
    assignments: dict[tuple[str, str], tuple[str, str]] = {}
    if not wanted:
        return guarded, assignments
    for event in record.of(CompileArtifactEvent):
        if event.artifact != ARTIFACT_GUARDS or event.compile_id not in wanted:
            continue
        tree = _guard_tree(record, event, missing)
        if tree is None:
            continue
        for source in wanted[event.compile_id]:
            for reached in (*source_prefixes(source), source):
                value = guarded_value(tree, reached)
                if value is not None:
                    guarded[(event.compile_id, reached)] = value
            assignment = assigned_at(tree, source)
            if assignment is not None:
                assignments[(event.compile_id, source)] = (assignment[0], _whole_place(assignment[1], record))
    return guarded, assignments


def _none_guards_broken(record: ModeRecord, rows: list[RecompileRow], missing: list[str]) -> dict[str, list[tuple[str, str, tuple[str, str] | None]]]:
    """RecompileTable.none_guards_broken, from the guard trees of each Dynamo recompile and of the
    entries it failed (read only for recompiles whose named guard is not a None guard)."""
    entries: dict[str, list[str]] = {}
    for row in rows:
        if row.source == SOURCE_CA or not row.messages or any(none_guard(guard_text(m)) for m in row.messages):
            continue
        failed = [reason_compile_id(m.strip().splitlines()[0]) for m in row.messages]
        if all(failed) and len(entries) < MAX_GUARD_TREES:
            entries[row.compile_id] = failed  # type: ignore[assignment]
    wanted = set(entries) | {cid for failed in entries.values() for cid in failed}
    trees: dict[str, str] = {}
    for event in record.of(CompileArtifactEvent):
        if event.artifact == ARTIFACT_GUARDS and event.compile_id in wanted and event.compile_id not in trees:
            trees[event.compile_id] = _guard_tree(record, event, missing) or ""
    broken: dict[str, list[tuple[str, str, tuple[str, str] | None]]] = {}
    for cid, failed in entries.items():
        per_entry = [none_guards_broken(trees.get(entry, ""), trees.get(cid, "")) for entry in failed]
        if per_entry and all(per_entry):
            values = {source: (source, value, None if where is None else (where[0], _whole_place(where[1], record)))
                      for found in per_entry for source, value, where in found}
            broken[cid] = list(values.values())
    return broken


def _whole_place(place: str, record: ModeRecord) -> str:
    """`file:line` as torch's guard comment gives it, whose file torch may have cut to its last
    characters (`mp/hunt9/wlm/model.py` for /tmp/hunt9/wlm/model.py): the file of a compiled frame
    that ends with it, where one does, as the run shows it; the text as torch wrote it otherwise."""
    file, _, line = place.rpartition(":")
    if not file or file.startswith("/"):
        return place
    files = {e.co_filename for e in record.of(DynamoCompileEvent) if e.co_filename}
    found = sorted(f for f in files if f.endswith("/" + file) or f.endswith(file))
    if not found:
        return place
    whole = next((f for f in found if f.endswith("/" + file)), found[0])
    return f"{short_file(whole, record.manifest.cwd)}:{line}"


def _grad_modes(record: ModeRecord, rows: list[RecompileRow], missing: list[str]) -> tuple[dict[str, bool], dict[str, bool]]:
    """The grad mode each Dynamo recompile whose failing guard is the grad mode was compiled for,
    from its guard tree (read only for these): torch's reason names the state, not which way it
    went. And, where grad was off in it or in the entry that failed (the evaluation's compile), whether
    that compile ran under torch.inference_mode() or torch.no_grad() (`RecompileTable.inference_modes`)."""
    failed_entry: dict[str, str] = {}
    for row in rows:
        if row.source != SOURCE_CA and any(guard_kind(guard_text(m)) == GUARD_GRAD_MODE for m in row.messages):
            failed_entry[row.compile_id] = next((cid for m in row.messages if guard_kind(guard_text(m)) == GUARD_GRAD_MODE
                                                 and (cid := reason_compile_id(m.strip().splitlines()[0]))), "")
        elif (row.source == SOURCE_DYNAMO_FRAME and not row.initial and row.user_source is not None
              and EVALUATION_FUNCTION.search(row.user_source.function or "")):
            # Called from an evaluation's function (Lightning's sanity check runs validation_step
            # before step 0) on another guard, a size: grad off in its tree makes it an evaluation's.
            failed_entry[row.compile_id] = ""
    found: dict[str, bool] = {}
    inference: dict[str, bool] = {}
    if not failed_entry:
        return found, inference
    wanted = set(failed_entry) | {cid for cid in failed_entry.values() if cid}
    trees: dict[str, tuple[bool | None, bool | None]] = {}
    for event in record.of(CompileArtifactEvent):
        if event.artifact == ARTIFACT_GUARDS and event.compile_id in wanted and event.compile_id not in trees:
            tree = _guard_tree(record, event, missing)
            if tree is not None:
                trees[event.compile_id] = (compiled_grad_mode(tree), compiled_inference_mode(tree))
    for cid, entry in failed_entry.items():
        mode, own = trees.get(cid, (None, None))
        if mode is not None:
            found[cid] = mode
        evaluation = own if mode is False else trees.get(entry, (None, None))[1] if mode is True else None
        if evaluation is not None:
            inference[cid] = evaluation
    return found, inference


def _dynamic_dims(record: ModeRecord, rows: list[RecompileRow], missing: list[str]) -> dict[str, frozenset[tuple[str, int]]]:
    """Of each Dynamo recompile whose failing guards include a size guard, the guarded dimensions
    its own compile took dynamic (its guard tree: `size=[4, None]`), read only for these and for
    the first MAX_GUARD_TREES of them: a storm's later ones add nothing."""
    wanted: dict[str, set[tuple[str, int]]] = {}
    for row in rows:
        if row.source == SOURCE_CA or (row.compile_id not in wanted and len(wanted) >= MAX_GUARD_TREES):
            continue
        for message in row.messages:
            found = size_guard(guard_text(message))
            if found is not None:
                wanted.setdefault(row.compile_id, set()).add((found[0], found[1]))
    dynamic: dict[str, frozenset[tuple[str, int]]] = {}
    for event in record.of(CompileArtifactEvent):
        if event.artifact == ARTIFACT_GUARDS and event.compile_id in wanted and event.compile_id not in dynamic:
            tree = _guard_tree(record, event, missing)
            if tree is not None:
                dynamic[event.compile_id] = frozenset(dim for dim in wanted[event.compile_id] if compiled_dynamic_dim(tree, *dim))
    return dynamic


def _self_modules(record: ModeRecord, rows: list[RecompileRow], missing: list[str]) -> dict[str, tuple[str, ...]]:
    """RecompileTable.self_modules, from the guard trees of the first MAX_GUARD_TREES Dynamo
    recompiles of a method (`self` its first parameter) and of the entries each failed."""
    wanted: set[str] = set()
    for row in rows:
        if row.source == SOURCE_CA or row.frame_argnames[:1] != ("self",) or not row.messages or len(wanted) >= MAX_GUARD_TREES:
            continue
        wanted |= {row.compile_id, *(cid for m in row.messages if (cid := reason_compile_id(m.strip().splitlines()[0])))}
    modules: dict[str, tuple[str, ...]] = {}
    for event in record.of(CompileArtifactEvent):
        if event.artifact == ARTIFACT_GUARDS and event.compile_id in wanted and event.compile_id not in modules:
            tree = _guard_tree(record, event, missing)
            if tree is not None and (module := wrapped_module(tree, "self")):
                modules[event.compile_id] = module
    return modules


def _stepped_between_backwards(record: ModeRecord) -> frozenset[int]:
    """The steps with a backward call after an optimizer's step() in the same step (record order).
    A record read without its optimizer steps (the summary's kinds) reads them now: only a second
    backward call's cause asks, and its advice turns on them."""
    optimizer_steps = holding(record, OptimizerStepEvent)
    first_step: dict[int, int] = {}
    for step, seq in zip(*steps_and_seqs(optimizer_steps, OptimizerStepEvent)):
        if step not in first_step or seq < first_step[step]:
            first_step[step] = seq
    if not first_step:
        return frozenset()
    return frozenset(step for step, seq in zip(*steps_and_seqs(record, BackwardEvent)) if step in first_step and seq > first_step[step])


def _accumulation_from(record: ModeRecord) -> int | None:
    """The first step with two or more top-level backward calls where every step before it (two at
    least) had one: gradient accumulation switched on at a later phase. None otherwise."""
    from collections import Counter

    calls = holding(record, BackwardEvent)
    steps, _ = steps_and_seqs(calls, BackwardEvent)
    per_step = Counter(s for s in steps if s is not None)
    ordered = sorted(per_step)
    for index, step in enumerate(ordered):
        if per_step[step] > 1:
            return step if index >= 2 and all(per_step[s] == 1 for s in ordered[:index]) else None
    return None


def _grad_call_steps(record: ModeRecord) -> frozenset[int]:
    """The steps with a backward call that is torch.autograd.grad (BackwardEvent.call), read now
    where the record was read without its backward calls."""
    calls = holding(record, BackwardEvent)
    return frozenset(e.step for e in calls.of(BackwardEvent) if e.call == "grad")


# The autograd node of FSDP2's own Function (torch.distributed.fsdp `RegisterPostBackwardFunction`,
# applied in each fully_shard module's forward): in a CA graph, the graph of an FSDP2 backward.
FSDP2_BACKWARD_NODE = "RegisterPostBackwardFunctionBackward"


def _fsdp2_backward(record: ModeRecord) -> bool:
    """Whether the mode's CA graphs ran FSDP2's backward (its Function's node in them), rather than
    DTensor parameters of another kind (tensor parallel: parallelize_module), which compiled
    autograd runs. Read only for a record whose parameters are shards; a graph file that cannot
    be read (a record cut short) counts as FSDP2's, as every DTensor record did before."""
    graphs = record.of(CAGraphEvent)
    if not graphs:
        return True
    for graph in graphs:
        try:
            nodes = record.graph_nodes(graph.ca_id)
        except UnreadableInput:
            return True
        if any(node.origin is not None and node.origin.name == FSDP2_BACKWARD_NODE for node in nodes):
            return True
    return False


def _backward_outside_compiled(compile_events: list[DynamoCompileEvent], breaks: list[GraphBreakEvent]) -> bool:
    """RecompileTable.backward_outside_compiled: the user's line that ran each captured backward
    (the caller of Dynamo's compiles of the CA graphs) is in no frame Dynamo compiled (nor a resume
    function of one), and no compiled frame broke its graph at a backward call (torch 2.13:
    "Unsupported Tensor.backward() call", what a backward inside a compiled function gives)."""
    callers = [e.phase.caller for e in compile_events if e.is_ca_graph and e.phase is not None and e.phase.caller is not None]
    if not callers or any("backward()" in b.reason or "autograd.grad" in b.reason for b in breaks):
        return False
    compiled = {(e.co_filename, e.co_name) for e in compile_events if not e.is_ca_graph and e.co_filename and e.co_name}
    for caller in callers:
        resume = f"torch_dynamo_resume_in_{caller.function}_at_"
        if (caller.file, caller.function) in compiled or any(f == caller.file and n.startswith(resume) for f, n in compiled):
            return False
    return True


def _nested_breaks(breaks: list[GraphBreakEvent], compile_events: list[DynamoCompileEvent]) -> dict[tuple[str, str], tuple[str, int, str]]:
    """RecompileTable.nested_breaks: each graph break in another file than the compiled function's,
    by that function (a resume function counts as the one it continues)."""
    frames: dict[str, tuple[str, str]] = {}
    for event in compile_events:
        if event.co_filename and event.co_name and not event.is_ca_graph:
            resumed = resume_function(event.co_name)
            frames[event.compile_id] = (event.co_filename, resumed[0] if resumed else event.co_name)
    found: dict[tuple[str, str], set[tuple[str, int, str]]] = {}
    for event in breaks:
        frame = frames.get(event.compile_id)
        if frame is not None and event.file != frame[0]:
            found.setdefault(frame, set()).add((event.file, event.line or 0, event.reason))
    one: dict[tuple[str, str], tuple[str, int, str]] = {}
    for frame, sites in found.items():
        if len({(file, line) for file, line, _ in sites}) == 1:
            one[frame] = min(sites)
    return one


def _replaced(graphs: dict[int, CAGraphEvent], misses: list[CacheMissEvent]) -> dict[int, int]:
    if len(graphs) < 2:
        return {}
    first: dict[int, CacheMissEvent] = {}
    for miss in misses:
        first.setdefault(miss.ca_id, miss)
    return {pair.new: pair.old for pair in replaced_by(sorted(graphs), graphs, first)}


def _recomputes_as_forward_frames(rows: list[RecompileRow], phases: "ModePhases") -> list[RecompileRow]:
    """A compile under a compiled-autograd graph's id (`!0/0/1`) that is an activation checkpoint's
    recompute in the backward is the checkpointed forward's own frame compiled again, not the CA
    graph's code: its row is a forward frame's, under the function's name (its guard is the
    forward's: the grad mode a reentrant checkpoint's forward ran without, a new size)."""
    out = []
    for row in rows:
        phased = phases.of(row.compile_id) if row.source == SOURCE_DYNAMO_CA_GRAPH else None
        if phased is not None and phased.phase == PHASE_CHECKPOINT_RECOMPUTE:
            name = (phased.function.function or "").rsplit(".", 1)[-1] if phased.function is not None else ""
            row = dataclasses.replace(row, source=SOURCE_DYNAMO_FRAME, frame_name=row.frame_name or name,
                                      user_source=row.user_source or phased.caller)
        out.append(row)
    return out


def _stopping_compile(compile_events: list[DynamoCompileEvent], manifest: Any) -> tuple[str, str] | None:
    """The last Dynamo compile that raised the error the process ended with: (compile id, "Type:
    reason"), or None. The same type, and the compile's reason within the process's message (torch
    adds its own lines to it); a compile stopped by the recompile limit is the limit's, not this."""
    if manifest.exception is None or not manifest.exception.type:
        return None
    ended = " ".join(f"{manifest.exception.type}: {manifest.exception.message}".split())
    for event in reversed(compile_events):
        if not event.fail_type or not event.compile_id or (event.fail_reason and recompile_limit(f"{event.fail_type} {event.fail_reason}")):
            continue
        failure = " ".join(f"{event.fail_type}: {event.fail_reason or ''}".split())
        if ended.startswith(f"{event.fail_type}: ") and failure.partition(": ")[2] in ended:
            return event.compile_id, failure
    return None


def recompile_table(record: ModeRecord, steps: StepSummary | None = None) -> RecompileTable:
    """The recompiles of one mode record, in the order they happened. `steps` is given when the
    record was read without its step events (recompiles_load); otherwise it is counted here."""
    graphs: dict[int, CAGraphEvent] = {}
    hook_sites: dict[int, list[HookSite]] = {}
    misses: list[CacheMissEvent] = []
    compile_events: list[DynamoCompileEvent] = []
    branches: list[SourceRef] = []
    randoms: list[tuple[SourceRef, str]] = []
    rnns: list[SourceRef] = []
    break_reasons: dict[tuple[str, int], str] = {}
    breaks: list[GraphBreakEvent] = []
    failed: set[int] = set()
    errors: dict[int, FindingEvent] = {}
    for event in record.events:  # one pass: records can hold 100,000 events
        if isinstance(event, GraphBreakEvent):
            if event.file and event.line:
                break_reasons.setdefault((event.file, event.line), event.reason)
                breaks.append(event)
            # A substring test, not the parse of every message: records can hold 1,000s of breaks.
            branch = bool(event.file and event.line) and DATA_DEPENDENT_BRANCH in event.reason
            # torch 2.14+ traces a draw of Python's random module and breaks on the branch on it, a
            # tensor draw is such a branch in every version, and transformers' LayerDrop draws on the
            # line above its branch: a random draw all the same.
            drawn = (random_draw_in_code(event.code) or ("torch.rand" if library_layer_drop(event.file, event.code) else None)
                     ) if branch else None
            if drawn:
                site = SourceRef(file=event.file, line=event.line, code=event.code, how="random_branch")
                if all(site != known for known, _ in randoms):
                    randoms.append((site, drawn))
            elif branch:
                site = SourceRef(file=event.file, line=event.line, code=event.code, how="branch")
                if site not in branches:
                    branches.append(site)
            elif event.file and event.line and (drawn := random_module_call(event.reason)) is not None:
                site = SourceRef(file=event.file, line=event.line, code=event.code, how="random")
                if all(site != known for known, _ in randoms):
                    randoms.append((site, drawn))
            elif event.file and event.line and RNN_MODULE_CALL in event.reason:
                site = SourceRef(file=event.file, line=event.line, code=event.code, how="rnn")
                if site not in rnns:
                    rnns.append(site)
        elif isinstance(event, CAGraphEvent):
            graphs[event.ca_id] = event
        elif isinstance(event, CACompileEvent):
            if event.hooks:
                hook_sites[event.ca_id] = event.hooks
        elif isinstance(event, CacheMissEvent):
            misses.append(event)
        elif isinstance(event, DynamoCompileEvent):
            compile_events.append(event)
        elif isinstance(event, FindingEvent) and event.code in (FINDING_CA_CAPTURE_FAILED, FINDING_CA_CAPTURE_ERROR):
            failed_id = str(event.detail.get("compile_id") or "")
            if failed_id[1:].isdigit():
                failed.add(int(failed_id[1:]))
                if event.code == FINDING_CA_CAPTURE_ERROR:
                    errors.setdefault(int(failed_id[1:]), event)
    if any(m.changed_sizes for m in misses):  # earlier values of changed sizes, from the graphs
        misses = misses_with_earlier_values(record)
    rows = _ca_rows(record, misses, graphs) + dynamo_rows(record, compile_events)
    rows.sort(key=lambda r: r.seq)
    rows = _earlier_values_from_guards(rows)
    steps = steps if steps is not None else step_summary(record)
    manifest = record.manifest
    from cagtool.report.recompiles.budget import mode_budget
    from cagtool.report.recompiles.phases import mode_phases
    from cagtool.report.recompiles.unexpected import unexpected_causes

    phases = mode_phases(record)
    rows = _recomputes_as_forward_frames(rows, phases)
    hits = limit_hits(record, compile_events)
    callers = _wrapper_callers(compile_events)
    missing: list[str] = []
    guarded, assignments = _guarded_values(record, rows, missing)
    broken_nones = _none_guards_broken(record, rows, missing)
    modules = _wrapper_modules(record, callers, missing)
    self_modules = _self_modules(record, rows, missing)
    grad_modes, inference_modes = _grad_modes(record, rows, missing)
    dynamic_dims = _dynamic_dims(record, rows, missing)
    return RecompileTable(
        mode=record.mode,
        rows=rows,
        steps=steps.count,
        last_step=steps.last,
        limit_hits=hits,
        training_end=(end := training_end(record)),
        graphs=graphs,
        replaced=_replaced(graphs, misses),
        other_calls=other_call_captures(list(graphs.values()), misses),
        hook_sites=hook_sites,
        cwd=manifest.cwd,
        skipped_lines=record.skipped_lines,
        unknown_kinds=dict(record.unknown_kinds),
        status=manifest.status,
        imported=manifest.imported,
        # Its type checked by the loader. Not the Python API's: its block may iterate a DataLoader
        # whose iterator was made before the block began, which no count of the block's sees.
        data_loaders=None if manifest.options.get("python_api") else manifest.options.get("dataloader_iterators"),
        collate_functions=typed_collate_functions(manifest),
        skipped_compiles=skipped_compiles(record),
        compile_calls=typed_compile_calls(manifest),
        frame_codes={frame: (e.co_filename, e.co_firstlineno) for e in reversed(compile_events)
                     if e.co_filename and e.co_firstlineno and not e.is_ca_graph and (frame := compile_frame(e.compile_id)) is not None},
        branch_sites=branches,
        random_sites=randoms,
        rnn_sites=rnns,
        phases=phases,
        dynamo_compiles=len(compile_events),
        budget=mode_budget(record, hits, steps.last, end),
        unexpected=unexpected_causes(record),
        failed_captures=frozenset(failed),
        capture_errors=errors,
        stopping_compile=_stopping_compile(compile_events, manifest),
        sharded_under_ca=manifest.mode == "ca" and any(any(e.shard or ()) for e in record.of(GradDigestEvent)) and _fsdp2_backward(record),
        ca_by_cagtool_only=manifest.mode == "ca" and any(e.code == FINDING_CA_FLAG_WITHOUT_COMPILED_BACKWARD for e in record.of(FindingEvent)),
        ca_flag_after_compile=manifest.mode == "ca" and any(e.code == FINDING_CA_FLAG_WITHOUT_COMPILED_BACKWARD and (e.detail or {}).get("inside_compiled_call")
                                                            for e in record.of(FindingEvent)),
        backward_outside_compiled=manifest.mode == "ca" and _backward_outside_compiled(compile_events, breaks),
        wrapper_callers=callers,
        wrapper_modules=modules,
        self_modules=self_modules,
        break_reasons=break_reasons,
        nested_breaks=_nested_breaks(breaks, compile_events),
        guarded=guarded,
        assignments=assignments,
        none_guards_broken=broken_nones,
        grad_modes=grad_modes,
        inference_modes=inference_modes,
        dynamic_dims=dynamic_dims,
        damage=mode_damage(record),
        missing_artifacts=missing,
        wrapper_optimizer_steps=_wrapper_optimizer_steps(compile_events, callers),
        _read_stepped_between=lambda: _stepped_between_backwards(record),
        _read_grad_calls=lambda: _grad_call_steps(record),
        _read_accumulation=lambda: _accumulation_from(record),
        _read_saved_values=lambda before, after: saved_values_changed(record, before, after),
        fullgraph_frames=frozenset(frame for e in compile_events if e.fullgraph and (frame := compile_frame(e.compile_id)) is not None),
        dynamic_frames=frozenset(frame for e in compile_events if e.assume_static_by_default is False and not e.compile_id.startswith("!")
                                 and (frame := compile_frame(e.compile_id)) is not None),
        inside_captures=frames_inside_captures(rows, graphs, compile_events),
    )


def frames_inside_captures(rows: list[RecompileRow], graphs: dict[int, CAGraphEvent],
                           compile_events: list[DynamoCompileEvent]) -> dict[int, int]:
    """seq of a Dynamo recompile of a frame that is not the user's, made while compiled autograd
    captured a backward -> that capture's ca_id (`inside_captures`)."""
    starts = {row.ca_id: row.seq for row in rows if row.source == SOURCE_CA and row.ca_id is not None}
    seqs = [row.seq for row in rows
            if row.source == SOURCE_DYNAMO_FRAME and not row.initial and looks_like_torch_or_stdlib_file(row.frame_file)]
    return inside_captures(seqs, starts, graphs, compile_events)
