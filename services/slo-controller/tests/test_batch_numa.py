"""BatchResource per NUMA zone: Koordinator's calculateOnNUMALevel, worked out by hand.

Node as in test_batch: capacity 100 cores / 120 GB, system usage 4c / 6G, no kubelet reserve.
Two zones of 50 cores / 60 GB each unless said otherwise. Default strategy: margins 40 % of
cpu and 35 % of memory, so a zone's margin is 20c / 21G; the system term is 4c / 6G shared
out: 2c / 3G a zone. Case A pods: p1 request 20c/30G uses 10c/20G, p2 request 10c/10G uses
12c/8G, b1 is batch.
"""

from __future__ import annotations

import json

import pytest
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, NUMAZone, PodMetric
from slo_controller.core.config import ColocationConfig, ColocationStrategy, NodeColocation
from slo_controller.core.plan import plan_node
from slo_controller.core.resources import batch, batch_numa
from slo_controller.core.snapshot import ANNOTATION_RESOURCE_STATUS, MetricView, NodeSnapshot, PodLoad
from slo_controller.core.topology import new_object, update_zones, zone_values

G = 10**9
C = 1000
NOW = 1_700_000_000_000
TWO = (("node-0", 50 * C, 60 * G), ("node-1", 50 * C, 60 * G))
USAGE_A = {"ns/p1": (10 * C, 20 * G, True), "ns/p2": (12 * C, 8 * G, True), "ns/b1": (5 * C, 5 * G, False)}


def node(alloc_cpu=100) -> NodeRecord:
    return NodeRecord("n1", capacity={"cpu": 100 * C, "memory": 120 * G},
                      allocatable={"cpu": alloc_cpu * C, "memory": 120 * G})


def pod(key, cpu, mem, hp=True, numa=(), lse=False) -> PodLoad:
    return PodLoad(key, cpu * C, mem, True, hp, hp, lse, tuple(numa))


def pods_a(p1_numa=(), p1_lse=False):
    return [pod("ns/p1", 20, 30 * G, numa=p1_numa, lse=p1_lse), pod("ns/p2", 10, 10 * G), pod("ns/b1", 0, 0, hp=False)]


def zones(pods, usage=USAGE_A, zone_list=TWO, system=(4 * C, 6 * G), alloc_cpu=100, **strategy):
    m = MetricView(NOW - 60_000, (50 * C, 60 * G), system, dict(usage), zones=zone_list)
    return batch_numa.calculate_zones(NodeSnapshot(node(alloc_cpu), pods, m, NOW), ColocationStrategy(**strategy))


@pytest.mark.parametrize(
    "pods, usage, kw, expected",
    [
        # no NUMA binding: each pod halves over the zones: used 11c/14G a zone
        # cpu 50-20-2-11 = 17; mem 60-21-3-14 = 22 (twice that is the node's 34c/44G)
        (pods_a(), USAGE_A, {}, [("node-0", 17 * C, 22 * G), ("node-1", 17 * C, 22 * G)]),
        # p1 bound to NUMA node 0: zone 0 used 10+6 = 16c / 20+4 = 24G, zone 1 only half of p2: 6c / 4G
        (pods_a(p1_numa=(0,)), USAGE_A, {}, [("node-0", 12 * C, 12 * G), ("node-1", 22 * C, 32 * G)]),
        # maxUsageRequest: zone 0 max(20,10) + max(5,6) = 26c, max(30,20) + max(5,4) = 35G; zone 1 6c / 5G
        (pods_a(p1_numa=(0,)), USAGE_A, {"cpuCalculatePolicy": "maxUsageRequest",
                                         "memoryCalculatePolicy": "maxUsageRequest"},
         [("node-0", 2 * C, 1 * G), ("node-1", 22 * C, 31 * G)]),
        # memory by request (nodeReserved 0 instead of the system term): 60-21-0-(15+5) = 19G
        (pods_a(), USAGE_A, {"memoryCalculatePolicy": "request"}, [("node-0", 17 * C, 19 * G),
                                                                     ("node-1", 17 * C, 19 * G)]),
        # a cap of 30 % of the zone's 50 cores: min(17, 15)
        (pods_a(), USAGE_A, {"batchCPUThresholdPercent": 30}, [("node-0", 15 * C, 22 * G),
                                                                 ("node-1", 15 * C, 22 * G)]),
        # an LSE pod lends no cpu: p1 (on zone 0) counts its 20c request: 50-20-2-(20+6) = 2c; memory by usage
        (pods_a(p1_numa=(0,), p1_lse=True), USAGE_A, {}, [("node-0", 2 * C, 12 * G), ("node-1", 22 * C, 32 * G)]),
        # a NUMA node the zones do not have: spread over all of them, as unbound
        (pods_a(p1_numa=(5,)), USAGE_A, {}, [("node-0", 17 * C, 22 * G), ("node-1", 17 * C, 22 * G)]),
        # QUIRK kept from Koordinator: node 0 listed twice counts twice, so zone 0 gets half of p1 and
        # the other half is nowhere: zone 0 used 5+6 = 11c / 10+4 = 14G, zone 1 6c / 4G
        (pods_a(p1_numa=(0, 0)), USAGE_A, {}, [("node-0", 17 * C, 22 * G), ("node-1", 22 * C, 32 * G)]),
        # a HP pod without metric counts by request, halved: +4c / +3G used a zone: 50-20-2-15 = 13; 60-21-3-17 = 19
        ([*pods_a(), pod("ns/p3", 8, 6 * G)], USAGE_A, {}, [("node-0", 13 * C, 19 * G), ("node-1", 13 * C, 19 * G)]),
        # ... and, unlike the node-level rule, in podHPMaxUsedRequest too: 16+4 = 20c, 20+3 = 23G
        ([*pods_a(), pod("ns/p3", 8, 6 * G)], USAGE_A, {"cpuCalculatePolicy": "maxUsageRequest",
                                                         "memoryCalculatePolicy": "maxUsageRequest"},
         [("node-0", 8 * C, 13 * G), ("node-1", 8 * C, 13 * G)]),
        # a HP metric without its pod is halved over the zones (a batch one is not counted): +2c / +1G
        (pods_a(), {**USAGE_A, "ns/gone": (4 * C, 2 * G, True), "ns/gone-batch": (9 * C, 9 * G, False)}, {},
         [("node-0", 15 * C, 21 * G), ("node-1", 15 * C, 21 * G)]),
    ],
)
def test_zone_table(pods, usage, kw, expected):
    assert list(zones(pods, usage, **kw)) == expected


def test_reserved_is_shared_out_and_wins_over_a_smaller_system_share():
    # kubelet reserves 8 cores (allocatable 92): 4c a zone > the 2c system share: 50-20-4-11 = 15c
    assert [c for _, c, _ in zones(pods_a(), alloc_cpu=92)] == [15 * C, 15 * C]


def test_shares_round_up_per_term_and_memory_to_whole_bytes():
    # three zones of 30c / 40G: system ceil(4000/3) = 1334m, 6G/3 = 2G; one pod request 10c/10G uses 7c/5G,
    # its usage ceil(7000/3) = 2334m and 5G/3 = 1666666666.667 bytes a zone (kept in milli-bytes)
    three = tuple((f"node-{i}", 30 * C, 40 * G) for i in range(3))
    got = zones([pod("ns/p", 10, 10 * G)], {"ns/p": (7 * C, 5 * G, True)}, zone_list=three)
    # cpu 30000 - 12000 - 1334 - 2334 = 14332; memory 40G - 14G - 2G - 1666666666.667 = 22333333333.333 -> up
    assert list(got) == [(f"node-{i}", 14332, 22_333_333_334) for i in range(3)]


def test_no_zones_no_split_and_the_node_value_is_unchanged():
    m = MetricView(NOW - 60_000, (50 * C, 60 * G), (4 * C, 6 * G), dict(USAGE_A))
    out = batch.calculate(NodeSnapshot(node(), pods_a(), m, NOW), ColocationStrategy())
    assert out.zones == () and (out.value("batch-cpu"), out.value("batch-memory")) == (34 * C, 44 * G)


def test_zones_ride_in_the_plan_under_the_published_prefix_and_reset_with_the_node():
    m = MetricView(NOW - 60_000, (50 * C, 60 * G), (4 * C, 6 * G), dict(USAGE_A), zones=TWO)
    on = NodeColocation(ColocationStrategy(enable=True), True, "cluster")
    plan = plan_node(NodeSnapshot(node(), pods_a(p1_numa=(0,)), m, NOW), on, "kubernetes.io/", None)
    assert plan.zones == {"node-0": {"kubernetes.io/batch-cpu": 12 * C, "kubernetes.io/batch-memory": 12 * G},
                          "node-1": {"kubernetes.io/batch-cpu": 22 * C, "kubernetes.io/batch-memory": 32 * G}}
    assert not plan.zones_reset
    stale = MetricView(NOW - 16 * 60_000, (50 * C, 60 * G), (4 * C, 6 * G), dict(USAGE_A), zones=TWO)
    degraded = plan_node(NodeSnapshot(node(), pods_a(), stale, NOW), on, "kubernetes.io/", None)
    assert degraded.zones == {} and degraded.zones_reset
    off = ColocationConfig().for_node({}, {})
    assert plan_node(NodeSnapshot(node(), pods_a(), m, NOW), off, "kubernetes.io/", None).zones_reset


def test_pods_read_their_numa_nodes_from_the_resource_status_annotation():
    def load(raw):
        return PodLoad.from_record(PodRecord("ns", "p", "uid", "n1", annotations={ANNOTATION_RESOURCE_STATUS: raw}))

    assert load(json.dumps({"cpuset": "0-3", "numaNodeResources": [{"node": 1, "resources": {"cpu": "4"}},
                                                                   {"node": 0}]})).numa_nodes == (1, 0)
    assert load('{"cpuset": "0-3"}').numa_nodes == () and load("not json").numa_nodes == ()
    assert PodLoad.from_record(PodRecord("ns", "p", "uid", "n1")).numa_nodes == ()


def test_metric_view_takes_the_allocatable_of_each_zone():
    msg = NodeMetric(node="n1", ts=NOW, node_usage=Resources(1, 1), pods=[PodMetric(uid="u", namespace="ns", name="p",
                                                                                    usage=Resources(1, 1))],
                     numa_zones=[NUMAZone(name="node-0", capacity=Resources(8000, 40 * G),
                                          allocatable=Resources(7000, 30 * G))])
    assert MetricView.from_message(msg).zones == (("node-0", 7000, 30 * G),)


# ----------------------------------------------------------------------------- NodeResourceTopology


NAMES = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")


def test_a_new_topology_gets_the_zones_and_their_batch_resources_sorted_by_name():
    obj = new_object("n1", (("node-0", 8000, 32 << 30), ("node-1", 8000, 16 << 30)))
    assert obj["apiVersion"] == "topology.node.k8s.io/v1alpha1" and obj["kind"] == "NodeResourceTopology"
    assert obj["zones"][0]["resources"] == [
        {"name": "cpu", "capacity": "8", "allocatable": "8", "available": "8"},
        {"name": "memory", "capacity": "32Gi", "allocatable": "32Gi", "available": "32Gi"},
    ]
    values = {"node-0": {NAMES[0]: 3000, NAMES[1]: 5 << 30}, "node-1": {NAMES[0]: 1500, NAMES[1]: 1 << 30}}
    updated, changed = update_zones(obj, values, NAMES, 0.1)
    assert changed and [r["name"] for r in updated["zones"][0]["resources"]] == ["cpu", *NAMES, "memory"]
    assert updated["zones"][0]["resources"][1] == {"name": NAMES[0], "capacity": "3k", "allocatable": "3k",
                                                   "available": "3k"}
    assert zone_values(updated, NAMES) == {"node-0": {NAMES[0]: 3000, NAMES[1]: 5 << 30},
                                           "node-1": {NAMES[0]: 1500, NAMES[1]: 1 << 30}}
    assert obj["zones"][0]["resources"][0]["name"] == "cpu" and len(obj["zones"][0]["resources"]) == 2  # untouched


@pytest.mark.parametrize(
    "new_cpu, changed, written",
    [
        (3200, False, 3000),  # |3200 - 3000| = 200 <= 10 % of 3000: left as it is
        (3400, True, 3400),  # 400 > 300
        (0, True, 0),
    ],
)
def test_zone_values_move_beyond_the_diff_threshold(new_cpu, changed, written):
    obj, _ = update_zones(new_object("n1", (("node-0", 8000, 32 << 30),)), {"node-0": {NAMES[0]: 3000}}, NAMES, 0.1)
    updated, moved = update_zones(obj, {"node-0": {NAMES[0]: new_cpu}}, NAMES, 0.1)
    assert moved is changed and zone_values(updated, NAMES)["node-0"][NAMES[0]] == written


def test_a_zone_without_values_has_its_batch_resources_set_to_zero_once():
    obj, _ = update_zones(new_object("n1", (("node-0", 8000, 32 << 30), ("node-1", 8000, 16 << 30))),
                          {"node-0": {NAMES[0]: 3000, NAMES[1]: 1 << 30}, "node-1": {NAMES[0]: 2000}}, NAMES, 0.1)
    reset, changed = update_zones(obj, {"node-0": {NAMES[0]: 3000, NAMES[1]: 1 << 30}}, NAMES, 0.1)
    assert changed and zone_values(reset, NAMES)["node-1"] == {NAMES[0]: 0}
    assert zone_values(reset, NAMES)["node-1"] == {NAMES[0]: 0}
    assert next(r for r in reset["zones"][1]["resources"] if r["name"] == "cpu")["allocatable"] == "8"  # kept
    assert update_zones(reset, {"node-0": {NAMES[0]: 3000, NAMES[1]: 1 << 30}}, NAMES, 0.1)[1] is False


# ----------------------------------------------------------------------------- the controller


async def test_the_controller_keeps_the_node_resource_topology_in_step():
    from koordsim.cluster import SimCluster, SimSpec
    from slo_controller.controller import SLOController

    cluster = SimCluster(SimSpec(nodes=1, online_pods_per_node=2, seed=3))
    await cluster.start()
    now = [cluster.now_ms()]
    ctrl = SLOController(cluster, None, prefix="koordinator.sh/", resync_s=3600, catchup_timeout_s=0,
                         clock=lambda: now[0])
    await ctrl.apply_config({"colocation-config": json.dumps({"enable": True})})
    await ctrl.start()
    try:
        (n,) = await cluster.list_nodes()
        half = Resources(n.allocatable["cpu"] // 2, n.allocatable["memory"] // 2)
        zone_list = [NUMAZone(name=f"node-{i}", capacity=half, allocatable=half) for i in range(2)]

        def metric(ts, system_cpu=1000):
            return NodeMetric(node=n.name, ts=ts, node_usage=Resources(system_cpu, 1 << 30),
                              system_usage=Resources(system_cpu, 1 << 30), numa_zones=zone_list)

        names = ("koordinator.sh/batch-cpu", "koordinator.sh/batch-memory")
        plan = await ctrl.handle_metric(metric(now[0]))
        assert set(plan.zones) == {"node-0", "node-1"}
        obj = await cluster.get_custom("NodeResourceTopology", n.name)
        assert zone_values(obj, names) == plan.zones  # created from the reported zones, with their batch values
        assert {r["name"] for r in obj["zones"][0]["resources"]} == {"cpu", "memory", *names}

        # 30 s later, a small move: nothing written
        now[0] += 30_000
        plan = await ctrl.handle_metric(metric(now[0], system_cpu=1100))
        assert await ctrl.sync_zones(plan) is False
        # past updateTimeThresholdSeconds (300 s): written again even unchanged
        now[0] += 301_000
        assert await ctrl.sync_zones(ctrl.plan(n.name)) is True
        # the metric goes stale (degradeTimeMinutes 15): every zone's batch resources go to 0
        now[0] += 16 * 60_000
        plan = await ctrl.reconcile_node(n.name)
        assert plan.degraded and plan.zones_reset
        obj = await cluster.get_custom("NodeResourceTopology", n.name)
        assert zone_values(obj, names) == {z: {names[0]: 0, names[1]: 0} for z in ("node-0", "node-1")}
    finally:
        await ctrl.close()
        await cluster.close()
