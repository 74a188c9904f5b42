"""A Koordinator user's whole slo-controller-config: every key honoured or named "not supported".

FULL is Koordinator's slo-controller-config with every key of every strategy set
(apis/configuration/slo_controller_config.go, the NodeSLO types and their defaults in
pkg/util/sloconfig): Koordinator's default values where it has one, a valid value otherwise,
and a node pool (nodeConfigs / nodeStrategies) in every key that has them. Each of its fields
is in exactly one of three tables:

* HONOURED: the test that shows the field acting (the test must name the field), and the value
  given here must reach what acts on it: the node's colocation strategy in the slo-controller,
  or the NodeSLO the node agent receives;
* NOT_SUPPORTED: switched on, the slo-controller names it "not supported" (and the node agent
  too, for what the NodeSLO carries): the configuration applies without it;
* EMPTY: an object Koordinator defines without fields (any field in it refuses the key).

A field of FULL in no table, or in one the code does not live up to, fails here.
"""

from __future__ import annotations

import ast
import copy
import fnmatch
import json
from pathlib import Path
from typing import Any

import pytest
from node_agent.qos.support import not_supported as agent_not_supported
from slo_controller.core.configmap import ConfigState

ROOT = Path(__file__).resolve().parents[1]
POOL_LABELS = {"kubernetes.io/kernel": "alios"}
POOL = {"name": "alios", "nodeSelector": {"matchLabels": POOL_LABELS}}


def _memory_qos(min_adj: int, ratio: int = 95, permill: int = 20) -> dict[str, Any]:
    return {"enable": True, "minLimitPercent": 10, "lowLimitPercent": 20, "throttlingPercent": 80,
            "wmarkRatio": ratio, "wmarkScalePermill": permill, "wmarkMinAdj": min_adj, "priorityEnable": 1,
            "priority": 6, "oomKillGroup": 1, "pageCacheEnable": False, "pageCacheLimitPercent": 50,
            "pageCacheLimitSize": 1 << 30, "pageCacheReclaimSync": False}


def _qos_class(gi: int, min_adj: int, cat_end: int, ratio: int = 95, permill: int = 20) -> dict[str, Any]:
    return {
        "cpuQOS": {"enable": True, "groupIdentity": gi, "schedIdle": 0, "coreExpeller": gi > 0},
        "memoryQOS": _memory_qos(min_adj, ratio, permill),
        "blkioQOS": {"enable": False, "blocks": [
            {"name": "/dev/sdb", "type": "device", "ioCfg": {
                "readIOPS": 20480, "writeIOPS": 10240, "readBPS": 102400000, "writeBPS": 204800004,
                "ioWeightPercent": 60, "readLatency": 3000, "writeLatency": 3000, "readLatencyPercent": 95,
                "writeLatencyPercent": 95, "enableUserModel": False, "modelReadBPS": 0, "modelWriteBPS": 0,
                "modelReadSeqIOPS": 0, "modelWriteSeqIOPS": 0, "modelReadRandIOPS": 0, "modelWriteRandIOPS": 0}}]},
        "resctrlQOS": {"enable": False, "catRangeStartPercent": 0, "catRangeEndPercent": cat_end, "mbaPercent": 100},
        "networkQOS": {"enable": False, "ingressRequest": 0, "ingressLimit": 0, "egressRequest": 0, "egressLimit": 0},
    }


_COLOCATION = {
    "enable": True, "metricAggregateDurationSeconds": 300, "metricReportIntervalSeconds": 60,
    "metricAggregatePolicy": {"durations": ["5m", "10m", "30m"]}, "metricMemoryCollectPolicy": "usageWithoutPageCache",
    "cpuReclaimThresholdPercent": 60, "cpuCalculatePolicy": "usage", "memoryReclaimThresholdPercent": 65,
    "memoryCalculatePolicy": "usage", "degradeTimeMinutes": 15, "updateTimeThresholdSeconds": 300,
    "resourceDiffThreshold": 0.1, "midCPUThresholdPercent": 100, "midMemoryThresholdPercent": 100,
    "midUnallocatedPercent": 0, "midStaticCPUReservedPercent": 0, "midStaticMemoryReservedPercent": 0,
    "batchCPUThresholdPercent": 100, "batchMemoryThresholdPercent": 100, "extensions": {},
}
_THRESHOLD = {
    "enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressMinPercent": 10, "cpuSuppressPolicy": "cpuset",
    "memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 65, "memoryAllocatableEvictThresholdPercent": 110,
    "memoryAllocatableEvictLowerPercent": 100, "cpuEvictBESatisfactionUpperPercent": 60,
    "cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBEUsageThresholdPercent": 90, "cpuEvictTimeWindowSeconds": 300,
    "cpuEvictThresholdPercent": 90, "cpuEvictLowerPercent": 85, "cpuAllocatableEvictThresholdPercent": 110,
    "cpuAllocatableEvictLowerPercent": 100, "cpuEvictPolicy": "evictByRealLimit", "evictEnabledPriorityThreshold": 5999,
    "allocatableEvictPriorityThreshold": 7999,
}
_NGINX = {"name": "nginx", "priority": "koord-prod", "qos": "LS", "strategy": {},
          "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": "nginx/"}}
_RATIO_MODEL = {"Intel(R) Xeon(R) Platinum XXX CPU @ 2.50GHz": {
    "baseRatio": 1.5, "hyperThreadEnabledRatio": 1.0, "turboEnabledRatio": 1.8, "hyperThreadTurboEnabledRatio": 1.2}}

FULL: dict[str, Any] = {
    "colocation-config": {
        **_COLOCATION,
        "nodeConfigs": [{**POOL, **_COLOCATION, "updateTimeThresholdSeconds": 360, "resourceDiffThreshold": 0.2,
                         "midReclaimMode": "static", "midStaticCPUReservedPercent": 10,
                         "midStaticMemoryReservedPercent": 10, "cpuCalculatePolicy": "maxUsageRequest",
                         "memoryCalculatePolicy": "request", "batchCPUThresholdPercent": 80}],
    },
    "resource-threshold-config": {
        "clusterStrategy": _THRESHOLD,
        "nodeStrategies": [{**POOL, **_THRESHOLD, "cpuEvictBEUsageThresholdPercent": 80, "cpuSuppressPolicy": "cfsQuota",
                            "cpuEvictPolicy": "evictByAllocatable"}],
    },
    "resource-qos-config": {
        "clusterStrategy": {
            "policies": {"cpuPolicy": "groupIdentity", "netQOSPolicy": "tc"},
            "lsrClass": _qos_class(2, -25, 100), "lsClass": _qos_class(2, -25, 100),
            "beClass": _qos_class(-1, 50, 30), "systemClass": _qos_class(0, 0, 100, ratio=0, permill=50),
            "cgroupRoot": {"blkioQOS": {"enable": False, "blocks": [
                {"name": "ackdistro-pool", "type": "volumegroup", "ioCfg": {"readLatency": 3000}}]}},
        },
        "nodeStrategies": [{**POOL, "beClass": {"memoryQOS": {"wmarkRatio": 90}}}],
    },
    "cpu-burst-config": {
        "clusterStrategy": {"policy": "none", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                            "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50},
        "nodeStrategies": [{**POOL, "policy": "cfsQuotaBurstOnly", "cfsQuotaBurstPercent": 400,
                            "cpuBurstPercent": 500, "cfsQuotaBurstPeriodSeconds": 60, "sharePoolThresholdPercent": 40}],
    },
    "system-config": {
        "clusterStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150, "memcgReapBackGround": 0,
                            "schedGroupIdentityEnabled": 1, "schedIdleSaverWmark": 0, "schedFeatures": {"ID_ABSOLUTE_EXPEL": True},
                            "pageCacheLimitEnabled": 0, "totalNetworkBandwidth": "10G"},
        "nodeStrategies": [{**POOL, "minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}],
    },
    "host-application-config": {
        "applications": [_NGINX],
        "nodeConfigs": [{"name": "colocation-pool", "nodeSelector": {"matchLabels": {"node-pool": "colocation"}},
                         "applications": [_NGINX]}],
    },
    "cpu-normalization-config": {
        "enable": False, "defaultRatio": 1.0, "ratioModel": _RATIO_MODEL,
        "nodeConfigs": [{**POOL, "enable": False, "defaultRatio": 1.2, "ratioModel": _RATIO_MODEL}],
    },
    "resource-amplification-config": {
        "enable": False, "resourceAmplificationRatio": {"cpu": 1.5},
        "nodeConfigs": [{**POOL, "enable": False, "resourceAmplificationRatio": {"cpu": 2.0}}],
    },
}

SLO = "services/slo-controller/tests/"
QOS = "services/node-agent/tests/"
HERE = "tests/test_koordinator_configmap.py::"
_CLASS = "resource-qos-config.*[sS]trateg*.*Class"

# pattern (fnmatch over the field's path, list items as []) -> the test that shows it acting
HONOURED: dict[str, str] = {
    # colocation-config: the slo-controller's overcommit rules (nodeConfigs[] merge over the cluster's)
    "colocation-config*.enable": SLO + "test_config.py::test_enable_rules",
    "colocation-config*.cpuReclaimThresholdPercent": SLO + "test_batch.py::test_policies",
    "colocation-config*.memoryReclaimThresholdPercent": SLO + "test_batch.py::test_policies",
    "colocation-config*.cpuCalculatePolicy": SLO + "test_batch.py::test_policies",
    "colocation-config*.memoryCalculatePolicy": SLO + "test_batch.py::test_policies",
    "colocation-config*.batchCPUThresholdPercent": SLO + "test_batch.py::test_policies",
    "colocation-config*.batchMemoryThresholdPercent": SLO + "test_batch.py::test_policies",
    "colocation-config*.degradeTimeMinutes": HERE + "test_degrade_and_sync_thresholds_come_from_the_configmap",
    "colocation-config*.updateTimeThresholdSeconds": HERE + "test_degrade_and_sync_thresholds_come_from_the_configmap",
    "colocation-config*.resourceDiffThreshold": HERE + "test_degrade_and_sync_thresholds_come_from_the_configmap",
    "colocation-config*.midReclaimMode": SLO + "test_mid.py::test_mid_table",
    "colocation-config*.midCPUThresholdPercent": SLO + "test_mid.py::test_mid_table",
    "colocation-config*.midMemoryThresholdPercent": SLO + "test_mid.py::test_mid_table",
    "colocation-config*.midUnallocatedPercent": SLO + "test_mid.py::test_mid_table",
    "colocation-config*.midStaticCPUReservedPercent": SLO + "test_mid.py::test_mid_table",
    "colocation-config*.midStaticMemoryReservedPercent": SLO + "test_mid.py::test_mid_table",
    "colocation-config.nodeConfigs[].name": SLO + "test_batch.py::test_node_pool_overrides_and_node_metadata",
    "colocation-config.nodeConfigs[].nodeSelector.*": SLO + "test_batch.py::test_node_pool_overrides_and_node_metadata",
    "*.nodeStrategies[].name": SLO + "test_nodeslo.py::test_cluster_and_node_strategies_merge",
    "*.nodeStrategies[].nodeSelector.*": SLO + "test_nodeslo.py::test_cluster_and_node_strategies_merge",
    "host-application-config.nodeConfigs[].name":
        SLO + "test_configmap_keys.py::test_host_applications_reach_the_nodeslo_and_a_pool_replaces_the_list",
    "host-application-config.nodeConfigs[].nodeSelector.*":
        SLO + "test_configmap_keys.py::test_host_applications_reach_the_nodeslo_and_a_pool_replaces_the_list",
    # resource-threshold-config: the node agent's suppress and eviction rules
    "resource-threshold-config.*.enable":
        QOS + "test_qos_round.py::test_rounds_on_simulated_time_suppress_then_evict_after_the_first_cool_down",
    "resource-threshold-config.*.cpuSuppressThresholdPercent":
        QOS + "test_qos_round.py::test_rounds_on_simulated_time_suppress_then_evict_after_the_first_cool_down",
    "resource-threshold-config.*.cpuSuppressMinPercent": QOS + "test_qos_parity.py::test_suppress_host_apps_and_min_percent",
    "resource-threshold-config.*.cpuSuppressPolicy": QOS + "test_qos_strategies.py::*",
    "resource-threshold-config.*.memoryEvictThresholdPercent": QOS + "test_qos_node_facts.py::*",
    "resource-threshold-config.*.memoryEvictLowerPercent": QOS + "test_qos_strategies.py::*",
    "resource-threshold-config.*.memoryAllocatableEvict*": QOS + "test_qos_parity.py::*",
    "resource-threshold-config.*.cpuEvictBESatisfaction*": QOS + "test_qos_strategies.py::*",
    "resource-threshold-config.*.cpuEvictBEUsageThresholdPercent":
        QOS + "test_qos_parity.py::test_cpu_evict_be_usage_threshold",
    "resource-threshold-config.*.cpuEvictTimeWindowSeconds":
        QOS + "test_qos_parity.py::test_cpu_evict_by_node_usage_lower_and_window",
    "resource-threshold-config.*.cpuEvictThresholdPercent": QOS + "test_qos_parity.py::*",
    "resource-threshold-config.*.cpuEvictLowerPercent":
        QOS + "test_qos_parity.py::test_cpu_evict_by_node_usage_lower_and_window",
    "resource-threshold-config.*.cpuAllocatableEvict*": QOS + "test_qos_parity.py::*",
    "resource-threshold-config.*.cpuEvictPolicy": QOS + "test_qos_parity.py::test_cpu_evict_policy_real_limit_or_batch_allocatable",
    "resource-threshold-config.*.evictEnabledPriorityThreshold": QOS + "test_qos_parity.py::*",
    "resource-threshold-config.*.allocatableEvictPriorityThreshold": QOS + "test_qos_parity.py::*",
    # resource-qos-config: group identity and memory QoS per class
    "resource-qos-config.*.policies.cpuPolicy": QOS + "test_qos_node_facts.py::test_not_supported_settings_are_named",
    _CLASS + ".cpuQOS.enable": QOS + "test_qos_strategies.py::test_group_identity_values",
    _CLASS + ".cpuQOS.groupIdentity": QOS + "test_qos_strategies.py::test_group_identity_values",
    _CLASS + ".memoryQOS.enable": QOS + "test_qos_parity.py::test_memory_qos_pod_annotation",
    _CLASS + ".memoryQOS.minLimitPercent": QOS + "test_qos_strategies.py::test_memory_qos_plan_levels_and_sums",
    _CLASS + ".memoryQOS.lowLimitPercent": QOS + "test_qos_strategies.py::test_memory_qos_plan_levels_and_sums",
    _CLASS + ".memoryQOS.throttlingPercent": QOS + "test_qos_strategies.py::test_memory_qos_plan_levels_and_sums",
    _CLASS + ".memoryQOS.wmarkRatio": QOS + "test_qos_strategies.py::test_memory_qos_plan_levels_and_sums",
    _CLASS + ".memoryQOS.wmarkScalePermill": HERE + "test_memory_qos_watermarks_reach_the_cgroup_files",
    _CLASS + ".memoryQOS.wmarkMinAdj": HERE + "test_memory_qos_watermarks_reach_the_cgroup_files",
    _CLASS + ".memoryQOS.priorityEnable": QOS + "test_qos_parity.py::test_memory_qos_oom_priority_and_group",
    _CLASS + ".memoryQOS.priority": QOS + "test_qos_parity.py::test_memory_qos_oom_priority_and_group",
    _CLASS + ".memoryQOS.oomKillGroup": QOS + "test_qos_parity.py::test_memory_qos_oom_priority_and_group",
    _CLASS + ".memoryQOS.pageCache*": QOS + "test_qos_parity.py::test_memory_qos_page_cache_limit",
    # cpu-burst-config
    "cpu-burst-config.*.policy": QOS + "test_qos_parity.py::test_burst_quota_reset_when_policy_no_longer_allows_it",
    "cpu-burst-config.*.cpuBurstPercent": QOS + "test_qos_strategies.py::test_static_burst_for_ls_pods_only",
    "cpu-burst-config.*.cfsQuotaBurstPercent": HERE + "test_the_cpu_burst_strategy_drives_the_quota_burst",
    "cpu-burst-config.*.cfsQuotaBurstPeriodSeconds": HERE + "test_the_cpu_burst_strategy_drives_the_quota_burst",
    "cpu-burst-config.*.sharePoolThresholdPercent": HERE + "test_the_cpu_burst_strategy_drives_the_quota_burst",
    # host-application-config: collected, left out of system usage, counted by the batch formula
    "host-application-config.*applications[].name": QOS + "test_qos_node_facts.py::test_host_apps_carry_their_classes_and_usage",
    "host-application-config.*applications[].priority": QOS + "test_qos_node_facts.py::test_host_apps_carry_their_classes_and_usage",
    "host-application-config.*applications[].qos": QOS + "test_qos_node_facts.py::test_host_apps_carry_their_classes_and_usage",
    "host-application-config.*applications[].cgroupPath.*": QOS + "test_qos_node_facts.py::test_host_application_dir",
}

# pattern -> (where to switch it on, relative to the field's own strategy: path and value; or
# None when FULL already has it on) and the words the message carries
NOT_SUPPORTED: dict[str, tuple[tuple[str, Any] | None, str]] = {
    "colocation-config*.metricAggregateDurationSeconds": (("metricAggregateDurationSeconds", 600),
                                                          "metricAggregateDurationSeconds 600 is not supported"),
    "colocation-config*.metricReportIntervalSeconds": (("metricReportIntervalSeconds", 30),
                                                       "metricReportIntervalSeconds 30 is not supported"),
    "colocation-config*.metricAggregatePolicy.durations": (("metricAggregatePolicy", {"durations": ["15m"]}),
                                                           "metricAggregatePolicy {\"durations\": [\"15m\"]} is not supported"),
    "colocation-config*.metricMemoryCollectPolicy": (("metricMemoryCollectPolicy", "usageWithPageCache"),
                                                     "metricMemoryCollectPolicy \"usageWithPageCache\" is not supported"),
    "colocation-config*.extensions": (("extensions", {"vendor": {}}), "extensions (vendor) are not supported"),
    "resource-qos-config.*.policies.netQOSPolicy": (("lsClass.networkQOS.enable", True), "netQOSPolicy tc) is not supported"),
    _CLASS + ".cpuQOS.schedIdle": (("policies.cpuPolicy", "coreSched"), "coreSched (core scheduling"),
    _CLASS + ".cpuQOS.coreExpeller": (("policies.cpuPolicy", "coreSched"), "coreSched (core scheduling"),
    _CLASS + ".blkioQOS.*": (("{section}.blkioQOS.enable", True), "blkioQOS (block IO QoS) is not supported"),
    "resource-qos-config.*.cgroupRoot.blkioQOS.*": (("cgroupRoot.blkioQOS.enable", True),
                                                    "cgroupRoot.blkioQOS (block IO QoS) is not supported"),
    _CLASS + ".resctrlQOS.*": (("{section}.resctrlQOS.enable", True), "resctrlQOS (LLC / memory bandwidth"),
    _CLASS + ".networkQOS.*": (("{section}.networkQOS.enable", True), "networkQOS (network QoS"),
    "system-config.clusterStrategy.*": (None, "(a node-wide kernel setting) is not supported"),
    "system-config.nodeStrategies[].minFreeKbytesFactor": (None, "(a node-wide kernel setting) is not supported"),
    "system-config.nodeStrategies[].watermarkScaleFactor": (None, "(a node-wide kernel setting) is not supported"),
    "cpu-normalization-config*": (("enable", True), "CPU normalization (the cpunormalization plugin) is not supported"),
    "resource-amplification-config*": (("enable", True),
                                       "resource amplification (the resourceamplification plugin) is not supported"),
}
EMPTY = ("host-application-config.*applications[].strategy",)


def leaves(doc: Any, path: str = "", at: tuple = ()) -> list[tuple[str, tuple]]:
    """(pattern path, concrete path) of every value; an empty object is a leaf of its own."""
    if isinstance(doc, dict) and doc:
        return [x for k, v in doc.items() for x in leaves(v, f"{path}.{k}" if path else k, (*at, k))]
    if isinstance(doc, list) and doc and isinstance(doc[0], dict):
        return [x for i, v in enumerate(doc) for x in leaves(v, f"{path}[]", (*at, i))]
    return [(path, at)]


ALL = leaves(FULL)


def matching(table, path: str) -> list[str]:
    return [p for p in table if fnmatch.fnmatchcase(path, p)]


def apply(data: dict[str, Any]):
    state = ConfigState()
    result = state.apply({k: json.dumps(v) for k, v in data.items()})
    return state, result


def test_every_field_of_the_full_configmap_is_in_one_table():
    assert len(ALL) > 300
    missing = [p for p, _ in ALL if not (matching(HONOURED, p) or matching(NOT_SUPPORTED, p) or matching(EMPTY, p))]
    assert missing == []
    twice = [p for p, _ in ALL if len(matching(HONOURED, p)) + len(matching(NOT_SUPPORTED, p)) + len(matching(EMPTY, p)) > 1]
    assert twice == []


def test_the_full_configmap_applies_and_names_only_what_is_not_supported():
    _state, result = apply(FULL)
    assert result.errors == {}
    assert set(result.changed) == set(FULL)
    assert result.warnings and all("not supported" in w for w in result.warnings)
    # everything FULL switches on that nothing acts on is named: the kernel settings, the disabled plugins
    named = " | ".join(result.warnings)
    for p, _ in ALL:
        if matching(NOT_SUPPORTED, p) and NOT_SUPPORTED[matching(NOT_SUPPORTED, p)[0]][0] is None:
            assert f"{p.replace('[]', '[0]').split('.', 1)[0]}" in named and p.rsplit(".", 1)[1] in named, p
    assert "cpu-normalization-config: CPU normalization (the cpunormalization plugin) is not supported" in named


def _test_source(test_id: str) -> str:
    """The test's source with its decorators, and the module's helpers and constants it uses."""
    file, name = test_id.split("::")
    text = (ROOT / file).read_text()
    tree = ast.parse(text)
    tests = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and fnmatch.fnmatchcase(n.name, name)]
    used = {x.id for t in tests for x in ast.walk(t) if isinstance(x, ast.Name)}
    helpers = [n for n in tree.body if n not in tests and (
        (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in used)
        or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in used for t in n.targets)))]
    parts = [ast.get_source_segment(text, n) for n in tests + helpers]
    parts += [ast.get_source_segment(text, d) for t in tests for d in t.decorator_list]
    return "\n".join(p for p in parts if p) if tests else ""


def _named_field(pattern: str, path: str) -> str:
    """What a test must name: the field, or the section a pattern ending in `.*` stands for."""
    if pattern.endswith(".*"):
        return pattern[:-2].rsplit(".", 1)[-1].rstrip("]").rstrip("[")
    return path.rsplit(".", 1)[-1]


@pytest.mark.parametrize("pattern", sorted(HONOURED))
def test_each_honoured_field_has_a_test_that_names_it(pattern):
    assert any(matching([pattern], p) for p, _ in ALL), f"{pattern} matches no field of FULL"
    source = _test_source(HONOURED[pattern])
    assert source.strip(), f"{HONOURED[pattern]} does not exist"
    fields = {_named_field(pattern, p) for p, _ in ALL if fnmatch.fnmatchcase(p, pattern)}
    for name in fields:
        assert name in source, f"{HONOURED[pattern]} does not name {name}"


def _get(doc: Any, at: tuple) -> Any:
    for k in at:
        doc = doc[k]
    return doc


_NODESLO_FIELD = {"resource-threshold-config": "resourceUsedThresholdWithBE", "resource-qos-config":
                  "resourceQOSStrategy", "cpu-burst-config": "cpuBurstStrategy", "system-config": "systemStrategy"}


def test_each_honoured_value_reaches_what_acts_on_it():
    state, _result = apply(FULL)
    builder = state.current.nodeslo_builder()
    specs = {"cluster": builder.spec_for({}).model_dump(), "pool": builder.spec_for(POOL_LABELS).model_dump()}
    strategies = {"cluster": state.current.colocation.for_node({}, {}).strategy.to_dict(),
                  "pool": state.current.colocation.for_node(POOL_LABELS, {}).strategy.to_dict()}
    checked = 0
    for p, at in ALL:
        if not matching(HONOURED, p) or "nodeSelector" in at or at[-1] == "name" and len(at) == 4:
            continue
        key, value = at[0], _get(FULL, at)
        which = "pool" if "nodeConfigs" in at or "nodeStrategies" in at else "cluster"
        if key == "colocation-config":
            got = _get(strategies[which], at[3:] if which == "pool" else at[1:])
        elif key == "host-application-config":
            if "nodeConfigs" in at:
                continue  # its selector is the other pool's: the replacement is shown in the slo-controller's tests
            got = _get(specs[which]["hostApplications"], at[2:])
        else:
            got = _get(specs[which][_NODESLO_FIELD[key]], at[3:] if which == "pool" else at[2:])
        assert got == value, p
        checked += 1
    assert checked >= 150


def _switched_on(pattern: str, at: tuple) -> dict[str, Any]:
    """FULL with the feature of the field at `at` switched on, in the field's own strategy."""
    doc = copy.deepcopy(FULL)
    where, value = NOT_SUPPORTED[pattern][0]
    key = at[0]
    if key in ("cpu-normalization-config", "resource-amplification-config", "colocation-config"):
        base: list = [key] + (list(at[1:3]) if "nodeConfigs" in at else [])
    else:
        base = [key] + list(at[1:3] if "nodeStrategies" in at else at[1:2])
    section = next((s for s in at if isinstance(s, str) and s.endswith("Class")), "lsClass")
    target = _get(doc, tuple(base))
    parts = where.format(section=section).split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value
    return doc


@pytest.mark.parametrize("pattern", sorted(NOT_SUPPORTED))
def test_each_not_supported_field_switched_on_is_named(pattern):
    fields = [(p, at) for p, at in ALL if fnmatch.fnmatchcase(p, pattern)]
    assert fields, f"{pattern} matches no field of FULL"
    for p, at in fields[:3] + fields[-1:]:
        doc = FULL if NOT_SUPPORTED[pattern][0] is None else _switched_on(pattern, at)
        state, result = apply(doc)
        words = NOT_SUPPORTED[pattern][1]
        said = list(result.warnings) + list(result.errors.values())
        assert any(words in m and "not supported" in m for m in said), (p, said)
        if at[0] in _NODESLO_FIELD:  # what the NodeSLO carries, the node agent names too
            labels = POOL_LABELS if "nodeStrategies" in at else {}
            agent = agent_not_supported(state.current.nodeslo_builder().spec_for(labels))
            assert any("not supported" in m for m in agent), (p, agent)


@pytest.mark.parametrize("pattern", EMPTY)
def test_an_object_koordinator_defines_empty_refuses_any_field(pattern):
    (_p, at), *_ = [(p, at) for p, at in ALL if fnmatch.fnmatchcase(p, pattern)]
    doc = copy.deepcopy(FULL)
    _get(doc, at)["cpuQOS"] = {"enable": True}
    _, result = apply(doc)
    assert "unknown field" in result.errors[at[0]] and "strategy.cpuQOS" in result.errors[at[0]]


# ----------------------------------------------------------------------------- tests named above


def test_degrade_and_sync_thresholds_come_from_the_configmap():
    from koordcommon.records import NodeRecord
    from slo_controller.core.plan import plan_node
    from slo_controller.core.snapshot import MetricView, NodeSnapshot

    doc = {"enable": True, "degradeTimeMinutes": 2, "updateTimeThresholdSeconds": 60, "resourceDiffThreshold": 0.5}
    state, _result = apply({"colocation-config": doc})
    col = state.current.colocation.for_node({}, {})
    batch_memory = (10 << 30) - (10 << 30) * 35 // 100  # margin 35 %, nothing used
    node = NodeRecord("n1", capacity={"cpu": 10_000, "memory": 10 << 30},
                      allocatable={"cpu": 10_000, "memory": 10 << 30, "koordinator.sh/batch-cpu": 5_000,
                                   "koordinator.sh/batch-memory": batch_memory, "koordinator.sh/mid-cpu": 0,
                                   "koordinator.sh/mid-memory": 0})
    now = 10_000_000

    def plan(metric_age_ms, last_sync_ms):
        snap = NodeSnapshot(node, [], MetricView(now - metric_age_ms, (2_000, 2 << 30), (0, 0), {}), now)
        return plan_node(snap, col, "koordinator.sh/", last_sync_ms)

    # degradeTimeMinutes 2: a metric 150 s old is stale, one 90 s old is not
    assert plan(150_000, now).degraded and not plan(90_000, now).degraded
    # batch-cpu 10 - 4 (margin 40 %) = 6 cores against 5 written: a 20 % move, under resourceDiffThreshold 0.5
    fresh = plan(0, now - 30_000)
    assert fresh.values["koordinator.sh/batch-cpu"] == 6_000 and (fresh.write, fresh.reason) == (False, "unchanged")
    # updateTimeThresholdSeconds 60: a write older than 60 s is renewed
    assert plan(0, now - 61_000).reason == "expired"


def test_memory_qos_watermarks_reach_the_cgroup_files():
    from koordcommon.schemas import MemoryQOS
    from node_agent.qos.strategies import memory_qos

    cfg = MemoryQOS(enable=True, wmarkRatio=90, wmarkScalePermill=30, wmarkMinAdj=40)
    files = memory_qos.static(cfg)
    assert (files["memory.wmark_ratio"], files["memory.wmark_scale_factor"], files["memory.wmark_min_adj"]) == (
        90, 30, 40)


def test_the_cpu_burst_strategy_drives_the_quota_burst():
    from koordcommon.model import KubeQoS
    from koordcommon.records import ContainerSpec, PodRecord
    from koordcommon.resources import Resources
    from node_agent.collect.cgroups import CgroupLayout
    from node_agent.core.pods import PodInfo
    from node_agent.qos.files import MemoryCgroupFiles
    from node_agent.qos.model import PodState, QoSState
    from node_agent.qos.strategies import cpu_burst
    from node_agent.qos.strategies.cpuset import synthetic_topology

    layout = CgroupLayout(Path("/sim"), "v2", "cgroupfs")
    web = PodInfo.from_record(PodRecord(namespace="ns", name="web", uid="uid-web", phase="Running", containers=[
        ContainerSpec("main", {"cpu": 1000, "memory": 1 << 30}, {"cpu": 2000, "memory": 1 << 30})]))
    rel = layout.pod_dir(web.uid, web.kube_qos)

    def quota_after(burst: dict, node_cpu: int, current: int) -> int | None:
        state, result = apply({"cpu-burst-config": {"clusterStrategy": burst}})
        assert result.errors == {}
        cfg = state.current.nodeslo_builder().spec_for({})
        files = MemoryCgroupFiles({"cpuset.cpus": "0-15", "cpu.cfs_quota_us": str(current)})
        st = QoSState(node="n1", now_ms=100_000, capacity=Resources(16000, 64 << 30), allocatable=Resources(15000, 60 << 30),
                      node_usage=Resources(node_cpu, 1 << 30), pods=[PodState(web, rel, {"main": f"{rel}/c-main"},
                                                                                 Resources(500, 1 << 30), 0.3)],
                      qos_dirs={k: layout.qos_dir(k) for k in KubeQoS}, processors=synthetic_topology(16), read=files.read)
        writes = [w for w in cpu_burst.plan(st, cfg) if w.resource == "cpu.cfs_quota_us" and w.level == "container"]
        return writes[0].value if writes else None

    quota = {"policy": "cfsQuotaBurstOnly"}
    # a throttled container grows x1.2 while the share pool is idle (7 of 16 cores: 43.75 %, under 90 % of 50 %)
    assert quota_after(quota, 7000, 300_000) == 360_000
    # sharePoolThresholdPercent 40: the same node is overloaded, the quota shrinks x0.8
    assert quota_after({**quota, "sharePoolThresholdPercent": 40}, 7000, 300_000) == 240_000
    # cfsQuotaBurstPercent: the ceiling is 300 % of the 200000 base by default, 400 % when configured
    assert quota_after(quota, 2000, 580_000) == 600_000
    assert quota_after({**quota, "cfsQuotaBurstPercent": 400}, 2000, 580_000) == 696_000
    # cfsQuotaBurstPeriodSeconds 60: a limiter of 60 x (400 - 100) tokens per container
    state, _ = apply({"cpu-burst-config": {"clusterStrategy": {**quota, "cfsQuotaBurstPercent": 400,
                                                                "cfsQuotaBurstPeriodSeconds": 60}}})
    cfg = state.current.nodeslo_builder().spec_for({}).cpuBurstStrategy
    assert cpu_burst.limiter_configured(cfg)
    assert cpu_burst.new_limiter("c", cfg.cfsQuotaBurstPeriodSeconds, cfg.cfsQuotaBurstPercent, 0).capacity == 18_000
