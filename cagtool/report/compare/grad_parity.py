"""Gradient parity: did eager, aot and ca compute the same gradients, parameter by parameter?

Reads the `grad_digest` events (capture/steps/grad_digest.py: per parameter, at chosen steps, the
gradient's L2 norm, max-abs and an order-sensitive checksum) and compares every mode (and every
repetition) with a reference (eager, else the first mode with digests) at the steps both digested.
A multi-rank job is compared rank by rank, and each mode's ranks with its first rank (DDP keeps
every rank's gradients equal after the all-reduce: a difference is an unsynchronised gradient).

The tolerance (`GradTolerance`), per parameter and step:
- rtol = max(BASE_RTOL[dtype], 16 * eps(dtype) * sqrt(numel)) * (1 + step). A compiled backward
  reorders and fuses the same float operations, so each gradient element moves by a few ulps
  times the square root of the reduction it came out of; the parameter's size stands for that
  reduction (the digest's own sum is over numel elements), and BASE_RTOL (1e-4 for float32, as
  torch's own accuracy check, torch._dynamo.utils.same) is the floor. After step 0 the modes'
  parameters have drifted apart by the previous steps' round-off, so the tolerance grows with the
  step: step 0 is held tightest, and the first bad step is the one to read.
- atol = 16 * eps(dtype) * the reference's largest gradient norm at that step: a gradient that is
  zero in exact arithmetic comes out as round-off of that size.
- norm and max-abs agree when |a - b| <= atol + rtol * max(|a|, |b|); the checksums when
  |a - b| <= 2 * sqrt(numel) * (atol + rtol * max(norm_a, norm_b)), the most a gradient
  difference within the norm's tolerance can move a sum weighted by w_i in [1, 2).
- Under autocast the parameters are float32 but every matmul and its gradient are computed in
  bfloat16 (or float16), and a compiled program rounds otherwise than eager (Inductor keeps a
  fusion's intermediates in float32): on a pair that differs at float32's tolerance whose compiled
  graphs (Dynamo's, AOTAutograd's, the CA graph's code) compute in such a dtype
  (`low_precision_compute`), that dtype's eps is the floor of rtol and of atol's factor
  (`GradTolerance.compute`), and the pair says so. A 2 % difference in one gradient still fails at
  step 0 (tests/scripts/autocast_bf16.py --wrong).
`cagtool gate --max-grad-diff X` scales this tolerance by X.

Not comparable either: a pair whose first-step losses already differ (the forward saw other
inputs: an unseeded rank, data order), as in the loss numerics' own rule.

Drift (drift.py): where the pair's losses agree within 1e-5 over the first 20 steps, leave it
growing rather than at a jump, and the gradients agree at every digested step before the losses part beyond rtol 1e-3, gradients that
differ at a step from there on are of parameters that round-off amplified by training has already
moved apart: those steps are listed (`PairParity.drifted`), not counted as a disagreement. Where
the rule cannot tell (the losses parted too soon, or at a jump), a first differing step at or after
the parting still counts, said as of parameters already apart (`PairParity.after_parting`), with no
swap, scale or sign read into it. So does one at or after the step the losses left round-off
(1e-5, growing, not at a jump) where they never part beyond the tolerance: a short run under Adam,
whose near-zero gradients (a bias before a normalization) it turns into full-size steps, moves the
weights apart within a step or two while the losses still agree (`parted_by_round_off`).

What a mismatch looks like (`ParamMismatch.kind`): `missing` (a gradient in one mode, None in the
other), `zero` (zero in one, not in the other: a hook or a branch that ran in one mode only),
`sign` (same norms, negated checksum), `scale` (every digest scaled by the same factor), `swapped`
(the gradient equals the reference's gradient of one other parameter, which no other parameter's
equals too), `nonfinite`, else `differs`.

Random numbers: compiled code (Inductor) draws random numbers differently from eager, so with
dropout and friends in a compiled graph the gradients differ for that reason alone. When a mode's
gradients differ and its compiled graphs (each compile's Dynamo and AOT graphs, kept as compile
artifacts; the CA graph code under graphs/; the TORCH_TRACE log under trace/ when the run was
recorded with --torch-trace) call a random op, the pair is *not comparable* rather than disagreeing, unless the
run made compiled code draw eager-equal numbers (`cagtool run --parity`:
torch._inductor.config.fallback_random, recorded in the manifest).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from cagtool.report.text.words import and_words
from cagtool.errors import UnreadableInput
from cagtool.record.regular_files import read_record_chunks
from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.manifest import WrittenFiles
from cagtool.record.schema import (
    ARTIFACT_AOT_BACKWARD,
    ARTIFACT_AOT_FORWARD,
    ARTIFACT_DYNAMO_GRAPH,
    ARTIFACT_INDUCTOR_CODE,
    FIRST_STEP,
    GRAPHS_DIR,
    MODES,
    OPTIMIZER_TENSOR_PREFIX,
    REASON_LAST,
    REASON_SAME_AT_END,
    UNNAMED_TENSOR_PREFIX,
    STEP_BOUNDARY_COMPILED_OPTIMIZER,
    TRACE_DIR,
    DynamoCompileEvent,
    GradDigestEvent,
    StepEvent,
)
from cagtool.report.compare.drift import DRIFT_RTOL, LossDrift, loss_drift
from cagtool.report.figures.pooled import base_mode
from cagtool.torch_text import in_torch_optim

BASE_RTOL = {"float64": 1e-7, "float32": 1e-4, "bfloat16": 2e-2, "float16": 4e-3}
EPS = {"float64": 2.2e-16, "float32": 1.19e-7, "bfloat16": 7.8e-3, "float16": 9.8e-4}
SIZE_FACTOR = 16.0
# The loss numerics' tolerance (compare/analysis.py Tolerance), for "inputs differ".
FIRST_LOSS_RTOL, FIRST_LOSS_ATOL = 1e-3, 1e-6
MAX_RTOL = 0.5  # beyond this the digests say nothing: a later step is compared no looser

MISSING = "missing"
ZERO = "zero"
SIGN = "sign"
SCALE = "scale"
SWAPPED = "swapped"
NONFINITE = "nonfinite"
DIFFERS = "differs"

# Random ops as they appear in graph code (aten names, torch functions, Inductor's RNG helpers).
_RANDOM_OP = re.compile(
    r"\b(native_dropout|dropout|bernoulli_?|rand|randn|rand_like|randn_like|randint|randint_like|randperm|"
    r"multinomial|normal_|uniform_|exponential_|geometric_|cauchy_|log_normal_|poisson|"
    r"inductor_random|inductor_seeds?|philox_rand\w*)\b"
)


@dataclass(frozen=True)
class GradTolerance:
    """See the module docstring; `scale` multiplies rtol and atol (gate --max-grad-diff)."""

    scale: float = 1.0
    # The lowest precision the pair's compiled graphs compute in where it is below a gradient's own
    # dtype (`low_precision_compute`: bfloat16 under autocast): each element then carries that
    # dtype's rounding, whatever the precision it is accumulated in.
    compute: str | None = None

    def _compute_eps(self, dtype: str) -> float:
        own = EPS.get(dtype, EPS["float32"])
        return max(own, EPS[self.compute]) if self.compute in EPS else own

    def rtol(self, dtype: str, numel: int, step: int) -> float:
        base = max(BASE_RTOL.get(dtype, BASE_RTOL["float32"]), SIZE_FACTOR * EPS.get(dtype, EPS["float32"]) * math.sqrt(max(numel, 1)),
                   self._compute_eps(dtype))
        return min(base * (1 + max(step, 0)), MAX_RTOL) * self.scale

    def atol(self, dtype: str, largest_norm: float) -> float:
        return max(SIZE_FACTOR * EPS.get(dtype, EPS["float32"]), self._compute_eps(dtype)) * largest_norm * self.scale


@dataclass(frozen=True)
class Digest:
    norm: float | None
    max_abs: float | None
    checksum: float | None
    dtype: str
    numel: int
    shard: bool = False  # this rank's shard of the parameter (GradDigestEvent.shard): not compared across ranks


@dataclass(frozen=True)
class ParamMismatch:
    """One parameter at one step, beyond tolerance."""

    name: str
    step: int
    kind: str  # MISSING | ZERO | SIGN | SCALE | SWAPPED | NONFINITE | DIFFERS
    norm: float | None
    reference_norm: float | None
    checksum: float | None
    reference_checksum: float | None
    excess: float  # the worst |difference| / allowed difference of the three digests (inf: missing)
    ratio: float | None = None  # norm / reference norm (the factor of a `scale`)
    other: str = ""  # SWAPPED: the reference's parameter it equals

    def describe(self) -> str:
        if self.kind == MISSING:
            has = "no gradient here" if self.norm is None else "no gradient in the reference"
            return f"{self.name}: {has}"
        if self.kind == ZERO:
            zero = "zero here" if not self.norm else "zero in the reference"
            return f"{self.name}: gradient {zero}, not in the other (norms {_g(self.norm)} vs {_g(self.reference_norm)}): a hook or branch that ran in one mode only"
        if self.kind == SIGN:
            return f"{self.name}: sign flipped (same norm {_g(self.norm)}, checksum {_g(self.checksum)} vs {_g(self.reference_checksum)})"
        if self.kind == SCALE:
            return f"{self.name}: scaled by {_g(self.ratio)} (norm {_g(self.norm)} vs {_g(self.reference_norm)})"
        if self.kind == SWAPPED:
            return f"{self.name}: holds the reference's gradient of {self.other} (norm {_g(self.norm)} vs {_g(self.reference_norm)})"
        if self.kind == NONFINITE:
            return f"{self.name}: non-finite gradient (norm {_g(self.norm)} vs {_g(self.reference_norm)})"
        ratio = f", norm ratio {_near_one(self.ratio)}" if self.ratio is not None else ""
        return (f"{self.name}: differs {self.excess:.3g}x the tolerance (norm {_g(self.norm)} vs {_g(self.reference_norm)}, "
                f"checksum {_g(self.checksum)} vs {_g(self.reference_checksum)}{ratio})")


@dataclass(frozen=True)
class PairParity:
    """One record (a mode, a repetition, a rank) against its reference."""

    record: str
    reference: str
    steps: tuple[int, ...]  # compared: digested on both sides
    params: int  # parameters compared (the union over the steps) with a gradient on a side at a step
    first_bad_step: int | None = None
    first_bad: tuple[ParamMismatch, ...] = ()  # every mismatch at the first bad step
    bad_steps: tuple[int, ...] = ()
    mismatches: int = 0  # (parameter, step) pairs beyond tolerance, all steps
    max_excess: float = 0.0  # the worst |difference| / allowed difference seen (< 1: agrees)
    only_record: tuple[int, ...] = ()  # steps digested on one side only (not compared)
    only_reference: tuple[int, ...] = ()
    not_comparable: str = ""  # why the two cannot be compared (random ops); then nothing is compared
    across_ranks: bool = False  # rank N of a mode against rank 0 of the same mode
    # Steps whose gradients differ after the losses drifted apart (drift.py), from `parted_at`, the
    # first step whose losses differ beyond the tolerance: listed, not counted in the steps above.
    drifted: tuple[int, ...] = ()
    parted_at: int | None = None
    compared: int = 0  # (parameter, step) pairs compared
    zero: int = 0  # ... of which the gradient is exactly zero on both sides
    # Not comparable because the first step's losses already differ: (record's, reference's).
    first_losses: tuple[float, float] | None = None
    # Compared at this dtype's precision (GradTolerance.compute): the compiled graphs compute in it.
    compute: str | None = None
    # The step the losses parted at (beyond the tolerance), where the first step whose gradients
    # differ comes at or after it and the drift rule cannot set the difference apart: the gradients
    # of parameters that had already moved apart, still counted, no kind read into them.
    after_parting: int | None = None
    # Where `after_parting` is the step the losses left round-off (DRIFT_RTOL, growing, not at a jump)
    # rather than parted beyond the tolerance: a short run whose weights moved apart (Adam turns a
    # near-zero gradient's round-off into full-size steps) while its losses still agree.
    parted_by_round_off: bool = False
    # Parameters with no gradient on either side at every step compared (frozen but handed to the
    # optimizer, or not reached by the loss): not counted in `params` or `compared`.
    gradless: int = 0
    # Not comparable for random ops: the compiled record that drew them and the ops (its graphs').
    random_ops: tuple[str, tuple[str, ...]] | None = None

    def resumed_from(self, written: WrittenFiles) -> PairParity:
        """Not comparable for other inputs, where the comparison of the losses found the record's
        mode resumed from files an earlier mode wrote (analysis.py, `Numerics.resumed`): that
        cause, not the list of other ones."""
        if self.first_losses is None:
            return self
        a, b = self.first_losses
        return replace(self, not_comparable=(
            f"inputs differ: the first step's losses already differ ({a!r} vs {b!r}) before any backward ran, and it started "
            f"after an earlier mode wrote {written.shown()} in the job's working directory: a job that resumes from its "
            "own files (a checkpoint) runs differently in each mode"))

    @property
    def all_zero(self) -> bool:
        """Every gradient compared is zero on both sides: they agree, and that says nothing of the
        backward (a loss that does not reach the parameters; digests taken after the job zeroed them).
        So is no parameter with a gradient on either side."""
        return self.zero == self.compared and (self.compared > 0 or self.gradless > 0)

    def gradless_words(self) -> str:
        """The parameters left out of the count for having no gradient on either side."""
        if not self.gradless:
            return ""
        return f"; {_n(self.gradless, 'more parameter')} {'has' if self.gradless == 1 else 'have'} no gradient on either side"

    @property
    def agrees(self) -> bool:
        return self.not_comparable != "" or self.first_bad_step is None

    def verdict(self) -> str:
        if self.not_comparable:
            return f"{self.record} vs {self.reference}: not comparable: {self.not_comparable}"
        if not self.steps:
            return f"{self.record} vs {self.reference}: no digested step in common"
        if self.first_bad_step is None and self.all_zero and not self.params:
            return (f"{self.record} vs {self.reference}: no parameter has a gradient on either side ({_n(self.gradless, 'parameter')} "
                    f"at {_n(len(self.steps), 'digested step')}): nothing to compare ({_NO_GRADIENT_WHY})")
        if self.first_bad_step is None and self.all_zero:
            return (f"{self.record} vs {self.reference}: every gradient compared is zero on both sides ({_n(self.params, 'parameter')} "
                    f"at {_n(len(self.steps), 'digested step')}{self.gradless_words()}): nothing to compare ({_ZERO_GRADIENT_WHY})")
        if self.first_bad_step is None:
            return (f"{self.record} agrees with {self.reference} on all {_n(self.params, 'parameter')} at "
                    f"{_n(len(self.steps), 'digested step')} ({_steps(self.steps)}; worst {self.max_excess:.2g}x the tolerance"
                    f"{self.precision_words()}{self.gradless_words()})" + self.drift_words())
        names = ", ".join(m.name for m in self.first_bad[:3]) + (f" and {len(self.first_bad) - 3} more" if len(self.first_bad) > 3 else "")
        unsynced = " (gradients not synchronised across ranks)" if self.across_ranks else ""
        return (f"{self.record} differs from {self.reference} first at step {self.first_bad_step}, in {len(self.first_bad)} of "
                f"{self.params} parameters ({names}){unsynced}; {len(self.bad_steps)} of {len(self.steps)} digested steps differ"
                + (f" ({self.precision_words().removeprefix(' ')})" if self.compute else "") + self.parting_words())

    def parting_words(self) -> str:
        """Where the first differing step comes after the losses parted: what that step can say."""
        if self.after_parting is None:
            return ""
        before = [s for s in self.steps if s < self.after_parting]
        began = (f"every step compared before it agrees ({_steps(tuple(before))}): the difference began after step {before[-1]} "
                 f"and by step {self.after_parting}" if before else f"the difference began by step {self.after_parting}")
        parted = (f"the losses left round-off (beyond {DRIFT_RTOL:g} relative from step {self.after_parting}, growing, not at a "
                  f"jump; within rtol {FIRST_LOSS_RTOL:g} all the same)" if self.parted_by_round_off else
                  f"the losses parted (beyond rtol {FIRST_LOSS_RTOL:g} from step {self.after_parting})")
        return (f"; that step comes after {parted}: "
                f"gradients of parameters that had already moved apart, which say that the run went elsewhere, not where; "
                f"{began}, where no step was digested in both (`cagtool run --parity-every K` digests every K steps)")

    def precision_words(self) -> str:
        if not self.compute:
            return ""
        return f" at {self.compute}'s precision: the compiled graphs compute in {self.compute}, as under autocast"


    def drift_words(self) -> str:
        if not self.drifted:
            return ""
        return (f"; at {_steps(self.drifted)} they differ, after the losses drifted apart (beyond rtol {FIRST_LOSS_RTOL:g} from step "
                f"{self.parted_at}): parameters that round-off amplified by training had moved apart, not counted")


@dataclass(frozen=True)
class GradParity:
    reference: str | None
    pairs: tuple[PairParity, ...] = ()
    notes: tuple[str, ...] = ()
    tolerance: GradTolerance = field(default_factory=GradTolerance)
    nonfinite: tuple[str, ...] = ()  # "NaN from step 4 in eager, aot and ca (weight, bias)"
    # Each ca record that differs from eager where aot (the same compiler, without compiled
    # autograd) differs from eager too, against aot: which of the two changed the gradients.
    against_aot: tuple[PairParity, ...] = ()

    @property
    def has_digests(self) -> bool:
        return bool(self.pairs)

    def naming_resumes(self, resumed: dict[str, WrittenFiles]) -> GradParity:
        """With the modes the losses' comparison found resumed from files an earlier mode wrote
        (`Numerics.resumed`, by mode) named as why their pairs are not comparable."""
        if not resumed:
            return self
        pairs = tuple(p.resumed_from(resumed[p.record.split(" ")[0]]) if p.record.split(" ")[0] in resumed else p for p in self.pairs)
        return replace(self, pairs=pairs)

    @property
    def agree(self) -> bool:
        return all(p.agrees for p in self.pairs)

    @property
    def disagreements(self) -> list[PairParity]:
        return [p for p in self.pairs if not p.agrees]

    @property
    def not_comparable(self) -> list[PairParity]:
        return [p for p in self.pairs if p.not_comparable]

    def summary(self) -> str:
        compared = [p for p in self.pairs if not p.not_comparable and p.steps and not p.across_ranks]
        if compared and self.agree and all(p.all_zero for p in compared):
            if len(compared) == 1:
                return "gradients: " + compared[0].verdict() + self._nonfinite_said()
            # Said once for every pair (each pair's line below says it again of itself).
            names = and_words(self._modes_of(compared))
            ranks = {p.record.partition(" ")[2] for p in compared} - {""}
            steps = max(len(p.steps) for p in compared)
            where = f" on each of {len(ranks)} ranks" if ranks else ""
            if not any(p.params for p in compared):
                return (f"gradients: nothing to compare: no parameter has a gradient in {names} (at {_n(steps, 'digested step')}{where}): "
                        + _NO_GRADIENT_WHY + self._nonfinite_said())
            params = max(p.params for p in compared)
            return (f"gradients: nothing to compare: every gradient compared is zero in {names} ({_n(params, 'parameter')} at "
                    f"{_n(steps, 'digested step')}{where}): " + _ZERO_GRADIENT_WHY + self._nonfinite_said())
        if not self.pairs:
            return "gradients: not compared: " + "; ".join(self.notes[:4]) if self.reference is not None and self.notes else "gradients: no digests recorded"
        if self.agree and compared:
            records = {p.record.split(" ")[0] for p in compared} | {(self.reference or "").split(" ")[0]}
            modes = {base_mode(record) for record in records}  # `ca.2`: the ca mode's second process (--repeat)
            ranks = {p.record.partition(" ")[2] for p in compared} - {""}
            widest = max(compared, key=lambda p: (p.params, -p.gradless))
            params = widest.params
            gradless = (f" ({_n(widest.gradless, 'more parameter')} without a gradient in any {'mode' if len(modes) > 1 else 'process'})"
                        if widest.gradless else "")
            steps = max(len(p.steps) for p in compared)
            where = f" on each of {len(ranks)} ranks" if ranks else ""
            processes = f" ({len(records)} processes)" if len(records) > len(modes) else ""
            drifted = [p for p in compared if p.drifted]
            later = f"; {', '.join(p.record for p in drifted)}: later steps differ after the losses drifted apart" if drifted else ""
            held = [p for p in compared if p.compute]
            low = held[0].compute if held else None
            which = "" if len(held) == len(compared) else f"{', '.join(p.record for p in held)} "
            precision = f" ({which}at {low}'s precision, which the compiled graphs compute in)" if low else ""
            who = f"the {len(modes)} modes" if len(modes) > 1 else f"the {len(records)} processes of {next(iter(modes))}"
            if len(modes) > 1 and len(compared) < len(self.pairs):  # a pair not compared (its line below says why): which agree
                who = and_words(self._modes_of(compared))
            processes = processes if len(modes) > 1 else ""
            return (f"gradients: {who} agree on all {_n(params, 'parameter')} at {_n(steps, 'digested step')}{where}{processes}"
                    + gradless + precision + later + self._nonfinite_said())
        bad = self.disagreements
        if bad and (beside := self.compiled_otherwise()) is not None:
            eager = min((p for p in bad if base_mode(p.record.split(" ")[0]) == "aot"), key=lambda p: (p.first_bad_step, p.record))
            return (f"gradients: {beside.verdict()}; both differ from {eager.reference} (first at step {eager.first_bad_step}, "
                    f"in {len(eager.first_bad)} of {eager.params} parameters): the compiled program computes otherwise than "
                    f"{eager.reference}, not compiled autograd" + self._nonfinite_said())
        if bad:
            first = min(bad, key=lambda p: (p.first_bad_step, p.record))
            return "gradients: " + first.verdict() + self._nonfinite_said()
        ranks = [p for p in self.pairs if p.across_ranks and not p.not_comparable and p.steps]
        if ranks and len(ranks) == len(self.pairs) and self.agree:
            # One mode of a multi-rank run: its ranks against its rank 0 (DDP keeps them alike), no other mode.
            params, steps = max(p.params for p in ranks), max(len(p.steps) for p in ranks)
            said = (f": every gradient compared is zero ({_n(params, 'parameter')} at {_n(steps, 'digested step')})"
                    if all(p.all_zero for p in ranks) else f" agree on all {_n(params, 'parameter')} at {_n(steps, 'digested step')}")
            return (f"gradients: nothing to compare across modes (only {and_words(self._modes_of(ranks))} recorded); its "
                    f"{len(ranks) + 1} ranks{said}" + self._nonfinite_said())
        if (why := self.one_reason()) is not None:
            return (f"gradients: nothing compared ({', '.join(f'{p.record} vs {p.reference}' for p in self.pairs)}): not comparable: "
                    + why + self._nonfinite_said())
        if all(p.not_comparable for p in self.pairs):  # each for a reason of its own, which its line below says
            return (f"gradients: nothing compared ({', '.join(f'{p.record} vs {p.reference}' for p in self.pairs)}): none "
                    "comparable, each for the reason below" + self._nonfinite_said())
        return "gradients: nothing compared (" + "; ".join(p.verdict() for p in self.pairs) + ")" + self._nonfinite_said()

    def _modes_of(self, pairs: list[PairParity]) -> list[str]:
        """The modes of these pairs' records, then the reference's, each once, in that order."""
        records = [p.record for p in pairs] + [self.reference or ""]
        return list(dict.fromkeys(base_mode(record.split(" ")[0]) for record in records))

    def one_reason(self) -> str | None:
        """Why no pair is comparable, where every pair says the same (Hogwild's shared weights):
        said once, not once per pair; None otherwise."""
        reasons = {p.not_comparable for p in self.pairs}
        if len(reasons) == 1 and "" not in reasons:
            return next(iter(reasons))
        drawn = [p.random_ops for p in self.pairs]
        if all(drawn):  # random ops in every pair's compiled graphs (dropout in aot's and in ca's): one reason, each named
            return _random_ops_reason([name.split(" ")[0] for name, _ in drawn], [op for _, ops in drawn for op in ops])
        return None

    def compiled_otherwise(self) -> PairParity | None:
        """Where every record that differs from the reference (eager) is an aot one, or a ca one
        that agrees with aot: ca against aot (the first), as the numerics read it
        (analysis.Numerics.against_aot); None otherwise. What differs then is the compiled program,
        not compiled autograd (a library that reads TORCHDYNAMO_DISABLE, under which eager runs)."""
        bad = self.disagreements
        if not self.against_aot or not all(p.agrees and p.steps for p in self.against_aot):
            return None
        answered = {p.record for p in self.against_aot}
        if not any(base_mode(p.record.split(" ")[0]) == "aot" for p in bad):
            return None
        if all(base_mode(p.record.split(" ")[0]) == "aot" or p.record in answered for p in bad):
            return self.against_aot[0]
        return None

    def _nonfinite_said(self) -> str:
        return "; not finite: " + "; ".join(self.nonfinite) if self.nonfinite else ""


# Why gradients that are all zero, or all absent, compare nothing: said of a pair and of a run.
_ZERO_GRADIENT_WHY = "the loss does not reach the parameters, or they were digested after the job zeroed them"
_NO_GRADIENT_WHY = "the loss does not reach the parameters, or they were digested after the job set their gradients to None"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _g(value: float | None) -> str:
    return "None" if value is None else f"{value:.6g}"


def _near_one(ratio: float) -> str:
    """A ratio with the digits that tell it from 1 (`1.0000017`, not `1`)."""
    off = abs(ratio - 1)
    digits = 6 if off >= 1e-5 or off == 0 or not math.isfinite(off) else min(15, 2 - math.floor(math.log10(off)))
    return f"{ratio:.{digits}g}"


def _steps(steps: tuple[int, ...]) -> str:
    shown = ", ".join(str(s) for s in steps[:8])
    return ("step " if len(steps) == 1 else "steps ") + shown + (f" ... {steps[-1]}" if len(steps) > 8 else "")


def digests_of(record: ModeRecord) -> dict[int, dict[str, Digest]]:
    """step -> parameter name -> digest (a step digested twice: the later event wins)."""
    out: dict[int, dict[str, Digest]] = {}
    for event in record.of(GradDigestEvent):
        n = len(event.names)
        if not (len(event.dtypes) == len(event.numels) == len(event.norm) == len(event.max_abs) == len(event.checksum) == n):
            continue  # damaged: parallel lists of different lengths
        shard = event.shard if event.shard is not None and len(event.shard) == n else [False] * n
        out[event.step] = {
            name: Digest(event.norm[i], event.max_abs[i], event.checksum[i], event.dtypes[i], event.numels[i], shard[i])
            for i, name in enumerate(_unique(event.names))
        }
    return out


def _compiled_optimizer(record: ModeRecord) -> bool:
    """Whether an optimizer of the record stepped inside compiled code (no pre-hook digested it):
    a step it closed, or a frame of torch.optim's that Dynamo compiled (one optimizer compiled
    beside another stepped eagerly: the eager one's hooks close the steps)."""
    return (any(s.boundary == STEP_BOUNDARY_COMPILED_OPTIMIZER for s in record.of(StepEvent))
            or any(in_torch_optim(c.co_filename) for c in record.of(DynamoCompileEvent)))


def digested_at_end(record: ModeRecord) -> set[int]:
    """The steps digested only as the run's last, at its end (reasons ["last"]); every other digest
    was taken in an optimizer's step pre-hook, before the step consumed the gradients, or, without
    an optimizer, where the step's backward returned."""
    return {event.step for event in record.of(GradDigestEvent) if event.reasons == [REASON_LAST]}


def same_at_end(record: ModeRecord) -> set[int]:
    """The last step where its digest, taken during the run, held at the run's end too (the
    gradients digested again there were the same: REASON_SAME_AT_END); it compares with a digest
    of either moment."""
    return {event.step for event in record.of(GradDigestEvent) if REASON_SAME_AT_END in event.reasons}


def _unique(names: list[str]) -> list[str]:
    """Parameters of two top-level modules can share a path ("weight"): the later ones are told
    apart by their place in the record's order ("weight (2)"), which for those is the order they
    were registered on modules (capture/steps/grad_digest.py), the same in every mode."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def nonfinite_of(digests: dict[int, dict[str, Digest]]) -> tuple[int, str, list[str]] | None:
    """The first digested step with a NaN or infinite gradient: (step, "NaN" | "inf", parameters)."""
    for step in sorted(digests):
        names = [name for name, d in digests[step].items() if d.norm is not None and not _finite(d.norm, d.max_abs, d.checksum)]
        if names:
            nan = any(v is not None and math.isnan(v) for name in names for v in (digests[step][name].norm, digests[step][name].checksum))
            return step, "NaN" if nan else "inf", names
    return None


def _nonfinite_lines(digested: dict[str, tuple[ModeRecord, dict[int, dict[str, Digest]]]]) -> tuple[str, ...]:
    grouped: dict[tuple[int, str, tuple[str, ...]], list[str]] = {}
    for label, (_rec, digests) in digested.items():
        found = nonfinite_of(digests)
        if found is not None:
            step, word, names = found
            grouped.setdefault((step, word, tuple(names)), []).append(label)
    lines = []
    for (step, word, names), labels in grouped.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        where = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
        lines.append(f"{word} from step {step} in {where} ({shown})")
    return tuple(lines)


def _finite(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def _excess(a: float, b: float, allowed: float) -> float:
    diff = abs(a - b)
    if diff == 0:
        return 0.0
    return diff / allowed if allowed > 0 else math.inf


def compare_param(name: str, step: int, got: Digest | None, ref: Digest | None, largest: float, tol: GradTolerance) -> tuple[float, ParamMismatch | None]:
    """(worst |difference| / allowed, the mismatch when beyond tolerance) of one parameter."""
    g_norm = got.norm if got is not None else None
    r_norm = ref.norm if ref is not None else None
    if g_norm is None or r_norm is None:
        if g_norm is None and r_norm is None:
            return 0.0, None
        return math.inf, ParamMismatch(name, step, MISSING, g_norm, r_norm, got.checksum if got else None, ref.checksum if ref else None, math.inf)
    assert got is not None and ref is not None
    if not _finite(got.norm, got.max_abs, got.checksum) or not _finite(ref.norm, ref.max_abs, ref.checksum):
        if all(_same_nonfinite(a, b) for a, b in ((got.norm, ref.norm), (got.max_abs, ref.max_abs), (got.checksum, ref.checksum))):
            return 0.0, None
        return math.inf, ParamMismatch(name, step, NONFINITE, got.norm, ref.norm, got.checksum, ref.checksum, math.inf)
    rtol = tol.rtol(ref.dtype, ref.numel, step)
    atol = tol.atol(ref.dtype, largest)
    top = max(got.norm, ref.norm)  # type: ignore[type-var]
    excess = max(
        _excess(got.norm, ref.norm, atol + rtol * top),  # type: ignore[arg-type]
        _excess(got.max_abs, ref.max_abs, atol + rtol * max(got.max_abs, ref.max_abs)),  # type: ignore[arg-type, type-var]
        _excess(got.checksum, ref.checksum, 2 * math.sqrt(max(ref.numel, 1)) * (atol + rtol * top)),  # type: ignore[arg-type]
    )
    if excess <= 1:
        return excess, None
    return excess, ParamMismatch(name, step, _kind(got, ref, atol, rtol), got.norm, ref.norm, got.checksum, ref.checksum, excess,
                                 ratio=(got.norm / ref.norm) if ref.norm else None)  # type: ignore[operator]


def _same_nonfinite(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= 1e-6 * max(abs(a), abs(b))


def _kind(got: Digest, ref: Digest, atol: float, rtol: float) -> str:
    g, r = got.norm or 0.0, ref.norm or 0.0
    if g <= atol or r <= atol:
        return ZERO
    close = lambda a, b: abs(a - b) <= atol + max(rtol, 1e-3) * max(abs(a), abs(b))  # noqa: E731
    if close(g, r) and close(got.max_abs, ref.max_abs) and close(got.checksum, -ref.checksum):  # type: ignore[arg-type, operator]
        return SIGN
    ratio = g / r
    # A factor that close() cannot tell from 1 is no scaling: a float64 job's round-off beyond its
    # tight tolerance read "scaled by 1" (pytorch/examples' time_sequence_prediction on Inductor).
    if abs(ratio - 1) > max(rtol, 1e-3) and close(got.max_abs, ratio * ref.max_abs) and close(got.checksum, ratio * ref.checksum):  # type: ignore[arg-type, operator]
        return SCALE
    return DIFFERS


def _swapped_with(mismatch: ParamMismatch, got: Digest, reference: dict[str, Digest], largest: float, tol: GradTolerance) -> str:
    """The other parameter of the reference whose gradient this one holds: the one such parameter,
    else "" (none, or several, which says the gradients are small or alike, not that one moved)."""
    found = [other for other, ref in reference.items()
             if other != mismatch.name and ref.numel == got.numel and ref.dtype == got.dtype and got.norm
             and compare_param(other, mismatch.step, got, ref, largest, tol)[1] is None]
    return found[0] if len(found) == 1 else ""


def _one_to_one(found: list[ParamMismatch]) -> list[ParamMismatch]:
    """`found` with a swap claimed by two parameters for one reference gradient said as `differs`:
    a gradient moved to another parameter is there once."""
    claimed: dict[str, int] = {}
    for m in found:
        if m.kind == SWAPPED:
            claimed[m.other] = claimed.get(m.other, 0) + 1
    return [replace(m, kind=DIFFERS, other="") if m.kind == SWAPPED and claimed[m.other] > 1 else m for m in found]


def held_by_both(got: dict[int, dict[str, Digest]], ref: dict[int, dict[str, Digest]],
                 steps: set[int]) -> tuple[dict[int, dict[str, Digest]], dict[int, dict[str, Digest]]]:
    """The two sides' digests with `steps` (digested by both at the run's end) kept to the
    parameters both hold there. cagtool chooses the end-of-run digest's parameters; a record made
    before it chose the live optimizers' chose them by the steps digested earlier, which differ by
    mode (ca digests its recapture step, layer-wise training's second layer, alone): a parameter
    only one side holds there is not a missing gradient. At any other step it is."""
    if not steps:
        return got, ref
    kept_got, kept_ref = dict(got), dict(ref)
    for step in steps:
        if step in got and step in ref:
            kept_got[step] = {n: d for n, d in got[step].items() if n in ref[step]}
            kept_ref[step] = {n: d for n, d in ref[step].items() if n in got[step]}
    return kept_got, kept_ref


def compare_digests(record: str, reference: str, got: dict[int, dict[str, Digest]], ref: dict[int, dict[str, Digest]],
                    tol: GradTolerance, across_ranks: bool = False, partial: bool = False) -> PairParity:
    """`partial`: compare only the parameters both sides digested, at every step."""
    steps = tuple(sorted(set(got) & set(ref)))
    names: set[str] = set()
    graded: set[str] = set()  # ... of which a side has a gradient at a step
    first_bad_step: int | None = None
    first_bad: list[ParamMismatch] = []
    bad_steps: list[int] = []
    count = 0
    worst = 0.0
    pairs = zero = 0
    for step in steps:
        here, there = got[step], ref[step]
        largest = max((d.norm for d in there.values() if d.norm is not None and math.isfinite(d.norm)), default=0.0)
        found: list[ParamMismatch] = []
        # `partial`: a side stepped an optimizer inside compiled code, where no pre-hook digests
        # its parameters: one such a digest does not hold is not compared. Otherwise a parameter
        # one side does not hold is (MISSING: FSDP2's under compiled autograd, say).
        for name in ([n for n in there if n in here] if partial else list(there) + [n for n in here if n not in there]):
            names.add(name)
            mine, theirs = here.get(name), there.get(name)
            if (mine is None or mine.norm is None) and (theirs is None or theirs.norm is None):
                continue  # no gradient on either side: nothing compared (frozen, or not reached)
            graded.add(name)
            pairs += 1
            zero += mine is not None and theirs is not None and mine.norm == 0.0 and theirs.norm == 0.0
            excess, mismatch = compare_param(name, step, mine, theirs, largest, tol)
            worst = max(worst, excess)
            if mismatch is not None:
                if mismatch.kind == DIFFERS and here.get(name) is not None:
                    other = _swapped_with(mismatch, here[name], there, largest, tol)  # type: ignore[arg-type]
                    if other:
                        mismatch = ParamMismatch(**{**mismatch.__dict__, "kind": SWAPPED, "other": other})
                found.append(mismatch)
        found = _one_to_one(found)
        if found:
            count += len(found)
            bad_steps.append(step)
            if first_bad_step is None:
                first_bad_step, first_bad = step, found
    return PairParity(
        record=record, reference=reference, steps=steps, params=len(graded), first_bad_step=first_bad_step,
        first_bad=tuple(first_bad), bad_steps=tuple(bad_steps), mismatches=count, max_excess=worst if math.isfinite(worst) else math.inf,
        only_record=tuple(sorted(set(got) - set(ref))), only_reference=tuple(sorted(set(ref) - set(got))), across_ranks=across_ranks,
        compared=pairs, zero=zero, gradless=len(names - graded),
    )


_LOW_PRECISION = re.compile(rb"\btorch\.(bfloat16|float16)\b")
_RANDOM_OP_BYTES = re.compile(_RANDOM_OP.pattern.encode())
# The graphs a compile leaves among its artifacts (record/schema.py COMPILE_ARTIFACTS): Dynamo's
# (autocast's region), AOTAutograd's forward and backward (each conversion, each random op of a
# compiled forward: Inductor's `inductor_random`, which the CA graph of a backward never shows).
_GRAPH_ARTIFACTS = (ARTIFACT_DYNAMO_GRAPH, ARTIFACT_AOT_FORWARD, ARTIFACT_AOT_BACKWARD)
# A TORCH_TRACE log of a large job is legitimately hundreds of MB: it is scanned a chunk at a time
# (memory bounded by the chunk), up to this much of each file, so a forged file (a sparse hole of
# terabytes) costs a bounded read. Graph code is at most MAX_TEXT_FILE_BYTES (writer.py).
_MAX_SCAN_BYTES = 2**30


def low_precision_compute(*records: ModeRecord) -> str | None:
    """The lowest-precision floating dtype (bfloat16, float16) the records' compiled graphs compute
    in, None where they name neither: a job under torch.autocast converts to it in every compiled
    graph, and its gradients (of float32 parameters) carry that dtype's rounding."""
    found = {name for record in records for name in _named_in_graphs(record, _LOW_PRECISION)}
    return max(found, key=lambda dtype: EPS[dtype]) if found else None


def random_ops_in(record: ModeRecord) -> list[str]:
    """Random ops that the mode's compiled graphs call (the graphs of its compiles Inductor compiled,
    whose kernels draw from their own generator; the CA graph code; the TORCH_TRACE log)."""
    return _named_in_graphs(record, _RANDOM_OP_BYTES, with_trace=True, inductor_only=True)


def _named_in_graphs(record: ModeRecord, pattern: re.Pattern[bytes], with_trace: bool = False, inductor_only: bool = False) -> list[str]:
    """The names (`pattern`'s first group) the record's compiled graphs hold: each compile's graph
    artifacts (with `inductor_only`, of the compiles Inductor compiled: its code among their
    artifacts), the CA graphs' code under graphs/, and with `with_trace` the TORCH_TRACE log."""
    found: dict[str, None] = {}
    for artifacts in record.compile_artifacts().values():
        if inductor_only and ARTIFACT_INDUCTOR_CODE not in artifacts:
            continue
        for name in _GRAPH_ARTIFACTS:
            if name in artifacts:
                try:
                    text = record.artifact_text(artifacts[name]).encode()
                except UnreadableInput:
                    continue
                found.update(dict.fromkeys(m.group(1).decode() for m in pattern.finditer(text)))
    for folder in (record.path / GRAPHS_DIR, *((record.path / TRACE_DIR,) if with_trace else ())):
        if folder.is_symlink() or not folder.is_dir():  # a link planted there is not the record's
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".py", ".log", ".txt", "") or not path.is_file():
                continue
            try:
                found.update(dict.fromkeys(_named_in_file(path, pattern)))
            except (OSError, UnreadableInput):
                continue
    return list(found)


def _named_in_file(path: Path, pattern: re.Pattern[bytes]) -> list[str]:
    """The names a graph's code or a trace log holds, read a chunk at a time (never through a
    link, never a FIFO: read_record_chunks); each chunk is scanned up to its last newline, the rest
    carried into the next, so no name is split (a line longer than a chunk is scanned in pieces)."""
    found: dict[str, None] = {}
    carry = b""
    for chunk in read_record_chunks(path, max_bytes=_MAX_SCAN_BYTES):
        text = carry + chunk
        end = text.rfind(b"\n") + 1 or max(0, len(text) - 256)
        for match in pattern.finditer(text, 0, end):
            found.setdefault(match.group(1).decode())
        carry = text[end:]
    for match in pattern.finditer(carry):
        found.setdefault(match.group(1).decode())
    return list(found)


def _eager_randomness(record: ModeRecord) -> bool:
    return bool((record.manifest.options or {}).get("fallback_random"))


def _inductor_compiled(record: ModeRecord) -> bool:
    """Whether Inductor compiled any of the mode's graphs (cagtool's --backend, or the script's own
    torch.compile: Inductor's code among the compile artifacts). Only Inductor's kernels draw from
    their own generator: eager's and aot_eager's random ops run aten's, on eager's seeded generator
    (tests/test_grad_parity_run.py, dropout drawn alike)."""
    if record.manifest.backend == "inductor":
        return True
    return any(ARTIFACT_INDUCTOR_CODE in found for found in record.compile_artifacts().values())


# How a pair's `not_comparable` begins where random ops in compiled graphs are the reason (read by
# compare/analysis.py, whose numerics then say so instead of "inputs differ").
RANDOM_OPS_WORDS = "random ops "


def random_ops_owners(names: list[str]) -> str:
    """The words of a random-ops reason that name the records whose compiled graphs drew them."""
    owners = and_words(f"{name}'s" for name in names)
    return f" in {owners} compiled graphs "


def _random_ops_reason(names: list[str], ops: list[str]) -> str:
    """Why gradients are not comparable where random ops drew other numbers in these records'
    compiled graphs (each named once, and the first four ops)."""
    ops = list(dict.fromkeys(ops))
    return (f"{RANDOM_OPS_WORDS}({', '.join(ops[:4])}){random_ops_owners(names)}"
            "draw other numbers than eager; rerun with cagtool run --parity (torch._inductor.config.fallback_random) to compare gradients")


def _why_not_comparable(record: ModeRecord, reference: ModeRecord, names: tuple[str, str]) -> tuple[str, tuple[float, float] | None, tuple[str, tuple[str, ...]] | None]:
    """Why a pair whose gradients differ is no verdict on the backward: random ops in compiled
    graphs (the more specific cause, looked for first; then the record that drew them and the ops
    come with it), or other inputs (then the first step's losses, record's and reference's, come
    with it). Weights in shared memory that other processes
    wrote (Hogwild workers) come before either: nothing of such a step is comparable."""
    from cagtool.report.figures.metrics import first_backward_loss, params_shared, step_losses

    if params_shared(record) or params_shared(reference):
        return ("trained parameters in shared memory that other processes wrote too (Hogwild): each gradient was computed on "
                "weights the OS's order of the processes decided, which differs from run to run"), None, None
    for side, name in zip((record, reference), names):
        if side.mode == "eager" or _eager_randomness(side) or not _inductor_compiled(side):
            continue
        ops = random_ops_in(side)
        if ops:
            return _random_ops_reason([name], ops), None, (name, tuple(ops))
    # The numerics rule (compare/analysis.py, first_losses_differ): a first-step loss that already
    # differs comes from other inputs (an unseeded rank, data order) before any backward ran.
    mine, theirs = step_losses(record), step_losses(reference)
    if FIRST_STEP in mine and FIRST_STEP in theirs:
        a, b = mine[FIRST_STEP], theirs[FIRST_STEP]
        if not abs(a - b) <= FIRST_LOSS_ATOL + FIRST_LOSS_RTOL * abs(b):
            here, there = first_backward_loss(record), first_backward_loss(reference)
            if here is not None and there is not None and abs(here - there) <= FIRST_LOSS_ATOL + FIRST_LOSS_RTOL * abs(there):
                return (f"parted in the first step's backward: the loss of its first backward call agrees ({here!r} in both), "
                        f"the loss after it already differs ({a!r} vs {b!r}): that backward changed what the next forward "
                        "computed (random numbers drawn in it: torch.compile's non-reentrant activation checkpointing on the "
                        "eager backend draws them in its recompute, eager's does not), so the step's gradients came from other "
                        "random draws"), (a, b), None
            compiled = record.manifest.mode != "eager" and not _eager_randomness(record) and _inductor_compiled(record)
            hint = "; for dropout in a compiled forward, rerun with cagtool run --parity" if compiled else ""
            return (f"inputs differ: the first step's losses already differ ({a!r} vs {b!r}) before any backward ran "
                    f"(an unseeded script or rank, data order, Python's hash randomization (`hash()` of strings or bytes, "
                    f"a set's order: rerun with PYTHONHASHSEED=0), randomness in the forward, or a compiled forward that "
                    f"computes differently{hint})"), (a, b), None
    return "", None, None


def _labelled(name: str, record: ModeRecord) -> list[tuple[str, ModeRecord]]:
    """The record, or one entry per rank of a multi-rank job."""
    ranks = record.ranks()
    if len(ranks) > 1:
        return [(f"{name} rank{r}", rec) for r, rec in ranks.items()]
    return [(name, record)]


def grad_parity(run: RunRecord, tol: GradTolerance | None = None) -> GradParity:
    """Every mode of the run against the reference, per rank, and each mode's ranks against its first."""
    tol = tol or GradTolerance()
    named = [(label, rec) for name, record in run.modes.items() for label, rec in _labelled(name, record)]
    digested = {label: (rec, digests_of(rec)) for label, rec in named}
    with_digests = [label for label in digested if digested[label][1]]
    if not with_digests:
        return GradParity(None, (), ("no gradient digests recorded (a record from before digests, or no step with gradients)",), tol)
    reference = _pick_reference(with_digests, digested)
    ref_base = reference.split(" ")[0]
    pairs: list[PairParity] = []
    notes: list[str] = []
    for label in digested:
        if not digested[label][1] and len(notes) < 50:
            # Digests are taken where an optimizer's step() starts: a mode whose steps no hook saw
            # (the optimizer steps inside compiled code) has none, and is not compared.
            rec = digested[label][0]
            why = " (its optimizer steps inside compiled code, where no hook of cagtool's runs)" if _compiled_optimizer(rec) else ""
            notes.append(f"{label}: no gradient digests{why}")
    for label in with_digests:
        rec, digests = digested[label]
        name, _, rank = label.partition(" ")
        if name == ref_base:
            continue
        ref_label = f"{ref_base} {rank}".strip()
        if ref_label not in digested or not digested[ref_label][1]:
            notes.append(f"{label}: no digests of {ref_label} to compare with")
            continue
        ref_rec, ref_digests = digested[ref_label]
        # A step one side digested at the run's end and the other during the run (its optimizer
        # step, its backward's return): two moments (what the script did to the gradients after the
        # step, a final zero_grad or a second model's backward, lies between them), not compared.
        ends, ref_ends = digested_at_end(rec), digested_at_end(ref_rec)
        both, ref_both = same_at_end(rec), same_at_end(ref_rec)
        apart = sorted(s for s in set(digests) & set(ref_digests)
                       if (s in ends) != (s in ref_ends) and s not in both and s not in ref_both)
        if apart:
            digests = {s: d for s, d in digests.items() if s not in apart}
            ref_digests = {s: d for s, d in ref_digests.items() if s not in apart}
            apart_note = (f"{label}: {_steps(tuple(apart))} not compared with {ref_label}: digested at the run's end in one, "
                          "during the run in the other (at its optimizer step, or where its backward returned)")
            if not digests or not ref_digests:
                notes.append(apart_note)
                continue
        else:
            apart_note = ""
        partial = _compiled_optimizer(rec) or _compiled_optimizer(ref_rec)
        digests, ref_digests = held_by_both(digests, ref_digests, (ends | both) & (ref_ends | ref_both))
        pair = compare_digests(label, ref_label, digests, ref_digests, tol, partial=partial)
        if not pair.agrees and (compute := low_precision_compute(rec, ref_rec)) is not None:
            # Held to the precision the computation ran at, not the parameters' own (read only on a
            # difference: the graphs are not read on every compare).
            pair = replace(compare_digests(label, ref_label, digests, ref_digests, replace(tol, compute=compute), partial=partial),
                       compute=compute)
        if not pair.agrees:
            pair = _after_drift(pair, _loss_drift(rec, ref_rec), digests, ref_digests, tol, partial)
        # Random ops matter only when the gradients differ (equal draws agree, e.g. --parity): the
        # graphs and trace log are read then, not on every compare.
        why, first, drawn = ("", None, None) if pair.agrees else _why_not_comparable(rec, ref_rec, (label, ref_label))
        pairs.append(PairParity(label, ref_label, pair.steps, pair.params, not_comparable=why, first_losses=first, random_ops=drawn)
                     if why else pair)
        if apart_note and not why and len(notes) < 50:  # a pair not comparable at all: which steps it left out says nothing
            notes.append(apart_note)
        if not why and base_mode(name) == "ca" and len(notes) < 50:
            unsharded = _shards_without_gradient(pair, ref_digests)
            if unsharded:
                notes.append(f"{label}: no gradient under compiled autograd for {', '.join(unsharded[:3])}"
                             f"{' and more' if len(unsharded) > 3 else ''}, each rank's shard (a DTensor, as FSDP2 makes): "
                             "FSDP2 has no compiled-autograd path in torch (removed upstream, pytorch/pytorch#174906), "
                             "so this mode does not train the job as eager does")
    # Across ranks: each mode's rank N against its rank 0 (DDP keeps them equal), on the modules'
    # whole parameters only: a tensor no module holds is the optimizer's own, under a sharded
    # optimizer (ZeRO 1/2) each rank's own slice of a flat partition, and a parameter of which
    # each rank holds a shard (FSDP2) is digested from its shard: neither is meant to agree.
    for name, record in run.modes.items():
        ranked = _labelled(name, record)
        if len(ranked) < 2 or ranked[0][1].worker is not None:  # workers without a rank train apart (loader.py)
            continue
        first_label = ranked[0][0]
        for label, _ in ranked[1:]:
            mine, first = _module_params(digested[label][1]), _module_params(digested[first_label][1])
            if mine and first:
                pairs.append(compare_digests(label, first_label, mine, first, tol, across_ranks=True))
            elif digested[label][1] and digested[first_label][1] and len(notes) < 50:
                if _any_shard(digested[label][1]) or _any_shard(digested[first_label][1]):
                    notes.append(f"{label} vs {first_label}: not compared: each rank holds a shard of the parameters "
                                 "(FSDP2, tensor parallel) and digests its own")
                else:
                    notes.append(f"{label} vs {first_label}: not compared: the optimizer stepped tensors no module holds "
                                 "(a sharded optimizer's flat partition, e.g. DeepSpeed ZeRO 1/2: each rank holds its own slice)")
    return GradParity(reference, tuple(pairs), tuple(notes), tol, _nonfinite_lines(digested), _against_aot(pairs, digested, tol))


def _against_aot(pairs: list[PairParity], digested: dict[str, tuple[ModeRecord, dict[int, dict[str, Digest]]]],
                 tol: GradTolerance) -> tuple[PairParity, ...]:
    """Each ca record that differs from eager, against the first aot record of its rank, where that
    one differs from eager too (both compiled by the same compiler; only ca's backward is compiled
    autograd's): empty where no aot record does."""
    apart = {p.record for p in pairs if not p.agrees and not p.across_ranks and p.reference.split(" ")[0] == "eager"}
    out = []
    for pair in pairs:
        name, _, rank = pair.record.partition(" ")
        if pair.record not in apart or base_mode(name) != "ca":
            continue
        aot = next((label for label in apart if base_mode(label.split(" ")[0]) == "aot" and label.partition(" ")[2] == rank), None)
        if aot is None:
            continue
        (rec, got), (ref_rec, ref) = digested[pair.record], digested[aot]
        partial = _compiled_optimizer(rec) or _compiled_optimizer(ref_rec)
        # At the precision the ca pair was held to (its compiled graphs computing in bfloat16, say).
        held = replace(tol, compute=pair.compute) if pair.compute else tol
        out.append(replace(compare_digests(pair.record, aot, got, ref, held, partial=partial), compute=pair.compute))
    return tuple(out)


def _loss_drift(record: ModeRecord, reference: ModeRecord) -> LossDrift:
    from cagtool.report.figures.metrics import step_losses

    return loss_drift(step_losses(record), step_losses(reference), FIRST_LOSS_RTOL, FIRST_LOSS_ATOL)


def _after_drift(pair: PairParity, drift: LossDrift, got: dict[int, dict[str, Digest]], ref: dict[int, dict[str, Digest]],
                 tol: GradTolerance, partial: bool) -> PairParity:
    """`pair` with the steps from the one the losses parted at set apart (drift.py), where their
    first DRIFT_STEPS steps agree within DRIFT_RTOL, a step among those was compared, and every step
    compared before the parting agrees; else `pair` as it is."""
    parted = drift.parted_at
    if parted is None and drift.left_tight and not drift.jumped and pair.first_bad_step is not None:
        # The losses stayed within the tolerance but left round-off, growing, before the first
        # differing step (a short chaotic run): that step's gradients are of parameters already
        # apart. Still counted (too few steps for the drift rule), said so, no kind read into it.
        left = FIRST_STEP + drift.tight_steps
        if pair.first_bad_step < left or not any(s < left for s in pair.steps):
            return pair
        kept = (MISSING, ZERO, NONFINITE)
        return replace(pair, first_bad=tuple(m if m.kind in kept else replace(m, kind=DIFFERS, other="") for m in pair.first_bad),
                       after_parting=left, parted_by_round_off=True)
    if parted is None or pair.first_bad_step is None or pair.first_bad_step < parted:
        return pair
    if not drift.may_be_drift or not any(drift.in_window(step) for step in pair.steps):
        # Not drift by the rule (the losses parted too soon, or at a jump): a difference still, of
        # parameters already apart, where a gradient that looks swapped or scaled is chance.
        kept = (MISSING, ZERO, NONFINITE)
        return replace(pair, first_bad=tuple(m if m.kind in kept else replace(m, kind=DIFFERS, other="") for m in pair.first_bad),
                       after_parting=parted)
    before = compare_digests(pair.record, pair.reference, {s: d for s, d in got.items() if s < parted},
                             {s: d for s, d in ref.items() if s < parted}, tol, partial=partial)
    drifted = tuple(s for s in pair.bad_steps if s >= parted)
    return replace(before, steps=tuple(s for s in pair.steps if s not in drifted), only_record=pair.only_record,
                   only_reference=pair.only_reference, drifted=drifted, parted_at=parted)


def _module_params(digests: dict[int, dict[str, Digest]]) -> dict[int, dict[str, Digest]]:
    """The digests of whole module parameters only (by name, not a rank's shard), the steps that
    have any."""
    out = {}
    for step, by_name in digests.items():
        kept = {name: d for name, d in by_name.items() if not name.startswith(_UNNAMED) and not d.shard}
        if kept:
            out[step] = kept
    return out


# Tensors no module held when digested: an optimizer's own (a sharded optimizer's flat partition,
# each rank's own slice) or a leaf of a backward-only job's graph, which DDP does not all-reduce.
_UNNAMED = (OPTIMIZER_TENSOR_PREFIX, UNNAMED_TENSOR_PREFIX)


def _shards_without_gradient(pair: PairParity, reference: dict[int, dict[str, Digest]]) -> list[str]:
    """The parameters a pair finds without a gradient where the reference's digest is a shard."""
    found = []
    for mismatch in pair.first_bad:
        ref = reference.get(mismatch.step, {}).get(mismatch.name)
        if mismatch.kind == MISSING and mismatch.norm is None and ref is not None and ref.shard:
            found.append(mismatch.name)
    return found


def _any_shard(digests: dict[int, dict[str, Digest]]) -> bool:
    return any(d.shard for by_name in digests.values() for d in by_name.values())


def _pick_reference(labels: list[str], digested: dict) -> str:
    """eager's first record (no compiler involved), else the first mode with digests."""
    for mode in MODES:
        for label in labels:
            if label.split(" ")[0] == mode:
                return label
    return labels[0]


def problems(parity: GradParity) -> list[str]:
    """One line per record that disagrees: the first bad step and its parameters."""
    out = []
    for pair in parity.disagreements:
        detail = "; ".join(m.describe() for m in pair.first_bad[:3])
        out.append(f"gradients: {pair.verdict()}: {detail}")
    return out

