"""What the overcommit rules see of one node: the node, its pods, its latest NodeMetric, the time.

Records and bus messages are boiled down once, when they arrive, into plain integers
(`PodLoad`, `MetricView`), so a full recompute over every node is a tight loop over ints.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from koordcommon import resources as rn
from koordcommon.cpus import CPUListError, parse_cpuset
from koordcommon.model import DEFAULT_PRIORITY_VALUE, PriorityClass, QoSClass
from koordcommon.quantity import QuantityError, parse_resource_list
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.schemas import NodeMetric

if TYPE_CHECKING:
    from .peak import UsageMoments

ANNOTATION_NODE_RESERVATION = "node.koordinator.sh/reservation"
# koord-scheduler's allocation result: `numaNodeResources[].node` are the NUMA nodes a pod runs on
ANNOTATION_RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"
ACTIVE_PHASES = frozenset(("Running", "Pending"))
_BATCH_VALUE = DEFAULT_PRIORITY_VALUE[PriorityClass.BATCH]
_MID_VALUE = DEFAULT_PRIORITY_VALUE[PriorityClass.MID]
_NOT_HP = (PriorityClass.BATCH, PriorityClass.FREE)


@dataclass(frozen=True, slots=True)
class PodLoad:
    """A pod as the overcommit rules count it."""

    key: str  # namespace/name: how Koordinator matches pods to their metrics
    cpu_request: int  # milli-cores, Kubernetes PodRequests semantics
    memory_request: int
    active: bool  # Running or Pending
    hp: bool  # not batch/free (GetPodPriorityClassWithDefault): counted against batch
    prod: bool  # not mid/batch/free: counted as prod allocated for mid
    lse: bool  # LSE pods do not lend their CPU
    numa_nodes: tuple[int, ...] = ()  # the NUMA nodes koord-scheduler bound it to; () = all of them

    @classmethod
    def from_record(cls, pod: PodRecord) -> PodLoad:
        req = pod.requests()
        pc = pod.priority_class
        status = pod.annotations.get(ANNOTATION_RESOURCE_STATUS) if pod.annotations else None
        return cls(
            key=pod.key,
            cpu_request=int(req.get(rn.CPU, 0)),
            memory_request=int(req.get(rn.MEMORY, 0)),
            active=pod.phase in ACTIVE_PHASES,
            hp=pc not in _NOT_HP,
            prod=pc in (PriorityClass.PROD, PriorityClass.NONE),
            lse=pod.qos is QoSClass.LSE,
            numa_nodes=_numa_nodes(status) if status else (),
        )


@lru_cache(maxsize=4096)
def _numa_nodes(raw: str) -> tuple[int, ...]:
    """`numaNodeResources[].node` of a resource-status annotation, in order; () when unusable."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return ()
    entries = doc.get("numaNodeResources") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return ()
    return tuple(e["node"] for e in entries
                 if isinstance(e, dict) and isinstance(e.get("node"), int) and not isinstance(e["node"], bool))


@dataclass(frozen=True, slots=True)
class MetricView:
    """The parts of a NodeMetric the rules read, as ints."""

    update_ms: int | None
    node_usage: tuple[int, int] | None  # None when the metric lacks cpu or memory
    system_usage: tuple[int, int] = (0, 0)
    pods: dict[str, tuple[int, int, bool]] | None = None  # key -> (cpu, memory, hp by its own priority)
    host_hp_usage: tuple[int, int] = (0, 0)  # host applications above batch (prod, mid)
    host_prod_usage: tuple[int, int] = (0, 0)  # host applications above mid (prod)
    prod_reclaimable: tuple[int, int] | None = None
    prod_peak: tuple[int, int] | None = None  # the node agent's prod peak prediction (`predict` policy)
    zones: tuple[tuple[str, int, int], ...] = ()  # NUMA zones: (name, allocatable cpu, allocatable memory)

    @classmethod
    def from_message(cls, m: NodeMetric) -> MetricView:
        pods = {
            f"{p.namespace}/{p.name}": (p.usage.cpu_milli, p.usage.memory_bytes, p.priority_class not in _NOT_HP)
            for p in m.pods
        }
        hp_cpu = hp_mem = prod_cpu = prod_mem = 0
        for app in m.host_applications:
            value = DEFAULT_PRIORITY_VALUE.get(app.priority_class, 0)
            if value > _BATCH_VALUE:
                hp_cpu += app.usage.cpu_milli
                hp_mem += app.usage.memory_bytes
            if value > _MID_VALUE:
                prod_cpu += app.usage.cpu_milli
                prod_mem += app.usage.memory_bytes
        pr, pk = m.prod_reclaimable, m.prod_peak
        return cls(
            update_ms=m.update_time_ms,
            node_usage=(m.node_usage.cpu_milli, m.node_usage.memory_bytes),
            system_usage=(m.system_usage.cpu_milli, m.system_usage.memory_bytes),
            pods=pods,
            host_hp_usage=(hp_cpu, hp_mem),
            host_prod_usage=(prod_cpu, prod_mem),
            prod_reclaimable=None if pr is None else (pr.cpu_milli, pr.memory_bytes),
            prod_peak=None if pk is None else (pk.cpu_milli, pk.memory_bytes),
            zones=tuple((z.name, z.allocatable.cpu_milli, z.allocatable.memory_bytes) for z in m.numa_zones),
        )


@dataclass(frozen=True, slots=True)
class PodTotals:
    """HP sums of one pass over a node's pods and metrics (Koordinator's batch inputs, plus mid's)."""

    hp_request: tuple[int, int]
    hp_used: tuple[int, int]
    hp_max_used_request: tuple[int, int]
    prod_request: tuple[int, int]
    pods_without_metric: int
    dangling_metrics: int


def pod_totals(pods: Sequence[PodLoad], metric: MetricView | None) -> PodTotals:
    usage = (metric.pods if metric is not None else None) or {}
    req_c = req_m = used_c = used_m = mur_c = mur_m = prod_c = prod_m = 0
    matched = no_metric = 0
    for p in pods:
        m = usage.get(p.key)
        if m is not None:
            matched += 1  # a listed pod's metric is never dangling, whatever its phase
        if not p.active:
            continue
        if p.prod:
            prod_c += p.cpu_request
            prod_m += p.memory_request
        if not p.hp:
            continue
        rc, rm = p.cpu_request, p.memory_request
        req_c += rc
        req_m += rm
        if m is None:
            # QUIRK kept from Koordinator: counted by request in hp_used but left out of
            # hp_max_used_request at node level.
            used_c += rc
            used_m += rm
            no_metric += 1
            continue
        uc, um = m[0], m[1]
        used_c += rc if p.lse else uc  # LSE pods do not lend CPU
        used_m += um
        # conditional expressions, not max(): this loop runs for every pod of every node
        mur_c += rc if rc > uc else uc  # noqa: FURB136
        mur_m += rm if rm > um else um  # noqa: FURB136
    dangling = 0
    if matched < len(usage):
        keys = {p.key for p in pods}
        for key, (uc, um, hp) in usage.items():
            if key in keys:
                continue
            dangling += 1
            if hp:  # a metric without its pod counts by its own priority
                used_c += uc
                used_m += um
                mur_c += uc
                mur_m += um
    return PodTotals((req_c, req_m), (used_c, used_m), (mur_c, mur_m), (prod_c, prod_m), no_metric, dangling)


def hp_pods(pods: Sequence[PodLoad], metric: MetricView | None) -> list[dict]:
    """Each active HP pod's part of the HP term, as `pod_totals` counts it: by usage when its
    metric is there (CPU by request for LSE), by request when not; then HP metrics without
    their pod. For explanations only: the sums stay in `pod_totals`."""
    usage = (metric.pods if metric is not None else None) or {}
    out = []
    for p in pods:
        if not (p.active and p.hp):
            continue
        m = usage.get(p.key)
        used = (p.cpu_request, p.memory_request) if m is None else (p.cpu_request if p.lse else m[0], m[1])
        out.append({"pod": p.key, "countedBy": "request" if m is None else "usage", "used": list(used),
                    "request": [p.cpu_request, p.memory_request]})
    keys = {p.key for p in pods}
    for key, (uc, um, hp) in usage.items():
        if hp and key not in keys:
            out.append({"pod": key, "countedBy": "metricWithoutPod", "used": [uc, um], "request": [0, 0]})
    return out


@lru_cache(maxsize=4096)
def _annotation_reserved(raw: str) -> tuple[int, int] | None:
    """`node.koordinator.sh/reservation` -> (cpu milli, memory bytes); None when unusable."""
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            return None
        res = parse_resource_list(doc.get("resources") or {})
    except (ValueError, QuantityError):
        return None
    cpu, mem = res.get(rn.CPU, 0), res.get(rn.MEMORY, 0)
    cpus = doc.get("reservedCPUs")
    if isinstance(cpus, str) and cpus.strip():
        n = cpuset_size(cpus)
        if n is not None:
            cpu = n * 1000  # reservedCPUs overrides resources.cpu
    return cpu, mem


def cpuset_size(text: str) -> int | None:
    """Number of CPUs in a Linux cpuset list such as `0-3,8`; None when malformed."""
    try:
        return len(parse_cpuset(text))
    except CPUListError:
        return None


@dataclass(slots=True)
class NodeSnapshot:
    node: NodeRecord
    pods: Sequence[PodLoad]
    metric: MetricView | None
    now_ms: int
    degrade_after_ms: int | None = None  # overrides the strategy's degradeTimeMinutes (tests, fast sims)
    hp_history: UsageMoments | None = None  # peak.UsageMoments of the node's HP usage (the `predict` policy)
    _totals: PodTotals | None = None
    _reserved: tuple[int, int] | None = None

    @classmethod
    def build(
        cls,
        node: NodeRecord,
        pods: Iterable[PodRecord],
        metric: NodeMetric | None,
        now_ms: int,
        degrade_after_ms: int | None = None,
    ) -> NodeSnapshot:
        return cls(
            node,
            [PodLoad.from_record(p) for p in pods],
            None if metric is None else MetricView.from_message(metric),
            now_ms,
            degrade_after_ms,
        )

    @property
    def name(self) -> str:
        return self.node.name

    def totals(self) -> PodTotals:
        if self._totals is None:
            self._totals = pod_totals(self.pods, self.metric)
        return self._totals

    def capacity(self) -> tuple[int, int]:
        cap = self.node.capacity
        return cap.get(rn.CPU, 0), cap.get(rn.MEMORY, 0)

    def kubelet_reserved(self) -> tuple[int, int]:
        cap, alloc = self.node.capacity, self.node.allocatable
        return (
            max(cap.get(rn.CPU, 0) - alloc.get(rn.CPU, 0), 0),
            max(cap.get(rn.MEMORY, 0) - alloc.get(rn.MEMORY, 0), 0),
        )

    def node_reserved(self) -> tuple[int, int]:
        """max(kubelet reserved, the node.koordinator.sh/reservation annotation), per resource."""
        if self._reserved is None:
            self._reserved = self._node_reserved()
        return self._reserved

    def _node_reserved(self) -> tuple[int, int]:
        kc, km = self.kubelet_reserved()
        raw = self.node.annotations.get(ANNOTATION_NODE_RESERVATION) if self.node.annotations else None
        if raw:
            ann = _annotation_reserved(raw)
            if ann is not None:
                return max(kc, ann[0]), max(km, ann[1])
        return kc, km

    def metric_stale(self, degrade_after_ms: int) -> bool:
        """Koordinator's isDegradeNeeded: no metric, no update time, or older than the limit."""
        m = self.metric
        if m is None or m.update_ms is None:
            return True
        limit = self.degrade_after_ms if self.degrade_after_ms is not None else degrade_after_ms
        return self.now_ms > m.update_ms + limit
