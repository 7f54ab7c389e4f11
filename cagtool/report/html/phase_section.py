"""The report's section on where the job compiled: each mode's compiles by phase, every recompile
with its phase, step, checkpointed function and line, and the recompile budget per frame with its
forecast (report/recompiles/phases.py and budget.py, in budget_words' words)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cagtool.report.checkpointing import checkpointing_lines
from cagtool.report.html.sections import Table, table
from cagtool.report.recompiles.budget_words import budget_lines, phase_counts_text
from cagtool.report.recompiles.reads import format_source
from cagtool.report.recompiles.table import RecompileTable
from cagtool.report.recompiles.unexpected import unexpected_lines


@dataclass(frozen=True)
class ModePhasesBlock:
    name: str
    counts: str
    recompiles: Table | None
    budget: list[str]


@dataclass(frozen=True)
class PhasesSection:
    TEMPLATE: ClassVar[str] = "sections/phases.html.j2"
    modes: list[ModePhasesBlock]
    checkpointing: list[str]  # `cagtool checkpointing`'s measurement in words; [] when not made


def phases_section(tables: dict[str, RecompileTable], checkpointing: dict | None = None) -> PhasesSection:
    blocks = []
    for name, t in tables.items():
        if t.phases is None or not t.phases.compiles:
            continue
        rows = [
            [c.compile_id, "?" if c.step is None else c.step, c.words(),
             format_source(c.function, t.cwd, with_code=False), format_source(c.caller, t.cwd)]
            for c in t.phases.recompiles
        ]
        grid = table(("compile id", "step", "phase", "checkpointed function", "user's line"), rows, "phases") if rows else None
        said = budget_lines(t.budget, t.cwd) if t.budget is not None else []
        said += [line.strip() for line in unexpected_lines(t.unexpected, t.cwd)]
        blocks.append(ModePhasesBlock(name, phase_counts_text(t.phases), grid, said))
    return PhasesSection(blocks, checkpointing_lines(checkpointing) if checkpointing is not None else [])
