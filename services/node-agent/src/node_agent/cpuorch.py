"""Node CPU orchestration (koordlet's CPUSetAllocator and NodeResourceTopology reporting): which
cpuset each container gets, and the report the scheduler extender allocates from.

The pools are `koordcommon.cpus.NodeCPUs`'s, from the node's topology, the pods' scheduler-bound
cpusets (`scheduling.koordinator.sh/resource-status`), the CPUs the kubelet's static CPU manager
pinned and the node's reserved and exclusive SYSTEM CPUs. A container's cpuset (koordlet's
getContainerCPUSet), by the pod's QoS label:

1. a pod with a resource-status `cpuset` (LSE / LSR bound by the scheduler): that cpuset;
2. one with `numaNodeResources` only (a NUMA-bound share pod): the share pool of those NUMA
   nodes (the BE pool of them for a BE pod);
3. SYSTEM with an exclusive SYSTEM cpuset: that cpuset;
4. LS: the share pool;
5. BE or a Kubernetes BestEffort pod: the BE pool, within what CPU suppress currently grants the
   besteffort dir (a container wider than its parent is refused by the kernel);
6. anything else: the share pool, unless the kubelet's static policy manages it (left alone).

`None` means "do not touch": the hook leaves the runtime's value and the reconciler writes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from koordcommon import cpus as kc
from koordcommon.model import KubeQoS, QoSClass
from koordcommon.schemas import CPUInfo, CPUSharedPool, NodeTopology, PodCPUAlloc

from .core.pods import PodInfo
from .qos.model import Processor, QoSState


def topology_of(processors: Iterable[Processor]) -> kc.Topology:
    return _topology(tuple(processors))


@functools.lru_cache(maxsize=256)  # a node's topology is fixed: built once, not every QoS round
def _topology(processors: tuple[Processor, ...]) -> kc.Topology:
    return kc.Topology(tuple(kc.CPU(p.cpu, p.core, p.socket, p.node) for p in processors))


def bound_cpus(pods: Iterable[PodInfo]) -> dict[int, str]:
    """CPU -> the QoS class of the pod the scheduler bound it to (LSE, else LSR)."""
    out: dict[int, str] = {}
    for p in pods:
        if p.cpuset:
            qos = "LSE" if p.qos_label and p.qos is QoSClass.LSE else "LSR"
            out.update((c, qos) for c in kc.cpus_of(p.cpuset))
    return out


def node_cpus(state: QoSState) -> kc.NodeCPUs:
    """The node's pools as a QoS round sees them."""
    return kc.NodeCPUs(topology_of(state.processors), bound_cpus(p.info for p in state.pods),
                       state.kubelet_pinned_cpus, frozenset(state.reserved_cpus), state.system_qos_cpus)  # fmt: skip


def _numa_pool(cpus: kc.NodeCPUs, pool: list[int], nodes: tuple[int, ...]) -> list[int]:
    wanted = set(nodes)
    return [c for c in pool if cpus.topology.by_id[c].node in wanted]


def container_cpuset(pod: PodInfo, cpus: kc.NodeCPUs, kubelet_policy: str = "none",
                     be_granted: str | None = None) -> str | None:  # fmt: skip
    """The cpuset of the pod's containers (see the module doc); `be_granted`: the besteffort
    dir's current cpuset.cpus (what CPU suppress grants BE now)."""
    status = kc.parse_resource_status(pod.annotation(kc.ANNOTATION_RESOURCE_STATUS)) if pod.annotations else None
    if status is None and pod.cpuset:
        status = kc.ResourceStatus(pod.cpuset)
    raw = pod.qos if pod.qos_label else QoSClass.NONE
    be = raw is QoSClass.BE or pod.kube_qos is KubeQoS.BEST_EFFORT
    if status is not None and status.cpuset:
        return status.cpuset
    if status is not None and status.numa_nodes:
        pool = cpus.be_pool() if raw is QoSClass.BE else cpus.share_pool()
        picked = _numa_pool(cpus, pool, status.numa_nodes)
        if picked:
            return kc.format_cpuset(picked)
    if raw is QoSClass.SYSTEM and cpus.system:
        return kc.format_cpuset(cpus.system)
    if raw is QoSClass.LS:
        return kc.format_cpuset(cpus.share_pool())
    if be:
        pool = cpus.be_pool()
        if be_granted:
            granted = kc.cpus_of(be_granted)
            pool = [c for c in pool if c in granted] or pool
        return kc.format_cpuset(pool)
    if kubelet_policy == "static":
        return None
    return kc.format_cpuset(cpus.share_pool())


def report(node: str, cpus: kc.NodeCPUs, kubelet_policy: str, pods: Iterable[PodInfo],
           kubelet_allocs: dict[str, str] | None = None) -> NodeTopology:  # fmt: skip
    """The NodeTopology the agent publishes: koordlet's cpu-topology, pod-cpu-allocs (scheduler
    bound and kubelet pinned), cpu-shared-pools and be-cpu-shared-pools."""
    allocs = [PodCPUAlloc(namespace=p.namespace, name=p.name, uid=p.uid, cpuset=p.cpuset)
              for p in sorted(pods, key=lambda p: p.uid) if p.cpuset and kc.cpus_of(p.cpuset)]  # fmt: skip
    allocs += [PodCPUAlloc(uid=uid, cpuset=cpuset, managedByKubelet=True)
               for uid, cpuset in sorted((kubelet_allocs or {}).items()) if kc.cpus_of(cpuset)]  # fmt: skip
    known = cpus.topology.ids()
    allocs = [a for a in allocs if kc.cpus_of(a.cpuset) <= known]
    return NodeTopology(
        node=node,
        cpus=[CPUInfo(id=c.id, core=c.core, socket=c.socket, node=c.node) for c in sorted(cpus.topology.cpus)],
        kubelet_cpu_policy=kubelet_policy,
        pod_cpu_allocs=allocs,
        cpu_shared_pools=[CPUSharedPool(socket=s, node=n, cpuset=v)
                          for s, n, v in kc.pools_by_numa(cpus.topology, cpus.share_pool())],
        be_cpu_shared_pools=[CPUSharedPool(socket=s, node=n, cpuset=v)
                             for s, n, v in kc.pools_by_numa(cpus.topology, cpus.be_pool())],
    )
