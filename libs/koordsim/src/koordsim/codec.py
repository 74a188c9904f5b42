"""Records <-> plain dicts for simulated-cluster mutations (internal JSON, not Kubernetes JSON)."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
from koordcommon.records import ContainerSpec, NodeRecord, OwnerRef, PodRecord, Taint

_POD_FIELDS = {f.name for f in dataclasses.fields(PodRecord)}
_NODE_FIELDS = {f.name for f in dataclasses.fields(NodeRecord)}


def pod_to_dict(pod: PodRecord) -> dict[str, Any]:
    return msgspec.to_builtins(pod)  # as dataclasses.asdict, a tenth of the time


def _containers(items: Any) -> list[ContainerSpec]:
    out = []
    for c in items or []:
        out.append(
            ContainerSpec(
                name=str(c.get("name", "")),
                requests={str(k): int(v) for k, v in (c.get("requests") or {}).items()},
                limits={str(k): int(v) for k, v in (c.get("limits") or {}).items()},
            )
        )
    return out


def pod_from_dict(data: dict[str, Any]) -> PodRecord:
    d = {k: v for k, v in data.items() if k in _POD_FIELDS}
    d["containers"] = _containers(d.get("containers"))
    d["init_containers"] = _containers(d.get("init_containers"))
    d["owners"] = [
        OwnerRef(
            kind=str(o.get("kind", "")),
            name=str(o.get("name", "")),
            uid=str(o.get("uid", "")),
            api_version=str(o.get("api_version", "")),
            controller=bool(o.get("controller", True)),
        )
        for o in d.get("owners") or []
    ]
    d["labels"] = dict(d.get("labels") or {})
    d["annotations"] = dict(d.get("annotations") or {})
    d["overhead"] = {str(k): int(v) for k, v in (d.get("overhead") or {}).items()}
    d["volume_kinds"] = list(d.get("volume_kinds") or [])
    return PodRecord(**d)


def node_to_dict(node: NodeRecord) -> dict[str, Any]:
    return msgspec.to_builtins(node)


def node_from_dict(data: dict[str, Any]) -> NodeRecord:
    d = {k: v for k, v in data.items() if k in _NODE_FIELDS}
    d["taints"] = [Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "NoSchedule"))) for t in d.get("taints") or []]
    d["capacity"] = {str(k): int(v) for k, v in (d.get("capacity") or {}).items()}
    d["allocatable"] = {str(k): int(v) for k, v in (d.get("allocatable") or {}).items()}
    d["labels"] = dict(d.get("labels") or {})
    d["annotations"] = dict(d.get("annotations") or {})
    return NodeRecord(**d)
