"""Table tests of LowNodeLoad: classification, anomaly detection, victim order, limits, exclusions."""

from __future__ import annotations

import dataclasses

import pytest
from descheduler.core import migration as mig
from descheduler.core.anomaly import ANOMALY, OK, Detector
from descheduler.core.config import AnomalyCondition, LowNodeLoadArgs, MigrationLimits, NodePool, scaled_limit
from descheduler.core.evictable import non_evictable_reason
from descheduler.core.lownodeload import (
    BOTH_LOW,
    HIGH,
    LOW,
    NORMAL,
    PROD_DETECTOR,
    PROD_HIGH,
    PROD_LOW,
    UNKNOWN,
    BalancePass,
    LimitCounter,
    Load,
    NodeState,
    PodState,
    RoundPlan,
    RoundState,
    Skip,
    claim_target,
    classify,
    classify_nodes,
    enough_low_nodes,
    evict_from,
    exclusion,
    forbidden_by_replicas,
    hottest_first,
    overutilized_reason,
    pick_sources,
    plan_round,
    pool_members,
    prod_room,
    room_under,
    threshold_qty,
    usage_percent,
    victim_order,
    victims_on,
)
from koordcommon.model import KubeQoS, PriorityClass, QoSClass
from koordcommon.records import ContainerSpec, OwnerRef, PodRecord
from koordcommon.resources import Resources

GI = 1024**3
POOL = NodePool(lowThresholds={"cpu": 45, "memory": 55}, highThresholds={"cpu": 75, "memory": 80})


def node(name, cpu_used, mem_used_gi, cpu_alloc=10_000, mem_alloc_gi=100, schedulable=True, pods=0, max_pods=0):
    usage = None if cpu_used is None else Load(cpu_used, mem_used_gi * GI, pods)
    return NodeState(name, Load(cpu_alloc, mem_alloc_gi * GI, max_pods), usage, schedulable=schedulable)


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
    # TestResourceUsagePercentages: 1930m / 3287692Ki / 29 pods allocatable, 1220m / 3038982964 B / 11 pods
    # used -> 63 / 90 / 37 (floored)
    pct = usage_percent(Load(1930, 3287692 * 1024, 29), Load(1220, 3038982964, 11))
    assert (int(pct["cpu"]), int(pct["memory"]), int(pct["pods"])) == (63, 90, 37)


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
    high = Load(7500, 80 * GI)
    used = Load(9000, 50 * GI)  # 1500m over
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
    defaults = {"anomalyCondition": AnomalyCondition(consecutiveAbnormalities=1),
                "limits": MigrationLimits(maxMigratingPerNode=5, maxMigratingPerWorkload=5,
                                          maxUnavailablePerWorkload=5, maxMigratingPerRound=10)}
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
    # each migration carries what it read: usage against the threshold as it stood then, the
    # victim order on the node (batch before prod, newest first), the targets' room
    first, third = plan.migrations[0].inputs, plan.migrations[2].inputs
    assert (first["usage"]["cpu"], first["high"]["cpu"], first["usage_percent"]["cpu"]) == (9000, 7500, 90.0)
    assert third["usage"]["cpu"] == 9000 - 2 * 600
    assert first["high_threshold_percent"]["cpu"] == 75.0
    assert [v["pod"] for v in first["victim_order"]] == [
        "default/b5", "default/b4", "default/b3", "default/b2", "default/b1", "default/b0", "default/web"]
    assert first["victim_order"][0]["usage"]["cpu_milli"] == 600 and first["pass"] == "node"
    assert first["room"]["cpu"] > third["room"]["cpu"]


def test_round_waits_for_anomaly_condition():
    args = _args(anomalyCondition=AnomalyCondition(consecutiveAbnormalities=5))
    nodes = lambda: [node("hot", 9000, 50), node("cold", 1000, 10)]
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
    base = {"namespace": "default", "name": "p", "uid": "u", "node_name": "n", "phase": "Running",
                "owners": [OwnerRef("ReplicaSet", "web-abc")], "containers": [ContainerSpec("c")]}
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


def test_reason_names_the_resource_as_koordinator_does():
    pool = NodePool(lowThresholds={"cpu": 20}, highThresholds={"cpu": 50},
                    anomalyCondition=AnomalyCondition(consecutiveAbnormalities=1))
    nodes = [node("hot", 2000, 10, cpu_alloc=3000), node("cold", 100, 10, cpu_alloc=3000)]
    plan = plan_round(_args(nodePools=[pool]), nodes, [pod("b", "hot", 600)], {}, now_s=0)
    assert [m.reason for m in plan.migrations] == ["node is overutilized, node cpu usage(66.67%)>threshold(50.00%)"]


PROD_POOL = NodePool(prodLowThresholds={"cpu": 20}, prodHighThresholds={"cpu": 40},
                     anomalyCondition=AnomalyCondition(consecutiveAbnormalities=1))


def prod_node(name, cpu_used, prod_used, schedulable=True):
    n = node(name, cpu_used, 10, schedulable=schedulable)
    n.prod_usage = Load(prod_used, GI)
    return n


@pytest.mark.parametrize(
    "cpu,prod,schedulable,expected",
    [
        (4000, 4100, True, PROD_HIGH),  # low node, but its prod usage is over prodHigh
        (4000, 2000, True, BOTH_LOW),  # low and prod at prodLow (<=)
        (4000, 3000, True, LOW),  # low, prod between prodLow and prodHigh
        (8000, 1000, True, HIGH),  # node high wins over prod low
        (6000, 4001, True, PROD_HIGH),  # normal node, prod over prodHigh
        (6000, 1500, True, PROD_LOW),
        (6000, 3000, True, NORMAL),
        (6000, 1500, False, NORMAL),  # unschedulable: never a prodLow target
        (4000, 1000, False, NORMAL),  # unschedulable: never low
    ],
)
def test_classify_with_prod_thresholds(cpu, prod, schedulable, expected):
    assert classify(PROD_POOL, prod_node("n", cpu, prod, schedulable)) == expected


def test_prod_pass_moves_only_prod_pods_until_prod_usage_is_under_prod_high():
    nodes = [prod_node("hot", 6000, 5000), prod_node("cold", 1000, 500)]  # normal + prod high; bothLow
    pods = [
        pod("web", "hot", 1500, cls=PriorityClass.PROD, qos=QoSClass.LS, priority=9000, created=1),
        pod("web2", "hot", 1200, cls=PriorityClass.PROD, qos=QoSClass.LS, priority=9000, created=2),
        pod("batch", "hot", 1000),
    ]
    plan = plan_round(_args(nodePools=[PROD_POOL]), nodes, pods, {}, now_s=0)
    assert plan.classes == {"hot": PROD_HIGH, "cold": BOTH_LOW}
    # 5000m prod, 4000m allowed, 1000m excess: web2 scores 1/1.2+1 = 1.83, web 1/1.5+1 = 1.67;
    # web2 goes first and leaves 3800m, under prodHigh; the batch pod is not part of the prod pass
    assert [(m.pod.name, m.target, m.prod_pass) for m in plan.migrations] == [("web2", "cold", True)]
    assert plan.migrations[0].reason == "node is overutilized, prod cpu usage(50.00%)>threshold(40.00%)"


@pytest.mark.parametrize(
    "low,high,error",
    [
        ({"cpu": 10}, {"cpu": 80}, "prod high threshold 80 of cpu exceeds its high threshold 75"),
        ({"cpu": 50}, {"cpu": 40}, "prod low threshold 50 of cpu exceeds its prod high threshold 40"),
    ],
)
def test_invalid_prod_thresholds_are_rejected(low, high, error):
    with pytest.raises(ValueError, match=error):
        NodePool(prodLowThresholds=low, prodHighThresholds=high)


@pytest.mark.parametrize(
    "limit,replicas,expected",
    [
        # unset: derived from the replicas (Koordinator's GetMaxMigrating / GetMaxUnavailable)
        (None, 1, 1), (None, 3, 1), (None, 4, 2), (None, 10, 2), (None, 11, 1), (None, 25, 2), (None, 100, 10),
        # a count as it is (not capped at the live replicas), 0 reads as 1
        (3, 10, 3), (3, 2, 3), (0, 10, 1),
        # a percentage of the replicas, rounded down, 0 reads as 1
        ("20%", 10, 2), ("25%", 10, 2), ("5%", 10, 1), ("0%", 10, 1), ("150%", 4, 6),
        # replicas unknown: only a count applies
        (3, None, 3), ("20%", None, None), (None, None, None),
    ],
)
def test_workload_limit_as_koordinator_scales_it(limit, replicas, expected):
    assert scaled_limit(limit, replicas) == expected


@pytest.mark.parametrize(
    "limits,replicas,reason",
    [
        ({}, 1, "workload has a single replica"),
        ({}, 2, None),
        ({"maxUnavailablePerWorkload": 2}, 2, "workload replicas (2) equal maxUnavailablePerWorkload"),
        ({"maxMigratingPerWorkload": 5}, 5, "workload replicas (5) equal maxMigratingPerWorkload"),
        ({"skipCheckExpectedReplicas": True}, 1, None),
        ({}, None, None),  # unknown replicas: nothing to check
    ],
)
def test_expected_replicas_filter(limits, replicas, reason):
    assert forbidden_by_replicas(LowNodeLoadArgs(limits=MigrationLimits(**limits)), replicas) == reason


def test_jobs_in_flight_count_against_the_limits_but_not_the_round():
    args = _args(limits=MigrationLimits(maxMigratingPerNode=2, maxMigratingGlobally=3, maxMigratingPerRound=1,
                                        maxMigratingPerWorkload=5, maxUnavailablePerWorkload=5))
    in_flight = LimitCounter()
    in_flight.add("hot", "default", "default/Deployment/x", planned=False)
    nodes = [node("hot", 9900, 50), node("cold", 1000, 10)]
    pods = [pod(f"p{i}", "hot", 500, created=i) for i in range(4)]
    plan = plan_round(args, nodes, pods, {}, now_s=0, in_flight=in_flight)
    assert len(plan.migrations) == 1  # 1 in flight + 1 = node limit 2; the round limit is 1 anyway
    reasons = {s.reason for s in plan.skipped if s.pod_key.startswith("default/p")}
    assert reasons == {"node hot reached maxMigratingPerNode"}
    in_flight = LimitCounter()
    for _ in range(3):
        in_flight.add("elsewhere", "default", "default/Deployment/x", planned=False)
    plan = plan_round(args, [node("hot", 9900, 50), node("cold", 1000, 10)], pods, {}, now_s=0, in_flight=in_flight)
    assert plan.migrations == [] and {s.reason for s in plan.skipped} == {"maxMigratingGlobally reached"}


# ---------------------------------------------------------------- the round's steps, one by one


def _highs(*nodes, pool=POOL, which="high"):
    percents = {"high": pool.highThresholds, "prodHigh": pool.prodHighThresholds}[which]
    return {n.name: threshold_qty(percents, n.allocatable) for n in nodes}


def _node_pass(sources, targets, room=None, pool=POOL):
    highs = _highs(*sources, *targets, pool=pool)
    room = room if room is not None else room_under(targets, highs)
    return BalancePass(False, sources, targets, room, highs, pool.highThresholds, highs, None)


def _round_state(args, detectors=None):
    return RoundState(args, RoundPlan(), LimitCounter(), {}, {}, {}, {} if detectors is None else detectors, 0.0)


def test_pool_members_leave_out_drained_nodes_only_for_a_pool_with_a_selector():
    nodes = [node("a", 1000, 10), node("b", 9000, 50), node("c", 1000, 10)]
    nodes[1].labels = nodes[2].labels = {"zone": "b"}
    assert [n.name for n in pool_members(NodePool(), nodes, {"b"})] == ["a", "b", "c"]
    zone_b = NodePool(nodeSelector={"matchLabels": {"zone": "b"}})
    assert [n.name for n in pool_members(zone_b, nodes, {"b"})] == ["c"]
    assert [n.name for n in pool_members(zone_b, nodes, set())] == ["b", "c"]
    # an empty selector names every node, yet, being a selector, leaves drained nodes out
    assert [n.name for n in pool_members(NodePool(nodeSelector={}), nodes, {"b"})] == ["a", "c"]


def test_classify_nodes_groups_the_fresh_nodes_by_class():
    members = [node("hot", 9000, 50), node("cold", 1000, 10), node("warm", 6000, 50), node("silent", None, 0),
               node("cold2", 4500, 55)]
    classes = classify_nodes(POOL, members)
    assert classes.of == {"hot": HIGH, "cold": LOW, "warm": NORMAL, "silent": UNKNOWN, "cold2": LOW}
    assert [n.name for n in classes.fresh] == ["hot", "cold", "warm", "cold2"]
    assert [n.name for n in classes[HIGH]] == ["hot"] and classes[PROD_HIGH] == []
    assert [n.name for n in classes.lows] == ["cold", "cold2"]
    prod = classify_nodes(PROD_POOL, [prod_node("b", 4000, 2000), prod_node("p", 6000, 1500), prod_node("l", 4000, 3000)])
    assert [n.name for n in prod.lows] == ["l", "p", "b"]  # low, prodLow, bothLow


@pytest.mark.parametrize(
    "abnormalities,prior_marks,sources",
    [
        # Koordinator's Test_filterRealAbnormalNodes (two hot nodes, consecutiveNormalities 1)
        (1, {}, ["n1", "n2"]),  # bypass: hot is enough
        (2, {}, []),  # this round is the 1st mark
        (2, {"n1": 2, "n2": 2}, ["n1", "n2"]),  # the 3rd mark, 3 > 2
        (2, {"n2": 2}, ["n2"]),
    ],
)
def test_pick_sources_takes_the_nodes_hot_for_more_than_n_rounds(abnormalities, prior_marks, sources):
    pool = NodePool(anomalyCondition=AnomalyCondition(consecutiveAbnormalities=abnormalities, consecutiveNormalities=1))
    detectors = {}
    for name, marks in prior_marks.items():
        detectors[name] = Detector(pool.anomalyCondition)
        for i in range(marks):
            detectors[name].mark(False, float(i))
    classes = classify_nodes(pool, [node("n1", 9000, 50), node("n2", 8000, 50), node("cold", 1000, 10)])
    high, prod_high = pick_sources(pool, classes, detectors, now_s=10.0)
    assert [n.name for n in high] == sources and prod_high == []
    assert "cold" not in detectors  # a node that is not hot gets no detector


def test_pick_sources_marks_normal_nodes_normal_and_keeps_prod_detectors_apart():
    pool = NodePool(prodLowThresholds={"cpu": 20}, prodHighThresholds={"cpu": 40},
                    anomalyCondition=AnomalyCondition(consecutiveAbnormalities=2, consecutiveNormalities=3))
    detectors = {}
    for t in range(3):
        high, prod_high = pick_sources(pool, classify_nodes(pool, [prod_node("p", 6000, 4500)]), detectors, float(t))
    assert high == [] and [n.name for n in prod_high] == ["p"]  # the 3rd prod-hot round
    assert set(detectors) == {PROD_DETECTOR + "p"}
    pick_sources(pool, classify_nodes(pool, [prod_node("p", 6000, 3000)]), detectors, 3.0)  # normal now
    assert detectors[PROD_DETECTOR + "p"].normalities == 1


@pytest.mark.parametrize(
    "number_of_nodes,lows,members,enough",
    [(0, 1, 3, True), (1, 1, 3, False), (1, 2, 3, True), (0, 3, 3, False)],
)
def test_enough_low_nodes(number_of_nodes, lows, members, enough):
    nodes = [node(f"n{i}", 1000, 10) for i in range(members)]
    assert enough_low_nodes(LowNodeLoadArgs(numberOfNodes=number_of_nodes), nodes[:lows], nodes) is enough


def test_room_under_sums_what_each_target_can_take_before_its_high_threshold():
    targets = [node("cold-a", 1000, 10), node("cold-b", 2000, 20), node("full", 8000, 90)]
    # high 7500m / 80 Gi of 10 cores / 100 Gi: 6500m + 5500m (+ nothing from the node over it)
    assert room_under(targets, _highs(*targets)) == Load(12_000, 130 * GI)


def test_prod_room_caps_the_bothlow_share_by_what_the_node_pass_left():
    p, b = prod_node("p", 6000, 1500), prod_node("b", 4000, 500)  # prodLow, bothLow (prodHigh 40 % cpu, 100 % memory)
    classes = classify_nodes(PROD_POOL, [p, b])
    assert classes.of == {"p": PROD_LOW, "b": BOTH_LOW}
    prod_highs = _highs(p, b, pool=PROD_POOL, which="prodHigh")
    both_low_room = room_under([b], _highs(b, pool=PROD_POOL))  # 3500m / 70 Gi under high
    # the node pass used 2000m / 5 Gi: 1500m / 65 Gi left of bothLow's room; b's prod room is 3500m / 99 Gi
    room = prod_room(classes, prod_highs, both_low_room, used=Load(2000, 5 * GI))
    assert room == Load(2500 + 1500, 99 * GI + 65 * GI)
    assert prod_room(classes, prod_highs, both_low_room, used=Load()) == Load(2500 + 3500, 99 * GI + 70 * GI)


def test_hottest_first_orders_sources_by_koordinators_usage_score():
    # scores (cpu + memory per mille) / 2: a 700, b 850, c 575, d 700
    sources = [node("a", 9000, 50), node("b", 8000, 90), node("c", 9500, 20), node("d", 9000, 50)]
    assert [n.name for n in hottest_first(POOL, sources)] == ["b", "a", "d", "c"]


@pytest.mark.parametrize(
    "changes,args_kw,replicas,reason",
    [
        ({}, {}, {}, None),
        ({"non_evictable": "DaemonSet pod"}, {}, {}, "DaemonSet pod"),
        ({}, {"evictableNamespaces": {"include": ["batch"]}}, {}, "namespace default is not evictable"),
        ({}, {}, {"default/Deployment/web": 1}, "workload has a single replica"),
        ({"usage": None}, {}, {}, "no usage metric"),
    ],
)
def test_exclusion(changes, args_kw, replicas, reason):
    p = dataclasses.replace(pod("a", "hot", 600, workload="default/Deployment/web"), **changes)
    assert exclusion(LowNodeLoadArgs(**args_kw), p, replicas) == reason


def test_claim_target_takes_the_least_used_fitting_target_and_keeps_the_pods_usage_there():
    a, b = node("cold-a", 1000, 10), node("cold-b", 2000, 20)
    ps = _node_pass([node("hot", 9000, 50)], [a, b])
    assert claim_target(POOL, pod("p1", "hot", 3000), ps) is a
    assert a.usage == Load(4000, 11 * GI)  # counted there, moved or not (Koordinator's quirk)
    assert claim_target(POOL, pod("p2", "hot", 3000), ps) is b  # a scores 255 now, b 200
    assert claim_target(POOL, pod("big", "hot", 6000), ps) is None  # over 7500m on both
    assert (a.usage, b.usage) == (Load(4000, 11 * GI), Load(5000, 21 * GI))
    a.requested = Resources(9500, 0)
    assert claim_target(POOL, pod("p3", "hot", 600), ps) is b  # a is less used, but its requests no longer fit a


def test_victims_on_a_source_in_eviction_order_with_their_targets_and_the_excluded():
    hot, cold = node("hot", 9000, 50), node("cold", 1000, 10)
    pods = [pod("b1", "hot", 600, created=1), pod("b2", "hot", 600, created=2),
            pod("web", "hot", 3000, cls=PriorityClass.PROD, qos=QoSClass.LS, priority=9000),
            dataclasses.replace(pod("ds", "hot", 100), non_evictable="DaemonSet pod"),
            pod("huge", "hot", 9000)]
    victims, skipped = victims_on(_args(), POOL, _node_pass([hot], [cold]), hot, pods, {})
    assert [(p.name, t.name) for p, t in victims] == [("b2", "cold"), ("b1", "cold"), ("web", "cold")]
    assert skipped == [Skip("default/ds", "hot", "DaemonSet pod"),
                       Skip("default/huge", "hot", "fits on no low node under its thresholds")]
    # without nodeFit a pod that fits nowhere still goes, to the first target
    victims, skipped = victims_on(_args(nodeFit=False), POOL, _node_pass([hot], [node("cold", 1000, 10)]), hot,
                                  [pod("huge", "hot", 9000)], {})
    assert [(p.name, t.name) for p, t in victims] == [("huge", "cold")] and skipped == []


def test_victims_on_in_the_prod_pass_are_prod_pods_only():
    hot, cold = prod_node("hot", 6000, 5000), prod_node("cold", 1000, 500)
    highs, prod_highs = _highs(hot, cold, pool=PROD_POOL), _highs(hot, cold, pool=PROD_POOL, which="prodHigh")
    ps = BalancePass(True, [hot], [cold], Load(3500, 99 * GI), prod_highs, PROD_POOL.prodHighThresholds,
                     highs, prod_highs)
    pods = [pod("batch", "hot", 1000), pod("web", "hot", 1200, cls=PriorityClass.PROD, qos=QoSClass.LS, priority=9000)]
    victims, skipped = victims_on(_args(), PROD_POOL, ps, hot, pods, {})
    assert [p.name for p, _ in victims] == ["web"] and skipped == []
    assert cold.prod_usage == Load(1700, 2 * GI)  # the claimed pod's usage counts on the prod usage too


@pytest.mark.parametrize(
    "room,limits,moved,skips,notes",
    [
        # 9000m, high 7500m: three 600m pods bring it to 7200m, then it is under
        (None, {}, ["b5", "b4", "b3"], [], []),
        # 1000m of room: the second pod takes it below 0, the third finds none
        (Load(1000, 100 * GI), {}, ["b5", "b4"], [], ["the low nodes' room is used up"]),
        # one migration per node: the others are refused, each with the limit's reason
        (None, {"maxMigratingPerNode": 1}, ["b5"], ["node hot reached maxMigratingPerNode"] * 5, []),
    ],
)
def test_evict_from_moves_victims_while_the_source_is_hot_and_the_room_lasts(room, limits, moved, skips, notes):
    hot, cold = node("hot", 9000, 50, pods=6), node("cold", 1000, 10)
    ps = _node_pass([hot], [cold], room)
    args = _args(limits=MigrationLimits(**{"maxMigratingPerNode": 5, "maxMigratingPerRound": 10, **limits}))
    rnd = _round_state(args, detectors={"hot": Detector(AnomalyCondition(), state=ANOMALY)})
    victims = [(p, cold) for p in victim_order(POOL, [pod(f"b{i}", "hot", 600, created=i) for i in range(6)],
                                                hot.usage, ps.high["hot"])]
    left = evict_from(rnd, POOL, ps, hot, victims, ps.available)
    assert [m.pod.name for m in rnd.plan.migrations] == moved
    assert [s.reason for s in rnd.plan.skipped] == skips and rnd.plan.notes == notes
    assert hot.usage == Load(9000 - 600 * len(moved), 50 * GI - len(moved) * GI, 6 - len(moved))  # one pod fewer each
    assert left == ps.available - Load(600 * len(moved), len(moved) * GI, len(moved))
    assert cold.requested == Resources(600 * len(moved), len(moved) * GI)
    assert (rnd.detectors["hot"].state == OK) is (moved == ["b5", "b4", "b3"])  # reset once under high


def test_evict_from_skips_a_victim_without_a_target():
    hot = node("hot", 9000, 50)
    rnd = _round_state(_args())
    evict_from(rnd, POOL, _node_pass([hot], []), hot, [(pod("b", "hot", 600), None)], Load(5000, 50 * GI))
    assert rnd.plan.migrations == [] and rnd.plan.skipped == [Skip("default/b", "hot", "no low node")]


@pytest.mark.parametrize(
    "usage,thresholds,prod,reason",
    [
        (Load(2000, GI), {"cpu": 50, "memory": 100}, False,
         "node is overutilized, node cpu usage(66.67%)>threshold(50.00%)"),
        (Load(2700, 9 * GI), {"cpu": 75, "memory": 80}, False,
         "node is overutilized, node cpu usage(90.00%)>threshold(75.00%), node memory usage(90.00%)>threshold(80.00%)"),
        (Load(1500, 2 * GI), {"cpu": 40, "memory": 100}, True,
         "node is overutilized, prod cpu usage(50.00%)>threshold(40.00%)"),
        # the pods resource, in name order after cpu and memory: 30 of 29 allowed by 50 % of 58 pods
        (Load(1000, GI, 30), {"cpu": 75, "memory": 80, "pods": 50}, False,
         "node is overutilized, node pods usage(51.72%)>threshold(50.00%)"),
    ],
)
def test_overutilized_reason_in_koordinators_words(usage, thresholds, prod, reason):
    source = NodeState("n", Load(3000, 10 * GI, 58), usage)
    high = {"n": threshold_qty(thresholds, source.allocatable)}
    ps = BalancePass(prod, [source], [], Load(), high, thresholds, high, None, tuple(sorted(thresholds)))
    assert overutilized_reason(ps, source, usage) == reason


def _job(phase, mode=mig.RESERVATION_FIRST, started=0.0):
    m = plan_round(_args(), [node("hot", 9000, 50), node("cold", 1000, 10)], [pod("b", "hot", 2000)], {}, 0).migrations[0]
    j = mig.Job(m, mode, started, ttl_s=300, reservation_wait_s=60, phase=phase)
    if mode == mig.RESERVATION_FIRST:
        j.reservation, j.reservation_node = "r", "cold"
    return j


NEW = "default/b-x7k2q"  # the replacement's key


@pytest.mark.parametrize(
    "phase,mode,obs,now,action,reason",
    [
        (mig.RESERVING, mig.RESERVATION_FIRST, mig.Observation("Pending"), 10, mig.SCHEDULE_RESERVATION, ""),
        (mig.RESERVING, mig.RESERVATION_FIRST, mig.Observation("Available", "cold"), 10, mig.EVICT, ""),
        (mig.RESERVING, mig.RESERVATION_FIRST, mig.Observation("Available", ""), 10, mig.SCHEDULE_RESERVATION, ""),
        # the wait (60 s) is over
        (mig.RESERVING, mig.RESERVATION_FIRST, mig.Observation("Pending"), 60, mig.ROLLBACK, "ReservationTimeout"),
        (mig.RESERVING, mig.RESERVATION_FIRST, mig.Observation("Available", ""), 60, mig.ROLLBACK, "Timeout"),
        # unschedulable / expired, with the scheduler's word from the reservation's condition
        (mig.RESERVING, mig.RESERVATION_FIRST, mig.Observation("Failed"), 1, mig.ROLLBACK, "Unschedulable"),
        (mig.RESERVING, mig.RESERVATION_FIRST,
         mig.Observation("Failed", reservation_message="0/4 nodes are available: 3 Insufficient cpu."), 1,
         mig.ROLLBACK, "Unschedulable: 0/4 nodes are available: 3 Insufficient cpu."),
        (mig.RESERVING, mig.RESERVATION_FIRST, mig.Observation("Succeeded", "cold"), 1, mig.ROLLBACK,
         "ReservationConsumedByOther"),
        (mig.RESERVING, mig.RESERVATION_FIRST, mig.Observation(""), 1, mig.ROLLBACK, "MissingReservation"),  # deleted
        (mig.EVICTING, mig.EVICT_DIRECTLY, mig.Observation(), 1, mig.EVICT, ""),
        (mig.EVICTING, mig.EVICT_DIRECTLY, mig.Observation(), 300, mig.ROLLBACK, "Timeout"),
        (mig.EVICTING, mig.RESERVATION_FIRST, mig.Observation("Available", "cold"), 300, mig.ROLLBACK, "Timeout"),
        (mig.EVICTING, mig.RESERVATION_FIRST, mig.Observation("Failed", reservation_message="expired"), 300,
         mig.ROLLBACK, "Unschedulable: expired"),
        (mig.WAITING, mig.RESERVATION_FIRST, mig.Observation("Available", "cold"), 10, mig.WAIT, ""),
        (mig.WAITING, mig.RESERVATION_FIRST, mig.Observation("Available", "cold", "cold", replacement=NEW), 10,
         mig.CONSUME, f"replacement {NEW} bound on cold"),
        (mig.WAITING, mig.RESERVATION_FIRST, mig.Observation("Available", "cold", "other", replacement=NEW), 10,
         mig.RELEASE, f"replacement {NEW} bound on other"),
        (mig.WAITING, mig.EVICT_DIRECTLY, mig.Observation(replacement_node="other", replacement=NEW), 10,
         mig.DONE, f"replacement {NEW} bound on other"),
        (mig.WAITING, mig.EVICT_DIRECTLY, mig.Observation(), 299, mig.WAIT, ""),
        (mig.WAITING, mig.EVICT_DIRECTLY, mig.Observation(), 300, mig.TIMEOUT, "Timeout"),
    ],
)
def test_migration_job_steps(phase, mode, obs, now, action, reason):
    assert mig.step(_job(phase, mode), obs, now) == mig.Action(action, reason)


# ---------------------------------------------------------------- the pods resource, deviation thresholds, selectors


def koord_case_nodes():
    """TestLowNodeLoad's cluster: n1 (4000m, 9 pods) runs p1..p8 at 400m each, n2 (4000m, 10 pods)
    runs p9, n3 (4000m, 10 pods) is unschedulable and empty; every node reports a metric."""
    return [node("n1", 3200, 0, cpu_alloc=4000, mem_alloc_gi=3, pods=8, max_pods=9),
            node("n2", 400, 0, cpu_alloc=4000, mem_alloc_gi=3, pods=1, max_pods=10),
            node("n3", 0, 0, cpu_alloc=4000, mem_alloc_gi=3, pods=0, max_pods=10, schedulable=False)]


def koord_case_pods():
    movable = [pod(f"p{i}", "n1", 400, 0, created=i) for i in range(1, 6)]
    fixed = [dataclasses.replace(pod(f"p{i}", "n1", 400, 0), non_evictable=why)
             for i, why in ((6, "DaemonSet pod"), (7, "mirror or static pod"), (8, "system-critical pod"))]
    return [*movable, *fixed, pod("p9", "n2", 400, 0)]


@pytest.mark.parametrize(
    "low,high,deviation,classes,moved",
    [
        # "without priorities": n1 is over 50 % cpu (2000m) and 50 % of 9 pods (4); n2 takes pods while
        # it stays at or under 2000m (the quirk keeps each fitting pod's usage there: p1..p4 fit). After
        # three moves n1 is at 2000m, no longer over cpu, but 5 pods > 4: the fourth goes too.
        ({"cpu": 30, "pods": 30}, {"cpu": 50, "pods": 50}, False, ("high", "low", "normal"), 4),
        # the same without the pods resource: n1 stops being hot at 2000m, after three
        ({"cpu": 30}, {"cpu": 50}, False, ("high", "low", "normal"), 3),
        # "deviation thresholds" (5 % around the mean): the means over the three nodes are cpu
        # (80 + 10 + 0) / 3 = 30 % and pods (88.9 + 10 + 0) / 3 = 33.0 %, so high is 35 % (1400m) and
        # 38.0 % of 10 pods (3); low 25 % (1000m) and 28.0 % of 10 pods (2). n2 takes p1 and p2 (800m,
        # 1200m); p3 would bring it to 1600m > 1400m. Memory is named nowhere: its deviation is 0,
        # so it limits nothing.
        ({"cpu": 5, "pods": 5}, {"cpu": 5, "pods": 5}, True, ("high", "low", "normal"), 2),
    ],
)
def test_lownodeload_cases_of_koordinator_with_pods_and_deviation(low, high, deviation, classes, moved):
    args = _args(lowThresholds=low, highThresholds=high, useDeviationThresholds=deviation,
                 limits=MigrationLimits(maxMigratingPerNode=10, maxMigratingPerWorkload=10, maxUnavailablePerWorkload=10))
    plan = plan_round(args, koord_case_nodes(), koord_case_pods(), {}, now_s=0)
    assert tuple(plan.classes[n] for n in ("n1", "n2", "n3")) == classes
    assert len(plan.migrations) == moved
    assert {m.pod.name for m in plan.migrations} <= {"p1", "p2", "p3", "p4", "p5"}
    assert all(m.target == "n2" for m in plan.migrations)


def test_the_pods_resource_counts_pods_against_allocatable_pods():
    pool = NodePool(lowThresholds={"cpu": 45, "pods": 30}, highThresholds={"cpu": 75, "pods": 50})
    assert pool.resources == ("cpu", "memory", "pods")
    # 60 pods allowed over 50 % of 110: high on pods alone; 30 % of 110 is 33 pods for low
    assert classify(pool, node("busy", 1000, 10, pods=56, max_pods=110)) == HIGH
    assert classify(pool, node("calm", 1000, 10, pods=55, max_pods=110)) == NORMAL
    assert classify(pool, node("idle", 1000, 10, pods=33, max_pods=110)) == LOW
    # without pods in the thresholds the count is not looked at
    assert classify(POOL, node("busy", 1000, 10, pods=109, max_pods=110)) == LOW


@pytest.mark.parametrize(
    "weights,order",
    [
        # a: cpu 900, memory 500, pods 100 per mille; b: 800, 500, 900
        ({"cpu": 1, "memory": 1}, ["a", "b"]),  # (900 + 500) / 2 = 700 > (800 + 500) / 2 = 650
        ({"cpu": 1, "memory": 1, "pods": 1}, ["b", "a"]),  # 500 < 733: the pod count weighs in
    ],
)
def test_hottest_first_weighs_the_pod_count_as_koordinators_scorer(weights, order):
    pool = NodePool(lowThresholds={"cpu": 45, "pods": 30}, highThresholds={"cpu": 75, "pods": 50}, resourceWeights=weights)
    a = node("a", 9000, 50, pods=11, max_pods=110)
    b = node("b", 8000, 50, pods=99, max_pods=110)
    assert [n.name for n in hottest_first(pool, [a, b])] == order


def test_top_level_pods_threshold_gets_a_weight_as_koordinators_defaulting():
    args = LowNodeLoadArgs(lowThresholds={"cpu": 45, "pods": 30}, highThresholds={"cpu": 75, "pods": 50},
                           resourceWeights={"cpu": 2, "memory": 0})
    # SetDefaults_LowNodeLoadArgs: a weight <= 0 of cpu, memory or a resource the thresholds name is 1
    assert args.nodePools[0].resourceWeights == {"cpu": 2, "memory": 1, "pods": 1}


def test_evicting_takes_one_pod_off_the_source_and_the_room():
    pool = NodePool(lowThresholds={"cpu": 45, "pods": 30}, highThresholds={"cpu": 90, "pods": 50},
                    anomalyCondition=AnomalyCondition(consecutiveAbnormalities=1))
    hot = node("hot", 1000, 10, pods=8, max_pods=10)  # only the count is over: 8 > 5
    cold = node("cold", 1000, 10, pods=1, max_pods=10)  # room: 5 - 1 = 4 pods
    pods = [pod(f"b{i}", "hot", 10, created=i) for i in range(8)]
    plan = plan_round(_args(nodePools=[pool]), [hot, cold], pods, {}, now_s=0)
    # three moves bring it to 5 pods; the reason names the pods resource
    assert [m.pod.name for m in plan.migrations] == ["b7", "b6", "b5"]
    assert plan.migrations[0].reason == "node is overutilized, node pods usage(80.00%)>threshold(50.00%)"
    assert hot.usage.pods == 5


@pytest.mark.parametrize(
    "average,low,high,lo,hi",
    [
        (45.0, 5, 5, 40.0, 50.0),
        (3.0, 5, 5, 0.0, 8.0),  # clamped at 0
        (98.0, 5, 5, 93.0, 100.0),  # and at 100
        (45.0, 0, 10, 100.0, 100.0),  # no low deviation: the resource is not limited
    ],
)
def test_deviation_thresholds_around_the_average(average, low, high, lo, hi):
    pool = NodePool(useDeviationThresholds=True, lowThresholds={"cpu": low}, highThresholds={"cpu": high})
    # one node at `average` % cpu: the mean is its usage
    n = node("n", int(average * 100), 0)
    percents = classify_nodes(pool, [n]).percents
    assert (percents.low["cpu"], percents.high["cpu"]) == (lo, hi)
    assert (percents.low["memory"], percents.high["memory"]) == (100.0, 100.0)  # named nowhere: deviation 0


def test_deviation_thresholds_fill_missing_resources_with_zero():
    pool = NodePool(useDeviationThresholds=True, lowThresholds={"cpu": 10}, highThresholds={"cpu": 10, "pods": 5})
    assert pool.lowThresholds == {"cpu": 10, "memory": 0, "pods": 0}
    assert pool.highThresholds == {"cpu": 10, "memory": 0, "pods": 5}


@pytest.mark.parametrize(
    "selectors,selected",
    [
        ([], {"web", "batch", "bare"}),  # none: every pod
        ([{"name": "only-names"}], {"web", "batch", "bare"}),  # a selector without one selects all
        ([{"name": "batch", "selector": {"matchLabels": {"tier": "batch"}}}], {"batch"}),
        # ORed
        ([{"selector": {"matchLabels": {"tier": "batch"}}}, {"selector": {"matchLabels": {"app": "web"}}}], {"web", "batch"}),
        ([{"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}], {"web", "batch"}),
        ([{"selector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["batch"]}]}}], {"web", "bare"}),
    ],
)
def test_pod_selectors_choose_the_pods_that_may_leave(selectors, selected):
    args = LowNodeLoadArgs(podSelectors=selectors)
    labels = {"web": {"app": "web", "tier": "online"}, "batch": {"tier": "batch"}, "bare": {}}
    assert {name for name, lb in labels.items() if args.pod_selected(lb)} == selected
    p = dataclasses.replace(pod("bare", "hot", 600), labels={})
    assert (exclusion(args, p, {}) is None) is ("bare" in selected)
    if "bare" not in selected:
        assert exclusion(args, p, {}) == "not selected by podSelectors"


@pytest.mark.parametrize(
    "selector,members",
    [
        (None, ["a", "b", "c", "d"]),
        ({"matchLabels": {"pool": "gpu"}}, ["a", "b"]),
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu", "cpu"]}]}, ["a", "b", "c"]),
        ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["gpu"]}]}, ["c", "d"]),
        ({"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]}, ["d"]),
        ({"matchLabels": {"pool": "gpu"}, "matchExpressions": [{"key": "zone", "operator": "Exists"}]}, ["b"]),
    ],
)
def test_node_selectors_of_the_top_level_and_of_the_pools(selector, members):
    nodes = [node("a", 1000, 10), node("b", 1000, 10), node("c", 1000, 10), node("d", 1000, 10)]
    nodes[0].labels, nodes[1].labels = {"pool": "gpu"}, {"pool": "gpu", "zone": "z1"}
    nodes[2].labels = {"pool": "cpu"}
    top = LowNodeLoadArgs(nodeSelector=selector)  # the default pool's
    assert [n.name for n in pool_members(top.nodePools[0], nodes, set())] == members
    pooled = LowNodeLoadArgs(nodePools=[{"name": "p", "nodeSelector": selector, "lowThresholds": {"cpu": 40}}])
    assert [n.name for n in pool_members(pooled.nodePools[1], nodes, set())] == members


def test_a_later_pool_with_a_selector_skips_what_an_earlier_pool_drained():
    zone_a = {"name": "zone-a", "nodeSelector": {"matchLabels": {"zone": "a"}},
              "lowThresholds": {"cpu": 30}, "highThresholds": {"cpu": 60}}
    args = _args(lowThresholds={"cpu": 45}, highThresholds={"cpu": 75}, nodePools=[zone_a])
    hot, cold = node("hot", 9000, 50), node("cold", 1000, 10)
    hot.labels = cold.labels = {"zone": "a"}
    plan = plan_round(args, [hot, cold], [pod(f"b{i}", "hot", 600, created=i) for i in range(8)], {}, now_s=0)
    # the default pool (every node, 75 %) brought "hot" to 7200m; at 72 % it is over zone-a's 60 %,
    # but zone-a has a selector and leaves a node an earlier pool drained alone
    assert [m.pod.name for m in plan.migrations] == ["b7", "b6", "b5"]
    assert len(args.nodePools) == 2 and args.nodePools[1].highThresholds == {"cpu": 60, "memory": 100}
