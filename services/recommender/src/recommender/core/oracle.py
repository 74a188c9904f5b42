"""The hindsight bound of the evaluation: per container, the smallest fixed request that keeps
the share of intervals with usage above it at most a target rate.

With n scored intervals and rate r, at most k = floor(r x n) intervals may be above the
request, so the request is the (k+1)-th largest usage: anything lower leaves k+1 intervals
above it. No method that holds one request for the whole period can be under it at that rate.

The evaluation's over-rate and slack are pooled over all containers (overruns over all scored
intervals, unused request over all request). `pooled_oracle_requests` is the hindsight bound for
that pooled figure: fixed requests chosen together, so that the over-rate budget goes to the
containers where an overrun saves the most request (a large container with rare peaks) rather
than the same share to each.
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


class _Pooled:
    """All containers' sorted usage in one array, to price every candidate request at once."""

    def __init__(self, sorted_usage: list[np.ndarray]) -> None:
        usage = [np.asarray(u, dtype=np.float64) for u in sorted_usage]
        self.keep = np.array([u.size > 0 for u in usage], dtype=bool)
        usage = [u for u in usage if u.size]
        self.u = np.concatenate(usage) if usage else np.zeros(0)
        self.sizes = sizes = np.array([u.size for u in usage], dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        self.size = np.repeat(sizes, sizes).astype(np.float64)  # each candidate's container size
        # intervals above each candidate request u[j]: those with larger usage (ties are not above)
        self.above = np.concatenate([u.size - np.searchsorted(u, u, side="right") for u in usage]) if usage else self.u
        self.index = np.arange(self.u.size)
        self.n = int(sizes.sum())
        self.widest = float((sizes * np.array([u[-1] - u[0] for u in usage])).max()) if usage else 0.0

    def choose(self, price: float) -> tuple[np.ndarray, int]:
        """Each container's request minimising (unused request) + price x (intervals above it),
        the higher request on a tie; and the intervals above in all."""
        out = np.zeros(self.keep.size)
        if not self.u.size:
            return out, 0
        cost = self.size * self.u + price * self.above
        low = np.minimum.reduceat(cost, self.starts)
        best = np.repeat(low, self.sizes)
        j = np.maximum.reduceat(np.where(cost == best, self.index, -1), self.starts)
        out[self.keep] = self.u[j]
        return out, int(self.above[j].sum())


def pooled_oracle_requests(sorted_usage: list[np.ndarray], rate: float) -> np.ndarray:
    """Fixed requests (one per container, usage sorted ascending) with at most floor(rate x N)
    of all N scored intervals above them, chosen in hindsight to leave the least request unused
    in all.

    The request of each container is among its own usage values. The choice is the Lagrangian
    one: a price per interval above the request, the smallest price whose choices keep within
    the budget (found by bisection). Any such choice has the least unused request of all sets of
    fixed requests with no more intervals above them in all, so no fixed requests do better at
    its over-rate; where the price steps over a gap, the budget may not be spent to the last
    interval."""
    if not 0 <= rate <= 1:
        raise ValueError("rate must be in [0, 1]")
    pool = _Pooled(sorted_usage)
    budget = allowed_over(pool.n, rate)
    best, over = pool.choose(0.0)
    if over <= budget:
        return best
    lo, hi = 0.0, pool.widest + 1.0  # at hi every container keeps its peak: nothing above
    best, _ = pool.choose(hi)
    while hi - lo > 1e-9 * hi:  # the prices where a choice changes are far wider apart than this
        mid = (lo + hi) / 2
        choice, over = pool.choose(mid)
        if over <= budget:
            hi, best = mid, choice
            if over == budget:
                break  # the whole budget is spent: a lower price could only go over it
        else:
            lo = mid
    return best
