import math

from koordcommon.model import PriorityClass, QoSClass
from koordcommon.records import ContainerSpec, OwnerRef, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, NodeMetricSample, decode
from node_agent.core.messages import HistoryConfig, NodeHistory
from node_agent.core.pods import PodInfo

GI = 1024**3


def pod(uid, name, *, cpu=1000, mem=2 * GI, labels=None, priority=None, start_ms=0):
    return PodInfo.from_record(
        PodRecord(
            namespace="default",
            name=name,
            uid=uid,
            node_name="n1",
            labels=labels or {},
            priority=priority,
            owners=[OwnerRef(kind="ReplicaSet", name=name + "-rs")],
            phase="Running",
            containers=[ContainerSpec("app", {"cpu": cpu, "memory": mem}, {"cpu": 2 * cpu, "memory": mem})],
            start_ms=start_ms,
        )
    )


def test_sample_averages_the_report_interval_and_system_is_per_round():
    h = NodeHistory("n1", HistoryConfig())
    h.set_node(Resources(8000, 32 * GI), Resources(7600, 30 * GI))
    h.set_pods([pod("a", "web"), pod("b", "batch", labels={"koordinator.sh/qosClass": "BE"}, priority=5500)])
    for i in range(1, 11):
        h.record(
            i * 1000,
            (1000.0 + 100 * (i - 1), 4e9),
            {"a": (300.0, 1e9), "b": (math.nan if i == 1 else 200.0, 5e8)},
            {("a", "app"): (300.0, 1e9)},
        )
    s = h.sample(10_000, 10.0)
    assert s.node_usage == Resources(1450, 4_000_000_000)
    # round 1: 1000 - 300 (b had no cpu rate yet); rounds 2..10: node - 500 -> (700 + 9000) / 10
    assert s.system_usage == Resources(970, 2_500_000_000)
    assert [(p.name, p.usage) for p in s.pods] == [
        ("batch", Resources(200, 500_000_000)),
        ("web", Resources(300, 1_000_000_000)),
    ]
    batch, web = s.pods
    assert (batch.qos, batch.priority_class, batch.priority) == (QoSClass.BE, PriorityClass.BATCH, 5500)
    assert (web.qos, web.priority_class, web.owner.kind, web.owner.name) == (
        QoSClass.LS,
        PriorityClass.PROD,
        "ReplicaSet",
        "web-rs",
    )
    assert web.requests == Resources(1000, 2 * GI) and web.limits == Resources(2000, 2 * GI)
    assert [(c.name, c.usage, c.limits) for c in web.containers] == [
        ("app", Resources(300, 1_000_000_000), Resources(2000, 2 * GI))
    ]
    # the wire form round-trips through the shared schema
    assert decode(NodeMetricSample, s.encode()).system_usage == Resources(970, 2_500_000_000)
    # only the last 5 s
    assert h.sample(10_000, 5.0).node_usage == Resources(1700, 4_000_000_000)
    assert h.sample(50_000, 10.0) is None


def test_system_usage_is_never_negative():
    h = NodeHistory("n1")
    h.set_pods([pod("a", "web")])
    h.record(1000, (500.0, 1e9), {"a": (800.0, 2e9)})
    s = h.sample(1000, 10)
    assert s.system_usage == Resources(0, 0)
    assert s.node_usage == Resources(500, 1_000_000_000)


def test_node_metric_windows_percentiles_and_cold_start():
    cfg = HistoryConfig(node_history_s=1800, pod_history_s=1800, cold_start_s=100)
    h = NodeHistory("n1", cfg)
    h.set_pods([pod("a", "web", start_ms=0)])
    for i in range(1, 601):
        h.record(i * 1000, (float(i), i * 1000.0), {"a": (100.0, 1e9)})
    m = h.node_metric(600_000, aggregate_s=300)
    assert m.node_usage == Resources(450, 450_500)
    five, ten, thirty = m.aggregated_node_usages
    assert (five.duration_s, five.avg, five.p50, five.p90, five.p95, five.p99) == (
        300,
        Resources(450, 450_500),
        Resources(450, 450_000),  # sorted[149] of 301..600
        Resources(570, 570_000),  # sorted[269]
        Resources(585, 585_000),  # sorted[284]
        Resources(597, 597_000),  # sorted[296]
    )
    assert (ten.avg, ten.p50, ten.p90, ten.p95, ten.p99) == (
        Resources(300, 300_500),
        Resources(300, 300_000),
        Resources(540, 540_000),
        Resources(570, 570_000),
        Resources(594, 594_000),
    )
    assert thirty.duration_s == 1800 and thirty.avg is None and thirty.p99 is None  # 599 s < 900 s
    # system = node - pod per round, clamped: max(i - 100, 0) over i = 301..600 -> avg 350.5
    assert m.system_usage.cpu_milli == 350
    (pm,) = m.pods
    assert pm.usage == Resources(100, 1_000_000_000)
    assert not hasattr(pm, "aggregated")  # as Koordinator's PodMetricInfo: the average only
    # peak = p95 cpu / p98 memory x 1.1; reclaimable = request - peak
    assert m.prod_peak == Resources(110, 1_100_000_000)
    assert m.prod_reclaimable == Resources(890, 2 * GI - 1_100_000_000)
    assert decode(NodeMetric, m.encode()).aggregated_node_usages[1].p95 == Resources(570, 570_000)


def test_young_or_unsampled_prod_pods_reclaim_nothing():
    h = NodeHistory("n1", HistoryConfig(cold_start_s=3600))
    h.set_pods([pod("a", "web", start_ms=0), pod("b", "new", start_ms=0)])
    h.record(1000, (100.0, 1e9), {"a": (10.0, 1e8)})
    reclaim, peak = h.prod_prediction(1000)
    assert reclaim == Resources(0, 0)
    assert peak == Resources(2000, 4 * GI)


def test_departed_pods_are_dropped():
    h = NodeHistory("n1")
    h.set_pods([pod("a", "web"), pod("b", "db")])
    h.record(1000, (100.0, 1e9), {"a": (10.0, 1e8), "b": (20.0, 2e8)})
    h.set_pods([pod("a", "web")])
    assert [p.name for p in h.sample(1000, 10).pods] == ["web"]
    assert [p.name for p in h.node_metric(1000).pods] == ["web"]


def test_nodes_sampled_together_aggregate_as_one_and_each_gets_its_own_metric():
    """node_metrics over several nodes gives each node the NodeMetric it gets alone, and the
    values a node holds are its own (a node that joined late is aggregated apart)."""
    from node_agent.core.messages import node_metrics

    cfg = HistoryConfig(collect_interval_s=60, cold_start_s=0)
    hs = [NodeHistory(f"n{i}", cfg) for i in range(3)]
    for i, h in enumerate(hs):
        h.set_node(Resources(8000, 32 * GI), Resources(8000, 32 * GI))
        h.set_pods([pod(f"p{i}", f"web{i}", cpu=2000), pod(f"b{i}", f"job{i}", priority=5500)][: i + 1])
    for r in range(1, 32):
        for i, h in enumerate(hs):
            if i == 2 and r < 20:
                continue  # joined late: fewer rounds in its windows
            h.record(r * 60_000, (1000.0 * (i + 1) + r, float(8 * GI)), {f"p{i}": (100.0 * (i + 1) + r, float(GI)),
                                                                        f"b{i}": (50.0, float(GI))})
    now = 31 * 60_000
    together = node_metrics(hs, now)
    assert together == [h.node_metric(now) for h in hs]
    # each node's own numbers: the node average over the last 5 rounds (27..31) and p95 of its pod
    assert [m.node_usage.cpu_milli for m in together] == [1029, 2029, 3029]
    assert [len(m.pods) for m in together] == [1, 2, 2]
    # prod p95 over 30 min (rounds 2..31, 30 samples: index int(30 x 0.95) - 1 = 27 -> round 29) x 1.1
    assert together[0].prod_peak.cpu_milli == int((100 + 29) * 1.1)
    # the late node: rounds 20..31, 12 samples: index int(12 x 0.95) - 1 = 10 -> round 30
    assert together[2].prod_peak.cpu_milli == int((300 + 30) * 1.1)
