import asyncio

import pytest
from koordcommon import subjects
from koordcommon.schemas import NodeMetric, NodeMetricSample
from koordsim.cluster import SimCluster, SimSpec
from node_agent.bus import STREAMS, publisher
from node_agent.settings import AgentSettings
from node_agent.sim_mode import SimAgent, select_nodes


async def test_shards_partition_the_nodes():
    cluster = SimCluster(SimSpec(nodes=40, seed=3))
    nodes = await cluster.list_nodes()
    shards = [select_nodes(nodes, AgentSettings(shard=f"{i}/3")) for i in range(3)]
    names = [n.name for shard in shards for n in shard]
    assert sorted(names) == sorted(n.name for n in nodes)
    assert all(len(s) > 5 for s in shards)  # stable hash spreads them
    assert [n.name for n in select_nodes(nodes, AgentSettings(nodes="sim-node-001,sim-node-007"))] == [
        "sim-node-001",
        "sim-node-007",
    ]
    with pytest.raises(ValueError):
        AgentSettings(shard="3/3")


async def test_sim_agent_publishes_exact_samples_and_nodemetrics_over_nats(bus):
    # 120 simulated seconds per wall second: a 10 s report every ~0.08 s, a NodeMetric every 0.5 s
    cluster = SimCluster(SimSpec(nodes=3, seed=7, speed=120.0))
    await cluster.start()
    await bus.ensure_streams(*STREAMS)
    settings = AgentSettings(pod_refresh_s=1000)
    agent = SimAgent(cluster, settings, publisher(bus))
    stopping = asyncio.Event()
    task = asyncio.create_task(agent.run(stopping))
    samples: list[NodeMetricSample] = []
    metrics: list[NodeMetric] = []

    async def read():
        async for d in bus.tail(subjects.METRICS_STREAM, "koord.metrics.>", NodeMetricSample):
            samples.append(d.msg)
            if len(samples) >= 9:
                return

    async def read_nm():
        async for d in bus.tail(subjects.NODEMETRIC_STREAM, "koord.nodemetric.>", NodeMetric):
            metrics.append(d.msg)
            if len(metrics) >= 3:
                return

    await asyncio.wait_for(asyncio.gather(read(), read_nm()), 20)
    stopping.set()
    await task

    assert {s.node for s in samples} == {"sim-node-000", "sim-node-001", "sim-node-002"}
    # a sample that covers a full report interval averages exactly the snapshots of its 10 rounds
    first_round = {n: int(h.node_ring.window(0)[0][0]) for n, h in agent.reporter.nodes.items()}
    full = [s for s in samples if s.ts - 9_000 >= first_round[s.node]]
    assert full
    for s in full:
        snaps = [cluster.usage_snapshot(s.node, s.ts - k * 1000) for k in range(10)]
        assert s.node_usage.cpu_milli == sum(x.node_usage.cpu_milli for x in snaps) // 10
        assert s.node_usage.memory_bytes == sum(x.node_usage.memory_bytes for x in snaps) // 10
        assert s.system_usage.cpu_milli == sum(x.system_usage.cpu_milli for x in snaps) // 10
        pods = await cluster.list_pods(node_name=s.node)
        assert {p.uid for p in s.pods} == {p.uid for p in pods if p.phase == "Running"}
        assert all(p.owner is not None and p.requests.cpu_milli > 0 for p in s.pods)
        # single-container pods: the container carries the whole pod's usage
        assert all([c.usage for c in p.containers] == [p.usage] for p in s.pods)
    for m in metrics:
        assert m.aggregated_node_usages[0].duration_s == 300
        assert m.pods and m.node_usage.cpu_milli > 0
