import math

import numpy as np
import pytest
from recommender.core.histogram import (
    CPU_SCHEME,
    MEMORY_SCHEME,
    BucketScheme,
    DecayingHistogram,
    HistogramError,
    weighted_percentile_bucket,
)

DAY = 86400.0
T0 = 1_700_000_000 // 86400 * 86400.0  # a multiple of the half-life: decay factor 1 at T0


@pytest.mark.parametrize(
    "scheme, buckets, starts, last_start",
    [
        (CPU_SCHEME, 176, [0, 0.01, 0.0205, 0.031525, 0.043101, 0.055256], 1021.109),
        (BucketScheme(1000.0, 0.001), 223, [0, 0.001, 0.00205, 0.003152, 0.00431, 0.005526], 1011.686),
        (MEMORY_SCHEME, 176, [0, 1e7, 2.05e7, 3.1525e7, 4.310125e7, 5.525631e7], 1.0211e12),
    ],
)
def test_bucket_scheme_matches_vpa(scheme, buckets, starts, last_start):
    assert scheme.num_buckets == buckets
    assert list(scheme.starts[:6]) == pytest.approx(starts, rel=5e-4)  # reference rounds to 4-5 digits
    assert scheme.starts[-1] == pytest.approx(last_start, rel=1e-4)


# value (cores) -> (bucket, Percentile() result = bucket end), reference section 1.3
CPU_CASES = [
    (0.005, 0, 0.01),
    (0.025, 2, 0.031525),
    (0.1, 8, 0.110266),
    (0.25, 16, 0.258404),
    (0.5, 25, 0.511135),
    (1.0, 36, 1.01628),
    (2.0, 49, 2.09348),
    (4.0, 62, 4.1247),
    (5000.0, 175, 1021.109),  # beyond max: last bucket, reported by its start
]


@pytest.mark.parametrize("value, bucket, result", CPU_CASES)
def test_single_cpu_sample_percentile(value, bucket, result):
    assert CPU_SCHEME.find_bucket(value) == bucket
    assert int(CPU_SCHEME.find_buckets(np.array([value]))[0]) == bucket
    h = DecayingHistogram(CPU_SCHEME)
    h.add_sample(value, 1.0, T0)
    for p in (0.0, 0.5, 0.9, 1.0):
        assert h.percentile(p) == pytest.approx(result, rel=1e-5)


@pytest.mark.parametrize(
    "value, bucket, result",
    [(1e9, 36, 1.01628e9), (1024**3, 37, 1.0771e9), (4 * 1024**3, 63, 4.34093e9), (256 * 1024**2, 17, 2.81324e8)],
)
def test_single_memory_sample_percentile(value, bucket, result):
    assert MEMORY_SCHEME.find_bucket(value) == bucket
    h = DecayingHistogram(MEMORY_SCHEME)
    h.add_sample(value, 1.0, T0)
    assert h.percentile(0.9) == pytest.approx(result, rel=1e-4)


def test_empty_histogram_reports_zero():
    h = DecayingHistogram(CPU_SCHEME)
    assert h.is_empty() and h.percentile(0.9) == 0.0


# Ten samples 1..10 cores, weight 1 at one time: percentile = end of the bucket holding the k-th.
@pytest.mark.parametrize("p, value", [(0.1, 1.0), (0.5, 5.0), (0.9, 9.0), (0.95, 10.0), (1.0, 10.0)])
def test_percentile_over_equal_weights(p, value):
    h = DecayingHistogram(CPU_SCHEME)
    for v in range(1, 11):
        h.add_sample(float(v), 1.0, T0)
    assert h.percentile(p) == pytest.approx(CPU_SCHEME.value_of(CPU_SCHEME.find_bucket(value)))


# 1 core at T0 and 2 cores one half-life later: the old sample weighs half of the new one,
# i.e. a third of the total. Without decay it would be half and p0.4 would give 1 core.
@pytest.mark.parametrize(
    "half_life, p, expected",
    [
        (DAY, 0.33, 1.01628),
        (DAY, 0.34, 2.09348),
        (DAY, 0.5, 2.09348),
        (DAY / 2, 0.19, 1.01628),  # two half-lives: 1/4 vs 1 -> 1/5 of the total
        (DAY / 2, 0.21, 2.09348),
    ],
)
def test_decay_one_half_life_weighs_half(half_life, p, expected):
    h = DecayingHistogram(CPU_SCHEME, half_life_s=half_life)
    h.add_sample(1.0, 1.0, T0)
    h.add_sample(2.0, 1.0, T0 + DAY)
    assert h.percentile(p) == pytest.approx(expected, rel=1e-5)
    w_old = h.weights[CPU_SCHEME.find_bucket(1.0)]
    w_new = h.weights[CPU_SCHEME.find_bucket(2.0)]
    assert w_old / w_new == pytest.approx(0.5 ** (DAY / half_life))


def test_reference_shift_keeps_weights_finite_and_drops_ancient_samples():
    h = DecayingHistogram(CPU_SCHEME, half_life_s=3600)
    h.add_sample(4.0, 1.0, T0)
    h.add_sample(1.0, 1.0, T0 + 150 * 3600)  # 150 half-lives later: beyond 2^100
    assert np.all(np.isfinite(h.weights))
    assert h.reference_ts == T0 + 150 * 3600
    assert h.weights[CPU_SCHEME.find_bucket(4.0)] == 0.0  # 2^-150 is below epsilon
    assert h.percentile(1.0) == pytest.approx(1.01628, rel=1e-5)


def test_reference_shift_preserves_relative_weights():
    shifted = DecayingHistogram(CPU_SCHEME, half_life_s=3600)
    shifted.add_sample(1.0, 1.0, T0)
    shifted.add_sample(2.0, 1.0, T0 + 99 * 3600)
    shifted.add_sample(3.0, 2 ** 99, T0 + 101 * 3600)  # forces a shift; weights rescale by 2^-k
    ratio = shifted.weights[CPU_SCHEME.find_bucket(3.0)] / shifted.weights[CPU_SCHEME.find_bucket(2.0)]
    assert ratio == pytest.approx(2 ** 99 * 4, rel=1e-9)


def test_vectorised_add_equals_scalar_add():
    rng = np.random.default_rng(7)
    values = rng.gamma(2.0, 0.3, size=2000)
    weights = rng.uniform(0.1, 2.0, size=2000)
    ts = T0 + np.sort(rng.uniform(0, 5 * DAY, size=2000))
    a, b = DecayingHistogram(CPU_SCHEME), DecayingHistogram(CPU_SCHEME)
    for v, w, t in zip(values, weights, ts):
        a.add_sample(float(v), float(w), float(t))
    b.add_samples(values, weights, ts)
    a.decay_factor(float(ts.max()))
    assert b.weights / b.weights.sum() == pytest.approx(a.weights / a.weights.sum(), rel=1e-9, abs=1e-12)
    for p in (0.5, 0.9, 0.95, 0.99):
        assert a.percentile(p) == b.percentile(p)


def test_merge_aligns_references():
    a = DecayingHistogram(CPU_SCHEME)
    a.add_sample(1.0, 1.0, T0)
    b = DecayingHistogram(CPU_SCHEME)
    b.add_sample(2.0, 1.0, T0 + 3 * DAY)
    a.merge(b)
    assert a.reference_ts == T0 + 3 * DAY
    assert a.weights[CPU_SCHEME.find_bucket(1.0)] == pytest.approx(1 / 8)
    assert a.weights[CPU_SCHEME.find_bucket(2.0)] == pytest.approx(1.0)
    c = DecayingHistogram(CPU_SCHEME)
    c.add_sample(1.0, 1.0, T0)
    b.merge(c)  # the other way round gives the same weights
    assert b.weights == pytest.approx(a.weights)


def test_merge_refuses_different_half_life():
    with pytest.raises(HistogramError):
        DecayingHistogram(CPU_SCHEME, 3600).merge(DecayingHistogram(CPU_SCHEME, 7200))


def test_subtract_clamps_at_zero():
    h = DecayingHistogram(MEMORY_SCHEME)
    h.add_sample(5e8, 1.0, T0)
    h.subtract_sample(5e8, 3.0, T0)
    assert h.is_empty()


def test_negative_weight_rejected():
    with pytest.raises(HistogramError):
        DecayingHistogram(CPU_SCHEME).add_sample(1.0, -1.0, T0)


def test_checkpoint_roundtrip_is_compact_and_exact_enough():
    rng = np.random.default_rng(3)
    h = DecayingHistogram(CPU_SCHEME)
    h.add_samples(rng.lognormal(0, 1, 50_000), 1.0, T0 + rng.uniform(0, 8 * DAY, 50_000))
    data = h.save()
    nz = int(np.count_nonzero(h.weights))
    assert len(data) == 18 + 9 * nz <= 18 + 9 * 176
    back, used = DecayingHistogram.load(data, CPU_SCHEME, h.half_life_s)
    assert used == len(data)
    assert back.reference_ts == h.reference_ts
    assert np.array_equal(back.weights, h.weights)
    for p in np.linspace(0, 1, 41):
        assert back.percentile(p) == h.percentile(p)
    empty, n = DecayingHistogram.load(DecayingHistogram(CPU_SCHEME).save(), CPU_SCHEME, DAY)
    assert empty.is_empty() and empty.reference_ts is None and n == 18
    assert math.isfinite(back.total_weight)


# ---------------------------------------------------------------------- sparse bucket window


class DenseReference:
    """The plain VPA histogram over all buckets, to check the windowed one against."""

    def __init__(self, scheme, half_life=DAY):
        self.scheme, self.half_life = scheme, half_life
        self.weights = np.zeros(scheme.num_buckets)
        self.ref = None

    def add(self, value, weight, t):
        if self.ref is None:
            self.ref = math.floor(t / self.half_life + 0.5) * self.half_life
        self.weights[self.scheme.find_bucket(value)] += weight * 2.0 ** ((t - self.ref) / self.half_life)

    def sub(self, value, weight, t):
        b = self.scheme.find_bucket(value)
        w = weight * 2.0 ** ((t - self.ref) / self.half_life)
        self.weights[b] = 0.0 if w > self.weights[b] - 1e-4 else self.weights[b] - w


# (samples as (cores, hours after T0), window the histogram must hold afterwards)
WINDOW_CASES = [
    ("one sample", [(0.5, 0)], (25, 25)),
    ("grows above", [(0.5, 0), (2.0, 1)], (25, 49)),
    ("grows below", [(2.0, 0), (0.1, 1)], (8, 49)),
    ("below then above", [(0.5, 0), (0.005, 2), (4.0, 3)], (0, 62)),
    ("inside adds no bucket", [(0.1, 0), (4.0, 1), (1.0, 2), (0.25, 3)], (8, 62)),
    ("beyond max lands in the last bucket", [(1.0, 0), (5000.0, 5)], (36, 175)),
]


@pytest.mark.parametrize("name, samples, window", WINDOW_CASES, ids=[c[0] for c in WINDOW_CASES])
def test_window_growth_matches_dense_histogram(name, samples, window):
    h, ref = DecayingHistogram(CPU_SCHEME), DenseReference(CPU_SCHEME)
    for cores, hours in samples:
        h.add_sample(cores, 0.7, T0 + hours * 3600)
        ref.add(cores, 0.7, T0 + hours * 3600)
    assert (h._lo, h._lo + len(h._w) - 1) == window
    assert h.weights.tolist() == ref.weights.tolist()
    for p in (0.0, 0.3, 0.5, 0.9, 0.95, 1.0):
        assert h.percentile(p) == CPU_SCHEME.value_of(weighted_percentile_bucket(ref.weights, p))
    back, _ = DecayingHistogram.load(h.save(), CPU_SCHEME, DAY)
    assert (back._lo, back._lo + len(back._w) - 1) == window
    assert back.save() == h.save()


def test_vectorised_add_grows_the_window_like_scalar_adds():
    values = np.array([0.5, 0.02, 7.0, 0.5, 1.3])
    ts = T0 + np.arange(5) * 600.0
    batch, single = DecayingHistogram(CPU_SCHEME), DecayingHistogram(CPU_SCHEME)
    batch.add_sample(1.0, 1.0, T0)
    single.add_sample(1.0, 1.0, T0)
    batch.add_samples(values, 1.0, ts)
    for v, t in zip(values, ts):
        single.add_sample(float(v), 1.0, float(t))
    lo, hi = CPU_SCHEME.find_bucket(0.02), CPU_SCHEME.find_bucket(7.0)
    assert (lo, hi) == (1, 73)
    assert (batch._lo, len(batch._w)) == (single._lo, len(single._w)) == (lo, hi - lo + 1)
    assert batch.weights == pytest.approx(single.weights, rel=1e-15)


def test_replaced_memory_peaks_shrink_the_window():
    # a growing peak: each new peak replaces the last one (VPA subtracts the old peak)
    h, ref = DecayingHistogram(MEMORY_SCHEME), DenseReference(MEMORY_SCHEME)
    peaks = [2e8, 5e8, 9e8, 1.6e9]
    for old, new in zip([None] + peaks, peaks):
        for hist in (h, ref):
            if old is not None:
                (hist.subtract_sample if hist is h else hist.sub)(old, 1.0, T0)
            (hist.add_sample if hist is h else hist.add)(new, 1.0, T0)
    assert h._lo == h._lo + len(h._w) - 1 == MEMORY_SCHEME.find_bucket(1.6e9)
    assert h.weights.tolist() == ref.weights.tolist()


def test_reference_shift_scales_the_bucket_being_added_to():
    # VPA computes the decay factor (shifting the reference) before reading the bucket, so a
    # bucket that already holds weight is rescaled like every other one.
    h = DecayingHistogram(CPU_SCHEME)
    h.add_sample(2.0, 1.0, T0)
    h.add_sample(1.0, 1.0, T0 + 99 * DAY)
    h.add_sample(4.0, 1.0, T0 + 99 * DAY)
    h.add_sample(4.0, 1.0, T0 + 101 * DAY)  # more than 100 half-lives after T0: shift to T0 + 101 d
    assert h.reference_ts == T0 + 101 * DAY
    nz = {int(b): float(h.weights[b]) for b in np.flatnonzero(h.weights)}
    assert nz == {CPU_SCHEME.find_bucket(1.0): 0.25, CPU_SCHEME.find_bucket(4.0): 1.25}  # 2.0 at T0 fell below epsilon
    assert h.percentile(0.1) == pytest.approx(1.01628, rel=1e-5)


def test_merge_covers_both_windows():
    a, b = DecayingHistogram(CPU_SCHEME), DecayingHistogram(CPU_SCHEME)
    a.add_sample(0.1, 1.0, T0)
    b.add_sample(4.0, 1.0, T0 + DAY)
    a.merge(b)
    assert (a._lo, a._lo + len(a._w) - 1) == (8, 62)
    assert a.weights[8] == 0.5 and a.weights[62] == 1.0
