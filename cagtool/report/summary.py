"""The end-of-run summary: the same text `cagtool run` prints and `cagtool summary` re-renders,
and its JSON form."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import msgspec
from rich.console import Console
from rich.text import Text

from cagtool.record.integrity import mode_damage
from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.manifest import cut_words
from cagtool.record.schema import (
    EVENT_TYPES,
    MISS_CHANGED_SHAPES,
    MISS_UNKNOWN,
    STEP_BOUNDARY_BACKWARD,
    STEP_BOUNDARY_COMPILED_OPTIMIZER,
    STEP_BOUNDARY_OPTIMIZER,
    CacheMissEvent,
    CAGraphEvent,
    DDPModelEvent,
    DynamoRecompileEvent,
    FindingEvent,
    GraphBreakEvent,
    OptimizerStepEvent,
    SourceRef,
)
from cagtool.report.changed_sizes import misses_with_earlier_values
from cagtool.report.figures.metrics import (
    RECAPTURED_AFTER_FAILURE,
    DynamoGraphCount,
    ModeMetrics,
    StepStats,
    cpu_wait,
    dynamo_graph_count,
    failed_capture_ids,
    follows_failed_capture,
    graph_break_reasons,
    interruption_words,
    mode_metrics,
    place_words,
)
from cagtool.report.findings import shown_findings
from cagtool.report.compiles.detail import detail_command
from cagtool.report.figures.compile_phases import phase_lines
from cagtool.report.known_failures import (SPARSE_IN_CA_GRAPH, explain as explain_failure, hint_caveat, in_ca_graph_compile,
                                          sparse_in_ca_graph)
from cagtool.report.recompiles.reads import INSIDE_CAPTURES_WORDS, forward_step, steps_place, torch_frames_in_captures
from cagtool.report.recompiles.table import guard_text
from cagtool.report.ranks.analysis import RankFocus, analysis_json, analyze_ranks, run_dir_of, run_for_rank
from cagtool.report.ranks.render import render_ranks
from cagtool.report.text.safe_text import shown_command
from cagtool.torch_text import GUARD_GRAD_MODE, compile_frame, guard_kind

# The event kinds the summary and the end-of-run comparison read (the loader counts the others
# without building them): every kind but the optimizer steps.
SUMMARY_KINDS = frozenset(EVENT_TYPES) - {OptimizerStepEvent.kind}

# A mode whose threads waited for a CPU this share of their runnable time or more was slowed by its
# neighbours enough to say so beside its step time (under it, a few percent is any shared machine).
BUSY_WAIT = 0.10
SUMMARY_SCHEMA = "cagtool-summary"
SUMMARY_SCHEMA_VERSION = 1


def ca_compiler_text(record: ModeRecord) -> str:
    """What compiled the mode's CA graphs (this process's and its ranks'): cagtool's --backend, or
    what the script's own CA setup compiled with where cagtool kept it (CAGraphEvent.compiler)."""
    records = {id(r): r for r in (record, *record.ranks().values())}.values()
    scripts: dict[str, None] = {}
    ours = False
    for rec in records:
        for graph in rec.of(CAGraphEvent):
            who, _, backend = graph.compiler.partition(":")
            if who == "script":
                scripts.setdefault(backend or "its own compiler")
            else:
                ours = True
    if not scripts:
        return f"CA backend {record.manifest.backend}"
    own = f"CA compiler {', '.join(scripts)}, the script's own"
    if ours:
        return f"{own}; cagtool's CA backend {record.manifest.backend} for the other graphs"
    return f"{own}; cagtool's --backend {record.manifest.backend} unused"


def _where(src: SourceRef | None) -> str:
    if src is None:
        return ""
    return f"{os.path.basename(src.file)}:{src.line}"


def _duration(manifest: Any) -> str:
    """How long the mode ran: its own figure, else (a record its process did not close) the span
    between its start and end times; "?" without them."""
    if manifest.duration_s:
        return f"{manifest.duration_s:.1f} s"
    from datetime import datetime

    try:
        span = (datetime.fromisoformat(manifest.ended_at) - datetime.fromisoformat(manifest.started_at)).total_seconds()
    except (TypeError, ValueError):
        return "?"
    return f"{span:.0f} s (from its start and end times)" if span >= 0 else "?"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.0f} MiB"


# The nodes whose changed sizes one miss's line names, in order; the others are counted.
MISS_NODES_SHOWN = 6


def miss_text(miss: CacheMissEvent) -> str:
    if miss.miss_kind == "new_node":
        text = f"new node {miss.node} (NodeCall {miss.node_call})"
        if miss.key_size is not None:
            text += f", key size {miss.key_size}"
        if miss.previous_key_sizes:
            text += f", previous key sizes {miss.previous_key_sizes}"
        return text + (" (inferred from the graph diff)" if miss.inferred else "")
    if miss.miss_kind == "changed_shapes":
        groups: dict[tuple[str | None, int | None], list[str]] = {}
        for size in miss.changed_sizes:
            # `0=32->4`: the earlier value too, when the previous graph held it (`0=4` otherwise).
            before = f"{size.previous}->" if size.previous is not None and size.value is not None else ""
            groups.setdefault((size.node, size.node_call), []).append(f"{size.index}" + (f"={before}{size.value}" if size.value is not None else ""))
        parts = [
            f"sizes[{', '.join(items)}]" + (f" of {node} (NodeCall {call})" if node else "")
            for (node, call), items in groups.items()
        ]
        if len(parts) > MISS_NODES_SHOWN:
            # A batch size in every node of a large model: one line, not 10,000 characters (244 sizes
            # of a VGG-in-the-loss job); `recompiles --explain` lists them with their values.
            parts = parts[:MISS_NODES_SHOWN] + [f"... and the sizes of {len(parts) - MISS_NODES_SHOWN} more nodes (cagtool recompiles --explain)"]
        inferred = " (inferred from the graph diff)" if miss.inferred else ""
        # torch's own numbers, in its words: N changed tensor shapes (total of M): M is torch's
        # count of the dynamic sizes it compared (all_dyn_sizes_len), not the graph's size inputs.
        in_all = f" (torch: total of {miss.dynamic_sizes})" if miss.dynamic_sizes is not None else ""
        return f"{plural(miss.changed_count, 'changed size')}{in_all}: " + "; ".join(parts) + inferred
    return miss.message


def capture_text(miss: CacheMissEvent, failed: frozenset[int]) -> str:
    """A capture's row: why torch captured it (miss_text), and whether the capture raised; a graph
    captured again after its capture raised has no reason from torch and is named for what it is."""
    recaptured = miss.miss_kind == MISS_UNKNOWN and follows_failed_capture(miss.ca_id, failed)
    text = f"{RECAPTURED_AFTER_FAILURE} (!{miss.ca_id - 1}; torch gives no reason for it)" if recaptured else miss_text(miss)
    return text + ("; this capture raised (its error: the findings below)" if miss.ca_id in failed else "")


def graph_size_text(graph: CAGraphEvent | None) -> str:
    """The size of the graph a capture made, and its capture time ("" without a graph): a backward
    of tens of thousands of nodes (an RNN cell unrolled in Python) takes minutes to capture and compile."""
    if graph is None:
        return ""
    return f" [{graph.node_count:,} graph nodes from {len(graph.autograd_nodes):,} autograd nodes, captured in {graph.capture_s:.2f} s]"


# ModeMetrics.ca_captured_nothing, said under the mode's CA graphs line.
CA_CAPTURED_NOTHING = ("compiled autograd captured none of its {calls}: each ran without it, as in the aot mode (a backward "
                       "inside a torch.func transform such as grad or vjp, or under compiled_autograd._disable(), is not "
                       "captured), so this mode's figures are not compiled autograd's")


# ModeMetrics.ca_captured_part, said under the mode's CA graphs line.
CA_CAPTURED_PART = ("compiled autograd was off for {off} of its {calls}: they ran without it, as in the aot mode (a backward "
                    "inside a torch.func transform such as grad or vjp, which torch runs under compiled_autograd._disable(), "
                    "or one after torch._dynamo.reset()), so this mode's steps are partly the job without compiled autograd")


# Graph-break reasons a mode's summary lists, one line each (a job rarely breaks for more).
GRAPH_BREAK_REASONS_SHOWN = 8


def dynamo_graph_words(counted: DynamoGraphCount) -> str:
    """"64 graphs (torch's unique_graphs) = 2 forward + 2 backward (compiled-autograd graphs) + 60 pieces
    of that code split off by graph breaks": the parts add up to the total, or what does not is said."""
    whose = "torch's unique_graphs" if counted.from_torch else "cagtool's record; torch's counters were not saved"
    words = {"forward": lambda n: f"{n} forward",
             "ddp_hook": lambda n: f"{n} of DDP's all-reduce hook (compiled in the backward)",
             "ca": lambda n: f"{n} backward (compiled-autograd graph{'s' if n != 1 else ''})",
             "ca_pieces": lambda n: f"{n} piece{'s' if n != 1 else ''} of that code split off by graph breaks",
             "ca_recompiled": lambda n: f"{n} recompile{'s' if n != 1 else ''} of that code",
             "unattributed": lambda n: f"{n} not attributed (cagtool's record names no graph for {'them' if n != 1 else 'it'})"}
    parts = counted.parts()
    said = f"{plural(counted.total, 'graph')} ({whose}) = {' + '.join(words[part](n) for part, n in parts if n >= 0)}"
    more = next((-n for part, n in parts if n < 0), 0)
    if more:
        said += f" (cagtool's record names {more} more than torch counted)"
    return said


def left_out_words(st: StepStats) -> str:
    """`; 2 compile-affected steps and 1 step holding a switch to eval mode left out`: the steps the steady
    figures leave out, by why ("" where none)."""
    interrupted = len(st.interrupted)
    compiled = len(st.excluded) - interrupted
    parts = ([plural(compiled, "compile-affected step")] if compiled else []) + (
        [f"{plural(interrupted, 'step')} holding {interruption_words(st.interruptions)}"] if interrupted else [])
    return f"; {' and '.join(parts)} left out" if parts else ""


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def ca_graph_breakdown(m: ModeMetrics) -> str:
    """Why each CA graph was captured, in torch's words: the initial compile, a cache miss for a
    new autograd node (the structure changed), a recompile for changed sizes."""
    parts = ["1 initial"]
    if m.ca_new_node_misses:
        parts.append(f"{m.ca_new_node_misses} for a new autograd node")
    if m.ca_shape_recompiles:
        parts.append(f"{plural(m.ca_shape_recompiles, 'recompile')} for changed sizes")
    # A capture that raised made no graph: the parts then count captures (ca_cache_misses), not graphs.
    captures = max(m.ca_graphs, m.ca_cache_misses)
    other = max(captures - 1, 0) - m.ca_new_node_misses - m.ca_shape_recompiles
    # torch gives no reason for a graph captured again after its capture raised: it is named for what it is
    recaptured = min(m.ca_recaptures_after_failure, max(other, 0))
    if recaptured:
        parts.append(f"{recaptured} {RECAPTURED_AFTER_FAILURE}")
    if other - recaptured > 0:
        parts.append(f"{other - recaptured} for a reason torch did not log")
    if captures > m.ca_graphs:
        return f"{plural(captures, 'capture')}: " + ", ".join(parts) + f"; {captures - m.ca_graphs} raised before a graph"
    return ", ".join(parts)


def ddp_without_ca_note(record: ModeRecord, m: ModeMetrics) -> str | None:
    """What a mode without compiled autograd (aot, eager) ran when the script chose DDP's Python
    reducer itself: neither the user's CA job nor the job they run without CA."""
    if record.mode == "ca":
        return None
    python = [e for rec in (record, *record.processes.values()) for e in rec.of(DDPModelEvent) if e.reducer == "python"]
    if not python:
        return None
    chosen = python[0].script_optimize_ddp or python[0].optimize_ddp
    compiled = ""
    if m.ddp_hook_graphs:
        compiled = f" (Dynamo compiled that hook: {plural(m.ddp_hook_graphs, 'graph')}, {plural(m.ddp_hook_recompiles, 'recompile')})"
    return (
        f"the script chose DDP's Python reducer (torch._dynamo.config.optimize_ddp = {chosen!r}): without compiled "
        f"autograd DDP then all-reduces each gradient in a post-accumulate-grad hook run by the eager backward{compiled}. "
        f"So this {record.mode} run is neither the CA job (no compiled autograd) nor the job as it runs without CA "
        "(DDP's C++ reducer, bucketed all-reduces, nothing for Dynamo to compile in the backward)"
    )


def _refused_at_limit(record: ModeRecord) -> dict[str, str]:
    """The recompiles Dynamo refused at a recompile limit (torch logs their reasons before it checks
    the limit): compile id -> "the recompile limit of 8"."""
    from cagtool.record.schema import DynamoCompileEvent
    from cagtool.report.recompiles.reads import limit_hits

    return {hit.compile_id: f"the {hit.limit_type.replace('_', ' ')}" + (f" of {hit.limit_value}" if hit.limit_value is not None else "")
            for hit in limit_hits(record, record.of(DynamoCompileEvent)) if hit.compile_id}


def ca_recompiles_text(m: ModeMetrics) -> str:
    """The figure `gate --max-recompiles ca:N` holds, with what it leaves out."""
    text = f"CA recompiles: {m.ca_recompiles}"
    if m.ca_grad_warmup_misses or m.ca_other_call_captures:
        # `recompiles` lists every miss: the same total is said here, with what the gate leaves out.
        left = []
        if m.ca_grad_warmup_misses:
            left.append("the second graph, AccumulateGrad's .grad None -> defined warm-up (captured once)")
        if m.ca_other_call_captures:
            left.append(f"the first graph of {m.ca_other_call_captures} other backward call{'s' if m.ca_other_call_captures != 1 else ''} "
                        "of a step, each captured once")
        text += (f" counted ({m.ca_recompiles + m.ca_grad_warmup_misses + m.ca_other_call_captures} in all, as `cagtool recompiles` "
                 f"lists them: not counted, {'; '.join(left)})")
    return text


def steps_text(m: ModeMetrics) -> str:
    """What the step count counts: "3 steps (optimizer steps), 4 backward calls per step (12 in all)"."""
    text = f"{m.steps} step{'s' if m.steps != 1 else ''}"
    if m.steps_lost_s:
        # What the process did in its last moments is not known: say so rather than state a count.
        alone = (f"; where one optimizer had stepped alone while others were waited for, those of up to its last {m.steps_lost_optimizer_steps} "
                 "steps" if m.steps_lost_optimizer_steps else "")
        text += f" recorded (the process ended without closing its record: the per-step lines of its last {m.steps_lost_s:g} s, if any, were lost with it{alone})"
    if m.step_boundary == STEP_BOUNDARY_BACKWARD:
        text += " (no optimizer: one per backward call)"
    elif m.step_boundary in (STEP_BOUNDARY_OPTIMIZER, STEP_BOUNDARY_COMPILED_OPTIMIZER):
        # Inside compiled code no hook of cagtool's runs: the step is seen ending where the
        # parameters changed (docs/torch-internals.md, "An optimizer step inside a compiled graph").
        what = ("optimizer steps inside compiled code, seen where the optimizer's state changed" if m.step_boundary == STEP_BOUNDARY_COMPILED_OPTIMIZER
                # several optimizers stepping in one step (a GAN): a step is an iteration of them all (record/schema.py)
                else f"training iterations: {m.optimizer_steps} optimizer steps in all" if m.optimizer_steps > m.steps
                else "optimizer steps")
        per = m.backward_calls_per_step
        if per == (1,):
            text += f" ({what}, one backward call each)"
        elif len(per) == 1:
            text += f" ({what}), {per[0]} backward calls per step ({m.backward_calls - m.backward_calls_after_last_step} in all)"
        elif per:
            text += f" ({what}), {per[0]} to {per[-1]} backward calls per step ({m.backward_calls - m.backward_calls_after_last_step} in all)"
        else:
            text += f" ({what})"
        if m.skipped_steps:
            text += f", {m.skipped_steps} whose optimizer step the grad scaler skipped (inf/NaN gradients)"
        if m.backward_calls_after_last_step:
            text += f", {m.backward_calls_after_last_step} backward call(s) after the last step ended" + (
                " (not every optimizer stepped after them)" if m.optimizer_steps > m.steps else "")
    elif m.backward_calls and not m.steps:
        text += f" ({m.backward_calls} backward calls, no optimizer step {'recorded' if m.steps_lost_s else 'ended'})"
    return text


def cagtool_memory_text(memory: Any) -> str:
    """What cagtool itself allocated (the manifest's options["cagtool_memory"]), beside the job's
    peaks, which are read before cagtool's end-of-run work: "" for records without it."""
    if not isinstance(memory, dict):
        return ""

    def size(n: int) -> str:
        return f"{n / 2**20:.1f} MiB" if n >= 2**20 else (f"{n / 2**10:.0f} KiB" if n else "0")

    parts = []
    pinned = memory.get("pinned_host_bytes")
    if isinstance(pinned, int) and pinned:
        parts.append(f"{size(pinned)} of page-locked host memory for the CUDA losses")
    if memory.get("losses_held_on_device"):
        parts.append(f"{memory['losses_held_on_device']} loss tensors held on the device to the end")
    added = [f"{what} +{size(n)}" for what, n in (("RSS", memory.get("end_of_run_peak_rss_added_bytes")),
                                                  ("CUDA", memory.get("end_of_run_peak_device_added_bytes"))) if isinstance(n, int)]
    if added:
        parts.append(f"its end-of-run work (final norms, reading losses) raised the peaks by {', '.join(added)} (the peaks above are the job's, read before it)")
    return "cagtool's own memory: " + "; ".join(parts) if parts else ""


def mode_summary_json(record: ModeRecord, whole: ModeRecord | None = None, rank: int | None = None) -> dict[str, Any]:
    """`record`'s figures. For one rank's view (`rank`), `whole` is the mode's record with every
    rank: the ranks' analysis is of the whole job (every rank, where they part), never of the one
    rank's record alone, which would read as every other rank missing."""
    from cagtool.report.recompiles.budget import budget_of
    from cagtool.report.recompiles.budget_words import budget_json, phases_json
    from cagtool.report.recompiles.phases import mode_phases
    from cagtool.report.recompiles.unexpected import unexpected_causes, unexpected_json

    metrics = mode_metrics(record)
    misses = misses_with_earlier_values(record)
    graphs = record.of(CAGraphEvent)
    theirs_at = torch_frames_in_captures(record).break_places
    body: dict[str, Any] = {
        "mode": record.mode,
        "status": record.manifest.status,
        "exit_code": record.manifest.exit_code,
        "exception": msgspec.structs.asdict(record.manifest.exception) if record.manifest.exception else None,
        "ca_graphs": len(graphs),
        "autograd_captures": metrics.autograd_captures,
        # CA cache misses in torch's words, and what `gate --max-recompiles ca:N` counts (docs/ci.md)
        "ca_new_node_misses": metrics.ca_new_node_misses,
        "ca_shape_recompiles": metrics.ca_shape_recompiles,
        "ca_grad_warmup_misses": metrics.ca_grad_warmup_misses,
        "ca_recompiles": metrics.ca_recompiles,
        "cache_misses": [
            {
                "ca_id": m.ca_id,
                "compile_id": m.compile_id,
                "kind": m.miss_kind,
                "node": m.node,
                "node_call": m.node_call,
                "key_size": m.key_size,
                "previous_key_sizes": m.previous_key_sizes,
                "changed_sizes": [msgspec.structs.asdict(s) for s in m.changed_sizes],
                # torch's N and M in "N changed tensor shapes (total of M)"
                "changed_count": m.changed_count if m.miss_kind == MISS_CHANGED_SHAPES else None,
                "dynamic_sizes": m.dynamic_sizes,
                "step": m.step,
                "source": msgspec.structs.asdict(m.source) if m.source else None,
                "message": m.message,
                "inferred": m.inferred,
            }
            for m in misses
        ],
        "unique_graphs": metrics.unique_graphs,
        # What makes torch's count where the forward and backward counts do not (a compiled-autograd
        # graph's code split by graph breaks, or recompiled): {part: graphs}, summing to the total
        # (figures/metrics.py DynamoGraphCount.parts); None where they do.
        "unique_graphs_parts": dict(counted.parts()) if (counted := dynamo_graph_count(metrics)) is not None else None,
        "forward_graphs": metrics.forward_graphs,
        # DDP's all-reduce hook compiled by Dynamo in an eager backward (not forward graphs)
        "ddp_hook_graphs": metrics.ddp_hook_graphs,
        "ddp_hook_recompiles": metrics.ddp_hook_recompiles,
        "ddp_reducer_note": ddp_without_ca_note(record, metrics),
        "backward_graphs": metrics.backward_graphs,
        "graph_breaks": metrics.graph_breaks,
        "graph_breaks_counted_by": "torch" if metrics.graph_breaks_from_torch else "distinct_sites",
        # breaks Dynamo could not resume after (the rest of the function ran eagerly): not in torch's graph_breaks
        "unresumable_graph_breaks": metrics.unresumable_breaks,
        # inside_capture: every break logged at the site was in a frame of torch's compiled inside
        # compiled autograd's captures (reads.py torch_frames_in_captures), nothing of the script's.
        "graph_break_sites": [asdict(site) | {"inside_capture": (site.file, site.line) in theirs_at} for site in metrics.graph_break_sites],
        "dynamo_recompiles": metrics.dynamo_recompiles,
        "steps": metrics.steps,
        "steps_lost_with_process_s": metrics.steps_lost_s,
        "optimizer_steps_lost_with_process": metrics.steps_lost_optimizer_steps,
        "step_boundary": metrics.step_boundary,
        "backward_calls": metrics.backward_calls,
        "backward_calls_per_step": list(metrics.backward_calls_per_step),
        "backward_calls_after_last_step": metrics.backward_calls_after_last_step,
        "compile_time_s": metrics.compile_time_s,
        "compile_phases_s": metrics.compile_phases_s,
        "step_time": asdict(metrics.step_time) if metrics.step_time else None,
        # the phase of every compile and the recompile budget (report/recompiles/phases.py, budget.py)
        "phases": phases_json(mode_phases(record), record.manifest.cwd),
        "recompile_budget": budget_json(budget_of(record), record.manifest.cwd),
        "unexpected_causes": unexpected_json(unexpected_causes(record), record.manifest.cwd),
        "peak_rss_bytes": metrics.peak_rss_bytes,
        "peak_device_memory_bytes": metrics.peak_device_memory_bytes,
        "cagtool_memory": record.manifest.options.get("cagtool_memory"),
        "findings": [{"code": f.code, "message": f.message, "step": f.step} for f in record.of(FindingEvent)],
        "skipped_lines": record.skipped_lines,
        # A record built by `cagtool import`: its source logs, what was skipped or inferred, and
        # `not_in_log` (what it cannot hold); None for recorded runs.
        "imported": record.manifest.imported,
        "recording_stopped": record.manifest.recording_stopped,
        "trace_stopped": record.manifest.trace_stopped,
    }
    # Multi-process jobs only (single-process JSON is unchanged): each rank's figures, the totals
    # and what the ranks disagree on.
    analysis = analyze_ranks(whole if whole is not None else record)
    if analysis is not None:
        body["ranks"] = analysis_json(analysis) if rank is None else RankFocus(analysis, rank).to_json()
    return body


def summary_json(run: RunRecord, rank: int | None = None) -> dict[str, Any]:
    """With `rank`, the figures are that rank's own (ranks.run_for_rank; UnreadableInput for a
    rank the run does not have) and `ranks` is the whole job's analysis, with `shown_rank`."""
    view = run_for_rank(run, rank)
    modes = {name: mode_summary_json(rec, run.modes[name], rank) for name, rec in view.modes.items()}
    # The top-level figures are those of the most informative mode the run asked for; when that
    # mode left no record they are null (never another mode's figures under its name).
    main = run.default_mode_name()
    body = modes.get(main or "", {})
    extra: dict[str, Any] = {}
    if rank is not None:
        extra["rank"] = rank
    if "ranks" in body:
        # The top-level figures stay the main process's (the launcher of a spawned job), or the
        # rank's asked for; each rank's, the totals and the findings are here.
        extra["ranks"] = body["ranks"]
    return {
        "schema": SUMMARY_SCHEMA,
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "run": str(run.path),
        "target": run.meta.target,
        "argv": run.meta.target_argv,
        "versions": run.meta.versions,
        "exit_code": run.meta.exit_code,
        "status": run.meta.status,  # the run's: "interrupted" when it was stopped, whatever its modes' records say
        "not_run": run.not_run(),  # the modes a stopped run never started
        "mode": main,
        "mode_recorded": main in modes,
        **{k: body.get(k) for k in ("ca_graphs", "cache_misses", "unique_graphs", "graph_breaks", "dynamo_recompiles", "steps")},
        "modes": modes,
        **extra,
    }


def render_mode(console: Console, record: ModeRecord, metrics: ModeMetrics | None = None, label: str | None = None) -> None:
    m = metrics or mode_metrics(record)
    manifest = record.manifest
    run_dir = run_dir_of(record)
    analysis = analyze_ranks(record) if label is None else None
    if analysis is not None:
        # A launcher (torchrun, mp.spawn's parent) trains nothing itself: its 0 steps and graphs are
        # not the job's, which its ranks' table below holds.
        launcher = record.rank is None and not m.steps and bool(analysis.rows)
        label = (f"{record.path.name} (main process: the launcher, which trains nothing itself; its ranks are below)" if launcher
                 else f"{record.path.name} (main process{'' if record.rank is None else f', rank {record.rank}'})")
    state = manifest.status if manifest.exit_code in (0, None) else f"{manifest.status}, exit {manifest.exit_code}"
    duration = _duration(manifest)
    stopped = {"steps": " (stopped by --steps)", "max_time": " (stopped by --max-time)"}.get(str(manifest.options.get("stopped_by")), "")
    imported = manifest.imported
    if imported is not None:
        # A log holds what torch compiled, not how the job ran: say what is missing, invent nothing.
        files = imported.get("files") or []
        rank = f", rank {record.rank}" if record.rank is not None else ""
        console.print(Text.assemble((f"mode {label or record.path.name}", "bold"), f": imported from {len(files)} TORCH_TRACE log(s){rank}, spanning {duration}"))
        console.print(f"  not in a log: {', '.join(imported.get('not_in_log') or [])}")
    else:
        # --backend compiles compiled-autograd graphs only: eager and aot modes never use it.
        backend = f" ({ca_compiler_text(record)})" if record.mode == "ca" else ""
        console.print(Text.assemble((f"mode {label or record.path.name}", "bold"), f": {state} in {duration}, {steps_text(m)}{stopped}{backend}"))
    cut = cut_words(manifest.truncated, "its manifest")
    if cut:
        console.print(Text.assemble("  ", ("note:", "yellow"), f" {cut}"), overflow="fold")
    if manifest.exception:
        first_line = manifest.exception.message.splitlines()[0] if manifest.exception.message else ""
        console.print(Text.assemble("  ", ("exception:", "red"), f" {manifest.exception.type}: {first_line}"))
        meaning = explain_failure(manifest.exception)
        if sparse_in_ca_graph(in_ca_graph_compile(manifest.exception), (b.reason for b in record.of(GraphBreakEvent))):
            meaning = meaning or SPARSE_IN_CA_GRAPH[0].upper() + SPARSE_IN_CA_GRAPH[1:]
        if in_ca_graph_compile(manifest.exception):
            # The message's "user code" is torch's generated graph, not the script: say whose it is.
            captured = record.of(CAGraphEvent)
            which = f"compiled-autograd graph {captured[-1].compile_id}" if captured else "a compiled-autograd graph"
            console.print(f"  raised: while Dynamo compiled {which} (the backward compiled autograd captured; the \"user code\" "
                          "torch names, <eval_with_key>, is that graph's generated code): a failure in torch's compile of this "
                          "backward, not at a line of your script; TORCHDYNAMO_VERBOSE=1 shows torch's own stack", markup=False, overflow="fold")
        if meaning:
            console.print(f"  what it means: {meaning}", markup=False, overflow="fold")
    graphs = record.of(CAGraphEvent)
    misses = record.of(CacheMissEvent)
    if any(m.changed_sizes for m in misses):
        misses = misses_with_earlier_values(record)  # the values before the change, from the graphs
    if graphs or record.mode == "ca":
        torch_says = f" (torch counted {plural(m.autograd_captures, 'capture')})" if m.autograd_captures is not None else ""
        console.print(f"  CA graphs: {len(graphs)} ({ca_graph_breakdown(m) if graphs else 'none'}){torch_says}; {ca_recompiles_text(m)}")
        if m.ca_captured_nothing:
            console.print(f"  {CA_CAPTURED_NOTHING.format(calls=plural(m.backward_calls, 'backward call'))}", markup=False, overflow="fold")
        elif m.ca_captured_part:
            console.print(f"  {CA_CAPTURED_PART.format(off=m.backward_calls_outside_ca, calls=plural(m.backward_calls, 'backward call'))}",
                          markup=False, overflow="fold")
        failed = failed_capture_ids(record.of(FindingEvent)) if record.kind_counts.get(FindingEvent.kind) else frozenset()
        by_id = {g.ca_id: g for g in graphs}
        for miss in misses[:12]:
            step = f"step {miss.step}" if miss.step is not None else "step ?"
            where = f"  ({_where(miss.source)})" if miss.source else ""
            console.print(f"    {step:>8}  {miss.compile_id:>4}  {capture_text(miss, failed)}{graph_size_text(by_id.get(miss.ca_id))}{where}",
                          overflow="fold")
        if len(misses) > 12:
            console.print(f"    ... {len(misses) - 12} more: cagtool recompiles {run_dir}")
    # The count is torch's own counter; the log's records are only used to name the places.
    sites = m.graph_break_sites
    # eager runs with Dynamo disabled: nothing to count, so no caveat about how it was counted.
    exact = m.graph_breaks_from_torch or record.mode == "eager"
    counted_by = "" if exact else " (one per compile and site: torch's counters were not saved)"
    # Sites are (place, reason) pairs: one line can break for two reasons (`print(t.item())`).
    # Breaks Dynamo could not resume after are not in torch's count: said after it, with their sites.
    places = {(s.file, s.line) for s in sites if not s.unresumable}
    stopped = {(s.file, s.line) for s in sites if s.unresumable}
    reasons = graph_break_reasons(sites)
    at = f" at {len(places)} site{'s' if len(places) != 1 else ''}" if places else ""
    if len({r.reason for r in reasons if set(r.places) - set(r.unresumable)}) > 1:
        at += f" for {len({r.reason for r in reasons if set(r.places) - set(r.unresumable)})} reasons"
    # A site is a (place, reason) pair: a break Dynamo could not resume after, logged at a place and
    # for a reason it also broke and resumed at (GPT-2's logger call in transformers), is in that site.
    stopped_at = (f"at {len(stopped)} site{'s' if len(stopped) != 1 else ''}" if stopped else
                  "at the same site" if len(places) == 1 else "at sites among those")
    unresumable = (f" and {plural(m.unresumable_breaks, 'break')} it could not resume after {stopped_at} (the rest of the "
                   "function ran eagerly; torch's graph-break count leaves them out)") if m.unresumable_breaks else ""
    if places and not m.graph_breaks:
        # torch counted none, yet its log names a break (a data-dependent branch that made Dynamo
        # restart the frame's analysis): torch's count stands, and the log's sites are said as such.
        at = f" (torch's count; its log names {len(places)} site{'s' if len(places) != 1 else ''})"
    hook = f", {plural(m.ddp_hook_graphs, 'graph')} of DDP's all-reduce hook (compiled in the backward)" if m.ddp_hook_graphs else ""
    hook_recompiles = f" ({m.ddp_hook_recompiles} of DDP's hook)" if m.ddp_hook_recompiles else ""
    counted = dynamo_graph_count(m)
    if counted is not None:
        # The forward and backward counts do not make torch's: its count, and where each graph comes from.
        aot = f", {plural(m.aot_backward_graphs, 'AOT backward graph')}" if m.aot_backward_graphs and not m.ca_graphs and m.mode != "ca" else ""
        graphs = f"{dynamo_graph_words(counted)}{aot};"
    else:
        # Under compiled autograd the backward graphs are its captures; the AOT backward graphs of
        # the compiled forwards, which it inlines, are counted apart.
        backward = (f"{plural(m.backward_graphs, 'CA graph')}" + (f", {plural(m.aot_backward_graphs, 'AOT backward graph')}" if m.aot_backward_graphs else "")
                    if m.mode == "ca" or m.ca_graphs else plural(m.backward_graphs, "backward graph"))
        graphs = f"{plural(m.forward_graphs, 'forward graph')}{hook}, {backward},"
    console.print(
        f"  Dynamo: {graphs} "
        f"{plural(m.graph_breaks, 'graph break')}{at}{counted_by}{unresumable}, {plural(m.dynamo_recompiles, 'recompile')}{hook_recompiles}"
    )
    # Every reason, with its count (torch's, per reason: metrics.graph_break_sites) and its lines;
    # the count before the reason, which the terminal's width may cut.
    # Where the reasons' counts do not make torch's total (a log that lost records), each is what it
    # is: the compiles the log shows it in.
    adds_up = sum(r.breaks for r in reasons) == m.graph_breaks + m.unresumable_breaks
    in_captures = torch_frames_in_captures(record)
    for reason in reasons[:GRAPH_BREAK_REASONS_SHOWN]:
        gb = f"[{reason.gb_id}] " if reason.gb_id else ""
        where = f"site{'s' if len(reason.places) > 1 else ''} {place_words(reason.places)}"
        count = plural(reason.breaks, "break") if adds_up else f"logged in {plural(reason.breaks, 'compile')}"
        # The count and reason come first: the terminal's width may cut what follows.
        theirs = f" [torch's frames {INSIDE_CAPTURES_WORDS}]" if set(reason.places) <= in_captures.break_places else ""
        console.print(f"    graph break {where} ({count}){theirs}: {gb}{reason.reason}", overflow="ellipsis", no_wrap=True, markup=False)
        if reason.fell_back:
            # torch's count may say 0 here: the frame was given up whole, not split.
            console.print(f"      Dynamo gave up on the function holding {place_words(reason.fell_back)} and ran it eagerly "
                          "(torch: \"Skipping the function and falling back to eager\"): none of that function is compiled",
                          overflow="fold", markup=False, highlight=False)
        if reason.unresumable:
            console.print(f"      Dynamo could not resume after the break at {place_words(reason.unresumable)}: it compiled the function up "
                          "to it and ran the rest eagerly (torch: \"cannot resume from ... skipping the rest of the function\"); "
                          "nothing after it is compiled", overflow="fold", markup=False, highlight=False)
        if reason.advice:
            # Torch's own advice for this break, on a line of its own: the line above may be cut.
            console.print(f"      torch's hint: {reason.advice}", overflow="fold", markup=False, highlight=False)
            if (caveat := hint_caveat(reason.advice)) is not None:
                console.print(f"      cagtool: {caveat}", overflow="fold", markup=False, highlight=False)
        if (known := _library_fix(record, reason.places)) is not None:
            console.print(f"      what removes it: {known}", overflow="fold", markup=False, highlight=False)
    if len(reasons) > GRAPH_BREAK_REASONS_SHOWN:
        console.print(f"    ... {len(reasons) - GRAPH_BREAK_REASONS_SHOWN} more reasons: cagtool summary --format json {run_dir}")
    dynamo_recompiles = record.of(DynamoRecompileEvent)
    refused = _refused_at_limit(record) if dynamo_recompiles else {}
    # An evaluation's recompile (grad off) came between the steps, as the explanation says it.
    from cagtool.report.recompiles.reads import EVALUATION_FUNCTION
    from cagtool.report.recompiles.unexpected import compiled_grad_off, unexpected_causes

    between = {c.compile_id for c in unexpected_causes(record) if c.between_steps} if dynamo_recompiles else set()
    # ... and one that failed another guard first where its compile was for grad off (an evaluation's
    # smaller last batch: `16 <= x.size()[0]`, then the training entry's grad mode), as the table says.
    between |= {rec.compile_id for rec in dynamo_recompiles[:3] if rec.compile_id not in between
                and (any(guard_kind(guard_text(r)) == GUARD_GRAD_MODE for r in rec.reasons)
                     or (not rec.is_ca_graph and rec.source is not None and EVALUATION_FUNCTION.search(rec.source.function or "")))
                and compiled_grad_off(record, rec.compile_id)}
    for rec in dynamo_recompiles[:3]:
        # Torch starts each reason with the id of the cache entry it failed for (`0/0: `), which
        # reads as a second compile id; the recompile's own id is the one shown, then its step.
        # Each reason once: torch lists one per cache entry that failed, often the same words.
        reasons = "; ".join(dict.fromkeys(guard_text(r) for r in rec.reasons if r.strip())) or "(no reason recorded)"
        step = rec.step if rec.is_ca_graph else forward_step(rec.step, record.mode)
        at = "" if step is None else f" {steps_place([step], True)}" if rec.compile_id in between else f" at step {step}"
        where = f"  ({_where(rec.source)})" if rec.source else ""
        limit = f" [refused at {refused[rec.compile_id]}, compiling nothing]" if rec.compile_id in refused else ""
        if compile_frame(rec.compile_id) in in_captures.frames:
            limit += f" [torch's frame {INSIDE_CAPTURES_WORDS}]"
        console.print(f"    recompile {rec.compile_id}{at}{limit}: {reasons[:150]}{where}", overflow="ellipsis", no_wrap=True, markup=False)
    if len(dynamo_recompiles) > 3:
        # The count above holds every recompile torch logged, a refused one too: what is not listed is said.
        rest = dynamo_recompiles[3:]
        over = [r for r in rest if r.compile_id in refused]
        limits = sorted({refused[r.compile_id] for r in over})
        ids = ", ".join(f"{r.compile_id} at step {r.step if r.is_ca_graph else forward_step(r.step, record.mode)}" for r in over[:3])
        ids += f", ... ({len(over) - 3} more)" if len(over) > 3 else ""
        said = ("" if not over else f", refused at {' / '.join(limits)} ({ids}), compiling nothing" if len(over) == len(rest)
                else f", {len(over)} of them refused at {' / '.join(limits)} ({ids}), compiling nothing")
        console.print(f"    ... {len(rest)} more{said}: cagtool recompiles {run_dir}", overflow="fold", markup=False, highlight=False)
    from cagtool.report.recompiles.budget import budget_of
    from cagtool.report.recompiles.budget_words import not_steady_text, summary_phase_lines

    for line in summary_phase_lines(record):
        console.print(f"    {line}", overflow="fold", markup=False)
    note = ddp_without_ca_note(record, m)
    if note:
        console.print(Text.assemble("  ", ("note:", "yellow"), f" {note}"))
    for line in phase_lines(m.compile_phases_s, m.compile_time_s):
        console.print(f"  {line}", markup=False, highlight=False)
    details = record.compile_artifacts()
    if details:
        ids = list(details)
        recompiled = [r.compile_id for r in record.of(DynamoRecompileEvent) if r.compile_id in details]
        shown = ", ".join(ids[:6]) + (f", ... ({len(ids)} in all)" if len(ids) > 6 else "")
        command = detail_command(str(run_dir), (recompiled or ids)[0], None if record.mode == "ca" else record.mode)
        console.print(f"  per compile (stack, graphs, guards): {command}  (ids: {shown})", markup=False, highlight=False, soft_wrap=True)
    st = m.step_time
    if st and st.median_s is not None:
        excluded = left_out_words(st)
        clock = " (device time, CUDA events)" if st.clock == "device" else ""
        unsteady = not_steady_text(budget_of(record))
        if unsteady is not None:  # the steps between compiles of a job still compiling are no steady figure
            console.print(f"  step time{clock}: {unsteady}; between compiles: median {_ms(st.median_s)} over {plural(st.count, 'step')}{excluded}")
        else:
            # One steady step has no spread to show (its p10 and p90 are itself).
            spread = f" (p10 {_ms(st.p10_s)}, p90 {_ms(st.p90_s)})" if st.count > 1 else ""
            console.print(f"  step time{clock}: median {_ms(st.median_s)}{spread} over {plural(st.count, 'steady step')}{excluded}")
        wait = cpu_wait(record)
        if wait is not None and wait.fraction >= BUSY_WAIT:
            median = f", its median step {wait.step_fraction:.0%}" if round(wait.step_fraction, 2) != round(wait.fraction, 2) else ""
            waited = (f"one of its threads waited for a CPU while the others ran, holding its steps up {wait.stall_fraction:.0%} of "
                      f"the time (their summed wait {wait.summed_fraction:.0%} of their runnable time)"
                      if wait.stall_fraction > wait.summed_fraction + 0.02 else
                      f"its threads waited for a CPU {wait.fraction:.0%} of their runnable time")
            if wait.own_waits:  # nothing else ran on its CPUs: its own threads and processes competed
                console.print(f"  own CPU contention: {waited} in those steps{median}, with nothing else running on its CPUs "
                              f"({wait.others_cores:.2f} cores on average): its own threads and processes outnumbered them, not the "
                              f"machine's load (on a CPU-bound step, {wait.slowdown:.2f}x the median step's time with the CPUs to itself)")
            else:
                console.print(f"  machine load: {waited} in those steps{median} "
                              f"(on a CPU-bound step, {wait.slowdown:.2f}x the median step's time on an idle machine)")
    elif m.steps:
        console.print(f"  step time: too few steps unaffected by compilation to measure (steps: {m.steps})")
    if st and st.first_step_s is not None:
        console.print(f"  time to first step: {st.first_step_s:.2f} s")
    if imported is None:
        cuda = f", CUDA max allocated {_mib(m.peak_device_memory_bytes)}" if m.peak_device_memory_bytes is not None else ""
        console.print(f"  peak memory: RSS {_mib(m.peak_rss_bytes)}{cuda}")
        own = cagtool_memory_text(manifest.options.get("cagtool_memory"))
        if own:
            console.print(f"  {own}")
    else:
        skipped = sum((imported.get("unknown_envelopes") or {}).values())
        if skipped or imported.get("bad_lines") or imported.get("truncated_last_line"):
            cut = ", the last line was truncated" if imported.get("truncated_last_line") else ""
            console.print(f"  note: the log had {skipped} unknown envelope(s) and {imported.get('bad_lines', 0)} unreadable line(s){cut}; skipped")
    for shown in shown_findings(record.of(FindingEvent)):
        where = f" ({_where(shown.first.source)})" if shown.first.source else ""
        console.print(Text.assemble("  ", ("finding:", "yellow"), f" {shown.first.message}{where}{shown.repeats}"))
    stopped = record.manifest.recording_stopped
    if isinstance(stopped, dict):
        console.print(f"  note: recording stopped at event {stopped.get('at_seq')} ({stopped.get('error')}): the counts cover only the job up to there", markup=False)
    for problem in mode_damage(record):
        console.print(Text.assemble("  ", ("damaged:", "red"), f" {problem}"))
    if record.skipped_lines or record.unknown_kinds:
        console.print(f"  note: skipped {record.skipped_lines} unreadable line(s) and {sum(record.unknown_kinds.values())} unknown event(s)")
    if analysis is not None:
        render_ranks(console, analysis)


def damaged_headline(run: RunRecord) -> "Headline | None":
    """The headline of a run whose record contradicts torch's own counters (record/integrity.py):
    its counts are not the job's, so none leads as a fact; None for a sound record."""
    from cagtool.report.compare.headline import Headline

    problems = [p for record in run.modes.values() for p in mode_damage(record)]
    if not problems:
        return None
    return Headline(f"record damaged: {'; '.join(problems)}: recompiles not known.", "bad", "re-record the run")


def render_summary(console: Console, run: RunRecord, modes: list[str] | None = None, rank: int | None = None) -> None:
    """With `rank`, `run` is that rank's view (ranks.run_for_rank): each mode is that rank's record."""
    meta = run.meta
    target = meta.target.get("name", "?")
    if meta.options.get("imported"):
        console.print(Text.assemble(("cagtool import", "bold"), f" {target}  (torch {meta.versions.get('torch', '?')})"))
    else:
        # As the job was started, pasteable: `-m` before a module, each word quoted where a shell needs it.
        how = "-m " if meta.target.get("kind") == "module" else ""
        command = shown_command([target, *meta.target_argv[1:]], quoted=True)
        console.print(Text.assemble(("cagtool run", "bold"), f" {how}{command}  (torch {meta.versions.get('torch', '?')})"))
    cut = cut_words(meta.truncated, "run.json")
    if cut:
        console.print(Text.assemble(("note:", "yellow"), f" {cut}"), markup=False, overflow="fold")
    ended, never = run.ended_early_words(), run.not_run()
    if ended is not None:
        # Its modes' own records may all say "finished" (a script that caught Ctrl-C and exited 0):
        # only run.json holds that the run was stopped, and which modes it never started.
        code = f" (exit code {meta.exit_code})" if meta.exit_code is not None else ""
        left = f" before mode{'s' if len(never) > 1 else ''} {', '.join(never)} ran" if never else ""
        console.print(Text.assemble(("note:", "yellow"), f" {ended}{code}{left}"))
    for name in modes or list(run.modes):
        render_mode(console, run.modes[name], label=f"{name}, rank {rank}" if rank is not None else None)
    missing = [m for m in meta.modes if m not in run.modes]
    for name in missing:
        if name in never:
            console.print(Text.assemble((f"mode {name}", "bold"), f": not run: {ended}"))
        else:
            from cagtool.report.figures.pooled import manifest_missing

            why = manifest_missing(run, name) or "the process did not start or was killed"
            console.print(Text.assemble((f"mode {name}", "bold"), f": no record ({why})"))


def next_steps(run_path: str) -> list[str]:
    return [
        f"cagtool summary {run_path}",
        f"cagtool recompiles --explain {run_path}",
        f"cagtool diff-graphs {run_path}",
        f"cagtool compare {run_path}",
    ]


def _library_fix(record: ModeRecord, places: tuple[tuple[str, int | None], ...]) -> str | None:
    """What removes a library's graph break at one of `places` whose cause is known
    (known_failures.library_break_fix), read from the break's logged line and call."""
    from cagtool.report.known_failures import library_break_fix

    wanted = set(places)
    for event in record.of(GraphBreakEvent):
        if (event.file, event.line) in wanted and (fix := library_break_fix(event.file, event.code, event.rest)) is not None:
            return fix
    return None
