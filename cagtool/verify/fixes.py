"""The fixes `recompiles --explain --verify` can apply without editing the user's script, and which
root cause each answers.

Each fix is a change to how the job is run, never to its code: a `cagtool run` flag or an
environment variable that torch reads at import. What each relies on in torch 2.13 is written in
docs/torch-internals.md ("Fixes --verify applies"):

- `ca-dynamic`: compiled autograd's sizes start dynamic (`cagtool run --dynamic`, which reaches
  every route that enables compiled autograd: cagtool's own `_enable`, the script's, and the
  config flag's, which otherwise starts static). Answers changed tensor shapes in the backward and
  Dynamo's size-guard recompiles of a CA graph.
- `torch-pgo`: torch's own profile-guided suggestion, applied as torch words it (its
  TORCH_COMPILE_DYNAMIC_SOURCES list, recorded at the end of the mode), with `cagtool run
  --dynamic` when compiled autograd's sizes changed too. Answers the same causes as the two
  others together; verifying it says whether torch's advice works on this job.
- `dynamic-sources`: Dynamo treats the named inputs as dynamic from their first compile
  (`TORCH_COMPILE_DYNAMIC_SOURCES`, the setting torch's own profile-guided recompile messages
  suggest). Answers a forward frame recompiled because an input's size changed (a DataLoader's
  ragged last batch, a sequence length per batch).

A cause with no such fix (a hook added mid-run, the graph's structure changing per step, .grad
None vs defined, a Python number or flag Dynamo specialised on) needs a change to the code:
patches.py shows it as a diff, and where the edit is local (a hook registered mid-run, a number
only used in tensor arithmetic) `--verify` runs a patched copy of the script as one more fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cagtool.capture.observe.torch_logs import pgo_dynamic_sources
from cagtool.torch_text import GUARD_SIZE
from cagtool.report.recompiles.explain import (
    CAUSE_DYNAMO_CA_GRAPH,
    CAUSE_DYNAMO_FRAME,
    CAUSE_GRAD_DEFINED,
    CAUSE_HOOK,
    CAUSE_SHAPES,
    CAUSE_STRUCTURE,
    Cause,
    Explanation,
)

from cagtool.verify.patch import YOUR_CODE, Patch

# Who has to make a change, for each cause the explanation names.
RUN_CONFIG = "run configuration (no code change)"

# A size guard as torch words it: "tensor 'x' size mismatch at index 0. expected 32, actual 48".
_SIZE_GUARD = re.compile(r"tensor '(?P<name>[^']+)' (?:size|stride) mismatch")


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
    sources = []
    for _compile_id, guard in cause.facts.get("failures", ()):
        match = _SIZE_GUARD.search(guard or "")
        # A name torch wrote is printable: one with a control character is a record's forgery, and
        # would reach the re-run's environment (a NUL stopped the verification with a traceback).
        if match and match.group("name").isprintable() and (source := _source_of(match.group("name"))) not in sources:
            sources.append(source)
    return sources


def _about_sizes(cause: Cause) -> bool:
    """Changed sizes in the backward, or Dynamo's recompile of a CA graph on a size guard (by
    torch's reason, torch_text.guard_kind; one with no reason recorded is taken as sizes, what
    Dynamo recompiles a CA graph's own code on). A hook's list-length guard is not a size."""
    if cause.code == CAUSE_SHAPES:
        return True
    return cause.code == CAUSE_DYNAMO_CA_GRAPH and not cause.facts.get("hook") and cause.facts.get("kind") in (GUARD_SIZE, "")


def who_fixes(cause: Cause) -> str:
    """Who has to make the change a cause needs."""
    if _about_sizes(cause) or (cause.code in (CAUSE_DYNAMO_FRAME, CAUSE_DYNAMO_CA_GRAPH) and _dynamo_sources(cause)):
        return RUN_CONFIG
    if cause.code in (CAUSE_HOOK, CAUSE_STRUCTURE, CAUSE_GRAD_DEFINED):
        return YOUR_CODE
    return YOUR_CODE


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
    torch_sources = pgo_dynamic_sources(pgo_suggestion) if pgo_suggestion else None
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
    if torch_sources and (shapes or frames):
        # Torch's own advice, applied as it words it: its list also names the compiled-autograd
        # graph's size inputs (L['sizes'][i]), whose Dynamo recompile ca-dynamic alone leaves.
        dynamic = ("--dynamic",) if shapes and not dynamic_already else ()
        fixes.append(Fix("torch-pgo", "torch's own PGO suggestion, as it words it" + (", with compiled autograd's sizes dynamic" if dynamic else ""),
                         tuple(sorted({*shapes, *frames})), run_flags=dynamic, env={"TORCH_COMPILE_DYNAMIC_SOURCES": torch_sources},
                         torch_says=pgo_suggestion))
    if sources:
        fixes.append(Fix("dynamic-sources", f"Dynamo compiles {', '.join(sources)} dynamic from the start", tuple(frames),
                         env={"TORCH_COMPILE_DYNAMIC_SOURCES": ",".join(sources)}, torch_says=pgo_suggestion))
    return fixes


def patch_fix(patch: Patch) -> Fix:
    """A patch cagtool can apply, as a fix `--verify` runs (on a copy of the script)."""
    return Fix(patch.name, patch.title, patch.causes, who=patch.who, patch=patch)
