"""`koordctl sim`: the sim driver of a deployed stack (docker-compose): it publishes the
simulated cluster's genesis, then plays kube-scheduler and the batch workload for it."""

from __future__ import annotations

import asyncio
import signal
import sys

from koordcommon.bus import Bus
from koordcommon.natsauth import BusCredentials
from koordsim.cluster import SimCluster, SimSpec

from .driver import SimDriver


async def run_sim_driver(
    nats_url: str,
    extender_url: str,
    nodes: int,
    namespace: str = "",
    batch_tasks_per_node_hour: float = 60.0,
    genesis: bool = True,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if sys.platform != "win32":  # asyncio has no signal handlers there
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    bus = Bus(nats_url, service="sim-driver", namespace=namespace, credentials=BusCredentials.from_env())
    await bus.connect()
    spec = SimSpec(nodes=nodes, batch_stream=True, batch_tasks_per_node_hour=batch_tasks_per_node_hour,
                   batch_trace_offset_s=11 * 3600)
    cluster = SimCluster(spec if genesis else None, bus=bus, genesis=genesis)
    await cluster.start()
    driver = SimDriver(cluster, extender_url)
    try:
        await driver.run(stop, batch_stream=True)
    finally:
        await cluster.close()
        await bus.close()
