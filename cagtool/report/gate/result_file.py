"""gate.json, the gate's result as `--format json` prints it and as `cagtool gate` keeps it in the
run for a report written later: its layout as msgspec types (field order is the order written;
msgspec checks each value as the file is read back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from cagtool.errors import UnreadableInput
from cagtool.report.gate.checks import CheckResult, Outcome
from cagtool.report.gate.run import GateResult

GATE_RESULT_FILE = "gate.json"


class _Check(Struct):
    check: str
    mode: str
    outcome: str
    failed: bool
    actual: str
    limit: str
    message: str
    source: str = "flag"
    notes: list[str] = []
    warnings: list[str] = []
    data: dict[str, Any] = {}


class _GateFile(Struct, kw_only=True):
    # recomputed from the checks when read back; absent from a gate.json older than the outcome "inconclusive"
    passed: bool = False
    inconclusive: bool = False
    exit_code: int = 0
    run: str
    mode: str
    baseline: str | None = None
    config: str | None = None
    summary: dict[str, int] = {}
    checks: list[_Check] = []
    warnings: list[str] = []
    ranks: list[int] | UnsetType = UNSET  # multi-rank runs: the ranks checked


def _check(r: CheckResult) -> _Check:
    return _Check(check=r.check, mode=r.mode, outcome=r.outcome.value, failed=r.failed, actual=r.actual, limit=r.limit,
                  message=r.message, source=r.source, notes=list(r.notes), warnings=list(r.warnings), data=r.data)


def gate_document(gate: GateResult) -> _GateFile:
    return _GateFile(
        passed=gate.passed and not gate.inconclusive,
        inconclusive=gate.inconclusive,
        exit_code=gate.exit_code,
        run=str(gate.run_path),
        mode=gate.mode,
        baseline=None if gate.baseline_path is None else str(gate.baseline_path),
        config=None if gate.config_path is None else str(gate.config_path),
        summary={"checks": len(gate.results), "failed": len(gate.failures), **{o.value: gate.count(o) for o in Outcome}},
        checks=[_check(r) for r in gate.results],
        warnings=list(gate.warnings),
        ranks=list(gate.ranks) if gate.ranks else UNSET,
    )


def gate_json(gate: GateResult) -> str:
    """The document, indented by two, ASCII: the standard library writes it from msgspec's builtins
    because a run path may hold bytes that are not UTF-8 (surrogate escapes), which msgspec's own
    encoder refuses and json writes as \\u escapes that read back to the same path. A value JSON has no
    word for (a path in a check's data) is written as its text."""
    return json.dumps(msgspec.to_builtins(gate_document(gate), enc_hook=str), indent=2)


def gate_from_document(data: dict[str, Any]) -> GateResult:
    """A GateResult read back from the document (for rendering: thresholds are not kept)."""
    from cagtool.report.gate.config import GateSettings

    try:
        document = msgspec.convert(data, _GateFile)
        results = [
            CheckResult(check=c.check, mode=c.mode, outcome=Outcome(c.outcome), failed=c.failed, actual=c.actual, limit=c.limit,
                        message=c.message, source=c.source, notes=list(c.notes), data=dict(c.data), warnings=list(c.warnings))
            for c in document.checks
        ]
    except (msgspec.ValidationError, ValueError) as exc:
        raise UnreadableInput(f"gate result is malformed: {exc}") from None
    return GateResult(
        run_path=Path(document.run), mode=document.mode, settings=GateSettings(),
        config_path=None if document.config is None else Path(document.config),
        baseline_path=None if document.baseline is None else Path(document.baseline),
        results=results, warnings=list(document.warnings), ranks=tuple(document.ranks) if document.ranks is not UNSET else (),
    )
