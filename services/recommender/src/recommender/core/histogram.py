"""VPA-style exponential-bucket histograms, plain and decaying, with a compact checkpoint.

Ported from kubernetes/autoscaler vertical-pod-autoscaler/pkg/recommender/util
(histogram.go, decaying_histogram.go, histogram_options.go): same bucket boundaries, same
percentile rule (end of the bucket where the cumulative weight first reaches p x total),
same renormalisation of the decay reference so weights never overflow a float.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

# VPA aggregations_config.go: minSampleWeight 0.1, epsilon = 0.001 x minSampleWeight.
MIN_SAMPLE_WEIGHT = 0.1
EPSILON = 0.001 * MIN_SAMPLE_WEIGHT
# A sample more than this many half-lives after the reference triggers a reference shift;
# 2^100 is far from float overflow yet keeps the shift rare.
MAX_DECAY_EXPONENT = 100


class HistogramError(ValueError):
    pass


@dataclass(frozen=True)
class BucketScheme:
    """Bucket n has size first x ratio^n; bucket 0 is [0, first)."""

    max_value: float
    first_bucket_size: float
    ratio: float = 1.05
    num_buckets: int = field(init=False)
    starts: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.first_bucket_size <= 0 or self.ratio <= 1:
            raise HistogramError("bucket scheme needs max_value > 0, first_bucket_size > 0, ratio > 1")
        n = math.ceil(math.log(self.max_value * (self.ratio - 1) / self.first_bucket_size + 1, self.ratio)) + 1
        object.__setattr__(self, "num_buckets", n)
        idx = np.arange(n, dtype=np.float64)
        starts = self.first_bucket_size * (self.ratio**idx - 1) / (self.ratio - 1)
        starts[0] = 0.0
        object.__setattr__(self, "starts", starts)

    @property
    def _k(self) -> float:
        return (self.ratio - 1) / self.first_bucket_size

    def find_bucket(self, value: float) -> int:
        if value < self.first_bucket_size:
            return 0
        b = math.floor(math.log(value * (self.ratio - 1) / self.first_bucket_size + 1, self.ratio))
        return b if b < self.num_buckets else self.num_buckets - 1

    def find_buckets(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            b = np.floor(np.log(v * self._k + 1) / math.log(self.ratio))
        b = np.where(v < self.first_bucket_size, 0, b)
        return np.clip(b, 0, self.num_buckets - 1).astype(np.intp)

    def bucket_start(self, bucket: int) -> float:
        return float(self.starts[bucket])

    def value_of(self, bucket: int) -> float:
        """What Percentile() reports for a bucket: its end, or the start of the last bucket."""
        if bucket < self.num_buckets - 1:
            return float(self.starts[bucket + 1])
        return float(self.starts[bucket])


# VPA's released schemes: CPU in cores (first 0.01 core, up to 1000 cores), memory in bytes.
CPU_SCHEME = BucketScheme(max_value=1000.0, first_bucket_size=0.01)
MEMORY_SCHEME = BucketScheme(max_value=1e12, first_bucket_size=1e7)


def weighted_percentile_bucket(weights: np.ndarray, p: float) -> int | None:
    """First bucket where the running sum reaches p x total, scanning VPA's [min, max] range."""
    nz = np.flatnonzero(weights >= EPSILON)
    if nz.size == 0:
        return None
    lo, hi = int(nz[0]), int(nz[-1])
    total = float(weights.sum())
    cs = np.cumsum(weights[lo:hi])
    hit = np.flatnonzero(cs >= p * total)
    return lo + int(hit[0]) if hit.size else hi


class DecayingHistogram:
    """Weights grow by 2^((t - reference) / half_life): relative weight halves per half-life of age."""

    __slots__ = ("_first", "_k", "_last", "_lnr", "half_life_s", "reference_ts", "scheme", "weights")

    def __init__(self, scheme: BucketScheme, half_life_s: float = 24 * 3600.0) -> None:
        if half_life_s <= 0:
            raise HistogramError("half-life must be positive")
        self.scheme = scheme
        self.half_life_s = float(half_life_s)
        self.weights = np.zeros(scheme.num_buckets, dtype=np.float64)
        self.reference_ts: float | None = None
        self._k = scheme._k
        self._lnr = math.log(scheme.ratio)
        self._first = scheme.first_bucket_size
        self._last = scheme.num_buckets - 1

    # ------------------------------------------------------------------ decay reference

    def _shift_reference(self, t: float) -> None:
        # Kept an integer multiple of the half-life, as VPA's Round(halfLife).
        new_ref = math.floor(t / self.half_life_s + 0.5) * self.half_life_s
        if self.reference_ts is not None:
            exponent = round((self.reference_ts - new_ref) / self.half_life_s)
            self.weights *= math.ldexp(1.0, exponent)
            self.weights[self.weights < EPSILON] = 0.0
        self.reference_ts = new_ref

    def decay_factor(self, t: float) -> float:
        if self.reference_ts is None or t - self.reference_ts > self.half_life_s * MAX_DECAY_EXPONENT:
            self._shift_reference(t)
        return 2.0 ** ((t - self.reference_ts) / self.half_life_s)

    # ------------------------------------------------------------------ samples

    def add_sample(self, value: float, weight: float, t: float) -> None:
        if weight < 0:
            raise HistogramError("sample weight must not be negative")
        if value < self._first:
            b = 0
        else:
            b = int(math.log(value * self._k + 1) / self._lnr)
            b = min(b, self._last)
        self.weights[b] += weight * self.decay_factor(t)

    def subtract_sample(self, value: float, weight: float, t: float) -> None:
        b = self.scheme.find_bucket(value)
        w = weight * self.decay_factor(t)
        cur = self.weights[b]
        # VPA clamps at zero: a remove larger than the bucket (minus epsilon) empties it.
        self.weights[b] = 0.0 if w > cur - EPSILON else cur - w

    def add_samples(self, values: np.ndarray, weights: np.ndarray | float, ts: np.ndarray | float) -> None:
        """Vectorised add_sample for many samples at once (the replay and bench path)."""
        values = np.asarray(values, dtype=np.float64)
        if values.size == 0:
            return
        ts_arr = np.broadcast_to(np.asarray(ts, dtype=np.float64), values.shape)
        w = np.broadcast_to(np.asarray(weights, dtype=np.float64), values.shape)
        if np.any(w < 0):
            raise HistogramError("sample weight must not be negative")
        self.decay_factor(float(ts_arr.max()))  # shift the reference once for the newest sample
        factors = np.exp2((ts_arr - self.reference_ts) / self.half_life_s)
        buckets = self.scheme.find_buckets(values)
        self.weights += np.bincount(buckets, weights=w * factors, minlength=self.scheme.num_buckets)

    def merge(self, other: DecayingHistogram) -> None:
        if other.scheme != self.scheme:
            raise HistogramError("cannot merge histograms with different bucket schemes")
        if other.half_life_s != self.half_life_s:
            raise HistogramError("cannot merge histograms with different half-lives")
        if other.reference_ts is None:
            return
        if self.reference_ts is None:
            self.reference_ts = other.reference_ts
            self.weights = other.weights.copy()
            return
        # Align the older reference to the younger one, then add bucket-wise.
        if other.reference_ts > self.reference_ts:
            self._shift_reference(other.reference_ts)
            self.weights += other.weights
        else:
            exponent = round((other.reference_ts - self.reference_ts) / self.half_life_s)
            self.weights += other.weights * math.ldexp(1.0, exponent)

    # ------------------------------------------------------------------ reads

    @property
    def total_weight(self) -> float:
        return float(self.weights.sum())

    def is_empty(self) -> bool:
        return not bool(np.any(self.weights >= EPSILON))

    def percentile(self, p: float) -> float:
        b = weighted_percentile_bucket(self.weights, p)
        return 0.0 if b is None else self.scheme.value_of(b)

    # ------------------------------------------------------------------ checkpoint

    # header: reference_ts (f8, NaN when unset), total weight (f8), non-zero bucket count (u2)
    _HEADER = struct.Struct("<ddH")

    def save(self) -> bytes:
        """Non-zero buckets only: uint8 bucket index + float64 weight.

        Weights are kept exact (not VPA's uint32 scaled to 10000) so that a reloaded histogram
        breaks percentile ties exactly as before: a restart gives the same recommendation.
        """
        nz = np.flatnonzero(self.weights > 0)
        ref = math.nan if self.reference_ts is None else self.reference_ts
        head = self._HEADER.pack(ref, float(self.weights.sum()), nz.size)
        return head + nz.astype(np.uint8).tobytes() + self.weights[nz].astype("<f8").tobytes()

    @classmethod
    def load(cls, data: bytes, scheme: BucketScheme, half_life_s: float) -> tuple[DecayingHistogram, int]:
        """The histogram and the number of bytes consumed."""
        h = cls(scheme, half_life_s)
        ref, _total, n = cls._HEADER.unpack_from(data, 0)
        off = cls._HEADER.size
        h.reference_ts = None if math.isnan(ref) else ref
        if n:
            idx = np.frombuffer(data, dtype=np.uint8, count=n, offset=off).astype(np.intp)
            off += n
            w = np.frombuffer(data, dtype="<f8", count=n, offset=off)
            off += 8 * n
            if idx.max() >= scheme.num_buckets or np.any(w < 0) or not np.all(np.isfinite(w)):
                raise HistogramError("checkpoint holds buckets outside the scheme or invalid weights")
            h.weights[idx] = w
        return h, off
