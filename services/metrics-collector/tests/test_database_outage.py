"""A 30 s database outage in the middle of a steady stream, over real processes: the collector
applies backpressure, loses nothing and stores nothing twice.

Two outages run side by side, each with its own collector process, bus namespace and database:

* PostgreSQL: a private server of this test (koordcommon.testing.postgres, its own port: the
  server other tests share is never touched) is crashed (`pg_ctl stop -m immediate`) and started
  again 30 s later;
* SQLite: another writer holds the file locked (BEGIN EXCLUSIVE) for 30 s.

Samples keep arriving throughout. While the database is away the collector says it is not ready
(`database`), writes nothing, pulls nothing more than the batches in hand, which it keeps in
progress (acked neither way, not redelivered however long it waits), and the rest waits on
JetStream. Once the database is back every sample is stored exactly once: the row counts are
exact, the durable consumer delivered each message once, no row was a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
import uuid

import httpx
import pytest
from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.storage import make_engine
from koordcommon.testing.db import require_services
from koordcommon.testing.nats import drop_namespace
from koordcommon.testing.postgres import PrivatePostgres, postgres_binaries
from test_ingest_e2e import CONTAINERS, PODS, Collector, counts

pytestmark = pytest.mark.e2e

OUTAGE_S = 30.0
NODES = 5
EVERY_S = 0.25  # one sample per node this often: 20 samples a second, before, during and after
BATCH = 50
CONSUMERS_PER_STREAM = 2  # the collector's default: at most this many batches in hand per stream
ACK_WAIT_S = 4.0  # well below the outage: the batch in hand must be kept in progress, not redelivered
ROWS_PER_SAMPLE = {"node_samples": 1, "pod_samples": PODS, "container_samples": PODS * CONTAINERS}
T0 = (int(time.time() * 1000) - 2 * 3_600_000) // 1000 * 1000


class Outage:
    """How one database goes away and comes back."""

    name = ""

    async def cut(self) -> None: ...

    async def restore(self) -> None: ...

    def close(self) -> None: ...


class PostgresCrash(Outage):
    name = "postgresql"

    def __init__(self) -> None:
        self.pg = PrivatePostgres().start()
        self.url = self.pg.create_database("koord")

    async def cut(self) -> None:
        await asyncio.to_thread(self.pg.stop, "immediate")

    async def restore(self) -> None:
        await asyncio.to_thread(self.pg.start)

    def close(self) -> None:
        self.pg.close()


class SqliteLock(Outage):
    """Another writer (here a thread of the test) holding the collector's SQLite file locked."""

    name = "sqlite"

    def __init__(self, path) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.locked = threading.Event()
        self.release = threading.Event()
        self.thread: threading.Thread | None = None

    def _hold(self) -> None:
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            self.locked.set()
            self.release.wait()
            conn.execute("COMMIT")
        finally:
            conn.close()

    async def cut(self) -> None:
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()
        assert await asyncio.to_thread(self.locked.wait, 60), "the lock was not taken"

    async def restore(self) -> None:
        self.release.set()
        await asyncio.to_thread(self.thread.join, 10)

    def close(self) -> None:
        self.release.set()


async def publish_steadily(bus: Bus, stop: asyncio.Event, published: list[int], sample_factory) -> None:
    """One sample per node every EVERY_S until stopped; `published[0]` counts the samples JetStream took."""
    i = 0
    while not stop.is_set():
        batch = [(subjects.metrics(f"node-{n}"), sample_factory(f"node-{n}", T0 + i * 1000, i, PODS, CONTAINERS))
                 for n in range(NODES)]  # fmt: skip
        await bus.publish_many(batch)
        published[0] += len(batch)
        i += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), EVERY_S)


async def consumer_state(bus: Bus) -> dict[str, int]:
    info = await bus.js.consumer_info(bus.wire_stream(subjects.METRICS_STREAM), "metrics-collector")
    return {"pending": info.num_pending, "ack_pending": info.num_ack_pending,
            "redelivered": info.num_redelivered, "deliveries": info.delivered.consumer_seq,
            "delivered_messages": info.delivered.stream_seq}  # fmt: skip


async def duplicate_rows(collector: Collector) -> float:
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"http://127.0.0.1:{collector.port}/metrics")).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("koord_collector_duplicate_rows_total{"))  # fmt: skip


async def outage_scenario(outage: Outage, tmp_path, nats_url: str, sample_factory) -> dict:
    namespace = f"outage{uuid.uuid4().hex[:8]}"
    bus = Bus(nats_url, service="test", namespace=namespace)
    await bus.connect(timeout_s=10)
    engine = make_engine(outage.url)
    collector = Collector(tmp_path / outage.name, nats_url, outage.url, namespace, batch=BATCH)
    collector.env.update({"KOORD_COLLECTOR_ACK_WAIT_S": str(ACK_WAIT_S),
                          "KOORD_COLLECTOR_CONSUMERS_PER_STREAM": str(CONSUMERS_PER_STREAM),
                          "KOORD_COLLECTOR_WRITE_RETRY_MAX_DELAY_S": "1"})  # fmt: skip
    (tmp_path / outage.name).mkdir()
    stop, published = asyncio.Event(), [0]
    seen: dict = {"not_ready": False, "max_ack_pending": 0, "min_pending": None}
    publisher = None
    try:
        await bus.ensure_streams(subjects.METRICS_STREAM)
        collector.start()
        await collector.ready(timeout=30)
        publisher = asyncio.create_task(publish_steadily(bus, stop, published, sample_factory))
        deadline = time.monotonic() + 30
        while (await asyncio.to_thread(counts, engine))["node_samples"] < 5 * NODES:  # mid-stream
            assert time.monotonic() < deadline, collector.tail()
            await asyncio.sleep(0.2)

        await outage.cut()
        cut_at = time.monotonic()
        await asyncio.sleep(2)  # the batches the last commits were in flight with settle
        frozen = await asyncio.to_thread(counts, engine) if outage.name == "sqlite" else None
        at_cut = published[0]
        while time.monotonic() - cut_at < OUTAGE_S:
            status, body = await collector.readyz()
            if status == 503 and "database" in body.get("failing", []):
                seen["not_ready"] = True
            state = await consumer_state(bus)
            seen["max_ack_pending"] = max(seen["max_ack_pending"], state["ack_pending"])
            assert state["redelivered"] == 0, f"{outage.name}: the batch in hand was redelivered: {state}"
            if frozen is not None:  # the SQLite file can still be read: nothing was written meanwhile
                assert await asyncio.to_thread(counts, engine) == frozen, outage.name
            assert collector.proc.poll() is None, collector.tail()
            await asyncio.sleep(1)
        during = await consumer_state(bus)
        held_on_stream = during["pending"]
        assert published[0] - at_cut > 100, "samples kept arriving during the outage"
        await outage.restore()

        await asyncio.sleep(2)  # samples keep arriving after the outage too
        stop.set()
        await publisher
        want = {table: published[0] * n for table, n in ROWS_PER_SAMPLE.items()}
        deadline = time.monotonic() + 60
        while (got := await asyncio.to_thread(counts, engine)) != want:
            assert time.monotonic() < deadline, f"{outage.name}: rows {got} != {want}\n{collector.tail()}"
            await asyncio.sleep(0.2)
        await collector.ready(timeout=30)
        await asyncio.sleep(ACK_WAIT_S + 1)  # a redelivery, had there been one, would be in by now
        after = await consumer_state(bus)
        return {
            "published": published[0],
            "rows": await asyncio.to_thread(counts, engine),
            "want": want,
            "not_ready": seen["not_ready"],
            "max_ack_pending": seen["max_ack_pending"],
            "held_on_stream": held_on_stream,
            "after": after,
            "duplicates": await duplicate_rows(collector),
            "exit": await asyncio.to_thread(collector.terminate),
            "log": collector.tail(),
        }
    finally:
        stop.set()
        if publisher is not None:
            with contextlib.suppress(Exception):
                await publisher
        # the two outages share this loop: what blocks runs in a thread
        await asyncio.to_thread(collector.close)
        engine.dispose()
        await asyncio.to_thread(outage.close)
        await bus.close()
        await drop_namespace(nats_url, namespace)


async def test_a_30s_database_outage_applies_backpressure_loses_nothing_and_stores_nothing_twice(
    tmp_path, nats_url, sample_factory
):
    if postgres_binaries() is None:
        reason = "no initdb / pg_ctl for a private PostgreSQL (apt-get install -y postgresql)"
        pytest.fail(reason) if require_services() else pytest.skip(reason)
    outages = [PostgresCrash(), SqliteLock(tmp_path / "collector.db")]
    results = await asyncio.gather(*(outage_scenario(o, tmp_path, nats_url, sample_factory) for o in outages))
    for outage, r in zip(outages, results):
        name = outage.name
        assert r["rows"] == r["want"], name  # nothing lost, nothing twice
        assert r["not_ready"], f"{name}: the collector stayed ready without its database"
        # backpressure: no more than the batches in hand were taken from the stream; the rest waited there
        assert 0 < r["max_ack_pending"] <= CONSUMERS_PER_STREAM * BATCH, (name, r["max_ack_pending"])
        assert r["held_on_stream"] > 50, (name, r["held_on_stream"])
        # each message delivered once: the batches in hand were kept in progress past ack_wait
        assert r["after"]["deliveries"] == r["after"]["delivered_messages"] == r["published"], (name, r["after"])
        assert (r["after"]["pending"], r["after"]["ack_pending"]) == (0, 0), (name, r["after"])
        assert r["duplicates"] == 0, name
        assert r["exit"] == 0, f"{name}: {r['log']}"
