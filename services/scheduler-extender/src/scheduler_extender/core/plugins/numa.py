"""Koordinator's NodeNUMAResource: exclusive CPUs for LSE / LSR pods (fine-grained CPU orchestration).

Which pods: QoS label LSE or LSR and priority class prod, with a CPU request (Koordinator's
AllowUseCPUSet). The bind policy is the pod's `scheduling.koordinator.sh/resource-spec`:
`requiredCPUBindPolicy` (must be met), else `preferredCPUBindPolicy`, Default or empty meaning
the arguments' `defaultCPUBindPolicy` (FullPCPUs); a node labelled
`node.koordinator.sh/cpu-bind-policy` FullPCPUsOnly / SpreadByPCPUs requires that policy, and a
pod requiring another fails there. A bound request must be whole CPUs ("the requested CPUs must
be integer", unresolvable). The NUMA allocate strategy is the node's
`node.koordinator.sh/numa-allocate-strategy` label, else the arguments' (LeastAllocated); the
NUMA topology policy the node's `node.koordinator.sh/numa-topology-policy` label and the pod's
`scheduling.koordinator.sh/numa-topology-spec`, which must agree when both are set.

Filter: a node without a CPU topology from its node agent fails ("node(s) invalid CPU
Topology"); else the CPUs are allocated from those no pod holds (not bound to an LSE / LSR pod,
pinned by the kubelet's static CPU manager, reserved by `node.koordinator.sh/reservation` or held
exclusively by SYSTEM pods) with `cpu_allocator.allocate`, and a node where none fits fails with
the reason. Score: how close the allocation comes to the policy's ideal (half: the bind policy met,
and as few NUMA nodes as the request needs), plus half the scoring strategy over the node's free
exclusive CPUs after it (LeastAllocated: the emptier the better; MostAllocated: the fuller).
The bind verb records the allocation on the pod as `scheduling.koordinator.sh/resource-status`
(`cpuset`, `numaNodeResources`), which the node agent applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from koordcommon import cpus as kc
from koordcommon.model import LABEL_QOS_CLASS, PriorityClass, QoSClass, parse_qos_class
from koordcommon.records import PodRecord
from koordcommon.schemas import NodeTopology

from ..cpu_allocator import Allocation, allocate, one_per_core, whole_cores
from ..framework import NO_SCORE, AssignedPod, NodeView, PodInfo, Verdict

NAME = "NodeNUMAResource"
REASON_INVALID_TOPOLOGY = "node(s) invalid CPU Topology"
REASON_NOT_INTEGER = "the requested CPUs must be integer"
REASON_POLICY_CONFLICT = "node(s) cpu bind policy conflicts with pod's required cpu bind policy"
REASON_NUMA_MISMATCH = "node(s) NUMA Topology policy not match"
NODE_POLICIES = {"FullPCPUsOnly": kc.FULL_PCPUS, "SpreadByPCPUs": kc.SPREAD_BY_PCPUS}
STRATEGIES = (kc.MOST_ALLOCATED, kc.LEAST_ALLOCATED)


@dataclass(frozen=True, slots=True)
class NUMAResourceArgs:
    """Koordinator's NodeNUMAResourceArgs (defaults as its v1 defaults)."""

    default_cpu_bind_policy: str = kc.FULL_PCPUS
    scoring_strategy: str = kc.LEAST_ALLOCATED  # node level: how free the node stays
    numa_scoring_strategy: str = kc.LEAST_ALLOCATED  # NUMA level: the default NUMA allocate strategy


@dataclass(frozen=True, slots=True)
class CPUAsk:
    """What a pod asks of the allocator (None from `ask_of` for a pod it does not bind)."""

    cpus: int  # whole CPUs
    policy: str
    required: bool
    exclusive: str
    numa_policy: str
    error: str = ""  # the pod cannot be bound anywhere (unresolvable)


def wants_cpuset(pod: PodRecord) -> bool:
    """Koordinator's AllowUseCPUSet: QoS label LSE or LSR and priority class prod."""
    q = parse_qos_class(pod.labels.get(LABEL_QOS_CLASS))
    return q in (QoSClass.LSE, QoSClass.LSR) and pod.priority_class is PriorityClass.PROD


def ask_of(pod: PodRecord, args: NUMAResourceArgs) -> CPUAsk | None:
    if not wants_cpuset(pod):
        return None
    milli = pod.requests().get("cpu", 0)
    if milli <= 0:
        return None
    try:
        spec = kc.parse_resource_spec(pod.annotations.get(kc.ANNOTATION_RESOURCE_SPEC))
    except kc.ResourceSpecError as exc:
        return CPUAsk(0, "", False, "", "", error=str(exc))
    numa = kc.numa_topology_policy_of(pod.annotations)
    exclusive = spec.exclusive if spec.exclusive != kc.EXCLUSIVE_NONE else ""
    if spec.required_bind:
        policy = args.default_cpu_bind_policy if spec.required_bind == kc.DEFAULT else spec.required_bind
        required = True
    else:
        policy = spec.preferred_bind if spec.preferred_bind not in ("", kc.DEFAULT) else args.default_cpu_bind_policy
        required = False
    if policy not in kc.BIND_POLICIES:
        return None  # no default policy: the pod is not bound
    if milli % 1000:
        return CPUAsk(0, policy, required, exclusive, numa, error=REASON_NOT_INTEGER)
    return CPUAsk(milli // 1000, policy, required, exclusive, numa)


@dataclass(slots=True)
class NodeCPUs:
    """One node as the allocator sees it."""

    cpus: kc.NodeCPUs
    labels: dict[str, str]
    held: dict[str, tuple[set[int], set[int]]] = field(default_factory=dict)  # exclusive policy -> (cores, nodes)
    kubelet_policy: str = "none"

    @property
    def topology(self) -> kc.Topology:
        return self.cpus.topology


def node_cpus(view: NodeView) -> NodeCPUs | None:
    """The node's CPUs from its topology report, node annotations and the pods counted on it."""
    report: NodeTopology | None = view.topology
    if report is None or not report.cpus:
        return None
    topo = kc.Topology(tuple(kc.CPU(c.id, c.core, c.socket, c.node) for c in report.cpus))
    annotations = view.record.annotations if view.record is not None else {}
    labels = view.record.labels if view.record is not None else {}
    bound: dict[int, str] = {}
    held: dict[str, tuple[set[int], set[int]]] = {}
    pinned: set[int] = set()
    for alloc in report.pod_cpu_allocs:  # what the node reports, in case our pod view lags
        cpus = kc.cpus_of(alloc.cpuset)
        if alloc.managedByKubelet:
            pinned |= cpus
        else:
            bound.update((c, "LSR") for c in cpus)
    for p in view.pods:
        for c in p.cpuset:
            bound[c] = p.cpu_qos or "LSR"
        if p.cpu_exclusive and p.cpuset:
            cores, nodes = held.setdefault(p.cpu_exclusive, (set(), set()))
            cores.update(topo.by_id[c].core for c in p.cpuset if c in topo.by_id)
            nodes.update(topo.by_id[c].node for c in p.cpuset if c in topo.by_id)
    state = kc.NodeCPUs(topo, bound, frozenset(pinned), kc.reserved_cpus(annotations), kc.system_qos_cpus(annotations))
    return NodeCPUs(state, dict(labels), held, report.kubelet_cpu_policy)


@dataclass(frozen=True, slots=True)
class Placement:
    allocation: Allocation
    policy: str
    required: bool
    strategy: str
    numa_policy: str


def place(node: NodeCPUs, ask: CPUAsk, args: NUMAResourceArgs) -> Placement | str:
    """The allocation on this node, or the reason none can be made."""
    labels = node.labels
    node_policy = NODE_POLICIES.get(labels.get(kc.LABEL_CPU_BIND_POLICY, ""))
    policy, required = ask.policy, ask.required
    if node_policy is not None:
        if ask.required and ask.policy != node_policy:
            return REASON_POLICY_CONFLICT
        policy, required = node_policy, True
    strategy = labels.get(kc.LABEL_NUMA_ALLOCATE_STRATEGY) or args.numa_scoring_strategy
    if strategy not in STRATEGIES:
        strategy = args.numa_scoring_strategy
    node_numa = labels.get(kc.LABEL_NUMA_TOPOLOGY_POLICY, "")
    node_numa = "" if node_numa == "None" else node_numa
    pod_numa = "" if ask.numa_policy == "None" else ask.numa_policy
    if node_numa and pod_numa and node_numa != pod_numa:
        return REASON_NUMA_MISMATCH
    numa = pod_numa or node_numa
    held_cores, held_nodes = node.held.get(ask.exclusive, (set(), set())) if ask.exclusive else (set(), set())
    got = allocate(node.topology, node.cpus.allocatable(), ask.cpus, policy, required, strategy, numa,
                   ask.exclusive, held_cores, held_nodes)  # fmt: skip
    if not got.ok:
        return got.reason
    return Placement(got, policy, required, strategy, numa)


def placement_score(node: NodeCPUs, p: Placement, args: NUMAResourceArgs) -> dict[str, int]:
    """The score's parts: 25 for the bind policy met, 25 x (fewest NUMA nodes possible / used),
    and half the scoring strategy over the exclusive CPUs left free."""
    topo, cpus = node.topology, p.allocation.cpus
    met = whole_cores(topo, cpus) if p.policy == kc.FULL_PCPUS else one_per_core(topo, cpus)
    used = max(len(topo.nodes_of(cpus)), 1)
    fewest = -(-len(cpus) // max(topo.cpus_per_node, 1))
    total = max(len(topo.cpus), 1)
    free_after = len(node.cpus.allocatable()) - len(cpus)
    strategy = free_after * 100 // total
    if args.scoring_strategy == kc.MOST_ALLOCATED:
        strategy = 100 - strategy
    parts = {"bind_policy": 25 if met else 0, "numa": 25 * min(fewest, used) // used, "strategy": strategy // 2}
    parts["total"] = sum(parts.values())
    return parts


class NodeNUMAResource:
    name = NAME
    weight = 1

    def __init__(self, args: NUMAResourceArgs | None = None) -> None:
        self.args = args or NUMAResourceArgs()
        self.nodes: dict[int, NodeCPUs] = {}  # rows of nodes with a CPU topology

    def refresh(self, row: int, view: NodeView) -> None:
        held = node_cpus(view)
        if held is None:
            self.nodes.pop(row, None)
        else:
            self.nodes[row] = held

    def scratch(self, views: list[NodeView]) -> dict[int, NodeCPUs]:
        return {i: held for i, v in enumerate(views) if (held := node_cpus(v)) is not None}

    def ask(self, pod: PodInfo) -> CPUAsk | None:
        return ask_of(pod.record, self.args)

    def placement(self, pod: PodInfo, view: NodeView) -> Placement | str | None:
        """Where the pod's CPUs go on this node (None: the pod binds no CPUs)."""
        ask = self.ask(pod)
        if ask is None:
            return None
        if ask.error:
            return ask.error
        node = node_cpus(view)
        return REASON_INVALID_TOPOLOGY if node is None else place(node, ask, self.args)

    def filter(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> Verdict:
        ask = self.ask(pod)
        if ask is None:
            return Verdict.passing(len(rows))
        if ask.error:
            return Verdict.from_reasons([ask.error] * len(rows), [ask.error])
        nodes: dict[int, NodeCPUs] = self.nodes if store is None else store
        reasons: list[str | None] = []
        for row in rows.tolist():
            node = nodes.get(row)
            if node is None:
                reasons.append(REASON_INVALID_TOPOLOGY)
                continue
            got = place(node, ask, self.args)
            reasons.append(got if isinstance(got, str) else None)
        unresolvable = {REASON_INVALID_TOPOLOGY, REASON_POLICY_CONFLICT, REASON_NUMA_MISMATCH}
        return Verdict.from_reasons(reasons, unresolvable)

    def score(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> np.ndarray | None:
        ask = self.ask(pod)
        if ask is None or ask.error:
            return None
        nodes: dict[int, NodeCPUs] = self.nodes if store is None else store
        out = np.full(len(rows), NO_SCORE, dtype=np.int64)
        for i, row in enumerate(rows.tolist()):
            node = nodes.get(row)
            if node is None:
                continue
            got = place(node, ask, self.args)
            if not isinstance(got, str):
                out[i] = placement_score(node, got, self.args)["total"]
        return out

    def explain(self, pod: PodInfo, view: NodeView, now_ms: int) -> dict[str, Any]:
        """The pod's ask, the node's CPUs (free, bound, pinned, reserved) and the allocation with its score."""
        ask = self.ask(pod)
        if ask is None:
            return {"note": "the pod binds no CPUs (not LSE/LSR prod with a CPU request, or no bind policy)"}
        out: dict[str, Any] = {"cpus": ask.cpus, "policy": ask.policy, "required": ask.required,
                               "exclusive": ask.exclusive or None, "numa_topology_policy": ask.numa_policy or None}  # fmt: skip
        if ask.error:
            out["reason"] = ask.error
            return out
        node = node_cpus(view)
        if node is None:
            out["reason"] = REASON_INVALID_TOPOLOGY
            return out
        topo = node.topology
        out["node"] = {"cpus": len(topo.cpus), "cpus_per_core": topo.cpus_per_core, "numa_nodes": len(topo.numa_nodes),
                       "free": kc.format_cpuset(node.cpus.allocatable()), "bound": kc.format_cpuset(node.cpus.bound),
                       "kubelet_pinned": kc.format_cpuset(node.cpus.kubelet_pinned),
                       "reserved": kc.format_cpuset(node.cpus.reserved | node.cpus.system)}  # fmt: skip
        got = place(node, ask, self.args)
        if isinstance(got, str):
            out["reason"] = got
            return out
        out.update({"bind_policy": got.policy, "policy_required": got.required, "numa_allocate_strategy": got.strategy,
                    "cpuset": kc.format_cpuset(got.allocation.cpus),
                    "numa_nodes_used": topo.nodes_of(got.allocation.cpus),
                    "score": placement_score(node, got, self.args)})  # fmt: skip
        return out


def resource_status(view_topology: kc.Topology, cpus: tuple[int, ...]) -> kc.ResourceStatus:
    """The resource-status annotation of an allocation: the cpuset and, per NUMA node, its CPUs."""
    per_node: dict[int, int] = {}
    for c in cpus:
        n = view_topology.by_id[c].node
        per_node[n] = per_node.get(n, 0) + 1
    entries = tuple({"node": n, "resources": {"cpu": str(k)}} for n, k in sorted(per_node.items()))
    return kc.ResourceStatus(kc.format_cpuset(cpus), tuple(per_node), entries)


def assigned_cpus(pod: PodRecord) -> tuple[frozenset[int], str, str]:
    """(bound CPUs, QoS label, exclusive policy) of a pod counted on a node, from its annotations."""
    status = kc.parse_resource_status(pod.annotations.get(kc.ANNOTATION_RESOURCE_STATUS))
    if status is None or not status.cpuset:
        return frozenset(), "", ""
    try:
        exclusive = kc.parse_resource_spec(pod.annotations.get(kc.ANNOTATION_RESOURCE_SPEC)).exclusive
    except kc.ResourceSpecError:
        exclusive = ""
    qos = parse_qos_class(pod.labels.get(LABEL_QOS_CLASS))
    return kc.cpus_of(status.cpuset), "LSE" if qos is QoSClass.LSE else "LSR", "" if exclusive == "None" else exclusive


__all__ = ["NAME", "AssignedPod", "NUMAResourceArgs", "NodeNUMAResource", "ask_of", "assigned_cpus",
           "resource_status"]  # fmt: skip
