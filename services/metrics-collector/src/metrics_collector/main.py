"""Entry point: settings, store, API, consumers and the retention job on the chassis."""

from __future__ import annotations

import asyncio
import logging
import time

from koordcommon.service import Service, load_settings, tune_gc
from koordcommon.storage import run_migrations
from koordcommon.wiring import start_bus
from sqlalchemy.exc import SQLAlchemyError

from . import api, api_explain, whatif
from .bus import Ingest, start_consumers
from .core import retention
from .dashboard import mount_dashboard
from .settings import SERVICE, Settings
from .store import MIGRATIONS, VERSION_TABLE, Store

log = logging.getLogger("metrics_collector")


async def migrate(svc: Service, store: Store) -> bool:
    """Apply the chain, waiting for the database if it is not up yet; False if stopped first."""
    delay = 0.5
    while not svc.stopping.is_set():
        try:
            await asyncio.to_thread(run_migrations, store.engine, MIGRATIONS, VERSION_TABLE)
            return True
        except SQLAlchemyError as exc:
            log.warning("database not ready for migrations", extra={"error": str(exc).splitlines()[0]})
            try:
                await asyncio.wait_for(svc.stopping.wait(), delay)
            except TimeoutError:
                pass
            delay = min(delay * 2, 10)
    return False


async def retention_loop(svc: Service, store: Store, settings: Settings) -> None:
    policy = settings.retention()
    while not svc.stopping.is_set():
        try:
            await ensure_partitions(store, settings)
            state = await asyncio.to_thread(store.retention_state)
            plan = retention.plan(int(time.time() * 1000), policy, state)
            done = await asyncio.to_thread(store.apply, plan)
            changed = {k: v for k, v in done.items() if v}
            if changed:
                log.info("retention applied", extra=changed)
        except SQLAlchemyError as exc:
            log.warning("retention run failed", extra={"error": str(exc).splitlines()[0]})
        try:
            await asyncio.wait_for(svc.stopping.wait(), settings.retention_interval_s)
        except TimeoutError:
            pass


async def ensure_partitions(store: Store, settings: Settings) -> None:
    created = await asyncio.to_thread(
        store.ensure_partitions, int(time.time() * 1000), settings.raw_partition_hours * 3_600_000,
        settings.partitions_ahead,
    )  # fmt: skip
    if created:
        log.info("partitions created", extra={"partitions": created})


def build(settings: Settings) -> tuple[Service, Store]:
    svc = Service(SERVICE, settings)
    store = Store.open(settings.database_url, svc.data_dir, migrate=False)
    api.mount(svc.app, store, settings)
    svc.app.include_router(api_explain.router)
    svc.app.include_router(whatif.router)
    mount_dashboard(svc.app, settings)
    return svc, store


async def run(svc: Service, store: Store) -> None:
    settings: Settings = svc.settings  # type: ignore[assignment]
    svc.on_shutdown(_closer(store))
    ingest = Ingest(store, settings, svc.stopping)
    consumers: list = []

    async def database_ok() -> bool:
        # A batch waiting for the database means not ready, even if a ping just went through.
        return await asyncio.to_thread(store.ping) and ingest.retrying == 0

    svc.health.add_check("database", database_ok)
    svc.health.add_check("consumers", lambda: bool(consumers) and all(c.healthy for c in consumers))
    if not await migrate(svc, store):
        return
    try:
        await ensure_partitions(store, settings)  # before the first sample is written
    except SQLAlchemyError as exc:  # the retention loop tries again; until then rows go to the default partition
        log.warning("partitions not created", extra={"error": str(exc).splitlines()[0]})
    bus = await start_bus(svc)
    tune_gc()  # one batch of 500 samples allocates ~10^6 short-lived objects
    consumers += await start_consumers(bus, ingest, settings)
    log.info("consuming", extra={"streams": [c.stream for c in consumers], "backend": store.engine.dialect.name})
    svc.mark_started()
    await retention_loop(svc, store, settings)


def _closer(store: Store):
    async def close_store() -> None:
        await asyncio.to_thread(store.close)

    return close_store


def main() -> None:
    settings = load_settings(Settings)
    svc, store = build(settings)
    svc.run(lambda s: run(s, store))


if __name__ == "__main__":
    main()
