"""The service's settings reach the core: every knob named like a core config field is carried."""

import dataclasses

from recommender.core.aggregate import AggregationConfig
from recommender.core.estimator import EstimatorConfig
from recommender.main import Settings, build_state


def test_every_core_knob_in_the_settings_reaches_the_state():
    s = Settings(cpu_half_life_s=3600, memory_half_life_s=7200, memory_aggregation_interval_s=600,
                 memory_aggregation_interval_count=3, oom_bump_up_ratio=1.5, oom_min_bump_up_bytes=1 << 20,
                 safety_margin=0.3, pod_min_cpu_milli=10, pod_min_memory_bytes=1 << 24, sample_interval_s=5,
                 change_threshold=0.2)  # fmt: skip
    state = build_state(s)
    carried = 0
    for config in (state.aggregation, state.estimator):
        for f in dataclasses.fields(config):
            if f.name in Settings.model_fields:
                assert getattr(config, f.name) == getattr(s, f.name), f.name
                carried += 1
    assert carried == 10
    assert state.estimator.target_cpu_percentile == EstimatorConfig().target_cpu_percentile  # not a setting
    assert isinstance(state.aggregation, AggregationConfig)
