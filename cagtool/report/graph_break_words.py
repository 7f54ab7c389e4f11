"""A graph break in torch's own words: the message Dynamo logs, cut into its parts, with torch's
stable graph-break id (GBxxxx) from the installed torch's `torch/_dynamo/graph_break_registry.json`.

Torch 2.13 formats every graph break (`torch/_dynamo/exc.py` `format_graph_break_message`) as

    Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):
    <gb_type>
      Explanation: <explanation>
      Hint: <hint>            (one line per hint)

      Developer debug context: <context>

     For more details about this graph break, please visit: https://.../gb/gb0025.html

The first line is the same for every break of an instruction kind; what tells one break from
another is `gb_type` (context-free, the registry's key), the explanation and the hints.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

_ID_IN_LINK = re.compile(r"/gb/gb(?P<digits>\d+)\.html")
_GENERIC = "Encountered graph break when attempting to trace"


@dataclass(frozen=True)
class GraphBreakWords:
    headline: str  # what to show on one line: the gb_type and explanation, not the generic first line
    gb_type: str = ""
    gb_id: str = ""  # "GB0025", when the installed torch's registry knows the gb_type
    explanation: str = ""
    hints: tuple[str, ...] = field(default_factory=tuple)


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, str]:
    """gb_type -> GB id, from the installed torch's registry (read without importing torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "_dynamo" / "graph_break_registry.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {entry["Gb_type"]: gb_id for gb_id, entries in data.items() if isinstance(entries, list) for entry in entries if isinstance(entry, dict) and "Gb_type" in entry}


def graph_break_words(reason: str) -> GraphBreakWords:
    """The parts of one graph-break message; a message of another shape keeps its first line."""
    lines = [line.rstrip() for line in (reason or "").splitlines()]
    body = lines[1:] if lines and lines[0].startswith(_GENERIC) else lines
    body = [line for line in body if line.strip()]
    if not body:
        return GraphBreakWords(lines[0] if lines else "")
    gb_type = body[0].strip()
    explanation = next((line.split("Explanation:", 1)[1].strip() for line in body if line.strip().startswith("Explanation:")), "")
    hints = tuple(line.split("Hint:", 1)[1].strip() for line in body if line.strip().startswith("Hint:"))
    gb_id = ""
    link = _ID_IN_LINK.search(reason)
    if link:
        gb_id = f"GB{link.group('digits')}"
    elif gb_type in _registry():
        gb_id = _registry()[gb_type]
    headline = f"{gb_type}: {explanation}" if explanation else gb_type
    return GraphBreakWords(headline, gb_type, gb_id, explanation, hints)
