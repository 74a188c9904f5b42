"""BE memory eviction (koordlet qosmanager/plugins/memoryevict, BEMemoryEvict).

When node memory usage reaches memoryEvictThresholdPercent of capacity, release
capacity x (usage% - lower) / 100 bytes (lower = threshold - 2 unless set) from BE pods:
lower priority first, then larger memory usage, pods without usage last (by name,
descending, as koordlet sorts them). A 4 s cool-down follows every eviction.
"""

from __future__ import annotations

import functools

from koordcommon.resources import Resources
from koordcommon.schemas import NodeSLOSpec

from ..model import Eviction, PodState, QoSState

NAME = "memory_evict"
COOL_DOWN = NAME  # koordlet's BEMemoryEvict, MemoryEvict and MemoryAllocatableEvict share this clock
COOL_DOWN_MS = 4_000


def release_bytes(state: QoSState, slo: NodeSLOSpec) -> int:
    cfg = slo.resourceUsedThresholdWithBE
    cap = state.capacity.memory_bytes
    if state.node_usage is None or cap <= 0:
        return 0
    usage_pct = state.node_usage.memory_bytes * 100 // cap
    threshold = cfg.memoryEvictThresholdPercent
    if usage_pct < threshold:
        return 0
    lower = cfg.memoryEvictLowerPercent if cfg.memoryEvictLowerPercent is not None else threshold - 2
    if lower >= threshold:
        return 0  # invalid configuration
    return cap * (usage_pct - lower) // 100


def _compare(a: PodState, b: PodState) -> int:
    pa, pb = a.info.priority, b.info.priority
    if pa is not None and pb is not None and pa != pb:
        return -1 if pa < pb else 1
    ua = a.usage.memory_bytes if a.usage else 0
    ub = b.usage.memory_bytes if b.usage else 0
    if ua and ub:
        return -1 if ua > ub else (1 if ua < ub else 0)
    if not ua and not ub:
        return -1 if a.info.name > b.info.name else (1 if a.info.name < b.info.name else 0)
    return -1 if ua else 1


def plan(state: QoSState, slo: NodeSLOSpec) -> list[Eviction]:
    if not slo.resourceUsedThresholdWithBE.enable:
        return []
    last = state.last_evict_ms.get(COOL_DOWN, 0)  # koordlet: starts at zero, so the first check is immediate
    if last and state.now_ms - last < COOL_DOWN_MS:
        return []
    release = release_bytes(state, slo)
    if release <= 0:
        return []
    victims = sorted((p for p in state.pods if p.is_be), key=functools.cmp_to_key(_compare))
    out, released = [], 0
    for p in victims:
        if released >= release:
            break
        used = p.usage.memory_bytes if p.usage else 0
        out.append(
            Eviction(p.info.uid, p.info.namespace, p.info.name, NAME, COOL_DOWN,
                     f"node memory over threshold: release {release} bytes", Resources(0, used))
        )
        released += used
    return out
