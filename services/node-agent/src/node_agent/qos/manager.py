"""Runs the QoS of every node that has a NodeSLO after each of its collection rounds.

NodeSLOs arrive from the bus KV bucket; a node without one is left alone (every strategy is
off by default). A NodeSLO setting the agent cannot honour is logged and published once as a
`qos` event (action `not_supported`) naming it. Per node the manager builds the state (with the
node's object, and on a real node the kubelet's CPU manager checkpoint), asks the strategies
for a plan and hands it to the node's executor (see node.py and round.py); it publishes the
events. On a real node it also tells the collector and the NodeMetric which host applications
the NodeSLO declares. One eviction rate limit (evict_rate_per_s) holds for all the nodes this
agent drives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from koordcommon import subjects
from koordcommon.model import parse_priority_class, parse_qos_class
from koordcommon.resources import Resources
from koordcommon.schemas import Event, NodeSLO, NodeSLOSpec, SchemaError, decode

from ..core.reporter import NodeRound
from .executor import Executor, TokenBucket
from .files import CgroupFiles
from .node import NodeQoS
from .nodeinfo import host_app_dirs, parse_cpu_manager_state
from .strategies.cpuset import synthetic_topology
from .support import not_supported
from .topology import CheckpointFile, read_topology

log = logging.getLogger(__name__)


class QoSManager:
    """`limiter_of(node)`: the eviction rate limit of each node. By default one bucket on the wall
    clock holds for every node this agent drives (it protects the API server); a replay on
    simulated time gives each simulated node its own on that time, as each real node's agent has."""

    def __init__(self, agent, bus, settings, cluster, simulated: bool,
                 limiter_of: Callable[[str], TokenBucket] | None = None) -> None:
        self.agent = agent
        self.bus = bus
        self.settings = settings
        self.cluster = cluster
        self.simulated = simulated
        self.nodes: dict[str, NodeQoS] = {}
        self.slos: dict[str, NodeSLOSpec] = {}
        self.limiter = TokenBucket(settings.evict_rate_per_s, burst=max(int(settings.evict_rate_per_s), 1))
        self.limiter_of = limiter_of or (lambda node: self.limiter)
        self.events_published = 0
        # where a round's events go besides the bus (an in-process replay counts them here)
        self.on_events: list[Callable[[int, list[tuple[str, Event]]], None]] = []
        self._watch_task: asyncio.Task | None = None
        self._not_supported: dict[str, list[str]] = {}  # node -> what its NodeSLO asks that is not honoured
        self._config_events: list[tuple[str, Event]] = []
        if not simulated:
            self._real_layout = agent.layout
            self._real_files = CgroupFiles(agent.layout)
            self._topology = read_topology("/sys") or synthetic_topology(agent.proc.cpu_count())
            self._cpu_manager = CheckpointFile(settings.kubelet_cpu_manager_state)

    def node_qos(self, name: str, capacity: Resources, start_ms: int) -> NodeQoS:
        nq = self.nodes.get(name)
        if nq is None:
            dry_run = self.settings.qos_dry_run
            if self.simulated:
                nq = NodeQoS.simulated_node(name, capacity, start_ms, dry_run, self.cluster, self.limiter_of(name))
            else:
                files = self._real_files
                executor = Executor(files, name, dry_run, self.cluster, self.limiter_of(name))
                nq = NodeQoS(name, files, self._real_layout, self._topology, executor, start_ms, simulated=False)
            nq.slo = self.slos.get(name)
            self.nodes[name] = nq
        return nq

    def set_slo(self, slo: NodeSLO) -> None:
        self.slos[slo.node] = slo.spec
        if slo.node in self.nodes:
            self.nodes[slo.node].slo = slo.spec
        self._report_not_supported(slo.node, slo.spec)
        if not self.simulated and slo.node == getattr(self.agent, "node", None):
            self._declare_host_apps(slo.node, slo.spec)

    def _report_not_supported(self, node: str, spec: NodeSLOSpec | None) -> None:
        found = not_supported(spec) if spec is not None else []
        if found == self._not_supported.get(node, []):
            return
        self._not_supported[node] = found
        for what in found:
            log.warning("NodeSLO setting not supported", extra={"node": node, "setting": what})
            self._config_events.append((subjects.event(subjects.EVENT_QOS, node), Event(
                kind=subjects.EVENT_QOS, node=node, action="not_supported", reason=what)))

    def _declare_host_apps(self, node: str, spec: NodeSLOSpec | None) -> None:
        """The collector reads the host applications' cgroups; the NodeMetric reports them."""
        apps = spec.hostApplications if spec is not None else []
        self.agent.host_apps = host_app_dirs(apps, self._real_layout.qos_dir)
        self.agent.reporter.set_host_apps(node, [(a.name, parse_priority_class(a.priority), parse_qos_class(a.qos))
                                                 for a in apps if a.name])

    async def watch_slos(self) -> None:
        # A real agent reads its own NodeSLO only (its bus identity may read no other); the
        # bucket is the slo-controller's to create, the watch waits for it.
        mine = ">" if self.simulated else subjects.encode_token(self.agent.node)
        async for key, raw in self.bus.kv_watch(subjects.NODESLO_BUCKET, key=mine, create=False):
            if raw is None:
                node = subjects.decode_token(key)
                self.slos.pop(node, None)
                if node in self.nodes:
                    self.nodes[node].slo = None
                self._report_not_supported(node, None)
                if not self.simulated and node == getattr(self.agent, "node", None):
                    self._declare_host_apps(node, None)
                continue
            try:
                self.set_slo(decode(NodeSLO, raw))
            except SchemaError as exc:
                log.warning("invalid NodeSLO ignored", extra={"key": key, "error": str(exc)})

    async def on_round(self, t_ms: int, rounds: dict[str, NodeRound]) -> None:
        events, self._config_events = self._config_events, []
        records = getattr(self.agent, "node_records", {})
        for name, r in rounds.items():
            history = self.agent.reporter.nodes.get(name)
            if history is None or (name not in self.slos and not self.nodes.get(name)):
                continue
            nq = self.node_qos(name, history.capacity, t_ms)
            if not self.simulated:
                nq.cpu_manager = parse_cpu_manager_state(self._cpu_manager.read())
            state = nq.state(t_ms, history.capacity, history.allocatable, list(history.pods.values()), r,
                             records.get(name))
            # an event's kind is its subject's: qos for cgroup writes, evict for evictions
            events += [(subjects.event(e.kind, name), e) for e in await nq.round(state)]
            if self.simulated:
                nq.enforce(state, r)
        for hook in self.on_events:
            hook(t_ms, events)
        if events and self.bus is not None:
            await self.bus.publish_many([(s, self.bus.stamp(e)) for s, e in events])
            self.events_published += len(events)

    async def start(self) -> None:
        if self.bus is not None:
            self._watch_task = asyncio.create_task(self.watch_slos(), name="nodeslo-watch")

    async def stop(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task


async def attach_qos(agent, bus, settings, cluster) -> QoSManager:
    manager = QoSManager(agent, bus, settings, cluster, simulated=settings.mode == "sim")
    await manager.start()
    agent.on_round.append(manager.on_round)
    return manager
