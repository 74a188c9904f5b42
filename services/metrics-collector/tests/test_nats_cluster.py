"""A 3-server NATS cluster (JetStream, streams replicated 3 times) loses the server that leads the
metrics stream in the middle of the stream: two collector replicas, one consumer group, store
every sample exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import sqlalchemy as sa
from koordcommon import subjects
from koordcommon.bus import Bus, BusError
from koordcommon.storage import make_engine
from koordcommon.testing.natscluster import NatsCluster
from test_ingest_e2e import CONTAINERS, PODS, Collector, collectors, counts, expected

pytestmark = pytest.mark.e2e

NODES, TICKS = 20, 30
T0 = (int(time.time() * 1000) - 3_600_000) // 60_000 * 60_000


@pytest.fixture
def cluster(tmp_path):
    c = NatsCluster(3, store_dir=tmp_path / "nats").start()
    yield c
    c.stop()


async def publish_until_stored(bus: Bus, items) -> None:
    """Publish, again and again while the cluster elects a new leader: the same message ids, so
    what the stream already holds is not stored twice (JetStream's duplicate window)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            await bus.publish_many(items)
            return
        except BusError:
            assert time.monotonic() < deadline, "the cluster never took the samples"
            await asyncio.sleep(0.2)


async def test_a_server_killed_mid_stream_loses_and_duplicates_no_sample(
    tmp_path, cluster, database_url, bus_namespace, sample_factory
):
    if not database_url.startswith("postgresql"):
        pytest.skip("two collector replicas share the production database")
    bus = Bus(cluster.url, service="cluster-test", namespace=bus_namespace, stream_replicas=3)
    await bus.connect(timeout_s=20)
    try:
        await bus.ensure_streams(subjects.METRICS_STREAM)
        info = await bus.js.stream_info(bus.wire_stream(subjects.METRICS_STREAM))
        assert info.config.num_replicas == 3 and len(info.cluster.replicas) == 2
        engine = make_engine(database_url)
        with collectors() as started:
            for _ in range(2):  # two replicas of the collector: one durable consumer, split messages
                c = Collector(tmp_path, cluster.url, database_url, bus_namespace, batch=20)
                c.env["NATS_STREAM_REPLICAS"] = "3"
                started.append(c.start())
            for c in started:
                await c.ready(60)
            killed = None
            for tick in range(TICKS):
                items = [(subjects.metrics(f"node-{n}"), sample_factory(f"node-{n}", T0 + tick * 10_000, tick, PODS,
                                                                         CONTAINERS)) for n in range(NODES)]  # fmt: skip
                await publish_until_stored(bus, items)
                if tick == TICKS // 3:
                    # the server that leads the stream (its writes and the consumers' state) dies
                    leader = (await bus.js.stream_info(bus.wire_stream(subjects.METRICS_STREAM))).cluster.leader
                    killed = cluster.index_of(leader)
                    cluster.kill(killed)
                await asyncio.sleep(0.05)
            assert killed is not None
            want = expected(NODES * TICKS)
            deadline = time.monotonic() + 60
            while (got := await asyncio.to_thread(counts, engine)) != want:
                assert time.monotonic() < deadline, f"rows {got} != {want}\n{started[0].tail()}\n{started[1].tail()}"
                await asyncio.sleep(0.2)
            # the stream holds each sample once (retried publishes were recognised), and so does the
            # database: every (node, ts) published, nothing else
            info = await bus.js.stream_info(bus.wire_stream(subjects.METRICS_STREAM))
            assert info.state.messages == NODES * TICKS
            assert info.cluster.leader != cluster.server_name(killed)
            with engine.connect() as conn:
                keys = set(conn.execute(sa.text("SELECT node, ts FROM node_samples")).all())
            assert keys == {(f"node-{n}", T0 + t * 10_000) for n in range(NODES) for t in range(TICKS)}
            await asyncio.sleep(2.5)  # redeliveries of batches in flight at the kill add nothing
            assert await asyncio.to_thread(counts, engine) == want
            for c in started:
                with contextlib.suppress(Exception):
                    assert c.terminate() == 0, c.tail()
        engine.dispose()
    finally:
        await bus.close()
