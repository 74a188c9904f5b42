"""Build the core's plain inputs from cluster records and NodeMetrics."""

from __future__ import annotations

from koordcommon.records import NodeRecord, PodRecord
from koordcommon.resources import Resources, sum_resources
from koordcommon.schemas import NodeMetric

from .core.evictable import non_evictable_reason
from .core.lownodeload import NodeState, PodState

ANNOTATION_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def workload_key(pod: PodRecord) -> str:
    owner = pod.controller
    if owner is None:
        return f"{pod.namespace}/Pod/{pod.name}"
    name = owner.name
    if owner.kind == "ReplicaSet" and "-" in name:
        name = name.rsplit("-", 1)[0]  # the Deployment behind "<deployment>-<hash>"
        return f"{pod.namespace}/Deployment/{name}"
    return f"{pod.namespace}/{owner.kind}/{name}"


def node_states(
    nodes: list[NodeRecord], pods: list[PodRecord], metrics: dict[str, NodeMetric], now_ms: int, expiration_s: int
) -> list[NodeState]:
    requested: dict[str, list[Resources]] = {}
    for p in pods:
        if p.node_name and p.is_active:
            requested.setdefault(p.node_name, []).append(p.request_resources())
    out = []
    for n in nodes:
        m = metrics.get(n.name)
        fresh = m is not None and now_ms - m.ts < expiration_s * 1000
        out.append(
            NodeState(
                name=n.name,
                allocatable=n.allocatable_resources(),
                usage=m.node_usage if fresh else None,
                requested=sum_resources(requested.get(n.name, [])),
                labels=dict(n.labels),
                schedulable=n.ready and not n.unschedulable,
            )
        )
    return out


def pod_states(pods: list[PodRecord], metrics: dict[str, NodeMetric], evict_local_storage: bool) -> list[PodState]:
    usage: dict[str, Resources] = {}
    for m in metrics.values():
        for pm in m.pods:
            usage[pm.uid] = pm.usage
            usage[f"{pm.namespace}/{pm.name}"] = pm.usage
    out = []
    for p in pods:
        if not p.node_name:
            continue
        try:
            cost = int(p.annotations.get(ANNOTATION_DELETION_COST, "0"))
        except ValueError:
            cost = 0
        out.append(
            PodState(
                namespace=p.namespace,
                name=p.name,
                uid=p.uid,
                node=p.node_name,
                workload=workload_key(p),
                priority_class=p.priority_class,
                priority=p.priority or 0,
                kube_qos=p.computed_kube_qos(),
                qos=p.qos,
                requests=p.request_resources(),
                usage=usage.get(p.uid) or usage.get(p.key),
                created_ms=p.created_ms,
                non_evictable=non_evictable_reason(p, evict_local_storage),
                deletion_cost=cost,
            )
        )
    return out


def unavailable_by_workload(pods: list[PodRecord]) -> dict[str, int]:
    """Pods of each workload that are not running now (pending replacements count as away)."""
    out: dict[str, int] = {}
    for p in pods:
        if p.owners and p.phase == "Pending":
            k = workload_key(p)
            out[k] = out.get(k, 0) + 1
    return out
