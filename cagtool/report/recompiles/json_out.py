"""`cagtool recompiles --format json`: the versioned JSON document.

JSON schema (`"schema": "cagtool-recompiles"`, `"schema_version": 1`; additive fields do not bump it):

    {
      "schema": "cagtool-recompiles", "schema_version": 1,
      "run": "<run dir>",
      "modes": {
        "<mode>": {
          "status": "finished", "steps": 4, "last_step": 4,
          "skipped_lines": 0, "unknown_kinds": {},
          "counts": {"recompiles": 3, "ca_cache_misses": 3, "dynamo_frame_recompiles": 0,
                     "dynamo_ca_graph_recompiles": 0, "initial_compiles": 1, "recompile_limit_hits": 0},
          "initial": [<row>], "recompiles": [<row>, ...],
          "limit_hits": [{"compile_id", "step", "seq", "limit_type", "limit_value", "function", "file", "line"}],
          "explanation": {            # only with --explain
            "alerts": [{"code": "recompile_storm"|"recompile_limit", "title", "why": [..], "fix": [..],
                        "evidence", "causes": [cause numbers], "facts": {...}}],
            "causes": [{"number", "code", "count", "steps", "title", "why", "fix", "evidence",
                        "evidence_ids": [{"compile_id", "step", "seq"}], "source": <source>|null,
                        "stabilised": bool|null, "last_recompile_step"}]
          }
        }
      }
    }

    <row> = {"compile_id", "source": "ca_cache_miss"|"dynamo_frame"|"dynamo_ca_graph", "step", "kind",
             "initial", "seqs", "ca_id", "node", "node_call", "key_size", "previous_key_sizes",
             "changed_sizes": [{"index", "value", "previous", "node", "node_call"}], "total_changed",
             "messages", "source_line": <source>|null, "produced"}
    <source> = {"file" (relative to the run's cwd when inside it), "line", "code", "function", "how"}

Cause codes: graph_structure, hook_changed, grad_defined_changed, changed_shapes,
dynamo_guard_failure, dynamo_ca_graph_guard_failure, unknown.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from cagtool.record.schema import SourceRef
from cagtool.report.recompiles.explain_model import Explanation
from cagtool.report.recompiles.explain_text import alert_words, cause_words
from cagtool.report.recompiles.table import SOURCE_CA, SOURCE_DYNAMO_CA_GRAPH, SOURCE_DYNAMO_FRAME, RecompileRow, RecompileTable, display_path

JSON_SCHEMA = "cagtool-recompiles"
JSON_SCHEMA_VERSION = 1


def _source_json(ref: SourceRef | None, cwd: str) -> dict[str, Any] | None:
    if ref is None:
        return None
    return {"file": display_path(ref.file, cwd), "line": ref.line, "code": ref.code, "function": ref.function, "how": ref.how}


def row_json(row: RecompileRow, cwd: str) -> dict[str, Any]:
    return {
        "compile_id": row.compile_id,
        "source": row.source,
        "step": row.step,
        "kind": row.kind,
        "initial": row.initial,
        "seqs": list(row.seqs),
        "ca_id": row.ca_id,
        "node": row.node,
        "node_call": row.node_call,
        "key_size": row.key_size,
        "previous_key_sizes": list(row.previous_key_sizes),
        "changed_sizes": [dataclasses.asdict(c) for c in row.changed_sizes],
        "total_changed": row.total_changed,
        "messages": list(row.messages),
        "source_line": _source_json(row.user_source, cwd),
        "produced": row.produced,
    }


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def explanation_json(explanation: Explanation) -> dict[str, Any]:
    cwd = explanation.table.cwd
    alerts = []
    for alert in explanation.alerts:
        words = alert_words(alert, cwd)
        alerts.append(
            {"code": alert.code, "title": words.title, "why": words.why, "fix": words.fix,
             "evidence": words.evidence, "causes": alert.causes, "facts": _jsonable(alert.facts)}
        )
    causes = []
    for cause in explanation.causes:
        words = cause_words(cause, cwd)
        causes.append(
            {
                "number": cause.number,
                "code": cause.code,
                "count": cause.count,
                "steps": cause.steps,
                "title": words.title,
                "why": words.why,
                "fix": words.fix,
                "evidence": words.evidence,
                "evidence_ids": [dataclasses.asdict(e) for e in cause.evidence],
                "source": _source_json(cause.source, cwd),
                "stabilised": cause.facts.get("stabilised"),
                "last_recompile_step": cause.facts.get("last_recompile_step"),
            }
        )
    return {"alerts": alerts, "causes": causes}


class RecompilesJsonRenderer:
    """The versioned JSON document; `explanations` adds each mode's `explanation`."""

    def __init__(self, indent: int | None = 2) -> None:
        self.indent = indent

    def render(self, run: str, tables: list[RecompileTable], explanations: list[Explanation] | None = None) -> str:
        by_mode = {e.table.mode: e for e in explanations or []}
        modes: dict[str, Any] = {}
        for table in tables:
            entry: dict[str, Any] = {
                "status": table.status,
                "steps": table.steps,
                "last_step": table.last_step,
                "skipped_lines": table.skipped_lines,
                "unknown_kinds": table.unknown_kinds,
                "counts": {
                    "recompiles": len(table.recompiles),
                    "ca_cache_misses": table.count(SOURCE_CA),
                    "dynamo_frame_recompiles": table.count(SOURCE_DYNAMO_FRAME),
                    "dynamo_ca_graph_recompiles": table.count(SOURCE_DYNAMO_CA_GRAPH),
                    "initial_compiles": len(table.initial),
                    "recompile_limit_hits": len(table.limit_hits),
                },
                "initial": [row_json(r, table.cwd) for r in table.initial],
                "recompiles": [row_json(r, table.cwd) for r in table.recompiles],
                "limit_hits": [
                    {**dataclasses.asdict(h), "file": display_path(h.file, table.cwd)} for h in table.limit_hits
                ],
            }
            if table.mode in by_mode:
                entry["explanation"] = explanation_json(by_mode[table.mode])
            modes[table.mode] = entry
        document = {"schema": JSON_SCHEMA, "schema_version": JSON_SCHEMA_VERSION, "run": run, "modes": modes}
        return json.dumps(document, indent=self.indent)
