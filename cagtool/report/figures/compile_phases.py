"""Compile time as torch's phases nest it: Dynamo's time contains AOTAutograd's, which contains
Inductor's (torch's cumulative times in each compile's metrics); compiled autograd's capture runs
outside Dynamo, and so does the compile of a backward AOTAutograd compiles at its first call. One tree for the terminal and the HTML, so no renderer lists the phases as rows
that read as if they added up."""

from __future__ import annotations

from dataclasses import dataclass

# (key in ModeMetrics.compile_phases_s, label, depth, what it sits inside)
_TREE = (
    ("dynamo", "Dynamo", 1, "compile"),
    ("aot", "AOTAutograd", 2, "Dynamo"),
    ("inductor", "Inductor", 3, "AOTAutograd"),
    ("ca_capture", "CA capture", 1, "compile"),
    ("backward", "AOT backward, compiled at its first call", 1, "compile"),
)


@dataclass(frozen=True)
class PhaseRow:
    key: str  # "total" or a compile_phases_s key
    label: str
    depth: int  # 0 for the total; a phase is inside the nearest row above it with a smaller depth
    seconds: float
    inside: str = ""  # the label of the row it is part of ("" for the total)


def phase_tree(phases: dict[str, float], total: float) -> list[PhaseRow]:
    """The total, then each phase with time under the phase that contains it; phases with no time
    (a backend without Inductor, a mode without CA) are left out."""
    rows = [PhaseRow("total", "compile", 0, total)]
    for key, label, depth, inside in _TREE:
        seconds = phases.get(key, 0.0) or 0.0
        if seconds > 0:
            rows.append(PhaseRow(key, label, depth, seconds, inside))
    return rows


def phase_lines(phases: dict[str, float], total: float) -> list[str]:
    """The tree as indented lines: `compile: 1.87 s`, then `  Dynamo 1.57 s`, `    AOTAutograd 0.38 s (inside Dynamo)`..."""
    rows = phase_tree(phases, total)
    lines = [f"compile: {total:.2f} s"]
    for row in rows[1:]:
        inside = f" (inside {row.inside})" if row.depth > 1 else ""
        lines.append(f"{'  ' * row.depth}{row.label} {row.seconds:.2f} s{inside}")
    return lines
