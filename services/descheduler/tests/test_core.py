"""Table tests of LowNodeLoad: classification, anomaly detection, victim order, limits, exclusions."""

from __future__ import annotations

import pytest

from descheduler.core.anomaly import ANOMALY, OK, Detector
from descheduler.core.config import AnomalyCondition, LowNodeLoadArgs, MigrationLimits, NodePool
from descheduler.core.evictable import non_evictable_reason
from descheduler.core.lownodeload import (
    HIGH,
    LOW,
    NORMAL,
    UNKNOWN,
    LimitCounter,
    NodeState,
    PodState,
    classify,
    plan_round,
    usage_percent,
    victim_order,
)
from koordcommon.model import KubeQoS, PriorityClass, QoSClass
from koordcommon.records import ContainerSpec, OwnerRef, PodRecord
from koordcommon.resources import Resources

GI = 1024**3
POOL = NodePool(lowThresholds={"cpu": 45, "memory": 55}, highThresholds={"cpu": 75, "memory": 80})


def node(name, cpu_used, mem_used_gi, cpu_alloc=10_000, mem_alloc_gi=100, schedulable=True):
    usage = None if cpu_used is None else Resources(cpu_used, mem_used_gi * GI)
    return NodeState(name, Resources(cpu_alloc, mem_alloc_gi * GI), usage, schedulable=schedulable)


def pod(name, node_name, cpu, mem_gi=1, cls=PriorityClass.BATCH, qos=QoSClass.BE, priority=5000, created=0, workload=None,
        kube_qos=KubeQoS.BURSTABLE, requests=None):
    return PodState(
        namespace="default",
        name=name,
        uid=name,
        node=node_name,
        workload=workload or f"default/Deployment/{name}",
        priority_class=cls,
        priority=priority,
        kube_qos=kube_qos,
        qos=qos,
        requests=requests or Resources(cpu, mem_gi * GI),
        usage=Resources(cpu, mem_gi * GI),
        created_ms=created,
    )


@pytest.mark.parametrize(
    "cpu,mem,schedulable,expected",
    [
        (4500, 55, True, LOW),  # exactly at both low thresholds: low (<=)
        (4501, 10, True, NORMAL),  # cpu just over low
        (7500, 80, True, NORMAL),  # exactly at high: not high (strict >)
        (7501, 10, True, HIGH),
        (1000, 81, True, HIGH),  # one resource over high is enough
        (1000, 10, False, NORMAL),  # an unschedulable node is never low
        (None, 0, True, UNKNOWN),  # no fresh metric
    ],
)
def test_classify(cpu, mem, schedulable, expected):
    assert classify(POOL, node("n", cpu, mem, schedulable=schedulable)) == expected


def test_usage_percent_matches_koordinator_case():
    # TestResourceUsagePercentages: 1930m / 3287692Ki allocatable, 1220m / 3038982964 B used -> 63 / 90 (floored)
    pct = usage_percent(Resources(1930, 3287692 * 1024), Resources(1220, 3038982964))
    assert int(pct["cpu"]) == 63 and int(pct["memory"]) == 90


@pytest.mark.parametrize(
    "abnormalities,prior_marks,anomalous",
    [(1, 0, True), (2, 0, False), (2, 1, False), (2, 2, True), (5, 5, True), (5, 4, False)],
)
def test_detector_needs_more_than_n_consecutive_abnormal_rounds(abnormalities, prior_marks, anomalous):
    det = Detector(AnomalyCondition(consecutiveAbnormalities=abnormalities, consecutiveNormalities=1))
    for i in range(prior_marks):
        det.mark(False, float(i))
    assert (det.mark(False, float(prior_marks)) == ANOMALY) is anomalous


def test_detector_returns_to_ok_after_normal_rounds_or_timeout():
    cond = AnomalyCondition(consecutiveAbnormalities=1 + 1, consecutiveNormalities=1, timeoutSeconds=3)
    det = Detector(cond)
    assert [det.mark(x, 0.0) for x in (True, False, False, False)] == [OK, OK, OK, ANOMALY]
    assert det.mark(True, 1.0) == ANOMALY  # 1 normal round is not > 1
    assert det.mark(True, 1.5) == OK
    det2 = Detector(cond)
    for _ in range(3):
        det2.mark(False, 0.0)
    assert det2.state == ANOMALY
    assert det2.mark(False, 10.0) == OK  # timed out, counters cleared, this is the first new mark


def test_victim_order_class_priority_qos_then_usage_then_newest():
    high = Resources(7500, 80 * GI)
    used = Resources(9000, 50 * GI)  # 1500m over
    pods = [
        pod("prod-ls", "n", 1500, cls=PriorityClass.PROD, qos=QoSClass.LS, priority=9000),
        pod("batch-old-exact", "n", 1500, created=1),
        pod("batch-new-exact", "n", 1500, created=2),
        pod("batch-small", "n", 300, created=3),
        pod("free", "n", 100, cls=PriorityClass.FREE, priority=3000),
        pod("mid", "n", 1500, cls=PriorityClass.MID, qos=QoSClass.LS, priority=7000),
    ]
    order = [p.name for p in victim_order(POOL, pods, used, high)]
    # free first; among batch the pod whose usage matches the excess (score 2) before the small one,
    # and the newer of two equal ones first; then mid; prod last.
    assert order == ["free", "batch-new-exact", "batch-old-exact", "batch-small", "mid", "prod-ls"]


def _args(**kw):
    defaults = dict(nodePools=[NodePool(anomalyCondition=AnomalyCondition(consecutiveAbnormalities=1))],
                    limits=MigrationLimits(maxMigratingPerNode=5, maxMigratingPerWorkload=5,
                                           maxUnavailablePerWorkload=5, maxMigratingPerRound=10))
    defaults.update(kw)
    return LowNodeLoadArgs(**defaults)


def test_round_moves_pods_until_the_hot_node_is_under_high():
    nodes = [node("hot", 9000, 50), node("cold-a", 1000, 10), node("cold-b", 2000, 20)]
    pods = [pod(f"b{i}", "hot", 600, created=i) for i in range(6)] + [
        pod("web", "hot", 3000, cls=PriorityClass.PROD, qos=QoSClass.LS, priority=9000)
    ]
    plan = plan_round(_args(), nodes, pods, {}, now_s=0)
    assert plan.classes == {"hot": HIGH, "cold-a": LOW, "cold-b": LOW}
    # 9000 - 7500 = 1500m over: three 600m batch pods bring it to 7200m (the third crosses below)
    moved = [m.pod.name for m in plan.migrations]
    assert moved == ["b5", "b4", "b3"]
    assert all(m.target in ("cold-a", "cold-b") for m in plan.migrations)
    assert "web" not in moved


def test_round_waits_for_anomaly_condition():
    args = _args(nodePools=[NodePool(anomalyCondition=AnomalyCondition(consecutiveAbnormalities=5))])
    nodes = lambda: [node("hot", 9000, 50), node("cold", 1000, 10)]  # noqa: E731
    pods = [pod("b", "hot", 2000)]
    detectors = {}
    counts = [len(plan_round(args, nodes(), pods, detectors, now_s=float(i)).migrations) for i in range(7)]
    # abnormal more than 5 consecutive rounds: the 6th round acts
    assert counts == [0, 0, 0, 0, 0, 1, 1]


def test_round_respects_node_fit_and_limits():
    nodes = [node("hot", 9500, 50), node("cold", 4000, 10)]  # cold high threshold 7500: 3500m room
    pods = [pod("big", "hot", 4000, created=2), pod("fits", "hot", 900, created=1)]
    plan = plan_round(_args(), nodes, pods, {}, now_s=0)
    assert [m.pod.name for m in plan.migrations] == ["fits"]
    assert any(s.pod_key == "default/big" and "fits on no low node" in s.reason for s in plan.skipped)

    limited = _args(limits=MigrationLimits(maxMigratingPerNode=1, maxMigratingPerRound=10))
    nodes = [node("hot", 9900, 50), node("cold", 1000, 10)]
    pods = [pod(f"p{i}", "hot", 500, created=i) for i in range(4)]
    plan = plan_round(limited, nodes, pods, {}, now_s=0)
    assert len(plan.migrations) == 1
    assert any("maxMigratingPerNode" in s.reason for s in plan.skipped)


def test_workload_limits_count_unavailable_pods():
    counter = LimitCounter()
    args = _args(limits=MigrationLimits(maxUnavailablePerWorkload=1, maxMigratingPerWorkload=2))
    p = pod("a", "hot", 100, workload="default/Deployment/web")
    assert counter.refusal(args, p, workload_unavailable=1) == "workload default/Deployment/web reached maxUnavailablePerWorkload"
    assert counter.refusal(args, p, workload_unavailable=0) is None


def _record(**kw):
    base = dict(namespace="default", name="p", uid="u", node_name="n", phase="Running",
                owners=[OwnerRef("ReplicaSet", "web-abc")], containers=[ContainerSpec("c")])
    base.update(kw)
    return PodRecord(**base)


@pytest.mark.parametrize(
    "record,reason",
    [
        (_record(), None),
        (_record(owners=[OwnerRef("DaemonSet", "ds")]), "DaemonSet pod"),
        (_record(annotations={"kubernetes.io/config.mirror": "x"}), "mirror or static pod"),
        (_record(annotations={"kubernetes.io/config.source": "file"}), "mirror or static pod"),
        (_record(priority=2_000_000_000), "system-critical pod"),
        (_record(volume_kinds=["emptyDir"]), "pod with local storage"),
        (_record(volume_kinds=["emptyDir"], annotations={"descheduler.alpha.kubernetes.io/evict": ""}), None),
        (_record(owners=[]), "bare pod (no controller would recreate it)"),
        (_record(annotations={"descheduler.alpha.kubernetes.io/prefer-no-eviction": "true"}), "annotated not to be evicted"),
        (_record(deletion_ms=1), "terminating"),
        (_record(phase="Pending"), "pod is Pending"),
    ],
)
def test_exclusions(record, reason):
    assert non_evictable_reason(record) == reason


def test_excluded_namespaces_are_skipped():
    args = _args(evictableNamespaces={"exclude": ["default"]})
    plan = plan_round(args, [node("hot", 9000, 50), node("cold", 1000, 10)], [pod("b", "hot", 2000)], {}, now_s=0)
    assert plan.migrations == []
    assert plan.skipped[0].reason == "namespace default is not evictable"


def test_invalid_thresholds_are_rejected():
    with pytest.raises(ValueError, match="exceeds its high threshold"):
        NodePool(lowThresholds={"cpu": 80}, highThresholds={"cpu": 70})
