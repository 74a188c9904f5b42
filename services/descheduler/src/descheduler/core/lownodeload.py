"""One LowNodeLoad round: classify nodes, pick victims on hot nodes, respect the limits.

The result is a plan (plain data); executing it (evict, reserve, dry-run) happens elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from koordcommon.model import QOS_RANK, KubeQoS, PriorityClass, QoSClass
from koordcommon.resources import Resources

from .anomaly import ANOMALY, Detector
from .config import LowNodeLoadArgs, NodePool

LOW, HIGH, NORMAL, UNKNOWN = "low", "high", "normal", "unknown"
RESOURCES = ("cpu", "memory")

# Koordinator's sorter ranks (lower = evicted first).
_CLASS_RANK = {
    PriorityClass.FREE: 1,
    PriorityClass.BATCH: 2,
    PriorityClass.MID: 3,
    PriorityClass.PROD: 4,
    PriorityClass.NONE: 5,
}
_KUBE_QOS_RANK = {KubeQoS.BEST_EFFORT: 0, KubeQoS.BURSTABLE: 1, KubeQoS.GUARANTEED: 2}


@dataclass
class NodeState:
    name: str
    allocatable: Resources
    usage: Resources | None  # None: metric missing or expired
    requested: Resources = field(default_factory=Resources)
    labels: dict[str, str] = field(default_factory=dict)
    schedulable: bool = True


@dataclass(frozen=True)
class PodState:
    namespace: str
    name: str
    uid: str
    node: str
    workload: str  # "<namespace>/<kind>/<name>"
    priority_class: PriorityClass
    priority: int
    kube_qos: KubeQoS
    qos: QoSClass
    requests: Resources
    usage: Resources | None
    created_ms: int
    non_evictable: str | None = None  # why it may not move (core.evictable), None if it may
    deletion_cost: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Migration:
    pod: PodState
    source: str
    target: str
    reason: str


@dataclass(frozen=True)
class Skip:
    pod_key: str
    node: str
    reason: str


@dataclass
class RoundPlan:
    classes: dict[str, str] = field(default_factory=dict)
    abnormal: list[str] = field(default_factory=list)
    migrations: list[Migration] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _get(r: Resources, name: str) -> int:
    return r.cpu_milli if name == "cpu" else r.memory_bytes


def usage_percent(allocatable: Resources, usage: Resources) -> dict[str, float]:
    return {
        r: (100.0 * _get(usage, r) / _get(allocatable, r) if _get(allocatable, r) > 0 else 0.0) for r in RESOURCES
    }


def threshold_qty(pool: NodePool, allocatable: Resources, which: str) -> Resources:
    """int(percent x 0.01 x allocatable), as Koordinator computes absolute thresholds."""
    t = pool.highThresholds if which == "high" else pool.lowThresholds
    return Resources(
        int(t.get("cpu", 100) * 0.01 * allocatable.cpu_milli),
        int(t.get("memory", 100) * 0.01 * allocatable.memory_bytes),
    )


def classify(pool: NodePool, node: NodeState) -> str:
    """low: every usage at or under its low threshold; high: any usage over its high threshold."""
    if node.usage is None:
        return UNKNOWN
    pct = usage_percent(node.allocatable, node.usage)
    if any(pct[r] > pool.highThresholds.get(r, 100) for r in RESOURCES):
        return HIGH
    if node.schedulable and all(pct[r] <= pool.lowThresholds.get(r, 100) for r in RESOURCES):
        return LOW
    return NORMAL


def node_score(pool: NodePool, allocatable: Resources, usage: Resources) -> int:
    """Koordinator's ResourceUsageScorer (0-1000): hotter nodes are drained first."""
    total = weights = 0
    for r in RESOURCES:
        alloc = _get(allocatable, r)
        if alloc <= 0:
            continue
        w = pool.resourceWeights.get(r, 1)
        total += w * min(_get(usage, r), alloc) * 1000 // alloc
        weights += w
    return total // weights if weights else 0


def pod_usage_score(pool: NodePool, pod: PodState, node_usage: Resources, high: Resources) -> float:
    """How well evicting this pod matches the excess: a pod using exactly the excess scores 2."""
    if pod.usage is None:
        return 0.0
    total = weights = 0.0
    for r in RESOURCES:
        exceed = _get(node_usage, r) - _get(high, r)
        if exceed <= 0:
            continue  # resources that are not over their threshold do not count
        w = pool.resourceWeights.get(r, 1)
        ratio = _get(pod.usage, r) / exceed
        if ratio > 0:
            total += w * (ratio if ratio < 1 else 1 / ratio + 1)
        weights += w
    return total / weights if weights else 0.0


def victim_order(pool: NodePool, pods: list[PodState], node_usage: Resources, high: Resources) -> list[PodState]:
    """Koordinator's comparator chain: class, priority, kube QoS, koord QoS, cost, usage fit, newest."""

    def key(p: PodState):
        return (
            _CLASS_RANK.get(p.priority_class, 5),
            p.priority,
            _KUBE_QOS_RANK.get(p.kube_qos, 2),
            QOS_RANK.get(p.qos, 1),
            p.deletion_cost,
            -pod_usage_score(pool, p, node_usage, high),
            -p.created_ms,
        )

    return sorted(pods, key=key)


@dataclass
class LimitCounter:
    """Migrations planned or in flight, checked against the limits before each new one."""

    per_node: dict[str, int] = field(default_factory=dict)
    per_namespace: dict[str, int] = field(default_factory=dict)
    per_workload: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def refusal(self, args: LowNodeLoadArgs, pod: PodState, workload_unavailable: int) -> str | None:
        lim = args.limits
        checks = (
            (lim.maxMigratingPerNode, self.per_node.get(pod.node, 0), f"node {pod.node} reached maxMigratingPerNode"),
            (
                lim.maxMigratingPerNamespace,
                self.per_namespace.get(pod.namespace, 0),
                f"namespace {pod.namespace} reached maxMigratingPerNamespace",
            ),
            (
                lim.maxMigratingPerWorkload,
                self.per_workload.get(pod.workload, 0),
                f"workload {pod.workload} reached maxMigratingPerWorkload",
            ),
            (
                lim.maxUnavailablePerWorkload,
                workload_unavailable + self.per_workload.get(pod.workload, 0),
                f"workload {pod.workload} reached maxUnavailablePerWorkload",
            ),
            (lim.maxMigratingPerRound, self.total, "round reached maxMigratingPerRound"),
        )
        for limit, count, reason in checks:
            if limit is not None and count + 1 > limit:
                return reason
        return None

    def add(self, pod: PodState) -> None:
        self.per_node[pod.node] = self.per_node.get(pod.node, 0) + 1
        self.per_namespace[pod.namespace] = self.per_namespace.get(pod.namespace, 0) + 1
        self.per_workload[pod.workload] = self.per_workload.get(pod.workload, 0) + 1
        self.total += 1


def _fits(pod: PodState, target: NodeState, target_high: Resources) -> bool:
    """nodeFit: the pod's requests fit and its usage keeps the target under its high threshold."""
    assert pod.usage is not None and target.usage is not None
    return (target.usage + pod.usage).fits_in(target_high) and (target.requested + pod.requests).fits_in(
        target.allocatable
    )


def plan_round(
    args: LowNodeLoadArgs,
    nodes: list[NodeState],
    pods: list[PodState],
    detectors: dict[str, Detector],
    now_s: float,
    in_flight: LimitCounter | None = None,
    workload_unavailable: dict[str, int] | None = None,
) -> RoundPlan:
    """Plan one round. `detectors` is updated in place: it is the state carried between rounds.

    `in_flight` counts migrations still under way from earlier rounds; `workload_unavailable`
    counts pods of each workload that are not ready right now.
    """
    plan = RoundPlan()
    if args.paused:
        plan.notes.append("paused")
        return plan
    counter = in_flight or LimitCounter()
    unavailable = workload_unavailable or {}
    pods_by_node: dict[str, list[PodState]] = {}
    for p in pods:
        pods_by_node.setdefault(p.node, []).append(p)
    processed: set[str] = set()

    for pool in args.nodePools:
        members = [n for n in nodes if n.name not in processed and pool.selects(n.labels)]
        for n in members:
            plan.classes[n.name] = classify(pool, n)
        fresh = [n for n in members if n.usage is not None]
        high = [n for n in fresh if plan.classes[n.name] == HIGH]
        low = [n for n in fresh if plan.classes[n.name] == LOW]
        abnormal = []
        for n in high:
            det = detectors.setdefault(n.name, Detector(pool.anomalyCondition))
            if det.mark(False, now_s) == ANOMALY:
                abnormal.append(n)
        for n in fresh:
            if plan.classes[n.name] == LOW:
                detectors.setdefault(n.name, Detector(pool.anomalyCondition)).reset(now_s)
            elif plan.classes[n.name] == NORMAL and n.name in detectors:
                detectors[n.name].mark(True, now_s)
        if not high:
            continue
        if not abnormal:
            plan.notes.append(f"{pool.name}: {len(high)} high node(s) not yet abnormal long enough")
            continue
        if not low:
            plan.notes.append(f"{pool.name}: no low node to take pods")
            continue
        if len(low) <= args.numberOfNodes or len(low) == len(members):
            continue
        plan.abnormal.extend(n.name for n in abnormal)
        highs = {n.name: threshold_qty(pool, n.allocatable, "high") for n in fresh}
        available = Resources()
        for t in low:
            available = available + (highs[t.name] - t.usage).clamp0()

        for source in sorted(abnormal, key=lambda n: -node_score(pool, n.allocatable, n.usage)):
            src_usage = source.usage
            candidates = []
            for p in pods_by_node.get(source.name, []):
                reason = p.non_evictable
                if reason is None and not args.namespace_allowed(p.namespace):
                    reason = f"namespace {p.namespace} is not evictable"
                if reason is None and p.usage is None:
                    reason = "no usage metric"
                if reason:
                    plan.skipped.append(Skip(p.key, source.name, reason))
                else:
                    candidates.append(p)
            for p in victim_order(pool, candidates, src_usage, highs[source.name]):
                if not any(_get(src_usage, r) > _get(highs[source.name], r) for r in RESOURCES):
                    break  # the node is back under its high threshold
                if available.cpu_milli <= 0 or available.memory_bytes <= 0:
                    plan.notes.append("the low nodes' room is used up")
                    break
                target = next((t for t in low if _fits(p, t, highs[t.name])), None)
                if target is None and args.nodeFit:
                    plan.skipped.append(Skip(p.key, source.name, "fits on no low node under its thresholds"))
                    continue
                target = target or low[0]
                refusal = counter.refusal(args, p, unavailable.get(p.workload, 0))
                if refusal:
                    plan.skipped.append(Skip(p.key, source.name, refusal))
                    continue
                pct = usage_percent(source.allocatable, src_usage)
                over = [r for r in RESOURCES if pct[r] > pool.highThresholds.get(r, 100)]
                why = ", ".join(f"node {r} usage({pct[r]:.2f}%)>threshold({pool.highThresholds[r]:.2f}%)" for r in over)
                plan.migrations.append(Migration(p, source.name, target.name, f"node is overutilized, {why}"))
                counter.add(p)
                src_usage = src_usage - p.usage
                available = available - p.usage
                target.usage = target.usage + p.usage
                target.requested = target.requested + p.requests
            source.usage = src_usage
        for n in abnormal:
            detectors[n.name].mark(True, now_s)
        processed.update(n.name for n in high)
    return plan
