"""Every stream the collector consumes lands in its table, over a real NATS (consumers in-process)."""

from __future__ import annotations

import asyncio
import time

import pytest
from koordcommon import subjects
from koordcommon.resources import Resources
from koordcommon.schemas import Event, NodeMetric, NodeResource, Recommendation
from metrics_collector.bus import Ingest, start_consumers
from metrics_collector.settings import Settings
from metrics_collector.store import Store

T0 = int(time.time() * 1000) - 600_000


async def wait_for(predicate, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        assert time.monotonic() < deadline, "rows did not arrive"
        await asyncio.sleep(0.05)


async def test_all_streams_persisted_and_bad_messages_skipped(bus, database_url, sample_factory):
    store = Store.open(database_url)
    stopping = asyncio.Event()
    ingest = Ingest(store, Settings(flush_interval_s=0.2, consumers_per_stream=1), stopping)
    consumers = await start_consumers(bus, ingest, ingest.settings)
    try:
        await bus.js.publish(bus.wire_subject(subjects.event("qos", "n1")), b"{not json")
        await bus.publish_many([
            (subjects.metrics("n1.local"), sample_factory("n1.local", T0, 0)),
            (subjects.nodemetric("n1.local"), NodeMetric(node="n1.local", ts=T0, node_usage=Resources(900, 1 << 32),
                                                         source="agent/n1", seq=1)),
            (subjects.noderesource("n1.local"), NodeResource(node="n1.local", ts=T0, batch=Resources(9000, 1 << 34),
                                                             source="slo/a", seq=1)),
            (subjects.recommendation("ns", "web"), Recommendation(namespace="ns", owner_kind="Deployment",
                                                                  owner_name="web", ts=T0, source="rec/a", seq=1)),
            *((subjects.event("evict", "n1.local"), Event(kind="evict", node="n1.local", action="evict", ts=T0 + i,
                                                           source="agent/n1", seq=10 + i)) for i in range(3)),
        ])  # fmt: skip
        tables = ("node_samples", "pod_samples", "node_metrics", "node_resources", "recommendations", "events")
        want = {"node_samples": 1, "pod_samples": 3, "node_metrics": 1, "node_resources": 1, "recommendations": 1,
                "events": 3}  # fmt: skip
        await wait_for(lambda: {t: store.count(t) for t in tables} == want)
        assert ingest.database_ok
        events = store.events(kind=None, node="n1.local", action=None, start=None, end=None, before=None, limit=10)
        assert [e["msg_id"] for e in events] == ["agent/n1:12", "agent/n1:11", "agent/n1:10"]
        nodes = store.nodes(None, 10)
        assert [(n["node"], n["batch_allocatable_cpu_milli"]) for n in nodes] == [("n1.local", 9000)]
    finally:
        stopping.set()
        for c in consumers:
            await c.stop(timeout_s=10)
        store.close()


@pytest.mark.parametrize("replicas", [2])
async def test_replicas_share_the_durable(bus, database_url, sample_factory, replicas):
    """Two collector instances on one durable: every sample stored once, both did work."""
    store = Store.open(database_url)
    stopping = asyncio.Event()
    settings = Settings(flush_interval_s=0.2, batch_size=20, consumers_per_stream=1)
    ingests = [Ingest(store, settings, stopping) for _ in range(replicas)]
    consumers = [c for ing in ingests for c in await start_consumers(bus, ing, settings)]
    metrics = [c for c in consumers if c.stream == subjects.METRICS_STREAM.name]
    try:
        await bus.publish_many(
            [(subjects.metrics(f"n{n}"), sample_factory(f"n{n}", T0 + i * 10_000, i)) for i in range(40) for n in range(5)]
        )
        await wait_for(lambda: store.count("node_samples") == 200)
        # rows are committed before the batch is acked and counted: wait for the count too
        await wait_for(lambda: sum(c.handled for c in metrics) >= 200)
        assert all(c.handled > 0 for c in metrics), [c.handled for c in metrics]
        assert store.count("node_samples") == 200
    finally:
        stopping.set()
        for c in consumers:
            await c.stop(timeout_s=10)
        store.close()
