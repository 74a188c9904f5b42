"""Durable consumers of every metric stream, writing each fetched batch in one transaction.

A batch is acknowledged by the Bus only when the handler returns, i.e. after the commit.
While the database is down the handler keeps retrying the batch in hand (the Bus marks it
in progress, so it is not redelivered elsewhere) and no new batch is pulled: memory stays
bounded by one batch per pull subscription, and everything else waits on the stream, unacked.
A database that hangs instead of failing (a SQLite file another process holds locked, within
the busy timeout) holds the write, and so the pulling, the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time

from koordcommon import subjects
from koordcommon.bus import Bus, Consumer, Delivery
from koordcommon.schemas import Event, NodeMetric, NodeMetricSample, NodeResource, Recommendation
from prometheus_client import Counter, Histogram
from sqlalchemy.exc import DBAPIError, OperationalError

from .core.rows import Rows, build_rows
from .settings import SERVICE, Settings
from .store import Store

log = logging.getLogger("metrics_collector.bus")

ROWS = Counter("koord_collector_rows_total", "Rows inserted (duplicates excluded)", ["table"])
DUPLICATES = Counter("koord_collector_duplicate_rows_total", "Rows already stored (redeliveries)", ["table"])
WRITE_ERRORS = Counter("koord_collector_write_errors_total", "Failed batch writes (retried)", ["stream"])
REJECTED = Counter("koord_collector_rejected_messages_total", "Messages the database refused (logged, dropped)",
                   ["stream"])  # fmt: skip
BATCH_SECONDS = Histogram("koord_collector_batch_seconds", "Time to commit one batch", ["stream"])

# A write waiting this long (a lock held by another writer, a server that stopped answering)
# counts as a batch waiting for the database: the collector is not ready until it goes through.
STALLED_WRITE_S = 10.0

# (stream, filter, schema) of every stream the collector persists.
STREAMS = (
    (subjects.METRICS_STREAM, "koord.metrics.>", NodeMetricSample),
    (subjects.NODEMETRIC_STREAM, "koord.nodemetric.>", NodeMetric),
    (subjects.NODERESOURCE_STREAM, "koord.noderesource.>", NodeResource),
    (subjects.RECOMMENDATION_STREAM, "koord.recommendation.>", Recommendation),
    (subjects.EVENTS_STREAM, "koord.events.>", Event),
)


def _transient(exc: BaseException) -> bool:
    """Connection trouble or a locked SQLite file: retry. Anything else is about the data."""
    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


class Ingest:
    def __init__(self, store: Store, settings: Settings, stopping: asyncio.Event):
        self.store = store
        self.settings = settings
        self.stopping = stopping
        self.database_ok = True
        self._failing = 0  # batches whose write failed and is being retried
        self._writing: dict[object, float] = {}  # writes in flight -> when they started

    @property
    def retrying(self) -> int:
        """Batches waiting for the database right now: retried after a failure, or in a write
        that has not returned for STALLED_WRITE_S."""
        now = time.monotonic()
        return self._failing + sum(1 for t in self._writing.values() if now - t > STALLED_WRITE_S)

    async def _store_write(self, rows: Rows) -> dict[str, int]:
        token = object()
        self._writing[token] = time.monotonic()
        try:
            return await asyncio.to_thread(self.store.write, rows)
        finally:
            del self._writing[token]

    def handler(self, stream: str):
        async def handle(deliveries: list[Delivery]) -> None:
            started = time.perf_counter()
            rows = build_rows(d.msg for d in deliveries)
            await self._write(stream, rows, deliveries)
            BATCH_SECONDS.labels(stream).observe(time.perf_counter() - started)

        return handle

    async def _write(self, stream: str, rows: Rows, deliveries: list[Delivery]) -> None:
        delay = 0.2
        failing_since = None
        while True:
            try:
                inserted = await self._store_write(rows)
            except Exception as exc:
                if not _transient(exc):
                    await self._write_one_by_one(stream, deliveries, exc)
                    return
                WRITE_ERRORS.labels(stream).inc()
                self.database_ok = False
                if failing_since is None:
                    failing_since = time.monotonic()
                    self._failing += 1
                    log.warning("database write failed; holding the batch and retrying",
                                extra={"stream": stream, "rows": rows.count(), "error": str(exc).splitlines()[0]})  # fmt: skip
                if self.stopping.is_set():
                    self._failing -= 1
                    raise  # the Bus naks the batch; it is redelivered after restart
                try:
                    await asyncio.wait_for(self.stopping.wait(), delay)
                except TimeoutError:
                    pass
                delay = min(delay * 2, self.settings.write_retry_max_delay_s)
                continue
            if failing_since is not None:
                self._failing -= 1
                log.info("database back; batch written",
                         extra={"stream": stream, "waited_s": round(time.monotonic() - failing_since, 1)})  # fmt: skip
            self.database_ok = True
            self._count(rows, inserted)
            return

    async def _write_one_by_one(self, stream: str, deliveries: list[Delivery], first: BaseException) -> None:
        """A batch the database refuses as data: keep every message it accepts, drop the rest."""
        log.warning("batch refused by the database; writing message by message",
                    extra={"stream": stream, "error": str(first).splitlines()[0]})  # fmt: skip
        for d in deliveries:
            rows = build_rows([d.msg])
            try:
                inserted = await self._store_write(rows)
            except Exception as exc:
                if _transient(exc):
                    raise
                REJECTED.labels(stream).inc()
                log.error("message refused by the database; dropped",
                          extra={"stream": stream, "subject": d.subject, "error": str(exc).splitlines()[0]})  # fmt: skip
                continue
            self._count(rows, inserted)

    @staticmethod
    def _count(rows: Rows, inserted: dict[str, int]) -> None:
        for table, batch in rows.tables().items():
            n = inserted.get(table, 0)
            ROWS.labels(table).inc(n)
            if len(batch) > n:
                DUPLICATES.labels(table).inc(len(batch) - n)


async def start_consumers(bus: Bus, ingest: Ingest, settings: Settings) -> list[Consumer]:
    """One durable per stream, shared by every collector replica (they split the messages)."""
    consumers = []
    for spec, filter_subject, schema in STREAMS:
        for _ in range(settings.consumers_per_stream):
            consumers.append(
                await bus.consume(
                    stream=spec,
                    durable=SERVICE,
                    filter_subject=filter_subject,
                    schema=schema,
                    handler=ingest.handler(spec.name),
                    batch=settings.batch_size,
                    max_wait_s=settings.flush_interval_s,
                    ack_wait_s=settings.ack_wait_s,
                )
            )
    return consumers
