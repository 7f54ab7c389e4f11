"""Small phrase builders shared by the --explain sentences and the renderers: plurals, step
ranges, elided lists, evidence, where a cause's source line is, and whether a cause has stabilised."""

from __future__ import annotations

from dataclasses import dataclass

from cagtool.report.recompiles.explain_model import Cause, Evidence
from cagtool.report.recompiles.table import format_source

MAX_LISTED = 6  # evidence items and node changes listed before eliding the middle


@dataclass(frozen=True)
class Words:
    title: str
    why: list[str]
    fix: list[str]
    evidence: str


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def step_list(steps: list[int]) -> str:
    """2, 3, 4, 7 -> '2-4, 7' (ranges of consecutive numbers; steps, size indices)."""
    parts: list[str] = []
    start = prev = None
    for step in steps:
        if prev is not None and step == prev + 1:
            prev = step
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = step
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


def elide(items: list[str], limit: int = MAX_LISTED) -> str:
    if len(items) <= limit:
        return ", ".join(items)
    head = items[: limit - 2]
    return ", ".join(head) + f", ... ({len(items) - limit + 2} more), " + ", ".join(items[-2:])


def evidence_text(evidence: list[Evidence]) -> str:
    items = [f"{e.compile_id} (step {e.step if e.step is not None else '?'}, seq {e.seq})" for e in evidence]
    return elide(items)


def short_name(name: str | None) -> str:
    return (name or "?").replace("torch::autograd::", "")


def stability_sentence(facts: dict, what: str) -> str:
    stabilised = facts.get("stabilised")
    if facts.get("stopped_by_limit"):
        return (f"Recompiles stopped after step {facts['last_recompile_step']} only because Dynamo hit its "
                "recompile limit: the frame has run uncompiled since.")
    if stabilised is None:
        return ""
    if stabilised:
        quiet = facts["quiet_steps_after"]
        later = "the last step" if quiet == 1 else f"the last {quiet} steps"
        return f"It has stabilised: no {what} after step {facts['last_recompile_step']}; {later} reused cached graphs."
    return f"It has not stabilised: still recompiling at the last recorded step ({facts['last_step']})."


def where(cause: Cause, cwd: str) -> str:
    if cause.source is None:
        return ""
    how = {
        "node_traceback": "created at",
        "compiled_frame": "in the compiled function at",
        "backward_call": "in the backward called at",
        "guard": "guarded at",
    }.get(cause.source.how, "at")
    return f"{how} {format_source(cause.source, cwd)}"
