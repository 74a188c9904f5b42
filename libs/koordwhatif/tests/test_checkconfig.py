"""Settings that fight each other: each conflict found with its reason and fix; a clean config has none."""

import pytest
from koordwhatif.checkconfig import ERROR, WARNING, check
from koordwhatif.config import WhatIfConfig, with_knob

MEMORY_DEFAULTS = "usage_thresholds.memory=95"  # Koordinator's defaults: load-aware 95, LowNodeLoad high 80


def findings(**knobs):
    cfg = WhatIfConfig()
    for knob, value in knobs.items():
        cfg = with_knob(cfg, knob.replace("__", "."), value)
    return [f for f in check(cfg) if not any(MEMORY_DEFAULTS in s for s in f.settings)]


def test_koordinators_defaults_have_one_memory_warning_and_no_error():
    [f] = check(WhatIfConfig())
    assert f.level == WARNING
    assert f.settings == ("scheduler-extender usage_thresholds.memory=95", "descheduler __default_node_pool__ highThresholds.memory=80")
    assert check(with_knob(WhatIfConfig(), "extender.usage_thresholds.memory", 75)) == []


@pytest.mark.parametrize(
    "knobs, level, names, fix",
    [
        ({"extender__usage_thresholds__cpu": 75}, ERROR,
         ("usage_thresholds.cpu=75", "cpuSuppressThresholdPercent=65"), "at or below 65"),
        # batch offered past suppress: throttled pods without BE CPU eviction, a loop with it
        ({"cpuReclaimThresholdPercent": 70}, WARNING,
         ("cpuReclaimThresholdPercent=70", "cpuSuppressThresholdPercent=65"), "or accept slower batch pods"),
        ({"cpuReclaimThresholdPercent": 70, "threshold__cpuEvictBESatisfactionLowerPercent": 60,
          "threshold__cpuEvictBESatisfactionUpperPercent": 80}, ERROR,
         ("cpuReclaimThresholdPercent=70", "cpuSuppressThresholdPercent=65", "cpuEvictBESatisfaction*"),
         "at or below 65"),
        # ...unless satisfaction is measured against the batch allocatable, which suppress leaves alone
        ({"cpuReclaimThresholdPercent": 70, "threshold__cpuEvictBESatisfactionLowerPercent": 60,
          "threshold__cpuEvictBESatisfactionUpperPercent": 80, "threshold__cpuEvictPolicy": "evictByAllocatable"},
         WARNING, ("cpuReclaimThresholdPercent=70", "cpuSuppressThresholdPercent=65"), "or accept slower batch pods"),
        ({"memoryReclaimThresholdPercent": 80}, ERROR,
         ("memoryReclaimThresholdPercent=80", "memoryEvictThresholdPercent=70"), "at or below 70"),
        ({"descheduler__nodePools__0__highThresholds__cpu": 60, "descheduler__nodePools__0__lowThresholds__cpu": 40},
         ERROR, ("usage_thresholds.cpu=65", "highThresholds.cpu=60"), "below 60"),
        ({"descheduler__nodePools__0__lowThresholds__cpu": 70}, WARNING,
         ("lowThresholds.cpu=70", "cpuSuppressThresholdPercent=65"), "below 65"),
        ({"threshold__enable": False}, WARNING,
         ("colocation-config enable=true", "resource-threshold-config enable=false"), "enable the resource-threshold"),
    ],
)
def test_each_conflict(knobs, level, names, fix):
    [f] = findings(**knobs)
    assert f.level == level
    for name in names:
        assert any(name in s for s in f.settings), (name, f.settings)
    assert fix in f.fix
    assert f.problem.endswith(".")


def test_batch_capacity_above_the_descheduler_high_threshold_is_an_eviction_loop():
    found = findings(cpuReclaimThresholdPercent=65, descheduler__highThresholds={"cpu": 40, "memory": 95},
                     descheduler__lowThresholds={"cpu": 25, "memory": 90})
    loop = [f for f in found if f.settings[0] == "cpuReclaimThresholdPercent=65"]
    assert [(f.level, f.settings[1]) for f in loop] == [(ERROR, "descheduler __default_node_pool__ highThresholds.cpu=40")]
    assert "eviction loop" in loop[0].problem and "at or below 40" in loop[0].fix
    # the load-aware threshold (65) over the same high threshold is found as well
    assert any("usage_thresholds.cpu=65" in f.settings[0] for f in found)


def test_several_conflicts_are_all_reported():
    found = findings(extender__usage_thresholds__cpu=80, cpuReclaimThresholdPercent=70)
    # over suppress, over the descheduler's high 75, reclaim over suppress (no BE CPU eviction: a warning)
    assert [(f.level, f.settings[0]) for f in found] == [
        (ERROR, "scheduler-extender usage_thresholds.cpu=80"), (WARNING, "cpuReclaimThresholdPercent=70"),
        (ERROR, "scheduler-extender usage_thresholds.cpu=80")]


@pytest.mark.parametrize(
    "knob, value, expected",
    [
        ("colocation.metricReportIntervalSeconds", 30,
         ("accepted without effect: colocation-config.metricReportIntervalSeconds 30 is not supported: the node "
         "agent's metric collection is set by KOORD_AGENT_NODEMETRIC_INTERVAL_S, default 60.")),
        ("colocation.metricAggregateDurationSeconds", 600,
         ("accepted without effect: colocation-config.metricAggregateDurationSeconds 600 is not supported: the node "
         "agent's metric collection is set by KOORD_AGENT_AGGREGATE_WINDOW_S, default 300.")),
    ],
)
def test_a_setting_the_slo_controller_accepts_without_effect_is_a_warning(knob, value, expected):
    cfg = with_knob(with_knob(WhatIfConfig(), "extender.usage_thresholds.memory", 75), knob, value)
    [f] = check(cfg)
    assert (f.level, f.settings, f.problem) == (WARNING, ("slo-controller-config",), expected)
    assert "remove the setting" in f.fix
