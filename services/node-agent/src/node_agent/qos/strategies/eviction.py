"""What the CPU and memory eviction strategies share (koordlet qosmanager/plugins/util/evict.go).

Each eviction rule that fires builds a task: the pods it may evict in order, how much it
must release and of what, and what evicting a pod releases. The tasks of one strategy are
walked in order (BE* first, then *AllocatableEvict, then the usage rule); what a pod
releases counts for every task of the same target (pod usage or pod request), so a pod the
first task evicted also counts for the later ones, and a task already met is skipped. A pod
whose eviction is pending (requested earlier, still here) counts as released and is not
asked again.

The generic victims (CPUEvict, MemoryEvict, the allocatable rules) are the active pods
labelled `koordinator.sh/eviction-enabled: "true"` whose priority is at most the rule's
priority threshold and that have a usage metric, ordered by the annotation
`koordinator.sh/eviction-priority` (unset 0), then priority, then the sub-priority label
`koordinator.sh/priority`, lowest first. The annotation `koordinator.sh/eviction-policy` (a
JSON list of rule names) limits which rules may evict a pod; invalid JSON allows none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from koordcommon.model import PriorityClass
from koordcommon.resources import Resources
from koordcommon.schemas import ResourceThresholdStrategy

from ..model import Eviction, PodState, QoSState

ANNOTATION_EVICTION_POLICY = "koordinator.sh/eviction-policy"
ANNOTATION_EVICTION_PRIORITY = "koordinator.sh/eviction-priority"
VICTIMS_SHOWN = 20  # an eviction's explanation lists the victim order up to this many pods
USED = "podUsed"
REQUEST = "podResourceRequest"
ACTIVE_PHASES = ("Pending", "Running")

# the resource a pod of each priority class requests, by kind (koordlet GetRequestTypeAndValueFromPod)
TIER_RESOURCE = {
    (PriorityClass.BATCH, "cpu"): "batch-cpu",
    (PriorityClass.BATCH, "memory"): "batch-memory",
    (PriorityClass.MID, "cpu"): "mid-cpu",
    (PriorityClass.MID, "memory"): "mid-memory",
}


@dataclass
class EvictTask:
    feature: str  # BECPUEvict, CPUAllocatableEvict, CPUEvict, BEMemoryEvict ...
    reason: str
    victims: list[PodState]  # in eviction order
    to_release: dict[str, int]  # resource -> amount (milli-cpu, bytes)
    target: str  # USED | REQUEST
    pod_release: Callable[[PodState], dict[str, int]]
    inputs: dict = field(default_factory=dict)  # what the rule read (usage, thresholds, satisfaction)


def policy_allows(p: PodState, feature: str) -> bool:
    raw = p.info.annotation(ANNOTATION_EVICTION_POLICY)
    if raw is None:
        return True
    try:
        allowed = json.loads(raw)
    except ValueError:
        return False
    return isinstance(allowed, list) and feature in allowed


def eviction_priority(p: PodState) -> int:
    raw = p.info.annotation(ANNOTATION_EVICTION_PRIORITY)
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        return 0
    return value if -(1 << 31) <= value < (1 << 31) else 0


def tier_request(p: PodState, kind: str) -> tuple[str, int]:
    """(resource, amount) the pod requests of `kind` (cpu | memory): batch-* for batch pods, mid-* for mid
    pods (the sum over containers), the plain pod request otherwise."""
    name = TIER_RESOURCE.get((p.info.priority_class, kind))
    if name is None:
        r = p.info.requests
        return kind, r.cpu_milli if kind == "cpu" else r.memory_bytes
    total = 0
    for c in p.info.containers:
        r = c.batch_requests if name.startswith("batch") else c.mid_requests
        total += max(r.cpu_milli if kind == "cpu" else r.memory_bytes, 0)
    return name, total


def generic_victims(pods: list[PodState], feature: str, priority_threshold: int,
                    size: Callable[[PodState], int]) -> list[PodState]:
    """Eviction-enabled active pods at or under the priority threshold with a metric, in eviction order;
    `size` (larger first) breaks the last tie."""
    out = []
    for p in pods:
        if p.info.phase not in ACTIVE_PHASES or not policy_allows(p, feature):
            continue
        if p.info.priority_value > priority_threshold or not p.info.evict_enabled or p.usage is None:
            continue
        out.append(p)

    def key(p: PodState):
        prio = p.info.priority_value
        label = p.info.sub_priority if p.info.sub_priority is not None else prio
        return (eviction_priority(p), prio, label, -size(p))

    return sorted(out, key=key)


def _met(task: EvictTask, released: dict[tuple[str, str], int]) -> bool:
    return all(released.get((task.target, r), 0) >= v for r, v in task.to_release.items() if v > 0)


def evict(tasks: list[EvictTask], strategy: str, cool_down: str, pending: frozenset[str]) -> list[Eviction]:
    """The pods to evict, in order, assuming each eviction succeeds (koordlet KillAndEvictPods)."""
    live = [t for t in tasks if any(v > 0 for v in t.to_release.values())]

    def releases(p: PodState) -> dict[tuple[str, str], int]:
        # what evicting p releases, once: the largest figure any task gives for a (target, resource)
        out: dict[tuple[str, str], int] = {}
        for t in live:
            for r, v in t.pod_release(p).items():
                out[(t.target, r)] = max(out.get((t.target, r), 0), v)
        return out

    released: dict[tuple[str, str], int] = {}
    done: set[str] = set()
    plan: list[Eviction] = []
    for task in live:
        if _met(task, released):
            continue
        order = [{"pod": f"{p.info.namespace}/{p.info.name}", "priority": p.info.priority,
                  "usage": None if p.usage is None else p.usage.to_list()} for p in task.victims[:VICTIMS_SHOWN]]  # fmt: skip
        for p in task.victims:
            uid = p.info.uid
            if uid in done:
                continue
            done.add(uid)
            for k, v in releases(p).items():
                released[k] = released.get(k, 0) + v
            if uid not in pending:
                own = task.pod_release(p)
                cpu = sum(v for r, v in own.items() if r.endswith("cpu"))
                mem = sum(v for r, v in own.items() if r.endswith("memory"))
                inputs = {**task.inputs, "to_release": task.to_release, "released_before": {
                    f"{t}:{r}": v for (t, r), v in released.items()}, "victim_order": order}  # fmt: skip
                plan.append(Eviction(uid, p.info.namespace, p.info.name, strategy, cool_down, task.reason,
                                     Resources(cpu, mem), task.feature, inputs))
            if _met(task, released):
                break
    return plan


def allocatable_release(state: QoSState, kind: str, threshold: int, lower: int, priority_threshold: int
                        ) -> dict[str, int]:
    """Per batch/mid resource of `kind` (cpu | memory): what to release so that the requests of the pods at
    or under the priority threshold come back to lower % of the node's allocatable."""
    requested: dict[str, int] = {}
    for p in state.pods:
        if p.info.priority_value > priority_threshold:
            continue
        name, value = tier_request(p, kind)
        requested[name] = requested.get(name, 0) + value
    out = {}
    for name, rq in requested.items():
        if not name.startswith(("batch-", "mid-")):
            continue  # Koordinator counts plain requests of free pods too, which no victim can release
        alloc = state.tier_allocatable.get(name, 0)
        if alloc == 0:
            out[name] = rq  # nothing allocatable: all of it
        elif rq / alloc > threshold / 100:
            # the two koordlet evictors round the same figure differently; each is kept
            out[name] = int(rq - lower / 100 * alloc) if kind == "cpu" else int((rq / alloc - lower / 100) * alloc)
    return {k: v for k, v in out.items() if v > 0}


def allocatable_task(state: QoSState, cfg: ResourceThresholdStrategy, kind: str, strategy: str,
                     threshold: int, lower: int, problem: str | None) -> EvictTask | None:
    """CPUAllocatableEvict / MemoryAllocatableEvict (`kind` cpu | memory): the batch/mid requests
    over `threshold` % of the node's allocatable are brought back to `lower` %, evicting by the
    generic order; nothing when the settings have a `problem` (not_supported names it)."""
    if problem is not None:
        return None
    release = allocatable_release(state, kind, threshold, lower, cfg.allocatableEvictPriorityThreshold)
    if not release:
        return None

    def pod_release(p: PodState) -> dict[str, int]:
        # only pods of a class whose resource is over its threshold release anything
        name, value = tier_request(p, kind)
        return {name: value} if name in release else {}

    victims = generic_victims(state.pods, strategy, cfg.allocatableEvictPriorityThreshold,
                                       lambda p: tier_request(p, kind)[1])
    text = ", ".join(f"{v} {k}" for k, v in sorted(release.items()))
    inputs = {"threshold_percent": threshold, "lower_percent": lower,
              "allocatable": {k: state.tier_allocatable.get(k, 0) for k in release},
              "priority_threshold": cfg.allocatableEvictPriorityThreshold}  # fmt: skip
    return EvictTask(strategy, f"{strategy}: requests over {threshold}% of allocatable: release {text}",
                     victims, release, REQUEST, pod_release, inputs)
