import math

import numpy as np
import pytest
from koordcommon.resources import Resources
from node_agent.core.aggregate import percentile_index, to_resources, window_stats
from node_agent.core.rates import CounterRates
from node_agent.core.ring import SlotRing


def test_ring_keeps_the_last_capacity_rounds_in_order():
    ring = SlotRing(3, slots=1)
    for t in range(1, 6):
        ring.push(t * 1000, {"a": (t * 10.0, t * 100.0)})
    ts, v = ring.window(0)
    assert ts.tolist() == [3000, 4000, 5000]
    assert v[:, ring.slot_of("a"), 0].tolist() == [30.0, 40.0, 50.0]
    ts, v = ring.window(3000, 4000)  # (since, until]
    assert ts.tolist() == [4000]


def test_ring_missing_series_are_nan_and_slots_grow_and_are_reused():
    ring = SlotRing(4, slots=1)
    ring.push(1000, {"a": (1.0, 2.0), "b": (3.0, 4.0), "c": (5.0, 6.0)})  # grows 1 -> 2 -> 4 slots
    ring.push(2000, {"a": (7.0, 8.0)})
    _ts, v = ring.window(0)
    b = ring.slot_of("b")
    assert v[0, b].tolist() == [3.0, 4.0]
    assert all(math.isnan(x) for x in v[1, b])
    ring.forget("b")
    assert "b" not in ring
    ring.push(3000, {"d": (9.0, 9.0)})
    assert ring.slot_of("d") == b  # freed slot reused; the old history of b is gone
    _, v = ring.window(0)
    assert np.isnan(v[:2, b]).all()


@pytest.mark.parametrize(
    "n,p,idx",
    [
        (10, 0.5, 4),
        (10, 0.9, 8),
        (10, 0.95, 8),  # 9.5 -> 9 - 1
        (10, 0.99, 8),
        (100, 0.99, 98),
        (20, 0.95, 18),
        (3, 0.9, 1),  # 2.7 -> 2 - 1
        (1, 0.5, 0),  # 0.5 -> 0 - 1 -> clamped to 0
        (300, 0.9, 269),
        (600, 0.95, 569),
    ],
)
def test_percentile_index_is_koordinators(n, p, idx):
    assert percentile_index(n, p) == idx


def test_window_stats_exact_numbers_and_no_interpolation():
    ring = SlotRing(20, slots=1)
    for i, cpu in enumerate([7, 1, 9, 3, 5, 10, 2, 8, 4, 6]):  # 1..10 shuffled
        ring.push(1000 * (i + 1), {"n": (float(cpu) * 100, float(cpu) * 1024)})
    ts, v = ring.window(0)
    st = window_stats(ts, v, np.array([ring.slot_of("n")]))
    assert st.ok.tolist() == [True]
    assert to_resources(st.avg[0]) == Resources(550, 5632)
    assert to_resources(st.pct["p50"][0]) == Resources(500, 5120)  # sorted[4]
    assert to_resources(st.pct["p90"][0]) == Resources(900, 9216)  # sorted[8]
    assert to_resources(st.pct["p95"][0]) == Resources(900, 9216)
    assert to_resources(st.pct["p99"][0]) == Resources(900, 9216)


@pytest.mark.parametrize("span_s,ok", [(149, False), (150, True), (299, True)])
def test_window_is_empty_when_samples_cover_less_than_half(span_s, ok):
    ring = SlotRing(400, slots=1)
    ring.push(1_000_000, {"n": (1.0, 1.0)})
    ring.push(1_000_000 + span_s * 1000, {"n": (3.0, 3.0)})
    ts, v = ring.window(0)
    st = window_stats(ts, v, np.array([0]), duration_ms=300_000)
    assert st.ok.tolist() == [ok]


def test_truncation_guards_float_noise():
    assert to_resources(np.array([0.1 + 0.2, 0.0]) * 1000) == Resources(300, 0)
    assert to_resources(np.array([299.9, 1023.9])) == Resources(299, 1023)


@pytest.mark.parametrize(
    "reads,expected",
    [
        # (counter, t_ns) reads of one series -> rate per second of each read
        ([(0, 0), (500_000_000, 1_000_000_000)], [None, 5e8]),
        ([(100, 0), (50, 10**9), (1_050, 2 * 10**9)], [None, None, 1000.0]),  # reset -> new baseline
        ([(0, 0), (10, 0)], [None, None]),  # no time passed
        ([(0, 0), (10**9, 30 * 10**9)], [None, None]),  # older than the TTL: a gap, not a rate
    ],
)
def test_counter_rates(reads, expected):
    rates = CounterRates(ttl_ns=20 * 10**9)
    assert [rates.rate("c", c, t) for c, t in reads] == expected


def test_counter_rates_vanished_series_restart_from_baseline():
    rates = CounterRates()
    rates.rate("a", 0, 0)
    rates.rate("b", 0, 0)
    rates.retain(["a"])
    assert len(rates) == 1
    assert rates.rate("b", 10**9, 10**9) is None
    assert rates.rate("a", 2 * 10**9, 10**9) == 2e9
