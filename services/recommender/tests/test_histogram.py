import math

import numpy as np
import pytest
from recommender.core.histogram import (
    CPU_SCHEME,
    MEMORY_SCHEME,
    BucketScheme,
    DecayingHistogram,
    HistogramError,
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
