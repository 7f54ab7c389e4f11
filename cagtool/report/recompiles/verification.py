"""A kept verification (`<run>/verification.json`, written by `recompiles --explain --verify`,
cagtool/verify/) read back and put in words: one block per fix (before -> after, verdict), then
the causes no fix could be applied for. Used by `recompiles --verify`, `summary` and the HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import Struct, field

from cagtool.errors import UnreadableInput
from cagtool.record.regular_files import read_record_bytes
from cagtool.record.seal import document_sealed
from cagtool.record.schema import MAX_JSON_FILE_BYTES
from cagtool.report.figures.intervals import ratio_text
from cagtool.torch_text import PGO_SOURCES_SHOWN, pgo_shown

VERIFICATION_FILE = "verification.json"
VERIFICATION_FORMAT = "cagtool-verification"


# The file's shape, as cagtool/verify/verification.py writes it (its dataclasses, `Patch.to_dict`
# and fixes.unanswered_causes' items): what every reader below may index. A file that is not this
# (a key missing, a count that is a string), forged or damaged, is not read.
class _PatchDoc(Struct):
    name: str
    causes: list[int]
    title: str
    file: str
    line: int | None
    diff: str
    applicable: bool
    why_not: str | None = None
    who: str = "your code"


class _SideDoc(Struct):
    name: str
    run: str
    status: str
    ca_recompiles: list[int | None]
    dynamo_recompiles: list[int | None]
    ca_graphs: list[int | None]
    compile_time_s: float | None
    first_step_s: float | None
    step_time_median_s: float | None
    steady_steps: int
    peak_memory_bytes: int | None
    wall_s: float
    hook_calls: list[int | None] = field(default_factory=list)
    compile_times_s: list[float | None] = field(default_factory=list)
    compile_waits: list[float | None] = field(default_factory=list)
    steps: list[int | None] = field(default_factory=list)
    graph_breaks: list[int | None] = field(default_factory=list)
    graph_break_places: list[list[str] | None] = field(default_factory=list)
    failure: str | None = None


class _FixDoc(Struct):
    fix: str
    title: str
    who: str
    causes: list[int]
    run_flags: list[str]
    env: dict[str, str]
    measured: _SideDoc | None
    verdict: str
    reasons: list[str]
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    speedup_verdict: str | None = None
    numerics_agree: bool | None = None
    patch: _PatchDoc | None = None
    patched_copy: str | None = None
    torch_says: str | None = None
    same_as: str | None = None


class _NotAppliedDoc(Struct):
    cause: int
    code: str
    who: str
    why: str
    patch: _PatchDoc | None = None
    nothing_to_change: bool = False
    caused_by: int | None = None


class _VerificationDoc(Struct):
    format: str
    version: int
    run: str
    mode: str
    repeat: int
    baseline: _SideDoc | None
    fixes: list[_FixDoc]
    not_applied: list[_NotAppliedDoc] = field(default_factory=list)
    estimated_s: float | None = None
    wall_s: float | None = None
    off_record: list[str] = field(default_factory=list)


# What a report says of a verification.json that load_verification left unread.
UNREAD_NOTE = ("verification.json left unread: it is not what your `cagtool recompiles --explain --verify` wrote "
               "(damaged, edited, or made elsewhere: another user's or host's); verify again to keep a new one")


def load_verification(run_path: Path | str) -> dict[str, Any] | None:
    """The run's kept verification, or None when it has none or it is unreadable: it is optional,
    as checkpointing.json and cpu_wait.json are, so a damaged or forged one (not JSON, or not the
    shape verify/ writes) is left unread, never a reason to refuse the run. What comes back has
    every key the renderers read, each of its type."""
    from cagtool.record.loader import json_loads

    path = Path(run_path) / VERIFICATION_FILE
    try:
        data = json_loads(read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES))
    except (OSError, ValueError, RecursionError, UnreadableInput):
        return None
    if not isinstance(data, dict) or data.get("format") != VERIFICATION_FORMAT or not document_sealed(data):
        return None
    try:
        document = msgspec.convert({name: value for name, value in data.items() if name != "seal"}, type=_VerificationDoc)  # a float field takes an integer, as json wrote it
    except msgspec.ValidationError:
        return None
    return msgspec.to_builtins(document)


def repetition_counts(values: list) -> str:
    """Per-repetition counts in words: '8', or '8/8/7' where the repetitions differ; '?' for none."""
    return str(values[0]) if values and len(set(values)) == 1 else "/".join(map(str, values)) or "?"


def _counts(before: list, after: list) -> str:
    return f"{repetition_counts(before)} -> {repetition_counts(after)}"


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _mib(value: Any) -> str:
    return "-" if not value else f"{value / 2**20:.0f} MiB"


def patch_lines(patch: dict[str, Any]) -> list[str]:
    """A patch's unified diff, indented under its fix (kept verbatim: it is what to apply)."""
    return [f"      {line}" for line in patch.get("diff", "").splitlines()]


def fix_how(fix: dict[str, Any]) -> str:
    """How a fix is applied: its environment and `cagtool run` flags, or the patch's place."""
    patch = fix.get("patch")
    if patch:
        return f"patch of {patch['file']}, line {patch['line']}"
    return " ".join([*(f"{k}={_short_value(val)}" for k, val in (fix.get("env") or {}).items()), *(f"cagtool run {flag}" for flag in fix.get("run_flags") or ())])


def _short_value(value: str) -> str:
    """An environment value as the fix's title line shows it: a long list by its count (the line
    "in your job" below gives it whole, to copy)."""
    items = value.split(",")
    return value if len(items) <= PGO_SOURCES_SHOWN + 2 else f"<{len(items)} sources, in full below>"


def fix_in_job(fix: dict[str, Any]) -> str:
    """How a user applies a fix in their own job, without cagtool: the torch setting, environment
    variable or code change (what `cagtool run --dynamic` does is in docs/torch-internals.md,
    "Fixes `recompiles --verify` applies")."""
    patch = fix.get("patch")
    if patch:
        return f"edit {patch['file']} as the diff shows (line {patch['line']})"
    parts = [f"set {k}=\"{val}\" in the job's environment" for k, val in (fix.get("env") or {}).items()]
    if "--dynamic" in (fix.get("run_flags") or ()):
        parts.append("start compiled autograd dynamic: torch._dynamo.compiled_autograd._enable(compiler, dynamic=True) around "
                     "the backward; or, where the backward runs inside a function compiled with "
                     "torch._dynamo.config.compiled_autograd = True, torch.compile(..., dynamic=True) on that function")
    return "; and ".join(parts)


def _recompiles_after(fix: dict[str, Any]) -> tuple[int, int]:
    """(CA + Dynamo recompiles, CA graphs) the fix's re-runs ended with (the worst repetition)."""
    m = fix.get("measured") or {}
    totals = [a + b for a, b in zip(m.get("ca_recompiles") or (), m.get("dynamo_recompiles") or ()) if a is not None and b is not None]
    graphs = [g for g in m.get("ca_graphs") or () if g is not None]
    return (max(totals) if totals else 1 << 30, max(graphs) if graphs else 1 << 30)


def _changes(fix: dict[str, Any]) -> int:
    """How many things a user sets or edits to apply a fix: each input an environment variable
    names (TORCH_COMPILE_DYNAMIC_SOURCES' list), each run flag, an edit."""
    env = fix.get("env") or {}
    named = sum(len([item for item in str(value).split(",") if item.strip()]) for value in env.values())
    return named + len(fix.get("run_flags") or ()) + (1 if fix.get("patch") else 0)


def best_fix(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The verified fix the measurements support most: the fewest recompiles left, then the fewest
    CA graphs; on a tie, the one with the fewest things to set or edit (torch's PGO list of 32
    compiled-autograd inputs with --dynamic, or a one-line drop_last=True: the edit), then the one
    that changes no code (a run setting before an edit)."""
    good = [f for f in (data or {}).get("fixes", ()) if f.get("verdict") == "verified"]
    if not good:
        return None
    return min(good, key=lambda f: (*_recompiles_after(f), _changes(f), 1 if f.get("patch") else 0))


# The timing verdicts (compare's Speedup.verdict) whose interval is a claim; any other (too few
# steady steps, load differed) says why none is made.
JUDGED = ("faster", "slower", "no change", "inconclusive")


def speedup_bounds(fix: dict[str, Any]) -> str:
    """A fix's steady-step ratio's interval, or, where its verdict makes no claim (too few steady
    steps), that verdict: an interval then would read as a bound the steps cannot give. A
    verification.json of an older cagtool, without the verdict, shows its interval."""
    verdict = fix.get("speedup_verdict")
    if verdict is not None and verdict not in JUDGED:
        return f"{verdict}: not judged"
    return f"90% CI {ratio_text(fix['speedup_low'])}-{ratio_text(fix['speedup_high'])}"


def verification_lines(data: dict[str, Any]) -> list[str]:
    base = data.get("baseline") or {}
    runs = f"{data['repeat']} run" if data["repeat"] == 1 else f"{data['repeat']} runs"
    lines = [f"Fixes verified by re-running (mode {data['mode']}, {runs} of the baseline and of each fix):"]
    if not data["fixes"] and not data.get("not_applied"):
        lines.append("  nothing to verify: the mode has no recompile cause")
    elif not data["fixes"] and all(item.get("nothing_to_change") for item in data["not_applied"]):
        lines.append("  nothing to verify: the explanation finds nothing to change in your code for these causes")
    elif not data["fixes"]:
        lines.append("  no fix cagtool can apply (a run setting, or a local edit of the script) answers these causes")
    # Torch's PGO suggestion is the same for each fix it goes with: said once, before them.
    said = next((fix["torch_says"] for fix in data["fixes"] if fix.get("torch_says")), None)
    if said:
        lines.append(f"  torch's own suggestion (PGO), to compare the fixes with: {pgo_shown(said, data['mode'])}")
    for fix in data["fixes"]:
        causes = ", ".join(f"#{n}" for n in fix["causes"])
        how = fix_how(fix)
        patch = fix.get("patch")
        lines.append(f"  {fix['fix']} (cause {causes}): {fix['title']} [{how}] - {fix['who']}")
        if not patch and (in_job := fix_in_job(fix)):
            lines.append(f"    in your job, without cagtool: {in_job}")
        if fix.get("torch_says") and fix["torch_says"] != said:
            lines.append(f"    torch's own suggestion (PGO): {pgo_shown(fix['torch_says'], data['mode'])}")
        if patch:
            lines += patch_lines(patch)
            if fix.get("patched_copy"):
                lines.append(f"    applied to a copy, {fix['patched_copy']}, run in place of the script (your file is unchanged)")
        m = fix.get("measured")
        if m and base:
            # A re-run that failed stopped early: its counts are of the steps it ran, not the fix's effect.
            partial = "what the failed re-run recorded before it stopped (not a measure of the fix): " if fix["verdict"] == "failed" else ""
            lines.append(f"    {partial}CA recompiles {_counts(base['ca_recompiles'], m['ca_recompiles'])}, Dynamo recompiles "
                         f"{_counts(base['dynamo_recompiles'], m['dynamo_recompiles'])}, CA graphs {_counts(base['ca_graphs'], m['ca_graphs'])}"
                         + (f", hooks run {_counts(base['hook_calls'], m['hook_calls'])}"
                            if any(base.get("hook_calls") or ()) or any(m.get("hook_calls") or ()) else ""))
            step = "-"
            if fix.get("speedup") is not None:
                step = f"{ratio_text(fix['speedup'])} of the baseline's speed ({speedup_bounds(fix)})"
            lines.append(f"    compile {_seconds(base['compile_time_s'])} -> {_seconds(m['compile_time_s'])}; first step "
                         f"{_seconds(base['first_step_s'])} -> {_seconds(m['first_step_s'])}; steady step {step}; peak memory "
                         f"{_mib(base['peak_memory_bytes'])} -> {_mib(m['peak_memory_bytes'])}")
        lines.append(f"    verdict: {fix['verdict'].upper()} ({'; '.join(fix['reasons'])}); re-runs: {m['run'] if m else '-'}")
    for item in data.get("not_applied", ()):
        lines.append(f"  cause #{item['cause']} ({item['code']}): {item['why']} - {item['who']}")
        if item.get("patch") and item["patch"].get("diff"):
            lines += patch_lines(item["patch"])
    took = data.get("wall_s")
    estimated = data.get("estimated_s")
    if took is not None:
        lines.append(f"  took {took:.0f} s" + (f" (estimated {estimated:.0f} s)" if estimated is not None else "") + f"; kept in {data['run']}/verification.json")
    return lines
