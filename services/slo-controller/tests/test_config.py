"""The slo-controller-config ConfigMap: defaults, merging, validation, keep-last-good, NodeSLO."""

from __future__ import annotations

import json

import pytest
from slo_controller.core.config import (
    SHIPPED_CONFIG_DATA,
    ColocationStrategy,
    ConfigError,
    parse_colocation_config,
)
from slo_controller.core.configmap import ConfigState, unwrap_configmap


def test_defaults_are_koordinators():
    s = ColocationStrategy()
    assert (s.enable, s.cpuReclaimThresholdPercent, s.memoryReclaimThresholdPercent) == (False, 60, 65)
    assert (s.degradeTimeMinutes, s.updateTimeThresholdSeconds, s.resourceDiffThreshold) == (15, 300, 0.1)
    assert (s.metricAggregateDurationSeconds, s.metricReportIntervalSeconds) == (300, 60)
    assert s.metricAggregatePolicy == {"durations": ["5m", "10m", "30m"]}
    assert (s.midCPUThresholdPercent, s.midMemoryThresholdPercent, s.midUnallocatedPercent) == (100, 100, 0)
    assert (s.cpuCalculatePolicy, s.memoryCalculatePolicy) == ("usage", "usage")
    assert (s.batchCPUThresholdPercent, s.batchMemoryThresholdPercent) == (None, None)


def test_merge_keeps_unset_fields_and_nulls():
    cfg = parse_colocation_config({"enable": True, "cpuReclaimThresholdPercent": 70,
                                   "memoryReclaimThresholdPercent": None, "unknownField": 1,
                                   "metricAggregatePolicy": {"durations": ["5m"]}})
    assert cfg.cluster.cpuReclaimThresholdPercent == 70
    assert cfg.cluster.memoryReclaimThresholdPercent == 65
    assert cfg.cluster.metricAggregatePolicy == {"durations": ["5m"]}


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"degradeTimeMinutes": 0}, "colocation-config: degradeTimeMinutes must be > 0, got 0"),
        ({"cpuReclaimThresholdPercent": -1}, "cpuReclaimThresholdPercent must be >= 0, got -1"),
        ({"resourceDiffThreshold": 0}, "resourceDiffThreshold must be in (0, 1], got 0.0"),
        ({"midCPUThresholdPercent": 101}, "midCPUThresholdPercent must be in [0, 100], got 101"),
        ({"memoryCalculatePolicy": "guess"}, "memoryCalculatePolicy must be one of usage, request, maxUsageRequest"),
        ({"cpuReclaimThresholdPercent": "60"}, 'colocation-config.cpuReclaimThresholdPercent: expected int, got "60"'),
        ({"cpuReclaimThresholdPercent": 60.5}, "expected int, got 60.5"),
        ({"enable": "yes"}, 'colocation-config.enable: expected bool, got "yes"'),
        ({"nodeConfigs": [{"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]},
         "operator: 'Near' is not one of In, NotIn, Exists, DoesNotExist"),
        ([1, 2], "colocation-config: must be a JSON object, got list"),
    ],
)
def test_invalid_configs_are_rejected_with_clear_messages(doc, message):
    with pytest.raises(ConfigError) as e:
        parse_colocation_config(doc)
    assert message in str(e.value)


def test_threshold_above_100_is_valid():
    assert parse_colocation_config({"cpuReclaimThresholdPercent": 150}).cluster.cpuReclaimThresholdPercent == 150


def test_invalid_node_config_falls_back_to_cluster_strategy():
    cfg = parse_colocation_config({
        "enable": True, "cpuReclaimThresholdPercent": 55,
        "nodeConfigs": [
            {"name": "bad", "nodeSelector": {"matchLabels": {"pool": "x"}}, "degradeTimeMinutes": -3},
            {"name": "nil-selector", "cpuReclaimThresholdPercent": 99},
            {"name": "expr", "nodeSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
             "cpuReclaimThresholdPercent": 20},
        ],
    })
    assert "degradeTimeMinutes must be > 0" in cfg.warnings[0]
    bad = cfg.for_node({"pool": "x"}, {})
    assert (bad.source, bad.strategy.cpuReclaimThresholdPercent) == ("nodeConfig:bad", 55)
    assert cfg.for_node({}, {}).source == "cluster"  # a nil selector matches no node
    assert cfg.for_node({"gpu": ""}, {}).strategy.cpuReclaimThresholdPercent == 20


def test_enable_rules():
    off_cluster = parse_colocation_config({"enable": False, "nodeConfigs": [
        {"name": "p", "nodeSelector": {"matchLabels": {"p": "1"}}, "enable": True}]})
    assert off_cluster.for_node({"p": "1"}, {}).enabled is False
    on_cluster = parse_colocation_config({"enable": True, "nodeConfigs": [
        {"name": "p", "nodeSelector": {"matchLabels": {"p": "1"}}, "enable": False}]})
    assert on_cluster.for_node({"p": "1"}, {}).enabled is False
    assert on_cluster.for_node({"p": "2"}, {}).enabled is True


def test_bad_annotation_is_ignored_with_a_warning():
    cfg = parse_colocation_config({"enable": True})
    col = cfg.for_node({}, {"node.koordinator.sh/colocation-strategy": '{"degradeTimeMinutes": 0}'})
    assert col.source == "cluster" and "degradeTimeMinutes must be > 0" in col.warnings[0]
    col = cfg.for_node({}, {"node.koordinator.sh/colocation-strategy": "{oops"})
    assert "invalid JSON" in col.warnings[0]


def test_config_state_keeps_last_good_per_key():
    state = ConfigState()
    first = state.apply(SHIPPED_CONFIG_DATA)
    assert first.errors == {} and state.current.colocation.cluster.enable is True
    assert state.current.threshold.cluster["enable"] is True

    good = {"colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercent": 70})}
    assert state.apply(good).changed == ("colocation-config", "resource-threshold-config")
    assert state.current.colocation.cluster.cpuReclaimThresholdPercent == 70
    # the threshold key disappeared -> defaults (enable false)
    assert state.current.threshold.cluster["enable"] is False

    bad = {
        "colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercent": -5}),
        "cpu-burst-config": json.dumps({"clusterStrategy": {"policy": "auto", "cpuBurstPercent": 500}}),
    }
    result = state.apply(bad)
    assert "cpuReclaimThresholdPercent must be >= 0, got -5" in result.errors["colocation-config"]
    assert state.current.colocation.cluster.cpuReclaimThresholdPercent == 70  # last good kept
    assert state.current.burst.cluster["policy"] == "auto"  # the other key still applied

    broken_json = state.apply({"colocation-config": "{not json"})
    assert "colocation-config: invalid JSON" in broken_json.errors["colocation-config"]
    assert state.current.colocation.cluster.cpuReclaimThresholdPercent == 70


def test_unwrap_configmap_object_or_data():
    data = {"colocation-config": '{"enable": true}'}
    assert unwrap_configmap({"apiVersion": "v1", "kind": "ConfigMap", "data": data}) == data
    assert unwrap_configmap(data) == data
    with pytest.raises(ConfigError):
        unwrap_configmap(["x"])
