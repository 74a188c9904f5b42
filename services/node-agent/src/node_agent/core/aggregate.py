"""Averages and percentiles over windows of a `SlotRing` (Koordinator's metric_result.go).

- avg: arithmetic mean of the samples in the window;
- pXX: sort ascending and take index int(n x p) - 1 (float32 maths, truncation, clamped to
  >= 0), no interpolation, so results match Koordinator and not numpy.percentile;
- a percentile window is empty when its samples cover less than half of it
  ((last ts - first ts) < duration / 2: the NodeMetric cold-start filter).

Each resource of each series is judged on its own samples (the first CPU rate comes one
round after the first memory read); a window is reported only when both resources pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from koordcommon.resources import Resources

PERCENTILES: dict[str, float] = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
# Guard for float noise before truncating to milli-cores (avg of 3 x 0.1 core must be 100m).
_EPS = 1e-6


def percentile_index(n: int | np.ndarray, p: float) -> int | np.ndarray:
    """Koordinator's index: int(float32(n) * float32(p)) - 1, at least 0."""
    idx = (np.asarray(n, dtype=np.float32) * np.float32(p)).astype(np.int64) - 1
    idx = np.maximum(idx, 0)
    return int(idx) if np.ndim(idx) == 0 else idx


def to_resources(pair) -> Resources:
    """(cpu milli, memory bytes) floats -> integer Resources, truncated like int64(...) in Go.
    `pair`: a row of `WindowStats.avg_rows` / `pct_rows` (Python floats) or of a numpy array."""
    cpu, mem = pair[0], pair[1]
    return Resources(int(cpu + _EPS) if cpu >= 0 else int(cpu - _EPS), int(mem))


@dataclass(frozen=True)
class WindowStats:
    """Per series (rows) and resource (cpu, memory): shapes (k, 2); `ok[i]` says row i is reportable.

    `avg_rows` / `pct_rows` hold the same values as Python lists (row -> [cpu, memory]): the
    messages built from them read one row at a time, where a numpy scalar per read costs more."""

    ok: np.ndarray
    count: np.ndarray
    avg: np.ndarray
    pct: dict[str, np.ndarray]
    avg_rows: list = field(default_factory=list)
    pct_rows: dict[str, list] = field(default_factory=dict)


_BIG = np.iinfo(np.int64).max
_P32 = np.array(list(PERCENTILES.values()), dtype=np.float32)[:, None, None]


def window_stats(
    ts: np.ndarray,
    values: np.ndarray,
    cols: np.ndarray,
    *,
    duration_ms: int | None = None,
    percentiles: bool = True,
) -> WindowStats:
    """Statistics of the columns `cols` of a ring window (ts: (n,), values: (n, slots, 2)).

    With `duration_ms`, rows whose samples span less than half of it are not ok.
    """
    v = values[:, cols, :]  # (n, k, 2)
    k = len(cols)
    valid = ~np.isnan(v)
    count = valid.sum(axis=0)  # (k, 2)
    avg = np.where(valid, v, 0.0).sum(axis=0) / np.maximum(count, 1)
    if not count.all():
        avg[count == 0] = np.nan  # no sample: no average
    ok = (count > 0).all(axis=1) if k else np.zeros(0, dtype=bool)
    if duration_ms is not None and len(ts) and k:
        t = ts[:, None, None]
        first = np.where(valid, t, _BIG).min(axis=0)
        last = np.where(valid, t, -_BIG).max(axis=0)
        span_ok = (last - first) * 2 >= duration_ms
        ok &= span_ok.all(axis=1)
    pct: dict[str, np.ndarray] = {}
    pct_rows: dict[str, list] = {}
    if percentiles and len(ts) and k:
        ordered = np.sort(v, axis=0)  # NaN sorts last, so the first count rows are the samples
        # every percentile's index at once (Koordinator's int(float32(n) x float32(p)) - 1, clamped)
        idx = np.maximum((count[None].astype(np.float32) * _P32).astype(np.int64) - 1, 0)
        idx = np.minimum(idx, np.maximum(count - 1, 0)[None])
        picked = ordered[idx, np.arange(k)[None, :, None], np.arange(2)[None, None, :]]  # (percentiles, k, 2)
        for j, name in enumerate(PERCENTILES):
            pct[name] = picked[j]
            pct_rows[name] = picked[j].tolist()
    return WindowStats(ok=ok, count=count, avg=avg, pct=pct, avg_rows=avg.tolist(), pct_rows=pct_rows)
