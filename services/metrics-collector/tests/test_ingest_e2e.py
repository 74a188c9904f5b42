"""The collector as a real process over a real NATS and SQLite/PostgreSQL: no loss, no duplicates.

A kill -9 in the middle of the stream leaves committed-but-unacknowledged batches behind; after
a restart they are redelivered and dropped by the unique keys, so the row counts come out exact.
The same holds when the NATS server itself is killed mid-stream and restarted on its store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import sqlalchemy as sa
from koordcommon import subjects
from koordcommon.bus import Bus
from koordcommon.storage import make_engine
from koordcommon.testing.net import free_port

pytestmark = pytest.mark.e2e

PODS, CONTAINERS = 3, 2
# Recent enough that retention (24 h of raw samples) keeps every row.
T0 = (int(time.time() * 1000) - 3 * 3_600_000) // 60_000 * 60_000
ACK_WAIT_S = 2.0


class Collector:
    def __init__(self, tmp_path, nats_url: str, database_url: str, namespace: str, batch: int):
        self.port = free_port()
        self.log_path = tmp_path / f"collector-{self.port}.log"
        self.env = {
            **os.environ,
            "NATS_URL": nats_url,
            "DATABASE_URL": database_url,
            "KOORD_COLLECTOR_BUS_NAMESPACE": namespace,
            "KOORD_COLLECTOR_HTTP_HOST": "127.0.0.1",
            "KOORD_COLLECTOR_HTTP_PORT": str(self.port),
            "KOORD_COLLECTOR_DATA_DIR": str(tmp_path / "data"),
            "KOORD_COLLECTOR_BATCH_SIZE": str(batch),
            "KOORD_COLLECTOR_ACK_WAIT_S": str(ACK_WAIT_S),
            "KOORD_COLLECTOR_WRITE_RETRY_MAX_DELAY_S": "0.5",
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> Collector:
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen([sys.executable, "-m", "metrics_collector"], env=self.env, stdout=log,
                                         stderr=log)  # fmt: skip
        return self

    async def ready(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=2) as http:
            while True:
                assert self.proc.poll() is None, f"collector exited: {self.tail()}"
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        return
                assert time.monotonic() < deadline, f"collector not ready: {self.tail()}"
                await asyncio.sleep(0.05)

    async def readyz(self) -> tuple[int, dict]:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{self.port}", timeout=5) as http:
            r = await http.get("/readyz")
            return r.status_code, r.json()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def tail(self, n: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@contextlib.contextmanager
def collectors():
    started: list[Collector] = []
    try:
        yield started
    finally:
        for c in started:
            c.close()


def counts(engine) -> dict[str, int]:
    out = {}
    with engine.connect() as conn:
        for table in ("node_samples", "pod_samples", "container_samples"):
            try:
                out[table] = conn.execute(sa.text(f"SELECT COUNT(*) FROM {table}")).scalar_one()
            except sa.exc.SQLAlchemyError:
                out[table] = 0
    return out


def expected(n: int) -> dict[str, int]:
    return {"node_samples": n, "pod_samples": n * PODS, "container_samples": n * PODS * CONTAINERS}


async def wait_counts(engine, want: dict[str, int], timeout: float, collector: Collector) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        got = await asyncio.to_thread(counts, engine)
        if got == want:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"rows {got} != {want} after {timeout}s\n{collector.tail()}")
        await asyncio.sleep(0.1)


def samples(make_sample, nodes: int, per_node: int, t0: int, offset: int = 0):
    return [
        (subjects.metrics(f"node-{n}.example"), make_sample(f"node-{n}.example", t0 + (offset + i) * 10_000, i,
                                                           PODS, CONTAINERS))
        for i in range(per_node)
        for n in range(nodes)
    ]  # fmt: skip


async def test_kill9_mid_stream_and_restart_gives_exact_rows(
    tmp_path, nats_url, bus, bus_namespace, database_url, sample_factory
):
    nodes, per_node = 10, 300
    n = nodes * per_node
    await bus.ensure_streams(subjects.METRICS_STREAM)
    await bus.publish_many(samples(sample_factory, nodes, per_node, T0))
    engine = make_engine(database_url)
    with collectors() as started:
        # Small batches: many commits, so the kill lands well before the end of the stream.
        first = Collector(tmp_path, nats_url, database_url, bus_namespace, batch=10).start()
        started.append(first)
        deadline = time.monotonic() + 30
        while (at_kill := await asyncio.to_thread(counts, engine))["node_samples"] == 0:
            assert time.monotonic() < deadline, first.tail()
            assert first.proc.poll() is None, first.tail()
            await asyncio.sleep(0.01)
        first.kill9()
        assert 0 < at_kill["node_samples"] < n, "the collector must be killed mid-stream"
        # More samples arrive while no collector runs.
        await bus.publish_many(samples(sample_factory, nodes, 50, T0, offset=per_node))
        second = Collector(tmp_path, nats_url, database_url, bus_namespace, batch=200).start()
        started.append(second)
        await wait_counts(engine, expected(n + nodes * 50), 60, second)
        # Redeliveries of the killed collector's unacknowledged batches must add nothing.
        await asyncio.sleep(ACK_WAIT_S + 1)
        assert await asyncio.to_thread(counts, engine) == expected(n + nodes * 50)
        assert second.terminate() == 0, second.tail()
    with engine.connect() as conn:
        row = conn.execute(sa.text(
            "SELECT cpu_milli, prod_used_cpu_milli, batch_requested_cpu_milli, mid_used_cpu_milli, pods "
            "FROM node_samples WHERE node = 'node-3.example' AND ts = :ts"), {"ts": T0 + 7 * 10_000}
        ).one()  # fmt: skip
    # sample i=7: node 1000 + 7*7; pod 0 prod 100+70; pod 1 batch (BE, batch-cpu 1000); pod 2 batch
    assert tuple(row) == (1049, 170, 2000, 0, 3)
    engine.dispose()


async def test_nats_server_killed_mid_stream_and_restarted_gives_exact_rows(
    tmp_path, nats_server, database_url, sample_factory
):
    """The bus server itself dies (kill -9) while the collector works through the stream and
    comes back on the same port and store: the collector reconnects, its durable consumer
    resumes where the server's store says, samples published after the restart are stored
    too, and the database holds every sample exactly once."""
    namespace = "restart"
    nodes, per_node, later = 10, 300, 50
    n = nodes * per_node
    bus = await Bus(nats_server.url, service="test", namespace=namespace).connect(timeout_s=10)
    engine = make_engine(database_url)
    try:
        await bus.ensure_streams(subjects.METRICS_STREAM)
        await bus.publish_many(samples(sample_factory, nodes, per_node, T0))
        with collectors() as started:
            c = Collector(tmp_path, nats_server.url, database_url, namespace, batch=10).start()
            started.append(c)
            deadline = time.monotonic() + 30
            while (at_kill := await asyncio.to_thread(counts, engine))["node_samples"] == 0:
                assert time.monotonic() < deadline, c.tail()
                assert c.proc.poll() is None, c.tail()
                await asyncio.sleep(0.01)
            await asyncio.to_thread(nats_server.kill)
            assert 0 < at_kill["node_samples"] < n, "the server must be killed mid-stream"
            await asyncio.sleep(2)
            assert c.proc.poll() is None, c.tail()  # the collector waits for its bus, it does not exit
            await asyncio.to_thread(nats_server.start)
            # More samples arrive once the server is back (the publisher reconnects too).
            await bus.publish_many(samples(sample_factory, nodes, later, T0, offset=per_node))
            await wait_counts(engine, expected(n + nodes * later), 90, c)
            await c.ready(timeout=30)
            # Redeliveries of the batches in hand when the server died must add nothing.
            await asyncio.sleep(ACK_WAIT_S + 1)
            assert await asyncio.to_thread(counts, engine) == expected(n + nodes * later)
            assert c.terminate() == 0, c.tail()
        with engine.connect() as conn:
            twice = conn.execute(sa.text(
                "SELECT COUNT(*) FROM (SELECT node, ts FROM node_samples GROUP BY node, ts HAVING COUNT(*) > 1) d"
            )).scalar_one()  # fmt: skip
        assert twice == 0
    finally:
        await bus.close()
        engine.dispose()


class Proxy:
    """A TCP proxy to PostgreSQL that the test can cut (connections reset, port refused) and restore."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = free_port()
        self.server: asyncio.Server | None = None
        self.pipes: set[asyncio.Task] = set()
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def _client(self, reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, up_writer}

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        for task in (asyncio.create_task(pipe(reader, up_writer)), asyncio.create_task(pipe(up_reader, writer))):
            self.pipes.add(task)
            task.add_done_callback(self.pipes.discard)

    async def cut(self) -> None:
        self.server.close()
        for w in list(self.writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self.writers.clear()
        for t in list(self.pipes):
            t.cancel()
        await self.server.wait_closed()

    async def stop(self) -> None:
        await self.cut()


# The outage is a network cut between the collector and the PostgreSQL server.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_postgres_outage_holds_batches_and_loses_nothing(
    tmp_path, nats_url, bus, bus_namespace, database_url, sample_factory
):
    url = sa.engine.make_url(database_url)
    proxy = Proxy(url.port or 5432)
    await proxy.start()
    via_proxy = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    engine = make_engine(database_url)
    nodes = 5
    await bus.ensure_streams(subjects.METRICS_STREAM)
    with collectors() as started:
        c = Collector(tmp_path, nats_url, via_proxy, bus_namespace, batch=100).start()
        started.append(c)
        await c.ready()
        await bus.publish_many(samples(sample_factory, nodes, 20, T0))
        await wait_counts(engine, expected(nodes * 20), 30, c)

        await proxy.cut()
        await bus.publish_many(samples(sample_factory, nodes, 40, T0, offset=20))
        deadline = time.monotonic() + 15
        while True:
            status, body = await c.readyz()
            if status == 503 and "database" in body["failing"]:
                break
            assert time.monotonic() < deadline, f"collector stayed ready without its database: {body}"
            await asyncio.sleep(0.2)
        await asyncio.sleep(2)  # the batch in hand is retried, nothing new is pulled
        assert await asyncio.to_thread(counts, engine) == expected(nodes * 20)
        assert c.proc.poll() is None

        await proxy.start()
        await wait_counts(engine, expected(nodes * 60), 30, c)
        await c.ready(timeout=15)
        assert c.terminate() == 0, c.tail()
    await proxy.stop()
    engine.dispose()
