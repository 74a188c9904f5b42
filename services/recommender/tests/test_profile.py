import struct
from collections import Counter

import pytest
from recommender.core.histogram import CPU_SCHEME, MEMORY_SCHEME
from recommender.core.profile import CPU, LEVELS, UsageProfile, _quantile_buckets, _rank_quantiles, _Track

T0 = 1_700_000_000 // 86400 * 86400.0  # midnight UTC
HOUR, DAY = 3600, 86400
GIB = 1024**3


def end(v, scheme=CPU_SCHEME):
    return scheme.value_of(scheme.find_bucket(v))


def feed_minutes(p, start, minutes, value_of_minute, step=60):
    for i in range(minutes * 60 // step):
        p.add(start + step * i, value_of_minute(i), None)


# Every 5-minute slot holds the same 10 samples (one per 30 s): 0.1 .. 1.0 core.
CYCLE = lambda i: 0.1 * (i % 10 + 1)


@pytest.mark.parametrize("window", [3600, 86400, 7 * 86400])
def test_identical_slots_pool_exactly(window):
    p = UsageProfile()
    feed_minutes(p, T0, 2 * 24 * 60, CYCLE, step=30)
    cpu, mem = p.windows(T0 + 2 * DAY - 30)[window]
    assert mem is None
    assert cpu.p50 == pytest.approx(end(0.5))
    assert cpu.p90 == pytest.approx(end(0.9))
    # p95 / p99 land in the 1.0-core bucket whose end is above the true max: capped at the max
    assert cpu.p95 == cpu.p99 == cpu.max == pytest.approx(1.0)
    assert cpu.count == min(window // 30, 2 * 24 * 120)


def test_windows_see_different_history():
    p = UsageProfile()
    feed_minutes(p, T0, 24 * 60, lambda i: 2.0)  # day 1: 2 cores
    feed_minutes(p, T0 + DAY, 23 * 60, lambda i: 0.5)  # day 2: 0.5 core
    feed_minutes(p, T0 + DAY + 23 * HOUR, 60, lambda i: 0.25)  # last hour: 0.25 core
    w = p.windows(T0 + 2 * DAY - 60)
    h, d, wk = w[3600][0], w[86400][0], w[7 * 86400][0]
    assert (h.p50, h.p99, h.max) == pytest.approx((0.25, 0.25, 0.25))
    assert d.max == pytest.approx(0.5) and d.p50 == pytest.approx(0.5)
    assert d.count == 24 * 60
    assert wk.max == pytest.approx(2.0)
    assert wk.p50 == pytest.approx(end(0.5)) and wk.p90 == pytest.approx(2.0)


def test_silent_windows_empty_out():
    p = UsageProfile()
    feed_minutes(p, T0, 60, lambda i: 1.0)
    w = p.windows(T0 + 3 * HOUR)
    assert w[3600][0] is None
    assert w[86400][0].max == pytest.approx(1.0)
    assert p.windows(T0 + 9 * DAY)[7 * 86400][0] is None


def test_diurnal_shape_per_utc_hour():
    p = UsageProfile()
    for day in range(2):
        feed_minutes(p, T0 + day * DAY, 24 * 60, lambda i: 0.1 * (i // 60) + 0.1)
    p.add(T0 + 2 * DAY, 0.1, None)  # closes hour 23 of day 2
    cpu, mem = p.diurnal()
    assert all(m is None for m in mem)
    assert cpu == pytest.approx([end(0.1 * h + 0.1) for h in range(24)])


def test_diurnal_smooths_by_half_each_day():
    p = UsageProfile()
    feed_minutes(p, T0, 60, lambda i: 1.0)
    feed_minutes(p, T0 + DAY, 60, lambda i: 4.0)
    p.add(T0 + DAY + HOUR, 1.0, None)
    assert p.diurnal()[0][0] == pytest.approx(0.5 * end(1.0) + 0.5 * end(4.0))


def test_memory_series_and_checkpoint_roundtrip():
    p = UsageProfile()
    for i in range(3 * 24 * 60):
        p.add(T0 + 60 * i, 0.3, GIB * (1 + (i % 7) / 10))
    data = p.save()
    back = UsageProfile.load(data)
    assert back.save() == data
    now = T0 + 3 * DAY - 60
    for window, (cpu, mem) in p.windows(now).items():
        bcpu, bmem = back.windows(now)[window]
        assert (bcpu.p90, bcpu.count) == (cpu.p90, cpu.count)
        assert bmem.p90 == mem.p90 and bmem.max == pytest.approx(mem.max, rel=1e-6)
    day_mem = p.windows(now)[86400][1]
    assert day_mem.max == pytest.approx(1.6 * GIB) and day_mem.p90 == day_mem.max  # capped at the max
    assert day_mem.p50 == pytest.approx(end(1.3 * GIB, MEMORY_SCHEME))
    assert len(data) < 1600


# ---------------------------------------------------------------------- compact layout


def ring_slots(p, level, resource=CPU):
    return [struct.unpack_from("<i", rec)[0] for rec in _Track(p, resource).ring(level)]


# (level, slots fed with one sample each, gap between fed slots) -> the ring keeps the newest
# `slots` closed ones, however old, as a bounded deque would
@pytest.mark.parametrize(
    "level, fed, gap",
    [(0, 5, 1), (0, 12, 1), (0, 13, 1), (0, 40, 1), (0, 30, 7), (1, 24, 1), (1, 25, 1), (1, 60, 3), (2, 7, 1), (2, 20, 2)],
)
def test_ring_wraparound_keeps_the_newest_slots(level, fed, gap):
    p = UsageProfile()
    slot_s = LEVELS[level].slot_s
    start = int(T0) // slot_s
    for i in range(fed + 1):  # the last sample only closes the slot before it
        p.add((start + i * gap) * slot_s + 1, 0.5, None)
    closed = [start + i * gap for i in range(fed)]
    assert ring_slots(p, level) == closed[-LEVELS[level].slots :]
    back = UsageProfile.load(p.save())
    assert ring_slots(back, level) == closed[-LEVELS[level].slots :]
    assert back.save() == p.save()


def reference_open_counts(samples, level):
    """What a level's open slot holds: counts of the samples since its slot opened (late
    samples included), by bucket."""
    slot_s = LEVELS[level].slot_s
    top = max(int(t // slot_s) for t, _ in samples)
    opened = next(i for i, (t, _) in enumerate(samples) if int(t // slot_s) == top)
    return sorted(Counter(CPU_SCHEME.find_bucket(v) for _, v in samples[opened:]).items())


STREAMS = {
    "one slot": [(T0 + 10 * i, 0.1 * (i % 7 + 1)) for i in range(25)],
    "across slots and hours": [(T0 + 50 * i, 0.05 * (i % 13 + 1)) for i in range(400)],
    "late samples": [(T0 + 60 * i - (500 if i % 9 == 0 else 0), 0.3 + 0.1 * (i % 5)) for i in range(200)],
    "wide then narrow": [(T0 + 30 * i, 5.0 if i < 20 else 0.02 * (i % 3 + 1)) for i in range(300)],
    # busy 5-minute slots (their samples outgrow the raw buffer) then sparse ones, one a slot
    "busy then sparse": [(T0 + 5 * i, 0.1 * (i % 11 + 1)) for i in range(1500)]
    + [(T0 + 7500 + 300 * i, 0.2 + 0.1 * (i % 4)) for i in range(30)],
    "one sample a slot": [(T0 + 300 * i + 17, 0.05 * (i % 9 + 1)) for i in range(100)],
}


@pytest.mark.parametrize("stream", STREAMS)
@pytest.mark.parametrize("level", range(3))
def test_open_counts_equal_a_per_level_count(stream, level):
    samples = STREAMS[stream]
    p = UsageProfile()
    for t, v in samples:
        p.add(t, v, None)
    assert _Track(p, CPU).open_counts(level) == reference_open_counts(samples, level)


# n samples of one bucket spread evenly over `span` seconds: within one 5-minute slot they are
# counted directly; over two hours they reach the day's count when the hours close and fold.
@pytest.mark.parametrize(
    "n, span, typecode",
    [(255, 299, "B"), (256, 299, "H"), (65535, 299, "H"), (65536, 299, "I"), (255, 7199, "B"), (256, 7199, "H")],
)
def test_counts_widen_when_a_bucket_outgrows_its_type(n, span, typecode):
    p = UsageProfile()
    for i in range(n):
        p.add(T0 + i * span / n, 0.5, None)
    p.add(T0 + 2 * HOUR, 4.0, None)  # closes the hours: their counts fold into the day's
    assert p._counts.typecode == typecode
    day = dict(_Track(p, CPU).open_counts(2))
    assert day == {CPU_SCHEME.find_bucket(0.5): n, CPU_SCHEME.find_bucket(4.0): 1}
    assert UsageProfile.load(p.save()).save() == p.save()


def checkpoint_states():
    empty = UsageProfile()
    one = UsageProfile()
    one.add(T0 + 5, 0.4, 3 * GIB)
    busy = UsageProfile()
    for i in range(9 * 24 * 60):
        busy.add(T0 + 60 * i + (i % 3), 0.2 + (i % 17) * 0.1, GIB * (1 + (i % 11) / 10) if i % 4 else None)
    dense = UsageProfile()
    for i in range(3030):  # every 5 s: 5-minute slots outgrow the raw samples
        dense.add(T0 + 5 * i, 0.05 * (i % 37 + 1), GIB * (2 + (i % 13) / 10))
    return {"empty": empty, "one sample": one, "nine days": busy, "busy slots": dense}


@pytest.mark.parametrize("name", ["empty", "one sample", "nine days", "busy slots"])
def test_checkpoint_reload_is_byte_identical(name):
    p = checkpoint_states()[name]
    data = p.save()
    back = UsageProfile.load(data)
    assert back.save() == data
    now = T0 + 9 * DAY
    assert back.windows(now) == p.windows(now) and back.diurnal() == p.diurnal()
    # and the reloaded profile goes on exactly as the original
    for q in (p, back):
        q.add(now + 7, 3.0, 5 * GIB)
        q.add(now + 3 * HOUR, 0.1, GIB)
    assert back.save() == p.save()


def test_checkpoint_with_levels_that_disagree_is_refused():
    p = checkpoint_states()["nine days"]
    data = bytearray(p.save())
    struct.pack_into("<i", data, 0, struct.unpack_from("<i", data, 0)[0] + 12)  # 1h open slot an hour on
    with pytest.raises(ValueError):
        UsageProfile.load(bytes(data))


@pytest.mark.parametrize(
    "samples",
    [[7], [3, 3], [1, 2], [5, 9, 9, 12], list(range(10)), [4] * 9 + [30], [2] * 60, sorted([i * 7 % 23 for i in range(16)])],
)
def test_quantiles_of_single_samples_equal_those_of_counts(samples):
    items = sorted(Counter(samples).items())
    assert _rank_quantiles(sorted(samples)) == _quantile_buckets(items)
