"""Typed pod and node records: what the cluster port hands to every service.

Resource lists are integer maps: `cpu` in milli-cores, everything else (memory, the
batch/mid tiers, pods) in the resource's own integer unit. The batch/mid cpu tiers
already count milli-cores in Kubernetes, so one rule covers all names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import resources as rn
from .model import KubeQoS, PriorityClass, QoSClass, priority_class, qos_class, sub_priority
from .resources import Resources

ResourceList = dict[str, int]

ANNOTATION_MIRROR = "kubernetes.io/config.mirror"
ANNOTATION_CONFIG_SOURCE = "kubernetes.io/config.source"
ANNOTATION_DESCHEDULER_EVICT = "descheduler.alpha.kubernetes.io/evict"


@dataclass(slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str = ""
    api_version: str = ""
    controller: bool = True


@dataclass(slots=True)
class ContainerSpec:
    name: str
    requests: ResourceList = field(default_factory=dict)
    limits: ResourceList = field(default_factory=dict)


def _sum_lists(lists) -> ResourceList:
    out: ResourceList = {}
    for lst in lists:
        for k, v in lst.items():
            out[k] = out.get(k, 0) + v
    return out


def _max_lists(a: ResourceList, b: ResourceList) -> ResourceList:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0), v)
    return out


@dataclass(slots=True)
class PodRecord:
    namespace: str
    name: str
    uid: str
    node_name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    owners: list[OwnerRef] = field(default_factory=list)
    priority: int | None = None
    priority_class_name: str = ""
    preemption_policy: str | None = None
    scheduler_name: str = "default-scheduler"
    phase: str = "Pending"  # Pending | Running | Succeeded | Failed | Unknown
    containers: list[ContainerSpec] = field(default_factory=list)
    init_containers: list[ContainerSpec] = field(default_factory=list)
    overhead: ResourceList = field(default_factory=dict)
    kube_qos: str | None = None  # status.qosClass when the API reported it
    volume_kinds: list[str] = field(default_factory=list)  # e.g. ["emptyDir", "hostPath", "persistentVolumeClaim"]
    container_ids: dict[str, str] = field(default_factory=dict)  # name -> status containerID ("containerd://<id>")
    created_ms: int = 0
    start_ms: int | None = None
    deletion_ms: int | None = None
    resource_version: str = ""
    scheduled_ms: int | None = None  # the PodScheduled condition turned True (bound)
    initialized_ms: int | None = None  # the Initialized condition turned True (init containers done)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def controller(self) -> OwnerRef | None:
        for o in self.owners:
            if o.controller:
                return o
        return self.owners[0] if self.owners else None

    def requests(self) -> ResourceList:
        """Kubernetes PodRequests: max(sum of containers, each init container) + overhead."""
        total = _sum_lists(c.requests for c in self.containers)
        for ic in self.init_containers:
            total = _max_lists(total, ic.requests)
        return _sum_lists([total, self.overhead]) if self.overhead else total

    def limits(self) -> ResourceList:
        """Kubernetes PodLimits: like requests, but overhead only adds to limits that are set."""
        total = _sum_lists(c.limits for c in self.containers)
        for ic in self.init_containers:
            total = _max_lists(total, ic.limits)
        for k, v in self.overhead.items():
            if k in total:
                total[k] += v
        return total

    def request_resources(self) -> Resources:
        return Resources.from_list(self.requests())

    def limit_resources(self) -> Resources:
        return Resources.from_list(self.limits())

    def batch_requests(self) -> Resources:
        """koordinator.sh/batch-cpu (milli) and batch-memory, under either accepted prefix."""
        return rn.batch_of(self.requests())

    def computed_kube_qos(self) -> KubeQoS:
        """The Kubernetes QoS class from cpu/memory requests and limits of all containers."""
        if self.kube_qos:
            try:
                return KubeQoS(self.kube_qos)
            except ValueError:
                pass
        conts = self.containers + self.init_containers
        any_set = False
        guaranteed = True
        for c in conts:
            for res in (rn.CPU, rn.MEMORY):
                req, lim = c.requests.get(res), c.limits.get(res)
                if req or lim:
                    any_set = True
                # A zero limit counts as unset, as in Kubernetes' ComputePodQOS.
                if not lim or (req is not None and req != lim):
                    guaranteed = False
        if not any_set:
            return KubeQoS.BEST_EFFORT
        return KubeQoS.GUARANTEED if guaranteed else KubeQoS.BURSTABLE

    @property
    def qos(self) -> QoSClass:
        return qos_class(self.labels, self.computed_kube_qos())

    @property
    def priority_class(self) -> PriorityClass:
        return priority_class(self.labels, self.priority, self.qos)

    @property
    def sub_priority(self) -> int | None:
        return sub_priority(self.labels)

    @property
    def is_terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_active(self) -> bool:
        """Counted against a node: Running or Pending and bound (Koordinator's batch rule)."""
        return self.phase in ("Running", "Pending") and self.deletion_ms is None

    @property
    def is_daemonset(self) -> bool:
        return any(o.kind == "DaemonSet" for o in self.owners)

    @property
    def is_mirror_or_static(self) -> bool:
        src = self.annotations.get(ANNOTATION_CONFIG_SOURCE)
        return ANNOTATION_MIRROR in self.annotations or (src is not None and src != "api")

    @property
    def has_local_storage(self) -> bool:
        return any(k in ("emptyDir", "hostPath") for k in self.volume_kinds)


@dataclass(slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(slots=True)
class NodeRecord:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    capacity: ResourceList = field(default_factory=dict)
    allocatable: ResourceList = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    unschedulable: bool = False
    ready: bool = True
    created_ms: int = 0
    resource_version: str = ""

    def capacity_resources(self) -> Resources:
        return Resources.from_list(self.capacity)

    def allocatable_resources(self) -> Resources:
        return Resources.from_list(self.allocatable)

    def tier(self, suffix: str) -> int | None:
        """The node's batch/mid value under whichever accepted prefix it is published."""
        for prefix in rn.ACCEPTED_PREFIXES:
            v = self.allocatable.get(prefix + suffix)
            if v is not None:
                return v
        return None

    def batch_allocatable(self) -> Resources | None:
        cpu, mem = self.tier(rn.BATCH_CPU_SUFFIX), self.tier(rn.BATCH_MEMORY_SUFFIX)
        if cpu is None and mem is None:
            return None
        return Resources(cpu or 0, mem or 0)

    def mid_allocatable(self) -> Resources | None:
        cpu, mem = self.tier(rn.MID_CPU_SUFFIX), self.tier(rn.MID_MEMORY_SUFFIX)
        if cpu is None and mem is None:
            return None
        return Resources(cpu or 0, mem or 0)
