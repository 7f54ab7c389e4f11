"""What activation checkpointing does for a recorded job, measured by re-running it: in each mode
(aot, ca) the job as written and a variant with checkpointing turned into a plain call
(capture/modes/checkpoint_variant.py), one process each, and the peak memory of both: "saves 18 %
peak memory under aot and 16 % under ca". A job whose reentrant checkpoints recompile in their
recompute, or fail under compiled autograd ("Trying to run compiled autograd within another
compiled autograd call"), is also re-run with them made non-reentrant (`use_reentrant=False`, the
fix), and the recompiles in the recompute and the exit status are compared.

The re-runs are ordinary runs under RUN/checkpointing/<time>/, started as `--verify` starts its
re-runs (the job's seal checked first, absolute paths, stdin /dev/null, output kept in files);
the result is kept in RUN/checkpointing.json. The user's file is never written."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from cagtool.capture.modes.checkpoint_variant import CHECKPOINT_VARIANT_ENV, VARIANT_NON_REENTRANT, VARIANT_PLAIN
from cagtool.errors import UsageError
from cagtool.record.atomic import check_confined, make_new_dir, open_new, write_atomic
from cagtool.record.loader import ModeRecord, RunRecord, load_run
from cagtool.record.schema import CHECKPOINT_REENTRANT, PHASE_CHECKPOINT_RECOMPUTE
from cagtool.record.seal import check_job
from cagtool.verify.verification import rerun_argv

CHECKPOINTING_FILE = "checkpointing.json"
CHECKPOINTING_DIR = "checkpointing"
CHECKPOINTING_FORMAT = "cagtool-checkpointing"
CHECKPOINTING_VERSION = 1
MEASURED_MODES = ("aot", "ca")
NESTED_CA_ERROR = "Trying to run compiled autograd within another compiled autograd call"


@dataclass
class Side:
    """One re-run: its directory, status and what was read from its record."""

    variant: str  # "as written" | VARIANT_PLAIN | VARIANT_NON_REENTRANT
    run: str
    status: str
    peak_rss_bytes: int | None
    recompute_recompiles: int | None  # Dynamo recompiles in an activation-checkpoint recompute
    error: str = ""


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


def _recompute_recompiles(record: ModeRecord) -> int:
    from cagtool.report.recompiles.phases import mode_phases

    return sum(1 for c in mode_phases(record).recompiles if c.phase == PHASE_CHECKPOINT_RECOMPUTE)


def _reentrant_trouble(record: ModeRecord) -> bool:
    """Reentrant checkpoints recompiled in their recompute, or the mode failed on a nested CA call."""
    from cagtool.report.recompiles.phases import mode_phases

    if any(c.phase == PHASE_CHECKPOINT_RECOMPUTE and c.checkpoint == CHECKPOINT_REENTRANT for c in mode_phases(record).recompiles):
        return True
    exception = record.manifest.exception
    return exception is not None and NESTED_CA_ERROR in (exception.message or "")


def _side(variant: str, path: Path, mode: str) -> Side:
    if not (path / "run.json").exists():
        return Side(variant, str(path), "did not start", None, None, "see its stderr file")
    record = load_run(path).modes.get(mode)
    if record is None:
        return Side(variant, str(path), "no record", None, None)
    m = record.manifest
    status = "finished" if m.status == "finished" and m.exit_code in (0, None) else m.status
    error = f"{m.exception.type}: {(m.exception.message or '').splitlines()[0] if m.exception.message else ''}" if m.exception else ""
    return Side(variant, str(path), status, m.peak_rss_bytes, _recompute_recompiles(record), error)


def measure_checkpointing(run_path: str | Path | None, modes: list[str] | None = None,
                          progress: Callable[[str], None] = lambda line: None) -> CheckpointingResult:
    run = load_run(run_path)
    run_dir = Path(os.path.abspath(run.path))
    check_job(run_dir, run.meta.job_seal, run.meta.target, run.meta.target_argv, run.meta.cwd, dict(run.meta.options or {}))
    check_confined(run_dir, run_dir / CHECKPOINTING_FILE)
    chosen = [m for m in (modes or MEASURED_MODES) if m in run.modes] or [m for m in MEASURED_MODES]
    started = time.monotonic()
    root = make_new_dir(run_dir, run_dir / CHECKPOINTING_DIR / time.strftime("%Y%m%d-%H%M%S"))
    result = CheckpointingResult(str(run.path))

    def rerun(name: str, mode: str, variant: str | None) -> Path:
        out = make_new_dir(run_dir, root / name)
        argv = rerun_argv(run, mode, 1, out, None)
        env = {**os.environ}
        env.pop(CHECKPOINT_VARIANT_ENV, None)
        if variant is not None:
            env[CHECKPOINT_VARIANT_ENV] = variant
        progress(f"{name}: cagtool {' '.join(argv[3:])}" + (f"  ({CHECKPOINT_VARIANT_ENV}={variant}; your file is not changed)" if variant else ""))
        with open_new(run_dir, root / f"{name}.stdout") as stdout, open_new(run_dir, root / f"{name}.stderr") as stderr:
            try:
                subprocess.run(argv, cwd=run.meta.cwd or None, env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
            except OSError as exc:
                raise UsageError(f"cannot start the re-run in {run.meta.cwd}: {exc.strerror or exc}") from None
        return out

    for mode in chosen:
        checkpointed = _side("as written", rerun(f"{mode}-as-written", mode, None), mode)
        plain = _side(VARIANT_PLAIN, rerun(f"{mode}-plain", mode, VARIANT_PLAIN), mode)
        saving = ModeSaving(mode, checkpointed, plain)
        recorded = run.modes.get(mode)
        if recorded is not None and _reentrant_trouble(recorded):
            saving.non_reentrant = _side(VARIANT_NON_REENTRANT, rerun(f"{mode}-non-reentrant", mode, VARIANT_NON_REENTRANT), mode)
        result.modes.append(saving)
        progress(" ".join(checkpointing_lines(result)[-1:]))
    result.wall_s = time.monotonic() - started
    import json

    write_atomic(run_dir / CHECKPOINTING_FILE, json.dumps(result.to_dict(), indent=2), root=run_dir)
    return result


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.0f} MiB"


def mode_line(m: ModeSaving) -> str:
    if m.saving is None:
        why = "; ".join(f"{s.variant}: {s.status}{' (' + s.error + ')' if s.error else ''}" for s in (m.checkpointed, m.plain) if s.status != "finished")
        return f"{m.mode}: not measured ({why or 'no peak memory recorded'})"
    verb = "saves" if m.saving >= 0 else "costs"
    return (f"{m.mode}: checkpointing {verb} {abs(m.saving):.0%} peak memory (peak RSS {_mib(m.checkpointed.peak_rss_bytes)} "
            f"checkpointed, {_mib(m.plain.peak_rss_bytes)} with checkpointing a plain call)")


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
