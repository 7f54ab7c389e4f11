"""Does a record agree with itself? Torch's own counters, saved in the manifest when the process
ends, are the ground truth for what happened; an event stream that contradicts them (deleted,
truncated, edited) is damaged. Readers that only show a record may go on with a note; readers
whose verdict CI trusts (gate, baseline save) must refuse it."""

from __future__ import annotations

from cagtool.errors import UnreadableInput
from cagtool.record.loader import ModeRecord, RunRecord
from cagtool.record.schema import EVENTS_FILE


def mode_damage(record: ModeRecord, stopped_too: bool = False) -> list[str]:
    """What in one process's record contradicts its manifest, or leaves its counts unknown (its
    followed processes included). `stopped_too`: a recording that stopped early (a full disk) is
    one too (the summary says so in a note of its own)."""
    problems: list[str] = []
    for rec in (record, *record.processes.values()):
        counters = rec.manifest.torch_counters or {}
        where = rec.path / EVENTS_FILE
        options = rec.manifest.options or {}
        if options.get("closed_by") == "marker":
            # Ended, but its closing manifest could not be written (a full disk): torch's counters,
            # the end-of-run figures and whatever its recording lost are unknown, so are its counts.
            problems.append(f"{rec.path / 'manifest.json'} was never closed (the process ended, but its disk had no room for its "
                            f"closing manifest): torch's counters and its last figures are missing")
            continue
        stopped = getattr(rec.manifest, "recording_stopped", None)
        if stopped_too and isinstance(stopped, dict):
            problems.append(f"{where} stopped early at event {stopped.get('at_seq', '?')} ({stopped.get('error', '?')}): "
                            f"its counts are those of what was written")
            continue
        if counters and not where.exists():
            problems.append(f"{where} is missing, but the manifest holds torch's counters (the process finished writing)")
            continue
        captures = counters.get("compiled_autograd", {}).get("captures")
        # torch counts a capture when it begins; one that raised made no graph (the manifest counts those)
        failed = (rec.manifest.options or {}).get("failed_ca_captures", 0)
        graphs = rec.kind_counts.get("ca_graph", 0) + (failed if isinstance(failed, int) else 0)
        if isinstance(captures, int) and captures != graphs:
            problems.append(f"{where} has {graphs} CA graph events, but torch counted {captures} captures (manifest.json)")
    return problems


def run_damage(run: RunRecord, stopped_too: bool = False) -> list[str]:
    return [p for record in run.modes.values() for p in mode_damage(record, stopped_too)]


def refuse_damaged(run: RunRecord, action: str) -> None:
    """UnreadableInput (exit 3) naming every contradiction, for verdicts that must not rest on them."""
    problems = run_damage(run, stopped_too=True)
    if problems:
        raise UnreadableInput(f"run {run.path} is damaged, not {action}: " + "; ".join(problems) + " (re-record the run)")
