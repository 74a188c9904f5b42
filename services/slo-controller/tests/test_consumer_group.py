"""Two slo-controller replicas as one consumer group: each node planned by exactly one of them,
the one its NodeMetrics reach (NATS 2.10+: a private nats-server of the wheel)."""

from __future__ import annotations

import asyncio

import pytest
from koordcommon import subjects
from koordcommon.bus import Bus, partition_of
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric
from koordcommon.testing.nats import NatsServer
from koordsim.cluster import SimCluster, SimSpec
from slo_controller.controller import SLOController
from slo_controller.settings import SLOSettings

GI = 1 << 30
PARTITIONS = 4


@pytest.fixture
def server(tmp_path):
    s = NatsServer(store_dir=tmp_path / "nats").start()
    yield s
    s.stop()


async def test_replicas_split_the_nodes_and_plan_each_once(server):
    buses = [await Bus(server.url, service=f"s{i}", namespace="grp").connect() for i in range(3)]
    sims = []
    try:
        sims.append(SimCluster(SimSpec(nodes=12, online_pods_per_node=2, seed=5), bus=buses[0], genesis=True))
        sims.append(SimCluster(bus=buses[1]))
        sims.append(SimCluster(bus=buses[2]))
        for s in sims:
            await s.start()
        await buses[0].ensure_streams(subjects.NODEMETRIC_STREAM)
        replicas = [SLOController(sims[i + 1], buses[i + 1], resync_s=0, group=(i, 2), partitions=PARTITIONS,
                                  publish_nodeslo=False, catchup_timeout_s=0.5) for i in range(2)]  # fmt: skip
        for c in replicas:
            await c.start()
        names = sorted(n.name for n in await sims[0].list_nodes())
        # every node owned by one replica, as the server partitions its subjects
        assert sorted(n for c in replicas for n in c.nodes) == names
        for c, member in zip(replicas, (0, 1), strict=True):
            assert set(c.nodes) == {n for n in names if partition_of(n, PARTITIONS) % 2 == member}
        assert all(c.nodes for c in replicas)
        now = sims[0].now_ms()
        for n in names:
            msg = NodeMetric(node=n, ts=now, node_usage=Resources(4000, 16 * GI), system_usage=Resources(1000, 2 * GI))
            await buses[0].publish(subjects.nodemetric(n), buses[0].stamp(msg))
        for _ in range(200):
            if sum(len(c.metric_ts) for c in replicas) == len(names):
                break
            await asyncio.sleep(0.05)
        # each replica took exactly the NodeMetrics of its own nodes, and planned them
        for c in replicas:
            assert set(c.metric_ts) == set(c.nodes)
            assert set(c.last_plan) == set(c.nodes)
    finally:
        for c in locals().get("replicas", []):
            await c.close()
        for s in sims:
            await s.close()
        for b in buses:
            await b.close()


@pytest.mark.parametrize(
    ("member", "members", "ok"),
    [(0, 1, None), (0, 3, (0, 3)), (2, 3, (2, 3)), (3, 3, ValueError), (1, 20, ValueError)],
)
def test_group_settings(member, members, ok):
    settings = SLOSettings(group_member=member, group_members=members, group_partitions=12)
    if ok is ValueError:
        with pytest.raises(ValueError, match="group_member"):
            settings.group()
    else:
        assert settings.group() == ok
