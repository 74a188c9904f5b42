"""The runtime hooks (koordlet runtimehooks: CPUSetAllocator, BatchResource, GroupIdentity): what a
pod's sandbox and containers get the moment they are created, before the runtime sees them.

Each hook computes its values with the same rule its reconciler runs after the fact, so the two
always agree:

* cpuset (CPUSetAllocator): `cpuorch.container_cpuset` (the scheduler's cpuset for LSE / LSR,
  the share pool for LS, the BE pool within what suppress grants for BE); a cpuset-bound pod runs
  without cfs quota (container quota -1 here, the pod's at sandbox time);
* batch resources: the `batch_resources` strategy over a state of this one pod (cpu shares, cfs
  quota and memory limit from `koordinator.sh/batch-*`), the pod's requests from the agent's pod
  list, else from the `node.koordinator.sh/extended-resource-spec` annotation;
* group identity: the `group_identity` strategy's pod value (`cpu.bvt_warp_ns`).

Container values go into the CRI request (LinuxContainerResources); pod-level values cannot
travel in CRI, so at RunPodSandbox they are written to the pod's cgroup dir, which kubelet has
created by then (NRI mode does the same).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from koordcommon import cpus as kc
from koordcommon.model import LABEL_QOS_CLASS, KubeQoS, QoSClass, parse_qos_class
from koordcommon.quantity import QuantityError, parse_json_quantity
from koordcommon.resources import ZERO, Resources
from koordcommon.schemas import NodeSLOSpec

from .. import cpuorch
from ..collect.cgroups import CgroupLayout, CgroupPathError
from ..core.pods import ANNOTATION_EXTENDED_RESOURCE_SPEC, KEPT_ANNOTATIONS, ContainerInfo, PodInfo
from ..qos.model import CFS_PERIOD_US, CgroupWrite, PodState, QoSState
from ..qos.strategies import batch_resources, group_identity
from .cri import pb

CONTAINER = "<container>"  # where a container-level value of the strategies lands: the CRI request
NAME = "runtime_hooks"


@dataclass
class HookView:
    """What the hooks read of the node at the moment of the call."""

    cpus: kc.NodeCPUs
    layout: CgroupLayout
    kubelet_policy: str = "none"
    slo: NodeSLOSpec | None = None
    pods: dict[str, PodInfo] = field(default_factory=dict)  # uid -> the agent's view of the pod
    be_granted: str | None = None  # the besteffort dir's cpuset.cpus now
    write: Callable[[list[CgroupWrite]], object] | None = None  # pod-level writes (the executor's)


@dataclass(frozen=True)
class ContainerAdjustment:
    cpuset_cpus: str | None = None
    cpu_shares: int | None = None
    cpu_quota: int | None = None
    memory_limit_in_bytes: int | None = None

    def apply(self, r: pb.LinuxContainerResources) -> bool:
        """Set what it holds on the CRI resources; True when anything changed."""
        before = r.SerializeToString()
        if self.cpuset_cpus is not None:
            r.cpuset_cpus = self.cpuset_cpus
        if self.cpu_shares is not None:
            r.cpu_shares = self.cpu_shares
        if self.cpu_quota is not None:
            r.cpu_quota = self.cpu_quota
            if self.cpu_quota > 0 and r.cpu_period == 0:
                r.cpu_period = CFS_PERIOD_US
        if self.memory_limit_in_bytes is not None:
            r.memory_limit_in_bytes = max(self.memory_limit_in_bytes, 0)  # CRI: 0 = no limit
        return r.SerializeToString() != before


def _kube_qos(cgroup_parent: str, labels: dict[str, str]) -> KubeQoS:
    parent = cgroup_parent.lower()
    if "besteffort" in parent:
        return KubeQoS.BEST_EFFORT
    if "burstable" in parent:
        return KubeQoS.BURSTABLE
    return KubeQoS.GUARANTEED if parent else KubeQoS.BURSTABLE


def _batch(resources: dict) -> Resources:
    cpu = mem = 0
    for name, raw in (resources or {}).items():
        try:
            value = parse_json_quantity(raw)
        except (QuantityError, TypeError):
            continue
        if name.endswith("/batch-cpu"):
            cpu = value.value()  # batch-cpu is already milli-cores
        elif name.endswith("/batch-memory"):
            mem = value.value()
    return Resources(cpu, mem)


def _containers_from_spec(raw: str | None) -> tuple[ContainerInfo, ...]:
    """koord-manager's extended-resource-spec: {"containers": {name: {"requests": .., "limits": ..}}}."""
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return ()
    conts = doc.get("containers") if isinstance(doc, dict) else None
    if not isinstance(conts, dict):
        return ()
    out = []
    for name, spec in conts.items():
        if not isinstance(spec, dict):
            continue
        limits = spec.get("limits") if isinstance(spec.get("limits"), dict) else {}
        requests = spec.get("requests") if isinstance(spec.get("requests"), dict) else {}
        out.append(ContainerInfo(name, batch_requests=_batch(requests), batch_limits=_batch(limits),
                                 has_limits=bool(limits)))  # fmt: skip
    return tuple(out)


def pod_of(sandbox: pb.PodSandboxConfig, known: dict[str, PodInfo]) -> PodInfo:
    """The pod a sandbox belongs to: the agent's view when it has the pod, else what the CRI
    request says (its labels and annotations are the pod's)."""
    meta = sandbox.metadata
    if meta.uid in known:
        return known[meta.uid]
    labels, annotations = dict(sandbox.labels), dict(sandbox.annotations)
    qos = parse_qos_class(labels.get(LABEL_QOS_CLASS))
    status = kc.parse_resource_status(annotations.get(kc.ANNOTATION_RESOURCE_STATUS))
    return PodInfo(
        uid=meta.uid, namespace=meta.namespace, name=meta.name, qos=qos, qos_label=qos is not QoSClass.NONE,
        kube_qos=_kube_qos(sandbox.linux.cgroup_parent, labels),
        cpuset=status.cpuset if status is not None else "",
        containers=_containers_from_spec(annotations.get(ANNOTATION_EXTENDED_RESOURCE_SPEC)),
        annotations=tuple(sorted((k, v) for k, v in annotations.items()
                                 if k.startswith("koordinator.sh/") or k in KEPT_ANNOTATIONS)),
    )  # fmt: skip


def _one_pod_state(view: HookView, pod: PodInfo, pod_rel: str, container: str | None) -> QoSState:
    """A QoS state holding only this pod (the strategies' rules judge it as in a round)."""
    containers = {c.name: CONTAINER for c in pod.containers if c.name == container}
    return QoSState(node="", now_ms=0, capacity=ZERO, allocatable=ZERO, node_usage=None,
                    pods=[PodState(pod, pod_rel, containers)],
                    qos_dirs={k: view.layout.qos_dir(k) for k in KubeQoS}, processors=[],
                    read=lambda rel, resource: None)  # fmt: skip


class RuntimeHooks:
    """The hooks of one node; `view()` gives the node as it is now."""

    def __init__(self, view: Callable[[], HookView]) -> None:
        self.view = view

    def _pod_dir(self, view: HookView, pod: PodInfo) -> str | None:
        try:
            return view.layout.pod_dir(pod.uid, pod.kube_qos)
        except CgroupPathError:
            return None

    def pre_run_pod_sandbox(self, req: pb.RunPodSandboxRequest) -> list[CgroupWrite]:
        """The pod-level values (bvt, batch shares / quota / memory, no quota for a bound pod),
        written to the pod's cgroup dir; the writes made."""
        view = self.view()
        pod = pod_of(req.config, view.pods)
        rel = self._pod_dir(view, pod)
        if rel is None:
            return []
        writes: list[CgroupWrite] = []
        if view.slo is not None:
            enabled, params, _, kube_pod = group_identity.rule(view.slo)
            if enabled:
                value = group_identity.pod_value(PodState(pod, rel), params, kube_pod)
                writes.append(CgroupWrite(rel, group_identity.RESOURCE, value, NAME, "pod"))
            state = _one_pod_state(view, pod, rel, None)
            writes += [w for w in batch_resources.plan(state, view.slo) if w.rel == rel]
        if pod.cpuset:
            writes.append(CgroupWrite(rel, "cpu.cfs_quota_us", -1, NAME, "pod"))
        if writes and view.write is not None:
            view.write(writes)
        return writes

    def container_adjustment(self, pod: PodInfo, container: str) -> ContainerAdjustment:
        view = self.view()
        cpuset = cpuorch.container_cpuset(pod, view.cpus, view.kubelet_policy, view.be_granted)
        values: dict[str, int] = {}
        rel = self._pod_dir(view, pod)
        if view.slo is not None and rel is not None:
            state = _one_pod_state(view, pod, rel, container)
            values = {w.resource: int(w.value) for w in batch_resources.plan(state, view.slo) if w.rel == CONTAINER}
        quota = values.get("cpu.cfs_quota_us")
        if pod.cpuset:
            quota = -1  # exclusive CPUs are never throttled
        return ContainerAdjustment(cpuset, values.get("cpu.shares"), quota, values.get("memory.limit_in_bytes"))

    def pre_create_container(self, req: pb.CreateContainerRequest) -> bool:
        """Set the container's cpuset and batch resources in the request; True when it changed."""
        pod = pod_of(req.sandbox_config, self.view().pods)
        adjust = self.container_adjustment(pod, req.config.metadata.name)
        return adjust.apply(req.config.linux.resources)

    def pre_update_container_resources(self, req: pb.UpdateContainerResourcesRequest, sandbox: pb.PodSandboxConfig,
                                       container: str) -> bool:  # fmt: skip
        """kubelet resets resources (its CPU manager's cpusets among them): the hook's values stand."""
        pod = pod_of(sandbox, self.view().pods)
        return self.container_adjustment(pod, container).apply(req.linux)
