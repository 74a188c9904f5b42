"""End to end over real NATS: a NodeSLO from the KV bucket, a simulated node whose LS pods heat up,
BE pods suppressed and then evicted, and the events on the bus."""

import asyncio

from koordcommon import subjects
from koordcommon.records import ContainerSpec, PodRecord
from koordcommon.schemas import Event, NodeSLO, NodeSLOSpec
from koordsim.cluster import SimCluster, SimSpec
from node_agent.bus import STREAMS, publisher
from node_agent.qos.manager import attach_qos
from node_agent.qos.strategies.cpuset import parse_cpuset
from node_agent.settings import AgentSettings
from node_agent.sim_mode import SimAgent

NODE = "sim-node-000"
# Simulated time starts at a fixed hour: the online pods' usage follows the trace's day, and at
# night-time hours 40x of it stays under the suppress threshold.
NOON = 1_764_590_400_000  # 2025-12-01 12:00 UTC


def be_pod(name, priority, milli):
    batch = {"koordinator.sh/batch-cpu": milli, "koordinator.sh/batch-memory": 2 << 30}
    return PodRecord(namespace="batch", name=name, uid="", node_name=NODE, priority=priority,
                     labels={"koordinator.sh/qosClass": "BE"}, containers=[ContainerSpec("main", batch, batch)])


async def test_be_pods_suppressed_then_evicted_with_events(bus):
    cluster = SimCluster(SimSpec(nodes=1, seed=11, node_cpu_cores=32, online_pods_per_node=4, speed=30.0, start_ms=NOON))
    await cluster.start()
    await cluster.create_pod(be_pod("be-a", 5500, 2000))
    await cluster.create_pod(be_pod("be-b", 5100, 3000))
    await bus.ensure_streams(*STREAMS)
    spec = NodeSLOSpec()
    spec.resourceUsedThresholdWithBE = spec.resourceUsedThresholdWithBE.model_copy(update={
        "enable": True, "cpuSuppressThresholdPercent": 65, "cpuEvictBESatisfactionLowerPercent": 40,
        "cpuEvictBESatisfactionUpperPercent": 70, "cpuEvictTimeWindowSeconds": 6})
    await bus.kv_put(subjects.NODESLO_BUCKET, subjects.encode_token(NODE), NodeSLO(node=NODE, spec=spec).encode())

    settings = AgentSettings(mode="sim", pod_refresh_s=0.3, evict_rate_per_s=5)
    agent = SimAgent(cluster, settings, publisher(bus))
    manager = await attach_qos(agent, bus, settings, cluster)
    stopping = asyncio.Event()
    run = asyncio.create_task(agent.run(stopping))

    events: list[Event] = []

    async def collect_events():
        async for d in bus.tail(subjects.EVENTS_STREAM, "koord.events.>", Event):
            events.append(d.msg)
            if d.msg.kind == "evict":
                return

    watcher = asyncio.create_task(collect_events())
    try:
        await asyncio.sleep(1.0)  # ~30 simulated seconds of calm
        nq = manager.nodes[NODE]
        calm_cpus = parse_cpuset(nq.files.read("kubepods.slice/kubepods-besteffort.slice", "cpuset.cpus"))
        # the LS pods heat up
        for p in await cluster.list_pods(node_name=NODE):
            if p.namespace != "batch":
                await cluster.set_usage_override(pod_key=p.key, cpu_factor=40.0)
        await asyncio.wait_for(watcher, 30)
    finally:
        stopping.set()
        await run
        await manager.stop()

    suppress = [e for e in events if e.action == "cpu_suppress" and e.target.get("level") == "qos"
                and e.target["file"] == "cpuset.cpus"]
    assert suppress, [e.action for e in events]
    hot_cpus = parse_cpuset(nq.files.read("kubepods.slice/kubepods-besteffort.slice", "cpuset.cpus"))
    assert len(hot_cpus) == 2 < len(calm_cpus)  # the floor of 2 CPUs once LS takes everything
    (evict,) = [e for e in events if e.kind == "evict"]
    # real limit 2000m for 5000m requested: satisfaction 0.4 -> release 5000 x (0.7 - 0.4)
    assert evict.details["release"]["cpu"] == 3000 and "release 1499m" in evict.reason
    assert evict.target["name"] == "be-b"  # lower priority goes first
    assert evict.details["outcome"] == "evicted" and evict.details["strategy"] == "cpu_evict"
    names = {p.name for p in await cluster.list_pods(namespace="batch")}
    assert names == {"be-a"}
