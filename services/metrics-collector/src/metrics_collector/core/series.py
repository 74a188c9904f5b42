"""Time-series query maths: time and step parsing, buckets, resolution choice, percentiles.

Times are UTC epoch milliseconds throughout (the bus `ts`). Buckets are aligned to the epoch,
`bucket = ts - ts % step`, so the same sample always lands in the same bucket whatever range
is asked for, and rollup tables can answer any step that is a multiple of theirs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
# Like Prometheus: a query may not ask for more points than this.
MAX_POINTS = 11_000

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": MINUTE_MS, "h": HOUR_MS, "d": 24 * HOUR_MS, None: 1000}


class QueryError(ValueError):
    """A query parameter that cannot be answered; the message says which and why."""


def parse_time(value: str | int, name: str = "time") -> int:
    """Epoch milliseconds from an integer (epoch ms) or an RFC 3339 timestamp."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise QueryError(f"{name}: {value!r} is neither epoch milliseconds nor an RFC 3339 time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def parse_duration(value: str | float, name: str = "step") -> int:
    """Milliseconds from `30`, `30s`, `5m`, `1h`, `1d`, `500ms` (a bare number is seconds)."""
    text = str(value).strip().lower()
    m = _DURATION.match(text)
    if not m:
        raise QueryError(f"{name}: {value!r} is not a duration (examples: 30, 30s, 5m, 1h, 1d)")
    ms = int(float(m.group(1)) * _UNIT_MS[m.group(2)])
    if ms <= 0:
        raise QueryError(f"{name}: must be positive, got {value!r}")
    return ms


@dataclass(frozen=True)
class Range:
    start: int  # inclusive, epoch ms
    end: int  # exclusive, epoch ms
    step: int  # ms

    @property
    def first_bucket(self) -> int:
        return bucket_of(self.start, self.step)


def make_range(start: int, end: int, step: int, min_step: int = 1000) -> Range:
    if end <= start:
        raise QueryError(f"to ({end}) must be after from ({start})")
    if step < min_step:
        raise QueryError(f"step must be at least {min_step // 1000}s")
    points = math.ceil((end - bucket_of(start, step)) / step)
    if points > MAX_POINTS:
        raise QueryError(
            f"range / step gives {points} points, more than {MAX_POINTS}: use a larger step or a shorter range"
        )
    return Range(start, end, step)


def bucket_of(ts: int, step: int) -> int:
    return ts - ts % step


def choose_resolution(start: int, step: int, now: int, raw_retention_ms: int, minute_retention_ms: int) -> str:
    """The finest stored resolution that still holds data from `start`.

    Raw samples answer every step while they are kept (and are the only answer below a
    minute); older ranges come from the 1-minute rollups, then the 1-hour ones, whose
    buckets then fall whole into the requested ones.
    """
    if start >= now - raw_retention_ms or step < MINUTE_MS:
        return "raw"
    if start >= now - minute_retention_ms:
        return "1m"
    return "1h"


@dataclass(frozen=True)
class Bucket:
    ts: int
    samples: int
    sums: tuple[float, ...]
    maxes: tuple[float, ...]

    def avg(self, i: int) -> float:
        return self.sums[i] / self.samples


def aggregate(points: Iterable[tuple[int, Sequence[float]]], step: int) -> list[Bucket]:
    """Count, sum and max per bucket of (ts, values) points; buckets in time order."""
    acc: dict[int, list] = {}
    for ts, values in points:
        b = bucket_of(ts, step)
        cur = acc.get(b)
        if cur is None:
            acc[b] = [1, list(values), list(values)]
        else:
            cur[0] += 1
            for i, v in enumerate(values):
                cur[1][i] += v
                cur[2][i] = max(cur[2][i], v)
    return [Bucket(b, n, tuple(s), tuple(m)) for b, (n, s, m) in sorted(acc.items())]


# --------------------------------------------------------------------------- percentiles

PERCENTILE_METHODS = ("linear", "nearest", "koordinator")


def parse_quantiles(text: str) -> list[float]:
    """`0.5,0.9,0.99` or `50,90,99` (percent) -> fractions in (0, 1]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            q = float(part)
        except ValueError:
            raise QueryError(f"q: {part!r} is not a number") from None
        if q > 1:
            q /= 100
        if not 0 < q <= 1:
            raise QueryError(f"q: {part} is outside (0, 1] (or (0, 100] as percent)")
        out.append(q)
    if not out:
        raise QueryError("q: give at least one quantile, e.g. q=0.5,0.9,0.99")
    return out


def percentile(sorted_values: Sequence[float], q: float, method: str = "linear") -> float | None:
    """The q-quantile (0 < q <= 1) of already sorted values; None when there are none.

    linear: numpy's default (interpolate between closest ranks); nearest: the smallest value
    whose rank covers q (numpy "inverted_cdf"); koordinator: the sorted value at index
    int(n * q) - 1, as the node agent computes NodeMetric percentiles.
    """
    n = len(sorted_values)
    if n == 0:
        return None
    if method == "linear":
        pos = (n - 1) * q
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        frac = pos - lo
        return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac
    if method == "nearest":
        return sorted_values[max(math.ceil(n * q) - 1, 0)]
    if method == "koordinator":
        return sorted_values[min(max(int(n * q) - 1, 0), n - 1)]
    raise QueryError(f"method: {method!r} is not one of {', '.join(PERCENTILE_METHODS)}")


def summarize(values: Sequence[float], quantiles: Sequence[float], method: str) -> dict:
    s = sorted(values)
    return {
        "samples": len(s),
        "min": s[0] if s else None,
        "max": s[-1] if s else None,
        "avg": (sum(s) / len(s)) if s else None,
        "quantiles": {_q_key(q): percentile(s, q, method) for q in quantiles},
    }


def _q_key(q: float) -> str:
    return f"p{round(q * 100, 3):g}"
