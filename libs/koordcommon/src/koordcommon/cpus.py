"""CPUs as Koordinator's fine-grained CPU orchestration names them: the one place for the rules
the node agent and the scheduler extender must agree on.

* CPU lists (`0-3,8`: the Linux cpuset format) and a node's CPU topology (koordlet's
  `node.koordinator.sh/cpu-topology`: each logical CPU with its core, socket and NUMA node; core
  ids are unique on the node, as lscpu numbers them, not the per-socket `core_id` of /sys);
* the pod annotations `scheduling.koordinator.sh/resource-spec` (what binding a pod asks for) and
  `scheduling.koordinator.sh/resource-status` (what koord-scheduler allocated: `cpuset`,
  `numaNodeResources`), and the node labels that steer the allocation;
* the pools (docs/proposals/scheduling/20220530-fine-grained-cpu-orchestration.md): CPUs bound by
  the scheduler (LSE, LSR) or pinned by the kubelet's static CPU manager are exclusive; the *share
  pool* (LS and Burstable pods) is every other CPU less the node's reserved and exclusive SYSTEM
  CPUs; the *BE pool* is every CPU less those bound to LSE pods, pinned by the kubelet, reserved or
  exclusive SYSTEM (LSR CPUs stay in it: Koordinator shares them with BE, never with LS).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, NamedTuple

ANNOTATION_RESOURCE_SPEC = "scheduling.koordinator.sh/resource-spec"
ANNOTATION_RESOURCE_STATUS = "scheduling.koordinator.sh/resource-status"
ANNOTATION_NUMA_TOPOLOGY_SPEC = "scheduling.koordinator.sh/numa-topology-spec"
ANNOTATION_SYSTEM_QOS = "node.koordinator.sh/system-qos-resource"
ANNOTATION_RESERVATION = "node.koordinator.sh/reservation"
LABEL_CPU_BIND_POLICY = "node.koordinator.sh/cpu-bind-policy"  # None | FullPCPUsOnly | SpreadByPCPUs
LABEL_NUMA_ALLOCATE_STRATEGY = "node.koordinator.sh/numa-allocate-strategy"  # MostAllocated | LeastAllocated
LABEL_NUMA_TOPOLOGY_POLICY = "node.koordinator.sh/numa-topology-policy"

FULL_PCPUS, SPREAD_BY_PCPUS, DEFAULT, CONSTRAINED_BURST = "FullPCPUs", "SpreadByPCPUs", "Default", "ConstrainedBurst"
BIND_POLICIES = (FULL_PCPUS, SPREAD_BY_PCPUS)
MOST_ALLOCATED, LEAST_ALLOCATED, DISTRIBUTE_EVENLY = "MostAllocated", "LeastAllocated", "DistributeEvenly"
EXCLUSIVE_NONE, EXCLUSIVE_PCPU, EXCLUSIVE_NUMA = "None", "PCPULevel", "NUMANodeLevel"
NUMA_POLICIES = ("", "None", "BestEffort", "Restricted", "SingleNUMANode")
MAX_CPUS = 8192  # a CPU id beyond this is not a real machine's


class CPUListError(ValueError):
    """Text that is not a Linux CPU list."""


def parse_cpuset(text: str) -> list[int]:
    """`0-3,8` -> [0, 1, 2, 3, 8] (sorted, each once); "" -> []."""
    return list(_parse_cpuset(text))


# A node's cgroups hold a handful of distinct lists that every QoS round reads again: each text is
# parsed once (the callers get their own list).
@lru_cache(maxsize=4096)
def _parse_cpuset(text: str) -> tuple[int, ...]:
    out: set[int] = set()
    parts = text.strip().split(",")
    for part in parts:
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise CPUListError(f"bad cpu list {text!r}") from None
        if a < 0 or b < a or b >= MAX_CPUS:
            raise CPUListError(f"bad cpu range {part!r}")
        if len(parts) == 1:
            return tuple(range(a, b + 1))  # one range: already sorted, each once
        out.update(range(a, b + 1))
    return tuple(sorted(out))


def cpus_of(text: Any) -> frozenset[int]:
    """A CPU list as a set; anything that is not one counts as no CPUs."""
    if not isinstance(text, str):
        return frozenset()
    try:
        return frozenset(_parse_cpuset(text))
    except CPUListError:
        return frozenset()


def format_cpuset(cpus: Iterable[int]) -> str:
    """Canonical range form: `2-4`, `0,4-5`."""
    return _format_cpuset(tuple(cpus))


@lru_cache(maxsize=4096)  # the same few sets are formatted round after round (see _parse_cpuset)
def _format_cpuset(cpus: tuple[int, ...]) -> str:
    ordered = sorted(set(cpus))
    if not ordered:
        return ""
    parts = []
    first = last = ordered[0]
    for c in ordered:
        if c - last > 1:  # a gap closes the range [first, last]
            parts.append(str(first) if first == last else f"{first}-{last}")
            first = c
        last = c
    parts.append(str(first) if first == last else f"{first}-{last}")
    return ",".join(parts)


# --------------------------------------------------------------------------- topology


class CPU(NamedTuple):
    """One logical CPU (koordlet's CPUInfo): `core` is unique on the node."""

    id: int
    core: int
    socket: int = 0
    node: int = 0


@dataclass(frozen=True)
class Topology:
    """A node's logical CPUs. Koordinator's per-unit counts are whole-node averages
    (CPUsPerCore = CPUs / cores, ...), which is what its allocation compares against."""

    cpus: tuple[CPU, ...]

    @cached_property
    def by_id(self) -> dict[int, CPU]:
        return {c.id: c for c in self.cpus}

    @cached_property
    def cores(self) -> dict[int, tuple[int, ...]]:
        """core -> its CPUs, ascending."""
        out: dict[int, list[int]] = {}
        for c in sorted(self.cpus):
            out.setdefault(c.core, []).append(c.id)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def numa_nodes(self) -> dict[int, tuple[int, ...]]:
        out: dict[int, list[int]] = {}
        for c in sorted(self.cpus):
            out.setdefault(c.node, []).append(c.id)
        return {k: tuple(v) for k, v in out.items()}

    @property
    def valid(self) -> bool:
        return bool(self.cpus)

    def _per(self, n: int) -> int:
        return len(self.cpus) // n if n else 0

    @property
    def cpus_per_core(self) -> int:
        return self._per(len(self.cores))

    @property
    def cpus_per_node(self) -> int:
        return self._per(len(self.numa_nodes))

    @property
    def cpus_per_socket(self) -> int:
        return self._per(len({c.socket for c in self.cpus}))

    def nodes_of(self, cpus: Iterable[int]) -> list[int]:
        """The NUMA nodes `cpus` sit on, ascending."""
        return sorted({self.by_id[c].node for c in cpus if c in self.by_id})

    def ids(self) -> frozenset[int]:
        return self._ids

    @cached_property
    def _ids(self) -> frozenset[int]:
        return frozenset(self.by_id)

    @classmethod
    def generate(cls, sockets: int, nodes_per_socket: int, cores_per_node: int, cpus_per_core: int) -> Topology:
        """Koordinator's test numbering: a core's hyper-threads adjacent, ids running through
        cores, then NUMA nodes, then sockets."""
        out, cpu = [], 0
        for s in range(sockets):
            for n in range(nodes_per_socket):
                node = s * nodes_per_socket + n
                for k in range(cores_per_node):
                    core = node * cores_per_node + k
                    for _ in range(cpus_per_core):
                        out.append(CPU(cpu, core, s, node))
                        cpu += 1
        return cls(tuple(out))

    @classmethod
    def linux_style(cls, cores: int, threads: int = 2) -> Topology:
        """One socket and NUMA node numbered as Linux does on most x86 machines: the first
        thread of every core first, then the second (cpu i and i + cores are siblings)."""
        return cls(tuple(CPU(t * cores + k, k) for t in range(threads) for k in range(cores)))


# --------------------------------------------------------------------------- pod annotations


@dataclass(frozen=True)
class ResourceStatus:
    """`scheduling.koordinator.sh/resource-status`: what the scheduler allocated."""

    cpuset: str = ""
    numa_nodes: tuple[int, ...] = ()  # numaNodeResources[].node, in order
    numa_resources: tuple[dict[str, Any], ...] = ()  # the entries as written

    def encode(self) -> str:
        doc: dict[str, Any] = {}
        if self.cpuset:
            doc["cpuset"] = self.cpuset
        if self.numa_resources:
            doc["numaNodeResources"] = list(self.numa_resources)
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def parse_resource_status(raw: str | None) -> ResourceStatus | None:
    """None when absent or not a JSON object; a cpuset that is no CPU list counts as none."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    cpuset = doc.get("cpuset", "")
    if not isinstance(cpuset, str) or (cpuset and not cpus_of(cpuset)):
        cpuset = ""
    entries = doc.get("numaNodeResources")
    nodes, kept = [], []
    if isinstance(entries, list):
        for e in entries:
            if isinstance(e, dict) and isinstance(e.get("node"), int) and not isinstance(e.get("node"), bool):
                nodes.append(e["node"])
                kept.append(e)
    return ResourceStatus(cpuset, tuple(nodes), tuple(kept))


@dataclass(frozen=True)
class ResourceSpec:
    """`scheduling.koordinator.sh/resource-spec`: the binding a pod asks for."""

    required_bind: str = ""  # "" = none required
    preferred_bind: str = ""  # "" or Default = the scheduler's default
    exclusive: str = ""  # preferredCPUExclusivePolicy: None | PCPULevel | NUMANodeLevel


class ResourceSpecError(ValueError):
    """A resource-spec annotation the scheduler cannot honour (its message names the field)."""


_SPEC_FIELDS = {
    "requiredCPUBindPolicy": ("required_bind", (DEFAULT, FULL_PCPUS, SPREAD_BY_PCPUS)),
    "preferredCPUBindPolicy": ("preferred_bind", (DEFAULT, FULL_PCPUS, SPREAD_BY_PCPUS)),
    "preferredCPUExclusivePolicy": ("exclusive", (EXCLUSIVE_NONE, EXCLUSIVE_PCPU, EXCLUSIVE_NUMA)),
}


def parse_resource_spec(raw: str | None) -> ResourceSpec:
    """The spec, empty when absent. A value Koordinator defines but this system does not honour
    (ConstrainedBurst) or does not define raises ResourceSpecError naming it; unknown keys are
    ignored, as Go's JSON decoding ignores them."""
    if not raw:
        return ResourceSpec()
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ResourceSpecError(f"{ANNOTATION_RESOURCE_SPEC} is not JSON") from None
    if not isinstance(doc, dict):
        raise ResourceSpecError(f"{ANNOTATION_RESOURCE_SPEC} is not a JSON object")
    values: dict[str, str] = {}
    for key, (attr, allowed) in _SPEC_FIELDS.items():
        v = doc.get(key)
        if v is None or v == "":
            continue
        if v == CONSTRAINED_BURST:
            raise ResourceSpecError(f"{key} ConstrainedBurst is not supported")
        if v not in allowed:
            raise ResourceSpecError(f"{key} {v!r} is not one of {', '.join(allowed)}")
        values[attr] = v
    return ResourceSpec(**values)


def numa_topology_policy_of(annotations: dict[str, str]) -> str:
    """The pod's `numaTopologyPolicy` from its numa-topology-spec annotation ("" when none)."""
    raw = annotations.get(ANNOTATION_NUMA_TOPOLOGY_SPEC)
    if not raw:
        return ""
    try:
        doc = json.loads(raw)
    except ValueError:
        return ""
    v = doc.get("numaTopologyPolicy", "") if isinstance(doc, dict) else ""
    return v if v in NUMA_POLICIES else ""


# --------------------------------------------------------------------------- node annotations


# The fields a JSON-object annotation may have: a field name to None (any value) or to the shape of
# the object it holds.
AnnotationShape = Mapping[str, "AnnotationShape | None"]
_log = logging.getLogger("koordcommon.annotations")


def unknown_annotation_keys(doc: Mapping[str, Any], shape: AnnotationShape, at: str = "") -> list[str]:
    """The paths (`a.b`) of the fields of `doc` outside `shape`."""
    out: list[str] = []
    for k, v in doc.items():
        path = f"{at}.{k}" if at else str(k)
        if k not in shape:
            out.append(path)
        elif isinstance(shape[k], Mapping) and isinstance(v, Mapping):
            out.extend(unknown_annotation_keys(v, shape[k], path))
    return out


@lru_cache(maxsize=4096)
def _named_once(key: str, unknown: tuple[str, ...]) -> None:
    _log.warning("annotation fields not honoured, ignored: %s", ", ".join(unknown),
                 extra={"annotation": key, "fields": list(unknown)})


def json_annotation(annotations: Mapping[str, str], key: str, shape: AnnotationShape | None = None) -> dict | None:
    """An annotation holding a JSON object, or None when absent, malformed or not an object (a
    malformed annotation overrides nothing). With `shape`, fields outside it are named in a
    warning (once per annotation and set of fields) and have no effect."""
    raw = annotations.get(key)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if shape is not None and (unknown := unknown_annotation_keys(value, shape)):
        _named_once(key, tuple(unknown))
    return value


def _json_object(annotations: dict[str, str], key: str) -> dict:
    return json_annotation(annotations, key) or {}


def system_qos_cpus(annotations: dict[str, str]) -> frozenset[int]:
    """`node.koordinator.sh/system-qos-resource` {"cpuset": ..., "cpusetExclusive": ...}: the
    SYSTEM-QoS CPUs no other pod gets, unless it says cpusetExclusive false."""
    doc = _json_object(annotations, ANNOTATION_SYSTEM_QOS)
    if doc.get("cpusetExclusive") is False:
        return frozenset()
    return cpus_of(doc.get("cpuset"))


def reservation(annotations: dict[str, str]) -> dict:
    """`node.koordinator.sh/reservation` as a JSON object ({} when absent or malformed)."""
    return _json_object(annotations, ANNOTATION_RESERVATION)


def reserved_cpus(annotations: dict[str, str]) -> frozenset[int]:
    """The node reservation's `reservedCPUs`: CPUs no pod is allocated."""
    return cpus_of(reservation(annotations).get("reservedCPUs"))


# --------------------------------------------------------------------------- pools


@dataclass(frozen=True)
class NodeCPUs:
    """What decides a node's pools: its topology, the CPUs pods hold exclusively and the CPUs no
    pod is given. `bound` maps each CPU the scheduler bound to its pod's QoS class (LSE, LSR)."""

    topology: Topology
    bound: dict[int, str] = field(default_factory=dict)
    kubelet_pinned: frozenset[int] = frozenset()  # the static CPU manager's pods (counted as LSE)
    reserved: frozenset[int] = frozenset()  # node reservation reservedCPUs
    system: frozenset[int] = frozenset()  # exclusive SYSTEM-QoS cpuset

    def never_allocated(self) -> frozenset[int]:
        return self.reserved | self.system | self.kubelet_pinned

    def share_pool(self) -> list[int]:
        taken = self.never_allocated() | set(self.bound)
        return sorted(self.topology.ids() - taken)

    def be_pool(self) -> list[int]:
        lse = {c for c, q in self.bound.items() if q == "LSE"}
        taken = self.never_allocated() | lse
        return sorted(self.topology.ids() - taken)

    def allocatable(self) -> frozenset[int]:
        """CPUs the scheduler may still bind exclusively."""
        return self.topology.ids() - self.never_allocated() - set(self.bound)


def pools_by_numa(topology: Topology, cpus: Iterable[int]) -> list[tuple[int, int, str]]:
    """(socket, NUMA node, cpuset) of each NUMA node holding some of `cpus`, sorted, as koordlet
    reports cpu-shared-pools."""
    groups: dict[tuple[int, int], list[int]] = {}
    for c in cpus:
        info = topology.by_id.get(c)
        if info is not None:
            groups.setdefault((info.socket, info.node), []).append(c)
    return [(s, n, format_cpuset(v)) for (s, n), v in sorted(groups.items())]
