"""Places Reservations as koord-scheduler would: the simulated cluster has no koord-scheduler.

A Reservation (scheduling.koordinator.sh/v1alpha1) holds a pod template. koord-scheduler
schedules its reserve pod (the template as a pending pod named after the reservation's UID)
and writes the outcome to the Reservation's status: Available with the node, or Failed with an
Unschedulable condition. Here the reserve pod goes through kube-scheduler's in-tree filter and,
when an extender URL is given, the scheduler extender as kube-scheduler sends it
(`scheduler.ExtenderScheduler`); without an extender the first node that passes the in-tree
filter takes it. `SimCluster` calls `place` for the Pending reservations written through it
when it was opened with `schedule_reservations` (or an `extender_url`).
"""

from __future__ import annotations

import copy
from typing import Any

from koordcommon.kube_codec import format_time_ms, parse_time_ms, pod_from_k8s
from koordcommon.quantity import format_resource_list
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.reservations import (
    ANNOTATION_RESERVATION_NAME,
    ANNOTATION_RESERVE_POD,
    AVAILABLE,
    ENDED,
    FAILED,
    phase,
)

from . import fit
from .scheduler import ExtenderScheduler

GC_DURATION_S = 86_400  # ReservationArgs.gcDurationSeconds, Koordinator's default


def needs_cleanup(obj: dict[str, Any], now_ms: int, gc_duration_s: int = GC_DURATION_S) -> bool:
    """koord-scheduler's reservation GC: a Succeeded or Failed reservation is deleted once its
    last transition (its newest condition; the object's creation without any) is more than
    gcDurationSeconds old. A time that cannot be read keeps the object."""
    if phase(obj) not in ENDED:
        return False
    conditions = [c for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
    try:
        times = [t for c in conditions if (t := parse_time_ms(c.get("lastTransitionTime"))) is not None]
        if not times:
            created = parse_time_ms((obj.get("metadata") or {}).get("creationTimestamp"))
            times = [created] if created is not None else []
    except ValueError:
        return False
    return bool(times) and now_ms - max(times) > gc_duration_s * 1000


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


def reserve_pod(obj: dict[str, Any]) -> PodRecord:
    """Koordinator's reserve pod: the template's metadata and spec as a pending pod named after
    the reservation's UID. The controller among the reservation's owners becomes the pod's
    owner, so the extender estimates it from that workload's profile, as it will estimate the
    replica that consumes the reservation."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    tmeta = dict(template.get("metadata") or {})
    tspec = {k: v for k, v in (template.get("spec") or {}).items() if k != "nodeName"}
    uid = str(meta.get("uid") or "")
    owners = [
        {k: o["controller"][k] for k in ("apiVersion", "kind", "name", "uid", "controller") if k in o["controller"]}
        for o in spec.get("owners") or []
        if isinstance(o.get("controller"), dict)
    ]
    pod_meta = {
        **tmeta,
        "name": uid or str(meta.get("name", "")),
        "uid": uid,
        "annotations": {
            **(tmeta.get("annotations") or {}),
            ANNOTATION_RESERVE_POD: "true",
            ANNOTATION_RESERVATION_NAME: str(meta.get("name", "")),
        },
    }
    if owners:
        pod_meta["ownerReferences"] = owners
    if meta.get("creationTimestamp"):
        pod_meta["creationTimestamp"] = meta["creationTimestamp"]
    return pod_from_k8s({"metadata": pod_meta, "spec": tspec, "status": {"phase": "Pending"}})


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
    """Chooses a Pending reservation's node (see module doc); the caller writes the result."""

    def __init__(self, cluster: Any, extender_url: str = "", extender_weight: int = 1):
        self.cluster = cluster
        self.extender_url = extender_url
        self.extender_weight = extender_weight

    async def place(self, obj: dict[str, Any], now_ms: int) -> dict[str, Any]:
        """The reservation with its new status: Available with status.nodeName, or Failed."""
        placement = _Placement(self.cluster, required_nodes(obj))
        rpod = reserve_pod(obj)
        if self.extender_url:
            async with ExtenderScheduler(placement, self.extender_url, weight=self.extender_weight) as sched:
                result = await sched.schedule_pod(rpod)
            message = result.error or result.message
        else:
            nodes = await placement.list_nodes()
            requested: dict[str, dict[str, int]] = {n.name: {} for n in nodes}
            for p in await self.cluster.list_pods():
                if fit.counts_on_node(p) and p.node_name in requested:
                    fit.add_requests(requested[p.node_name], p)
            reasons = {}
            for n in nodes:
                why = fit.filter_reasons(rpod, n, requested[n.name])
                if not why:
                    placement.node = n.name
                    break
                reasons[n.name] = ", ".join(why)
            message = fit.unschedulable_message(len(nodes), reasons)
        out = copy.deepcopy(obj)
        stamp = format_time_ms(now_ms)
        if placement.node is not None:
            out["status"] = {
                "phase": AVAILABLE,
                "nodeName": placement.node,
                "allocatable": format_resource_list(rpod.requests()),
                "conditions": [
                    {"type": "Scheduled", "status": "True", "reason": "Scheduled", "lastTransitionTime": stamp},
                    {"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": stamp},
                ],
            }
        else:
            out["status"] = {
                "phase": FAILED,
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
        return out
