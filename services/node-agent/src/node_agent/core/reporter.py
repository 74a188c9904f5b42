"""Many nodes' histories and the schedule of what each publishes when.

Used by both modes: real mode holds one node, sim mode thousands. Time is whatever clock the
mode runs on (simulated epoch ms in sim mode), so the same schedule serves both. A report
is due at every multiple of its interval; a node that joined late starts at the next one.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from koordcommon import subjects
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import Message, NUMAZone

from .messages import HistoryConfig, NodeHistory, Pair, node_metrics
from .pods import PodInfo


def in_shard(node: str, index: int, count: int) -> bool:
    """Stable across processes and restarts (crc32, not Python's salted hash)."""
    return count <= 1 or zlib.crc32(node.encode()) % count == index


@dataclass
class NodeRound:
    """One collection round of one node."""

    node: Pair
    pods: dict[str, Pair] = field(default_factory=dict)
    containers: dict[tuple[str, str], Pair] = field(default_factory=dict)
    extensions: dict | None = None
    oom_kills: dict[tuple[str, str], int] = field(default_factory=dict)  # cumulative, per container
    host_apps: dict[str, Pair] = field(default_factory=dict)  # NodeSLO host application name -> usage


@dataclass(frozen=True)
class ReportConfig:
    report_interval_s: float = 10.0
    nodemetric_interval_s: float = 60.0
    aggregate_window_s: int = 300
    durations_s: tuple[int, ...] = (300, 600, 1800)


class Reporter:
    def __init__(self, history: HistoryConfig, report: ReportConfig, samples: bool = True) -> None:
        self.history_config = history
        self.config = report
        self.samples = samples  # False: NodeMetrics only (a replay has no collector to feed)
        self.nodes: dict[str, NodeHistory] = {}
        self._extensions: dict[str, dict] = {}
        self._next_sample_ms: int | None = None
        self._next_metric_ms: int | None = None

    def set_nodes(self, nodes: dict[str, tuple[Resources, Resources]]) -> None:
        """name -> (capacity, allocatable); nodes not listed are dropped."""
        for name in [n for n in self.nodes if n not in nodes]:
            del self.nodes[name]
            self._extensions.pop(name, None)
        for name, (cap, alloc) in nodes.items():
            h = self.nodes.get(name)
            if h is None:
                h = self.nodes[name] = NodeHistory(name, self.history_config)
            h.set_node(cap, alloc)

    def set_numa_zones(self, node: str, zones: list[NUMAZone]) -> None:
        """The node's NUMA zones, reported in its NodeMetric."""
        h = self.nodes.get(node)
        if h is not None:
            h.numa_zones = list(zones)

    def set_host_apps(self, node: str, apps: list[tuple[str, PriorityClass, QoSClass]]) -> None:
        """The NodeSLO host applications of a node: (name, priority class, QoS) each."""
        h = self.nodes.get(node)
        if h is not None:
            h.set_host_apps(apps)

    def set_pods(self, by_node: dict[str, list[PodInfo]], container_shares: dict | None = None) -> None:
        for name, h in self.nodes.items():
            h.set_pods(by_node.get(name, []), container_shares)

    def record(self, t_ms: int, rounds: dict[str, NodeRound]) -> None:
        for name, r in rounds.items():
            h = self.nodes.get(name)
            if h is None:
                continue
            h.record(t_ms, r.node, r.pods, r.containers, r.host_apps)
            if r.oom_kills:
                h.record_oom_kills(t_ms, r.oom_kills)
            if r.extensions is not None:
                self._extensions[name] = r.extensions

    def due(self, t_ms: int) -> list[tuple[str, Message]]:
        """The messages due at t_ms (samples every report interval, NodeMetric every 60 s)."""
        out: list[tuple[str, Message]] = []
        sample_ms = int(self.config.report_interval_s * 1000)
        metric_ms = int(self.config.nodemetric_interval_s * 1000)
        if self._next_sample_ms is None:
            self._next_sample_ms = (t_ms // sample_ms + 1) * sample_ms
            self._next_metric_ms = (t_ms // metric_ms + 1) * metric_ms
        if t_ms >= self._next_sample_ms:
            self._next_sample_ms = (t_ms // sample_ms + 1) * sample_ms
            for name, h in self.nodes.items() if self.samples else ():
                msg = h.sample(t_ms, self.config.report_interval_s, self._extensions.get(name))
                if msg is not None:
                    out.append((subjects.metrics(name), msg))
        if t_ms >= self._next_metric_ms:
            self._next_metric_ms = (t_ms // metric_ms + 1) * metric_ms
            names = list(self.nodes)
            metrics = node_metrics(
                [self.nodes[n] for n in names], t_ms, self.config.aggregate_window_s, self.config.durations_s,
                int(self.config.nodemetric_interval_s),
            )  # fmt: skip
            out.extend((subjects.nodemetric(name), msg) for name, msg in zip(names, metrics, strict=True) if msg)
        return out

    def node_names(self) -> Iterable[str]:
        return self.nodes.keys()
