"""Cluster adapter: workload resolution through the cluster port and Recommendation objects.

The object follows Koordinator's analysis.koordinator.sh/v1alpha1 Recommendation: spec.target
names the workload, status.recommendResources.containerStatuses carries the target requests;
the bounds and confidence ride along in the same status entries.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from koordcommon import schemas
from koordcommon.cluster.port import ClusterPort
from koordcommon.quantity import format_quantity
from koordcommon.records import OwnerRef, PodRecord
from koordcommon.workload import WorkloadKey, workload_of_owner

from .core.engine import WorkloadResult

log = logging.getLogger("recommender.cluster")

KIND = "Recommendation"
API_VERSION = "analysis.koordinator.sh/v1alpha1"
_WORKLOAD_API = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "ReplicaSet": "apps/v1",
                 "Job": "batch/v1", "CronJob": "batch/v1", "Pod": "v1"}


class WorkloadResolver:
    """(namespace, owner) -> workload, asking the cluster port once per ReplicaSet.

    When the port cannot answer (no cluster, API error) the naming rules of
    `koordcommon.workload` decide; the answer is cached either way (bounded, least recently used out).
    """

    def __init__(self, cluster: ClusterPort | None, cache_size: int = 10_000) -> None:
        self.cluster = cluster
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str, str], WorkloadKey] = OrderedDict()

    async def __call__(self, pod: schemas.PodUsage) -> WorkloadKey:
        kind = pod.owner.kind if pod.owner else ""
        name = pod.owner.name if pod.owner else ""
        if kind != "ReplicaSet" or self.cluster is None:
            return workload_of_owner(pod.namespace, kind, name, pod.name)
        key = (pod.namespace, kind, name)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        resolved = None
        try:
            record = PodRecord(namespace=pod.namespace, name=pod.name, uid=pod.uid, owners=[OwnerRef(kind=kind, name=name)])
            resolved = await self.cluster.resolve_workload(record)
        except Exception as exc:  # noqa: BLE001 - any failure falls back to the naming rule below
            log.warning("workload resolution failed; using the naming rule", extra={"owner": name, "error": str(exc)})
        # A port that only echoes the ReplicaSet back did not know it: the naming rule is better.
        if resolved is not None and resolved == (kind, name):
            resolved = None
        wl = workload_of_owner(pod.namespace, kind, name, pod.name, resolved=resolved)
        self._cache[key] = wl
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return wl


# The pod-template annotation that picks a workload's recommender method (core/methods).
METHOD_ANNOTATION = "analysis.koordinator.sh/recommender"
METHOD_TTL_S = 600.0


class MethodResolver:
    """workload -> the method its pods' annotation names (None: the cluster-wide setting).

    Asked once per workload and then every METHOD_TTL_S, from one of its pods through the
    cluster port; an unknown value is logged and ignored (the cluster-wide method applies), a
    failed lookup keeps the last answer.
    """

    def __init__(self, cluster: ClusterPort | None, known: Iterable[str], cache_size: int = 10_000) -> None:
        self.cluster = cluster
        self.known = frozenset(known)
        self.cache_size = cache_size
        self._cache: OrderedDict[WorkloadKey, tuple[float, str | None]] = OrderedDict()

    async def __call__(self, workload: WorkloadKey, pod: schemas.PodUsage) -> str | None:
        if self.cluster is None:
            return None
        now = time.monotonic()
        hit = self._cache.get(workload)
        if hit is not None and now - hit[0] < METHOD_TTL_S:
            return hit[1]
        method = hit[1] if hit is not None else None
        try:
            record = await self.cluster.get_pod(pod.namespace, pod.name)
        except Exception as exc:  # noqa: BLE001 - a lookup failure keeps the last answer
            log.warning("pod lookup for the recommender annotation failed", extra={"pod": pod.name, "error": str(exc)})
            record = None
        else:
            value = (record.annotations.get(METHOD_ANNOTATION) if record is not None else None) or None
            if value is not None and value not in self.known:
                log.warning(
                    "unknown recommender method in annotation; the cluster-wide method applies",
                    extra={"workload": str(workload), "annotation": METHOD_ANNOTATION, "value": value, "known": sorted(self.known)},
                )
                value = None
            method = value
        self._cache[workload] = (now, method)
        self._cache.move_to_end(workload)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return method


def _quantities(cpu_milli: int, memory_bytes: int) -> dict[str, str]:
    return {"cpu": format_quantity("cpu", cpu_milli), "memory": format_quantity("memory", memory_bytes)}


def object_name(workload: WorkloadKey) -> str:
    return f"{workload.kind.lower()}-{workload.name}"[:253]


def to_object(result: WorkloadResult, now: dt.datetime | None = None) -> dict[str, Any]:
    wl = result.workload
    now = now or dt.datetime.now(dt.UTC)
    statuses = []
    for c in result.containers:
        e = c.estimate
        statuses.append(
            {
                "containerName": c.container,
                "resources": _quantities(e.target.cpu_milli, e.target.memory_bytes),
                "lowerBound": _quantities(e.lower_bound.cpu_milli, e.lower_bound.memory_bytes),
                "upperBound": _quantities(e.upper_bound.cpu_milli, e.upper_bound.memory_bytes),
                "confidence": round(e.confidence, 4),
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": object_name(wl), "namespace": wl.namespace, "labels": {"app.kubernetes.io/managed-by": "koord-recommender"}},
        "spec": {
            "target": {
                "type": "workload",
                "workload": {"apiVersion": _WORKLOAD_API.get(wl.kind, "v1"), "kind": wl.kind, "name": wl.name},
            }
        },
        "status": {
            "recommendResources": {"containerStatuses": statuses},
            "updateTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }


async def apply_objects(cluster: ClusterPort, results: list[WorkloadResult]) -> int:
    for r in results:
        await cluster.apply_custom(KIND, to_object(r))
    return len(results)


async def delete_objects(cluster: ClusterPort, workloads: list[WorkloadKey]) -> int:
    """Delete the Recommendation objects of forgotten workloads (one already gone is no error)."""
    for w in workloads:
        await cluster.delete_custom(KIND, object_name(w), w.namespace)
    return len(workloads)
