"""A partitioned consumer group: every node's messages to one member, in order; the members
split the nodes; the partition is the server's (NATS 2.10+: a private nats-server of the wheel)."""

from __future__ import annotations

import asyncio

import pytest
from koordcommon import subjects
from koordcommon.bus import Bus, partition_of
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, now_ms
from koordcommon.testing.nats import NatsServer

NODES, REPORTS, PARTITIONS = 24, 5, 6


@pytest.fixture
def server(tmp_path):
    s = NatsServer(store_dir=tmp_path / "nats").start()
    yield s
    s.stop()


T0 = now_ms() - 3_600_000


def metric(node: str, i: int) -> NodeMetric:
    """Report i of a node: its time tells the order."""
    return NodeMetric(node=node, ts=T0 + i * 60_000, node_usage=Resources(1000 + i, 1 << 30))


async def test_each_node_goes_to_one_member_in_order_and_the_members_split_the_nodes(server):
    pub = await Bus(server.url, service="agent", namespace="g1").connect()
    members = [await Bus(server.url, service="slo-controller", namespace="g1").connect() for _ in range(2)]
    seen: list[dict[str, list[int]]] = [{}, {}]

    def handler(k: int):
        async def handle(deliveries) -> None:
            for d in deliveries:
                assert d.subject == subjects.nodemetric(d.msg.node)  # as published, partition stripped
                seen[k].setdefault(d.msg.node, []).append(d.msg.ts)

        return handle

    try:
        for k, bus in enumerate(members):
            await bus.consume_group(subjects.NODEMETRIC_STREAM, "slo-controller", "koord.nodemetric.*", NodeMetric,
                                    handler(k), member=k, members=2, partitions=PARTITIONS, batch=7)  # fmt: skip
        nodes = [f"node-{i}" for i in range(NODES)]
        for i in range(REPORTS):
            await pub.publish_many([(subjects.nodemetric(n), pub.stamp(metric(n, i))) for n in nodes])
        for _ in range(200):
            if sum(len(v) for s in seen for v in s.values()) == NODES * REPORTS:
                break
            await asyncio.sleep(0.05)
        for n in nodes:
            owners = [k for k in (0, 1) if n in seen[k]]
            assert len(owners) == 1, n  # one member only
            got = seen[owners[0]][n]
            assert got == sorted(got) and len(got) == REPORTS  # all of them, in order
            # the member is the one the server's partition says, which a member can compute itself
            assert owners[0] == partition_of(n, PARTITIONS) % 2
        assert seen[0] and seen[1]  # both members have nodes
    finally:
        for bus in [pub, *members]:
            await bus.close()


@pytest.mark.parametrize(("member", "members", "partitions"), [(2, 2, 6), (0, 7, 6), (-1, 2, 6)])
async def test_a_member_outside_the_group_is_refused(member, members, partitions):
    with pytest.raises(ValueError, match="not a group"):
        await Bus("nats://127.0.0.1:1", service="x").consume_group(
            subjects.NODEMETRIC_STREAM, "g", "koord.nodemetric.*", NodeMetric, None, member, members, partitions)


async def test_a_server_without_subject_transforms_is_refused_by_name(bus: Bus):
    """The shared server (NATS_URL; Debian 12's package is 2.9): before 2.10 the server keeps the
    group's source without its partition transform, and the group is refused, naming the
    version, its half-made stream removed; from 2.10 on the group forms."""

    async def handle(_deliveries) -> None: ...

    v = bus.nc.connected_server_version
    work = bus.wire_stream("KOORD_NODEMETRIC_SLO_CONTROLLER")
    if (v.major, v.minor) < (2, 10):
        with pytest.raises(RuntimeError, match=rf"needs nats-server 2\.10 or later .* is {v.major}\.{v.minor}\.{v.patch}"):
            await bus.consume_group(subjects.NODEMETRIC_STREAM, "slo-controller", "koord.nodemetric.*", NodeMetric,
                                    handle, member=0, members=1, partitions=3)  # fmt: skip
        assert work not in [s.config.name for s in await bus.js.streams_info()]
    else:
        consumers = await bus.consume_group(subjects.NODEMETRIC_STREAM, "slo-controller", "koord.nodemetric.*",
                                            NodeMetric, handle, member=0, members=1, partitions=3)  # fmt: skip
        assert len(consumers) == 3
        for c in consumers:
            await c.stop()
