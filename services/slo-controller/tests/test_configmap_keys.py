"""Every key of the slo-controller-config ConfigMap: system-config and host-application-config
reach the NodeSLO (per node pool too), unknown fields refuse their key, the eviction settings
the node agent honours are held to Koordinator's ranges, and settings nothing acts on are named."""

from __future__ import annotations

import json

import pytest
from slo_controller.core.configmap import ConfigState

POOL = {"name": "pool-a", "nodeSelector": {"matchLabels": {"pool": "a"}}}
NGINX = {"name": "nginx", "priority": "koord-prod", "qos": "LS",
         "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"}}


def applied(data):
    state = ConfigState()
    result = state.apply({k: json.dumps(v) for k, v in data.items()})
    return state, result


def test_host_applications_reach_the_nodeslo_and_a_pool_replaces_the_list():
    doc = {"applications": [NGINX],
           "nodeConfigs": [{**POOL, "applications": [{"name": "agent", "priority": "koord-batch", "qos": "BE"}]}]}
    state, result = applied({"host-application-config": doc})
    assert result.errors == {} and "host-application-config" in result.changed
    builder = state.current.nodeslo_builder()
    cluster = builder.spec_for({"pool": "b"}).hostApplications
    assert [(a.name, a.priority, a.qos, a.cgroupPath.base, a.cgroupPath.relativePath) for a in cluster] == [
        ("nginx", "koord-prod", "LS", "CgroupRoot", "nginx/")]
    pool = builder.spec_for({"pool": "a"}).hostApplications
    assert [(a.name, a.priority, a.qos, a.cgroupPath) for a in pool] == [("agent", "koord-batch", "BE", None)]


def test_system_strategy_reaches_the_nodeslo_merged_per_pool_and_is_named_not_supported():
    doc = {"clusterStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150},
           "nodeStrategies": [{**POOL, "watermarkScaleFactor": 200}]}
    state, result = applied({"system-config": doc})
    assert result.errors == {}
    builder = state.current.nodeslo_builder()
    cluster, pool = builder.spec_for({}).systemStrategy, builder.spec_for({"pool": "a"}).systemStrategy
    assert (cluster.minFreeKbytesFactor, cluster.watermarkScaleFactor) == (100, 150)
    assert (pool.minFreeKbytesFactor, pool.watermarkScaleFactor) == (100, 200)  # merged over the cluster's
    assert result.warnings == (
        "system-config.clusterStrategy.minFreeKbytesFactor 100 (a node-wide kernel setting) is not supported",
        "system-config.clusterStrategy.watermarkScaleFactor 150 (a node-wide kernel setting) is not supported",
        "system-config.nodeStrategies[0].minFreeKbytesFactor 100 (a node-wide kernel setting) is not supported",
        "system-config.nodeStrategies[0].watermarkScaleFactor 200 (a node-wide kernel setting) is not supported",
    )


def test_nodes_of_different_host_application_pools_get_their_own_specs():
    doc = {"applications": [NGINX], "nodeConfigs": [{**POOL, "applications": []}]}
    state, _ = applied({"host-application-config": doc})
    b = state.current.nodeslo_builder()
    assert b.spec_for({"pool": "a"}) is not b.spec_for({})
    assert b.spec_for({"pool": "a"}).hostApplications == [] and b.spec_for({}) is b.spec_for({"x": "y"})


@pytest.mark.parametrize(
    "key, doc, message",
    [
        ("resource-threshold-config", {"clusterStrategy": {"cpuSupressThresholdPercent": 50}},
         ("resource-threshold-config: unknown field clusterStrategy.cpuSupressThresholdPercent "
         "(did you mean cpuSuppressThresholdPercent?)")),
        ("resource-qos-config", {"clusterStrategy": {"beClass": {"memoryQOS": {"wmarkRatios": 90}}}},
         "unknown field clusterStrategy.beClass.memoryQOS.wmarkRatios (did you mean wmarkRatio?)"),
        ("resource-qos-config", {"clusterStrategy": {"beClass": {"resctrlQOS": {"mba": 50}}}},
         "unknown field clusterStrategy.beClass.resctrlQOS.mba (did you mean mbaPercent?)"),
        ("cpu-burst-config", {"nodeStrategies": [{**POOL, "cpuBurstPrecent": 200}]},
         "unknown field nodeStrategies[0].cpuBurstPrecent (did you mean cpuBurstPercent?)"),
        ("colocation-config", {"enable": True, "cpuReclaimThresholdPrecent": 70},
         "colocation-config: unknown field cpuReclaimThresholdPrecent (did you mean cpuReclaimThresholdPercent?)"),
        ("colocation-config", {"nodeConfigs": [{**POOL, "metricAggregatePolicy": {"duration": ["5m"]}}]},
         "unknown field nodeConfigs[0].metricAggregatePolicy.duration (did you mean durations?)"),
        ("host-application-config", {"applications": [{**NGINX, "strategy": {"cpuQOS": {}}}]},
         "unknown field applications[0].strategy.cpuQOS"),
        ("host-application-config", {"application": [NGINX]},
         "unknown field application (did you mean applications?)"),
        ("system-config", {"clusterStrategy": {"watermarkScaleFactr": 100}},
         "unknown field clusterStrategy.watermarkScaleFactr (did you mean watermarkScaleFactor?)"),
        ("cpu-normalization-config", {"enable": False, "ratioModel": {"Xeon": {"baseRatio": 1.5, "turbo": 2}}},
         "unknown field ratioModel[Xeon].turbo"),
    ],
)
def test_an_unknown_field_refuses_its_key_naming_it(key, doc, message):
    _state, result = applied({key: doc})
    assert message in result.errors[key]
    assert key not in result.changed


def test_a_data_key_koordinator_does_not_have_is_refused_naming_it():
    state = ConfigState()
    result = state.apply({"resource-threshold": "{}", "colocation-config": '{"enable": true}'})
    assert result.errors == {"resource-threshold": (
        "resource-threshold is not a key of slo-controller-config (did you mean resource-threshold-config?); the keys "
        "are colocation-config, resource-threshold-config, resource-qos-config, cpu-burst-config, system-config, "
        "host-application-config, cpu-normalization-config, resource-amplification-config")}
    assert state.current.colocation.cluster.enable is True  # the other keys still apply


@pytest.mark.parametrize(
    "strategy, message",
    [
        ({"cpuEvictPolicy": "evictByMagic"},
         "cpuEvictPolicy: must be one of evictByRealLimit, evictByAllocatable, got \"evictByMagic\""),
        ({"cpuSuppressMinPercent": 120}, "cpuSuppressMinPercent: must be in [0, 100], got 120"),
        ({"cpuEvictThresholdPercent": 101, "evictEnabledPriorityThreshold": 5999},
         "cpuEvictThresholdPercent: must be in [0, 100], got 101"),
        ({"cpuEvictThresholdPercent": 80}, "cpuEvictThresholdPercent: needs evictEnabledPriorityThreshold"),
        ({"cpuEvictThresholdPercent": 80, "cpuEvictLowerPercent": 80, "evictEnabledPriorityThreshold": 5999},
         "cpuEvictLowerPercent: must be below cpuEvictThresholdPercent (80), got 80"),
        ({"cpuEvictLowerPercent": 60}, "cpuEvictLowerPercent: set without cpuEvictThresholdPercent"),
        ({"memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 75},
         "memoryEvictLowerPercent: must be below memoryEvictThresholdPercent (70), got 75"),
        ({"cpuEvictBESatisfactionLowerPercent": 35},
         "cpuEvictBESatisfactionLowerPercent and cpuEvictBESatisfactionUpperPercent go together"),
        ({"cpuEvictBESatisfactionLowerPercent": 70, "cpuEvictBESatisfactionUpperPercent": 80},
         "cpuEvictBESatisfactionLowerPercent: must be in (0, 60]"),
        ({"cpuEvictBESatisfactionLowerPercent": 35, "cpuEvictBESatisfactionUpperPercent": 22},
         "cpuEvictBESatisfactionUpperPercent: must be above cpuEvictBESatisfactionLowerPercent (35), got 22"),
        ({"cpuEvictBEUsageThresholdPercent": 101}, "cpuEvictBEUsageThresholdPercent: must be in [0, 100], got 101"),
        ({"cpuEvictTimeWindowSeconds": 0}, "cpuEvictTimeWindowSeconds: must be in [1, inf], got 0"),
        ({"cpuAllocatableEvictThresholdPercent": 110, "cpuAllocatableEvictLowerPercent": 100},
         ("cpuAllocatableEvictThresholdPercent: needs cpuAllocatableEvictLowerPercent and "
         "allocatableEvictPriorityThreshold")),
        ({"memoryAllocatableEvictThresholdPercent": 100, "memoryAllocatableEvictLowerPercent": 100,
          "allocatableEvictPriorityThreshold": 7999},
         "memoryAllocatableEvictLowerPercent: must be below memoryAllocatableEvictThresholdPercent (100), got 100"),
        ({"cpuAllocatableEvictThresholdPercent": -1, "cpuAllocatableEvictLowerPercent": -2,
          "allocatableEvictPriorityThreshold": 7999},
         "cpuAllocatableEvictThresholdPercent: must be in [0, inf], got -1"),
        ({"memoryAllocatableEvictLowerPercent": 90}, "memoryAllocatableEvictLowerPercent: set without"),
        ({"allocatableEvictPriorityThreshold": 9000}, "allocatableEvictPriorityThreshold: must be in [0, 7999], got 9000"),
    ],
)
def test_eviction_settings_out_of_range_or_apart_are_refused(strategy, message):
    _, result = applied({"resource-threshold-config": {"clusterStrategy": strategy}})
    assert message in result.errors["resource-threshold-config"]


def test_eviction_settings_that_hold_together_are_accepted():
    strategy = {
        "enable": True, "cpuSuppressMinPercent": 10, "cpuEvictPolicy": "evictByAllocatable",
        "cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 60,
        "cpuEvictBEUsageThresholdPercent": 90, "cpuEvictTimeWindowSeconds": 300,
        "cpuEvictThresholdPercent": 90, "evictEnabledPriorityThreshold": 5999,  # lower: 88 by default
        "memoryEvictThresholdPercent": 70,  # lower: 68 by default
        "cpuAllocatableEvictThresholdPercent": 110, "cpuAllocatableEvictLowerPercent": 100,
        "memoryAllocatableEvictThresholdPercent": 110, "memoryAllocatableEvictLowerPercent": 100,
        "allocatableEvictPriorityThreshold": 7999,
    }
    state, result = applied({"resource-threshold-config": {"clusterStrategy": strategy}})
    assert result.errors == {} and result.warnings == ()
    spec = state.current.nodeslo_builder().spec_for({}).resourceUsedThresholdWithBE
    assert {k: getattr(spec, k) for k in strategy} == strategy


@pytest.mark.parametrize(
    "key, doc, named",
    [
        ("resource-qos-config", {"clusterStrategy": {"beClass": {"blkioQOS": {"enable": True}}}},
         "resource-qos-config.clusterStrategy.beClass.blkioQOS (block IO QoS) is not supported"),
        ("resource-qos-config", {"nodeStrategies": [{**POOL, "lsClass": {"resctrlQOS": {"enable": True}}}]},
         ("resource-qos-config.nodeStrategies[0].lsClass.resctrlQOS (LLC / memory bandwidth (resctrl) QoS) is not "
         "supported")),
        ("resource-qos-config", {"clusterStrategy": {"policies": {"cpuPolicy": "coreSched"}}},
         "resource-qos-config.clusterStrategy.policies.cpuPolicy coreSched (core scheduling"),
        ("resource-qos-config", {"clusterStrategy": {"policies": {"netQOSPolicy": "terway-qos"},
                                                     "lsClass": {"networkQOS": {"enable": True}}}},
         "lsClass.networkQOS (network QoS, policies.netQOSPolicy terway-qos) is not supported"),
        ("colocation-config", {"enable": True, "metricReportIntervalSeconds": 30},
         ("colocation-config.metricReportIntervalSeconds 30 is not supported: the node agent's metric collection is "
         "set by KOORD_AGENT_NODEMETRIC_INTERVAL_S, default 60")),
        ("colocation-config", {"enable": True, "nodeConfigs": [{**POOL, "metricMemoryCollectPolicy":
                                                               "usageWithPageCache"}]},
         "colocation-config.nodeConfigs[0].metricMemoryCollectPolicy \"usageWithPageCache\" is not supported"),
        ("colocation-config", {"enable": True, "extensions": {"gpu": {}}},
         "colocation-config.extensions (gpu) are not supported"),
        ("cpu-normalization-config", {"enable": False, "ratioModel": {"Xeon": {"baseRatio": 1.5}}},
         ("cpu-normalization-config: CPU normalization (the cpunormalization plugin) is not supported; it is "
         "disabled here, so nothing changes")),
    ],
)
def test_settings_nothing_acts_on_are_named_not_supported(key, doc, named):
    _, result = applied({key: doc})
    assert result.errors == {}
    assert any(named in w for w in result.warnings), result.warnings


@pytest.mark.parametrize("key", ["cpu-normalization-config", "resource-amplification-config"])
def test_a_plugin_koord_py_does_not_have_switched_on_refuses_its_key(key):
    doc = {"enable": False, "nodeConfigs": [{**POOL, "enable": True}]}
    _, result = applied({key: doc})
    assert result.errors[key].endswith(f"is not supported: enabled at {key}.nodeConfigs[0]")
