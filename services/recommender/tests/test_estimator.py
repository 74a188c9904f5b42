import pytest
from recommender.core.aggregate import MIB, AggregateState, pod_key
from recommender.core.estimator import (
    MAX_RESOURCE_AMOUNT,
    Estimate,
    EstimatorConfig,
    changed_beyond,
    confidence,
    estimate,
    savings,
)
from recommender.core.histogram import CPU_SCHEME, MEMORY_SCHEME

T0 = 1_700_000_000 // 86400 * 86400.0
GIB = 1024**3
P = pod_key("p")


def steady(minutes: int, cpu: float, mem: float, request: float = 1.0) -> AggregateState:
    """One sample a minute for `minutes` minutes (minutes + 1 samples)."""
    st = AggregateState()
    for i in range(minutes + 1):
        st.add_cpu_sample(P, T0 + 60 * i, cpu, request)
        st.add_memory_sample(P, T0 + 60 * i, mem)
    return st


def test_one_day_of_one_core_and_one_gib():
    est = estimate(steady(1440, 1.0, GIB))
    assert est.confidence == pytest.approx(1.0)
    # p90 bucket end 1.01628 cores -> 1016m -> x1.15 = 1168m; upper x (1 + 1/1) ; lower x 1.001^-2
    assert est.target.cpu_milli == 1168
    assert est.upper_bound.cpu_milli == 2336
    assert est.lower_bound.cpu_milli == int(1168 / 1.001**2) == 1165
    mem_p = int(MEMORY_SCHEME.value_of(MEMORY_SCHEME.find_bucket(GIB)))  # 1.0771e9
    assert est.target.memory_bytes == int(mem_p * 1.15) == pytest.approx(1.23866e9, rel=1e-5)
    assert est.upper_bound.memory_bytes == 2 * int(mem_p * 1.15)


# history length -> (upper multiplier, lower multiplier), reference section 1.7 (1 sample/min)
@pytest.mark.parametrize(
    "minutes, upper, lower",
    [(5, 289, 0.6028), (30, 49, 0.9105), (60, 25, 0.9537), (720, 3.0, 0.9960), (1440, 2.0, 0.9980), (7 * 1440, 1.1429, 0.9997)],
)
def test_confidence_multipliers(minutes, upper, lower):
    st = AggregateState()
    st.first_sample_ts, st.last_sample_ts = T0, T0 + 60 * minutes
    st.total_samples = minutes + 1
    st.cpu.add_sample(0.5, 1.0, T0)  # 0.511135 cores -> 511m -> x1.15 = 587m before confidence
    conf = confidence(st, EstimatorConfig())
    assert conf == pytest.approx(minutes / 1440)
    est = estimate(st)
    assert est.upper_bound.cpu_milli / 587 == pytest.approx(upper, rel=2e-3)
    assert abs(est.lower_bound.cpu_milli - 587 * lower) <= 1  # amounts truncate to whole milli-cores


def test_sample_interval_setting_counts_sparse_samples_as_history():
    st = AggregateState()
    for i in range(289):  # one day at 5-minute samples
        st.add_cpu_sample(P, T0 + 300 * i, 1.0, 1.0)
    assert confidence(st, EstimatorConfig()) == pytest.approx(289 / 1440)  # VPA's per-minute assumption
    assert confidence(st, EstimatorConfig(sample_interval_s=300)) == pytest.approx(1.0)


def _with_margin(x: int) -> int:
    return x + int(x * 0.15)  # VPA adds the margin scaled and truncated on its own


def one_sample(cpu: float, mem: float) -> AggregateState:
    st = AggregateState()
    st.add_cpu_sample(P, T0, cpu, 1.0)
    st.add_memory_sample(P, T0, mem)
    return st


def _target(cpu_cores: float, mem_bytes: float) -> Estimate:
    cpu = int(CPU_SCHEME.value_of(CPU_SCHEME.find_bucket(cpu_cores)) * 1000)
    mem = int(MEMORY_SCHEME.value_of(MEMORY_SCHEME.find_bucket(mem_bytes)))
    return Estimate(_with_margin(cpu), _with_margin(mem))


# VPA's bounds where history is short or missing (logic/estimator.go; estimator_test.go's
# TestConfidenceMultiplierNoHistory: +Inf capped at MaxResourceAmount 1e14, never at a histogram's end).
@pytest.mark.parametrize(
    "state, target, lower, upper",
    [
        # no sample at all: every percentile is 0, and 0 x +Inf is no amount: the minimums everywhere
        (AggregateState(), Estimate(25, 250 * MIB), Estimate(25, 250 * MIB), Estimate(25, 250 * MIB)),
        # one sample: confidence 0 (no history span): upper x +Inf = 1e14 of each, lower x 0 = the minimums
        (one_sample(0.5, 500 * MIB), Estimate(587, _target(0.5, 500 * MIB).memory_bytes), Estimate(25, 250 * MIB),
         Estimate(MAX_RESOURCE_AMOUNT, MAX_RESOURCE_AMOUNT)),
        # 900 cores and 950 GB for a day: the targets pass the histograms' last buckets (1000 cores, 1e12 bytes)
        # by the margin, and the upper bound x 2 goes on past them
        (steady(1440, 900.0, 950e9), _target(900.0, 950e9), None,
         Estimate(2 * _target(900.0, 950e9).cpu_milli, 2 * _target(900.0, 950e9).memory_bytes)),
    ],
)
def test_bounds_follow_vpa_without_history_or_past_the_histograms(state, target, lower, upper):
    est = estimate(state)
    assert est.target == target
    if lower is not None:
        assert est.lower_bound == lower
    assert est.upper_bound == upper
    if state.total_samples > 1:
        assert est.target.cpu_milli > 1000 * 1000 and est.target.memory_bytes > 10**12


@pytest.mark.parametrize(
    "cpu, mem, containers, target",
    [
        (0.005, 5 * MIB, 1, Estimate(25, 250 * MIB)),  # both below the pod minimums
        (0.005, 5 * MIB, 2, Estimate(12, 125 * MIB)),  # minimum split across containers
        (0.5, 5 * MIB, 1, Estimate(587, 250 * MIB)),  # 0.511135 -> 511m -> 587m
        # 0.02 core lands in bucket 1 (end 0.0205): 20m -> 23m, above 25m / 4 containers
        (0.02, 2 * GIB, 4, Estimate(23, int(int(MEMORY_SCHEME.value_of(MEMORY_SCHEME.find_bucket(2 * GIB))) * 1.15))),
    ],
)
def test_minimums(cpu, mem, containers, target):
    assert estimate(steady(1440, cpu, mem), containers_per_pod=containers).target == target


def test_oom_bump_raises_memory_target():
    st = steady(1440, 0.2, 500 * MIB)
    before = estimate(st).target.memory_bytes
    st.record_oom(P, T0 + 1440 * 60 + 30, 1000 * MIB)
    after = estimate(st).target.memory_bytes
    assert before < 1000 * MIB * 1.15 < after


def test_safety_margin_setting():
    st = steady(1440, 1.0, GIB)
    assert estimate(st, EstimatorConfig(safety_margin=0.0)).target.cpu_milli == 1016


@pytest.mark.parametrize(
    "old, new, threshold, changed",
    [
        (None, Estimate(1, 1), 0.1, True),
        (Estimate(1000, 1000), Estimate(1100, 1000), 0.1, False),
        (Estimate(1000, 1000), Estimate(1101, 1000), 0.1, True),
        (Estimate(1000, 1000), Estimate(1000, 899), 0.1, True),
        (Estimate(0, 1000), Estimate(0, 1000), 0.1, False),
        (Estimate(0, 1000), Estimate(5, 1000), 0.1, True),
    ],
)
def test_changed_beyond(old, new, threshold, changed):
    assert changed_beyond(old, new, threshold) is changed


def test_savings():
    assert savings(Estimate(2000, 4 * GIB), Estimate(500, GIB), replicas=3) == Estimate(4500, 9 * GIB)
    assert savings(None, Estimate(1, 1)) is None
