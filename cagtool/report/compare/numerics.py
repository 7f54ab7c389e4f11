"""Numerics: do the modes compute the same thing? Per-step losses and final norms against a reference.

The reference and the agreement rule (torch.allclose's, within a `Tolerance`) are set out in
report.compare's docstring. Pure analysis of run records; nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.schema import MODES, STATUS_FINISHED, FinalStateEvent, StepEvent
from cagtool.report.compare.columns import base_mode

# Numerics quantities, in display order.
LOSS = "loss"
PARAM_NORM = "param_norm"
GRAD_NORM = "grad_norm"


@dataclass(frozen=True)
class Tolerance:
    """When two values agree: |x - ref| <= atol + rtol * |ref| (torch.allclose's rule).

    rtol 1e-3: in float32, a compiled forward/backward reorders reductions and fuses ops, which
    moves a loss by about 1e-7..1e-5 relative per step, and training trajectories drift apart
    slowly after that; 1e-3 leaves room for that drift over tens of steps while a real error (a
    hook that did not run, a stale or missing gradient) moves the loss by 1e-2 or more within a
    few steps. atol 1e-6 only matters for values near zero (a loss that converged to 0)."""

    rtol: float = 1e-3
    atol: float = 1e-6

    def agrees(self, value: float, reference: float) -> bool:
        return abs(value - reference) <= self.atol + self.rtol * abs(reference)


def relative_difference(value: float, reference: float) -> float:
    """|value - reference| / |reference|; 0 when both are 0, inf when only the reference is."""
    diff = abs(value - reference)
    if diff == 0:
        return 0.0
    scale = abs(reference)
    return diff / scale if scale > 0 else float("inf")


@dataclass(frozen=True)
class NumericsDiff:
    """One quantity of one recorded mode against the reference."""

    quantity: str  # loss | param_norm | grad_norm
    record: str  # the directory compared, e.g. "ca" or "ca.2"
    reference: str  # the reference directory, e.g. "eager"
    compared: int  # values compared (steps, for the loss)
    max_rel_diff: float | None
    worst_step: int | None = None  # where the loss differs most
    value: float | None = None  # at the worst point
    reference_value: float | None = None
    agrees: bool = True
    note: str = ""


@dataclass(frozen=True)
class Numerics:
    reference: str | None
    tolerance: Tolerance
    diffs: tuple[NumericsDiff, ...] = ()
    notes: tuple[str, ...] = ()  # e.g. "no losses recorded (backward called on a non-scalar)"

    @property
    def agree(self) -> bool:
        return all(d.agrees for d in self.diffs)

    @property
    def max_rel_diff(self) -> float | None:
        values = [d.max_rel_diff for d in self.diffs if d.max_rel_diff is not None]
        return max(values) if values else None

    @property
    def disagreements(self) -> list[NumericsDiff]:
        return [d for d in self.diffs if not d.agrees]

    def worst_for(self, mode: str) -> float | None:
        """Largest relative difference of any repetition of `mode` (None: nothing compared)."""
        values = [d.max_rel_diff for d in self.diffs if base_mode(d.record) == mode and d.max_rel_diff is not None]
        return max(values) if values else None


@dataclass(frozen=True)
class NumericsSample:
    """What a mode record says about its numerics."""

    record: str
    losses: dict[int, float]  # step -> loss
    param_norm: float | None
    grad_norm: float | None
    finished: bool  # final norms only mean something when the run ended normally


def numerics_sample(name: str, record: ModeRecord) -> NumericsSample:
    losses = {s.step: s.loss for s in record.of(StepEvent) if s.loss is not None}
    final = record.of(FinalStateEvent)
    finished = record.manifest.status == STATUS_FINISHED and record.manifest.exit_code in (0, None)
    return NumericsSample(
        record=name,
        losses=losses,
        param_norm=final[-1].param_norm if final else None,
        grad_norm=final[-1].grad_norm if final else None,
        finished=finished,
    )


def _loss_diff(sample: NumericsSample, reference: NumericsSample, tol: Tolerance) -> NumericsDiff | None:
    common = sorted(set(sample.losses) & set(reference.losses))
    if not common:
        if sample.losses and reference.losses:
            return NumericsDiff(LOSS, sample.record, reference.record, 0, None, agrees=True, note="no step in common")
        return None
    worst_step = max(common, key=lambda step: relative_difference(sample.losses[step], reference.losses[step]))
    agrees = all(tol.agrees(sample.losses[s], reference.losses[s]) for s in common)
    note = ""
    if len(sample.losses) != len(reference.losses):
        note = f"{sample.record} has {len(sample.losses)} losses, {reference.record} {len(reference.losses)}: compared the {len(common)} steps both ran"
    return NumericsDiff(
        quantity=LOSS,
        record=sample.record,
        reference=reference.record,
        compared=len(common),
        max_rel_diff=relative_difference(sample.losses[worst_step], reference.losses[worst_step]),
        worst_step=worst_step,
        value=sample.losses[worst_step],
        reference_value=reference.losses[worst_step],
        agrees=agrees,
        note=note,
    )


def _norm_diff(quantity: str, sample: NumericsSample, reference: NumericsSample, tol: Tolerance) -> NumericsDiff | None:
    value, ref = getattr(sample, quantity), getattr(reference, quantity)
    if value is None or ref is None or not (sample.finished and reference.finished):
        return None
    return NumericsDiff(
        quantity=quantity,
        record=sample.record,
        reference=reference.record,
        compared=1,
        max_rel_diff=relative_difference(value, ref),
        value=value,
        reference_value=ref,
        agrees=tol.agrees(value, ref),
    )


def compare_samples(samples: list[NumericsSample], reference: NumericsSample | None, tol: Tolerance) -> Numerics:
    if reference is None:
        return Numerics(None, tol, notes=("no mode recorded a scalar loss or final norms: nothing to compare",))
    diffs: list[NumericsDiff] = []
    notes: list[str] = []
    for sample in samples:
        if sample.record == reference.record:
            continue
        found = [
            _loss_diff(sample, reference, tol),
            _norm_diff(PARAM_NORM, sample, reference, tol),
            _norm_diff(GRAD_NORM, sample, reference, tol),
        ]
        kept = [d for d in found if d is not None]
        if not kept:
            notes.append(f"{sample.record}: nothing to compare with {reference.record}")
        diffs.extend(kept)
    return Numerics(reference.record, tol, tuple(diffs), tuple(notes))


def _pick_reference(samples: list[NumericsSample]) -> NumericsSample | None:
    """eager (the ground truth: no compiler involved) when it has values, else the first that does."""
    useful = [s for s in samples if s.losses or (s.finished and (s.param_norm is not None or s.grad_norm is not None))]
    if not useful:
        return None
    by_mode = {base_mode(s.record): s for s in reversed(useful)}  # first repetition wins
    for mode in MODES:
        if mode in by_mode:
            return by_mode[mode]
    return useful[0]


def run_numerics(run: RunRecord, tol: Tolerance) -> Numerics:
    samples = [numerics_sample(name, record) for name, record in run.modes.items()]
    return compare_samples(samples, _pick_reference(samples), tol)


def numerics_problem(diff: NumericsDiff, tol: Tolerance) -> str:
    """The one-line problem a disagreeing diff is reported as."""
    where = f" at step {diff.worst_step}" if diff.worst_step is not None else ""
    hint = ""
    within_one_run = " " not in diff.record and " " not in diff.reference  # before/after names are "A ca", "B ca"
    if within_one_run and base_mode(diff.record) == base_mode(diff.reference) and diff.record != diff.reference:
        hint = "; the same mode differs from itself, so the script is not deterministic (seed it with torch.manual_seed)"
    return (
        f"numerics: {diff.quantity} of {diff.record} differs from {diff.reference}{where} by "
        f"{format_rel(diff.max_rel_diff)} relative ({diff.value!r} vs {diff.reference_value!r}; "
        f"tolerance rtol {tol.rtol:g}, atol {tol.atol:g}){hint}"
    )


def format_rel(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value == 0:
        return "0"
    if value == float("inf"):
        return "inf"
    return f"{value:.2e}"
