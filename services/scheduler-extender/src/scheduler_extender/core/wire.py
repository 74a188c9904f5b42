"""The `k8s.io/kube-scheduler/extender/v1` JSON, decoded and encoded with orjson.

The extender types have no json tags, so their keys are the Go field names (PascalCase).
kube-scheduler always sends PascalCase, but Go decodes object keys case-insensitively
(exact match first, then case-folded) and ignores unknown keys: decoding here does the same.
Encoding writes exactly what Go's `json.Marshal` writes for the same values: struct fields in
declaration order, every field present, nil as `null`, map keys sorted, no insignificant
whitespace, and Go's HTML-safe escaping of `<`, `>`, `&`, U+2028 and U+2029 inside strings
(the tests hold every reply to Go's own encoding). Embedded Kubernetes objects (Pod, NodeList,
Node) are kept as the dicts they arrived as and re-emitted with their members as received.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10


class WireError(ValueError):
    """A request body that is not the extender JSON; the message says what is wrong."""


# --------------------------------------------------------------------------- Go-style key lookup

_MISSING = object()


def field_of(obj: dict[str, Any], name: str, default: Any = None) -> Any:
    """Go's encoding/json field matching: the exact key, else any key equal under case folding."""
    value = obj.get(name, _MISSING)
    if value is not _MISSING:
        return value
    folded = name.lower()
    for key, value in obj.items():
        if key.lower() == folded:
            return value
    return default


def _loads(body: bytes | str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise WireError(f"request body is not valid JSON: {exc}") from None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError(f"{what} must be a JSON object, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    pod = field_of(obj, "Pod")
    if pod is None:
        raise WireError("missing Pod: the request must carry the pod being scheduled")
    return _object(pod, "Pod")


def _name_list(value: Any, what: str) -> list[str] | None:
    """The list itself; its items are checked where they are looked up (one pass, not two)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise WireError(f"{what} must be an array of node names")
    return value


def node_name_of(node: Any) -> str:
    """metadata.name of a Node object ("" when absent)."""
    if isinstance(node, dict):
        meta = node.get("metadata")
        if isinstance(meta, dict):
            name = meta.get("name")
            if isinstance(name, str):
                return name
    return ""


# --------------------------------------------------------------------------- requests


@dataclass(slots=True)
class ExtenderArgs:
    """`{"Pod", "Nodes", "NodeNames"}`: Nodes is sent when nodeCacheCapable is false, NodeNames when true."""

    pod: dict[str, Any]
    nodes: dict[str, Any] | None = None  # a NodeList: {"metadata": {...}, "items": [Node, ...]}
    node_names: list[str] | None = None

    def candidate_names(self) -> list[str]:
        """The node names to judge, in the scheduler's order (NodeNames wins when both are sent)."""
        if self.node_names is not None:
            return self.node_names
        if self.nodes is not None:
            return [node_name_of(n) for n in self.nodes["items"]]
        return []


def _decode_nodes(nodes: Any) -> dict[str, Any]:
    nodes = _object(nodes, "Nodes")
    items = nodes.get("items")
    if items is None:
        items = field_of(nodes, "items")
    if items is None:
        items = []
    if not isinstance(items, list) or not all(isinstance(n, dict) for n in items):
        raise WireError("Nodes.items must be an array of Node objects")
    if not all(node_name_of(n) for n in items):
        raise WireError("every node in Nodes.items must have metadata.name")
    if nodes.get("items") is not items:
        nodes = {**nodes, "items": items}
    return nodes


def decode_extender_args(body: bytes | str) -> ExtenderArgs:
    obj = _object(_loads(body), "request body")
    pod = _pod(obj)
    nodes = field_of(obj, "Nodes")
    if nodes is not None:
        nodes = _decode_nodes(nodes)
    names = _name_list(field_of(obj, "NodeNames"), "NodeNames")
    if nodes is None and names is None:
        raise WireError("neither Nodes nor NodeNames is set: nothing to filter or score")
    return ExtenderArgs(pod, nodes, names)


@dataclass(slots=True)
class Victims:
    pods: list[dict[str, Any]]
    num_pdb_violations: int = 0


@dataclass(slots=True)
class MetaVictims:
    uids: list[str]
    num_pdb_violations: int = 0


@dataclass(slots=True)
class ExtenderPreemptionArgs:
    pod: dict[str, Any]
    node_to_victims: dict[str, Victims] | None = None  # nodeCacheCapable false: full pods
    node_to_meta_victims: dict[str, MetaVictims] | None = None  # nodeCacheCapable true: UIDs


def _int64(value: Any, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{what} must be an integer")
    return value


def _decode_meta_victims(value: Any, where: str) -> MetaVictims:
    v = _object(value, where)
    pods = field_of(v, "Pods") or []
    if not isinstance(pods, list):
        raise WireError(f"{where}.Pods must be an array")
    uids = []
    for i, p in enumerate(pods):
        uid = field_of(_object(p, f"{where}.Pods[{i}]"), "UID", "")
        if not isinstance(uid, str):
            raise WireError(f"{where}.Pods[{i}].UID must be a string")
        uids.append(uid)
    return MetaVictims(uids, _int64(field_of(v, "NumPDBViolations"), f"{where}.NumPDBViolations"))


def _decode_victims(value: Any, where: str) -> Victims:
    v = _object(value, where)
    pods = field_of(v, "Pods") or []
    if not isinstance(pods, list) or not all(isinstance(p, dict) for p in pods):
        raise WireError(f"{where}.Pods must be an array of Pod objects")
    return Victims(pods, _int64(field_of(v, "NumPDBViolations"), f"{where}.NumPDBViolations"))


def decode_preemption_args(body: bytes | str) -> ExtenderPreemptionArgs:
    obj = _object(_loads(body), "request body")
    pod = _pod(obj)
    victims = field_of(obj, "NodeNameToVictims")
    meta = field_of(obj, "NodeNameToMetaVictims")
    out = ExtenderPreemptionArgs(pod)
    if victims is not None:
        out.node_to_victims = {
            n: _decode_victims(v, f"NodeNameToVictims[{n}]") for n, v in _object(victims, "NodeNameToVictims").items()
        }
    if meta is not None:
        out.node_to_meta_victims = {
            n: _decode_meta_victims(v, f"NodeNameToMetaVictims[{n}]")
            for n, v in _object(meta, "NodeNameToMetaVictims").items()
        }
    return out


@dataclass(slots=True)
class ExtenderBindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


def decode_binding_args(body: bytes | str) -> ExtenderBindingArgs:
    obj = _object(_loads(body), "request body")
    values = []
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        v = field_of(obj, key, "")
        if not isinstance(v, str):
            raise WireError(f"{key} must be a string")
        values.append(v)
    return ExtenderBindingArgs(*values)


# --------------------------------------------------------------------------- replies (decoded by a client)


@dataclass(slots=True)
class ExtenderFilterResult:
    nodes: dict[str, Any] | None = None
    node_names: list[str] | None = None
    failed_nodes: dict[str, str] | None = None
    failed_and_unresolvable: dict[str, str] | None = None
    error: str = ""


def decode_filter_result(body: bytes | str) -> ExtenderFilterResult:
    obj = _object(_loads(body), "filter result")
    nodes = field_of(obj, "Nodes")
    return ExtenderFilterResult(
        nodes=None if nodes is None else _object(nodes, "Nodes"),
        node_names=_name_list(field_of(obj, "NodeNames"), "NodeNames"),
        failed_nodes=field_of(obj, "FailedNodes"),
        failed_and_unresolvable=field_of(obj, "FailedAndUnresolvableNodes"),
        error=field_of(obj, "Error") or "",
    )


def decode_host_priority_list(body: bytes | str) -> list[tuple[str, int]]:
    value = _loads(body)
    if value is None:
        return []
    if not isinstance(value, list):
        raise WireError("HostPriorityList must be a JSON array")
    out = []
    for i, item in enumerate(value):
        item = _object(item, f"HostPriorityList[{i}]")
        out.append((field_of(item, "Host", ""), _int64(field_of(item, "Score"), f"HostPriorityList[{i}].Score")))
    return out


def decode_preemption_result(body: bytes | str) -> dict[str, MetaVictims]:
    obj = _object(_loads(body), "preemption result")
    meta = field_of(obj, "NodeNameToMetaVictims")
    if meta is None:
        return {}
    return {
        n: _decode_meta_victims(v, f"NodeNameToMetaVictims[{n}]")
        for n, v in _object(meta, "NodeNameToMetaVictims").items()
    }


def decode_binding_result(body: bytes | str) -> str:
    obj = _object(_loads(body), "binding result")
    return field_of(obj, "Error") or ""


# --------------------------------------------------------------------------- encoding

_GO_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    (b"\xe2\x80\xa8", b"\\u2028"),
    (b"\xe2\x80\xa9", b"\\u2029"),
)


def go_json(value: Any) -> bytes:
    """orjson output made identical to Go's json.Marshal.

    The only difference for the values produced here is Go's HTML-safe escaping. These
    characters can only occur inside JSON strings, so a byte replacement is exact.
    """
    out = orjson.dumps(value)
    # single-byte probes: they are memchr scans, where a two-byte needle is a far slower search
    if b"<" in out or b">" in out or b"&" in out or b"\xe2" in out:
        for raw, esc in _GO_ESCAPES:
            out = out.replace(raw, esc)
    return out


def _sorted(m: dict[str, Any] | None) -> dict[str, Any] | None:
    """A Go map is written with its keys sorted (byte order of their UTF-8, which is code point
    order: Python's string order)."""
    return None if m is None else dict(sorted(m.items()))


def encode_filter_result(
    nodes: dict[str, Any] | None = None,
    node_names: list[str] | None = None,
    failed_nodes: dict[str, str] | None = None,
    failed_and_unresolvable: dict[str, str] | None = None,
    error: str = "",
) -> bytes:
    """ExtenderFilterResult{Nodes *v1.NodeList; NodeNames *[]string; FailedNodes,
    FailedAndUnresolvableNodes FailedNodesMap; Error string}."""
    return go_json(
        {
            "Nodes": nodes,
            "NodeNames": node_names,
            "FailedNodes": _sorted(failed_nodes),
            "FailedAndUnresolvableNodes": _sorted(failed_and_unresolvable),
            "Error": error,
        }
    )


def encode_host_priority(host: str, score: int) -> bytes:
    return go_json({"Host": host, "Score": score})


def encode_host_priority_list(hosts: list[str], scores: list[int]) -> bytes:
    """HostPriorityList: []HostPriority{Host string; Score int64} (scores 0-10)."""
    return go_json([{"Host": h, "Score": s} for h, s in zip(hosts, scores)])


def _meta_victims_json(meta: dict[str, MetaVictims] | None) -> dict[str, Any] | None:
    if meta is None:
        return None
    return {
        n: {"Pods": [{"UID": u} for u in v.uids], "NumPDBViolations": v.num_pdb_violations}
        for n, v in sorted(meta.items())
    }


def encode_preemption_result(node_to_meta_victims: dict[str, MetaVictims] | None) -> bytes:
    """ExtenderPreemptionResult{NodeNameToMetaVictims map[string]*MetaVictims}."""
    return go_json({"NodeNameToMetaVictims": _meta_victims_json(node_to_meta_victims)})


def encode_binding_result(error: str = "") -> bytes:
    return go_json({"Error": error})


# What kube-scheduler sends: used by tests, the simulated scheduler and the benchmark.


def encode_extender_args(pod: dict[str, Any], nodes: dict[str, Any] | None, node_names: list[str] | None) -> bytes:
    return go_json({"Pod": pod, "Nodes": nodes, "NodeNames": node_names})


def encode_preemption_args(
    pod: dict[str, Any],
    node_to_victims: dict[str, Victims] | None,
    node_to_meta_victims: dict[str, MetaVictims] | None,
) -> bytes:
    victims = None
    if node_to_victims is not None:
        victims = {
            n: {"Pods": v.pods, "NumPDBViolations": v.num_pdb_violations} for n, v in sorted(node_to_victims.items())
        }
    return go_json(
        {"Pod": pod, "NodeNameToVictims": victims, "NodeNameToMetaVictims": _meta_victims_json(node_to_meta_victims)}
    )


def encode_binding_args(args: ExtenderBindingArgs) -> bytes:
    return go_json(
        {"PodName": args.pod_name, "PodNamespace": args.pod_namespace, "PodUID": args.pod_uid, "Node": args.node}
    )
