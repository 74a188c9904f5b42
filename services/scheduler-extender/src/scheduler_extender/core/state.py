"""Everything the extender knows about the cluster, in memory, so a request never waits on I/O.

Fed by the adapters: the latest NodeMetric and NodeResource per node (bus), nodes, pods and
Reservations (cluster watch), workload usage profiles (recommender). Each change rewrites the
affected node's row of the `NodeTable`; requests read the table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from koordcommon.model import LABEL_PRIORITY_CLASS, LABEL_QOS_CLASS, PriorityClass
from koordcommon.quantity import QuantityError, parse_resource_list
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.resources import ZERO, Resources, sum_resources
from koordcommon.schemas import NodeMetric, NodeResource

from . import reservation as rsv
from .batchfit import batch_names, batch_request
from .candidates import RecentCandidates
from .estimator import (
    EstimatorArgs,
    WorkloadProfile,
    estimate_pod_with_profile,
    estimate_requests,
    workload_key,
)
from .loadaware import (
    ANNOTATION_USAGE_THRESHOLDS,
    AssignedPod,
    LoadAwareArgs,
    derive_row,
    node_load,
    node_thresholds,
    shift_row,
    write_load,
)
from .table import NodeTable
from .wire import FailedNodesEncoder, HostPriorityEncoder

ANNOTATION_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"


def _raw_allocatable(raw: str | None) -> dict[str, int]:
    """Koordinator's node.koordinator.sh/raw-allocatable; a malformed one overrides nothing."""
    if not raw:
        return {}
    try:
        return parse_resource_list(orjson.loads(raw))
    except (orjson.JSONDecodeError, QuantityError, TypeError):
        return {}


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    load: LoadAwareArgs = field(default_factory=LoadAwareArgs)
    estimator: EstimatorArgs = field(default_factory=EstimatorArgs)
    use_profiles: bool = True
    score_mapping: str = "range"  # range | absolute (see loadaware.to_extender_scores)
    score_min_span: int = 10
    # After answering prioritize, count the pod on the best-scored node until the cluster watch
    # shows where it was bound (or this many seconds pass): a burst of pods scheduled faster
    # than the watch reports bindings must not all see the same empty node.
    assume_ttl_s: float = 30.0
    # A node name the extender has never heard of (no node, metric or NodeResource) fails the
    # filter; a known node without a NodeMetric passes, as in Koordinator.
    fail_unknown_nodes: bool = True


@dataclass(slots=True)
class PodInfo:
    """A pod as the extender judges it: the record plus the derived numbers."""

    record: PodRecord
    estimate: Resources
    is_prod: bool
    request: Resources  # native cpu/memory
    batch: Resources
    daemonset: bool
    reservation_affinity: bool = False  # the pod may only run on a matching reservation
    reasons: dict[int, str] | None = None  # filter code -> reason, filled on first use
    # What the load-aware and batch verdicts over a node depend on: pods of one shape (a
    # ReplicaSet's burst) get the same verdicts. None: verdicts that also depend on who the pod is.
    shape: tuple | None = None

    @property
    def key(self) -> str:
        return self.record.key


@dataclass(slots=True)
class _Assumed:
    node: str
    expires_ms: int


class ClusterState:
    def __init__(self, config: ExtenderConfig | None = None, clock: Callable[[], int] = wall_ms) -> None:
        self.config = config or ExtenderConfig()
        self.clock = clock
        self.table = NodeTable()
        self.recent = RecentCandidates()  # node lists seen lately, with the verdicts over them
        self.host_priorities = HostPriorityEncoder()
        self.failed_nodes = FailedNodesEncoder()
        self.metrics: dict[str, NodeMetric] = {}
        self.node_resources: dict[str, NodeResource] = {}
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}  # bound, not terminated, by namespace/name
        self.assigned: dict[str, dict[str, AssignedPod]] = {}
        self.pod_node: dict[str, str] = {}
        self.assumed: dict[str, _Assumed] = {}
        self.reservations: dict[str, rsv.Reservation] = {}
        self.resv_by_node: dict[str, set[str]] = {}
        self.pod_reservation: dict[str, str] = {}
        self.profiles: dict[tuple[str, str, str], WorkloadProfile] = {}
        self._pod_cache: dict[tuple[str, str], PodInfo] = {}
        self._derived: dict[tuple, tuple] = {}  # PodInfo's numbers by what they are derived from
        self._deferred: set[str] | None = None
        self._raw_pods: dict[bytes, PodInfo] = {}  # by the Pod's JSON as kube-scheduler sent it
        self._reported: dict[str, tuple[NodeMetric, frozenset[str]]] = {}  # pod keys each metric reports

    # ------------------------------------------------------------------ pods as judged

    def pod_info_json(self, obj: dict[str, Any], parse: Callable[[dict[str, Any]], PodRecord]) -> PodInfo:
        """PodInfo of a Pod as the scheduler sent it; filter and prioritize of one pod parse it once.

        Memoised per (uid, resourceVersion): the API server changes resourceVersion whenever the
        pod changes, so a hit is the same pod.
        """
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            uid, rv = meta.get("uid"), meta.get("resourceVersion")
            if isinstance(uid, str) and isinstance(rv, str) and uid and rv:
                hit = self._pod_cache.get((uid, rv))
                if hit is not None:
                    return hit
        return self.pod_info(parse(obj))

    def pod_info_raw(self, raw: bytes, parse: Callable[[bytes], PodRecord]) -> PodInfo:
        """PodInfo of a Pod by its JSON bytes: prioritize repeats the filter's pod byte for byte."""
        hit = self._raw_pods.get(raw)
        if hit is None:
            hit = self.pod_info(parse(raw))
            if len(self._raw_pods) >= 256:
                self._raw_pods.clear()
            self._raw_pods[raw] = hit
        return hit

    def pod_info(self, pod: PodRecord) -> PodInfo:
        """The estimate and classes of `pod` (memoised per uid and resourceVersion)."""
        cache_key = (pod.uid, pod.resource_version)
        if pod.uid and pod.resource_version:
            hit = self._pod_cache.get(cache_key)
            if hit is not None:
                return hit
        inputs = self._inputs(pod)
        derived = self._derived.get(inputs)
        if derived is None:
            derived = self._derive(pod)
            if len(self._derived) >= 1024:
                self._derived.clear()
            self._derived[inputs] = derived
        *numbers, shape = derived
        info = PodInfo(pod, *numbers, shape=shape)
        if pod.uid and pod.resource_version:
            if len(self._pod_cache) > 4096:
                self._pod_cache.clear()
            self._pod_cache[cache_key] = info
        return info

    def _inputs(self, pod: PodRecord) -> tuple:
        """Everything `_derive` reads of a pod, which pods of one template share: the pods of a
        burst are derived once."""

        def resources(containers: list) -> tuple:
            return tuple((tuple(c.requests.items()), tuple(c.limits.items())) for c in containers)

        inputs = (
            resources(pod.containers),
            resources(pod.init_containers),
            tuple(pod.overhead.items()),
            pod.priority,
            pod.labels.get(LABEL_PRIORITY_CLASS),
            pod.labels.get(LABEL_QOS_CLASS),
            pod.kube_qos,
            pod.is_daemonset,
            pod.annotations.get(rsv.ANNOTATION_RESERVATION_AFFINITY),
        )
        if self.config.use_profiles and self.profiles:  # the profile is looked up by workload and container
            inputs += (workload_key(pod), tuple(c.name for c in pod.containers))
        return inputs

    def _derive(self, pod: PodRecord) -> tuple:
        """PodInfo's fields after the record, in order, then its shape."""
        requests, cls = pod.requests(), pod.priority_class  # each computed once: they are not cheap
        estimate, batch = self._estimate(pod, requests, cls), batch_request(requests)
        is_prod, daemonset = cls is PriorityClass.PROD, pod.is_daemonset
        affinity = rsv.required_reservation(pod) is not None
        shape = None
        if not affinity:
            names = batch_names(pod) if not batch.is_zero() else None  # they name the batch reasons
            shape = (estimate, is_prod, batch, daemonset, names)
        return (estimate, is_prod, Resources.from_list(requests), batch, daemonset, affinity, shape)

    def _estimate(self, pod: PodRecord, requests: dict[str, int], cls: PriorityClass) -> Resources:
        """The pod's estimated usage, given its summed requests and priority class."""
        if self.config.use_profiles and self.profiles:
            key = workload_key(pod)
            profile = self.profiles.get(key) if key else None
            if profile is not None:
                return estimate_pod_with_profile(pod, profile, self.config.estimator)
        return estimate_requests(requests, pod.limits(), cls, self.config.estimator)

    # ------------------------------------------------------------------ feeds

    def apply_metric(self, metric: NodeMetric) -> bool:
        """Keep the newest NodeMetric per node; an older redelivery changes nothing."""
        old = self.metrics.get(metric.node)
        if old is not None and old.update_time_ms > metric.update_time_ms:
            return False
        self.metrics[metric.node] = metric
        self.refresh(metric.node)
        return True

    def apply_node_resource(self, nr: NodeResource) -> bool:
        old = self.node_resources.get(nr.node)
        if old is not None and old.ts > nr.ts:
            return False
        self.node_resources[nr.node] = nr
        self.refresh(nr.node)
        return True

    def apply_node(self, node: NodeRecord) -> None:
        self.nodes[node.name] = node
        self.refresh(node.name)

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.metrics.pop(name, None)
        self.node_resources.pop(name, None)
        if name in self.table.index:
            self.refresh(name)
            self.table.set(self.table.index[name], known=False)

    def apply_pod(self, pod: PodRecord, initial: bool = False) -> None:
        """A pod as the cluster watch shows it. Bound and not terminated: counted on its node.

        `initial` pods come from the first list: their assignment time is their start (or
        creation), not now, so pods that ran for hours are not counted as just placed.
        """
        key = pod.key
        if not pod.node_name or pod.is_terminal:
            self.remove_pod(key)
            return
        now = self.clock()
        prev_node = self.pod_node.get(key)
        assumed = self.assumed.pop(key, None)
        if prev_node is not None and prev_node != pod.node_name:
            self._drop(key, prev_node)
            prev_node = None
        old = self.assigned.get(pod.node_name, {}).get(key)
        if old is not None and (not old.assumed or (assumed is not None and assumed.node == pod.node_name)):
            assigned_ms = old.assigned_ms
        elif initial:
            assigned_ms = pod.start_ms or pod.created_ms or now
        else:
            assigned_ms = now
        if assumed is not None and assumed.node != pod.node_name:
            self._drop(key, assumed.node)
        info = self.pod_info(pod)
        deadline = None
        secs = self.config.load.estimated_seconds_after_pod_scheduled
        if secs:
            deadline = assigned_ms + secs * 1000
        self.pods[key] = pod
        self.pod_node[key] = pod.node_name
        self.assigned.setdefault(pod.node_name, {})[key] = AssignedPod(
            key=key,
            estimate=info.estimate,
            assigned_ms=assigned_ms,
            is_prod=info.is_prod,
            requests=info.request,
            batch=info.batch,
            deadline_ms=deadline,
        )
        if key not in self.pod_reservation:
            self._consume_reservation(pod, info)
        self.refresh(pod.node_name)

    def remove_pod(self, key: str) -> None:
        node = self.pod_node.pop(key, None)
        self.pods.pop(key, None)
        assumed = self.assumed.pop(key, None)
        name = self.pod_reservation.pop(key, None)
        if name is not None and name in self.reservations:
            r = self.reservations[name]
            ap = self.assigned.get(node or "", {}).get(key)
            rsv.release(r, key, ap.requests if ap else ZERO)
        for n in {node, assumed.node if assumed else None} - {None}:
            self._drop(key, n)

    def _drop(self, key: str, node: str) -> None:
        pods = self.assigned.get(node)
        if pods is not None and pods.pop(key, None) is not None:
            self.refresh(node)

    def assume(self, pod: PodInfo, node: str) -> None:
        """Count `pod` on `node` now, until the watch shows its binding or the TTL passes.

        A reservation's placeholder pod is never bound: the Reservation that names its node
        holds the room, so assuming it too would count the room twice. Expired assumptions are
        dropped by `prune`, which the service runs periodically.
        """
        if self.config.assume_ttl_s <= 0 or pod.key in self.pod_node or pod.daemonset:
            return
        if pod.record.annotations.get(rsv.ANNOTATION_RESERVE_POD) == "true":
            return
        now = self.clock()
        prev = self.assumed.get(pod.key)
        if prev is not None and prev.node != node:
            self._move_assumed(pod.key, prev.node, None)
        ap = AssignedPod(
            key=pod.key,
            estimate=pod.estimate,
            assigned_ms=now,
            is_prod=pod.is_prod,
            requests=pod.request,
            batch=pod.batch,
            assumed=True,
        )
        self.assumed[pod.key] = _Assumed(node, now + int(self.config.assume_ttl_s * 1000))
        self._move_assumed(pod.key, node, ap)

    def _move_assumed(self, key: str, node: str, ap: AssignedPod | None) -> None:
        """Add (`ap`) or drop (None) an assumed pod on `node`, adjusting its row in place.

        Scheduling answers place and move assumed pods on the hot path. A pod the node's metric
        does not report adds exactly its estimate to every usage sum (and its batch request),
        so the row is shifted by that instead of recomputed from all the node's pods; anything
        else takes the full refresh.
        """
        pods = self.assigned.setdefault(node, {})
        old = pods.pop(key, None)
        if ap is not None:
            pods[key] = ap
        if (old is not None and not old.assumed) or self._deferred is not None or node not in self.table.index:
            self.refresh(node)
            return
        metric = self.metrics.get(node)
        if metric is not None and key in self._reported_keys(node, metric):
            self.refresh(node)
            return
        delta = prod = batch = ZERO
        if old is not None:
            delta, batch = delta - old.estimate, batch - old.batch
            prod = prod - old.estimate if old.is_prod else prod
        if ap is not None:
            delta, batch = delta + ap.estimate, batch + ap.batch
            prod = prod + ap.estimate if ap.is_prod else prod
        shift_row(self.table, self.table.index[node], delta, prod, batch, self.config.load)

    def _reported_keys(self, node: str, metric: NodeMetric) -> frozenset[str]:
        cached = self._reported.get(node)
        if cached is None or cached[0] is not metric:
            cached = self._reported[node] = (metric, frozenset(f"{pm.namespace}/{pm.name}" for pm in metric.pods))
        return cached[1]

    def prune(self, now_ms: int | None = None) -> None:
        """Forget assumed placements the watch never confirmed; refresh reservation flags."""
        now = self.clock() if now_ms is None else now_ms
        self.table.compact_index()
        for key in [k for k, a in self.assumed.items() if a.expires_ms <= now]:
            a = self.assumed.pop(key)
            self._drop(key, a.node)
        for node, names in self.resv_by_node.items():
            if node in self.table.index:
                active = any(self.reservations[n].active(now) for n in names if n in self.reservations)
                self.table.set(self.table.index[node], has_resv=active)

    def apply_reservation(self, obj: dict[str, Any]) -> rsv.Reservation:
        r = rsv.parse_reservation(obj)
        old = self.reservations.get(r.name)
        if old is not None:
            # Consumption seen by this extender is kept until the object itself reports it.
            for owner in old.current_owners:
                if owner not in r.current_owners and owner in self.pod_reservation:
                    r.current_owners.append(owner)
                    r.allocated = r.allocated + (self._request_of(owner) or ZERO)
            if r.allocate_once and r.current_owners:
                r.phase = "Succeeded"
            self._unindex(old)
        self.reservations[r.name] = r
        if r.node:
            self.resv_by_node.setdefault(r.node, set()).add(r.name)
            self.refresh(r.node)
        return r

    def remove_reservation(self, name: str) -> None:
        r = self.reservations.pop(name, None)
        if r is not None:
            self._unindex(r)
            if r.node:
                self.refresh(r.node)

    def _unindex(self, r: rsv.Reservation) -> None:
        if r.node and r.node in self.resv_by_node:
            self.resv_by_node[r.node].discard(r.name)
            if not self.resv_by_node[r.node]:
                del self.resv_by_node[r.node]

    def _request_of(self, key: str) -> Resources | None:
        node = self.pod_node.get(key)
        ap = self.assigned.get(node or "", {}).get(key)
        return ap.requests if ap else None

    def _consume_reservation(self, pod: PodRecord, info: PodInfo) -> None:
        names = self.resv_by_node.get(pod.node_name or "")
        if not names:
            return
        now = self.clock()
        candidates = [self.reservations[n] for n in names if n in self.reservations]
        candidates = [r for r in candidates if r.active(now) and r.matches(pod)]
        if not candidates:
            return
        r = min(candidates, key=lambda r: (r.order, r.name))
        rsv.consume(r, pod.key, info.request)
        self.pod_reservation[pod.key] = r.name

    def apply_profile(self, key: tuple[str, str, str], profile: WorkloadProfile | None) -> None:
        if profile is None:
            self.profiles.pop(key, None)
        else:
            self.profiles[key] = profile
        self._pod_cache.clear()
        self._raw_pods.clear()
        self._derived.clear()

    # ------------------------------------------------------------------ the table

    def allocatable(self, node: str) -> Resources:
        """EstimateNode: the node's allocatable, raw-allocatable annotation overriding it."""
        rec = self.nodes.get(node)
        if rec is not None and rec.allocatable:
            alloc = dict(rec.allocatable)
            alloc.update(_raw_allocatable(rec.annotations.get(ANNOTATION_RAW_ALLOCATABLE)))
            return Resources.from_list(alloc)
        m = self.metrics.get(node)
        return m.allocatable if m is not None else ZERO

    def requested(self, node: str) -> Resources:
        return sum_resources(p.requests for p in self.assigned.get(node, {}).values())

    def batch_allocatable(self, node: str) -> Resources:
        nr = self.node_resources.get(node)
        if nr is not None:
            return nr.batch or ZERO
        rec = self.nodes.get(node)
        if rec is not None:
            return rec.batch_allocatable() or ZERO
        return ZERO

    def apply_many(self, nodes=(), pods=(), reservations=(), initial: bool = True) -> None:
        """A first list of the cluster: each touched node's row is computed once, at the end."""
        self._deferred = set()
        try:
            for n in nodes:
                self.apply_node(n)
            for p in pods:
                self.apply_pod(p, initial=initial)
            for obj in reservations:
                self.apply_reservation(obj)
        finally:
            touched, self._deferred = self._deferred, None
            for node in touched:
                self.refresh(node)
            self.table.compact_index()

    def refresh(self, node: str) -> None:
        if self._deferred is not None:
            self._deferred.add(node)
            return
        t = self.table
        r = t.row(node)
        rec = self.nodes.get(node)
        metric = self.metrics.get(node)
        pods = self.assigned.get(node, {})
        alloc = self.allocatable(node)
        annotation = None
        if rec is not None and ANNOTATION_USAGE_THRESHOLDS in rec.annotations:
            try:
                annotation = orjson.loads(rec.annotations[ANNOTATION_USAGE_THRESHOLDS])
            except orjson.JSONDecodeError:
                annotation = None
        usage_thr, prod_thr, agg_thr = node_thresholds(
            annotation if isinstance(annotation, dict) else None, self.config.load
        )
        bal = self.batch_allocatable(node)
        breq = sum_resources(p.batch for p in pods.values())
        now = self.clock()
        has_resv = any(
            self.reservations[n].active(now) for n in self.resv_by_node.get(node, ()) if n in self.reservations
        )
        write_load(t, r, node_load(metric, pods.values(), self.config.load))
        t.set(
            r,
            known=rec is not None or metric is not None or node in self.node_resources,
            alloc_cpu=alloc.cpu_milli,
            alloc_mem=alloc.memory_bytes,
            thr_cpu=usage_thr.cpu,
            thr_mem=usage_thr.memory,
            pthr_cpu=prod_thr.cpu,
            pthr_mem=prod_thr.memory,
            athr_cpu=agg_thr.cpu,
            athr_mem=agg_thr.memory,
            has_prod_thr=prod_thr.enabled,
            has_agg_thr=agg_thr.enabled and bool(self.config.load.aggregated.usage_aggregation_type),
            bal_cpu=bal.cpu_milli,
            bal_mem=bal.memory_bytes,
            breq_cpu=breq.cpu_milli,
            breq_mem=breq.memory_bytes,
            has_resv=has_resv,
        )
        derive_row(t, r, self.config.load)

    def node_reservations(self, node: str) -> list[rsv.Reservation]:
        return [self.reservations[n] for n in self.resv_by_node.get(node, ()) if n in self.reservations]

    def summary(self) -> dict[str, int]:
        return {
            "nodes": int(self.table.known[: len(self.table)].sum()),
            "metrics": len(self.metrics),
            "pods": len(self.pods),
            "assumed": len(self.assumed),
            "reservations": len(self.reservations),
            "profiles": len(self.profiles),
        }


def pending_of(state: ClusterState, node: str) -> list[str]:
    """Keys of the node's pods whose estimate is counted on top of its metric (for debugging)."""
    return node_load(state.metrics.get(node), state.assigned.get(node, {}).values(), state.config.load).pending
