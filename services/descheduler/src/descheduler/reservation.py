"""Reservations for ReservationFirst migrations (scheduling.koordinator.sh/v1alpha1, kind Reservation).

The Reservation holds the pod's template, is owned by the pod's controller (so only a
replica of the same workload can consume it), is used once (`allocateOnce`) and expires
(`ttl`). Its template requires the chosen low node.

The descheduler only creates the Reservation and reads its status: koord-scheduler places it
(Available on its node, or Failed/Unschedulable), and in the simulated cluster the sim backend
does the same when the descheduler opens it with its extender (see main.py). When the
replacement pod is bound on that node, `consumed` writes what the reservation controller
would: the owner and Succeeded.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from koordcommon.kube_codec import format_time_ms, pod_to_k8s
from koordcommon.quantity import format_resource_list
from koordcommon.records import PodRecord
from koordcommon.reservations import KIND, PENDING, SUCCEEDED, phase

API_VERSION = "scheduling.koordinator.sh/v1alpha1"
LABEL_ORDER = "scheduling.koordinator.sh/reservation-order"
LABEL_CREATED_BY = "app.kubernetes.io/created-by"
CREATED_BY = "koord-descheduler"
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
        "status": {"phase": PENDING},
    }


def phase_and_node(obj: dict[str, Any] | None) -> tuple[str, str]:
    """("", "") for a missing reservation; Koordinator's 'Available' needs phase and nodeName."""
    if obj is None:
        return "", ""
    return phase(obj), str((obj.get("status") or {}).get("nodeName") or "")


def consumed(obj: dict[str, Any], owner: PodRecord, now_ms: int) -> dict[str, Any]:
    """The reservation after `owner` was bound on its node: allocateOnce makes it Succeeded."""
    out = copy.deepcopy(obj)
    status = dict(out.get("status") or {})
    status["phase"] = SUCCEEDED
    status["currentOwners"] = [{"namespace": owner.namespace, "name": owner.name, "uid": owner.uid}]
    status["allocated"] = format_resource_list(owner.requests())
    status["conditions"] = [
        c for c in status.get("conditions") or [] if c.get("type") != "Ready"
    ] + [{"type": "Ready", "status": "False", "reason": "Succeeded", "lastTransitionTime": format_time_ms(now_ms)}]
    out["status"] = status
    return out
