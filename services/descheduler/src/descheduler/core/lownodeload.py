"""One LowNodeLoad round, in the steps Koordinator's plugin takes for each node pool:

1. classify the nodes (`classify_nodes`): low, high or normal, and the prod classes, against
   thresholds as percentages of each node's allocatable (`pool_percents`: as configured, or
   around the pool's average usage with deviation thresholds);
2. pick the sources (`pick_sources`): the high nodes that stayed hot long enough (the anomaly
   detector), drained hottest first (`hottest_first`);
3. order the victims on a source (`victims_on`): the pods that may leave, each with the low node
   it fits on, in Koordinator's eviction order (`victim_order`); the others with why not;
4. move them (`evict_from`) until the source falls under its high threshold or the low nodes'
   room is used up, within the migration limits (`LimitCounter`).

The result is a plan (plain data); executing it (evict, reserve, dry-run) happens elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordcommon.model import QOS_RANK, KubeQoS, PriorityClass, QoSClass, is_prod
from koordcommon.resources import Resources

from .anomaly import ANOMALY, Detector
from .config import RESOURCE_NAMES, LowNodeLoadArgs, NodePool

LOW, HIGH, NORMAL, UNKNOWN = "low", "high", "normal", "unknown"
BOTH_LOW, PROD_LOW, PROD_HIGH = "bothLow", "prodLow", "prodHigh"
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


@dataclass(frozen=True, slots=True)
class Load:
    """An amount of each resource LowNodeLoad weighs: cpu (milli-cores), memory (bytes) and pods
    (a count, against the node's allocatable `pods`)."""

    cpu: int = 0
    memory: int = 0
    pods: int = 0

    @classmethod
    def of(cls, r: Resources, pods: int = 0) -> Load:
        return cls(r.cpu_milli, r.memory_bytes, pods)

    def __getitem__(self, resource: str) -> int:
        return getattr(self, resource)

    def __add__(self, other: Load) -> Load:
        return Load(self.cpu + other.cpu, self.memory + other.memory, self.pods + other.pods)

    def __sub__(self, other: Load) -> Load:
        return Load(self.cpu - other.cpu, self.memory - other.memory, self.pods - other.pods)

    def clamp0(self) -> Load:
        return Load(max(self.cpu, 0), max(self.memory, 0), max(self.pods, 0))

    def min(self, other: Load) -> Load:
        return Load(min(self.cpu, other.cpu), min(self.memory, other.memory), min(self.pods, other.pods))

    @property
    def resources(self) -> Resources:
        return Resources(self.cpu, self.memory)


@dataclass
class NodeState:
    name: str
    allocatable: Load
    usage: Load | None  # None: metric missing or expired
    requested: Resources = field(default_factory=Resources)
    labels: dict[str, str] = field(default_factory=dict)
    schedulable: bool = True
    prod_usage: Load = field(default_factory=Load)  # usage and count of the node's prod pods


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
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def moved(self) -> Load:
        """What leaving takes off a node: the pod's usage and one pod."""
        assert self.usage is not None
        return Load.of(self.usage, pods=1)

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
    # what the decision read (explanations): the source's usage against its thresholds, the
    # victim order on it, and the targets' room when the pod was picked
    inputs: dict[str, Any] = field(default_factory=dict, compare=False)


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


def usage_percent(allocatable: Load, usage: Load) -> dict[str, float]:
    return {r: (100.0 * usage[r] / allocatable[r] if allocatable[r] > 0 else 0.0) for r in RESOURCE_NAMES}


@dataclass(frozen=True)
class Percents:
    """A pool's thresholds for one round, in percent of each node's allocatable."""

    low: dict[str, float]
    high: dict[str, float]
    prod_low: dict[str, float]
    prod_high: dict[str, float]


def average_percent(nodes: list[NodeState], prod: bool = False) -> dict[str, float]:
    """Koordinator's calcAverageResourceUsagePercent: the mean usage percentage over the nodes
    with a fresh metric (a node without allocatable of a resource adds 0 to its sum)."""
    sums = dict.fromkeys(RESOURCE_NAMES, 0.0)
    for n in nodes:
        used = n.prod_usage if prod else n.usage
        for r in RESOURCE_NAMES:
            if n.allocatable[r] > 0:
                sums[r] += used[r] / n.allocatable[r] * 100.0
    return {r: s / len(nodes) for r, s in sums.items()} if nodes else sums


def _around(average: dict[str, float], low: dict[str, float], high: dict[str, float]):
    """Deviation thresholds: low = average - low, high = average + high, each within 0..100; a
    resource whose low deviation is 0 is not limited (both are its whole allocatable)."""
    lo, hi = {}, {}
    for r, deviation in low.items():
        if deviation == 0:
            lo[r] = hi[r] = 100.0
        else:
            lo[r] = min(max(average[r] - deviation, 0.0), 100.0)
            hi[r] = min(max(average[r] + high.get(r, 0.0), 0.0), 100.0)
    return lo, hi


def pool_percents(pool: NodePool, fresh: list[NodeState]) -> Percents:
    """The thresholds of this round: as configured, or with useDeviationThresholds relative to
    the average usage of the pool's nodes (prod thresholds to the prod average)."""
    if not pool.useDeviationThresholds:
        return Percents(pool.lowThresholds, pool.highThresholds, pool.prodLowThresholds, pool.prodHighThresholds)
    low, high = _around(average_percent(fresh), pool.lowThresholds, pool.highThresholds)
    prod_low, prod_high = _around(average_percent(fresh, prod=True), pool.prodLowThresholds, pool.prodHighThresholds)
    return Percents(low, high, prod_low, prod_high)


def threshold_qty(percents: dict[str, float], allocatable: Load) -> Load:
    """int(percent x 0.01 x allocatable), as Koordinator turns a percentage into a threshold."""
    # spelt out per resource (Load's fields are RESOURCE_NAMES): every node of every round comes here
    get = percents.get
    return Load(int(get("cpu", 100.0) * 0.01 * allocatable.cpu), int(get("memory", 100.0) * 0.01 * allocatable.memory),
                int(get("pods", 100.0) * 0.01 * allocatable.pods))  # fmt: skip


@dataclass(frozen=True)
class NodeThresholds:
    low: Load
    high: Load
    prod_low: Load
    prod_high: Load


def node_thresholds(percents: Percents, allocatable: Load) -> NodeThresholds:
    return NodeThresholds(*(threshold_qty(p, allocatable) for p in
                            (percents.low, percents.high, percents.prod_low, percents.prod_high)))


def is_over(usage: Load, threshold: Load, resources: tuple[str, ...]) -> bool:
    """Any resource strictly over its threshold (Koordinator's "any > high")."""
    return any(usage[r] > threshold[r] for r in resources)


def _all_under(usage: Load, threshold: Load, resources: tuple[str, ...]) -> bool:
    return all(usage[r] <= threshold[r] for r in resources)


def classify(pool: NodePool, node: NodeState, th: NodeThresholds | None = None) -> str:
    """Koordinator's classifyNodes: "all <= low" is low, "any > high" is high (strict), over the
    pool's resources, against `th` (the configured thresholds of this node when not given).

    With prod thresholds, the prod usage splits the rest: a low node whose prod usage is also
    under prodLow is bothLow, a node whose prod usage is over prodHigh is a prod source.
    """
    if node.usage is None:
        return UNKNOWN
    th = th or node_thresholds(pool_percents(pool, []), node.allocatable)
    rs, prod = pool.resources, pool.prod_enabled
    if node.schedulable and _all_under(node.usage, th.low, rs):
        if prod and is_over(node.prod_usage, th.prod_high, rs):
            return PROD_HIGH
        if prod and _all_under(node.prod_usage, th.prod_low, rs):
            return BOTH_LOW
        return LOW
    if is_over(node.usage, th.high, rs):
        return HIGH
    if prod and is_over(node.prod_usage, th.prod_high, rs):
        return PROD_HIGH
    if prod and node.schedulable and _all_under(node.prod_usage, th.prod_low, rs):
        return PROD_LOW
    return NORMAL


def node_score(pool: NodePool, allocatable: Load, usage: Load) -> int:
    """Koordinator's ResourceUsageScorer (0-1000), over the pool's resources and the pod count,
    each by its weight (0 when the pool gives it none): hotter nodes are drained first."""
    total = weights = 0
    for r in dict.fromkeys((*pool.resources, "pods")):
        w = pool.resourceWeights.get(r, 0)
        alloc = allocatable[r]
        if alloc > 0:
            total += w * min(usage[r], alloc) * 1000 // alloc
        weights += w
    return total // weights if weights else 0


def pod_usage_score(pool: NodePool, pod: PodState, node_usage: Load, high: Load) -> float:
    """How well evicting this pod matches the excess: a pod using exactly the excess scores 2.
    Over the overused resources of the pod's metric (cpu, memory), by their weights."""
    if pod.usage is None:
        return 0.0
    usage = Load.of(pod.usage)
    total = weights = 0.0
    for r in ("cpu", "memory"):
        exceed = node_usage[r] - high[r]
        if r not in pool.resources or exceed <= 0:
            continue  # resources that are not over their threshold do not count
        w = pool.resourceWeights.get(r, 0)
        ratio = usage[r] / exceed
        if ratio > 0:
            total += w * (ratio if ratio < 1 else 1 / ratio + 1)
        weights += w
    return total / weights if weights else 0.0


def victim_order(pool: NodePool, pods: list[PodState], node_usage: Load, high: Load) -> list[PodState]:
    """Koordinator's comparator chain, first evicted first: priority class (free, batch, mid, prod,
    none), priority, Kubernetes QoS (BestEffort first), koord QoS (BE first), deletion cost,
    eviction cost, then the pod whose usage best matches the excess (`pod_usage_score`, higher
    first: Koordinator reverses that one comparator), then the newest."""

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
    round_per_node: dict[str, int] = field(default_factory=dict)  # this round only
    round_per_namespace: dict[str, int] = field(default_factory=dict)
    # objectLimiters: the tokens each limited object ("workload/<w>", "namespace/<ns>") has now
    object_tokens: dict[str, float] = field(default_factory=dict)

    def start_round(self, object_tokens: dict[str, float] | None = None) -> None:
        self.planned = 0
        self.round_per_node, self.round_per_namespace = {}, {}
        self.object_tokens = dict(object_tokens or {})

    def refusal(
        self, args: LowNodeLoadArgs, pod: PodState, workload_unavailable: int, replicas: int | None = None
    ) -> str | None:
        """Why one more migration of `pod` is not allowed now (retryable: later rounds may), or None.

        `replicas` is the workload's expected replicas (None: unknown, explicit limits only).
        A job whose replacement is still pending counts both as migrating and as unavailable:
        the conservative side of maxUnavailablePerWorkload. A limit whose gate is in
        skipEvictionGates is not checked.
        """
        lim = args.limits
        migrating = self.per_workload.get(pod.workload, 0)
        per_workload = args.workload_limit(lim.maxMigratingPerWorkload, replicas)
        max_unavailable = args.workload_limit(lim.maxUnavailablePerWorkload, replicas)
        checks = (
            ("MaxMigratingGlobally", lim.maxMigratingGlobally, self.total, "maxMigratingGlobally reached"),
            ("MaxMigratingPerNode", lim.maxMigratingPerNode, self.per_node.get(pod.node, 0),
             f"node {pod.node} reached maxMigratingPerNode"),
            ("MaxMigratingPerNamespace", lim.maxMigratingPerNamespace, self.per_namespace.get(pod.namespace, 0),
             f"namespace {pod.namespace} reached maxMigratingPerNamespace"),
            ("MaxMigratingPerWorkload", per_workload, migrating, f"workload {pod.workload} reached maxMigratingPerWorkload"),
            ("MaxUnavailablePerWorkload", max_unavailable, workload_unavailable + migrating,
             f"workload {pod.workload} reached maxUnavailablePerWorkload"),
            ("", lim.maxMigratingPerRound, self.planned, "round reached maxMigratingPerRound"),
            ("", lim.maxNoOfPodsToEvictPerNode, self.round_per_node.get(pod.node, 0),
             f"node {pod.node} reached maxNoOfPodsToEvictPerNode"),
            ("", lim.maxNoOfPodsToEvictPerNamespace, self.round_per_namespace.get(pod.namespace, 0),
             f"namespace {pod.namespace} reached maxNoOfPodsToEvictPerNamespace"),
            ("", lim.maxNoOfPodsToEvictTotal, self.planned, "round reached maxNoOfPodsToEvictTotal"),
        )
        for gate, limit, count, reason in checks:
            if limit is not None and count + 1 > limit and not lim.skips(gate):
                return reason
        for key in object_keys(pod):
            if self.object_tokens.get(key, 1.0) < 1.0:
                kind = key.split("/", 1)[0]
                return f"{key} was migrated as often as objectLimiters.{kind} allows for now"
        return None

    def add(self, pod_node: str, namespace: str, workload: str, planned: bool = True) -> None:
        self.per_node[pod_node] = self.per_node.get(pod_node, 0) + 1
        self.per_namespace[namespace] = self.per_namespace.get(namespace, 0) + 1
        self.per_workload[workload] = self.per_workload.get(workload, 0) + 1
        self.total += 1
        if planned:
            self.planned += 1
            self.round_per_node[pod_node] = self.round_per_node.get(pod_node, 0) + 1
            self.round_per_namespace[namespace] = self.round_per_namespace.get(namespace, 0) + 1
            for key in (f"workload/{workload}", f"namespace/{namespace}"):
                if key in self.object_tokens:
                    self.object_tokens[key] -= 1.0


def object_keys(pod: PodState) -> tuple[str, str]:
    """The objects an objectLimiter may count a migration of `pod` against."""
    return f"workload/{pod.workload}", f"namespace/{pod.namespace}"


def forbidden_by_replicas(args: LowNodeLoadArgs, replicas: int | None) -> str | None:
    """Koordinator's filterExpectedReplicas (not retried): a workload whose every replica could be
    away at once is never migrated."""
    if replicas is None or args.limits.skipCheckExpectedReplicas or args.limits.skips("ExpectedReplicas"):
        return None
    lim = args.limits
    if replicas == 1:
        return "workload has a single replica"
    if replicas == args.workload_limit(lim.maxMigratingPerWorkload, replicas):
        return f"workload replicas ({replicas}) equal maxMigratingPerWorkload"
    if replicas == args.workload_limit(lim.maxUnavailablePerWorkload, replicas):
        return f"workload replicas ({replicas}) equal maxUnavailablePerWorkload"
    return None


def requests_fit(pod: PodState, target: NodeState) -> bool:
    return (target.requested + pod.requests).fits_in(target.allocatable.resources)


def _fits(pod: PodState, target: NodeState, target_high: Load, target_prod_high: Load | None,
          resources: tuple[str, ...]) -> bool:
    """nodeFit: the pod's requests fit and its usage keeps the target at or under its high
    threshold (and under its prod high threshold in the prod pass). As in Koordinator, the pod
    adds its metric to the target, which holds no pod count: the count is not checked here."""
    assert pod.usage is not None and target.usage is not None
    usage = Load.of(pod.usage)
    if is_over(target.usage + usage, target_high, resources):
        return False
    if target_prod_high is not None and is_over(target.prod_usage + usage, target_prod_high, resources):
        return False
    return requests_fit(pod, target)


# ------------------------------------------------------------------ the round, step by step


@dataclass
class NodeClasses:
    """A pool's nodes by class (Koordinator's classifyNodes), each list in the nodes' order, with
    the thresholds they were classified against."""

    of: dict[str, str]  # node -> class, every node of the pool (UNKNOWN: no fresh metric)
    fresh: list[NodeState]  # the nodes with a fresh metric: the only ones acted on
    by_class: dict[str, list[NodeState]]
    percents: Percents | None = None
    thresholds: dict[str, NodeThresholds] = field(default_factory=dict)  # fresh node -> its thresholds

    def __getitem__(self, cls: str) -> list[NodeState]:
        return self.by_class.get(cls, [])

    @property
    def lows(self) -> list[NodeState]:
        """The nodes that take pods in one pass or the other: low, prodLow and bothLow."""
        return self[LOW] + self[PROD_LOW] + self[BOTH_LOW]


def pool_members(pool: NodePool, nodes: list[NodeState], drained: set[str]) -> list[NodeState]:
    """The nodes a pool looks at: those its selector names.

    A node an earlier pool drained is left out only by a pool that has a selector: Koordinator
    skips processed nodes only then.
    """
    return [n for n in nodes if pool.selects(n.labels) and not (pool.nodeSelector is not None and n.name in drained)]


def classify_nodes(pool: NodePool, members: list[NodeState]) -> NodeClasses:
    """Step 1: the round's thresholds (`pool_percents`, per node `node_thresholds`), then every
    node of the pool classified (`classify`), the fresh ones grouped by class."""
    fresh = [n for n in members if n.usage is not None]
    percents = pool_percents(pool, fresh)
    # one round's thresholds depend on the node's allocatable alone: nodes of one shape share them
    by_shape: dict[Load, NodeThresholds] = {}
    thresholds = {}
    for n in fresh:
        th = by_shape.get(n.allocatable)
        if th is None:
            th = by_shape[n.allocatable] = node_thresholds(percents, n.allocatable)
        thresholds[n.name] = th
    of = {n.name: classify(pool, n, thresholds.get(n.name)) for n in members}
    by_class: dict[str, list[NodeState]] = {}
    for n in fresh:
        by_class.setdefault(of[n.name], []).append(n)
    return NodeClasses(of, fresh, by_class, percents, thresholds)


def pick_sources(
    pool: NodePool, classes: NodeClasses, detectors: dict[str, Detector], now_s: float
) -> tuple[list[NodeState], list[NodeState]]:
    """Step 2: the hot nodes that have been hot long enough to drain, as (high, prodHigh) sources.

    Koordinator's filterRealAbnormalNodes: each round marks every hot node abnormal on its
    detector, and every normal node that has a detector normal; a hot node is a source only
    when its detector reads ANOMALY, after more than consecutiveAbnormalities hot rounds in a
    row (anomaly.Detector). Prod sources count on detectors of their own (PROD_DETECTOR + name).
    `detectors` is the state carried between rounds and is updated here.
    """
    for n in classes[NORMAL]:
        for key in (n.name, PROD_DETECTOR + n.name):
            if key in detectors:
                detectors[key].mark(True, now_s)
    high = [n for n in classes[HIGH] if _detector(detectors, n.name, pool).mark(False, now_s) == ANOMALY]
    prod_high = [
        n for n in classes[PROD_HIGH] if _detector(detectors, PROD_DETECTOR + n.name, pool).mark(False, now_s) == ANOMALY
    ]
    return high, prod_high


def enough_low_nodes(args: LowNodeLoadArgs, lows: list[NodeState], members: list[NodeState]) -> bool:
    """Koordinator balances only with more low nodes than numberOfNodes, and not when every node
    of the pool is low (then no node is hot)."""
    return len(lows) > args.numberOfNodes and len(lows) != len(members)


def room_under(nodes: list[NodeState], thresholds: dict[str, Load], prod: bool = False) -> Load:
    """What `nodes` can take before reaching their thresholds: the sum of threshold - usage (prod
    usage with `prod`), none below 0."""
    room = Load()
    for n in nodes:
        room = room + (thresholds[n.name] - (n.prod_usage if prod else n.usage)).clamp0()
    return room


def prod_room(classes: NodeClasses, prod_highs: dict[str, Load], both_low_room: Load, used: Load) -> Load:
    """The prod pass's room: the prodLow nodes' room under prodHigh, plus the bothLow nodes' prod
    room capped by what is left of their room under high.

    As in Koordinator, all that the node pass used (`used`) is charged to the bothLow nodes' room
    (`both_low_room`, taken before that pass), whichever targets actually took it.
    """
    remaining = (both_low_room - used).clamp0()
    both_low = room_under(classes[BOTH_LOW], prod_highs, prod=True)
    return room_under(classes[PROD_LOW], prod_highs, prod=True) + both_low.min(remaining)


@dataclass
class BalancePass:
    """One balancing pass (node or prod) of one pool."""

    prod: bool
    sources: list[NodeState]
    targets: list[NodeState]
    available: Load  # the targets' room
    high: dict[str, Load]  # node -> threshold the source must fall under (high or prodHigh)
    thresholds: dict[str, float]  # the same in percent (this round's, with deviation thresholds)
    target_high: dict[str, Load]
    target_prod_high: dict[str, Load] | None  # prod pass: targets stay under prodHigh too
    resources: tuple[str, ...] = ("cpu", "memory")  # the pool's

    def measured(self, source: NodeState) -> Load:
        """The usage the pass brings under the source's threshold: its prod usage in the prod pass."""
        return source.prod_usage if self.prod else source.usage

    def detector_key(self, source: NodeState) -> str:
        return (PROD_DETECTOR if self.prod else "") + source.name


@dataclass
class RoundState:
    """What the passes of one round share: its inputs, the limits' counts and the plan so far."""

    args: LowNodeLoadArgs
    plan: RoundPlan
    counter: LimitCounter
    unavailable: Mapping[str, int]
    replicas: Mapping[str, int]
    pods_by_node: Mapping[str, list[PodState]]
    detectors: dict[str, Detector]
    now_s: float


def hottest_first(pool: NodePool, sources: list[NodeState], prod: bool = False) -> list[NodeState]:
    """The order sources are drained in: Koordinator's ResourceUsageScorer over their usage (prod
    usage in the prod pass), highest first (ties keep the nodes' order)."""
    return sorted(sources, key=lambda n: -node_score(pool, n.allocatable, n.prod_usage if prod else n.usage))


def exclusion(args: LowNodeLoadArgs, pod: PodState, replicas: dict[str, int]) -> str | None:
    """Why `pod` may not leave at all this round, or None: the evictor's rules (core.evictable),
    evictableNamespaces, podSelectors, filterExpectedReplicas, or no metric to weigh it by."""
    if pod.non_evictable is not None:
        return pod.non_evictable
    if not args.namespace_allowed(pod.namespace):
        return f"namespace {pod.namespace} is not evictable"
    if not args.pod_selected(pod.labels):
        return "not selected by podSelectors"
    forbidden = forbidden_by_replicas(args, replicas.get(pod.workload))
    if forbidden is not None:
        return forbidden
    if pod.usage is None:
        return "no usage metric"
    return None


def claim_target(pool: NodePool, pod: PodState, ps: BalancePass) -> NodeState | None:
    """nodeFit: the least used target `pod` fits on (`_fits`), with the pod's usage now counted there.

    QUIRK kept from Koordinator's podFitsAnyNodeWithThreshold: a pod that fits leaves its usage
    on that target for the rest of the round, moved or not. Least used first is ours: the
    migration is pinned to that node (the reservation's), so spreading here is what the
    scheduler's scoring would do.
    """
    assert pod.usage is not None
    usage = Load.of(pod.usage)
    for t in sorted(ps.targets, key=lambda t: (node_score(pool, t.allocatable, t.usage), t.name)):
        prod_high = ps.target_prod_high[t.name] if ps.target_prod_high else None
        if _fits(pod, t, ps.target_high[t.name], prod_high, ps.resources):
            t.usage = t.usage + usage
            if ps.target_prod_high is not None:
                t.prod_usage = t.prod_usage + usage
            return t
    return None


def victims_on(
    args: LowNodeLoadArgs, pool: NodePool, ps: BalancePass, source: NodeState, pods: list[PodState], replicas: dict[str, int]
) -> tuple[list[tuple[PodState, NodeState | None]], list[Skip]]:
    """Step 3: the pods that may leave `source`, in the order they go (`victim_order`), each with
    its target; and the pods that may not, with why. The prod pass looks at prod pods only.

    Without nodeFit a pod that fits no target still goes, to the first one (the first its
    requests fit with the MigrationController's nodeFit).
    """
    movable: list[tuple[PodState, NodeState | None]] = []
    skipped: list[Skip] = []
    for p in pods:
        if ps.prod and not p.is_prod:
            continue
        reason = exclusion(args, p, replicas)
        target = None
        if reason is None:
            target = claim_target(pool, p, ps)
            if target is None and args.nodeFit:
                reason = "fits on no low node under its thresholds"
            elif target is None and args.requests_must_fit:
                target = next((t for t in ps.targets if requests_fit(p, t)), None)
                reason = None if target else "its requests fit on no low node"
        if reason:
            skipped.append(Skip(p.key, source.name, reason))
        else:
            movable.append((p, target or (ps.targets[0] if ps.targets else None)))
    target_of = {p.key: t for p, t in movable}
    order = victim_order(pool, [p for p, _ in movable], ps.measured(source), ps.high[source.name])
    return [(p, target_of[p.key]) for p in order], skipped


def _load(x: Load) -> dict[str, int]:
    return {"cpu": x.cpu, "memory": x.memory, "pods": x.pods}


def _amounts(r: Resources | None) -> dict[str, int] | None:
    return None if r is None else {"cpu_milli": r.cpu_milli, "memory_bytes": r.memory_bytes}


def room_used_up(room: Load, resources: tuple[str, ...] = ("cpu", "memory")) -> bool:
    """Koordinator's continueEviction stops as soon as any resource of the targets' room is gone."""
    return any(room[r] <= 0 for r in resources)


def overutilized_reason(ps: BalancePass, source: NodeState, usage: Load) -> str:
    """The eviction's reason in Koordinator's words, naming every resource over its threshold in
    name order: "node is overutilized, node cpu usage(66.67%)>threshold(50.00%)" ("prod cpu ..."
    in the prod pass)."""
    pct = usage_percent(source.allocatable, usage)
    limit = ps.high[source.name]
    kind = "prod " if ps.prod else "node "
    over = (f"{kind}{r} usage({pct[r]:.2f}%)>threshold({ps.thresholds[r]:.2f}%)"
            for r in sorted(ps.resources) if usage[r] > limit[r])
    return "node is overutilized, " + ", ".join(over)


def evict_from(
    rnd: RoundState, pool: NodePool, ps: BalancePass, source: NodeState, victims: list[tuple[PodState, NodeState | None]],
    room: Load,
) -> Load:
    """Step 4, Koordinator's balancePods on one source: the victims go in order while the source
    is over its threshold and the targets have room; a pod a limit refuses is skipped and the
    next one tried. Each move takes the pod's usage and one pod off the source and the room, and
    puts its requests on the target. Returns the room left."""
    measured = ps.measured(source)
    limit = ps.high[source.name]
    order = [{"pod": p.key, "usage": _amounts(p.usage), "priority_class": p.priority_class.value,
              "priority": p.priority, "qos": p.qos.value} for p, _ in victims]  # fmt: skip
    for p, target in victims:
        if not is_over(measured, limit, ps.resources):
            # back under its threshold: the node counts its hot rounds afresh (Koordinator resets it)
            _reset(rnd.detectors, ps.detector_key(source), rnd.now_s)
            break
        if room_used_up(room, ps.resources):
            rnd.plan.notes.append("the low nodes' room is used up")
            break
        if target is None:
            rnd.plan.skipped.append(Skip(p.key, source.name, "no low node"))
            continue
        refusal = rnd.counter.refusal(rnd.args, p, rnd.unavailable.get(p.workload, 0), rnd.replicas.get(p.workload))
        if refusal:
            rnd.plan.skipped.append(Skip(p.key, source.name, refusal))
            continue
        reason = overutilized_reason(ps, source, measured)
        inputs = {
            "pass": "prod" if ps.prod else "node",
            "usage": _load(measured), "allocatable": _load(source.allocatable),
            "usage_percent": {r: round(v, 2) for r, v in usage_percent(source.allocatable, measured).items()
                              if r in ps.resources},
            "high_threshold_percent": {r: ps.thresholds[r] for r in ps.resources if r in ps.thresholds},
            "high": _load(limit), "room": _load(room), "victim_order": order,
        }  # fmt: skip
        rnd.plan.migrations.append(Migration(p, source.name, target.name, reason, ps.prod, inputs))
        rnd.counter.add(p.node, p.namespace, p.workload)
        moved = p.moved
        measured = measured - moved
        room = room - moved
        source.usage = source.usage - moved
        if p.is_prod:
            source.prod_usage = (source.prod_usage - moved).clamp0()
        target.requested = target.requested + p.requests
    return room


def _run_pass(rnd: RoundState, pool: NodePool, ps: BalancePass) -> Load:
    """One pass: the sources hottest first, each with its victims ordered and moved while the
    room lasts. Returns the room left."""
    room = ps.available
    for source in hottest_first(pool, ps.sources, ps.prod):
        victims, skipped = victims_on(rnd.args, pool, ps, source, rnd.pods_by_node.get(source.name, []), rnd.replicas)
        rnd.plan.skipped.extend(skipped)
        room = evict_from(rnd, pool, ps, source, victims, room)
    return room


def _plan_pool(rnd: RoundState, pool: NodePool, members: list[NodeState]) -> list[NodeState]:
    """One pool's part of the round. Returns its hot nodes when it balanced (later pools with a
    selector leave them alone), else nothing."""
    classes = classify_nodes(pool, members)
    rnd.plan.classes.update(classes.of)
    abnormal, abnormal_prod = pick_sources(pool, classes, rnd.detectors, rnd.now_s)
    hot = classes[HIGH] + classes[PROD_HIGH]
    if not hot:
        return []
    if not abnormal and not abnormal_prod:
        rnd.plan.notes.append(f"{pool.name}: {len(hot)} hot node(s) not yet abnormal long enough")
        return []
    lows = classes.lows
    if not lows:
        rnd.plan.notes.append(f"{pool.name}: no low node to take pods")
        return []
    for n in lows:
        _reset(rnd.detectors, n.name, rnd.now_s)
        _reset(rnd.detectors, PROD_DETECTOR + n.name, rnd.now_s)
    if not enough_low_nodes(rnd.args, lows, members):
        return []
    rnd.plan.abnormal.extend(n.name for n in abnormal + abnormal_prod)

    th, pct, rs = classes.thresholds, classes.percents, pool.resources
    highs = {name: t.high for name, t in th.items()}
    targets = classes[LOW] + classes[BOTH_LOW]
    room = room_under(targets, highs)
    both_low_room = room_under(classes[BOTH_LOW], highs)
    left = _run_pass(rnd, pool, BalancePass(False, abnormal, targets, room, highs, pct.high, highs, None, rs))
    if pool.prod_enabled and abnormal_prod:
        prod_highs = {name: t.prod_high for name, t in th.items()}
        prod_targets = classes[PROD_LOW] + classes[BOTH_LOW]
        ps = BalancePass(True, abnormal_prod, prod_targets, prod_room(classes, prod_highs, both_low_room, room - left),
                         prod_highs, pct.prod_high, highs, prod_highs, rs)
        _run_pass(rnd, pool, ps)
    # As Koordinator does after a pass: each source is marked normal once (it stays ANOMALY, its
    # count of hot rounds starts again).
    for n in abnormal:
        rnd.detectors[n.name].mark(True, rnd.now_s)
    for n in abnormal_prod:
        rnd.detectors[PROD_DETECTOR + n.name].mark(True, rnd.now_s)
    return hot


def forget_idle_detectors(detectors: dict[str, Detector], now_s: float, timeout_s: float) -> None:
    """Koordinator keeps a node's detector in a cache that drops it detectorCacheTimeout after
    its last abnormal mark: a node hot again later counts its hot rounds from the start."""
    for key in [k for k, d in detectors.items() if now_s - d.touched_s > timeout_s]:
        del detectors[key]


def plan_round(
    args: LowNodeLoadArgs,
    nodes: list[NodeState],
    pods: list[PodState] | Mapping[str, list[PodState]],
    detectors: dict[str, Detector],
    now_s: float,
    in_flight: LimitCounter | None = None,
    workload_unavailable: Mapping[str, int] | None = None,
    workload_replicas: Mapping[str, int] | None = None,
    object_tokens: dict[str, float] | None = None,
) -> RoundPlan:
    """Plan one round, pool by pool: classify the nodes, pick the sources, order the victims on
    each source, move them while the source is hot and the low nodes have room.

    `pods` is a list, or a mapping of node name to its pods (read only for the nodes the round
    weighs). `detectors` is updated in place: it is the state carried between rounds. `in_flight` counts
    migrations still under way from earlier rounds; `workload_unavailable` counts pods of each
    workload that are not ready right now; `workload_replicas` the expected replicas of each
    workload (derived per-workload limits and the single-replica rule); `object_tokens` what
    the objectLimiters allow now (migration.ObjectLimiters.tokens). Only the nodes in the
    arguments' node scope take part. Node states are worked on: their usage ends as the plan
    leaves it.
    """
    plan = RoundPlan()
    if args.paused:
        plan.notes.append("paused")
        return plan
    forget_idle_detectors(detectors, now_s, args.detectorCacheTimeoutSeconds)
    counter = in_flight or LimitCounter()
    counter.start_round(object_tokens)
    if isinstance(pods, Mapping):  # node -> its pods (a caller may build them as they are asked for)
        pods_by_node = pods
    else:
        pods_by_node = {}
        for p in pods:
            pods_by_node.setdefault(p.node, []).append(p)
    # (`is None`, not falsiness: a mapping computed on first read must not be computed to be tested)
    rnd = RoundState(args, plan, counter, {} if workload_unavailable is None else workload_unavailable,
                     {} if workload_replicas is None else workload_replicas, pods_by_node, detectors, now_s)
    nodes = [n for n in nodes if args.in_scope(n.labels)]
    drained: set[str] = set()
    for pool in args.nodePools:
        drained.update(n.name for n in _plan_pool(rnd, pool, pool_members(pool, nodes, drained)))
    return plan


def _reset(detectors: dict[str, Detector], key: str, now_s: float) -> None:
    """Reset a node's detector, if it has one (Koordinator's resetNodesAsNormal)."""
    if key in detectors:
        detectors[key].reset(now_s)


def _detector(detectors: dict[str, Detector], key: str, pool: NodePool) -> Detector:
    det = detectors.get(key)
    if det is None:
        det = detectors[key] = Detector(pool.anomalyCondition)
    return det
