"""A code change for one recompile cause (`Patch`), shared by the two kinds of edit: the
mechanical ones (patches.py) and those for a guard on a Python value (value_patches.py)."""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from typing import Any

YOUR_CODE = "your code"


@dataclass
class Patch:
    """One code change for one cause: `diff` against the script; `patched` is the whole edited
    text when cagtool can run it (`applicable`), else `why_not` says why it is only shown."""

    name: str
    causes: tuple[int, ...]
    title: str
    file: str  # the script, as the record names it (relative to the run's cwd when it was)
    line: int | None  # the first line the edit changes, in the user's file
    diff: str
    applicable: bool
    why_not: str | None = None
    who: str = YOUR_CODE
    patched: str | None = None
    edited: tuple[int, ...] = ()  # the script's lines the edit changes, where a cause's evidence is read against them

    def to_dict(self) -> dict:
        return {"name": self.name, "causes": list(self.causes), "title": self.title, "file": self.file, "line": self.line,
                "diff": self.diff, "applicable": self.applicable, "why_not": self.why_not, "who": self.who}


def reimports_script(mode: Any) -> bool:
    """Whether a process of the recorded mode (a ModeRecord) started afresh besides its main one:
    multiprocessing spawn, a DDP rank, a subprocess. Such a process imports the script again by its
    path, so it would run the user's file, not a patched copy, and a re-run would not measure the
    patch. A fork (`forked_from` in its record: a DataLoader's workers on Linux) runs the code its
    parent runs, the copy included."""
    return mode is not None and any(not (p.manifest.process or {}).get("forked_from") for p in mode.processes.values())


def unified_diff(path: str, before: list[str], after: list[str]) -> str:
    """The edit as a unified diff: git's a/ b/ prefixes on a path relative to the run's directory
    (`git apply`, `patch -p1`), an absolute path as it is (`patch -p0`), never `a//abs`."""
    old, new = (path, path) if path.startswith("/") else (f"a/{path}", f"b/{path}")
    return "".join(difflib.unified_diff(before, after, fromfile=old, tofile=new))


def imports_torch(tree: ast.Module) -> bool:
    return any(isinstance(stmt, ast.Import) and any(a.name == "torch" and a.asname is None for a in stmt.names) for stmt in tree.body)


def replace_expr(lines: list[str], node: ast.expr, text: str) -> list[str]:
    """`lines` with `node` (on one line) replaced by `text`; offsets are UTF-8 bytes, as ast gives them."""
    after = list(lines)
    raw = after[node.lineno - 1].encode()
    after[node.lineno - 1] = (raw[: node.col_offset] + text.encode() + raw[node.end_col_offset:]).decode()
    return after
