"""The fixes `recompiles --explain --verify` can apply without editing the user's script, and which
root cause each answers.

Each fix is a change to how the job is run, never to its code: a `cagtool run` flag or an
environment variable that torch reads at import. What each relies on in torch 2.13 is written in
docs/torch-internals.md ("Fixes --verify applies"):

- `ca-dynamic`: compiled autograd's sizes start dynamic (`cagtool run --dynamic`, which reaches
  every route that enables compiled autograd: cagtool's own `_enable`, the script's, and the
  config flag's, which otherwise starts static). Answers changed tensor shapes in the backward and
  Dynamo's size-guard recompiles of a CA graph.
- `torch-pgo`: torch's own profile-guided suggestion, applied as torch words it: its
  TORCH_COMPILE_DYNAMIC_SOURCES list, recorded at the end of the mode, and nothing else. Answers
  the forward frames whose inputs it names and, where it names the compiled-autograd graph's own
  inputs (`L['sizes'][i]`), Dynamo's recompile of that graph; never compiled autograd's own cache
  miss, which `ca-dynamic` answers and is measured as itself. With both, torch's advice paid
  ca-dynamic's cost: an HF Trainer job's compile went 22 s -> 143 s and a reentrant checkpoint's
  Dynamo recompiles 2 -> 4, where torch's list alone compiled in 24 s and took them 2 -> 0.
  Verifying it says whether torch's advice works on this job.
- `torch-pgo-ca-dynamic`: both of the above in one re-run, offered where torch's list names the
  compiled-autograd graph's inputs and compiled autograd's sizes changed: the shape loop's complete
  fix (compiled autograd's cache miss and Dynamo's recompile of its graph), measured as itself so
  that neither half's cost hides in the other.
- `accelerate-dynamic`: where HF accelerate made the torch.compile call (HF Trainer's
  torch_compile=True) with `dynamic` unset, ACCELERATE_DYNAMO_USE_DYNAMIC=1, which accelerate reads
  then: torch.compile(..., dynamic=True). Answers a forward frame recompiled on a size guard there.
- `capture-scalars`: where a frame that resumes after a graph break on `Tensor.item()` recompiled
  on the value carried across the break (`___stack0 == 0.2468`), TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1,
  which torch reads at import (torch._dynamo.config.capture_scalar_outputs, torch's own hint for
  that break): `.item()` is traced into the graph, the break and its resume frame go.
- `dynamic-sources`: Dynamo treats the named inputs as dynamic from their first compile
  (`TORCH_COMPILE_DYNAMIC_SOURCES`, the setting torch's own profile-guided recompile messages
  suggest). Answers a forward frame recompiled because an input's size changed (a DataLoader's
  ragged last batch, a sequence length per batch).

A cause with no such fix (a hook added mid-run, the graph's structure changing per step, .grad
None vs defined, a Python number or flag Dynamo specialised on) needs a change to the code:
patches.py shows it as a diff, and where the edit is local (a hook registered mid-run, a number
only used in tensor arithmetic) `--verify` runs a patched copy of the script as one more fix. A
cause the explanation finds nothing to change in the user's code for (a one-time recompile, a
library's hook state) is said to need none (`unanswered_causes`), by the explanation's own decision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cagtool.capture.observe.torch_logs import pgo_dynamic_sources
from cagtool.torch_text import GUARD_SIZE, item_break, size_or_stride_guard
from cagtool.report.recompiles.explain import (
    CAUSE_DYNAMO_CA_GRAPH,
    CAUSE_DYNAMO_FRAME,
    CAUSE_SHAPES,
    Cause,
    Explanation,
    accelerate_compiled,
    cause_words,
    goes_with_its_forward,
    nothing_to_fix,
    stack_value,
)

from cagtool.verify.patch import YOUR_CODE, Patch

# Who has to make a change, for each cause the explanation names.
RUN_CONFIG = "run configuration (no code change)"
NO_CHANGE = "no change needed"  # the explanation finds the recompiles one-time, cached from then on

# The tensor of a size or stride guard (torch_text.size_or_stride_guard) must read as a source (a
# name, then attributes, [N] and ['key'] items): a comma in it would split
# TORCH_COMPILE_DYNAMIC_SOURCES's list. A key holds word characters, dots and dashes only (a module's
# name, `0`, `layers.3`): torch 2.13 reads each item of that list as a regular expression
# (`re.match` in is_dynamic_source, for every source Dynamo builds), and a forged record's
# `(((.+)+)+)+!` kept the re-run's first compile spinning for minutes.
_SOURCE_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\]|\['[\w.-]+'\])*")
# An item of that list as torch's own PGO writes it (`L['x']`, `L['self']._modules['0']._parameters['weight']`,
# `L['sizes'][0]`): the same grammar, from a frame's locals or globals.
_TORCH_SOURCE = re.compile(r"[LG]\['[\w.-]+'\](?:\.[A-Za-z_]\w*|\[\d+\]|\['[\w.-]+'\])*")


def _torch_source_list(listed: str | None) -> str | None:
    """torch's PGO list (TORCH_COMPILE_DYNAMIC_SOURCES's value, from the record's manifest) where
    every item is a source name as torch writes one, else None: a list that is not (a forged
    record's regular expression) never reaches a re-run's environment."""
    if not listed:
        return None
    items = [item.strip() for item in listed.split(",")]
    return listed if all(_TORCH_SOURCE.fullmatch(item) for item in items if item) and any(items) else None


@dataclass(frozen=True)
class Fix:
    name: str
    title: str
    causes: tuple[int, ...]  # the explanation's cause numbers it answers
    run_flags: tuple[str, ...] = ()  # added to the re-run's `cagtool run`
    env: dict[str, str] = field(default_factory=dict)  # the re-run's environment
    who: str = RUN_CONFIG
    patch: Patch | None = None  # a code change: the re-run runs a patched copy of the script
    torch_says: str | None = None  # torch's own suggestion for the same recompiles (its PGO), verbatim

    def describe(self) -> str:
        if self.patch is not None:
            return f"{self.title} (a patched copy of {self.patch.file})"
        how = " ".join([*(f"{k}={v}" for k, v in self.env.items()), *(f"cagtool run {flag}" for flag in self.run_flags)])
        return f"{self.title} ({how})"


# The inputs of a compiled-autograd graph as torch's PGO names them (its `forward(self, inputs,
# sizes, scalars, hooks, ...)`): not a forward frame's.
_CA_GRAPH_SOURCE = re.compile(r"L\['(?:inputs|sizes|scalars|hooks|packed_data)'\]\[\d+\]")

_HEAD = re.compile(r"(?P<head>[A-Za-z_]\w*)(?P<rest>.*)")


def _source_of(name: str) -> str:
    """Torch's source name for a guard's tensor, as TORCH_COMPILE_DYNAMIC_SOURCES matches it: the
    local `x` is `L['x']`, `args[0]` is `L['args'][0]`, `self.w` is `L['self'].w`; a name that
    is already a source (`L['x']`) stays."""
    if name.startswith(("L[", "G[")):
        return name
    match = _HEAD.fullmatch(name)
    return f"L['{match.group('head')}']{match.group('rest')}" if match else name


def _dynamo_sources(cause: Cause) -> list[str]:
    if cause.facts.get("other_instance") or cause.facts.get("other_module_by_guards"):
        return []  # another instance's parameters, another module's first call: no input made dynamic answers it (explain.py)
    sources = []
    for _compile_id, guard in cause.facts.get("failures", ()):
        # A name torch wrote is printable: one with a control character is a record's forgery, and
        # would reach the re-run's environment (a NUL stopped the verification with a traceback).
        name = size_or_stride_guard(guard or "") or ""
        if name.isprintable() and _SOURCE_NAME.fullmatch(name) and _TORCH_SOURCE.fullmatch(source := _source_of(name)) and source not in sources:
            sources.append(source)
    return sources


def _about_sizes(cause: Cause) -> bool:
    """Changed sizes in the backward, or Dynamo's recompile of a CA graph on a size guard (by
    torch's reason, torch_text.guard_kind; one with no reason recorded is taken as sizes, what
    Dynamo recompiles a CA graph's own code on). A hook's list-length guard is not a size."""
    if cause.code == CAUSE_SHAPES:
        return True
    return cause.code == CAUSE_DYNAMO_CA_GRAPH and not cause.facts.get("hook") and cause.facts.get("kind") in (GUARD_SIZE, "")


def library_of(cause: Cause) -> str | None:
    """The package whose hooks read the value the cause's guard is on (the explanation's
    `library_hooks`: every hook the graph calls is that package's): the change, if any, is its."""
    found = cause.facts.get("library_hooks")
    return found[0] if found else None


def who_fixes(cause: Cause, cwd: str = "") -> str:
    """Who has to make the change a cause needs: a run setting where one answers it, the library
    whose hooks read the guarded value, nobody where the explanation finds nothing to fix, else the
    user's code."""
    if _about_sizes(cause) or (cause.code in (CAUSE_DYNAMO_FRAME, CAUSE_DYNAMO_CA_GRAPH) and _dynamo_sources(cause)):
        return RUN_CONFIG
    if (package := library_of(cause)) is not None:
        return f"{package}'s code, not yours"
    if nothing_to_fix(cause, cwd):
        return NO_CHANGE
    return YOUR_CODE


def _nothing_of_yours(cause: Cause, cwd: str) -> str | None:
    """Why a cause needs no change in the user's code, as the explanation decided it; None where it
    needs one. A one-time recompile (explain.nothing_to_fix); a library's value (`library_hooks`), in
    the explanation's own first fix: "Nothing to change in your code: the value is deepspeed's ...",
    or, where it keeps changing, "Not your code: ... Report it to deepspeed"; torch's frames compiled
    inside compiled autograd's captures (`inside_capture`), in the same way."""
    if (library_of(cause) is not None or cause.facts.get("inside_capture")) and (fix := cause_words(cause, cwd).fix):
        return fix[0][:1].lower() + fix[0][1:].rstrip(".")
    if nothing_to_fix(cause, cwd):
        return "nothing to fix: the explanation finds these recompiles one-time, each graph cached from then on"
    return None


def on_a_size(cause: Cause) -> bool:
    """A forward frame recompiled on a failing guard on a tensor's size or stride (not its rank: a
    dynamic dimension does not make another rank hold): what dynamic shapes answer, never an edit."""
    return cause.code == CAUSE_DYNAMO_FRAME and any(size_or_stride_guard(guard or "") for _, guard in cause.facts.get("failures", ()))


def unanswered_causes(explanation: Explanation, verified: set[int], applicable: set[int], patches: dict[int, Patch], cwd: str,
                      asked: str | None = None) -> list[dict]:
    """The causes no fix being verified answers (`verified`: the causes of those fixes), each with
    why no fix was applied and who has the change to make. `applicable`: the causes of every fix
    that applies (`asked`, the --fix given, chose among them); `patches`: the code changes shown for
    causes no run setting answers. Where the explanation finds nothing to change in the user's code
    (one-time, or a library's value), that is what the line says, never "your code", and the item
    says so (`nothing_to_change`)."""
    items = []
    by_number = {c.number: c for c in explanation.causes}
    for c in explanation.causes:
        if c.number in verified:
            continue
        patch = patches.get(c.number)
        if c.caused_by is not None and c.number not in applicable:
            # No fix of its own: it goes away with its root cause (a forward recompiled less, a
            # backward captured less), never "a design choice" or a code change of its own.
            root = by_number.get(c.caused_by, c)
            why = f"follows from #{c.caused_by}: answered by the fix of #{c.caused_by}"
            if goes_with_its_forward(c):
                why = (f"follows from #{c.caused_by}: the recompiled forward computes differently; a fix of #{c.caused_by} "
                       "that keeps it computing one way removes this too")
            unchanged = root.number not in applicable and _nothing_of_yours(root, cwd) is not None
            if unchanged:
                why = f"follows from #{c.caused_by}, which needs no change in your code"
            items.append({"cause": c.number, "code": c.code, "who": who_fixes(root, cwd), "caused_by": c.caused_by, "why": why, "patch": None,
                          "nothing_to_change": unchanged})
            continue
        nothing = _nothing_of_yours(c, cwd) if c.number not in applicable else None
        if c.number in applicable:
            why = f"not verified this time: --fix {asked} asked for another fix"
        elif nothing is not None:
            why = nothing
        elif patch is not None:
            why = f"needs a change to the code; not applied: {patch.why_not}"
        elif on_a_size(c):
            why = ("not applied: its failing guard is on a tensor's size, which dynamic shapes answer, not a local edit, and no "
                   "fix here names its input: mark the dimension dynamic as the explanation says")
        else:
            why = "needs a change to the code; not applied automatically"
        items.append({"cause": c.number, "code": c.code, "who": who_fixes(c, cwd), "why": why,
                      "patch": patch.to_dict() if patch is not None else None, "nothing_to_change": nothing is not None})
    return items


def fixes_for(explanation: Explanation, dynamic_already: bool = False, pgo_suggestion: str | None = None) -> list[Fix]:
    """The fixes --verify can apply for an explanation's causes (one per kind, answering every
    cause of that kind), in the explanation's order. `dynamic_already`: the run was recorded with
    --dynamic, so `ca-dynamic` would change nothing. `pgo_suggestion`: torch's own suggestion
    recorded for the run (capture/observe/torch_logs.py), carried verbatim by the fixes that
    answer the same shape recompiles."""
    shapes = [c.number for c in explanation.causes if _about_sizes(c)]
    sources: list[str] = []
    frames: list[int] = []
    for cause in explanation.causes:
        if cause.code == CAUSE_DYNAMO_FRAME:
            found = _dynamo_sources(cause)
            if found:
                frames.append(cause.number)
                sources += [s for s in found if s not in sources]
    torch_sources = _torch_source_list(pgo_dynamic_sources(pgo_suggestion) if pgo_suggestion else None)
    if sources and torch_sources:
        # The first failing guard names one input; another the code ties to it (`h * mask`, with
        # `tokens` of the same length) keeps it specialised unless it is dynamic too, and torch's
        # own list names it (torch 2.13, checked by hand: `mask` alone, still 1 recompile; `tokens`
        # and `mask`, none). Its forward frames' sources join when it names every one found here.
        listed = [s.strip() for s in torch_sources.split(",") if s.strip()]
        if all(s in listed for s in sources):
            sources += [s for s in listed if s not in sources and not _CA_GRAPH_SOURCE.match(s)]
    fixes = []
    if shapes and not dynamic_already:
        fixes.append(Fix("ca-dynamic", "compiled autograd's sizes start dynamic", tuple(shapes), run_flags=("--dynamic",),
                         torch_says=pgo_suggestion))
    if torch_sources:
        # Torch's own advice, applied as it words it: the environment variable alone. PGO learns
        # which dimensions went dynamic and names them; it never starts compiled autograd dynamic
        # (cagtool run --dynamic is ca-dynamic, measured as itself: added here it made torch's
        # advice harmful on the jobs where ca-dynamic is). Its list also names the CA graph's own
        # inputs (L['sizes'][i]), whose Dynamo recompile ca-dynamic alone leaves; compiled
        # autograd's own cache miss stays.
        listed = {s.strip() for s in torch_sources.split(",") if s.strip()}
        answered = [c.number for c in explanation.causes if c.code == CAUSE_DYNAMO_FRAME and any(s in listed for s in _dynamo_sources(c))]
        names_ca_graph = any(_CA_GRAPH_SOURCE.match(s) for s in listed)
        if names_ca_graph:
            answered += shapes
        if answered:
            fixes.append(Fix("torch-pgo", "torch's own PGO suggestion, as it words it", tuple(sorted(set(answered))),
                             env={"TORCH_COMPILE_DYNAMIC_SOURCES": torch_sources}, torch_says=pgo_suggestion))
        if names_ca_graph and shapes and not dynamic_already:
            # Where torch's list names the CA graph's inputs, the two halves of a backward's shape
            # loop: compiled autograd's own cache miss (ca-dynamic) and Dynamo's recompile of the CA
            # graph (torch's list); each alone leaves the other's, together they end both (the
            # shape loop: 1/1 -> 0/0). Measured as a fix of its own, never folded into torch's.
            fixes.append(Fix("torch-pgo-ca-dynamic", "torch's own PGO suggestion, with compiled autograd's sizes dynamic",
                             tuple(sorted(set(answered))), run_flags=("--dynamic",),
                             env={"TORCH_COMPILE_DYNAMIC_SOURCES": torch_sources}, torch_says=pgo_suggestion))
    accelerate = [c.number for c in explanation.causes if on_a_size(c) and accelerate_compiled(c.facts) is not None]
    if accelerate:
        fixes.append(Fix("accelerate-dynamic", "accelerate compiles the model with dynamic=True", tuple(accelerate),
                         env={"ACCELERATE_DYNAMO_USE_DYNAMIC": "1"}, torch_says=pgo_suggestion))
    scalars = [c.number for c in explanation.causes if carried_item(c)]
    if scalars:
        fixes.append(Fix("capture-scalars", "Dynamo traces .item() into the graph instead of breaking it there", tuple(scalars),
                         env={"TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS": "1"}))
    if sources:
        fixes.append(Fix("dynamic-sources", f"Dynamo compiles {', '.join(sources)} dynamic from the start", tuple(frames),
                         env={"TORCH_COMPILE_DYNAMIC_SOURCES": ",".join(sources)}, torch_says=pgo_suggestion))
    return fixes


def carried_item(cause: Cause) -> bool:
    """A frame that resumes after a graph break on `Tensor.item()`, recompiled on a value Dynamo
    carried across that break (`___stack0 == 0.2468`: what `.item()` returned): the break is the
    cause, and capture_scalar_outputs removes it (torch 2.13, itemfwd-shaped job: CA recompiles 1
    -> 1, Dynamo recompiles 2 -> 1, graph breaks 1 -> 0)."""
    return (cause.code == CAUSE_DYNAMO_FRAME and cause.facts.get("resume") is not None
            and item_break(cause.facts.get("break_reason") or "") and stack_value(cause.facts.get("guard") or ""))


def patch_fix(patch: Patch) -> Fix:
    """A patch cagtool can apply, as a fix `--verify` runs (on a copy of the script)."""
    return Fix(patch.name, patch.title, patch.causes, who=patch.who, patch=patch)
