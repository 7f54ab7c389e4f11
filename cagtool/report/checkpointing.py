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
CHECKPOINTING_VERSION = 1
VARIANT_PLAIN = "plain"  # capture/modes/checkpoint_variant.py's names
VARIANT_NON_REENTRANT = "non_reentrant"


@dataclass
class Side:
    """One re-run: its directory, status and what was read from its record."""

    variant: str  # "as written" | VARIANT_PLAIN | VARIANT_NON_REENTRANT
    run: str
    status: str
    peak_rss_bytes: int | None
    recompute_recompiles: int | None  # Dynamo recompiles in an activation-checkpoint recompute
    error: str = ""
    peak_of: str = "rss"  # what peak_rss_bytes holds: "rss" (the process's peak RSS) or "cuda_max_allocated"


@dataclass
class ModeSaving:
    mode: str
    checkpointed: Side
    plain: Side
    non_reentrant: Side | None = None

    @property
    def saving(self) -> float | None:
        """The fraction of the plain call's peak memory that checkpointing saved (negative: it cost)."""
        a, b = self.checkpointed.peak_rss_bytes, self.plain.peak_rss_bytes
        if not a or not b or self.checkpointed.status != "finished" or self.plain.status != "finished":
            return None
        return (b - a) / b


@dataclass
class CheckpointingResult:
    run: str
    modes: list[ModeSaving] = field(default_factory=list)
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {"format": CHECKPOINTING_FORMAT, "version": CHECKPOINTING_VERSION, **asdict(self)}
        for entry, mode in zip(out["modes"], self.modes):
            entry["saving"] = mode.saving
        return out


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.0f} MiB"


def mode_line(m: ModeSaving) -> str:
    if m.saving is None:
        why = "; ".join(f"{s.variant}: {s.status}{' (' + s.error + ')' if s.error else ''}" for s in (m.checkpointed, m.plain) if s.status != "finished")
        return f"{m.mode}: not measured ({why or 'no peak memory recorded'})"
    verb = "saves" if m.saving >= 0 else "costs"
    what = "CUDA max allocated" if m.checkpointed.peak_of == "cuda_max_allocated" else "peak RSS"
    return (f"{m.mode}: checkpointing {verb} {abs(m.saving):.0%} peak memory ({what} {_mib(m.checkpointed.peak_rss_bytes)} "
            f"checkpointed, {_mib(m.plain.peak_rss_bytes)} with checkpointing a plain call; one process each)")


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


def checkpointing_lines(result: CheckpointingResult | dict[str, Any]) -> list[str]:
    """The result in words (terminal, summary, HTML): one line per mode, and the fix per mode when tried."""
    if isinstance(result, dict):
        result = result_from_dict(result)
    lines = []
    for m in result.modes:
        lines.append(mode_line(m))
        said = fix_line(m)
        if said:
            lines.append(said)
    return lines


def result_from_dict(data: dict[str, Any]) -> CheckpointingResult:
    def side(d: dict[str, Any] | None) -> Side | None:
        return Side(**d) if d else None

    modes = [ModeSaving(m["mode"], side(m["checkpointed"]), side(m["plain"]), side(m.get("non_reentrant"))) for m in data.get("modes", [])]  # type: ignore[arg-type]
    return CheckpointingResult(str(data.get("run", "")), modes, float(data.get("wall_s") or 0.0))


def load_checkpointing(run_dir: Path) -> dict[str, Any] | None:
    """The kept result, or None (no measurement yet, or unreadable: it is optional)."""
    import json

    path = Path(run_dir) / CHECKPOINTING_FILE
    if path.is_symlink() or not path.is_file():
        return None
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("format") == CHECKPOINTING_FORMAT:
            return data
    return None
