"""Entry point: `koord-node-agent` / `python -m node_agent`."""

from __future__ import annotations

import argparse
import logging

from koordcommon.cluster import open_cluster
from koordcommon.service import Service, run_service
from koordcommon.wiring import start_bus

from .bus import STREAMS, publisher
from .settings import AgentSettings

SERVICE = "node-agent"
log = logging.getLogger(SERVICE)


def parse_args(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="koord-node-agent", description="Koordinator-style node agent")
    ap.add_argument("--mode", choices=["real", "sim"], help="real: this node's /proc and cgroups; sim: many nodes")
    ap.add_argument("--shard", help="sim mode: drive the nodes of shard i/n (stable hash of the node name)")
    ap.add_argument("--nodes", help="sim mode: 'all' or a comma-separated list of node names")
    ap.add_argument("--node-name", dest="node_name", help="real mode: the node this agent runs on")
    ap.add_argument("--cgroup-root", dest="cgroup_root", help="real mode: cgroup mount point")
    args = ap.parse_args(argv)
    return {k: v for k, v in vars(args).items() if v is not None}


async def run(svc: Service) -> None:
    settings: AgentSettings = svc.settings  # type: ignore[assignment]
    # A real agent speaks for its node only: its bus identity names the node (natsauth).
    if settings.mode == "sim":
        bus = await start_bus(svc)
    else:
        from .real_mode import node_name

        bus = await start_bus(svc, node=node_name(settings))
    await bus.ensure_streams(*STREAMS)
    publish = publisher(bus)

    if settings.mode == "sim":
        from .sim_mode import SimAgent

        cluster = open_cluster("sim", bus=bus)
        await cluster.start()  # waits for the genesis of the shared simulated cluster
        agent = SimAgent(cluster, settings, publish)
    else:
        from .real_mode import RealAgent

        cluster = None
        if settings.cluster_backend == "kubernetes":
            cluster = open_cluster("kubernetes")
            await cluster.start()
        agent = RealAgent(settings, publish, cluster)
    if cluster is not None:
        svc.on_shutdown(cluster.close)
    svc.health.add_check("collecting", lambda: agent.last_round_ms is not None)

    manager = None
    if settings.qos_enabled:
        from .qos.manager import attach_qos

        manager = await attach_qos(agent, bus, settings, cluster)
        svc.on_shutdown(manager.stop)
    if settings.publish_topology:
        agent.on_round.append(topology_publisher(settings, agent, publish).on_round)
    if settings.mode == "real" and settings.cri_proxy_socket:
        from .runtimehooks.node import start_proxy

        proxy = await start_proxy(settings, agent, manager)
        svc.on_shutdown(proxy.stop)
    svc.mark_started()
    await agent.run(svc.stopping)


def topology_publisher(settings: AgentSettings, agent, publish):
    """Each node's CPU topology and pools on the bus: a simulated node's as its QoS has them, a
    real node's from sysfs and the kubelet's CPU manager checkpoint."""
    from .topology_report import TopologyPublisher, simulated_topology

    if settings.mode == "sim":
        return TopologyPublisher(agent, publish, simulated_topology)
    from .qos.strategies.cpuset import synthetic_topology
    from .qos.topology import CheckpointFile, read_topology

    processors = read_topology("/sys") or synthetic_topology(agent.proc.cpu_count())
    return TopologyPublisher(agent, publish, lambda node, capacity: processors,
                             CheckpointFile(settings.kubelet_cpu_manager_state))


def main(argv: list[str] | None = None) -> None:
    run_service(SERVICE, AgentSettings, run, **parse_args(argv))


if __name__ == "__main__":
    main()
