"""The simulated cluster's state and the one function that changes it: `SimState.apply`.

Every replica applies the same mutations in the same (stream) order, so `apply` is
deterministic: it reads only the payload and the current state, never the clock. Records
are replaced, never modified in place, so the objects handed to callers stay consistent.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import deque
from typing import Any

from koordcommon.cluster.port import ClusterEvent, EvictionOutcome, EvictionResult
from koordcommon.records import NodeRecord, PodRecord, Taint
from koordcommon.resources import Resources
from koordcommon.selectors import SelectorError, parse_selector

from .codec import pod_from_dict
from .genesis import Genesis, pod_uid, safe_hash
from .scenarios import build
from .spec import SimSpec
from .usage import Override, PodSet, container_shares

PDB_KIND = "PodDisruptionBudget"
PDB_BLOCKED = "Cannot evict pod as it would violate the pod's disruption budget."
PDB_MULTIPLE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
PDB_RETRY_AFTER_S = 10.0
MAX_EVENTS = 1000
# The Deployment controller names ReplicaSets `<deployment>-<pod-template-hash>`.
_RS_NAME = re.compile(r"^(?P<deploy>.+)-[bcdfghjklmnpqrstvwxz2456789]{6,10}$")

OPS = (
    "genesis",
    "pod_created",
    "pod_bound",
    "pod_phase",
    "pod_deleted",
    "pod_evicted",
    "node_status",
    "node_updated",
    "custom_applied",
    "custom_deleted",
    "usage_override",
    "usage_override_cleared",
    "event",
)


class MutationError(ValueError):
    """A mutation that cannot apply to the current state (unknown pod, conflicting uid, ...)."""


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """policy/v1 PDB semantics: a null selector selects nothing, `{}` everything; a malformed
    one selects nothing."""
    try:
        parsed = parse_selector(selector, "spec.selector")
    except SelectorError:
        return False
    return parsed is not None and parsed.matches(labels)


def _int_or_percent(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        pct = float(value[:-1])
        exact = total * pct / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


def custom_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class SimState:
    def __init__(self, genesis: Genesis | None = None, spec: SimSpec | None = None):
        self.spec = spec
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}
        self.custom: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.workloads: dict[str, str] = {}
        self.overrides: list[Override] = []
        self.events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self.usage = None
        self.synthetic = False
        self.assumptions: list[str] = []
        self.rv = 1
        # PDB key -> most pods it ever selected: the sim has no controllers to report a scale,
        # so this stands in for the workload's replicas (replacements start Pending).
        self.pdb_expected: dict[tuple[str, str], int] = {}
        self._by_node: dict[str, set[str]] = {}
        self._podsets: dict[str, PodSet] = {}
        if genesis is not None:
            self._load(genesis)

    @classmethod
    def from_spec(cls, spec: SimSpec) -> SimState:
        spec = spec.resolved()
        return cls(build(spec), spec)

    def _load(self, g: Genesis) -> None:
        self.nodes = {n.name: n for n in g.nodes}
        self.pods = {p.key: p for p in g.pods}
        self.workloads = dict(g.workloads)
        self.usage = g.usage
        self.synthetic = g.synthetic
        self.assumptions = list(g.assumptions)
        self._by_node = {n: set() for n in self.nodes}
        for p in g.pods:
            if p.node_name:
                self._by_node.setdefault(p.node_name, set()).add(p.key)

    # ------------------------------------------------------------------ reads

    def pods_on(self, node: str) -> list[PodRecord]:
        return [self.pods[k] for k in sorted(self._by_node.get(node, ()))]

    def podset(self, node: str) -> PodSet:
        ps = self._podsets.get(node)
        if ps is None:
            running = [p for p in self.pods_on(node) if p.phase == "Running" and p.deletion_ms is None]
            ps = self.usage.compile(running)
            self._podsets[node] = ps
        return ps

    def node_pod_usage(self, node: str, t_ms: int) -> tuple[PodSet, Any, Any]:
        ps = self.podset(node)
        cpu, mem = self.usage.evaluate(ps, t_ms, self.overrides)
        return ps, cpu, mem

    def pod_usage(self, pod: PodRecord, t_ms: int) -> Resources:
        current = self.pods.get(pod.key)
        if current is None or current.phase != "Running" or not current.node_name:
            return Resources()
        ps, cpu, mem = self.node_pod_usage(current.node_name, t_ms)
        try:
            i = ps.keys.index(pod.key)
        except ValueError:
            return Resources()
        return Resources(int(cpu[i]), int(mem[i]))

    def container_usage(self, pod: PodRecord, container: str, t_ms: int) -> Resources:
        current = self.pods.get(pod.key)
        if current is None:
            return Resources()
        total = self.pod_usage(current, t_ms)
        for name, cpu_share, mem_share in container_shares(current):
            if name == container:
                return Resources(int(total.cpu_milli * cpu_share), int(total.memory_bytes * mem_share))
        return Resources()

    # ------------------------------------------------------------------ apply

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _invalidate(self, *nodes: str | None) -> None:
        for n in nodes:
            if n:
                self._podsets.pop(n, None)

    def _put_pod(self, pod: PodRecord) -> None:
        old = self.pods.get(pod.key)
        if old is not None and old.node_name and old.node_name != pod.node_name:
            self._by_node.get(old.node_name, set()).discard(pod.key)
        self.pods[pod.key] = pod
        if pod.node_name:
            self._by_node.setdefault(pod.node_name, set()).add(pod.key)
        self._invalidate(pod.node_name, old.node_name if old else None)

    def _drop_pod(self, key: str) -> PodRecord | None:
        pod = self.pods.pop(key, None)
        if pod is not None and pod.node_name:
            self._by_node.get(pod.node_name, set()).discard(key)
            self._invalidate(pod.node_name)
        return pod

    def apply(self, op: str, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        """Apply one mutation; returns (result for the writer, events for watchers)."""
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise MutationError(f"unknown simulated-cluster mutation {op!r}")
        return handler(payload)

    def _op_genesis(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        spec = SimSpec.model_validate(payload.get("spec") or {}).resolved()
        fresh = SimState.from_spec(spec)
        self.__dict__.update(fresh.__dict__)
        events = [ClusterEvent("ADDED", "Node", n) for n in self.nodes.values()]
        events += [ClusterEvent("ADDED", "Pod", p) for p in self.pods.values()]
        return spec, events

    def _op_pod_created(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        pod = pod_from_dict(payload["pod"])
        if not pod.name or not pod.namespace:
            raise MutationError("a pod needs a namespace and a name")
        if pod.key in self.pods:
            raise MutationError(f'pods "{pod.name}" already exists in namespace {pod.namespace}')
        if pod.node_name and pod.node_name not in self.nodes:
            raise MutationError(f'node "{pod.node_name}" not found')
        if pod.node_name and pod.phase == "Pending":
            pod.phase = "Running"
            pod.start_ms = pod.start_ms or payload.get("t_ms")
        pod.resource_version = self._bump()
        self._put_pod(pod)
        return pod, [ClusterEvent("ADDED", "Pod", pod)]

    def _op_pod_bound(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        key = f"{payload['namespace']}/{payload['name']}"
        pod = self.pods.get(key)
        if pod is None:
            raise MutationError(f'pods "{payload["name"]}" not found')
        uid = payload.get("uid") or ""
        if uid and uid != pod.uid:
            raise MutationError(f"Precondition failed: UID in precondition: {uid}, UID in object meta: {pod.uid}")
        node = payload["node"]
        if node not in self.nodes:
            raise MutationError(f'node "{node}" not found')
        if pod.node_name:
            raise MutationError(f"pod {pod.name} is already assigned to node \"{pod.node_name}\"")
        # a Binding's annotations land on the pod with the binding, as the API server copies them
        extra = payload.get("annotations") or {}
        annotations = {**pod.annotations, **{str(k): str(v) for k, v in extra.items()}} if extra else pod.annotations
        new = dataclasses.replace(pod, node_name=node, phase="Running", start_ms=payload.get("t_ms"),
                                  annotations=annotations, resource_version=self._bump())
        self._put_pod(new)
        return new, [ClusterEvent("MODIFIED", "Pod", new)]

    def _op_pod_phase(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        key = f"{payload['namespace']}/{payload['name']}"
        pod = self.pods.get(key)
        if pod is None:
            raise MutationError(f'pods "{payload["name"]}" not found')
        new = dataclasses.replace(pod, phase=str(payload["phase"]), resource_version=self._bump())
        self._put_pod(new)
        return new, [ClusterEvent("MODIFIED", "Pod", new)]

    def _op_pod_deleted(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        pod = self._drop_pod(f"{payload['namespace']}/{payload['name']}")
        if pod is None:
            return None, []
        return pod, [ClusterEvent("DELETED", "Pod", pod)] + self._replace(pod, payload.get("t_ms"))

    def _replace(self, gone: PodRecord, t_ms: int | None) -> list[ClusterEvent]:
        """The ReplicaSet/StatefulSet controller's part: a replica that was evicted or deleted
        before it finished comes back as a new pending pod with the same template (and, for a
        trace-driven pod, the same demand), for the scheduler to place again."""
        # the gone pod's trace source passes to its replacement, if any: a deleted pod keeps none
        source = self.usage.pod_sources.pop(gone.uid, None) if self.usage is not None else None
        owner = gone.controller
        if owner is None or owner.kind not in ("ReplicaSet", "StatefulSet") or gone.is_terminal:
            return []
        if owner.kind == "StatefulSet":
            name = gone.name  # a StatefulSet keeps the ordinal name
        else:
            name = f"{owner.name}-{safe_hash(gone.uid, 5)}"
            while f"{gone.namespace}/{name}" in self.pods:
                name = f"{owner.name}-{safe_hash(name, 5)}"
        uid = pod_uid(self.spec.seed if self.spec else 0, gone.namespace, f"{name}/{gone.uid}")
        new = dataclasses.replace(
            gone,
            name=name,
            uid=uid,
            node_name=None,
            phase="Pending",
            created_ms=int(t_ms) if t_ms is not None else gone.created_ms,
            start_ms=None,
            deletion_ms=None,
            resource_version=self._bump(),
        )
        if source is not None:
            self.usage.pod_sources[uid] = source
        self._put_pod(new)
        return [ClusterEvent("ADDED", "Pod", new)]

    def eviction_decision(self, namespace: str, name: str, record: bool = False) -> EvictionResult:
        """What the eviction API would answer now (KK-ev EvictionREST.Create), without changing anything."""
        pod = self.pods.get(f"{namespace}/{name}")
        if pod is None:
            return EvictionResult(EvictionOutcome.NOT_FOUND, f'pods "{name}" not found')
        if pod.phase in ("Succeeded", "Failed", "Pending") or pod.deletion_ms is not None:
            return EvictionResult(EvictionOutcome.EVICTED)
        pdbs = [
            pdb
            for (ns, _), pdb in self.custom.get(PDB_KIND, {}).items()
            if ns == namespace and selector_matches((pdb.get("spec") or {}).get("selector"), pod.labels)
        ]
        if not pdbs:
            return EvictionResult(EvictionOutcome.EVICTED)
        if len(pdbs) > 1:
            return EvictionResult(EvictionOutcome.FORBIDDEN, PDB_MULTIPLE)
        pdb = pdbs[0]
        pdb_key = custom_key(pdb)
        spec = pdb.get("spec") or {}
        selected = [
            p for p in self.pods.values()
            if p.namespace == namespace and p.deletion_ms is None and not p.is_terminal
            and selector_matches(spec.get("selector"), p.labels)
        ]
        expected = max(len(selected), self.pdb_expected.get(pdb_key, 0))
        if record:
            self.pdb_expected[pdb_key] = expected
        healthy = sum(1 for p in selected if p.phase == "Running")
        if spec.get("minAvailable") is not None:
            desired = _int_or_percent(spec["minAvailable"], expected, round_up=True)
        elif spec.get("maxUnavailable") is not None:
            desired = max(expected - _int_or_percent(spec["maxUnavailable"], expected, round_up=True), 0)
        else:
            desired = expected  # neither set: no disruption allowed
        if pod.phase != "Running" and healthy >= desired > 0:
            return EvictionResult(EvictionOutcome.EVICTED)  # an unhealthy pod with a healthy budget
        if healthy - desired <= 0:
            pdb_name = (pdb.get("metadata") or {}).get("name", "")
            return EvictionResult(
                EvictionOutcome.BLOCKED,
                f"{PDB_BLOCKED} The disruption budget {pdb_name} needs {desired} healthy pods "
                f"and has {healthy} currently",
                PDB_RETRY_AFTER_S,
            )
        return EvictionResult(EvictionOutcome.EVICTED)

    def _op_pod_evicted(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        decision = self.eviction_decision(payload["namespace"], payload["name"], record=True)
        if decision.outcome is not EvictionOutcome.EVICTED:
            return decision, []
        pod = self._drop_pod(f"{payload['namespace']}/{payload['name']}")
        if pod is None:
            return decision, []
        return decision, [ClusterEvent("DELETED", "Pod", pod)] + self._replace(pod, payload.get("t_ms"))

    def _op_node_status(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        node = self.nodes.get(payload["name"])
        if node is None:
            raise MutationError(f'nodes "{payload["name"]}" not found')
        cap, alloc = dict(node.capacity), dict(node.allocatable)
        for k, v in (payload.get("set") or {}).items():
            cap[k] = alloc[k] = int(v)
        for k in payload.get("remove") or []:
            cap.pop(k, None)
            alloc.pop(k, None)
        new = dataclasses.replace(node, capacity=cap, allocatable=alloc, resource_version=self._bump())
        self.nodes[new.name] = new
        return new, [ClusterEvent("MODIFIED", "Node", new)]

    def _op_node_updated(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        """Spec/label changes for tests and the demo: labels, taints, unschedulable, ready."""
        name = payload["name"]
        node = self.nodes.get(name)
        if node is None:
            raise MutationError(f'nodes "{name}" not found')
        changes: dict[str, Any] = {}
        if payload.get("labels") is not None:
            changes["labels"] = {str(k): str(v) for k, v in payload["labels"].items()}
        if payload.get("taints") is not None:
            changes["taints"] = [Taint(t["key"], t.get("value", ""), t.get("effect", "NoSchedule")) for t in payload["taints"]]
        if payload.get("unschedulable") is not None:
            changes["unschedulable"] = bool(payload["unschedulable"])
        if payload.get("ready") is not None:
            changes["ready"] = bool(payload["ready"])
        new = dataclasses.replace(node, **changes, resource_version=self._bump())
        self.nodes[name] = new
        return new, [ClusterEvent("MODIFIED", "Node", new)]

    def _op_custom_applied(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        kind = str(payload["kind"])
        obj = payload["obj"]
        ns, name = custom_key(obj)
        if not name:
            raise MutationError(f"{kind} needs metadata.name")
        store = self.custom.setdefault(kind, {})
        existed = (ns, name) in store
        if kind == PDB_KIND and existed and (store[(ns, name)].get("spec") or {}).get("selector") != (obj.get("spec") or {}).get("selector"):
            self.pdb_expected.pop((ns, name), None)
        obj = dict(obj)
        meta = dict(obj.get("metadata") or {})
        meta["resourceVersion"] = self._bump()
        obj["metadata"] = meta
        store[(ns, name)] = obj
        return obj, [ClusterEvent("MODIFIED" if existed else "ADDED", "Custom", obj, kind)]

    def _op_custom_deleted(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        kind = str(payload["kind"])
        key = (payload.get("namespace") or "", payload["name"])
        obj = self.custom.get(kind, {}).pop(key, None)
        if kind == PDB_KIND:
            self.pdb_expected.pop(key, None)
        if obj is None:
            return None, []
        return obj, [ClusterEvent("DELETED", "Custom", obj, kind)]

    def _op_usage_override(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        o = Override(
            node=payload.get("node"),
            pod_key=payload.get("pod_key"),
            cpu_factor=float(payload.get("cpu_factor", 1.0)),
            memory_factor=float(payload.get("memory_factor", 1.0)),
            from_ms=payload.get("from_ms"),
            to_ms=payload.get("to_ms"),
        )
        self.overrides.append(o)
        return o, []

    def _op_usage_override_cleared(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        node, pod_key = payload.get("node"), payload.get("pod_key")
        before = len(self.overrides)
        self.overrides = [
            o for o in self.overrides
            if not ((node is None or o.node == node) and (pod_key is None or o.pod_key == pod_key))
        ]
        return before - len(self.overrides), []

    def _op_event(self, payload: dict[str, Any]) -> tuple[Any, list[ClusterEvent]]:
        self.events.append(dict(payload))
        return None, []

    # ------------------------------------------------------------------ workloads

    def resolve_workload(self, pod: PodRecord) -> tuple[str, str]:
        owner = pod.controller
        if owner is None:
            return "Pod", pod.name
        if owner.kind == "ReplicaSet":
            deploy = self.workloads.get(owner.name)
            if deploy is None:
                m = _RS_NAME.match(owner.name)
                deploy = m.group("deploy") if m else None
            if deploy:
                return "Deployment", deploy
        return owner.kind, owner.name
