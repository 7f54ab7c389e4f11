"""The ranks of a multi-process (distributed) run: one row of figures per rank, their totals, and
what the ranks disagree on. Pure functions of the records; summary, compare, recompiles,
diff-graphs and gate all read this one analysis.

What counts as a problem, and why:
- *graphs diverge*: two ranks' sequences of compiled-autograd captures differ (a capture at a
  different step, for a different cache miss, or of a different graph). Under DDP the gradient
  all-reduce runs inside the backward, so ranks that run different backward graphs issue their
  collectives in a different order or number: this is what hangs real jobs. The finding names the
  first step and the miss where the ranks part.
- *norms diverge*: final parameter or gradient norms that differ across ranks: the gradients were
  not synchronised (or the parameters were not broadcast), whatever the graphs did.
- *steps differ*: ranks that both finished ran a different number of steps (a collective waits).
- a rank *missing* (fewer rank records than the world size), a rank or another followed process
  that *failed* (or was killed: its record was never closed), and a process cagtool *could not follow* (`process_not_followed`, written by the process that started it).
- a rank *restarted* by its launcher (torchrun --max-restarts): each attempt is its own record;
  the rank's row is its last attempt, and the finding says how each attempt ended.

Only what the ranks both reached is compared: a rank that was stopped (or whose recording stopped
on a full disk) is compared up to the steps it completed, final norms only between ranks that
finished, and the verdict says so instead of claiming agreement on what was never compared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.schema import (
    MISS_CHANGED_SHAPES,
    FINAL_OF_SHARDS,
    PROCS_DIR,
    STATUS_FINISHED,
    CacheMissEvent,
    CAGraphEvent,
    FinalStateEvent,
    FindingEvent,
    StepEvent,
)
from cagtool.report.compare.closeness import Tolerance, relative_difference
from cagtool.report.figures.metrics import mode_metrics
from cagtool.report.known_failures import explain as explain_failure
from cagtool.torch_text import node_kind

PROCESS_NOT_FOLLOWED = "process_not_followed"  # the capture side's finding code (PROTOCOL layout)

# Finding codes of this analysis (JSON `code`; gate check names are derived from them).
RANKS_GRAPHS_DIVERGE = "ranks_graphs_diverge"
RANKS_NORMS_DIVERGE = "ranks_norms_diverge"
RANKS_STEPS_DIFFER = "ranks_steps_differ"
# One rank captured its backward again for other sizes, the same nodes and hooks (an uneven last
# batch on that rank): the same collectives, so no divergence; said, never failed.
RANKS_SIZES_DIFFER = "ranks_sizes_differ"
RANK_MISSING = "rank_missing"
RANK_FAILED = "rank_failed"
PROCESS_FAILED = "process_failed"  # a followed process without a rank that did not finish cleanly
RANK_RECORDING_STOPPED = "rank_recording_stopped"  # a write error (full disk) ended a rank's record early: its counts stop there
RANK_RESTARTED = "rank_restarted"  # a launcher started the rank again (torchrun --max-restarts): which attempt did what
RANK_STARTED_AGAIN = "rank_started_again"  # the rank started again, not by a restart (a second process group): each start's outcome
# The findings that mean the ranks part: collectives that do not match, or unsynchronised training.
DIVERGENCE_CODES = (RANKS_GRAPHS_DIVERGE, RANKS_STEPS_DIFFER, RANKS_NORMS_DIVERGE)


@dataclass(frozen=True)
class RankRow:
    """One rank's figures, as the per-rank table shows them."""

    rank: int
    key: str  # the process record's key: "rank1", or "main" when the launcher itself had the rank
    status: str
    exit_code: int | None
    steps: int
    ca_graphs: int
    cache_misses: int  # CA cache misses as torch logs them: one per capture, the first included
    graph_breaks: int
    step_time_median_s: float | None
    peak_rss_bytes: int | None
    param_norm: float | None
    grad_norm: float | None
    peak_device_memory_bytes: int | None = None  # torch.cuda.max_memory_allocated, when the rank used CUDA
    recording_stopped: bool = False  # a write error (full disk) ended its record before the rank ended
    # False: torch's counters were not saved (the rank was killed first): graph_breaks is the log's,
    # one per compile and site, not torch's count.
    graph_breaks_exact: bool = True

    @property
    def breaks_text(self) -> str:
        return str(self.graph_breaks) if self.graph_breaks_exact else f"~{self.graph_breaks}"

    @property
    def finished(self) -> bool:
        return self.status == STATUS_FINISHED and self.exit_code in (0, None)

    @property
    def reach(self) -> int | None:
        """The steps its record holds all of, when that is not the whole job (None: it is):
        cross-rank verdicts compare nothing beyond them."""
        return None if self.finished and not self.recording_stopped else self.steps


@dataclass(frozen=True)
class RankTotals:
    """Counts summed over the ranks; step time is the slowest rank's median (a synchronous job
    goes at its slowest rank's pace); peak memory (RSS, CUDA) is summed (what the job held)."""

    ranks: int
    steps: int
    ca_graphs: int
    cache_misses: int
    graph_breaks: int
    step_time_median_s: float | None
    peak_rss_bytes: int | None
    peak_device_memory_bytes: int | None = None


@dataclass(frozen=True)
class Capture:
    """One compiled-autograd capture of one rank: the unit two ranks' sequences are compared in."""

    ca_id: int
    step: int | None
    miss: str  # why it was captured, one line ("" when no miss was recorded)
    miss_key: tuple[Any, ...]  # what must match across ranks (values of changed sizes may differ)
    graph_key: tuple[Any, ...]  # the graph's structure: node count, op histogram, autograd nodes

    @property
    def compile_id(self) -> str:
        return f"!{self.ca_id}"

    def describe(self) -> str:
        step = f" at step {self.step}" if self.step is not None else ""
        why = f" ({self.miss})" if self.miss else ""
        return f"captured CA graph {self.compile_id}{step}{why}"


@dataclass(frozen=True)
class RankFinding:
    """Something the ranks disagree on, or a rank or process that is not there as it should be."""

    code: str
    message: str  # one line
    ranks: tuple[int, ...] = ()
    step: int | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RankAnalysis:
    mode: str
    world_size: int | None  # from the records' process info; None when no record said
    rows: tuple[RankRow, ...]
    totals: RankTotals
    findings: tuple[RankFinding, ...]
    other_processes: tuple[str, ...] = ()  # followed processes without a rank ("pid4242")
    # The rows are training processes the job started without a rank (ModeRecord.worker: Hogwild's
    # torch.multiprocessing workers), numbered by start: they meet at no collective, so their
    # graphs, steps and norms are not held to each other's.
    workers: bool = False

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(r.rank for r in self.rows)

    @property
    def missing(self) -> tuple[int, ...]:
        return missing_ranks(self.ranks, self.world_size)

    @property
    def divergences(self) -> list[RankFinding]:
        """The findings that say the ranks part (graphs, steps, final norms), in order: what
        `diverge`, the gate's ranks-agree check and every report's verdict on the ranks rest on."""
        return [f for f in self.findings if f.code in DIVERGENCE_CODES]

    @property
    def diverge(self) -> bool:
        return bool(self.divergences)

    def of(self, code: str) -> list[RankFinding]:
        return [f for f in self.findings if f.code == code]


def is_multi_process(record: ModeRecord) -> bool:
    """A mode record of a job with ranks or followed processes (single-process records say no)."""
    return bool(record.processes) or record.rank is not None


def step_count(record: ModeRecord) -> int:
    """Steps of a record, also when it was loaded without its step events (`kinds=`)."""
    held = record.columns.get(StepEvent.kind)  # held as columns: counted without building an event per step
    return max(held.count if held is not None else len(record.of(StepEvent)), record.kind_counts.get(StepEvent.kind, 0))


def missing_ranks(have: Iterable[int], size: int | None) -> tuple[int, ...]:
    """The ranks below the world size `size` that left no record (the loader bounds a world size:
    record.schema.MAX_WORLD_SIZE)."""
    if size is None:
        return ()
    present = set(have)
    return tuple(r for r in range(size) if r not in present)


def _runs(ranks: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive ranks as (first, last) runs: (2, 3, 4, 7) -> [(2, 4), (7, 7)]."""
    runs: list[tuple[int, int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    return runs


def rank_list(ranks: Sequence[int]) -> str:
    """Ranks as a short list, three or more consecutive ones as a span: "0, 2-5, 8, 9"."""
    return ", ".join(str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}" for a, b in _runs(ranks))


def world_size(record: ModeRecord) -> int | None:
    """The largest world size the mode's process records say (ModeRecord.world_size), None without one."""
    sizes = [rec.world_size for rec in (record, *record.processes.values()) if rec.world_size is not None]
    return max(sizes) if sizes else None


def rank_row(rank: int, record: ModeRecord) -> RankRow:
    metrics = mode_metrics(record)
    final = record.of(FinalStateEvent)
    return RankRow(
        rank=rank,
        key=record.process_key,
        status=record.manifest.status,
        exit_code=record.manifest.exit_code,
        steps=step_count(record),
        ca_graphs=metrics.ca_graphs,
        cache_misses=metrics.ca_cache_misses,
        graph_breaks=metrics.graph_breaks,
        step_time_median_s=metrics.step_time.median_s if metrics.step_time else None,
        peak_rss_bytes=metrics.peak_rss_bytes,
        # each rank's shard of the parameters (FSDP flat parameters, ZeRO-3) differs by design
        param_norm=final[-1].param_norm if final and final[-1].of != FINAL_OF_SHARDS else None,
        grad_norm=final[-1].grad_norm if final and final[-1].of != FINAL_OF_SHARDS else None,
        peak_device_memory_bytes=metrics.peak_device_memory_bytes,
        recording_stopped=record.manifest.recording_stopped is not None,
        graph_breaks_exact=metrics.graph_breaks_from_torch or record.mode == "eager",
    )


def totals_of(rows: list[RankRow] | tuple[RankRow, ...]) -> RankTotals:
    times = [r.step_time_median_s for r in rows if r.step_time_median_s is not None]
    peaks = [r.peak_rss_bytes for r in rows if r.peak_rss_bytes is not None]
    device = [r.peak_device_memory_bytes for r in rows if r.peak_device_memory_bytes is not None]
    return RankTotals(
        ranks=len(rows),
        steps=sum(r.steps for r in rows),
        ca_graphs=sum(r.ca_graphs for r in rows),
        cache_misses=sum(r.cache_misses for r in rows),
        graph_breaks=sum(r.graph_breaks for r in rows),
        step_time_median_s=max(times) if times else None,
        peak_rss_bytes=sum(peaks) if peaks else None,
        peak_device_memory_bytes=sum(device) if device else None,
    )


def _miss_text(miss: CacheMissEvent | None) -> str:
    if miss is None:
        return ""
    if miss.miss_kind == MISS_CHANGED_SHAPES:
        count = miss.changed_count
        owners = sorted({s.node for s in miss.changed_sizes if s.node})
        return f"cache miss: {count} changed size{'s' if count != 1 else ''}" + (f" of {', '.join(owners)}" if owners else "")
    if miss.node:
        call = f" at NodeCall {miss.node_call}" if miss.node_call is not None else ""
        return f"cache miss: new autograd node {miss.node}{call}"
    return f"cache miss: {miss.message.strip() or miss.miss_kind}"


def captures(record: ModeRecord) -> list[Capture]:
    """A rank's CA captures in capture order, each with the miss that caused it. CA ids are per
    process (each rank counts from 0), so two ranks' sequences are compared by position."""
    misses: dict[int, CacheMissEvent] = {}
    for miss in record.of(CacheMissEvent):
        misses.setdefault(miss.ca_id, miss)
    graphs = {g.ca_id: g for g in record.of(CAGraphEvent)}
    found = []
    for ca_id in sorted(set(graphs) | set(misses)):
        graph, miss = graphs.get(ca_id), misses.get(ca_id)
        step = graph.step if graph is not None else (miss.step if miss is not None else None)
        miss_key: tuple[Any, ...] = ()
        if miss is not None:
            sizes = tuple(sorted(s.index for s in miss.changed_sizes))
            miss_key = (miss.miss_kind, node_kind(miss.node) if miss.node else miss.node, miss.node_call, sizes)
        graph_key: tuple[Any, ...] = ()
        if graph is not None:
            graph_key = (
                graph.node_count,
                tuple(sorted(graph.op_histogram.items())),
                tuple(node_kind(n.name) for n in graph.autograd_nodes),  # not a rank's compile order
                tuple(h.hook_type for h in graph.hooks),
            )
        found.append(Capture(ca_id, step, _miss_text(miss), miss_key, graph_key))
    return found


def _same(a: Capture, b: Capture) -> bool:
    # A side without a recorded graph (cut short by a crash) is compared on what it has.
    same_graph = not a.graph_key or not b.graph_key or a.graph_key == b.graph_key
    same_miss = not a.miss_key or not b.miss_key or a.miss_key == b.miss_key
    return a.step == b.step and same_graph and same_miss


def reached(reach: int | None, step: int | None) -> bool:
    """Whether a rank that ended after `reach` steps (None: it finished) ran all of step `step`."""
    return reach is None or step is None or step < reach


def graphs_divergence(ref_rank: int, ref: list[Capture], rank: int, other: list[Capture], diff_prefix: str = "",
                      ref_reach: int | None = None, reach: int | None = None) -> RankFinding | None:
    """Where `rank`'s captures first part from the reference rank's, or None when they agree.
    With `diff_prefix` (`cagtool diff-graphs RUN`), the finding's data holds the command that
    diffs the two ranks' graphs there (a rank that captured nothing new still runs its last one).
    `ref_reach`, `reach`: the steps a rank that did not finish completed (None: it finished).
    Only what both ranks reached is compared: a rank stopped before a step cannot have captured
    that step's graph, and its absence is no divergence."""
    for index in range(max(len(ref), len(other))):
        a = ref[index] if index < len(ref) else None
        b = other[index] if index < len(other) else None
        if a is not None and b is not None and _same(a, b):
            continue
        steps = [c.step for c in (a, b) if c is not None and c.step is not None]
        step = min(steps) if steps else None
        both_ran = a is not None and b is not None and a.step == b.step
        if not both_ran and not (reached(ref_reach, step) and reached(reach, step)):
            return None  # one rank stopped before this step: nothing further is comparable
        extra = _sizes_only_capture(ref, other, index)
        if extra is not None:
            # The rest compared without it: a later divergence is still one.
            rest = (graphs_divergence(ref_rank, ref[:index] + ref[index + 1:], rank, other, diff_prefix, ref_reach, reach) if extra == 0
                    else graphs_divergence(ref_rank, ref, rank, other[:index] + other[index + 1:], diff_prefix, ref_reach, reach))
            if rest is not None:
                return rest
            who, capture, others = (ref_rank, a, rank) if extra == 0 else (rank, b, ref_rank)
            assert capture is not None
            message = (f"rank {who} {capture.describe()}; rank {others} did not: the same autograd nodes and hooks as the graph "
                       f"it ran before, so the same collectives (a batch of other sizes on that rank, as an uneven last batch is)")
            return RankFinding(RANKS_SIZES_DIFFER, message, (ref_rank, rank), capture.step, {"index": index, "rank": who,
                                                                                               "capture": _capture_json(capture)})
        sides = []
        for who, capture in ((ref_rank, a), (rank, b)):
            sides.append(f"rank {who} {capture.describe()}" if capture is not None else f"rank {who} captured {_no_capture(index)}")
        where = f" at step {step}" if step is not None else ""
        differs = ""
        if a is not None and b is not None and a.step == b.step and a.miss_key == b.miss_key and a.graph_key != b.graph_key:
            differs = " (the graphs differ)"
        message = (
            f"ranks {ref_rank} and {rank} part{where}: {sides[0]}; {sides[1]}{differs}: ranks that run different backward "
            f"graphs issue different collectives (what hangs distributed jobs)"
        )
        data = {
            "index": index,
            "ref_rank": ref_rank,
            "rank": rank,
            "ref_capture": _capture_json(a),
            "capture": _capture_json(b),
        }
        running = [c if c is not None else (seq[index - 1] if 0 < index <= len(seq) else None) for c, seq in ((a, ref), (b, other))]
        if diff_prefix and running[0] is not None and running[1] is not None:
            data["diff_command"] = f"{diff_prefix} {running[0].ca_id}@{ref_rank} {running[1].ca_id}@{rank}"
        return RankFinding(RANKS_GRAPHS_DIVERGE, message, (ref_rank, rank), step, data)
    return None


def _sizes_only_capture(ref: list[Capture], other: list[Capture], index: int) -> int | None:
    """0 (the reference rank) or 1 (the other) where that rank's capture at `index` is one the
    other rank does not make there (it made none, or its next is at a later step), made for changed
    sizes with the same autograd nodes and hooks as the rank's graph before it; else None."""
    for side, (own, theirs) in enumerate(((ref, other), (other, ref))):
        capture = own[index] if index < len(own) else None
        mate = theirs[index] if index < len(theirs) else None
        if capture is None or index == 0 or not capture.miss_key or capture.miss_key[0] != MISS_CHANGED_SHAPES:
            continue
        if mate is not None and (mate.step is None or capture.step is None or mate.step <= capture.step):
            continue
        before = own[index - 1]
        if capture.graph_key and before.graph_key and capture.graph_key[2:] == before.graph_key[2:]:
            return side
    return None


def _no_capture(index: int) -> str:
    return "no more CA graphs" if index else "no CA graph"


def _exception_text(record: ModeRecord) -> str:
    exc = record.manifest.exception
    if exc is None:
        return ""
    first = (exc.message or "").strip().splitlines()
    return f": {exc.type}: {first[0]}" if first else f": {exc.type}"


def _capture_json(capture: Capture | None) -> dict[str, Any] | None:
    if capture is None:
        return None
    return {"ca_id": capture.ca_id, "compile_id": capture.compile_id, "step": capture.step, "miss": capture.miss}


def norms_divergence(rows: list[RankRow], tolerance: Tolerance) -> list[RankFinding]:
    """Final parameter and gradient norms of finished ranks against the first finished rank's."""
    finished = [r for r in rows if r.finished]
    found = []
    for quantity, label, meaning in (
        ("grad_norm", "gradient norm", "the gradients were not synchronised across ranks"),
        ("param_norm", "parameter norm", "the ranks' parameters drifted apart (gradients not synchronised, or parameters not broadcast)"),
    ):
        valued = [(r.rank, getattr(r, quantity)) for r in finished if getattr(r, quantity) is not None]
        if len(valued) < 2:
            continue
        ref_rank, ref = valued[0]
        apart = [(rank, value) for rank, value in valued[1:] if not tolerance.agrees(value, ref)]
        if not apart:
            continue
        worst = max(relative_difference(value, ref) for _, value in apart)
        values = ", ".join(f"rank {rank} {value:.6g}" for rank, value in valued)
        message = (
            f"final {label} differs across ranks ({values}; up to {worst:.2e} relative, tolerance "
            f"rtol {tolerance.rtol:g}, atol {tolerance.atol:g}): {meaning}"
        )
        data = {"quantity": quantity, "values": {str(rank): value for rank, value in valued}, "max_rel_diff": worst}
        found.append(RankFinding(RANKS_NORMS_DIVERGE, message, tuple(rank for rank, _ in valued), None, data))
    return found


def steps_divergence(rows: list[RankRow]) -> RankFinding | None:
    finished = [r for r in rows if r.reach is None]
    counts = {r.rank: r.steps for r in finished}
    if len(set(counts.values())) < 2:
        return None
    text = ", ".join(f"rank {rank} {steps}" for rank, steps in counts.items())
    message = f"ranks ran different numbers of steps ({text}): a collective of the extra steps has no partner"
    return RankFinding(RANKS_STEPS_DIFFER, message, tuple(counts), None, {"steps": {str(k): v for k, v in counts.items()}})


def restarted(rank: int, attempts: list[ModeRecord]) -> RankFinding:
    """A rank its launcher started more than once: how each attempt ended. The table's figures
    are the last attempt's; each attempt is a process of its own, with its own graphs."""
    # An imported log holds no steps, nor how its process ended: only which graphs it logged.
    told = [f"attempt {record.attempt} ({record.process_key}) {_ended(record) if record.manifest.imported is None else 'logged'}"
            for record in attempts]
    last = attempts[-1].attempt
    message = f"rank {rank} was started {len(attempts)} times by its launcher: {'; '.join(told)}; the figures shown are attempt {last}'s"
    data = {"attempts": [{"attempt": r.attempt, "process": r.process_key, "status": r.manifest.status, "exit_code": r.manifest.exit_code,
                          "steps": step_count(r)} for r in attempts]}
    return RankFinding(RANK_RESTARTED, message, (rank,), None, data)


def _ended(record: ModeRecord) -> str:
    """How a rank's process ended: `finished after 4 steps`, `failed, exit 1 after 2 steps`."""
    manifest = record.manifest
    code = f", exit {manifest.exit_code}" if manifest.exit_code not in (None, 0) else ""
    steps = step_count(record)
    return f"{manifest.status}{code} after {steps} step{'s' if steps != 1 else ''}"


def started_again(rank: int, starts: list[ModeRecord]) -> RankFinding:
    """A rank that more than one process of the same launcher attempt ran, one after another (a
    script that sets up a second process group after the first: pretraining, then fine-tuning),
    or at once. The table's figures are the first's; the gate checks each (gate/ranks.py)."""
    told = "; ".join(f"{record.process_key} {_ended(record)}" for record in starts)
    message = (f"rank {rank} was started {len(starts)} times, not by a launcher's restart (a second process group the "
               f"script set up, as for fine-tuning after pretraining?): {told}; the figures shown are the first's "
               f"({starts[0].process_key}), and the gate checks each")
    data = {"starts": [{"process": r.process_key, "status": r.manifest.status, "exit_code": r.manifest.exit_code,
                        "steps": step_count(r)} for r in starts]}
    return RankFinding(RANK_STARTED_AGAIN, message, (rank,), None, data)


def planned_steps(rows: list[RankRow] | tuple[RankRow, ...]) -> int | None:
    """How many steps the script runs, where the record knows it: what the ranks that finished
    ran, when they agree. None when no rank finished (the script's own total is not recorded)."""
    counts = {r.steps for r in rows if r.reach is None}
    return counts.pop() if len(counts) == 1 else None


def agreement(analysis: "RankAnalysis") -> str:
    """What the ranks agree on, for a mode without divergence findings: only what was compared.
    Final norms are compared between ranks that finished; graphs up to the steps both reached."""
    finished = [r for r in analysis.rows if r.finished]
    sized = [f for f in analysis.findings if f.code == RANKS_SIZES_DIFFER]
    if sized:  # one rank also captured for other sizes, the same nodes: said where it is
        also = "; ".join(f"rank {f.data.get('rank')} also for other sizes at step {f.step}" for f in sized)
        graphs = f"the same CA graphs ({also}) and cache misses"
    else:
        graphs = "same CA graphs and cache misses"
    if all(r.reach is None for r in analysis.rows):
        return f"the ranks agree: {graphs}, same final norms"
    stopped = [r for r in analysis.rows if r.reach is not None]
    names = "; ".join(f"rank {r.rank} {'recorded' if r.finished else r.status} {'up to' if r.finished else 'after'} {r.steps} step{'s' if r.steps != 1 else ''}"
                      for r in stopped)
    normed = [r for r in finished if r.param_norm is not None or r.grad_norm is not None]
    norms = f"same final norms of ranks {', '.join(str(r.rank) for r in normed)}" if len(normed) > 1 else "final norms not compared"
    return f"the ranks agree on the steps they all reached: {graphs}; {norms} ({names})"


def not_followed(record: ModeRecord) -> list[RankFinding]:
    """The `process_not_followed` findings of every record of the mode, main's included."""
    found = []
    for rec in (record, *record.processes.values()):
        for event in rec.of(FindingEvent):
            if event.code == PROCESS_NOT_FOLLOWED:
                where = "" if rec.process_key == "main" else f" (in {rec.process_key})"
                ranks = (rec.rank,) if rec.rank is not None else ()
                found.append(RankFinding(PROCESS_NOT_FOLLOWED, event.message + where, ranks, event.step, {"process": rec.process_key}))
    return found


def analyze_ranks(record: ModeRecord, tolerance: Tolerance | None = None) -> RankAnalysis | None:
    """The per-rank view of one mode, or None for a single-process record."""
    if not is_multi_process(record):
        return None
    tol = tolerance or Tolerance()
    by_rank = record.ranks()
    rows = [rank_row(rank, rec) for rank, rec in by_rank.items()]
    size = world_size(record)
    findings: list[RankFinding] = []
    for first, last in _runs(missing_ranks(by_rank, size)):
        which = f"rank {first}" if first == last else f"ranks {first}-{last}"
        findings.append(RankFinding(RANK_MISSING, f"{which} of {size} left no record (it did not start, or cagtool did not follow it)", tuple(range(first, last + 1))))
    planned = planned_steps(rows)
    for row in rows:
        if not row.finished:
            code = f", exit code {row.exit_code}" if row.exit_code not in (None, 0) else ""
            why = _exception_text(by_rank[row.rank])
            ran = f" after {row.steps} step{'s' if row.steps != 1 else ''}" + (f" of {planned}" if planned is not None else "")
            data: dict[str, Any] = {"steps": row.steps, "of_steps": planned}
            meaning = explain_failure(by_rank[row.rank].manifest.exception)
            if meaning:
                data["explanation"] = meaning
            findings.append(RankFinding(RANK_FAILED, f"rank {row.rank} did not finish (status {row.status}{code}){ran}{why}", (row.rank,),
                                        None, data))
    for row in rows:
        stopped = by_rank[row.rank].manifest.recording_stopped
        if stopped is not None:
            error = str(stopped.get("error") or "a write error")
            findings.append(RankFinding(RANK_RECORDING_STOPPED, f"rank {row.rank}'s recording stopped at event {stopped.get('at_seq')} ({error}): "
                                        f"its figures stop there ({row.steps} steps recorded), and the ranks are compared only up to them",
                                        (row.rank,), None, dict(stopped)))
    for rank in by_rank:
        again = record.started_again(rank)
        attempts = [r for r in record.attempts(rank) if all(r is not other for other in again)]
        if len(attempts) > 1:
            findings.append(restarted(rank, attempts))
        if again:
            findings.append(started_again(rank, [by_rank[rank], *again]))
    findings.extend(not_followed(record))
    workers = any(rec.worker is not None for rec in by_rank.values())
    if len(by_rank) > 1 and not workers:
        ranks = list(by_rank)
        ref_rank = ranks[0]
        ref = captures(by_rank[ref_rank])
        mode_flag = "" if record.mode == "ca" else f" --mode {record.path.name}"
        diff_prefix = f"cagtool diff-graphs {run_dir_of(record)}{mode_flag}"
        reach = {row.rank: row.reach for row in rows}
        for rank in ranks[1:]:
            finding = graphs_divergence(ref_rank, ref, rank, captures(by_rank[rank]), diff_prefix, reach[ref_rank], reach[rank])
            if finding is not None:
                findings.append(finding)
        steps = steps_divergence(rows)
        if steps is not None:
            findings.append(steps)
        findings.extend(norms_divergence(rows, tol))
    others = tuple(key for key, rec in record.processes.items() if rec.rank is None)
    for key in others:
        manifest = record.processes[key].manifest
        if manifest.status != STATUS_FINISHED or manifest.exit_code not in (0, None):
            code = f", exit code {manifest.exit_code}" if manifest.exit_code not in (None, 0) else ""
            why = _exception_text(record.processes[key])
            findings.append(RankFinding(PROCESS_FAILED, f"process {key} did not finish (status {manifest.status}{code}){why}", (), None, {"process": key}))
    return RankAnalysis(record.mode, size, tuple(rows), totals_of(rows), tuple(findings), others, workers)


def run_dir_of(record: ModeRecord) -> Path:
    """The run directory a mode record belongs to, for a followed process's record too
    (<run>/<mode>/procs/<key>/)."""
    parent = record.path.parent
    return parent.parent.parent if parent.name == PROCS_DIR else parent


def focus_record(run: RunRecord, record: ModeRecord, rank: int | None) -> tuple[ModeRecord, int | None]:
    """The record a one-rank report reads for this mode, and its rank: rank `rank` when given,
    else the lowest rank of a multi-rank mode (rank 0), else the record itself (rank None).
    Raises UnreadableInput, naming the ranks there are, for a rank the mode does not have."""
    ranks = record.ranks()
    if rank is None:
        return (ranks[next(iter(ranks))], next(iter(ranks))) if ranks else (record, None)
    if rank not in ranks:
        run.mode(record.path.name, rank=rank)  # raises: "... has no rank N (ranks: 0, 1)"
    return ranks[rank], rank


class RankView(RunRecord):
    """The run as one rank saw it (`modes`: that rank's records), with the run it was cut from:
    a report that reads one rank's records (compare, the headline) still reaches the other ranks
    through `whole` to say what happened there."""

    whole: RunRecord | None = None
    rank: int | None = None


def _view(run: RunRecord, modes: dict[str, ModeRecord], rank: int) -> RankView:
    whole = run.whole if isinstance(run, RankView) and run.whole is not None else run
    return RankView(path=run.path, meta=run.meta, modes=modes, whole=whole, rank=rank)


def whole_run(run: RunRecord) -> tuple[RunRecord, int] | None:
    """For a rank's view of a multi-rank run (rank_view, focused_run, run_for_rank): the whole run
    and the rank shown; None for any other run."""
    if isinstance(run, RankView) and run.whole is not None and run.rank is not None:
        return run.whole, run.rank
    return None


def rank_view(run: RunRecord, rank: int) -> RunRecord:
    """Leniently, the run as rank `rank` saw it: each mode's record replaced by that rank's where the
    mode has it (others keep their own record; the gate's ranks-present check reports the gap)."""
    return _view(run, {name: record.ranks().get(rank, record) for name, record in run.modes.items()}, rank)


def later_start_views(run: RunRecord, rank: int) -> list[tuple[int, RunRecord]]:
    """(start number, the run as it saw it) for each later start of rank `rank` (ModeRecord.started_again:
    the same launcher attempt started again, a second process group): the 2nd start's view holds each
    mode's 2nd start of the rank, where the mode has one."""
    again = {name: record.started_again(rank) for name, record in run.modes.items()}
    most = max((len(records) for records in again.values()), default=0)
    return [(k + 2, _view(run, {name: records[k] for name, records in again.items() if k < len(records)}, rank))
            for k in range(most)]


def trains_in_workers(run: RunRecord) -> bool:
    """Whether the run's ranks are training processes started without one (ModeRecord.worker)."""
    whole = whole_run(run)
    run = whole[0] if whole is not None else run
    return any(rec.worker is not None for record in run.modes.values() for rec in record.ranks().values())


def lowest_rank(run: RunRecord) -> int | None:
    """Rank 0 (the lowest recorded in any mode); None for a single-process run."""
    ranks = {rank for record in run.modes.values() for rank in record.ranks()}
    return min(ranks) if ranks else None


def focused_run(run: RunRecord, rank: int | None) -> tuple[RunRecord, int | None]:
    """For reports that read one record per mode (compare, the end of `cagtool run`): the run as
    rank `rank` saw it (default: the lowest rank), and that rank; the run itself and None for a
    single-process run. Raises UnreadableInput for a rank no mode has."""
    focus = rank if rank is not None else lowest_rank(run)
    if focus is None:
        if rank is not None:
            run.mode(rank=rank)  # raises: no ranks
        return run, None
    if not any(focus in record.ranks() for record in run.modes.values()):
        run.mode(next(iter(run.modes)), rank=focus)  # raises, naming the ranks there are
    return rank_view(run, focus), focus


def run_for_rank(run: RunRecord, rank: int | None) -> RunRecord:
    """The run as one rank saw it: each mode's record replaced by that rank's. With rank None,
    the run itself. Raises UnreadableInput when a mode lacks the rank."""
    if rank is None:
        return run
    return _view(run, {name: focus_record(run, record, rank)[0] for name, record in run.modes.items()}, rank)


def ranks_line(analysis: RankAnalysis, focus: int | None | tuple[int, ...]) -> str:
    """One line for reports that show one rank: which ranks exist and whether they diverge."""
    have = rank_list(analysis.ranks) or "none"
    size = f" of world size {analysis.world_size}" if analysis.world_size is not None else ""
    missing = f"; missing: {rank_list(analysis.missing)}" if analysis.missing else ""
    if analysis.workers:
        shown = f"showing {focus}" if isinstance(focus, int) else f"showing {' and '.join(str(r) for r in focus)}" if focus else "showing the main process"
        return (f"mode {analysis.mode}: training processes {have}, started without a rank (numbered by start, as ranks); {shown} "
                "(--rank N for another); not held to each other's graphs or norms (each trains on its own)")
    if isinstance(focus, tuple):
        shown = f"showing ranks {' and '.join(str(r) for r in focus)}"
    else:
        shown = f"showing rank {focus}" if focus is not None else "showing the main process"
    if analysis.diverge:
        verdict = f"the ranks DIVERGE: {analysis.divergences[0].message}"
    elif all(r.reach is None for r in analysis.rows):
        verdict = "the ranks agree (same CA graphs and cache misses, same final norms)"
    else:
        verdict = agreement(analysis)
    return f"mode {analysis.mode}: ranks {have}{size}{missing}; {shown} (--rank N for another); {verdict}"


def row_json(row: RankRow) -> dict[str, Any]:
    return {
        "rank": row.rank,
        "process": row.key,
        "status": row.status,
        "exit_code": row.exit_code,
        "steps": row.steps,
        "ca_graphs": row.ca_graphs,
        "cache_misses": row.cache_misses,
        "graph_breaks": row.graph_breaks,
        "graph_breaks_counted_by": "torch" if row.graph_breaks_exact else "distinct_sites",
        "step_time_median_s": row.step_time_median_s,
        "peak_rss_bytes": row.peak_rss_bytes,
        "peak_device_memory_bytes": row.peak_device_memory_bytes,
        "final_param_norm": row.param_norm,
        "final_grad_norm": row.grad_norm,
    }


def analysis_json(analysis: RankAnalysis) -> dict[str, Any]:
    t = analysis.totals
    return {
        "mode": analysis.mode,
        "world_size": analysis.world_size,
        "ranks": [row_json(r) for r in analysis.rows],
        "missing_ranks": list(analysis.missing),
        "other_processes": list(analysis.other_processes),
        "workers": analysis.workers,  # the ranks are training processes started without one, numbered by start
        "totals": {
            "ranks": t.ranks,
            "steps": t.steps,
            "ca_graphs": t.ca_graphs,
            "cache_misses": t.cache_misses,
            "graph_breaks": t.graph_breaks,
            "step_time_median_s_slowest": t.step_time_median_s,
            "peak_rss_bytes_sum": t.peak_rss_bytes,
            "peak_device_memory_bytes_sum": t.peak_device_memory_bytes,
        },
        "diverge": analysis.diverge,
        "findings": [
            {"code": f.code, "message": f.message, "ranks": list(f.ranks), "step": f.step, "data": f.data}
            for f in analysis.findings
        ],
    }


@dataclass(frozen=True)
class RankFocus:
    """A one-rank report's note on a multi-rank mode: which rank it shows, and the ranks' analysis."""

    analysis: RankAnalysis
    rank: int | None | tuple[int, ...]  # a tuple when a report shows several ranks (diff-graphs 0@0 1@1)

    @property
    def line(self) -> str:
        return ranks_line(self.analysis, self.rank)

    def to_json(self) -> dict[str, Any]:
        return {"shown_rank": self.rank, "line": self.line, **analysis_json(self.analysis)}


def focus_note(record: ModeRecord, rank: int | None) -> RankFocus | None:
    """The note of a mode with ranks; None where it has none (one process, or one that started
    only DataLoader workers or subprocesses, which a one-rank report has no rank of to show)."""
    analysis = analyze_ranks(record)
    if analysis is None or not (analysis.rows or analysis.missing or analysis.world_size is not None):
        return None
    return RankFocus(analysis, rank)
