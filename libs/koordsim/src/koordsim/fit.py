"""kube-scheduler's in-tree Filter and Score plugins the simulated scheduler reproduces.

Filter: NodeUnschedulable, TaintToleration (records carry no tolerations, so every NoSchedule
/ NoExecute taint filters, and a not-ready node counts as tainted not-ready), NodeResourcesFit
(every requested resource, extended ones included, and the pod count). Score:
NodeResourcesFit LeastAllocated over cpu and memory with kube-scheduler's non-zero defaults.
"""

from __future__ import annotations

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


def filter_reasons(pod: PodRecord, node: NodeRecord, requested: ResourceList) -> list[str]:
    """Why `node` cannot take `pod` (empty: it fits). `requested` sums the node's pods' requests."""
    if node.unschedulable:
        return [UNSCHEDULABLE_REASON]
    if not node.ready:
        return [f"node(s) had untolerated taint {{{NOT_READY_TAINT}: }}"]
    for t in node.taints:
        if t.effect in ("NoSchedule", "NoExecute"):
            return [f"node(s) had untolerated taint {{{t.key}: {t.value}}}"]
    reasons = []
    max_pods = node.allocatable.get("pods")
    if max_pods is not None and requested.get("pods", 0) + 1 > max_pods:
        reasons.append(TOO_MANY_PODS)
    for name, value in sorted(pod.requests().items()):
        if value <= 0 or name == "pods":
            continue
        if value > node.allocatable.get(name, 0) - requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def least_allocated_score(pod: PodRecord, node: NodeRecord, requested_nonzero: tuple[int, int]) -> int:
    """((alloc - requested) x 100 / alloc) per resource, averaged over cpu and memory (weights 1)."""
    pod_cpu, pod_mem = non_zero_requests(pod)
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
