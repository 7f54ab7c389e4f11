"""`gate --max-grad-diff X`: every mode's gradients, per parameter at the digested steps, within X
times the gradient-parity tolerance of the reference's (report/compare/grad_parity.py). Reads the
run's records (not a baseline snapshot): it compares the modes of one run with each other.

Fails on the first bad step's parameters; an ERROR (never a pass) when nothing could be compared:
no digests, a single mode, random ops in compiled graphs without `cagtool run --parity`, or every
gradient compared zero on both sides."""

from __future__ import annotations

from cagtool.record.loader import RunRecord
from cagtool.report.compare.grad_parity import GradTolerance, grad_parity
from cagtool.report.gate.checks import CheckResult, Outcome, unmeasurable

NAME = "max-grad-diff"


def grad_parity_result(run: RunRecord, scale: float, source: str = "flag") -> CheckResult:
    parity = grad_parity(run, GradTolerance(scale))
    if parity.not_comparable and run.meta.written_before:
        # A mode that resumed from files an earlier mode wrote: compare's rule on the losses (of the
        # lowest rank's records, as compare reads a multi-rank run) says so.
        from cagtool.report.compare.analysis import run_numerics
        from cagtool.report.compare.closeness import Tolerance
        from cagtool.report.ranks.analysis import focused_run

        parity = parity.naming_resumes(run_numerics(focused_run(run, None)[0], Tolerance(), parity).resumed)
    limit = f"<= {scale:g}x tolerance"
    label = "/".join(sorted({p.record.split(" ")[0] for p in parity.pairs} | ({parity.reference.split(" ")[0]} if parity.reference else set()))) or "all"
    if not parity.pairs:
        why = "; ".join(parity.notes) or "fewer than two modes recorded gradient digests"
        if len(run.modes) < 2:
            why += " (record the run with at least two modes)"
        return unmeasurable(NAME, label, why, limit, source)
    blocked = parity.not_comparable
    compared = [p for p in parity.pairs if not p.not_comparable and p.steps]
    bad = parity.disagreements
    data = {"reference": parity.reference, "scale": scale, "pairs": [
        {"record": p.record, "reference": p.reference, "first_bad_step": p.first_bad_step, "params": p.params,
         "params_without_gradient": p.gradless, "steps": list(p.steps),
         "bad": [m.name for m in p.first_bad], "kinds": sorted({m.kind for m in p.first_bad}), "not_comparable": p.not_comparable or None,
         "max_excess": p.max_excess if p.max_excess != float("inf") else "inf"} for p in parity.pairs]}
    if bad:
        first = min(bad, key=lambda p: (p.first_bad_step, p.record))
        detail = "; ".join(m.describe() for m in first.first_bad[:3])
        message = f"{NAME} ({label}): {first.verdict()}: {detail}"
        worst = max(p.max_excess for p in bad)
        # Still a FAIL (the compiled job's gradients are not eager's), with which part differs.
        notes = [parity.summary().removeprefix("gradients: ")] if parity.compiled_otherwise() is not None else []
        return CheckResult(NAME, label, Outcome.FAIL, True, f"{worst:.3g}x" if worst != float("inf") else "inf", limit, message, source, notes, data)
    # A mode each of whose pairs with the reference is blocked was not measured: its ranks agreeing
    # with each other (DDP keeps them equal) says nothing of its gradients against the reference's.
    across_modes = {p.record.split(" ")[0] for p in compared if not p.across_ranks}
    unmeasured = [p for p in blocked if p.record.split(" ")[0] not in across_modes]
    if unmeasured:
        return unmeasurable(NAME, label, unmeasured[0].verdict(), limit, source)
    if not across_modes:
        return unmeasurable(NAME, label, "no digested step in common between the modes", limit, source)
    if all(p.all_zero for p in compared):
        return unmeasurable(NAME, label, compared[0].verdict(), limit, source)
    worst = max(p.max_excess for p in compared)
    notes = [p.verdict() for p in blocked]
    message = f"{NAME} ({label}): {parity.summary().removeprefix('gradients: ')}; worst {worst:.2g}x the tolerance"
    return CheckResult(NAME, label, Outcome.PASS, False, f"{worst:.3g}x", limit, message, source, notes, data)
