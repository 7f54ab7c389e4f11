"""The plain-language half of `recompiles --explain`: a title, why, what to do and the evidence,
for each alert and cause of an Explanation. Shared by the text and JSON renderers."""

from __future__ import annotations

import re

from cagtool.report.recompiles.explain_model import (
    ALERT_STORM,
    CAUSE_DYNAMO_CA_GRAPH,
    CAUSE_DYNAMO_FRAME,
    CAUSE_GRAD_DEFINED,
    CAUSE_HOOK,
    CAUSE_SHAPES,
    CAUSE_STRUCTURE,
    Alert,
    Cause,
)
from cagtool.report.recompiles.explain_words import (  # noqa: F401 - plural and step_list are re-exported
    Words,
    elide,
    evidence_text,
    plural,
    short_name,
    stability_sentence,
    step_list,
    where,
)
from cagtool.report.recompiles.table import compile_frame, display_path, node_label


def _structure(cause: Cause, cwd: str) -> Words:
    facts = cause.facts
    changes = facts["changes"]
    grew = facts["grew"]
    items = []
    for change in changes:
        label = f"NodeCall {change.node_call}" if change.node_call is not None else "a node"
        if change.before is None:
            items.append(f"{change.compile_id} step {change.step}: new {short_name(change.after)} at {label}")
        else:
            items.append(f"{change.compile_id} step {change.step}: {label} {short_name(change.before)} -> {short_name(change.after)}")
    title = f"The autograd graph's structure changes between iterations ({plural(cause.count, 'recompile')})"
    why = [
        "Compiled autograd caches one graph per graph structure; a backward whose graph has "
        "different nodes is a cache miss and a new capture. "
        f"Seen {facts['distinct_structures']} distinct structures {where(cause, cwd)}".rstrip() + ".",
        "The node that differs: " + elide(items) + ".",
    ]
    if grew == len(changes) and len(changes) > 1:
        why.append("Every miss is a node the earlier graphs did not have: the graph grows (a loop whose trip count changes per step, or ops chosen per step).")
    elif any(len(v) > 1 for v in facts["variants"].values()):
        alternatives = "; ".join(
            f"NodeCall {nc}: {' / '.join(short_name(n) for n in names)}" for nc, names in facts["variants"].items() if len(names) > 1
        )
        why.append(f"The same position holds different ops ({alternatives}): a Python branch or an op picked per step.")
    stability = stability_sentence(facts, "new structure")
    if stability:
        why.append(stability)
    grows = grew == len(changes)
    if facts.get("stabilised"):
        fix = ["Nothing urgent: each distinct structure is captured once and then reused."]
        if not grows:
            fix.append("If a data-dependent branch picks the ops, computing both sides and selecting with "
                       "torch.where keeps a single graph.")
    else:
        fix = [
            "Make the backward graph the same every step: "
            + ("run the loop a fixed number of times (pad to a maximum; mask what is not needed)."
               if grows else "use the same ops every step (select results with torch.where instead of choosing ops in Python)."),
            "If the variation is by design, compiled autograd will keep recompiling: run that part "
            "without it (torch._dynamo.compiled_autograd._disable()).",
        ]
    return Words(title, why, fix, evidence_text(cause.evidence))


def _hook(cause: Cause, cwd: str) -> Words:
    facts = cause.facts
    parts = []
    for diff in facts["hook_diffs"]:
        change = []
        if diff["added"]:
            change.append("added " + ", ".join(diff["added"]))
        if diff["removed"]:
            change.append("removed " + ", ".join(diff["removed"]))
        what = " and ".join(change) or "a hook changed"
        parts.append(f"{diff['compile_id']} at step {diff['step']}: {what} (vs {diff['previous_graph'] or 'none'})")
    row = cause.rows[0]
    sizes = ", ".join(str(s) for s in row.previous_key_sizes) or "none"
    title = f"A backward hook was added or removed during the run ({plural(cause.count, 'recompile')})"
    why = [
        f"The key of {node_label(row.node, row.node_call)} changed (key size {row.key_size}, previous {sizes}): "
        "hooks are part of the graph compiled autograd caches, so a new set of hooks is a new graph.",
        "Hooks per graph: " + elide(parts) + ".",
    ]
    stability = stability_sentence(facts, "hook change")
    if stability:
        why.append(stability)
    fix = [
        "Register hooks once, before the first backward, and keep them; a hook that checks a flag "
        "is cheaper than adding and removing it.",
        "Removing a hook returns to an already cached graph (no recompile); adding a new one costs a capture each time.",
    ]
    return Words(title, why, fix, evidence_text(cause.evidence))


def _grad_defined(cause: Cause, cwd: str) -> Words:
    row = cause.rows[0]
    sizes = ", ".join(str(s) for s in row.previous_key_sizes) or "none"
    title = f".grad switched between None and a tensor ({plural(cause.count, 'recompile')})"
    why = [
        f"The key of {node_label(row.node, row.node_call)} changed (key size {row.key_size}, previous {sizes}) "
        "with no change in hooks: the parameter's .grad was None in one backward and defined in another, "
        "and AccumulateGrad compiles differently for each.",
    ]
    stability = stability_sentence(cause.facts, "such miss")
    if stability:
        why.append(stability)
    fix = [
        "Once (the first backward sees .grad None, the next accumulates) this costs one extra graph and is harmless.",
        "If it repeats, clear gradients the same way every step: optimizer.zero_grad(set_to_none=True) "
        "(the default) on every step, not only on some.",
    ]
    return Words(title, why, fix, evidence_text(cause.evidence))


def _shapes(cause: Cause, cwd: str) -> Words:
    facts = cause.facts
    # Sizes with the same owner and the same values are described together: sizes[0-3] of X: 10, 100.
    together: dict[tuple, list[int]] = {}
    for index, entry in facts["sizes"].items():
        owner = f" of {node_label(entry['node'], entry['node_call'])}" if entry["node"] else ""
        values = ", ".join(str(v) for v in entry["values"]) or "not recorded"
        if entry.get("previous_missing"):
            values += " (earlier value not recorded)"
        together.setdefault((owner, values), []).append(index)
    described = [
        f"sizes[{step_list(indices).replace(', ', ',')}]{owner}: {values}" for (owner, values), indices in together.items()
    ]
    total = sum(facts["changed_per_recompile"])
    title = f"Tensor shapes changed ({plural(cause.count, 'recompile')}, {plural(total, 'changed size')})"
    if facts["dynamo_recompiles"]:
        title = (f"Tensor shapes changed ({plural(cause.count, 'recompile')}: {plural(facts['ca_misses'], 'CA cache miss', 'CA cache misses')} "
                 f"with {plural(total, 'changed size')}, {plural(len(facts['dynamo_recompiles']), 'Dynamo recompile')} of the graph)")
    why = [
        "Compiled autograd started with static sizes; when a size changed it recompiled once and "
        "made the changed sizes dynamic (symbolic).",
        "Sizes and the values seen: " + elide(described) + ".",
    ]
    dynamic = [f"{g} takes {plural(n, 'dynamic size')}" for g, n in facts["dynamic_graphs"].items()]
    if dynamic:
        why.append("Graphs made: " + elide(dynamic) + ".")
    if facts["dynamo_recompiles"]:
        again = [f"{cid} at step {step}" + (f" (`{guard}`)" if guard else "") for cid, step, guard in facts["dynamo_recompiles"]]
        why.append(
            "Dynamo then recompiled the code of that graph when the sizes changed again ("
            + elide(again)
            + "): it compiles a CA graph for the sizes of its first call."
        )
    stability = stability_sentence(facts, "shape recompile")
    if stability:
        why.append(stability)
    fix = []
    if facts["repeated"] and not facts.get("stabilised"):
        fix.append("Shapes keep changing in new ways: pad or bucket inputs to a few fixed sizes.")
    fix.append(
        "Start dynamic to skip the static first graph: torch.compile(..., dynamic=True), "
        "torch._dynamo.mark_dynamic(tensor, dim) on the varying dimension, or `cagtool run --dynamic`."
    )
    if not facts["repeated"]:
        fix.append("A single recompile on the first change is expected and usually cheap.")
    return Words(title, why, fix, evidence_text(cause.evidence))


def _guard_advice(guard: str) -> str:
    lowered = guard.lower()
    if "size mismatch" in lowered or "size(" in lowered or ".size()" in lowered or "stride" in lowered:
        return "A tensor's shape changed: mark the dimension dynamic (torch._dynamo.mark_dynamic) or compile with dynamic=True; pad or bucket if it takes many values."
    if "check_obj_id" in lowered or "id_match" in lowered or "id(" in lowered:
        return "A different object (module, function, closure) reaches the compiled code each time: create it once, outside the loop."
    if "check_type_id" in lowered or "type_match" in lowered:
        return "A value of a different type reaches the compiled code: keep argument types fixed."
    if "grad_mode" in lowered or "requires_grad" in lowered or "global_state" in lowered:
        return "Global state (grad mode, requires_grad, autocast) differs between calls: keep it the same around the compiled call."
    if re.search(r"==\s*-?\d", guard):
        return ("A Python number the code specialised on changed value. If it only feeds shapes, Dynamo makes it "
                "dynamic after one change; used as a loop bound or in control flow it recompiles per value: "
                "pass it as a tensor, keep it constant, or hoist that logic out of the compiled function.")
    return "Keep the guarded value the same between calls, or move it out of the compiled function."


def _guard(cause: Cause, cwd: str) -> Words:
    facts = cause.facts
    on_ca = cause.code == CAUSE_DYNAMO_CA_GRAPH
    first = cause.rows[0]
    location = where(cause, cwd)
    if on_ca:
        subject = f"the code of compiled-autograd graph !{first.compile_id.lstrip('!').split('/')[0]}"
    else:
        name = f" `{facts['function']}`" if facts["function"] else ""
        subject = f"forward frame {facts['frame']}{name}"
    title = f"Dynamo recompiled {subject}: a guard failed ({plural(cause.count, 'recompile')})"
    failures = [f"{cid} `{guard}`" if guard else f"{cid} (guard not recorded)" for cid, guard in facts["failures"]]
    why = []
    if facts["guard"]:
        why.append(f"A guard Dynamo installed stopped holding: `{facts['guard']}`" + (f", {location}." if location else "."))
    else:
        why.append("Dynamo recompiled it; the failing guard was not recorded" + (f" ({location})." if location else "."))
    why.append("Failing guard per recompile: " + elide(failures) + ".")
    stability = stability_sentence(facts, "recompile")
    if stability:
        why.append(stability)
    fix = [_guard_advice(facts["guard"])]
    if on_ca:
        fix.append("For size guards on CA graphs, start compiled autograd dynamic (`cagtool run --dynamic`).")
    fix.append('TORCH_LOGS="recompiles" prints every guard failure as it happens.')
    return Words(title, why, fix, evidence_text(cause.evidence))


def _unknown(cause: Cause, cwd: str) -> Words:
    return Words(
        f"Recompiles with no reason recorded ({plural(cause.count, 'recompile')})",
        ["Torch gave no reason for these captures (the compiled-autograd verbose logger was not active, "
         "or the record was cut short)."],
        ["Record again with `cagtool run` so cache-miss reasons are captured."],
        evidence_text(cause.evidence),
    )


_CAUSE_WORDS = {
    CAUSE_STRUCTURE: _structure,
    CAUSE_HOOK: _hook,
    CAUSE_GRAD_DEFINED: _grad_defined,
    CAUSE_SHAPES: _shapes,
    CAUSE_DYNAMO_FRAME: _guard,
    CAUSE_DYNAMO_CA_GRAPH: _guard,
}


def cause_words(cause: Cause, cwd: str) -> Words:
    return _CAUSE_WORDS.get(cause.code, _unknown)(cause, cwd)


def _causes_ref(numbers: list[int]) -> str:
    return ", ".join(f"#{n}" for n in numbers)


def alert_words(alert: Alert, cwd: str) -> Words:
    facts = alert.facts
    if alert.code == ALERT_STORM:
        share = "every step" if facts["every_step"] else f"{len(facts['recompiling_steps'])} of the {facts['steps_after_first']} steps"
        title = f"Recompile storm: recompiles on {share} after the first"
        why = [
            f"{plural(facts['recompiles'], 'recompile')} on steps {step_list(facts['recompiling_steps'])} "
            f"of {facts['last_step']}; each one costs a compile (and, for compiled autograd, a capture) inside the training step.",
        ]
        why.append(
            "Still recompiling at the last recorded step."
            if facts["still_recompiling"]
            else f"The last recompile was at step {facts['recompiling_steps'][-1]}."
        )
        fix = []
        if alert.causes:
            which = "that cause does" if len(alert.causes) == 1 else "those causes do"
            fix.append(f"Fix cause {_causes_ref(alert.causes)} below; the storm ends when {which}.")
        evidence = "steps " + step_list(facts["recompiling_steps"])
        return Words(title, why, fix, evidence)
    hits = alert.limit_hits
    first = hits[0]
    limit = f"config.{first.limit_type}" + (f" ({first.limit_value})" if first.limit_value is not None else "")
    if first.compile_id.startswith("!"):
        function = f"the code of compiled-autograd graph {first.compile_id.split('/')[0]}"
    else:
        function = f"`{first.function}`" if first.function else f"frame {compile_frame(first.compile_id) or '?'}"
    where = f" ({display_path(first.file, cwd)}:{first.line})" if first.file else ""
    title = f"Dynamo hit {limit} and fell back to eager"
    why = [
        f"At step {first.step if first.step is not None else '?'} Dynamo gave up recompiling {function}{where} "
        f"(compile {first.compile_id or '?'}): from then on it runs uncompiled (eager) on every call, "
        "and the compile time spent on it is lost.",
    ]
    if len(hits) > 1:
        why.append(f"{plural(len(hits), 'limit hit')} in all: " + elide([h.compile_id or '?' for h in hits]) + ".")
    fix = []
    if alert.causes:
        fix.append(f"Remove the recompiles behind it (cause {_causes_ref(alert.causes)}).")
    fix.append(f"Raising torch._dynamo.config.{first.limit_type} only postpones the fallback.")
    evidence = elide([f"{h.compile_id or '?'} (step {h.step if h.step is not None else '?'}, seq {h.seq})" for h in hits])
    return Words(title, why, fix, evidence)
