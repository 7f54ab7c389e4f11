"""A compile id's artifacts, read from a mode record: the analysis (`compile_details`) and its
renderers (`DetailRenderer` for the terminal, `detail_json`)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from cagtool.errors import UnreadableInput, UsageError
from cagtool.record.loader import ModeRecord
from cagtool.record.schema import ARTIFACT_TITLES, COMPILE_ARTIFACTS, CompileArtifactEvent, DynamoCompileEvent, DynamoRecompileEvent
from cagtool.report.text.safe_text import safe_line
from cagtool.torch_text import reason_line

# torch prints a compile id as [0/1], [!0/1/0] or [!0]; the brackets are optional here.
_COMPILE_ID = re.compile(r"^\[?(?P<id>!?\d+(?:/\d+/\d+|/\d+)?)\]?$")


def parse_compile_id(text: str) -> str:
    """`0/1`, `[0/1]`, `!0/1/0` or `[!0/1/0]` -> the id as the record holds it; UsageError otherwise."""
    match = _COMPILE_ID.match(text.strip())
    if not match:
        raise UsageError(f"{text!r} is not a compile id; give it as torch prints it: 0/1 (a forward frame) or !0/1/0 (a compiled-autograd graph's compile)")
    return match.group("id")


@dataclass(frozen=True)
class CompileDetail:
    compile_id: str
    artifacts: list[CompileArtifactEvent]  # in COMPILE_ARTIFACTS order
    step: int | None = None
    function: str = ""  # the code Dynamo compiled: co_name at file:line
    compile_s: float | None = None
    reasons: list[str] = field(default_factory=list)  # why it recompiled (torch's guard failures)

    def artifact(self, name: str) -> CompileArtifactEvent | None:
        return next((a for a in self.artifacts if a.artifact == name), None)


def compile_details(record: ModeRecord) -> list[CompileDetail]:
    """Every compile id with recorded artifacts, in the order the compiles began."""
    by_id = record.compile_artifacts()
    compiles = {c.compile_id: c for c in record.of(DynamoCompileEvent)}
    reasons = {r.compile_id: r.reasons for r in record.of(DynamoRecompileEvent)}
    details = []
    for cid, found in sorted(by_id.items(), key=lambda kv: min(e.seq for e in kv[1].values())):
        artifacts = [found[name] for name in COMPILE_ARTIFACTS if name in found]
        compiled = compiles.get(cid)
        function = ""
        if compiled is not None and compiled.co_name:
            function = f"{compiled.co_name} at {compiled.co_filename}:{compiled.co_firstlineno}"
        details.append(
            CompileDetail(
                compile_id=cid,
                artifacts=artifacts,
                step=min((a.step for a in artifacts if a.step is not None), default=None),
                function=function,
                compile_s=compiled.entire_frame_compile_time_s if compiled is not None else None,
                reasons=list(reasons.get(cid, [])),
            )
        )
    return details


def find_detail(record: ModeRecord, compile_id: str) -> CompileDetail:
    details = compile_details(record)
    for detail in details:
        if detail.compile_id == compile_id:
            return detail
    have = ", ".join(d.compile_id for d in details[:20]) or "none (a record made before they were kept, or a job that compiled nothing)"
    # A well-formed id the record lacks: exit 3, as a graph, a mode or a rank the run lacks (README, "Exit codes").
    raise UnreadableInput(f"no compile [{compile_id}] with recorded detail in mode {record.mode!r} (compile ids: {have})")


def detail_command(run_path: str, compile_id: str, mode: str | None = None) -> str:
    """The command that shows one compile's detail, as the reports print it: quoted as a shell reads
    it (a CA graph's id `!0/1/0` is a history expansion to an interactive bash, "event not found")."""
    mode_opt = f" --mode {shlex.quote(mode)}" if mode else ""
    return f"cagtool compile {shlex.quote(run_path)} {shlex.quote(compile_id)}{mode_opt}"


def detail_json(record: ModeRecord, detail: CompileDetail, show: tuple[str, ...]) -> dict[str, Any]:
    return {
        "compile_id": detail.compile_id,
        "step": detail.step,
        "function": detail.function,
        "compile_s": detail.compile_s,
        "recompile_reasons": detail.reasons,
        "artifacts": {
            a.artifact: {"title": ARTIFACT_TITLES.get(a.artifact, a.artifact), "file": a.file, "lines": a.lines, **({"text": record.artifact_text(a)} if a.artifact in show else {})}
            for a in detail.artifacts
        },
    }


class DetailRenderer:
    """One compile's page as text: what it compiled and why, then each artifact asked for."""

    def __init__(self, show: tuple[str, ...]) -> None:
        self.show = show

    def render(self, record: ModeRecord, detail: CompileDetail) -> str:
        # The page's own lines are one line each whatever the record's fields hold (a function name
        # with a line break would print a line of its own: a fake `::error` in a CI log); an
        # artifact is a file's text, shown as its lines.
        lines = [f"compile [{detail.compile_id}]" + (f" at step {detail.step}" if detail.step is not None else "")]
        if detail.function:
            lines.append(safe_line(f"  compiled: {detail.function}" + (f" in {detail.compile_s:.2f} s" if detail.compile_s is not None else "")))
        for reason in detail.reasons:
            lines.append(safe_line(f"  recompiled because: {reason_line(reason)}"))
        listed = [a for a in detail.artifacts if a.artifact not in self.show]
        if listed:
            lines.append("  also recorded: " + ", ".join(f"{ARTIFACT_TITLES.get(a.artifact, a.artifact)} ({a.lines} lines, --show {a.artifact})" for a in listed))
        for artifact in detail.artifacts:
            if artifact.artifact not in self.show:
                continue
            title = ARTIFACT_TITLES.get(artifact.artifact, artifact.artifact)
            lines += ["", safe_line(f"--- {title} ({artifact.file}) ---"), record.artifact_text(artifact).rstrip("\n")]
        return "\n".join(lines) + "\n"
