"""Escaping and the few HTML building blocks every section uses.

Everything that comes from a record (script names, argv, reasons, graph code, exception text) is
data, never markup: it goes through `esc` into text, or through `script_json` into a JSON
`<script>` block. Nothing here builds HTML from record text any other way.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any, Iterable, Sequence

from cagtool.report.safe_text import safe_text


def esc(value: Any) -> str:
    """Text content or attribute value: `<`, `>`, `&` and both quotes escaped, and what
    `safe_text` neutralises (an ANSI-coloured exception reads as in the terminal report)."""
    return html.escape(safe_text("" if value is None else str(value)), quote=True)


def script_json(data: Any) -> str:
    """JSON safe to place inside a `<script>` element: no `</script>`, `<!--` or `<script` in it
    can end the element or switch the parser's state (the HTML spec's script-data states), and
    U+2028/U+2029 are escaped for older JavaScript parsers. `<` becomes `\\u003c` inside strings,
    which JSON reads back as the same character."""
    text = json.dumps(_finite(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null (a gap in a line, a missing tooltip value)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def tag(name: str, content: str = "", **attrs: Any) -> str:
    """`<name attrs>content</name>`; `content` is already HTML, attribute values are escaped.
    `class_="x"` gives `class="x"`; a None or False attribute is left out."""
    parts = [name]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")
        parts.append(key if value is True else f'{key}="{esc(value)}"')
    return f"<{' '.join(parts)}>{content}</{name}>"


def text(name: str, value: Any, **attrs: Any) -> str:
    """An element holding `value` as text."""
    return tag(name, esc(value), **attrs)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], classes: str = "", cell_classes: dict[tuple[int, int], str] | None = None) -> str:
    """A table of text cells. `cell_classes[(row, column)]` marks cells (e.g. problems)."""
    marks = cell_classes or {}
    head = "".join(text("th", h) for h in header)
    body = []
    for r, row in enumerate(rows):
        cells = "".join(text("td", "" if v is None else v, class_=marks.get((r, k))) for k, v in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return tag("table", f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>", class_=classes or None)


def paragraphs(lines: Iterable[str], class_: str | None = None) -> str:
    return "".join(text("p", line, class_=class_) for line in lines)


def bullet_list(items: Iterable[str], class_: str | None = None) -> str:
    inner = "".join(text("li", item) for item in items)
    return tag("ul", inner, class_=class_) if inner else ""
