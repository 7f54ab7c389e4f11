"""The gate on a multi-process run: every threshold is checked on every rank's own record, and
the run as a whole must have all its ranks, finished, followed, and agreeing.

Count thresholds apply **per rank**: `--max-recompiles ca:0` means no rank recompiled (what a
user means by "no recompiles"), not that the ranks' recompiles sum to zero; a rank-level result
is labelled `ca@rank1`. The checks of the run as a whole, each from `report.ranks` (the one
analysis summary shows too):

- `ranks-present`: as many rank records as the world size (a missing rank fails);
- `processes-followed`: no `process_not_followed` finding (a process cagtool could not follow
  is a blind spot: its recompiles would pass any limit);
- `ranks-agree`: the ranks ran the same CA graphs after the same cache misses, the same number
  of steps, and ended with the same parameter and gradient norms (ranks that part hang jobs, or
  train on unsynchronised gradients).

A failed rank fails its own `mode-finished` check. A rank started again by the script, not by a
launcher's restart (a second process group: fine-tuning after pretraining), is checked once per
start, each later one labelled `ca@rank1#2`: a start the ranks' table does not show is gated all the same.
"""

from __future__ import annotations

from dataclasses import replace

from cagtool.record.loader import RunRecord
from cagtool.report.gate.baseline import ModeSnapshot, ranks_said, run_snapshots
from cagtool.report.gate.checks import Check, CheckResult, Outcome, evaluate_all
from cagtool.report.ranks.analysis import (
    PROCESS_NOT_FOLLOWED,
    RANKS_SIZES_DIFFER,
    RankAnalysis,
    agreement,
    later_start_views,
    rank_view,
)


def label(mode: str, rank: int, start: int | None = None) -> str:
    # Not "ca[rank1]": brackets are markup to rich and odd in a JUnit classname.
    return f"{mode}@rank{rank}" + (f"#{start}" if start is not None else "")


def for_rank(result: CheckResult, rank: int, start: int | None = None) -> CheckResult:
    """A check's result on one rank's record, labelled with the rank (and the start, for a later
    start of the rank)."""
    mode = label(result.mode, rank, start)
    message = result.message.replace(f"({result.mode})", f"({mode})", 1)
    data = {**result.data, "rank": rank, **({"start": start} if start is not None else {})}
    return replace(result, mode=mode, message=message, data=data)


def per_rank_results(
    checks: list[Check],
    run: RunRecord,
    ranks: tuple[int, ...],
    baseline: dict[str, ModeSnapshot] | None,
    fail_on_improvement: bool,
) -> list[CheckResult]:
    """Every check on every rank's record, rank by rank, each later start of a rank after it."""
    results: list[CheckResult] = []
    for rank in ranks:
        snapshots = run_snapshots(rank_view(run, rank))
        results.extend(for_rank(r, rank) for r in evaluate_all(checks, snapshots, baseline, fail_on_improvement))
        for start, view in later_start_views(run, rank):
            results.extend(for_rank(r, rank, start) for r in evaluate_all(checks, run_snapshots(view), baseline, fail_on_improvement))
    return results


def _result(name: str, mode: str, ok: bool, actual: str, limit: str, message: str, data: dict) -> CheckResult:
    outcome = Outcome.PASS if ok else Outcome.FAIL
    return CheckResult(name, mode, outcome, not ok, actual, limit, f"{name} ({mode}): {message}", "run", data=data)


def run_level_results(analysis: RankAnalysis) -> list[CheckResult]:
    """ranks-present, processes-followed and ranks-agree for one mode's ranks."""
    mode = analysis.mode
    results = []
    size = analysis.world_size
    have = len(analysis.rows)
    if analysis.workers:
        present = _result("ranks-present", mode, True, str(have), "recorded", f"{have} training processes started without a rank, all "
                          "recorded (how many the job meant to start is not known)", {"ranks": list(analysis.ranks), "workers": True})
    elif size is None:
        present = _result("ranks-present", mode, True, str(have), "world size", f"{have} rank records; the world size was not recorded", {"ranks": list(analysis.ranks)})
    else:
        missing = analysis.missing
        text = f"{have} of {size} ranks recorded" + (f"; missing rank {', '.join(str(r) for r in missing)} (it did not start, or cagtool did not follow it)" if missing else "")
        present = _result("ranks-present", mode, not missing, f"{have}/{size}", f"{size}", text, {"ranks": list(analysis.ranks), "world_size": size, "missing": list(missing)})
    results.append(present)
    blind = analysis.of(PROCESS_NOT_FOLLOWED)
    results.append(processes_followed(mode, [f.message for f in blind]))
    if analysis.workers:  # each trains on its own: nothing to agree on, so no check says they do
        return results
    apart = analysis.divergences
    agree_text = "; ".join(f.message for f in apart) if apart else (
        f"{have} ranks ran the same CA graphs and cache misses and ended with the same norms"
        if all(r.reach is None for r in analysis.rows) and not analysis.of(RANKS_SIZES_DIFFER) else agreement(analysis))
    results.append(_result("ranks-agree", mode, not apart, "diverge" if apart else "agree", "agree", agree_text, {"findings": [f.code for f in apart]}))
    return results


def ranks_as_baseline(mode: str, have: int | None, held: int) -> CheckResult:
    """`ranks-as-baseline`: the run trained `mode` on as many ranks as the baseline it is gated
    against (`held`; `have` None: one process). Fewer fails: a rank the baseline had is missing, and
    every figure of the ranks left is judged against a job that is not this one."""
    fewer = (have or 1) < held
    text = (f"this run trained on {ranks_said(have)}, its baseline on {ranks_said(held)}"
            + (": a rank the baseline had is missing (a launcher or its settings changed?); save a new baseline where that is "
               "meant" if fewer else ""))
    return _result("ranks-as-baseline", mode, not fewer, str(have or 1), f">= {held}", text, {"ranks": have, "baseline_ranks": held})


def processes_followed(mode: str, messages: list[str]) -> CheckResult:
    if not messages:
        return _result("processes-followed", mode, True, "0", "0", "every process the target started was followed", {"not_followed": 0})
    text = f"{len(messages)} process(es) not followed: " + "; ".join(messages)
    return _result("processes-followed", mode, False, str(len(messages)), "0", text, {"not_followed": len(messages)})
