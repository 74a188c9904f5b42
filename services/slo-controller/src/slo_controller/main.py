"""Entry point: `koord-slo-controller` / `python -m slo_controller`.

Wires the chassis (settings KOORD_SLO_*, /healthz /readyz /metrics), the bus, the cluster
port (sim by default), the node resource controller, the config file watcher and the
admission webhook (plain HTTP on the service port; HTTPS on webhook_port when a certificate
is configured).
"""

from __future__ import annotations

import asyncio
import logging

from koordcommon.httpguard import Guard, NoAuth
from koordcommon.service import Service, run_service, run_until_stopped
from koordcommon.wiring import start_bus, start_cluster

from .api import create_router as create_api_router
from .config_source import FileWatcher, load_configmap_data, load_documents, shipped_configmap
from .controller import SLOController
from .profiles import PROFILE_KIND, ProfileStore
from .settings import SLOSettings
from .webhook import WEBHOOK_PATHS, create_app, create_router, serve_tls

SERVICE = "slo-controller"
log = logging.getLogger(SERVICE)


async def _refresh_profiles(store: ProfileStore, cluster, every_s: float) -> None:
    while True:
        await store.refresh_from_cluster(cluster)
        await asyncio.sleep(every_s)


async def run(svc: Service) -> None:
    settings: SLOSettings = svc.settings  # type: ignore[assignment]
    bus = await start_bus(svc)
    cluster = await start_cluster(svc, bus)
    controller = SLOController(
        cluster,
        bus,
        prefix=settings.resource_prefix or None,
        resync_s=settings.resync_s,
        degrade_after_ms=int(settings.degrade_seconds * 1000) if settings.degrade_seconds else None,
        publish_nodeslo=settings.publish_nodeslo,
        catchup_timeout_s=settings.metrics_catchup_s,
        group=settings.group(),
        partitions=settings.group_partitions,
    )
    tasks: list[asyncio.Task] = []
    if settings.config_map_file:
        watcher = FileWatcher(settings.config_map_file, controller.apply_config, load_configmap_data,
                              settings.config_poll_s)
        await watcher.check()
        if watcher.last_error:
            log.error("starting with Koordinator's shipped config", extra={"error": watcher.last_error})
            await controller.apply_config(shipped_configmap())
        tasks.append(asyncio.create_task(watcher.run(), name="configmap-watch"))
    else:
        await controller.apply_config(shipped_configmap())

    if settings.webhook_enabled:
        store = ProfileStore()
        if settings.profiles_file:
            pw = FileWatcher(settings.profiles_file, _load_profiles(store), load_documents, settings.config_poll_s)
            await pw.check()
            tasks.append(asyncio.create_task(pw.run(), name="profiles-watch"))
        if settings.profiles_from_cluster:
            tasks.append(asyncio.create_task(
                _refresh_profiles(store, cluster, settings.profiles_refresh_s), name="profiles-cluster"))
        prefix = settings.resource_prefix or None
        svc.app.include_router(create_router(store, prefix=prefix))
        # The API server sends no bearer token: the webhook is protected by TLS (and its own port).
        svc.public_paths.update(WEBHOOK_PATHS)
        if settings.tls_cert_file and settings.tls_key_file:
            app = Guard(create_app(store, prefix=prefix), NoAuth(), settings.max_body_bytes, settings.max_json_depth)
            tasks.append(asyncio.create_task(
                serve_tls(app, settings.webhook_host, settings.webhook_port, settings.tls_cert_file,
                          settings.tls_key_file, svc.stopping),
                name="webhook-tls"))
            log.info("admission webhook on HTTPS", extra={"port": settings.webhook_port, "kind": PROFILE_KIND})

    svc.app.include_router(create_api_router(controller))
    await controller.start()
    svc.health.add_check("controller", controller.ready.is_set)
    svc.on_shutdown(controller.close)
    svc.mark_started()
    await run_until_stopped(svc.stopping, *tasks)


def _load_profiles(store: ProfileStore):
    async def apply(docs):
        store.load_documents(docs)

    return apply


def main(argv: list[str] | None = None) -> None:
    run_service(SERVICE, SLOSettings, run)


if __name__ == "__main__":
    main()
