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
