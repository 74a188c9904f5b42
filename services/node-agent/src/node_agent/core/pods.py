"""What the agent needs to know about a pod to label its metrics (from a PodRecord)."""

from __future__ import annotations

from dataclasses import dataclass, field

from koordcommon import resources as rn
from koordcommon.cpus import ANNOTATION_RESOURCE_STATUS, parse_resource_status
from koordcommon.model import (
    DEFAULT_PRIORITY_VALUE,
    LABEL_QOS_CLASS,
    KubeQoS,
    PriorityClass,
    QoSClass,
    parse_qos_class,
)
from koordcommon.records import PodRecord
from koordcommon.resources import ZERO, Resources

LABEL_EVICTION_ENABLED = "koordinator.sh/eviction-enabled"  # "true": CPUEvict / MemoryEvict / *AllocatableEvict may pick it
ANNOTATION_EXTENDED_RESOURCE_SPEC = "node.koordinator.sh/extended-resource-spec"  # batch resources per container
# the annotations kept beside the koordinator.sh/ ones: the scheduler's allocation and the batch spec
KEPT_ANNOTATIONS = frozenset({ANNOTATION_RESOURCE_STATUS, ANNOTATION_EXTENDED_RESOURCE_SPEC})


def _bound_cpuset(annotations: dict[str, str]) -> str:
    status = parse_resource_status(annotations.get(ANNOTATION_RESOURCE_STATUS))
    return status.cpuset if status is not None else ""


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    name: str
    requests: Resources = ZERO
    limits: Resources = ZERO
    batch_requests: Resources = ZERO  # batch-cpu milli, batch-memory bytes
    batch_limits: Resources = ZERO
    has_limits: bool = False
    mid_requests: Resources = ZERO  # mid-cpu milli, mid-memory bytes


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    owner_kind: str = ""
    owner_name: str = ""
    qos: QoSClass = QoSClass.NONE
    priority_class: PriorityClass = PriorityClass.NONE
    priority: int | None = None
    requests: Resources = ZERO
    limits: Resources = ZERO
    batch_requests: Resources = ZERO
    start_ms: int = 0
    containers: tuple[ContainerInfo, ...] = field(default_factory=tuple)
    kube_qos: KubeQoS = KubeQoS.BEST_EFFORT  # picks the cgroup parent dir
    container_ids: tuple[tuple[str, str], ...] = ()  # (name, "containerd://<id>")
    phase: str = "Running"
    cpuset: str = ""  # cpus bound by the scheduler (annotation scheduling.koordinator.sh/resource-status)
    annotations: tuple[tuple[str, str], ...] = ()
    qos_label: bool = False  # koordinator.sh/qosClass set (suppress/evict/burst read the raw label)
    evict_enabled: bool = False  # label koordinator.sh/eviction-enabled: "true"
    sub_priority: int | None = None  # label koordinator.sh/priority

    @classmethod
    def from_record(cls, pod: PodRecord) -> PodInfo:
        owner = pod.controller
        return cls(
            uid=pod.uid,
            namespace=pod.namespace,
            name=pod.name,
            owner_kind=owner.kind if owner else "",
            owner_name=owner.name if owner else "",
            qos=pod.qos,
            priority_class=pod.priority_class,
            priority=pod.priority,
            requests=pod.request_resources(),
            limits=pod.limit_resources(),
            batch_requests=pod.batch_requests(),
            start_ms=pod.start_ms if pod.start_ms is not None else pod.created_ms,
            containers=tuple(
                ContainerInfo(
                    c.name,
                    Resources.from_list(c.requests),
                    Resources.from_list(c.limits),
                    rn.batch_of(c.requests),
                    rn.batch_of(c.limits),
                    bool(c.limits),
                    rn.mid_of(c.requests),
                )
                for c in pod.containers
            ),
            kube_qos=pod.computed_kube_qos(),
            container_ids=tuple(sorted(pod.container_ids.items())),
            phase=pod.phase,
            cpuset=_bound_cpuset(pod.annotations),
            qos_label=parse_qos_class(pod.labels.get(LABEL_QOS_CLASS)) is not QoSClass.NONE,
            evict_enabled=pod.labels.get(LABEL_EVICTION_ENABLED) == "true",
            sub_priority=pod.sub_priority,
            annotations=tuple(sorted((k, v) for k, v in pod.annotations.items()
                                     if k.startswith("koordinator.sh/") or k in KEPT_ANNOTATIONS)),
        )

    def annotation(self, key: str) -> str | None:
        # a scan, not a dict built per call: a pod keeps a few annotations, often none (from the
        # end: the last of a repeated key wins, as in a dict)
        for k, v in reversed(self.annotations):
            if k == key:
                return v
        return None

    @property
    def priority_value(self) -> int:
        """spec.priority when set and non-zero, else the default value of the pod's priority class."""
        if self.priority:
            return self.priority
        return DEFAULT_PRIORITY_VALUE.get(self.priority_class, 0)

