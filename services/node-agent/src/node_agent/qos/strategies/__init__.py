"""The node QoS strategies: pure functions from a node's QoSState and its NodeSLO to a plan.

Each module holds one koordlet strategy and exports `NAME` and `plan(state, slo) -> list[Action]`
(Action = CgroupWrite | Eviction, see ..model). A strategy sees current cgroup values only
through `state.read`; it imports no metrics, bus, file or cgroup-layout code, so the same
strategies run in the agent, on simulated cgroups and in a what-if replay.

Registry order follows koordlet: suppress before evict (so eviction sees the real limit
suppress just set), CPU eviction before memory, then the reconcilers (the runtime hooks' safety
net: group identity, memory QoS, batch resources, the cpuset allocator).
"""

from __future__ import annotations

from koordcommon.schemas import NodeSLOSpec

from ..model import Action, QoSState
from . import (
    batch_resources,
    cpu_burst,
    cpu_evict,
    cpu_suppress,
    cpuset_allocator,
    group_identity,
    memory_evict,
    memory_qos,
)

STRATEGIES = (cpu_suppress, cpu_evict, memory_evict, cpu_burst, group_identity, memory_qos, batch_resources,
              cpuset_allocator)


def plan_all(state: QoSState, slo: NodeSLOSpec) -> list[Action]:
    """Every strategy's actions, in registry order (a pod two strategies pick appears twice;
    the executor evicts it once)."""
    return [action for strategy in STRATEGIES for action in strategy.plan(state, slo)]
