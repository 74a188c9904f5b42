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

`window_family` and `pooled_window_choice` are the bound of a family of methods rather than of
fixed requests: each refresh's request is the highest usage of the last W hours times (1 + m),
with W and m chosen per container in hindsight and the over-rate budget pooled as above. It
says how far a peak-window recommender tuned to each container could go if it knew the best
tuning in advance.
"""

from __future__ import annotations

import math
from collections.abc import Callable

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
    # at `widest` + 1 every container keeps its peak: nothing above
    return _priced(pool.choose, allowed_over(pool.n, rate), pool.widest + 1.0)


def _priced(choose: Callable[[float], tuple[np.ndarray, int]], budget: int, high: float) -> np.ndarray:
    """The Lagrangian choice: `choose(price)` gives the choice that minimises unused request +
    price x intervals above, and its intervals above; this finds the smallest price whose choice
    keeps within `budget` (bisection from 0 to `high`, a price at which the choice has the fewest
    intervals above it can have) and returns that choice (at `high` when none keeps within)."""
    best, over = choose(0.0)
    if over <= budget:
        return best
    lo, hi = 0.0, high
    best, _ = choose(hi)
    while hi - lo > 1e-9 * hi:  # the prices where a choice changes are far wider apart than this
        mid = (lo + hi) / 2
        choice, over = choose(mid)
        if over <= budget:
            hi, best = mid, choice
            if over == budget:
                break  # the whole budget is spent: a lower price could only go over it
        else:
            lo = mid
    return best


# The peak-window family of `window_family`: windows of history in seconds (each at least one
# refresh interval; equal block counts are one window) and relative margins.
FAMILY_WINDOWS_S = (900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600, 48 * 3600, 96 * 3600)
FAMILY_MARGINS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
                  0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.5, 3.0, 4.0)  # fmt: skip


def family_windows(update_s: float, windows_s: tuple[float, ...] = FAMILY_WINDOWS_S) -> list[int]:
    """The family's windows in refresh intervals (blocks), at least 1, each count once."""
    out: list[int] = []
    for w in windows_s:
        b = max(1, round(w / update_s))
        if b not in out:
            out.append(b)
    return out


def window_family(used: np.ndarray, block: np.ndarray, scored: np.ndarray, windows: list[int],
                  margins: tuple[float, ...] = FAMILY_MARGINS) -> tuple[np.ndarray, np.ndarray]:
    """(request summed over the scored intervals, scored intervals above the request) of every
    member of the peak-window family, window major: the request of refresh block k is the
    highest usage in blocks k - w ... k - 1 (those that hold samples) times (1 + margin), 0 when
    none before it holds one. `block`: each interval's refresh block (0, 1, ... in time order)."""
    used = np.asarray(used, dtype=np.float64)
    nb = int(block[-1]) + 1 if block.size else 0
    peaks = np.full(nb, -np.inf)
    np.maximum.at(peaks, block, used)
    u = used[scored]
    b = block[scored]
    factor = 1.0 + np.asarray(margins, dtype=np.float64)
    by_window: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    prev = np.full(nb, -np.inf)  # highest peak of the last `shift` blocks before each block
    shift = 0
    for w in sorted(windows):  # each window extends the one before it
        while shift < min(w, nb):
            shift += 1
            prev[shift:] = np.maximum(prev[shift:], peaks[:-shift])
        base = np.where(np.isfinite(prev), prev, 0.0)[b]
        limits = base[:, None] * factor[None, :]
        by_window[w] = (limits.sum(axis=0), (u[:, None] > limits).sum(axis=0))
    return (np.concatenate([by_window[w][0] for w in windows]),
            np.concatenate([by_window[w][1] for w in windows]).astype(np.int64))


def pooled_window_choice(request: np.ndarray, over: np.ndarray, n: int, rate: float) -> np.ndarray:
    """Per container (rows of `request` / `over`, one column per family member), the member
    that leaves the least request unused in all with at most floor(rate x n) of the n scored
    intervals above, chosen as `pooled_oracle_requests` chooses: a price per interval above,
    the smallest price whose choices keep within the budget (bisection). On a tie the member
    with fewer intervals above. When even the fewest overruns each container can have exceed
    the budget, those are the choice."""
    if not 0 <= rate <= 1:
        raise ValueError("rate must be in [0, 1]")
    request = np.asarray(request, dtype=np.float64)
    over = np.asarray(over, dtype=np.float64)
    rows = np.arange(request.shape[0])

    def choose(price: float) -> tuple[np.ndarray, int]:
        cost = request + price * over
        low = cost.min(axis=1, keepdims=True)
        j = np.where(cost == low, over, np.inf).argmin(axis=1)  # the tie with the fewest above
        return j, int(over[rows, j].sum())

    if not request.size:
        return np.zeros(request.shape[0], dtype=np.int64)
    # at this price every container takes a member with the fewest intervals above it can have
    high = float((request.max(axis=1) - request.min(axis=1)).max()) + 1.0
    return _priced(choose, allowed_over(n, rate), high)
