"""What the strategies see (QoSState) and what they return (CgroupWrite, Eviction)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from koordcommon.model import KubeQoS, PriorityClass, QoSClass
from koordcommon.resources import ZERO, Resources

from ..core.pods import PodInfo

CFS_PERIOD_US = 100_000
MAX_INT64 = 9_223_372_036_854_775_807

# Enum members read once: looking one up through its class costs about 0.3 us on Python 3.11,
# and these are read per pod per QoS round.
_NONE, _BE, _BEST_EFFORT = QoSClass.NONE, QoSClass.BE, KubeQoS.BEST_EFFORT


class Processor(NamedTuple):
    """One logical CPU and where it sits (the topology the cpuset strategies choose from). A
    tuple: a topology is hashed to reuse the cpuset chosen from it."""

    cpu: int
    core: int
    socket: int = 0
    node: int = 0


@dataclass(frozen=True)
class CgroupWrite:
    """One cgroup file value, by its v1 (logical) name; the executor maps it to v2."""

    rel: str  # dir relative to the cgroup root
    resource: str  # cpu.cfs_quota_us, cpuset.cpus, cpu.shares, cpu.bvt_warp_ns, memory.min ...
    value: int | str
    strategy: str
    level: str = "pod"  # qos | pod | container | host (a host application's dir)
    inputs: dict = field(default_factory=dict, compare=False)  # what the strategy read (explanations)


@dataclass(frozen=True)
class Eviction:
    """One pod to evict; once requested it starts the cool-down clock it names."""

    uid: str
    namespace: str
    name: str
    strategy: str
    cool_down: str  # the clock this eviction restarts; the strategy checks it in QoSState.last_evict_ms
    reason: str
    release: Resources = ZERO
    feature: str = ""  # Koordinator's name of the rule that picked the pod (BECPUEvict, MemoryEvict ...)
    inputs: dict = field(default_factory=dict, compare=False)  # what the rule read, the victim order


Action = CgroupWrite | Eviction


@dataclass
class PodState:
    info: PodInfo
    rel: str  # pod cgroup dir
    containers: dict[str, str] = field(default_factory=dict)  # container name -> cgroup dir
    usage: Resources | None = None  # last collected (None: no metric)
    throttled_ratio: float | None = None
    container_usage: dict[str, Resources] = field(default_factory=dict)  # container name -> last collected

    # Derived from `info` once, when the round's state is built: the strategies ask each of these
    # several times per pod (a property, or functools.cached_property with its lock on Python
    # 3.11, costs two to four times as much over a round).
    # the koordinator.sh/qosClass label only (what suppress/evict/burst consult)
    raw_qos: QoSClass = field(init=False, repr=False, compare=False)
    is_be: bool = field(init=False, repr=False, compare=False)
    kube_best_effort: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.raw_qos = raw = self.info.qos if self.info.qos_label else _NONE
        self.is_be = raw is _BE
        self.kube_best_effort = self.info.kube_qos is _BEST_EFFORT


@dataclass(frozen=True)
class BESample:
    """koordlet's node_be metric for one round (milli-cores), and the node's cpu usage then."""

    ts_ms: int
    usage: int
    real_limit: int
    request: int
    node_cpu: int | None = None  # None: no node metric that round


@dataclass(frozen=True)
class HostApp:
    """A NodeSLO host application: a process group outside any pod, in its own cgroup."""

    name: str
    qos: QoSClass
    priority_class: PriorityClass
    base: str  # the cgroupPath base ("" = the cgroup root)
    rel: str  # its cgroup dir relative to the cgroup root
    usage: Resources | None = None  # last collected

    @property
    def counts_as_be(self) -> bool:
        """CPU suppress counts it with BE only when it is BE and runs under the besteffort dir."""
        return self.qos is _BE and self.base == "KubepodsBesteffort"


@dataclass(frozen=True)
class BurstLimiter:
    """One container's cfs quota burst budget (koordlet's token bucket over cfsQuotaBurstPeriodSeconds)."""

    capacity: int  # period x (cfsQuotaBurstPercent - 100)
    tokens: int
    updated_ms: int
    expire_ms: int  # dropped when not updated for 2 x period

    @property
    def allows(self) -> bool:
        return self.tokens > 0


@dataclass
class QoSState:
    node: str
    now_ms: int
    capacity: Resources
    allocatable: Resources
    node_usage: Resources | None
    pods: list[PodState]
    qos_dirs: dict[KubeQoS, str]
    processors: list[Processor]
    read: Callable[[str, str], str | None]  # current value of (dir, v1 resource name)
    reserved_cpus: frozenset[int] = frozenset()  # node annotation node.koordinator.sh/reservation reservedCPUs
    annotation_reserved_cpu_milli: int = 0  # the cpu that annotation reserves (its cpus, or resources.cpu)
    be_history: list[BESample] = field(default_factory=list)
    collect_interval_s: float = 1.0
    last_evict_ms: dict[str, int] = field(default_factory=dict)  # cool-down clock -> ms of its last eviction
    started_ms: int = 0  # when QoS began looking after this node
    node_allocatable_memory: int = 0
    # batch-cpu / batch-memory / mid-cpu / mid-memory in the node's status.allocatable (absent: not published)
    tier_allocatable: dict[str, int] = field(default_factory=dict)
    system_qos_cpus: frozenset[int] = frozenset()  # exclusive cpuset of SYSTEM-QoS pods (node annotation)
    kubelet_cpu_policy: str = "none"  # the kubelet CPU manager policy (cpu_manager_state policyName)
    kubelet_pinned_cpus: frozenset[int] = frozenset()  # CPUs the kubelet static policy gave pods exclusively
    host_apps: list[HostApp] = field(default_factory=list)
    pending_evictions: frozenset[str] = frozenset()  # uids whose eviction was requested and who are still here
    burst_limiters: dict[str, BurstLimiter] = field(default_factory=dict)  # container dir -> this round's budget

    @property
    def be_dir(self) -> str:
        return self.qos_dirs[_BEST_EFFORT]

    def pod(self, uid: str) -> PodState | None:
        return next((p for p in self.pods if p.info.uid == uid), None)
