"""kube-scheduler's in-tree Filter and Score plugins the simulated scheduler reproduces.

Filter: NodeUnschedulable, TaintToleration (records carry no tolerations, so every NoSchedule
/ NoExecute taint filters, and a not-ready node counts as tainted not-ready), NodeResourcesFit
(every requested resource, extended ones included, and the pod count). Score:
NodeResourcesFit LeastAllocated over cpu and memory with kube-scheduler's non-zero defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from koordcommon.records import NodeRecord, PodRecord, ResourceList

MAX_NODE_SCORE = 100
# schedutil.DefaultMilliCPURequest / DefaultMemoryRequest: a container without requests
# still counts this much when scoring (never when filtering).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNSCHEDULABLE_REASON = "node(s) were unschedulable"
TOO_MANY_PODS = "Too many pods"


def counts_on_node(pod: PodRecord) -> bool:
    """The scheduler's cache ignores terminal pods (its informer filters Succeeded/Failed)."""
    return bool(pod.node_name) and not pod.is_terminal


def add_requests(total: ResourceList, pod: PodRecord, sign: int = 1) -> None:
    for k, v in pod.requests().items():
        total[k] = total.get(k, 0) + sign * v
    total["pods"] = total.get("pods", 0) + sign


def non_zero_requests(pod: PodRecord) -> tuple[int, int]:
    cpu = mem = 0
    for c in pod.containers:
        cpu += c.requests.get("cpu") or DEFAULT_MILLI_CPU_REQUEST
        mem += c.requests.get("memory") or DEFAULT_MEMORY_REQUEST
    for ic in pod.init_containers:
        cpu = max(cpu, ic.requests.get("cpu") or DEFAULT_MILLI_CPU_REQUEST)
        mem = max(mem, ic.requests.get("memory") or DEFAULT_MEMORY_REQUEST)
    cpu += pod.overhead.get("cpu", 0)
    mem += pod.overhead.get("memory", 0)
    return cpu, mem


@dataclass(frozen=True, slots=True)
class PodDemand:
    """What the in-tree plugins read of a pod, derived once per scheduling cycle rather than
    once per node judged (a cycle may judge hundreds)."""

    requests: tuple[tuple[str, int, str], ...]  # (name, value, reason) per positive request but `pods`, by name
    non_zero: tuple[int, int]  # cpu, memory as LeastAllocated counts them

    @classmethod
    def of(cls, pod: PodRecord) -> PodDemand:
        requests = tuple((name, value, f"Insufficient {name}") for name, value in sorted(pod.requests().items())
                         if value > 0 and name != "pods")  # fmt: skip
        return cls(requests, non_zero_requests(pod))


def node_condition(node: NodeRecord) -> str | None:
    """NodeUnschedulable and TaintToleration: why `node` takes no pod at all, None when it may."""
    if node.unschedulable:
        return UNSCHEDULABLE_REASON
    if not node.ready:
        return f"node(s) had untolerated taint {{{NOT_READY_TAINT}: }}"
    for t in node.taints:
        if t.effect in ("NoSchedule", "NoExecute"):
            return f"node(s) had untolerated taint {{{t.key}: {t.value}}}"
    return None


def resource_reasons(demand: PodDemand, node: NodeRecord, requested: ResourceList) -> list[str]:
    """NodeResourcesFit: the pod count, then each requested resource in name order (empty: it fits)."""
    reasons = []
    alloc = node.allocatable
    max_pods = alloc.get("pods")
    if max_pods is not None and requested.get("pods", 0) + 1 > max_pods:
        reasons.append(TOO_MANY_PODS)
    for name, value, reason in demand.requests:
        if value > alloc.get(name, 0) - requested.get(name, 0):
            reasons.append(reason)
    return reasons


def filter_reasons(pod: PodRecord, node: NodeRecord, requested: ResourceList,
                   demand: PodDemand | None = None) -> list[str]:  # fmt: skip
    """Why `node` cannot take `pod` (empty: it fits). `requested` sums the node's pods' requests."""
    blocked = node_condition(node)
    if blocked is not None:
        return [blocked]
    return resource_reasons(PodDemand.of(pod) if demand is None else demand, node, requested)


class FitTable:
    """`filter_reasons` over many nodes at once, for one pass of the scheduler over its queue.

    Each node's free amount of a resource (allocatable - requested; for `pods`, free pod slots)
    is one array over the nodes, built on first use from `requested` and kept current by
    `assume`, so a cycle judges every node with a few array operations. A node's verdict is a
    code: 0 fits, -1 a node condition holds (`blocked`), else bit 0 too many pods and bit j + 1
    the demand's j-th request does not fit; `reason` spells a code out as `filter_reasons` does.
    """

    NO_LIMIT = np.iinfo(np.int64).max // 2  # free pod slots of a node without a `pods` allocatable

    def __init__(self, nodes: list[NodeRecord], requested: Mapping[str, ResourceList],
                 nonzero: Mapping[str, Sequence[int]] | None = None) -> None:  # fmt: skip
        self.nodes = nodes
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.names = np.array([n.name for n in nodes], dtype=object)  # names[rows].tolist(): a cycle's candidates
        self._requested = requested
        self._free: dict[str, np.ndarray] = {}
        self.conditions = [node_condition(n) for n in nodes]
        self.blocked = np.array([c is not None for c in self.conditions], dtype=bool)
        # LeastAllocated's inputs: allocatable cpu and memory, and the pods' non-zero requests
        self._alloc = np.array([(n.allocatable.get("cpu", 0), n.allocatable.get("memory", 0)) for n in nodes],
                               dtype=np.int64).reshape(-1, 2)  # fmt: skip
        nonzero = nonzero or {}
        self._nonzero = np.array([tuple(nonzero.get(n.name) or (0, 0)) for n in nodes], dtype=np.int64).reshape(-1, 2)

    def free(self, name: str) -> np.ndarray:
        arr = self._free.get(name)
        if arr is None:
            none: ResourceList = {}
            if name == "pods":
                values = [n.allocatable["pods"] - self._requested.get(n.name, none).get("pods", 0)
                          if "pods" in n.allocatable else self.NO_LIMIT for n in self.nodes]  # fmt: skip
            else:
                values = [n.allocatable.get(name, 0) - self._requested.get(n.name, none).get(name, 0)
                          for n in self.nodes]  # fmt: skip
            arr = self._free[name] = np.array(values, dtype=np.int64)
        return arr

    def assume(self, node: str, requests: ResourceList, nonzero: tuple[int, int] = (0, 0)) -> None:
        """A pod asking `requests` (`nonzero` as LeastAllocated counts it) was placed on `node`
        (the arrays not built yet read it from `requested`, which the caller has updated)."""
        i = self.index.get(node)
        if i is None:
            return
        for name, arr in self._free.items():
            arr[i] -= 1 if name == "pods" else requests.get(name, 0)
        self._nonzero[i] += nonzero

    def least_allocated(self, rows: Sequence[int] | np.ndarray, demand: PodDemand) -> np.ndarray:
        """`least_allocated_score` of the nodes at `rows`, in that order."""
        alloc = self._alloc[rows]
        req = self._nonzero[rows] + np.array(demand.non_zero, dtype=np.int64)
        fits = (alloc != 0) & (req <= alloc)
        part = np.where(fits, (alloc - req) * MAX_NODE_SCORE // np.where(alloc == 0, 1, alloc), 0)
        return part.sum(axis=1) // 2

    def codes(self, demand: PodDemand) -> np.ndarray:
        code = (self.free("pods") < 1).astype(np.int64)
        for j, (name, value, _) in enumerate(demand.requests):
            code |= (self.free(name) < value).astype(np.int64) << (j + 1)
        code[self.blocked] = -1
        return code

    def reason(self, code: int, demand: PodDemand) -> str:
        """The reasons of a positive `code`, as `filter_reasons` joins them (a node condition's,
        code -1, is `conditions[i]`)."""
        parts = [TOO_MANY_PODS] if code & 1 else []
        parts += [reason for j, (_, _, reason) in enumerate(demand.requests) if code >> (j + 1) & 1]
        return ", ".join(parts)


def least_allocated_score(pod: PodRecord, node: NodeRecord, requested_nonzero: tuple[int, int],
                          demand: PodDemand | None = None) -> int:  # fmt: skip
    """((alloc - requested) x 100 / alloc) per resource, averaged over cpu and memory (weights 1)."""
    pod_cpu, pod_mem = non_zero_requests(pod) if demand is None else demand.non_zero
    total = 0
    for alloc, req in (
        (node.allocatable.get("cpu", 0), requested_nonzero[0] + pod_cpu),
        (node.allocatable.get("memory", 0), requested_nonzero[1] + pod_mem),
    ):
        if alloc == 0 or req > alloc:
            continue  # scores 0
        total += (alloc - req) * MAX_NODE_SCORE // alloc
    return total // 2


def num_feasible_nodes_to_find(num_nodes: int, percentage: int = 0) -> int:
    """kube-scheduler's cap on how many feasible nodes one cycle looks for."""
    if num_nodes < 100:
        return num_nodes
    pct = percentage or max(5, 50 - num_nodes // 125)
    return min(num_nodes, max(100, num_nodes * pct // 100))


def unschedulable_message(total_nodes: int, reasons: dict[str, str | list[str]]) -> str:
    """`0/N nodes are available: 2 Insufficient cpu, 3 node(s) were unschedulable.`"""
    counts: dict[str, int] = {}
    for rs in reasons.values():
        for r in [rs] if isinstance(rs, str) else rs:
            counts[r] = counts.get(r, 0) + 1
    parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
    return f"0/{total_nodes} nodes are available: {parts}." if parts else f"0/{total_nodes} nodes are available."
