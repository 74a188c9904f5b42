"""BatchResource tables: every number below is worked out by hand in the comments.

Base node: capacity 100 cores / 120 GB, allocatable the same (no kubelet reserve).
Default strategy: cpuReclaimThresholdPercent 60 -> safety margin 40 cores,
memoryReclaimThresholdPercent 65 -> margin 42 GB.
"""

from __future__ import annotations

import pytest
from koordcommon.records import ContainerSpec, NodeRecord, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import HostApplicationMetric, NodeMetric, PodMetric
from slo_controller.core.config import ColocationConfig, ColocationStrategy, merge_strategy, parse_colocation_config
from slo_controller.core.resources import batch
from slo_controller.core.snapshot import MetricView, NodeSnapshot, PodLoad, cpuset_size

G = 10**9
NOW = 1_700_000_000_000
C = 1000  # milli-cores per core


def node(alloc_cpu=100, alloc_mem=120 * G, annotations=None, labels=None) -> NodeRecord:
    return NodeRecord(
        "n1",
        labels=labels or {},
        annotations=annotations or {},
        capacity={"cpu": 100 * C, "memory": 120 * G, "pods": 110},
        allocatable={"cpu": alloc_cpu * C, "memory": alloc_mem, "pods": 110},
    )


def pod(key, cpu, mem, hp=True, active=True, lse=False, prod=True) -> PodLoad:
    return PodLoad(key, cpu * C, mem, active, hp, prod and hp, lse)


# Case A pods: p1 request 20c/30G uses 10c/20G; p2 request 10c/10G uses 12c/8G; b1 batch uses 5c/5G.
# HP used = 22c/28G, HP request = 30c/40G, HP max(used, request) = 32c/40G.
PODS_A = [pod("ns/p1", 20, 30 * G), pod("ns/p2", 10, 10 * G), pod("ns/b1", 0, 0, hp=False)]
USAGE_A = {
    "ns/p1": (10 * C, 20 * G, True),
    "ns/p2": (12 * C, 8 * G, True),
    "ns/b1": (5 * C, 5 * G, False),
}
SYS_A = (4 * C, 6 * G)


def metric(pods=None, system=SYS_A, age_ms=60_000, host_hp=(0, 0)) -> MetricView:
    return MetricView(NOW - age_ms, (50 * C, 60 * G), system, dict(USAGE_A if pods is None else pods), host_hp)


def strategy(**kw) -> ColocationStrategy:
    return merge_strategy(ColocationStrategy(), {"enable": True, **kw})


def calc(snap_pods=PODS_A, m="default", n=None, degrade_after_ms=None, **kw):
    snap = NodeSnapshot(n or node(), snap_pods, metric() if m == "default" else m, NOW, degrade_after_ms)
    out = batch.calculate(snap, strategy(**kw))
    return out.value("batch-cpu"), out.value("batch-memory"), out


@pytest.mark.parametrize(
    "kw, cpu, mem",
    [
        # usage: cpu 100-40-4-22 = 34; mem 120-42-6-28 = 44
        ({}, 34 * C, 44 * G),
        # maxUsageRequest: cpu 100-40-4-32 = 24; mem 120-42-6-40 = 32
        ({"cpuCalculatePolicy": "maxUsageRequest", "memoryCalculatePolicy": "maxUsageRequest"}, 24 * C, 32 * G),
        # request: memory 120-42-reserved 0-request 40 = 38; cpu has no request policy -> usage 34
        ({"cpuCalculatePolicy": "request", "memoryCalculatePolicy": "request"}, 34 * C, 38 * G),
        # thresholds above 100 make the margin negative: cpu 120% -> margin -20: 100+20-4-22 = 94;
        # memory 110% -> margin -12: 120+12-6-28 = 98
        ({"cpuReclaimThresholdPercent": 120, "memoryReclaimThresholdPercent": 110}, 94 * C, 98 * G),
        # caps: cpu min(34, 100 x 30%) = 30; memory min(44, 120 x 50% = 60) = 44
        ({"batchCPUThresholdPercent": 30, "batchMemoryThresholdPercent": 50}, 30 * C, 44 * G),
        # threshold 0 -> margin = capacity -> nothing left, clamped at 0
        ({"cpuReclaimThresholdPercent": 0, "memoryReclaimThresholdPercent": 0}, 0, 0),
    ],
)
def test_policies(kw, cpu, mem):
    got_cpu, got_mem, _ = calc(**kw)
    assert (got_cpu, got_mem) == (cpu, mem)


def test_pod_without_metric_counts_by_request():
    # p3 prod request 8c/6G has no metric.
    pods = PODS_A + [pod("ns/p3", 8, 6 * G)]
    # usage: HP used 30c/34G -> cpu 100-40-4-30 = 26; mem 120-42-6-34 = 38
    assert calc(pods)[:2] == (26 * C, 38 * G)
    # maxUsageRequest: Koordinator leaves a pod without metric out of podHPMaxUsedReq -> unchanged 24/32
    assert calc(pods, cpuCalculatePolicy="maxUsageRequest", memoryCalculatePolicy="maxUsageRequest")[:2] == (
        24 * C,
        32 * G,
    )
    # request: HP request 38c/46G -> memory 120-42-0-46 = 32
    assert calc(pods, memoryCalculatePolicy="request")[1] == 32 * G
    assert calc(pods)[2].inputs["podsWithoutMetric"] == 1


def test_lse_pod_does_not_lend_cpu():
    # LSE request 16c/16G uses 4c/10G: counts cpu by request, memory by usage.
    pods = [pod("ns/lse", 16, 16 * G, lse=True)]
    usage = {"ns/lse": (4 * C, 10 * G, True)}
    # usage: cpu 100-40-4-16 = 40; mem 120-42-6-10 = 62
    assert calc(pods, metric(usage))[:2] == (40 * C, 62 * G)
    # maxUsageRequest: max(16,4)=16 -> 40; max(16,10)=16 -> 120-42-6-16 = 56
    assert calc(pods, metric(usage), cpuCalculatePolicy="maxUsageRequest", memoryCalculatePolicy="maxUsageRequest")[
        :2
    ] == (40 * C, 56 * G)


def test_dangling_metrics_count_by_their_own_priority():
    usage = dict(USAGE_A, **{"ns/gone": (6 * C, 4 * G, True), "ns/gone-batch": (3 * C, 3 * G, False)})
    # usage: cpu 34-6 = 28; mem 44-4 = 40 (the batch one is ignored)
    cpu, mem, out = calc(PODS_A, metric(usage))
    assert (cpu, mem) == (28 * C, 40 * G)
    assert out.inputs["danglingMetrics"] == 2
    # maxUsageRequest: cpu 24-6 = 18; mem 32-4 = 28
    assert calc(PODS_A, metric(usage), cpuCalculatePolicy="maxUsageRequest", memoryCalculatePolicy="maxUsageRequest")[
        :2
    ] == (18 * C, 28 * G)


def test_inactive_pods_are_ignored_and_their_metrics_are_not_dangling():
    pods = PODS_A + [pod("ns/done", 30, 30 * G, active=False)]
    usage = dict(USAGE_A, **{"ns/done": (30 * C, 30 * G, True)})
    cpu, mem, out = calc(pods, metric(usage))
    assert (cpu, mem) == (34 * C, 44 * G)
    assert out.inputs["danglingMetrics"] == 0


@pytest.mark.parametrize(
    "n, system, host_hp, cpu, mem",
    [
        # kubelet reserves 8c/10G > system 4c/6G: cpu 100-40-8-22 = 30; mem 120-42-10-28 = 40
        (node(92, 110 * G), SYS_A, (0, 0), 30 * C, 40 * G),
        # system 15c/16G > reserved 8c/10G: cpu 100-40-15-22 = 23; mem 120-42-16-28 = 34
        (node(92, 110 * G), (15 * C, 16 * G), (0, 0), 23 * C, 34 * G),
        # HP host applications add to system: 4+3 = 7c, 6+2 = 8G: cpu 100-40-7-22 = 31; mem 120-42-8-28 = 42
        (node(), SYS_A, (3 * C, 2 * G), 31 * C, 42 * G),
        # annotation reservation: reservedCPUs 0-11 (12 cores) overrides resources.cpu 2; memory 20Gi
        # cpu 100-40-12-22 = 26; mem 120e9-42e9-21474836480-28e9
        (
            node(92, 110 * G, {"node.koordinator.sh/reservation":
                               '{"resources": {"cpu": "2", "memory": "20Gi"}, "reservedCPUs": "0-11"}'}),
            SYS_A,
            (0, 0),
            26 * C,
            120 * G - 42 * G - 21474836480 - 28 * G,
        ),
        # an unusable reservation annotation is ignored: kubelet's 8c/10G applies
        (node(92, 110 * G, {"node.koordinator.sh/reservation": "{not json"}), SYS_A, (0, 0), 30 * C, 40 * G),
    ],
)
def test_system_usage_versus_reserved(n, system, host_hp, cpu, mem):
    assert calc(PODS_A, metric(system=system, host_hp=host_hp), n)[:2] == (cpu, mem)


def test_request_policy_uses_node_reserved_not_system_usage():
    # system 15c/16G is ignored by `request`: memory 120-42-reserved 10-request 40 = 28
    m = metric(system=(15 * C, 16 * G))
    assert calc(PODS_A, m, node(92, 110 * G), memoryCalculatePolicy="request")[1] == 28 * G


@pytest.mark.parametrize(
    "m, degrade_after_ms, degraded",
    [
        ("missing", None, True),
        (MetricView(None, (0, 0)), None, True),  # no update time
        (MetricView(NOW - 16 * 60_000, (0, 0)), None, True),  # older than 15 minutes
        (MetricView(NOW - 15 * 60_000, (0, 0)), None, False),  # exactly 15 minutes: still fresh (strict >)
        (MetricView(NOW - 11_000, (0, 0)), 10_000, True),  # the override shortens the limit
        (MetricView(NOW - 9_000, (0, 0)), 10_000, False),
    ],
)
def test_degrade(m, degrade_after_ms, degraded):
    cpu, mem, out = calc(PODS_A, None if m == "missing" else m, degrade_after_ms=degrade_after_ms)
    assert out.degraded is degraded
    if degraded:
        assert (cpu, mem) == (None, None) and out.reset
        assert out.items[0].message == (
            "degrade node resource because of abnormal nodeMetric, reason: degradedByBatchResource"
        )
    else:
        assert cpu is not None


def test_messages_match_koordinator_examples():
    # Koordinator's own example messages: capacity 100c/120G, thresholds 65/65, system 7c/12G, HP 33c/33G.
    n = node()
    m = MetricView(NOW, (0, 0), (7 * C, 12 * G), {"ns/p": (33 * C, 33 * G, True)})
    snap = NodeSnapshot(n, [pod("ns/p", 40, 40 * G)], m, NOW)
    out = batch.calculate(snap, strategy(cpuReclaimThresholdPercent=65))
    assert [i.message for i in out.items] == [
        (
            "batchAllocatable[CPU(Milli-Core)]:25000 = nodeCapacity:100000 - nodeSafetyMargin:35000 - "
            "systemUsageOrNodeReserved:7000 - podHPUsed:33000"
        ),
        "batchAllocatable[Mem(GB)]:33 = nodeCapacity:120 - nodeSafetyMargin:42 - systemUsage:12 - podHPUsed:33",
    ]


def test_memory_cap_message_quirk():
    # usage policy + memory cap: the message says podHPMaxUsedRequest (40) though 28 (used) is subtracted.
    _, mem, out = calc(batchMemoryThresholdPercent=50)
    assert mem == 44 * G
    assert out.items[1].message.endswith("systemUsage:6 - podHPMaxUsedRequest:40)")


def test_node_pool_overrides_and_node_metadata():
    cfg = parse_colocation_config(
        {
            "enable": True,
            "nodeConfigs": [
                {"name": "pool-a", "nodeSelector": {"matchLabels": {"pool": "a"}},
                 "cpuReclaimThresholdPercent": 80, "memoryCalculatePolicy": "request"},
                {"name": "pool-a-again", "nodeSelector": {"matchLabels": {"pool": "a"}},
                 "cpuReclaimThresholdPercent": 10},
            ],
        }
    )

    def run(labels=None, annotations=None):
        n = node(labels=labels, annotations=annotations)
        col = cfg.for_node(n.labels, n.annotations)
        out = batch.calculate(NodeSnapshot(n, PODS_A, metric(), NOW), col.strategy)
        return out.value("batch-cpu"), out.value("batch-memory"), col.source

    # pool-a (the first match): cpu margin 20 -> 100-20-4-22 = 54; memory by request -> 38
    assert run({"pool": "a"}) == (54 * C, 38 * G, "nodeConfig:pool-a")
    # no match: cluster defaults
    assert run({"pool": "b"}) == (34 * C, 44 * G, "cluster")
    # label ratio 0.7 -> 70%: margin 30 -> 100-30-4-22 = 44
    assert run({"node.koordinator.sh/cpu-reclaim-ratio": "0.7"})[:2] == (44 * C, 44 * G)
    # negative or unparsable ratios are ignored
    assert run({"node.koordinator.sh/cpu-reclaim-ratio": "-0.5"})[:2] == (34 * C, 44 * G)
    assert run({"node.koordinator.sh/cpu-reclaim-ratio": "lots"})[:2] == (34 * C, 44 * G)
    # annotation strategy: memory threshold 80 -> margin 24: 120-24-6-28 = 62
    got = run(annotations={"node.koordinator.sh/colocation-strategy": '{"memoryReclaimThresholdPercent": 80}'})
    assert got == (34 * C, 62 * G, "cluster+annotation")


def test_pod_load_from_records_and_metric_from_message():
    def rec(name, labels=None, priority=None, cpu=1000, mem=G, phase="Running"):
        return PodRecord("ns", name, name, "n1", labels=labels or {}, priority=priority, phase=phase,
                         containers=[ContainerSpec("c", {"cpu": cpu, "memory": mem}, {})])

    loads = {p.key: p for p in map(PodLoad.from_record, [
        rec("prod", priority=9000),
        rec("mid", priority=7100),
        rec("batch", labels={"koordinator.sh/qosClass": "BE"}, priority=5500, cpu=0, mem=0),
        rec("plain"),  # no koord priority, Burstable -> LS -> prod
        rec("lse", labels={"koordinator.sh/qosClass": "LSE"}, priority=9100),
        rec("done", priority=9000, phase="Succeeded"),
    ])}
    assert [(k, v.hp, v.prod, v.lse, v.active) for k, v in loads.items()] == [
        ("ns/prod", True, True, False, True),
        ("ns/mid", True, False, False, True),
        ("ns/batch", False, False, False, True),
        ("ns/plain", True, True, False, True),
        ("ns/lse", True, True, True, True),
        ("ns/done", True, True, False, False),
    ]
    msg = NodeMetric(
        node="n1",
        ts=NOW,
        node_usage=Resources(50 * C, 60 * G),
        system_usage=Resources(4 * C, 6 * G),
        pods=[PodMetric(uid="u", namespace="ns", name="x", priority_class="koord-batch", usage=Resources(1, 2)),
              PodMetric(uid="v", namespace="ns", name="y", usage=Resources(3, 4))],
        host_applications=[
            HostApplicationMetric(name="agent", priority_class="koord-prod", usage=Resources(2 * C, G)),
            HostApplicationMetric(name="cache", priority_class="koord-mid", usage=Resources(1 * C, G)),
            HostApplicationMetric(name="scavenger", priority_class="koord-batch", usage=Resources(5 * C, G)),
        ],
    )
    mv = MetricView.from_message(msg)
    assert mv.update_ms == NOW
    assert mv.pods == {"ns/x": (1, 2, False), "ns/y": (3, 4, True)}
    assert mv.host_hp_usage == (3 * C, 2 * G)  # prod + mid
    assert mv.host_prod_usage == (2 * C, G)  # prod only (mid's system term)
    assert mv.prod_reclaimable is None


@pytest.mark.parametrize("text, n", [("0-3", 4), ("0-3,8", 5), ("0,0,1", 2), ("", 0), ("3-1", None), ("a", None)])
def test_cpuset_size(text, n):
    assert cpuset_size(text) == n


def test_disabled_cluster_config_is_default():
    assert ColocationConfig().for_node({}, {}).enabled is False
