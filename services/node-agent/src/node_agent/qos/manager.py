"""Runs the strategies after every collection round of every node that has a NodeSLO.

NodeSLOs arrive from the bus KV bucket; a node without one is left alone (every strategy is
off by default). The strategies and their order are in .strategies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import time
from collections import deque
from pathlib import Path

from koordcommon import subjects
from koordcommon.model import KubeQoS
from koordcommon.resources import Resources
from koordcommon.schemas import Event, NodeSLO, NodeSLOSpec, SchemaError, decode
from prometheus_client import Counter

from ..collect.cgroups import SYSTEMD, V2, CgroupLayout, CgroupPathError
from ..core.pods import PodInfo
from ..core.reporter import NodeRound
from .executor import Executor
from .files import CgroupFiles, MemoryCgroupFiles
from .model import CFS_PERIOD_US, BESample, Eviction, PodState, QoSState
from .strategies import cpu_evict, plan_all
from .strategies.cpuset import format_cpuset, parse_cpuset, synthetic_topology
from .topology import read_topology

log = logging.getLogger(__name__)

EVICTIONS = Counter("koord_agent_evictions_total", "Evictions requested by the node QoS manager",
                    ["strategy", "outcome"])
BE_HISTORY_S = 600


def be_sample(state: QoSState, ts_ms: int, cap_usage: bool) -> BESample:
    """node_be for one round: usage of the besteffort dir, its real limit and the BE requests."""
    usage = sum(p.usage.cpu_milli for p in state.pods if p.kube_best_effort and p.usage is not None)
    cpus = parse_cpuset(state.read(state.be_dir, "cpuset.cpus") or "") or [p.cpu for p in state.processors]
    limit = len(cpus) * 1000
    try:
        quota = int(state.read(state.be_dir, "cpu.cfs_quota_us") or -1)
    except ValueError:
        quota = -1
    if quota != -1:
        limit = min(limit, quota * 1000 // CFS_PERIOD_US)
    request = sum(max(p.info.batch_requests.cpu_milli, 0) for p in state.pods if p.is_be)
    if cap_usage:  # simulated cgroups: BE pods cannot use more than their cpuset / quota grants
        usage = min(usage, limit)
    return BESample(ts_ms, usage, limit, request)


def _pair(v: tuple[float, float] | None) -> Resources | None:
    if v is None or math.isnan(v[0]) or math.isnan(v[1]):
        return None
    return Resources(int(v[0]), int(v[1]))


class NodeQoS:
    """The QoS state of one node: its files, executor, NodeSLO and BE history."""

    def __init__(self, node: str, files, layout: CgroupLayout, processors, dry_run: bool, start_ms: int,
                 simulated: bool) -> None:
        self.node = node
        self.files = files
        self.layout = layout
        self.processors = processors
        self.executor = Executor(files, node, dry_run)
        self.slo: NodeSLOSpec | None = None
        self.be_history: deque[BESample] = deque()
        self.last_cpu_evict_ms = start_ms  # koordlet: no CPU eviction in the first cool-down
        self.last_memory_evict_ms = 0
        self.simulated = simulated
        self.pending: dict[str, int] = {}  # uid -> ms of the eviction request

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

    def state(self, now_ms: int, capacity: Resources, allocatable: Resources, pods: list[PodInfo],
              r: NodeRound) -> QoSState:
        states = []
        for p in pods:
            try:
                rel = self.layout.pod_dir(p.uid, p.kube_qos)
            except CgroupPathError:
                log.error("pod uid refused as a cgroup path", extra={"uid": p.uid, "node": self.node})
                continue
            ratio = None
            if r.extensions:
                ratio = r.extensions.get("cpu_throttled_ratio", {}).get(p.uid)
            states.append(PodState(p, rel, self.container_dirs(p, rel), _pair(r.pods.get(p.uid)), ratio))
        return QoSState(
            node=self.node,
            now_ms=now_ms,
            capacity=capacity,
            allocatable=allocatable,
            node_usage=_pair(r.node),
            pods=states,
            qos_dirs={k: self.layout.qos_dir(k) for k in KubeQoS},
            processors=self.processors,
            read=self.files.read,
            be_history=list(self.be_history),
            last_cpu_evict_ms=self.last_cpu_evict_ms,
            last_memory_evict_ms=self.last_memory_evict_ms,
            node_allocatable_memory=allocatable.memory_bytes,
        )

    def step(self, state: QoSState) -> tuple[list[Event], list[Eviction]]:
        """Record this round's BE sample, plan, and apply the cgroup writes; evictions are returned."""
        self.be_history.append(be_sample(state, state.now_ms, self.simulated))
        while self.be_history and self.be_history[0].ts_ms < state.now_ms - BE_HISTORY_S * 1000:
            self.be_history.popleft()
        state.be_history = list(self.be_history)
        if self.slo is None:
            return [], []
        alive = {p.info.uid for p in state.pods}
        self.pending = {u: t for u, t in self.pending.items() if u in alive}
        writes, evictions = plan_all(state, self.slo)
        events = self.executor.apply(writes, state.now_ms)
        return events, [e for e in evictions if e.uid not in self.pending]


class TokenBucket:
    def __init__(self, rate_per_s: float, burst: int = 1) -> None:
        self.rate, self.burst = rate_per_s, burst
        self.tokens = float(burst)
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class QoSManager:
    def __init__(self, agent, bus, settings, cluster, simulated: bool) -> None:
        self.agent = agent
        self.bus = bus
        self.settings = settings
        self.cluster = cluster
        self.simulated = simulated
        self.nodes: dict[str, NodeQoS] = {}
        self.slos: dict[str, NodeSLOSpec] = {}
        self.limiter = TokenBucket(settings.evict_rate_per_s, burst=max(int(settings.evict_rate_per_s), 1))
        self.events_published = 0
        self._watch_task: asyncio.Task | None = None
        if not simulated:
            self._real_layout = agent.layout
            self._real_files = CgroupFiles(agent.layout)
            self._topology = read_topology("/sys") or synthetic_topology(agent.proc.cpu_count())

    def node_qos(self, name: str, capacity: Resources, start_ms: int) -> NodeQoS:
        nq = self.nodes.get(name)
        if nq is None:
            if self.simulated:
                cores = max(capacity.cpu_milli // 1000, 1)
                procs = synthetic_topology(cores)
                files = MemoryCgroupFiles({"cpuset.cpus": format_cpuset(range(cores))})
                layout = CgroupLayout(Path("/sim"), V2, SYSTEMD)
            else:
                procs, files, layout = self._topology, self._real_files, self._real_layout
            nq = NodeQoS(name, files, layout, procs, self.settings.qos_dry_run, start_ms, self.simulated)
            nq.slo = self.slos.get(name)
            self.nodes[name] = nq
        return nq

    def set_slo(self, slo: NodeSLO) -> None:
        self.slos[slo.node] = slo.spec
        if slo.node in self.nodes:
            self.nodes[slo.node].slo = slo.spec

    async def watch_slos(self) -> None:
        async for key, raw in self.bus.kv_watch(subjects.NODESLO_BUCKET):
            if raw is None:
                node = subjects.decode_token(key)
                self.slos.pop(node, None)
                if node in self.nodes:
                    self.nodes[node].slo = None
                continue
            try:
                self.set_slo(decode(NodeSLO, raw))
            except SchemaError as exc:
                log.warning("invalid NodeSLO ignored", extra={"key": key, "error": str(exc)})

    async def on_round(self, t_ms: int, rounds: dict[str, NodeRound]) -> None:
        events: list[tuple[str, Event]] = []
        for name, r in rounds.items():
            history = self.agent.reporter.nodes.get(name)
            if history is None or (name not in self.slos and not self.nodes.get(name)):
                continue
            nq = self.node_qos(name, history.capacity, t_ms)
            state = nq.state(t_ms, history.capacity, history.allocatable, list(history.pods.values()), r)
            qos_events, evictions = nq.step(state)
            events += [(subjects.event(subjects.EVENT_QOS, name), e) for e in qos_events]
            for ev in evictions:
                e = await self._evict(nq, ev, t_ms)
                if e is not None:
                    events.append((subjects.event(subjects.EVENT_EVICT, name), e))
        if events and self.bus is not None:
            await self.bus.publish_many([(s, self.bus.stamp(e)) for s, e in events])
            self.events_published += len(events)

    async def _evict(self, nq: NodeQoS, ev: Eviction, t_ms: int) -> Event | None:
        if not self.limiter.take():
            EVICTIONS.labels(ev.strategy, "rate_limited").inc()
            return None
        outcome, message = "dry_run", ""
        if not self.settings.qos_dry_run and self.cluster is not None:
            result = await self.cluster.evict_pod(ev.namespace, ev.name, reason=ev.reason)
            outcome, message = result.outcome.value, result.message
        EVICTIONS.labels(ev.strategy, outcome).inc()
        if outcome in ("evicted", "dry_run"):
            nq.pending[ev.uid] = t_ms
            if ev.strategy == cpu_evict.NAME:
                nq.last_cpu_evict_ms = t_ms
            else:
                nq.last_memory_evict_ms = t_ms
        return Event(
            ts=t_ms,
            kind="evict",
            node=nq.node,
            action="evict",
            reason=ev.reason,
            dry_run=self.settings.qos_dry_run,
            target={"namespace": ev.namespace, "name": ev.name, "uid": ev.uid},
            details={"strategy": ev.strategy, "outcome": outcome, "message": message,
                     "release": ev.release.to_list()},
        )

    async def start(self) -> None:
        if self.bus is not None:
            await self.bus.ensure_kv(subjects.NODESLO_BUCKET)
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
