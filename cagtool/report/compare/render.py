"""Renderers for mode comparisons (`compare.py`): rich table, JSON, CSV and Markdown.

`render_comparison(comparison, fmt, console)` is the one entry point: `cagtool compare` and the end
of a multi-mode `cagtool run` both call it. The table and Markdown are
drawn from the same grids (`mode_grid`, `speedup_grid`), so the two never say different things;
JSON and CSV live in `export.py`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from cagtool.report.text.words import and_words
from cagtool.report.text.markdown import md_text
from cagtool.report.compare.headline import Headline, change_headline, run_headline
from cagtool.report.text.safe_text import safe_line, safe_text
from cagtool.report.figures.intervals import ratio_text
from cagtool.report.figures.metrics import dynamo_graph_count, interruption_words
from cagtool.report.figures.pooled import MIN_STEADY_STEPS, TOO_FEW_STEPS, base_mode
from cagtool.report.compare.analysis import (
    ISOLATE_WORKDIR_FIX,
    LOSS,
    PARAMS_UPDATED,
    AnyComparison,
    Comparison,
    ModeColumn,
    Numerics,
    NumericsDiff,
    RunComparison,
    Speedup,
    format_rel,
    mode_fields,
)
from cagtool.report.compare.grad_parity import random_ops_owners
from cagtool.report.compare.export import (
    comparison_csv,
    comparison_to_json,
)


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0 s"
    return f"{value:.3f} s" if value < 10 else f"{value:.1f} s"


def millis(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.3f} ms"


def mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


def count(value: int | None, detail: str = "") -> str:
    """A count, with its breakdown in brackets when it has one (`3 (AOT)`); "-" when unknown."""
    if value is None:
        return "-"
    return f"{value} ({detail})" if detail else str(value)


def ratio(value: float | None) -> str:
    return "-" if value is None else ratio_text(value)


def signed(value: float | int | None, fmt: Callable[[Any], str]) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "="
    text = fmt(abs(value))
    return f"+{text}" if value > 0 else f"-{text}"


def steps_list(steps: list[int], limit: int = 6) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (", ..." if len(steps) > limit else "")


def status_cell(column: ModeColumn) -> str:
    if column.ok and column.threads_died:  # the process finished without a thread's work
        return "THREAD DIED"
    if column.ok:
        return "ok" if len(column.records) == 1 else f"ok ({len(column.records)} runs)"
    first = column.failures[0]
    code = f", exit {first.exit_code}" if first.exit_code not in (None, 0) else ""
    extra = f" ({len(column.failures)} of {len(column.records)} runs)" if len(column.records) > 1 else ""
    if first.not_run:  # the run was stopped before its turn: not a problem cell
        return f"not run{extra}"
    return f"{first.status.upper()}{code}{extra}"


def backward_cell(column: ModeColumn) -> str:
    m = column.metrics
    if m is None:
        return "-"
    kind = "CA" if m.ca_graphs or column.name == "ca" else "AOT"
    return count(m.backward_graphs, kind if m.backward_graphs else "")


def dynamo_graphs_cell(column: ModeColumn) -> str:
    """torch's count of Dynamo's graphs (unique_graphs), with its parts where the forward and backward
    rows do not make it: `64 (2 forward, 2 CA, 60 CA pieces by graph breaks)`."""
    m = column.metrics
    if m is None:
        return "-"
    counted = dynamo_graph_count(m)
    if counted is None:
        return count(m.unique_graphs)
    labels = {"forward": "forward", "ddp_hook": "DDP hook", "ca": "CA", "ca_pieces": "CA pieces by graph breaks",
              "ca_recompiled": "CA recompiled", "unattributed": "not attributed"}
    parts = [f"{n} {labels[part]}" if n >= 0 else f"record: {-n} more" for part, n in counted.parts()]
    return f"{counted.total}{'' if counted.from_torch else ' in the record'} ({', '.join(parts)})"


def recompiles_cell(column: ModeColumn) -> str:
    m = column.metrics
    if m is None:
        return "-"
    one_time = m.ca_grad_warmup_misses + m.ca_other_call_captures  # captured once each, not counted (CAMisses)
    warmup = f", +{one_time} CA one-time capture{'s' if one_time != 1 else ''} not counted" if one_time else ""
    detail = f"{m.dynamo_recompiles} Dynamo, {m.ca_recompiles} CA{warmup}" if m.recompiles or warmup else ""
    return count(m.recompiles, detail)


def steady_cell(column: ModeColumn) -> str:
    st = column.step_time
    if column.metrics is None:
        return "-"
    return count(st.count, f"{len(st.excluded)} excluded" if st.excluded else "")


def spread_cell(column: ModeColumn) -> str:
    st = column.step_time
    if st.p10_s is None or st.p90_s is None:
        return "-"
    return f"{st.p10_s * 1000:.3f} - {st.p90_s * 1000:.3f} ms"


def diffs_cell(diffs: list[NumericsDiff] | tuple[NumericsDiff, ...]) -> str:
    """The largest relative difference of some numerics diffs, flagged when any disagrees."""
    worst = worst_diff(list(diffs))
    if any(d.inputs_differ for d in diffs):
        return "inputs differ (unseeded?)"
    flag = "" if all(d.agrees for d in diffs) else " drifts" if all(d.agrees or d.drift for d in diffs) else " DISAGREES"
    return f"{format_rel(worst.max_rel_diff if worst else None)}{flag}"


def numerics_cell(numerics: Numerics, column: ModeColumn) -> str:
    if numerics.reference is None:
        return "-"
    if any(r in numerics.shared for r in column.records):
        return "not compared (shared weights)"
    if any(r == numerics.reference for r in column.records[:1]):
        return "reference"
    mine = [d for d in numerics.diffs if d.record in column.records]
    if not mine:
        return "-"
    if any(r in numerics.resumed for r in column.records):
        return "resumed from files"
    if any(d.inputs_differ for d in mine) and any(r in numerics.random_ops for r in column.records):
        return "random ops differ (--parity)"
    if any(d.inputs_differ for d in mine) and any(r in numerics.first_backward_agrees for r in column.records):
        return "parted in step 0's backward"
    return diffs_cell(mine)


def worst_diff(diffs: list[NumericsDiff]) -> NumericsDiff | None:
    with_values = [d for d in diffs if d.max_rel_diff is not None]
    return max(with_values, key=lambda d: d.max_rel_diff or 0.0) if with_values else None


def interval_bounded(s: Speedup) -> bool:
    """Whether the speedup has an interval to show."""
    return s.low is not None and s.high is not None and math.isfinite(s.high) and s.low > 0


def speedup_range(s: Speedup) -> str:
    if s.low is None or s.high is None:
        return "-"
    if not interval_bounded(s):
        return "unbounded"
    return f"{ratio_text(s.low).rstrip('x')} - {ratio_text(s.high)}"


SPEEDUP_FOOTNOTE = (
    "speedup = baseline median step time / mode median step time (> 1: faster; CPU time per step where both modes' steps "
    "were CPU-bound on one thread), with its 90% confidence interval: each process is one piece of evidence (the blocks of --repeat K, "
    "paired, from K = 5; below that only a change beyond the assumed run-to-run noise is called). faster / slower: clear of "
    "1.0; no change: within +/-5%; inconclusive: neither (docs/ci.md)."
)


# A cell that starts or ends so is something the user must not miss.
_PROBLEM_PREFIXES = ("FAILED", "TIMEOUT", "INTERRUPTED", "RUNNING", "MISSING")
_PROBLEM_SUFFIX = "DISAGREES"


@dataclass
class Grid:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    sections: list[int] = field(default_factory=list)  # row indexes that start a new section
    problem_cells: set[tuple[int, int]] = field(default_factory=set)  # (row, column) to highlight

    def mark_problems(self, first_column: int) -> None:
        """Highlight the failed statuses and numerics disagreements from `first_column` on."""
        for r, row in enumerate(self.rows):
            for k, value in enumerate(row[first_column:], start=first_column):
                if value.startswith(_PROBLEM_PREFIXES) or value.endswith(_PROBLEM_SUFFIX):
                    self.problem_cells.add((r, k))


def left_aligned(index: int, name: str) -> bool:
    """Labels and words align left, figures right."""
    return index == 0 or name in ("", "mode", "note", "verdict")


_PHASES = (("dynamo", "  Dynamo"), ("aot", "  AOTAutograd"), ("inductor", "  Inductor"), ("ca_capture", "  CA capture"),
           ("backward", "  AOT backward at 1st call"))


# (label, cell) for the per-mode rows of the one-run view.
_MODE_ROWS: tuple[tuple[str, Callable[[ModeColumn], str]], ...] = (
    ("status", status_cell),
    ("forward graphs", lambda c: count(c.metrics.forward_graphs if c.metrics else None)),
    ("backward graphs", backward_cell),
    ("Dynamo graphs (torch)", dynamo_graphs_cell),
    ("graph breaks", lambda c: count(c.metrics.graph_breaks if c.metrics else None)
     + (f" (+{c.metrics.unresumable_breaks} unresumable)" if c.metrics and c.metrics.unresumable_breaks else "")),
    ("recompiles", recompiles_cell),
    ("compile time", lambda c: seconds(c.compile_time_s)),
    *(
        (label, (lambda key: lambda c: seconds(c.compile_phases_s.get(key)) if c.metrics else "-")(key))
        for key, label in _PHASES
    ),
    ("time to first step", lambda c: seconds(c.first_step_s)),
    ("step time (median)", lambda c: millis(c.step_time.median_s)),
    ("step time p10 - p90", spread_cell),
    ("steady steps", steady_cell),
    ("peak RSS", lambda c: mib(c.peak_rss_bytes)),
    ("peak CUDA memory", lambda c: mib(c.peak_device_memory_bytes)),
)


_OPTIONAL_ROWS = frozenset({"peak CUDA memory"})  # shown only when some mode has a figure
# Shown only when some mode spent time in it (a backward compiled at its first call: a backend that compiles one).
_WHEN_TIMED = frozenset({"  AOT backward at 1st call"})
# Shown only where the forward and backward rows do not make torch's count of some mode's graphs.
_WHEN_GRAPHS_SPLIT = frozenset({"Dynamo graphs (torch)"})


def mode_grid(comparison: Comparison) -> Grid:
    columns = list(comparison.modes.values())
    grid = Grid(f"Modes side by side: {comparison.target}", ["", *[c.name for c in columns]])
    for label, cell in _MODE_ROWS:
        cells = [cell(c) for c in columns]
        if label in _OPTIONAL_ROWS and all(text == "-" for text in cells):
            continue  # e.g. no CUDA memory on a CPU job
        if label in _WHEN_TIMED and not any(c.metrics and c.compile_phases_s.get("backward") for c in columns):
            continue
        if label in _WHEN_GRAPHS_SPLIT and not any(c.metrics and dynamo_graph_count(c.metrics) for c in columns):
            continue
        grid.rows.append([label, *cells])
    reference = comparison.numerics.reference
    label = f"numerics vs {reference} (max rel diff)" if reference else "numerics"
    grid.rows.append([label, *[numerics_cell(comparison.numerics, c) for c in columns]])
    grid.mark_problems(first_column=1)
    return grid


def _speedup_row(s: Speedup) -> list[str]:
    note = s.evidence()
    if s.repetition_ratios:
        reps = ", ".join(ratio_text(r) for r in s.repetition_ratios)
        note = f"per block: {reps}" + (f"; {note}" if note else "")
    if s.note:
        note = f"{note}; {s.note}" if note else s.note
    return [s.label, ratio(s.ratio), speedup_range(s), s.verdict, note]


def speedup_grid(speedups: tuple[Speedup, ...] | list[Speedup], title: str = "Speedups (steady-state step time)") -> Grid:
    grid = Grid(title, ["", "speedup", "90% CI", "verdict", "note"])
    for s in speedups:
        grid.rows.append(_speedup_row(s))
    return grid


# What the numerics lines of a mode whose compiled graphs draw other random numbers end with.
_RANDOM_OPS_TAIL = (", so their numerics say nothing about compiled autograd; rerun with cagtool run --parity "
                    "(torch._inductor.config.fallback_random) to compare them")


def _random_first_steps(numerics: Numerics) -> list[str]:
    """The records whose first-step losses differ from the reference's for random ops alike (the
    same ops, the same reference loss), said in one line: two or more, else none."""
    drawn = [r for r in numerics.inputs_differ if r not in numerics.resumed and r in numerics.first_losses
             and r not in numerics.first_backward_agrees and random_ops_owners([r]) in numerics.random_ops.get(r, "")]
    reasons = {numerics.random_ops[r].replace(random_ops_owners([r]), " ") for r in drawn}
    references = {numerics.first_losses[r][1] for r in drawn}
    return drawn if len(drawn) > 1 and len(reasons) == 1 and len(references) == 1 else []


def numerics_lines(numerics: Numerics) -> list[tuple[str, bool]]:
    """(line, is_problem)."""
    tol = numerics.tolerance
    if numerics.reference is None:
        return [(f"Numerics: {n}", False) for n in numerics.notes] or [("Numerics: nothing to compare", False)]
    lines: list[tuple[str, bool]] = []
    if numerics.set_aside:
        each = "; ".join(f"{record}: {files.shown()}" for record, files in numerics.set_aside.items())
        lines.append((f"Working directory: every mode started from it as the first found it (--isolate-workdir): what each "
                      f"created there was moved into the run's workdir/<mode>/ ({each})", False))
    worst = worst_diff(list(numerics.diffs))
    tolerance = f"rtol {tol.rtol:g}, atol {tol.atol:g}"
    if numerics.shared:
        lines.append((f"Numerics: not compared: {and_words(list(numerics.shared))} trained parameters in shared memory that "
                      f"other processes of the job wrote too (Hogwild: `model.share_memory()` and torch.multiprocessing), so "
                      "each process's losses depend on the order the OS ran them, which differs from run to run; two runs "
                      "of one mode differ as much. To compare the modes' numerics, record the job with one training process "
                      "(its weights then written by it alone)", False))
    elif not numerics.diffs:
        lines.append((f"Numerics: only {numerics.reference} recorded values; nothing to compare", False))
    elif numerics.agree:
        # A record that trained no step (it resumed at the job's end, or did not train in that mode)
        # agrees in nothing: its final norms are the ones it loaded or started with; nor does one
        # that resumed from an earlier mode's files (its losses may not move: pytorch/examples'
        # ddp-tutorial-series computes a zero loss).
        left_out = set(numerics.stepless) | set(numerics.resumed)
        kept = [d for d in numerics.diffs if d.record not in left_out]
        if kept:
            worst = worst_diff(kept)
            where = _where(worst) if worst and worst.max_rel_diff else ""
            whose = f" of {and_words(d.record for d in kept)}" if left_out & {d.record for d in numerics.diffs} else ""
            largest = worst.max_rel_diff if worst is not None else None
            lines.append(
                (f"Numerics: {_compared_words(kept)}{whose} agree with {numerics.reference} within {tolerance}; "
                 f"largest relative difference {format_rel(largest)}{where}", False)
            )
        lines.extend(_resumed_lines(numerics))
        for record in numerics.stepless:
            if record not in numerics.resumed:
                lines.append((f"Numerics: {record} ran to its end without a training step (no loss) where "
                              f"{numerics.reference} trained: nothing of its training to compare, and its final norms are "
                              "whatever it loaded or started with", True))
    else:
        if numerics.disagreements:
            lines.append((f"Numerics DISAGREE with {numerics.reference} ({tolerance}):", True))
            for d in numerics.disagreements:
                lines.append((diff_line(d), True))
            compared = {base_mode(d.record) for d in numerics.diffs}
            if base_mode(numerics.reference) == "eager" and "aot" not in compared and "ca" in {base_mode(d.record) for d in numerics.disagreements}:
                # No aot mode to tell compiled autograd's difference from the compiled program's.
                lines.append(("  note: eager runs the script with Dynamo disabled (TORCHDYNAMO_DISABLE=1), and a library that "
                              "behaves otherwise under it differs there with nothing compiled (HF GPT-2 with gradient "
                              "checkpointing: its dropout); record the aot mode too (the default modes): ca against aot, "
                              "compiled alike, tells compiled autograd's difference apart", False))
        for record, words in numerics.drift_words.items():
            lines.append((f"Numerics: {record} drifts from {numerics.reference} beyond {tolerance}: {words}", False))
            for d in numerics.drifted:
                if d.record == record:
                    lines.append((diff_line(d), False))
        resumed = numerics.resumed
        lines.extend(_resumed_lines(numerics))
        drawn = _random_first_steps(numerics)
        if drawn:
            values = {numerics.first_losses[r][0] for r in drawn}
            reference_value = numerics.first_losses[drawn[0]][1]
            quoted = (f"{next(iter(values))!r} in each" if len(values) == 1 else
                      ", ".join(f"{r} {numerics.first_losses[r][0]!r}" for r in drawn))
            reason = numerics.random_ops[drawn[0]].replace(random_ops_owners(drawn[:1]), random_ops_owners(drawn))
            owners = and_words(f"{r}'s" for r in drawn)
            lines.append((f"Numerics: not comparable: {owners} first-step losses already "
                          f"differ from {numerics.reference}'s ({quoted} vs {reference_value!r}): {reason}{_RANDOM_OPS_TAIL}", False))
        for record in numerics.inputs_differ:
            if record in resumed or record in drawn:
                continue
            if record not in numerics.first_losses:  # random ops, the losses parted later
                parted = numerics.parted_at.get(record)
                since = f" and part from step {parted}" if parted is not None else ", not later"
                lines.append((f"Numerics: not comparable: {record}'s losses agree with {numerics.reference}'s at the first step{since}: "
                              f"{numerics.random_ops[record]}{_RANDOM_OPS_TAIL}", False))
                lines.extend((diff_line(d), False) for d in numerics.diffs if d.record == record and not d.agrees)
                continue
            value, reference_value = numerics.first_losses[record]
            if record in numerics.first_backward_agrees:
                lines.append((f"Numerics: not comparable: {record}'s first step parts from {numerics.reference}'s in its "
                              f"backward: the loss of its first backward call agrees ({numerics.first_backward_agrees[record]!r} "
                              f"in both), the loss after it already differs ({value!r} vs {reference_value!r}): what that "
                              "backward did changed what the next forward computed, as random numbers drawn in it do "
                              "(torch.compile's non-reentrant activation checkpointing on the eager backend draws from the "
                              "generator in its recompute, where eager's checkpoint leaves it as it was; aot_eager and "
                              "inductor do not), so the modes trained on other random draws from there on and their "
                              "numerics say nothing about compiled autograd", False))
                continue
            if record in numerics.random_ops:
                lines.append((f"Numerics: not comparable: {record}'s first-step loss already differs from {numerics.reference}'s "
                              f"({value!r} vs {reference_value!r}): {numerics.random_ops[record]}{_RANDOM_OPS_TAIL}", False))
                continue
            lines.append((
                f"Numerics: inputs differ (unseeded?): {record}'s first-step loss already differs from {numerics.reference}'s "
                f"({value!r} vs {reference_value!r}, before any backward could matter): the modes computed on "
                "different inputs or randomness, or the compiled forward computes differently, so their numerics say "
                "nothing about compiled autograd. "
                + ("cagtool seeded nothing (--seed off): what the script does not seed itself (Python's random, numpy, "
                   "torch) draws other numbers in each mode; run without --seed off, or seed them in the script, to compare"
                   if numerics.unseeded else
                   "cagtool seeds every mode alike; a script that draws from another source (data order, os.urandom, "
                   "Inductor's dropout, Python's hash randomization: `hash()` of strings or bytes, a set's order; "
                   "PYTHONHASHSEED=0 fixes that one) needs to fix it to compare"), False))
        against = numerics.against_aot
        if against:
            aot = against[0].reference
            apart = [d for d in against if not d.agrees]
            # Their forwards compiled alike; their backwards by one compiler, or by two (compilers_differ).
            alike = ("compiled alike" if not numerics.compilers else
                     f"forwards compiled alike, backwards by {numerics.compilers[0]} and {numerics.compilers[1]}")
            if not apart:
                top = max(against, key=lambda d: d.max_rel_diff or 0.0)
                lines.append((f"Numerics: {and_words([d.record for d in against])} against {aot} ({alike}): "
                              f"{_compared_words(against)} agree within {tolerance}; largest relative difference "
                              f"{format_rel(top.max_rel_diff)}{_where(top) if top.max_rel_diff else ''}: compiled autograd changed "
                              f"nothing beyond the compiled program's difference from {numerics.reference}", False))
            else:
                # Losses that part growing from round-off, not at a jump, do not yet say which computes otherwise.
                losses = [d for d in apart if d.quantity == LOSS]
                growing = bool(losses) and all(d.parts_growing_from is not None for d in losses)
                undecided = bool(losses) and all(d.parts_growing_from is not None or d.undecided_at is not None for d in losses)
                lines.append((f"Numerics DISAGREE between {and_words([d.record for d in apart])} and {aot} ({alike}, "
                              f"{tolerance}): " + ("the losses part growing, not at a jump: round-off amplified by training "
                                                   "or compiled autograd computing otherwise, not told apart yet (the note below):"
                                                   if growing else
                                                   "the losses part at a jump after too few steps agreeing, with the gradients "
                                                   "within round-off before it: compiled autograd computing otherwise or round-off "
                                                   "amplified by a job that diverges, not told apart yet (the note below):"
                                                   if undecided else "compiled autograd computes otherwise:"), True))
                for d in apart:
                    lines.append((diff_line(d), True))
                lines.extend((f"  note: {d.note}", False) for d in apart if d.note)
    resumed = numerics.resumed
    for d in numerics.diffs:
        # A record that resumed ran other steps than the reference's under the same numbers: "compared
        # the N steps both ran" would say they were the same steps; its line above says why not.
        if d.note and d.record not in resumed:
            lines.append((f"  note: {d.note}", False))
    for note in numerics.notes:
        lines.append((f"  note: {note}", False))
    return lines


def _compared_words(diffs: Sequence[NumericsDiff]) -> str:
    """What the comparisons held: "losses and final norms", or either alone (a mode stopped by
    --max-time has no end of training to compare)."""
    compared = {d.quantity for d in diffs if d.compared}
    if compared == {LOSS}:
        return "losses"
    return "final norms" if compared and LOSS not in compared else "losses and final norms"


def _resumed_lines(numerics: Numerics) -> list[tuple[str, bool]]:
    """Each record that started from files an earlier mode wrote (Numerics.resumed), in words."""
    return [(f"Numerics: {record} started after an earlier mode wrote {files.shown()} in the job's working directory"
             + (" and trained no step" if record in numerics.stepless else "")
             + ": a job that resumes from its own files (a checkpoint, a cache) runs differently in each mode, so its "
             f"numerics (and steps) say nothing about compiled autograd: {ISOLATE_WORKDIR_FIX} (cagtool runs every mode in "
             "the directory python would)", False)
            for record, files in numerics.resumed.items()]


def _steps_text(steps: Any, shown: int = 6) -> str:
    """`82, 83`, or the first `shown` and how many more."""
    steps = list(steps)
    more = f" and {len(steps) - shown} more" if len(steps) > shown else ""
    return ", ".join(str(step) for step in steps[:shown]) + more


def diff_line(d: Any) -> str:
    """One difference of a record from the reference, as the numerics lines list it."""
    if d.quantity == PARAMS_UPDATED:
        total = f" of {d.compared}" if d.compared else ""
        return f"  parameters updated in {d.record}: {d.value:g}{total}, against {d.reference_value:g}{total} in {d.reference}"
    return f"  {d.quantity} of {d.record}: {format_rel(d.max_rel_diff)} relative{_where(d, quantity=False)} ({d.value!r} vs {d.reference_value!r})"


def grad_parity_lines(parity: Any) -> list[tuple[str, bool]]:
    """Gradients per parameter (grad_parity.py): the verdict, then each record that differs with
    its first bad step's parameters and what the difference looks like, or why it is not comparable."""
    if parity is None:
        return []
    if not parity.has_digests:
        # One mode digested, the others could not (their optimizer steps inside compiled code): said.
        return [(parity.summary(), False)] if parity.reference is not None and parity.notes else []
    lines = [(parity.summary(), not parity.agree)]
    # A ca record that agrees with aot where both differ from eager: its parameters are aot's, listed once.
    as_aot = {p.record: p.reference for p in parity.against_aot} if parity.compiled_otherwise() is not None else {}
    for pair in parity.pairs if parity.one_reason() is None else ():  # one reason for all: the summary said it
        if not pair.agrees and pair.record in as_aot:
            lines.append((f"  {pair.record} differs from {pair.reference} as {as_aot[pair.record]} does: its gradients are "
                          f"{as_aot[pair.record]}'s (the line below)", True))
            continue
        if not pair.agrees:
            lines.append((f"  {pair.verdict()}:", True))
            for mismatch in pair.first_bad[:8]:
                lines.append((f"    {mismatch.describe()}", True))
            if len(pair.first_bad) > 8:
                lines.append((f"    ... and {len(pair.first_bad) - 8} more parameters", True))
        else:
            lines.append((f"  {pair.verdict()}", False))
        sides = [f"only in {name}: {_steps_text(steps)}" for name, steps in ((pair.record, pair.only_record), (pair.reference, pair.only_reference)) if steps]
        if sides:
            lines.append((f"    not compared: steps digested {'; '.join(sides)}", False))
    for pair in parity.against_aot:  # where aot differs from eager too: which of them changed the gradients
        lines.append((f"  {pair.verdict()}", not pair.agrees))
    for note in parity.notes:
        lines.append((f"  note: {note}", False))
    return lines


def _where(d: NumericsDiff, quantity: bool = True) -> str:
    what = f"{d.quantity} of {d.record}" if quantity else ""
    step = f" at step {d.worst_step}" if d.quantity == LOSS and d.worst_step is not None else ""
    if quantity:
        return f" ({what}{step})"
    return step


def excluded_line(comparison: Comparison) -> str | None:
    # "step 0", not "0": with steps numbered from 0 a bare number reads as a count.
    def listed(name: str, steps: Sequence[int]) -> str:
        return f"{name}: step{'s' if len(steps) > 1 else ''} {steps_list(list(steps))}"

    compiled = [listed(c.name, [n for n in c.step_time.excluded if n not in set(c.step_time.interrupted)])
                for c in comparison.modes.values() if len(c.step_time.excluded) > len(c.step_time.interrupted)]
    interrupted = [listed(c.name, c.step_time.interrupted) for c in comparison.modes.values() if c.step_time.interrupted]
    kinds = tuple(dict.fromkeys(k for c in comparison.modes.values() for k in c.step_time.interruptions))
    sentences = (["Steps left out of the steady state because compilation touched them: " + "; ".join(compiled)] if compiled else []) + (
        [f"Steps left out because other work than training ran in them ({interruption_words(kinds)}): "
         + "; ".join(interrupted)] if interrupted else []) + ([headers_words(comparison.built_headers)] if comparison.built_headers else [])
    return ". ".join(sentences) if sentences else None


def headers_words(built: Sequence[str]) -> str:
    """The modes that built Inductor's precompiled headers (capture/run/inductor_machine.py)."""
    return (f"{' and '.join(built)} built Inductor's precompiled C++ headers, which torch keeps for every later job on this machine "
            f"(<tmp>/torchinductor_<user>/precompiled_headers): {'its' if len(built) == 1 else 'their'} compile time includes "
            "that one-time cost, which the plain job pays once too; the modes after it reused them")


# Before/after rows: (label, field key in mode_fields, value formatter, also used for the delta).
_CHANGE_ROWS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("forward graphs", "forward_graphs", count),
    ("backward graphs", "backward_graphs", count),
    ("Dynamo graphs (torch)", "unique_graphs", count),
    ("graph breaks", "graph_breaks", count),
    ("recompiles", "recompiles", count),
    ("compile time", "compile_time_s", seconds),
    ("time to first step", "first_step_s", seconds),
    ("step time (median)", "step_time_median_s", millis),
    ("step time p10", "step_time_p10_s", millis),
    ("step time p90", "step_time_p90_s", millis),
    ("steady steps", "steady_steps", count),
    ("peak RSS", "peak_rss_bytes", mib),
    ("peak CUDA memory", "peak_device_memory_bytes", mib),
)


def _processes(k: int) -> str:
    return f"{k} process{'es' if k != 1 else ''}"


def _steps_per_process(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def change_grid(rc: RunComparison) -> Grid:
    grid = Grid(
        f"Before/after: A = {rc.before.run_path}  B = {rc.after.run_path}",
        ["mode", "", "A (before)", "B (after)", "change"],
    )
    for change in rc.changes:
        grid.sections.append(len(grid.rows))
        a, b = change.before, change.after
        fa = mode_fields(a) if a else {}
        fb = mode_fields(b) if b else {}
        status_a = status_cell(a) if a else "not run"
        status_b = status_cell(b) if b else "not run"
        grid.rows.append([change.mode, "status", status_a, status_b, ""])
        if a is None or b is None:
            continue
        deltas = change.deltas
        for label, key, fmt in _CHANGE_ROWS:
            if label in _OPTIONAL_ROWS and fa.get(key) is None and fb.get(key) is None:
                continue
            if label in _WHEN_GRAPHS_SPLIT and not any(x.metrics and dynamo_graph_count(x.metrics) for x in (a, b)):
                continue  # the forward and backward rows make torch's count on both sides
            if key == "steady_steps" and "steady_steps_per_process" in deltas:
                # Each run's processes pooled, and the runs hold different numbers of them: each
                # cell says how many, and the change is a process's (RunComparison.notes).
                ka, kb = change.processes
                per = deltas["steady_steps_per_process"]
                assert per is not None
                grid.rows.append(["", label, count(fa.get(key), _processes(ka)), count(fb.get(key), _processes(kb)),
                                  f"{signed(per, _steps_per_process)} per process"])
                continue
            grid.rows.append(["", label, fmt(fa.get(key)), fmt(fb.get(key)), signed(deltas.get(key), fmt)])
        s = change.speedup
        if s is not None:
            verdict = f"{ratio(s.ratio)} ({speedup_range(s)}) {s.verdict}"
            if s.verdict == TOO_FEW_STEPS:  # a ratio of a few steps reads as a verdict, and may run against the medians above
                verdict = f"not judged: {min(s.steady_steps)} steps steady in both (at least {MIN_STEADY_STEPS})"
            # The rows above are wall time; a speedup judged on CPU time per step says so.
            grid.rows.append(["", "speedup B over A" + (" (CPU time per step)" if s.on_cpu else ""), "", "", verdict])
        if change.numerics:
            grid.rows.append(["", "numerics B vs A (max rel diff)", "", "", diffs_cell(change.numerics)])
    grid.mark_problems(first_column=2)
    return grid


NOTE_WIDTH = 72  # characters of a table's note column per line


class TableRenderer:
    """The terminal view. Options are constructor arguments; `render` prints."""

    def __init__(self, console: Console, headline: bool = True, line: Headline | None = None) -> None:
        self.console = console
        self.headline = headline  # False where the caller printed it already (the run's summary)
        self.line = line  # the caller's headline (one run's causes, from its record), else the comparison's

    def _table(self, grid: Grid) -> Table:
        table = Table(title=grid.title, title_justify="left", show_lines=False)
        for i, name in enumerate(grid.header):
            # A note is prose: wrapped in its cell (off a terminal the console has no width, and a
            # 500-character note would be one line).
            table.add_column(name, justify="left" if left_aligned(i, name) else "right", overflow="fold",
                             max_width=NOTE_WIDTH if name == "note" else None)
        for r, row in enumerate(grid.rows):
            if r in grid.sections and r:
                table.add_section()
            # One line each before the table measures them: a record's line break, escaped only when
            # printed, would fold the cell (and might start the fold with a forged `::error`).
            cells = [Text(safe_line(v), style="bold red" if (r, k) in grid.problem_cells else "") for k, v in enumerate(row)]
            table.add_row(*cells)
        return table

    def _lines(self, lines: list[tuple[str, bool]]) -> None:
        for line, problem in lines:
            self.console.print(Text(line, style="bold red" if problem else ""))

    def render(self, comparison: AnyComparison) -> None:
        if self.headline:
            print_headline(self.console, self.line or headline_of(comparison))
        if isinstance(comparison, RunComparison):
            self.console.print(self._table(change_grid(comparison)))
            for note in comparison.notes:
                self.console.print(Text(f"note: {note}", style="yellow"))
            self._problems(comparison.problems, failures_only=False)
            return
        self.console.print(self._table(mode_grid(comparison)))
        if comparison.speedups:
            self.console.print(self._table(speedup_grid(comparison.speedups)))
            self.console.print(Text(SPEEDUP_FOOTNOTE, style="dim"))
        excluded = excluded_line(comparison)
        if excluded:
            self.console.print(Text(excluded, style="dim"))
        self._lines(numerics_lines(comparison.numerics))
        self._lines(grad_parity_lines(comparison.grad_parity))
        self._problems(comparison.failure_problems, failures_only=True)

    def _problems(self, problems: list[str], failures_only: bool) -> None:
        if not problems:
            return
        self.console.print(Text("Problems:", style="bold red"))
        for p in problems:
            self.console.print(Text(f"  {p}", style="red"))


def _md_escape(value: str) -> str:
    return md_text(value)


def _md_table(grid: Grid) -> list[str]:
    lines = [f"**{_md_escape(grid.title)}**", ""]
    lines.append("| " + " | ".join(_md_escape(h) or " " for h in grid.header) + " |")
    lines.append("|" + "|".join(":---" if left_aligned(i, h) else "---:" for i, h in enumerate(grid.header)) + "|")
    for r, row in enumerate(grid.rows):
        cells = [f"**{_md_escape(v)}**" if (r, k) in grid.problem_cells else _md_escape(v) for k, v in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def print_headline(console: Console, line: Headline, run_path: str = "") -> None:
    """The headline, then what to do (when the headline has advice; `run_path`: where the
    details are, for `recompiles --explain`)."""
    console.print(Text(line.text, style={"good": "bold green", "bad": "bold red"}.get(line.tone, "bold")))
    if line.advice:
        details = ("" if not run_path else f" (why: cagtool summary {run_path})" if line.details == "summary"
                   else f" (why, and every recompile: cagtool recompiles --explain {run_path})")
        console.print(Text.assemble(("what to do: ", "bold"), f"{line.advice}{details}"))


def headline_of(comparison: AnyComparison) -> Headline:
    """The one-line answer every view of a comparison starts with (compare/headline.py)."""
    return change_headline(comparison) if isinstance(comparison, RunComparison) else run_headline(comparison)


def comparison_markdown(comparison: AnyComparison, headline: Headline | None = None) -> str:
    line = headline or headline_of(comparison)
    head = [f"**{_md_escape(line.text)}**", ""]
    if line.advice:
        head += [f"What to do: {_md_escape(line.advice)}", ""]
    if isinstance(comparison, RunComparison):
        lines = head + _md_table(change_grid(comparison))
        lines += [f"- note: {_md_escape(n)}" for n in comparison.notes]
        if comparison.notes:
            lines.append("")
        problems = comparison.problems
    else:
        lines = head + _md_table(mode_grid(comparison))
        if comparison.speedups:
            lines += _md_table(speedup_grid(comparison.speedups))
            lines += [SPEEDUP_FOOTNOTE, ""]
        excluded = excluded_line(comparison)
        if excluded:
            lines += [_md_escape(excluded), ""]
        for line, problem in numerics_lines(comparison.numerics) + grad_parity_lines(comparison.grad_parity):
            text = _md_escape(line.strip())
            lines.append(f"- **{text}**" if problem else f"- {text}")
        lines.append("")
        problems = comparison.failure_problems
    if problems:
        lines.append("**Problems:**")
        lines += [f"- {_md_escape(p)}" for p in problems]
        lines.append("")
    return "\n".join(lines)


FORMATS = ("table", "json", "csv", "markdown")


def format_comparison(comparison: AnyComparison, fmt: str, headline: Headline | None = None) -> str:
    """The text of a non-table format (json, csv, markdown); `headline`: the caller's, when it
    knows more than the comparison holds (one run's recompile causes)."""
    if fmt == "json":
        return json.dumps(comparison_to_json(comparison, headline), indent=2, default=str) + "\n"
    if fmt == "csv":
        return comparison_csv(comparison)
    if fmt == "markdown":
        return comparison_markdown(comparison, headline)
    raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def render_comparison(comparison: AnyComparison, fmt: str = "table", console: Console | None = None, headline: bool = True, line: Headline | None = None) -> None:
    """Print a comparison (one run's modes, or two runs) in `fmt`: table | json | csv | markdown.

    The table goes through the rich console; the other formats are written to the console's file
    verbatim (no wrapping, no markup), so they can be piped or redirected."""
    if console is None:
        from cagtool.report.text.console import make_console

        console = make_console()
    if fmt == "table":
        TableRenderer(console, headline, line).render(comparison)
        return
    # json is ASCII already; csv and markdown may carry record text to a terminal.
    text = safe_text(format_comparison(comparison, fmt, line))
    console.file.write(text)
    console.file.flush()
