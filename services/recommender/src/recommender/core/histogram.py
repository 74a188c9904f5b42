"""VPA-style exponential-bucket histograms, plain and decaying, with a compact checkpoint.

Ported from kubernetes/autoscaler vertical-pod-autoscaler/pkg/recommender/util
(histogram.go, decaying_histogram.go, histogram_options.go): same bucket boundaries, same
percentile rule (end of the bucket where the cumulative weight first reaches p x total),
same renormalisation of the decay reference so weights never overflow a float.

In memory a histogram keeps only the window of buckets from the lowest to the highest one
in use (float64, as VPA), not all ~176: a container's usage spans a few dozen buckets, and
the rest would cost more than its whole checkpoint. Reads go through a dense copy, so totals
and percentiles are computed exactly as over the full bucket range.
"""

from __future__ import annotations

import math
import struct
from array import array
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
    # ratio - 1, (ratio - 1) / first and ln(ratio): the per-sample bucket search, computed once
    growth: float = field(init=False, repr=False, compare=False)
    k: float = field(init=False, repr=False, compare=False)
    ln_ratio: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.first_bucket_size <= 0 or self.ratio <= 1:
            raise HistogramError("bucket scheme needs max_value > 0, first_bucket_size > 0, ratio > 1")
        n = math.ceil(math.log(self.max_value * (self.ratio - 1) / self.first_bucket_size + 1, self.ratio)) + 1
        object.__setattr__(self, "num_buckets", n)
        idx = np.arange(n, dtype=np.float64)
        starts = self.first_bucket_size * (self.ratio**idx - 1) / (self.ratio - 1)
        starts[0] = 0.0
        object.__setattr__(self, "starts", starts)
        object.__setattr__(self, "growth", self.ratio - 1)
        object.__setattr__(self, "k", (self.ratio - 1) / self.first_bucket_size)
        object.__setattr__(self, "ln_ratio", math.log(self.ratio))

    def find_bucket(self, value: float) -> int:
        if value < self.first_bucket_size:
            return 0
        # math.log(x, ratio) is log(x) / log(ratio): the same float, without recomputing log(ratio)
        b = int(math.log(value * self.growth / self.first_bucket_size + 1) / self.ln_ratio)
        return b if b < self.num_buckets else self.num_buckets - 1

    def find_buckets(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            b = np.floor(np.log(v * self.k + 1) / self.ln_ratio)
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
    return weighted_percentile_buckets(weights, (p,))[0]


def weighted_percentile_buckets(weights: np.ndarray, ps: tuple[float, ...]) -> list[int | None]:
    """weighted_percentile_bucket for several p, sharing the sums."""
    nz = np.flatnonzero(weights >= EPSILON)
    if nz.size == 0:
        return [None] * len(ps)
    lo, hi = int(nz[0]), int(nz[-1])
    total = float(weights.sum())
    cs = np.cumsum(weights[lo:hi])
    out: list[int | None] = []
    for p in ps:
        hit = np.flatnonzero(cs >= p * total)
        out.append(lo + int(hit[0]) if hit.size else hi)
    return out


def _zeros(n: int) -> array:
    return array("d", [0.0]) * n  # exact size: growing in place would over-allocate


class DecayingHistogram:
    """Weights grow by 2^((t - reference) / half_life): relative weight halves per half-life of age.

    `_w[i]` is the weight of bucket `_lo + i`; buckets outside the window weigh zero.
    """

    __slots__ = ("_lo", "_w", "half_life_s", "reference_ts", "scheme")

    def __init__(self, scheme: BucketScheme, half_life_s: float = 24 * 3600.0) -> None:
        if half_life_s <= 0:
            raise HistogramError("half-life must be positive")
        self.scheme = scheme
        self.half_life_s = float(half_life_s)
        self.reference_ts: float | None = None
        self._lo = 0
        self._w = array("d")

    # ------------------------------------------------------------------ bucket window

    def _cover(self, lo: int, hi: int) -> None:
        """Widen the window to include buckets lo..hi."""
        w = self._w
        if not w:
            self._lo, self._w = lo, _zeros(hi - lo + 1)
            return
        if lo < self._lo:
            w = _zeros(self._lo - lo) + w
            self._lo = lo
        top = self._lo + len(w) - 1
        if hi > top:
            w = w + _zeros(hi - top)
        self._w = w

    def _trim(self) -> None:
        """Drop zero buckets at both ends (after a reference shift zeroed the oldest weights)."""
        w = self._w
        lo, hi = 0, len(w)
        while lo < hi and w[lo] == 0.0:
            lo += 1
        while hi > lo and w[hi - 1] == 0.0:
            hi -= 1
        if lo or hi < len(w):
            self._lo = self._lo + lo if hi > lo else 0
            self._w = w[lo:hi]

    @property
    def weights(self) -> np.ndarray:
        """A dense copy over all buckets of the scheme."""
        dense = np.zeros(self.scheme.num_buckets, dtype=np.float64)
        if self._w:
            dense[self._lo : self._lo + len(self._w)] = np.frombuffer(self._w, dtype=np.float64)
        return dense

    # ------------------------------------------------------------------ decay reference

    def _shift_reference(self, t: float) -> None:
        # Kept an integer multiple of the half-life, as VPA's Round(halfLife).
        new_ref = math.floor(t / self.half_life_s + 0.5) * self.half_life_s
        if self.reference_ts is not None and self._w:
            exponent = round((self.reference_ts - new_ref) / self.half_life_s)
            w = np.frombuffer(self._w, dtype=np.float64)
            w *= math.ldexp(1.0, exponent)
            w[w < EPSILON] = 0.0
            del w  # release the buffer so the window can be resized
            self._trim()
        self.reference_ts = new_ref

    def decay_factor(self, t: float) -> float:
        if self.reference_ts is None or t - self.reference_ts > self.half_life_s * MAX_DECAY_EXPONENT:
            self._shift_reference(t)
        return 2.0 ** ((t - self.reference_ts) / self.half_life_s)

    # ------------------------------------------------------------------ samples

    def add_sample(self, value: float, weight: float, t: float) -> None:
        if weight < 0:
            raise HistogramError("sample weight must not be negative")
        s = self.scheme
        if value < s.first_bucket_size:
            b = 0
        else:
            b = int(math.log(value * s.k + 1) / s.ln_ratio)
            if b >= s.num_buckets:
                b = s.num_buckets - 1
        # decay_factor(t), inlined; as in VPA it comes before the bucket is read, so a reference
        # shift rescales this bucket as well
        ref = self.reference_ts
        if ref is None or t - ref > self.half_life_s * MAX_DECAY_EXPONENT:
            self._shift_reference(t)
            ref = self.reference_ts
        x = weight * 2.0 ** ((t - ref) / self.half_life_s)
        i = b - self._lo
        w = self._w
        if 0 <= i < len(w):
            w[i] += x
        else:
            self._cover(b, b)
            self._w[b - self._lo] += x

    def subtract_sample(self, value: float, weight: float, t: float) -> None:
        b = self.scheme.find_bucket(value)
        w = weight * self.decay_factor(t)
        i = b - self._lo
        inside = 0 <= i < len(self._w)
        cur = self._w[i] if inside else 0.0
        # VPA clamps at zero: a remove larger than the bucket (minus epsilon) empties it.
        new = 0.0 if w > cur - EPSILON else cur - w
        if not inside:
            if new == 0.0:
                return  # an empty bucket stays empty
            self._cover(b, b)
            i = b - self._lo
        self._w[i] = new
        if new == 0.0 and (i == 0 or i == len(self._w) - 1):
            # Memory peaks replace each other as they grow: keep the window to live buckets.
            self._trim()

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
        lo, hi = int(buckets.min()), int(buckets.max())
        if lo < 0:
            raise HistogramError("sample values must be numbers")
        self._cover(lo, hi)
        sums = np.bincount(buckets - lo, weights=w * factors, minlength=hi - lo + 1)
        np.frombuffer(self._w, dtype=np.float64)[lo - self._lo : hi - self._lo + 1] += sums

    def merge(self, other: DecayingHistogram) -> None:
        if other.scheme != self.scheme:
            raise HistogramError("cannot merge histograms with different bucket schemes")
        if other.half_life_s != self.half_life_s:
            raise HistogramError("cannot merge histograms with different half-lives")
        if other.reference_ts is None:
            return
        if self.reference_ts is None:
            self.reference_ts = other.reference_ts
            self._lo, self._w = other._lo, array("d", other._w)
            return
        # Align the older reference to the younger one, then add bucket-wise.
        if other.reference_ts > self.reference_ts:
            self._shift_reference(other.reference_ts)
            scale = 1.0
        else:
            scale = math.ldexp(1.0, round((other.reference_ts - self.reference_ts) / self.half_life_s))
        if not other._w:
            return
        lo, n = other._lo, len(other._w)
        self._cover(lo, lo + n - 1)
        src = np.frombuffer(other._w, dtype=np.float64)
        dst = np.frombuffer(self._w, dtype=np.float64)[lo - self._lo : lo - self._lo + n]
        dst += src if scale == 1.0 else src * scale

    # ------------------------------------------------------------------ reads

    @property
    def total_weight(self) -> float:
        return float(self.weights.sum())

    def is_empty(self) -> bool:
        return not any(x >= EPSILON for x in self._w)

    def percentile(self, p: float) -> float:
        return self.percentiles((p,))[0]

    def percentiles(self, ps: tuple[float, ...]) -> list[float]:
        """percentile() of each of ps, from one pass over the buckets."""
        return [0.0 if b is None else self.scheme.value_of(b) for b in weighted_percentile_buckets(self.weights, ps)]

    # ------------------------------------------------------------------ checkpoint

    # header: reference_ts (f8, NaN when unset), total weight (f8), non-zero bucket count (u2)
    _HEADER = struct.Struct("<ddH")

    def save(self) -> bytes:
        """Non-zero buckets only: uint8 bucket index + float64 weight.

        Weights are kept exact (not VPA's uint32 scaled to 10000) so that a reloaded histogram
        breaks percentile ties exactly as before: a restart gives the same recommendation.
        """
        weights = self.weights
        nz = np.flatnonzero(weights > 0)
        ref = math.nan if self.reference_ts is None else self.reference_ts
        head = self._HEADER.pack(ref, float(weights.sum()), nz.size)
        return head + nz.astype(np.uint8).tobytes() + weights[nz].astype("<f8").tobytes()

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
            dense = np.zeros(scheme.num_buckets, dtype=np.float64)
            dense[idx] = w
            nz = np.flatnonzero(dense)
            if nz.size:
                lo, hi = int(nz[0]), int(nz[-1])
                h._lo, h._w = lo, array("d", dense[lo : hi + 1].tolist())
        return h, off
