"""The headline: one or two sentences that answer what the user came for, pasteable into a pull
request. What replicates between processes leads (recompiles, compile time, time to the first
step, peak memory), then the time verdict with what it rests on: "1 CA recompile (step 3, changed
sizes; fix verified); compile aot 18.0 s, ca 42.6 s; first step aot 33.0 s, ca 48.6 s; peak memory
aot 1.2 GB, ca 1.3 GB; compiled autograd: 0.85x the speed of torch.compile alone in CPU time per
step (slower, 90% CI 0.82x-0.88x); numerics agree."

A multi-rank run's figures are one rank's (rank 0's, or `--rank N`'s), but the headline is the
job's: where the ranks part (report.ranks' divergence findings, what the gate's ranks-agree check
fails on) leads, a rank that failed or left no record is named, and the other ranks whose CA
graphs or recompiles differ are named beside the shown rank's: "rank 1: 1 CA recompile (new
autograd nodes); rank 0: none", never "no recompiles".

Pure functions of a `Comparison` (one run) or a `RunComparison` (A/B), and optionally the run's
kept verification; every renderer (run's summary, `compare`, the HTML report) puts it first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Hashable

from cagtool.report.text.words import and_words
from cagtool.report.compare.analysis import EFFECT, INCONCLUSIVE, LOSS, ISOLATE_WORKDIR_FIX, LOAD_DIFFERED, NO_CHANGE, TOO_FEW_STEPS, Comparison, RunComparison, Speedup, ended_words
from cagtool.report.figures.intervals import MEASURE_WORDS, ratio_text
from cagtool.report.figures.pooled import base_mode
from cagtool.report.known_failures import SPARSE_IN_CA_GRAPH, hint_caveat, sparse_in_ca_graph
from cagtool.torch_text import hint_advice

if TYPE_CHECKING:
    from cagtool.report.figures.metrics import GraphBreakSite, ModeMetrics
    from cagtool.report.figures.pooled import ModeColumn
    from cagtool.report.findings import SkippedCompile
    from cagtool.report.recompiles.explain import Cause, Explanation

GOOD, BAD, NEUTRAL = "good", "bad", "neutral"

_MODE_WORDS = {"ca": "compiled autograd", "aot": "torch.compile alone", "eager": "eager"}


@dataclass(frozen=True)
class Headline:
    text: str
    tone: str  # good | bad | neutral: the colour the HTML gives it
    # What to do about it, in one sentence (the fix of the first root cause of a recompile); "" when
    # there is nothing to do.
    advice: str = ""
    # Where the advice's why is shown: "recompiles" (`recompiles --explain`) or "summary" (a finding).
    details: str = "recompiles"


def _speed_phrase(s: Speedup, trained_otherwise: bool = False, aot_compiled_nothing: bool = False,
                  skipped: "SkippedCompile | None" = None, gave_up: "GraphBreakSite | None" = None) -> tuple[str, str]:
    """The time verdict with its status: what it rests on, and never a figure beyond what the
    evidence supports (a ratio from one process per mode is a figure, not a verdict).
    `trained_otherwise`: one of the two modes' numerics differ (skipped work, other gradients):
    it is not faster at the same job, so the figure goes without a verdict. `aot_compiled_nothing`:
    the script calls no torch.compile, so its aot mode ran it eagerly: named so, not torch.compile;
    `skipped`: or it called module.compile(), which compiled nothing (report.findings); `gave_up`:
    or Dynamo gave up on the compiled function whole at this graph break (an RNN in it)."""
    mode, base = _MODE_WORDS.get(s.mode, s.mode), _MODE_WORDS.get(s.baseline, s.baseline)
    if aot_compiled_nothing and s.baseline == "aot":
        itself = (f"its {skipped.call} compiled nothing" if skipped is not None
                  else f"Dynamo gave up on the function holding {_site_place(gave_up)}" if gave_up is not None
                  else "it compiles nothing itself")
        base = f"the script without it ({itself}: the aot mode ran it eagerly)"
    if s.ratio is None:
        return f"{mode} vs {base}: not timed ({s.note or 'no steady steps'})", NEUTRAL
    figure = f"{ratio_text(s.ratio)} the speed of {base}"
    if s.compilers:
        figure += f" (its backward compiled by {s.compilers[0]}, aot's by {s.compilers[1]}: compilers differ)"
    measure = MEASURE_WORDS.get(s.interval.measure, "") if s.interval is not None else ""
    on = f" in {measure}" if measure and s.interval is not None and s.interval.measure == "cpu" else ""
    ci = f"90% CI {ratio_text(s.low)}-{ratio_text(s.high)}" if s.low is not None and s.high is not None else ""
    verdict = s.verdict
    if trained_otherwise:
        return f"{mode}: {figure}{on}{f' ({ci})' if ci else ''}, not a verdict: its numerics differ", NEUTRAL
    if s.courses:
        # Each side ran to the job's own end in another number of steps: a step's work may differ.
        return (f"{mode}: {figure}{on}{f' ({ci})' if ci else ''}, not a verdict: it ran {s.courses[1]} steps to the job's "
                f"own end where {base} ran {s.courses[0]}, so a step's work may differ"), NEUTRAL
    if verdict == TOO_FEW_STEPS:
        a, b = s.steady_steps
        return f"{mode}: {figure}{on}, from {a} and {b} steady steps, too few to judge (run more steps)", NEUTRAL
    if verdict == LOAD_DIFFERED:
        return f"{mode}: {figure}{on}, not judged: {load_words(s, 'modes')} ({ci})", NEUTRAL
    basis = ""
    if not s.measured and s.interval is not None:
        one = max(s.interval.units) == 1
        basis = (", one process per mode: run-to-run noise assumed, not measured" if one
                 else f", {max(s.interval.units)} processes per mode: too few blocks to measure the run-to-run noise")
    if verdict == INCONCLUSIVE:
        needed = s.blocks_needed
        more = f"; run --repeat {needed} to resolve it" if needed is not None else "; too close to call"
        return f"{mode}: {figure}{on}, inconclusive ({ci}{basis}{more})", NEUTRAL
    if verdict == NO_CHANGE:
        return f"{mode}: no change in speed larger than {EFFECT:.0%} against {base}{on} ({ci}{basis})", NEUTRAL
    word = "faster" if verdict == "faster" else "slower"
    return f"{mode}: {figure}{on} ({word}, {ci}{basis})", GOOD if word == "faster" else BAD


def _cost_phrase(comparison: Comparison, idle: Collection[str] = ()) -> str:
    """What replicates between processes, and what compiled autograd most often changes: ca's
    graphs and graph breaks, each mode's compile time, time to the first step and peak memory.
    `idle`: modes that trained nothing (resumed at the job's end): none of their figures is the job's."""
    columns = [c for name, c in comparison.modes.items() if name in ("aot", "ca") and name not in idle and c.metrics is not None]
    if not columns:
        columns = [c for name, c in comparison.modes.items() if name not in idle and c.metrics is not None][-1:]
    bits = []
    ca = _ca_column(comparison) if "ca" not in idle else None
    if ca is not None and ca.metrics is not None:
        m = ca.metrics
        graphs, breaks = _other_ranks(comparison, ca, lambda r: r.ca_graphs), _other_ranks(comparison, ca, breaks_figure)
        # A process that ended before torch's counters were saved (a rank torchrun killed): its
        # breaks are the log's, one per compile and site, not torch's count: marked "~".
        estimated = breaks_figure(m).startswith("~") or any(str(v).startswith("~") for _, v in breaks)
        bits.append(f"{ca.name}: {m.ca_graphs} CA graph{'s' if m.ca_graphs != 1 else ''}{_on_other_ranks(comparison, graphs)}, "
                    f"{breaks_figure(m)} graph break{'s' if m.graph_breaks != 1 else ''}{_on_other_ranks(comparison, breaks)}"
                    + (f" + {m.unresumable_breaks} it could not resume after" if m.unresumable_breaks else "")
                    + (" (~: from the log, one per compile and site: the process ended before torch's counters were saved)"
                       if estimated else ""))
    built = {base_mode(name) for name in comparison.built_headers}
    compile_ = [f"{c.name} {c.compile_time_s:.1f} s" + (" (building Inductor's precompiled headers included)" if c.name in built else "")
                for c in columns if c.compile_time_s]
    if compile_:
        bits.append("compile " + ", ".join(compile_))
    first = [f"{c.name} {c.first_step_s:.1f} s" for c in columns if c.first_step_s is not None]
    if first:
        bits.append("first step " + ", ".join(first))
    memory = [f"{c.name} {_bytes(c.peak_device_memory_bytes or c.peak_rss_bytes)}" for c in columns if (c.peak_device_memory_bytes or c.peak_rss_bytes)]
    if memory:
        bits.append("peak memory " + ", ".join(memory))
    return "; ".join(bits)


# How many groups of other ranks the headline names before it counts the rest.
_RANK_GROUPS = 3


def _other_ranks(comparison: Comparison, column: Any, value: Callable[["ModeMetrics"], Hashable]) -> list[tuple[tuple[int, ...], Any]]:
    """A multi-rank run's other ranks whose `value` differs from the shown rank's, grouped by value,
    the lowest rank's group first: [((1,), 2)]. Empty for a single-process run."""
    scope = comparison.ranks
    name = scope.record_of(column) if scope is not None and column is not None else None
    if scope is None or name is None or scope.focus not in scope.metrics[name]:
        return []
    per_rank = scope.metrics[name]
    shown = value(per_rank[scope.focus])
    groups: dict[Any, list[int]] = {}
    for rank, metrics in per_rank.items():
        if rank != scope.focus and value(metrics) != shown:
            groups.setdefault(value(metrics), []).append(rank)
    return sorted(((tuple(ranks), v) for v, ranks in groups.items()), key=lambda group: group[0])


def load_words(s: Speedup, sides: str) -> str:
    """Why a speedup is not judged for the load: it differed between the two sides (a correction for
    it turns the verdict), or it was too heavy on a side for any correction to hold (both sides alike
    included: "differed" was not so)."""
    if s.load_too_heavy and not s.load_changes_verdict:
        return ("the machine's load was too heavy (a median step waited for a CPU 40% or more of its runnable time, "
                "beyond which the load can slow a step far more than the wait says)")
    return f"the machine's load differed between the {sides}"


def breaks_figure(m: "ModeMetrics") -> str:
    """A process's graph breaks: torch's count, or "~N" where torch's counters were not saved."""
    return str(m.graph_breaks) if m.graph_breaks_from_torch else f"~{m.graph_breaks}"


def _ranks_words(ranks: tuple[int, ...]) -> str:
    # Imported here, as in analysis.rank_scope: report.ranks imports this package (compare.closeness).
    from cagtool.report.ranks.analysis import rank_list

    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"


def _groups_text(groups: list[tuple[tuple[int, ...], str]], separator: str) -> str:
    shown = [f"{_ranks_words(ranks)}: {words}" for ranks, words in groups[:_RANK_GROUPS]]
    rest = sum(len(ranks) for ranks, _ in groups[_RANK_GROUPS:])
    return separator.join(shown) + (f"{separator}{rest} more rank{'s' if rest != 1 else ''} differ{'s' if rest == 1 else ''}" if rest else "")


def _on_other_ranks(comparison: Comparison, groups: list[tuple[tuple[int, ...], Any]]) -> str:
    """The words after a count the other ranks do not share, theirs beside it: " on rank 0 (rank 1: 2)"."""
    if not groups or comparison.ranks is None:
        return ""
    return f" on rank {comparison.ranks.focus} ({_groups_text([(ranks, str(v)) for ranks, v in groups], '; ')})"


def _recompile_counts(m: "ModeMetrics") -> tuple[int, int]:
    """CA and Dynamo recompiles as the headline counts them: every capture after the first is a CA
    recompile, as torch counts them (`captures`) and `recompiles` lists them, AccumulateGrad's
    .grad warm-up and another backward call's first graph too (said apart: the gate's
    `m.ca_recompiles` leaves them out)."""
    return m.ca_recompiles + m.ca_grad_warmup_misses + m.ca_other_call_captures, m.dynamo_recompiles


def _miss_kinds(m: "ModeMetrics") -> tuple[str, ...]:
    """What the CA recompiles were, from the counts alone (without the causes of --explain)."""
    kinds = []
    if m.ca_shape_recompiles:
        kinds.append("changed sizes")
    if m.ca_new_node_misses - m.ca_grad_warmup_misses > 0:
        kinds.append("new autograd nodes")
    return tuple(kinds)


def _other_ranks_recompiles(comparison: Comparison, column: Any) -> str:
    """The other ranks whose recompiles differ from the shown rank's, "rank 1: 1 CA recompile (new
    autograd nodes)"; "" where every rank recompiled alike (or the run has one process)."""
    groups = _other_ranks(comparison, column, lambda r: (*_recompile_counts(r), _miss_kinds(r)))
    said = []
    for ranks, (ca, dynamo, kinds) in groups:
        bits = []
        if ca:
            bits.append(f"{ca} CA recompile{'s' if ca != 1 else ''}" + (f" ({', '.join(kinds)})" if kinds else ""))
        if dynamo:
            bits.append(f"{dynamo} Dynamo recompile{'s' if dynamo != 1 else ''}")
        said.append((ranks, " and ".join(bits) + (" each" if bits and len(ranks) > 1 else "") if bits else "none"))
    return _groups_text(said, ", ")


# The modes whose ranks' problems the headline names first: compiled autograd's, then the others.
_RANK_MODE_ORDER = ("ca", "aot", "eager")


def _rank_phrases(comparison: Comparison) -> list[str]:
    """What the headline says of a multi-rank run's ranks beyond the one its figures are from:
    where the ranks part (report.ranks' divergence findings, the gate's ranks-agree check), then a
    rank that failed or left no record, or a process cagtool could not follow."""
    scope = comparison.ranks
    if scope is None:
        return []
    from cagtool.report.ranks.analysis import PROCESS_FAILED, PROCESS_NOT_FOLLOWED, RANK_FAILED, RANK_MISSING, RANK_STARTED_AGAIN

    order = {mode: i for i, mode in enumerate(_RANK_MODE_ORDER)}
    names = sorted(scope.analyses, key=lambda name: order.get(base_mode(name), len(order)))
    phrases = []
    diverging = [(name, scope.analyses[name].divergences) for name in names if scope.analyses[name].divergences]
    if diverging:
        name, found = diverging[0]
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        also = [other for other, _ in diverging[1:]]
        phrases.append(f"the ranks DIVERGE in {name}: {found[0].message}{more}" + (f"; the ranks of {' and '.join(also)} diverge too" if also else ""))
    problems: dict[str, list[str]] = {}  # the same problem in several modes: said once, for all
    for name in names:
        for finding in scope.analyses[name].findings:
            # The shown rank's own failure is its mode's, which the headline names already.
            # A later start of a rank (a second process group) that did not finish: no row of the ranks' table shows it.
            failed_again = finding.code == RANK_STARTED_AGAIN and any(
                start["status"] != "finished" or start["exit_code"] not in (0, None) for start in finding.data.get("starts", [])[1:])
            if finding.code in (RANK_MISSING, PROCESS_NOT_FOLLOWED, PROCESS_FAILED) or failed_again or (
                    finding.code == RANK_FAILED and scope.focus not in finding.ranks):
                problems.setdefault(finding.message, []).append(name)
    if problems:
        message, where = next(iter(problems.items()))
        phrases.append(f"in {and_words(where)}, {message}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
    return phrases


def _bytes(n: int | None) -> str:
    if not n:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def root_causes(explanation: "Explanation") -> list["Cause"]:
    """The causes a user acts on: not a consequence of another cause (`caused_by`: a backward
    captured again because its forward was recompiled is fixed with that forward, as is a
    compiled-autograd graph's code recompiled by the same global change), and not
    AccumulateGrad's one-time .grad warm-up (harmless; `gate --max-recompiles` does not count it)."""
    from cagtool.report.recompiles.explain import CAUSE_GRAD_DEFINED

    return [c for c in explanation.causes
            if c.caused_by is None and not (c.code == CAUSE_GRAD_DEFINED and c.count == 1 and c.facts.get("grad_warmup"))]


def cause_phrase(cause: "Cause") -> str:
    """One root cause in a few words, with its step and the user's line: "the size of `args[0]`
    (dim 0) changed 32->4 at step 3 (train.py:27)"."""
    from cagtool.report.recompiles.explain import (
        CAUSE_DYNAMO_CA_GRAPH,
        CAUSE_DYNAMO_FRAME,
        CAUSE_GRAD_DEFINED,
        CAUSE_HOOK,
        CAUSE_SHAPES,
        CAUSE_STRUCTURE,
        CAUSE_UNKNOWN,
        CTC_LENGTHS_NODE,
        GRAPH_REPEATS,
        GRAPH_SAME,
        batch_shrink,
        by_hand,
        guard_label,
        step_list,
    )
    from cagtool.torch_text import size_guard, specialised_size

    if cause.code in (CAUSE_DYNAMO_FRAME, CAUSE_DYNAMO_CA_GRAPH):
        guard = cause.facts.get("guard") or ""
        size = size_guard(guard)
        if size is not None and not (cause.facts.get("other_module") or cause.facts.get("other_module_by_guards") or cause.facts.get("other_instance")):
            name, dim, before, after = size
            what = f"the size of `{name}` (dim {dim}) changed {before}->{after}"
            if dim == 0 and cause.facts.get("after_training"):
                what = f"another batch after training (an evaluation's?): {what}"
            elif dim == 0 and after < before:
                # No DataLoader in the job (the record says so): a slice the script made, its last shorter.
                last = "the last slice of the data?" if by_hand(cause.facts) else "a DataLoader's last?"
                what = f"a smaller batch ({last}): {what}"
        elif (specialised := specialised_size(guard)) is not None:
            what = (f"a size of 0 or 1 in a dynamic dimension (`{specialised[0]}`, dim {specialised[1]}"
                    f"{': a batch of one row?' if specialised[1] == 0 else ''}), which Dynamo specialises")
        else:
            # The kind of guard in words (never torch's text cut mid-word).
            what = guard_label(cause.facts)
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("branch") is not None:
        what = "a data-dependent branch picked other ops for the backward"
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("random_draw") is not None:
        site, _ = cause.facts["random_draw"]
        what = f"the layers that ran changed, beside a random draw at {os.path.basename(site.file)}:{site.line} (LayerDrop?)"
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("rnn_site") is not None:
        site = cause.facts["rnn_site"]
        what = f"a recurrent layer's time steps followed the sequence length (the RNN at {os.path.basename(site.file)}:{site.line})"
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("rnn_cell") is not None:
        what = f"a recurrent layer's time steps followed the sequence length (an nn.{cause.facts['rnn_cell']}'s cells)"
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("other_backward_calls"):
        what = "another backward call of the step, captured once as its own graph"
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("new_backward_call") is not None and cause.count == 1:
        what = "a backward called from a new line, its graph's first capture"
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("function_class") is not None:
        found = cause.facts["function_class"]
        what = f"a custom autograd.Function was {'' if found.certain else 'likely '}another class at each call (`{found.name}`)"
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("graph_shape") == GRAPH_SAME:
        saved = cause.facts.get("saved_values") or []
        shrink = batch_shrink(saved)
        what = ("the lengths nn.CTCLoss saved as numbers changed (its CtcLossBackward0 node)"
                if shrink is None and any(name == CTC_LENGTHS_NODE for name, _, _ in saved) else
                "a number the backward saved changed") + (f" ({shrink[0]}->{shrink[1]}: a smaller batch, a DataLoader's last?)"
                                                          if shrink is not None else "")
    elif cause.code == CAUSE_STRUCTURE and cause.facts.get("graph_shape") == GRAPH_REPEATS:
        what = "the backward's size followed a loop's trip count"
    elif cause.code == CAUSE_UNKNOWN and cause.facts.get("after_failed_capture"):
        from cagtool.report.figures.metrics import RECAPTURED_AFTER_FAILURE

        what = f"a graph {RECAPTURED_AFTER_FAILURE}"
    elif cause.code == CAUSE_HOOK and cause.facts.get("named_hooks"):
        # The hooks by name (a lambda by its line, which is where it is registered, as a rule): the
        # backward's line, the cause's source, says nothing of them.
        hooks = cause.facts["named_hooks"]
        labels = [f"the lambda at {os.path.basename(h.file)}:{h.line}" if h.function.endswith("<lambda>") and h.file
                  else f"`{h.function.rsplit('.', 1)[-1]}`" for h in hooks[:3]]
        more = f", {len(hooks) - 3} more" if len(hooks) > 3 else ""
        added = [h for h in hooks if h.added]
        verb = "registered" if added else "removed"
        steps = cause.steps
        at = "" if not steps else f" on step {steps[0]}" if len(steps) == 1 else f" on steps {step_list(steps)}"
        return f"{'backward hooks' if len(hooks) > 1 else 'a backward hook'} {verb}{at} ({', '.join(labels)}{more})"
    elif cause.code == CAUSE_GRAD_DEFINED and cause.facts.get("grad_warmup_per_graph"):
        what = ".grad made at the first step, then kept (one warm-up capture per backward graph)"
    else:
        what = {
            CAUSE_SHAPES: "tensor sizes changed in the backward",
            CAUSE_STRUCTURE: "the backward's autograd graph changed",
            CAUSE_HOOK: "a backward hook was added or removed",
            CAUSE_GRAD_DEFINED: ".grad switched between None and a tensor",
        }.get(cause.code, "no reason recorded")
    if cause.place:
        # "between steps 5 and 6" (an evaluation's) reads on its own; "step 6" takes "at".
        what += f" {cause.place}" if cause.place.startswith(("between", "before")) else f" at {cause.place}"
    changed = cause.facts.get("state_changed_at")
    if changed is not None:
        # The line that changed the state (`torch.set_num_threads(1)`) is the cause; the compiled call is only where it showed.
        code = f"`{changed.code.strip()}` " if changed.code else ""
        what += f" ({code}at {os.path.basename(changed.file)}:{changed.line})"
    elif cause.source is not None:
        # A line that only ran into the change is named as what it is.
        # A compiled-autograd cause's line is the backward call that ran into it, however it was found.
        backward = cause.code in (CAUSE_SHAPES, CAUSE_STRUCTURE, CAUSE_HOOK, CAUSE_GRAD_DEFINED, CAUSE_DYNAMO_CA_GRAPH)
        label = _LINE_LABEL["backward_call" if backward else cause.source.how] if cause.source.how in _LINE_LABEL else ""
        line = f"{os.path.basename(cause.source.file)}:{cause.source.line}"
        calls = cause.facts.get("calls") or []
        if backward and len(calls) > 1 and all(file == cause.source.file for file, _ in calls):
            # One change met by each of several backward calls (a GAN's three a step): each named.
            label = "the backward calls at "
            line = f"{os.path.basename(cause.source.file)}:" + ", ".join(str(number) for _, number in calls)
        if label and cause.source.via:
            # A library made the call (HF Trainer): its line, and the user's that led there.
            what += f" ({label}{cause.source.via}, from {line})"
        else:
            what += f" ({label}{line})"
    return what


# What a cause's line is, where it is not the cause itself (a guard's line, a node's creation, a branch).
_LINE_LABEL = {"caller": "the compiled call at ", "backward_call": "the backward call at "}


def _alert_titles(explanation: "Explanation") -> list[str]:
    """The alerts' titles (a recompile storm, Dynamo's recompile limit hit), lower-cased."""
    from cagtool.report.recompiles.explain import alert_words

    titles = [alert_words(a, explanation.table.cwd).title for a in explanation.alerts]
    # Mid-sentence: "recompile storm: ...", but "Dynamo hit ..." keeps its name.
    return [t if t.startswith("Dynamo") else t[:1].lower() + t[1:] for t in titles]


def _checkpoint_split_phrase(comparison: Comparison, explanation: "Explanation | None") -> str:
    """Where graph breaks at a non-reentrant checkpoint's unpack hooks split the compiled-autograd
    graph's code into pieces, each a Dynamo compile of its own (a recompile or not): how many, and
    where the checkpoint must run for none (docs/torch-internals.md: 200 s of compile -> 7.5 s on
    an HF model with gradient checkpointing, its backend eager -> aot_eager)."""
    from cagtool.report.recompiles.explain import checkpoint_region_break, checkpoint_sequential_break, checkpoint_unpack_breaks

    column = _ca_column(comparison)
    if column is None or column.metrics is None or explanation is None:
        return ""
    pieces = column.metrics.ca_code_graphs.pieces
    if not pieces or not checkpoint_unpack_breaks(explanation.table):
        return ""
    split = (f"the CA graph's code split into {pieces + 1} pieces, each compiled by Dynamo, at the unpack hooks of non-reentrant "
             "checkpointing (torch.utils.checkpoint, gradient_checkpointing_enable())")
    sequential = checkpoint_sequential_break(explanation.table)
    if sequential is not None:
        return (f"{split}: checkpoint_sequential ({sequential}), which Dynamo does not trace, ran its checkpoints eagerly: "
                "a loop of checkpoint() calls traces")
    broken = checkpoint_region_break(explanation.table)
    if broken is not None:
        return (f"{split}: the checkpoint runs in compiled code, but Dynamo broke the graph inside it "
                f"({broken['where']}), so it ran as eager checkpointing does")
    return f"{split}: run the checkpoint in code compiled with a backend that runs AOTAutograd (aot_eager, inductor)"


def _root_numbers(explanation: "Explanation", numbers: list[int]) -> str:
    """Which of --explain's numbers the root causes are, and what its others are: "(#1, #2 and #4
    in --explain; #3 and #5 follow from them)"."""
    from cagtool.report.recompiles.explain import _and_list

    follow = [f"#{c.number}" for c in explanation.causes if c.number not in numbers and c.caused_by is not None]
    warmup = [f"#{c.number}" for c in explanation.causes if c.number not in numbers and c.caused_by is None]
    others = ([f"{_and_list(follow)} follow{'s' if len(follow) == 1 else ''} from {'it' if len(numbers) == 1 else 'them'}"] if follow else []) + \
        ([f"{_and_list(warmup)} {'is' if len(warmup) == 1 else 'are'} the .grad warm-up"] if warmup else [])
    return f" ({_and_list([f'#{n}' for n in numbers])} in --explain" + "".join(f"; {o}" for o in others) + ")"


# A fix that follows "it recompiles once" in --explain; first in a headline it says so itself.
_EVEN_THAT = re.compile(r"^To skip even that (recompile|compile)([,:]) ")


def _cause_advice(causes: list["Cause"], cwd: str) -> tuple[str, int, int | None]:
    """The first cause's fix that has something to do (a cause that says there is nothing to fix only
    where none has), with that cause's number of recompiles and its number; ("", 0, None) where no
    cause has a fix."""
    from cagtool.report.recompiles.explain import NOTHING_TO_FIX, cause_words

    fixes = [(_EVEN_THAT.sub(r"To skip this one-time \1\2 ", fix[0]), cause.count, cause.number)
             for cause in causes if (fix := cause_words(cause, cwd).fix)]
    return next((f for f in fixes if not f[0].startswith(NOTHING_TO_FIX)), fixes[0] if fixes else ("", 0, None))


def _measured_no_effect(verified: dict[str, Any] | None, mode: str, cause: int | None) -> list[str]:
    """The fixes `--verify` re-ran on this job for cause `cause` of `mode` and found to change
    nothing (verdict "no effect"): advice that repeats them is said to be measured so."""
    if not verified or cause is None or verified.get("mode") != mode:
        return []
    return [f["fix"] for f in verified.get("fixes") or () if f.get("verdict") == "no effect" and cause in (f.get("causes") or ())]


def _ca_column(comparison: Comparison) -> Any:
    """The mode compiled autograd ran in: `ca`, or the one mode of an imported TORCH_TRACE log."""
    from cagtool.record.schema import IMPORTED_MODE

    return comparison.modes.get("ca") or comparison.modes.get(IMPORTED_MODE)


def _recompile_phrase(comparison: Comparison, verified: dict[str, Any] | None, explanation: "Explanation | None" = None) -> str:
    column = _ca_column(comparison)
    if column is None or column.metrics is None:
        return ""
    m = column.metrics
    warmup = m.ca_grad_warmup_misses
    others = m.ca_other_call_captures  # another backward call's first graph: not counted by the gate either
    n = _recompile_counts(m)[0]
    # A multi-rank run: the other ranks that recompiled otherwise than the one shown, by rank.
    elsewhere = _other_ranks_recompiles(comparison, column)
    shown_rank = f"rank {comparison.ranks.focus}: " if elsewhere and comparison.ranks is not None else ""
    if n == 0 and m.dynamo_recompiles == 0:
        # A ca mode that failed early says nothing of recompiles; torch.compile's own (aot) may.
        aot = comparison.modes.get("aot")
        others = aot.metrics.dynamo_recompiles if aot is not None and aot.metrics is not None else 0
        ended = ended_words(column)  # as the record says: interrupted, killed, failed
        # Never "no recompiles" where another rank recompiled: those ranks lead, then the one shown.
        none = "none" if elsewhere else "no recompiles"
        said = f"{none} in ca before it {ended}" if ended else none
        if others:
            said += (f" (aot: {others} Dynamo recompile{'s' if others != 1 else ''})" if ended
                     else f" in ca (aot: {others} Dynamo recompile{'s' if others != 1 else ''})")
        return f"{elsewhere}; {shown_rank}{said}" if elsewhere else said
    roots = root_causes(explanation) if explanation is not None else None
    parts = []
    if n:
        # Without the causes, what the CA recompiles were (with them, the causes say it).
        kinds = list(_miss_kinds(m)) if roots is None else []
        if warmup:
            from cagtool.report.recompiles.explain import GRAD_WARMUP_WORDS, grad_warmup_row

            row = grad_warmup_row(explanation.table) if explanation is not None else None
            kinds = [", ".join(kinds)] if kinds else []
            which = row.compile_id if row is not None else "one"
            kinds.append(f"{which} is the .grad warm-up (captured once) and {others} {'is' if others == 1 else 'are'} another backward call's "
                         "first graph, neither counted by gate --max-recompiles" if others else f"{which} is {GRAD_WARMUP_WORDS}")
        elif others:
            kinds.append(f"{others} {'is' if others == 1 else 'are'} another backward call's first graph, not counted by gate --max-recompiles")
        if explanation is not None and explanation.table.ca_by_cagtool_only:
            # The job as written runs no compiled autograd (its flag set, backward outside any compiled function).
            kinds.insert(0, "compiled autograd on by cagtool's ca mode only: the job as written gets none")
        parts.append(f"{n} CA recompile{'s' if n != 1 else ''}" + (f" ({'; '.join(kinds)})" if kinds else ""))
    if m.dynamo_recompiles:
        parts.append(f"{m.dynamo_recompiles} Dynamo recompile{'s' if m.dynamo_recompiles != 1 else ''}")
    phrase = " and ".join(parts)
    if explanation is not None:
        from cagtool.report.recompiles.explain import spread_words

        # Recompiles on most steps that are no storm (one-off causes): when they came, not "storm".
        spread = spread_words(explanation)
        phrase += f" {spread}" if spread else ""
    if roots:
        # One change (a batch size) recompiles the forward and, through it, the backward: counted
        # once, as its root cause.
        shown = " and ".join(cause_phrase(c) for c in roots[:2])
        more = f" and {len(roots) - 2} more" if len(roots) > 2 else ""
        numbers = [c.number for c in roots]
        # --explain numbers every cause, the warm-up and the consequences drawn under their root
        # cause too: where the roots are not its first ones, which of its numbers they are.
        which = "" if numbers == list(range(1, len(roots) + 1)) else _root_numbers(explanation, numbers)  # type: ignore[arg-type]
        phrase += (f", {'all ' if len(roots) == 1 and not warmup and n + m.dynamo_recompiles > 1 else ''}from {len(roots)} "
                   f"cause{'s' if len(roots) != 1 else ''}{which}: {shown}{more}")
    if verified:
        good = [f["fix"] for f in verified.get("fixes", ()) if f.get("verdict") == "verified"]
        if good:
            phrase += f" (fix verified: {', '.join(good)})"
        elif verified.get("fixes"):
            phrase += " (no fix verified)"
    return f"{shown_rank}{phrase}; {elsewhere}" if elsewhere else phrase


# Which modes failed, against which finished, says whose failure it is: eager runs the job with
# torch.compile off, aot with it on and compiled autograd forced off, ca with both on.
COMPILE_FAILS = ("eager ran and aot failed: the job fails under torch.compile with compiled autograd off, so the failure is "
                 "torch.compile's, not compiled autograd's")
COMPILE_FAILS_FIX = ("the failure first: it is torch.compile's on this code, with or without compiled autograd (the aot "
                     "mode's exception; TORCHDYNAMO_VERBOSE=1 shows Dynamo's own stack)")
# The aot mode's exception raised outside torch's compiler: where the script used what torch.compile returned.
COMPILE_USE_FAILS_FIX = ("the failure first: the job fails where it uses what torch.compile returned, outside the compiler "
                         "(saving or loading the compiled module, reading its class or attributes: the aot mode's exception, "
                         "where `cagtool summary` shows it raised)")
CA_FAILS = "eager and aot ran and ca failed: the job fails only with compiled autograd on"
# Every mode failed alike, eager included: the job's own failure (as under python).
JOB_FAILS = "every mode failed alike, eager too: the job's own failure, not torch.compile's or compiled autograd's"
JOB_FAILS_FIX = "the failure first: it is the job's own, with or without compiling (the eager mode's exception)"
# ... where the job used what torch.compile returned, which the eager mode returns too.
COMPILE_USE_FAILS_EVERYWHERE = ("every mode failed alike where the job uses what torch.compile returned (its wrapper, "
                                "`_orig_mod`; the eager mode keeps it, as python does): the failure is the script's use of "
                                "torch.compile, not compiled autograd's")
CA_FAILS_BESIDE_AOT = CA_FAILS.replace("eager and aot ran", "aot ran", 1)  # a run recorded without eager
# What to do where compiled autograd fails on one op's backward that torch.compile alone runs.
# Known ops' other way of doing the same work, checked under compiled autograd on torch 2.13.
_CA_NODE_WORKAROUNDS = {
    # an LSTM tagger: packed, the capture fails (its backward reads the batch sizes' data, which
    # a fake tensor has none of); on the padded batch with the padding's targets ignored, it runs
    "PackPaddedSequenceBackward0": "run the RNN on the padded batch, the loss ignoring the padding (ignore_index, or a mask), "
                                   "instead of pack_padded_sequence",
}


def ca_fails_fix(node: str | None, outside: bool = False) -> str:
    """What to do first where only the ca mode failed: the failing op's backward where torch's
    error names it, its known way round, and how to keep compiled autograd off it meanwhile.
    `outside`: no frame of torch's compiler on the exception's traceback (_raised_outside), the
    job's own code raised it (what it does differs under compiled autograd: a hook it traces, say)."""
    if outside:
        return ("the failure first: the ca mode's exception was raised in the job's own code, not in torch's compiler (where, "
                "in `cagtool summary`): code that runs otherwise with compiled autograd on, such as a backward hook it traces")
    if node is None:
        return ("the failure first: compiled autograd fails on this job's backward, which torch.compile alone runs (the ca "
                "mode's exception, in `cagtool summary`); report it to PyTorch with that error, and keep compiled autograd off "
                "that backward meanwhile (torch._dynamo.compiled_autograd._disable() around it)")
    other = _CA_NODE_WORKAROUNDS.get(node)
    way = (f": {other}" if other else ": another op for the same work, or")
    return (f"the failure first: compiled autograd cannot run the backward of {node}, which torch.compile alone runs (the ca "
            f"mode's exception, in `cagtool summary`){way}{'; or' if other else ''} keep compiled autograd off that backward "
            "(torch._dynamo.compiled_autograd._disable() around it), and report it to PyTorch with the error")
# A failure for want of memory or disk is the machine's as much as the mode's: the compiled job may
# need more, or the machine had less when it ran; one run does not say which.
_SHORT_OF = (("memory", re.compile(r"MemoryError|OutOfMemoryError|out of memory|can't allocate memory|cannot allocate memory", re.I)),
             ("disk space", re.compile(r"no space left on device|disk quota exceeded", re.I)))


def _short_of(failures: tuple[Any, ...]) -> str | None:
    """What every one of a mode's failures ran out of ("memory", "disk space"), as their reasons say; None otherwise."""
    for what, pattern in _SHORT_OF:
        if all(pattern.search(f.reason) for f in failures):
            return what
    return None


def _raised_outside(failures: tuple[Any, ...]) -> bool:
    """Every failure's exception raised outside torch's compiler (no frame of it on the traceback
    kept: ModeFailure.in_compiler False; a failure with no traceback kept is not)."""
    return bool(failures) and all(f.in_compiler is False for f in failures)


def _failure_blame(comparison: Comparison) -> str:
    """Whose failure a failed mode's is, where the other modes ran to their end: COMPILE_FAILS where
    eager finished and aot failed, CA_FAILS where eager and aot finished and ca failed (CA_FAILS_BESIDE_AOT
    where the run recorded no eager: torch.compile alone ran it, compiled autograd is what differs); "" otherwise
    (a mode stopped, killed, not run, or eager failing too: the job's own failure). Under --repeat a
    mode failed where every repetition of it did (one that ran too is no failure of the job's under it).
    A mode that ran out of memory or disk is said so, whose failure left open."""
    hit = {base_mode(f.record) for f in comparison.failures}
    failed = {name for name, column in comparison.modes.items()
              if column.failures and all(f.status == "failed" and not f.not_run for f in column.failures)
              and len(column.failures) >= len(column.records)}
    ran = {name for name, column in comparison.modes.items() if name not in hit and column.metrics is not None}
    started = {name for name, column in comparison.modes.items() if not any(f.not_run for f in column.failures)}
    if len(started) > 1 and "eager" in started and failed == started:
        reasons = {f.reason for column in comparison.modes.values() for f in column.failures}
        if len(reasons) == 1:
            wrapper = any(f.compile_wrapper for f in comparison.modes["eager"].failures)
            return COMPILE_USE_FAILS_EVERYWHERE if wrapper else JOB_FAILS
    if "eager" in ran and "aot" in failed:
        blamed, words = "aot", COMPILE_FAILS
    elif "aot" in ran and "ca" in failed and "eager" not in hit:
        # torch.compile alone ran it: compiled autograd is what differs (eager not recorded, or ran)
        blamed, words = "ca", CA_FAILS if "eager" in ran else CA_FAILS_BESIDE_AOT
    else:
        return ""
    short = _short_of(comparison.modes[blamed].failures)
    if short is None:
        return words
    others = "eager ran" if blamed == "aot" else words.split(" and ca failed")[0]
    return (f"{others} and {blamed} ran out of {short}: whose failure that is, one run does not say (the compiled job may need "
            f"more {short} than eager, or the machine had less when it ran)")


def _gradients_differ(comparison: Comparison) -> str:
    """Where the losses and final norms agree but a mode's gradients differ from the reference's,
    parameter by parameter (grad_parity.py): the first such mode, its first step and how many
    parameters, and whether that step came after the losses left round-off; "" where none differs."""
    parity = comparison.grad_parity
    bad = parity.disagreements if parity is not None else []
    if not bad:
        return ""
    pair = bad[0]
    also = f" (and {' and '.join(p.record for p in bad[1:])})" if len(bad) > 1 else ""
    after = ""
    if pair.after_parting is not None:
        left = "left round-off" if pair.parted_by_round_off else "parted"
        after = f", after the losses {left} at step {pair.after_parting}: of parameters already apart"
    return (f"losses agree but gradients DIFFER: {pair.record}{also} from {pair.reference} first at step {pair.first_bad_step}, "
            f"in {len(pair.first_bad)} of {pair.params} parameters{after} (`cagtool compare` names them)")


def run_headline(comparison: Comparison, verified: dict[str, Any] | None = None, explanation: "Explanation | None" = None) -> Headline:
    """For one run: the ca speed against torch.compile alone (else against eager), its recompiles,
    whether the numerics agree, and any mode that failed. `explanation`: the ca mode's recompile
    causes (report.recompiles.explain), to name the root causes and what to do about them."""
    phrases, tones = [], []
    failed = [f.describe() for f in comparison.failures]
    if failed:
        phrases.append(f"mode {failed[0]}" + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""))
        # A mode the stopped run never started is no bad news about the job: said, not coloured.
        if not all(f.not_run for f in comparison.failures):
            tones.append(BAD)
    blame = _failure_blame(comparison)
    if blame:
        phrases.append(blame)
    # A multi-rank run's figures are one rank's: where its ranks part (what hangs jobs), or one
    # failed, is said before them.
    ranks = _rank_phrases(comparison)
    phrases.extend(ranks)
    tones.extend([BAD] * len(ranks))
    died: dict[tuple[str, ...], list[str]] = {}  # the same deaths in several modes: said once, for all
    for name, column in comparison.modes.items():
        if column.threads_died:
            died.setdefault(column.threads_died, []).append(name)
    for deaths, names in died.items():
        # The process finished (maybe exit 0) without that thread's work.
        phrases.append(f"in {and_words(names)}, {deaths[0]}" + (f" (+{len(deaths) - 1} more)" if len(deaths) > 1 else ""))
        tones.append(BAD)
    # Modes that trained nothing for resuming at the job's end from files an earlier mode wrote
    # (a checkpoint saved after the last epoch): nothing of them was measured, said before any figure.
    numerics = comparison.numerics
    idle = {record: files for record, files in numerics.resumed.items() if record in numerics.stepless}
    if idle and numerics.reference is not None:
        files = next(iter(idle.values()))
        phrases.append(f"{' and '.join(idle)} trained no step: {'it' if len(idle) == 1 else 'they'} resumed at the job's end from "
                       f"files an earlier mode wrote in its directory ({files.shown()}), so nothing of {'it' if len(idle) == 1 else 'them'} "
                       "was measured")
        tones.append(BAD)
    idle_modes = {base_mode(record) for record in idle}
    # A module.compile() that compiled nothing: the job asked for torch.compile and ran eagerly.
    skipped = _skipped_compile(comparison)
    if skipped is not None:
        first, where = skipped
        phrases.append(f"{first.words} in {' and '.join(where)}")
        tones.append(BAD)
    # What replicates first (counts, compile time, first step, memory), then the time verdict.
    recompiles = _recompile_phrase(comparison, verified, explanation) if "ca" not in idle_modes else ""
    if recompiles:
        phrases.append(recompiles)
        # A storm or a recompile limit costs every step: part of the verdict, not a detail.
        alerts = _alert_titles(explanation) if explanation is not None else []
        if alerts:
            phrases.extend(alerts)
            tones.append(BAD)
    cost = _cost_phrase(comparison, idle_modes)
    if cost:
        phrases.append(cost)
    split = _checkpoint_split_phrase(comparison, explanation)
    if split:
        phrases.append(split)
    by_label = {s.label: s for s in comparison.speedups}
    speed = by_label.get("ca/aot") or by_label.get("ca/eager") or by_label.get("aot/eager")
    ca = comparison.modes.get("ca")
    ca_metrics = ca.metrics if ca is not None else None
    if ca_metrics is not None and ca_metrics.ca_captured_nothing:
        # No backward of the ca mode went through compiled autograd: its speed is not compiled
        # autograd's, so no figure of it leads (torch.compile alone against eager may).
        phrases.append(f"compiled autograd captured none of the ca mode's {ca_metrics.backward_calls} backward calls")
        tones.append(BAD)
        speed = by_label.get("aot/eager")
    elif ca_metrics is not None and ca_metrics.ca_captured_part:
        # Its speed is the job's with some backward calls uncaptured: said beside the figure.
        phrases.append(f"compiled autograd was off for {ca_metrics.backward_calls_outside_ca} of the ca mode's "
                       f"{ca_metrics.backward_calls} backward calls (inside torch.func's transforms, or after torch._dynamo.reset())")
        tones.append(NEUTRAL)
    gave_up = None  # the graph break at which Dynamo ran the aot mode's compiled function eagerly, whole
    if speed is not None and {speed.mode, speed.baseline} & idle_modes:
        speed = None  # a mode of it trained nothing (said above): no figure, no "not timed"
    if speed is not None:
        differ = {base_mode(d.record) for d in numerics.disagreements} if numerics.reference is not None else set()
        if numerics.against_aot and all(d.agrees for d in numerics.against_aot):
            differ -= {"ca", "aot"} if {speed.mode, speed.baseline} == {"ca", "aot"} else set()  # the same numbers: the same job
        aot = comparison.modes.get("aot")
        # ... where it ran the job: a mode that trained no step compiled nothing for want of a forward
        aot_nothing = (aot is not None and aot.metrics is not None and aot.metrics.forward_graphs == 0 and aot.metrics.backward_graphs == 0
                       and (aot.metrics.steps > 0 or aot.metrics.backward_calls > 0))
        gave_up = _gave_up(aot) if aot_nothing and skipped is None else None
        text, tone = _speed_phrase(speed, trained_otherwise=bool(differ & {speed.mode, speed.baseline}), aot_compiled_nothing=aot_nothing,
                                  skipped=skipped[0] if skipped is not None else None, gave_up=gave_up)
        phrases.append(text)
        tones.append(tone)
    if numerics.reference is not None and len(comparison.modes) > 1:
        with_aot = sorted({d.record for d in numerics.against_aot})
        if numerics.disagreements and with_aot and all(d.agrees for d in numerics.against_aot) \
                and {base_mode(d.record) for d in numerics.disagreements} <= {"aot", "ca"}:
            # aot and ca differ from eager alike and agree with each other: what differs is the
            # compiled program (or eager's run of it), not compiled autograd.
            steps = sorted({d.jumped_at for d in numerics.disagreements if d.jumped_at is not None})
            at = f" from step {steps[0]}" if steps else ""
            phrases.append(f"numerics: {' and '.join(with_aot)} agree{'s' if len(with_aot) == 1 else ''} with aot; both differ from "
                           f"{numerics.reference}{at}: the compiled program computes otherwise than {numerics.reference}, not compiled autograd")
        elif numerics.disagreements:
            # Where the losses jumped apart from round-off: the step the change came at.
            jumps = [d for d in numerics.disagreements if d.jumped_at is not None]
            growing = [d for d in numerics.disagreements if d.parts_growing_from is not None]
            undecided = [d for d in numerics.against_aot if d.undecided_at is not None]
            if undecided and all(d.agrees or d.undecided_at is not None or d.quantity != LOSS for d in numerics.against_aot):
                phrases.append(f"numerics DISAGREE (the losses of {undecided[0].record} part from {undecided[0].reference}'s at step "
                               f"{undecided[0].undecided_at} after too few steps to tell compiled autograd from amplified round-off, "
                               "its gradients within round-off before: `cagtool compare` says why)")
            elif jumps:
                phrases.append(f"numerics DISAGREE (the losses of {jumps[0].record} jump apart at step {jumps[0].jumped_at})")
            elif growing:
                phrases.append(f"numerics DISAGREE (the losses of {growing[0].record} part growing from step "
                               f"{growing[0].parts_growing_from}, not at a jump: `cagtool compare` says how to rule out Inductor's rounding)")
            else:
                phrases.append("numerics DISAGREE")
            tones.append(BAD)
        elif numerics.drift_words:
            # Beyond the tolerance late, after agreeing to round-off with the gradients checked
            # early (compare/drift.py): said as drift, in the words compare and the report use.
            drifting = numerics.drift_words
            record, words = next(iter(drifting.items()))
            also = [r for r in drifting if r != record]
            phrases.append(f"numerics of {' and '.join([record, *also])} drift from {numerics.reference}: {words}")
        elif numerics.shared:
            # Hogwild workers on weights in shared memory: the OS's order decides their losses.
            phrases.append(f"numerics not comparable: {' and '.join(numerics.shared)} trained weights in shared memory that "
                           "other processes wrote too")
        elif numerics.resumed:
            # A job resuming from files an earlier mode wrote (workdir.py): the modes ran different
            # jobs (those that trained nothing for it are said above).
            resumed = {record: files for record, files in numerics.resumed.items() if record not in idle}
            if resumed:
                first = next(iter(resumed.values()))
                phrases.append(f"numerics not comparable: {' and '.join(resumed)} started from files an earlier mode wrote "
                               f"({first.shown()})")
        elif numerics.inputs_differ and numerics.against_aot:
            # Both compiled modes differ from eager from the first step, alike: ca against aot,
            # whose forward is compiled the same way, is what says whether compiled autograd matters.
            apart = sorted({d.record for d in numerics.against_aot if not d.agrees})
            aot = numerics.against_aot[0].reference
            # Random ops can part the losses after a first step that agrees (Numerics.parted_at).
            since = " from the first step" if all(r in numerics.first_losses for r in numerics.inputs_differ) else ""
            growing = [d for d in numerics.against_aot if not d.agrees and d.parts_growing_from is not None]
            if apart and growing:
                rule_out = ("says how to compare like with like: the two backwards' compilers differ" if numerics.compilers else
                            "says how to rule out Inductor's rounding")
                phrases.append(f"numerics DISAGREE: the losses of {growing[0].record} part from {aot}'s growing from step "
                               f"{growing[0].parts_growing_from}, not at a jump (both differ from {numerics.reference}{since}; "
                               f"`cagtool compare` {rule_out})")
                tones.append(BAD)
            elif apart:
                phrases.append(f"numerics DISAGREE: {' and '.join(apart)} against {aot} (both differ from {numerics.reference}{since})")
                tones.append(BAD)
            else:
                why = ("random ops in the compiled graphs draw other numbers: --parity compares them"
                       if numerics.random_ops_only else
                       "parted in the first step's backward: `cagtool compare` says why"
                       if numerics.backward_parted_only else
                       "the compiled forward computes differently, or inputs differ")
                phrases.append(f"numerics: ca agrees with {aot}; both differ from {numerics.reference}{since} ({why})")
        elif numerics.inputs_differ:
            # The first step's losses differ: other inputs, not a verdict on compiled autograd.
            phrases.append("numerics not comparable: random ops in the compiled graphs (--parity compares them)"
                           if numerics.random_ops_only else
                           "numerics not comparable: parted in the first step's backward (`cagtool compare` says why)"
                           if numerics.backward_parted_only else
                           "numerics not comparable: inputs differ (unseeded?)")
        elif numerics.stepless:
            # A mode that trained no step where the reference trained: its final norms agree in nothing.
            phrases.append(f"numerics not comparable: {' and '.join(numerics.stepless)} trained no step")
        elif not numerics.diffs:
            # Another mode failed before it recorded a value (or recorded none): nothing was compared.
            phrases.append(f"numerics not compared (only {numerics.reference} recorded values)")
        elif comparison.ranks is not None and any(a.diverge for a in comparison.ranks.analyses.values()):
            # The modes agree on the shown rank's records; its ranks do not (said above).
            phrases.append(f"numerics agree between the modes on rank {comparison.ranks.focus}")
        else:
            # A mode that failed before it recorded a value is in no pair: the agreement is the others'.
            compared = {d.record.split(".")[0] for d in numerics.diffs} | {numerics.reference}
            left = [m for m in comparison.modes if m not in compared]
            gradients = _gradients_differ(comparison)
            if gradients:
                # Losses and final norms agree, the per-parameter check does not (swapped gradients
                # cancel in every norm): "numerics agree" alone would hide what `compare` lists.
                phrases.append(gradients)
                tones.append(BAD)
            elif left:
                phrases.append(f"numerics agree between {' and '.join(m for m in comparison.modes if m in compared)} "
                               f"({' and '.join(left)} not compared: no values recorded)")
            else:
                phrases.append("numerics agree")
    if not phrases:
        if _ca_column(comparison) is not None and len(comparison.modes) == 1 and "ca" not in comparison.modes:
            return Headline("imported log: no compiled-autograd graph or compile in it", NEUTRAL)
        return Headline("nothing to compare: record more than one mode, or more steps", NEUTRAL)
    tone = BAD if BAD in tones else GOOD if GOOD in tones else NEUTRAL
    advice, recompiles, cause = _cause_advice(root_causes(explanation), explanation.table.cwd) if explanation is not None else ("", 0, None)
    if advice and explanation is not None and (measured := _measured_no_effect(verified, explanation.table.mode, cause)):
        # General advice for a cause whose own fixes were re-run on this job and changed nothing:
        # the measurement is said beside it, never left out (the advice may still be what helps).
        advice += (f" (--verify re-ran this job with {', '.join(measured)} for it: no effect, "
                   f"the recompiles stayed; see cagtool recompiles --verify)")
    if split:
        from cagtool.report.recompiles.explain import NOTHING_TO_FIX, checkpoint_fix

        # The pieces are compiled on every run; a cause of fewer recompiles than that costs less.
        pieces = _ca_column(comparison).metrics.ca_code_graphs.pieces  # the column the split was read from
        if not advice or advice.startswith(NOTHING_TO_FIX) or recompiles < pieces:
            advice = checkpoint_fix(explanation.table)
    from cagtool.report.recompiles.verification import best_fix, fix_in_job

    fix = best_fix(verified)
    if fix is not None and advice:
        # A fix measured on this very job beats general advice, and of those the one the
        # measurements support most (the fewest recompiles left), with how to apply it in the job.
        in_job = fix_in_job(fix)
        how = " ".join(f"cagtool run {flag}" for flag in fix.get("run_flags") or ())  # the env var is in `in_job` already
        base = (verified or {}).get("baseline") or {}
        before = [a + b for a, b in zip(base.get("ca_recompiles") or (), base.get("dynamo_recompiles") or ()) if a is not None and b is not None]
        after = [a + b for a, b in zip((fix.get("measured") or {}).get("ca_recompiles") or (), (fix.get("measured") or {}).get("dynamo_recompiles") or ())
                 if a is not None and b is not None]
        measured = f"recompiles {max(before)} -> {max(after)}" if before and after else ""
        # each side's compile time (the median of its repetitions), read from a document verify sealed
        compiled = [side.get("compile_time_s") for side in (base, fix.get("measured") or {})]
        if measured and all(isinstance(c, (int, float)) and not isinstance(c, bool) and c >= 0 for c in compiled):
            measured += f", compile {compiled[0]:.1f} s -> {compiled[1]:.1f} s"
        measured = f" ({measured})" if measured else ""
        advice = (f"apply fix {fix['fix']}" + (f", {fix['title']}" if fix.get("title") else "")
                  + (f": {in_job}" if in_job else "") + (f" [cagtool: {how}]" if how and not fix.get("patch") else "")
                  + f"; verified by re-running this job{measured}")
        # A fix whose numerics differ by design (drop-last trains on fewer samples) says so beside it.
        caveat = next((r for r in fix.get("reasons") or () if r.startswith("numerics not compared:")), None)
        if caveat:
            advice += f"; {caveat}"
    details = "recompiles"
    first = None  # whose failure it is, said first
    if blame == COMPILE_FAILS:  # the job does not run under torch.compile
        first = COMPILE_USE_FAILS_FIX if _raised_outside(comparison.modes["aot"].failures) else COMPILE_FAILS_FIX
    elif blame == COMPILE_USE_FAILS_EVERYWHERE:
        first = COMPILE_USE_FAILS_FIX
    elif blame == JOB_FAILS:
        first = JOB_FAILS_FIX
    elif blame in (CA_FAILS, CA_FAILS_BESIDE_AOT):  # only compiled autograd fails: what it fails on
        column = comparison.modes["ca"]
        failures = column.failures
        nodes = {f.ca_node for f in failures}
        first = ca_fails_fix(nodes.pop() if len(nodes) == 1 else None, _raised_outside(failures))
        breaks = column.metrics.graph_break_sites if column.metrics is not None else ()
        if sparse_in_ca_graph(any(f.in_ca_graph for f in failures), (site.reason for site in breaks)):
            first = f"the failure first: {SPARSE_IN_CA_GRAPH}"
    if idle and not advice:
        first = ISOLATE_WORKDIR_FIX
    if first is not None:
        advice, details = (f"{first}; then {advice}", details) if advice else (first, "summary")
    from cagtool.report.recompiles.explain import NOTHING_TO_FIX

    if gave_up is not None and (not advice or advice.startswith(NOTHING_TO_FIX)):  # nothing compiled: that first
        advice, details = _gave_up_fix(gave_up), "summary"
    if skipped is not None:  # before anything else: the module was never compiled
        fix = f"compile it: {skipped[0].fix}"
        if not advice or advice.startswith(NOTHING_TO_FIX):  # "then Nothing to fix: ..." is no next step
            return Headline("; ".join(phrases) + ".", tone, fix, details="summary")
        advice = f"{fix}; then {advice}"
    return Headline("; ".join(phrases) + ".", tone, advice, details=details)


def _gave_up(aot: "ModeColumn | None") -> "GraphBreakSite | None":
    """The graph break at which Dynamo gave up on a compiled function whole and ran it eagerly
    ("Skipping the function and falling back to eager": an RNN in a compiled forward), of an aot
    mode that compiled nothing; None otherwise."""
    metrics = aot.metrics if aot is not None else None
    return next((site for site in metrics.graph_break_sites if site.fell_back), None) if metrics is not None else None


def _site_place(site: "GraphBreakSite") -> str:
    from cagtool.report.figures.metrics import place_words

    return place_words(((site.file, site.line),))


def _gave_up_fix(site: "GraphBreakSite") -> str:
    """What to do where torch.compile compiled nothing for the break at `site`: torch's hint, and
    what cagtool found of following it (report.known_failures)."""
    hint = hint_advice(site.hints)
    caveat = hint_caveat(hint) if hint is not None else None
    hint = hint[:1].lower() + hint[1:] if hint is not None else None  # inside a sentence: `set torch._dynamo...`
    said = (f"torch's hint, to {hint.rstrip('.')}: {caveat}" if hint is not None and caveat is not None
            else f"torch's hint: {hint}" if hint is not None
            else "move what Dynamo cannot trace out of the compiled function and compile the code around it")
    return (f"torch.compile compiled nothing: Dynamo ran the function holding {_site_place(site)} eagerly, whole "
            f"({site.gb_type or site.reason}); {said}")


def _skipped_compile(comparison: Comparison) -> "tuple[SkippedCompile, list[str]] | None":
    """The first compile call that compiled nothing, and the modes whose records say so: the
    compiling ones (the eager mode runs eagerly by design), eager only where it is the only one."""
    found: "SkippedCompile | None" = None
    where: list[str] = []
    for name, column in comparison.modes.items():
        if column.skipped_compiles:
            found = found or column.skipped_compiles[0]
            where.append(name)
    compiling = [name for name in where if base_mode(name) != "eager"]
    return (found, compiling or where) if found is not None else None


def change_headline(rc: RunComparison) -> Headline:
    """For A/B: per mode, what B changed: recompiles, step time, compile time."""
    phrases, tones = [], []
    for change in rc.changes:
        if change.before is None or change.after is None or change.before.metrics is None or change.after.metrics is None:
            continue
        a, b = change.before, change.after
        bits = []
        d = b.metrics.recompiles - a.metrics.recompiles
        if d:
            bits.append(f"{abs(d)} {'fewer' if d < 0 else 'more'} recompile{'s' if abs(d) != 1 else ''}")
            tones.append(GOOD if d < 0 else BAD)
        s = change.speedup
        if s is not None and s.ratio is not None:
            # The before/after table's step times are wall time: a verdict on CPU time says so.
            basis = (", in CPU time per step" if s.on_cpu else "") + ("" if s.measured else ", run-to-run noise assumed")
            if s.verdict in ("faster", "slower"):
                bits.append(f"step time {s.verdict} ({ratio_text(s.ratio)} the speed, 90% CI {ratio_text(s.low)}-{ratio_text(s.high)}{basis})")  # type: ignore[arg-type]
                tones.append(GOOD if s.verdict == "faster" else BAD)
            elif s.verdict == NO_CHANGE:
                bits.append(f"step time: no change larger than {EFFECT:.0%}")
            elif s.verdict == INCONCLUSIVE and s.interval is not None and s.interval.stretched:
                odd = s.interval.outliers[0]
                if odd.side == "block":
                    bits.append(f"step time {ratio_text(s.ratio)} the speed, inconclusive{basis}: the ratio of repetition {odd.process} was "
                                f"{ratio_text(odd.factor)} the others', its processes ran under other conditions (rerun)")
                else:
                    side = (s.baseline if odd.side == "top" else s.mode).split(" ")[0]
                    bits.append(f"step time {ratio_text(s.ratio)} the speed, inconclusive{basis}: one process of {side} took "
                                f"{ratio_text(odd.factor)} the others' time, it ran under other conditions (rerun)")
            elif s.verdict == INCONCLUSIVE:
                needed = s.blocks_needed
                bits.append(f"step time {ratio_text(s.ratio)} the speed, inconclusive{basis}" + (f" (record each run with --repeat {needed})" if needed else ""))
            elif s.verdict == LOAD_DIFFERED:
                bits.append(f"step time {ratio_text(s.ratio)} the speed, not judged: {load_words(s, 'runs')}")
        if a.compile_time_s and b.compile_time_s:
            pct = 100.0 * (b.compile_time_s / a.compile_time_s - 1.0)
            if abs(pct) >= 1:
                # One compile a process, under whatever load each run met: a figure, not a verdict
                # (two runs of one job read 30% apart); the gate's compile check judges it.
                bits.append(f"compile {a.compile_time_s:.1f} s -> {b.compile_time_s:.1f} s (a figure, not a verdict: "
                            "gate --max-compile-regression judges it against the load)")
        if bits:
            phrases.append(f"B {change.mode}: {', '.join(bits)}")
    if rc.problems:
        phrases.append(rc.problems[0])
        tones.append(BAD)
    if not phrases:
        return Headline("B: no change in recompiles, step time or compile time.", NEUTRAL)
    tone = BAD if BAD in tones else GOOD if GOOD in tones else NEUTRAL
    return Headline("; ".join(phrases) + ".", tone)


def ca_explanation(comparison: Comparison, run: Any) -> "Explanation | None":
    """The recompile causes of the ca record the headline's counts come from (its first
    repetition with a record), from `run` (a RunRecord, the one `comparison` was made of)."""
    column = _ca_column(comparison)
    if column is None or column.metrics is None:
        return None
    from cagtool.report.recompiles.explain import explain
    from cagtool.report.recompiles.table import recompile_table

    record = next((run.modes[name] for name in column.records if name in run.modes), None)
    return explain(recompile_table(record)) if record is not None else None

