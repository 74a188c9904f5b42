"""The controller against the in-process simulated cluster (local mode, no bus): cluster events,
late metrics, dangling pods, config switches, node label overrides, failed writes."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric
from koordsim.cluster import SimCluster, SimSpec
from slo_controller.controller import SLOController
from slo_controller.profiles import PROFILE_KIND, ProfileStore

GI = 1 << 30
NODE = "sim-node-000"
P = "koordinator.sh/"
SYSTEM = Resources(1000, 2 * GI)


class FlakyCluster(SimCluster):
    """Fails the next `failures` node status patches."""

    failures = 0

    async def patch_node_status(self, name, set_resources, remove_resources=()):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("apiserver unavailable")
        return await super().patch_node_status(name, set_resources, remove_resources)


@pytest.fixture
async def env():
    cluster = FlakyCluster(SimSpec(nodes=2, online_pods_per_node=4, seed=3))
    await cluster.start()
    ctrl = SLOController(cluster, None, prefix=P, resync_s=3600, catchup_timeout_s=0)
    await ctrl.apply_config({"colocation-config": json.dumps({
        "enable": True,
        "nodeConfigs": [{"name": "gold", "nodeSelector": {"matchLabels": {"pool": "gold"}},
                         "cpuReclaimThresholdPercent": 90}],
    })})
    await ctrl.start()
    yield cluster, ctrl
    await ctrl.close()
    await cluster.close()


def metric(cluster, pods, pod_cpu=1000, pod_mem=4 * GI, ts=None) -> NodeMetric:
    return NodeMetric(
        node=NODE, ts=cluster.now_ms() if ts is None else ts,
        node_usage=Resources(SYSTEM.cpu_milli + len(pods) * pod_cpu, SYSTEM.memory_bytes + len(pods) * pod_mem),
        system_usage=SYSTEM,
        pods=[PodMetric(uid=p.uid, namespace=p.namespace, name=p.name, priority_class="koord-prod",
                        usage=Resources(pod_cpu, pod_mem)) for p in pods],
    )


async def settle(predicate, timeout_s=2.0):
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met")


async def batch_cpu(cluster):
    return (await cluster.get_node(NODE)).allocatable.get(P + "batch-cpu")


async def test_metrics_pods_and_labels_drive_the_node_status(env):
    cluster, ctrl = env
    pods = await cluster.list_pods(NODE)
    # 32000 - 12800 (60 %) - 1000 system - 4 x 1000
    plan = await ctrl.handle_metric(metric(cluster, pods))
    assert plan.write and await batch_cpu(cluster) == 14200

    # a report older than the one in force is ignored
    assert await ctrl.handle_metric(metric(cluster, pods, pod_cpu=5000, ts=cluster.now_ms() - 60_000)) is None
    assert await batch_cpu(cluster) == 14200

    # a deleted pod's metric is dangling and still counts (by its own priority) until the agent drops it
    await cluster.delete_pod(pods[0].namespace, pods[0].name)
    await settle(lambda: len(ctrl.pods[NODE]) == 3)
    plan = await ctrl.handle_metric(metric(cluster, pods))
    assert plan.results[1].inputs["danglingMetrics"] == 1 and plan.batch.cpu_milli == 14200
    plan = await ctrl.handle_metric(metric(cluster, pods[1:]))
    assert plan.batch.cpu_milli == 15200 and plan.write is False  # +1000 is within the 10 % diff threshold

    # joining the "gold" pool (90 %): margin 3200 -> 32000 - 3200 - 1000 - 3000 = 24800
    # (the label change itself triggers the recompute)
    await cluster.update_node(NODE, labels={**(await cluster.get_node(NODE)).labels, "pool": "gold"})
    await settle(lambda: ctrl.last_plan[NODE].batch.cpu_milli == 24800)
    assert ctrl.colocation_for(ctrl.nodes[NODE]).source == "nodeConfig:gold"
    assert await batch_cpu(cluster) == 24800


async def test_disable_and_failed_writes(env):
    cluster, ctrl = env
    pods = await cluster.list_pods(NODE)
    await ctrl.handle_metric(metric(cluster, pods))
    assert await batch_cpu(cluster) == 14200

    # the apiserver fails: nothing recorded, the next round retries
    cluster.failures = 1
    before = ctrl.last_sync[NODE]
    await ctrl.apply_config({"colocation-config": json.dumps({"enable": False})})
    assert ctrl.last_sync[NODE] == before and await batch_cpu(cluster) == 14200
    await ctrl.reconcile_all()
    node = await cluster.get_node(NODE)
    assert P + "batch-cpu" not in node.allocatable and P + "batch-cpu" not in node.capacity
    assert P + "mid-cpu" not in node.allocatable
    assert ctrl.last_plan[NODE].enabled is False


async def test_new_and_deleted_nodes(env):
    cluster, ctrl = env
    assert set(ctrl.nodes) == {"sim-node-000", "sim-node-001"}
    import msgspec

    other = msgspec.structs.replace(metric(cluster, await cluster.list_pods("sim-node-001")), node="sim-node-001")
    await ctrl.handle_metric(other)
    kept = {"metrics", "metric_ts", "hp_history", "last_plan"}
    assert all("sim-node-001" in getattr(ctrl, d) for d in kept)
    ctrl._forget_node("sim-node-001")
    assert "sim-node-001" not in ctrl.nodes and "sim-node-001" not in ctrl.pods
    assert all(n != "sim-node-001" for n in ctrl._pod_node.values())
    assert not any("sim-node-001" in getattr(ctrl, d) for d in kept)  # nothing of a deleted node is kept


async def test_profiles_from_the_cluster(env):
    cluster, _ = env
    await cluster.apply_custom(PROFILE_KIND, {
        "apiVersion": "config.koordinator.sh/v1alpha1", "kind": PROFILE_KIND,
        "metadata": {"name": "from-cluster"},
        "spec": {"selector": {"matchLabels": {"app": "spark"}}, "qosClass": "BE", "priorityClassName": "koord-batch"},
    })
    store = ProfileStore()
    await store.refresh_from_cluster(cluster)
    assert [(p.name, p.qos_class) for p in store.profiles()] == [("from-cluster", "BE")]


async def test_rest_view(env):
    import httpx
    from fastapi import FastAPI
    from slo_controller.api import create_router

    cluster, ctrl = env
    await ctrl.handle_metric(metric(cluster, await cluster.list_pods(NODE)))
    app = FastAPI()
    app.include_router(create_router(ctrl))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://slo") as c:
        one = (await c.get(f"/api/v1/nodes/{NODE}/resources")).json()
        assert one["batch"]["cpu"] == 14200 and one["degraded"] is False and one["strategySource"] == "cluster"
        assert one["inputs"]["batch"]["podHPUsed"] == [4000, 16 * GI]
        assert one["messages"][2].startswith("batchAllocatable[CPU(Milli-Core)]:14200 = nodeCapacity:32000")
        page = (await c.get("/api/v1/nodes", params={"limit": 1})).json()
        assert page["total"] == 2 and page["nextOffset"] == 1 and page["items"][0]["node"] == NODE
        assert (await c.get("/api/v1/nodes", params={"limit": 1, "offset": 1})).json()["nextOffset"] is None
        assert (await c.get("/api/v1/nodes/nope/resources")).status_code == 404
        cfg = (await c.get("/api/v1/config")).json()
        assert cfg["cluster"]["enable"] is True and cfg["nodeConfigs"][0]["name"] == "gold"
        await ctrl.apply_config({"colocation-config": '{"enable": true, "degradeTimeMinutes": -1}'})
        cfg = (await c.get("/api/v1/config")).json()
        assert "degradeTimeMinutes must be > 0" in cfg["errors"]["colocation-config"]


async def test_predict_policy_learns_from_the_metrics_it_handles(env):
    cluster, ctrl = env
    await ctrl.apply_config({"colocation-config": json.dumps(
        {"enable": True, "cpuCalculatePolicy": "predict", "memoryCalculatePolicy": "predict"})})
    pods = await cluster.list_pods(NODE)
    now = cluster.now_ms()

    def report(i):
        m = metric(cluster, pods, ts=now - (23 - i) * 60_000)
        return msgspec.structs.replace(m, prod_peak=Resources(10_000, 20 * GI))

    for i in range(23):
        plan = await ctrl.handle_metric(report(i))
    # 23 reports: too few for N-sigma, the HP requests stand in for it
    assert next(r for r in plan.results if r.plugin == "batch").inputs["nSigmaPeak"] is None
    plan = await ctrl.handle_metric(report(23))
    # the 24th: 4 pods x 1000 m / 4 GiB, constant, so mean + 5 sigma is the usage itself;
    # the node agent's prod peak (10 cores, 20 GiB) is above it:
    # 32000 - 12800 (60 %) - 1000 system - 10000 = 8200
    inputs = next(r for r in plan.results if r.plugin == "batch").inputs
    assert inputs["nSigmaPeak"] == (4000, 16 * GI) and inputs["perPodPeakSum"] == (10_000, 20 * GI)
    assert plan.batch.cpu_milli == 8200
