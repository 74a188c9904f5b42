import pytest
from recommender.core.histogram import CPU_SCHEME, MEMORY_SCHEME
from recommender.core.profile import UsageProfile

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
