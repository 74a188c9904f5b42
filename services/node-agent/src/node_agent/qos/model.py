"""What the strategies see (QoSState) and what they return (CgroupWrite, Eviction)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from koordcommon.model import KubeQoS, QoSClass
from koordcommon.resources import ZERO, Resources

from ..core.pods import PodInfo

CFS_PERIOD_US = 100_000
MAX_INT64 = 9_223_372_036_854_775_807


@dataclass(frozen=True, order=True)
class Processor:
    """One logical CPU and where it sits (the topology the cpuset strategies choose from)."""

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
    level: str = "pod"  # qos | pod | container


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


Action = CgroupWrite | Eviction


@dataclass
class PodState:
    info: PodInfo
    rel: str  # pod cgroup dir
    containers: dict[str, str] = field(default_factory=dict)  # container name -> cgroup dir
    usage: Resources | None = None  # last collected (None: no metric)
    throttled_ratio: float | None = None

    @property
    def raw_qos(self) -> QoSClass:
        """The koordinator.sh/qosClass label only (what suppress/evict/burst consult)."""
        return self.info.qos if self.info.qos_label else QoSClass.NONE

    @property
    def is_be(self) -> bool:
        return self.raw_qos is QoSClass.BE

    @property
    def kube_best_effort(self) -> bool:
        return self.info.kube_qos is KubeQoS.BEST_EFFORT


@dataclass(frozen=True)
class BESample:
    """koordlet's node_be metric for one round (milli-cores)."""

    ts_ms: int
    usage: int
    real_limit: int
    request: int


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
    reserved_cpus: frozenset[int] = frozenset()
    be_history: list[BESample] = field(default_factory=list)
    collect_interval_s: float = 1.0
    last_evict_ms: dict[str, int] = field(default_factory=dict)  # cool-down clock -> ms of its last eviction
    started_ms: int = 0  # when QoS began looking after this node
    node_allocatable_memory: int = 0

    @property
    def be_dir(self) -> str:
        return self.qos_dirs[KubeQoS.BEST_EFFORT]

    def pod(self, uid: str) -> PodState | None:
        return next((p for p in self.pods if p.info.uid == uid), None)
