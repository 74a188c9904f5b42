"""The write rule: Koordinator's TestIsResourceDiff and Test_isNodeResourceSyncNeeded tables,
and the plan that ties calculation and writing together."""

from __future__ import annotations

import pytest
from koordcommon.records import NodeRecord
from slo_controller.core.config import ColocationConfig, ColocationStrategy, merge_strategy
from slo_controller.core.plan import plan_node
from slo_controller.core.snapshot import MetricView, NodeSnapshot, PodLoad
from slo_controller.core.sync import is_quantity_diff, is_resource_diff, sync_decision

G = 10**9
NOW = 1_700_000_000_000
BATCH = ("koordinator.sh/batch-cpu", "koordinator.sh/batch-memory")


@pytest.mark.parametrize(
    "old, new, threshold, diff",
    [
        ({"cpu": 1000}, {"cpu": 9000}, 2, True),  # |9 - 1| = 8 > 1 x 2
        ({"cpu": 1000}, {"cpu": 2000}, 2, False),  # 1 > 2 is false
        ({}, {"cpu": 2000}, 2, True),  # present in only one
        ({"cpu": 0}, {"cpu": 0}, 2, False),  # strict: two zeros never differ
        ({}, {}, 2, False),  # in neither
        ({"cpu": 1000}, {"cpu": None}, 0.1, True),  # removed
    ],
)
def test_is_resource_diff(old, new, threshold, diff):
    assert is_resource_diff(old, new, ["cpu"], threshold) is diff


@pytest.mark.parametrize(
    "last_sync_ms, new, need",
    [
        (NOW - 10 * 60_000, (20, 40 * G), True),  # expired (update threshold 300 s)
        (NOW, (15, 40 * G), True),  # cpu diff: |15 - 20| = 5 > 2
        (NOW, (20, 70 * G), True),  # memory diff
        (NOW, (20, 40 * G), False),  # unchanged
        (None, (20, 40 * G), True),  # never written
        (NOW - 300_000, (20, 40 * G), False),  # exactly 300 s: not yet expired (strict >)
        (NOW, (21, 43 * G), False),  # within 10 %: 1 <= 2 and 3G <= 4G
    ],
)
def test_is_node_resource_sync_needed(last_sync_ms, new, need):
    old = dict(zip(BATCH, (20, 40 * G)))
    got, _ = sync_decision(old, dict(zip(BATCH, new)), last_sync_ms, NOW, 300_000, 0.1)
    assert got is need


def test_quantity_diff_rounding():
    assert is_quantity_diff(100, 111, 0.1) is True
    assert is_quantity_diff(100, 110, 0.1) is False


def _snapshot(alloc_extra=None, metric_age_ms=0):
    n = NodeRecord("n1", capacity={"cpu": 100_000, "memory": 120 * G},
                   allocatable={"cpu": 100_000, "memory": 120 * G, **(alloc_extra or {})})
    m = MetricView(NOW - metric_age_ms, (30_000, 40 * G), (4_000, 6 * G), {"ns/p": (22_000, 28 * G, True)})
    return NodeSnapshot(n, [PodLoad("ns/p", 30_000, 40 * G, True, True, True, False)], m, NOW)


def test_plan_writes_batch_and_mid_under_prefix():
    col = ColocationConfig(merge_strategy(ColocationStrategy(), {"enable": True})).for_node({}, {})
    plan = plan_node(_snapshot(), col, "kubernetes.io/", None)
    # batch: 100-40-4-22 = 34c; 120-42-6-28 = 44G; mid: no reclaimable -> 0
    assert plan.values == {
        "kubernetes.io/mid-cpu": 0,
        "kubernetes.io/mid-memory": 0,
        "kubernetes.io/batch-cpu": 34_000,
        "kubernetes.io/batch-memory": 44 * G,
    }
    assert plan.write and plan.reason == "expired"
    assert plan.batch.cpu_milli == 34_000 and plan.remove_resources == []
    # already written a moment ago with close values: nothing to do
    written = {"kubernetes.io/batch-cpu": 33_000, "kubernetes.io/batch-memory": 44 * G,
               "kubernetes.io/mid-cpu": 0, "kubernetes.io/mid-memory": 0}
    again = plan_node(_snapshot(written), col, "kubernetes.io/", NOW - 1000)
    assert (again.write, again.reason) == (False, "unchanged")


def test_plan_degraded_removes_and_disabled_resets():
    col = ColocationConfig(merge_strategy(ColocationStrategy(), {"enable": True})).for_node({}, {})
    written = {"koordinator.sh/batch-cpu": 34_000, "koordinator.sh/batch-memory": 44 * G}
    plan = plan_node(_snapshot(written, metric_age_ms=16 * 60_000), col, "koordinator.sh/", NOW - 1000)
    assert plan.degraded and plan.write and plan.reason.startswith("diff:")
    assert plan.set_resources == {} and len(plan.remove_resources) == 4
    assert plan.batch is None
    # cluster switch off while the pool says on: disabled everywhere
    off = ColocationConfig(
        ColocationStrategy(enable=False),
    ).for_node({}, {})
    plan = plan_node(_snapshot(written), off, "koordinator.sh/", NOW - 1000)
    assert not plan.enabled and not plan.degraded and plan.write
    assert plan.values["koordinator.sh/batch-cpu"] is None
