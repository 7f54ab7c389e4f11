"""Sequence alignment for graph diffs: patience diff, with difflib for what patience leaves.

difflib's SequenceMatcher is quadratic on long sequences of few distinct items, which is what a
CA graph is (hundreds of `MmBackward0` groups, thousands of `getitem`s). Patience diff anchors on
items that occur exactly once on both sides, recurses between anchors, and only hands small
anchorless stretches to difflib; large anchorless stretches get difflib's `autojunk` heuristic,
which bounds the time at some cost in alignment quality.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from difflib import SequenceMatcher
from typing import Hashable, Sequence

Opcode = tuple[str, int, int, int, int]

# Above this many cell comparisons (len(a) * len(b)) an anchorless stretch gets autojunk.
_EXACT_LIMIT = 2_000_000


def intern(a: Sequence[Hashable], b: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    """Both sequences as small ints (equal items, equal ints): cheap to hash and compare again and again."""
    ids: dict[Hashable, int] = {}
    return [ids.setdefault(x, len(ids)) for x in a], [ids.setdefault(x, len(ids)) for x in b]


def _unique_anchors(a: Sequence[int], b: Sequence[int], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """The longest increasing run of (i, j) pairs of items that occur once in a[alo:ahi] and once in b[blo:bhi]."""
    count_a = Counter(a[alo:ahi])
    count_b = Counter(b[blo:bhi])
    where_b = {b[j]: j for j in range(blo, bhi) if count_b[b[j]] == 1}
    pairs = [(i, where_b[a[i]]) for i in range(alo, ahi) if count_a[a[i]] == 1 and a[i] in where_b]
    if not pairs:
        return []
    # Longest increasing subsequence on j (patience sorting), remembering predecessors.
    tails: list[int] = []  # j of the last pair of the best run of each length
    tail_index: list[int] = []
    previous: list[int] = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pos = bisect_left(tails, j)
        if pos == len(tails):
            tails.append(j)
            tail_index.append(k)
        else:
            tails[pos] = j
            tail_index[pos] = k
        previous[k] = tail_index[pos - 1] if pos else -1
    run: list[tuple[int, int]] = []
    k = tail_index[-1]
    while k != -1:
        run.append(pairs[k])
        k = previous[k]
    run.reverse()
    return run


def _difflib_pairs(a: Sequence[int], b: Sequence[int], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    autojunk = (ahi - alo) * (bhi - blo) > _EXACT_LIMIT
    matcher = SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=autojunk)
    out: list[tuple[int, int]] = []
    for i, j, size in matcher.get_matching_blocks():
        out.extend((alo + i + k, blo + j + k) for k in range(size))
    return out


def matching_pairs(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    """(i, j) with a[i] == b[j], increasing in both i and j."""
    out: list[tuple[int, int]] = []
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            out.append((alo, blo))
            alo, blo = alo + 1, blo + 1
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
            out.append((ahi, bhi))
        if alo == ahi or blo == bhi:
            continue
        anchors = _unique_anchors(a, b, alo, ahi, blo, bhi)
        if not anchors:
            out.extend(_difflib_pairs(a, b, alo, ahi, blo, bhi))
            continue
        i0, j0 = alo, blo
        for i, j in anchors:
            stack.append((i0, i, j0, j))
            out.append((i, j))
            i0, j0 = i + 1, j + 1
        stack.append((i0, ahi, j0, bhi))
    out.sort()
    return out


def _gap(i1: int, i2: int, j1: int, j2: int) -> Opcode:
    tag = "replace" if i2 > i1 and j2 > j1 else ("delete" if i2 > i1 else "insert")
    return (tag, i1, i2, j1, j2)


def opcodes(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Opcode]:
    """difflib-style opcodes (equal, replace, delete, insert) aligning a with b."""
    ia, ib = intern(a, b)
    pairs = matching_pairs(ia, ib)
    ops: list[Opcode] = []
    i = j = k = 0
    while k < len(pairs):
        pi, pj = pairs[k]
        if pi > i or pj > j:
            ops.append(_gap(i, pi, j, pj))
        end = k
        while end + 1 < len(pairs) and pairs[end + 1] == (pairs[end][0] + 1, pairs[end][1] + 1):
            end += 1
        i, j = pairs[end][0] + 1, pairs[end][1] + 1
        ops.append(("equal", pi, i, pj, j))
        k = end + 1
    if i < len(a) or j < len(b):
        ops.append(_gap(i, len(a), j, len(b)))
    return ops
