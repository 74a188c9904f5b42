"""Bucket geometry the Autopilot methods read from VPA's schemes: each bucket's end (the
value a limit at that bucket stands for, as VPA's Percentile reports it) and midpoint (the
value its samples stand for in averages and load weighting)."""

from __future__ import annotations

from functools import cache

import numpy as np

from ..histogram import BucketScheme


@cache
def ends(scheme: BucketScheme) -> np.ndarray:
    e = np.empty(scheme.num_buckets)
    e[:-1] = scheme.starts[1:]
    e[-1] = scheme.starts[-1]  # the last bucket reports its start, as value_of does
    return e


@cache
def mids(scheme: BucketScheme) -> np.ndarray:
    return (scheme.starts + ends(scheme)) / 2


def percentile_value(scheme: BucketScheme, lo: int, weights: np.ndarray, p: float) -> float:
    """End of the first bucket where the cumulative weight reaches p x total (VPA's rule) over a
    compact window of buckets starting at `lo`; 0 for no weight."""
    cs = np.cumsum(weights)
    total = float(cs[-1]) if cs.size else 0.0
    if total <= 0:
        return 0.0
    i = int(np.searchsorted(cs, p * total, side="left"))
    return float(ends(scheme)[lo + min(i, cs.size - 1)])
