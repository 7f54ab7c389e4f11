"""Dynamo's side of `recompiles`: recompile rows from guard failures and compile attempts, the
failing guard's text, and recompile-limit hits (the frame falls back to eager).

Forward frames have compile ids `F/C`, Dynamo's compiles of compiled-autograd graphs `!N/F/C`;
C > 0 is a recompile of the same frame.
"""

from __future__ import annotations

import dataclasses
import re

from cagtool.record.loader import ModeRecord
from cagtool.record.schema import DynamoCompileEvent, DynamoRecompileEvent, FindingEvent, SourceRef
from cagtool.report.recompiles.rows import (
    KIND_GUARD,
    SOURCE_DYNAMO_CA_GRAPH,
    SOURCE_DYNAMO_FRAME,
    LimitHit,
    RecompileRow,
)

# `File "/x/train.py", line 10, in f` followed by the code line, as in Dynamo's recompile reasons.
_USER_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>[^\n]*)')
_LIMIT = re.compile(r"exceeding the (?P<type>\w*recompile_limit) cache size limit \(currently set to (?P<value>\d+)\)")
_LIMIT_LOG = re.compile(r"hit config\.(?P<type>\w*recompile_limit) \((?P<value>\d+)\)")
_COMPILE_ID = re.compile(r"^(?:!(?P<ca>\d+)/)?(?P<frame>\d+)/(?P<attempt>\d+)$")


def compile_attempt(compile_id: str) -> int | None:
    """C of `F/C` or `!N/F/C`: 0 for a first compile, >0 for a recompile of the same frame."""
    match = _COMPILE_ID.match(compile_id or "")
    return int(match["attempt"]) if match else None


def compile_frame(compile_id: str) -> str | None:
    """F of `F/C` or `!N/F/C`: the frame (code object) Dynamo compiled."""
    match = _COMPILE_ID.match(compile_id or "")
    return match["frame"] if match else None


def forward_step(step: int | None) -> int:
    """The step a forward-frame compile belongs to. The capture stamps Dynamo events with the step
    last begun (None before the first backward), but a forward frame runs before its step's
    backward, so its compile belongs to the next step."""
    return (step or 0) + 1


_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")
_ID_PREFIX = re.compile(r"^\s*-?\s*!?\d+/\d+(/\d+)?:\s*")


def guard_text(message: str) -> str:
    """The failing guard of one Dynamo reason, without the `0/1:` prefix and the `# source` comment."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return _ID_PREFIX.sub("", first).split("  #")[0].split(" # ")[0].strip()


def guard_shape(message: str) -> str:
    """The guard with its numbers blanked, so `depth == 1` and `depth == 2` are one root cause."""
    return _NUMBER.sub("N", guard_text(message))


def _user_frame_from_reasons(reasons: list[str]) -> SourceRef | None:
    """The last user frame Dynamo names in its 'User stack trace' (the line that installed the guard)."""
    found = list(_USER_FRAME.finditer("\n".join(reasons)))
    if not found:
        return None
    match = found[-1]
    return SourceRef(
        file=match["file"], line=int(match["line"]), code=match["code"].strip(), function=match["func"], how="guard"
    )


def dynamo_rows(record: ModeRecord, compile_events: list[DynamoCompileEvent]) -> list[RecompileRow]:
    """Dynamo recompiles: one per `dynamo_recompile` event, plus compiles with attempt > 0 that have
    none (their guard-failure reason was not recorded, but the recompile happened)."""
    compiles = {c.compile_id: c for c in compile_events}
    recompile_events = record.of(DynamoRecompileEvent)
    seen = {e.compile_id for e in recompile_events}
    rows = []
    for event in recompile_events:
        source = _user_frame_from_reasons(event.reasons)
        compiled = compiles.get(event.compile_id)
        if source is None and compiled is not None and compiled.co_filename and not event.is_ca_graph:
            source = SourceRef(
                file=compiled.co_filename, line=compiled.co_firstlineno or 0, function=compiled.co_name, how="compiled_frame"
            )
        rows.append(_dynamo_row(record.mode, event.compile_id, event.is_ca_graph, event.step, event.seq, tuple(event.reasons), source))
    for event in compile_events:
        attempt = compile_attempt(event.compile_id)
        if not attempt or event.compile_id in seen:
            continue
        seen.add(event.compile_id)
        source = None
        if event.co_filename and not event.is_ca_graph:
            source = SourceRef(file=event.co_filename, line=event.co_firstlineno or 0, function=event.co_name, how="compiled_frame")
        rows.append(_dynamo_row(record.mode, event.compile_id, event.is_ca_graph, event.step, event.seq, (), source))
    return rows


def _dynamo_row(
    mode: str, compile_id: str, is_ca_graph: bool, step: int | None, seq: int, reasons: tuple[str, ...], source: SourceRef | None
) -> RecompileRow:
    return RecompileRow(
        mode=mode,
        source=SOURCE_DYNAMO_CA_GRAPH if is_ca_graph else SOURCE_DYNAMO_FRAME,
        compile_id=compile_id,
        step=step if is_ca_graph else forward_step(step),
        kind=KIND_GUARD,
        seqs=(seq,),
        messages=reasons,
        user_source=source,
        produced=compile_id,
    )


def _frame_key(compile_id: str) -> str:
    """`0/3` -> `0`, `!1/2/0` -> `!1/2`: the frame a compile id belongs to."""
    return compile_id.rsplit("/", 1)[0]


def _limit_from_text(text: str) -> tuple[str, int | None] | None:
    match = _LIMIT.search(text) or _LIMIT_LOG.search(text)
    if match:
        return match["type"], int(match["value"])
    if "recompile limit exceeded" in text.lower() or "recompile_limit" in text:
        kind = "accumulated_recompile_limit" if "accumulated" in text else "recompile_limit"
        return kind, None
    return None


def limit_hits(record: ModeRecord, compiles: list[DynamoCompileEvent]) -> list[LimitHit]:
    """Frames Dynamo gave up on: compiles that failed with "recompile limit exceeded" (torch's
    compilation metrics), and findings about a recompile limit, once per compile id."""
    hits: list[LimitHit] = []
    seen: set[str] = set()
    # A compile that failed on the limit has no code info; an earlier compile of its frame does.
    named = {_frame_key(c.compile_id): c for c in compiles if c.co_name}
    for event in compiles:
        found = _limit_from_text(f"{event.fail_type or ''} {event.fail_reason or ''}") if event.fail_reason else None
        if found is None or event.compile_id in seen:
            continue
        seen.add(event.compile_id)
        earlier = named.get(_frame_key(event.compile_id))
        if not event.co_name and earlier is not None:
            event = dataclasses.replace(
                event, co_name=earlier.co_name, co_filename=earlier.co_filename, co_firstlineno=earlier.co_firstlineno
            )
        hits.append(
            LimitHit(
                mode=record.mode,
                compile_id=event.compile_id,
                step=event.step if event.is_ca_graph else forward_step(event.step),
                seq=event.seq,
                limit_type=found[0],
                limit_value=found[1],
                function=event.co_name,
                file=event.co_filename,
                line=event.co_firstlineno,
            )
        )
    for finding in record.of(FindingEvent):
        found = _limit_from_text(f"{finding.code} {finding.message}")
        if found is None:
            continue
        compile_id = re.search(r"\[?(!?\d+/\d+(?:/\d+)?)\]?", finding.message)
        key = compile_id.group(1) if compile_id else f"finding:{finding.seq}"
        if key in seen:
            continue
        seen.add(key)
        src = finding.source
        hits.append(
            LimitHit(
                mode=record.mode,
                compile_id=key if compile_id else "",
                step=finding.step,
                seq=finding.seq,
                limit_type=found[0],
                limit_value=found[1],
                file=src.file if src else "",
                line=src.line if src else None,
                function=src.function if src else "",
            )
        )
    return hits
