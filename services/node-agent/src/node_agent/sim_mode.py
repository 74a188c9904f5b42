"""Simulated mode: one process plays the node agent of many simulated nodes.

Usage comes from the simulated cluster (`usage_snapshot(node, t)`: the pods' trace-driven
usage plus the node's system usage) and is "collected" every collect interval of simulated
time into the same histories real mode fills, so the published messages are exactly the
same kind. The loop follows the simulated clock: it sleeps while the clock is ahead of the
next round and replays missed rounds when it fell behind (up to `max_catch_up_s`; a longer
lag, e.g. after a suspend, is skipped and logged rather than replayed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from koordcommon.records import NodeRecord, PodRecord
from koordcommon.schemas import Message
from koordsim.usage import container_shares
from prometheus_client import Counter, Gauge, Histogram

from .core.messages import HistoryConfig
from .core.pods import PodInfo
from .core.reporter import NodeRound, ReportConfig, Reporter, in_shard
from .settings import AgentSettings

log = logging.getLogger(__name__)

ROUNDS = Counter("koord_agent_collect_rounds_total", "Collection rounds (per round, all nodes)", ["mode"])
NODE_SAMPLES = Counter("koord_agent_node_samples_total", "Node samples collected", ["mode"])
SKIPPED = Counter("koord_agent_skipped_rounds_total", "Rounds skipped because the agent fell too far behind", ["mode"])
NODES = Gauge("koord_agent_nodes", "Nodes this agent process drives", ["mode"])
ROUND_SECONDS = Histogram(
    "koord_agent_round_seconds", "Wall time of one collection round", ["mode"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

Publish = Callable[[list[tuple[str, Message]]], Awaitable[object]]


def select_nodes(nodes: list[NodeRecord], settings: AgentSettings) -> list[NodeRecord]:
    index, count = settings.shard_of()
    chosen = [n for n in nodes if in_shard(n.name, index, count)]
    spec = settings.nodes.strip()
    if spec and spec != "all" and "/" not in spec:
        wanted = {s.strip() for s in spec.split(",") if s.strip()}
        chosen = [n for n in chosen if n.name in wanted]
    return chosen


def history_config(settings: AgentSettings, sim: bool) -> HistoryConfig:
    return HistoryConfig(
        collect_interval_s=settings.collect_interval_s,
        node_history_s=max(settings.node_history_s, max(settings.aggregate_durations_s), settings.aggregate_window_s),
        pod_history_s=settings.sim_pod_history_s if sim else settings.pod_history_s,
        container_history_s=int(settings.report_interval_s) + 1,
    )


def report_config(settings: AgentSettings) -> ReportConfig:
    return ReportConfig(
        report_interval_s=settings.report_interval_s,
        nodemetric_interval_s=settings.nodemetric_interval_s,
        aggregate_window_s=settings.aggregate_window_s,
        durations_s=tuple(settings.aggregate_durations_s),
    )


class SimAgent:
    """Drives the histories of every selected simulated node from one SimCluster replica."""

    MODE = "sim"

    def __init__(self, cluster, settings: AgentSettings, publish: Publish, samples: bool = True) -> None:
        self.cluster = cluster
        self.settings = settings
        self.publish = publish
        self.reporter = Reporter(history_config(settings, sim=True), report_config(settings), samples=samples)
        self._uid_of: dict[str, str] = {}  # pod key -> uid
        self._pods_by_node: dict[str, list[PodRecord]] = {}
        self.node_records: dict[str, NodeRecord] = {}  # the selected nodes (QoS reads their allocatable, annotations)
        self._infos: dict[str, tuple[str, PodInfo]] = {}  # uid -> (resourceVersion, PodInfo)
        self.published = 0
        self.last_round_ms: int | None = None
        self.last_rounds: dict[str, NodeRound] = {}  # what the last round recorded (what ran)
        self.on_round: list[Callable[[int, dict[str, NodeRound]], Awaitable[None]]] = []
        self._refreshes = 0  # measure() aligns the pods' uids with the cluster's keys once per refresh
        self._aligned_keys: list[str] | None = None
        self._aligned_refresh = -1
        self._aligned_uids: list[str | None] = []
        self._aligned_complete = True

    async def refresh(self) -> None:
        nodes = select_nodes(await self.cluster.list_nodes(), self.settings)
        names = {n.name for n in nodes}
        self.node_records = {n.name: n for n in nodes}
        self.reporter.set_nodes({n.name: (n.capacity_resources(), n.allocatable_resources()) for n in nodes})
        by_node: dict[str, list[PodRecord]] = {n: [] for n in names}
        for p in await self.cluster.list_pods():
            if p.node_name in names and p.phase == "Running" and p.deletion_ms is None:
                by_node[p.node_name].append(p)
        self._pods_by_node = by_node
        self._uid_of = {p.key: p.uid for pods in by_node.values() for p in pods}
        shares = {p.uid: container_shares(p) for pods in by_node.values() for p in pods}
        self.reporter.set_pods({n: [self._info(p) for p in pods] for n, pods in by_node.items()}, shares)
        live = set(self._uid_of.values())
        for uid in [u for u in self._infos if u not in live]:
            del self._infos[uid]
        NODES.labels(self.MODE).set(len(names))
        self._refreshes += 1

    def _info(self, pod: PodRecord) -> PodInfo:
        """A pod's PodInfo, derived again only when the pod changed (its resourceVersion)."""
        hit = self._infos.get(pod.uid)
        if hit is None or hit[0] != pod.resource_version or not pod.resource_version:
            hit = self._infos[pod.uid] = (pod.resource_version, PodInfo.from_record(pod))
        return hit[1]

    def pods_on(self, node: str) -> list[PodRecord]:
        return self._pods_by_node.get(node, [])

    def collect(self, t_ms: int) -> dict[str, NodeRound]:
        """Measure and record one round (no QoS in between)."""
        rounds = self.measure(t_ms)
        self.record(t_ms, rounds)
        return rounds

    def measure(self, t_ms: int) -> dict[str, NodeRound]:
        """What every node's pods ask for at t_ms, from the simulated cluster's usage model: one
        vectorised evaluation for all the nodes of this agent (the stand-in for reading /proc and
        the cgroups, which a real agent does for its one node)."""
        usage = self.cluster.usage_of_nodes(list(self.reporter.node_names()), t_ms)
        if usage.keys is not self._aligned_keys or self._aligned_refresh != self._refreshes:
            # containers are a fixed share of their pod in the sim: derived when a sample is built;
            # a pod started since the last refresh is left out until the next one picks it up
            self._aligned_keys, self._aligned_refresh = usage.keys, self._refreshes
            self._aligned_uids = [self._uid_of.get(k) for k in usage.keys]
            self._aligned_complete = None not in self._aligned_uids
        uids = self._aligned_uids
        cpu, mem = usage.pod_cpu.astype(float).tolist(), usage.pod_mem.astype(float).tolist()
        node_cpu, node_mem = usage.node_cpu.astype(float).tolist(), usage.node_mem.astype(float).tolist()
        b = usage.bounds
        rounds: dict[str, NodeRound] = {}
        for i, name in enumerate(usage.nodes):
            lo, hi = b[i], b[i + 1]
            pods = dict(zip(uids[lo:hi], zip(cpu[lo:hi], mem[lo:hi], strict=True), strict=True))
            if not self._aligned_complete:
                pods.pop(None, None)
            rounds[name] = NodeRound(node=(node_cpu[i], node_mem[i]), pods=pods)
        return rounds

    def record(self, t_ms: int, rounds: dict[str, NodeRound]) -> None:
        self.reporter.record(t_ms, rounds)
        self.last_round_ms = t_ms
        self.last_rounds = rounds
        ROUNDS.labels(self.MODE).inc()
        NODE_SAMPLES.labels(self.MODE).inc(len(rounds))

    async def step(self, t_ms: int) -> list[tuple[str, Message]]:
        """One round at simulated time t_ms: measure what the pods ask for, let QoS act (the
        simulated cgroups then hold BestEffort pods to what the round grants them), record what
        ran, and return the messages then due."""
        started = time.perf_counter()
        rounds = self.measure(t_ms)
        for hook in self.on_round:
            await hook(t_ms, rounds)
        self.record(t_ms, rounds)
        ROUND_SECONDS.labels(self.MODE).observe(time.perf_counter() - started)
        return self.reporter.due(t_ms)

    async def run(self, stopping: asyncio.Event) -> None:
        s = self.settings
        step_ms = int(s.collect_interval_s * 1000)
        await self.refresh()
        last_refresh = time.monotonic()
        next_t = (self.cluster.now_ms() // step_ms + 1) * step_ms
        while not stopping.is_set():
            now = self.cluster.now_ms()
            if now < next_t:
                speed = max(getattr(self.cluster.clock, "speed", 1.0) or 1.0, 1e-3)
                wait_s = min((next_t - now) / 1000 / speed, 1.0)
                try:
                    await asyncio.wait_for(stopping.wait(), timeout=max(wait_s, 0.001))
                except TimeoutError:
                    pass
                continue
            if now - next_t > s.max_catch_up_s * 1000:
                skipped = (now - next_t) // step_ms
                SKIPPED.labels(self.MODE).inc(skipped)
                log.warning("agent fell behind the simulated clock; skipping rounds",
                            extra={"rounds": skipped, "nodes": len(self.reporter.nodes)})
                next_t = (now // step_ms) * step_ms
            if time.monotonic() - last_refresh >= s.pod_refresh_s:
                await self.refresh()
                last_refresh = time.monotonic()
            out: list[tuple[str, Message]] = []
            while next_t <= now and not stopping.is_set():
                out.extend(await self.step(next_t))
                next_t += step_ms
                if len(out) >= 2000:
                    await self._send(out)
                    out = []
                await asyncio.sleep(0)  # keep the HTTP probes and the bus answering
            if out:
                await self._send(out)

    async def _send(self, items: list[tuple[str, Message]]) -> None:
        await self.publish(items)
        self.published += len(items)
