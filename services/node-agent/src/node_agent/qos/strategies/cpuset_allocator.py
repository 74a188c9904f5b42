"""CPUSet allocator (koordlet runtimehooks/hooks/cpuset), the reconciler half: every pod's
containers get the cpuset `cpuorch.container_cpuset` decides (the scheduler's cpuset for LSE /
LSR pods, the share pool for LS), and cpuset-bound pods run without a cfs quota (pod and
containers -1, so exclusive CPUs are never throttled: Koordinator issue #489).

The runtime hooks set the same values when a container is created (runtimehooks); this
reconciler is the safety net that brings containers back to them, e.g. when the share pool
shrinks because an LSR pod arrived. BE and BestEffort containers are left to CPU suppress,
which owns their cpusets.
"""

from __future__ import annotations

from koordcommon.model import KubeQoS, QoSClass
from koordcommon.schemas import NodeSLOSpec

from ... import cpuorch
from ..model import CgroupWrite, QoSState

NAME = "cpuset_allocator"


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    inputs = _inputs(state)
    hit = _PLANS.get(state.node)
    if hit is not None and _same(hit[0], inputs):
        return list(hit[1])
    writes = _derive(state)
    if len(_PLANS) >= _PLANS_LIMIT:
        _PLANS.clear()
    _PLANS[state.node] = (inputs, writes)
    return list(writes)


# The plan follows from the node's CPUs and its pods' specs and dirs alone, never from usage: a
# node's plan is kept while those are the same (a pod's PodInfo is derived again whenever the
# pod changes), instead of deriving the pools and every container's cpuset each round.
_PLANS: dict[str, tuple[tuple, list[CgroupWrite]]] = {}  # node -> (its inputs, its writes)
_PLANS_LIMIT = 100_000


def _inputs(state: QoSState) -> tuple:
    pods = tuple((p.info, p.rel, tuple(p.containers.items())) for p in state.pods)
    return (state.processors, state.kubelet_pinned_cpus, state.reserved_cpus, state.system_qos_cpus,
            state.kubelet_cpu_policy, pods)


def _same(old: tuple, new: tuple) -> bool:
    """The inputs match: equal node facts, and the very same PodInfo of each pod in the same order."""
    if old[:5] != new[:5] or len(old[5]) != len(new[5]):
        return False
    return all(a[0] is b[0] and a[1:] == b[1:] for a, b in zip(old[5], new[5], strict=True))


def _derive(state: QoSState) -> list[CgroupWrite]:
    cpus = cpuorch.node_cpus(state)
    if not cpus.topology.valid:
        return []
    writes: list[CgroupWrite] = []
    for p in state.pods:
        if p.raw_qos is QoSClass.BE or p.info.kube_qos is KubeQoS.BEST_EFFORT:
            continue
        cpuset = cpuorch.container_cpuset(p.info, cpus, state.kubelet_cpu_policy)
        if cpuset is None:
            continue
        if p.info.cpuset:
            writes.append(CgroupWrite(p.rel, "cpu.cfs_quota_us", -1, NAME, "pod"))
        for rel in p.containers.values():
            writes.append(CgroupWrite(rel, "cpuset.cpus", cpuset, NAME, "container"))
            if p.info.cpuset:
                writes.append(CgroupWrite(rel, "cpu.cfs_quota_us", -1, NAME, "container"))
    return writes
