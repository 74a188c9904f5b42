"""One node's in-memory history and the two messages built from it.

`NodeHistory.record` takes one collection round; `sample()` builds the NodeMetricSample
published every report interval (averages over that interval) and `node_metric()` the
NodeMetric status published every 60 s (averages over the aggregate window plus
avg/p50/p90/p95/p99 over 5/10/30 min of the node and of the system; each pod's average).

System usage is computed per round, as koordlet's system collector does:
max(node - sum of the pods and host applications sampled that round, 0) per resource, then
aggregated like any other series (so its average is not the difference of the averages).
The NodeSLO's host applications are reported in the NodeMetric with their average usage over
the aggregate window, priority class and QoS (the slo-controller counts those above batch
as high-priority usage).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from math import isnan

import numpy as np
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import (
    AggregatedUsage,
    ContainerUsage,
    HostApplicationMetric,
    NodeMetric,
    NodeMetricSample,
    NUMAZone,
    Owner,
    PodMetric,
    PodUsage,
)

from .aggregate import WindowStats, percentile_index, to_resources, window_stats
from .pods import PodInfo
from .ring import SlotRing

NODE = "node"
SYSTEM = "system"
NAN2 = (math.nan, math.nan)
NODE_ROWS = np.array([0, 1])
PROD_CLASSES = (PriorityClass.PROD, PriorityClass.NONE)  # made once: read per pod per NodeMetric  # the node ring's columns of NODE and SYSTEM (the order record() pushes them in)

Pair = tuple[float, float]  # (cpu milli-cores, memory bytes); NaN = no value this round


@dataclass(frozen=True)
class HistoryConfig:
    collect_interval_s: float = 1.0
    node_history_s: int = 1800  # longest percentile window
    pod_history_s: int = 1800
    container_history_s: int = 10  # the report interval: containers are only averaged per sample
    # Peak predictor (koordlet prediction/peak_predictor.go): p95 cpu / p98 memory + 10 %;
    # pods younger than the cold start count by request (reclaim nothing).
    safety_margin_percent: int = 10
    cold_start_s: int = 24 * 3600

    def rows(self, seconds: float) -> int:
        return max(math.ceil(seconds / self.collect_interval_s) + 1, 2)


def _identity(uid: str, info: PodInfo) -> dict:
    """What a pod's sample and its NodeMetric entry both say about who the pod is."""
    return {
        "uid": uid,
        "namespace": info.namespace,
        "name": info.name,
        "owner": Owner(kind=info.owner_kind, name=info.owner_name) if info.owner_kind else None,
        "qos": info.qos,
        "priority_class": info.priority_class,
        "priority": info.priority,
        "requests": info.requests,
        "limits": info.limits,
    }


class NodeHistory:
    def __init__(self, node: str, config: HistoryConfig | None = None) -> None:
        self.node = node
        self.config = cfg = config or HistoryConfig()
        self.capacity = Resources()
        self.allocatable = Resources()
        self.pods: dict[str, PodInfo] = {}
        self.container_shares: dict[str, list[tuple[str, float, float]]] = {}
        self.node_ring = SlotRing(cfg.rows(cfg.node_history_s), slots=2)
        self.pod_ring = SlotRing(cfg.rows(cfg.pod_history_s), slots=8)
        self.container_ring = SlotRing(cfg.rows(cfg.container_history_s), slots=16)
        self.node_ring.slot_of(NODE)
        self.node_ring.slot_of(SYSTEM)
        self._oom_counts: dict[tuple[str, str], int] = {}
        self.host_apps: dict[str, tuple[PriorityClass, QoSClass]] = {}
        self.host_ring: SlotRing | None = None  # only on a node with host applications
        self.numa_zones: list[NUMAZone] = []  # reported in the NodeMetric (the batch split per NUMA zone)
        self.last_oom_ms: dict[tuple[str, str], int] = {}  # the recommender bumps memory after one

    # -- inputs

    def set_node(self, capacity: Resources, allocatable: Resources) -> None:
        self.capacity, self.allocatable = capacity, allocatable

    def set_pods(self, pods: list[PodInfo], container_shares: dict[str, list[tuple[str, float, float]]] | None = None
                 ) -> None:
        """The pods now on the node; the history of pods that left is dropped.

        `container_shares` (uid -> [(container, cpu share, memory share)]) declares containers whose
        usage is a fixed share of their pod's (the simulated cluster's model): they are derived from
        the pod's averages when a sample is built instead of being collected every round.
        """
        self.pods = {p.uid: p for p in pods}
        shares = container_shares or {}
        self.container_shares = {uid: shares[uid] for uid in self.pods if uid in shares}
        self.pod_ring.retain(self.pods)
        self.container_ring.retain(k for k in self.container_ring.series() if k[0] in self.pods)

    def set_host_apps(self, apps: list[tuple[str, PriorityClass, QoSClass]]) -> None:
        """The NodeSLO host applications (name, priority class, QoS); the history of dropped ones goes."""
        self.host_apps = {name: (prio, qos) for name, prio, qos in apps}
        if self.host_apps and self.host_ring is None:
            self.host_ring = SlotRing(self.config.rows(self.config.pod_history_s), slots=len(self.host_apps))
        if self.host_ring is not None:
            self.host_ring.retain(self.host_apps)

    def record_oom_kills(self, ts_ms: int, counts: dict[tuple[str, str], int]) -> None:
        """A container's OOM-kill counter that grew since the last round had a kill by ts_ms.

        The first reading is only a baseline: kills from before the agent started have no time.
        """
        for key, n in counts.items():
            prev = self._oom_counts.get(key)
            if prev is not None and n > prev:
                self.last_oom_ms[key] = ts_ms
            self._oom_counts[key] = n
        gone = [k for k in self._oom_counts if k[0] not in self.pods]
        for k in gone:
            self._oom_counts.pop(k, None)
            self.last_oom_ms.pop(k, None)

    def record(
        self,
        ts_ms: int,
        node: Pair,
        pods: dict[str, Pair],
        containers: dict[tuple[str, str], Pair] | None = None,
        host_apps: dict[str, Pair] | None = None,
    ) -> None:
        apps = {k: v for k, v in host_apps.items() if k in self.host_apps} if host_apps else {}
        values = [*pods.values(), *apps.values()] if apps else pods.values()
        # NaN (no value this round) adds nothing
        pod_cpu = sum(c for c, _ in values if not isnan(c))
        pod_mem = sum(m for _, m in values if not isnan(m))
        system = (max(node[0] - pod_cpu, 0.0), max(node[1] - pod_mem, 0.0))  # NaN stays NaN
        self.node_ring.push(ts_ms, {NODE: node, SYSTEM: system})
        self.pod_ring.push(ts_ms, pods)
        if containers or self.container_ring.series():  # the sim derives containers from their pod
            self.container_ring.push(ts_ms, containers or {})
        if self.host_ring is not None:
            self.host_ring.push(ts_ms, apps)

    # -- outputs

    def sample(self, now_ms: int, window_s: float, extensions: dict | None = None) -> NodeMetricSample | None:
        """Averages over (now - window, now]; None when the node has no usage in it."""
        since = now_ms - int(window_s * 1000)
        node_stats = self._node_averages(since, now_ms)
        if node_stats is None:
            return None
        pod_avgs = self._averages(self.pod_ring, since, now_ms)
        cont_avgs = self._averages(self.container_ring, since, now_ms)
        for uid, shares in self.container_shares.items():
            usage = pod_avgs.get(uid)
            if usage is not None:
                for cname, cs, ms in shares:
                    cont_avgs[(uid, cname)] = Resources(int(usage.cpu_milli * cs), int(usage.memory_bytes * ms))
        by_pod: dict[str, list[ContainerUsage]] = {}
        for (uid, cname), usage in cont_avgs.items():
            info = self.pods.get(uid)
            spec = next((c for c in info.containers if c.name == cname), None) if info else None
            by_pod.setdefault(uid, []).append(
                ContainerUsage(
                    name=cname,
                    requests=spec.requests if spec else Resources(),
                    limits=spec.limits if spec else Resources(),
                    usage=usage,
                    last_oom_ms=self.last_oom_ms.get((uid, cname)),
                )
            )
        pods = []
        for uid, usage in pod_avgs.items():
            info = self.pods.get(uid)
            if info is None:
                continue
            pods.append(
                PodUsage(
                    **_identity(uid, info),
                    batch_requests=info.batch_requests,
                    usage=usage,
                    containers=sorted(by_pod.get(uid, []), key=lambda c: c.name),
                )
            )
        pods.sort(key=lambda p: (p.namespace, p.name))
        return NodeMetricSample(
            **self._node_part(now_ms, node_stats.avg_rows[0], node_stats.avg_rows[1]),
            window_s=window_s,
            pods=pods,
            extensions=extensions or {},
        )

    def node_metric(
        self,
        now_ms: int,
        aggregate_s: int = 300,
        durations_s: tuple[int, ...] = (300, 600, 1800),
        report_interval_s: int = 60,
    ) -> NodeMetric | None:
        """This node's NodeMetric at now_ms (see `node_metrics`); None when it has no usage in
        the aggregate window."""
        return node_metrics([self], now_ms, aggregate_s, durations_s, report_interval_s)[0]

    def _host_app_metrics(self, since: int, until: int) -> list[HostApplicationMetric]:
        """Each host application with usage in the window: its average, priority class and QoS, by name."""
        if self.host_ring is None:
            return []
        avgs = self._averages(self.host_ring, since, until)
        return [
            HostApplicationMetric(name=name, priority_class=prio, qos=qos, usage=avgs[name])
            for name, (prio, qos) in sorted(self.host_apps.items())
            if name in avgs
        ]

    def prod_prediction(self, now_ms: int) -> tuple[Resources, Resources]:
        """(reclaimable, peak) of the prod pods: request - (p95 cpu, p98 memory) x (1 + margin).

        The percentiles come from the pod history held here (a window, not koordlet's
        decaying histogram); a prod pod younger than the cold start, or without samples,
        counts by its request and reclaims nothing.
        """
        keyed = self._prod_columns()
        ts, values = self.pod_ring.window(now_ms - self.config.pod_history_s * 1000, now_ms)
        return self._prod_sums(now_ms, keyed, *_prod_quantiles(ts, values[:, [c for _, c in keyed], :]))

    def _prod(self) -> list[PodInfo]:
        return [p for p in self.pods.values() if p.priority_class in PROD_CLASSES]

    def _prod_columns(self) -> list[tuple[PodInfo, int]]:
        """The prod pods with a history, and their column in the pod ring."""
        return [(p, self.pod_ring.slot_of(p.uid)) for p in self._prod() if p.uid in self.pod_ring]

    def _prod_sums(self, now_ms: int, keyed: list[tuple[PodInfo, int]], q_cpu: list, q_mem: list
                   ) -> tuple[Resources, Resources]:
        """Sum the prod pods: by their quantiles (`q_cpu` / `q_mem` per keyed pod, NaN: none) or,
        when young or without samples, by request."""
        cfg = self.config
        quantiles = {p.uid: (c, m) for (p, _), c, m in zip(keyed, q_cpu, q_mem, strict=True)}
        reclaim_cpu = reclaim_mem = peak_cpu = peak_mem = 0
        factor = (100 + cfg.safety_margin_percent) / 100
        for p in self._prod():
            c, m = quantiles.get(p.uid, NAN2)
            if now_ms - p.start_ms < cfg.cold_start_s * 1000 or math.isnan(c) or math.isnan(m):
                peak_cpu += p.requests.cpu_milli
                peak_mem += p.requests.memory_bytes
                continue
            pc, pm = int(c * factor), int(m * factor)
            peak_cpu += pc
            peak_mem += pm
            reclaim_cpu += max(p.requests.cpu_milli - pc, 0)
            reclaim_mem += max(p.requests.memory_bytes - pm, 0)
        return Resources(reclaim_cpu, reclaim_mem), Resources(peak_cpu, peak_mem)

    # -- helpers

    def _node_averages(self, since: int, until: int) -> WindowStats | None:
        """Node and system averages over (since, until]; None when the node has no usage in it."""
        ts, values = self.node_ring.window(since, until)
        if not len(ts):
            return None
        stats = window_stats(ts, values, NODE_ROWS, percentiles=False)
        return stats if stats.ok[0] else None

    def _node_part(self, now_ms: int, node_avg, system_avg) -> dict:
        """What the sample and the NodeMetric both say about the node (averages as (cpu, memory))."""
        return {
            "ts": now_ms,
            "node": self.node,
            "capacity": self.capacity,
            "allocatable": self.allocatable,
            "node_usage": to_resources(node_avg),
            "system_usage": to_resources(system_avg),
        }

    def _live_pod_columns(self) -> tuple[list[str], np.ndarray]:
        keys = [uid for uid in self.pods if uid in self.pod_ring]
        return keys, np.array([self.pod_ring.slot_of(k) for k in keys], dtype=np.intp)

    @staticmethod
    def _averages(ring: SlotRing, since: int, until: int) -> dict:
        keys, cols = ring.columns()
        if not keys:
            return {}
        ts, values = ring.window(since, until)
        if not len(ts):
            return {}
        st = window_stats(ts, values, cols, percentiles=False)
        return {k: to_resources(st.avg[i]) for i, k in enumerate(keys) if st.ok[i]}


def _prod_quantiles(ts: np.ndarray, values: np.ndarray) -> tuple[list, list]:
    """(p95 cpu, p98 memory) of each column of `values` (n, k, 2) over its samples, NaN for a
    column without samples of both."""
    k = values.shape[1]
    if not k or not len(ts):
        return [math.nan] * k, [math.nan] * k
    count = (~np.isnan(values)).sum(axis=0)
    ordered = np.sort(values, axis=0)
    i95 = np.minimum(percentile_index(count[:, 0], 0.95), np.maximum(count[:, 0] - 1, 0))
    i98 = np.minimum(percentile_index(count[:, 1], 0.98), np.maximum(count[:, 1] - 1, 0))
    both = (count[:, 0] > 0) & (count[:, 1] > 0)
    cols = np.arange(k)
    q_cpu = np.where(both, ordered[i95, cols, 0], np.nan)
    q_mem = np.where(both, ordered[i98, cols, 1], np.nan)
    return q_cpu.tolist(), q_mem.tolist()


def node_metrics(
    histories: Sequence[NodeHistory],
    now_ms: int,
    aggregate_s: int = 300,
    durations_s: tuple[int, ...] = (300, 600, 1800),
    report_interval_s: int = 60,
) -> list[NodeMetric | None]:
    """The NodeMetric of each history at now_ms (None: no usage in the aggregate window).

    Node and system usage: the average over the aggregate window, and avg/p50/p90/p95/p99 over
    each of `durations_s` (a window covering less than half its duration has none); each pod's
    average over the aggregate window; the prod prediction. Histories whose windows hold the
    same rounds (the nodes one agent samples together) are aggregated as one: their columns are
    stacked and each statistic is one pass over them all, and a node then reads its rows.
    """
    groups: dict[tuple, list[int]] = {}
    windows = []
    longest = max(aggregate_s, *durations_s) * 1000 if durations_s else aggregate_s * 1000
    since = now_ms - aggregate_s * 1000
    rows: dict[tuple, np.ndarray] = {}  # (timeline, since) -> the rows of that window

    def window(ring: SlotRing, since_ms: int) -> tuple[np.ndarray, np.ndarray]:
        # the rings of the histories an agent records together select the same rows: found once
        key = (ring.timeline(), since_ms)
        picked = rows.get(key)
        if picked is None:
            picked = rows[key] = ring.rows(since_ms, now_ms)
        return ring.take(picked)

    for i, h in enumerate(histories):
        node_w = window(h.node_ring, now_ms - longest)
        pod_w = window(h.pod_ring, since)
        prod_w = window(h.pod_ring, now_ms - h.config.pod_history_s * 1000)
        windows.append((node_w, pod_w, prod_w))
        key = (node_w[0].tobytes(), pod_w[0].tobytes(), prod_w[0].tobytes())
        groups.setdefault(key, []).append(i)
    out: list[NodeMetric | None] = [None] * len(histories)
    for members in groups.values():
        _group_metrics([histories[i] for i in members], [windows[i] for i in members], now_ms, aggregate_s,
                       durations_s, report_interval_s, members, out)
    return out


def _group_metrics(hs, windows, now_ms, aggregate_s, durations_s, report_interval_s, members, out) -> None:
    """`node_metrics` for histories whose windows hold the same rounds."""
    (t, _), (tp, _), (tq, _) = windows[0]
    k = len(hs)
    cols2 = np.arange(2 * k)
    stacked = np.concatenate([v[:, NODE_ROWS, :] for (_, v), _, _ in windows], axis=1)  # node i: cols 2i, 2i+1
    in_main = t > now_ms - aggregate_s * 1000
    if not in_main.any():
        return
    main = window_stats(t[in_main], stacked[in_main], cols2, percentiles=False)
    aggs = []
    for d in durations_s:
        inside = t > now_ms - d * 1000
        aggs.append((d, window_stats(t[inside], stacked[inside], cols2, duration_ms=d * 1000)))
    # pods: every node's live columns side by side, averaged in one pass
    live = [h._live_pod_columns() for h in hs]
    offsets = np.cumsum([0] + [len(keys) for keys, _ in live])
    pod_avg = None
    if offsets[-1] and len(tp):
        pods_v = np.concatenate([v[:, cols, :] for (_, (_, v), _), (_, cols) in zip(windows, live, strict=True)], axis=1)
        pod_avg = window_stats(tp, pods_v, np.arange(offsets[-1]), percentiles=False)
    prod = [h._prod_columns() for h in hs]
    prod_off = np.cumsum([0] + [len(c) for c in prod])
    prod_v = np.concatenate([v[:, [c for _, c in keyed], :] for (_, _, (_, v)), keyed in zip(windows, prod, strict=True)],
                            axis=1)
    q_cpu, q_mem = _prod_quantiles(tq, prod_v)
    since = now_ms - aggregate_s * 1000
    for j, h in enumerate(hs):
        if not main.ok[2 * j]:
            continue
        pods: list[PodMetric] = []
        keys = live[j][0]
        for i, uid in enumerate(keys):  # a pod's average only: Koordinator's PodMetricInfo has no percentiles
            col = offsets[j] + i
            if pod_avg is not None and pod_avg.ok[col]:
                pods.append(PodMetric(**_identity(uid, h.pods[uid]), usage=to_resources(pod_avg.avg_rows[col])))
        pods.sort(key=lambda p: (p.namespace, p.name))
        lo, hi = prod_off[j], prod_off[j + 1]
        reclaimable, peak = h._prod_sums(now_ms, prod[j], q_cpu[lo:hi], q_mem[lo:hi])
        out[members[j]] = NodeMetric(
            **h._node_part(now_ms, main.avg_rows[2 * j], main.avg_rows[2 * j + 1]),
            aggregate_duration_s=aggregate_s,
            report_interval_s=report_interval_s,
            aggregated_node_usages=[_aggregated(st, 2 * j, d) for d, st in aggs],
            aggregated_system_usages=[_aggregated(st, 2 * j + 1, d) for d, st in aggs],
            pods=pods,
            host_applications=h._host_app_metrics(since, now_ms),
            prod_reclaimable=reclaimable,
            prod_peak=peak,
            numa_zones=h.numa_zones,
        )


def _aggregated(stats, row: int, duration_s: int) -> AggregatedUsage:
    if not len(stats.ok) or not stats.ok[row] or not stats.pct:
        return AggregatedUsage(duration_s=duration_s)
    return AggregatedUsage(
        duration_s=duration_s,
        avg=to_resources(stats.avg_rows[row]),
        **{name: to_resources(rows[row]) for name, rows in stats.pct_rows.items()},
    )
