"""The controller over a real NATS server and the simulated cluster (bus mode, shared replica).

Node sim-node-000: capacity 32 cores / 128Gi (137438953472), kubelet reserve 500m / 1Gi,
four prod pods. The test plays the node agent: it publishes NodeMetrics with system usage
1 core / 2Gi and the prod pods' usage, and reads what the controller writes.
Default strategy: margin 32000 x 40% = 12800 milli; 137438953472 x 35% = 48103633715 bytes.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from koordcommon import subjects
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, NodeResource, NodeSLO, PodMetric, decode
from koordsim.cluster import SimCluster, SimSpec
from slo_controller.controller import SLOController

GI = 1 << 30
NODE = "sim-node-000"
BATCH_CPU, BATCH_MEM = "koordinator.sh/batch-cpu", "koordinator.sh/batch-memory"
CAP_CPU, CAP_MEM = 32000, 137438953472
MARGIN_CPU, MARGIN_MEM = 12800, 48103633715
SYSTEM = Resources(1000, 2 * GI)  # above the kubelet reserve 500m / 1Gi


def expected(pod_cpu: int, pod_mem: int, pods: int = 4) -> tuple[int, int]:
    return (
        CAP_CPU - MARGIN_CPU - SYSTEM.cpu_milli - pods * pod_cpu,
        CAP_MEM - MARGIN_MEM - SYSTEM.memory_bytes - pods * pod_mem,
    )


async def wait_for(predicate, timeout_s: float = 5.0, every_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(every_s)
    raise AssertionError(f"condition not met within {timeout_s} s")


@pytest.fixture
async def sim(bus):
    cluster = SimCluster(SimSpec(nodes=2, online_pods_per_node=4, seed=3), bus=bus, genesis=True)
    await cluster.start()
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM)  # as the node agent declares it
    yield cluster
    await cluster.close()


async def publish_metric(bus, cluster, pod_cpu: int, pod_mem: int) -> NodeMetric:
    pods = await cluster.list_pods(NODE)
    assert len(pods) == 4 and all(p.priority_class == "koord-prod" for p in pods)
    usage = Resources(pod_cpu, pod_mem)
    msg = NodeMetric(
        node=NODE,
        ts=cluster.now_ms(),
        node_usage=Resources(SYSTEM.cpu_milli + 4 * pod_cpu, SYSTEM.memory_bytes + 4 * pod_mem),
        system_usage=SYSTEM,
        pods=[PodMetric(uid=p.uid, namespace=p.namespace, name=p.name, priority_class="koord-prod", usage=usage)
              for p in pods],
    )
    await bus.publish(subjects.nodemetric(NODE), bus.stamp(msg))
    return msg


async def test_prod_usage_lowers_batch_and_stale_metrics_degrade(bus, sim):
    reports: list[NodeResource] = []

    async def collect():
        await bus.ensure_streams(subjects.NODERESOURCE_STREAM)
        async for d in bus.tail(subjects.NODERESOURCE_STREAM, "koord.noderesource.>", NodeResource, deliver="all"):
            reports.append(d.msg)

    collector = asyncio.create_task(collect())
    ctrl = SLOController(sim, bus, prefix="koordinator.sh/", resync_s=0.2, degrade_after_ms=1500,
                         catchup_timeout_s=0.2)
    await ctrl.apply_config({"colocation-config": json.dumps({"enable": True})})

    async def batch_on_node():
        node = await sim.get_node(NODE)
        return node.allocatable.get(BATCH_CPU), node.allocatable.get(BATCH_MEM)

    try:
        await publish_metric(bus, sim, 1000, 4 * GI)  # stored before the controller starts
        await ctrl.start()
        low = expected(1000, 4 * GI)
        assert low == (14200, 70007966925)
        await wait_for(lambda: _eq(batch_on_node, low))
        node = await sim.get_node(NODE)
        assert node.capacity[BATCH_CPU] == low[0]  # capacity and allocatable carry the same value

        # prod usage rises: batch allocatable falls as soon as the next report lands
        t0 = time.monotonic()
        await publish_metric(bus, sim, 3000, 8 * GI)
        high = expected(3000, 8 * GI)
        assert high == (6200, 52828097741)
        await wait_for(lambda: _eq(batch_on_node, high), timeout_s=3)
        assert time.monotonic() - t0 < 3

        report = await wait_for(lambda: _found(reports, lambda r: r.batch == Resources(*high)))
        batch_inputs = report.inputs["batch"]
        assert batch_inputs["podHPUsed"] == [12000, 32 * GI]
        assert batch_inputs["systemUsed"] == [SYSTEM.cpu_milli, SYSTEM.memory_bytes]
        assert batch_inputs["nodeReserved"] == [500, GI]
        assert report.written and not report.degraded

        # the other node never reported: it is degraded, no batch resources
        other = await sim.get_node("sim-node-001")
        assert BATCH_CPU not in other.allocatable

        # the agent stops reporting: after the (shortened) degrade time the node loses batch
        await wait_for(lambda: _eq(batch_on_node, (None, None)), timeout_s=5)
        degraded = await wait_for(lambda: _found(reports, lambda r: r.node == NODE and r.degraded))
        assert degraded.batch is None and degraded.mid is None

        # fresh metrics bring it back
        await publish_metric(bus, sim, 1000, 4 * GI)
        await wait_for(lambda: _eq(batch_on_node, low))
    finally:
        await ctrl.close()
        collector.cancel()


async def test_nodeslo_in_kv_follows_config(bus, sim):
    ctrl = SLOController(sim, bus, resync_s=5, catchup_timeout_s=0)
    await ctrl.apply_config({"resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True}})})
    try:
        await ctrl.start()
        key = subjects.encode_token(NODE)

        async def slo():
            raw = await bus.kv_get(subjects.NODESLO_BUCKET, key)
            return decode(NodeSLO, raw) if raw else None

        first = await wait_for(slo)
        assert first.node == NODE and first.spec.resourceUsedThresholdWithBE.enable is True
        assert first.spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent == 65

        result = await ctrl.apply_config({
            "resource-threshold-config": json.dumps({
                "clusterStrategy": {"enable": True},
                "nodeStrategies": [{"name": "zone", "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": NODE}},
                                    "cpuSuppressThresholdPercent": 40}],
            })
        })
        assert result.errors == {}
        await wait_for(lambda: _pred(slo, lambda s: s.spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent
                                     == 40))
        other = decode(NodeSLO, await bus.kv_get(subjects.NODESLO_BUCKET, "sim-node-001"))
        assert other.spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent == 65

        # an invalid update is refused and the KV keeps the last good spec
        bad = await ctrl.apply_config({"resource-threshold-config": json.dumps(
            {"clusterStrategy": {"cpuSuppressThresholdPercent": 300}})})
        assert "must be in [0, 100], got 300" in bad.errors["resource-threshold-config"]
        assert (await slo()).spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent == 40
    finally:
        await ctrl.close()


async def _eq(fn, want):
    return (await fn()) == tuple(want)


async def _pred(fn, check):
    value = await fn()
    return value is not None and check(value)


async def _found(items, check):
    for item in reversed(items):
        if check(item):
            return item
    return None
