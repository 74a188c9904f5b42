"""Publishes each node's CPU topology and pools (NodeTopology on `koord.nodetopology.<node>`),
as koordlet keeps its NodeResourceTopology: when what it says changes (a pod bound to CPUs came
or went, the kubelet pinned or freed CPUs, the node's reserved CPUs changed), and every
`heartbeat_s` anyway (a new extender reads the last one of every node).

A real node's topology is read from sysfs once (it does not change while the agent runs) and
the kubelet's CPU manager checkpoint on every check; a simulated node has the topology its QoS
uses (one socket, hyper-threads paired as Linux numbers them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from koordcommon import cpus as kc
from koordcommon import subjects
from koordcommon.schemas import Message

from . import cpuorch
from .qos.model import Processor
from .qos.nodeinfo import CPUManagerState, kubelet_pinned_cpus, parse_cpu_manager_state
from .qos.strategies.cpuset import synthetic_topology
from .qos.topology import CheckpointFile

log = logging.getLogger(__name__)


class TopologyPublisher:
    """`topology_of(node, capacity)`: a node's processors; `cpu_manager`: the kubelet's checkpoint
    (real nodes). Attach `on_round` to an agent's rounds; it returns nothing and publishes
    through `publish` (the agent's)."""

    def __init__(self, agent, publish, topology_of: Callable[[str, object], list[Processor]],
                 cpu_manager: CheckpointFile | None = None, heartbeat_s: float = 300.0,
                 check_s: float = 5.0) -> None:  # fmt: skip
        self.agent = agent
        self.publish = publish
        self.topology_of = topology_of
        self.cpu_manager = cpu_manager
        self.heartbeat_ms = int(heartbeat_s * 1000)
        self.check_ms = int(check_s * 1000)
        self._topologies: dict[str, kc.Topology] = {}
        self._last: dict[str, tuple[tuple, int]] = {}  # node -> (what was said, when)
        self._checked_ms: int | None = None
        self.published = 0

    def reports(self, t_ms: int) -> list[tuple[str, Message]]:
        """The reports due at t_ms (changed, or older than the heartbeat)."""
        state: CPUManagerState | None = None
        if self.cpu_manager is not None:
            state = parse_cpu_manager_state(self.cpu_manager.read())
        policy = state.policy if state is not None else "none"
        records = getattr(self.agent, "node_records", {}) or {}
        out: list[tuple[str, Message]] = []
        for name, history in self.agent.reporter.nodes.items():
            topo = self._topologies.get(name)
            if topo is None:
                topo = self._topologies[name] = cpuorch.topology_of(self.topology_of(name, history.capacity))
            pods = list(history.pods.values())
            pinned = kubelet_pinned_cpus(state, pods)
            allocs = {}
            if state is not None and state.policy == "static":
                managed = {p.uid for p in pods if p.cpuset}
                allocs = {uid: kc.format_cpuset(set().union(*(kc.cpus_of(s) for s in conts.values())))
                          for uid, conts in state.entries.items() if uid not in managed and conts}  # fmt: skip
                allocs = {uid: s for uid, s in allocs.items() if kc.cpus_of(s) & pinned}
            annotations = records[name].annotations if name in records else {}
            cpus = kc.NodeCPUs(topo, cpuorch.bound_cpus(pods), pinned, kc.reserved_cpus(annotations),
                               kc.system_qos_cpus(annotations))  # fmt: skip
            said = (policy, tuple(sorted(cpus.bound.items())), tuple(sorted(allocs.items())), cpus.reserved,
                    cpus.system, tuple(sorted((p.uid, p.cpuset) for p in pods if p.cpuset)))  # fmt: skip
            last = self._last.get(name)
            if last is not None and last[0] == said and t_ms - last[1] < self.heartbeat_ms:
                continue
            self._last[name] = (said, t_ms)
            msg = cpuorch.report(name, cpus, policy, pods, allocs)
            msg.ts = t_ms
            out.append((subjects.nodetopology(name), msg))
        for name in [n for n in self._last if n not in self.agent.reporter.nodes]:
            del self._last[name]
            self._topologies.pop(name, None)
        return out

    async def on_round(self, t_ms: int, rounds) -> None:
        if self._checked_ms is not None and t_ms - self._checked_ms < self.check_ms:
            return
        self._checked_ms = t_ms
        out = self.reports(t_ms)
        if out and self.publish is not None:
            try:
                await self.publish(out)
                self.published += len(out)
            except Exception as exc:  # noqa: BLE001 - the bus being away must not stop the rounds; said again next check
                log.warning("topology not published", extra={"error": repr(exc)})
                for subject, _ in out:
                    self._last.pop(subjects.node_of(subject), None)


def simulated_topology(node: str, capacity) -> list[Processor]:
    """A simulated node's processors: one per core of its capacity, as its QoS has them."""
    return synthetic_topology(max(capacity.cpu_milli // 1000, 1))
