"""Why it recompiled: groups a RecompileTable's rows by root cause and explains each in plain words.

Pure functions of a RecompileTable. Alerts (a recompile storm, a recompile limit that sent a
frame back to eager) come first; then one Cause per root cause, biggest first. Every cause
names its evidence (compile ids, steps, event seqs) so the user can check it in the record.
The sentences themselves are written by `cagtool.report.recompiles.explain`.
"""

from __future__ import annotations

import os
import dataclasses
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from cagtool.record.schema import (
    CHECKPOINT_REENTRANT,
    PHASE_CHECKPOINT_RECOMPUTE,
    FIRST_STEP,
    MISS_CHANGED_SHAPES,
    MISS_NEW_NODE,
    CacheMissEvent,
    CAGraphEvent,
    HookSite,
    SourceRef,
)
from cagtool.report.known_failures import LAYER_DROP_CONFIG_FIX, library_layer_drop
from cagtool.report.recompiles.calls import FORCE_EAGER, SELF_CALL_START, call_line, calls_on, innermost_call, split_arguments, uncompiled_call
from cagtool.report.recompiles.reads import EVALUATION_FUNCTION, LimitHit, display_path, format_source, short_file, step_list, steps_place
from cagtool.report.recompiles.table import (
    RNN_MODULE_CALL,
    SOURCE_CA,
    SOURCE_DYNAMO_CA_GRAPH,
    SOURCE_DYNAMO_FRAME,
    RecompileRow,
    RecompileTable,
    guard_shape,
    guard_text,
    node_label,
)
from cagtool.torch_text import (
    POST_ACC_GRAD_HOOK,
    backward_function_class,
    call_guard,
    hook_code_guard,
    GUARD_GLOBAL_STATE,
    GUARD_GRAD_MODE,
    GUARD_ID,
    GUARD_LENGTH,
    GUARD_NONE,
    GUARD_OTHER,
    GUARD_REQUIRES_GRAD,
    GUARD_SIZE,
    GUARD_TENSOR_META,
    GUARD_TYPE,
    GUARD_VALUE,
    ca_id_of,
    compile_attempt,
    compile_frame,
    item_break,
    equals_guard,
    global_state_changes,
    graph_break_words,
    guard_kind,
    guarded_names,
    length_guard_is_emptiness,
    length_guard_name,
    looks_like_user_file,
    none_guard,
    python_type_of,
    reason_compile_id,
    size_guard,
    specialised_size,
    source_prefixes,
    inference_mode_switch,
    none_variant,
    submodule_name,
    tells_entries_apart,
    type_variant,
    training_guard,
    tree_source,
    tensor_type_guard,
    module_hooks_list,
)

# Cause codes (stable: they are part of the JSON schema).
CAUSE_STRUCTURE = "graph_structure"  # different ops / a branch / a loop of varying length
CAUSE_HOOK = "hook_changed"  # a backward hook added or removed
CAUSE_GRAD_DEFINED = "grad_defined_changed"  # .grad None vs defined (AccumulateGrad's key)
CAUSE_SHAPES = "changed_shapes"
CAUSE_DYNAMO_FRAME = "dynamo_guard_failure"
CAUSE_DYNAMO_CA_GRAPH = "dynamo_ca_graph_guard_failure"
CAUSE_UNKNOWN = "unknown"
ALERT_LIMIT = "recompile_limit"
ALERT_STORM = "recompile_storm"


@dataclass(frozen=True)
class Evidence:
    compile_id: str
    step: int | None
    seq: int


@dataclass
class Cause:
    code: str
    rows: list[RecompileRow]
    number: int = 0  # 1-based, in rendering order
    source: SourceRef | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what the sentences are built from (and JSON)
    # The number of the cause this one follows from (a backward captured again because the
    # forward was recompiled just before it); None for a root cause.
    caused_by: int | None = None
    consequences: list[int] = field(default_factory=list)  # numbers of the causes that follow from this one

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def steps(self) -> list[int]:
        return sorted({r.step for r in self.rows if r.step is not None})

    @property
    def evidence(self) -> list[Evidence]:
        return [Evidence(r.compile_id, r.step, r.seq) for r in self.rows]

    @property
    def between_steps(self) -> bool:
        """Its recompiles were compiled for an evaluation (grad off, or into inference mode): each
        came after step k-1 had ended and before step k's backward, stamped k as the record stamps
        whatever runs before a step's backward; no training step ran it."""
        facts = self.facts
        return facts.get("kind") == GUARD_GRAD_MODE and facts.get("grad_mode_after") is False or facts.get("inference_switch") is True

    @property
    def place(self) -> str:
        """Where in the run its recompiles came (reads.steps_place): "step 4", "between steps 3 and 4";
        a cause of training steps some of whose recompiles an evaluation compiled (`evaluation_steps`:
        the unfrozen parameters met again with grad off) says both: "step 15, between steps 19 and 20"."""
        evaluations = [] if self.between_steps else list(self.facts.get("evaluation_steps") or ())
        if not evaluations:
            return steps_place(self.steps, self.between_steps)
        training = sorted({r.step for r in self.rows if r.step is not None and r.compile_id not in self.facts.get("evaluation_ids", ())})
        return ", ".join(p for p in (steps_place(training, False), steps_place(evaluations, True)) if p)

    @property
    def place_said(self) -> str:
        """`place`, with what "between steps" means where it is said (a cause's heading)."""
        evaluated = self.between_steps or bool(self.facts.get("evaluation_steps"))
        if self.facts.get("after_training") and not evaluated and self.place:
            return self.place + " (after training: calls no backward followed)"
        return self.place + (" (grad off: an evaluation, not a training step)" if evaluated and self.place else "")


@dataclass
class Alert:
    code: str
    facts: dict[str, Any]
    causes: list[int] = field(default_factory=list)  # numbers of the causes behind it
    limit_hits: list[LimitHit] = field(default_factory=list)


@dataclass
class Explanation:
    table: RecompileTable
    alerts: list[Alert]
    causes: list[Cause]

    @property
    def total(self) -> int:
        return len(self.table.recompiles)


# How the graph a structural miss produced differs from the graph captured before it, by the
# autograd nodes each covers (name and count):
GRAPH_REPEATS = "repeats"  # more or fewer copies of nodes both graphs have: a loop's trip count
GRAPH_EXTRA = "extra"  # nodes added (or dropped) that the other graph has none of: a term on some steps
GRAPH_SWAPPED = "swapped"  # some nodes left and others came: a branch, an op picked per step
GRAPH_REARRANGED = "rearranged"  # the same nodes, joined another way: the data picks where each module runs
GRAPH_SAME = "same"  # the same nodes at the same NodeCalls: a number a node saved changed (torch still says "new node")


@dataclass(frozen=True)
class NodeChange:
    """What one structural recompile changed at a NodeCall: `before` is None when the node is new."""

    compile_id: str
    step: int | None
    node_call: int | None
    after: str
    before: str | None
    previous_graph: str | None  # "!N" the `before` was read from
    nodes_before: int | None = None  # autograd nodes of the graph before and of the one produced
    nodes_after: int | None = None
    shape: str | None = None  # GRAPH_*; None where either graph is not in the record
    # Where several compiled forwards' backward nodes were swapped at once (a forward split by a
    # graph break, both frames recompiled): (NodeCall, before, after) each, paired by the NodeCall
    # the graphs' code gives them; `before`/`after` are then the first pair's.
    pairs: tuple[tuple[int, str, str], ...] = ()


def hook_counts(graph: CAGraphEvent | None) -> Counter[str]:
    return Counter(h.hook_type for h in graph.hooks) if graph is not None else Counter()


def _hooks_differ(graph: CAGraphEvent, previous: CAGraphEvent | None) -> bool:
    """hook_counts(graph) != hook_counts(previous), without counting when neither has a hook (most
    graphs: a thousand recompiles asked this once each)."""
    if not graph.hooks and (previous is None or not previous.hooks):
        return False
    mine, theirs = hook_counts(graph), hook_counts(previous)
    if mine == theirs:
        return False
    if previous is not None and {kind for kind in mine | theirs if mine[kind] != theirs[kind]} == {POST_ACC_GRAD_HOOK}:
        # Post-accumulate-grad hooks that came or went with their parameters' AccumulateGrad nodes
        # (DDP's on every parameter; a branch that did not run this step left its parameters
        # without a gradient): the parameters the backward reached changed, not the hooks.
        def accumulated(names: Counter[str]) -> int:  # `torch::autograd::AccumulateGrad`
            return sum(n for name, n in names.items() if name.endswith("AccumulateGrad"))

        grads = accumulated(graph.autograd_names()) - accumulated(previous.autograd_names())
        return grads != mine[POST_ACC_GRAD_HOOK] - theirs[POST_ACC_GRAD_HOOK]
    return True


def _node_change(table: RecompileTable, row: RecompileRow) -> NodeChange:
    """What the new node replaced, read by comparing the autograd nodes of the graph this miss
    produced with the graph captured before it: the node that left when this one came in. (Not by
    NodeCall: the number in torch's miss message counts the cache lookup, which can differ by one
    from the NodeCall numbers in the graph's stack traces.) None when nothing left: the graph grew."""
    produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
    previous = table.previous_graph(row.ca_id)
    before = counts = shape = None
    after = row.node or "?"
    if produced is not None and previous is not None:
        mine, theirs = produced.autograd_names(), previous.autograd_names()
        gone, came = theirs - mine, mine - theirs
        names = sorted(gone)
        # The first few of what left (a loop that ended early loses dozens of node kinds).
        before = (" + ".join(names[:3]) + (f" + {len(names) - 3} more" if len(names) > 3 else "")) if gone and came else None
        counts = (sum(theirs.values()), sum(mine.values()))
        shape = _graph_shape(mine, theirs, gone, came)
        # torch's miss message names a compiled forward's node without the number its graph's code
        # gives it (CompiledFunctionBackward for CompiledFunctionBackward4): the graph's name, as
        # diff-graphs shows it, where one node that came in is that one.
        numbered = [name for name in came if name.startswith(after) and name[len(after):].isdigit()]
        if len(numbered) == 1:
            after = numbered[0]
        pairs = _swapped_by_node_call(produced, previous, gone, came)
        if pairs:
            first = next((pair for pair in pairs if pair[0] == row.node_call), pairs[0])
            before, after = first[1], first[2]
        if shape == GRAPH_REARRANGED and produced.autograd_nodes and (
                [(r.node_call, r.name) for r in produced.autograd_nodes] == [(r.node_call, r.name) for r in previous.autograd_nodes]):
            shape = GRAPH_SAME
    else:
        pairs = ()
    where = f"!{previous.ca_id}" if previous is not None else None
    return NodeChange(row.compile_id, row.step, row.node_call, after, before, where,
                      *(counts or (None, None)), shape, pairs)


def _swapped_by_node_call(produced: CAGraphEvent, previous: CAGraphEvent, gone: Counter[str], came: Counter[str]) -> tuple[tuple[int, str, str], ...]:
    """(NodeCall, before, after) of each compiled forward's backward node swapped for another at
    the same NodeCall, where two or more were (HF's GPT-2 with its loss after a graph break: the
    model's and the loss's), as diff-graphs pairs them; () otherwise, or where they do not pair."""
    if len(came) < 2 or not all(name.startswith(COMPILED_FUNCTION_BACKWARD) for name in (*came, *gone)):
        return ()
    old = {ref.node_call: ref.name for ref in previous.autograd_nodes if ref.name in gone}
    new = {ref.node_call: ref.name for ref in produced.autograd_nodes if ref.name in came}
    if not new or set(new) != set(old):
        return ()
    return tuple((call, old[call], new[call]) for call in sorted(new))


def _same_nodes(table: RecompileTable, row: RecompileRow) -> bool:
    """Whether the graph a miss produced has the autograd nodes of the graph captured before it at the
    same NodeCalls (what _node_change calls GRAPH_SAME), read without the rest of its comparison."""
    produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
    previous = table.previous_graph(row.ca_id)
    return (produced is not None and previous is not None and bool(produced.autograd_nodes)
            and [(r.node_call, r.name) for r in produced.autograd_nodes] == [(r.node_call, r.name) for r in previous.autograd_nodes])


def _graph_shape(mine: Counter[str], theirs: Counter[str], gone: Counter[str], came: Counter[str]) -> str:
    if gone and came:
        return GRAPH_SWAPPED
    if not gone and not came:
        return GRAPH_REARRANGED
    smaller, difference = (theirs, came) if came else (mine, gone)
    return GRAPH_REPEATS if all(smaller[name] for name in difference) else GRAPH_EXTRA


def _added_nodes(table: RecompileTable, row: RecompileRow) -> list[tuple[str, int]]:
    """(name, how many) of the autograd nodes the graph a miss produced has beyond the graph
    captured before it, most first: what the backward gained (a loss term, a custom Function)."""
    produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
    previous = table.previous_graph(row.ca_id)
    if produced is None or previous is None:
        return []
    return sorted((produced.autograd_names() - previous.autograd_names()).items(), key=lambda item: (-item[1], item[0]))


# torch names a built-in op's node `<Op>Backward<N>`; a custom torch.autograd.Function's node is
# `<Class>Backward` (its class name and no number); CompiledFunction* are torch.compile's own.
_CUSTOM_FUNCTION_NODE = re.compile(r"(?P<cls>[A-Za-z_]\w*?)Backward$")


def custom_function_nodes(names: list[str]) -> list[str]:
    """The custom torch.autograd.Function classes among node names (`GradReverseBackward` -> `GradReverse`)."""
    return [m["cls"] for n in names if (m := _CUSTOM_FUNCTION_NODE.match(n))
            and not n.startswith(("CompiledFunction", "BackwardHookFunction"))]


def _stability(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    steps = cause.steps
    last = table.last_step
    if not steps or last is None:
        return {"stabilised": None, "last_recompile_step": steps[-1] if steps else None}
    return {
        "stabilised": steps[-1] < last,
        "last_recompile_step": steps[-1],
        "quiet_steps_after": last - steps[-1],
        "last_step": last,
        "recompiling_steps": len(set(steps)),
        # The steps after it in which other recompiles came: those steps did not all reuse cached graphs.
        "others_after": sorted({r.step for r in table.recompiles if r.step is not None and r.step > steps[-1]}),
        # Every recompile of it came after training ended (no backward after it: an evaluation or a
        # prediction after the last step), a one-time cost outside the training steps.
        "after_training": bool(cause.rows) and all(table.after_training(r) for r in cause.rows),
    }


def _branch_of(table: RecompileTable, cause: Cause) -> SourceRef | None:
    """The data-dependent branch torch reported that picks the ops of a structural change: in the
    cause's file, the nearest at or above its line (the branch comes before the op it picks, and a
    node's traceback can name a line after it); else the only one the run has."""
    return _nearest_site(table.branch_sites, cause)


def _side_first_taken(table: RecompileTable, cause: Cause) -> SourceRef | None:
    """The data-dependent branch whose other side the forward took first in each capture's step: a
    branch torch reported (graph break "Data-dependent branching") at a line where Dynamo first
    compiled a frame resuming there (its code starting at the branch's line: a side's resume
    function) in the step of every capture, before it. A branch that adds or drops ops (one side
    `self.c(h) * 0.5`, the other `self.b(h)`) is a structural change tied by that, not by place."""
    if not table.branch_sites or table.phases is None or not cause.rows:
        return None
    firsts = [(c.step, c.seq, table.frame_codes.get(compile_frame(c.compile_id) or ""))
              for c in table.phases.compiles if not c.capture and c.attempt == 0 and not c.compile_id.startswith("!")]
    for site in table.branch_sites:
        place = (os.path.realpath(site.file), site.line)

        def opened(row: RecompileRow) -> bool:
            first = min(row.seqs) if row.seqs else None
            return row.step is not None and first is not None and any(
                step == row.step and seq < first and code is not None and (os.path.realpath(code[0]), code[1]) == place
                for step, seq, code in firsts)

        if all(opened(row) for row in cause.rows):
            return site
    return None


def _nearest_site(sites: list[SourceRef], cause: Cause) -> SourceRef | None:
    """Of the places torch reported, the one tied to a cause: in the cause's file, the nearest at or
    above its line; else the only one the run has."""
    if not sites:
        return None
    if cause.source is not None:
        same = [s for s in sites if os.path.realpath(s.file) == os.path.realpath(cause.source.file) and s.line <= cause.source.line]
        if same:
            return max(same, key=lambda s: s.line)
    return sites[0] if len(sites) == 1 else None


# The node of a recurrent cell's hidden-state matmul (h @ W_hh^T + b): one per time step of an
# nn.GRU or nn.RNN run eagerly on CPU (torch 2.13: the input's matmul is one node for all steps;
# nn.LSTM is one MkldnnRnnLayerBackward0 node a layer there, whatever the length).
RNN_CELL_NODE = "AddmmBackward0"


def _rnn_site(table: RecompileTable, cause: Cause, changes: list[NodeChange]) -> SourceRef | None:
    """The recurrent module's call (a graph break torch reported on it: Dynamo runs it eagerly) whose
    time steps make a loop cause: its captures have more or fewer copies of the cell's matmul node."""
    if not table.rnn_sites or not any(c.shape == GRAPH_REPEATS for c in changes):
        return None
    site = _nearest_site(table.rnn_sites, cause)
    for row in cause.rows[:MAX_LISTED]:
        produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
        previous = table.previous_graph(row.ca_id)
        if produced is not None and previous is not None and (
                produced.autograd_names()[RNN_CELL_NODE] != previous.autograd_names()[RNN_CELL_NODE]):
            return site
    return None


# The autograd nodes of one time step of an eager recurrent cell on CPU (torch 2.13): nn.GRU's
# (its gates split, two sigmoids, a tanh), nn.RNN's (tanh or relu); the hidden state's matmul
# (RNN_CELL_NODE) is in both. A capture that only adds or drops copies of these ran the cell more
# or fewer times.
GRU_CELL_NODES = frozenset({"AddBackward0", "MulBackward0", "SigmoidBackward0", "UnsafeSplitBackward0", RNN_CELL_NODE,
                            "SubBackward0", "TBackward0", "TanhBackward0"})
RNN_CELL_NODES = frozenset({"AddBackward0", RNN_CELL_NODE, "TBackward0", "TanhBackward0", "ReluBackward0"})


def _rnn_cell(table: RecompileTable, cause: Cause, changes: list[NodeChange]) -> str | None:
    """"GRU" or "RNN" where every capture of a loop cause that the record can compare added or
    dropped copies of that recurrent cell's nodes and nothing else: the loop is the cell's time
    steps (an nn.GRU or nn.RNN run eagerly on CPU, or a cell called in a loop); None otherwise."""
    kinds = set()
    for row, change in list(zip(cause.rows, changes))[:MAX_LISTED]:
        produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
        previous = table.previous_graph(row.ca_id)
        if change.shape != GRAPH_REPEATS or produced is None or previous is None:
            continue
        mine, theirs = produced.autograd_names(), previous.autograd_names()
        differ = set((mine - theirs) + (theirs - mine))
        if RNN_CELL_NODE not in differ:
            return None
        kinds.add("RNN" if differ <= RNN_CELL_NODES else "GRU" if differ <= GRU_CELL_NODES and "UnsafeSplitBackward0" in differ else None)
    return kinds.pop() if len(kinds) == 1 and None not in kinds else None


def _structure_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    changes = [_node_change(table, r) for r in cause.rows]
    grew = sum(1 for c in changes if c.before is None and (c.nodes_after or 0) >= (c.nodes_before or 0))
    node_calls = {c.node_call for c in changes}
    variants: dict[int | None, list[str]] = {}
    for change in changes:
        names = variants.setdefault(change.node_call, [])
        for name in (change.before, change.after):
            if name is not None and name not in names:
                names.append(name)
    shapes = {c.shape for c in changes}
    branch = (_branch_of(table, cause) if shapes & {GRAPH_SWAPPED, GRAPH_REARRANGED} or
              (None in shapes and any(len(v) > 1 for v in variants.values())) else None)
    if branch is None and GRAPH_EXTRA in shapes:
        branch = _side_first_taken(table, cause)
    if branch is not None:
        cause.source = branch  # torch's own report of the branch beats the line a node traceback names
    sizes = [c.nodes_before for c in changes[:1]] + [c.nodes_after for c in changes]
    saved: list[tuple[str, int, int]] = []
    if shapes == {GRAPH_SAME}:  # what the graphs of the same nodes hold differently (graph files; the first few captures)
        for row in cause.rows[:MAX_LISTED]:
            produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
            previous = table.previous_graph(row.ca_id)
            values = table.saved_values(previous, produced) if produced is not None and previous is not None else None
            if not values:
                saved = []
                break
            saved.extend(v for v in values if v not in saved)
    return {
        "changes": changes,
        # (autograd node, before, after) of each integer the graphs of the same nodes hold differently.
        "saved_values": saved,
        # A custom autograd.Function's node that is another class of the same name at each miss.
        "function_class": _new_function_class(table, cause, changes) if shapes == {GRAPH_SAME} and not saved else None,
        # Per capture that grew the graph, the nodes it has that the graph before it had not.
        # (The first few, as many as the words list: a storm has thousands.)
        "added_nodes": [(r.compile_id, added) for r, c in
                        [(r, c) for r, c in zip(cause.rows, changes) if c.before is None][:MAX_LISTED]
                        if (added := _added_nodes(table, r))],
        "branch": branch,
        # A graph break on a call of Python's random module (SourceRef, "Random.random"): a random
        # draw, as LayerDrop's, may pick which layers run.
        "random_draw": next(((site, name) for site, name in table.random_sites if site == drawn_at), None)
        if (drawn_at := _nearest_site([site for site, _ in table.random_sites], cause)) is not None and shapes - {GRAPH_SAME}
        else None,
        # The call of an nn.GRU or nn.RNN, run eagerly, whose time steps the backward's size follows.
        "rnn_site": _rnn_site(table, cause, changes),
        # ... or, with no such call in the record, the recurrent cell whose copies are all the captures changed.
        "rnn_cell": _rnn_cell(table, cause, changes),
        "other_backward_calls": (others := _other_backward_calls(table, cause)),
        "stepped_between": bool(others) and cause.steps[0] in table.stepped_between_backwards,
        "grad_call": bool(others) and cause.steps[0] in table.grad_call_steps,
        "new_backward_call": _new_backward_call(table, cause),
        "grew": grew,
        # What every capture of the cause did to the graph before it: one GRAPH_* or None (mixed, or unread).
        "graph_shape": shapes.pop() if len(shapes) == 1 else None,
        "node_counts": sizes if None not in sizes else [],
        "node_calls": sorted(n for n in node_calls if n is not None),
        "variants": variants,
        # The steps in which Dynamo compiled a forward frame again (the table's): a backward whose new
        # node is another compiled forward graph's backward follows them (_forward_graphs_words).
        "forward_recompile_steps": sorted({r.step for r in table.rows if r.source == SOURCE_DYNAMO_FRAME and not r.initial
                                           and r.step is not None}),
        "distinct_structures": cause.count + 1,
        "data_loaders": table.data_loaders,
        **_stability(table, cause),
    }


# The node of the autograd.Function class torch's autograd_function_apply (torch/_functorch/autograd_function.py)
# builds at every call of a Dynamo graph that traced a custom autograd.Function and runs without AOTAutograd.
TEMPLATE_NODE = "ApplyTemplateBackward"


@dataclass(frozen=True)
class FunctionClass:
    """A custom autograd.Function's node that compiled autograd misses on as new while the graph
    keeps the same nodes: another class of the same name each time (its key is the class)."""

    name: str  # the node's name, `ApplyTemplateBackward`
    guards: tuple[str, ...]  # Dynamo's recompiles of a CA graph's code on that class's type guard

    @property
    def certain(self) -> bool:
        """torch says so (a guard on the class), or the class is autograd_function_apply's; else only
        the likeliest reading of graphs that hold nothing different."""
        return bool(self.guards) or self.name == TEMPLATE_NODE


def _new_function_class(table: RecompileTable, cause: Cause, changes: list[NodeChange]) -> FunctionClass | None:
    """The custom autograd.Function node of a "new node" miss on a graph of the same nodes, where
    the class is new at each call: Dynamo's compile of a CA graph names it in a failed guard on
    `backward_c_function`'s type (another class of that name), or it is the class
    autograd_function_apply builds at each call, or the graphs it misses on hold nothing different
    (their files read alike: then the class is the likeliest difference). None otherwise."""
    names = {c.after for c in changes}
    if len(names) != 1:
        return None
    [name] = names
    if not custom_function_nodes([name]):
        return None
    guards = tuple(row.compile_id for row in table.rows if row.source == SOURCE_DYNAMO_CA_GRAPH
                   and any(backward_function_class(message) == name for message in row.messages))
    if guards or name == TEMPLATE_NODE:
        return FunctionClass(name, guards)
    pairs = [(table.previous_graph(row.ca_id), table.graphs.get(row.ca_id)) for row in cause.rows[:MAX_LISTED]
             if row.ca_id is not None]
    alike = bool(pairs) and all(before is not None and after is not None and table.saved_values(before, after) == []
                                for before, after in pairs)
    return FunctionClass(name, guards) if alike else None


def ca_started_dynamic(table: RecompileTable) -> bool:
    """Whether compiled autograd's first graph took its sizes as inputs (CAGraphEvent.num_sizes):
    it was captured dynamic, by the script's own `_enable` or `run --dynamic`."""
    return bool(table.graphs) and table.graphs[min(table.graphs)].num_sizes > 0


def _new_backward_call(table: RecompileTable, cause: Cause) -> SourceRef | None:
    """The line of a backward call that no capture before the cause's first came from, when the
    cause is that line's captures: its first graph is compared with another call's (a second loss
    with its own backward later in the script), not with an earlier graph of the same call."""
    first = cause.rows[0]
    earlier = [r for r in table.rows if r.source == SOURCE_CA and r.seq < first.seq]
    # Only where every line known is the backward call's (a node's traceback names where it was made).
    if not earlier or any(r.user_source is None or r.user_source.how != "backward_call" for r in (*cause.rows, *earlier)):
        return None
    lines = {_location(r.user_source) for r in cause.rows}
    if len(lines) != 1 or any(_location(r.user_source) in lines for r in earlier):
        return None
    return first.user_source


def _other_backward_calls(table: RecompileTable, cause: Cause) -> list[SourceRef]:
    """The backward calls of a step that are not its first, when they are this cause: each of the
    cause's captures is the first graph of a backward call (`l1.backward(retain_graph=True);
    l2.backward()`, a GAN's discriminator and generator), each call its own graph, captured once
    (table.other_calls, the rule the summary and the gate count by). [] otherwise."""
    if not cause.rows or any(r.ca_id not in table.other_calls for r in cause.rows):
        return []
    calls = [r.backward_call or r.user_source for r in cause.rows]
    return [c for c in calls if c is not None] if all(c is not None for c in calls) else []


def _shape_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    ca_rows = [r for r in cause.rows if r.source == SOURCE_CA]
    # One change met by several backward calls (_one_cause_a_change_met_by_each_call): each call's
    # sizes changed alike, so the first call's misses, and Dynamo's recompiles of its graphs, say
    # what changed and whether it changed again.
    calls = list(dict.fromkeys(_location(r.user_source) for r in ca_rows))
    one_call = cause.rows
    if len(calls) > 1:
        first = {r.ca_id for r in ca_rows if _location(r.user_source) == calls[0]}
        one_call = [r for r in cause.rows if (r.ca_id in first if r.source == SOURCE_CA else
                                              "/" in r.compile_id and ca_id_of(r.compile_id) in first)]
    per_size: dict[int, dict[str, Any]] = {}
    for row in one_call:
        for size in row.changed_sizes:
            entry = per_size.setdefault(
                size.index, {"values": [], "node": None, "node_call": None, "changes": 0, "previous_missing": False, "unread": True}
            )
            entry["changes"] += 1
            # Read by no node of the graph the miss made (its capture recorded which sizes the code
            # reads: CAGraphEvent.used_sizes): in its cache key only, so in no graph's code.
            used = table.graphs[row.ca_id].used_sizes if row.ca_id in table.graphs else None
            entry["unread"] = entry["unread"] and used is not None and size.index not in used
            # Missing only when no earlier value of this size is known at all: a later change
            # without `previous` follows a value an earlier change already showed.
            entry["previous_missing"] = entry["previous_missing"] or (size.previous is None and not entry["values"])
            for value in (size.previous, size.value):
                if value is not None and value not in entry["values"]:
                    entry["values"].append(value)
            if size.node and entry["node"] is None:
                entry["node"], entry["node_call"] = size.node, size.node_call
    dynamic_graphs = {
        f"!{r.ca_id}": table.graphs[r.ca_id].num_sizes for r in cause.rows if r.ca_id in table.graphs
    }
    dynamo = [(r.compile_id, r.step, guard_text(r.messages[0]) if r.messages else "") for r in cause.rows if r.source != SOURCE_CA]
    misses_each = sum(1 for r in one_call if r.source == SOURCE_CA)
    # Dynamo compiling the graph's code again for a size the sizes had before (4 -> 32: the next
    # epoch's first batch after a short last one) is a return, not a new size.
    seen = {v for e in per_size.values() for v in e["values"]}
    new_sizes = [(size[2], size[3]) for _, _, guard in dynamo if (size := size_guard(guard)) is not None and size[3] not in seen]
    return {
        "sizes": dict(sorted(per_size.items())),
        "ca_misses": len(ca_rows),
        # The backward calls (file, line) that met the change, where more than one did; the misses each.
        "calls": [list(call) for call in calls] if len(calls) > 1 else [],
        "ca_misses_each": misses_each,
        "dynamo_recompiles": dynamo,
        # ... those in the step of the capture that made their graph: code the new graph runs (a custom
        # Function's backward through torch's call_backward, a reentrant checkpoint's), compiled before
        # for the old sizes: the same change reaching it, not the sizes changing again.
        "dynamo_same_step": [cid for cid, step, _ in dynamo if step is not None and any(
            r.ca_id == ca_id_of(cid) and r.step == step for r in ca_rows)],
        "new_sizes_after": new_sizes,
        # The forward's own smaller batches (dim 0 of an input: 8 -> 4), table-wide: a size of the
        # backward's that goes the same way again is that batch coming back (_recurring_smaller_batch).
        "forward_smaller_batches": sorted({(b[1], b[2]) for r in table.rows if r.source == SOURCE_DYNAMO_FRAME and not r.initial
                                           and (b := smaller_batch(own_guard(r))) is not None}),
        "changed_per_recompile": [r.total_changed if r.total_changed is not None else len(r.changed_sizes) for r in ca_rows],
        "dynamic_graphs": dynamic_graphs,
        # ... and how many torch holds dynamic in its cache key, where more than the code reads
        # (torch 2.13 drops the sizes no node reads before the graph runs: remove_unused_sizes).
        "dynamic_in_key": {f"!{r.ca_id}": r.dynamic_sizes for r in cause.rows if r.ca_id in table.graphs and r.dynamic_sizes
                           and r.dynamic_sizes > table.graphs[r.ca_id].num_sizes},
        # Sizes changed more than once: a size twice, a second miss, or Dynamo compiling a graph's
        # code again for other sizes (a batch after the one that made the graph dynamic).
        "repeated": any(e["changes"] > 1 for e in per_size.values()) or misses_each > 1 or bool(new_sizes),
        "data_loaders": table.data_loaders,
        **_stability(table, cause),
    }


# What a CA graph's compiled code takes as tensors and sizes (torch 2.13's compiled autograd): a
# guard on anything else is on an object a hook the graph calls reaches (`hooks[1].__self__.pending`,
# a bound method's object; `self.ipg_buckets`, a closure's).
_CA_GRAPH_INPUTS = re.compile(r"\b(?:inputs|sizes|scalars|packed_inputs|args|L\['(?:inputs|sizes|scalars|packed_inputs|args)'\])\b")
_HOOK_OBJECT = re.compile(r"\bself\.|__self__|\bhooks\[|\b__closure__\[")


def _package_of(file: str) -> str:
    """The installed package a file belongs to (`deepspeed` of `.../site-packages/deepspeed/x.py`, or
    of a Debian Python's `.../dist-packages/deepspeed/x.py`), "" if none."""
    for part in ("site-packages/", "dist-packages/"):
        if part in file:
            return file.split(part, 1)[1].split("/", 1)[0]
    return ""


def _library_hooks(table: RecompileTable, cause: Cause, guard: str) -> tuple[str, list[str]] | None:
    """(package, ["function (file:line)", ...]) where the cause recompiles a CA graph's code on a
    value no input of the graph holds, and every hook its graphs call is a library's file; else None."""
    if cause.code != CAUSE_DYNAMO_CA_GRAPH or not guard or _CA_GRAPH_INPUTS.search(guard) or not _HOOK_OBJECT.search(guard):
        return None
    sites = [site for row in cause.rows for site in table.hook_sites.get(ca_id_of(row.compile_id), [])]
    if not sites or any(looks_like_user_file(site.file) for site in sites):
        return None
    packages = {package for site in sites if (package := _package_of(site.file))}
    if len(packages) != 1:
        return None
    named = list(dict.fromkeys(f"{site.function} ({site.file.split('site-packages/', 1)[-1]}:{site.line})" for site in sites))
    return packages.pop(), named


def _hook_runner_frames(table: RecompileTable) -> frozenset[str]:
    """`!N/F` of each frame of a CA graph's code that is torch's `call_hook`, by any of its compiles:
    a compile refused at the recompile limit compiles nothing and so names no code of its own."""
    return frozenset(row.compile_id.rsplit("/", 1)[0] for row in table.rows if row.hook_runner and row.compile_id.count("/") == 2)


def _runs_hooks(row: RecompileRow, frames: frozenset[str]) -> bool:
    """The row recompiled torch's `call_hook` (`frames`: _hook_runner_frames of its table)."""
    return row.hook_runner or row.compile_id.rsplit("/", 1)[0] in frames


def _hook_runner(table: RecompileTable, cause: Cause) -> tuple[list[str], str] | None:
    """(the hook types its graphs call, the one package whose files hold every hook or "") where
    every recompile of the cause is of torch's `call_hook` in a CA graph; else None."""
    frames = _hook_runner_frames(table)
    if not cause.rows or not all(_runs_hooks(row, frames) for row in cause.rows):
        return None
    graphs = [table.graphs.get(ca_id_of(row.compile_id)) for row in cause.rows]
    types = list(dict.fromkeys(hook.hook_type for graph in graphs if graph is not None for hook in graph.hooks))
    sites = [site for row in cause.rows for site in table.hook_sites.get(ca_id_of(row.compile_id), [])]
    packages = {_package_of(site.file) for site in sites}
    return types, packages.pop() if len(packages) == 1 else ""


def _torch_frames(cause: Cause) -> list[str]:
    """`function in file` of each frame of a CA-graph cause whose every recompile is of torch's own
    code (RecompileRow.torch_frame); [] otherwise."""
    if cause.code != CAUSE_DYNAMO_CA_GRAPH or not cause.rows or not all(row.torch_frame for row in cause.rows):
        return []
    return list(dict.fromkeys(f"{function} in {_frame_file(file)}" for function, file in (row.torch_frame for row in cause.rows)))


def _reentrant_recompute(table: RecompileTable, cause: Cause) -> str | None:
    """The checkpointed function (`Block.forward`) where every row of the cause is a compile in a
    reentrant checkpoint's recompute (recompiles/phases.py); None otherwise."""
    if table.phases is None:
        return None
    phased = [table.phases.of(row.compile_id) for row in cause.rows]
    if not phased or any(p is None or p.phase != PHASE_CHECKPOINT_RECOMPUTE or p.checkpoint != CHECKPOINT_REENTRANT for p in phased):
        return None
    first = phased[0].function  # type: ignore[union-attr]
    return (first.function if first is not None else None) or "the checkpointed function"


def _reentrant_recomputes(table: RecompileTable, cause: Cause) -> int:
    """How many rows of the cause are compiles in a reentrant checkpoint's recompute."""
    if table.phases is None:
        return 0
    return sum(1 for row in cause.rows if (p := table.phases.of(row.compile_id)) is not None
               and p.phase == PHASE_CHECKPOINT_RECOMPUTE and p.checkpoint == CHECKPOINT_REENTRANT)


def _one_call_site_loop(table: RecompileTable, cause: Cause) -> SourceRef | None:
    """The one line every compile of the cause's forward frame was called from, where its first
    recompile came in the step of the frame's first compile and that first compile's input did
    not require grad (torch's `expected requires_grad=0` against it): a loop at one call site
    feeding each call the previous call's output, data first, then activations that require grad
    (blocks applied in turn). None otherwise, or where the record has no phases."""
    if table.phases is None or cause.code != CAUSE_DYNAMO_FRAME:
        return None
    frame = compile_frame(cause.rows[0].compile_id)
    compiles = [c for c in table.phases.compiles if not c.capture and not c.compile_id.startswith("!") and compile_frame(c.compile_id) == frame]
    first = next((c for c in compiles if c.attempt == 0), None)
    if first is None or first.caller is None or first.step is None or cause.rows[0].step != first.step:
        return None
    if any(c.caller is None or (c.caller.file, c.caller.line) != (first.caller.file, first.caller.line) for c in compiles):
        return None
    against_first = [g for g in (guard_text(m) for m in cause.rows[0].messages if m.startswith(f"{first.compile_id}:")) if g]
    if not any((m := _REQUIRES_GRAD_OF.search(g)) and m["expected"] == "0" for g in against_first):
        return None
    return first.caller


def _call_sides(table: RecompileTable, cause: Cause, after: bool | None,
                train_eval: bool = False) -> tuple[dict[tuple[str, int], SourceRef], dict[tuple[str, int], SourceRef]] | None:
    """The user's lines that called a grad-mode cause's compiled code, (the evaluation's, training's):
    the recompiles' own callers are the evaluation's where the recompile was the evaluation's
    (`after` False: grad off after training), training's where it was training's (`after` True: an
    evaluation first); the callers of the compiles whose entry failed are the other side's. None
    where it is not known. `train_eval`: the same for a cause on a module's train/eval flag (`after`
    True: training now, after an evaluation in eval mode)."""
    def failed_here(message: str) -> bool:
        guard = guard_text(message)
        return training_guard(guard) is not None if train_eval else guard_kind(guard) == GUARD_GRAD_MODE

    if after is None:
        return None
    own = {(row.caller.file, row.caller.line): row.caller for row in cause.rows if row.caller is not None}
    failed: dict[tuple[str, int], SourceRef] = {}
    if table.phases is not None:
        entries = {cid for row in cause.rows for m in row.messages
                   if failed_here(m) and (cid := reason_compile_id(m.strip().splitlines()[0]))}
        failed = {(c.caller.file, c.caller.line): c.caller for c in table.phases.compiles if c.compile_id in entries and c.caller is not None}
    return (own, failed) if after is False else (failed, own)


def _evaluation_call_lines(table: RecompileTable, cause: Cause, after: bool | None,
                      train_eval: bool = False) -> tuple[SourceRef | None, SourceRef | None]:
    """(the evaluation's own call, the shared call) of a grad-mode (or train/eval) cause, from
    `_call_sides`: the one user's line where the evaluation called the compiled code, where training
    called it from other lines; else, where training called it from that same one line (a forward
    or a helper both go through: Lightning's `forward`, which training_step and validation_step call
    alike, where editing the call would skip training's compile too), that line as the shared one.
    (None, None) where it is not known, or the evaluation's compiles name several lines."""
    sides = _call_sides(table, cause, after, train_eval)
    if sides is None or len(sides[0]) != 1:
        return None, None
    line = next(iter(sides[0].values()))
    if set(sides[0]) == set(sides[1]):
        return None, line
    return (None, None) if set(sides[0]) <= set(sides[1]) else (line, None)


def _guard_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    failures: list[tuple[str, str]] = []  # (compile id, failing guard or "")
    for row in cause.rows:
        failures.append((row.compile_id, own_guard(row) or (guard_text(row.messages[0]) if row.messages else "")))
    known = [g for _, g in failures if g]
    function = next((row.frame_name for row in cause.rows if row.frame_name), "")
    guarded = next((row.user_source for row in cause.rows if row.user_source is not None and row.user_source.how == "guard"), None)
    # Under a compile id `!N/F/A` Dynamo compiles code that compiled-autograd graph !N calls: the
    # graph's own code is torch's (`forward` in `<eval_with_key>`), so a frame in the user's file
    # there is a backward hook (or what a hook calls), traced because compiled autograd traces hooks.
    hook = cause.code == CAUSE_DYNAMO_CA_GRAPH and guarded is not None
    if not function and guarded is not None:
        function = guarded.function or ""
    if not function:
        function = next((hit.function for hit in table.limit_hits
                         if hit.function and compile_frame(hit.compile_id) == compile_frame(cause.rows[0].compile_id)), "")
    kinds = [guard_kind(g) for g in known]
    ids = {row.compile_id for row in cause.rows}
    # The line that changed the global state the guard is on, where the record has it (the thread
    # count's change, capture/observe/global_state.py): that line is the cause, not the compiled call.
    changed = next((u for u in table.unexpected if u.how == "changed" and u.changed_at is not None and u.compile_id in ids), None)
    resume = cause.rows[0].resume_of if all(r.resume_of == cause.rows[0].resume_of for r in cause.rows) else None
    changes = _value_changes(table, cause)
    train_eval = _train_eval(known, changes)
    return {
        "failures": failures,
        "guard": known[0] if known else "",
        "guard_kinds": sorted({guard_shape(g) for g in known}),
        # The kind of guard (torch_text.GUARD_*), from torch's own reason text: the most frequent
        # kind of the failures (ties: the first seen).
        "kind": max(kinds, key=kinds.count) if kinds else "",
        "container": next((n for g in known if (n := length_guard_name(g))), None),
        # Compiled autograd's first graph took its sizes as inputs: it started dynamic (the script's
        # own `_enable`, or `run --dynamic`), so "start it dynamic" would change nothing.
        "ca_started_dynamic": ca_started_dynamic(table),
        "names": list(dict.fromkeys(n for g in known for n in _value_names(g))),
        # requires_grad guards on the call's inputs, not on parameters (`args[0]`, not
        # `..._parameters['weight']`): a tensor detached in one call and not in another.
        "requires_grad_inputs": _requires_grad_inputs(known),
        # ... every call from one line, the first (in the first recompile's step) without grad: a loop
        # feeding each call the last one's output (_one_call_site_loop), no GAN's detached input.
        "requires_grad_loop": _one_call_site_loop(table, cause) if _requires_grad_inputs(known) else None,
        # An optimizer's step() compiled (torch.optim's frame) guarding on its own state (`self.state`):
        # the state an optimizer makes in its first step() (momentum buffers, Adam's moments).
        "optimizer_state": bool(known) and all("self.state" in g for g in known) and all(row.optimizer_frame for row in cause.rows),
        # ... guarding on a param group's learning rate, a Python float an LR scheduler changes.
        "optimizer_lr": bool(known) and all(_LR_GUARD.search(g) for g in known) and all(row.optimizer_frame for row in cause.rows),
        "optimizer_frame": all(row.optimizer_frame for row in cause.rows),
        # Another optimizer's first step() through torch.optim's code (one code object per class).
        "another_optimizer": all(another_optimizer(row) for row in cause.rows),
        # Where torch's first failing guard is a newer cache entry's, another optimizer's: (id, that guard).
        "other_entries": [(row.compile_id, guard_text(row.messages[0])) for row in cause.rows
                          if row.messages and own_guard(row) and own_guard(row) != guard_text(row.messages[0])],
        "frames": sorted({f for row in cause.rows if (f := compile_frame(row.compile_id)) is not None}, key=lambda f: int(f) if f.isdigit() else 0),
        # torch's wrapper frame of every compiled module, first called from this line: another module.
        "other_module": _other_module(table, cause),
        # The job's torch.compile call that compiled the recompiled frame (its first code is the
        # frame's): {"file", "line", "via", "dynamic"}; None where none, or several that differ.
        "compiled_by": _compiled_by(table, cause),
        # ... known from the guards of each compile of it: (compile id, module) in compile order.
        "other_module_by_guards": _other_module_by_guards(table, cause),
        # A compiled method called on another instance of its class, whose parameters have other
        # sizes than every entry it failed: (compile id, module) for those entries and the recompile.
        "other_instance": _other_instance(table, cause),
        # ... and what the recompile was for is a function, not a module (torch.compile(opt.step) after an LR scheduler).
        "wrapped_function": all(table.wrapper_modules.get(r.compile_id, ("",))[0] in _FUNCTION_CLASSES for r in cause.rows),
        "wrapped_optimizer_step": all(r.compile_id in table.wrapper_optimizer_steps for r in cause.rows),
        "hook": hook,
        # The CA graphs were compiled by torch.compile(..., fullgraph=True): a disabled hook is an error there.
        "ca_fullgraph": any(graph.fullgraph for graph in table.graphs.values()),
        # Every recompile is a reentrant activation checkpoint's recompute in the backward (its
        # forward ran under no_grad, the recompute with grad on): the function it checkpoints.
        "reentrant_recompute": _reentrant_recompute(table, cause),
        # ... and how many of its recompiles are such a recompute's, where not all are (a size that changed
        # recompiles the forward and its recompute: the recompute's detached inputs keep no mark).
        "reentrant_recomputes": _reentrant_recomputes(table, cause),
        # A CA graph's code guarding a value its hooks reach (`self.ipg_buckets...`: no input of the
        # graph) where every hook of the graph is a library's (DeepSpeed's ZeRO hooks): (package, hooks).
        "library_hooks": _library_hooks(table, cause, known[0] if known else ""),
        # The recompiled code is torch's call_hook, through which the CA graph runs its hooks: (hook
        # types the graph calls, the package whose files hold every hook, or "" where not one).
        "hook_runner": _hook_runner(table, cause),
        # Every recompile is of torch's own code that the CA graph runs (RecompileRow.torch_frame):
        # its functions and files, as a reader knows them ("backward in torch/distributed/tensor/_api.py").
        "torch_frames": _torch_frames(cause),
        # The function holding the call that recompiled (`validation_step`: an evaluation's batches).
        "called_in": next((r.user_source.function for r in cause.rows if r.user_source is not None), ""),
        # A guard on a module's backward-hook dict: the modules' backward hooks the CA graphs call, named.
        "module_hooks": _module_hook_labels(table, known[0]) if known and _MODULE_HOOKS.search(known[0]) else [],
        "frame": compile_frame(cause.rows[0].compile_id),
        # Of a CA graph's code: how many of its recompiles in one step were pieces of it split by
        # graph breaks (_graph_pieces), 0 where none.
        "pieces": _graph_pieces([(r.compile_id, r.step, own_guard(r)) for r in cause.rows]) if cause.code == CAUSE_DYNAMO_CA_GRAPH else 0,
        # The frame was compiled with dynamic shapes (the script's torch.compile(..., dynamic=True)).
        "compiled_dynamic": not cause.rows[0].compile_id.startswith("!") and compile_frame(cause.rows[0].compile_id) in table.dynamic_frames,
        # The frame was compiled with fullgraph=True: a fix that adds a graph break there (a call
        # under torch.compiler.disable) is an error, not a slower frame.
        "fullgraph": not cause.rows[0].compile_id.startswith("!") and compile_frame(cause.rows[0].compile_id) in table.fullgraph_frames,
        "function": function,
        # The frame is a resume function Dynamo made after a graph break (SourceRef of the function
        # it continues, at the break's line), and torch's message for that break.
        "resume": resume,
        "break_reason": table.break_reasons.get((resume.file, resume.line), "") if resume is not None else "",
        # Where torch's message names no break at the resume line, the one break inside a call the
        # function made (file, line, message): the line that broke, in the called code.
        "break_inside": table.nested_breaks.get((resume.file, resume.function or "")) if resume is not None
        and (resume.file, resume.line) not in table.break_reasons else None,
        # Per recompile, what the Python value a `== v` / `is None` guard is on was and became.
        "value_changes": changes,
        # Recompiles of the cause whose failed entries also held a value to be None that it no
        # longer was (RecompileTable.none_guards_broken): compile id -> those values.
        "none_guards_broken": {row.compile_id: table.none_guards_broken[row.compile_id] for row in cause.rows
                               if row.compile_id in table.none_guards_broken},
        # The user's line that called the recompiled code, where a value passed to it is changed.
        "caller": next((row.caller for row in cause.rows if row.caller is not None), None),
        "state_changed_at": changed.changed_at if changed is not None else None,
        # The grad mode the recompiles were made for, where their guard trees say it and agree: True
        # for grad on (training after an evaluation), False for off (an evaluation after training).
        "grad_mode_after": (after := modes.pop() if len(modes := {table.grad_modes.get(row.compile_id) for row in cause.rows}) == 1 else None),
        # ... and the user's line where the evaluation called the compiled code (grad off), where one is
        # known, or the one line training and the evaluation both called it from (a forward both go through).
        "evaluation_call": (calls := _evaluation_call_lines(table, cause, train_eval[2], train_eval=True) if train_eval
                            else _evaluation_call_lines(table, cause, after))[0],
        "shared_call": calls[1],
        # ... and whether the evaluation's compile ran under torch.inference_mode() (True) or
        # torch.no_grad() (False), where the guard trees say it and agree.
        "inference_mode": flags.pop() if len(flags := {table.inference_modes.get(row.compile_id) for row in cause.rows}) == 1 else None,
        # Every failing guard is on a module's train/eval flag (`fn._modules['1'].training == True`):
        # (the module's name under the compiled module, its class, whether it is training now).
        "train_eval": train_eval,
        # Every failing guard is a tensor's dispatch keys losing (True) or gaining (False) the autograd
        # keys: a call under torch.inference_mode() after calls outside it, or the other way.
        # Every failing guard tells a call passing the frame's argument as None from one passing a
        # tensor (torch_text.none_variant): that argument's name.
        "optional_argument": names.pop() if known and len(names := {none_variant(g) for g in known}) == 1 and None not in names else None,
        "inference_switch": switches.pop() if known and len(switches := {inference_mode_switch(g) for g in known}) == 1 else None,
        # Every recompile on a size guard compiled that dimension dynamic (its guard tree), as Dynamo's
        # automatic dynamic shapes do: later sizes of it reuse the graph.
        "dynamic_after": bool(cause.rows) and all(
            (found := size_guard(own_guard(row))) is not None and (found[0], found[1]) in table.dynamic_dims.get(row.compile_id, ())
            for row in cause.rows),
        "state_change": changed.detail if changed is not None else "",
        "data_loaders": table.data_loaders,
        "collate_functions": table.collate_functions,
        # The recompiled function's parameters, in order, to map a guard's parameter to the caller's argument.
        "argnames": list(next((row.frame_argnames for row in cause.rows if row.frame_argnames), ())),
        **_stability(table, cause),
    }


def _train_eval(guards: list[str], changes: list["ValueChange"]) -> tuple[str, str, bool] | None:
    """(module name as named_modules() gives it, "" for the compiled module itself; its class where
    the guard tree names it; whether it trains now) where every failing guard is on a module's
    `training` flag, agreeing on which way it went; None otherwise."""
    found = [training_guard(g) for g in guards]
    if not found or any(f is None for f in found) or len({f[1] for f in found if f is not None}) != 1:
        return None
    module, was = found[0]  # type: ignore[misc]
    owner = next((cls for change in changes for source, cls in change.owners if source == module), "")
    return submodule_name(module), owner, not was


@dataclass(frozen=True)
class ValueChange:
    """One recompile on a Python value, from torch's failing guard (what the failed entry was
    compiled for) and the new compile's guard tree (what it was compiled for)."""

    compile_id: str
    source: str  # as torch's reason prints it: `self.param_groups[0]['lr']`
    before: str  # torch's spelling of the value the failed entry matched: `0`, `0.01`, `None`
    before_type: str
    after: str | None  # the value the new compile matched; None: not known, or an input (`as_input`)
    after_type: str
    as_input: bool  # the new compile guards only the value's type: it is an input of the graph
    owners: tuple[tuple[str, str], ...]  # (source, class) of the objects it is reached through
    assigned: tuple[str, str] | None  # (code, place) where the failed entry's compiled code sets it
    entry: str = ""  # the compile id of the cache entry whose guard failed (torch's `0/1: p == 0.05`)
    # The new compile's tree checks only the value's type, yet the next recompile failed on that
    # compile's own guard on the value: it was specialised again (a symbolic guard), not an input.
    specialised_again: bool = False


_BOOL_OPPOSITE = {"True": "False", "False": "True"}


def _value_changes(table: RecompileTable, cause: Cause) -> list[ValueChange]:
    changes = []
    for row in cause.rows:
        guard = own_guard(row)
        found = equals_guard(guard)
        source = none_guard(guard) or (found[0] if found else None)
        if source is None:
            return []
        before = "None" if found is None else found[1]
        entry = next((reason_compile_id(m.strip().splitlines()[0]) for m in row.messages if guard_text(m) == guard), None) or ""
        new = table.guarded.get((row.compile_id, source))
        owners = tuple((p, v.type_name) for p in source_prefixes(source)
                       if (v := table.guarded.get((row.compile_id, p)) or table.guarded.get((entry, p))) is not None)
        changes.append(ValueChange(
            compile_id=row.compile_id, source=source, before=before,
            before_type=(table.guarded[(entry, source)].type_name if (entry, source) in table.guarded else python_type_of(before)),
            after=new.constant if new is not None else None, after_type=new.type_name if new is not None else "",
            as_input=new is not None and new.constant is None, owners=owners,
            assigned=table.assignments.get((entry, source)), entry=entry))
    # Without the new compile's tree, the next recompile's failing guard on the same value says
    # what the compile before it was made for. Where that guard is the compile's own (torch names
    # it: `0/1: p == 0.05`), it overrides a tree that checks only the type: the value became a
    # symbol there and an op that needs a constant (F.dropout's p) specialised it again, a guard
    # of the symbolic kind that the tree does not list as a constant.
    for i, change in enumerate(changes[:-1]):
        following = changes[i + 1]
        if following.source != change.source:
            continue
        if change.after is None and not change.as_input:
            changes[i] = dataclasses.replace(change, after=following.before, after_type=following.before_type)
        elif change.as_input and following.entry == change.compile_id:
            changes[i] = dataclasses.replace(change, as_input=False, after=following.before, after_type=following.before_type,
                                             specialised_again=True)
    return changes


def _hook_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    diffs = []
    for row in cause.rows:
        produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
        previous = table.previous_graph(row.ca_id)
        now, before = hook_counts(produced), hook_counts(previous)
        diffs.append(
            {
                "compile_id": row.compile_id,
                "step": row.step,
                "added": sorted((now - before).elements()),
                "removed": sorted((before - now).elements()),
                "previous_graph": f"!{previous.ca_id}" if previous is not None else None,
            }
        )
    # A hook first met where Dynamo's recompile limit sent a frame to eager: a module's hooks run inside the
    # compiled forward's graph until then, so no graph before shows them (registered then or earlier).
    eager_from = {hit.step: hit.compile_id for hit in table.limit_hits if hit.step is not None}
    return {"hook_diffs": diffs, "named_hooks": _named_hooks(table, cause), "key_sizes": _key_sizes(cause),
            "eager_from": eager_from, **_stability(table, cause)}


@dataclass
class NamedHook:
    """A hook function a cause's recompiles added to the backward or took out of it, named by the
    capture (CACompileEvent.hooks): the steps whose new graph had it first (`added`) or had lost it
    (`removed`), and how many hooks it was in each graph that added it."""

    function: str
    file: str
    line: int
    code: str
    module: str  # the module's class, for a module's full backward (pre-)hook
    hook_types: list[str]
    added: list[int | None] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    removed: list[int | None] = field(default_factory=list)


def _module_hook_labels(table: RecompileTable, guard: str) -> list[str]:
    """`the lambda at train.py:12, a full backward hook of a `Linear``: each function the CA graphs
    call as a module's full backward (pre-)hook, for a guard on a module's backward-hook dict (its
    forward hooks never reach a CA graph). At most 3; [] for any other guard."""
    if "_backward" not in guard:
        return []
    seen: dict[tuple[str, str, int, str], str] = {}
    for sites in table.hook_sites.values():
        for site in sites:
            key = (site.function, site.file, site.line, site.module)
            if site.module and key not in seen:
                hook = NamedHook(function=site.function, file=site.file, line=site.line, code=site.code, module=site.module,
                                 hook_types=[site.hook_type])
                seen[key] = f"{hook_label(hook, table.cwd)}, a full backward hook of a `{site.module}`"
    return list(seen.values())[:3]


def _site_counts(sites: list[HookSite] | None) -> Counter[tuple[str, str, int, str]]:
    counts: Counter[tuple[str, str, int, str]] = Counter()
    for site in sites or ():
        counts[(site.function, site.file, site.line, site.module)] += site.count
    return counts


def _named_hooks(table: RecompileTable, cause: Cause) -> list[NamedHook]:
    """The hook functions each recompile of the cause added or removed against the graph captured
    before it; [] where the record names no hooks (records made before hooks were named, imports)."""
    if not table.hook_sites:
        return []
    named: dict[tuple[str, str, int, str], NamedHook] = {}

    def entry(key: tuple[str, str, int, str], sites: list[HookSite]) -> NamedHook:
        if key not in named:
            types = sorted({s.hook_type for s in sites if (s.function, s.file, s.line, s.module) == key})
            code = next((s.code for s in sites if (s.function, s.file, s.line, s.module) == key and s.code), "")
            named[key] = NamedHook(function=key[0], file=key[1], line=key[2], code=code, module=key[3], hook_types=types)
        return named[key]

    for row in cause.rows:
        if row.ca_id is None:
            continue
        previous = table.previous_graph(row.ca_id)
        now_sites = table.hook_sites.get(row.ca_id) or []
        before_sites = table.hook_sites.get(previous.ca_id) or [] if previous is not None else []
        now, before = _site_counts(now_sites), _site_counts(before_sites)
        for key in sorted(now - before):
            hook = entry(key, now_sites)
            hook.added.append(row.step)
            hook.counts.append(now[key])
        for key in sorted(before - now):
            entry(key, before_sites).removed.append(row.step)
    return list(named.values())


def _key_sizes(cause: Cause) -> list[tuple[tuple[int, ...], int | None]]:
    return [(r.previous_key_sizes, r.key_size) for r in cause.rows]


# What AccumulateGrad's one-time .grad warm-up is, in the words `recompiles --explain` and
# `summary`'s headline both use: torch counts its capture, `gate --max-recompiles` does not.
GRAD_WARMUP_WORDS = "the .grad warm-up (captured once), not counted by gate --max-recompiles"


def grad_warmup_row(table: RecompileTable) -> RecompileRow | None:
    """The first CA cache miss when it is AccumulateGrad's one-time .grad None -> defined change,
    which `gate --max-recompiles` does not count (the rule of report.figures.metrics.CAMisses)."""
    ca = [r for r in table.recompiles if r.source == SOURCE_CA]
    first = ca[0] if ca else None
    if first is None or first.ca_id is None or first.kind != MISS_NEW_NODE:
        return None
    initial = [r.step for r in table.initial if r.source == SOURCE_CA]
    miss = CacheMissEvent(seq=first.seq, t=0.0, ca_id=first.ca_id, compile_id=first.compile_id, step=first.step,
                          miss_kind=first.kind, message="", node=first.node)
    produced = table.graphs.get(first.ca_id)
    # Here: report.figures.metrics (the step statistics) is ~5 ms of `recompiles` start-up for this one test.
    from cagtool.report.figures.metrics import is_grad_warmup

    if is_grad_warmup(miss, produced, table.previous_graph(first.ca_id), initial[0] if initial else None,
                      table.nodes_captured_before(first.ca_id)):
        return first
    return None


def is_graph_grad_warmup(table: RecompileTable, row: RecompileRow) -> bool:
    """The row is one backward graph's .grad warm-up: the rule of report.figures.metrics.is_grad_warmup
    (a new AccumulateGrad node, in the initial capture's step or the next, hooks unchanged), asked of
    every miss, not only the run's first: a job with several backward graphs a step (a GAN's D and G)
    has one warm-up per graph, which torch captures each."""
    if row.source != SOURCE_CA or row.kind != MISS_NEW_NODE or row.ca_id is None or row.initial \
            or not (row.node or "").endswith("AccumulateGrad"):
        return False
    # The initial capture is among the first rows: found without a pass over 1,000s of misses.
    initial = next((r.step for r in table.rows if r.initial and r.source == SOURCE_CA), None)
    miss = CacheMissEvent(seq=row.seq, t=0.0, ca_id=row.ca_id, compile_id=row.compile_id, step=row.step,
                          miss_kind=row.kind, message="", node=row.node)
    from cagtool.report.figures.metrics import is_grad_warmup

    return is_grad_warmup(miss, table.graphs.get(row.ca_id), table.previous_graph(row.ca_id), initial,
                          table.nodes_captured_before(row.ca_id))


def cause_facts(table: RecompileTable, cause: Cause) -> dict[str, Any]:
    if cause.code == CAUSE_STRUCTURE:
        return _structure_facts(table, cause)
    if cause.code in (CAUSE_SHAPES, CAUSE_DYNAMO_CA_GRAPH):
        facts = _shape_facts(table, cause) if cause.code == CAUSE_SHAPES else _guard_facts(table, cause)
        unpack = checkpoint_unpack_breaks(table)
        return {**facts, "checkpoint_unpack_breaks": unpack, "checkpoint_fix": checkpoint_fix(table) if unpack else None}
    if cause.code == CAUSE_DYNAMO_FRAME:
        return _guard_facts(table, cause)
    if cause.code == CAUSE_HOOK:
        return _hook_facts(table, cause)
    if cause.code == CAUSE_GRAD_DEFINED:
        warmup = grad_warmup_row(table)
        per_graph = all(is_graph_grad_warmup(table, row) for row in cause.rows)
        initial = next((r.step for r in table.rows if r.initial and r.source == SOURCE_CA), None)
        return {"key_sizes": _key_sizes(cause), "grad_warmup": warmup is not None and warmup in cause.rows,
                # the warm-up came in the first capture's step: a later backward of that step (gradients
                # accumulated over several backward calls a step), not the next step's
                "warmup_in_first_step": warmup is not None and warmup in cause.rows and warmup.step is not None and warmup.step == initial,
                # every miss of the cause is a backward graph's own warm-up (one per graph)
                "grad_warmup_per_graph": per_graph,
                "backward_calls": list(dict.fromkeys(r.user_source for r in cause.rows if r.user_source is not None)) if per_graph else [],
                # every miss came at or after the step gradient accumulation began (one backward call a
                # step before it, several from it): the step's later calls add into the .grad its first made
                "accumulation_from": accumulation if (accumulation := table.accumulation_from) is not None
                and all(r.step is not None and r.step >= accumulation for r in cause.rows) else None,
                **_stability(table, cause)}
    if cause.code == CAUSE_UNKNOWN and table.failed_captures:
        # torch captures a graph whose capture raised again when it comes back, and reports no reason for it
        from cagtool.report.figures.metrics import follows_failed_capture

        after = [r.compile_id for r in cause.rows if follows_failed_capture(r.ca_id, table.failed_captures)]
        return {"after_failed_capture": after, "failed_captures": [f"!{n}" for n in sorted(table.failed_captures)],
                "capture_errors": _capture_errors(table), **_stability(table, cause)}
    return _stability(table, cause)


_UNPACK_HOOK_BREAK = re.compile(r"_checkpoint_hook\.__init__\.<locals>\.unpack_hook")


_GUARD_CLASS = re.compile(r"type=<class '(?:[\w.]*\.)?(\w+)'>")


def checkpoint_unpack_breaks(table: RecompileTable) -> bool:
    """torch broke a graph at a non-reentrant checkpoint's unpack hook (torch.utils.checkpoint's
    `_checkpoint_hook...unpack_hook`, marked as skipped): under compiled autograd, at every tensor
    the checkpoint saved, which splits the CA graph's code into pieces."""
    return any(_UNPACK_HOOK_BREAK.search(message) for message in table.break_reasons.values())


# Dynamo's graph break inside a checkpoint it was tracing as one region (a higher-order op, "HOP"
# in torch 2.13's words: "HOP: Unsafe side effect" where transformers' GradientCheckpointingLayer
# sets a context variable in the checkpointed call, "HOP: Non-nullified side effect" where the
# checkpointed function sets an attribute of an outer object): the checkpoint then runs as eager
# checkpointing does, its unpack hooks in the backward. Read only where such unpack hooks broke a
# CA graph, so the higher-order op is the checkpoint's.
_HOP_BREAK = re.compile(r"^HOP: ", re.MULTILINE)
# torch 2.13, tests/scripts/checkpoint_side_effect.py by hand: the config below takes the breaks
# (6 -> 0) and the CA graph's pieces (3 -> 0) away; Dynamo then drops the side effect from the
# backward's recompute of the forward.
SIDE_EFFECT_CONFIG = "torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True"


def checkpoint_region_break(table: RecompileTable) -> dict[str, Any] | None:
    """The first graph break Dynamo made inside a higher-order op (`_HOP_BREAK`), where one is
    recorded: its place, the reason's line, torch's explanation; None where there is none."""
    for (file, line), message in table.break_reasons.items():
        if _HOP_BREAK.search(message):
            lines = [text.strip() for text in message.splitlines() if text.strip()]
            reason = next(text for text in lines if text.startswith("HOP: "))
            explained = next((text.removeprefix("Explanation:").strip() for text in lines if text.startswith("Explanation:")), "")
            return {"file": file, "line": line, "where": f"{_library_path(file, table.cwd)}:{line}", "reason": reason,
                    "explanation": explained}
    return None


def checkpoint_sequential_break(table: RecompileTable) -> str | None:
    """Where the graph broke at a call of torch.utils.checkpoint.checkpoint_sequential ("file:line"),
    which torch marks skipped for Dynamo; None where it did not."""
    return next((f"{_library_path(file, table.cwd)}:{line}" for (file, line), message in table.break_reasons.items()
                 if "`checkpoint_sequential`" in message and "skipped" in message), None)


def checkpoint_fix(table: RecompileTable) -> str:
    """What makes the checkpoint's unpack hooks leave the compiled-autograd graph: the checkpoint
    traced as one region, which a graph break inside it (checkpoint_region_break) is what prevents
    where there is one; else calling it inside compiled code (CHECKPOINT_INSIDE_FIX)."""
    sequential = checkpoint_sequential_break(table)
    if sequential is not None:
        # torch marks checkpoint_sequential skipped: Dynamo breaks at its call and runs it, and the
        # checkpoints it makes, eagerly (a loop of checkpoint() calls traces: no break, no pieces).
        return (f"torch.utils.checkpoint.checkpoint_sequential is a function Dynamo does not trace (torch marks it skipped): "
                f"the graph breaks at its call at {sequential} and it runs eagerly, its "
                "checkpoints with it, so their unpack hooks reach the compiled-autograd graph. Do what it does in the compiled code "
                "yourself, a loop of torch.utils.checkpoint.checkpoint(segment, x, use_reentrant=False) over the segments (each a "
                "torch.nn.Sequential of its modules), with a backend that runs AOTAutograd (inductor, aot_eager): Dynamo traces each "
                "as one region, and the CA graph has no such break and no pieces.")
    found = checkpoint_region_break(table)
    eager = [c for c in table.compile_calls if c.get("backend") == "eager"]  # typed by record.manifest.typed_compile_calls
    if found is None and eager and len(eager) == len(table.compile_calls):
        # Every compile of the job on the eager backend (HF Trainer's torch_compile_backend="eager"):
        # the checkpoint may already be inside compiled code; the backend is what to change.
        call = eager[0]
        via = f", through {call['via']}," if isinstance(call.get("via"), str) and call["via"] else ""
        return (f"Your torch.compile at {display_path(call['file'], table.cwd)}:{call['line']}{via} compiles with "
                "backend=\"eager\", which runs a checkpoint in the compiled code as eager checkpointing does, unpack hooks and all. "
                "Compile with a backend that runs AOTAutograd (aot_eager, or the default inductor; HF Trainer: "
                f"TrainingArguments(torch_compile_backend=\"aot_eager\")), and {_CALL_INSIDE}: {_TRACED_AS_ONE}")
    if found is None:
        return CHECKPOINT_INSIDE_FIX
    said = f"\"{found['reason']}\"" + (f": {found['explanation']}" if found["explanation"] else "")
    lead = (f"The checkpoint is called inside compiled code, but Dynamo broke the graph inside it at {found['where']} ({said}), so "
            "it ran as eager checkpointing does and its unpack hooks reached the compiled-autograd graph. ")
    if "side effect" in found["reason"]:
        # A library's side effect (transformers 5's GradientCheckpointingLayer through kernels'
        # context variable) is not the user's to move: the config is what the user can set.
        package = _package_of(found["file"])
        first = (f"The side effect is in {package} (a library's code, not yours): where" if package else
                 "Move that side effect out of the checkpointed code; or, where")
        return (lead + f"{first} it need not run again when the backward "
                f"recomputes the forward, set `{SIDE_EFFECT_CONFIG}` before the compile: Dynamo then traces the checkpoint as one "
                "region, AOTAutograd puts its recompute in the compiled backward, and the CA graph has no pieces "
                "(`cagtool checkpointing` re-runs the job with it set and compares).")
    return lead + "Remove what breaks it there, and Dynamo traces the checkpoint as one region: the CA graph has no pieces."


# Measured on a 2-block job (non-reentrant checkpoint of a compiled block, one change of batch size):
# the checkpoint inside a function compiled with aot_eager or inductor breaks no graph (27 breaks ->
# 0; Dynamo traces it as torch.ops.higher_order.tag_activation_checkpoint and the recompute is in
# the AOT backward); with backend="eager" it still breaks at every saved tensor (the region runs as
# eager checkpointing does).
_CALL_INSIDE = ("call the checkpoint inside the compiled function (torch.compile a function or module whose code calls "
                "torch.utils.checkpoint.checkpoint, not checkpoint(compiled_fn, ...))")
_TRACED_AS_ONE = ("Dynamo traces the checkpoint as one region and AOTAutograd puts its recompute in the compiled backward, so no "
                  "unpack hook runs in the compiled-autograd graph, which then has no such break and no pieces.")
CHECKPOINT_INSIDE_FIX = (f"C{_CALL_INSIDE[1:]}, with a backend that runs AOTAutograd (the default inductor, or aot_eager): {_TRACED_AS_ONE} "
                         "With backend=\"eager\" the region still runs the unpack hooks: it breaks as before.")


def _capture_errors(table: RecompileTable) -> list[dict[str, Any]]:
    """Per failed capture: what it raised where the record has it (error_type, error: "" where
    not), and the user's line whose backward it was (the finding's, else its cache miss's)."""
    out = []
    for n in sorted(table.failed_captures):
        finding = table.capture_errors.get(n)
        row = next((r for r in table.rows if r.source == SOURCE_CA and r.compile_id == f"!{n}"), None)
        line = finding.source if finding is not None and finding.source is not None else row.user_source if row is not None else None
        detail = finding.detail if finding is not None else {}
        out.append({"compile_id": f"!{n}", "error_type": str(detail.get("error_type") or ""), "error": str(detail.get("error") or ""),
                    "source": line})
    return out


# What to do about a capture that raised, for the errors whose cause is known (torch 2.13's words).
_CAPTURE_ERROR_FIXES = (
    ("higher order gradients",
     "compiled autograd cannot capture a backward that builds the graph for higher-order gradients (create_graph=True) "
     "through a torch.compile'd function: run that backward without compiled autograd, "
     "`with torch._dynamo.compiled_autograd._disable():` around {call}"),
)


def capture_error_words(error: dict[str, Any], cwd: str) -> tuple[str, str]:
    """(what raised, what to do) for one failed capture (`_capture_errors`); what to do is "" where
    the kind of error is not known."""
    line = error.get("source")
    at = f" (the backward called at {format_source(line, cwd)})" if line is not None else ""
    first = (error.get("error") or "").strip().splitlines()
    raised = (f'{error["error_type"]}: "{first[0]}"' if first else error["error_type"]) if error.get("error_type") else ""
    each = " each" if error.get("captures", 1) > 1 else ""
    which = f"the {'captures' if each else 'capture'} of {error['compile_id']}{at}"
    what = (f"{which}{each} raised {raised}" if raised else
            f"{which} raised an error the record does not have (it reached the script)")
    call = f"the call at {display_path(line.file, cwd)}:{line.line}" if line is not None else "that backward call"
    todo = next((fix.format(call=call) for key, fix in _CAPTURE_ERROR_FIXES if key in (error.get("error") or "")), "")
    return what, todo


MAX_LISTED = 6  # evidence items and node changes listed before eliding the middle


@dataclass(frozen=True)
class Words:
    title: str
    why: list[str]
    fix: list[str]
    evidence: str


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def elide(items: list[str], limit: int = MAX_LISTED) -> str:
    if len(items) <= limit:
        return ", ".join(items)
    head = items[: limit - 2]
    return ", ".join(head) + f", ... ({len(items) - limit + 2} more), " + ", ".join(items[-2:])


def evidence_text(evidence: list[Evidence], between: bool = False, evaluated: frozenset[str] | set[str] = frozenset()) -> str:
    """`0/2 (step 4, seq 28)` each; `between`: an evaluation's recompiles (Cause.between_steps), and
    `evaluated`, the compile ids an evaluation compiled in another cause (Cause.place),
    `0/2 (between steps 3 and 4, seq 28)`."""
    items = [f"{e.compile_id} ({'step ?' if e.step is None else steps_place([e.step], between or e.compile_id in evaluated)}, "
             f"seq {e.seq})" for e in evidence]
    return elide(items)


def short_name(name: str | None) -> str:
    return (name or "?").replace("torch::autograd::", "")


def stability_sentence(facts: dict, what: str) -> str:
    stabilised = facts.get("stabilised")
    if facts.get("stopped_by_limit"):
        return (f"Recompiles stopped after step {facts['last_recompile_step']} only because Dynamo hit its "
                "recompile limit: the frame has run uncompiled since.")
    if stabilised is None:
        return ""
    if stabilised:
        quiet = facts["quiet_steps_after"]
        later = "the last step" if quiet == 1 else f"the last {quiet} steps"
        others = facts.get("others_after") or []
        if others:
            # Other causes compiled in some of those steps: no "reused cached graphs" for them.
            return (f"It has stabilised: no {what} after step {facts['last_recompile_step']}, in {later} (other recompiles "
                    f"came at {'step' if len(others) == 1 else 'steps'} {step_list(others)}).")
        return f"It has stabilised: no {what} after step {facts['last_recompile_step']}; {later} reused cached graphs."
    if facts.get("after_training"):
        return (f"It came after training ended, after its last step ({facts['last_step']}) in calls no backward followed (an "
                "evaluation or a prediction): a one-time cost of those calls, not of the training steps.")
    if facts.get("recompiling_steps", 3) < 3:
        # One or two recompiles that happen to fall on the last step of a short run say nothing
        # about the steps it did not run.
        if facts["last_recompile_step"] > facts["last_step"]:  # in a step the record never closed: the job ended in it
            return (f"It came after the run's last closed step ({facts['last_step']}), in the step the job ended in: too few "
                    "steps to tell whether it stabilises (run more steps).")
        return (f"The run ended at step {facts['last_step']}, right after it: too few steps to tell whether "
                "it stabilises (run more steps).")
    return f"It has not stabilised: still recompiling at the last recorded step ({facts['last_step']})."


def where(cause: Cause, cwd: str) -> str:
    if cause.source is None:
        return ""
    how = {
        "node_traceback": "created at",
        "compiled_frame": "in the compiled function at",
        "backward_call": "in the backward called at",
        "guard": "guarded at",
        "caller": "called at",
        "branch": "picked by the data-dependent branch torch reports at",
    }.get(cause.source.how, "at")
    if cause.source.via and cause.source.how in ("caller", "backward_call"):
        # A library made the call (HF Trainer's `model(**inputs)`, accelerate's `loss.backward()`).
        return f"{how} {cause.source.via} (a library's call), reached from {format_source(cause.source, cwd)}"
    return f"{how} {format_source(cause.source, cwd)}"


def _forward_graphs_words(cause: Cause, items: list[str], cwd: str) -> Words:
    """Every capture swaps one CompiledFunctionBackward for another: the backward of another graph
    of the compiled forward (word_language_model's Transformer: its forward compiled again for a
    shorter chunk, for the mask an evaluation left, and run again with a graph compiled earlier).
    Not a branch of the script: torch.where has nothing to select; fewer forward graphs, fewer
    captures."""
    facts = cause.facts
    steps = facts.get("forward_recompile_steps") or []
    title = f"The backward of another graph of the compiled forward ({plural(cause.count, 'recompile')})"
    why = [f"Each miss swaps the {COMPILED_FUNCTION} node of the compiled forward for another {where(cause, cwd)}".rstrip()
           + ": " + elide(items) + ". AOTAutograd's backward of a compiled forward is one node per forward graph, so a step "
           "that runs another graph of the forward (one Dynamo compiled again, or one it compiled earlier for other inputs) "
           "gives compiled autograd another node to capture.",
           f"Dynamo compiled the forward again at {'step' if len(steps) == 1 else 'steps'} {step_list(steps)} (the forward's causes "
           f"here); these captures came at {'step' if len(cause.steps) == 1 else 'steps'} {step_list(cause.steps)}. Not a branch "
           "of your code."]
    stability = stability_sentence(facts, "such miss")
    if stability:
        why.append(stability)
    fix = ["Goes with the forward's recompiles: each forward graph's backward is captured once, then cached; what keeps the "
           "forward to fewer graphs (the fixes of its causes) removes these captures too. Nothing to change in the backward itself."]
    return Words(title, why, fix, evidence_text(cause.evidence))


def _pairs_text(change: NodeChange) -> str:
    """`NodeCall 3 CompiledFunctionBackward1 -> CompiledFunctionBackward4, NodeCall 4 ...` (NodeChange.pairs)."""
    return ", ".join(f"NodeCall {call} {short_name(before)} -> {short_name(after)}" for call, before, after in change.pairs)


def _change_item(change: NodeChange) -> str:
    label = f"NodeCall {change.node_call}" if change.node_call is not None else "a node"
    at = f"{change.compile_id} step {change.step}" if change.step is not None else change.compile_id
    sizes = (f" ({change.nodes_before} -> {change.nodes_after} nodes)"
             if change.nodes_before is not None and change.nodes_before != change.nodes_after else "")
    if change.pairs:
        return f"{at}: {_pairs_text(change)}{sizes}"
    if change.before is not None:
        return f"{at}: {label} {short_name(change.before)} -> {short_name(change.after)}{sizes}"
    if change.shape == GRAPH_REPEATS:  # the node is there before too, with another number of inputs
        return f"{at}: {short_name(change.after)} at {label}{sizes}"
    return f"{at}: new {short_name(change.after)} at {label}{sizes}"


# torch 2.13, checked by hand (tests/scripts/layer_drop.py): a block skipped on random.random() makes a
# backward graph per set of blocks drawn; torch.where on a tensor draw keeps one.
RANDOM_DROP_FIX = ("Where a random draw skips layers: run every layer and pick its output or its input with a tensor draw "
                   "instead, `x = torch.where(torch.rand(()) < p, x, layer(x))` (on a residual branch, "
                   "torchvision.ops.stochastic_depth): one backward graph for every draw, though the skipped layers' compute "
                   "is no longer saved. Or run those steps without compiled autograd (torch._dynamo.compiled_autograd._disable()).")


def _structure(cause: Cause, cwd: str) -> Words:
    facts = cause.facts
    changes = facts["changes"]
    shape = facts.get("graph_shape")
    items = [_change_item(change) for change in changes]
    others = facts.get("other_backward_calls") or []
    if others:
        return _other_backward_words(cause, others, cwd)
    if facts.get("new_backward_call") is not None and cause.count == 1:
        return _new_backward_words(cause, facts["new_backward_call"], cwd)
    if shape == GRAPH_SAME:
        return _saved_value_words(cause, items, cwd)
    if (changes and facts.get("forward_recompile_steps")
            and all(COMPILED_FUNCTION in (c.after or "") and COMPILED_FUNCTION in (c.before or "") for c in changes)):
        return _forward_graphs_words(cause, items, cwd)
    title = f"The autograd graph's structure changes between iterations ({plural(cause.count, 'recompile')})"
    why = [
        "Compiled autograd caches one graph per graph structure; a backward whose graph has "
        "different nodes is a cache miss and a new capture. "
        f"Seen {facts['distinct_structures']} distinct structures {where(cause, cwd)}".rstrip() + ".",
        "The node that differs: " + elide(items) + ".",
    ]
    for compile_id, added in facts.get("added_nodes", []):
        names = [n for n, _ in added]
        listed = elide([short_name(n) + (f" x{k}" if k > 1 else "") for n, k in added], limit=8)
        custom = custom_function_nodes(names)
        mine = (f"; {_names_text(custom)}: a torch.autograd.Function subclass whose backward is in it"
                if len(custom) == 1 else f"; {_names_text(custom)}: torch.autograd.Function subclasses whose backward is in it"
                ) if custom else ""
        why.append(f"Nodes {compile_id} has beyond the graph before it: {listed} (what the loss gained on those steps{mine}).")
    compiled_phase = reshape_sizes = False
    repeats = sum(1 for c in changes if c.shape == GRAPH_REPEATS)
    # Most captures only add or drop copies (a sequence's length, a loop that breaks early), some
    # also swap ops (a branch inside it): the loop is the larger cause, and padding it the fix.
    mostly_loop = shape is None and len(changes) > 1 and repeats * 2 >= len(changes)
    loop = shape == GRAPH_REPEATS or mostly_loop
    sizes = _count_list(facts.get("node_counts") or [])
    if mostly_loop:
        # The others at a step where Dynamo recompiled a forward frame, each with a compiled graph's
        # backward node where it differs: the forward's new graph, not a branch.
        others = [c for c in changes if c.shape != GRAPH_REPEATS]
        recompiled = [c.step for c in others if c.step in facts["forward_recompile_steps"]
                      and COMPILED_FUNCTION in f"{c.before or ''} {c.after or ''}"]
        rest = ("the others also change which ops run (a branch inside it)" if len(recompiled) < len(others)
                else f"the other{'s' if len(others) > 1 else ''} came at step{'s' if len(set(recompiled)) > 1 else ''} "
                     f"{step_list(sorted(set(recompiled)))}, where Dynamo recompiled a forward frame: its compiled graph's "
                     "backward node is another")
        why.append(f"{repeats} of the {len(changes)} captures have more or fewer copies of the nodes the graph before it had"
                   + (f" ({sizes} autograd nodes)" if sizes else "")
                   + ": the backward's size follows a loop whose trip count changes per step (a sequence length, a loop that "
                   f"breaks early); {rest}.")
    elif loop and facts.get("random_draw") is not None:
        why.append("Each capture has more or fewer copies of the nodes the graph before it had, and no other node"
                   + (f" ({sizes} autograd nodes)" if sizes else "") + ": more or fewer layers (or a loop's iterations) ran.")
    elif loop:
        why.append("Each capture has more or fewer copies of the nodes the graph before it had, and no other node"
                   + (f" ({sizes} autograd nodes)" if sizes else "")
                   + ": the backward's size follows a loop whose trip count changes per step (a sequence or episode "
                   "length, a number of loss terms).")
    elif shape == GRAPH_EXTRA and facts.get("branch") is not None:
        why.append("Each capture adds (or drops) nodes the graph before it had none of, in a step whose forward took a side of "
                   "that branch (a graph break, \"Data-dependent branching\") for the first time: Dynamo compiled that side's "
                   "resume function then, and each side builds other autograd nodes.")
    elif shape == GRAPH_EXTRA:
        why.append("Each capture adds (or drops) nodes the graph before it had none of: ops that run on some steps only "
                   "(a loss term, a branch with no else).")
    elif shape == GRAPH_REARRANGED:
        why.append("Each capture has the same nodes as the graph before it, joined another way: the data picks which "
                   "module runs where (a router, an order chosen per step)."
                   + (f" torch reports a data-dependent branch at {format_source(facts['branch'], cwd)}." if facts.get("branch") else ""))
    elif shape is None and facts["grew"] == len(changes) and len(changes) > 1:
        why.append("Every miss is a node the earlier graphs did not have: the graph grows (a loop whose trip count changes per step, or ops chosen per step).")
        loop = True
    elif (reshaped := _reshape_switch(changes)) is not None:
        # reshape() views its input where its strides allow, else copies (clone + _unsafe_view): a
        # dimension of 1 makes a non-contiguous input viewable (HF BERT's attention on a last batch
        # of one example: CloneBackward0 + UnsafeViewBackward0 -> ReshapeAliasBackward0).
        at = f"step {reshaped.step}" if reshaped.step is not None else reshaped.compile_id
        way = "a view where it had made a copy" if RESHAPE_COPY in (reshaped.before or "") else "a copy where it had made a view"
        why.append(f"At {at} a reshape() made {way}: whether reshape() can view its input depends on the sizes, and a dimension "
                   "of 1 (a last batch of one example, a sequence of one token) makes it a view. Not a branch of the script.")
        reshape_sizes = True
    elif (switch := _compiled_switch(changes)) is not None and cause.count == 1:
        # A forward compiled from some step on (torch.compile of the model or of the whole step, a
        # new model compiled for a second phase): AOTAutograd's backward is one node where the eager
        # forward made many. Not a branch: torch.where has nothing to select.
        at = f"step {switch.step}" if switch.step is not None else switch.compile_id
        if COMPILED_FUNCTION in switch.after:
            why.append(f"From {at} the backward holds one CompiledFunctionBackward node where it had eager nodes: the forward runs "
                       "compiled from then on (torch.compile of the model or of the training step, whose AOTAutograd backward is "
                       "one node): a change of phase, not a branch.")
        else:
            why.append(f"From {at} the backward holds eager nodes where it had one CompiledFunctionBackward node: the forward no "
                       "longer runs compiled (a model compiled for one phase only): a change of phase, not a branch.")
        compiled_phase = True
    elif any(len(v) > 1 for v in facts["variants"].values()):
        alternatives = "; ".join(
            f"NodeCall {nc}: {' / '.join(short_name(n) for n in names)}" for nc, names in facts["variants"].items() if len(names) > 1
        )
        if facts.get("branch") is not None:
            why.append(f"The same position holds different ops ({alternatives}): torch reports a data-dependent branch "
                       f"(graph break \"Data-dependent branching\") at {format_source(facts['branch'], cwd)}, and each side "
                       "builds different autograd nodes.")
        else:
            why.append(f"The same position holds different ops ({alternatives}): a Python branch or an op picked per step.")
    rnn = facts.get("rnn_site") if loop else None
    cell = facts.get("rnn_cell") if loop and rnn is None else None
    if rnn is not None:
        why.append("The loop is a recurrent layer's time steps: torch reports an RNN module at "
                   f"{format_source(rnn, cwd)} that Dynamo does not compile (graph break \"{RNN_MODULE_CALL}\"), so it runs "
                   "eagerly, and on CPU an nn.GRU or nn.RNN records its cell's autograd nodes once per time step (the hidden "
                   f"state's matmul, {RNN_CELL_NODE}, among them): the backward's size follows each batch's sequence length. "
                   "Dynamic shapes do not help: the number of nodes changes, not a size.")
    elif cell is not None:
        why.append(f"The copies are an {'nn.GRU' if cell == 'GRU' else 'nn.RNN'} cell's nodes and nothing else (the hidden "
                   f"state's matmul, {RNN_CELL_NODE}, among them): the loop is a recurrent layer's time steps. On CPU an "
                   f"nn.{cell} run eagerly records its cell once per time step (as does a cell called in a loop of your own), so "
                   "the backward's size follows each batch's sequence length. Dynamic shapes do not help: the number of nodes "
                   "changes, not a size.")
    recurrent = rnn is not None or cell is not None
    drawn = facts.get("random_draw") if not (reshape_sizes or compiled_phase) else None
    if drawn is not None:
        site, name = drawn
        how = (f"a graph break: Dynamo traces `{name}` but not the branch on the value it draws, \"Data-dependent branching\""
               if site.how == "random_branch" else f"a graph break: Dynamo does not trace `{name}`, so that code runs uncompiled")
        what = "a call of Python's random module"
        if name.startswith("torch."):
            what = f"a branch on a tensor drawn with `{name}`"
            how = "a graph break, \"Data-dependent branching\": Dynamo does not compile a branch on a tensor's value"
        why.append(f"torch reports {what} at {format_source(site, cwd)} ({how}). "
                   "Where a random draw picks which layers run (LayerDrop, "
                   "stochastic depth), each set of layers drawn is another backward graph, captured the first time it is "
                   "drawn and then reused: up to 2^N graphs for N layers that can be skipped.")
    stability = stability_sentence(facts, "new structure")
    if drawn is not None and facts.get("stabilised"):
        # A set of layers not drawn yet can come at any step: quiet last steps do not make it stable.
        stability = (f"No new set of layers was drawn after step {facts['last_recompile_step']} in this run's "
                     f"{facts['last_step'] + 1} steps; a later draw can still bring one.")
    if stability:
        why.append(stability)
    if drawn is not None:
        fix = ([LAYER_DROP_CONFIG_FIX + "."] if library_layer_drop(drawn[0].file, drawn[0].code) else []) + [RANDOM_DROP_FIX]
    elif reshape_sizes:
        fix = [HAND_RESHAPE_FIX if by_hand(facts) else RESHAPE_FIX]
    elif recurrent:
        if facts.get("stabilised"):
            why.append("Each length seen is captured once and then reused; one not seen yet is captured anew, as the data's "
                       "lengths take new values.")
        fix = [RNN_LENGTH_FIX, *([] if facts.get("stabilised") else [DISABLE_CA_FIX])]
    elif facts.get("stabilised") and loop:
        # A trip count the data sets (an episode's length: actor_critic's grow as the policy learns)
        # takes values the run did not reach: quiet last steps say little about them.
        why.append("Each trip count seen is captured once and then reused; one not seen yet is captured anew, as a trip "
                   "count set by the data (an episode's or sequence's length) takes new values as training goes on.")
        fix = ["Where the trip count follows the data, run the loop a fixed number of times (pad to a maximum; mask what is "
               "not needed): one graph for every length.", BATCHED_LOOP_FIX]
    elif facts.get("stabilised"):
        why.append("Nothing urgent: each distinct structure is captured once and then reused.")
        fix = []
        if shape == GRAPH_EXTRA and facts.get("branch") is not None:
            fix.append(f"Computing both sides of the branch at {format_source(facts['branch'], cwd)} and selecting with "
                       "torch.where (`torch.where(cond, a, b)`, the condition a tensor) keeps a single graph, and removes the "
                       "graph break: Dynamo then compiles the forward whole.")
        elif shape == GRAPH_EXTRA:
            fix.append("If a branch adds the ops, computing them on every step and weighting them by zero where they are "
                       "not wanted (torch.where) keeps a single graph.")
        elif compiled_phase:
            fix.append("Nothing to fix: the compiled phase's graph is captured once and reused.")
        elif not loop:
            fix.append("If a data-dependent branch picks the ops, computing both sides and selecting with "
                       "torch.where keeps a single graph.")
    else:
        fix = [
            "Make the backward graph the same every step: "
            + ("run the loop a fixed number of times (pad to a maximum; mask what is not needed)"
               + (", and select with torch.where where a branch inside it picks the ops." if mostly_loop else ".") if loop
               else "compute those ops on every step and weight them by zero where they are not wanted (torch.where)."
               if shape == GRAPH_EXTRA
               else "run every expert or side on every step and select or mask the results (torch.where) instead of "
                    "picking modules in Python." if shape == GRAPH_REARRANGED
               else "use the same ops every step (select results with torch.where instead of choosing ops in Python)."),
            *([BATCHED_LOOP_FIX] if loop else []),
            DISABLE_CA_FIX,
        ]
    return Words(title, why, fix, evidence_text(cause.evidence))


DISABLE_CA_FIX = ("If the variation is by design, compiled autograd will keep recompiling: run that part without it "
                  "(torch._dynamo.compiled_autograd._disable()).")

# A recurrent layer whose time steps are the loop (_rnn_site): one length, or a few, keep one
# structure each. Packing (pack_padded_sequence) does not: its time steps are the batch's longest.
RNN_LENGTH_FIX = ("Give every batch one sequence length: pad the sequences to a fixed maximum (the loss masks what lies past "
                  "each sequence's end, as CTC's input_lengths or an ignore_index do; a bidirectional layer's reverse "
                  "direction then starts in the padding), or to a few bucket lengths, each captured once and then reused. "
                  "Packing them (pack_padded_sequence) does not: its time steps are each batch's longest.")


# A loop whose trip count changes the backward's structure, when its iterations do not feed each
# other: one call on the stacked inputs leaves one structure whose sizes change, which compiled
# autograd makes dynamic after one recompile (a policy's log-probabilities of an episode's states).
BATCHED_LOOP_FIX = ("Where the loop's iterations do not feed each other (a policy's log-probabilities of an episode's "
                    "states), run the module once on them stacked (torch.stack) instead of once per iteration: the graph "
                    "keeps one structure and only a size changes, which compiled autograd then makes dynamic: one recompile of "
                    "its own and one of Dynamo's, then none (`cagtool run --dynamic` starts it dynamic). Where each "
                    "iteration's output is needed as it runs (the action sampled from the policy), that is a second forward "
                    "over the stored inputs, whose gradients are the same only where the module is deterministic: a dropout "
                    "layer draws new masks there (set its rate to 0, or keep the loop).")


def batch_shrink(saved: list[tuple[str, int, int]]) -> tuple[int, int] | None:
    """(before, after) of the smallest number among `saved` (autograd node, before, after) where every
    one shrank by the same factor (a batch of 8 then 5: 8 -> 5, and 3072 -> 1920 where a mean divides
    by 8 x 384 elements): a smaller batch; None otherwise."""
    pairs = sorted({(before, after) for _, before, after in saved})
    if not pairs or any(not 0 < after < before for before, after in pairs):
        return None
    first = pairs[0]
    return first if all(after * first[0] == before * first[1] for before, after in pairs) else None


def _saved_value_words(cause: Cause, items: list[str], cwd: str) -> Words:
    """A miss torch names "new node" on a graph of the same nodes at the same NodeCalls: a number a
    node saved changed (DivBackward1's divisor: the batch size of a mean over soft targets, mixup's or
    CutMix's), which compiled autograd keys its cache on; the graph files say which."""
    facts = cause.facts
    if facts.get("function_class") is not None:
        return _function_class_words(cause, facts["function_class"], items, cwd)
    saved = facts.get("saved_values") or []
    title = f"A number the backward's nodes saved changes between iterations ({plural(cause.count, 'recompile')})"
    why = [
        "Compiled autograd keys its cache on the graph's nodes and on the numbers they saved for the backward (a Python "
        "scalar an op kept, a size held as a constant); a miss on such a number is named a new node in torch's message. "
        f"Seen {facts['distinct_structures']} graphs of the same nodes {where(cause, cwd)}".rstrip() + ".",
        "The node torch names: " + elide(items) + ".",
    ]
    shrink = batch_shrink(saved)
    last_batch = False
    if saved:
        listed = elide([f"{short_name(name)} {before} -> {after}" for name, before, after in saved], limit=8)
        why.append(f"Each capture has the same autograd nodes, at the same NodeCalls, as the graph before it; what changed is "
                   f"the numbers the graph holds: {listed}.")
        if shrink is not None and cause.count == 1:
            last_batch = True
            soft = any(name == "DivBackward1" for name, _, _ in saved)
            scaled = len({(before, after) for _, before, after in saved}) > 1
            why.append(f"Every number that changed shrank by the same factor, once ({shrink[0]} -> {shrink[1]}"
                       + (", and the counts that scale with it" if scaled else "") + "): a batch smaller than the ones before it, as "
                       "the last one is when the data's length is not a multiple of the batch size"
                       + (" (a loss over soft targets, mixup's or CutMix's probabilities, divides by the batch size, a number its "
                          "DivBackward1 keeps)." if soft else "."))
    else:
        why.append("Each capture has the same autograd nodes, at the same NodeCalls, as the graph before it: a number a node "
                   "saved changed, not the structure.")
    ctc = not last_batch and any(name == CTC_LENGTHS_NODE for name, _, _ in saved)
    if ctc:
        why.append(f"{CTC_LENGTHS_NODE} is nn.CTCLoss's (F.ctc_loss's) node: torch turns the input and target length tensors "
                   "into lists of integers, which the node saves, so each new set of lengths (as a rule, every batch's "
                   "targets) is a new capture; padding the targets would change the loss.")
        others = sorted({short_name(name) for name, _, _ in saved if name != CTC_LENGTHS_NODE})
        if others:
            why.append(f"Numbers other nodes saved changed too ({elide(others, limit=4)}): what the fix below removes is "
                       "CTC's; those may still recapture.")
    stability = stability_sentence(facts, "recompile of this kind")
    if stability:
        why.append(stability)
    if last_batch:
        fix = [HAND_SLICE_FIX if by_hand(facts) else LAST_BATCH_FIX]
    elif ctc:
        fix = [CTC_TENSOR_LENGTHS_FIX]
    else:
        fix = ["If the number follows the data (a batch or sequence size), keep it the same on every step (drop or pad the "
               "odd batch), or compute it as a tensor so that it is an input of the graph, not a constant of it."]
        if facts.get("stabilised"):
            why.append("Nothing urgent: each value is captured once and then reused.")
    return Words(title, why, fix, evidence_text(cause.evidence))


# torch 2.13 (aten::ctc_loss, LossCTC.cpp): the overload taking length tensors reads them into
# integer lists and calls the one taking lists, whose node saves them; compiled autograd keys its
# cache on them. The overload that keeps tensors (aten::_ctc_loss.Tensor, node CtcLossBackward1) is
# lifted as the graph's inputs: tests/scripts/speech_lengths.py, one capture, where nn.CTCLoss made
# one a step; Dynamo's compile of that graph breaks at its backward op (no fake-tensor kernel) and
# recompiles once per size that changed, then none; the same loss and gradients, checked by hand.
CTC_LENGTHS_NODE = "CtcLossBackward0"
CTC_TENSOR_LENGTHS_FIX = (
    "Call the overload of torch's CTC loss that keeps the lengths tensors, which compiled autograd then takes as inputs "
    "of one graph: `nll, _ = torch.ops.aten._ctc_loss.Tensor(log_probs, targets, input_lengths, target_lengths, blank, "
    "zero_infinity)`, then nn.CTCLoss's reduction by hand: `nll = torch.where(torch.isinf(nll), 0, nll)` for "
    "zero_infinity=True, `(nll / target_lengths.clamp(min=1)).mean()` for reduction='mean' (the same loss and gradients; "
    "a private op of torch's). A new set of lengths is then no new capture (Dynamo's compile of the graph breaks at the "
    "CTC backward op and recompiles once for each size that changed). Where a library computes the loss (transformers' "
    "...ForCTC models, given labels), call the model without labels and compute it so from its logits.")

# torch 2.13, checked by hand (tests/scripts/grad_reverse.py): a custom autograd.Function in a region
# compiled with backend="eager" is captured anew at every backward (12 steps: 12 captures); with
# aot_eager, or the call left out of the compiled code by torch.compiler.disable, twice.
TEMPLATE_FIX = ("Compile the code that calls the custom autograd.Function with a backend that runs AOTAutograd, "
                "torch.compile's default (inductor) or backend=\"aot_eager\": AOTAutograd traces the Function into the "
                "compiled forward's one backward node, which compiled autograd captures once. Or leave the `.apply` call "
                "out of the compiled code (a small function that calls it, decorated with torch.compiler.disable: one graph "
                "break in the forward).")
# torch 2.13, checked by hand: a Function class defined in the function that calls it, a new class at
# each call, is captured anew at every backward, compiled forward or not.
CLASS_ONCE_FIX = ("Define the autograd.Function class once, at module level, and call that class's `.apply` at every "
                  "step, passing what differs per step (a weight, a scale) as an argument of `.apply`: a class defined "
                  "inside the function called each step is a new class each time, however alike.")


def _function_class_words(cause: Cause, found: FunctionClass, items: list[str], cwd: str) -> Words:
    """A "new node" miss on a custom autograd.Function's node whose class is new at each call
    (compiled autograd keys its cache on the class): the eager backend's autograd_function_apply,
    or a class defined in the function called every step."""
    facts = cause.facts
    template = found.name == TEMPLATE_NODE
    title = (f"The backward's custom autograd.Function is {'' if found.certain else 'likely '}another class at every call "
             f"({plural(cause.count, 'recompile')})")
    why = [
        "Compiled autograd keys its cache on the class of each custom autograd.Function in the backward (torch's "
        "`_autograd_function_id`): another class, even of the same name and code, is a new node to it, and torch names the "
        f"miss so. Seen {facts['distinct_structures']} graphs of the same nodes {where(cause, cwd)}".rstrip() + ".",
        "The node torch names: " + elide(items) + ".",
    ]
    if template:
        why.append(f"`{found.name}` is the node of the class torch builds at every call of compiled code that traced a custom "
                   "autograd.Function and runs without AOTAutograd (torch.compile(..., backend=\"eager\"): its "
                   "autograd_function_apply defines a Function class, ApplyTemplate, each time it runs), so every forward "
                   "makes another one and every backward is captured anew.")
    elif found.guards:
        why.append(f"`{found.name}` is another class of the same name at each miss: a Function class defined inside a function "
                   "the training step calls is made anew at every call.")
    else:
        why.append(f"`{found.name}` is a custom autograd.Function's node, and the graphs it was captured in hold nothing "
                   "different (their graph files read alike): the likeliest difference is the Function's class, another "
                   "at each call, as a class defined inside a function the training step calls is.")
    if found.guards:
        why.append(f"Dynamo's compile of the graph's code says the same: its guard on the class it calls, "
                   f"`___check_type_id(backward_c_function, ...)` for `{found.name}`, failed at "
                   + elide(list(found.guards)) + ".")
    stability = stability_sentence(facts, "recompile of this kind")
    if stability:
        why.append(stability)
    return Words(title, why, [TEMPLATE_FIX if template else CLASS_ONCE_FIX], evidence_text(cause.evidence))


# reshape()'s backward node when it viewed its input, and the ones when it copied it (torch 2.13).
RESHAPE_VIEW = ("ReshapeAliasBackward0", "ViewBackward0")
RESHAPE_COPY = "UnsafeViewBackward0"


def _recurring_smaller_batch(facts: dict[str, Any]) -> tuple[int, int] | None:
    """(full, small) where a shape cause's sizes changed again after its one capture, every time
    from one larger value to one smaller, the smaller batch the forward met (pytorch/examples'
    siamese network over two epochs, 36 samples by 8: the forward recompiled for the first epoch's
    last batch of 4; the backward captured for 8 at the second epoch's start, and Dynamo compiled
    that graph again at its last batch of 4); None otherwise (ragged data takes more values)."""
    again = facts.get("new_sizes_after") or []
    pairs = {(before, after) for before, after in again}
    if facts.get("ca_misses_each", facts.get("ca_misses")) != 1 or len(pairs) != 1:
        return None
    (full, small), = pairs
    # The same smaller batch the forward met (its dim 0, 8 -> 4): not a padded length that took a
    # third value (an HF Trainer's batches padded to their longest: 18, 19, then 17).
    forward = {tuple(pair) for pair in facts.get("forward_smaller_batches") or []}
    return (full, small) if (full, small) in forward else None


def _size_came_back(facts: dict[str, Any]) -> tuple[int | None, int, int] | None:
    """(step, full, small) where, after a cause's sizes got smaller once, Dynamo recompiled the CA
    graph's code in a later step for a size going back from the smaller value to the larger
    (`expected 88, actual 128`): the smaller batch came between full ones. None otherwise."""
    pairs = {(e["values"][0], e["values"][1]) for e in (facts.get("sizes") or {}).values() if len(e.get("values") or ()) == 2}
    same = set(facts.get("dynamo_same_step") or ())
    for cid, step, guard in facts.get("dynamo_recompiles") or ():
        size = size_guard(guard or "")
        if cid not in same and size is not None and (size[3], size[2]) in pairs:
            return step, size[3], size[2]
    return None


# Starting compiled autograd dynamic where the backward runs outside any torch.compile'd function
# (a library's loss.backward()): torch.compile's `dynamic` never reaches compiled autograd there;
# `_enable`'s does (what `cagtool run --dynamic` does, capture/modes/mode_setup.py).
CA_ENABLE_DYNAMIC_OUTSIDE = ("`with torch._dynamo.compiled_autograd._enable(torch.compile(backend=...), dynamic=True):` around the "
                             "backward, or around the call that runs it (a Trainer's fit() or train()): the backward runs "
                             "outside any compiled function, where torch.compile(..., dynamic=True) does not reach it")


def ca_enable_dynamic_outside(source: SourceRef | None, cwd: str) -> str:
    """CA_ENABLE_DYNAMIC_OUTSIDE, naming the script's line that runs the backward where a library's
    code calls it from there (`trainer.train()`: the backward call the record holds, `via` the
    library's line), or the script's own backward call where the script makes it (no library between)."""
    if source is None or source.how != "backward_call" or not source.code:
        return CA_ENABLE_DYNAMIC_OUTSIDE
    here = f"here `{source.code.strip()}` at {display_path(source.file, cwd)}:{source.line}"
    if not source.via:
        return CA_ENABLE_DYNAMIC_OUTSIDE.replace("backward, or around the call that runs it (a Trainer's fit() or train())",
                                                 f"backward ({here})", 1)
    return CA_ENABLE_DYNAMIC_OUTSIDE.replace("(a Trainer's fit() or train())", f"({here})", 1)


def _backward_source(cause: Cause) -> SourceRef | None:
    """The line that called the backward of a cause's recompiles where one of its rows names it (a
    cause is tied to its most specific line, a Dynamo recompile's caller, which says nothing of who
    called backward); else the cause's own line."""
    return next((r.user_source for r in cause.rows if r.user_source is not None and r.user_source.how == "backward_call"),
                cause.source)


LAST_BATCH_FIX = ("If it is the last batch: drop it (DataLoader(..., drop_last=True); HF Trainer: "
                  "TrainingArguments(dataloader_drop_last=True); slicing the data by hand, skip a chunk "
                  "shorter than the others) or pad it to the full size, and the backward keeps one graph.")
# The record says no DataLoader made an iterator in the job's loop (capture/steps/hooks.py): its
# batches are slices the script makes itself (pytorch/examples' word_language_model: `get_batch`
# cuts bptt-long chunks, the last one shorter), where no drop_last applies.
HAND_SLICE_FIX = ("If it is the last batch: no DataLoader ran in this job, so it is a slice the script makes itself. "
                  "Skip a slice shorter than the others (it is then not trained on) or pad it to the full size, or trim the "
                  "data before the loop so that every slice is full: to a multiple of the slice's length, plus one row where "
                  "each slice's target is the next row (word_language_model's get_batch cuts `min(bptt, len(source) - 1 - i)` "
                  "rows: its data needs a multiple of bptt plus one); every call then has one size.")
HAND_RESHAPE_FIX = ("If a last batch of one example does it: no DataLoader ran in this job, so it is a slice the script makes "
                    "itself. Skip a slice of one example, or size the data so that no slice has one: every batch then "
                    "reshapes alike, and the backward keeps one graph.")


# The same advice where a DataLoader made the batches (or the record does not say).
LOADER_LAST_FIX_PREFIX = ("If it is a DataLoader's last batch: DataLoader(..., drop_last=True) drops it (HF Trainer: "
                          "TrainingArguments(dataloader_drop_last=True); those samples are not trained on that epoch)")
LOADER_LAST_FIX = LOADER_LAST_FIX_PREFIX + ", and every batch has one size."


# The same advice where HF Trainer made the batches (the compiled forward's call is transformers'):
# no DataLoader(...) of the script's to edit, its TrainingArguments set the loaders Trainer builds
# (transformers' Trainer._get_dataloader passes dataloader_drop_last to the evaluation's too). A
# compiled-autograd cause alone cannot tell: its backward is called through accelerate, which a
# script's own loop over its own DataLoader uses too.
LOADER_LAST_FIX_TRAINER_PREFIX = ("If it is the training loader's last batch: TrainingArguments(..., dataloader_drop_last=True) drops "
                                  "it (HF Trainer builds its DataLoaders from them, the evaluation's too: those samples are not "
                                  "trained on that epoch, nor counted in the evaluation's metrics)")
LOADER_LAST_FIX_TRAINER = LOADER_LAST_FIX_TRAINER_PREFIX + ", and every batch has one size."


def by_trainer(facts: dict[str, Any]) -> bool:
    """HF Trainer called the compiled code (the call's line is in transformers): its batches come
    from the DataLoader it builds from the script's TrainingArguments."""
    caller = facts.get("caller")
    # A model's own frame reached through transformers' code (split by graph breaks) in a loop that
    # makes its batches by hand, iterating no DataLoader, is no sign of HF Trainer.
    return caller is not None and bool(caller.via) and caller.via.startswith("transformers/") and not by_hand(facts)


def loader_last_fix(facts: dict[str, Any]) -> str:
    """The last-batch advice for the job's batches: a slice of the script's own, HF Trainer's
    loader, or a DataLoader's."""
    return HAND_SLICE_FIX if by_hand(facts) else LOADER_LAST_FIX_TRAINER if by_trainer(facts) else LOADER_LAST_FIX


def by_hand(facts: dict[str, Any]) -> bool:
    """The record says the job made no DataLoader iterator (its `dataloader_iterators` is 0): a
    smaller batch is a slice the script made itself, not a DataLoader's last."""
    return facts.get("data_loaders") == 0


RESHAPE_FIX = ("If a last batch of one example does it, drop it (DataLoader(..., drop_last=True); HF Trainer: "
               "TrainingArguments(dataloader_drop_last=True)) or size the data so that no batch has one example: every batch "
               "then reshapes alike, and the backward keeps one graph.")


def _reshape_switch(changes: list[NodeChange]) -> NodeChange | None:
    """The change where a reshape() that copied (UnsafeViewBackward0) became one that views
    (ReshapeAliasBackward0, ViewBackward0), or the other way, and nothing else: its sizes decided.
    None otherwise."""
    for change in changes:
        if change.before is None:
            continue
        before, after = change.before.split(" + "), change.after.split(" + ")
        for copied, viewed in ((before, after), (after, before)):
            if RESHAPE_COPY in copied and set(viewed) <= set(RESHAPE_VIEW) and set(copied) <= {RESHAPE_COPY, "CloneBackward0"}:
                return change
    return None


# The autograd node of a function compiled by AOTAutograd (torch.compile): its whole backward in one node.
COMPILED_FUNCTION = "CompiledFunctionBackward"


def _compiled_switch(changes: list[NodeChange]) -> NodeChange | None:
    """The change whose one side has AOTAutograd's compiled backward node and the other none: a
    forward compiled (or no longer) from that capture on. None otherwise."""
    for change in changes:
        if change.before is not None and (COMPILED_FUNCTION in change.after) != (COMPILED_FUNCTION in change.before):
            return change
    return None


def _count_list(counts: list[int]) -> str:
    """`40, 52, 44 ... 48` for the node counts of the graphs, in capture order (first few and the last)."""
    shown = [str(n) for n in counts]
    return ", ".join(shown) if len(shown) <= MAX_LISTED else ", ".join(shown[:MAX_LISTED - 1]) + " ... " + shown[-1]


def _new_backward_words(cause: Cause, call: SourceRef, cwd: str) -> Words:
    change = cause.facts["changes"][0]
    at = f"step {change.step}" if change.step is not None else change.compile_id
    # Counted as a recompile, as torch's cache miss is (`summary`, `gate --max-recompiles`): said so.
    title = f"A backward called from a new line: its first graph ({plural(cause.count, 'recompile')}, a first capture)"
    why = [f"At {at} backward was called at {format_source(call, cwd)}, a line no earlier backward came from: its graph is "
           "another graph than the ones captured before (their nodes differ), so compiled autograd captures it once. "
           "It is not the same backward changing between steps."]
    stability = stability_sentence(cause.facts, "new structure")
    if stability:
        why.append(stability)
    fix = ["Nothing to fix: each backward call's graph is captured once and reused."]
    return Words(title, why, fix, evidence_text(cause.evidence))


def _other_backward_words(cause: Cause, calls: list[SourceRef], cwd: str) -> Words:
    lines = ", ".join(format_source(c, cwd) for c in calls)
    title = f"A step calls backward more than once: each call is its own graph ({plural(cause.count, 'recompile')}, one first capture per call)"
    why = [
        f"Compiled autograd caches one graph per backward graph it runs. Step {cause.steps[0]} called backward again at {lines}, "
        "on another graph than its first call's: a cache miss and a new capture, once per call, reused by every later step.",
        "Nothing varies between steps: it is not a recompile to remove, and `gate --max-recompiles` does not count it "
        "(nor do the summary's CA recompiles).",
    ]
    if cause.facts.get("stepped_between"):
        # Summed, the later loss's gradients would reach the parameters the optimizer stepped in
        # between (dcgan: errG.backward() after optimizerD.step() also fills netD's .grad).
        why.append(f"An optimizer stepped between them in step {cause.steps[0]} (a GAN's discriminator, then its generator's "
                   "backward): the calls cannot be one backward.")
        fix = ["Nothing to fix: each call's graph is captured once and reused. Do not sum these losses: an optimizer "
               "steps between the calls, and one backward would change what it steps on."]
    elif cause.facts.get("grad_call"):
        # torch.autograd.grad returns its gradients (a gradient penalty's, made with create_graph,
        # are part of the next loss): no sum of losses computes them.
        fix = ["Nothing to fix: each call's graph is captured once and reused. One of the calls is torch.autograd.grad, whose "
               "gradients are returned rather than accumulated into .grad (with create_graph=True they feed the later loss): "
               "the calls cannot be one backward."]
    else:
        fix = ["Nothing to fix. To capture one graph a step, sum the losses and call backward once (`(l1 + l2).backward()` "
               "computes the same gradients as two backward calls into the same .grad)."]
    return Words(title, why, fix, evidence_text(cause.evidence))


def _hook(cause: Cause, cwd: str) -> Words:
    facts = cause.facts
    parts = []
    for diff in facts["hook_diffs"]:
        change = []
        if diff["added"]:
            change.append("added " + ", ".join(diff["added"]))
        if diff["removed"]:
            change.append("removed " + ", ".join(diff["removed"]))
        what = " and ".join(change) or "a hook changed"
        parts.append(f"{diff['compile_id']} at step {'?' if diff['step'] is None else diff['step']}: {what} (vs {diff['previous_graph'] or 'none'})")
    row = cause.rows[0]
    title = f"A backward hook was added or removed during the run ({plural(cause.count, 'recompile')})"
    why = [
        f"The key of {node_label(row.node, row.node_call)} changed{_key_size_text(row)}: "
        "hooks are part of the graph compiled autograd caches, so a new set of hooks is a new graph.",
        "Hooks per graph: " + elide(parts) + ".",
    ]
    stability = stability_sentence(facts, "hook change")
    if stability:
        why.append(stability)
    named: list[NamedHook] = facts.get("named_hooks") or []
    why.extend(_named_hook_sentence(hook, cwd, facts.get("eager_from") or {}) for hook in named[:MAX_LISTED])
    if len(named) > MAX_LISTED:
        why.append(f"And {plural(len(named) - MAX_LISTED, 'other hook function')}.")
    why.append("Removing a hook returns to an already cached graph (no recompile); adding a new one costs a capture each time.")
    fix = _named_hook_fixes(named[:MAX_LISTED], cwd) or [
        "Register hooks once, before the first backward, and keep them. " + _SWITCH_WITH_A_TENSOR]
    return Words(title, why, fix, evidence_text(cause.evidence))


# torch 2.13, checked by hand (a clamp hook on each parameter from step 3): registered before
# the loop behind a Python flag, the CA recompile becomes a Dynamo recompile of the CA graph
# (compiled autograd traces the hook; Dynamo guards the flag); behind a tensor bound that is
# inf until step 3 (`bound.fill_(0.1)` then), no recompile and the same loss.
_SWITCH_WITH_A_TENSOR = (
    "A hook meant to act only from some step on: switch what it does with a tensor it reads (a clamp bound that is "
    "inf until then, set with `bound.fill_(...)`), not with a Python flag: compiled autograd traces the hook, and "
    "Dynamo guards a flag it reads, so flipping the flag recompiles the backward too.")

_HOOK_KINDS = {
    "tensor_pre_hook": "a tensor hook (`register_hook`)",
    "post_acc_grad_hook": "a post-accumulate-grad hook (`register_post_accumulate_grad_hook`)",
    "pre_hook": "a pre-hook of an autograd node (`grad_fn.register_prehook`)",
    "post_hook": "a hook of an autograd node (`grad_fn.register_hook`)",
    "unpack_hook": "a saved-tensor unpack hook",
}


def hook_label(hook: NamedHook, cwd: str) -> str:
    """`the hook `clip_grad` (defined at train.py:42)`; a lambda by its line: `the lambda at train.py:13`.
    A function's line is its `def`: where it is registered is not known (docs/torch-internals.md,
    "Where a hook is registered")."""
    where = f"{short_file(hook.file, cwd)}:{hook.line}" if hook.file else ""
    if hook.function.endswith("<lambda>"):
        outer = hook.function[: -len("<lambda>")].replace(".<locals>", "").rstrip(".")
        return f"the lambda at {where or '?'}" + (f" (in `{outer}`)" if outer else "")
    return f"the hook `{hook.function}`" + (f" (defined at {where})" if where else "")


# The call that registers each kind of hook, as the user writes it.
_REGISTER_CALLS = {
    "tensor_pre_hook": "register_hook",
    "post_acc_grad_hook": "register_post_accumulate_grad_hook",
    "pre_hook": "register_prehook",
    "post_hook": "register_hook",
}


def registration_call(hook: NamedHook) -> str:
    """"the `register_hook` call given `clip_grad`": the call that registers a named function, to look
    for in the step's code; "" for a lambda (its own line is the call) or a hook of no known kind."""
    if hook.function.endswith("<lambda>") or not hook.file:
        return ""
    method = "register_full_backward_hook" if hook.module else next((_REGISTER_CALLS[t] for t in hook.hook_types if t in _REGISTER_CALLS), "")
    return f"the `{method}` call given `{hook.function.rsplit('.', 1)[-1]}`" if method else ""


def _hook_kind(hook: NamedHook) -> str:
    if hook.module:
        return f"a full backward hook of a `{hook.module}` module (`register_full_backward_hook` or its pre-hook)"
    return " and ".join(_HOOK_KINDS.get(t, t) for t in hook.hook_types) or "a hook"


def _piles_up(hook: NamedHook) -> bool:
    """Added again and again, one more each time: registered in the loop and never removed."""
    return len(hook.counts) > 1 and all(b > a for a, b in zip(hook.counts, hook.counts[1:]))


def _steps_text(steps: list[int | None]) -> str:
    known = sorted({s for s in steps if s is not None})
    return ("step " if len(known) == 1 else "steps ") + step_list(known) if known else "a step of unknown number"


def _named_hook_sentence(hook: NamedHook, cwd: str, eager_from: dict[int, str] | None = None) -> str:
    label = hook_label(hook, cwd)
    label = label[0].upper() + label[1:]
    # A lambda's line is its registration, as a rule; a function's is its `def`, which says nothing more.
    code = f" (`{hook.code}`)" if hook.code and hook.function.endswith("<lambda>") else ""
    parts = []
    if hook.added:
        # A module's hook runs through two of torch's hooks on the module's node: its count says nothing.
        many = f": {hook.counts[-1]} hooks of it in the new graph" if hook.counts and hook.counts[-1] > 1 and not hook.module else ""
        limit = [(step, eager_from[step]) for step in hook.added if step in (eager_from or {})]
        if limit and len(hook.added) == 1:
            step, compile_id = limit[0]
            parts.append(f"first appears in the graph captured at step {step}, the step Dynamo's recompile limit sent a frame to "
                         f"eager ({compile_id}): a module's hooks ran inside the compiled forward until then, so the graphs before "
                         "do not show it, and it may be registered earlier")
        else:
            parts.append(f"is registered on {_steps_text(hook.added)}{many}")
    if hook.removed:
        parts.append(f"is removed on {_steps_text(hook.removed)}")
    sentence = f"{label}{code}, {_hook_kind(hook)}, " + " and ".join(parts) + "."
    if _piles_up(hook):
        sentence += (" Each registration adds one more (none is removed), and compiled autograd's key counts the hooks "
                     "on each node: a new graph every time.")
    call = registration_call(hook)
    if call and hook.added:
        sentence += (f" That line is its `def`, not where it is registered: look in the training loop for {call} that "
                     f"runs on {_steps_text(hook.added)} (cagtool reads the hooks a graph calls, not the line that registered them).")
    return sentence


def _named_hook_fixes(hooks: list[NamedHook], cwd: str) -> list[str]:
    """One fix per hook that piles up or was only removed; one for the hooks registered once, together."""
    fixes: list[str] = []
    once = [h for h in hooks if h.added and not _piles_up(h)]
    if once:
        labels = [hook_label(h, cwd) + (f" (`module.register_full_backward_hook(...)` on the `{h.module}`)" if h.module and not registration_call(h) else "")
                  for h in once]
        them = "it" if len(once) == 1 else "them"
        calls = [c for h in once if (c := registration_call(h))]
        move = f" (move {_and_list(calls)} above the training loop)" if calls else ""
        fixes.append(f"Register {_and_list(labels)} once, before the first backward, and keep {them}{move}. " + _SWITCH_WITH_A_TENSOR)
    for hook in hooks:
        label = hook_label(hook, cwd)
        if hook.added and _piles_up(hook):
            call = registration_call(hook)
            move = f" (move {call} out of the loop)" if call else ""
            fixes.append(f"Register {label} once, before the training loop{move}, and keep it: registered on every step it piles up "
                         "(every copy runs at each backward) and each new count is a new graph. If it must be registered in the "
                         "loop, keep its handle and call `handle.remove()` after the backward: its graph is then captured once and reused.")
        elif not hook.added:
            fixes.append(f"Removing {label} on {_steps_text(hook.removed)} returns the backward to a graph without it, captured "
                         "once and then reused; to save even that capture, keep it registered and switch it off with a tensor it reads.")
    return fixes


def _and_list(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _key_size_text(row: Any) -> str:
    """` (key size 33, previous 22)`; nothing when torch gave no key sizes (an imported log
    without compiled_autograd_verbose: the miss was inferred from the graphs)."""
    if row.key_size is None:
        return " (inferred from the graph diff)" if any(m.startswith("inferred from the graph diff") for m in row.messages) else ""
    sizes = ", ".join(str(s) for s in row.previous_key_sizes) or "none"
    return f" (key size {row.key_size}, previous {sizes})"


def _grad_defined(cause: Cause, cwd: str) -> Words:
    row = cause.rows[0]
    title = f".grad switched between None and a tensor ({plural(cause.count, 'recompile')})"
    why = [
        f"The key of {node_label(row.node, row.node_call)} changed{_key_size_text(row)} "
        "with no change in hooks: the parameter's .grad was None in one backward and defined in another, "
        "and AccumulateGrad compiles differently for each.",
    ]
    stability = stability_sentence(cause.facts, "such miss")
    if stability:
        why.append(stability)
    fix = []
    if cause.facts.get("grad_warmup_per_graph") and not (cause.count == 1 and cause.facts.get("grad_warmup")):
        calls = cause.facts.get("backward_calls") or []
        graphs = (f"{plural(cause.count, 'backward graph')}" + (f", called at {', '.join(format_source(c, cwd) for c in calls)}"
                                                                  if calls else ""))
        title = (f".grad made at the first step, then kept: each backward graph captured once more "
                 f"({plural(cause.count, 'recompile')})")
        why = [
            f"The key of {node_label(row.node, row.node_call)} changed{_key_size_text(row)} with no change in hooks. "
            "In the first step each backward found its parameters' .grad None and AccumulateGrad made it; from the next "
            ".grad is kept as a tensor (zero_grad(set_to_none=False) zeroes it in place; or gradients accumulate), and "
            "AccumulateGrad adding into an existing .grad is another graph to compiled autograd. Each backward graph "
            f"warms up once: {graphs}.",
            "torch counts each as a capture (counters['compiled_autograd']['captures']); `gate --max-recompiles` counts "
            "them too (it leaves out only a first miss that is a warm-up).",
        ]
        stability = stability_sentence(cause.facts, "such miss")
        if stability:
            why.append(stability)
        fix = ["Nothing to fix: one extra capture per backward graph, then cached. Where the script zeroes with "
               "zero_grad(set_to_none=False), the default zero_grad() (set_to_none=True) leaves .grad None at each step's "
               "backward, as at the first, and skips these captures."]
        return Words(title, why, fix, evidence_text(cause.evidence))
    if cause.count == 1 and cause.facts.get("grad_warmup") and cause.facts.get("warmup_in_first_step"):
        # Gradient accumulation (Lightning's accumulate_grad_batches, HF's gradient_accumulation_steps):
        # with .grad cleared to None every step, both graphs are used every step, not once.
        why.append(f"It came in step {row.step}, the first capture's, at a later backward call of the step (gradients accumulate "
                   "over several backward calls a step): the step's first backward found .grad None and made it, the next added "
                   "into it. Both graphs stay cached, one for a backward that finds .grad None and one for a backward that adds "
                   "into it: where zero_grad() leaves .grad None at every step (set_to_none=True, the default), every step uses "
                   "both. Each was captured once: harmless, and `gate --max-recompiles ca:N` does not count it.")
    elif cause.count == 1 and cause.facts.get("grad_warmup"):
        why.append("Once (the first backward sees .grad None, the next accumulates) this costs one extra graph "
                   "and is harmless: `gate --max-recompiles ca:N` does not count it.")
    elif (began := cause.facts.get("accumulation_from")) is not None:
        why.append(f"Gradient accumulation began at step {began}: one backward call a step before it, several from it. A step's "
                   "first backward finds .grad None (zero_grad() left it so) and makes it; the next adds into it, which "
                   "AccumulateGrad compiles as another graph.")
        fix.append("Nothing to fix: from then on both graphs are cached and every step uses both; it is what accumulating "
                   "costs compiled autograd, once.")
    else:
        fix.append("Clear gradients the same way every step: optimizer.zero_grad(set_to_none=True) "
                   "(the default) on every step, not only on some.")
    return Words(title, why, fix, evidence_text(cause.evidence))


def _shapes(cause: Cause, cwd: str) -> Words:
    facts = cause.facts
    # Sizes with the same owner and the same values are described together: sizes[0-3] of X: 10, 100.
    together: dict[tuple, list[int]] = {}
    unknown: list[int] = []  # the sizes whose earlier value no recorded graph shows: said once, after the list
    unread: list[int] = []  # ... of them, those the graph's code reads not at all (its capture says so)
    for index, entry in facts["sizes"].items():
        owner = f" of {node_label(entry['node'], entry['node_call'])}" if entry["node"] else ""
        values = ", ".join(str(v) for v in entry["values"]) or "not recorded"
        if entry.get("previous_missing"):
            (unread if entry.get("unread") else unknown).append(index)
        together.setdefault((owner, values), []).append(index)
    described = [
        f"sizes[{step_list(indices).replace(', ', ',')}]{owner}: {values}" for (owner, values), indices in together.items()
    ]
    earlier = ""
    if unread:
        earlier += (f" No node of the graph reads sizes[{step_list(sorted(unread)).replace(', ', ',')}]: torch holds "
                    f"{'it' if len(unread) == 1 else 'them'} in its cache key only, so no graph's code shows "
                    f"{'its earlier value' if len(unread) == 1 else 'their earlier values'}.")
    if unknown:
        which = "value" if len(unknown) == 1 else "values"
        earlier += (f" The earlier {which} of sizes[{step_list(sorted(unknown)).replace(', ', ',')}] {'is' if len(unknown) == 1 else 'are'} "
                    "not in the record: no recorded graph's code shows them, as for a size in the cache key that no node reads.")
    total = sum(facts["changed_per_recompile"])
    title = f"Tensor shapes changed ({plural(cause.count, 'recompile')}, {plural(total, 'changed size')})"
    if facts["dynamo_recompiles"]:
        title = (f"Tensor shapes changed ({plural(cause.count, 'recompile')}: {plural(facts['ca_misses'], 'CA cache miss', 'CA cache misses')} "
                 f"with {plural(total, 'changed size')}, {plural(len(facts['dynamo_recompiles']), 'Dynamo recompile')} of the graph)")
    calls = facts.get("calls") or []
    if calls:
        each = "one" if facts["ca_misses_each"] == 1 else str(facts["ca_misses_each"])
        title = (f"Tensor shapes changed ({plural(cause.count, 'recompile')}: {plural(facts['ca_misses'], 'CA cache miss', 'CA cache misses')}, "
                 f"{each} for each backward call, with {plural(total, 'changed size')}"
                 + (f", {plural(len(facts['dynamo_recompiles']), 'Dynamo recompile')} of the graphs)" if facts["dynamo_recompiles"] else ")"))
    why = [
        "Compiled autograd started with static sizes; when a size changed it recompiled once and "
        "made the changed sizes dynamic (symbolic).",
    ]
    if calls:
        lines: dict[str, list[str]] = {}
        for file, line in calls:
            lines.setdefault(display_path(file, cwd), []).append(str(line))
        at = "; ".join(f"{file}:{_and_list(numbers)}" for file, numbers in lines.items())
        why.append(f"One change of the data met each of the step's {len(calls)} backward calls ({at}): each call's graph was "
                   "captured again for the same sizes, one cause. What follows is the first call's graph; the others' sizes "
                   "changed alike.")
    why.append("Sizes and the values seen: " + elide(described) + "." + earlier)
    in_key = facts.get("dynamic_in_key") or {}
    dynamic = [f"{g} takes {plural(n, 'dynamic size')}" + (f" (torch holds {in_key[g]} dynamic in its cache key: no node reads the others)" if g in in_key else "")
               for g, n in facts["dynamic_graphs"].items()]
    if dynamic:
        why.append("Graphs made: " + elide(dynamic) + ".")
    if facts["dynamo_recompiles"]:
        same = set(facts.get("dynamo_same_step") or ())
        listed = {True: [], False: []}
        for cid, step, guard in facts["dynamo_recompiles"]:
            listed[cid in same].append(f"{cid} at step {'?' if step is None else step}" + (f" (`{guard}`)" if guard else ""))
        if listed[True]:
            why.append("In the same step Dynamo recompiled code that the new graph runs and that it had compiled for the earlier "
                       "sizes (" + elide(listed[True]) + "): the same change reaching it, not another one. Dynamo compiles what a "
                       "CA graph calls (a custom autograd Function's backward, as a reentrant checkpoint's, through torch's "
                       "call_backward) for the sizes of its first call.")
        if listed[False]:
            why.append(
                f"Dynamo then recompiled the code of {'those graphs' if calls else 'that graph'} when the sizes changed again ("
                + elide(listed[False])
                + "): it compiles a CA graph for the sizes of its first call."
            )
    pieces = _graph_pieces(facts["dynamo_recompiles"])
    if pieces:
        why.append(pieces_sentence(pieces))
    # Every changed size got smaller, once: a shorter batch, as a last batch is (wlm's last bptt chunk,
    # a DataLoader's last batch without drop_last).
    again = [f"{before} -> {after}" for before, after in facts.get("new_sizes_after", [])]
    # Sizes that changed again later are no last batch, however the first change went.
    # A size torch holds in its cache key only (no node reads it) shows its new value alone: it
    # neither shows nor contradicts the change (a library's CompiledFunctionBackward sizes beside the
    # loss's, under Lightning).
    known = [e["values"] for e in facts["sizes"].values() if len(e["values"]) != 1]
    shorter = (facts.get("ca_misses_each", facts.get("ca_misses", cause.count)) == 1 and not facts["repeated"] and bool(known) and not again
               and all(len(values) == 2 and values[1] < values[0] for values in known))
    recurring = _recurring_smaller_batch(facts)
    if recurring is not None:
        full, small = recurring
        why.append(f"The sizes go back and forth between two values ({full} and {small}, then {full} -> {small} again): a "
                   "smaller batch that comes back, as each epoch's last batch does when the data's length is not a multiple "
                   f"of the batch size ({small} rows left), the full batches of the next epoch between them."
                   + (" No DataLoader ran in this job: that batch is a slice the script makes itself." if by_hand(facts) else ""))
    elif again and facts.get("ca_misses_each", facts.get("ca_misses")) == 1:
        why.append("The sizes vary from batch to batch" + (f" (then {', '.join(dict.fromkeys(again))})" if again else "")
                   + ", not only in a last batch: a sequence padded to each batch's longest, or ragged data.")
    stability = stability_sentence(facts, "shape recompile")
    if shorter:
        why.append("Every size that changed got smaller, once: a batch (or sequence chunk) shorter than the ones before it, as the "
                   "last one is when the data's length is not a multiple of the batch size or chunk length"
                   + (f"; it came at the run's last step, {facts['last_step']}." if facts.get("stabilised") is False
                      and facts.get("recompiling_steps", 3) < 3 else "."))
        stability = "" if facts.get("stabilised") is False else stability
        if facts.get("stabilised") and facts.get("quiet_steps_after", 0) > 1 and not facts["dynamo_recompiles"]:
            # Not told apart from a last batch (no step records which graph it ran; a return to the
            # sizes before is seen only where Dynamo recompiles the graph for it): a phase of other
            # shapes, e.g. forward-forward's next layer, trained in turn from then on.
            why.append(f"Or, with {facts['quiet_steps_after']} steps after it and no recompile, the sizes changed for good at step "
                       f"{facts['last_recompile_step']}: a phase of other shapes (the next layer trained in turn, as layer-wise "
                       "training does; another sequence length from then on), whose one recompile needs no fix.")
    if stability:
        why.append(stability)
    fix = []
    last_batch_fix = HAND_SLICE_FIX if by_hand(facts) else LAST_BATCH_FIX
    back = _size_came_back(facts) if shorter else None
    if back is not None and not by_hand(facts):
        # The record shows the smaller batch between full ones (the next epoch's first step): a last
        # batch for certain, not "if".
        step, full, small = back
        why.append(f"The size came back ({small} -> {full} at step {step}, the graph's code compiled again for it): the smaller "
                   "batch came between full ones, as each epoch's last batch does.")
        last_batch_fix = LAST_BATCH_FIX.replace("If it is the last batch: drop it", "It is the last batch: drop it", 1)
    if shorter and facts.get("stabilised") and facts.get("quiet_steps_after", 0) > 1 and not facts["dynamo_recompiles"]:
        # Both readings stand (the why above): the fix says what to do in each.
        fix.append(f"{last_batch_fix} Or, if the sizes changed for good at step {facts['last_recompile_step']} (a phase of other "
                   "shapes: the next layer trained in turn, another sequence length from then on): nothing to fix, the one "
                   "recompile is all it costs.")
    elif shorter or recurring is not None:
        fix.append(last_batch_fix)
    if facts["repeated"] and not facts.get("stabilised") and recurring is None:
        fix.append("Shapes keep changing in new ways: pad or bucket inputs to a few fixed sizes.")
    # Not maybe_mark_dynamic on the model's inputs: compiled autograd's first graph takes the
    # sizes its nodes saved as constants whatever the forward did (torch 2.13, checked by hand: a
    # ragged last batch marked so still captures twice). torch.compile passes its `dynamic` to
    # compiled autograd where the config flag turns it on (eval_frame.py, `call_compiled_autograd`).
    fix.append(
        "Start compiled autograd dynamic to skip the static first graph: `cagtool run --dynamic`; in the job, "
        + (ca_enable_dynamic_outside(_backward_source(cause), cwd) + "." if facts.get("backward_outside_compiled") and not facts.get("ca_by_cagtool_only") else
           "compiled_autograd._enable(compiler, dynamic=True)"
           + (" (the config flag never turns compiled autograd on in this job: see the note above)."
              if facts.get("ca_by_cagtool_only") else
              ", or, where torch._dynamo.config.compiled_autograd turns it on, torch.compile(..., dynamic=True) on the compiled "
              "function that runs backward."))
        + (" For a last batch this moves the recompile more than it removes it: Dynamo compiles the dynamic graph for the "
           "sizes of its first call and recompiles it once for the shorter batch (re-runs of jobs with a last batch: CA "
           "recompiles 1 -> 0, Dynamo's 0 -> 1 in one epoch, 1 -> 1 in several); dropping or padding the batch removes it."
           if shorter else "")
    )
    if facts["dynamo_recompiles"]:
        # torch 2.13, by --verify (the shape loop, a length varying per batch): compiled autograd
        # started dynamic leaves Dynamo's recompile of its graph (1 -> 1); the graph's inputs named in
        # TORCH_COMPILE_DYNAMIC_SOURCES remove it (1 -> 0), and the two together both (2 -> 0).
        fix.append("Dynamo's recompile of the graph's code is not compiled autograd's: starting compiled autograd dynamic leaves "
                   "it. Naming the graph's size inputs in TORCH_COMPILE_DYNAMIC_SOURCES (`L['sizes'][i]`, as torch's own PGO "
                   "suggestion lists them where torch made one) compiles that code dynamic from the start; `--verify` measures "
                   "it alone (torch-pgo) and with compiled autograd started dynamic (torch-pgo-ca-dynamic).")
    if pieces and facts.get("checkpoint_unpack_breaks"):
        fix.append(facts.get("checkpoint_fix") or CHECKPOINT_INSIDE_FIX)
    if not facts["repeated"] and not pieces:
        why.append("A single recompile on the first change is expected and usually cheap.")
    return Words(title, why, fix, evidence_text(cause.evidence))


def pieces_sentence(pieces: int) -> str:
    """Why `pieces` recompiles of a CA graph's code came in one step (_graph_pieces)."""
    return (f"{pieces} of those recompiles came in one step: the graph's code is split by graph breaks into pieces "
            "(`___stack0`, `call_hook`: values Dynamo carries across a break), each compiled for the sizes of its "
            "first call, so one change of size recompiles every piece. `cagtool summary` names the breaks; under "
            "compiled autograd a non-reentrant activation checkpoint's unpack hook (torch.utils.checkpoint, "
            "use_reentrant=False) is one at every tensor it saved.")


def _graph_pieces(dynamo: list[tuple[str, int | None, str]]) -> int:
    """How many of a CA graph's code recompiles in one step were pieces of it split by graph breaks
    (a guard on `___stack0` or `call_hook`, what Dynamo carries across a break), where a step has
    more than one: 0 otherwise."""
    per_step: dict[int | None, list[str]] = {}
    for _, step, guard in dynamo:
        size = size_guard(guard)
        per_step.setdefault(step, []).append(size[0] if size is not None else "")
    most = max(per_step.values(), key=len, default=[])
    return len(most) if len(most) > 1 and any(n.startswith(("___stack", "call_hook")) for n in most) else 0


# Not mark_dynamic: it makes any specialization of the dimension an error, and under compiled
# autograd the backward graph's copy of a saved tensor specializes it (ConstraintViolationError on
# `L['inputs'][N]` at the first backward, torch 2.13: docs/torch-internals.md).
MAYBE_MARK_DYNAMIC = "torch._dynamo.maybe_mark_dynamic(tensor, dim)"


_REQUIRES_GRAD_OF = re.compile(r"tensor '(?P<name>.+)' requires_grad mismatch\. expected requires_grad=(?P<expected>\d)")


def requires_grad_ways(facts: dict[str, Any]) -> list[str]:
    """"frozen" / "unfrozen" for each requires_grad guard that failed, in order, once each: torch's
    `expected requires_grad=1` is what the compiled entry had, so the parameter no longer requires
    grad (frozen); `=0`, it now does (unfrozen)."""
    found = [m for _, g in facts.get("failures") or [("", facts.get("guard", ""))] if (m := _REQUIRES_GRAD_OF.search(g))]
    return list(dict.fromkeys("unfrozen" if m["expected"] == "0" else "frozen" for m in found))


def module_attribute(name: str) -> bool:
    """A size guard's tensor is one the module holds (`self.src_mask`), not an argument of the call."""
    return name.startswith(("self.", "self[", "L['self']"))


# torch 2.13, checked by hand (a DataLoader's last batch of one row, the forward split by a graph
# break): maybe_mark_dynamic, dynamic=True and TORCH_COMPILE_DYNAMIC_SOURCES each leave a recompile
# per frame at the batch of one, failing `2 <= x.size()[0]`; mark_unbacked on the inputs removes the
# first frame's, not the frame after the break (it takes a value computed inside); drop_last, all.
_ZERO_ONE = ("Dynamo specialises a size of 0 or 1 even in a dynamic dimension (a dynamic size carries the guard "
             "`2 <= size`), so a dimension marked dynamic, dynamic=True or TORCH_COMPILE_DYNAMIC_SOURCES leave this recompile: "
             "that size gets a graph of its own, compiled once and cached.")
_ZERO_ONE_FIXES = [LOADER_LAST_FIX_PREFIX + ", or pad the "
                   "data to a multiple of batch_size: every batch then has one size, the only fix that removes this recompile "
                   "in every frame.",
                   "torch's hint, torch._dynamo.decorators.mark_unbacked(tensor, dim) in place of maybe_mark_dynamic, compiles "
                   "the size with no 0/1 specialisation in the frame whose inputs it marks; a frame after a graph break takes "
                   "values computed inside, which no mark reaches, and recompiles all the same."]


def smaller_batch(guard: str) -> tuple[str, int, int] | None:
    """(tensor, before, after) when a size guard failed on dim 0 getting smaller: a batch smaller
    than the ones before it (a DataLoader's last batch, when the data does not divide evenly)."""
    size = size_guard(guard)
    if size is None or size[1] != 0 or size[3] >= size[2]:
        return None
    return size[0], size[2], size[3]


def grad_off_words(facts: dict[str, Any]) -> str:
    """How the script turned grad mode off for the evaluation, where its compile's guard tree says
    (RecompileTable.inference_modes), else both ways it could have."""
    return {True: "torch.inference_mode()", False: "torch.no_grad()"}.get(facts.get("inference_mode"), "torch.no_grad() or torch.inference_mode()")


def _module_words(train_eval: tuple[str, str, bool]) -> str:
    name, cls, _ = train_eval
    kind = f" (a {cls})" if cls else ""
    return f"submodule `{name}`{kind}" if name else f"the compiled module{kind}"


def train_eval_label(train_eval: tuple[str, str, bool]) -> str:
    if train_eval[2]:
        return f"{_module_words(train_eval)} was switched back to train()"
    return f"{_module_words(train_eval)} was switched to eval()"


def guard_label(facts: dict[str, Any], hook_named: bool = True) -> str:
    """What a Dynamo cause's failing guard is on, in a few words, from its kind (torch's reason)."""
    kind, guard = facts.get("kind", ""), facts.get("guard", "")
    if facts.get("inside_capture"):
        return "torch's frames compiled inside compiled autograd's captures (nothing to change in your code)"
    if facts.get("another_optimizer"):
        return "another optimizer's first step()"
    if facts.get("optimizer_state"):
        return "the optimizer's state was filled by its first step()"
    if facts.get("optimizer_lr"):
        if any(_type_only(c) for c in facts.get("value_changes") or []):
            return "the learning rate changed (an LR scheduler's step), first its type"
        return "the learning rate changed (an LR scheduler's step)"
    if facts.get("other_module_by_guards") and facts.get("wrapped_optimizer_step"):
        return "the compiled optimizer step() runs through the compiled modules' shared frame"
    if facts.get("other_module_by_guards") and facts.get("wrapped_function"):
        return "a compiled function of torch's runs through the compiled modules' shared frame"
    if facts.get("other_module_by_guards"):
        return f"another compiled module's first call (a {facts['other_module_by_guards'][-1][1]})"
    if facts.get("other_instance"):
        return f"the compiled method's `self` is another {_instance_words(facts)[0]}"
    if kind == GUARD_GRAD_MODE and facts.get("reentrant_recompute"):
        return (f"the grad mode changed: a reentrant checkpoint's recompute of `{facts['reentrant_recompute']}` in the "
                "backward, with grad on, after its forward under no_grad")
    if kind == GUARD_GRAD_MODE:
        off = grad_off_words(facts)
        label = {True: f"the grad mode changed (a call with grad on after one under {off}, as training after an evaluation)",
                 False: f"the grad mode changed (a call under {off}, as in an evaluation)"}.get(
                     facts.get("grad_mode_after"), f"the grad mode changed (calls with grad on and under {off}, as training and evaluation)")
        also = _with_grad_mode(guard)
        return f"{label}, and {', '.join(f'`{part}`' for part in also)} with it" if also else label
    if kind == GUARD_GLOBAL_STATE:
        state = guard.split(':', 1)[-1].strip() or guard
        if "autocast" in state:
            return f"autocast was turned on or off around the compiled call (`{state}`)"
        return f"global state changed (`{state}`)"
    if kind == GUARD_REQUIRES_GRAD:
        ways = requires_grad_ways(facts)
        was = f" ({', then '.join(ways)})" if ways else ""
        if facts.get("requires_grad_inputs"):
            return f"an input's requires_grad changed (`{'`, `'.join(facts['requires_grad_inputs'])}`)"
        return f"a parameter's requires_grad changed{was}"
    if kind == GUARD_LENGTH and module_hooks_list(facts.get("container")):
        return f"the number of a module's full backward hooks changed (`{facts['container']}`, torch's list of them)"
    if kind == GUARD_LENGTH:
        container = f"`{facts['container']}`" if facts.get("container") else "a Python list"
        where = f" in the backward hook `{facts['function']}`" if hook_named and facts.get("hook") and facts.get("function") else ""
        return f"the length of {container} changed{where}"
    if facts.get("train_eval"):
        return train_eval_label(facts["train_eval"])
    if facts.get("optional_argument"):
        return f"`{facts['optional_argument']}` is passed as None in some calls and as a tensor in others (an optional argument)"
    if facts.get("inference_switch") is not None:
        return ("a call under torch.inference_mode() after calls outside it (its tensors carry no autograd keys)" if facts["inference_switch"]
                else "a call outside torch.inference_mode() after calls under it (its tensors carry autograd keys again)")
    if kind == GUARD_VALUE:
        return f"a Python value changed (`{guard}`)"
    if kind == GUARD_NONE:
        source = none_guard(guard) or guard
        set_by = " by the first call" if any(c.assigned for c in facts.get("value_changes") or []) else ""
        changes = facts.get("value_changes") or []
        holder = f" of a {changes[0].owners[-1][1]}" if changes and changes[0].owners else ""
        what = "attribute" if source_prefixes(source) else "value"
        return f"`{source}` was None, then set{set_by} (a Python {what}{holder}, not a tensor)"
    if kind == GUARD_ID and (index := hook_code_guard(guard)) is not None:
        return f"another hook function ran in the compiled-autograd graph (`hooks[{index}]`, a function of other code)"
    if kind == GUARD_ID:
        return "a different object reached the compiled code"
    if kind == GUARD_TYPE and (tensor_type := tensor_type_guard(guard)) is not None and facts.get("hook_runner"):
        now = f" ({tensor_type[1]} now)" if tensor_type[1] else ""
        return f"torch's call_hook, which runs the graph's hooks, was given another type of tensor{now}"
    if kind == GUARD_TYPE and (tensor_type := tensor_type_guard(guard)) is not None:
        now = f" ({tensor_type[1]} now)" if tensor_type[1] else ""
        return f"the tensor passed as `{tensor_type[0]}` is of another type than when compiled{now}"
    if kind == GUARD_TYPE and (function_class := backward_function_class(guard)) is not None:
        return f"the custom autograd.Function the graph calls is another class of the same name (`{function_class}`)"
    if kind == GUARD_TYPE:
        return "a value of another type reached the compiled code"
    if kind == GUARD_TENSOR_META:
        return "a tensor's dtype or device changed"
    if kind == GUARD_SIZE and _RANK_MISMATCH.search(guard) and facts.get("hook_runner"):
        return "torch's call_hook, which runs the graph's hooks, was given a tensor with another number of dimensions"
    if kind == GUARD_SIZE and _RANK_MISMATCH.search(guard):
        return "a tensor with another number of dimensions reached the compiled code"
    if kind == GUARD_SIZE:
        return "a tensor's size changed"
    if _MODULE_HOOKS.search(guard) and _HOOK_READS.search(guard):
        return f"a value a module's hook reads changed (`{guard}`)"
    if _MODULE_HOOKS.search(guard):
        return f"a module's hooks changed (`{guard}`): a hook registered again"
    if kind == GUARD_OTHER and facts.get("value_changes"):
        return f"a Python value changed (`{guard}`)"
    if facts.get("names"):
        return f"a guard on the Python value {_names_text(facts['names'])} failed (`{guard}`)"
    if size_bound(guard) is not None:
        return f"a dynamic size left the range its graph was compiled for (`{guard}`)"
    if size_relation(guard):
        return f"a branch on tensor sizes went the other way (`{guard}`)"
    return "a Dynamo guard failed"


# Dynamo's guard on a relation of sizes it took dynamic, from a branch of the code on them
# (word_language_model's `if self.src_mask.size(0) != len(src):`, torch 2.13: `self.src_mask.size()[0]
# != src.size()[0]`): the side of the branch the sizes took when it compiled.
_SIZE_RELATION = re.compile(r"\.size\(\)\[\d+\]\s*(?:[!=]=|[<>]=?)\s*\S+")


def size_relation(guard: str) -> bool:
    return bool(_SIZE_RELATION.search(guard))


# Dynamo's guard on the range a dynamic size's graph holds for, a number against one tensor's size
# (`16 <= x.size()[0]`; `2 <= ...` is the 0/1 specialisation, torch_text.specialised_size): code in
# the graph branched on the size, the user's or an op's own (torch 2.13's convolution picks its path
# by the batch: pytorch/examples' mnist, a dim 0 made dynamic by a smaller training batch, then an
# evaluation's last batch of 8 rows failed `16 <= x.size()[0]`).
_SIZE_BOUND = re.compile(r"^(?:(?P<low>\d+) (?P<low_op><=|<) (?P<name>\S+?)\.size\(\)\[(?P<dim>\d+)\]"
                         r"|(?P<name2>\S+?)\.size\(\)\[(?P<dim2>\d+)\] (?P<high_op><=|<|>=|>) (?P<high>\d+))$")


def size_bound(guard: str) -> tuple[str, int, str] | None:
    """(tensor, dim, the range it must be in: "at least 16", "at most 1024") of a failed guard on
    one dynamic size's range; None for any other guard, and for the 0/1 specialisation's."""
    if specialised_size(guard) is not None:
        return None
    match = _SIZE_BOUND.match(guard.strip())
    if match is None:
        return None
    if match["name"] is not None:
        low = int(match["low"]) + (1 if match["low_op"] == "<" else 0)
        return match["name"], int(match["dim"]), f"at least {low}"
    bound, op = int(match["high"]), match["high_op"]
    text = {"<=": f"at most {bound}", "<": f"at most {bound - 1}", ">=": f"at least {bound}", ">": f"at least {bound + 1}"}[op]
    return match["name2"], int(match["dim2"]), text


# A guard on a module's hook dict (`list(dict.keys(fn._modules['2']._backward_hooks))[0] == 4`):
# Dynamo guards the hooks' keys, and each register_*_hook adds a new key (its handle's id).
# torch's own hint after a guard that failed on a parameter (torch 2.13, checked by hand: with it
# False, Parameters of one rank and other sizes share a graph; a Parameter of another rank recompiles).
_ON_PARAMETER = re.compile(r"Guard failed on a parameter")
_PARAMETER_HINT_RANK = ("torch's hint in the guard, torch._dynamo.config.force_parameter_static_shapes = False, lets a "
                        "parameter's sizes be dynamic, not its number of dimensions: it saves the recompiles for parameters "
                        "of one rank and other sizes, not these.")
_PARAMETER_HINT_SIZE = ("The tensor is a parameter (torch: \"Guard failed on a parameter\"), whose sizes Dynamo keeps static: "
                        "torch's hint, torch._dynamo.config.force_parameter_static_shapes = False before the first compiled "
                        "call, lets them be dynamic.")
_RANK_MISMATCH = re.compile(r"\brank mismatch\b(?:\. expected (?P<expected>\d+), actual (?P<actual>\d+))?")
_MODULE_HOOKS = re.compile(r"\._(?:backward|backward_pre|forward|forward_pre)_hooks\b")
# A guard on a value a hook holds in its closure (`...__closure__[0].cell_contents.tput_timer.global_step_count
# == 0`, DeepSpeed's throughput timer read by its forward pre-hook): the value changed, not the hooks.
_HOOK_READS = re.compile(r"__closure__\[\d+\]\.cell_contents\b.*(?:==|!=|<=|>=|<|>)\s*-?[\w.]+$")


def _names_text(names: list[str]) -> str:
    return " and ".join(f"`{n}`" for n in names)


_LR_GUARD = re.compile(r"param_groups\[\d+\]\['lr'\]")


def _compiled_by(table: RecompileTable, cause: Cause) -> dict[str, Any] | None:
    """The torch.compile call (the manifest's `compile_calls`) whose first compiled code is the code
    of the cause's frame: the model's forward torch.compile(model) compiles. None for a CA graph, a
    frame no call compiled first (an inner function's, Dynamo's wrapper frame), or calls that differ
    in where they were made or in `dynamic`."""
    compile_id = cause.rows[0].compile_id
    frame = compile_frame(compile_id)
    code = table.frame_codes.get(frame) if frame is not None and not compile_id.startswith("!") else None
    if code is None:
        return None
    found = [c for c in table.compile_calls if isinstance(c.get("code"), list) and tuple(c["code"]) == code]
    said = {(c.get("file"), c.get("line"), c.get("via"), c.get("dynamic")) for c in found}
    if len(said) != 1:
        return None
    return {k: found[0].get(k) for k in ("file", "line", "via", "dynamic", "in_place")}


def _none_guards_broken_words(remains: dict[str, list[tuple[str, str, tuple[str, str] | None]]]) -> str:
    """What stays of a recompile whose failed entries also held a value to be None that it no longer
    was (RecompileTable.none_guards_broken): a fix of the named guard alone does not remove it."""
    values = list({source: (source, value, where) for found in remains.values() for source, value, where in found}.values())
    ids = list(remains)
    changed = _and_list([f"`{source}`, None when the failed entry compiled and `{value}` at this call"
                         + (f" (the compiled code's own first call sets it: `{where[0]}` at {where[1]})" if where else "")
                         for source, value, where in values])
    before = _and_list([f"`model{source[len('self'):]} = {value}`" if source.startswith("self.") else f"`{source} = {value}`"
                        for source, value, _ in values])
    model = " (`model` being the object the compiled code runs as `self`)" if any(v[0].startswith("self.") for v in values) else ""
    return (f"What remains: {'recompile' if len(ids) == 1 else 'recompiles'} {_and_list(ids)} also failed on the guard of "
            f"{changed}; torch names only the first failing guard. With only the size made dynamic, the recompile stays, "
            f"for that guard. Set it before the first compiled call, to the value it takes: {before}{model}; then, with the "
            "size dynamic as well, the recompile goes.")


def accelerate_compiled(facts: dict[str, Any]) -> str | None:
    """Where HF accelerate's torch.compile call (HF Trainer's, with torch_compile=True) compiled the
    frame with `dynamic` unset: its line (`accelerate/accelerator.py:1681`). accelerate reads
    ACCELERATE_DYNAMO_USE_DYNAMIC when its dynamo plugin leaves dynamic unset, as Trainer's does
    (docs/torch-internals.md, "A library's compile call"). None otherwise."""
    by = facts.get("compiled_by")
    if not isinstance(by, dict) or by.get("dynamic") is not None:
        return None
    via = by.get("via")
    return via if isinstance(via, str) and via.startswith("accelerate/") else None


def _other_module(table: RecompileTable, cause: Cause) -> str:
    """Where each recompile of the cause is of torch's wrapper of every compiled module's call and
    comes from a line no earlier compile of that frame came from: that line (another module
    compiled with torch.compile, called for the first time); "" otherwise. A size guard on dim 0
    is left out: a batch of another size from another line (an evaluation loop) is the same module."""
    lines = []
    for row in cause.rows:
        size = size_guard(guard_text(row.messages[0])) if row.messages else None
        if size is not None and size[1] == 0:
            return ""
        frame = compile_frame(row.compile_id)
        compiles = table.wrapper_callers.get(frame or "", [])
        ids = [cid for cid, _ in compiles]
        if row.compile_id not in ids or row.user_source is None:
            return ""
        earlier = {_location(ref) for cid, ref in compiles[:ids.index(row.compile_id)] if ref is not None}
        if not earlier or _location(row.user_source) in earlier:
            return ""
        lines.append(f"{row.user_source.file.rsplit('/', 1)[-1]}:{row.user_source.line}")
    return ", ".join(dict.fromkeys(lines))


def module_text(module: tuple[str, ...], parameter: str | None = None) -> str:
    """("Sequential", "0=Linear", "1=Tanh", "1.0=...", "0.weight:[16, 4]") -> `Sequential(Linear,
    Tanh)`: the class and its direct children; with `parameter` ("0.weight"), and that parameter's
    size (`with 0.weight [16, 4]`), which tells apart two modules of one architecture."""
    children = [item.split("=", 1)[1] for item in module[1:] if "=" in item and "." not in item.split("=", 1)[0]]
    text = f"{module[0]}({', '.join(children)})" if children else module[0]
    size = _parameter_sizes(module).get(parameter or "")
    return f"{text} with {parameter} {size}" if size is not None else text


def _parameter_sizes(module: tuple[str, ...]) -> dict[str, str]:
    """"0.weight:[16, 4]" items of a wrapped module -> {"0.weight": "[16, 4]"}, in guard order."""
    return dict(item.split(":", 1) for item in module[1:] if "=" not in item and ":" in item)  # type: ignore[misc]


def _other_module_by_guards(table: RecompileTable, cause: Cause) -> list[tuple[str, str]]:
    """The compiles of torch's module wrapper each recompile of the cause follows, when its guards
    show a module unlike every one compiled there before (another class, or other children): the
    frame's compiles in order, (compile id, module), ending with the cause's last; [] otherwise.
    Whatever guard torch names first (an input's size, or its requires_grad in `c2(c1(x))`), a
    compile for another module is that module's first call, not a change of one module's input."""
    modules = table.wrapper_modules
    shown: dict[str, str] = {}
    for row in cause.rows:
        frame = compile_frame(row.compile_id)
        ids = [cid for cid, _ in table.wrapper_callers.get(frame or "", [])]
        module = modules.get(row.compile_id)
        if row.compile_id not in ids or not module:
            return []
        earlier = ids[:ids.index(row.compile_id)]
        if not earlier or any(modules.get(cid) in (None, module) for cid in earlier):
            return []
        compiles = (*earlier, row.compile_id)
        # Modules alike but for their parameters' sizes are told apart by the first that differs.
        alike = len({module_text(modules[cid]) for cid in compiles}) < len({modules[cid] for cid in compiles})
        sizes = [_parameter_sizes(modules[cid]) for cid in compiles]
        differing = next((name for name in sizes[-1] if len({s.get(name) for s in sizes}) > 1), None) if alike else None
        for cid in compiles:
            shown[cid] = module_text(modules[cid], differing) + (" (the optimizer's step())" if cid in table.wrapper_optimizer_steps else "")
    return list(shown.items())


def _instance_words(facts: dict[str, Any]) -> tuple[str, str]:
    """Of a cause whose method was called on another instance (`other_instance`): its class, and
    "0/0 a Layer(ReLU) with weight [500, 784], then 0/1 a Layer(ReLU) with weight [500, 500]"."""
    found = facts["other_instance"]
    return found[-1][1], ", then ".join(f"{cid} a {module}" for cid, _, module in found)


def _sizes_differ(theirs: dict[str, str], ours: dict[str, str]) -> bool:
    """Whether a parameter both modules hold has other sizes in one than in the other."""
    return any(theirs.get(name) not in (None, size) for name, size in ours.items())


def _other_instance(table: RecompileTable, cause: Cause) -> list[tuple[str, str, str]]:
    """Where each recompile of the cause is of a compiled method (`self` its first parameter) whose
    `self` is of the class of every cache entry it failed, with parameters of other sizes (the
    guard trees say both): (compile id, class, module with the first parameter that differs), the
    failed entries then the recompile, in compile order; [] otherwise. Dynamo keeps parameters'
    sizes static, so such a call compiles for the instance whatever guard torch names first (the
    input that goes with those weights), and no input marked dynamic removes it."""
    shown: dict[str, tuple[str, str, str]] = {}
    for row in cause.rows:
        module = table.self_modules.get(row.compile_id)
        failed = sorted({cid for m in row.messages if (cid := reason_compile_id(m.strip().splitlines()[0]))},
                        key=lambda cid: compile_attempt(cid) or 0)
        entries = [table.self_modules.get(cid) or () for cid in failed]
        if not module or not failed:
            return []
        sizes = _parameter_sizes(module)
        if not all(entry and entry[0] == module[0] and _sizes_differ(_parameter_sizes(entry), sizes) for entry in entries):
            return []
        theirs = _parameter_sizes(entries[0])
        name = next(n for n, size in sizes.items() if theirs.get(n) not in (None, size))
        for cid in (*failed, row.compile_id):
            shown[cid] = (cid, module[0], module_text(table.self_modules[cid], name))
    return sorted(shown.values(), key=lambda found: compile_attempt(found[0]) or 0)


# What torch.compile wraps in its module wrapper besides a torch.nn module: a function of torch's
# own (trace_rules), such as the plain function an LR scheduler puts in place of an optimizer's step.
_FUNCTION_CLASSES = ("function", "method", "builtin_function_or_method", "partial")


def _requires_grad_inputs(guards: list[str]) -> list[str]:
    """The tensors of failed requires_grad guards when none is a parameter (a module's
    `_parameters[...]`): the compiled call's inputs. [] otherwise."""
    names = [m["name"] for g in guards if (m := _REQUIRES_GRAD_OF.search(g))]
    return list(dict.fromkeys(names)) if names and not any("_parameters[" in n for n in names) else []


_NUMBER_TYPES = ("int", "float", "bool")


def _type_only(change: ValueChange) -> bool:
    """A number that kept its value and changed its type (the int 0, then the float 0.0): torch's
    guard on a constant checks its type as well as its value (EQUALS_MATCH)."""
    if change.after is None or change.before_type == change.after_type:
        return False
    if change.before_type not in _NUMBER_TYPES or change.after_type not in _NUMBER_TYPES:
        return False
    try:
        return float(change.before) == float(change.after)
    except ValueError:
        return False


def _owner_words(facts: dict[str, Any]) -> str:
    """` of `self.config`, a BertConfig, of `self`, a BertForSequenceClassification`: what the value
    is reached through, by the classes its guard tree shows; "" when the tree was not recorded."""
    changes = facts.get("value_changes") or []
    owners = list(changes[0].owners) if changes else []
    if not owners:
        return ""
    parts = [f"`{source}`, a {cls}" for source, cls in reversed(owners)]
    return " of " + ", of ".join(parts)


def _made_input(facts: dict[str, Any]) -> bool:
    """The value's last recompile compiled it as an input of the graph (its guards check only its type)."""
    changes = facts.get("value_changes") or []
    return (bool(changes) and changes[-1].as_input and len({c.source for c in changes}) == 1
            and not _specialised_each(facts))


def _bool_flag(facts: dict[str, Any]) -> bool:
    """Every recompile of the cause is on one bool, compiled for a value each time (torch's
    TRUE_MATCH / FALSE_MATCH): a flag the code branches on, one graph per value."""
    changes = facts.get("value_changes") or []
    return (bool(changes) and len({c.source for c in changes}) == 1
            and all(c.before in _BOOL_OPPOSITE and c.after in _BOOL_OPPOSITE and not c.as_input for c in changes))


def _module_int(facts: dict[str, Any]) -> bool:
    """Every recompile is on one int attribute of the compiled module (`self.queue_ptr` in its
    forward), specialised each time and never taken as an input: Dynamo's default for an int on an
    nn.Module (allow_unspec_int_on_nn_module False), whatever the code does with it."""
    changes = facts.get("value_changes") or []
    return (bool(changes) and len({c.source for c in changes}) == 1 and facts.get("function") == "forward"
            and changes[0].source.startswith("self.") and changes[0].source.count(".") == 1
            and all(c.before_type == "int" and c.after_type in ("int", "") and not c.as_input for c in changes))


def _specialised_each(facts: dict[str, Any]) -> bool:
    """A compile that took the value as a symbol was guarded on it again (torch's next failing
    guard is that compile's own `== value`), and every recompile on it but the last is specialised:
    the code needs the value as a constant, so each new value compiles once more (the last
    compile's tree, with no later failure to show it, is read as the earlier ones were)."""
    changes = facts.get("value_changes") or []
    return (len(changes) > 1 and len({c.source for c in changes}) == 1 and any(c.specialised_again for c in changes)
            and not any(c.as_input for c in changes[:-1]))


def _value_change_words(change: ValueChange, what: str) -> str:
    """What one recompile on a Python value saw: its compile id, then the change."""
    if _type_only(change):
        return (f"{change.compile_id}: the {change.before_type} `{change.before}` became the {change.after_type} "
                f"`{change.after}`, the same value of another type (Dynamo's guard on a Python number checks its type as well)")
    if change.as_input:
        return (f"{change.compile_id}: {what} changed from `{change.before}`, and {change.compile_id} takes it as an input "
                f"(its guards check only that it is a {change.after_type}): later values reuse it")
    if change.after is not None:
        return f"{change.compile_id}: `{change.before}` became `{change.after}`"
    return f"{change.compile_id}: {what} changed from `{change.before}`"


def _library_path(path: str, cwd: str) -> str:
    """A library's file from its package down (`lightning/pytorch/trainer/call.py`), the user's as
    the run shows it."""
    for part in ("/site-packages/", "/dist-packages/"):
        if part in path:
            return path.split(part, 1)[1]
    return short_file(path, cwd)


def _resume_words(facts: dict[str, Any], cwd: str) -> tuple[str, str]:
    """(where the graph break is, the break in torch's words) of a resume frame's cause: the call at
    the resume line, and where the break is inside the called code, that line too."""
    resume = facts["resume"]
    at = f"{_library_path(resume.file, cwd)}:{resume.line}"
    inside = facts.get("break_inside")
    if inside is not None:
        at = f"{at} (inside the call there, at {_library_path(inside[0], cwd)}:{inside[1]})"
    words = graph_break_words(facts.get("break_reason") or (inside[2] if inside is not None else ""))
    return at, words.headline.rstrip(". ")


# The inputs of a compiled-autograd graph's code as its size guards name them (`tensor 'sizes[0]'
# size mismatch at index 1`): compiled autograd's own lists, no tensor of the script's.
_CA_GRAPH_INPUT = re.compile(r"^(?:sizes|inputs)\[\d+\]")


def _ca_graph_input(facts: dict[str, Any], on_ca: bool) -> tuple[str, int, int, int, str] | None:
    """(name, dim, before, after, torch's source spelling `L['sizes'][0]`) of a size guard on an
    input of a compiled-autograd graph's code; None for any other guard."""
    size = size_guard(facts.get("guard", "")) if on_ca and facts.get("kind") == GUARD_SIZE and not facts.get("hook") else None
    if size is None or not _CA_GRAPH_INPUT.match(size[0]):
        return None
    return size[0], size[1], size[2], size[3], tree_source(size[0])


def _guard_why(facts: dict[str, Any], code: str, on_ca: bool = False) -> list[str]:
    """What happened, for the kind of guard that failed."""
    kind = facts.get("kind", "")
    if (ca_input := _ca_graph_input(facts, on_ca)) is not None and not facts.get("compiled_dynamic"):
        name, dim, before, after, _ = ca_input
        return [f"Dim {dim} of `{name}` went from {before} to {after}. `{name}` is an input of the compiled-autograd graph (a "
                "size of the backward, which compiled autograd passes to its graph), not a tensor of the script: Dynamo "
                "compiled that graph's code for the sizes of its first call, and compiles it again for these.",
                *_automatic_dynamic(facts)]
    if facts.get("optimizer_lr"):
        changes = facts.get("value_changes") or []
        why = ["The compiled optimizer step() reads the learning rate, a Python number in the optimizer's param_groups, "
               "and Dynamo compiles it for the rate's value (a guard `== value`); an LR scheduler changes it, so step() "
               "is compiled again."]
        if changes:
            why.append("Per recompile: " + elide([_value_change_words(c, "the rate") for c in changes], limit=MAX_LISTED) + ".")
        return why
    if facts.get("another_optimizer"):
        return ["torch.optim's step() code is one code object for many optimizers (Optimizer's step wrapper in optimizer.py "
                "for all of them, each class's step() for that class's), so one Dynamo frame each, shared. Dynamo guards on which "
                "optimizer object ran it (`___check_obj_id(self, ...)`), so the first step() of another optimizer compiles "
                "each of those frames once more: not an object made anew in the loop, and cached from then on."]
    if facts.get("optimizer_state"):
        why = ["The compiled optimizer step() first ran with its state empty: an optimizer makes its state (momentum "
               "buffers, Adam's moments) in its first step(). Dynamo guards on that state, so step() is compiled once more "
               "for the filled state, which every later step reuses."]
        if facts.get("other_entries"):
            why.append("Several optimizers share this frame: torch's first failing guard is the newest cache entry's, another "
                       "optimizer's (" + elide([f"{cid} `{g}`" for cid, g in facts["other_entries"]]) + "); the guard shown "
                       "per recompile is the one of the optimizer's own entry, once for each optimizer.")
        return why
    if facts.get("other_module_by_guards") and facts.get("wrapped_function"):
        compiles = ", then ".join(f"{cid} a {module}" for cid, module in facts["other_module_by_guards"])
        step = facts.get("wrapped_optimizer_step")
        what = ("The optimizer's step() is one: an LR scheduler replaces `opt.step` with its own counting wrapper, a plain "
                "function in torch/optim/lr_scheduler.py, so torch.compile(opt.step) runs through the same frame as the "
                "compiled model" if step else "The function compiled here is one")
        return [f"The recompiled frame is torch's wrapper (`inner`, torch/_dynamo/external_utils.py) that torch.compile puts "
                f"around every compiled torch.nn module's call and around a function of torch's own. {what}. Its guards show "
                f"what each compile was for: {compiles}. torch's first failing guard, `{facts.get('guard', '')}`, compares what "
                f"those calls were given ({'the model its input, the step nothing' if step else 'a module its input, the function its own'}): "
                "it is not about a Python value of the script changing. It is "
                "compiled once and cached, and counts against the shared frame's recompile limit "
                "(torch._dynamo.config.recompile_limit)."]
    if facts.get("other_module_by_guards"):
        compiles = ", then ".join(f"{cid} a {module}" for cid, module in facts["other_module_by_guards"])
        guard = facts.get("guard", "")
        named = f"torch names only the first guard that failed, `{guard}`"
        if kind == GUARD_REQUIRES_GRAD and "expected requires_grad=0" in guard:
            named += (": the new module's input requires grad where the first one's did not, as the output of another "
                      "compiled module does when one feeds the other (`c2(c1(x))`)")
        elif kind:
            named += ": the new module's input differs from the first one's"
        return [f"The recompiled frame is torch's wrapper of every torch.compile'd module's call (`inner`, "
                f"torch/_dynamo/external_utils.py): one code object for all of them. Its guards show which module each "
                f"compile was for: {compiles}. So this is another compiled module called for the first time, not one "
                f"module's input changing; {named}. Each such module is one more compile of the shared frame, and all of "
                "them count against its one recompile limit (torch._dynamo.config.recompile_limit)."]
    if facts.get("other_instance"):
        cls, compiles = _instance_words(facts)
        method = f"`{facts['function']}`" if facts.get("function") else "The recompiled function"
        return [f"{method} is a method (its first parameter `self`), one code object for every instance of its class, and "
                f"this call's `self` is another {cls}, with parameters of other sizes: {compiles}. Dynamo keeps parameters' "
                "sizes static (torch._dynamo.config.force_parameter_static_shapes), so each size of the module is a compile "
                f"of its own; torch names only the first guard that failed, `{facts.get('guard', '')}`, the input that goes "
                "with the other weights, not an input that changed for one module. Each is compiled once and cached, and "
                "all of them count against the method's one recompile limit (torch._dynamo.config.recompile_limit)."]
    if facts.get("optional_argument"):
        name = facts["optional_argument"]
        return [f"The compiled function is given `{name}` as a tensor in some calls and as None in others (an optional "
                f"argument: its code takes another path without it), and Dynamo compiles a graph for each form: the entry made "
                "for one fails on the other. Each form is compiled once and cached; it is not a value that keeps changing."]
    if facts.get("inference_switch") is not None:
        went = ("The compiled code ran under torch.inference_mode() (as Lightning's validate(), test() and predict() do, and "
                "an evaluation in a function decorated with it), or was given a tensor made under it, after running outside it "
                "(training, or an evaluation under torch.no_grad(), as Lightning's validation inside fit() runs)"
                if facts["inference_switch"] else
                "The compiled code ran outside torch.inference_mode() after running under it (an evaluation under it first)")
        return [f"{went}: Dynamo guards each tensor's dispatch keys, which inference mode strips of the autograd keys, so it "
                "compiled another graph. It is not a dtype or device change. Each keeps its own cached graph: one compile, not "
                "one per evaluation."]
    if facts.get("train_eval"):
        train_eval = facts["train_eval"]
        module = _module_words(train_eval)
        went = (f"{module[0].upper()}{module[1:]} was switched back to train() (`.train()`) after the compiled code was "
                "compiled with it in eval mode (an evaluation before training)" if train_eval[2] else
                f"{module[0].upper()}{module[1:]} was switched to eval() (`.eval()`, as an evaluation does, or as a fine-tuning "
                "that freezes a BatchNorm's statistics does) after the compiled code was compiled with it training")
        return [f"{went}: modules such as Dropout and BatchNorm compute differently in each mode, so Dynamo guards on the "
                "`training` flag of each module the forward runs, and compiled a second graph for the other mode. Each "
                "mode keeps its own cached graph: one compile per mode, not one per evaluation."]
    if kind == GUARD_GRAD_MODE and facts.get("reentrant_recompute"):
        return [f"checkpoint(..., use_reentrant=True) runs `{facts['reentrant_recompute']}` under torch.no_grad() in the "
                "forward and again with grad enabled in the backward, to recompute what it did not keep: Dynamo guards on "
                "the grad mode, so the compiled function is compiled once for each (no evaluation is involved)."]
    if kind == GUARD_GRAD_MODE:
        off = grad_off_words(facts)
        first = {
            True: f"The compiled code was first called with grad mode off (under {off}: an "
                  "evaluation before training, as one at the first step does), then with it on (training)",
            False: f"The compiled code ran with grad mode off ({off}, as an evaluation does) "
                   "after running with it on",
        }.get(facts.get("grad_mode_after"), f"The compiled code ran with grad mode on (training) and off ({off}, as an "
                                           "evaluation does)")
        why = [f"{first}: Dynamo guards on the grad mode, so it compiled a second graph for it. Each grad mode "
               "keeps its own cached graph: one compile per grad mode, not one per evaluation."]
        also = _with_grad_mode(facts.get("guard", ""))
        if any(part.startswith("autocast") for part in also):
            why.append(f"The same guard names {', '.join(f'`{part}`' for part in also)} as changed too: autocast was on around "
                       "one of the two calls and off around the other (an evaluation outside the torch.autocast the training "
                       "runs under, or the reverse), so the second graph is also made for that autocast setting.")
        elif also:
            why.append(f"The same guard names {', '.join(f'`{part}`' for part in also)} as changed too: the second graph is "
                       "also made for that setting.")
        return why
    if kind == GUARD_REQUIRES_GRAD and facts.get("requires_grad_inputs") and facts.get("requires_grad_loop") is not None:
        names = "`, `".join(facts["requires_grad_inputs"])
        return ["Every call of the compiled code comes from that one line, several times a step, "
                f"and its first call got `{names}` not requiring grad, later calls in the same step requiring it: a loop that "
                "feeds each call the previous call's output (blocks applied in turn), whose first input is data (no grad) and "
                "whose later inputs are activations that require grad. Dynamo guards on each input's requires_grad, so it "
                "compiles a graph for each."]
    if kind == GUARD_REQUIRES_GRAD and facts.get("requires_grad_inputs"):
        return [f"The compiled code was called with `{'`, `'.join(facts['requires_grad_inputs'])}` requiring grad in one call and not "
                "in another (a detached tensor in one call, as a GAN's discriminator gets `fake.detach()`, and one that requires grad "
                "in another, the generator's output): Dynamo guards on each input's requires_grad, so it compiles a graph for each."]
    if kind == GUARD_REQUIRES_GRAD:
        backward = {
            ("frozen",): "and the backward loses the nodes that accumulated the frozen parameters' gradients",
            ("unfrozen",): "and the backward gets nodes for the parameters that now train",
        }.get(tuple(requires_grad_ways(facts)), "and the backward's nodes change with the parameters that train")
        why = ["A parameter's requires_grad changed between calls (a module frozen or unfrozen, as fine-tuning does): Dynamo "
               f"guards on each parameter's requires_grad, so the forward is compiled once per set of trainable parameters, {backward}."]
        if "force_parameter_static_shapes" in facts.get("guard", ""):
            why.append("torch's hint in the guard (torch._dynamo.config.force_parameter_static_shapes = False) is about "
                       "parameters' sizes: it does not apply to a requires_grad change.")
        return why
    if facts.get("other_module") and kind in (GUARD_SIZE, GUARD_TENSOR_META, GUARD_ID, GUARD_TYPE):
        return [f"The recompiled frame is torch's wrapper of every torch.compile'd module's call (`inner`, "
                f"torch/_dynamo/external_utils.py): one code object for all of them. This call, from {facts['other_module']}, "
                "is the first from there: most likely another compiled module (its input a different size or kind), not this "
                "module's input changing. Each such module is one more compile of the shared frame, and all of them count "
                "against its one recompile limit (torch._dynamo.config.recompile_limit)."]
    if kind == GUARD_SIZE and _RANK_MISMATCH.search(facts.get("guard", "")) and facts.get("hook_runner"):
        types, package = facts["hook_runner"]
        kinds = ", ".join(_HOOK_KINDS.get(t, t) for t in types) or "its hooks"
        whose = f", every one {package}'s" if package else ""
        return [f"The compiled-autograd graph runs its hooks ({kinds}{whose}) through torch's call_hook, one code object for "
                "all of them. Each hook is given a tensor of its own (a post-accumulate-grad hook its Parameter, a tensor hook "
                "the gradient of its tensor), and a model's parameters have several numbers of dimensions (1-D biases and "
                "norms, 2-D weights): Dynamo guards each tensor's rank, so it compiles call_hook once more for each rank it meets.",
                *_parameter_rank_hint(facts)]
    if kind == GUARD_SIZE and _RANK_MISMATCH.search(facts.get("guard", "")):
        return _parameter_rank_hint(facts)
    if kind == GUARD_SIZE and facts.get("hook_runner") and (size := size_guard(facts.get("guard", ""))) is not None:
        types, package = facts["hook_runner"]
        kinds = ", ".join(_HOOK_KINDS.get(t, t) for t in types) or "its hooks"
        whose = f", every one {package}'s" if package else ""
        name, dim, before, after = size
        return [f"Dim {dim} of `{name}` went from {before} to {after} in torch's call_hook, which runs the compiled-autograd "
                f"graph's hooks ({kinds}{whose}), one code object for all of them: each hook is given a tensor of its own "
                "(a parameter's gradient), and parameters have different sizes, not a smaller batch. Dynamo compiles "
                "call_hook once more for each size it meets."]
    if kind == GUARD_SIZE and facts.get("compiled_dynamic") and (size := size_guard(facts.get("guard", ""))) is not None:
        return [_kept_static(*size)]
    if kind == GUARD_SIZE and facts.get("hook") and not facts.get("hook_runner") and (size := size_guard(facts.get("guard", ""))) is not None:
        name, dim, before, after = size
        return [f"Dim {dim} of `{name}` went from {before} to {after} in the backward hook: the hook is given the gradients "
                "of tensors of different sizes (one hook registered on several parameters or tensors, each call its own "
                "tensor's), not a smaller batch. Dynamo compiles the hook once for each size (and number of dimensions) it "
                "meets, inside the compiled-autograd graph, each a compile counted against its recompile limit "
                "(torch._dynamo.config.recompile_limit), past which the hook runs uncompiled."]
    if kind == GUARD_SIZE and (size := size_guard(facts.get("guard", ""))) is not None and module_attribute(size[0]):
        name, dim, before, after = size
        return [f"Dim {dim} of `{name}` went from {before} to {after}: `{name}` is a tensor the module holds (an attribute its "
                "code sets, not an argument of the call), so at each call it has the size the code last gave it. A tensor "
                "cached on the module for one input size (a mask made for a sequence length, then kept) carries it into the "
                "next call (an evaluation's shorter last batch into training's next call, say).", *_automatic_dynamic(facts)]
    if kind == GUARD_SIZE and (batch := smaller_batch(facts.get("guard", ""))) is not None:
        name, before, after = batch
        evaluation = ([f"It ran with grad mode off (under torch.no_grad() or torch.inference_mode(), as an evaluation does): "
                       "the smaller batch is an evaluation's, not training's."] if facts.get("grad_mode_after") is False else [])
        if by_hand(facts):
            # word_language_model's last bptt chunk: dim 0 is its sequence length, not a batch size.
            made = (f"Dim 0 of `{name}` went from {before} to {after}: a smaller batch, or a shorter chunk of a sequence. No "
                    "DataLoader ran in this job: the script slices its data itself, and its last slice is shorter where the "
                    f"data's length is not a multiple of the slice's ({after} left here, as word_language_model's last bptt chunk "
                    f"is); Dynamo compiled the forward for {before} and compiles it again for {after}.")
        elif facts.get("after_training"):
            made = (f"Dim 0 of `{name}` went from {before} to {after}: another batch, in calls after training's last step that no "
                    "backward followed (an evaluation or a prediction on other data), not a training batch; Dynamo compiled the "
                    f"forward for {before} rows and compiles it again for {after}.")
        else:
            made = (f"Dim 0 of `{name}` went from {before} to {after}: a smaller batch. A DataLoader whose dataset size is not a "
                    f"multiple of batch_size makes the last batch of every epoch smaller ({plural(after, 'row')} here); Dynamo "
                    f"compiled the forward for {before} rows and compiles it again for {after}.")
        return [made, *evaluation,
                *([_ZERO_ONE] if after in (0, 1) else _automatic_dynamic(facts))]
    if kind == GUARD_SIZE and (specialised := specialised_size(facts.get("guard", ""))) is not None:
        name, dim = specialised
        return [f"Dim {dim} of `{name}` was dynamic (marked dynamic, or made dynamic by an earlier recompile), and a call passed "
                f"a size of 0 or 1 there{' (a batch of one row: a DataLoader' + chr(39) + 's last?)' if dim == 0 else ''}. {_ZERO_ONE}"]
    if kind == GUARD_SIZE and (size := size_guard(facts.get("guard", ""))) is not None and size[1] > 0:
        name, dim, before, after = size
        # The record keeps no later sizes: a length that varies per batch and one changed for good
        # (a longer context from some step on) leave the same recompile once Dynamo made it dynamic.
        return [f"Dim {dim} of `{name}` went from {before} to {after}: a length, not the batch size; one that varies per batch "
                "(a sequence padded to each batch's longest, as a collate function for text does) or that changed for good "
                "at a phase (a longer context from that step on).", *_automatic_dynamic(facts)]
    if (bound := size_bound(facts.get("guard", ""))) is not None:
        name, dim, held = bound
        return [f"Dim {dim} of `{name}` was dynamic (marked dynamic, or made dynamic by an earlier recompile), and the graph "
                f"compiled for it holds only for sizes {held} (`{facts.get('guard', '')}`): code in the graph branched on that "
                "size, yours or an op's own implementation in torch (convolution picks its path by the batch size), and "
                f"Dynamo guards the range the branch held for. A call with a size outside it compiles once more"
                + (" (a smaller batch: an epoch's, or an evaluation's, last batch)" if dim == 0 and held.startswith("at least") else "")
                + "; then both graphs are cached."]
    if size_relation(facts.get("guard", "")):
        return ["The code branches on these sizes (an `if` comparing them): Dynamo compiled the side of the branch they took, "
                "with the sizes dynamic, and guards on the comparison, so a call whose sizes take the other side compiles that "
                "side once more."]
    if kind == GUARD_OTHER and (changes := facts.get("value_changes")) and not _made_input(facts) and not _bool_flag(facts):
        return [f"Dynamo compiles the frame for the value of `{changes[0].source}` it sees (a guard `== value`), so each new "
                "value compiles it once more. Per recompile: " + elide([_value_change_words(c, "it") for c in changes]) + "."]
    if kind in (GUARD_VALUE, GUARD_OTHER) and (changes := facts.get("value_changes")):
        per = "Per recompile: " + elide([_value_change_words(c, "it") for c in changes]) + "."
        if _bool_flag(facts):
            return [f"`{changes[0].source}` is a bool, which Dynamo never takes as an input of the graph: it compiled the frame "
                    f"for the value it saw (a guard `== {changes[0].before}`), with only the code that value runs, and compiles "
                    "it again for the other value. Two values, two compiles at most, both cached: a later flip back reuses "
                    f"the first. {per}"]
        if _made_input(facts):
            return [f"Dynamo compiled the frame for the first value of `{changes[0].source}` it saw (a guard `== value`); when "
                    "the value changed it compiled the frame again with the number as an input of the graph (automatic "
                    f"dynamic), which every later value reuses. {per}"]
        if _module_int(facts):
            module = f" (a {changes[0].owners[-1][1]})" if changes[0].owners else ""
            return [f"`{changes[0].source}` is an int attribute of the compiled module{module}, and Dynamo specialises such an "
                    "attribute on each value it sees (torch._dynamo.config.allow_unspec_int_on_nn_module is False by default): "
                    "never an input of the graph, as an int argument becomes after its first change (automatic dynamic), so "
                    f"each new value compiles the frame once more, and each is cached. {per}"]
        if _specialised_each(facts):
            per = "Per recompile: " + elide([_value_change_words(dataclasses.replace(c, as_input=False), "it") for c in changes]) + "."
            return [f"Dynamo compiles the frame for each value of `{changes[0].source}` it sees: even after the value changed, "
                    "each new compile guards it again (`== value`), because the code uses it where torch needs a constant "
                    f"(an op's argument such as F.dropout's p, a loop bound, a branch or a shape). {per}"]
        return [per]
    if kind == GUARD_NONE and (changes := facts.get("value_changes")):
        first = changes[0]
        became = f" it was `{first.after}` (a {first.after_type})" if first.after is not None else " it was set"
        why = [f"Dynamo compiled the frame while `{first.source}` was None and guarded that it stays None; at the next call"
               f"{became}. It is a Python {'attribute' if first.owners or source_prefixes(first.source) else 'value'}{_owner_words(facts)}; "
               "not a tensor, so Dynamo specialises the compiled code on its value."]
        if first.assigned is not None:
            why.append(f"The compiled code sets it itself, on its first call (`{first.assigned[0]}` at {first.assigned[1]}): "
                       "that call runs with None and every later one with the value, so the frame is compiled once more.")
        return why
    if kind == GUARD_LENGTH and module_hooks_list(facts.get("container")):
        return ["The compiled-autograd graph calls a module's full backward hooks (`register_full_backward_hook`) from a list "
                f"torch keeps of them (`{facts['container']}`): Dynamo guards that list's length, and each registration makes it "
                "one longer, so a hook registered every step recompiles the graph's code every step (until the recompile limit)."]
    if kind == GUARD_LENGTH:
        container = f"`{facts['container']}`" if facts.get("container") else "a Python list"
        if facts.get("hook"):
            item = " Its `.item()` is a graph break as well (a device sync, and code Dynamo does not compile)." if ".item()" in code else ""
            traced = ("Compiled autograd traces backward hooks with the backward, so Dynamo compiles the hook "
                      f"`{facts.get('function') or '?'}`; ")
            if length_guard_is_emptiness(facts.get("guard", "")):
                # `not norms`: the container was empty at the hook's first compile, and the hook fills it.
                guarded = (f"the hook writes into {container}, which was empty when Dynamo first compiled the hook: Dynamo "
                           "guarded that it stays empty, and the hook's first call filled it.")
            else:
                guarded = f"the hook writes into {container}, and Dynamo guards on its length, which the hook changes."
            if facts.get("stabilised"):
                # A dict keyed by parameter name, or a list that stops growing: the guards hold once it has its size.
                after = (f" Since then {container} has kept its size (a dict keyed by name, or a list that stopped growing), "
                         "so later backwards reuse the recompiled hook.")
            else:
                after = f" {container[:1].upper() + container[1:]} grows on every backward: every backward recompiles the hook."
            return [traced + guarded + after + item]
        return [f"The compiled code reads the Python list {container}, whose length changes between calls: Dynamo guards on it."]
    return []


def _parameter_rank_hint(facts: dict[str, Any]) -> list[str]:
    """What torch's hint in a rank guard that failed on a parameter does, where the guard has it."""
    return [_PARAMETER_HINT_RANK] if _ON_PARAMETER.search(facts.get("guard", "")) else []


def _automatic_dynamic(facts: dict[str, Any]) -> list[str]:
    """A size recompile that stopped: Dynamo's recompile after a size guard failed compiles that
    dimension dynamic (automatic_dynamic_shapes, on by default), so later sizes reuse it."""
    if not facts.get("stabilised") or facts.get("recompiling_steps", 0) > 1:
        return []
    return ["Dynamo compiles the changed dimension dynamic when it recompiles for it (automatic dynamic shapes, on by "
            "default): later sizes reuse that graph, "
            + ("one recompile a piece in all" if facts.get("pieces") else "one recompile in all") + ", not one per size."]


def _kept_static(name: str, dim: int, expected: int, actual: int) -> str:
    """Why a frame compiled with dynamic=True still guarded on a size (torch 2.13,
    docs/torch-internals.md "A size dynamic=True keeps static")."""
    if expected in (0, 1):
        why = f"Dynamo always specialises a size of {expected} (its 0/1 specialisation), so the first call's {expected} was compiled as a constant"
    else:
        why = (f"either its first value equalled a size Dynamo holds static ({expected}: a parameter's, such as a Linear's "
               "in_features), which duck sizing makes the same size and so static with it, or the code used the size as a "
               "constant (a branch on it, a view to it)")
    return (f"The frame was compiled with dynamic shapes (torch.compile(..., dynamic=True)), yet dim {dim} of `{name}` was static at "
            f"{expected} when it became {actual}: {why}. Dynamo then recompiled it.")


def _dynamo_made(name: str) -> bool:
    """A name Dynamo made, not the user (`___stack0`: a value on the stack at a graph break,
    passed to the frame that resumes after it): no fix can name it."""
    return name.startswith("___")


def _tensor_variable(name: str, code: str, params: list[str] | None = None, own_line: bool = False) -> str | None:
    """The tensor of a size guard as the caller names it. A guard names the compiled frame's own
    parameter (`x` of `forward(self, x)`), which the caller's line may name otherwise
    (`model(batch)`, `checkpoint(block, h)`): a plain name is the caller's only where the call
    passes it (`model(x)`, `model(x=inp)` -> inp), or where the call passes one positional argument
    and nothing else (`checkpoint(fn, ...)`'s function left out). `args[N]` (a compiled module's
    positional input) is the Nth argument of the call at the user's line (`loss_fn(model(x), y)`
    -> `x`); `kwargs['K']` (a keyword input, every HF model's) is the argument `K=...` of that call,
    or `batch["K"]` where the call passes `**batch`. `params`: the compiled function's parameters
    in order, where the record has them: a parameter passed positionally is the caller's argument
    at its place (`forward(self, input, hidden)` called as `model(data, hidden)` -> data; a method's
    `self` is not passed). `own_line`: `code` is a line inside the compiled function itself, where
    the parameter has its own name (`len(src)`). None where the line does not show it (the call is
    inside a library: `trainer.train()`, or passes several tensors and the parameters are not known)."""
    call = innermost_call(code)
    args = call[1] if call else []
    positional = [a for a in args if not re.match(r"\*|[A-Za-z_]\w*\s*=(?!=)", a)]
    if call and call[0] == "checkpoint" and positional:
        positional = positional[1:]  # torch.utils.checkpoint's function, then its inputs
    if re.fullmatch(r"[A-Za-z_]\w*", name):
        if own_line and any(name in split_arguments(given) for _, given in calls_on(call_line(code), SELF_CALL_START)):
            return name  # passed by that name on the compiled function's own line (`len(src)`)
        for arg in args:
            given = re.fullmatch(rf"(?:{name}\s*=\s*)?([A-Za-z_][\w.]*)", arg)
            if given and (given[1] == name or arg != given[1]):
                return given[1]
        spread = any(a.startswith("*") for a in args)
        passed = list(params or ())[1:] if params and params[0] == "self" else list(params or ())
        if name in passed:  # the parameters are known: the argument at its place, or none
            at = passed.index(name)
            plain = not spread and at < len(positional) and re.fullmatch(r"[A-Za-z_][\w.]*", positional[at])
            return positional[at] if plain else None
        if len(positional) == 1 and not spread and re.fullmatch(r"[A-Za-z_][\w.]*", positional[0]):
            return positional[0]
        return None
    index = re.fullmatch(r"args\[(\d+)\]", name)
    if index and call:
        if int(index[1]) < len(args) and re.fullmatch(r"[A-Za-z_][\w.]*", args[int(index[1])]):
            return args[int(index[1])]
    keyword = _KWARGS_INPUT.fullmatch(name)
    if keyword and call:
        for arg in args:
            given = re.fullmatch(rf"{keyword[1]}\s*=\s*([A-Za-z_][\w.]*)", arg)
            if given:
                return given[1]
            spread = re.fullmatch(r"\*\*([A-Za-z_][\w.]*)", arg)
            if spread:
                return f'{spread[1]}["{keyword[1]}"]'
    return None


def _tensor_words(name: str) -> str:
    """How a size guard's tensor is named to the user where its variable is not known."""
    keyword = _KWARGS_INPUT.fullmatch(name)
    return f"the tensor passed as `{keyword[1]}=`" if keyword else f"the tensor passed as `{name}`"


# A compiled function's keyword input as Dynamo names it in a guard: `kwargs['input_ids']` (`L['kwargs']['input_ids']` in PGO's words).
_KWARGS_INPUT = re.compile(r"(?:L\[')?kwargs(?:'\])?\['([A-Za-z_]\w*)'\]")


def _with_grad_mode(guard: str) -> list[str]:
    """What else a grad-mode guard names as changed (`GLOBAL_STATE changed: grad_mode
    autocast(cpu)_enabled`: an evaluation under no_grad and outside the training's autocast)."""
    return [part for part in global_state_changes(guard.split("  #")[0]) if part != "grad_mode"]


# A function whose batches are an evaluation's (Lightning's validation_step, an `evaluate` loop).
_EVALUATION_FUNCTION = EVALUATION_FUNCTION


# A module compiled in place (`module.compile()`, DeepSpeed's `engine.compile()`) is no wrapper: it has
# no `_orig_mod` (DeepSpeed: AttributeError). torch.compiler.set_stance("force_eager") as a context
# runs any compiled code eagerly inside it (torch 2.13, checked by hand: the evaluation's grad-mode
# recompile gone, training's graph reused after it).
COMPILED_IN_PLACE_SKIP = f" A module compiled in place (`module.compile()`, or a library's `engine.compile()`) has no `_orig_mod`: {FORCE_EAGER} there."


def _wrapper(facts: dict[str, Any]) -> str:
    """torch's wrapper (DDP) the calls of the compiled module went through, where the record names one
    (SourceRef.wrapper): its compiled module is the wrapper's `.module`."""
    return next((ref.wrapper for key in ("evaluation_call", "shared_call", "caller")
                 if (ref := facts.get(key)) is not None and getattr(ref, "wrapper", "")), "")


def _grad_mode_skip(code: str, off: str, training_call: bool = False, params: Sequence[str] = (), wrapper: str = "") -> str:
    """The fix that skips an evaluation's compile: the call as the module before torch.compile, or,
    where the line calls the module itself (`self(x)` in its own method: its forward was replaced by
    a compiled function, which has no `_orig_mod`), the forward kept before compiling it. `off`: how
    the evaluation turns grad off ("" where the cause is not the grad mode). Its closing parenthesis
    is the caller's. `training_call`: the line is training's call (the recompile was training's, after
    an evaluation), whose arguments are not the evaluation's: the module alone is named."""
    call = uncompiled_call(code, params, wrapper)
    if training_call:
        call = call.split("._orig_mod(", 1)[0] + "._orig_mod(...)"
    under = f" under {off}" if off else ""
    if call.startswith("self._orig_mod("):
        return ("To skip even that compile, evaluate uncompiled: this call is the module calling itself (`self(...)`), whose "
                "forward was replaced by a compiled function, which has no `_orig_mod`: keep the forward before compiling it "
                f"(`forward = m.forward; m.forward = torch.compile(forward)`) and call `forward(...)`{under} (in "
                "the evaluation")
    return f"To skip even that compile, evaluate with the module as it was before torch.compile (`{call}`{under}"


def _at_evaluation_call(call: SourceRef, cwd: str) -> str:
    """Where the fix that skips an evaluation's compile applies: its own call (`evaluation_call`)."""
    return f"at the evaluation's call, {format_source(call, cwd, with_code=False)}: `{(call.code or '').strip()}`"


def _shared_skip(facts: dict[str, Any], cwd: str, train_eval: bool = False) -> str:
    """The fix that skips an evaluation's compile where training and the evaluation call the
    compiled module from one line (`shared_call`: a forward both go through): editing that call
    alone would skip training's compile too, so the line picks by the state the guard is on (the
    grad mode, or the module's train flag). "" where there is no such line, or its call is not one
    the fix can name (a module calling itself, a line without the compiled module's call)."""
    call = facts.get("shared_call")
    code = (call.code or "").strip() if call is not None and not call.via else ""
    if not code:
        return ""
    wrapper = _wrapper(facts)
    uncompiled = uncompiled_call(code, facts.get("argnames") or (), wrapper)
    module = uncompiled.split("._orig_mod(", 1)[0]
    compiled = uncompiled.replace(".module._orig_mod(" if wrapper else "._orig_mod(", "(", 1)
    if module == "self" or compiled not in code:
        return ""
    state = f"{module}.training" if train_eval else "torch.is_grad_enabled()"
    return (f"To skip even that compile, call the module as it was before torch.compile in the evaluation alone: "
            f"{format_source(call, cwd, with_code=False)} (`{code}`) is training's call too (both reach the compiled code "
            f"through it), so editing it would skip training's compile as well; pick there by the "
            f"{'mode the module is in' if train_eval else 'grad mode'}: `{compiled} if {state} else {uncompiled}`.")


def _evaluation_skip(facts: dict[str, Any], code: str, cwd: str) -> str:
    """A grad-mode cause's fix that skips the evaluation's compile, at the evaluation's own call where
    the record names it (the call `--verify`'s eval-uncompiled patch edits, verify/patches.py)."""
    off = grad_off_words(facts)
    params = facts.get("argnames") or ()
    call = facts.get("evaluation_call")
    if call is not None and call.code and not call.via and facts.get("grad_mode_after") is True:
        return f"{_grad_mode_skip(call.code, off, params=params, wrapper=_wrapper(facts))}, {_at_evaluation_call(call, cwd)})."
    if facts.get("grad_mode_after") is True:
        return f"{_grad_mode_skip(code, off, training_call=True, params=params, wrapper=_wrapper(facts))}, at the evaluation's call: the recompiling call named here is training's)."
    return f"{_grad_mode_skip(code, off, params=params, wrapper=_wrapper(facts))})."


def _in_place_skip(facts: dict[str, Any], cwd: str) -> str:
    """The fix that skips an evaluation's compile where the script compiled the module in place
    (`model.compile()`, the record's compile call): no `_orig_mod` to call, so the evaluation's call
    runs under set_stance("force_eager") (verify/patches.py edits it so). "" otherwise."""
    by = facts.get("compiled_by")
    if not (isinstance(by, dict) and by.get("in_place") and not by.get("via") and by.get("file")):
        return ""
    call = facts.get("evaluation_call")
    at = f", {_at_evaluation_call(call, cwd)}" if call is not None and call.code and not call.via else ""
    return (f"To skip even that compile, run the evaluation eagerly: the module is compiled in place (`.compile()` at "
            f"{display_path(str(by['file']), cwd)}:{by.get('line')}), so it has no `_orig_mod`; {FORCE_EAGER}: training's graph "
            f"is used again after it{at}.")


def _train_eval_skip(facts: dict[str, Any], cwd: str) -> str:
    """A train/eval cause's fix that skips the evaluation's compile, at the evaluation's own call
    where the record names it; else at the line that called the compiled code (the guard's line is
    inside the compiled forward, no call of the compiled module: never the one to edit)."""
    same = "`.eval()` and `.train()` on either switch the same modules"
    params = facts.get("argnames") or ()
    call = facts.get("evaluation_call")
    if call is not None and call.code and not call.via:
        return f"{_grad_mode_skip(call.code, '', params=params, wrapper=_wrapper(facts))}; {same}, {_at_evaluation_call(call, cwd)})."
    caller = facts.get("caller")
    code = caller.code if caller is not None and caller.code and not caller.via else ""
    if facts["train_eval"][2]:
        return f"{_grad_mode_skip(code, '', training_call=True, params=params, wrapper=_wrapper(facts))}; {same}, at the evaluation's call: the recompiling call named here is training's)."
    return f"{_grad_mode_skip(code, '', params=params, wrapper=_wrapper(facts))}; {same})."


def hook_filled_once(facts: dict[str, Any]) -> bool:
    """A traced hook recompiled on its container's emptiness (`not norms`: empty at the first
    compile), once, then never again: the container filled and kept its size."""
    return (facts.get("kind") == GUARD_LENGTH and bool(facts.get("hook")) and bool(facts.get("stabilised"))
            and facts.get("recompiling_steps", 0) <= 1 and length_guard_is_emptiness(facts.get("guard", "")))


def _hook_out_of_dynamo(facts: dict[str, Any], code: str) -> list[str]:
    """The fixes for a backward hook Dynamo recompiles (compiled inside a compiled-autograd graph):
    run it eagerly under torch._dynamo.disable (`--verify`'s hook-dynamo-disable), or read what it
    computes after backward; under a fullgraph=True compiler, where a disabled hook is an error,
    keep what it computes a tensor."""
    target = code.split(".register_hook(")[0].strip().split()[-1] if ".register_hook(" in code else "tensor"
    target = target.split("=")[-1].strip() or "tensor"
    register = ".register_post_accumulate_grad_hook(" if ".register_post_accumulate_grad_hook(" in code else ".register_hook("
    disable = ("Keep the hook out of Dynamo: register `torch._dynamo.disable(hook)` instead of the hook "
               f"(`{target}{register}torch._dynamo.disable(lambda g: ...))`); it runs eagerly, and nothing in it is guarded.")
    after = (f"Or read the value after backward, not in a hook: `{target}.retain_grad()` before backward, then "
             f"`grad_norms.append({target}.grad.norm().item())` after it." if facts.get("container") == "grad_norms" else
             f"Or read the value after backward, not in a hook: `{target}.retain_grad()` before backward, then use `{target}.grad` after it.")
    # torch 2.13, checked by hand on grad_norm_hook.py: as a lambda, `buf.copy_(...)` returns `buf`, which
    # replaces the gradient ("hook '<lambda>' has changed the size of value"); a def returning None keeps it.
    # Under a fullgraph=True compiler too (one graph, no recompile).
    tensor = ("a hook that writes into a tensor made once and returns nothing "
              "(`def record_norm(g): buf.copy_(g.norm())`; not a lambda, whose `buf.copy_(...)` would return `buf` and replace "
              "the gradient), read after backward.")
    if facts.get("ca_fullgraph"):
        # torch 2.13, checked by hand: a disabled hook in a graph compiled with fullgraph=True raises
        # "Unsupported: Skip calling `torch.compiler.disable()`d function".
        return [f"Keep the value a tensor: {tensor} The compiled-autograd graph is compiled with "
                "torch.compile(..., fullgraph=True), where a hook under torch._dynamo.disable is an error (Dynamo may "
                "not skip it in a full graph).",
                after,
                "Or run the hook eagerly under torch._dynamo.disable after dropping fullgraph=True from the compiler "
                "given to compiled autograd."]
    return [disable, after, "Or keep the value a tensor: " + tensor]


def _own_collator(collates: tuple[dict[str, Any], ...], cwd: str) -> str | None:
    """The job's one collate function of its own (a function or class whose code is not a library's:
    capture/steps/collate.py), named with where it is; None where there is none, or several."""
    own = [c for c in collates if c["user"]]
    if len(own) != 1:
        return None
    what = own[0]
    where = f"{display_path(what['file'], cwd)}:{what['line']}"
    name = what["name"].rsplit(".<locals>.", 1)[-1]
    return f"the lambda at {where}" if name == "<lambda>" else f"`{name}` at {where}"


def _own_collator_fix(word: str, own: str, before: int, after: int) -> str:
    """The fix of a length that changed from `before` to `after` in the batches the job's own collate
    function `own` made (its DataLoader's `collate_fn`, HF Trainer's `data_collator`: `word`)."""
    up = [-(-n // 8) * 8 for n in (before, after)]
    rounded = (f"rounding each batch's length up to a multiple of 8 there keeps {before} and {after} two lengths "
               f"({up[0]} and {up[1]}), and Dynamo recompiles at a second length whatever it is" if up[0] != up[1] else
               f"rounding each batch's length up to a multiple of 8 there takes {before} and {after} to {up[0]}, one length, "
               "which removes this size guard where every batch rounds to it (one that rounds to another length still "
               "recompiles once)")
    return (f"Your {word}, {own}, makes the batches, whose lengths differ ({before}, then {after}): pad every batch there to one "
            "length N (at least the longest kept), which removes this size guard; " + rounded + ".")


def _hf_collator(collates: tuple[dict[str, Any], ...]) -> str | None:
    """The one transformers collator instance the job's loaders batched with, and how it pads
    (`DataCollatorWithPadding(padding=True)`); None where there is not exactly one."""
    found = [c for c in collates if c["kind"] == "instance" and c["module"].startswith("transformers.")]
    if len(found) != 1:
        return None
    settings = ", ".join(f"{k}={v!r}" for k, v in found[0]["settings"].items() if v is not None)
    return f"{found[0]['name']}({settings})" if settings else found[0]["name"]


def _collator_fix(before: int, after: int, collates: tuple[dict[str, Any], ...] = (), cwd: str = "") -> str:
    """The fix of a length HF Trainer's data_collator pads each batch to (a recompile from `before`
    to `after`). transformers 5.25 + torch 2.13, checked on HF Trainer jobs with dynamic padding: with
    pad_to_multiple_of=8 a recompile from 29 to 30 (both 32) was gone, one from 46 to 59 (48 and
    64) stayed, as Dynamo recompiles at a second length whatever it is; one length removed both (a
    BERT classifier's DataCollatorWithPadding(padding="max_length"): only a guard that failed beside
    the size's was left; a GPT-2's texts tokenized with padding="max_length" under
    DataCollatorForLanguageModeling, which takes no padding of its own: 7 recompiles -> 0)."""
    one = ('pad every batch to one length N, which removes this size guard: padding="max_length", max_length=N where the '
           'texts are tokenized (N at least the longest kept: the truncation length), or as DataCollatorWithPadding\'s or '
           "DataCollatorForSeq2Seq's arguments (DataCollatorForLanguageModeling takes neither: pad where the texts are tokenized)")
    lead = "HF Trainer's batches are padded by its data_collator, each to its longest (its default): "
    up = [-(-n // 8) * 8 for n in (before, after)]
    own = _own_collator(collates, cwd)
    if own is not None:
        # The job's own function batches (Trainer(data_collator=...)): the change is made there, the
        # HF collators' arguments do not apply.
        return _own_collator_fix("data_collator", own, before, after)
    named = _hf_collator(collates)
    if named is not None:
        lead = f"HF Trainer's batches are padded by its data_collator, {named}, each to its longest: "
    if up == [before, after]:  # already padded to a multiple (pad_to_multiple_of=8 on the collator)
        by = "" if named is None else f", {named}"
        return (f"HF Trainer's batches are padded by its data_collator{by}: {one}. The lengths {before} and {after} are multiples "
                "of 8 already (a collator with pad_to_multiple_of): two lengths, and Dynamo recompiles at a second length "
                "whatever it is. A collate function of your own can pad to one fixed length the same way.")
    if up[0] != up[1]:
        return (f"{lead}{one}. pad_to_multiple_of=8 does not: it rounds {before} and {after} up to {up[0]} and {up[1]}, still "
                "two lengths, and Dynamo recompiles at a second length whatever it is. A collate function of your own can pad "
                "to one fixed length the same way.")
    return (f"{lead}pad_to_multiple_of=8 on the data_collator (every HF collator takes it) rounds {before} and {after} up to "
            f"{up[0]}, one length, which removes this size guard where every batch rounds to it (one that rounds to another "
            f"length still recompiles once); to leave no other length, {one}. A collate function of your own can pad the same way.")


def _guard_fixes(facts: dict[str, Any], on_ca: bool, code: str, cwd: str = "") -> list[str]:
    """The fixes that fit the kind of guard that failed (never one written for another kind)."""
    kind, guard = facts.get("kind", ""), facts.get("guard", "")
    # (an evaluation that met the change with grad off is the same change, not another: Cause.place;
    # recompiles after training's last step, in one evaluation or prediction, are a one-time cost too)
    once = ((bool(facts.get("stabilised")) or bool(facts.get("after_training")))
            and facts.get("recompiling_steps", 0) - len(facts.get("evaluation_steps") or ()) <= 1)
    if facts.get("library_hooks"):
        package = facts["library_hooks"][0]
        if _bool_flag(facts):
            name = facts["value_changes"][0].source.rsplit(".", 1)[-1]
            whose = (" (DistributedDataParallel's: `no_sync()` sets it False for the micro-batches whose gradients are not "
                     "all-reduced, and the step's last backward runs with it True)") if name == "require_backward_grad_sync" else ""
            return [f"Nothing to change in your code: the value is {package}'s, a bool its hooks read (`{name}`){whose}; the "
                    "graph's code is compiled once for each of its two values and cached, however often it flips (two entries "
                    "against the frame's recompile limit, torch._dynamo.config.recompile_limit)."]
        if facts.get("stabilised") and kind == GUARD_ID:
            # DeepSpeed's ZeRO: one hook per parameter, each holding its own parameter in its closure.
            return [f"Nothing to change in your code: the hooks are {package}'s, made once, each holding another object (a "
                    "parameter) in its closure; the graph's code was compiled again for each it met, then cached."]
        if facts.get("stabilised"):
            return [f"Nothing to change in your code: the value is {package}'s, read by its hooks, and the graph's code was "
                    f"compiled again as it changed (its state filling in the first steps), then cached."]
        return [f"Not your code: {package}'s hooks read a value that keeps changing, and compiled autograd traces them into "
                f"the backward. Report it to {package} with this guard; meanwhile torch._dynamo.config.recompile_limit "
                "bounds the recompiles (past it the graph runs uncompiled)."]
    if facts.get("torch_frames") and not facts.get("hook_runner") and backward_function_class(guard) is None:
        # (A Function class made anew at each call, torch's template under the eager backend, has fixes of its own below.)
        where = _and_list(facts["torch_frames"])
        if facts.get("stabilised"):
            return [f"Nothing to fix in the script: the code is torch's own ({where}), which the compiled-autograd graph runs (a "
                    "custom autograd Function's backward, called through torch's call_backward, and past a graph break in it, "
                    "the rest of it); Dynamo compiled it again for each value or type it met there, then cached it."]
        return [f"Not your code: torch's own code ({where}), which the compiled-autograd graph runs, keeps recompiling for the "
                "values it meets. Report it to PyTorch with this guard; meanwhile torch._dynamo.config.recompile_limit bounds the "
                "recompiles (past it the code runs uncompiled), or run the job without compiled autograd."]
    if facts.get("another_optimizer"):
        return ["Nothing to fix: each optimizer's step() is compiled once for it (and once more when its state fills) and "
                "cached. All optimizers count against the recompile limit of these shared frames "
                "(torch._dynamo.config.recompile_limit): with many optimizers the later ones run eagerly; raise the limit then."]
    if facts.get("optimizer_state") and once:
        return ["Nothing to fix: a compiled optimizer step() is compiled twice, for its empty and its filled state, "
                "and both are cached."]
    if facts.get("optimizer_lr"):
        changes = facts.get("value_changes") or []
        # torch 2.13, checked by hand: Adam(lr=torch.tensor(0.01)) with LambdaLR, compiled step(): no recompile; so with
        # DeepSpeed 0.19.8's WarmupLR (its update_lr fills a tensor rate): no recompile of step() for the rate.
        fixes = ["Give the optimizer a tensor learning rate, e.g. torch.optim.Adam(params, lr=torch.tensor(0.01)): torch's "
                 "LR schedulers (and DeepSpeed's) then write each new rate into the tensor (`fill_`), and the compiled step() "
                 "is not recompiled for it. A schedule that assigns a Python number to `group['lr']` replaces the tensor."]
        typed = next((c for c in changes if _type_only(c)), None)
        if typed is not None:
            fixes.append(f"Or give the schedule float rates: its first rate was the {typed.before_type} `{typed.before}` (a "
                         f"minimum or starting rate written `{typed.before}`, not `{float(typed.before)!r}`), which cost the "
                         f"recompile {typed.compile_id}.")
        taken = next((c for c in changes if c.as_input), None)
        if taken is not None and facts.get("stabilised"):
            fixes.append(f"Or leave it: from {taken.compile_id} on, step() takes the rate as an input, and the scheduler's "
                         f"later rates recompile nothing ({plural(len(changes), 'recompile')} in all, once).")
        return fixes
    if facts.get("other_module_by_guards") and facts.get("wrapped_optimizer_step"):
        return ["Nothing to fix: compiled once and cached. To give the step its own frame and recompile limit, compile a "
                "function of your own that calls it (`@torch.compile` on `def opt_step(): opt.step()`) instead of "
                "torch.compile(opt.step)."]
    if facts.get("other_module_by_guards") and facts.get("wrapped_function"):
        return ["Nothing to fix: compiled once and cached. To give it its own frame and recompile limit, compile a function "
                "of your own that calls it."]
    if facts.get("other_instance"):
        cls = _instance_words(facts)[0]
        return [f"Nothing to fix: each size of {cls} is compiled once and cached; no input marked dynamic (maybe_mark_dynamic, "
                "dynamic=True) removes it, the parameters' sizes stay static. With more sizes than the recompile limit, the "
                "last ones run eagerly: raise torch._dynamo.config.recompile_limit."]
    if facts.get("other_module_by_guards"):
        return ["Nothing to fix: each compiled module is compiled once and cached. With more compiled modules than the "
                "recompile limit, the last ones run eagerly: raise torch._dynamo.config.recompile_limit, or compile the one "
                "module that calls them (torch.compile the parent) instead of each."]
    if kind == GUARD_GRAD_MODE and facts.get("reentrant_recompute"):
        return ["checkpoint(..., use_reentrant=False): its forward runs with grad enabled, as its recompute does, so the "
                "compiled function is compiled once (`cagtool checkpointing` verifies it on your job; torch recommends "
                "use_reentrant=False)."]
    if kind == GUARD_GRAD_MODE:
        # One recompile on the grad mode is the second mode's one graph, however few steps followed it (a
        # run that ended, or was stopped, right after its first evaluation).
        return ["Nothing to fix: the training graph and the evaluation graph are both cached after their first call."
                if once or len(facts.get("failures") or ()) == 1 else
                "Keep the grad mode of each call site fixed: every grad mode gets its own graph.",
                _in_place_skip(facts, cwd) or (_shared_skip(facts, cwd) or _evaluation_skip(facts, code, cwd)) + COMPILED_IN_PLACE_SKIP]
    if facts.get("optional_argument"):
        name = facts["optional_argument"]
        same = (f"pass `{name}` the same way in every call: always a tensor (for a mask, one of ones where nothing is masked), "
                "or never")
        return ([f"Nothing to fix: each form of the call (`{name}` None, `{name}` a tensor) is compiled once and cached.",
                 f"To compile one graph, {same}."] if once or facts.get("stabilised") else [f"To compile one graph, {same}."])
    if facts.get("inference_switch") is not None:
        return ["Nothing to fix: the graph for inference mode and the other are both cached after their first call."
                if once else "Keep each compiled call in or out of torch.inference_mode() for good: each gets its own graph.",
                "To save that compile, evaluate under one context everywhere: torch.no_grad() for every evaluation (Lightning: "
                "Trainer(inference_mode=False), so that validate() and test() run under no_grad as the validation in fit() does), "
                "or torch.inference_mode() for every one."]
    if facts.get("train_eval") and facts.get("backward_through") and not facts["train_eval"][2]:
        # A backward ran through the eval-mode graph: the module was frozen for training, not evaluated.
        return ["Nothing to fix: the train-mode graph and the eval-mode graph are both cached after their first call."
                if once else "Keep each compiled call in one mode: every train/eval mode gets its own graph.",
                "A backward ran through the graph of the module in eval mode: it was switched for training (a BatchNorm's "
                "statistics frozen for a fine-tuning), not for an evaluation. To save that compile, switch it before the first "
                "compiled call (and again after each `.train()` of the model): every step then runs in one mode."]
    if facts.get("train_eval"):
        return ["Nothing to fix: the train-mode graph and the eval-mode graph are both cached after their first call."
                if once else "Keep each compiled call in one mode: every train/eval mode gets its own graph.",
                _in_place_skip(facts, cwd) or (_shared_skip(facts, cwd, train_eval=True) or _train_eval_skip(facts, cwd)) + COMPILED_IN_PLACE_SKIP]
    if kind == GUARD_GLOBAL_STATE:
        if "autocast" in guard:
            same = ("each setting has its own forward graph, and its own backward graph (autocast's casts are nodes in it), "
                    "each compiled once")
            if once:
                return [f"Nothing to fix for autocast on in some calls and off in others: {same} and cached (one recompile, "
                        "however often the setting alternates).",
                        "To skip that recompile, run every step under the same autocast setting; that changes what the steps "
                        "under the other setting compute (their precision)."]
            return [f"Run every step under the same autocast setting (on for all of them, or for none): {same}."]
        if "num_threads" in guard:
            return ["Call torch.set_num_threads(n) once, before the first compiled call, and never again (or stop the library "
                    "that resets it each step): each new thread count recompiles every compiled frame and graph."]
        # A second torch.compile of the same function shares its code's cache: it recompiles all the same.
        return ["Set that global state once, before the first compiled call, and keep it the same around every compiled call: "
                "each new setting compiles the code again."]
    if kind == GUARD_REQUIRES_GRAD and facts.get("requires_grad_inputs") and facts.get("requires_grad_loop") is not None:
        return ["Nothing to fix: the loop's first call (data, without grad) and its later calls (activations, with grad) come "
                "every step, one graph for each, compiled once and cached."]
    if kind == GUARD_REQUIRES_GRAD and facts.get("requires_grad_inputs"):
        return ["Nothing to fix when both kinds of call are part of every step: each graph is compiled once and cached."
                if once or facts.get("stabilised") else
                "Keep each call site's inputs either detached or not, the same every step: each combination is its own graph."]
    if kind == GUARD_REQUIRES_GRAD:
        ways = requires_grad_ways(facts)
        change = {("frozen",): "a freeze", ("unfrozen",): "an unfreeze"}.get(tuple(ways), "a freeze or unfreeze")
        needed = {("frozen",): "the frozen parameters have no gradients to accumulate any more",
                  ("unfrozen",): "the parameters that now train have gradients to accumulate"}.get(
                      tuple(ways), "the parameters that train decide which gradients it accumulates")
        return [f"Nothing to fix for {change} done once or a few times: each set of trainable parameters is compiled once and cached."
                if once else "Freezing and unfreezing often recompiles each time: unfreeze in a few fixed stages.",
                f"The new backward graph that goes with it is needed: {needed}."]
    if kind == GUARD_NONE and (changes := facts.get("value_changes")):
        first = changes[0]
        if first.after is not None and first.source.startswith("self."):
            owner = dict(first.owners).get("self")
            on = f"`model{first.source[len('self'):]} = {first.after}`"
            target = f"{on} (`model` being the {owner} the compiled code runs as `self`)" if owner else f"{on} on the object the compiled code runs as `self`"
        elif first.after is not None:
            target = f"`{first.source} = {first.after}`"
        else:
            target = f"`{first.source}` to the value it takes"
        if once or facts.get("stabilised"):
            made = f", or give the {first.owners[-1][1]} that value where it is made" if first.owners and first.owners[-1][0] != "self" else ""
            return [f"Set it before the first compiled call, to the value the first call gives it: {target}{made}; then the "
                    "first compile already sees it.",
                    "Or accept it: a one-time recompile, cached from then on."]
        return [f"Keep `{first.source}` set from before the first compiled call ({target}): each time it goes back to None "
                "the compiled code is specialised anew."]
    if kind == GUARD_LENGTH:
        if hook_filled_once(facts):
            # torch 2.13, measured by `--verify` on a grad-norm hook per parameter writing into a dict by
            # name: hook-dynamo-disable made it 1 -> 2 recompiles and 7 graph breaks; the dict made with
            # its keys before the first backward, 1 -> 0 (tests/scripts/hook_norms_by_name.py).
            name = facts.get("container") or "the container"
            return [f"Nothing to fix: one recompile when the hook first filled `{name}`, cached from then on.",
                    f"To avoid even that one, give `{name}` its keys before the first backward (for a dict by parameter "
                    f"name: `{name} = {{name: None for name, _ in model.named_parameters()}}`), so the hook's first compile "
                    "already sees it filled. Keeping the hook out of Dynamo (torch._dynamo.disable) would cost more: "
                    "Dynamo then splits the compiled-autograd graph around the hook, in every backward."]
        if facts.get("hook"):
            return _hook_out_of_dynamo(facts, code)
        if module_hooks_list(facts.get("container")):
            return ["Register the module's full backward hook once, before the training loop, and keep its handle: each "
                    "`register_full_backward_hook` call adds one more hook to the list (every copy runs at each backward)."]
        name = facts.get("container") or ""
        if ".append(" in code or ".extend(" in code or (name and re.search(rf"\b{re.escape(name)}\s*(\+=|\[[^\]]*\]\s*=)", code)):
            # The compiled code grows the list itself: every call makes it longer.
            return ["Keep the list out of the compiled code: append to it outside the compiled function (after it returns), "
                    "or keep what it collects in a tensor."]
        if name == "args" and "args" not in (facts.get("argnames") or []) and facts.get("stabilised"):
            # The frame's own *args (no parameter of that name): a wrapper whose callers pass their
            # positional arguments differently (transformers' `deprecate_kwarg` around several forwards).
            return ["Nothing to fix: `args` is the compiled function's own *args, and its callers pass it another "
                    "number of positional arguments: Dynamo compiles it once for each number and caches each."]
        # The code only reads a list whose length differs between calls (a list of tensors passed in,
        # one per crop or view): nothing in the compiled code to move out.
        held = f"`{name}`" if name else "the list"
        stack = (f"pass {held} as one tensor (torch.stack, where its items have one shape): its length is then a "
                 "dimension, which Dynamo makes dynamic at its first change (one recompile, not one per length), or from "
                 f"the first call with {MAYBE_MARK_DYNAMIC.replace('tensor, dim', 'tensor, 0')}.")
        if facts.get("stabilised"):
            return [f"Nothing to fix when {held} takes a few lengths: each length is compiled once and cached.", f"Or {stack}"]
        return [f"{held[0].upper()}{held[1:]} keeps taking new lengths: {stack}"]
    if facts.get("other_module") and kind in (GUARD_SIZE, GUARD_TENSOR_META, GUARD_ID, GUARD_TYPE):
        return ["Nothing to fix if it is another compiled module: each is compiled once and cached. With more compiled modules "
                "than the recompile limit, the last ones run eagerly: raise torch._dynamo.config.recompile_limit, or compile "
                "one function that calls them."]
    if kind == GUARD_SIZE and facts.get("compiled_dynamic"):
        size = size_guard(guard)
        if size is not None and size[2] in (0, 1):
            # torch 2.13, checked by hand: maybe_mark_dynamic leaves a first batch of 1 specialised;
            # backed_size_oblivious compiles it as any size (one graph for 1, 8, 5, 3 rows).
            return ["A size of 0 or 1 is specialised even when marked dynamic: set "
                    "torch.fx.experimental._config.backed_size_oblivious = True before the first call, or make the first "
                    f"call with a size other than {size[2]} (one recompile for the batch of {size[2]} otherwise)."]
        where = f" (dim {size[1]} of the tensor passed as `{size[0]}`)" if size and not _dynamo_made(size[0]) else (
            f" (dim {size[1]} of the input `{size[0]}` is computed from: a value Dynamo carried across a graph break)" if size else "")
        fixes = [f"Mark the varying dimension dynamic before each call: {MAYBE_MARK_DYNAMIC}{where}; "
                 "dynamic=True alone did not keep it dynamic."]
        if size is not None and size[2] > 1:
            fixes.append("Or turn duck sizing off before compiling: torch.fx.experimental._config.use_duck_shape = False.")
        return fixes
    if kind == GUARD_SIZE and facts.get("hook_runner") and not _RANK_MISMATCH.search(guard) and size_guard(guard) is not None:
        # torch's call_hook given each parameter's gradient (pytorch/examples' VAE with a hook per weight):
        # no batch to drop, no dimension of the script's to mark.
        if facts.get("stabilised"):
            return ["Nothing to fix: torch's call_hook met each hook's tensor size once; Dynamo compiled it once for each "
                    "and caches them."]
        return _hook_out_of_dynamo(facts, code)
    if kind == GUARD_SIZE and facts.get("hook") and not facts.get("hook_runner") and not facts.get("stabilised"):
        # The user's hook, compiled inside a compiled-autograd graph, given gradients of several
        # tensors (one hook on several parameters): no batch, no dimension to mark (pytorch/examples'
        # VAE with a grad-norm hook per weight: `--verify`'s hook-dynamo-disable, 10 -> 2 recompiles).
        return _hook_out_of_dynamo(facts, code)
    if kind == GUARD_SIZE and _RANK_MISMATCH.search(guard):
        # `tensor 'args[0]' rank mismatch. expected 1, actual 2`: a 2-D weight where a 1-D bias was (a
        # CA graph's call_hook run for each parameter's hook). No dimension marked dynamic answers it.
        ranks = _RANK_MISMATCH.search(guard)
        dims = f" ({ranks['expected']}-D, then {ranks['actual']}-D)" if ranks and ranks["expected"] else ""
        runner = facts.get("hook_runner")
        if runner and runner[1]:
            package = runner[1]
            then = ("compiled once for each and cached" if facts.get("stabilised") else
                    "compiled again for each it met; past torch._dynamo.config.recompile_limit the graph runs uncompiled")
            given = "its parameter" if _ON_PARAMETER.search(guard) else "a tensor of its own"
            return [f"Not your code: {package}'s hooks, each given {given}{dims}, run through torch's call_hook, "
                    f"{then}. Nothing in your script passes those tensors: report it to {package} with this guard if the "
                    "recompiles cost too much."]
        if facts.get("stabilised"):
            return [f"Nothing to fix: the compiled code met a tensor with another number of dimensions{dims}, which no "
                    "dynamic dimension answers; Dynamo compiled it once for each and caches both."]
        return ["Tensors with another number of dimensions keep reaching the compiled code: no dimension marked dynamic "
                "answers that; pass tensors of one rank, or keep the call out of the compiled code."]
    if kind == GUARD_SIZE and (ca_input := _ca_graph_input(facts, on_ca)) is not None:
        # torch 2.13, by --verify on the shape loop, a length varying per batch and a last batch:
        # compiled autograd started dynamic leaves this recompile (Dynamo recompiles 1 -> 1), the
        # graph input named in TORCH_COMPILE_DYNAMIC_SOURCES removes it (1 -> 0).
        name, dim, _, _, spelled = ca_input
        already = ("Compiled autograd already started dynamic here (its first graph takes its sizes as inputs); "
                   if facts.get("ca_started_dynamic") else "")
        fixes = [f"{already}`{name}` is compiled autograd's, so nothing in the script marks it, and starting compiled autograd "
                 "dynamic (`cagtool run --dynamic`) does not reach Dynamo's compile of its graph: name it in "
                 f"TORCH_COMPILE_DYNAMIC_SOURCES (`{spelled}`, as torch's own PGO suggestion lists it where torch made one), "
                 "which compiles that graph's code dynamic from the start. `--verify` measures it (torch-pgo; "
                 "torch-pgo-ca-dynamic with compiled autograd's own sizes dynamic too, where it also recaptured). "
                 "Or keep the sizes fixed: pad or bucket the data."]
        if smaller_batch(guard) is not None:
            fixes.insert(0, loader_last_fix(facts))
        return fixes
    if kind == GUARD_SIZE and (size := size_guard(guard)) is not None and not on_ca and module_attribute(size[0]):
        return [f"Make `{size[0]}` from the call's own input inside the compiled function rather than keeping it on the module "
                "between calls (a mask built for each call's length, or one kept per length), so that no call meets a tensor "
                "another call sized; or leave it: once Dynamo made the dimension dynamic here, later sizes reuse that graph."]
    if kind == GUARD_SIZE and not on_ca and ((size := size_guard(guard)) is not None and size[3] in (0, 1) and smaller_batch(guard)
                                             or specialised_size(guard) is not None):
        evaluation = (f"the call is in `{facts['called_in']}`" if _EVALUATION_FUNCTION.search(facts.get("called_in") or "")
                      else "it ran with grad mode off" if facts.get("grad_mode_after") is False
                      else "it came after training, no backward after it" if facts.get("after_training") else None)
        if evaluation is not None:
            # An evaluation's last batch (Lightning's validation_step, its sanity check too): no drop_last there.
            return [f"If it is the evaluation's last batch ({evaluation}), keep it: drop_last on the evaluation's DataLoader would "
                    "leave its samples out of the metric, and a batch of one row compiles once and is cached. No dimension "
                    "marked dynamic removes it (a size of 0 or 1)."]
        if by_hand(facts):
            return [HAND_SLICE_FIX.replace("every call then has one size.", "every call then has one size, the only fix that "
                                           "removes this recompile in every frame."), _ZERO_ONE_FIXES[1]]
        if by_trainer(facts):
            return [_ZERO_ONE_FIXES[0].replace(LOADER_LAST_FIX_PREFIX, LOADER_LAST_FIX_TRAINER_PREFIX, 1), _ZERO_ONE_FIXES[1]]
        return list(_ZERO_ONE_FIXES)
    if kind == GUARD_SIZE:
        size = size_guard(guard)
        if size is not None and not on_ca:
            # torch 2.13, checked by hand: maybe_mark_dynamic on `mask` alone still recompiles on `mask`
            # when `h * mask` ties its length to a static `tokens`; marked on both, no recompile.
            lead = ("To skip even that recompile, mark" if once and not facts.get("none_guards_broken") else
                    "To remove this size guard, mark" if once else "Mark")
            if _dynamo_made(size[0]):
                fixes = [f"`{size[0]}` is no variable of yours: it is a value Dynamo carried across a graph break into the frame "
                         f"that resumes after it. {lead} dim {size[1]} dynamic on the input it is computed from, before the call "
                         f"({MAYBE_MARK_DYNAMIC}), and the same on every other input whose size the code ties to it; or compile "
                         "with dynamic=True; or remove the graph break, so that no frame resumes with it."]
            else:
                fixes = []
            # The tensor as the line that called the compiled code names it: the guard's own line is
            # inside the compiled function (`len(src)` in word_language_model's forward, called as
            # `model(data)`), where its name is the parameter's, not the caller's.
            caller = facts.get("caller")
            by_caller = caller is not None and bool(caller.code)
            variable = _tensor_variable(size[0], caller.code if by_caller else code, facts.get("argnames"), own_line=not by_caller)
            mark = (f"torch._dynamo.maybe_mark_dynamic({variable}, {size[1]})" if variable is not None
                    else f"torch._dynamo.maybe_mark_dynamic(tensor, {size[1]}) on {_tensor_words(size[0])}")
            if not fixes and size[2] in (0, 1):
                # torch 2.13, checked by hand (a generation loop from a length of 1): maybe_mark_dynamic,
                # mark_dynamic or TORCH_COMPILE_DYNAMIC_SOURCES each leave the recompile at length 2;
                # backed_size_oblivious with maybe_mark_dynamic compiles one graph for every length.
                fixes = [f"{'Nothing to fix: the' if once else 'The'} first call's size {size[2]} (dim {size[1]}) was compiled as a "
                         f"constant: Dynamo always specialises a size of 0 or 1, even one marked dynamic, so maybe_mark_dynamic "
                         "or TORCH_COMPILE_DYNAMIC_SOURCES leave this recompile. At it Dynamo compiles the dimension dynamic "
                         "(automatic dynamic shapes), and later sizes reuse that graph.",
                         "To skip even that recompile: torch.fx.experimental._config.backed_size_oblivious = True before the first "
                         f"call, with {mark} before each call (a size of {size[2]} is then compiled as any size); or make the "
                         f"first call with a size other than {size[2]}."]
            accelerate = accelerate_compiled(facts) if not fixes else None
            if accelerate is not None:
                # torch 2.13 + accelerate, checked on tests/scripts/hf_trainer_classifier.py --ragged:
                # with the variable set, the forward's size recompile is gone.
                trainer = " (HF Trainer's, with torch_compile=True)" if by_trainer(facts) else ""
                fixes = [f"accelerate made the compile call{trainer} at {accelerate}, with torch.compile's dynamic unset: "
                         "ACCELERATE_DYNAMO_USE_DYNAMIC=1 in the job's environment (read when accelerate's dynamo plugin is made; "
                         "`accelerate launch --dynamo_use_dynamic`) compiles it with dynamic=True, every size dynamic from the first "
                         + ("call: that removes this cause (the size guard), not the recompile, in which another guard failed too (\"What "
                            "remains\" in `recompiles --explain`)."
                            if facts.get("none_guards_broken")
                            else "call, and this recompile goes.")]
            if caller is not None and caller.via and (not fixes or accelerate is not None):
                # No line of the user's passes the tensor: a library calls the compiled model (HF
                # Trainer's compute_loss). torch's PGO sources reach it whoever calls; a mark made
                # where the batch is made reaches it only if the library passes that tensor on.
                fixes += [f"{'Or: t' if fixes else 'T'}he compiled call is a library's ({caller.via}, reached from {display_path(caller.file, cwd)}:"
                         f"{caller.line}): no line of yours passes the tensor. {lead} dim {size[1]} of {_tensor_words(size[0])} "
                         "dynamic from the first call with TORCH_COMPILE_DYNAMIC_SOURCES in the job's environment (torch's PGO line "
                         "lists the sources), or with torch._dynamo.maybe_mark_dynamic where the batch is made ("
                         + (f"your {own_batches}" if (own_batches := _own_collator(tuple(facts.get("collate_functions") or ()), cwd))
                            else "your loop's own: no DataLoader ran" if by_hand(facts)
                            else "a DataLoader's collate_fn; HF Trainer's data_collator")
                         + ") where the library passes that tensor on as it is (a copy to "
                         "another device carries no mark); pad or bucket if it takes many values."]
            if size[1] > 0 and by_trainer(facts):
                fixes.append(_collator_fix(size[2], size[3], tuple(facts.get("collate_functions") or ()), cwd))
            by = facts.get("compiled_by")
            own_compile = (f" (your torch.compile at {display_path(str(by.get('file')), cwd)}:{by.get('line')})"
                           if isinstance(by, dict) and not by.get("via") and by.get("dynamic") is None and by.get("file") else "")
            fixes = fixes or [f"{lead} the dimension dynamic before the call: "
                     f"{mark}, and the same on every other "
                     "input whose size the code ties to it (a batch's tokens and its mask): marked on one alone, a static "
                     f"one it meets specialises it again. Or compile with dynamic=True{own_compile}; pad or bucket if it takes many values."]
            own = _own_collator(tuple(facts.get("collate_functions") or ()), cwd) if size[1] > 0 else None
            if own is not None and not by_trainer(facts):
                fixes.append(_own_collator_fix("DataLoader's collate_fn", own, size[2], size[3]))
            recomputes = facts.get("reentrant_recomputes") or 0
            if recomputes:
                # torch 2.13, checked by hand: marked, the forward keeps one graph and the reentrant
                # recompute still recompiles; with use_reentrant=False as well, no recompile.
                fixes.append(f"{plural(recomputes, 'recompile')} of these {'is' if recomputes == 1 else 'are'} the reentrant "
                             "checkpoint's recompute in the backward, which runs on detached copies of the inputs: they keep "
                             "no mark. checkpoint(..., use_reentrant=False) recomputes from the marked inputs themselves.")
        else:
            fixes = [f"A tensor's shape changed: mark the dimension dynamic ({MAYBE_MARK_DYNAMIC}) or compile with dynamic=True; "
                     "pad or bucket if it takes many values."]
        # An evaluation's last batch that recompiled once: keeping it is the advice, the mark a way
        # to skip even that compile (first where it keeps recompiling).
        keep_at = 0 if once else len(fixes)
        if smaller_batch(guard) is not None and _EVALUATION_FUNCTION.search(facts.get("called_in") or ""):
            fixes.insert(keep_at, f"If it is the evaluation's last batch (the call is in `{facts['called_in']}`), keep it: drop_last "
                         "there would leave its samples out of the metric, and the smaller batch compiles once and is cached.")
        elif smaller_batch(guard) is not None and facts.get("after_training"):
            fixes.insert(keep_at, "If it is an evaluation's or a prediction's batch (it came after training, no backward after it), "
                         "keep it or mark it: drop_last on their DataLoader would leave samples out of what they compute, and the "
                         "batch compiles once and is cached.")
        elif smaller_batch(guard) is not None and facts.get("grad_mode_after") is False:
            fixes.insert(keep_at, "If it is the evaluation's last batch (it ran with grad mode off), keep it: drop_last on the evaluation's "
                         "DataLoader would leave its samples out of the metric, and the smaller batch compiles once and is cached.")
        elif smaller_batch(guard) is not None:
            # A mark reaches no reentrant recompute (its inputs are detached copies): there the batch is the fix.
            fixes.insert(len(fixes) if not facts.get("reentrant_recompute") else 0, loader_last_fix(facts))
        if _ON_PARAMETER.search(guard):
            fixes.append(_PARAMETER_HINT_SIZE)
        if facts.get("none_guards_broken"):
            fixes.append(_none_guards_broken_words(facts["none_guards_broken"]))
        if on_ca and facts.get("ca_started_dynamic"):
            fixes.append("Compiled autograd already started dynamic here (its first graph takes its sizes as inputs): Dynamo's "
                         "compile of that graph specialized a size, which torch's own PGO suggestion "
                         "(TORCH_COMPILE_DYNAMIC_SOURCES, printed below where torch made one) makes dynamic from the start.")
        elif on_ca and facts.get("backward_outside_compiled"):
            fixes.append(f"On a compiled-autograd graph: start compiled autograd dynamic ({CA_ENABLE_DYNAMIC_OUTSIDE}; "
                         "`cagtool run --dynamic`).")
        elif on_ca:
            fixes.append("On a compiled-autograd graph: start compiled autograd dynamic (torch.compile(..., dynamic=True) on the "
                         "function that runs backward, or compiled_autograd._enable(compiler, dynamic=True); `cagtool run --dynamic`).")
        return fixes
    if kind == GUARD_TENSOR_META:
        return ["Pass tensors of one dtype and device to the compiled code on every call."]
    if kind == GUARD_ID and hook_code_guard(guard) is not None:
        # Checked on torch 2.13: a lambda made again from the same line each step keeps its code and never recompiles.
        how = ("register one function (one def) wherever this backward's hooks are registered, and vary what it does "
               "with a tensor it reads")
        if facts.get("stabilised"):
            return ["Nothing to fix: Dynamo compiled the graph once more for the other hook function's code and keeps both "
                    "(a function made again from the same line, a lambda in the loop, has the same code and does not "
                    f"recompile). To save that compile, {how}."]
        return [f"Each hook function of other code compiles the graph again: {how}."]
    if kind == GUARD_ID:
        return ["A different object (module, function, closure) reaches the compiled code each time: create it once, outside the loop."]
    if kind == GUARD_TYPE and (tensor_type := tensor_type_guard(guard)) is not None and facts.get("hook_runner"):
        types, package = facts["hook_runner"]
        kinds = ", ".join(_HOOK_KINDS.get(t, t) for t in types) or "its hooks"
        whose = f"; every hook it calls is {package}'s" if package else ""
        return [f"Nothing to fix: the compiled-autograd graph runs its hooks ({kinds}{whose}) through torch's call_hook, "
                "which Dynamo compiles once per kind of argument it is given (a tensor hook a gradient, a post-accumulate-grad "
                "hook the Parameter itself) and caches: one recompile, not one per step."]
    if kind == GUARD_TYPE and (tensor_type := tensor_type_guard(guard)) is not None:
        # torch 2.13, checked by hand: a function compiled for `w.detach()` recompiles when given the
        # Parameter `w`, once, and both graphs are kept.
        parameter = tensor_type[1] == "nn.Parameter"
        how = ("pass the same kind every call: the Parameter itself, or `p.detach()` (a plain Tensor of the same "
               "values, through which no gradient flows)" if parameter else "pass tensors of one type every call")
        return [f"Dynamo guards the exact type of each tensor input, and a Tensor subclass ({tensor_type[1] or 'its new type'}) "
                f"is a type of its own: each type compiles once and is cached, so a change made once costs one recompile. "
                f"To avoid it, {how}."]
    if kind == GUARD_TYPE and (function_class := backward_function_class(guard)) is not None:
        return [TEMPLATE_FIX if function_class == TEMPLATE_NODE else CLASS_ONCE_FIX]
    if kind == GUARD_TYPE and (argument := type_variant(guard)) is not None and facts.get("stabilised"):
        # One code object that calls of several classes go through (a library's decorator wrapper
        # around several modules' forwards, a frame of its own after a graph break): one entry each.
        classes = list(dict.fromkeys(found for kind_text in facts.get("guard_kinds") or [guard]
                                     if (found := _GUARD_CLASS.search(kind_text)) is not None and (found := found.group(1))))
        named = f" than {' and '.join(f'`{c}`' for c in classes)}, the one it was compiled for" if classes else ""
        return [f"Nothing to fix: the compiled code is called with `{argument}` of another class{named}, as a library's wrapper "
                "that several modules' forwards go through is: Dynamo compiles it once for each class and caches each, a "
                "recompile per class, not per call."]
    if kind == GUARD_TYPE:
        return ["A value of a different type reaches the compiled code: keep argument types fixed."]
    if kind in (GUARD_VALUE, GUARD_OTHER) and _bool_flag(facts):
        name = facts["value_changes"][0].source
        return [f"Nothing to fix: each of the two values of `{name}` is compiled once and cached, however often it flips "
                "(two of the frame's entries against its recompile limit, torch._dynamo.config.recompile_limit). Making it "
                "dynamic does not apply: a bool is always specialised.",
                "To have one graph for both values, pass the flag as a tensor and compute with it instead of branching on it "
                "(`h = h + flag.float()`, torch.where(flag, a, b)), or torch.cond(flag, true_fn, false_fn, operands) for "
                "branches of different code that return tensors of the same shapes (not a tensor in one and None in the other)."]
    if (kind in (GUARD_VALUE, GUARD_OTHER) and facts.get("hook") and not facts.get("hook_runner") and facts.get("value_changes")
            and not (once or facts.get("stabilised"))):
        # A backward hook compiled inside a compiled-autograd graph, one per parameter (a lambda
        # with the parameter's name as its default argument, pytorch/examples' VAE with a grad-norm
        # hook per parameter): each call brings its own value, the same code compiled once per value.
        name = facts["value_changes"][0].source
        fixes = _hook_out_of_dynamo(facts, code)
        fixes[0] += (f" `{name}` takes another value at each call of the hook (one per tensor it is registered on): "
                     "keeping it constant is not the point, the hook's calls are many.")
        return fixes
    if kind in (GUARD_VALUE, GUARD_OTHER) and _made_input(facts) and facts.get("stabilised"):
        name = facts["value_changes"][0].source
        first = f"Nothing to fix: one recompile, then `{name}` is an input of the compiled graph and its later values reuse it."
        if kind == GUARD_OTHER:  # an attribute Dynamo reads (a custom Function's ctx.lambd in its backward): no argument to pass otherwise
            return [first]
        return [first,
                f"To skip that recompile too, pass it as a tensor (`torch.tensor({name})`) where it is only used in tensor "
                "arithmetic: a tensor's value is not guarded. (TORCH_COMPILE_DYNAMIC_SOURCES, which torch's PGO suggests for "
                "it, does not: Dynamo still compiles a float's first value as a constant.)"]
    if kind == GUARD_VALUE and _module_int(facts):
        name = facts["value_changes"][0].source
        seen = len({c.before for c in facts["value_changes"]} | {c.after for c in facts["value_changes"] if c.after is not None})
        return [f"Nothing to fix if `{name}` takes a few values (a pointer that cycles, a phase): each is compiled once and "
                f"cached ({seen} seen), and each counts against the frame's recompile limit "
                "(torch._dynamo.config.recompile_limit), past which the frame runs uncompiled." if facts.get("stabilised") else
                f"`{name}` keeps taking new values, and each is compiled anew until the recompile limit "
                "(torch._dynamo.config.recompile_limit) sends the frame to eager.",
                "To compile it once for every value: set torch._dynamo.config.allow_unspec_int_on_nn_module = True before the "
                f"first compiled call; Dynamo then takes `{name}` as an input after its first change, as it does an int "
                "argument, and later values reuse that graph (a branch on it compiles once per side it takes). Or keep it "
                "out of the compiled code: update and read it in the training loop" + (
                    " (not in a function under torch.compiler.disable: the frame is compiled with fullgraph=True, where "
                    "calling one is an error)." if facts.get("fullgraph") else ", or in a function under torch.compiler.disable.")]
    if kind == GUARD_VALUE and _specialised_each(facts) and _loop_bound(facts["value_changes"][0].source, code):
        name = facts["value_changes"][0].source
        return [_LOOP_BOUND_FIX.format(name=name)]
    if kind == GUARD_VALUE and _specialised_each(facts):
        name = facts["value_changes"][0].source
        fixes = [f"Nothing to fix if `{name}` takes a few values (a schedule that ends): each is compiled once and cached, "
                 "and each counts against the frame's recompile limit (torch._dynamo.config.recompile_limit), past which "
                 "the frame runs uncompiled." if facts.get("stabilised") else
                 f"`{name}` keeps taking new values and each is compiled anew until the recompile limit "
                 "(torch._dynamo.config.recompile_limit) sends the frame to eager."]
        if facts.get("fullgraph"):
            # torch 2.13, checked by hand: under fullgraph=True a call through torch.compiler.disable raises
            # "Skip calling `torch.compiler.disable()`d function" at the first compile (a graph break is an error).
            fixes.append(f"To stop recompiling per value, the call that needs `{name}` as a constant must run outside the "
                         "compiled code. The frame is compiled with fullgraph=True, where a graph break is an error, so "
                         "torch.compiler.disable around that call fails the job: compile the code before the call and the "
                         "code after it as two functions (or modules) and run the call between them, uncompiled; or, if one "
                         "graph is not needed, drop fullgraph=True and call it through torch.compiler.disable "
                         "(`_op = torch.compiler.disable(op)` once, then `_op(...)` where the code called `op(...)`).")
        else:
            fixes.append(f"To stop recompiling per value, move the call that needs `{name}` as a constant out of the compiled "
                         "code: call it through torch.compiler.disable (`_op = torch.compiler.disable(op)` once, then `_op(...)` "
                         "where the code called `op(...)`; a graph break there, and it runs eagerly, computing what it did). "
                         f"Dynamo then recompiles once, at the first change, and takes `{name}` as an input that later values reuse.")
        return fixes
    if kind == GUARD_VALUE and (changes := facts.get("value_changes")) and _loop_bound(changes[0].source, code):
        return [_LOOP_BOUND_FIX.format(name=changes[0].source)]
    if kind == GUARD_VALUE and (changes := facts.get("value_changes")) and _in_arithmetic(changes[0].source, code):
        # torch 2.13 (sample_scripts/scalar_per_step.py, `cagtool recompiles --verify`'s scalar-to-tensor): the
        # float passed as torch.tensor(scale) compiles the forward once for every value.
        name = changes[0].source
        call = facts.get("caller")
        at = f" where the compiled code is called ({display_path(call.file, cwd)}:{call.line} `{call.code}`)" if call is not None and call.code else ""
        return [f"Pass `{name}` as a tensor{at}: `torch.tensor({name})` in place of `{name}`. The guarded line computes with it, "
                "and a tensor's value is not guarded: one compile serves every value. Kept a Python number, each new value "
                "is compiled anew (until the recompile limit sends the frame to eager)."]
    if kind == GUARD_VALUE and (changes := facts.get("value_changes")) and facts.get("stabilised") and len(changes) == 1:
        # A phase switch (`self.training_phase = 2` at some step) branched on: passed as a tensor it
        # breaks the graph on every call (data-dependent branching), torch 2.13, checked by hand.
        return [f"Nothing to fix: `{changes[0].source}` changed once ({changes[0].before} -> {changes[0].after or '?'}: a "
                "switch, as a training phase is) and the frame is compiled once for each value and cached; each value counts "
                "against its recompile limit "
                "(torch._dynamo.config.recompile_limit). Passed as a tensor, a value the code branches on breaks the graph on "
                "every call instead."]
    if kind == GUARD_VALUE:
        return ["A Python number the code specialised on changed value. If it only feeds shapes, Dynamo makes it "
                "dynamic after one change; used as a loop bound or in control flow it recompiles per value: "
                "pass it as a tensor, keep it constant, or hoist that logic out of the compiled function."]
    if kind == GUARD_OTHER and (changes := facts.get("value_changes")):
        if once or facts.get("stabilised"):
            return [f"Nothing to fix if `{changes[0].source}` takes a few values: the frame is compiled once for each and cached "
                    "(each counts against its recompile limit, torch._dynamo.config.recompile_limit)."]
        return [f"`{changes[0].source}` keeps taking new values: keep it constant in the compiled code, or move the code that "
                "depends on it out of the compiled function."]
    if _MODULE_HOOKS.search(guard) and _HOOK_READS.search(guard):
        if facts.get("stabilised"):
            return ["Nothing to fix: no hook was registered again; a value a module's hook reads (a counter filling in the "
                    "first steps) changed, the frame was compiled again for it, then cached."]
        eagerly = ("" if facts.get("fullgraph") else ", or run the hook eagerly (torch._dynamo.disable on it)")
        fullgraph = (" (The frame is compiled with fullgraph=True: a hook under torch._dynamo.disable would be a graph "
                     "break there, an error.)" if facts.get("fullgraph") else "")
        return ["A value a module's hook reads keeps changing, and Dynamo guards on it with the hook traced into the "
                f"compiled forward: keep that state out of the hook{eagerly}. If the hook is a library's, report it there.{fullgraph}"]
    if _MODULE_HOOKS.search(facts.get("guard") or ""):
        named = facts.get("module_hooks") or []
        hook = f"the module's hook ({' and '.join(named)})" if named else "the module's hook"
        return [f"Register {hook} once, before the training loop, and keep its handle: each register_*_hook call "
                "adds a new key to the module's hook dict, which Dynamo guards, so a hook registered (or removed and "
                "registered again) every step recompiles the module's frame every step until the recompile limit."]
    if (freed := _DEALLOCATED.search(guard)) is not None:
        # torch's cache entry holds a weak reference to the object it was specialised on: freed, the
        # entry is dropped (torch/_dynamo/guards.py, "Cache line invalidated"), and the next
        # call compiles for the new object.
        return [f"Nothing to fix if `{freed['source']}` was made anew on purpose (a new optimizer or model for a later phase): "
                "the object the compiled code was made for was freed, its compiled code with it, and the new one compiles "
                "once. Made anew every step (an optimizer or module created inside the loop), it recompiles every time: "
                "create it once, before the loop."]
    if facts.get("names"):
        return [f"A Python number the code branches or computes on ({_names_text(facts['names'])}): after it changed once, "
                "Dynamo made it dynamic and guards on each expression of it the code decides by, so each outcome "
                "compiles once: pass it as a tensor (and branch with torch.where), or hoist that logic out of the compiled function."]
    if (bound := size_bound(guard)) is not None:
        name, dim, held = bound
        return [f"Nothing to fix where it comes once (a last batch outside the range: its graph is compiled once, then "
                f"cached). Where such sizes keep coming, every new range compiles again: keep dim {dim} of `{name}` {held} "
                "(the batch size, and the last batch's)."]
    if size_relation(guard):
        return ["Nothing to fix: each side of the branch on sizes compiles once, then both are cached. To compile neither "
                "twice, compute without a Python branch on sizes (the same code for every size)."]
    return ["Keep the guarded value the same between calls, or move it out of the compiled function."]


# torch's reason where an object a compiled frame was specialised on was collected.
_DEALLOCATED = re.compile(r"Cache line invalidated because (?P<source>.+?) got deallocated")


_LOOP_BOUND_FIX = ("`{name}` is a loop's bound in the compiled code: Dynamo unrolls the loop, so each value of `{name}` is "
                   "another graph, compiled anew. Run the loop a fixed number of times (pad to a maximum; mask what is not "
                   "needed), or move the loop out of the compiled function (compile its body).")


def _loop_bound(name: str, code: str) -> bool:
    """The guarded line runs a loop `name` times (`for _ in range(depth)`)."""
    return bool(name) and re.search(rf"\brange\([^)]*(?<![\w.]){re.escape(name)}\b", code) is not None


def _in_arithmetic(name: str, code: str) -> bool:
    """The guarded line multiplies, divides, adds or subtracts with `name` (`... * scale`)."""
    n = re.escape(name)
    return bool(name) and re.search(rf"[*/+-]\s*(?<![\w.]){n}\b(?!\s*[\[(.])|(?<![\w.]){n}\s*[*/+-]", code) is not None


def _other_lines(cause: Cause, cwd: str) -> str:
    """`; 0/3 at train.py:52  ev = cmodel(x)`: the recompiles of the cause whose line differs from
    the one it is tied to (a training call, then an evaluation's with the same change)."""
    if cause.source is None:
        return ""
    seen = {(cause.source.file, cause.source.line)}
    found = []
    for row in cause.rows:
        ref = row.user_source
        if ref is None or ref.how != cause.source.how or (ref.file, ref.line) in seen:
            continue
        seen.add((ref.file, ref.line))
        found.append(f"{row.compile_id} at {format_source(ref, cwd)}")
    return "; " + ", ".join(found) if found else ""


def _guard(cause: Cause, cwd: str) -> Words:
    facts = cause.facts
    if facts.get("inside_capture") and cause.code == CAUSE_DYNAMO_FRAME:
        return _inside_capture(cause, cwd)
    on_ca = cause.code == CAUSE_DYNAMO_CA_GRAPH
    first = cause.rows[0]
    location = where(cause, cwd)
    code = cause.source.code if cause.source is not None and cause.source.code else ""
    if facts.get("hook"):
        at = f" ({format_source(cause.source, cwd).split('  ')[0]})" if cause.source is not None else ""
        subject = f"the backward hook `{facts.get('function') or '?'}`{at}, called from compiled-autograd graph !{first.compile_id.lstrip('!').split('/')[0]}"
    elif on_ca:
        subject = f"the code of compiled-autograd graph !{first.compile_id.lstrip('!').split('/')[0]}"
    elif facts.get("another_optimizer"):
        frames = facts.get("frames") or [facts["frame"]]
        subject = f"torch.optim's step code ({'frame' if len(frames) == 1 else 'frames'} {', '.join(frames)})"
    elif facts.get("optimizer_frame"):
        subject = f"the optimizer's step() (frame {facts['frame']})"
    elif facts.get("resume") is not None:
        at, _ = _resume_words(facts, cwd)
        subject = f"frame {facts['frame']}, the rest of `{facts['resume'].function}` after its graph break at {at}"
    else:
        name = f" `{facts['function']}`" if facts["function"] else ""
        subject = f"forward frame {facts['frame']}{name}"
    title = f"Dynamo recompiled {subject}: {guard_label(facts, hook_named=False)} ({plural(cause.count, 'recompile')})"
    failures = [f"{cid} `{guard}`" if guard else f"{cid} (guard not recorded)" for cid, guard in facts["failures"]]
    why = []
    if facts["guard"]:
        why.append(f"A guard Dynamo installed stopped holding: `{facts['guard']}`" + (f", {location}{_other_lines(cause, cwd)}."
                                                                                      if location else "."))
        if facts.get("state_changed_at") is not None:
            change = f" ({facts['state_change']})" if facts.get("state_change") else ""
            why.append(f"The state was changed{change} at {format_source(facts['state_changed_at'], cwd)}, before that call: "
                       "that line is the cause.")
    else:
        why.append("Dynamo recompiled it; the failing guard was not recorded" + (f" ({location})." if location else "."))
    resumed = facts.get("resume") is not None and not on_ca and not facts.get("optimizer_frame") and not facts.get("hook")
    if resumed:
        why.append(_resume_why(facts, cwd))
    why += _guard_why(facts, code, on_ca)
    if on_ca and facts.get("pieces"):
        why.append(pieces_sentence(facts["pieces"]))
    if facts.get("library_hooks"):
        package, hooks = facts["library_hooks"]
        why.append(f"The guarded value is no input of the graph: it is reached by the hooks compiled autograd traced into it, "
                   f"all {package}'s: {elide(hooks, limit=3)}.")
    why.append("Failing guard per recompile: " + elide(failures) + ".")
    stability = stability_sentence(facts, "recompile")
    ended = _ended_with_it(cause)
    if ended:
        stability = ended
        facts = {**facts, "stabilised": True, "recompiling_steps": 1}  # one recompile, then cached: its fixes are the one-time ones
    if stability:
        why.append(stability)
    fix = _resume_fixes(facts, cwd) if resumed else _guard_fixes(facts, on_ca, code, cwd)
    if on_ca and facts.get("pieces") and facts.get("checkpoint_unpack_breaks"):
        fix = [*fix, facts.get("checkpoint_fix") or CHECKPOINT_INSIDE_FIX]
    why.append('TORCH_LOGS="recompiles" prints every guard failure as it happens.')
    return Words(title, why, fix, evidence_text(cause.evidence))


def _frame_file(file: str) -> str:
    """A frame's file as a reader knows it: a library's from its package down, the standard library's by name."""
    if "-packages/" in file.replace("\\", "/"):
        return _library_path(file, "")
    return os.path.basename(file) + " (Python's standard library)" if "/lib/python3" in file.replace("\\", "/") else file


def _inside_capture(cause: Cause, cwd: str) -> Words:
    """Frames of torch's (or the standard library's) that Dynamo compiled while compiled autograd
    captured a backward: one recompile or more at every capture, nothing of the script's."""
    found = cause.facts["inside_capture"]
    by_file: dict[str, list[str]] = {}
    for frame in found["frames"]:
        by_file.setdefault(frame["file"], []).append(f"`{frame['function']}`")
    frames = [f"{_and_list(functions)} in {_frame_file(file)}" for file, functions in by_file.items()]
    captures = found["captures"]
    roots = found["capture_causes"]
    location = where(cause, cwd)
    steps = step_list(cause.steps)
    count = len(found["frames"])
    title = (f"Dynamo compiled torch's helper {'frame' if count == 1 else 'frames'} inside compiled autograd's "
             f"captures, not your code ({plural(cause.count, 'recompile')})")
    why = [f"Dynamo recompiled {elide(frames, limit=3)} between compiled autograd's cache miss and the graph it captured "
           f"(captures {elide(captures)}; {'step' if len(cause.steps) == 1 else 'steps'} {steps}): code torch runs while it builds "
           "each captured graph, not the script's. The backward runs inside a function torch.compile compiled"
           + (f" ({location})" if location else "") + ", so Dynamo's frame evaluation is on while compiled autograd captures, "
           "and this torch compiles the frames the capture calls (torch 2.14 recompiles frames of Python's inspect module "
           "there at every capture; 2.13 and 2.15 do not).",
           "Each capture makes a new graph class, and these frames' guards are on it (the class, or the attribute looked "
           "up on it): they recompile at every capture and stop when compiled autograd stops capturing new graphs. At "
           "torch._dynamo.config.recompile_limit Dynamo runs such a frame uncompiled, with a warning: what the job "
           "computes does not change."]
    failures = [f"{cid} `{guard}`" if guard else f"{cid} (guard not recorded)" for cid, guard in cause.facts.get("failures", [])]
    if failures:
        why.append("Failing guard per recompile: " + elide(failures) + ".")
    after = (f"fixing {_causes_ref(roots)}, which made compiled autograd capture again, ends them" if roots
             else "they come with compiled autograd's first capture and end with it")
    fix = [f"Nothing to change in your code: these are torch's frames, compiled once or more per capture; {after}.",
           "To keep Dynamo out of the captures altogether, call backward outside the compiled function, with compiled "
           "autograd enabled around it (`with torch._dynamo.compiled_autograd._enable(torch.compile(backend=...)):` "
           "then `loss.backward()`), or run torch 2.15, which does not recompile these frames."]
    return Words(title, why, fix, evidence_text(cause.evidence))


def _ended_with_it(cause: Cause) -> str:
    """For a single recompile at the run's end that is one of a loop's ordinary ends, what it is, in
    place of "too few steps to tell whether it stabilises": a smaller last batch at the last step
    (the last batch of an epoch), or the grad mode changed after the last step (an evaluation after
    training). Each is compiled once and cached; running more steps would not tell more."""
    facts = cause.facts
    if cause.count != 1 or facts.get("stabilised") is not False or facts.get("stopped_by_limit") or facts.get("recompiling_steps", 3) >= 3:
        return ""
    last, step = facts.get("last_step"), facts.get("last_recompile_step")
    if last is None or step is None:
        return ""
    kind, guard = facts.get("kind", ""), facts.get("guard", "")
    if kind == GUARD_SIZE and step == last and (batch := smaller_batch(guard)) is not None:
        return (f"It came at the run's last step ({last}): a batch smaller than the ones before it ({batch[1]} -> {batch[2]} rows) "
                "at the end is a last batch, as an epoch's is; its graph is compiled once and cached, and the later epochs' "
                "last batches reuse it.")
    if kind == GUARD_SIZE and step >= last and facts.get("dynamic_after") and (size := size_guard(guard)) is not None:
        when = f"at the run's last step ({last})" if step == last else f"after the run's last step ({last})"
        return (f"It came {when}, and at it Dynamo compiled dim {size[1]} of `{size[0]}` dynamic (automatic dynamic shapes: "
                "the new graph's guards take that size as any value): any later size of it but 0 or 1 (which Dynamo always "
                "compiles as a constant) reuses that graph, so more steps would not tell more.")
    if kind == GUARD_GRAD_MODE and step > last and facts.get("grad_mode_after") is False:
        return (f"It came after the run's last step ({last}): an evaluation after training, compiled once; both grad modes' "
                "graphs are cached from then on.")
    if facts.get("inference_switch") and step > last:
        return (f"It came after the run's last step ({last}): an evaluation under inference mode after training, compiled "
                "once; both graphs are cached from then on.")
    return ""


# Guards that fail when another kind of call reaches the code (another object, type or Python
# value): a resume frame shared by several callers compiles once for each. A size, grad mode or
# list length keeps its own fixes.
_ANOTHER_CALL_KINDS = (GUARD_TYPE, GUARD_ID, GUARD_VALUE, GUARD_NONE, GUARD_OTHER, GUARD_TENSOR_META)


def _resume_why(facts: dict[str, Any], cwd: str) -> str:
    resume = facts["resume"]
    at, headline = _resume_words(facts, cwd)
    named = facts.get("function") or ""
    guarded = f" (where the failing guard was installed)" if named and named != resume.function and not named.startswith("torch_dynamo_resume_in_") else ""
    opening = f"Frame {facts['frame']} is not `{named}`{guarded}: it is" if guarded else f"Frame {facts['frame']} is"
    broke = f": {headline}" if headline else ""
    another = (" Its first compile was for one kind of call reaching that line; this call is another."
               if facts.get("kind") in _ANOTHER_CALL_KINDS else "")
    carried = ""
    if facts.get("kind") != GUARD_SIZE and (stack := _STACK_VALUE.search(facts.get("guard") or "")) is not None:
        # (a size guard's own fix says it: "`___stack0` is no variable of yours: ...", _guard_fixes)
        # `___stack0 == 0.2468`: the value of the call Dynamo broke on (a Tensor.item()), passed to the resume frame
        number = re.fullmatch(r"___stack0 == -?[\d.]+(?:e[-+]?\d+)?", (facts.get("guard") or "").strip())
        returned = (" (here, a number: what the `.item()` Dynamo broke on returned)"
                    if number and item_break(facts.get("break_reason") or "") else "")
        carried = (f" `{stack.group(0)}` is no variable of yours: it is Dynamo's name for a value the code at line {resume.line} "
                   f"was computing with when the graph broke, carried into the resume function{returned}.")
    return (f"{opening} the rest of `{resume.function}` ({_library_path(resume.file, cwd)}) from line {resume.line} on, which "
            f"Dynamo compiles as a function of its own (a resume function) because a graph break split `{resume.function}` "
            f"there{broke}.{another}{carried}")


_STACK_VALUE = re.compile(r"\b___stack\d+\b")


def stack_value(guard: str) -> bool:
    """Whether a guard is on a value Dynamo carried across a graph break (`___stack0 == 0.2468`)."""
    return _STACK_VALUE.search(guard) is not None


def _resume_fixes(facts: dict[str, Any], cwd: str) -> list[str]:
    """A resume frame's recompile: one-time, or the guard's own fixes; then the break that made it."""
    resume = facts["resume"]
    at, headline = _resume_words(facts, cwd)
    advice = graph_break_words(facts.get("break_reason") or "").advice
    hint = f" torch's hint: {advice.rstrip('. ')}." if advice else ""
    broke = f": {headline}." if headline else "."
    once = bool(facts.get("stabilised")) and facts.get("recompiling_steps", 0) <= 1
    if once and facts.get("kind") in _ANOTHER_CALL_KINDS:
        fixes = [f"Nothing to fix: a one-time recompile. The resume frame is compiled once for each kind of call that reaches "
                 f"line {resume.line} of `{resume.function}`, and cached; without the graph break `{resume.function}` itself "
                 "would be compiled once per kind of call instead."]
    else:
        fixes = [f for f in _guard_fixes({**facts, "resume": None}, False, "", cwd)
                 if not f.startswith("Keep the guarded value the same")] or \
            [f"Keep what reaches line {resume.line} of `{resume.function}` of one kind on every call, or move the varying part out of the compiled code."]
    fixes.append(f"The graph break that made the resume frame is at {at}{broke}{hint} Removing it compiles `{resume.function}` "
                 "as one graph instead of two.")
    return fixes


def _same_errors_together(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failed captures that raised the same error from the same line, as one (`!0, !1`):
    a graph that fails each time it comes back is one fact, not one sentence a capture."""
    merged: dict[tuple, dict[str, Any]] = {}
    for error in errors:
        # an error the record does not have is never taken for another's
        key = (error.get("error_type"), error.get("error"), error.get("source")) if error.get("error_type") else (error["compile_id"],)
        merged.setdefault(key, {**error, "compile_ids": []})["compile_ids"].append(error["compile_id"])
    out = []
    for error in merged.values():
        ids = error.pop("compile_ids")
        out.append({**error, "compile_id": ids[0] if len(ids) == 1 else f"{', '.join(ids[:-1])} and {ids[-1]}", "captures": len(ids)})
    return out


def _unknown(cause: Cause, cwd: str) -> Words:
    from cagtool.report.figures.metrics import RECAPTURED_AFTER_FAILURE

    after = cause.facts.get("after_failed_capture") or []
    if after:
        failed = ", ".join(cause.facts.get("failed_captures") or [])
        errors = cause.facts.get("capture_errors") or []
        said = [capture_error_words(e, cwd) for e in _same_errors_together(errors)]
        raised = "; ".join(what for what, _ in said) or f"the capture of {failed} raised"
        why = [f"{raised[0].upper()}{raised[1:]} (the record's finding `ca_capture_failed`: `cagtool summary`). When that graph "
               f"came back, compiled autograd captured it again ({', '.join(after)}) and reported no cache-miss reason for it: "
               "torch does the same without cagtool."]
        todo = next((t for _, t in said if t), "")
        first = said[0][0] if said else f"the capture of {failed} raised"
        fix = [f"Fix the failed capture and this recapture goes with it: {todo}." if todo else
               f"Fix the failed capture and this recapture goes with it: {first}."]
        if len(after) < cause.count:
            why.append(f"The other {plural(cause.count - len(after), 'capture')} had no reason recorded (the compiled-autograd "
                       "verbose logger was not active, or the record was cut short).")
            fix.append("For those: record again with `cagtool run` so cache-miss reasons are captured.")
        # Torch gives no reason for such a capture by design: it is named for what it is, and only
        # the others, if any, for what the record lacks.
        counted = (plural(cause.count, "recompile") if len(after) == cause.count else
                   f"{len(after)} of {plural(cause.count, 'recompile')}; the other {cause.count - len(after)} with no reason recorded")
        return Words(f"{RECAPTURED_AFTER_FAILURE[0].upper()}{RECAPTURED_AFTER_FAILURE[1:]} ({counted})",
                     why, fix, evidence_text(cause.evidence))
    return Words(
        f"Recompiles with no reason recorded ({plural(cause.count, 'recompile')})",
        ["Torch gave no reason for these captures (the compiled-autograd verbose logger was not active, "
         "or the record was cut short)."],
        ["Record again with `cagtool run` so cache-miss reasons are captured."],
        evidence_text(cause.evidence),
    )


_CAUSE_WORDS = {
    CAUSE_STRUCTURE: _structure,
    CAUSE_HOOK: _hook,
    CAUSE_GRAD_DEFINED: _grad_defined,
    CAUSE_SHAPES: _shapes,
    CAUSE_DYNAMO_FRAME: _guard,
    CAUSE_DYNAMO_CA_GRAPH: _guard,
}


# The one fix of every cause in a ca mode over FSDP2's sharded parameters (RecompileTable.sharded_under_ca):
# the misses there come from FSDP2's own backward (its hooks, its parameters switching between a shard
# and the whole tensor, the gradients it frees), which torch has no compiled-autograd path for; the
# script's usual fixes (mark a size dynamic, keep hooks) would tune a setup torch does not support.
SHARDED_FIX = ("None in the script: FSDP2's own hooks and resharding make these misses, in a setup torch has no "
               "compiled-autograd path for (pytorch/pytorch#174906); run it without compiled autograd "
               "(`cagtool run --modes eager,aot`).")


def cause_words(cause: Cause, cwd: str) -> Words:
    if cause.caused_by is not None:
        words = _consequence(cause, cwd)
    else:
        words = _CAUSE_WORDS.get(cause.code, _unknown)(cause, cwd)
    if cause.facts.get("sharded_under_ca"):
        return Words(words.title, words.why, [SHARDED_FIX], words.evidence)
    if (failed := cause.facts.get("failed_compile")) is not None:
        # The recompile's compile raised, and the process ended with that error: not cached, and no
        # "nothing to fix": it stopped the job (a DeepSpeed ZeRO-2 rank, torch's symbolic-shape assert).
        compile_id, error = failed
        return Words(words.title, [*words.why, f"Its compile ({compile_id}) raised {error}, and the process ended with that "
                                   "error: this recompile was not cached, it is what stopped the job."],
                     [(f"The error is the compiler backend's, in compiling {compile_id}: report it to the backend's authors with the "
                       "message above." if error.startswith("BackendCompilerFailed") else
                       f"The error is torch's, in compiling {compile_id}: report it to torch with the message above.") + " To run the "
                      "job meanwhile, keep this code out of what compiles (without compiled autograd where the code is a "
                      "compiled-autograd graph's), or make the recompile unneeded with the fix below.", *words.fix],
                     words.evidence)
    if cause.between_steps:
        return Words(words.title, words.why, words.fix, evidence_text(cause.evidence, between=True))
    if evaluated := set(cause.facts.get("evaluation_ids") or ()):
        # Some or all of its recompiles an evaluation compiled (Cause.place): each said where it came.
        return Words(words.title, words.why, words.fix, evidence_text(cause.evidence, evaluated=evaluated))
    return words


def nothing_to_fix(cause: Cause, cwd: str) -> bool:
    """The explanation's verdict on a cause is that nothing needs fixing (a one-time recompile,
    cached from then on; a library's value, nothing to change in the user's code): its first fix
    says so without a condition, or it has none."""
    fix = cause_words(cause, cwd).fix
    return not fix or fix[0].startswith(NOTHING_TO_FIX)


def advises_drop_last(cause: Cause, cwd: str = "") -> bool:
    """The explanation's fixes for a root cause tell the training DataLoader to drop its smaller
    last batch (a forward recompiled on it, or a backward captured again for it); never where they
    keep an evaluation's last batch: the change --verify's drop-last patch makes."""
    return cause.caused_by is None and any("drop_last=True" in fix for fix in cause_words(cause, cwd).fix)


# How a fix that asks for nothing begins (the advice of a summary skips it where another asks for something).
NOTHING_TO_FIX = ("Nothing to fix:", "Nothing to fix for ", "Nothing to change in your code:")


def goes_with_its_forward(cause: Cause) -> bool:
    """A backward captured again after its forward was recompiled on a value, a mode or a dtype
    (not a size, not requires_grad): a new node, so the recompiled forward computes differently,
    and the backward is captured once for each way it runs. A fix of the root removes it only where
    the fix keeps the forward computing one way; one that only stops Dynamo recompiling (the value
    passed as a tensor) leaves the computation's change, and this capture with it."""
    return (cause.caused_by is not None and cause.code == CAUSE_STRUCTURE
            and cause.facts.get("root_code") not in _CA_ROOT_CODES
            and cause.facts.get("root_kind") not in (None, "", GUARD_SIZE, GUARD_REQUIRES_GRAD))


def _by_the_data(dim: int | None) -> str:
    """How a root cause on a size is removed at its source, by the dimension it changed: the batch
    (dim 0, or not known) or a length (padded to one)."""
    return "by the batch (dropping or padding it)" if dim in (0, None) else "by the data (every batch padded to one length)"


def _consequence(cause: Cause, cwd: str) -> Words:
    """A CA recompile that follows from a forward recompile: what the backward saw, and that the
    fix is the root cause's (no advice written for a cause the script does not have)."""
    root = f"#{cause.caused_by}"
    if cause.code == CAUSE_DYNAMO_CA_GRAPH:
        words = _guard(cause, cwd)
        if cause.facts.get("root_kind") == GUARD_SIZE and not set(cause.steps) & set(cause.facts.get("root_steps") or ()):
            # _roots_of_graphs_a_size_made: the graph was captured for the changed size, its code recompiled later.
            graphs = ", ".join(sorted({f"!{ca_id_of(r.compile_id)}" for r in cause.rows}))
            lead = (f"Follows from {root}: graph {graphs} was captured for the size {root} recompiled the forward for, and Dynamo "
                    f"compiled its code for those sizes; at {'step' if len(cause.steps) == 1 else 'steps'} {step_list(cause.steps)} "
                    "the sizes changed again (the batch back to its usual size, say), and its code is compiled once more: "
                    "one changing size.")
            by = _by_the_data(cause.facts.get("root_dim"))
            return Words(f"Caused by {root}, the same change: {words.title}", [lead, *words.why],
                         [f"What removes {root} {by} removes this one too; a dimension marked dynamic on the forward does not "
                          "reach this graph's code.", *words.fix], words.evidence)
        lead = (f"Follows from {root}: the change that recompiled the forward failed the same guard of the code of a "
                "compiled-autograd graph, in the same step: one change, two recompiles.")
        return Words(f"Caused by {root}, the same change: {words.title}", [lead, *words.why],
                     [f"Fixing {root} removes this one too: the same change made both."], words.evidence)
    inner = cause.facts.get("root_code") in _CA_ROOT_CODES  # a capture of another backward, not a forward recompile
    if inner:
        lead = (f"Follows from {root}: a backward taken with create_graph=True (a gradient penalty's autograd.grad) "
                "is itself captured by compiled autograd, and the next backward differentiates its compiled graph, a "
                f"{COMPILED_FUNCTION_BACKWARD} node; {root} made that graph again just before, in the same step, so this "
                "backward met a new node.")
    elif cause.code == CAUSE_SHAPES:
        # The forward's recompile brought the captures; a recompile of their graph's code in a later step
        # with no forward recompile (the forward dynamic by then) is the same sizes changing again.
        forward = {r.step for r in cause.rows if r.source == SOURCE_CA}
        later = sorted({r.step for r in cause.rows if r.source == SOURCE_DYNAMO_CA_GRAPH and r.step is not None and r.step not in forward})
        at = f" (step {', '.join(str(s) for s in sorted(x for x in forward if x is not None))})" if forward - {None} else ""
        again = (f" At {'step' if len(later) == 1 else 'steps'} {', '.join(map(str, later))} the sizes changed again with no "
                 "forward recompile (the forward dynamic by then): the backward alone recompiled there, which a fix of "
                 f"{root} does not reach." if later else "")
        lead = (f"Follows from {root}: the sizes that made Dynamo recompile the forward reached the backward "
                f"in the same step{at}.{again}")
        if "changed_again" in cause.facts:
            back_at, before, after, values = cause.facts["changed_again"]
            steps = sorted(x for x in forward if x is not None)
            at = f"{'step' if len(steps) == 1 else 'steps'} {', '.join(map(str, steps))}"
            now = ", ".join(map(str, values)) or "the new size"
            moved = (f"came back to {before} at {at}" if values == [before] else f"changed again at {at} ({after} -> {now})" if values
                     else f"changed again at {at}")
            lead = (f"Follows from {root}: the size that recompiled the forward went {before} -> {after} at step {back_at} and "
                    f"{moved}. Dynamo's recompile for {after} made that dimension dynamic, so the forward's graph for {after} "
                    f"serves {now} too; compiled autograd had captured that graph's backward for {after} with static sizes, and "
                    f"misses on {now}"
                    f"{' at each backward call of the step' if len({_location(r.backward_call) for r in cause.rows if r.source == SOURCE_CA}) > 1 else ''}"
                    ". One changing size: the captures made here are dynamic and serve the sizes that come next.")
    else:
        lead = (f"Follows from {root}: the forward was recompiled just before this backward, and the backward "
                "of the recompiled forward is a new graph to compiled autograd.")
    if cause.code == CAUSE_STRUCTURE:
        changes = cause.facts["changes"]
        items = []
        for change in changes:
            at = f"{change.compile_id} step {change.step}" if change.step is not None else change.compile_id
            label = f"NodeCall {change.node_call}" if change.node_call is not None else "a node"
            if change.pairs:
                items.append(f"{at}: {_pairs_text(change)}")
            elif change.before is None:
                items.append(f"{at}: new {short_name(change.after)} at {label}")
            else:
                items.append(f"{at}: {label} {short_name(change.before)} -> {short_name(change.after)}")
        title = f"Caused by {root}: compiled autograd captured the backward again, a new autograd node ({plural(cause.count, 'recompile')})"
        why = [lead, "The node that differs: " + elide(items) + (" (the backward of the graph captured again)." if inner
                                                                  else " (the recompiled forward's backward graph).")]
        root_kind = cause.facts.get("root_kind")
        if inner:
            fix = [f"Fixing {root} removes this one too: this backward changed only because the graph it differentiates was made again."]
        elif root_kind == GUARD_SIZE:
            fix = [f"Fixing {root} (one forward graph for every size) keeps the backward's node; compiled autograd "
                   "may still miss once on the changed sizes unless it starts dynamic (`cagtool run --dynamic`)."]
        elif root_kind == GUARD_REQUIRES_GRAD and cause.facts.get("root_inputs"):
            why.append("The backward differs with it: a gradient flows to that input in one call and not in the other, "
                       "captured once for each.")
            fix = [f"Goes with {root}: nothing to fix on its own."]
        elif root_kind == GUARD_REQUIRES_GRAD:
            why.append({
                ("frozen",): "The frozen parameters have no gradients to accumulate: the backward lost their nodes, "
                             "captured once per set of trainable parameters.",
                ("unfrozen",): "The parameters that now train have gradients to accumulate: the backward needs these nodes, "
                               "captured once per set of trainable parameters.",
            }.get(tuple(cause.facts.get("root_ways") or ()), "The parameters that train decide the backward's nodes: "
                  "captured once per set of trainable parameters."))
            fix = [f"Goes with {root}: nothing to fix on its own."]
        elif cause.facts.get("root_list"):
            # torch 2.13, checked on a list of 1-4 feature maps summed in a compiled forward: passed
            # stacked, CA recompiles 3 -> 1 (the stacked size), with 2 Dynamo recompiles of its graph's code.
            fix = [f"Goes with {root}: each length runs the forward another way (one more item computed), so its backward is "
                   f"another graph, captured once per length and cached. A fix of {root} that passes the items as one tensor "
                   "makes the forward compute one way for every length, and these captures go; compiled autograd then misses "
                   "once on the changed size unless it starts dynamic (`cagtool run --dynamic`), and Dynamo may recompile "
                   "that graph's code for the size (explained then as its own cause)."]
        elif not goes_with_its_forward(cause):  # the root's kind not known
            fix = [f"Fixing {root} removes this one too: the backward changed only because its forward was recompiled."]
        else:
            fix = [f"Goes with {root}: the recompiled forward computes differently (the node above), so its backward is "
                   f"another graph, captured once for each way the forward runs. A fix of {root} that keeps the forward "
                   "computing one way (one branch, one dtype, one mode every step) removes this one too; one that only "
                   "stops Dynamo recompiling (the value passed as a tensor) does not."]
        return Words(title, why, fix, evidence_text(cause.evidence))
    if cause.code == CAUSE_GRAD_DEFINED:
        row = cause.rows[0]
        title = f"Caused by {root}: the new backward graph's .grad warm-up ({plural(cause.count, 'recompile')})"
        # A key smaller than the one before: this backward met .grad None where the graph before met it
        # defined (an accumulated step's later backward, the last one captured): the warm-up's other side.
        none_side = row.key_size is not None and bool(row.previous_key_sizes) and row.key_size < max(row.previous_key_sizes)
        state = ("this backward found the parameters' .grad None (after zero_grad), where the graph captured before it met "
                 "them defined (a backward that accumulated into them)" if none_side else
                 "the step's first backward found the parameters' .grad None (after zero_grad) and this one accumulates into it")
        why = [f"Follows from {root}: the forward recompiled just before made a new backward graph, and it warms up as every "
               f"graph did at the first step: {state}, which is another graph to compiled autograd (the key of "
               f"{node_label(row.node, row.node_call)} changed{_key_size_text(row)}, hooks unchanged). Captured once, then cached."]
        stability = stability_sentence(cause.facts, "such miss")
        return Words(title, why + ([stability] if stability else []),
                     [f"Goes with {root}: nothing to fix on its own; a fix of {root} removes it too."], evidence_text(cause.evidence))
    if cause.code == CAUSE_SHAPES:
        words = _shapes(cause, cwd)
        title = f"Caused by {root}: " + words.title.replace("Tensor shapes changed", "the same sizes changed in the backward", 1)
        fix = words.fix
        if "changed_again" in cause.facts:
            by = _by_the_data(cause.facts.get("root_dim"))
            fix = [f"What removes {root} {by} removes this one too; a dimension marked dynamic removes {root} only, and "
                   "compiled autograd still misses here once.",
                   *words.fix]
        return Words(title, [lead, *words.why], fix, words.evidence)
    if cause.code == CAUSE_DYNAMO_FRAME and all(_state_change(row) is not None for row in cause.rows):
        # Another frame of the same forward, recompiled by the same change of the global state (_roots_in_other_frames).
        words = _CAUSE_WORDS[CAUSE_DYNAMO_FRAME](cause, cwd)
        evaluation = cause.facts.get("kind") == GUARD_GRAD_MODE
        lead = (f"Follows from {root}: the same change of the {'grad mode' if evaluation else 'global state'} reached this "
                f"frame in the same {'evaluation' if evaluation and cause.between_steps else 'step'}. "
                + (f"{_own_compile(cause, cwd)}, guarded on it" if cause.facts.get("own_compile") else
                   "A graph break splits the forward into frames, each guarded on it")
                + ", so one change recompiles each of them: one change, a recompile per frame.")
        guards = [line for line in words.why if line.startswith("Failing guard")]
        return Words(f"Caused by {root}, the same change: {words.title}", [lead, *guards],
                     [f"What removes {root} removes this one too (the frames are compiled for the same calls); nothing to fix on its own."],
                     words.evidence)
    if cause.code == CAUSE_DYNAMO_FRAME:
        # Another frame of the same forward, recompiled by the same change of a size (_roots_in_other_frames).
        words = _CAUSE_WORDS[CAUSE_DYNAMO_FRAME](cause, cwd)
        lead = (f"Follows from {root}: the same change of size reached this frame in the same step. "
                + (f"{_own_compile(cause, cwd)}, compiled for its own sizes" if cause.facts.get("own_compile") else
                   "A graph break splits the forward into frames, each compiled for its own sizes")
                + ", so one changed batch recompiles each of them: one change, a recompile per frame.")
        guards = [line for line in words.why if line.startswith("Failing guard")]
        sized = [g for row in cause.rows if (g := size_guard(own_guard(row))) is not None]
        by_batch = f"What removes {root} {_by_the_data(sized[0][1] if sized else None)} removes this one too."
        if (sized and sized[0][3] in (0, 1)) or any(specialised_size(own_guard(row)) is not None for row in cause.rows):
            fix = [f"{by_batch} No dimension marked dynamic does: the size is 0 or 1, which Dynamo specialises in every frame."]
        elif sized and sized[0][0].startswith("___"):
            # A value Dynamo carried across the graph break (`___stack0`): the frame's own words say what marks it.
            fix = [*words.fix, by_batch]
        else:
            on = f" (`{sized[0][0]}`, dim {sized[0][1]})" if sized else ""
            fix = [f"{by_batch} A dimension marked dynamic by hand holds in the frame it is marked for: mark it on this "
                   f"frame's input too{on}."]
        return Words(f"Caused by {root}, the same change: {words.title}", [lead, *guards], fix, words.evidence)
    words = _unknown(cause, cwd)
    return Words(f"Caused by {root}: {words.title[0].lower()}{words.title[1:]}", [lead, *words.why], words.fix, words.evidence)


def _own_compile(cause: Cause, cwd: str) -> str:
    """The lead of a frame another torch.compile call compiled than its root's (group_causes' `own_compile`)."""
    file, _, line = str(cause.facts["own_compile"]).rpartition(":")
    return f"This frame is another function the step calls, with a torch.compile of its own ({display_path(file, cwd)}:{line})"


def _causes_ref(numbers: list[int]) -> str:
    return ", ".join(f"#{n}" for n in numbers)


def alert_words(alert: Alert, cwd: str) -> Words:
    facts = alert.facts
    if alert.code == ALERT_STORM:
        share = "every step" if facts["every_step"] else f"{len(facts['recompiling_steps'])} of the {facts['steps_after_first']} steps"
        title = f"Recompile storm: recompiles on {share} after the first"
        why = [
            f"{plural(facts['recompiles'], 'recompile')} on steps {step_list(facts['recompiling_steps'])} "
            f"of {FIRST_STEP}-{facts['last_step']}; each one costs a compile (and, for compiled autograd, a capture) inside the training step.",
        ]
        why.append(
            "Still recompiling at the last recorded step."
            if facts["still_recompiling"]
            else f"The last recompile was at step {facts['recompiling_steps'][-1]}."
        )
        fix = []
        if alert.causes:
            which = "that cause does" if len(alert.causes) == 1 else "those causes do"
            fix.append(f"Fix cause {_causes_ref(alert.causes)} below; the storm ends when {which}.")
        evidence = "steps " + step_list(facts["recompiling_steps"])
        return Words(title, why, fix, evidence)
    hits = alert.limit_hits
    first = hits[0]
    limit = f"config.{first.limit_type}" + (f" ({first.limit_value})" if first.limit_value is not None else "")
    if first.compile_id.startswith("!") and first.function and first.file and looks_like_user_file(first.file):
        # A user's function under a CA graph's compile id: a backward hook compiled autograd traced.
        function = f"the backward hook `{first.function}`"
    elif first.compile_id.startswith("!"):
        function = f"the code of compiled-autograd graph {first.compile_id.split('/')[0]}"
    else:
        function = f"`{first.function}`" if first.function else f"frame {compile_frame(first.compile_id) or '?'}"
    where = f" ({display_path(first.file, cwd)}:{first.line})" if first.file else ""
    if function.startswith("the backward hook"):
        where += f", called from compiled-autograd graph {first.compile_id.split('/')[0]}"
    title = f"Dynamo hit {limit} and fell back to eager"
    why = [
        f"At step {first.step if first.step is not None else '?'} Dynamo gave up recompiling {function}{where} "
        f"(compile {first.compile_id or '?'}): from then on it runs uncompiled (eager) on every call, "
        "and the compile time spent on it is lost.",
    ]
    if len(hits) > 1:
        why.append(f"{plural(len(hits), 'limit hit')} in all: " + elide([h.compile_id or '?' for h in hits]) + ".")
    fix = []
    if alert.causes:
        fix.append(f"Remove the recompiles behind it (cause {_causes_ref(alert.causes)}).")
    fix.append(f"Raising torch._dynamo.config.{first.limit_type} only postpones the fallback.")
    evidence = elide([f"{h.compile_id or '?'} (step {h.step if h.step is not None else '?'}, seq {h.seq})" for h in hits])
    return Words(title, why, fix, evidence)


STORM_FRACTION = 0.5  # a storm: recompiles on more than half of the steps after the first
STORM_MIN_STEPS = 3  # fewer recompiling steps than this is not a storm, whatever the fraction
# ... and one cause recompiles on at least STORM_MIN_STEPS of them, through the last step (or a limit was hit).


def _ca_new_node_code(table: RecompileTable, row: RecompileRow) -> str:
    node = row.node or ""
    if row.ca_id in table.other_calls:  # another backward call's first graph: its own structure, not a change of hooks
        return CAUSE_STRUCTURE
    produced = table.graphs.get(row.ca_id) if row.ca_id is not None else None
    hooks_changed = produced is not None and _hooks_differ(produced, table.previous_graph(row.ca_id))
    if hooks_changed or "BackwardHookFunction" in node:
        return CAUSE_HOOK
    # A new AccumulateGrad in a graph of nodes no earlier capture had is another structure (the
    # data picked other modules) whose first new key torch met at AccumulateGrad.
    if node.endswith("AccumulateGrad") and (produced is None or table.previous_graph(row.ca_id) is None
                                            or table.nodes_captured_before(row.ca_id)):
        return CAUSE_GRAD_DEFINED
    return CAUSE_STRUCTURE


def _location(ref: SourceRef | None) -> tuple[str, int] | None:
    return (ref.file, ref.line) if ref is not None else None


def _group_key(table: RecompileTable, row: RecompileRow, shape_keys: dict[int, tuple], hook_frames: frozenset[str] = frozenset()) -> tuple:
    if row.source == SOURCE_CA:
        if row.kind == MISS_NEW_NODE:
            code = _ca_new_node_code(table, row)
            if code == CAUSE_STRUCTURE:
                # One backward's structure is one cause, whichever forward line made the node that
                # first differs (--trace-nodes names it: a loop's body spans lines). Captures of the
                # same nodes (a number a node saved changed: CTC's lengths) are another cause than
                # captures whose nodes changed (a layer skipped) in the same backward.
                place = _location(row.backward_call) or _location(row.user_source) or row.node
                return (code, place, GRAPH_SAME) if _same_nodes(table, row) else (code, place)
            if code == CAUSE_GRAD_DEFINED and is_graph_grad_warmup(table, row):
                return (code, "warm-up")  # one per backward graph: one cause, whichever line called it
            return (code, row.node, _location(row.user_source))
        if row.kind == MISS_CHANGED_SHAPES:
            return (CAUSE_SHAPES, _location(row.user_source))
        return (CAUSE_UNKNOWN,)
    frame = compile_frame(row.compile_id)
    if row.source == SOURCE_DYNAMO_CA_GRAPH:
        # Dynamo compiles a CA graph for the sizes of its first call; when a graph that a
        # changed-shapes miss made is recompiled, the sizes changed again: the same root cause.
        ca_id = ca_id_of(row.compile_id) if "/" in row.compile_id else None  # !N/F/C: Dynamo's compile of CA graph N
        first = own_guard(row) if row.messages else ""  # an entry made for another form of the call fails on the form
        if ca_id in shape_keys and (not first or "size" in first.lower() or "stride mismatch" in first.lower()):
            return shape_keys[ca_id]
        kind = guard_kind(first) if first else ""
        if kind == GUARD_SIZE and _RANK_MISMATCH.search(first) and _runs_hooks(row, hook_frames):
            # torch's call_hook given tensors of another rank (a library's per-parameter hooks, each
            # given its parameter: 1-D biases, 2-D weights): no change of size, a cause of its own.
            return (CAUSE_DYNAMO_CA_GRAPH, frame, kind, "rank")
        if kind == GUARD_SIZE and ca_id is not None and not (row.user_source is not None and row.user_source.how in ("guard", "compiled_frame")):
            # A graph's code split by graph breaks is one frame a piece, each recompiled for one change
            # of size (a non-reentrant checkpoint's unpack hooks, compiled autograd started dynamic):
            # one cause of the graph, not one a piece. A backward hook's own frame keeps its own.
            return (CAUSE_DYNAMO_CA_GRAPH, f"!{ca_id}", kind)
        return (CAUSE_DYNAMO_CA_GRAPH, frame, kind)
    if another_optimizer(row):  # each frame of torch.optim's step code, once for the new optimizer: one cause
        return (CAUSE_DYNAMO_FRAME, "another optimizer")
    # One frame recompiled for two reasons (a smaller batch, then an evaluation under no_grad) is
    # two causes: each class of torch's reason has its own fix; so are guards on two Python values
    # (a dropout rate and a step number passed in).
    first = own_guard(row)
    names = _value_names(first) if first else ()
    if names:  # `step == 0`, then `(step % 2) != 0` once Dynamo made `step` dynamic: one value, one cause
        return (CAUSE_DYNAMO_FRAME, frame, "python value", names)
    if (size := size_guard(first)) is not None:
        # Two dims of one input changed at different steps (a length padded per batch, then a
        # ragged last batch) are two causes, each with its own fix; one dim's many values are one.
        # A tensor the module holds (`self.src_mask`) is not an input: a cause of its own.
        return (CAUSE_DYNAMO_FRAME, frame, GUARD_SIZE, size[1]) + (("attribute",) if module_attribute(size[0]) else ())
    if (specialised := specialised_size(first)) is not None:  # a dynamic dim met a size of 0 or 1
        return (CAUSE_DYNAMO_FRAME, frame, GUARD_SIZE, specialised[1], "0/1")
    return (CAUSE_DYNAMO_FRAME, frame, guard_kind(first) if first else "")


def _value_names(guard: str) -> tuple[str, ...]:
    """The Python values a failed guard is on, for a guard on values (not a container's length)."""
    return guarded_names(guard) if guard_kind(guard) in (GUARD_VALUE, GUARD_OTHER) else ()


# Dynamo's guard on which optimizer object ran torch.optim's code (`self` in a class's step(),
# `args[0]` in Optimizer's step wrapper): one code object serves every optimizer of a class.
_OPTIMIZER_IDENTITY = re.compile(r"___check_obj_id\((?:self|args\[0\]), \d+\), type=<class 'torch\.optim\.")


def own_guard(row: RecompileRow) -> str:
    """The guard that failed on the recompiled frame's own cache entry. torch lists every entry's
    first failing guard, newest entry first; in torch.optim's frames an entry made for another
    optimizer fails on that optimizer's identity, so the first failure that is not one is this
    optimizer's own (its state filled by its first step()). "" when every entry is another
    optimizer's: this optimizer's first step(). An entry made for another grad mode fails on it
    first, one made with an optional argument None (or a tensor) on it: the call's own failure is
    another entry's (torch_text.call_guard). Elsewhere, torch's
    first failing guard."""
    guards = [guard_text(m) for m in row.messages]
    if guards and tells_entries_apart(guards[0]):
        return call_guard(guards)
    if not row.optimizer_frame or not guards or not _OPTIMIZER_IDENTITY.search(guards[0]):
        return guards[0] if guards else ""
    return next((g for g in guards if not _OPTIMIZER_IDENTITY.search(g)), "")


def evaluation_compile(table: RecompileTable, row: RecompileRow) -> bool:
    """A recompile compiled for an evaluation: a guard on the grad mode failed (its own, or an
    entry's the evaluation's grad-off call also failed: after an unfreeze, the grad-off entry failed
    on requires_grad and the training entry on the grad mode) with the compile's guard tree saying
    grad off (`RecompileTable.grad_modes` holds only such compiles), or a switch into inference mode
    (`Cause.between_steps`, one row). It came after step k-1 ended, stamped k as whatever runs before
    a step's backward is."""
    guard = own_guard(row)
    if not guard or row.initial:
        return False
    return table.grad_modes.get(row.compile_id) is False or inference_mode_switch(guard) is True


def another_optimizer(row: RecompileRow) -> bool:
    """torch.optim's code recompiled because another optimizer ran it for the first time."""
    return row.optimizer_frame and bool(row.messages) and own_guard(row) == ""


_SOURCE_RANK = {"node_traceback": 0, "guard": 1, "caller": 2, "compiled_frame": 3, "backward_call": 4}


def cause_key(cause: Cause, causes: list[Cause] | None = None, rename: Callable[[str], str] = lambda name: name) -> tuple:
    """What makes two runs' causes the same cause: its code and kind of guard, and the line it is
    tied to (by file name, through `rename`: a re-run of the job is the same files). The backward's
    sizes are one cause whether compiled autograd missed on them or only Dynamo recompiled a CA
    graph's code on a size (what is left of them once compiled autograd starts dynamic). A forward
    frame's size recompile is keyed by the tensors and dimensions that changed too (a last batch's
    dim 0 is not a longer sequence's dim 1 at the same call) and the grad mode it recompiled in (an
    evaluation's last batch is not training's); a structure change by the kinds of node
    that differ (digits dropped: CompiledFunctionBackward0 and 7 are one kind); and, given the
    explanation's `causes`, a cause that follows another by that one's key (a backward captured again
    after a forward recompile is the same cause only after the same forward cause)."""
    source = cause.source
    kind = cause.facts.get("kind", "")
    if cause.code == CAUSE_SHAPES or (cause.code == CAUSE_DYNAMO_CA_GRAPH and kind in (GUARD_SIZE, "")):
        what: tuple = ("backward sizes",)
    elif cause.code == CAUSE_DYNAMO_FRAME and kind == GUARD_SIZE:
        dims = sorted({(found[0], found[1]) for _, guard in cause.facts.get("failures") or () if guard
                       and (found := size_guard(guard)) is not None})
        # ... and by the grad mode it recompiled in, where known: an evaluation's last batch and
        # training's, called from one line (a forward both go through), are two causes.
        what = (cause.code, kind, tuple(dims), cause.facts.get("grad_mode_after"))
    elif cause.code == CAUSE_STRUCTURE:
        kinds = sorted({re.sub(r"\d+$", "", name) for names in (cause.facts.get("variants") or {}).values() for name in names})
        what = (cause.code, kind, tuple(kinds))
    else:
        what = (cause.code, kind)
    key = (*what, rename(os.path.basename(source.file)) if source else None, source.line if source else None)
    if causes is not None and cause.caused_by is not None:
        root = next((c for c in causes if c.number == cause.caused_by and c is not cause), None)
        if root is not None:
            return ("follows", *key, cause_key(root, causes, rename))
    return key


def group_causes(table: RecompileTable) -> list[Cause]:
    """Recompiles grouped by root cause, biggest group first (ties: the earliest first)."""
    groups: dict[tuple, list[RecompileRow]] = {}
    shape_keys: dict[int, tuple] = {}
    inner = _after_inner_graphs(table)
    hook_frames = _hook_runner_frames(table)
    captured_in = table.inside_captures
    for row in table.recompiles:
        # torch's own frames compiled inside compiled autograd's captures: one cause, whichever frame and guard
        key = (CAUSE_DYNAMO_FRAME, "inside capture") if row.seq in captured_in else _group_key(table, row, shape_keys, hook_frames)
        if row.seq in inner:  # a new node only because an inner graph was made again: a cause of its own (rooted below)
            key = (*key, "after_inner_graph")
        if key[0] == CAUSE_SHAPES and row.ca_id is not None:
            shape_keys[row.ca_id] = key
        groups.setdefault(key, []).append(row)
    causes = _split_by_forward_cause(table, [_new_cause(key[0], rows) for key, rows in groups.items()])
    roots = _roots(table, causes, inner)
    _one_cause_a_change_of_sizes(causes, roots)
    _one_cause_a_change_met_by_each_call(causes, roots)
    followers: dict[int, list[Cause]] = {}
    for cause in causes:
        root = roots.get(id(cause))
        if root is not None:
            followers.setdefault(id(root), []).append(cause)
    top = [c for c in causes if id(c) not in roots]
    # torch's frames compiled inside the captures come after the causes of those captures
    # ... and the causes of calls after training (an evaluation after the last step) after training's own
    top.sort(key=lambda c: (all(row.seq in captured_in for row in c.rows), all(table.after_training(row) for row in c.rows), -(c.count + sum(f.count for f in followers.get(id(c), []))),
                            c.rows[0].seq))
    ordered: list[Cause] = []
    for cause in top:
        ordered.append(cause)
        ordered.extend(sorted(followers.get(id(cause), []), key=lambda c: c.rows[0].seq))
    for number, cause in enumerate(ordered, start=1):
        cause.number = number
    for cause in ordered:
        root = roots.get(id(cause))
        if root is not None:
            cause.caused_by = root.number
            root.consequences.append(cause.number)
    # a capture's cause, or the forward recompile that cause follows from
    capture_causes = {row.ca_id: roots[id(c)].number if id(c) in roots else c.number
                      for c in ordered for row in c.rows if row.source == SOURCE_CA and row.ca_id is not None}
    for cause in ordered:
        cause.facts = cause_facts(table, cause)
        if cause.caused_by is not None:
            cause.facts["caused_by"] = cause.caused_by
        if cause.rows and all(row.seq in captured_in for row in cause.rows):
            cause.facts["inside_capture"] = _capture_frames(cause, captured_in, capture_causes)
    by_number = {c.number: c for c in ordered}
    for cause in ordered:
        if cause.caused_by is not None:
            # What the root's guard was on decides what the follower's fix is.
            cause.facts["root_kind"] = by_number[cause.caused_by].facts.get("kind", "")
            cause.facts["root_code"] = by_number[cause.caused_by].code
            root_facts = by_number[cause.caused_by].facts
            # A Python list the compiled forward reads (not torch's list of a module's hooks, not a hook's own list)
            cause.facts["root_list"] = (root_facts.get("kind") == GUARD_LENGTH and not root_facts.get("hook")
                                        and not module_hooks_list(root_facts.get("container")))
            cause.facts["root_steps"] = by_number[cause.caused_by].steps
            root_sizes = [c for row in by_number[cause.caused_by].rows if (c := _batch_change(row)) is not None]
            cause.facts["root_dim"] = root_sizes[0][1] if root_sizes else None
            if cause.rows and cause.rows[0].source == SOURCE_CA:
                # A backward ran through the recompiled forward's graph: the call in the new state trained.
                by_number[cause.caused_by].facts["backward_through"] = True
            cause.facts["root_inputs"] = by_number[cause.caused_by].facts.get("requires_grad_inputs", [])
            mine, theirs = cause.facts.get("compiled_by"), by_number[cause.caused_by].facts.get("compiled_by")
            if cause.code == CAUSE_DYNAMO_FRAME and isinstance(mine, dict) and isinstance(theirs, dict) and mine.get("file") \
                    and (mine.get("file"), mine.get("line")) != (theirs.get("file"), theirs.get("line")):
                # Not a graph break's frame: another compiled function the step calls (a GAN's
                # generator beside its discriminator), compiled by a torch.compile call of its own.
                cause.facts["own_compile"] = f"{mine['file']}:{mine.get('line')}"
            if cause.code == CAUSE_SHAPES:
                cause.facts.update(_size_changed_again(cause, by_number[cause.caused_by]))
            if cause.facts["root_kind"] == GUARD_REQUIRES_GRAD:
                cause.facts["root_ways"] = requires_grad_ways(by_number[cause.caused_by].facts)
    return ordered


def _size_changed_again(cause: Cause, root: Cause) -> dict[str, Any]:
    """{"changed_again": (the root's recompile step, the size it recompiled away from, the one it
    recompiled for, the values that size took in the cause's captures)} for a changed-sizes cause
    none of whose captures is in a step where its root recompiled the forward
    (_roots_in_a_size_changed_again), else {}."""
    changes = [c for row in root.rows if (c := _batch_change(row)) is not None and c[2] is not None]
    if not changes or {r.step for r in cause.rows if r.source == SOURCE_CA} & {c[0] for c in changes}:
        return {}
    step, _, expected, actual = changes[0]
    values = sorted({size.value for row in cause.rows for size in row.changed_sizes if size.previous == actual and size.value != actual})
    return {"changed_again": (step, expected, actual, values)}


def _one_cause_a_change_of_sizes(causes: list[Cause], roots: dict[int, Cause]) -> None:
    """Merges the changed-sizes causes that follow one forward cause into one, in place: a cause of
    changed sizes is one per line that called backward, and a step of several backward calls (a
    GAN's discriminator on real data, on the generator's output, then the generator's loss) meets
    one change of the batch at each of them: one change, one cause, each call's capture in its
    evidence."""
    by_root: dict[int, list[Cause]] = {}
    for cause in causes:
        if cause.code == CAUSE_SHAPES and id(cause) in roots:
            by_root.setdefault(id(roots[id(cause)]), []).append(cause)
    for group in by_root.values():
        if len(group) < 2:
            continue
        root = roots[id(group[0])]
        merged = _new_cause(CAUSE_SHAPES, sorted((row for cause in group for row in cause.rows), key=lambda row: row.seq))
        causes[causes.index(group[0])] = merged
        for cause in group:
            del roots[id(cause)]
            if cause is not group[0]:
                causes.remove(cause)
        roots[id(merged)] = root


def _call_changes(cause: Cause) -> tuple | None:
    """The steps at which `cause`'s compiled-autograd misses came and the size changes each made
    (previous -> value), where every miss is one backward call's: None otherwise."""
    ca_rows = [row for row in cause.rows if row.source == SOURCE_CA]
    calls = {_location(row.user_source) for row in ca_rows}
    if not ca_rows or len(calls) != 1 or None in calls:
        return None
    return tuple((row.step, frozenset((size.previous, size.value) for size in row.changed_sizes)) for row in ca_rows)


def _one_cause_a_change_met_by_each_call(causes: list[Cause], roots: dict[int, Cause]) -> None:
    """Merges, in place, the changed-sizes causes of several backward calls that met one change of
    the data: each call's misses at the same steps, each changing sizes from and to the same values
    (a GAN's three backward calls a step meeting its last, shorter batch: 16 -> 4 at each). A cause of
    changed sizes is one per line that called backward; one change of the batch is one cause, each
    call's capture in its evidence. Causes that follow a forward cause are merged by
    _one_cause_a_change_of_sizes."""
    alike: dict[tuple, list[Cause]] = {}
    for cause in causes:
        if cause.code != CAUSE_SHAPES or id(cause) in roots or cause in roots.values():
            continue
        changes = _call_changes(cause)
        if changes is not None and all(change for _, change in changes):
            alike.setdefault(changes, []).append(cause)
    for group in alike.values():
        if len(group) < 2:
            continue
        merged = _new_cause(CAUSE_SHAPES, sorted((row for cause in group for row in cause.rows), key=lambda row: row.seq))
        causes[causes.index(group[0])] = merged
        for cause in group[1:]:
            causes.remove(cause)


def _capture_frames(cause: Cause, captured_in: dict[int, int], capture_causes: dict[int, int]) -> dict[str, Any]:
    """What the words of a cause of frames compiled inside compiled autograd's captures need: the
    frames (function and file), the captures they were compiled in, and the causes of those
    captures (none for the first capture, which any job makes)."""
    frames = list(dict.fromkeys((row.frame_function, row.frame_file) for row in cause.rows))
    captures = sorted({captured_in[row.seq] for row in cause.rows})
    return {"frames": [{"function": function, "file": file} for function, file in frames],
            "captures": [f"!{n}" for n in captures],
            "capture_causes": sorted({capture_causes[n] for n in captures if n in capture_causes and capture_causes[n] != cause.number})}


# The CA recompiles a forward recompile brings with it: the backward of a forward compiled anew
# holds a new AOT backward graph (a new autograd node) or new sizes. Hooks and .grad changes have
# causes of their own.
_FOLLOWER_CODES = (CAUSE_STRUCTURE, CAUSE_SHAPES, CAUSE_UNKNOWN)


COMPILED_FUNCTION_BACKWARD = "CompiledFunctionBackward"
# The codes of a root that is a capture of another backward (an inner graph), not a forward recompile.
_CA_ROOT_CODES = (CAUSE_SHAPES, CAUSE_DYNAMO_CA_GRAPH, CAUSE_STRUCTURE, CAUSE_HOOK, CAUSE_GRAD_DEFINED, CAUSE_UNKNOWN)


def _after_inner_graphs(table: RecompileTable) -> dict[int, int]:
    """seq of a CA capture at a new CompiledFunctionBackward node -> seq of the capture of another
    backward, or Dynamo's recompile of a CA graph's code, right before it in the same step (what
    `_roots_in_inner_graphs` roots it in); not in a step where Dynamo recompiled a forward, whose
    new CompiledFunction is the forward-frame rule's (`_roots`)."""
    found: dict[int, int] = {}
    previous: RecompileRow | None = None
    forward_recompiled: set[int | None] = set()  # steps with a forward recompile: a new CompiledFunction of its own
    for row in table.rows:
        if row.source == SOURCE_DYNAMO_FRAME and not row.initial:
            forward_recompiled.add(row.step)
        if (row.source == SOURCE_CA and row.kind == MISS_NEW_NODE and (row.node or "").startswith(COMPILED_FUNCTION_BACKWARD)
                and previous is not None and previous.step == row.step and not previous.initial and row.step not in forward_recompiled
                and (previous.source == SOURCE_DYNAMO_CA_GRAPH
                     or (previous.source == SOURCE_CA and _location(previous.user_source) != _location(row.user_source)))):
            found[row.seq] = previous.seq
        previous = row
    return found


def _roots_in_inner_graphs(inner: dict[int, int], causes: list[Cause], roots: dict[int, Cause]) -> None:
    """Adds to `roots` the CA captures that follow from another capture of the same step: a
    backward taken with create_graph=True (a gradient penalty's `autograd.grad`) is captured by
    compiled autograd, and its compiled graph is differentiated by the next backward, where it is
    a CompiledFunctionBackward node. When that inner graph is captured again (its sizes changed)
    or Dynamo recompiles its code, the next backward meets a new CompiledFunctionBackward: a
    capture of its own, which follows from the inner one (WGAN-GP with a smaller last batch).
    `inner`: `_after_inner_graphs` of the table."""
    owner: dict[int, Cause] = {}
    for cause in causes:
        for row in cause.rows:
            owner[row.seq] = cause
    follows = {seq: owner[before] for seq, before in inner.items() if before in owner}
    for cause in causes:
        if id(cause) in roots or cause.code not in _FOLLOWER_CODES:
            continue
        ca_rows = [r for r in cause.rows if r.source == SOURCE_CA]
        if not ca_rows or any(r.seq not in follows for r in ca_rows):
            continue
        found = {id(follows[r.seq]) for r in ca_rows}
        root = follows[ca_rows[0].seq]
        if len(found) == 1 and root is not cause:
            roots[id(cause)] = root


def _forward_owners(table: RecompileTable, causes: list[Cause]) -> dict[int, Cause]:
    """seq of a Dynamo forward-frame row -> its cause (not torch's frames compiled inside a capture,
    which are no forward's)."""
    inside = table.inside_captures
    return {row.seq: cause for cause in causes if cause.code == CAUSE_DYNAMO_FRAME for row in cause.rows if row.seq not in inside}


def _forward_follows(table: RecompileTable, owner: dict[int, Cause]) -> dict[int, Cause]:
    """Each CA capture (the initial one included) -> the cause of the forward recompile just before
    it in the same step, if any since the previous capture (`owner`: _forward_owners)."""
    follows: dict[int, Cause] = {}
    forwards: list[RecompileRow] = []  # since the previous capture
    last: RecompileRow | None = None  # the previous capture
    for row in table.rows:
        if row.source == SOURCE_DYNAMO_FRAME and not row.initial:
            forwards.append(row)
        elif row.source == SOURCE_CA:
            # A forward compiled with grad off (an evaluation's, under no_grad) makes no backward graph:
            # a capture after it follows the forward before it (DeepSpeed with gradient accumulation:
            # the last micro-batch's recompile, the epoch's evaluation, then the next micro-batch's
            # .grad warm-up of the graph the first made).
            here = [f for f in forwards if f.step == row.step and f.seq in owner and table.grad_modes.get(f.compile_id) is not False]
            if row.kind == MISS_CHANGED_SHAPES:
                # A forward recompiled for its grad mode (an evaluation under no_grad, between two
                # epochs' training) ran no backward: it changed no size the backward sees.
                here = [f for f in here if guard_kind(own_guard(f)) != GUARD_GRAD_MODE]
            # Changed sizes follow the forward recompiled for a size (a checkpoint's recompute may
            # recompile the forward for its grad mode in the same step, after it), else the last.
            sized = [f for f in here if size_guard(own_guard(f)) is not None] if row.kind == MISS_CHANGED_SHAPES else []
            if sized or here:
                follows[row.seq] = owner[(sized or here)[-1].seq]
            elif last is not None and last.seq in follows and _warms_up(table, row, last):
                # The .grad warm-up of the graph the previous capture made after a forward recompile,
                # in that step or the next (a later micro-batch accumulating into .grad): it follows
                # the same forward.
                follows[row.seq] = follows[last.seq]
            forwards = []
            last = row
    return follows


def _warms_up(table: RecompileTable, row: RecompileRow, previous: RecompileRow) -> bool:
    """CA capture `row` is AccumulateGrad's .grad warm-up of the graph capture `previous` made: a new
    AccumulateGrad node, the graph it replaced being that capture's, in its step or the next."""
    if row.kind != MISS_NEW_NODE or not (row.node or "").endswith("AccumulateGrad") or row.ca_id is None:
        return False
    if row.step is None or previous.step is None or not 0 <= row.step - previous.step <= 1:
        return False
    replaced = table.previous_graph(row.ca_id)
    return replaced is not None and replaced.ca_id == previous.ca_id


def _split_by_forward_cause(table: RecompileTable, causes: list[Cause]) -> list[Cause]:
    """A backward cause whose every CA capture follows a forward recompile of its step, from two or
    more forward causes (an HF model's forward compiled again for a config attribute at step 1 and
    for a last batch at step 6: each time the backward meets a new CompiledFunctionBackward at the
    same place), is one cause per forward cause, each following its own (_roots). Captures of such a
    cause that follow no forward recompile (a loss switched at a later phase: new nodes of the
    backward's own) are a cause of their own beside them, never the forward causes' with them.
    Dynamo's recompiles of a CA graph go with the capture that made the graph."""
    owner = _forward_owners(table, causes)
    if not owner:
        return causes
    follows = _forward_follows(table, owner)
    split: list[Cause] = []

    def part(row: RecompileRow) -> int | None:
        return id(follows[row.seq]) if row.seq in follows else None

    for cause in causes:
        ca_rows = [r for r in cause.rows if r.source == SOURCE_CA]
        # Two forward causes or more among the captures' (one alone, with captures that follow none:
        # the backward changes with the forward and on its own, one phenomenon, as a loop's trip
        # count past the recompile limit, where the forward runs eagerly, is)
        if (cause.code not in _FOLLOWER_CODES or not ca_rows or len({part(r) for r in ca_rows if r.seq in follows}) < 2
                or any(r.source not in (SOURCE_CA, SOURCE_DYNAMO_CA_GRAPH) for r in cause.rows)):
            split.append(cause)
            continue
        parts: dict[int | None, list[RecompileRow]] = {}
        part_of_graph: dict[int, int | None] = {}
        last = part(ca_rows[0])
        for row in cause.rows:
            if row.source == SOURCE_CA:
                last = part(row)
                if row.ca_id is not None:
                    part_of_graph[row.ca_id] = last
                parts.setdefault(last, []).append(row)
            else:
                parts.setdefault(part_of_graph.get(ca_id_of(row.compile_id), last), []).append(row)
        split.extend(_new_cause(cause.code, rows) for rows in parts.values())
    return split


def _new_cause(code: str, rows: list[RecompileRow]) -> Cause:
    """A cause of `rows`, tied to the most specific line of theirs: where the node was made or the
    guard installed, then the compiled function, then the line that called backward."""
    sources = sorted((r.user_source for r in rows if r.user_source is not None), key=lambda ref: _SOURCE_RANK.get(ref.how, len(_SOURCE_RANK)))
    return Cause(code=code, rows=rows, source=sources[0] if sources else None)


def _roots(table: RecompileTable, causes: list[Cause], inner: dict[int, int]) -> dict[int, Cause]:
    """id(cause) -> the Dynamo forward-frame cause it follows from: every CA capture of the cause
    is the first capture after a forward recompile of that cause, in the same step (an imported
    log has no steps: the first capture after it). Dynamo's recompiles of a CA graph that such a
    capture made go with it."""
    owner = _forward_owners(table, causes)
    if not owner:
        roots: dict[int, Cause] = {}
        _roots_in_inner_graphs(inner, causes, roots)
        return roots
    follows = _forward_follows(table, owner)
    roots = {}
    for cause in causes:
        if cause.code not in _FOLLOWER_CODES and not _warms_up_a_new_graph(table, cause):
            continue
        ca_rows = [r for r in cause.rows if r.source == SOURCE_CA]
        if not ca_rows or any(r.source not in (SOURCE_CA, SOURCE_DYNAMO_CA_GRAPH) for r in cause.rows):
            continue
        if all(r.ca_id in table.other_calls for r in ca_rows):
            continue  # another backward call's first graph (a GAN's generator loss): new whatever the forward did
        found = {id(follows[r.seq]) if r.seq in follows else None for r in ca_rows}
        if len(found) == 1 and None not in found:
            roots[id(cause)] = follows[ca_rows[0].seq]
    _roots_in_inner_graphs(inner, causes, roots)
    _roots_in_a_size_changed_again(table, causes, owner, follows, roots)
    _roots_of_warmups(table, causes, roots)
    # One global change (torch.set_num_threads) fails the same guard of a forward frame and of a
    # compiled-autograd graph's code in the same step: one change, fixed once, counted once.
    changed: dict[tuple[str, int], Cause] = {}
    for cause in causes:
        if cause.code == CAUSE_DYNAMO_FRAME:
            for row in cause.rows:
                if row.step is not None and guard_kind(own_guard(row)) == GUARD_GLOBAL_STATE:
                    changed.setdefault((own_guard(row), row.step), cause)
    for cause in causes:
        if cause.code != CAUSE_DYNAMO_CA_GRAPH or id(cause) in roots:
            continue
        same = {id(changed[(own_guard(r), r.step)]) if (own_guard(r), r.step) in changed else None for r in cause.rows}
        if len(same) == 1 and None not in same:
            roots[id(cause)] = changed[(own_guard(cause.rows[0]), cause.rows[0].step)]
    _roots_in_other_frames(causes, roots)
    return roots


def _roots_of_warmups(table: RecompileTable, causes: list[Cause], roots: dict[int, Cause]) -> None:
    """Adds to `roots` a cause whose every CA capture is the .grad warm-up (_warms_up) of the graph
    the capture just before it made, where that capture's cause follows a root: its root too. A
    backward captured again for other sizes in a step whose first backward found .grad None (a
    later epoch's first micro-batch under gradient accumulation, after a smaller last batch) is
    captured once more by the step's next backward, which adds into .grad: that graph's own
    warm-up, not gradients cleared otherwise (accelerate's `accumulate`, set_to_none every step)."""
    cause_of = {row.seq: cause for cause in causes for row in cause.rows}
    previous: dict[int, RecompileRow] = {}  # seq of a CA capture -> the CA capture before it
    last: RecompileRow | None = None
    for row in table.rows:
        if row.source == SOURCE_CA:
            if last is not None:
                previous[row.seq] = last
            last = row
    for cause in causes:
        if id(cause) in roots or cause.code != CAUSE_GRAD_DEFINED:
            continue
        found: set[int] = set()
        root: Cause | None = None
        for row in cause.rows:
            before = previous.get(row.seq)
            made_by = cause_of.get(before.seq) if before is not None else None
            if before is None or made_by is None or not _warms_up(table, row, before):
                break
            root = roots.get(id(made_by))
            if root is None:
                break
            found.add(id(root))
        else:
            if root is not None and len(found) == 1 and root is not cause:
                roots[id(cause)] = root


def _roots_in_a_size_changed_again(table: RecompileTable, causes: list[Cause], owner: dict[int, Cause], follows: dict[int, Cause],
                                   roots: dict[int, Cause]) -> None:
    """Adds to `roots` the backward's changed sizes in a step with no forward recompile, where a size
    changed from the value a forward cause recompiled for: dcgan's last batch of an epoch (8 rows,
    then 3, then 8 again), a length padded per batch (14, 13, then 12). Dynamo recompiled the
    forward for 3 rows (13 tokens) with that dimension dynamic, so that graph serves the later
    sizes too; compiled autograd had captured its backward for 3 (13), with static sizes, and
    misses on the next. One changing size, rooted in the forward's recompile: every CA capture of
    the cause saw a size go from that recompile's new value to another, or a size change on the
    node of a forward graph that recompile made (a CompiledFunctionBackward new in the capture that
    followed it: BERT's padded length, sizes no node of the graph reads, whose earlier values no
    graph shows) (`follows`: _forward_follows, rows of a step whose forward recompiled)."""
    # (step, expected, actual, cause, seq) of each forward recompile on a size
    changes: list[tuple[int, int, int, Cause, int]] = []
    for row in table.rows:
        if row.seq in owner and (change := _batch_change(row)) is not None and change[2] is not None:
            changes.append((change[0], change[2], change[3], owner[row.seq], row.seq))  # type: ignore[arg-type]
    if not changes:
        return
    sized = {id(c[3]) for c in changes}
    made: dict[int, set[str]] = {}  # id(forward cause) -> the CompiledFunctionBackward nodes its followers' captures brought
    for cause in causes:
        root = roots.get(id(cause))
        if root is None or id(root) not in sized or cause.code != CAUSE_STRUCTURE:
            continue
        for row in cause.rows:
            graph = table.graphs.get(row.ca_id) if row.source == SOURCE_CA and row.ca_id is not None else None
            if graph is not None:
                before = table.previous_graph(row.ca_id)
                made.setdefault(id(root), set()).update(
                    n for n in graph.autograd_names() if n.startswith(COMPILED_FUNCTION_BACKWARD)
                    and (before is None or n not in before.autograd_names()))
    for cause in causes:
        if cause.code != CAUSE_SHAPES or id(cause) in roots:
            continue
        ca_rows = [r for r in cause.rows if r.source == SOURCE_CA]
        if not ca_rows or any(r.seq in follows or r.step is None for r in ca_rows):
            continue
        found: set[int] = set()
        root: Cause | None = None
        for row in ca_rows:
            # in a later step, or later in the same one (a later micro-batch of gradient accumulation)
            back = [c for c in changes if (c[0] < row.step or (c[0] == row.step and c[4] < row.seq))  # type: ignore[operator]
                    and any((size.previous == c[2] and size.value != c[2]) or size.node in made.get(id(c[3]), ())
                            for size in row.changed_sizes)]
            if not back:
                found.add(0)
                break
            root = back[-1][3]
            found.add(id(root))
        if len(found) == 1 and root is not None and root is not cause:
            roots[id(cause)] = root
    _roots_of_graphs_a_size_made(table, causes, changes, roots)


def _roots_of_graphs_a_size_made(table: RecompileTable, causes: list[Cause], changes: list[tuple[int, int, int, Cause, int]],
                                 roots: dict[int, Cause]) -> None:
    """Adds to `roots` Dynamo's recompiles, on a size, of the code of a compiled-autograd graph that
    was captured for a forward cause's changed size (a capture of that cause or of one following
    it), in a later step: Lightning's last batch of 2 rows, the backward captured for it with its
    sizes as inputs, whose code Dynamo compiled for 2 and compiles again when the next epoch's 4
    rows come. The batch's change, rooted where it began."""
    sized = {id(c[3]): c for c in changes}
    captured_for: dict[int, Cause] = {}  # CA graph id -> the forward cause its capture followed from
    for cause in causes:
        root = cause if id(cause) in sized else roots.get(id(cause))
        if root is None or id(root) not in sized:
            continue
        for row in cause.rows:
            if row.source == SOURCE_CA and row.ca_id is not None:
                captured_for.setdefault(row.ca_id, root)
    for cause in causes:
        if cause.code != CAUSE_DYNAMO_CA_GRAPH or id(cause) in roots or not cause.rows:
            continue
        found = {id(captured_for[ca]) if (ca := ca_id_of(row.compile_id)) in captured_for and row.step is not None
                 and row.step > sized[id(captured_for[ca])][0] and guard_kind(own_guard(row)) == GUARD_SIZE else None
                 for row in cause.rows}
        if len(found) == 1 and None not in found:
            roots[id(cause)] = captured_for[ca_id_of(cause.rows[0].compile_id)]  # type: ignore[index]


def _warms_up_a_new_graph(table: RecompileTable, cause: Cause) -> bool:
    """A .grad cause whose every capture has the warm-up's shape (a new AccumulateGrad node, the
    hooks of the graph before): where it follows a forward recompile of its step (_roots), the
    backward graph that recompile made warming up, as every graph does at the first step (dcgan's
    discriminator on the last batch: the step's first backward finds .grad None after zero_grad,
    the next accumulates into it)."""
    if cause.code != CAUSE_GRAD_DEFINED:
        return False
    # The first graph's own warm-up is there whatever a forward did before it (a Trainer's ragged
    # batches under gradient accumulation: the forward recompiled at the second micro-batch, whose
    # backward found .grad defined): the run's warm-up, not a new graph's.
    initial = {r.ca_id for r in table.initial if r.source == SOURCE_CA}
    for row in cause.rows:
        if row.source != SOURCE_CA or row.kind != MISS_NEW_NODE or not (row.node or "").endswith("AccumulateGrad"):
            return False
        graphs = (table.graphs.get(row.ca_id) if row.ca_id is not None else None, table.previous_graph(row.ca_id))
        if None in graphs or sorted(h.hook_type for h in graphs[0].hooks) != sorted(h.hook_type for h in graphs[1].hooks):  # type: ignore[union-attr]
            return False
        if graphs[1].ca_id in initial:  # type: ignore[union-attr]
            return False
    return True


def _batch_change(row: RecompileRow) -> tuple[int, int, int | None, int | None] | None:
    """(step, dim, expected, actual) of a forward frame's recompile on one of its tensors' sizes;
    (step, dim, None, None) for a dynamic dimension that met a size of 0 or 1 (`2 <= x.size()[0]`:
    the guard says neither value)."""
    if row.step is None:
        return None
    guard = own_guard(row)
    found = size_guard(guard)
    if found is None:
        specialised = specialised_size(guard)
        return None if specialised is None else (row.step, specialised[1], None, None)
    return (row.step, found[1], found[2], found[3])


def _state_change(row: RecompileRow) -> tuple[int, str] | None:
    """(step, torch's guard) of a frame's recompile on the global state (`GLOBAL_STATE changed:
    grad_mode`: an evaluation under no_grad; autocast; the thread count)."""
    guard = own_guard(row)
    if row.step is None or guard_kind(guard) not in (GUARD_GRAD_MODE, GUARD_GLOBAL_STATE):
        return None
    return (row.step, guard)


def _frame_change(row: RecompileRow) -> tuple | None:
    """The change a forward frame's recompile was for, as one key every frame it reached shares: a
    size's (_batch_change) or the global state's (_state_change)."""
    found = _batch_change(row)
    if found is not None:
        return ("size", *found)
    state = _state_change(row)
    return None if state is None else ("state", *state)


def _roots_in_other_frames(causes: list[Cause], roots: dict[int, Cause]) -> None:
    """Adds to `roots` the forward frames recompiled on a size by the same change as an earlier
    frame of the same step: a graph break splits a forward into frames (an HF model's loss under
    its forward wrapper: 5 frames), each compiled for its sizes, and one smaller last batch (dim 0,
    4 -> 2 rows) recompiles every one of them. One change, one root: the first frame the step
    recompiled; each other frame follows it when every one of its recompiles does. A cause that
    followed such a frame (the backward's sizes, after the last frame) follows the root. The same
    for a change of the global state (an evaluation under no_grad between two steps recompiles
    every frame of the forward on the grad mode: one evaluation, one root)."""
    first: dict[tuple, tuple[int, Cause]] = {}
    for cause in causes:
        if cause.code != CAUSE_DYNAMO_FRAME:
            continue
        for row in cause.rows:
            change = _frame_change(row)
            if change is not None and (change not in first or row.seq < first[change][0]):
                first[change] = (row.seq, cause)
    moved: dict[int, Cause] = {}
    for cause in causes:
        if cause.code != CAUSE_DYNAMO_FRAME or id(cause) in roots:
            continue
        changes = [_frame_change(row) for row in cause.rows]
        if not changes or None in changes:
            continue
        found = {id(first[c][1]) for c in changes}  # type: ignore[index]
        root = first[changes[0]][1]  # type: ignore[index]
        if len(found) == 1 and root is not cause and id(root) not in roots:
            roots[id(cause)] = root
            moved[id(cause)] = root
    for key, root in list(roots.items()):
        if id(root) in moved:
            roots[key] = moved[id(root)]


def _frequent(table: RecompileTable) -> list[int] | None:
    """The steps after the first that recompiled, where they are STORM_MIN_STEPS or more and more
    than STORM_FRACTION of those steps; None otherwise."""
    last = table.last_step
    # The first step compiles whatever the script does: a storm is in the steps after it.
    after_first = FIRST_STEP + 1
    if last is None or last < after_first + STORM_MIN_STEPS - 1:
        return None
    recompiling = sorted({r.step for r in table.recompiles if r.step is not None and r.step >= after_first})
    if len(recompiling) < STORM_MIN_STEPS or len(recompiling) / (last + 1 - after_first) <= STORM_FRACTION:
        return None
    return recompiling


def _storm(table: RecompileTable, causes: list[Cause]) -> Alert | None:
    recompiling, last = _frequent(table), table.last_step
    if recompiling is None or last is None:
        return None
    after_first = FIRST_STEP + 1
    later_steps = range(after_first, last + 1)
    # A storm is recompiles that keep coming: a cause recompiling step after step up to the run's
    # last step, or past the recompile limit. Several one-off causes on most of a short run's steps
    # (a thread count, an eval() pass, a no_grad evaluation) are no storm: each is cached after it.
    if not table.limit_hits and not any(len([s for s in c.steps if s >= after_first]) >= STORM_MIN_STEPS and c.steps[-1] == last
                                        for c in causes):
        return None
    in_storm = [c for c in causes if any(s in recompiling for s in c.steps)]
    # torch's frames compiled inside the captures end with the captures' causes: not one to fix
    in_storm = [c for c in in_storm if not c.facts.get("inside_capture")] or in_storm
    return Alert(
        code=ALERT_STORM,
        facts={
            "recompiling_steps": recompiling,
            "steps_after_first": len(later_steps),
            "every_step": len(recompiling) == len(later_steps),
            "recompiles": sum(1 for r in table.recompiles if r.step is not None and r.step >= after_first),
            "still_recompiling": recompiling[-1] == last,
            "last_step": last,
        },
        causes=[c.number for c in in_storm],
    )


def spread_words(explanation: Explanation) -> str:
    """When recompiles fall on most steps (`_frequent`) and are no storm, when they happened: "in
    the first 5 of 6 steps", or "in 5 steps" when the last one was at the run's last step. "" otherwise."""
    table = explanation.table
    recompiling = _frequent(table)
    if any(a.code == ALERT_STORM for a in explanation.alerts) or recompiling is None or not table.steps:
        return ""
    first_k = recompiling[-1] - FIRST_STEP + 1
    return f"in {plural(table.steps, 'step')}" if first_k >= table.steps else f"in the first {first_k} of {table.steps} steps"


def _limit_alert(table: RecompileTable, causes: list[Cause]) -> Alert | None:
    if not table.limit_hits:
        return None
    frames = {compile_frame(hit.compile_id) for hit in table.limit_hits if hit.compile_id}
    behind = [
        c.number
        for c in causes
        if c.code in (CAUSE_DYNAMO_FRAME, CAUSE_DYNAMO_CA_GRAPH) and frames & {c.facts.get("frame"), *c.facts.get("frames", ())}
    ]
    for cause in causes:
        if cause.number in behind:
            # Its recompiles stopped because Dynamo gave up, not because the cause went away.
            cause.facts["stabilised"] = False
            cause.facts["stopped_by_limit"] = True
    return Alert(code=ALERT_LIMIT, facts={"hits": len(table.limit_hits)}, causes=behind, limit_hits=table.limit_hits)


def size_recompiles(explanation: Explanation) -> int:
    """How many of the explained recompiles failed on a tensor's size: compiled autograd's
    changed-shapes misses and Dynamo's size guards (what torch's PGO suggestion can remove)."""
    return sum(cause.count for cause in explanation.causes
               if cause.code == CAUSE_SHAPES or any(guard_kind(guard) == GUARD_SIZE for _, guard in cause.facts.get("failures") or () if guard))


def explain(table: RecompileTable) -> Explanation:
    causes = group_causes(table)
    for cause in causes:
        # Recompiles an evaluation compiled (Cause.place), in a cause of training steps or all of a cause
        # whose guard is not the grad mode (a size an evaluation's batch took): said as between steps.
        evaluations = [r for r in cause.rows if r.step is not None and evaluation_compile(table, r)]
        if evaluations and not cause.between_steps:
            cause.facts["evaluation_ids"] = [r.compile_id for r in evaluations]
            cause.facts["evaluation_steps"] = sorted({r.step for r in evaluations})
    if table.stopping_compile is not None:
        # A recompile whose compile raised the error the process ended with: that cause stopped the job.
        stopping = table.stopping_compile[0]
        for cause in causes:
            if any(r.compile_id == stopping for r in cause.rows):
                cause.facts["failed_compile"] = table.stopping_compile
    alerts = [a for a in (_limit_alert(table, causes), _storm(table, causes)) if a is not None]
    if table.sharded_under_ca:
        for cause in causes:
            cause.facts["sharded_under_ca"] = True
    if table.ca_by_cagtool_only:
        for cause in causes:
            cause.facts["ca_by_cagtool_only"] = True
    if table.backward_outside_compiled:
        for cause in causes:
            cause.facts["backward_outside_compiled"] = True
    return Explanation(table=table, alerts=alerts, causes=causes)
