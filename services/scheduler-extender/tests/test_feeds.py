"""The feeds: NodeMetric / NodeResource / Recommendation from a real NATS server, and the cluster
watch of an in-process simulated cluster (nodes, bindings, Reservations)."""

import asyncio
import time

from koordcommon import subjects
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import ContainerRecommendation, NodeMetric, NodeResource, Recommendation, UsageProfile
from koordsim.cluster import SimCluster
from koordsim.spec import SimSpec
from scheduler_extender import feeds
from scheduler_extender.core.plugins.loadaware import NAME as LOAD_AWARE
from scheduler_extender.core.plugins.tierfit import tier_allocatable
from scheduler_extender.core.state import ClusterState

Gi = 1024**3


async def eventually(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def test_bus_feeds_start_from_the_latest_and_follow(bus):
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM, subjects.NODERESOURCE_STREAM, subjects.RECOMMENDATION_STREAM)
    now = int(time.time() * 1000)
    # two metrics of n1 before the extender starts: only the latest matters
    for ts, cpu in ((now - 2000, 1000), (now - 1000, 2000)):
        await bus.publish(
            subjects.nodemetric("n1"), bus.stamp(NodeMetric(node="n1", ts=ts, node_usage=Resources(cpu, Gi)))
        )
    await bus.publish(
        subjects.noderesource("n1"), bus.stamp(NodeResource(node="n1", ts=now, batch=Resources(9000, 9 * Gi)))
    )
    # a malformed message on the stream is dead-lettered by the bus, not fatal to the feed
    await bus.js.publish(bus.wire_subject(subjects.nodemetric("bad")), b"{not json")
    st = ClusterState()
    status = feeds.FeedStatus()
    tasks = [
        asyncio.create_task(feeds.follow_metrics(bus, st, status)),
        asyncio.create_task(feeds.follow_node_resources(bus, st, status)),
        asyncio.create_task(feeds.follow_profiles(bus, st, status, "p95", 86400)),
    ]
    try:
        await eventually(lambda: "n1" in st.metrics and "n1" in st.node_resources)
        assert st.metrics["n1"].node_usage == Resources(2000, Gi)
        assert tier_allocatable(st.view("n1"))[0] == Resources(9000, 9 * Gi)
        assert st.plugin(LOAD_AWARE).load(st.view("n1")).exist.cpu_milli == 2000
        # live: a newer metric for n1, a first one for n.2 (dots are encoded in subjects)
        await bus.publish(
            subjects.nodemetric("n1"), bus.stamp(NodeMetric(node="n1", ts=now, node_usage=Resources(3000, Gi)))
        )
        await bus.publish(
            subjects.nodemetric("n.2"), bus.stamp(NodeMetric(node="n.2", ts=now, node_usage=Resources(500, Gi)))
        )
        rec = Recommendation(
            namespace="default",
            owner_kind="Deployment",
            owner_name="web",
            containers=[
                ContainerRecommendation(
                    container="main",
                    target=Resources(1000, Gi),
                    lower_bound=Resources(500, Gi),
                    upper_bound=Resources(2000, 2 * Gi),
                    profiles=[UsageProfile(window_s=86400, p95=Resources(700, Gi))],
                )
            ],
        )
        await bus.publish(subjects.recommendation("default", "web"), bus.stamp(rec))
        await eventually(lambda: st.metrics["n1"].node_usage.cpu_milli == 3000 and "n.2" in st.metrics and st.profiles)
        assert st.profiles[("default", "Deployment", "web")].containers == {"main": Resources(700, Gi)}
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_cluster_feed_lists_then_watches():
    cluster = SimCluster(SimSpec(nodes=3, seed=3, online_pods_per_node=2))
    await cluster.start()
    st = ClusterState(clock=cluster.now_ms)
    status = feeds.FeedStatus()
    task = asyncio.create_task(feeds.follow_cluster(cluster, st, status))
    try:
        await asyncio.wait_for(status.cluster_listed.wait(), 10)
        nodes = await cluster.list_nodes()
        assert set(st.nodes) == {n.name for n in nodes}
        bound = [p for p in await cluster.list_pods() if p.node_name]
        assert set(st.pods) == {p.key for p in bound}
        target = nodes[0].name
        pod = PodRecord(
            namespace="default",
            name="fresh",
            uid="",
            containers=[ContainerSpec("c", {"cpu": 2000, "memory": Gi}, {"cpu": 2000, "memory": Gi})],
        )
        await cluster.create_pod(pod)
        await cluster.bind_pod("default", "fresh", target)
        await eventually(lambda: "default/fresh" in st.assigned.get(target, {}))
        assert not st.assigned[target]["default/fresh"].assumed
        await cluster.apply_custom(
            "Reservation",
            {
                "apiVersion": "scheduling.koordinator.sh/v1alpha1",
                "kind": "Reservation",
                "metadata": {"name": "hold", "uid": "r1", "creationTimestamp": "2020-01-01T00:00:00Z"},
                "spec": {
                    "template": {
                        "spec": {
                            "nodeName": target,
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                        }
                    },
                    "owners": [{"labelSelector": {"matchLabels": {"app": "x"}}}],
                    "ttl": "0",
                },
            },
        )
        await eventually(lambda: "hold" in st.reservations)
        assert st.resv_by_node[target] == {"hold"}
        await cluster.delete_pod("default", "fresh")
        await eventually(lambda: "default/fresh" not in st.assigned.get(target, {}))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await cluster.close()
