"""The result types of `recompiles --explain`: cause and alert codes (stable, part of the JSON
schema), and Cause, Alert, Evidence and Explanation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cagtool.report.recompiles.rows import LimitHit, RecompileRow, RecompileTable
from cagtool.record.schema import SourceRef

# Cause codes (stable: they are part of the JSON schema).
CAUSE_STRUCTURE = "graph_structure"  # different ops / a branch / a loop of varying length
CAUSE_HOOK = "hook_changed"  # a backward hook added or removed
CAUSE_GRAD_DEFINED = "grad_defined_changed"  # .grad None vs defined (AccumulateGrad's key)
CAUSE_SHAPES = "changed_shapes"
CAUSE_DYNAMO_FRAME = "dynamo_guard_failure"
CAUSE_DYNAMO_CA_GRAPH = "dynamo_ca_graph_guard_failure"
CAUSE_UNKNOWN = "unknown"
ALERT_LIMIT = "recompile_limit"
ALERT_STORM = "recompile_storm"


@dataclass(frozen=True)
class Evidence:
    compile_id: str
    step: int | None
    seq: int


@dataclass
class Cause:
    code: str
    rows: list[RecompileRow]
    number: int = 0  # 1-based, in rendering order
    source: SourceRef | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # what the sentences are built from (and JSON)

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def steps(self) -> list[int]:
        return sorted({r.step for r in self.rows if r.step is not None})

    @property
    def evidence(self) -> list[Evidence]:
        return [Evidence(r.compile_id, r.step, r.seq) for r in self.rows]


@dataclass
class Alert:
    code: str
    facts: dict[str, Any]
    causes: list[int] = field(default_factory=list)  # numbers of the causes behind it
    limit_hits: list[LimitHit] = field(default_factory=list)


@dataclass
class Explanation:
    table: RecompileTable
    alerts: list[Alert]
    causes: list[Cause]

    @property
    def total(self) -> int:
        return len(self.table.recompiles)
