"""Real mode: the agent of the node it runs on (/proc and the node's cgroup tree)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

from koordcommon.resources import Resources
from koordcommon.schemas import Message

from .collect.cgroups import CgroupLayout, CgroupReader
from .collect.node import RealCollector
from .collect.procfs import ProcReader, memory_total_bytes
from .core.pods import PodInfo
from .core.reporter import NodeRound, Reporter
from .qos.topology import read_numa_zones
from .settings import AgentSettings
from .sim_mode import NODE_SAMPLES, NODES, ROUND_SECONDS, ROUNDS, Publish, history_config, report_config

log = logging.getLogger(__name__)


def node_name(settings: AgentSettings) -> str:
    return settings.node_name or os.environ.get("NODE_NAME") or socket.gethostname()


class RealAgent:
    MODE = "real"

    def __init__(self, settings: AgentSettings, publish: Publish, cluster=None, sys_root: str = "/sys") -> None:
        self.settings = settings
        self.publish = publish
        self.cluster = cluster
        self.node = node_name(settings)
        self.proc = ProcReader(settings.proc_root)
        self.layout = CgroupLayout.detect(settings.cgroup_root, settings.cgroup_version, settings.cgroup_driver)
        self.collector = RealCollector(self.proc, CgroupReader(self.layout), settings.collect_interval_s)
        self.reporter = Reporter(history_config(settings, sim=False), report_config(settings))
        self.pods: list[PodInfo] = []
        self.pod_records = []
        self.node_record = None
        self.node_records = {}  # name -> NodeRecord, as the sim agent has them (QoS reads its node's)
        self.host_apps: list[tuple[str, str]] = []  # the NodeSLO host applications: (name, cgroup dir)
        self.numa_zones = read_numa_zones(sys_root)  # the NUMA topology does not change while we run
        self.published = 0
        self.last_round_ms: int | None = None
        self.on_round = []
        log.info("cgroup layout", extra={"root": str(self.layout.root), "version": self.layout.version,
                                         "driver": self.layout.driver, "node": self.node})

    async def refresh(self) -> None:
        cap = alloc = None
        if self.cluster is not None:
            try:
                self.node_record = await self.cluster.get_node(self.node)
                self.pod_records = [p for p in await self.cluster.list_pods(node_name=self.node)
                                    if p.phase in ("Running", "Pending") and p.deletion_ms is None]
                self.pods = [PodInfo.from_record(p) for p in self.pod_records]
            except Exception as exc:  # noqa: BLE001 - the API being away must not stop the measuring
                log.warning("cluster read failed; keeping the last pod list", extra={"error": repr(exc)})
            if self.node_record is not None:
                cap, alloc = self.node_record.capacity_resources(), self.node_record.allocatable_resources()
                self.node_records = {self.node: self.node_record}
        if cap is None:
            cap = Resources(self.proc.cpu_count() * 1000, memory_total_bytes(self.proc.meminfo()))
            alloc = cap
        self.reporter.set_nodes({self.node: (cap, alloc)})
        self.reporter.set_numa_zones(self.node, self.numa_zones)
        self.reporter.set_pods({self.node: self.pods})
        NODES.labels(self.MODE).set(1)

    def collect(self, wall_ms: int, t_ns: int | None = None) -> NodeRound:
        r = self.collector.collect(self.pods, time.monotonic_ns() if t_ns is None else t_ns, self.host_apps)
        self.reporter.record(wall_ms, {self.node: r})
        self.last_round_ms = wall_ms
        ROUNDS.labels(self.MODE).inc()
        NODE_SAMPLES.labels(self.MODE).inc()
        return r

    async def step(self, wall_ms: int) -> list[tuple[str, Message]]:
        started = time.perf_counter()
        r = self.collect(wall_ms)
        for hook in self.on_round:
            await hook(wall_ms, {self.node: r})
        ROUND_SECONDS.labels(self.MODE).observe(time.perf_counter() - started)
        return self.reporter.due(wall_ms)

    async def run(self, stopping: asyncio.Event) -> None:
        interval = self.settings.collect_interval_s
        await self.refresh()
        last_refresh = time.monotonic()
        next_at = time.monotonic()
        while not stopping.is_set():
            if time.monotonic() - last_refresh >= self.settings.pod_refresh_s:
                await self.refresh()
                last_refresh = time.monotonic()
            out = await self.step(int(time.time() * 1000))
            if out:
                await self.publish(out)
                self.published += len(out)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay < 0:  # overran: start the grid again instead of bursting
                next_at, delay = time.monotonic(), 0
            try:
                await asyncio.wait_for(stopping.wait(), timeout=delay)
            except TimeoutError:
                pass
