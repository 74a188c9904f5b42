"""The hindsight bound of the evaluation: per container, the smallest fixed request that keeps
the share of intervals with usage above it at most a target rate.

With n scored intervals and rate r, at most k = floor(r x n) intervals may be above the
request, so the request is the (k+1)-th largest usage: anything lower leaves k+1 intervals
above it. No method that holds one request for the whole period can be under it at that rate.
"""

from __future__ import annotations

import math

import numpy as np


def allowed_over(n: int, rate: float) -> int:
    return math.floor(rate * n + 1e-9)


def oracle_request(usage: np.ndarray, rate: float) -> float:
    """The smallest fixed request with at most floor(rate x n) of the usage values above it."""
    if not 0 <= rate <= 1:
        raise ValueError("rate must be in [0, 1]")
    u = np.sort(np.asarray(usage, dtype=np.float64))
    k = allowed_over(u.size, rate)
    return 0.0 if k >= u.size else float(u[u.size - 1 - k])


def oracle_requests(sorted_usage: list[np.ndarray], rate: float) -> np.ndarray:
    """oracle_request for many containers whose usage is already sorted ascending."""
    out = np.zeros(len(sorted_usage))
    for i, u in enumerate(sorted_usage):
        k = allowed_over(u.size, rate)
        out[i] = 0.0 if k >= u.size else u[u.size - 1 - k]
    return out
