"""The explanation builders: given the services' explain answers, the printed breakdown."""

from __future__ import annotations

import pytest
from koordctl import explain_render as er

GIB = 1024**3


def node_item(**over) -> dict:
    item = {
        "ts": 1_700_000_000_000, "degraded": False, "reason": "diff:koordinator.sh/batch-cpu", "written": True,
        "decision": "diff:koordinator.sh/batch-cpu", "resourceDiffThreshold": 0.1, "updateTimeThresholdSeconds": 300,
        "previous": {"koordinator.sh/batch-cpu": 5100}, "explained": True,
        "hpPods": [{"pod": "shop/web-1", "countedBy": "usage", "used": [2500, 6 * GIB], "request": [4000, 8 * GIB]},
                   {"pod": "shop/cache", "countedBy": "request", "used": [4500, 10 * GIB], "request": [4500, 10 * GIB]}],
        "resources": {
            "cpu": {"unit": "milli-cores", "policy": "usage", "reclaimThresholdPercent": 60, "batchThresholdPercent": None,
                    "systemUsed": 700, "nodeReserved": 0, "systemTerm": "systemUsageOrNodeReserved",
                    "hpTerm": "podHPUsed", "unclamped": 1900, "batch": 1900,
                    "terms": {"capacity": 16000, "safetyMargin": 6400, "systemUsageOrNodeReserved": 700, "podHPUsed": 7000}},
            "memory": {"unit": "bytes", "policy": "request", "reclaimThresholdPercent": 65, "batchThresholdPercent": None,
                       "systemUsed": 2 * GIB, "nodeReserved": 3 * GIB, "systemTerm": "nodeReserved",
                       "hpTerm": "podHPRequest", "unclamped": -GIB, "batch": 0,
                       "terms": {"capacity": 64 * GIB, "safetyMargin": 22 * GIB, "nodeReserved": 3 * GIB,
                                 "podHPRequest": 40 * GIB}},
        },
        "moved": {"cpu": {"batch_delta": -3200, "most": "podHPUsed", "terms": [
            {"term": "podHPUsed", "from": 4000, "to": 7000, "delta": 3000},
            {"term": "systemUsageOrNodeReserved", "from": 500, "to": 700, "delta": 200}]},
            "memory": {"batch_delta": 0, "most": None, "terms": []}},
    }  # fmt: skip
    item.update(over)
    return item


def test_node_change_prints_the_formula_decision_and_what_moved():
    lines = er.node_change(node_item())
    assert lines == [
        ("2023-11-14 22:13:20Z  written: koordinator.sh/batch-cpu moved more than resourceDiffThreshold 0.1 of its "
        "previous value 5100"),
        "  cpu: policy usage, reclaim threshold 60 %",
        ("    batch 1.9 cores = max(capacity 16 cores - safetyMargin 6.4 cores - systemUsageOrNodeReserved 0.7 cores"
        " - podHPUsed 7 cores, 0)"),
        "      systemUsageOrNodeReserved = max(system usage 0.7 cores, node reserved 0 cores)",
        "  memory: policy request, reclaim threshold 65 %",
        "    batch 0Gi = max(capacity 64Gi - safetyMargin 22Gi - nodeReserved 3Gi - podHPRequest 40Gi, 0)",
        "      the formula gives -1Gi: floored at 0",
        "  HP pods (2; the 2 using most CPU), counted by usage or, without a metric, request:",
        "    shop/cache: 4.5 cores, 10Gi (by request)",
        "    shop/web-1: 2.5 cores, 6Gi (by usage)",
        "  since the previous report:",
        ("    cpu: batch -3.2 cores; moved most: podHPUsed 4 cores -> 7 cores (+3 cores); also "
        "systemUsageOrNodeReserved +0.2 cores"),
        "    memory: no term moved (batch +0Gi)",
    ]  # fmt: skip


@pytest.mark.parametrize("over, expected", [
    ({"decision": "expired", "moved": None},
     ["written: the last write was older than updateTimeThresholdSeconds 300", "first report shown"]),
    ({"degraded": True, "explained": False, "resources": {}, "decision": "expired"},
     ["degraded: batch and mid removed"]),
    ({"explained": False, "resources": {}, "decision": "disabled"}, ["colocation disabled", "no inputs stored"]),
    ({"previous": {}}, ["written: koordinator.sh/batch-cpu was not set on the node before"]),
    ({"resources": {**node_item()["resources"], "cpu": {**node_item()["resources"]["cpu"], "batchThresholdPercent": 30,
                                                         "unclamped": 6000, "batch": 4800}}},
     ["batch capped at 30 % of capacity", "the formula gives 6 cores: capped by the batch threshold"]),
])  # fmt: skip
def test_node_change_cases(over, expected):
    text = "\n".join(er.node_change(node_item(**over)))
    for words in expected:
        assert words in text, text


EXTENDER = {
    "pod": "default/web", "judged_at_ms": 1_700_000_010_000, "node": None,
    "estimate": {"cpu_milli": 3400, "memory_bytes": 6012954214}, "batch_request": {"cpu_milli": 0, "memory_bytes": 0},
    "decision": {"verb": "filter", "ts_ms": 1_700_000_000_000, "candidates": 2, "passed": 1, "rejected": {}},
    "candidates": 2, "passed": 1, "rejected": {"node(s) cpu usage exceed threshold": 1},
    "nodes": [
        {"node": "idle", "bound": False, "passed": True, "rejected_by": None, "reason": None,
         "plugins": [{"plugin": "NodeKnown", "passed": True, "reason": None, "numbers": {
                         "node": True, "node_metric": True, "node_resource": False, "fail_unknown_nodes": True}},
                     {"plugin": "LoadAwareScheduling", "passed": True, "reason": None, "numbers": {
                         "metric": {"age_s": 10.0, "expired": False, "expiration_s": 180}, "judged_by": "usageThresholds",
                         "cpu": {"used": 8000, "estimate": 3400, "allocatable": 32000, "percent": 36, "threshold": 65,
                                 "over": False}}}],
         "score": {"total": 64, "by_plugin": {"LoadAwareScheduling": 64}, "weights": {"LoadAwareScheduling": 1},
                   "extender": 10}},
        {"node": "hot", "bound": False, "passed": False, "rejected_by": "LoadAwareScheduling",
         "reason": "node(s) cpu usage exceed threshold",
         "plugins": [{"plugin": "LoadAwareScheduling", "passed": False, "reason": "node(s) cpu usage exceed threshold",
                      "numbers": {"judged_by": "usageThresholds", "pending_estimates": 1,
                                  "cpu": {"used": 20000, "estimate": 3400, "allocatable": 32000, "percent": 73,
                                          "threshold": 65, "over": True}}},
                     {"plugin": "BatchMidFit", "passed": True, "reason": None,
                      "numbers": {"note": "the pod asks no batch or mid resources"}}],
         "score": {}},
    ],
}  # fmt: skip


def test_pod_report_shows_each_plugin_with_its_numbers_and_the_scores():
    text = er.pod_report({"pod": "default/web", "services": {
        "scheduler-extender": EXTENDER,
        "descheduler": {"error": "http://127.0.0.1:1/api/v1/explain/pods/default/web: cannot connect"},
        "metrics-collector": {"decisions": [{"kind": "evict", "action": "evict", "ts": 1_700_000_000_000, "node": "n1",
                                             "reason": "BEMemoryEvict: node memory over threshold", "details": {
                                                 "inputs": {"node_usage_percent": 82, "threshold_percent": 70,
                                                            "victim_order": [{"pod": "jobs/a"}, {"pod": "jobs/b"}]}}}]},
    }})  # fmt: skip
    for line in [
        "  last asked: filter at 2023-11-14 22:13:20Z over 2 node(s), 1 passed",
        "  1 of 2 candidate node(s) pass the filter",
        "    1 x node(s) cpu usage exceed threshold",
        "  idle: passes",
        "      known from: Node, NodeMetric",
        ("      cpu: estimated used 8 cores + pod estimate 3.4 cores = 36 % of allocatable 32 cores, within threshold "
        "65 % (usageThresholds)"),
        "    score 64 of 100 (LoadAwareScheduling 64 x1); extender score 10 of 10",
        "  hot: rejected by LoadAwareScheduling: node(s) cpu usage exceed threshold",
        "    LoadAwareScheduling: FAIL node(s) cpu usage exceed threshold",
        ("      cpu: estimated used 20 cores + pod estimate 3.4 cores = 73 % of allocatable 32 cores, over threshold "
        "65 % (usageThresholds)"),
        "      1 pod(s) counted by their estimate (not yet in the metric)",
        "      the pod asks no batch or mid resources",
        "descheduler: not asked (http://127.0.0.1:1/api/v1/explain/pods/default/web: cannot connect)",
        "  2023-11-14 22:13:20Z evict evict on n1: BEMemoryEvict: node memory over threshold",
        "      read: node_usage_percent 82, threshold_percent 70",
        "      victim order: jobs/a, jobs/b",
    ]:  # fmt: skip
        assert line in text.splitlines(), f"{line!r} not in:\n{text}"


@pytest.mark.parametrize("value, resource, signed, expected", [
    (1900, "cpu", False, "1.9 cores"), (16000, "cpu", False, "16 cores"), (-3200, "cpu", True, "-3.2 cores"),
    (0, "memory", True, "+0Gi"), (3 * GIB // 2, "memory", False, "1.5Gi"), (None, "cpu", False, "?"),
])  # fmt: skip
def test_amount(value, resource, signed, expected):
    assert er.amount(value, resource, signed) == expected
