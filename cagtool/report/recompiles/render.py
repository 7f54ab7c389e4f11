"""Text renderers for `cagtool recompiles`: the table of every recompile and the --explain text.

Each renderer is a class whose constructor takes its options and whose `render` does the work;
the JSON document is written by `recompiles_json`."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import TYPE_CHECKING, Any

import msgspec

from cagtool.record.schema import FIRST_STEP, SourceRef
from cagtool.report.recompiles.explain import (
    GRAD_WARMUP_WORDS,
    grad_warmup_row,
    Explanation,
    Words,
    alert_words,
    cause_words,
    evaluation_compile,
    own_guard,
    plural,
    step_list,
)
from cagtool.report.recompiles.reads import display_path, format_source
from cagtool.report.recompiles.table import (
    SOURCE_CA,
    SOURCE_DYNAMO_CA_GRAPH,
    SOURCE_DYNAMO_FRAME,
    RecompileRow,
    RecompileTable,
    guard_text,
    node_label,
)
from cagtool.report.text.console import is_unbounded
from cagtool.report.text.safe_text import safe_line

if TYPE_CHECKING:
    from rich.console import Console

_SOURCE_LABEL = {SOURCE_CA: "CA miss", SOURCE_DYNAMO_FRAME: "Dynamo", SOURCE_DYNAMO_CA_GRAPH: "Dynamo CA"}


def counts_line(table: RecompileTable) -> str:
    initial = table.initial
    first = f"; initial compile {initial[0].compile_id} at step {'?' if initial[0].step is None else initial[0].step}" if initial else ""
    warmup = grad_warmup_row(table)
    gate = f"; {warmup.compile_id} is {GRAD_WARMUP_WORDS}" if warmup else ""
    # An imported log has no step boundaries: no "N recompiles in 0 steps".
    steps = f" in {plural(table.steps, 'step')}" if table.steps else ""
    # Torch logs a recompile's reasons before it checks the limit: a refused one is in its
    # recompiles log, and compiled nothing (no graph, not in unique_graphs).
    hit_ids = {h.compile_id for h in table.limit_hits if h.compile_id}
    refused = sum(1 for r in table.recompiles if r.compile_id in hit_ids)
    limit = f"; {refused} of them refused at the recompile limit, compiling nothing" if refused else ""
    # A damaged record's counts are what it holds, not what ran: said as such, never as the job's.
    damaged = f"{damaged_words(table)}; it holds " if table.damage else ""
    return (
        f"mode {table.name}: {damaged}{plural(len(table.recompiles), 'recompile')}{steps} "
        f"(CA: {table.count(SOURCE_CA)}, "
        f"Dynamo forward-frame: {table.count(SOURCE_DYNAMO_FRAME)}, "
        f"Dynamo CA-graph: {table.count(SOURCE_DYNAMO_CA_GRAPH)}){limit}{first}{gate}"
    )


def print_wrapped(console: "Console", text: str, indent: int = 0, style: str = "") -> None:
    """Wrapped here, not by rich: continuation lines are indented two more and carry no trailing spaces."""
    pad = " " * indent
    width = max(console.width - 1, 40)
    lines = textwrap.wrap(text, width=width, initial_indent=pad, subsequent_indent=pad + "  ",
                          break_long_words=False, break_on_hyphens=False)
    for line in lines or [""]:
        print_line(console, line, style)


def print_line(console: "Console", line: str, style: str = "") -> None:
    """One line as it is, never wrapped; `style` only where the console shows styles (a terminal)."""
    from rich.text import Text  # Text, not a str: the line may contain [brackets] (record data)

    console.print(Text(line, style=style), soft_wrap=True)


def damaged_words(table: RecompileTable) -> str:
    """What a damaged record (record/integrity.py's words) leaves unknown."""
    return f"record damaged ({'; '.join(table.damage)}): recompiles not known"


def record_notes(table: RecompileTable) -> list[str]:
    notes = []
    for path in table.missing_artifacts:
        notes.append(f"note: compile artifact {path} is missing; its guard detail is left out")
    if table.skipped_lines:
        notes.append(f"note: skipped {plural(table.skipped_lines, 'unreadable line')} of the {table.name} record (--strict makes this an error)")
    if table.unknown_kinds:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(table.unknown_kinds.items()))
        notes.append(f"note: ignored events of unknown kinds: {kinds}")
    if table.imported is not None:
        notes.append("note: imported from a TORCH_TRACE log: no step boundaries (steps show ?)")
        inferred = table.imported.get("ca_reasons_inferred") or 0
        if inferred:
            notes.append(
                f"note: {plural(inferred, 'CA cache-miss reason')} inferred from the diff of consecutive graphs "
                "(the job did not log compiled_autograd_verbose); torch's own reasons need TORCH_LOGS=compiled_autograd_verbose"
            )
    if table.status and table.status != "finished":
        notes.append(f"note: the {table.name} run's status is {table.status!r}; the record may end early")
    if table.ca_by_cagtool_only:
        where = ("but calls backward inside a function torch.compile made before the flag was set (torch 2.13 reads the flag when "
                 "torch.compile(...) is called)" if table.ca_flag_after_compile else
                 "but calls backward outside any torch.compile'd function (torch 2.13 turns it on only around the calls of functions "
                 "torch.compile made after the flag was set)")
        fix = ("set the flag before torch.compile(...)" if table.ca_flag_after_compile else
               "call backward inside a compiled step function made after the flag is set")
        notes.append(
            f"note: without cagtool this job gets no compiled autograd: it sets torch._dynamo.config.compiled_autograd = True {where}. "
            f"The CA captures below are what the job would do with compiled autograd on: the {table.name} mode turns it on around "
            f"every backward. To get them in the job, {fix}, or wrap its training loop in torch._dynamo.compiled_autograd._enable(...)"
        )
    if table.sharded_under_ca:
        notes.append(
            f"note: the {table.name} mode ran compiled autograd over parameters each rank holds a shard of; under FSDP2 "
            "(DTensor parameters) that is a setup torch has no compiled-autograd path for (removed upstream, "
            "pytorch/pytorch#174906): compare this mode's numerics (cagtool compare) before acting on its recompiles"
        )
    return notes


def no_recompiles_text(table: RecompileTable) -> str:
    """The line of a mode without a recompile: what was cached, where something was."""
    if table.damage:
        return f"Recompiles not known: the {table.name} record is damaged (above); re-record the run."
    if table.mode == "eager":
        return "No recompiles: the eager mode compiles nothing."
    if table.mode == "ca" and not table.graphs and table.steps:
        return "No recompiles, and no graph: compiled autograd captured none of this mode's backward calls."
    if not table.rows and not table.graphs and not table.dynamo_compiles and table.steps and table.skipped_compiles:
        first = table.skipped_compiles[0]
        return f"No recompiles: this mode compiled nothing. {first.words}; compile it: {first.fix}."
    if not table.rows and not table.graphs and not table.dynamo_compiles and table.steps:
        return "No recompiles: this mode compiled nothing (no torch.compile'd code ran)."
    if table.steps <= 1:
        ended = f"; the mode {table.status}" if table.status and table.status != "finished" else ""
        return f"No recompiles, in {plural(table.steps, 'step')}{ended}: nothing ran after a first step to reuse what it compiled."
    return "No recompiles: every step after the first reused the cached graphs."


# The width the table's "what changed" column folds at off a terminal (RecompileTableRenderer).
OFF_TERMINAL_CELL = 100
# The widest user-source cell kept whole however narrow the table: `drop-last-main.py:43` and more.
USER_SOURCE_WHOLE = 32

_KIND_LABEL = {"new_node": "new node", "changed_shapes": "shapes", "guard_failure": "guard", "unknown": "unknown"}


def _sizes_text(row: RecompileRow) -> str:
    """`4 changed sizes: sizes[0-3] of SumBackward0 10->100`: sizes with the same owner and the same
    change are listed together."""
    groups: dict[tuple, list[int]] = {}
    for size in row.changed_sizes:
        old = None if size.previous is None else str(size.previous)
        new = "?" if size.value is None else str(size.value)
        groups.setdefault((size.node, old, new), []).append(size.index)
    parts = []
    for (node, old, new), indices in groups.items():
        owner = f" of {node_label(node, None)}" if node else ""
        # `=48`: the new value alone, where no recorded graph holds the earlier one (as diff-graphs writes it)
        change = f"{old}->{new}" if old is not None else f"={new}"
        parts.append(f"sizes[{step_list(indices).replace(', ', ',')}]{owner} {change}")
    total = row.total_changed if row.total_changed is not None else len(row.changed_sizes)
    return f"{plural(total, 'changed size')}: " + ", ".join(parts) if parts else plural(total, "changed size")


def detail_cell(row: RecompileRow) -> str:
    """What changed, in one cell: the node and key sizes, the sizes old -> new, or the failing guard."""
    if row.kind == "changed_shapes":
        return _sizes_text(row)
    if row.node:
        previous = ",".join(str(s) for s in row.previous_key_sizes)
        key = f"; key size {row.key_size} vs [{previous}]" if row.key_size is not None else ""
        return node_label(row.node, row.node_call) + key
    if row.source != SOURCE_CA:
        # The call's own failure, where torch lists first an entry made for another form of the call
        # (another grad mode, an input that requires grad: explain.own_guard).
        guard = own_guard(row) or (guard_text(row.messages[0]) if row.messages else "")
        return f"`{guard}`" if guard else "(guard not recorded)"
    return "(no reason recorded)"


TABLE_HEADER = ("#", "step", "source", "kind", "what changed", "user source", "graph")


# What the step column's "after N" means, said under a table that has one.
BETWEEN_STEPS_NOTE = ("after N: compiled with grad off after step N ended, before step N+1's backward (an evaluation, "
                      "not a training step)")


def step_cell(table: RecompileTable, row: RecompileRow) -> str:
    """The step column: the step a recompile was stamped with; an evaluation's (evaluation_compile)
    "after N" (it came between steps N and N+1, stamped N+1), "before 0" before the first."""
    if row.step is None:
        return ""
    if not evaluation_compile(table, row):
        return str(row.step)
    return f"after {row.step - 1}" if row.step != FIRST_STEP else f"before {row.step}"


def table_cells(table: RecompileTable) -> list[tuple[str, ...]]:
    """The cells of each row under TABLE_HEADER (the terminal table and the HTML report's):
    the initial compile is numbered `-`, recompiles 1, 2, ..."""
    out = []
    number = 0
    for row in table.rows:
        if row.initial:
            label, kind = "-", "initial"
        else:
            number += 1
            label, kind = str(number), _KIND_LABEL.get(row.kind, row.kind)
        out.append(
            (
                label,
                step_cell(table, row),
                f"{_SOURCE_LABEL.get(row.source, row.source)} {row.compile_id}",
                kind,
                detail_cell(row),
                format_source(row.user_source, table.cwd, with_code=False),
                row.produced or "",
            )
        )
    return out


class RecompilesTableRenderer:
    """One row per recompile, the initial compile listed first and marked as such; the code of each
    user source line is listed once under the table."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def render(self, tables: list[RecompileTable], run_label: str) -> None:
        # Here, not at the top: `--explain` and `--format json` never draw a table, and rich.table
        # (with the fractions and decimal its column ratios import) is ~8 ms of their start-up.
        from rich import box
        from rich.table import Table
        from rich.text import Text

        for table in tables:
            print_wrapped(self.console, counts_line(table))
            for note in record_notes(table):
                print_wrapped(self.console, note)
            if not table.rows:
                continue
            grid = Table(show_header=True, header_style="bold", pad_edge=False, box=box.SIMPLE_HEAD)
            grid.add_column("#", justify="right", no_wrap=True)
            grid.add_column("step", justify="right", no_wrap=True)
            grid.add_column("source", no_wrap=True)
            grid.add_column("kind", no_wrap=True)
            # Off a terminal a line is as long as its text, but a table pads every row to its widest
            # cell: one miss's 200 changed sizes padded each row of a CI log to 1,000+ characters.
            # There the two long columns fold at a width of their own, every character kept.
            unbounded = is_unbounded(self.console)
            rows = table_cells(table)
            # A short `file:line` whole, not folded mid-number by a wide "what changed" beside it.
            shortest = min(max((len(cells[5]) for cells in rows), default=0), USER_SOURCE_WHOLE)
            grid.add_column("what changed", overflow="fold", ratio=3, max_width=OFF_TERMINAL_CELL if unbounded else None)
            grid.add_column("user source", overflow="fold", ratio=2, max_width=OFF_TERMINAL_CELL // 2 if unbounded else None,
                            min_width=shortest or None)
            grid.add_column("graph", no_wrap=True)
            for cells in rows:
                # Text: guard texts may contain [brackets]; one line each before the table measures
                # them (a node's line break, escaped only when printed, would fold the cell).
                grid.add_row(*(Text(safe_line(cell)) for cell in cells))
            self.console.print(grid)
            evaluations = {step_cell(table, row) for row in table.rows if row.step is not None and evaluation_compile(table, row)}
            if evaluations:
                first = f"before {FIRST_STEP}"
                print_wrapped(self.console, BETWEEN_STEPS_NOTE + (f"; {first}: the same, before the first step" if first in evaluations else ""))
            lines = sorted(
                {line for r in table.rows if r.user_source is not None and r.user_source.code
                 and (line := format_source(r.user_source, table.cwd)).strip()}
            )
            if lines:
                self.console.print("user source lines:")
                for line in lines:
                    self.console.print(Text(f"  {line}"), soft_wrap=True)
        if any(t.recompiles for t in tables):
            self.console.print(Text(f"Why, and what to do: cagtool recompiles {run_label} --explain"), soft_wrap=True)


class ExplanationRenderer:
    """The --explain text: alerts first, then each root cause with why, the fix and the evidence."""

    def __init__(self, console: "Console") -> None:
        self.console = console

    def _line(self, text: str, indent: int) -> None:
        print_wrapped(self.console, text, indent)

    def _block(self, heading: str, why: list[str], fix: list[str], evidence: str, indent: int = 0) -> None:
        print_wrapped(self.console, heading, indent, style="bold")
        for sentence in why:
            self._line(sentence, indent + 2)
        for sentence in fix:
            self._line(f"Fix: {sentence}", indent + 2)
        if not fix:
            self._line("No fix needed.", indent + 2)
        if evidence:
            self._line(f"Evidence: {evidence}", indent + 2)
        self.console.print()

    def _phases_and_budget(self, lines: tuple[str, ...]) -> None:
        for line in lines:
            stripped = line.lstrip(" ")
            self._line(stripped, len(line) - len(stripped))
        if lines:
            self.console.print()

    def render(self, explanations: list[Explanation], run_label: str) -> None:
        shown: dict[tuple, str] = {}  # what a record's explanation says -> the first record that said it
        for explanation in explanations:
            table = explanation.table
            alerts = [alert_words(alert, table.cwd) for alert in explanation.alerts]
            causes = [cause_words(cause, table.cwd) for cause in explanation.causes]
            said = _what_it_says(explanation, alerts, causes)
            _, _, notes, _, quiet, phases = said
            counts = counts_line(table)
            first = shown.setdefault(said, table.name)
            if first != table.name:
                # A repetition of `run --repeat K` whose explanation is word for word an earlier one's
                # (its evidence's seqs aside): its counts, and where the words are.
                print_wrapped(self.console, f"{counts}; explained as mode {first} above, word for word")
                continue
            print_wrapped(self.console, counts)
            for note in notes:
                print_wrapped(self.console, note)
            if quiet:
                self.console.print(quiet)
                self._phases_and_budget(phases)
                continue
            self.console.print()
            for words in alerts:
                self._block(f"!! {words.title}", words.why, words.fix, words.evidence)
            for cause, words in zip(explanation.causes, causes):
                at = f", {cause.place_said}" if cause.place else ""
                # A consequence is drawn under its root cause (they are listed in that order).
                indent = 4 if cause.caused_by is not None else 0
                self._block(f"#{cause.number} {words.title}{at}", words.why, words.fix, words.evidence, indent)
            self._phases_and_budget(phases)
        print_line(self.console, f"Every recompile, one per row: cagtool recompiles {run_label}")


def _what_it_says(explanation: Explanation, alerts: list[Words], causes: list[Words]) -> tuple:
    """Everything the --explain text says of one record (its alerts' and causes' words given) but its
    name and its evidence's seqs, equal for two repetitions of one mode that recompiled alike:
    (mode, counts after the name, notes, words, the no-recompiles line or "", phase and budget lines)."""
    from cagtool.report.recompiles.budget_words import phase_and_budget_lines

    table = explanation.table
    counts = counts_line(table).split(": ", 1)[-1]
    notes = tuple(record_notes(table))
    steps = [()] * len(alerts) + [tuple(c.steps) for c in explanation.causes]
    words = tuple((w.title, tuple(w.why), tuple(w.fix), s) for w, s in zip([*alerts, *causes], steps))
    quiet = no_recompiles_text(table) if not explanation.causes and not explanation.alerts else ""
    explained = frozenset(row.compile_id for cause in explanation.causes for row in cause.rows)
    return (table.mode, counts, notes, words, quiet, tuple(phase_and_budget_lines(table, explained)))


JSON_SCHEMA = "cagtool-recompiles"
JSON_SCHEMA_VERSION = 1


def _source_json(ref: SourceRef | None, cwd: str) -> dict[str, Any] | None:
    if ref is None:
        return None
    # `via`: the library's line on the way (HF Trainer's call of the compiled model), where there is one.
    return {"file": display_path(ref.file, cwd), "line": ref.line, "code": ref.code, "function": ref.function, "how": ref.how,
            **({"via": ref.via} if ref.via else {})}


def row_json(row: RecompileRow, cwd: str) -> dict[str, Any]:
    return {
        "compile_id": row.compile_id,
        "source": row.source,
        "step": row.step,
        "kind": row.kind,
        "initial": row.initial,
        "seqs": list(row.seqs),
        "ca_id": row.ca_id,
        "node": row.node,
        "node_call": row.node_call,
        "key_size": row.key_size,
        "previous_key_sizes": list(row.previous_key_sizes),
        "changed_sizes": [msgspec.structs.asdict(c) for c in row.changed_sizes],
        "total_changed": row.total_changed,
        "messages": list(row.messages),
        "source_line": _source_json(row.user_source, cwd),
        "produced": row.produced,
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return _jsonable(msgspec.structs.asdict(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def explanation_json(explanation: Explanation) -> dict[str, Any]:
    cwd = explanation.table.cwd
    alerts = []
    for alert in explanation.alerts:
        words = alert_words(alert, cwd)
        alerts.append(
            {"code": alert.code, "title": words.title, "why": words.why, "fix": words.fix,
             "evidence": words.evidence, "causes": alert.causes, "facts": _jsonable(alert.facts)}
        )
    causes = []
    for cause in explanation.causes:
        words = cause_words(cause, cwd)
        causes.append(
            {
                "number": cause.number,
                "code": cause.code,
                # A Dynamo cause's class, from torch's reason (torch_text.GUARD_*); "" for other causes.
                "guard_kind": cause.facts.get("kind", ""),
                "count": cause.count,
                "steps": cause.steps,
                # Compiled for an evaluation between training steps: each step k above is "after step k-1".
                "between_steps": cause.between_steps,
                "title": words.title,
                "why": words.why,
                "fix": words.fix,
                "evidence": words.evidence,
                "evidence_ids": [dataclasses.asdict(e) for e in cause.evidence],
                "source": _source_json(cause.source, cwd),
                "stabilised": cause.facts.get("stabilised"),
                "last_recompile_step": cause.facts.get("last_recompile_step"),
                "caused_by": cause.caused_by,
                "consequences": list(cause.consequences),
                # The hook functions a hook cause's recompiles added or removed, named (file as `source`'s).
                "hooks": [{**dataclasses.asdict(h), "file": display_path(h.file, cwd)} for h in cause.facts.get("named_hooks") or []],
                # torch's frames Dynamo compiled inside compiled autograd's captures (explain.py `_inside_capture`):
                # {"frames": [{"function", "file"}], "captures": ["!N"], "capture_causes": [cause numbers]}; null otherwise.
                "inside_capture": cause.facts.get("inside_capture"),
                # The backward calls that each met one change of sizes (explain.py `_one_cause_a_change_met_by_each_call`):
                # [{"file" (as `source`'s), "line"}], where more than one did; [] otherwise.
                "backward_calls": [{"file": display_path(str(file), cwd), "line": line} for file, line in cause.facts.get("calls") or ()],
                # The job's torch.compile call that compiled the recompiled frame (explain.py `_compiled_by`):
                # {"file" (as `source`'s), "line", "via", "dynamic"}; null where none is known.
                "compiled_by": (None if not isinstance(by := cause.facts.get("compiled_by"), dict)
                                else {**by, "file": display_path(str(by.get("file") or ""), cwd)}),
            }
        )
    return {"alerts": alerts, "causes": causes}


class RecompilesJsonRenderer:
    """The versioned JSON document; `explanations` adds each mode's `explanation`."""

    def __init__(self, indent: int | None = 2) -> None:
        self.indent = indent

    def render(self, run: str, tables: list[RecompileTable], explanations: list[Explanation] | None = None, ranks: list[dict[str, Any]] | None = None) -> str:
        """`ranks`: for a multi-rank run, per mode which rank is shown and the ranks' analysis."""
        by_mode = {e.table.name: e for e in explanations or []}
        modes: dict[str, Any] = {}
        for table in tables:
            entry: dict[str, Any] = {
                "mode": table.mode,  # the key is the record's name: a repetition's ("eager.2") is its own
                "status": table.status,
                "steps": table.steps,
                "last_step": table.last_step,
                "skipped_lines": table.skipped_lines,
                "unknown_kinds": table.unknown_kinds,
                # What contradicts torch's own counters (record/integrity.py); where any does, the
                # counts are the record's, and `recompiles` is null: not known.
                "damaged": table.damage,
                "missing_artifacts": table.missing_artifacts,
                "counts": {
                    "recompiles": None if table.damage else len(table.recompiles),
                    # torch's count: one per capture, the initial compile's included
                    "ca_cache_misses": sum(1 for r in table.rows if r.source == SOURCE_CA),
                    "ca_recompiles": table.count(SOURCE_CA),
                    "dynamo_frame_recompiles": table.count(SOURCE_DYNAMO_FRAME),
                    "dynamo_ca_graph_recompiles": table.count(SOURCE_DYNAMO_CA_GRAPH),
                    "initial_compiles": len(table.initial),
                    "recompile_limit_hits": len(table.limit_hits),
                },
                "initial": [row_json(r, table.cwd) for r in table.initial],
                "recompiles": [row_json(r, table.cwd) for r in table.recompiles],
                "limit_hits": [
                    {**dataclasses.asdict(h), "file": display_path(h.file, table.cwd)} for h in table.limit_hits
                ],
            }
            from cagtool.report.recompiles.budget_words import budget_json, phases_json
            from cagtool.report.recompiles.unexpected import unexpected_json

            entry["phases"] = phases_json(table.phases, table.cwd)
            entry["budget"] = budget_json(table.budget, table.cwd)
            entry["unexpected_causes"] = unexpected_json(table.unexpected, table.cwd)
            if table.name in by_mode:
                entry["explanation"] = explanation_json(by_mode[table.name])
            modes[table.name] = entry
        document: dict[str, Any] = {"schema": JSON_SCHEMA, "schema_version": JSON_SCHEMA_VERSION, "run": run, "modes": modes}
        if ranks:
            document["ranks"] = ranks
        return json.dumps(document, indent=self.indent)
