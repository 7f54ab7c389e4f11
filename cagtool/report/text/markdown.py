"""Record text made safe for Markdown that GitHub renders (compare --format markdown, the gate's
step summary): a script, autograd.Function or exception text is data, so it may not open an HTML
tag (`<img onerror=...>`), a link or image, emphasis, a code span or a new table cell, and it stays
on its line; escape sequences, control characters and lone surrogates are neutralised
(`safe_text`). Text that needs none of this (`<= 1`, `p10 - p90`) comes out unchanged."""

from __future__ import annotations

import re

from cagtool.report.text.safe_text import safe_text

# Backslash-escapable ASCII punctuation that changes Markdown structure inside a line.
_SPECIALS = re.compile(r"([\\`*_\[\]|~])")
# `<` only where it could start raw HTML or an autolink (CommonMark: a letter, `/`, `!` or `?`
# follows); `&` only where it could start an entity.
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY_START = re.compile(r"&(?=[A-Za-z#])")


def md_text(text: object) -> str:
    """`text` as literal Markdown inline text, on one line."""
    value = safe_text(str(text).replace("\r\n", " ").replace("\r", " ").replace("\n", " "))
    value = _SPECIALS.sub(r"\\\1", value)
    value = _ENTITY_START.sub("&amp;", value)
    return _TAG_START.sub("&lt;", value)
