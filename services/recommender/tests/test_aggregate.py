import numpy as np
import pytest
from recommender.core.aggregate import MIB, AggregateState, OOMDiscarded, pod_key
from recommender.core.histogram import CPU_SCHEME, MEMORY_SCHEME

DAY = 86400.0
T0 = 1_700_000_000 // 86400 * 86400.0  # multiple of the half-life: decay factor 1 at T0
P1, P2, P3 = pod_key("pod-1"), pod_key("pod-2"), pod_key("pod-3")


def nonzero(hist, scheme):
    """{bucket start value: weight} of the non-empty buckets."""
    return {int(b): float(hist.weights[b]) for b in np.flatnonzero(hist.weights)}


def mem_bucket(mb):
    return MEMORY_SCHEME.find_bucket(mb * MIB)


# VPA TestAggregateContainerUsageSamples: CPU weights are max(request, 0.1).
@pytest.mark.parametrize("request_cores, weight", [(2.3, 2.3), (0.05, 0.1), (0.0, 0.1), (4.0, 4.0)])
def test_cpu_samples_weighted_by_request(request_cores, weight):
    st = AggregateState()
    for pod, usage in ((P1, 3.14), (P2, 6.28), (P3, 1.57)):
        assert st.add_cpu_sample(pod, T0, usage, request_cores)
    got = nonzero(st.cpu, CPU_SCHEME)
    assert got == {CPU_SCHEME.find_bucket(u): pytest.approx(weight) for u in (3.14, 6.28, 1.57)}
    assert st.total_samples == 3 and st.first_sample_ts == st.last_sample_ts == T0


@pytest.mark.parametrize(
    "t, usage, accepted",
    [
        (T0 + 60, 1.0, True),
        (T0, 1.0, False),  # same timestamp again: a redelivery, not counted twice
        (T0 - 60, 1.0, False),  # out of order
        (T0 + 60, -0.5, False),  # negative usage
    ],
)
def test_cpu_sample_discard_rules(t, usage, accepted):
    st = AggregateState()
    st.add_cpu_sample(P1, T0, 1.0, 1.0)
    assert st.add_cpu_sample(P1, t, usage, 1.0) is accepted
    assert st.total_samples == (2 if accepted else 1)


def test_memory_one_peak_per_window_at_window_end():
    # VPA: memory 5, 10 (same window), 2 (next window) -> add 5; sub 5, add 10; add 2
    st = AggregateState()
    st.add_memory_sample(P1, T0, 500 * MIB)
    # stamped at the window end T0 + 1 day, which also becomes the decay reference (weight 1)
    assert st.pods[P1].window_end == T0 + DAY
    assert nonzero(st.memory, MEMORY_SCHEME) == {mem_bucket(500): pytest.approx(1.0)}
    st.add_memory_sample(P1, T0 + 3600, 1000 * MIB)
    assert nonzero(st.memory, MEMORY_SCHEME) == {mem_bucket(1000): pytest.approx(1.0)}
    st.add_memory_sample(P1, T0 + 7200, 800 * MIB)  # below the peak: nothing changes
    assert nonzero(st.memory, MEMORY_SCHEME) == {mem_bucket(1000): pytest.approx(1.0)}
    st.add_memory_sample(P1, T0 + DAY + 60, 200 * MIB)  # next window, stamped T0 + 2 days: weighs 2
    assert nonzero(st.memory, MEMORY_SCHEME) == {
        mem_bucket(1000): pytest.approx(1.0),
        mem_bucket(200): pytest.approx(2.0),
    }
    st.add_memory_sample(P1, T0 + 5 * DAY + 10, 300 * MIB)  # skips empty windows: ends T0 + 6 days
    assert st.pods[P1].window_end == T0 + 6 * DAY


def test_memory_peaks_of_two_pods_both_count():
    st = AggregateState()
    st.add_memory_sample(P1, T0, 500 * MIB)
    st.add_memory_sample(P2, T0 + 10, 1500 * MIB)
    got = nonzero(st.memory, MEMORY_SCHEME)
    assert set(got) == {mem_bucket(500), mem_bucket(1500)}


# VPA model/container_test.go OOM vectors (values in MiB).
def test_oom_increased_by_bump_up():
    st = AggregateState()
    assert st.record_oom(P1, T0, 1000 * MIB) == 1200 * MIB
    assert set(nonzero(st.memory, MEMORY_SCHEME)) == {mem_bucket(1200)}


def test_oom_increased_by_min():
    st = AggregateState()
    assert st.record_oom(P1, T0, 1 * MIB) == 101 * MIB


def test_oom_maxed_with_known_sample():
    st = AggregateState()
    st.add_memory_sample(P1, T0, 3000 * MIB)
    assert st.record_oom(P1, T0 + 60, 1000 * MIB) == pytest.approx(3600 * MIB, abs=1)
    assert set(nonzero(st.memory, MEMORY_SCHEME)) == {mem_bucket(3600)}


def test_oom_does_not_run_away():
    st = AggregateState()
    st.record_oom(P1, T0, 1000 * MIB)
    st.record_oom(P1, T0 + 60, 999 * MIB)
    st.record_oom(P1, T0 + 120, 999 * MIB)
    assert set(nonzero(st.memory, MEMORY_SCHEME)) == {mem_bucket(1200)}
    assert st.record_oom(P1, T0 + 180, 2000 * MIB) == 2400 * MIB
    assert set(nonzero(st.memory, MEMORY_SCHEME)) == {mem_bucket(2400)}


def test_oom_discards_old_sample():
    st = AggregateState()
    st.add_memory_sample(P1, T0, 1000 * MIB)
    with pytest.raises(OOMDiscarded):
        st.record_oom(P1, T0 - 30 * 3600, 1000 * MIB)
    assert set(nonzero(st.memory, MEMORY_SCHEME)) == {mem_bucket(1000)}


def test_oom_in_new_window():
    st = AggregateState()
    st.add_memory_sample(P1, T0, 2000 * MIB)
    assert st.record_oom(P1, T0 + 2 * DAY, 1000 * MIB) == 2400 * MIB
    assert st.pods[P1].window_end == T0 + 3 * DAY
    assert set(nonzero(st.memory, MEMORY_SCHEME)) == {mem_bucket(2000), mem_bucket(2400)}


def test_checkpoint_roundtrip_keeps_everything():
    st = AggregateState()
    rng = np.random.default_rng(1)
    for i in range(3000):
        t = T0 + i * 60
        for pod in (P1, P2):
            st.add_cpu_sample(pod, t, float(rng.gamma(2, 0.2)), 0.5)
            st.add_memory_sample(pod, t, float(rng.normal(800, 50)) * MIB, 1024 * MIB)
    st.record_oom(P1, T0 + 3000 * 60, 1024 * MIB)
    data = st.save()
    assert len(data) <= 4096
    back = AggregateState.load(data)
    assert back.save() == data
    assert back.total_samples == 6000 and back.first_sample_ts == T0
    assert back.pods[P1].last_cpu_ts == st.pods[P1].last_cpu_ts
    for p in (0.5, 0.9, 0.95):
        assert back.cpu.percentile(p) == st.cpu.percentile(p)
        assert back.memory.percentile(p) == st.memory.percentile(p)
    # the restored dedupe state still rejects what was already counted
    assert not back.add_cpu_sample(P1, T0 + 2999 * 60, 1.0, 0.5)


def test_prune_and_expiry():
    st = AggregateState()
    st.add_cpu_sample(P1, T0, 1.0, 1.0)
    st.add_cpu_sample(P2, T0 + 2 * DAY, 1.0, 1.0)
    st.prune_pods(T0 + 2 * DAY)
    assert set(st.pods) == {P2}
    assert not st.is_expired(T0 + 9 * DAY) and st.is_expired(T0 + 10 * DAY)


def test_same_oom_reported_again_counts_once():
    st = AggregateState()
    st.record_oom(P1, T0, 1000 * MIB)
    st.add_memory_sample(P1, T0 + 60, 1100 * MIB)  # peak below the bump: histogram keeps 1200
    with pytest.raises(OOMDiscarded):
        st.record_oom(P1, T0, 1000 * MIB)  # every later sample repeats the last OOM time
    assert set(nonzero(st.memory, MEMORY_SCHEME)) == {mem_bucket(1200)}
    back = AggregateState.load(st.save())
    with pytest.raises(OOMDiscarded):
        back.record_oom(P1, T0, 1000 * MIB)


# ---------------------------------------------------------------------- compact pods


def test_pods_keep_first_seen_order_through_prune_and_reload():
    st = AggregateState()
    st.add_cpu_sample(P1, T0, 1.0, 1.0)
    st.add_memory_sample(P2, T0 + DAY, 500 * MIB)
    st.add_cpu_sample(P3, T0 + 2 * DAY, 1.0, 1.0)
    st.add_cpu_sample(P2, T0 + 2 * DAY, 1.0, 1.0)
    assert list(st.pods) == [P1, P2, P3] and st.pod_count() == 3
    assert st.pods_seen_since(T0 + DAY) == 2 and st.pods_seen_since(T0 + 3 * DAY) == 0
    st.prune_pods(T0 + 2 * DAY + 60)  # P1 silent for two days
    assert list(st.pods) == [P2, P3]
    p2 = st.pods[P2]
    assert (p2.last_cpu_ts, p2.last_memory_ts, p2.window_end, p2.memory_peak) == (T0 + 2 * DAY, T0 + DAY, T0 + 2 * DAY, 500 * MIB)
    back = AggregateState.load(st.save())
    assert list(back.pods) == [P2, P3] and back.pods == st.pods and back.save() == st.save()


def test_a_key_spanning_two_stored_keys_is_a_new_pod():
    a, b = b"\x00\x00\x00\x00WXYZ", b"ABCD\x00\x00\x00\x00"
    straddle = a[4:] + b[:4]  # appears inside the stored keys, across their boundary
    st = AggregateState()
    st.add_cpu_sample(a, T0, 1.0, 1.0)
    st.add_cpu_sample(b, T0 + 60, 1.0, 1.0)
    assert st.add_cpu_sample(straddle, T0 + 30, 1.0, 1.0)  # not taken for a's or b's later sample
    assert list(st.pods) == [a, b, straddle]
    assert [p.last_cpu_ts for p in st.pods.values()] == [T0, T0 + 60, T0 + 30]


def test_pod_keys_must_be_pod_key_digests():
    with pytest.raises(ValueError):
        AggregateState().add_cpu_sample(b"short", T0, 1.0, 1.0)


def test_eight_days_of_three_pods_fit_in_3_5_kib_of_heap():
    # The goal is 4 KiB per tracked container; the engine's key and indexes take about half
    # a KiB of that (bench/recommender.py measures the whole).
    import gc
    import tracemalloc

    rng = np.random.default_rng(5)
    pods = [pod_key(f"web-{i}") for i in range(3)]
    usage = rng.gamma(4.0, 0.25, (8 * 24 * 60, 3)).tolist()
    tracemalloc.start()
    st = AggregateState()
    for m, row in enumerate(usage):
        for p, cpu in zip(pods, row):
            st.add_cpu_sample(p, T0 + 60 * m, cpu, 1.0)
            st.add_memory_sample(p, T0 + 60 * m, cpu * 1.5e9 + 2e8, 2e9)
    gc.collect()  # also empties the interpreter's free lists: only live objects are left
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/recommender/core/*")])
    tracemalloc.stop()
    heap = sum(t.size for t in snap.traces)
    assert 2048 < heap <= 3584
    assert len(st.save()) <= 4096
