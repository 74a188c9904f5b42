"""Reservations for ReservationFirst migrations (scheduling.koordinator.sh/v1alpha1, kind Reservation).

The Reservation holds the pod's template, is owned by the pod's controller (so only a
replica of the same workload can consume it), is used once (`allocateOnce`) and expires
(`ttl`). Its template requires the chosen low node.

In a Kubernetes cluster koord-scheduler schedules Reservations and keeps their status. The
simulated cluster has no koord-scheduler, so `ReservationScheduler` stands in for it: the
reserve pod goes through kube-scheduler's in-tree filter and the scheduler extender (as
kube-scheduler would send it), and the result is written to the Reservation's status
(Available on its node, or Failed/Unschedulable). When the replacement pod is bound on that
node, `consumed` writes what the reservation controller would: the owner and Succeeded.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from typing import Any

from koordcommon.cluster import sim_fit
from koordcommon.cluster.simsched import ExtenderScheduler
from koordcommon.kube_codec import format_time_ms, pod_to_k8s
from koordcommon.quantity import format_resource_list
from koordcommon.records import NodeRecord, PodRecord

KIND = "Reservation"
API_VERSION = "scheduling.koordinator.sh/v1alpha1"
LABEL_ORDER = "scheduling.koordinator.sh/reservation-order"
LABEL_CREATED_BY = "app.kubernetes.io/created-by"
CREATED_BY = "koord-descheduler"
ANNOTATION_RESERVE_POD = "scheduling.koordinator.sh/reserve-pod"
ANNOTATION_RESERVATION_NAME = "scheduling.koordinator.sh/reservation-name"
ANNOTATION_MIGRATING_POD = "descheduler.koordinator.sh/migrating-pod"
# Pod-identity annotations that must not follow the template onto the replacement.
_DROP_ANNOTATIONS = ("kubernetes.io/config.mirror", "kubernetes.io/config.source", "kubernetes.io/config.seen")


def reservation_name(pod: PodRecord) -> str:
    return f"desched-{pod.uid or uuid.uuid5(uuid.NAMESPACE_URL, pod.key)}"


def build_reservation(pod: PodRecord, name: str, target: str, ttl_s: float, now_ms: int) -> dict[str, Any]:
    """The Reservation for moving `pod` to `target` (Koordinator's reservation for a migration job)."""
    template = pod_to_k8s(pod)
    meta = template["metadata"]
    tmeta: dict[str, Any] = {"namespace": pod.namespace}
    if meta.get("labels"):
        tmeta["labels"] = dict(meta["labels"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _DROP_ANNOTATIONS}
    if annotations:
        tmeta["annotations"] = annotations
    tspec = dict(template["spec"])
    tspec.pop("nodeName", None)
    tspec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target]}]}
                ]
            }
        }
    }
    owner = pod.controller
    if owner is not None:
        owners = [
            {
                "controller": {
                    "apiVersion": owner.api_version,
                    "kind": owner.kind,
                    "name": owner.name,
                    "uid": owner.uid,
                    "controller": True,
                    "namespace": pod.namespace,
                }
            }
        ]
    else:
        owners = [{"object": {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}}]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            # The API server assigns both on create; the simulated cluster keeps what is sent.
            "uid": str(uuid.uuid4()),
            "creationTimestamp": format_time_ms(now_ms),
            "labels": {LABEL_ORDER: str(now_ms), LABEL_CREATED_BY: CREATED_BY},
            "annotations": {ANNOTATION_MIGRATING_POD: pod.key},
        },
        "spec": {
            "template": {"metadata": tmeta, "spec": tspec},
            "owners": owners,
            "ttl": f"{int(ttl_s)}s",
            "allocateOnce": True,
        },
        "status": {"phase": "Pending"},
    }


def phase_and_node(obj: dict[str, Any] | None) -> tuple[str, str]:
    """("", "") for a missing reservation; Koordinator's 'Available' needs phase and nodeName."""
    if obj is None:
        return "", ""
    status = obj.get("status") or {}
    return str(status.get("phase") or "Pending"), str(status.get("nodeName") or "")


def required_nodes(obj: dict[str, Any]) -> set[str] | None:
    """Node names the template's required node affinity allows (matchFields metadata.name In); None: any."""
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    if spec.get("nodeName"):
        return {spec["nodeName"]}
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms") or []
    allowed: set[str] | None = None
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                allowed = (allowed or set()) | set(f.get("values") or [])
    return allowed


def reserve_pod(pod: PodRecord, obj: dict[str, Any]) -> PodRecord:
    """Koordinator's reserve pod: the template as a pending pod named after the reservation UID."""
    meta = obj.get("metadata") or {}
    return dataclasses.replace(
        pod,
        name=str(meta.get("uid") or meta.get("name")),
        uid=str(meta.get("uid") or ""),
        node_name=None,
        phase="Pending",
        annotations={
            **{k: v for k, v in pod.annotations.items() if k not in _DROP_ANNOTATIONS},
            ANNOTATION_RESERVE_POD: "true",
            ANNOTATION_RESERVATION_NAME: str(meta.get("name", "")),
        },
        start_ms=None,
        container_ids={},
        resource_version="",
    )


class _Placement:
    """The cluster as the reserve pod's scheduling cycle sees it: only the nodes the template
    allows; `bind_pod` records the choice instead of binding (a reservation is not a pod)."""

    def __init__(self, cluster: Any, allowed: set[str] | None):
        self.cluster = cluster
        self.allowed = allowed
        self.node: str | None = None

    async def list_nodes(self) -> list[NodeRecord]:
        nodes = await self.cluster.list_nodes()
        return [n for n in nodes if self.allowed is None or n.name in self.allowed]

    async def list_pods(self, node_name: str | None = None, namespace: str | None = None) -> list[PodRecord]:
        return await self.cluster.list_pods(node_name=node_name, namespace=namespace)

    async def bind_pod(self, namespace: str, name: str, node_name: str, uid: str = "") -> None:
        self.node = node_name


class ReservationScheduler:
    """Schedules a Reservation's reserve pod and writes the outcome to its status (see module doc)."""

    def __init__(self, cluster: Any, extender_url: str = "", extender_weight: int = 1):
        self.cluster = cluster
        self.extender_url = extender_url
        self.extender_weight = extender_weight

    async def schedule(self, obj: dict[str, Any], pod: PodRecord, now_ms: int) -> dict[str, Any]:
        """Returns the reservation as written back: Available with status.nodeName, or Failed."""
        placement = _Placement(self.cluster, required_nodes(obj))
        rpod = reserve_pod(pod, obj)
        message = ""
        if self.extender_url:
            async with ExtenderScheduler(placement, self.extender_url, weight=self.extender_weight) as sched:
                result = await sched.schedule_pod(rpod)
            message = result.error or result.message
        else:
            nodes = await placement.list_nodes()
            requested: dict[str, dict[str, int]] = {n.name: {} for n in nodes}
            for p in await self.cluster.list_pods():
                if sim_fit.counts_on_node(p) and p.node_name in requested:
                    sim_fit.add_requests(requested[p.node_name], p)
            reasons = {}
            for n in nodes:
                why = sim_fit.filter_reasons(rpod, n, requested[n.name])
                if not why:
                    placement.node = n.name
                    break
                reasons[n.name] = ", ".join(why)
            message = sim_fit.unschedulable_message(len(nodes), reasons)
        out = copy.deepcopy(obj)
        stamp = format_time_ms(now_ms)
        if placement.node is not None:
            out["status"] = {
                "phase": "Available",
                "nodeName": placement.node,
                "allocatable": format_resource_list(rpod.requests()),
                "conditions": [
                    {"type": "Scheduled", "status": "True", "reason": "Scheduled", "lastTransitionTime": stamp},
                    {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": stamp},
                ],
            }
        else:
            out["status"] = {
                "phase": "Failed",
                "conditions": [
                    {
                        "type": "Scheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastTransitionTime": stamp,
                    }
                ],
            }
        return await self.cluster.apply_custom(KIND, out)


def consumed(obj: dict[str, Any], owner: PodRecord, now_ms: int) -> dict[str, Any]:
    """The reservation after `owner` was bound on its node: allocateOnce makes it Succeeded."""
    out = copy.deepcopy(obj)
    status = dict(out.get("status") or {})
    status["phase"] = "Succeeded"
    status["currentOwners"] = [{"namespace": owner.namespace, "name": owner.name, "uid": owner.uid}]
    status["allocated"] = format_resource_list(owner.requests())
    status["conditions"] = [
        c for c in status.get("conditions") or [] if c.get("type") != "Ready"
    ] + [{"type": "Ready", "status": "False", "reason": "Succeeded", "lastTransitionTime": format_time_ms(now_ms)}]
    out["status"] = status
    return out
