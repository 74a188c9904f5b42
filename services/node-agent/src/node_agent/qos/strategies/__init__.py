"""The node QoS strategies: pure functions from a node's QoSState and its NodeSLO to a plan.

Each module holds one koordlet strategy and exports `NAME` and `plan(state, slo)`, a list of
CgroupWrite or Eviction (see ..model). A strategy sees current cgroup values only through
`state.read`; it imports no metrics, bus, file or cgroup-layout code.

Registry order follows koordlet: suppress before evict (so eviction sees the real limit
suppress just set), CPU eviction before memory, then the reconcilers.
"""

from __future__ import annotations

from koordcommon.schemas import NodeSLOSpec

from ..model import CgroupWrite, Eviction, QoSState
from . import batch_resources, cpu_burst, cpu_evict, cpu_suppress, group_identity, memory_evict, memory_qos

STRATEGIES = (cpu_suppress, cpu_evict, memory_evict, cpu_burst, group_identity, memory_qos, batch_resources)


def plan_all(state: QoSState, slo: NodeSLOSpec) -> tuple[list[CgroupWrite], list[Eviction]]:
    writes: list[CgroupWrite] = []
    evictions: list[Eviction] = []
    for strategy in STRATEGIES:
        for action in strategy.plan(state, slo):
            (evictions if isinstance(action, Eviction) else writes).append(action)
    seen: set[str] = set()
    unique = []
    for e in evictions:  # one pod may be picked by two strategies; evict it once
        if e.uid not in seen:
            seen.add(e.uid)
            unique.append(e)
    return writes, unique
