"""Build the core's plain inputs from cluster records and NodeMetrics."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from koordcommon.model import KubeQoS, PriorityClass, QoSClass, is_prod
from koordcommon.records import NodeRecord, PodRecord
from koordcommon.resources import Resources, sum_resources
from koordcommon.roundcache import RoundCache
from koordcommon.schemas import NodeMetric
from koordcommon.workload import workload_of

from .core.evictable import EvictorRules, non_evictable_reason
from .core.lownodeload import Load, NodeState, PodState

ANNOTATION_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
ANNOTATION_EVICTION_COST = "scheduling.koordinator.sh/eviction-cost"


@dataclass(frozen=True, slots=True)
class _Facts:
    """What every round derives of a pod, kept while the pod is unchanged (uid, resourceVersion)."""

    workload: str
    priority_class: PriorityClass
    prod: bool
    kube_qos: KubeQoS
    qos: QoSClass
    requests: Resources


_FACTS: RoundCache[tuple[str, str], _Facts] = RoundCache()  # a round begins with node_states


def facts(p: PodRecord) -> _Facts:
    key = (p.uid, p.resource_version)
    hit = _FACTS.get(key) if p.resource_version else None
    if hit is None:
        cls = p.priority_class
        hit = _Facts(str(workload_of(p)), cls, is_prod(cls), p.computed_kube_qos(), p.qos, p.request_resources())
        if p.resource_version:
            _FACTS.put(key, hit)
    return hit


def node_states(
    nodes: list[NodeRecord],
    pods: list[PodRecord],
    metrics: dict[str, NodeMetric],
    now_ms: int,
    expiration_s: int,
    departed: set[str] = frozenset(),
    arriving: dict[str, Resources] | None = None,
) -> list[NodeState]:
    """Nodes with their usage from a fresh NodeMetric (None when missing or expired).

    Usage is the NodeMetric's (system + every pod metric, as in Koordinator) minus the pods
    evicted since it was taken (`departed`, uids), plus `arriving` (pod key -> usage) for
    replacements already bound to the node but not in its metric yet; without that, one
    round's evictions would be counted again in the next round until the node reports anew.
    Prod usage sums the pod metrics whose pod on this node is prod. The `pods` resource counts
    the active pods bound to the node (the prod ones for prod usage) against its allocatable
    `pods`, as Koordinator counts the pods assigned to a node.
    """
    _FACTS.new_round()  # the facts of pods no round asked for since the last one go
    requested: dict[str, list[Resources]] = {}
    # node -> uid -> (pod key, prod): what the usage sums below read of each pod, derived once
    on_node: dict[str, dict[str, tuple[str, bool]]] = {}
    prods: dict[str, int] = {}  # node -> its active prod pods
    for p in pods:
        if p.node_name and p.is_active:
            f = facts(p)
            requested.setdefault(p.node_name, []).append(f.requests)
            on_node.setdefault(p.node_name, {})[p.uid] = (p.key, f.prod)
            if f.prod:
                prods[p.node_name] = prods.get(p.node_name, 0) + 1
    arriving = arriving or {}
    out = []
    for n in nodes:
        m = metrics.get(n.name)
        fresh = m is not None and now_ms - m.ts < expiration_s * 1000
        local = on_node.get(n.name, {})
        usage = prod = None
        if fresh:
            usage, prod = m.node_usage, Resources()
            by_key: dict[str, bool] | None = None  # key -> prod: needed only for a pod matched by name
            seen = set()
            for pm in m.pods:
                if pm.uid in departed:
                    usage = usage - pm.usage
                    continue
                hit = local.get(pm.uid)
                if hit is not None:
                    key, is_prod = hit
                else:
                    if by_key is None:
                        by_key = {key: is_prod for key, is_prod in local.values()}
                    key = f"{pm.namespace}/{pm.name}"
                    is_prod = by_key.get(key)
                    if is_prod is None:
                        continue
                seen.add(key)
                if is_prod:
                    prod = prod + pm.usage
            if arriving:
                if by_key is None:
                    by_key = {key: is_prod for key, is_prod in local.values()}
                for key, extra in arriving.items():
                    if key in by_key and key not in seen:
                        usage = usage + extra
                        if by_key[key]:
                            prod = prod + extra
            usage = usage.clamp0()
        n_pods, n_prod = len(local), prods.get(n.name, 0)
        out.append(
            NodeState(
                name=n.name,
                allocatable=Load.of(n.allocatable_resources(), pods=int(n.allocatable.get("pods", 0))),
                usage=None if usage is None else Load.of(usage, pods=n_pods),
                requested=sum_resources(requested.get(n.name, [])),
                labels=dict(n.labels),
                # Pod records carry no tolerations: a NoSchedule/NoExecute taint keeps every pod off.
                schedulable=n.ready and not n.unschedulable
                and not any(t.effect in ("NoSchedule", "NoExecute") for t in n.taints),
                prod_usage=Load.of(prod or Resources(), pods=n_prod),
            )
        )
    return out


def pod_states(pods: list[PodRecord], metrics: dict[str, NodeMetric], rules: EvictorRules = EvictorRules()) -> list[PodState]:
    usage: dict[str, Resources] = {}
    for m in metrics.values():
        for pm in m.pods:
            usage[pm.uid] = pm.usage
            usage[f"{pm.namespace}/{pm.name}"] = pm.usage
    out = []
    for p in pods:
        if not p.node_name:
            continue
        cost = _int_annotation(p, ANNOTATION_DELETION_COST)
        f = facts(p)
        out.append(
            PodState(
                namespace=p.namespace,
                name=p.name,
                uid=p.uid,
                node=p.node_name,
                workload=f.workload,
                priority_class=f.priority_class,
                priority=p.priority or 0,
                kube_qos=f.kube_qos,
                qos=f.qos,
                requests=f.requests,
                usage=usage.get(p.uid) or usage.get(p.key),
                created_ms=p.created_ms,
                non_evictable=non_evictable_reason(p, rules),
                deletion_cost=cost,
                eviction_cost=_int_annotation(p, ANNOTATION_EVICTION_COST),
                labels=dict(p.labels),
            )
        )
    return out


class PodsByNode(Mapping[str, list[PodState]]):
    """The pod states of each node, built when the plan first asks for a node's pods: a round
    weighs the pods of its source nodes only, so the others are never built. A pod's usage is
    its own node's NodeMetric entry; `keep` drops pods the round may not move (blocked, in flight)."""

    def __init__(self, pods: list[PodRecord], metrics: dict[str, NodeMetric], rules: EvictorRules,
                 keep: Callable[[PodState], bool] = lambda _: True) -> None:
        self._records: dict[str, list[PodRecord]] = {}
        for p in pods:
            if p.node_name:
                self._records.setdefault(p.node_name, []).append(p)
        self._metrics, self._rules, self._keep = metrics, rules, keep
        self._built: dict[str, list[PodState]] = {}

    def __getitem__(self, node: str) -> list[PodState]:
        if node not in self._records:
            raise KeyError(node)
        built = self._built.get(node)
        if built is None:
            m = self._metrics.get(node)
            built = [s for s in pod_states(self._records[node], {node: m} if m else {}, self._rules) if self._keep(s)]
            self._built[node] = built
        return built

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)


def _int_annotation(p: PodRecord, key: str) -> int:
    try:
        return int(p.annotations.get(key, "0"))
    except ValueError:
        return 0


def replicas_by_workload(pods: list[PodRecord]) -> dict[str, int]:
    """Pods of each workload that exist (running or pending): its expected replicas as far as
    the pods tell (the cluster port does not read controllers' spec.replicas)."""
    out: dict[str, int] = {}
    for p in pods:
        if p.owners and p.deletion_ms is None and not p.is_terminal:
            k = facts(p).workload
            out[k] = out.get(k, 0) + 1
    return out


def unavailable_by_workload(pods: list[PodRecord]) -> dict[str, int]:
    """Pods of each workload that are not running now (pending replacements count as away)."""
    out: dict[str, int] = {}
    for p in pods:
        if p.owners and p.phase == "Pending":
            k = facts(p).workload
            out[k] = out.get(k, 0) + 1
    return out
