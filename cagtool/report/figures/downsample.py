"""Fewer points for a long series, for what draws it (the report's step-time chart, the Perfetto
trace): min/max per bucket, never dropping a marked point. The figures themselves (medians,
percentiles) always come from every step; only the drawing is thinned."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np


def downsample(values: Sequence[float | None], marked: Iterable[int], limit: int) -> list[int]:
    """The indices of `values` to draw, in order: all of them when there are at most `limit`;
    else every index in `marked` (the steps that carry a marker: compile-affected steps, CA
    captures, recompiles, graph breaks), plus, for each of the equal buckets the series is cut
    into, the index of its smallest and of its largest value (min/max per bucket: a spike or a dip
    never disappears, whatever the zoom). The buckets share what `limit` leaves after the marked
    steps (at least one bucket); a value None or NaN (a step with no time) is never a bucket's min or max."""
    n = len(values)
    if n <= limit:
        return list(range(n))

    kept = {i for i in marked if 0 <= i < n}
    buckets = max((limit - len(kept)) // 2, 1)
    size = -(-n // buckets)  # ceil: the last bucket may be shorter
    # A numpy array passed in has NaN where a value is missing.
    array = values.astype(float) if isinstance(values, np.ndarray) else np.fromiter((np.nan if v is None else v for v in values), dtype=float, count=n)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = array
    grid = padded.reshape(buckets, size)
    missing = np.isnan(grid)
    lows = np.where(missing, np.inf, grid).argmin(axis=1)
    highs = np.where(missing, -np.inf, grid).argmax(axis=1)
    present = ~missing.all(axis=1)
    starts = np.arange(buckets) * size
    kept.update((starts + lows)[present].tolist())
    kept.update((starts + highs)[present].tolist())
    return sorted(kept)
