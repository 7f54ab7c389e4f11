"""Activation checkpointing measured per mode (`cagtool checkpointing`, verify/checkpointing.py
runs it): the kept result's types, its words for every renderer (terminal, summary, HTML) and its
reader. RUN/checkpointing.json holds it."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CHECKPOINTING_FILE = "checkpointing.json"
CHECKPOINTING_FORMAT = "cagtool-checkpointing"
CHECKPOINTING_VERSION = 2  # 2: the heap held for backward (Side.heap)
VARIANT_PLAIN = "plain"  # capture/modes/checkpoint_variant.py's names
VARIANT_NON_REENTRANT = "non_reentrant"
VARIANT_SKIP_SIDE_EFFECTS = "skip_side_effects"
# Two re-runs' heap figures closer than the larger of their steps' spreads plus this are "no
# measurable saving": glibc rounds chunks and keeps small caches, so a few hundred KiB move alone.
NOISE_FLOOR_BYTES = 2**20


@dataclass
class HeapHeld:
    """The heap a re-run held for its backward (capture/steps/heap_in_use.py), over its steady steps:
    in use at the backward's entry, and the sampled maximum inside it, each minus the heap in use at
    the previous step's end; the median and the spread (max - min) of the steps."""

    source: str | None  # None: not read (`why`)
    steps: int
    held_bytes: int | None
    held_spread_bytes: int | None
    peak_bytes: int | None
    peak_spread_bytes: int | None
    why: str = ""


@dataclass
class Side:
    """One re-run: its directory, status and what was read from its record."""

    variant: str  # "as written" | VARIANT_PLAIN | VARIANT_NON_REENTRANT | VARIANT_SKIP_SIDE_EFFECTS
    run: str
    status: str
    peak_rss_bytes: int | None
    recompute_recompiles: int | None  # Dynamo recompiles in an activation-checkpoint recompute
    error: str = ""
    peak_of: str = "rss"  # what peak_rss_bytes holds: "rss" (the process's peak RSS) or "cuda_max_allocated"
    heap: HeapHeld | None = None  # None: not read (an older result, or the re-run did not record it)
    graph_breaks: int | None = None  # torch's graph breaks in the re-run (None: an older result, or no record)
    compile_s: float | None = None  # its compile time (summary's)


def _change(a: int | None, b: int | None, spread: int) -> float | None:
    """(b - a) / b, the fraction of the plain call's figure checkpointing saved (negative: it cost);
    0.0 where the two are within `spread` + NOISE_FLOOR_BYTES (no measurable difference)."""
    if a is None or b is None or b <= 0:
        return None
    # A heap a little below the step's own start (glibc's caches, a reentrant checkpoint's forward
    # that keeps nothing) holds nothing for backward; one far below it is no measurement (the step
    # freed more before its backward than its forward held: heap_in_use.py), never "saves 100%".
    if a < -(spread + NOISE_FLOOR_BYTES):
        return None
    a = max(a, 0)
    if abs(b - a) <= spread + NOISE_FLOOR_BYTES:
        return 0.0
    return (b - a) / b


@dataclass
class ModeSaving:
    mode: str
    checkpointed: Side
    plain: Side
    non_reentrant: Side | None = None
    # Re-run with Dynamo's skip_fwd_side_effects_in_bwd_under_checkpoint set, where a side effect
    # broke the graph inside a checkpoint the mode's compiled code called (its unpack hooks then
    # split the compiled-autograd graph's code into pieces).
    side_effects_skipped: Side | None = None

    @property
    def saving(self) -> float | None:
        """The fraction of the plain call's peak memory that checkpointing saved (negative: it cost)."""
        a, b = self.checkpointed.peak_rss_bytes, self.plain.peak_rss_bytes
        if not a or not b or self.checkpointed.status != "finished" or self.plain.status != "finished":
            return None
        return (b - a) / b

    def _heaps(self) -> tuple[HeapHeld, HeapHeld] | None:
        a, b = self.checkpointed.heap, self.plain.heap
        if a is None or b is None or not a.steps or not b.steps or self.checkpointed.status != "finished" or self.plain.status != "finished":
            return None
        return a, b

    def _heap_change(self, figure: str, spread: str) -> float | None:
        """The fraction of the plain call's heap `figure` that checkpointing saved; 0.0 within the
        larger of the two sides' `spread` (no measurable saving); None without both readings."""
        heaps = self._heaps()
        if heaps is None:
            return None
        a, b = heaps
        return _change(getattr(a, figure), getattr(b, figure), max(getattr(a, spread) or 0, getattr(b, spread) or 0))

    @property
    def held_saving(self) -> float | None:
        """The saving of the heap held at the backward's entry."""
        return self._heap_change("held_bytes", "held_spread_bytes")

    @property
    def peak_saving(self) -> float | None:
        """The same of the heap's sampled maximum inside the backward."""
        return self._heap_change("peak_bytes", "peak_spread_bytes")


@dataclass
class CheckpointingResult:
    run: str
    modes: list[ModeSaving] = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {"format": CHECKPOINTING_FORMAT, "version": CHECKPOINTING_VERSION, **asdict(self)}
        for entry, mode in zip(out["modes"], self.modes):
            entry["saving"] = mode.saving
            entry["held_saving"] = mode.held_saving
            entry["peak_saving"] = mode.peak_saving
        return out


def _mib(n: int | None) -> str:
    # A heap figure below zero is nothing held (_change): never "-1 MiB", nor "-0 MiB" for a few bytes.
    return "?" if n is None else f"{round(max(n, 0) / 2**20)} MiB"


def _verdict(fraction: float) -> str:
    """A phrase after a colon: "no measurable saving", "saves 12%", "costs 16%"."""
    if fraction == 0.0:
        return "no measurable saving"
    return f"{'saves' if fraction > 0 else 'costs'} {abs(fraction):.0%}"


def _verb(fraction: float) -> str:
    """The same as a sentence's verb, checkpointing its subject: "makes no measurable saving"."""
    return "makes no measurable saving" if fraction == 0.0 else _verdict(fraction)


def _per_mode(said: list[tuple[str, str]]) -> str:
    """`saves 12% under aot and makes no measurable saving under ca`; modes that say the same share
    it: `makes no measurable saving under aot and ca`."""
    groups: list[tuple[str, list[str]]] = []
    for mode, words in said:
        if groups and groups[-1][0] == words:
            groups[-1][1].append(mode)
        else:
            groups.append((words, [mode]))
    return " and ".join(f"{words} under {' and '.join(modes)}" for words, modes in groups)


def headline(result: CheckpointingResult) -> str | None:
    """One line over the modes: the memory held for backward, and at the backward's peak."""
    held = [(m.mode, m.held_saving) for m in result.modes if m.held_saving is not None]
    if not held:
        return None
    parts = [(("none" if f == 0.0 else f"{abs(f):.0%}" + ("" if f > 0 else " less (it costs)")), mode) for mode, f in held]
    said = f"{parts[0][0]} of the memory held for backward under {parts[0][1]}" + "".join(f" and {x} under {mode}" for x, mode in parts[1:])
    peaks = _per_mode([(m.mode, _verb(m.peak_saving)) for m in result.modes if m.peak_saving is not None])
    return (f"checkpointing saves {said} (heap in use at backward entry)"
            + (f"; at the backward's peak it {peaks}" if peaks else ""))


def _uses_cuda(m: ModeSaving) -> bool:
    return m.checkpointed.peak_of == "cuda_max_allocated"


def heap_lines(m: ModeSaving) -> list[str]:
    """The heap held for backward and inside it, of one mode (the CPU figure; CUDA's is max allocated)."""
    if _uses_cuda(m):
        return []
    heaps = m._heaps()
    if heaps is None:
        a, b = m.checkpointed.heap, m.plain.heap
        why = next((h.why for h in (a, b) if h is not None and h.why), "")
        if why or (a is not None or b is not None):
            return [f"{m.mode}: heap held for backward not measured ({why or 'a re-run did not finish'}); the figure below is peak RSS"]
        return []
    a, b = heaps
    steps = min(a.steps, b.steps)
    held = m.held_saving
    below = [(name, h.held_bytes) for name, h in (("checkpointed", a), ("plain", b))
             if h.held_bytes is not None and h.held_bytes < -(NOISE_FLOOR_BYTES + max(a.held_spread_bytes or 0, b.held_spread_bytes or 0))]
    if below:
        return [f"{m.mode}: heap held for backward not compared ({_mib(a.held_bytes)} checkpointed, {_mib(b.held_bytes)} plain: "
                f"a figure below zero is no measurement, the step freed more before its backward than its forward held); "
                "the figure below is peak RSS"]
    if held is None:
        # The plain call held nothing measurable at the backward's entry (a reentrant checkpoint's
        # heap read 0 or below the allocator's): no fraction of it to speak of.
        return [f"{m.mode}: heap held for backward not compared ({_mib(a.held_bytes)} checkpointed, {_mib(b.held_bytes)} plain: "
                "the plain call held none to compare with); the figure below is peak RSS"]
    held_words = "makes no measurable saving in" if held == 0.0 else f"{_verdict(held)} of"
    lines = [f"{m.mode}: checkpointing {held_words} the memory held for backward (heap in use at backward entry, "
             f"median of {steps} steady steps: {_mib(a.held_bytes)} checkpointed, {_mib(b.held_bytes)} plain"
             + (f"; within the steps' spread of {_mib(max(a.held_spread_bytes or 0, b.held_spread_bytes or 0))}" if held == 0.0 else "") + ")"]
    peak = m.peak_saving
    if peak is not None:
        line = (f"{m.mode}: inside the backward the heap reached {_mib(a.peak_bytes)} checkpointed, {_mib(b.peak_bytes)} plain "
                f"(sampled maximum, median): {_verdict(peak)} at the backward's peak")
        if held > 0 and peak <= 0:
            line += (": the recomputed activations are all held at once inside the backward, so the saving at its entry "
                     "is gone at its peak" + (" (compiled autograd: a non-reentrant checkpoint outside the compiled region "
                                              "gives no memory saving)" if m.mode == "ca" else ""))
        lines.append(line)
    return lines


def mode_line(m: ModeSaving) -> str:
    if m.saving is None:
        why = "; ".join(f"{s.variant}: {s.status}{' (' + s.error + ')' if s.error else ''}" for s in (m.checkpointed, m.plain) if s.status != "finished")
        return f"{m.mode}: not measured ({why or 'no peak memory recorded'})"
    # Under half a percent reads "0%" either way: no difference, not "costs 0%" beside "saves 0%".
    said = "no difference" if abs(m.saving) < 0.005 else f"{'saves' if m.saving > 0 else 'costs'} {abs(m.saving):.0%}"
    if _uses_cuda(m):
        return (f"{m.mode}: checkpointing: {said} in peak memory (CUDA max allocated {_mib(m.checkpointed.peak_rss_bytes)} "
                f"checkpointed, {_mib(m.plain.peak_rss_bytes)} with checkpointing a plain call; one process each)")
    return (f"{m.mode}: peak RSS {_mib(m.checkpointed.peak_rss_bytes)} checkpointed, {_mib(m.plain.peak_rss_bytes)} plain "
            f"({said}; the whole process, compile memory and freed memory glibc kept included)")


def fix_line(m: ModeSaving) -> str | None:
    fixed = m.non_reentrant
    if fixed is None:
        return None
    before, after = m.checkpointed, fixed
    was = "failed (" + before.error + ")" if before.status != "finished" else f"{before.recompute_recompiles} recompiles in the recompute"
    now = "failed (" + after.error + ")" if after.status != "finished" else f"{after.recompute_recompiles} recompiles in the recompute"
    verdict = "VERIFIED" if after.status == "finished" and (before.status != "finished" or (after.recompute_recompiles or 0) < (before.recompute_recompiles or 0)) else "no effect"
    return (f"{m.mode}: reentrant checkpointing re-runs the forward inside the backward under different grad mode "
            f"(and under compiled autograd a nested backward); fix use_reentrant=False: {was} -> {now}: {verdict}")


def side_effects_line(m: ModeSaving) -> str | None:
    """The re-run with the side-effect config set, against the job as written: graph breaks and
    compile time; VERIFIED where it finished with fewer breaks."""
    fixed = m.side_effects_skipped
    if fixed is None:
        return None
    from cagtool.report.recompiles.explain import SIDE_EFFECT_CONFIG  # the fix in explain's words

    before = m.checkpointed

    def said(side: Side) -> str:
        if side.status != "finished":
            return "failed (" + side.error + ")" if side.error else side.status
        compile_s = "?" if side.compile_s is None else f"{side.compile_s:.1f} s"
        return f"{'?' if side.graph_breaks is None else side.graph_breaks} graph breaks, compile {compile_s}"

    verdict = ("VERIFIED" if fixed.status == "finished" and before.status == "finished" and fixed.graph_breaks is not None
               and before.graph_breaks is not None and fixed.graph_breaks < before.graph_breaks else "no effect")
    return (f"{m.mode}: a side effect broke the graph inside a checkpoint the compiled code calls, so it ran as eager "
            f"checkpointing does; fix {SIDE_EFFECT_CONFIG} (the side "
            f"effect is not replayed when the backward recomputes the forward): {said(before)} -> {said(fixed)}: {verdict}")


def checkpointing_lines(result: CheckpointingResult | dict[str, Any]) -> list[str]:
    """The result in words (terminal, summary, HTML): one line per mode, and the fix per mode when tried."""
    if isinstance(result, dict):
        result = result_from_dict(result)
    lines = []
    said = headline(result)
    if said:
        lines.append(said)
    for m in result.modes:
        lines += heap_lines(m)
        lines.append(mode_line(m))
        for said in (fix_line(m), side_effects_line(m)):
            if said:
                lines.append(said)
    return lines


def result_from_dict(data: dict[str, Any]) -> CheckpointingResult:
    def side(d: dict[str, Any] | None) -> Side | None:
        if not d:
            return None
        heap = d.get("heap")
        return Side(**{**d, "heap": HeapHeld(**heap) if isinstance(heap, dict) else None})

    modes = [ModeSaving(m["mode"], side(m["checkpointed"]), side(m["plain"]), side(m.get("non_reentrant")),  # type: ignore[arg-type]
                        side(m.get("side_effects_skipped"))) for m in data.get("modes", [])]
    return CheckpointingResult(str(data.get("run", "")), modes, float(data.get("wall_s") or 0.0))


def load_checkpointing(run_dir: Path) -> dict[str, Any] | None:
    """The kept result, or None (no measurement yet, or unreadable: it is optional)."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.loader import json_loads
    from cagtool.record.regular_files import read_record_bytes
    from cagtool.record.schema import MAX_JSON_FILE_BYTES
    from cagtool.record.seal import document_sealed

    path = Path(run_dir) / CHECKPOINTING_FILE
    if path.is_symlink() or not path.is_file():
        return None
    # A link, a FIFO, a file over the bound or not JSON (nested too deeply included: json_loads): none
    with contextlib.suppress(OSError, ValueError, UnreadableInput):
        data = json_loads(read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES))
        # Sealed where it was written (record/seal.py): one this user's cagtool did not measure is not shown as measured.
        if isinstance(data, dict) and data.get("format") == CHECKPOINTING_FORMAT and document_sealed(data):
            return {name: value for name, value in data.items() if name != "seal"}
    return None
