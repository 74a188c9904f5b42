"""The `k8s.io/kube-scheduler/extender/v1` JSON, decoded and encoded with orjson.

The extender types have no json tags, so their keys are the Go field names (PascalCase).
kube-scheduler always sends PascalCase, but Go decodes object keys case-insensitively
(exact match first, then case-folded) and ignores unknown keys: decoding here does the same.
Encoding writes what Go's `json.Marshal` writes: every field present, nil as `null`, and Go's
HTML-safe escaping of `<`, `>`, `&`, U+2028 and U+2029 inside strings. The long lists of the
hot-path replies (HostPriorityList, FailedNodes) are gathered from pre-encoded fixed-width
members, so insignificant whitespace follows their members; everything else has no spaces.
Embedded Kubernetes objects (Pod, NodeList, Node) are kept as the dicts they arrived as and
re-emitted verbatim, so a reply echoes the scheduler's own node objects byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import msgspec
import numpy as np
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


class ExtenderArgs:
    """`{"Pod", "Nodes", "NodeNames"}`: Nodes is sent when nodeCacheCapable is false, NodeNames when true.

    From kube-scheduler's exact encoding the Pod and NodeNames are kept as the JSON they arrived
    as (`pod_raw`, `names_raw`) and decoded only when asked for: the same pod and the same node
    list come again and again (filter then prioritize; the next pod of a burst), and the state
    recognises them by their bytes.
    """

    __slots__ = ("_node_names", "_pod", "names_raw", "nodes", "pod_raw")

    def __init__(
        self,
        pod: dict[str, Any] | None = None,
        nodes: dict[str, Any] | None = None,  # a NodeList: {"metadata": {...}, "items": [Node, ...]}
        node_names: list[str] | None = None,
        *,
        pod_raw: bytes | None = None,
        names_raw: bytes | None = None,
    ) -> None:
        self._pod = pod
        self.nodes = nodes
        self._node_names = node_names
        self.pod_raw = pod_raw
        self.names_raw = names_raw

    @property
    def pod(self) -> dict[str, Any]:
        if self._pod is None and self.pod_raw is not None:
            self._pod = _object(_loads(self.pod_raw), "Pod")
        return self._pod if self._pod is not None else {}

    @property
    def node_names(self) -> list[str] | None:
        if self._node_names is None and self.names_raw is not None:
            self._node_names = _name_list(_loads(self.names_raw), "NodeNames")
        return self._node_names

    def candidate_names(self) -> list[str]:
        """The node names to judge, in the scheduler's order (NodeNames wins when both are sent)."""
        names = self.node_names
        if names is not None:
            return names
        if self.nodes is not None:
            return [node_name_of(n) for n in self.nodes["items"]]
        return []


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """The request exactly as kube-scheduler encodes it, members left undecoded."""

    Pod: msgspec.Raw = msgspec.Raw()
    Nodes: msgspec.Raw = msgspec.Raw()
    NodeNames: msgspec.Raw = msgspec.Raw()


_ENVELOPE = msgspec.json.Decoder(_Envelope)


def _raw(value: msgspec.Raw) -> bytes | None:
    out = bytes(value)
    return None if not out or out == b"null" else out


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
    try:
        env = _ENVELOPE.decode(body)
    except (msgspec.DecodeError, TypeError):
        env = None  # not exactly kube-scheduler's form: the general decoder says what is wrong
    if env is not None:
        pod_raw, nodes_raw, names_raw = _raw(env.Pod), _raw(env.Nodes), _raw(env.NodeNames)
        # The shape checks the general decoder makes, on the first byte of each member.
        if (
            pod_raw is not None
            and pod_raw[:1] == b"{"
            and (nodes_raw is not None or names_raw is not None)
            and (names_raw is None or names_raw[:1] == b"[")
        ):
            nodes = None if nodes_raw is None else _decode_nodes(_loads(nodes_raw))
            return ExtenderArgs(None, nodes, pod_raw=pod_raw, names_raw=names_raw)
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


def _go_json(value: Any) -> bytes:
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


def encode_filter_result(
    nodes: dict[str, Any] | None = None,
    node_names: list[str] | None = None,
    failed_nodes: dict[str, str] | None = None,
    failed_and_unresolvable: dict[str, str] | None = None,
    error: str = "",
) -> bytes:
    return _go_json(
        {
            "Nodes": nodes,
            "NodeNames": node_names,
            "FailedNodes": failed_nodes,
            "FailedAndUnresolvableNodes": failed_and_unresolvable,
            "Error": error,
        }
    )


def encode_names(names: list[str]) -> bytes:
    return _go_json(names)


def encode_filter_names_reply(
    names_json: bytes, outcome: FilterOutcome, failed_encoder: FailedNodesEncoder, table_names: list[str]
) -> bytes:
    """The reply to a NodeNames (nodeCacheCapable) request, with the passed names pre-encoded.

    The same JSON as encode_filter_result(None, names, ...); FailedNodes members come grouped
    by reason (a JSON object's member order carries no meaning, and Go decodes it into a map).
    """
    c = outcome.coded
    if c is None or c.rows is None:
        failed = [_go_json(outcome.failed or None)]
    elif not len(c.at) and not outcome.extra_failed:
        failed = [b"null"]
    else:
        failed = [b"{"]
        present = np.bincount(c.codes).nonzero()[0].tolist()
        for code in present:
            rows = c.rows if len(present) == 1 else c.rows[c.codes == code]
            failed += (failed_encoder.members(table_names, rows, c.reasons[code]), b",")
        if outcome.extra_failed:
            failed.append(memoryview(_go_json(outcome.extra_failed))[1:-1])
        elif len(failed) > 1:
            failed.pop()  # the last comma
        failed.append(b"}")
    return b"".join(
        (
            b'{"Nodes":null,"NodeNames":',
            names_json,
            b',"FailedNodes":',
            *failed,
            b',"FailedAndUnresolvableNodes":',
            _go_json(outcome.unresolvable) if outcome.unresolvable else b"null",
            b',"Error":""}',
        )
    )


def assemble_filter_names_reply(names_json: bytes, groups: list[bytes]) -> bytes:
    """A NodeNames filter reply from the passed names' JSON and the FailedNodes groups, each
    its members led by commas (`RowEntries.gather`), in reason-code order."""
    if not groups:
        failed = [b',"FailedNodes":null']
    else:  # the first member loses its leading comma to the opening brace
        failed = [b',"FailedNodes":{', memoryview(groups[0])[1:], *groups[1:], b"}"]
    return b"".join(
        (b'{"Nodes":null,"NodeNames":', names_json, *failed, b',"FailedAndUnresolvableNodes":null,"Error":""}')
    )


def encode_host_priority(host: str, score: int) -> bytes:
    return _go_json({"Host": host, "Score": score})


def encode_host_priority_list(hosts: list[str], scores: list[int]) -> bytes:
    """A HostPriorityList: a JSON array of `{"Host", "Score"}` (scores 0-10)."""
    return _go_json([{"Host": h, "Score": s} for h, s in zip(hosts, scores)])


class RowEntries:
    """Pre-encoded JSON members, one per table row and variant, gathered by numpy.

    Each entry is `,<member>` padded with spaces to a common width and kept as one row of a
    byte matrix, so a reply listing thousands of nodes is one gather and one copy: the members
    joined by commas, each followed by some insignificant JSON whitespace. Rows are
    append-only, so an entry never goes stale; a longer entry widens the matrix.
    """

    __slots__ = ("_filled", "_make", "_matrix", "variants")

    def __init__(self, make: Callable[[str, int], bytes], variants: int = 1) -> None:
        self._make = make  # (node name, variant) -> the member's JSON
        self.variants = variants
        self._matrix = np.full((0, 16), ord(" "), dtype=np.uint8)
        self._filled = 0

    def ensure(self, names: list[str]) -> None:
        n = len(names)
        if n <= self._filled:
            return
        new = [b"," + self._make(names[r], v) for r in range(self._filled, n) for v in range(self.variants)]
        width = max(self._matrix.shape[1], max(map(len, new)))
        rows = max(n, 2 * (len(self._matrix) // self.variants)) * self.variants
        if rows > len(self._matrix) or width > self._matrix.shape[1]:
            grown = np.full((rows, width), ord(" "), dtype=np.uint8)
            done = self._filled * self.variants
            grown[:done, : self._matrix.shape[1]] = self._matrix[:done]
            self._matrix = grown
        start = self._filled * self.variants
        for i, entry in enumerate(new):
            self._matrix[start + i, : len(entry)] = np.frombuffer(entry, dtype=np.uint8)
        self._filled = n

    @property
    def width(self) -> int:
        """Bytes per entry (entries widen when a longer one is added)."""
        return self._matrix.shape[1]

    def entry(self, row: int, variant: int = 0) -> bytes:
        return self._matrix[row * self.variants + variant].tobytes()

    def gather(self, rows: np.ndarray, variants: np.ndarray | int = 0) -> bytes:
        """The entries of `rows` (after `ensure` covered them), each in its variant and led by
        its comma: entry k fills bytes [k x width, (k + 1) x width)."""
        flat = np.asarray(rows, dtype=np.intp) * self.variants + np.asarray(variants, dtype=np.intp)
        return self._matrix.take(flat, axis=0).tobytes()

    def join(self, rows: np.ndarray, variants: np.ndarray | int = 0) -> memoryview:
        """The members of `rows`, comma-joined (a view of fresh bytes: callers join it into the
        reply without another copy)."""
        return memoryview(self.gather(rows, variants))[1:]


class HostPriorityEncoder:
    """HostPriorityList bytes from pre-encoded entries, one per (node, score 0-10)."""

    LEVELS = MAX_EXTENDER_PRIORITY + 1

    def __init__(self) -> None:
        self._rows = RowEntries(lambda name, s: b'{"Host":%s,"Score":%d}' % (_go_json(name), s), self.LEVELS)

    def ensure(self, names: list[str]) -> None:
        """Encode entries for the rows of `names` not encoded yet (rows are append-only)."""
        self._rows.ensure(names)

    def encode(self, rows: np.ndarray, scores: np.ndarray) -> bytes:
        """Entries for `rows` (table rows) with `scores` (0-10), in that order."""
        return b"".join((b"[", self._rows.join(rows, scores), b"]"))

    @property
    def width(self) -> int:
        return self._rows.width

    def patch(self, body: bytes, rows: np.ndarray, scores: np.ndarray, at: list[int]) -> bytes:
        """`body`, an `encode(rows, ...)` at the current width, with the entries at positions
        `at` rewritten for `scores`: entry i fills bytes [i x width, (i + 1) x width), the first
        one behind the opening bracket in place of its comma."""
        w = self._rows.width
        out = bytearray(body)
        for i in at:
            entry = self._rows.entry(int(rows[i]), int(scores[i]))
            if i:
                out[i * w : (i + 1) * w] = entry
            else:
                out[1:w] = entry[1:]
        return bytes(out)


class FailedNodesEncoder:
    """FailedNodes members `"<node>":"<reason>"`, pre-encoded per (row, reason) for the fixed
    reasons of the load-aware and batch checks (reservation verdicts are encoded as they come)."""

    MAX_REASONS = 32

    def __init__(self) -> None:
        self._by_reason: dict[str, RowEntries] = {}

    def column(self, names: list[str], reason: str) -> RowEntries:
        """The members failed for `reason`, one per table row of `names`."""
        col = self._by_reason.get(reason)
        if col is None:
            if len(self._by_reason) >= self.MAX_REASONS:
                self._by_reason.clear()
            tail = b":" + _go_json(reason)
            col = self._by_reason[reason] = RowEntries(lambda name, _v: _go_json(name) + tail)
        col.ensure(names)
        return col

    def members(self, names: list[str], rows: np.ndarray, reason: str) -> memoryview:
        """The comma-joined members for `rows` (table rows of `names`) failed for `reason`."""
        return self.column(names, reason).join(rows)


def _meta_victims_json(meta: dict[str, MetaVictims] | None) -> dict[str, Any] | None:
    if meta is None:
        return None
    return {
        n: {"Pods": [{"UID": u} for u in v.uids], "NumPDBViolations": v.num_pdb_violations} for n, v in meta.items()
    }


def encode_preemption_result(node_to_meta_victims: dict[str, MetaVictims] | None) -> bytes:
    return _go_json({"NodeNameToMetaVictims": _meta_victims_json(node_to_meta_victims)})


def encode_binding_result(error: str = "") -> bytes:
    return _go_json({"Error": error})


# What kube-scheduler sends: used by tests, the simulated scheduler and the benchmark.


def encode_extender_args(pod: dict[str, Any], nodes: dict[str, Any] | None, node_names: list[str] | None) -> bytes:
    return _go_json({"Pod": pod, "Nodes": nodes, "NodeNames": node_names})


def encode_preemption_args(
    pod: dict[str, Any],
    node_to_victims: dict[str, Victims] | None,
    node_to_meta_victims: dict[str, MetaVictims] | None,
) -> bytes:
    victims = None
    if node_to_victims is not None:
        victims = {n: {"Pods": v.pods, "NumPDBViolations": v.num_pdb_violations} for n, v in node_to_victims.items()}
    return _go_json(
        {"Pod": pod, "NodeNameToVictims": victims, "NodeNameToMetaVictims": _meta_victims_json(node_to_meta_victims)}
    )


def encode_binding_args(args: ExtenderBindingArgs) -> bytes:
    return _go_json(
        {"PodName": args.pod_name, "PodNamespace": args.pod_namespace, "PodUID": args.pod_uid, "Node": args.node}
    )


@dataclass(slots=True)
class CodedFailures:
    """Failed candidates as the vectorised checks leave them: positions, table rows, codes."""

    names: list[str]  # the candidate names
    at: np.ndarray  # positions in the candidate list
    rows: np.ndarray | None  # their table rows (None when some candidate had no row)
    codes: np.ndarray
    reasons: dict[int, str]  # code -> reason


class FilterOutcome:
    """What a filter decided, before it is written in the request's form."""

    __slots__ = ("_failed", "_passed", "coded", "positions", "unresolvable")

    def __init__(
        self,
        passed: list[int] | None = None,
        failed: dict[str, str] | None = None,
        unresolvable: dict[str, str] | None = None,
        positions: np.ndarray | None = None,
        coded: CodedFailures | None = None,
    ) -> None:
        self._passed = passed
        self.positions = positions  # the passed indices as a numpy array, when the filter produced one
        self._failed = failed if failed is not None else {}  # failures judged one by one
        self.unresolvable = unresolvable if unresolvable is not None else {}
        self.coded = coded

    @property
    def passed(self) -> list[int]:
        """Indices into the candidate list of the nodes that passed."""
        if self._passed is None:
            self._passed = [] if self.positions is None else self.positions.tolist()
        return self._passed

    @property
    def extra_failed(self) -> dict[str, str]:
        return self._failed

    @property
    def failed(self) -> dict[str, str]:
        """Every failed node -> reason."""
        c = self.coded
        if c is None or not len(c.at):
            return self._failed
        out = dict(zip(pick(c.names, c.at.tolist()), map(c.reasons.__getitem__, c.codes.tolist())))
        out.update(self._failed)
        return out


def pick(seq: list, positions: list[int]) -> list:
    if not positions:
        return []
    if len(positions) == 1:
        return [seq[positions[0]]]
    return list(itemgetter(*positions)(seq))


def encode_filter_outcome(
    args: ExtenderArgs, names: list[str], outcome: FilterOutcome, passed_names: list[str] | None = None
) -> bytes:
    """Reply in the form(s) the request used: NodeNames for nodeCacheCapable, Nodes otherwise.

    A reply with both null would filter out every node, so the form the scheduler reads is
    always present. The NodeList keeps the request's list metadata.
    """
    passed = outcome.passed
    node_names = None
    nodes = None
    if args.node_names is not None:
        node_names = pick(names, passed) if passed_names is None else passed_names
    if args.nodes is not None:
        items = args.nodes["items"]
        if args.node_names is None:
            kept = pick(items, passed)
        else:
            keep = set(node_names if node_names is not None else pick(names, passed))
            kept = [n for n in items if node_name_of(n) in keep]
        nodes = {**args.nodes, "items": kept}
    return encode_filter_result(nodes, node_names, outcome.failed or None, outcome.unresolvable or None)
