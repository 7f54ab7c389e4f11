"""Names listed in a sentence: `ca`, `aot and ca`, `eager, aot and ca` (each name once, in order)."""

from __future__ import annotations

from collections.abc import Iterable


def and_words(names: Iterable[str]) -> str:
    listed = list(dict.fromkeys(names))
    if len(listed) <= 1:
        return "".join(listed)
    return ", ".join(listed[:-1]) + " and " + listed[-1]
