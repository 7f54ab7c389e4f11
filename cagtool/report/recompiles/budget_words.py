"""The phases of a mode's recompiles and its recompile budget, in words (terminal, summary, HTML)
and as JSON: one place that says them, for every renderer."""

from __future__ import annotations

from typing import Any

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import PHASE_BACKWARD, PHASE_CHECKPOINT_RECOMPUTE, SourceRef
from cagtool.report.recompiles.budget import FrameBudget, ModeBudget
from cagtool.report.recompiles.phases import PHASE_WORDS, ModePhases, PhasedCompile
from cagtool.report.recompiles.reads import INSIDE_CAPTURES_WORDS, display_path, format_source
from cagtool.report.recompiles.table import RecompileTable
from cagtool.report.recompiles.unexpected import texts, unexpected_causes, unexpected_lines


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def phase_counts_text(phases: ModePhases) -> str:
    """`compiles by phase: forward frame 1, activation-checkpoint recompute in the backward 1`."""
    counts = phases.counts()
    if not counts:
        return ""
    return "compiles by phase: " + ", ".join(f"{PHASE_WORDS.get(p, p)} {n}" for p, n in counts.items())


def phased_text(c: PhasedCompile, cwd: str) -> str:
    """One recompile: `0/1 at step 0: activation-checkpoint recompute ... of Block.forward (defined
    at m.py:22), called at m.py:49  loss.backward()`."""
    step = "?" if c.step is None else c.step
    text = f"{c.compile_id} at step {step}: {c.words()}"
    if c.function is not None:
        text += f" (defined at {format_source(c.function, cwd, with_code=False)})"
    if c.caller is not None:
        text += f", called at {format_source(c.caller, cwd)}"
    if c.inferred:
        text += " (phase read off the compile id: the record did not keep it)"
    return text


def _frame_name(f: FrameBudget, cwd: str) -> str:
    if f.is_module_wrapper:
        # torch's own frame, shared by every compiled module: the user's are the module and the line that called it.
        what = (f"the compiled module `{f.modules[0]}`" if len(f.modules) == 1 else
                f"the compiled modules {', '.join(f'`{m}`' for m in f.modules)}" if f.modules else "a compiled module")
        called = f" called at {format_source(f.called_at, cwd)}" if f.called_at is not None else ""
        return f"frame {f.frame}, {what}{called} (torch runs it through its module wrapper `{f.function}`)"
    where = f" ({display_path(f.file, cwd)}:{f.line})" if f.file and f.line else ""
    if f.called_at is not None:
        where += f", called at {format_source(f.called_at, cwd)}"
    return f"frame {f.frame} `{f.function or '?'}`{where}"


def frame_budget_text(f: FrameBudget, cwd: str) -> str:
    limit = f"recompile_limit {f.limit}" + ("" if f.limit_known else " (torch's default; the record did not keep it)")
    text = f"{_frame_name(f, cwd)}: {f.entries} of {limit} compiles used"
    theirs = "" if f.inside_capture is None else f" [torch's frame {INSIDE_CAPTURES_WORDS}]"
    if f.hit is not None:
        return text + f"; hit the limit at step {'?' if f.hit.step is None else f.hit.step} ({f.hit.compile_id}): it runs eager from then on whenever its guards fail" + theirs
    if f.rate is not None:
        text += f", {f.rate:.2g} recompiles per step"
    if f.forecast_step is not None:
        text += f"; at this rate it reaches the limit at about step {f.forecast_step}"
    elif f.recompiles and not f.still_compiling:
        text += f"; stopped recompiling after step {f.last_recompile_step}"
    return text + theirs


def budget_lines(budget: ModeBudget, cwd: str) -> list[str]:
    lines = [frame_budget_text(f, cwd) for f in budget.frames if f.recompiles or f.hit is not None]
    if budget.ca_graphs:
        rate = f", {budget.ca_rate:.2g} per step" if budget.ca_rate is not None else ""
        growing = "; still capturing new graphs in its last step" if budget.ca_still_capturing else ""
        lines.append(f"compiled-autograd graphs: {budget.ca_graphs} (torch sets no limit on them){rate}{growing}")
    for cost in budget.eager_costs:
        if cost.ratio is not None:
            lines.append(f"after the limit hit at step {cost.hit_step}: {_plural(cost.steps_after, 'step')} ran with the frame eager, "
                         f"median step {cost.median_after_s * 1e3:.3g} ms against {cost.median_before_s * 1e3:.3g} ms before ({cost.ratio:.2f}x)")
        elif cost.median_after_s is not None:
            lines.append(f"after the limit hit at step {cost.hit_step}: {_plural(cost.steps_after, 'step')} ran with the frame eager, "
                         f"median step {cost.median_after_s * 1e3:.3g} ms (no steady step before the hit to compare)")
    if not budget.steady:
        lines.append(f"The job did not reach a steady state: {_still_words(budget, 'its')}; its steady step time is not a "
                     "steady figure.")
    return lines


def _still_words(budget: ModeBudget, whose: str) -> str:
    """What keeps a job from a steady state, as the record shows it: a frame that compiled in the
    job's last step is still compiling there; one whose last recompile came earlier, within one
    interval of its pace, showed no sign of stopping, which is all the record can say of it."""
    last = budget.last_step
    still = []
    for f in budget.still_compiling:
        if f.last_recompile_step == last or f.rate is None:
            still.append(f"frame {f.frame} still compiling at {whose} last step ({last})")
            continue
        if last is not None and f.last_recompile_step is not None and f.last_recompile_step > last:
            when = f"in the step the job ended in, after its last closed step ({last})"
        else:
            when = f"at step {f.last_recompile_step}, {_plural(last - f.last_recompile_step, 'step')} before the job's last ({last})"
        still.append(f"frame {f.frame} recompiling about every {1 / f.rate:.2g} steps, the last {when}: no sign it stopped")
    if budget.ca_still_capturing:
        still.append(f"compiled autograd still capturing at {whose} last step ({last})")
    return " and ".join(still)


# The phases a reader does not expect a recompile in: the ones each is listed for.
_NOTED_PHASES = frozenset({PHASE_CHECKPOINT_RECOMPUTE, PHASE_BACKWARD})


def noted_recompiles(phases: ModePhases) -> list[PhasedCompile]:
    return [c for c in phases.recompiles if c.phase in _NOTED_PHASES]


def budget_worth_saying(budget: ModeBudget) -> bool:
    """A forecast, a limit hit, or no steady state: the budget matters to this job."""
    return not budget.steady or any(f.hit is not None or f.forecast_step is not None for f in budget.frames)


def phase_and_budget_lines(table: RecompileTable, explained: frozenset[str] = frozenset()) -> list[str]:
    """What `recompiles --explain` adds per mode: the recompiles in a phase one does not expect (a
    checkpoint's recompute, a backward) with their step, function and line, the recompile budget
    when it matters (the JSON has every compile's phase and every frame's budget), and the causes
    one may not expect of the recompiles no cause above it explains (`explained`: their compile ids;
    the JSON lists every one)."""
    lines: list[str] = []
    noted = noted_recompiles(table.phases) if table.phases is not None else []
    if noted:
        assert table.phases is not None
        lines.append(phase_counts_text(table.phases))
        lines += [f"  {phased_text(c, table.cwd)}" for c in noted]
    if table.budget is not None and budget_worth_saying(table.budget):
        lines.append("recompile budget:")
        lines += [f"  {line}" for line in budget_lines(table.budget, table.cwd)]
    lines += unexpected_lines([u for u in table.unexpected if u.compile_id not in explained], table.cwd)
    return lines


def _source(ref: SourceRef | None, cwd: str) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {"file": display_path(ref.file, cwd), "line": ref.line, "code": ref.code, "function": ref.function, "how": ref.how}


def phased_json(c: PhasedCompile, cwd: str) -> dict[str, Any]:
    return {"compile_id": c.compile_id, "step": c.step, "phase": c.phase, "recompile": c.recompile, "checkpoint": c.checkpoint or None,
            "function": _source(c.function, cwd), "caller": _source(c.caller, cwd), "inferred": c.inferred, "words": c.words()}


def phases_json(phases: ModePhases | None, cwd: str) -> dict[str, Any] | None:
    if phases is None:
        return None
    return {"counts": phases.counts(), "recompile_counts": phases.counts(recompiles_only=True),
            "compiles": [phased_json(c, cwd) for c in phases.compiles]}


def budget_json(budget: ModeBudget | None, cwd: str) -> dict[str, Any] | None:
    if budget is None:
        return None
    return {
        "steady": budget.steady,
        "last_step": budget.last_step,
        "frames": [
            {"frame": f.frame, "function": f.function, "file": display_path(f.file, cwd), "line": f.line, "entries": f.entries,
             "recompiles": f.recompiles, "recompile_limit": f.limit, "limit_known": f.limit_known, "rate_per_step": f.rate,
             "still_compiling": f.still_compiling, "forecast_limit_step": f.forecast_step,
             "limit_hit_step": f.hit.step if f.hit is not None else None, "text": frame_budget_text(f, cwd)}
            for f in budget.frames
        ],
        "ca_graphs": budget.ca_graphs,
        "ca_graph_rate_per_step": budget.ca_rate,
        "ca_still_capturing": budget.ca_still_capturing,
        "eager_after_limit": [
            {"hit_step": c.hit_step, "steps_after": c.steps_after, "median_after_s": c.median_after_s,
             "median_before_s": c.median_before_s, "ratio": c.ratio} for c in budget.eager_costs
        ],
    }


def not_steady_text(budget: ModeBudget) -> str | None:
    """The summary's words in place of a steady step time when the job kept compiling to its end."""
    if budget.steady:
        return None
    return f"no steady state: {_still_words(budget, 'the')}"


def summary_phase_lines(record: ModeRecord) -> list[str]:
    """The summary's lines: each recompile in an unexpected phase, and the budget when it matters."""
    from cagtool.report.recompiles.budget import budget_of
    from cagtool.report.recompiles.phases import mode_phases

    cwd = record.manifest.cwd
    # The summary lists these recompiles with their guards just above: this line is their phase, not another recompile.
    lines = [f"phase of {phased_text(c, cwd)}" for c in noted_recompiles(mode_phases(record))]
    # ... and the cause of those torch's guard says little of (a grad mode changed around the call): "cause of", not a second "recompile".
    lines += [f"cause of {text}" for text in texts(unexpected_causes(record), cwd)]
    budget = budget_of(record)
    if any(f.hit is not None or f.forecast_step is not None for f in budget.frames):
        lines += [f"budget: {frame_budget_text(f, cwd)}" for f in budget.frames if f.hit is not None or f.forecast_step is not None]
    return lines
