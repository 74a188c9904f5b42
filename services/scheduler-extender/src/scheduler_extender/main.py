"""Entry point: settings, in-memory state, the extender routes and the feeds on the chassis."""

from __future__ import annotations

import asyncio
import logging

from koordcommon import subjects
from koordcommon.service import Service, cancel_and_wait, load_settings, run_until_stopped, tune_gc, tune_malloc
from koordcommon.wiring import start_bus, start_cluster

from . import api, feeds
from .core.state import ClusterState, wall_ms
from .settings import SERVICE, Settings

log = logging.getLogger("scheduler_extender")


def build(settings: Settings) -> tuple[Service, ClusterState]:
    svc = Service(SERVICE, settings)
    state = ClusterState(settings.extender_config())
    api.install(svc.post_routes, svc.app, state, settings.url_prefix)
    # kube-scheduler sends no bearer token: the verbs are protected by TLS client authentication
    # (http_tls_client_ca_file), as the deploy examples configure it.
    svc.public_paths.update(svc.post_routes.routes)
    return svc, state


async def run(svc: Service, state: ClusterState) -> None:
    settings: Settings = svc.settings  # type: ignore[assignment]
    status = feeds.FeedStatus()
    svc.health.add_check("cluster", status.cluster_listed.is_set)
    bus = await start_bus(svc)
    await bus.ensure_streams(subjects.NODEMETRIC_STREAM, subjects.NODERESOURCE_STREAM, subjects.NODETOPOLOGY_STREAM,
                             subjects.RECOMMENDATION_STREAM)
    cluster = await start_cluster(svc, bus)
    if settings.bind_verb:
        svc.public_paths.add(api.install_bind(svc.app, state, cluster, settings.url_prefix))
    # The simulated cluster runs on its own clock; NodeMetric times follow it.
    state.clock = getattr(cluster, "now_ms", None) or wall_ms
    work = [
        asyncio.create_task(feeds.follow_cluster(cluster, state, status), name="cluster-feed"),
        asyncio.create_task(feeds.follow_metrics(bus, state, status), name="nodemetric-feed"),
        asyncio.create_task(feeds.follow_node_resources(bus, state, status), name="noderesource-feed"),
        asyncio.create_task(feeds.follow_topologies(bus, state, status), name="nodetopology-feed"),
        asyncio.create_task(feeds.prune_periodically(state), name="prune"),
    ]
    if settings.use_profiles:
        work.append(
            asyncio.create_task(
                feeds.follow_profiles(bus, state, status, settings.profile_percentile, settings.profile_window_seconds),
                name="profile-feed",
            )
        )
    gc_tuning = asyncio.create_task(_tune_gc_when_listed(status), name="gc-tuning")
    svc.mark_started()
    try:
        # The feeds run for the life of the process: one that ends leaves the state stale.
        await run_until_stopped(svc.stopping, *work)
    finally:
        await cancel_and_wait([gc_tuning])


async def _tune_gc_when_listed(status: feeds.FeedStatus) -> None:
    # A request with 5,000 Node objects allocates about a million objects; the state listed
    # at start-up is frozen out of the collector's reach once it is in.
    await status.cluster_listed.wait()
    tune_gc()


def main() -> None:
    tune_malloc()  # replies of hundreds of kilobytes, back to back: keep the heap's pages
    settings = load_settings(Settings)
    svc, state = build(settings)
    svc.run(lambda s: run(s, state))
