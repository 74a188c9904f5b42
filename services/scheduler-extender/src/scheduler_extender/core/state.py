"""Everything the extender knows about the cluster, in memory, so a request never waits on I/O.

Fed by the adapters: the latest NodeMetric and NodeResource per node (bus), nodes, pods and
Reservations (cluster watch), workload usage profiles (recommender). Each change rebuilds the
affected node's `NodeView` and hands it to every plugin (`refresh`), which keeps what it needs
per node; requests are judged by the plugins over those stores.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from koordcommon import resources as rn
from koordcommon.model import is_prod
from koordcommon.quantity import QuantityError, parse_resource_list
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.reservations import ANNOTATION_RESERVE_POD, SUCCEEDED
from koordcommon.resources import ZERO, Resources
from koordcommon.schemas import NodeMetric, NodeResource, NodeTopology
from koordcommon.workload import workload_of

from . import plugins as registry
from . import reservation as rsv
from .estimator import EstimatorArgs, WorkloadProfile, estimate_pod_with_profile, estimate_requests, pod_args
from .framework import AssignedPod, NodeView, Plugin, PodInfo
from .plugins.loadaware import LoadAwareArgs, estimation_deadline
from .plugins.numa import NUMAResourceArgs, assigned_cpus

ANNOTATION_RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"
# Pending pods the verbs judged whose end the watch never showed (e.g. judged for another
# scheduler, or deleted during a watch gap) are let go, oldest first, past this many.
POD_CACHE_MAX = 16_384


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
    numa: NUMAResourceArgs = field(default_factory=NUMAResourceArgs)
    estimator: EstimatorArgs = field(default_factory=EstimatorArgs)
    use_profiles: bool = True
    score_mapping: str = "range"  # range | absolute (see framework.to_extender_scores)
    score_min_span: int = 10
    # After binding a pod (the bind verb), count it on its node until the cluster watch shows it
    # (or this many seconds pass): a burst of pods bound faster than the watch reports them must
    # not all see the same empty node.
    assume_ttl_s: float = 30.0
    # A node name the extender has never heard of (no node, metric or NodeResource) fails the
    # filter; a known node without a NodeMetric passes, as in Koordinator.
    fail_unknown_nodes: bool = True
    plugins: tuple[str, ...] = registry.DEFAULT_ORDER
    plugin_weights: dict[str, int] = field(default_factory=dict)  # overrides of each plugin's score weight


@dataclass(slots=True)
class _Assumed:
    node: str
    expires_ms: int


class ClusterState:
    def __init__(self, config: ExtenderConfig | None = None, clock: Callable[[], int] = wall_ms) -> None:
        self.config = config or ExtenderConfig()
        self.clock = clock
        self.plugins: list[Plugin] = registry.build(self.config.plugins, self.config, self.config.plugin_weights)
        self.rows: dict[str, int] = {}  # node name -> row in every plugin's store
        self.names: list[str] = []  # by row
        self.metrics: dict[str, NodeMetric] = {}
        self.node_resources: dict[str, NodeResource] = {}
        self.topologies: dict[str, NodeTopology] = {}  # the node agents' CPU topology reports
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}  # bound, not terminated, by namespace/name
        self.assigned: dict[str, dict[str, AssignedPod]] = {}
        self.pod_node: dict[str, str] = {}
        self.assumed: dict[str, _Assumed] = {}
        self.reservations: dict[str, rsv.Reservation] = {}
        self.resv_by_node: dict[str, set[str]] = {}
        self.pod_reservation: dict[str, str] = {}
        self.profiles: dict[tuple[str, str, str], WorkloadProfile] = {}
        # The pods the verbs judge, by uid: (resourceVersion, profile epoch, PodInfo). Filter,
        # prioritize and bind of one pod share one derivation, and bind finds the pod by uid. A pod
        # leaves when the watch shows it bound, ended or deleted; the oldest go past POD_CACHE_MAX.
        self._pod_cache: dict[str, tuple[str, int, PodInfo]] = {}
        self._profile_epoch = 0  # moves when a workload profile changes: estimates derived before are stale
        # Nodes whose inputs changed since their rows were last derived: derived again when rows
        # are next read (`rows_of`), so a burst of changes to one node costs one derivation.
        self._dirty: set[str] = set()

    def plugin(self, name: str) -> Plugin | None:
        return next((p for p in self.plugins if p.name == name), None)

    # ------------------------------------------------------------------ nodes by row

    def row(self, name: str) -> int:
        """The row of `name`, created on first use (rows are never reused)."""
        r = self.rows.get(name)
        if r is None:
            r = self.rows[name] = len(self.names)
            self.names.append(name)
        return r

    def rows_of(self, names: list) -> np.ndarray:
        """Rows of `names` in order, -1 for names without a row, every row current. A name that
        is not a string raises TypeError."""
        self.flush()
        try:  # the common case, every name known, in one C-level pass
            return np.fromiter(map(self.rows.__getitem__, names), dtype=np.intp, count=len(names))
        except (KeyError, TypeError):
            pass
        if not all(isinstance(n, str) for n in names):
            raise TypeError("node names must be strings")
        get = self.rows.get
        return np.fromiter((get(n, -1) for n in names), dtype=np.intp, count=len(names))

    # ------------------------------------------------------------------ pods as judged

    def pod_info(self, pod: PodRecord, cache: bool = True) -> PodInfo:
        """The estimate and classes of `pod`, derived once per uid and resourceVersion (the API
        server changes resourceVersion whenever the pod changes: filter and prioritize of one
        pod share the work) and workload profile. `cache=False`: derived, not kept (a pod the
        watch shows bound is not judged by the verbs again)."""
        cacheable = cache and bool(pod.uid and pod.resource_version)
        if cacheable:
            hit = self._pod_cache.pop(pod.uid, None)
            if hit is not None and hit[0] == pod.resource_version and hit[1] == self._profile_epoch:
                self._pod_cache[pod.uid] = hit  # back at the newest end
                return hit[2]
        requests, cls = pod.requests(), pod.priority_class  # each computed once: they are not cheap
        info = PodInfo(
            record=pod,
            estimate=self._estimate(pod, requests, cls),
            is_prod=is_prod(cls),
            request=Resources.from_list(requests),
            batch=rn.batch_of(requests),
            mid=rn.mid_of(requests),
            daemonset=pod.is_daemonset,
            reservation_affinity=rsv.required_reservation(pod) is not None,
        )
        if cacheable:
            if len(self._pod_cache) >= POD_CACHE_MAX:  # pods judged and never seen again: the oldest go
                for uid in list(itertools.islice(self._pod_cache, POD_CACHE_MAX // 4)):
                    del self._pod_cache[uid]
            self._pod_cache[pod.uid] = (pod.resource_version, self._profile_epoch, info)
        return info

    def known_pod_by_uid(self, uid: str) -> PodInfo | None:
        """The PodInfo of the newest version of pod `uid` the verbs judged (the bind verb names a
        pod by uid only), with the estimate of the workload profiles in force now."""
        hit = self._pod_cache.get(uid)
        if hit is None:
            return None
        return hit[2] if hit[1] == self._profile_epoch else self.pod_info(hit[2].record)

    def known_pod_info(self, uid: object, resource_version: object) -> PodInfo | None:
        """The PodInfo already derived for this version of a pod, if any: a request naming it
        need not be parsed again."""
        if isinstance(uid, str) and isinstance(resource_version, str) and uid and resource_version:
            hit = self._pod_cache.get(uid)
            if hit is not None and hit[0] == resource_version and hit[1] == self._profile_epoch:
                return hit[2]
        return None

    def forget_pod(self, uid: str) -> None:
        """The verbs will not judge pod `uid` again (the watch shows it bound, ended or deleted)."""
        self._pod_cache.pop(uid, None)

    def _estimate(self, pod: PodRecord, requests: dict[str, int], cls) -> Resources:
        """The pod's estimated usage: its workload's usage profile when one covers it, else
        Koordinator's default estimator over its summed requests."""
        if self.config.use_profiles and self.profiles:
            profile = self.profiles.get(workload_of(pod))
            if profile is not None:
                return estimate_pod_with_profile(pod, profile, self.config.estimator)
        return estimate_requests(requests, pod.limits(), cls, pod_args(pod, self.config.estimator))

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

    def apply_topology(self, report: NodeTopology) -> bool:
        """Keep the newest CPU topology report per node."""
        old = self.topologies.get(report.node)
        if old is not None and old.ts > report.ts:
            return False
        self.topologies[report.node] = report
        self.refresh(report.node)
        return True

    def apply_node(self, node: NodeRecord) -> None:
        self.nodes[node.name] = node
        self.refresh(node.name)

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.metrics.pop(name, None)
        self.node_resources.pop(name, None)
        self.topologies.pop(name, None)
        if name in self.rows:
            self.refresh(name)

    def apply_pod(self, pod: PodRecord, initial: bool = False) -> None:
        """A pod as the cluster watch shows it. Bound and not terminated: counted on its node.

        `initial` pods come from the first list: their assignment time is their start (or
        creation), not now, so pods that ran for hours are not counted as just placed.
        """
        key = pod.key
        if not pod.node_name or pod.is_terminal:
            if pod.is_terminal or pod.deletion_ms is not None:
                self.forget_pod(pod.uid)
            self.remove_pod(key)
            return
        self.forget_pod(pod.uid)  # bound: kube-scheduler is done with it
        now = self.clock()
        prev_node = self.pod_node.get(key)
        assumed = self.assumed.pop(key, None)
        if prev_node is not None and prev_node != pod.node_name:
            self._drop(key, prev_node)
        old = self.assigned.get(pod.node_name, {}).get(key)
        if pod.scheduled_ms:  # Koordinator dates the assignment by the PodScheduled condition
            assigned_ms = pod.scheduled_ms
        elif old is not None and (not old.assumed or (assumed is not None and assumed.node == pod.node_name)):
            assigned_ms = old.assigned_ms
        elif initial:
            assigned_ms = pod.start_ms or pod.created_ms or now
        else:
            assigned_ms = now
        if assumed is not None and assumed.node != pod.node_name:
            self._drop(key, assumed.node)
        info = self.pod_info(pod, cache=False)
        self.pods[key] = pod
        self.pod_node[key] = pod.node_name
        deadline = estimation_deadline(pod, assigned_ms, self.config.load, self.config.estimator.allow_customize)
        self.assigned.setdefault(pod.node_name, {})[key] = self._assigned(info, assigned_ms, deadline_ms=deadline)
        if key not in self.pod_reservation:
            self._consume_reservation(pod, info)
        self.refresh(pod.node_name)

    @staticmethod
    def _assigned(info: PodInfo, assigned_ms: int, deadline_ms: int | None = None, assumed: bool = False) -> AssignedPod:
        cpuset, cpu_qos, cpu_exclusive = assigned_cpus(info.record)
        return AssignedPod(
            key=info.key,
            estimate=info.estimate,
            assigned_ms=assigned_ms,
            is_prod=info.is_prod,
            requests=info.request,
            batch=info.batch,
            mid=info.mid,
            deadline_ms=deadline_ms,
            assumed=assumed,
            cpuset=cpuset,
            cpu_qos=cpu_qos,
            cpu_exclusive=cpu_exclusive,
        )

    def remove_pod(self, key: str) -> None:
        node = self.pod_node.pop(key, None)
        self.pods.pop(key, None)
        assumed = self.assumed.pop(key, None)
        name = self.pod_reservation.pop(key, None)
        if name is not None and name in self.reservations:
            ap = self.assigned.get(node or "", {}).get(key)
            rsv.release(self.reservations[name], key, ap.requests if ap else ZERO)
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
        if pod.record.annotations.get(ANNOTATION_RESERVE_POD) == "true":
            return
        now = self.clock()
        prev = self.assumed.get(pod.key)
        if prev is not None and prev.node != node:
            self._drop(pod.key, prev.node)
        self.assumed[pod.key] = _Assumed(node, now + int(self.config.assume_ttl_s * 1000))
        self.assigned.setdefault(node, {})[pod.key] = self._assigned(pod, now, assumed=True)
        self.refresh(node)

    def prune(self, now_ms: int | None = None) -> None:
        """Forget assumed placements the watch never confirmed."""
        now = self.clock() if now_ms is None else now_ms
        for key in [k for k, a in self.assumed.items() if a.expires_ms <= now]:
            a = self.assumed.pop(key)
            self._drop(key, a.node)

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
                r.phase = SUCCEEDED
            self._unindex(old)
            if old.node and old.node != r.node:
                self.refresh(old.node)
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
        ap = self.assigned.get(self.pod_node.get(key) or "", {}).get(key)
        return ap.requests if ap else None

    def _consume_reservation(self, pod: PodRecord, info: PodInfo) -> None:
        now = self.clock()
        candidates = [r for r in self.node_reservations(pod.node_name or "") if r.active(now) and r.matches(pod)]
        if not candidates:
            return
        r = min(candidates, key=lambda r: (r.order, r.name))
        rsv.consume(r, pod.key, info.request)
        self.pod_reservation[pod.key] = r.name

    def apply_profile(self, key: tuple[str, str, str], profile: WorkloadProfile | None) -> None:
        if profile is None:
            if self.profiles.pop(key, None) is None:
                return  # a workload never profiled here was withdrawn (or had no usable profile)
        else:
            self.profiles[key] = profile
        self._profile_epoch += 1  # estimates of that workload's pods change: derived again when next asked

    # ------------------------------------------------------------------ node views

    def allocatable(self, node: str) -> Resources:
        """EstimateNode: the node's allocatable, raw-allocatable annotation overriding it."""
        rec = self.nodes.get(node)
        if rec is not None and rec.allocatable:
            alloc = dict(rec.allocatable)
            alloc.update(_raw_allocatable(rec.annotations.get(ANNOTATION_RAW_ALLOCATABLE)))
            return Resources.from_list(alloc)
        m = self.metrics.get(node)
        return m.allocatable if m is not None else ZERO

    def node_reservations(self, node: str) -> list[rsv.Reservation]:
        return [self.reservations[n] for n in self.resv_by_node.get(node, ()) if n in self.reservations]

    def view(self, node: str, without: Iterable[str] = ()) -> NodeView:
        """The node as plugins see it; `without`: pod keys to leave out (preemption's victims),
        whose reported usage is then taken off the node's."""
        pods = self.assigned.get(node, {})
        gone = set(without)
        departed = ZERO
        metric = self.metrics.get(node)
        if gone:
            if metric is not None:
                for pm in metric.pods:
                    if f"{pm.namespace}/{pm.name}" in gone:
                        departed = departed + pm.usage
            kept = [p for k, p in pods.items() if k not in gone]
        else:
            kept = list(pods.values())
        return NodeView(
            name=node,
            record=self.nodes.get(node),
            metric=metric,
            node_resource=self.node_resources.get(node),
            pods=kept,
            allocatable=self.allocatable(node),
            reservations=self.node_reservations(node),
            now_ms=self.clock(),
            departed_usage=departed,
            topology=self.topologies.get(node),
        )

    def apply_many(self, nodes=(), pods=(), reservations=(), initial: bool = True) -> None:
        """A first list of the cluster (each touched node is derived once, when next read)."""
        for n in nodes:
            self.apply_node(n)
        for p in pods:
            self.apply_pod(p, initial=initial)
        for obj in reservations:
            self.apply_reservation(obj)

    def refresh(self, node: str) -> None:
        """The node's inputs changed: its rows are derived again before they are next read."""
        self.row(node)
        self._dirty.add(node)

    def flush(self) -> None:
        """Derive every changed node's rows in every plugin."""
        while self._dirty:
            node = self._dirty.pop()
            row, view = self.row(node), self.view(node)
            for p in self.plugins:
                p.refresh(row, view)

    def summary(self) -> dict[str, int]:
        known = set(self.nodes) | set(self.metrics) | set(self.node_resources)
        return {
            "nodes": len(known),
            "metrics": len(self.metrics),
            "pods": len(self.pods),
            "assumed": len(self.assumed),
            "reservations": len(self.reservations),
            "topologies": len(self.topologies),
            "profiles": len(self.profiles),
        }
