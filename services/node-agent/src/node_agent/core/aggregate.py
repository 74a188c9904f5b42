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

from dataclasses import dataclass

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


def to_resources(pair: np.ndarray) -> Resources:
    """(cpu milli, memory bytes) floats -> integer Resources, truncated like int64(...) in Go."""
    cpu, mem = float(pair[0]), float(pair[1])
    return Resources(int(cpu + _EPS) if cpu >= 0 else int(cpu - _EPS), int(mem))


@dataclass(frozen=True)
class WindowStats:
    """Per series (rows) and resource (cpu, memory): shapes (k, 2); `ok[i]` says row i is reportable."""

    ok: np.ndarray
    count: np.ndarray
    avg: np.ndarray
    pct: dict[str, np.ndarray]


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
    with np.errstate(invalid="ignore", divide="ignore"):
        avg = np.where(valid, v, 0.0).sum(axis=0) / count
    ok = (count > 0).all(axis=1) if k else np.zeros(0, dtype=bool)
    if duration_ms is not None and len(ts) and k:
        big = np.iinfo(np.int64).max
        t = ts[:, None, None]
        first = np.where(valid, t, big).min(axis=0)
        last = np.where(valid, t, -big).max(axis=0)
        span_ok = (last - first) * 2 >= duration_ms
        ok &= span_ok.all(axis=1)
    pct: dict[str, np.ndarray] = {}
    if percentiles and len(ts) and k:
        ordered = np.sort(v, axis=0)  # NaN sorts last, so the first count rows are the samples
        for name, p in PERCENTILES.items():
            idx = np.minimum(percentile_index(count, p), np.maximum(count - 1, 0))
            pct[name] = np.take_along_axis(ordered, idx[None, :, :], axis=0)[0]
    return WindowStats(ok=ok, count=count, avg=avg, pct=pct)
