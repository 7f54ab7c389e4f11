"""torch's dynamo counters as the record keeps them: a snapshot, and what was counted between two."""

from __future__ import annotations

Counters = dict[str, dict[str, int]]

# Kept in a delta even when nothing was counted: a report reads "no CA capture" from an empty
# compiled_autograd counter, and a missing one from a record made without torch's counters.
_ALWAYS_KEPT = ("compiled_autograd", "stats")


def counter_snapshot() -> Counters:
    """torch._dynamo.utils.counters now, as plain dicts. Keys are cut to 300 characters; reasons
    that only differ later add up (totals stay torch's)."""
    from torch._dynamo.utils import counters

    out: Counters = {}
    for name, counter in counters.items():
        cut: dict[str, int] = {}
        for key, value in counter.items():
            cut[str(key)[:300]] = cut.get(str(key)[:300], 0) + int(value)
        out[name] = cut
    return out


def counter_delta(before: Counters, after: Counters) -> Counters:
    """What torch counted between two snapshots only (its counters are process-wide and cumulative)."""
    out: Counters = {}
    for name, values in after.items():
        old = before.get(name, {})
        diff = {k: v - old.get(k, 0) for k, v in values.items() if v - old.get(k, 0)}
        if diff or name in _ALWAYS_KEPT:
            out[name] = diff
    return out
