"""The QoS of one node: its cgroups, topology, NodeSLO, memory between rounds and executor.

A round: `state(...)` turns the node's pods, this round's collected usage and what is known of the
node (its object, the kubelet's CPU manager state, the NodeSLO's host applications) into a
QoSState, `round(state)` plans it (round.plan_round) and has the executor carry the plan out.
Nothing here needs the bus; `NodeQoS.simulated_node` gives a node on in-memory cgroups.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from koordcommon.model import KubeQoS
from koordcommon.records import NodeRecord
from koordcommon.resources import Resources
from koordcommon.schemas import Event, NodeSLOSpec

from ..collect.cgroups import SYSTEMD, V2, CgroupLayout, CgroupPathError
from ..core.pods import PodInfo
from ..core.reporter import NodeRound
from .executor import Executor, TokenBucket
from .files import MemoryCgroupFiles
from .model import HostApp, PodState, Processor, QoSState
from .nodeinfo import CPUManagerState, host_apps, kubelet_pinned_cpus, node_facts
from .round import QoSMemory, be_limit, plan_round
from .strategies.cpuset import format_cpuset, synthetic_topology


def _pair(v: tuple[float, float] | None) -> Resources | None:
    if v is None or math.isnan(v[0]) or math.isnan(v[1]):
        return None
    return Resources(int(v[0]), int(v[1]))


class NodeQoS:
    """One node's QoS: what it keeps between rounds and how it reaches its cgroups and the cluster."""

    def __init__(self, node: str, files, layout: CgroupLayout, processors: list[Processor], executor: Executor,
                 start_ms: int, simulated: bool) -> None:
        self.node = node
        self.files = files
        self.layout = layout
        self.processors = processors
        self.executor = executor
        self.slo: NodeSLOSpec | None = None
        self.memory = QoSMemory(started_ms=start_ms)
        self.simulated = simulated
        self.cpu_manager: CPUManagerState | None = None  # the kubelet's checkpoint (real nodes)
        self._dirs: dict[str, tuple[PodInfo, tuple[str, dict[str, str]]]] = {}  # uid -> (pod, its cgroup dirs)
        self._qos_dirs = {k: layout.qos_dir(k) for k in KubeQoS}  # the layout is fixed
        self._facts: tuple[NodeRecord | None, object] | None = None  # (record, its node_facts)

    @classmethod
    def simulated_node(cls, node: str, capacity: Resources, start_ms: int, dry_run: bool = False, cluster=None,
                       limiter: TokenBucket | None = None) -> NodeQoS:
        """A simulated node: one CPU a core of its capacity, its cgroups in memory (v2, systemd)."""
        cores = max(capacity.cpu_milli // 1000, 1)
        files = MemoryCgroupFiles({"cpuset.cpus": format_cpuset(range(cores))})
        executor = Executor(files, node, dry_run, cluster, limiter)
        return cls(node, files, CgroupLayout(Path("/sim"), V2, SYSTEMD), synthetic_topology(cores), executor,
                   start_ms, simulated=True)

    def pod_dirs(self, pod: PodInfo) -> tuple[str, dict[str, str]] | None:
        """(pod dir, container name -> dir), derived again only when the pod changed; None when
        the pod's uid is refused as a cgroup path."""
        hit = self._dirs.get(pod.uid)
        if hit is not None and hit[0] is pod:
            return hit[1]
        try:
            rel = self.layout.pod_dir(pod.uid, pod.kube_qos)
        except CgroupPathError:  # counted and logged where it was refused
            return None
        dirs = (rel, self.container_dirs(pod, rel))
        self._dirs[pod.uid] = (pod, dirs)
        return dirs

    def container_dirs(self, pod: PodInfo, pod_rel: str) -> dict[str, str]:
        out = {}
        ids = dict(pod.container_ids)
        for c in pod.containers:
            cid = ids.get(c.name)
            if cid is None and self.simulated:
                cid = "containerd://" + hashlib.sha256(f"{pod.uid}/{c.name}".encode()).hexdigest()[:32]
            if cid is None:
                continue
            try:
                out[c.name] = self.layout.container_dir(pod_rel, cid)
            except CgroupPathError:
                continue
        return out

    def host_apps(self, r: NodeRound) -> list[HostApp]:
        specs = self.slo.hostApplications if self.slo is not None else []
        return host_apps(specs, self.layout.qos_dir, {k: v for k, v in r.host_apps.items() if _pair(v) is not None})

    def state(self, now_ms: int, capacity: Resources, allocatable: Resources, pods: list[PodInfo],
              r: NodeRound, record: NodeRecord | None = None) -> QoSState:
        states = []
        by_pod: dict[str, dict[str, Resources]] = {}
        for (uid, name), v in r.containers.items():
            if (u := _pair(v)) is not None:
                by_pod.setdefault(uid, {})[name] = u
        live = set()
        for p in pods:
            dirs = self.pod_dirs(p)
            if dirs is None:
                continue
            live.add(p.uid)
            ratio = None
            if r.extensions:
                ratio = r.extensions.get("cpu_throttled_ratio", {}).get(p.uid)
            states.append(PodState(p, dirs[0], dirs[1], _pair(r.pods.get(p.uid)), ratio, by_pod.get(p.uid, {})))
        if len(self._dirs) > len(live):
            gone = [hit[1][0] for uid, hit in self._dirs.items() if uid not in live]
            self._dirs = {uid: hit for uid, hit in self._dirs.items() if uid in live}
            if isinstance(self.files, MemoryCgroupFiles):  # on a real node the kubelet removes them
                self.files.forget_under(*gone)
        if self._facts is None or self._facts[0] is not record:  # derived again when the node object changes
            self._facts = (record, node_facts(record))
        facts = self._facts[1]
        return QoSState(
            node=self.node,
            now_ms=now_ms,
            capacity=capacity,
            allocatable=allocatable,
            node_usage=_pair(r.node),
            pods=states,
            qos_dirs=dict(self._qos_dirs),
            processors=self.processors,
            read=self.files.read,
            node_allocatable_memory=allocatable.memory_bytes,
            reserved_cpus=facts.reserved_cpus,
            annotation_reserved_cpu_milli=facts.reserved_cpu_milli,
            tier_allocatable=facts.tier_allocatable,
            system_qos_cpus=facts.system_qos_cpus,
            kubelet_cpu_policy=self.cpu_manager.policy if self.cpu_manager is not None else "none",
            kubelet_pinned_cpus=kubelet_pinned_cpus(self.cpu_manager, pods),
            host_apps=self.host_apps(r),
        )

    async def round(self, state: QoSState) -> list[Event]:
        """Plan this round and carry the plan out; the events of what changed."""
        plan = plan_round(state, self.slo, self.memory, cap_be_usage=self.simulated)
        return await self.executor.apply(plan, self.memory, state.now_ms)

    def enforce(self, state: QoSState, r: NodeRound) -> None:
        """What the kernel does on a real node, for a simulated one: the BestEffort pods get no
        more CPU than the BE cgroup grants (its cpuset and quota as the round just set them).
        Their usage in `r` is scaled down together, and the node's usage with it, so what is
        recorded and reported is what ran, not what was asked for."""
        limit = be_limit(state)
        best_effort = [p.info.uid for p in state.pods if p.kube_best_effort and p.info.uid in r.pods]
        asked = sum(r.pods[uid][0] for uid in best_effort if not math.isnan(r.pods[uid][0]))
        if asked <= limit or asked <= 0:
            return
        scale = limit / asked
        for uid in best_effort:
            cpu, mem = r.pods[uid]
            r.pods[uid] = (cpu * scale, mem)
        r.node = (r.node[0] - asked * (1 - scale), r.node[1])
