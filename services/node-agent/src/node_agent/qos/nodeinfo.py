"""What QoS needs to know about a node beyond its pods, from the node object, the kubelet and the NodeSLO.

* the node's status.allocatable batch-cpu / batch-memory / mid-cpu / mid-memory (under either
  accepted prefix), the limit of BE satisfaction under evictByAllocatable and of the allocatable
  evictions;
* its annotations `node.koordinator.sh/system-qos-resource` (`{"cpuset": "0-1", "cpusetExclusive":
  true}`; exclusive unless it says false: those CPUs are never BE's) and
  `node.koordinator.sh/reservation` (`{"reservedCPUs": "0-1"}` or `{"resources": {"cpu": "2"}}`:
  reserved CPUs, and the cpu CPU suppress counts as reserved);
* the kubelet CPU manager's checkpoint (`cpu_manager_state`, JSON: `policyName`, `defaultCpuSet`,
  `entries` {pod uid: {container: cpuset}}): under the static policy the CPUs it pinned to pods
  Koordinator does not manage (neither LS nor BE by label, no cpuset of koord-scheduler) are never BE's;
* the NodeSLO host applications: their cgroup dir (no cgroupPath: `host-latency-sensitive/<name>`
  for LSE/LSR/LS, `host-best-effort/<name>` for BE, `<name>` otherwise; with one:
  `<base dir>/<parentDir>/<relativePath>`, base CgroupRoot (default), Kubepods,
  KubepodsBurstable or KubepodsBesteffort).

Pure functions: the caller reads the files.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field

from koordcommon import resources as rn
from koordcommon.model import KubeQoS, QoSClass, parse_priority_class, parse_qos_class
from koordcommon.quantity import QuantityError, parse_json_quantity
from koordcommon.records import NodeRecord
from koordcommon.resources import Resources
from koordcommon.schemas import HostApplicationSpec

from ..core.pods import PodInfo
from .model import HostApp
from .strategies.cpuset import parse_cpuset

ANNOTATION_SYSTEM_QOS = "node.koordinator.sh/system-qos-resource"
ANNOTATION_RESERVATION = "node.koordinator.sh/reservation"
HOST_LS_DIR = "host-latency-sensitive"
HOST_BE_DIR = "host-best-effort"
BASES = {"": None, "CgroupRoot": None, "Kubepods": KubeQoS.GUARANTEED, "KubepodsBurstable": KubeQoS.BURSTABLE,
         "KubepodsBesteffort": KubeQoS.BEST_EFFORT}


@dataclass(frozen=True)
class NodeFacts:
    tier_allocatable: dict[str, int] = field(default_factory=dict)
    system_qos_cpus: frozenset[int] = frozenset()
    reserved_cpus: frozenset[int] = frozenset()
    reserved_cpu_milli: int = 0


def _json(annotations: dict[str, str], key: str) -> dict:
    raw = annotations.get(key)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _cpus(text) -> frozenset[int]:
    if not isinstance(text, str):
        return frozenset()
    try:
        return frozenset(parse_cpuset(text))
    except ValueError:
        return frozenset()


def node_facts(record: NodeRecord | None) -> NodeFacts:
    if record is None:
        return NodeFacts()
    tiers = {}
    for suffix in rn.TIER_SUFFIXES:
        value = record.tier(suffix)
        if value is not None:
            tiers[suffix] = value
    system = _json(record.annotations, ANNOTATION_SYSTEM_QOS)
    exclusive = system.get("cpusetExclusive") is not False
    reservation = _json(record.annotations, ANNOTATION_RESERVATION)
    reserved = _cpus(reservation.get("reservedCPUs"))
    reserved_milli = len(reserved) * 1000  # reservedCPUs, when set, is what the reservation's cpu is
    resources = reservation.get("resources")
    if not reserved and isinstance(resources, dict) and resources.get("cpu") is not None:
        try:
            reserved_milli = parse_json_quantity(resources["cpu"]).milli_value()
        except QuantityError:
            reserved_milli = 0
    return NodeFacts(tiers, _cpus(system.get("cpuset")) if exclusive else frozenset(), reserved, reserved_milli)


@dataclass(frozen=True)
class CPUManagerState:
    policy: str
    entries: dict[str, dict[str, str]]


def parse_cpu_manager_state(text: str | None) -> CPUManagerState | None:
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    entries = doc.get("entries") or {}
    if not isinstance(entries, dict):
        entries = {}
    clean = {uid: {c: s for c, s in conts.items() if isinstance(s, str)} for uid, conts in entries.items()
             if isinstance(conts, dict)}
    return CPUManagerState(str(doc.get("policyName") or "none"), clean)


def kubelet_pinned_cpus(state: CPUManagerState | None, pods: list[PodInfo]) -> frozenset[int]:
    """The CPUs the static policy pinned to pods Koordinator does not manage."""
    if state is None or state.policy != "static":
        return frozenset()
    managed = {p.uid for p in pods if (p.qos_label and p.qos in (QoSClass.LS, QoSClass.BE)) or p.cpuset}
    out: set[int] = set()
    for uid, containers in state.entries.items():
        if uid in managed:
            continue
        for text in containers.values():
            out |= _cpus(text)
    return frozenset(out)


def host_app_dir(spec: HostApplicationSpec, qos_dir) -> str | None:
    """The app's cgroup dir relative to the cgroup root (`qos_dir(KubeQoS)` names the kubepods dirs);
    None for a name or path that would leave its base."""
    qos = parse_qos_class(spec.qos)
    if spec.cgroupPath is None:
        given = [spec.name]
        base = {QoSClass.LSE: HOST_LS_DIR, QoSClass.LSR: HOST_LS_DIR, QoSClass.LS: HOST_LS_DIR,
                QoSClass.BE: HOST_BE_DIR}.get(qos, "")
    else:
        if spec.cgroupPath.base not in BASES:
            return None
        kube = BASES[spec.cgroupPath.base]
        given = [spec.cgroupPath.parentDir, spec.cgroupPath.relativePath]
        base = qos_dir(kube) if kube is not None else ""
    if any(part.startswith("/") or ".." in part.split("/") for part in given):
        return None
    rel = posixpath.normpath(posixpath.join(base, *given))
    return None if rel in (".", "") else rel


def host_app_dirs(specs: list[HostApplicationSpec], qos_dir) -> list[tuple[str, str]]:
    """(name, cgroup dir) of the host applications that have a valid name and dir (what is collected)."""
    return [(s.name, rel) for s in specs if s.name and (rel := host_app_dir(s, qos_dir)) is not None]


def host_apps(specs: list[HostApplicationSpec], qos_dir, usage: dict[str, tuple[int, int] | None]) -> list[HostApp]:
    """The NodeSLO's host applications that have a valid name and dir, with their collected usage."""
    out = []
    for spec in specs:
        rel = host_app_dir(spec, qos_dir) if spec.name else None
        if rel is None:
            continue
        u = usage.get(spec.name)
        out.append(HostApp(spec.name, parse_qos_class(spec.qos), parse_priority_class(spec.priority),
                           spec.cgroupPath.base if spec.cgroupPath is not None else "", rel,
                           Resources(int(u[0]), int(u[1])) if u is not None else None))
    return out
