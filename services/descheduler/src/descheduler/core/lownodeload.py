"""One LowNodeLoad round: classify nodes, pick victims on hot nodes, respect the limits.

The result is a plan (plain data); executing it (evict, reserve, dry-run) happens elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from koordcommon.model import QOS_RANK, KubeQoS, PriorityClass, QoSClass, is_prod
from koordcommon.resources import Resources

from .anomaly import ANOMALY, Detector
from .config import LowNodeLoadArgs, NodePool

LOW, HIGH, NORMAL, UNKNOWN = "low", "high", "normal", "unknown"
BOTH_LOW, PROD_LOW, PROD_HIGH = "bothLow", "prodLow", "prodHigh"
RESOURCES = ("cpu", "memory")
PROD_DETECTOR = "prod/"  # prod source nodes have their own detectors

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
    prod_usage: Resources = field(default_factory=Resources)  # usage of the node's prod pods


@dataclass(frozen=True)
class PodState:
    namespace: str
    name: str
    uid: str
    node: str
    workload: str  # str(koordcommon.workload.workload_of(pod)): "<namespace>/<kind>/<name>"
    priority_class: PriorityClass
    priority: int
    kube_qos: KubeQoS
    qos: QoSClass
    requests: Resources
    usage: Resources | None
    created_ms: int
    non_evictable: str | None = None  # why it may not move (core.evictable), None if it may
    deletion_cost: int = 0
    eviction_cost: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_prod(self) -> bool:
        return is_prod(self.priority_class)


@dataclass(frozen=True)
class Migration:
    pod: PodState
    source: str
    target: str
    reason: str
    prod_pass: bool = False


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
    t = {
        "high": pool.highThresholds,
        "low": pool.lowThresholds,
        "prodHigh": pool.prodHighThresholds,
        "prodLow": pool.prodLowThresholds,
    }[which]
    return Resources(
        int(t.get("cpu", 100) * 0.01 * allocatable.cpu_milli),
        int(t.get("memory", 100) * 0.01 * allocatable.memory_bytes),
    )


def _any_over(pct: dict[str, float], thresholds: dict[str, float]) -> bool:
    return any(pct[r] > thresholds.get(r, 100) for r in RESOURCES)


def _all_under(pct: dict[str, float], thresholds: dict[str, float]) -> bool:
    return all(pct[r] <= thresholds.get(r, 100) for r in RESOURCES)


def classify(pool: NodePool, node: NodeState) -> str:
    """Koordinator's classifyNodes: "all <= low" is low, "any > high" is high (strict).

    With prod thresholds, the prod usage splits the rest: a low node whose prod usage is also
    under prodLow is bothLow, a node whose prod usage is over prodHigh is a prod source.
    """
    if node.usage is None:
        return UNKNOWN
    pct = usage_percent(node.allocatable, node.usage)
    prod = pool.prod_enabled
    prod_pct = usage_percent(node.allocatable, node.prod_usage) if prod else {}
    if node.schedulable and _all_under(pct, pool.lowThresholds):
        if prod and _any_over(prod_pct, pool.prodHighThresholds):
            return PROD_HIGH
        if prod and _all_under(prod_pct, pool.prodLowThresholds):
            return BOTH_LOW
        return LOW
    if _any_over(pct, pool.highThresholds):
        return HIGH
    if prod and _any_over(prod_pct, pool.prodHighThresholds):
        return PROD_HIGH
    if prod and node.schedulable and _all_under(prod_pct, pool.prodLowThresholds):
        return PROD_LOW
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
    """Koordinator's comparator chain: class, priority, kube QoS, koord QoS, costs, usage fit, newest."""

    def key(p: PodState):
        return (
            _CLASS_RANK.get(p.priority_class, 5),
            p.priority,
            _KUBE_QOS_RANK.get(p.kube_qos, 2),
            QOS_RANK.get(p.qos, 1),
            p.deletion_cost,
            p.eviction_cost,
            -pod_usage_score(pool, p, node_usage, high),
            -p.created_ms,
        )

    return sorted(pods, key=key)


@dataclass
class LimitCounter:
    """Migrations in flight (earlier rounds) and planned (this round), checked before each new one."""

    per_node: dict[str, int] = field(default_factory=dict)
    per_namespace: dict[str, int] = field(default_factory=dict)
    per_workload: dict[str, int] = field(default_factory=dict)
    total: int = 0  # in flight + planned
    planned: int = 0  # this round only

    def refusal(
        self, args: LowNodeLoadArgs, pod: PodState, workload_unavailable: int, replicas: int | None = None
    ) -> str | None:
        """Why one more migration of `pod` is not allowed now (retryable: later rounds may), or None.

        `replicas` is the workload's expected replicas (None: unknown, explicit limits only).
        A job whose replacement is still pending counts both as migrating and as unavailable:
        the conservative side of maxUnavailablePerWorkload.
        """
        lim = args.limits
        migrating = self.per_workload.get(pod.workload, 0)
        per_workload = lim.maxMigratingPerWorkload
        max_unavailable = lim.maxUnavailablePerWorkload
        if replicas is not None:
            per_workload = args.workload_limit(per_workload, replicas)
            max_unavailable = args.workload_limit(max_unavailable, replicas)
        checks = (
            (lim.maxMigratingGlobally, self.total, "maxMigratingGlobally reached"),
            (lim.maxMigratingPerNode, self.per_node.get(pod.node, 0), f"node {pod.node} reached maxMigratingPerNode"),
            (
                lim.maxMigratingPerNamespace,
                self.per_namespace.get(pod.namespace, 0),
                f"namespace {pod.namespace} reached maxMigratingPerNamespace",
            ),
            (per_workload, migrating, f"workload {pod.workload} reached maxMigratingPerWorkload"),
            (
                max_unavailable,
                workload_unavailable + migrating,
                f"workload {pod.workload} reached maxUnavailablePerWorkload",
            ),
            (lim.maxMigratingPerRound, self.planned, "round reached maxMigratingPerRound"),
        )
        for limit, count, reason in checks:
            if limit is not None and count + 1 > limit:
                return reason
        return None

    def add(self, pod_node: str, namespace: str, workload: str, planned: bool = True) -> None:
        self.per_node[pod_node] = self.per_node.get(pod_node, 0) + 1
        self.per_namespace[namespace] = self.per_namespace.get(namespace, 0) + 1
        self.per_workload[workload] = self.per_workload.get(workload, 0) + 1
        self.total += 1
        if planned:
            self.planned += 1


def forbidden_by_replicas(args: LowNodeLoadArgs, replicas: int | None) -> str | None:
    """Koordinator's filterExpectedReplicas (not retried): a workload whose every replica could be
    away at once is never migrated."""
    if replicas is None or args.limits.skipCheckExpectedReplicas:
        return None
    lim = args.limits
    if replicas == 1:
        return "workload has a single replica"
    if replicas == args.workload_limit(lim.maxMigratingPerWorkload, replicas):
        return f"workload replicas ({replicas}) equal maxMigratingPerWorkload"
    if replicas == args.workload_limit(lim.maxUnavailablePerWorkload, replicas):
        return f"workload replicas ({replicas}) equal maxUnavailablePerWorkload"
    return None


def _fits(pod: PodState, target: NodeState, target_high: Resources, target_prod_high: Resources | None) -> bool:
    """nodeFit: the pod's requests fit and its usage keeps the target at or under its high
    threshold (and under its prod high threshold in the prod pass)."""
    assert pod.usage is not None and target.usage is not None
    if not (target.usage + pod.usage).fits_in(target_high):
        return False
    if target_prod_high is not None and not (target.prod_usage + pod.usage).fits_in(target_prod_high):
        return False
    return (target.requested + pod.requests).fits_in(target.allocatable)


@dataclass
class _Pass:
    """One balancing pass (non-prod or prod) of one pool."""

    prod: bool
    sources: list[NodeState]
    targets: list[NodeState]
    available: Resources
    high: dict[str, Resources]  # node -> threshold the source must fall under (high or prodHigh)
    target_high: dict[str, Resources]
    target_prod_high: dict[str, Resources] | None


def plan_round(
    args: LowNodeLoadArgs,
    nodes: list[NodeState],
    pods: list[PodState],
    detectors: dict[str, Detector],
    now_s: float,
    in_flight: LimitCounter | None = None,
    workload_unavailable: dict[str, int] | None = None,
    workload_replicas: dict[str, int] | None = None,
) -> RoundPlan:
    """Plan one round. `detectors` is updated in place: it is the state carried between rounds.

    `in_flight` counts migrations still under way from earlier rounds; `workload_unavailable`
    counts pods of each workload that are not ready right now; `workload_replicas` the expected
    replicas of each workload (derived per-workload limits and the single-replica rule).
    """
    plan = RoundPlan()
    if args.paused:
        plan.notes.append("paused")
        return plan
    counter = in_flight or LimitCounter()
    counter.planned = 0
    unavailable = workload_unavailable or {}
    replicas = workload_replicas or {}
    pods_by_node: dict[str, list[PodState]] = {}
    for p in pods:
        pods_by_node.setdefault(p.node, []).append(p)
    processed: set[str] = set()

    for pool in args.nodePools:
        # A node drained by an earlier pool is left alone only by pools with a selector (Koordinator).
        members = [n for n in nodes if pool.selects(n.labels) and not (pool.nodeSelector and n.name in processed)]
        for n in members:
            plan.classes[n.name] = classify(pool, n)
        fresh = [n for n in members if n.usage is not None]
        by_class: dict[str, list[NodeState]] = {}
        for n in fresh:
            by_class.setdefault(plan.classes[n.name], []).append(n)
        high, prod_high = by_class.get(HIGH, []), by_class.get(PROD_HIGH, [])
        lows = by_class.get(LOW, []) + by_class.get(PROD_LOW, []) + by_class.get(BOTH_LOW, [])
        for n in fresh:
            if plan.classes[n.name] == NORMAL:
                for key in (n.name, PROD_DETECTOR + n.name):
                    if key in detectors:
                        detectors[key].mark(True, now_s)
        if not high and not prod_high:
            continue
        abnormal = [n for n in high if _detector(detectors, n.name, pool).mark(False, now_s) == ANOMALY]
        abnormal_prod = [
            n for n in prod_high if _detector(detectors, PROD_DETECTOR + n.name, pool).mark(False, now_s) == ANOMALY
        ]
        if not abnormal and not abnormal_prod:
            plan.notes.append(f"{pool.name}: {len(high) + len(prod_high)} hot node(s) not yet abnormal long enough")
            continue
        if not lows:
            plan.notes.append(f"{pool.name}: no low node to take pods")
            continue
        for n in lows:
            _detector(detectors, n.name, pool).reset(now_s)
            _detector(detectors, PROD_DETECTOR + n.name, pool).reset(now_s)
        if len(lows) <= args.numberOfNodes or len(lows) == len(members):
            continue
        plan.abnormal.extend(n.name for n in abnormal + abnormal_prod)
        highs = {n.name: threshold_qty(pool, n.allocatable, "high") for n in fresh}

        targets = by_class.get(LOW, []) + by_class.get(BOTH_LOW, [])
        available = Resources()
        for t in targets:
            available = available + (highs[t.name] - t.usage).clamp0()
        both_low_room = Resources()
        for t in by_class.get(BOTH_LOW, []):
            both_low_room = both_low_room + (highs[t.name] - t.usage).clamp0()
        left = _balance(
            args, pool, plan, counter, unavailable, replicas, pods_by_node, detectors, now_s,
            _Pass(False, abnormal, targets, available, highs, highs, None),
        )
        if pool.prod_enabled and abnormal_prod:
            prod_highs = {n.name: threshold_qty(pool, n.allocatable, "prodHigh") for n in fresh}
            prod_available = Resources()
            for t in by_class.get(PROD_LOW, []):
                prod_available = prod_available + (prod_highs[t.name] - t.prod_usage).clamp0()
            both_prod = Resources()
            for t in by_class.get(BOTH_LOW, []):
                both_prod = both_prod + (prod_highs[t.name] - t.prod_usage).clamp0()
            # bothLow nodes gave room to the non-prod pass first: only what is left counts here.
            remaining = (both_low_room - (available - left)).clamp0()
            prod_available = prod_available + Resources(
                min(both_prod.cpu_milli, remaining.cpu_milli), min(both_prod.memory_bytes, remaining.memory_bytes)
            )
            _balance(
                args, pool, plan, counter, unavailable, replicas, pods_by_node, detectors, now_s,
                _Pass(
                    True, abnormal_prod, by_class.get(PROD_LOW, []) + by_class.get(BOTH_LOW, []),
                    prod_available, prod_highs, highs, prod_highs,
                ),
            )
        for n in abnormal:
            detectors[n.name].mark(True, now_s)
        for n in abnormal_prod:
            detectors[PROD_DETECTOR + n.name].mark(True, now_s)
        processed.update(n.name for n in high + prod_high)
    return plan


def _detector(detectors: dict[str, Detector], key: str, pool: NodePool) -> Detector:
    det = detectors.get(key)
    if det is None:
        det = detectors[key] = Detector(pool.anomalyCondition)
    return det


def _balance(
    args: LowNodeLoadArgs,
    pool: NodePool,
    plan: RoundPlan,
    counter: LimitCounter,
    unavailable: dict[str, int],
    replicas: dict[str, int],
    pods_by_node: dict[str, list[PodState]],
    detectors: dict[str, Detector],
    now_s: float,
    ps: _Pass,
) -> Resources:
    """Koordinator's balancePods over the pass's sources; returns the targets' room left."""
    available = ps.available
    thresholds = pool.prodHighThresholds if ps.prod else pool.highThresholds
    for source in sorted(ps.sources, key=lambda n: -node_score(pool, n.allocatable, n.usage)):
        measured = source.prod_usage if ps.prod else source.usage
        limit = ps.high[source.name]
        candidates: list[tuple[PodState, NodeState | None]] = []
        for p in pods_by_node.get(source.name, []):
            if ps.prod and not p.is_prod:
                continue
            reason = p.non_evictable
            if reason is None and not args.namespace_allowed(p.namespace):
                reason = f"namespace {p.namespace} is not evictable"
            if reason is None:
                reason = forbidden_by_replicas(args, replicas.get(p.workload))
            if reason is None and p.usage is None:
                reason = "no usage metric"
            target = None
            if reason is None:
                # QUIRK kept from Koordinator's podFitsAnyNodeWithThreshold: a pod that fits
                # leaves its usage on that target for the rest of the round, moved or not.
                # Least-used target first: the migration is pinned to it (the reservation's node),
                # so spreading here is what the scheduler's scoring would do.
                target = next(
                    (
                        t for t in sorted(ps.targets, key=lambda t: (node_score(pool, t.allocatable, t.usage), t.name))
                        if _fits(p, t, ps.target_high[t.name], ps.target_prod_high[t.name] if ps.target_prod_high else None)
                    ),
                    None,
                )
                if target is not None:
                    target.usage = target.usage + p.usage
                    if ps.target_prod_high is not None:
                        target.prod_usage = target.prod_usage + p.usage
                elif args.nodeFit:
                    reason = "fits on no low node under its thresholds"
            if reason:
                plan.skipped.append(Skip(p.key, source.name, reason))
            else:
                candidates.append((p, target or (ps.targets[0] if ps.targets else None)))
        order = victim_order(pool, [c[0] for c in candidates], measured, limit)
        target_of = {c[0].key: c[1] for c in candidates}
        for p in order:
            if not any(_get(measured, r) > _get(limit, r) for r in RESOURCES):
                _detector(detectors, (PROD_DETECTOR if ps.prod else "") + source.name, pool).reset(now_s)
                break  # the node is back under its high threshold
            if available.cpu_milli <= 0 or available.memory_bytes <= 0:
                plan.notes.append("the low nodes' room is used up")
                break
            target = target_of[p.key]
            if target is None:
                plan.skipped.append(Skip(p.key, source.name, "no low node"))
                continue
            refusal = counter.refusal(args, p, unavailable.get(p.workload, 0), replicas.get(p.workload))
            if refusal:
                plan.skipped.append(Skip(p.key, source.name, refusal))
                continue
            pct = usage_percent(source.allocatable, measured)
            over = [r for r in RESOURCES if pct[r] > thresholds.get(r, 100)]
            kind = "prod " if ps.prod else "node "
            why = ", ".join(f"{kind}{r} usage({pct[r]:.2f}%)>threshold({thresholds[r]:.2f}%)" for r in over)
            plan.migrations.append(Migration(p, source.name, target.name, f"node is overutilized, {why}", ps.prod))
            counter.add(p.node, p.namespace, p.workload)
            measured = measured - p.usage
            available = available - p.usage
            source.usage = source.usage - p.usage
            if p.is_prod:
                source.prod_usage = (source.prod_usage - p.usage).clamp0()
            target.requested = target.requested + p.requests
    return available
