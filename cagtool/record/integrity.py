"""Does a record agree with itself? Torch's own counters, saved in the manifest when the process
ends, are the ground truth for what happened; an event stream that contradicts them (deleted,
truncated, edited) is damaged. Readers that only show a record may go on with a note; readers
whose verdict CI trusts (gate, baseline save) must refuse it."""

from __future__ import annotations

from cagtool.errors import UnreadableInput
from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.schema import EVENTS_FILE


def mode_damage(record: ModeRecord) -> list[str]:
    """What in one process's record contradicts its manifest (its followed processes included)."""
    problems: list[str] = []
    for rec in (record, *record.processes.values()):
        counters = rec.manifest.torch_counters or {}
        where = rec.path / EVENTS_FILE
        if counters and not where.exists():
            problems.append(f"{where} is missing, but the manifest holds torch's counters (the process finished writing)")
            continue
        captures = counters.get("compiled_autograd", {}).get("captures")
        # torch counts a capture when it begins; one that raised made no graph (the manifest counts those)
        failed = (rec.manifest.options or {}).get("failed_ca_captures", 0)
        graphs = rec.kind_counts.get("ca_graph", 0) + (failed if isinstance(failed, int) else 0)
        if isinstance(captures, int) and captures != graphs:
            stopped = getattr(rec.manifest, "recording_stopped", None)
            why = f" (recording stopped early: {stopped.get('error', '?')})" if isinstance(stopped, dict) else ""
            problems.append(f"{where} has {graphs} CA graph events, but torch counted {captures} captures (manifest.json){why}")
    return problems


def run_damage(run: RunRecord) -> list[str]:
    return [p for record in run.modes.values() for p in mode_damage(record)]


def refuse_damaged(run: RunRecord, action: str) -> None:
    """UnreadableInput (exit 3) naming every contradiction, for verdicts that must not rest on them."""
    problems = run_damage(run)
    if problems:
        raise UnreadableInput(f"run {run.path} is damaged, not {action}: " + "; ".join(problems) + " (re-record the run)")
