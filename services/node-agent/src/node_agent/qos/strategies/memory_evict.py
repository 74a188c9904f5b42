"""Memory eviction (koordlet qosmanager/plugins/memoryevict): three rules, in this order.

BEMemoryEvict (on with resourceUsedThresholdWithBE): when node memory usage reaches
memoryEvictThresholdPercent (70) of capacity, release capacity x (usage% - lower) / 100 bytes
(lower = threshold - 2 unless set) from BE pods: lower priority first, then larger memory
usage, pods without usage last (by name, descending, as koordlet sorts them); each releases
its usage.

MemoryAllocatableEvict (memoryAllocatableEvictThreshold/LowerPercent,
allocatableEvictPriorityThreshold): when the batch-memory (mid-memory) requested by pods at or
under the priority threshold exceeds threshold % of the node's batch-memory (mid-memory)
allocatable, release (requested / allocatable - lower %) x allocatable from eviction-enabled
pods, each releasing its request.

MemoryEvict (evictEnabledPriorityThreshold): the BEMemoryEvict threshold and amount, from the
eviction-enabled pods at or under the priority threshold (see eviction.py for their order),
larger usage first in each tie; each releases its usage. (koordlet counts that usage x 1000,
so it mostly stops after one pod; bytes are counted here.)

A 4 s cool-down follows any eviction.
"""

from __future__ import annotations

import functools

from koordcommon.schemas import NodeSLOSpec, ResourceThresholdStrategy

from ..model import Eviction, PodState, QoSState
from . import eviction
from .cpu_evict import allocatable_problem
from .eviction import USED, EvictTask

NAME = "memory_evict"
COOL_DOWN = NAME  # koordlet's BEMemoryEvict, MemoryEvict and MemoryAllocatableEvict share this clock
COOL_DOWN_MS = 4_000
RELEASE_BUFFER_PERCENT = 2


def threshold_problem(cfg: ResourceThresholdStrategy) -> str | None:
    """None when the usage threshold is valid (BEMemoryEvict and MemoryEvict run on it)."""
    threshold = cfg.memoryEvictThresholdPercent
    if threshold < 0:
        return f"memoryEvictThresholdPercent {threshold} below 0"
    lower = cfg.memoryEvictLowerPercent if cfg.memoryEvictLowerPercent is not None else threshold - 2
    if lower >= threshold:
        return f"memoryEvictLowerPercent {lower} not below memoryEvictThresholdPercent {threshold}"
    return None


def memory_allocatable_problem(cfg: ResourceThresholdStrategy) -> str | None:
    return allocatable_problem(cfg.memoryAllocatableEvictThresholdPercent, cfg.memoryAllocatableEvictLowerPercent,
                               cfg.allocatableEvictPriorityThreshold, "memory")


def release_bytes(state: QoSState, slo: NodeSLOSpec) -> int:
    cfg = slo.resourceUsedThresholdWithBE
    cap = state.capacity.memory_bytes
    if state.node_usage is None or cap <= 0 or threshold_problem(cfg) is not None:
        return 0
    usage_pct = state.node_usage.memory_bytes * 100 // cap
    threshold = cfg.memoryEvictThresholdPercent
    if usage_pct < threshold:
        return 0
    lower = cfg.memoryEvictLowerPercent if cfg.memoryEvictLowerPercent is not None else threshold - 2
    return cap * (usage_pct - lower) // 100


def _used(p: PodState) -> int:
    return p.usage.memory_bytes if p.usage else 0


def _compare(a: PodState, b: PodState) -> int:
    pa, pb = a.info.priority, b.info.priority
    if pa is not None and pb is not None and pa != pb:
        return -1 if pa < pb else 1
    ua, ub = _used(a), _used(b)
    if ua and ub:
        return -1 if ua > ub else (1 if ua < ub else 0)
    if not ua and not ub:
        return -1 if a.info.name > b.info.name else (1 if a.info.name < b.info.name else 0)
    return -1 if ua else 1


def _reason(release: int) -> str:
    return f"node memory over threshold: release {release} bytes"


def usage_inputs(state: QoSState, slo: NodeSLOSpec) -> dict:
    """What the usage rules read: node memory usage % of capacity against the threshold."""
    cfg = slo.resourceUsedThresholdWithBE
    cap = state.capacity.memory_bytes
    threshold = cfg.memoryEvictThresholdPercent
    return {"node_usage": state.node_usage.memory_bytes if state.node_usage else None, "capacity": cap,
            "node_usage_percent": state.node_usage.memory_bytes * 100 // cap if state.node_usage and cap > 0 else None,
            "threshold_percent": threshold,
            "lower_percent": cfg.memoryEvictLowerPercent if cfg.memoryEvictLowerPercent is not None else threshold - 2}  # fmt: skip


def be_task(state: QoSState, release: int, inputs: dict | None = None) -> EvictTask:
    victims = sorted((p for p in state.pods if p.is_be and eviction.policy_allows(p, "BEMemoryEvict")),
                     key=functools.cmp_to_key(_compare))
    return EvictTask("BEMemoryEvict", "BEMemoryEvict: " + _reason(release), victims, {"memory": release}, USED,
                     lambda p: {"memory": _used(p)}, inputs or {})


def allocatable_task(state: QoSState, slo: NodeSLOSpec) -> EvictTask | None:
    cfg = slo.resourceUsedThresholdWithBE
    return eviction.allocatable_task(state, cfg, "memory", "MemoryAllocatableEvict",
                                     cfg.memoryAllocatableEvictThresholdPercent, cfg.memoryAllocatableEvictLowerPercent,
                                     memory_allocatable_problem(cfg))


def usage_task(state: QoSState, slo: NodeSLOSpec, release: int, inputs: dict | None = None) -> EvictTask | None:
    threshold = slo.resourceUsedThresholdWithBE.evictEnabledPriorityThreshold
    if threshold is None:
        return None
    victims = eviction.generic_victims(state.pods, "MemoryEvict", threshold, _used)
    return EvictTask("MemoryEvict", "MemoryEvict: " + _reason(release), victims, {"memory": release}, USED,
                     lambda p: {"memory": _used(p)}, {**(inputs or {}), "priority_threshold": threshold})


def plan(state: QoSState, slo: NodeSLOSpec) -> list[Eviction]:
    if not slo.resourceUsedThresholdWithBE.enable or state.capacity.memory_bytes <= 0:
        return []
    last = state.last_evict_ms.get(COOL_DOWN, 0)  # koordlet: starts at zero, so the first check is immediate
    if last and state.now_ms - last < COOL_DOWN_MS:
        return []
    release = release_bytes(state, slo)
    inputs = usage_inputs(state, slo) if release > 0 else {}
    tasks = [
        be_task(state, release, inputs) if release > 0 else None,
        allocatable_task(state, slo),
        usage_task(state, slo, release, inputs) if release > 0 else None,
    ]
    return eviction.evict([t for t in tasks if t is not None], NAME, COOL_DOWN, state.pending_evictions)
