"""JSON documents: RFC 6902 JSON Patch between two versions, and the strategic merge patch
subset a ClusterColocationProfile's `patch` needs for a Pod."""

from __future__ import annotations

import copy
from typing import Any

# patchMergeKey of the Pod's list fields (k8s.io/api core/v1 struct tags); other lists are atomic.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "readinessGates": "conditionType",
}
_DIRECTIVE = "$patch"


def pointer_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_patch(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """A JSON Patch turning `old` into `new`: maps key by key, equal-length lists item by item,
    everything else replaced whole. Parents are added with their content, so no `add` ever
    targets a missing map."""
    if isinstance(old, dict) and isinstance(new, dict):
        ops: list[dict[str, Any]] = []
        for k in old:
            if k not in new:
                ops.append({"op": "remove", "path": f"{path}/{pointer_token(k)}"})
        for k, v in new.items():
            p = f"{path}/{pointer_token(k)}"
            if k not in old:
                ops.append({"op": "add", "path": p, "value": v})
            else:
                ops.extend(json_patch(old[k], v, p))
        return ops
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        ops = []
        for i, (a, b) in enumerate(zip(old, new)):
            ops.extend(json_patch(a, b, f"{path}/{i}"))
        return ops
    if type(old) is type(new) and old == new:
        return []
    return [{"op": "replace", "path": path, "value": new}]


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """Apply a strategic merge patch: maps merge (null deletes), lists with a merge key merge
    by it (`$patch: delete` removes an item), other lists and scalars are replaced."""
    if isinstance(patch, dict):
        if patch.get(_DIRECTIVE) == "delete":
            return None
        if patch.get(_DIRECTIVE) == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != _DIRECTIVE}
        out = dict(target) if isinstance(target, dict) else {}
        for k, v in patch.items():
            if k.startswith("$"):
                continue
            if v is None:
                out.pop(k, None)
                continue
            merged = strategic_merge(out.get(k), v, k)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        return out
    if isinstance(patch, list) and field in MERGE_KEYS and isinstance(target, list):
        key = MERGE_KEYS[field]
        out = [copy.deepcopy(x) for x in target]
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                out.append(copy.deepcopy(item))
                continue
            idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None)
            if item.get(_DIRECTIVE) == "delete":
                if idx is not None:
                    out.pop(idx)
                continue
            if idx is None:
                out.append({k: copy.deepcopy(v) for k, v in item.items() if k != _DIRECTIVE})
            else:
                out[idx] = strategic_merge(out[idx], item, "")
        return out
    return copy.deepcopy(patch)
