"""Kubernetes JSON (dicts as the API returns them) <-> `koordcommon.records`.

Decoding is tolerant: missing or wrongly typed fields fall back to defaults, so any object the
API can hold decodes. Only values that cannot mean anything raise `ValueError` naming the field:
an invalid quantity or an invalid timestamp. `pod_from_json` gives the same record straight
from a pod's JSON bytes, for hot paths that receive pods as bytes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .quantity import QuantityError, format_resource_list, parse_resource_list
from .records import ContainerSpec, NodeRecord, OwnerRef, PodRecord, ResourceList, Taint

DEFAULT_NAMESPACE = "default"
DEFAULT_SCHEDULER = "default-scheduler"
# Records carry no image; the pause image keeps an encoded pod valid for the API server.
PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.9"

# The smallest valid source of each volume kind records remember (volume_kinds).
_VOLUME_SOURCES: dict[str, dict[str, Any]] = {
    "emptyDir": {},
    "hostPath": {"path": "/tmp"},
    "persistentVolumeClaim": {"claimName": "claim"},
    "configMap": {"name": "config"},
    "secret": {"secretName": "secret"},
    "projected": {"sources": []},
    "downwardAPI": {"items": []},
    "ephemeral": {
        "volumeClaimTemplate": {
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        }
    },
    "csi": {"driver": "csi.example.com"},
    "nfs": {"server": "127.0.0.1", "path": "/"},
}


# small typed accessors ----------------------------------------------------------------


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _parts(obj: Any, kind: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """An object's metadata, spec and status (each {} when absent or not an object)."""
    if not isinstance(obj, dict):
        raise ValueError(f"{kind} must be a JSON object, got {type(obj).__name__}")  # noqa: TRY004 - decode errors are ValueErrors
    return _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _str(v: Any, default: str = "") -> str:
    return v if isinstance(v, str) else default


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _str_map(v: Any) -> dict[str, str]:
    return {str(k): "" if val is None else str(val) for k, val in _dict(v).items()}


def _resources(v: Any, where: str) -> ResourceList:
    try:
        return parse_resource_list(_dict(v))
    except QuantityError as e:
        raise ValueError(f"{where}: {e}") from None


# timestamps ---------------------------------------------------------------------------


def parse_time_ms(v: Any, where: str = "time") -> int | None:
    """An RFC 3339 timestamp (as metav1.Time / MicroTime) to epoch milliseconds."""
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise ValueError(f"{where}: expected an RFC 3339 string, got {type(v).__name__}")  # noqa: TRY004 - decode errors are ValueErrors
    text = v.strip()
    if text[-1:] in ("z", "Z"):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{where}: {v!r} is not an RFC 3339 timestamp") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def format_time_ms(ms: int) -> str:
    """Epoch milliseconds to RFC 3339 UTC; whole seconds print as Kubernetes does
    (`2008-01-01T01:01:01Z`), sub-second values keep their milliseconds (Go parses both)."""
    dt = datetime.fromtimestamp(ms // 1000, tz=UTC)
    base = dt.strftime("%Y-%m-%dT%H:%M:%S")
    frac = ms % 1000
    return f"{base}.{frac:03d}Z" if frac else f"{base}Z"


# pods ---------------------------------------------------------------------------------


def _container(c: Any, where: str) -> ContainerSpec:
    c = _dict(c)
    res = _dict(c.get("resources"))
    name = _str(c.get("name"))
    return ContainerSpec(
        name=name,
        requests=_resources(res.get("requests"), f"{where}.resources.requests"),
        limits=_resources(res.get("limits"), f"{where}.resources.limits"),
    )


def _owner(o: Any) -> OwnerRef:
    o = _dict(o)
    return OwnerRef(
        kind=_str(o.get("kind")),
        name=_str(o.get("name")),
        uid=_str(o.get("uid")),
        api_version=_str(o.get("apiVersion")),
        controller=o.get("controller") is True,
    )


def _volume_kinds(volumes: Any) -> list[str]:
    kinds: list[str] = []
    for vol in _list(volumes):
        kinds.extend(k for k, v in _dict(vol).items() if k != "name" and v is not None)
    return kinds


def _container_ids(status: dict[str, Any]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in _list(status.get(key)):
            cs = _dict(cs)
            name, cid = _str(cs.get("name")), _str(cs.get("containerID"))
            if name and cid:
                ids[name] = cid
    return ids


def pod_from_k8s(obj: dict[str, Any]) -> PodRecord:
    """A v1 Pod dict to a PodRecord (resources parsed to integers, times to epoch ms)."""
    meta, spec, status = _parts(obj, "pod")
    name = _str(meta.get("name"))
    return PodRecord(
        namespace=_str(meta.get("namespace")) or DEFAULT_NAMESPACE,
        name=name,
        uid=_str(meta.get("uid")),
        node_name=_str(spec.get("nodeName")) or None,
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        owners=[_owner(o) for o in _list(meta.get("ownerReferences"))],
        priority=_int(spec.get("priority")),
        priority_class_name=_str(spec.get("priorityClassName")),
        preemption_policy=_str(spec.get("preemptionPolicy")) or None,
        scheduler_name=_str(spec.get("schedulerName")) or DEFAULT_SCHEDULER,
        phase=_str(status.get("phase")) or "Pending",
        containers=[
            _container(c, f"pod {name}: spec.containers[{i}]") for i, c in enumerate(_list(spec.get("containers")))
        ],
        init_containers=[
            _container(c, f"pod {name}: spec.initContainers[{i}]")
            for i, c in enumerate(_list(spec.get("initContainers")))
        ],
        overhead=_resources(spec.get("overhead"), f"pod {name}: spec.overhead"),
        kube_qos=_str(status.get("qosClass")) or None,
        volume_kinds=_volume_kinds(spec.get("volumes")),
        container_ids=_container_ids(status),
        created_ms=parse_time_ms(meta.get("creationTimestamp"), f"pod {name}: metadata.creationTimestamp") or 0,
        start_ms=parse_time_ms(status.get("startTime"), f"pod {name}: status.startTime"),
        deletion_ms=parse_time_ms(meta.get("deletionTimestamp"), f"pod {name}: metadata.deletionTimestamp"),
        resource_version=_str(meta.get("resourceVersion")),
        scheduled_ms=_condition_time(status, "PodScheduled", name),
        initialized_ms=_condition_time(status, "Initialized", name),
    )


def _condition_time(status: dict[str, Any], kind: str, pod: str) -> int | None:
    """lastTransitionTime of the pod's `kind` condition when it is True (Koordinator's load-aware
    cache dates a pod's assignment by PodScheduled and its estimation window by Initialized)."""
    for cond in _list(status.get("conditions")):
        cond = _dict(cond)
        if cond.get("type") == kind and cond.get("status") == "True":
            return parse_time_ms(cond.get("lastTransitionTime"), f"pod {pod}: status.conditions[{kind}]")
    return None


def _container_to_k8s(c: ContainerSpec) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if c.requests:
        resources["requests"] = format_resource_list(c.requests)
    if c.limits:
        resources["limits"] = format_resource_list(c.limits)
    return {"name": c.name, "image": PLACEHOLDER_IMAGE, "resources": resources}


def _metadata(
    name: str, labels: dict[str, str], annotations: dict[str, str], created_ms: int, resource_version: str
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if created_ms:
        meta["creationTimestamp"] = format_time_ms(created_ms)
    if resource_version:
        meta["resourceVersion"] = resource_version
    return meta


def pod_to_k8s(pod: PodRecord) -> dict[str, Any]:
    """A valid v1 Pod dict for a PodRecord."""
    meta = _metadata(pod.name, pod.labels, pod.annotations, pod.created_ms, pod.resource_version)
    meta["namespace"] = pod.namespace
    if pod.uid:
        meta["uid"] = pod.uid
    if pod.owners:
        meta["ownerReferences"] = [
            {"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid, "controller": o.controller}
            for o in pod.owners
        ]
    if pod.deletion_ms is not None:
        meta["deletionTimestamp"] = format_time_ms(pod.deletion_ms)
    spec: dict[str, Any] = {
        "schedulerName": pod.scheduler_name,
        "containers": [_container_to_k8s(c) for c in pod.containers],
    }
    if pod.node_name:
        spec["nodeName"] = pod.node_name
    if pod.priority is not None:
        spec["priority"] = pod.priority
    if pod.priority_class_name:
        spec["priorityClassName"] = pod.priority_class_name
    if pod.preemption_policy:
        spec["preemptionPolicy"] = pod.preemption_policy
    if pod.init_containers:
        spec["initContainers"] = [_container_to_k8s(c) for c in pod.init_containers]
    if pod.overhead:
        spec["overhead"] = format_resource_list(pod.overhead)
    if pod.volume_kinds:
        spec["volumes"] = [
            {"name": f"vol-{i}", kind: dict(_VOLUME_SOURCES.get(kind, {}))} for i, kind in enumerate(pod.volume_kinds)
        ]
    status: dict[str, Any] = {"phase": pod.phase, "qosClass": pod.kube_qos or pod.computed_kube_qos().value}
    if pod.start_ms is not None:
        status["startTime"] = format_time_ms(pod.start_ms)
    conditions = [(kind, ms) for kind, ms in (("PodScheduled", pod.scheduled_ms), ("Initialized", pod.initialized_ms)) if ms]
    if conditions:
        status["conditions"] = [
            {"type": kind, "status": "True", "lastTransitionTime": format_time_ms(ms)} for kind, ms in conditions
        ]
    init_names = {c.name for c in pod.init_containers}
    for name, cid in pod.container_ids.items():
        key = "initContainerStatuses" if name in init_names else "containerStatuses"
        status.setdefault(key, []).append(
            {
                "name": name,
                "containerID": cid,
                "image": PLACEHOLDER_IMAGE,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
            }
        )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


# nodes --------------------------------------------------------------------------------


def _node_ready(conditions: Any) -> bool:
    """The Ready condition's status; a node reporting no Ready condition counts as ready
    (as the descheduler's IsReady does)."""
    for cond in _list(conditions):
        cond = _dict(cond)
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True


def node_from_k8s(obj: dict[str, Any]) -> NodeRecord:
    """A v1 Node dict to a NodeRecord."""
    meta, spec, status = _parts(obj, "node")
    name = _str(meta.get("name"))
    taints = []
    for t in _list(spec.get("taints")):
        t = _dict(t)
        taints.append(
            Taint(key=_str(t.get("key")), value=_str(t.get("value")), effect=_str(t.get("effect")) or "NoSchedule")
        )
    return NodeRecord(
        name=name,
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        capacity=_resources(status.get("capacity"), f"node {name}: status.capacity"),
        allocatable=_resources(status.get("allocatable"), f"node {name}: status.allocatable"),
        taints=taints,
        unschedulable=spec.get("unschedulable") is True,
        ready=_node_ready(status.get("conditions")),
        created_ms=parse_time_ms(meta.get("creationTimestamp"), f"node {name}: metadata.creationTimestamp") or 0,
        resource_version=_str(meta.get("resourceVersion")),
    )


def node_to_k8s(node: NodeRecord) -> dict[str, Any]:
    """A v1 Node dict for a NodeRecord."""
    spec: dict[str, Any] = {}
    if node.taints:
        spec["taints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect} if t.value else {"key": t.key, "effect": t.effect}
            for t in node.taints
        ]
    if node.unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _metadata(node.name, node.labels, node.annotations, node.created_ms, node.resource_version),
        "spec": spec,
        "status": {
            "capacity": format_resource_list(node.capacity),
            "allocatable": format_resource_list(node.allocatable),
            "conditions": [{"type": "Ready", "status": "True" if node.ready else "False"}],
        },
    }
