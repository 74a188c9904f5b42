"""Start-up wiring every service repeats: the bus and the cluster port, with health checks."""

from __future__ import annotations

from typing import Any

from .bus import Bus
from .cluster.backends import open_cluster
from .cluster.port import ClusterPort
from .service import Service


async def start_bus(svc: Service, node: str | None = None) -> Bus:
    """A connected Bus named after the service, with the settings' identity (nkey seed, TLS);
    readiness follows the connection; drained on exit. `node`: the node a node agent speaks for."""
    settings = svc.settings
    bus = Bus(settings.nats_url, service=svc.name, namespace=settings.bus_namespace,
              credentials=settings.bus_credentials(), node=node, stream_replicas=settings.nats_stream_replicas)
    await bus.connect()
    svc.health.add_check("bus", lambda: bus.connected)
    svc.on_shutdown(bus.close)
    return bus


async def start_cluster(svc: Service, bus: Bus | None, **options: Any) -> ClusterPort:
    """The cluster port the settings name: a sim replica kept in step over the bus, or Kubernetes."""
    backend = svc.settings.cluster_backend
    if backend == "sim":
        options.setdefault("bus", bus)
    cluster = open_cluster(backend, **options)
    await cluster.start()
    if bus is not None and callable(getattr(cluster, "now_ms", None)):
        bus.clock = cluster.now_ms  # measurements are stamped on the simulated clock: judge them on it
    svc.on_shutdown(cluster.close)
    return cluster
