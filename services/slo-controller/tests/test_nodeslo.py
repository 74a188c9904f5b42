"""NodeSLO specs from the resource-threshold / resource-qos / cpu-burst keys."""

from __future__ import annotations

import json

import pytest
from slo_controller.core.configmap import ConfigState


def spec_for(data, labels=None):
    state = ConfigState()
    result = state.apply(data)
    assert result.errors == {}
    return state.current.nodeslo_builder().spec_for(labels or {})


def test_defaults_are_koordinators():
    spec = spec_for({})
    t = spec.resourceUsedThresholdWithBE
    assert (t.enable, t.cpuSuppressThresholdPercent, t.cpuSuppressPolicy, t.memoryEvictThresholdPercent) == (
        False, 65, "cpuset", 70)
    b = spec.cpuBurstStrategy
    assert (b.policy, b.cpuBurstPercent, b.cfsQuotaBurstPercent, b.cfsQuotaBurstPeriodSeconds,
            b.sharePoolThresholdPercent) == ("none", 1000, 300, -1, 50)
    q = spec.resourceQOSStrategy
    assert [c.cpuQOS.groupIdentity for c in (q.lsrClass, q.lsClass, q.beClass, q.systemClass)] == [2, 2, -1, 0]
    assert [c.memoryQOS.wmarkMinAdj for c in (q.lsrClass, q.lsClass, q.beClass)] == [-25, -25, 50]
    assert q.beClass.memoryQOS.wmarkRatio == 95 and q.systemClass.memoryQOS.wmarkScalePermill == 50


def test_cluster_and_node_strategies_merge():
    data = {
        "resource-threshold-config": json.dumps({
            "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60},
            "nodeStrategies": [
                {"name": "hot", "nodeSelector": {"matchLabels": {"pool": "hot"}}, "cpuSuppressThresholdPercent": 45},
                {"name": "hot2", "nodeSelector": {"matchLabels": {"pool": "hot"}}, "cpuSuppressThresholdPercent": 10},
            ],
        }),
        "resource-qos-config": json.dumps({
            "clusterStrategy": {"beClass": {"memoryQOS": {"enable": True, "throttlingPercent": 80}}},
        }),
        "cpu-burst-config": json.dumps({"clusterStrategy": {"policy": "auto"}}),
    }
    cold = spec_for(data, {"pool": "cold"})
    hot = spec_for(data, {"pool": "hot"})
    assert cold.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent == 60
    assert hot.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent == 45  # first match wins
    assert hot.resourceUsedThresholdWithBE.enable is True  # inherited from the cluster strategy
    be = cold.resourceQOSStrategy.beClass.memoryQOS
    assert (be.enable, be.throttlingPercent, be.wmarkMinAdj) == (True, 80, 50)  # deep merge keeps defaults
    assert cold.cpuBurstStrategy.policy == "auto" and cold.cpuBurstStrategy.cpuBurstPercent == 1000


@pytest.mark.parametrize(
    "key, doc, message",
    [
        ("resource-threshold-config", {"clusterStrategy": {"cpuSuppressThresholdPercent": 130}},
         "resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent: must be in [0, 100], got 130"),
        ("resource-threshold-config", {"clusterStrategy": {"cpuSuppressPolicy": "magic"}},
         "cpuSuppressPolicy: must be one of cpuset, cfsQuota"),
        ("cpu-burst-config", {"clusterStrategy": {"policy": "always"}}, "policy: must be one of none"),
        ("resource-qos-config", {"clusterStrategy": {"lsClass": {"cpuQOS": {"groupIdentity": 5}}}},
         "lsClass.cpuQOS.groupIdentity: must be in [-1, 2], got 5"),
        ("resource-threshold-config", {"clusterStrategy": {"enable": "maybe"}}, "clusterStrategy.enable"),
        ("cpu-burst-config", {"nodeStrategies": [{"name": "x", "nodeSelector": {}, "sharePoolThresholdPercent": -1}]},
         "cpu-burst-config.nodeStrategies[0].sharePoolThresholdPercent: must be in [0, 100], got -1"),
    ],
)
def test_invalid_strategies_are_rejected(key, doc, message):
    state = ConfigState()
    result = state.apply({key: json.dumps(doc)})
    assert message in result.errors[key]


def test_nodes_with_the_same_strategies_share_one_spec():
    state = ConfigState()
    state.apply({})
    b = state.current.nodeslo_builder()
    assert b.spec_for({"a": "1"}) is b.spec_for({"b": "2"})


