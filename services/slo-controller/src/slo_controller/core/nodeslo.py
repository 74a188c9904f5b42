"""NodeSLO: the per-node QoS strategy built from the ConfigMap keys `resource-threshold-config`,
`resource-qos-config`, `cpu-burst-config`, `system-config` and `host-application-config`.

The first four are `{clusterStrategy, nodeStrategies: [{name, nodeSelector, ...}]}`. The cluster
strategy is merged over Koordinator's defaults (pkg/util/sloconfig/nodeslo_config.go, mirrored
by the defaults of `koordcommon.schemas`), each node strategy over the cluster strategy; a
node gets the first node strategy whose selector matches, else the cluster strategy.
`host-application-config` is `{applications, nodeConfigs: [{name, nodeSelector, applications}]}`:
the first matching node config's applications replace the cluster list (nothing is merged).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordcommon.model import PriorityClass, QoSClass
from koordcommon.quantity import QuantityError, parse_json_quantity
from koordcommon.schemas import (
    CPUBurstStrategy,
    HostApplicationSpec,
    NodeSLOSpec,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)
from koordcommon.selectors import LabelSelector, SelectorError, parse_selector
from pydantic import BaseModel, ValidationError

from .config import ConfigError, deep_merge
from .configkeys import KEY_CPU_BURST, KEY_HOST_APPLICATION, KEY_RESOURCE_QOS, KEY_RESOURCE_THRESHOLD, KEY_SYSTEM

# ConfigMap key -> (model of one strategy, field of NodeSLO.spec)
STRATEGY_KINDS: dict[str, tuple[type[BaseModel], str]] = {
    KEY_RESOURCE_THRESHOLD: (ResourceThresholdStrategy, "resourceUsedThresholdWithBE"),
    KEY_RESOURCE_QOS: (ResourceQOSStrategy, "resourceQOSStrategy"),
    KEY_CPU_BURST: (CPUBurstStrategy, "cpuBurstStrategy"),
    KEY_SYSTEM: (SystemStrategy, "systemStrategy"),
}
QOS_CLASS_SECTIONS = ("lsrClass", "lsClass", "beClass", "systemClass")
# koordlet's allocatable eviction never reaches prod pods (ResourceThresholdStrategy tag max=7999).
MID_PRIORITY_MAX = 7999


# (path, low, high) ranges from Koordinator's struct validation tags; None = unbounded.
_RANGES: dict[str, list[tuple[tuple[str, ...], int | None, int | None]]] = {
    KEY_RESOURCE_THRESHOLD: [
        (("cpuSuppressThresholdPercent",), 0, 100),
        (("cpuSuppressMinPercent",), 0, 100),
        (("memoryEvictThresholdPercent",), 0, 100),
        (("memoryEvictLowerPercent",), 0, 100),
        (("memoryAllocatableEvictThresholdPercent",), 0, None),
        (("memoryAllocatableEvictLowerPercent",), 0, None),
        (("cpuEvictBESatisfactionUpperPercent",), 0, 100),
        (("cpuEvictBESatisfactionLowerPercent",), 0, 100),
        (("cpuEvictBEUsageThresholdPercent",), 0, 100),
        (("cpuEvictTimeWindowSeconds",), 1, None),
        (("cpuEvictThresholdPercent",), 0, 100),
        (("cpuEvictLowerPercent",), 0, 100),
        (("cpuAllocatableEvictThresholdPercent",), 0, None),
        (("cpuAllocatableEvictLowerPercent",), 0, None),
        (("allocatableEvictPriorityThreshold",), 0, MID_PRIORITY_MAX),
    ],
    KEY_CPU_BURST: [
        (("cpuBurstPercent",), 1, 10000),
        (("cfsQuotaBurstPercent",), 100, None),
        (("cfsQuotaBurstPeriodSeconds",), -1, None),
        (("sharePoolThresholdPercent",), 0, 100),
    ],
    KEY_RESOURCE_QOS: [
        p
        for cls in QOS_CLASS_SECTIONS
        for p in (
            ((cls, "cpuQOS", "groupIdentity"), -1, 2),
            ((cls, "cpuQOS", "schedIdle"), 0, 1),
            ((cls, "memoryQOS", "minLimitPercent"), 0, 100),
            ((cls, "memoryQOS", "lowLimitPercent"), 0, 100),
            ((cls, "memoryQOS", "throttlingPercent"), 0, 100),
            ((cls, "memoryQOS", "wmarkRatio"), 0, 100),
            ((cls, "memoryQOS", "wmarkScalePermill"), 0, 1000),
            ((cls, "memoryQOS", "wmarkMinAdj"), -25, 50),
            ((cls, "memoryQOS", "priorityEnable"), 0, 1),
            ((cls, "memoryQOS", "priority"), 0, 12),
            ((cls, "memoryQOS", "oomKillGroup"), 0, 1),
            ((cls, "memoryQOS", "pageCacheLimitPercent"), 0, 100),
        )
    ],
    KEY_SYSTEM: [
        (("minFreeKbytesFactor",), 1, None),
        (("watermarkScaleFactor",), 1, 400),
        (("memcgReapBackGround",), 0, 1),
        (("pageCacheLimitEnabled",), 0, 1),
    ],
}
_ENUMS: dict[str, list[tuple[tuple[str, ...], tuple[str, ...]]]] = {
    KEY_RESOURCE_THRESHOLD: [
        (("cpuSuppressPolicy",), ("cpuset", "cfsQuota")),
        (("cpuEvictPolicy",), ("evictByRealLimit", "evictByAllocatable")),
    ],
    KEY_CPU_BURST: [(("policy",), ("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"))],
    KEY_RESOURCE_QOS: [
        (("policies", "cpuPolicy"), ("groupIdentity", "coreSched")),
        (("policies", "netQOSPolicy"), ("tc", "terway-qos")),
    ],
    KEY_SYSTEM: [],
}


def _get(d: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for p in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(p)
    return d


def threshold_problems(t: Mapping[str, Any], where: str) -> list[str]:
    """The eviction settings that go together, as koordlet's rules and Koordinator's gtfield /
    ltfield tags take them: a rule whose settings do not hold together would be off on the node."""
    out: list[str] = []

    def lower_below(threshold: str, lower: str, lower_value: int | None) -> None:
        tv = t.get(threshold)
        if tv is not None and lower_value is not None and lower_value >= tv:
            out.append(f"{where}.{lower}: must be below {threshold} ({tv}), got {lower_value}")

    # BEMemoryEvict / MemoryEvict: the lower bound defaults to threshold - 2
    mem = t.get("memoryEvictThresholdPercent")
    mem_lower = t.get("memoryEvictLowerPercent")
    lower_below("memoryEvictThresholdPercent", "memoryEvictLowerPercent",
                mem_lower if mem_lower is not None else (mem - 2 if mem is not None else None))
    # BECPUEvict: both satisfaction bounds, lower in (0, 60], upper in (0, 100), upper > lower
    lo, up = t.get("cpuEvictBESatisfactionLowerPercent"), t.get("cpuEvictBESatisfactionUpperPercent")
    if (lo is None) != (up is None):
        out.append(f"{where}: cpuEvictBESatisfactionLowerPercent and cpuEvictBESatisfactionUpperPercent go together "
                   f"(BECPUEvict), got {lo} and {up}")
    elif lo is not None:
        if not 0 < lo <= 60:
            out.append(f"{where}.cpuEvictBESatisfactionLowerPercent: must be in (0, 60] (koordlet's BECPUEvict), "
                       f"got {lo}")
        if not 0 < up < 100:
            out.append(f"{where}.cpuEvictBESatisfactionUpperPercent: must be in (0, 100), got {up}")
        if up <= lo:
            out.append(f"{where}.cpuEvictBESatisfactionUpperPercent: must be above cpuEvictBESatisfactionLowerPercent "
                       f"({lo}), got {up}")
    # CPUEvict: needs the priority threshold of its victims; lower defaults to threshold - 2
    cpu, cpu_lower = t.get("cpuEvictThresholdPercent"), t.get("cpuEvictLowerPercent")
    if cpu is None and cpu_lower is not None:
        out.append(f"{where}.cpuEvictLowerPercent: set without cpuEvictThresholdPercent")
    if cpu is not None:
        if t.get("evictEnabledPriorityThreshold") is None:
            out.append(f"{where}.cpuEvictThresholdPercent: needs evictEnabledPriorityThreshold (the highest "
                       "priority CPUEvict may evict)")
        lower_below("cpuEvictThresholdPercent", "cpuEvictLowerPercent", cpu_lower if cpu_lower is not None else cpu - 2)
    # CPUAllocatableEvict / MemoryAllocatableEvict: threshold, lower and the priority threshold
    for prefix in ("cpu", "memory"):
        threshold, lower = f"{prefix}AllocatableEvictThresholdPercent", f"{prefix}AllocatableEvictLowerPercent"
        if t.get(threshold) is None:
            if t.get(lower) is not None:
                out.append(f"{where}.{lower}: set without {threshold}")
            continue
        if t.get(lower) is None or t.get("allocatableEvictPriorityThreshold") is None:
            out.append(f"{where}.{threshold}: needs {lower} and allocatableEvictPriorityThreshold")
        lower_below(threshold, lower, t.get(lower))
    return out


_PRIORITIES = tuple(p.value for p in PriorityClass)
_QOS_CLASSES = tuple(q.value for q in QoSClass)
CGROUP_BASES = ("", "CgroupRoot", "Kubepods", "KubepodsBurstable", "KubepodsBesteffort")


def validate_strategy(key: str, merged: dict[str, Any], where: str) -> dict[str, Any]:
    """The merged strategy as the model would emit it; ConfigError naming the field otherwise."""
    model, _ = STRATEGY_KINDS[key]
    try:
        value = model.model_validate(merged)
    except ValidationError as e:
        first = e.errors()[0]
        at = ".".join(str(p) for p in first.get("loc", ()))
        raise ConfigError(f"{where}.{at}: {first.get('msg')}") from None
    dumped = value.model_dump()
    errors = []
    for path, low, high in _RANGES[key]:
        v = _get(dumped, path)
        if v is None:
            continue
        if (low is not None and v < low) or (high is not None and v > high):
            bounds = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
            errors.append(f"{where}.{'.'.join(path)}: must be in {bounds}, got {v}")
    for path, allowed in _ENUMS[key]:
        v = _get(dumped, path)
        if v is not None and v not in allowed:
            errors.append(f"{where}.{'.'.join(path)}: must be one of {', '.join(allowed)}, got {json.dumps(v)}")
    if key == KEY_RESOURCE_THRESHOLD:
        errors += threshold_problems(dumped, where)
    if key == KEY_SYSTEM and dumped.get("totalNetworkBandwidth") not in (None, ""):
        try:
            parse_json_quantity(dumped["totalNetworkBandwidth"])
        except (QuantityError, ValueError):
            errors.append(f"{where}.totalNetworkBandwidth: not a quantity: {json.dumps(dumped['totalNetworkBandwidth'])}")
    if errors:
        raise ConfigError("; ".join(errors))
    return dumped


@dataclass(frozen=True, slots=True)
class NodeStrategy:
    name: str
    selector: LabelSelector | None
    strategy: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StrategyConfig:
    key: str
    cluster: dict[str, Any]
    nodes: tuple[NodeStrategy, ...] = ()

    def for_node(self, labels: Mapping[str, str] | None) -> tuple[int, dict[str, Any]]:
        """(index of the matching node strategy or -1 for the cluster one, the strategy)."""
        for i, ns in enumerate(self.nodes):
            if ns.selector is not None and ns.selector.matches(labels or {}):
                return i, ns.strategy
        return -1, self.cluster

    def strategies(self) -> list[tuple[str, dict[str, Any]]]:
        """(where, strategy): the cluster strategy, then each node strategy as merged."""
        return [(f"{self.key}.clusterStrategy", self.cluster)] + [
            (f"{self.key}.nodeStrategies[{i}]", ns.strategy) for i, ns in enumerate(self.nodes)
        ]


def default_strategy_config(key: str) -> StrategyConfig:
    model, _ = STRATEGY_KINDS[key]
    return StrategyConfig(key, model().model_dump())


def _selector(ns: Mapping[str, Any], at: str) -> LabelSelector | None:
    try:
        return parse_selector(ns.get("nodeSelector"), f"{at}.nodeSelector")
    except SelectorError as e:
        raise ConfigError(str(e)) from None


def parse_strategy_config(key: str, doc: Any) -> StrategyConfig:
    """Parse one of the per-node strategy keys; None (absent or blank) gives the defaults."""
    if doc is None:
        return default_strategy_config(key)
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{key}: must be a JSON object with clusterStrategy/nodeStrategies")
    model, _ = STRATEGY_KINDS[key]
    raw_cluster = doc.get("clusterStrategy") or {}
    if not isinstance(raw_cluster, Mapping):
        raise ConfigError(f"{key}.clusterStrategy: must be an object")
    cluster = validate_strategy(key, deep_merge(model().model_dump(), raw_cluster), f"{key}.clusterStrategy")
    raw_nodes = doc.get("nodeStrategies") or []
    if not isinstance(raw_nodes, list):
        raise ConfigError(f"{key}.nodeStrategies: must be a list")
    nodes = []
    for i, ns in enumerate(raw_nodes):
        at = f"{key}.nodeStrategies[{i}]"
        if not isinstance(ns, Mapping):
            raise ConfigError(f"{at}: must be an object")
        selector = _selector(ns, at)
        overlay = {k: v for k, v in ns.items() if k not in ("name", "nodeSelector")}
        merged = validate_strategy(key, deep_merge(cluster, overlay), at)
        name = ns.get("name") if isinstance(ns.get("name"), str) else f"#{i}"
        nodes.append(NodeStrategy(name, selector, merged))
    return StrategyConfig(key, cluster, tuple(nodes))


# ----------------------------------------------------------------------------- host applications


@dataclass(frozen=True, slots=True)
class NodeHostApplications:
    name: str
    selector: LabelSelector | None
    applications: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class HostApplicationConfig:
    """`host-application-config`: the cluster's applications and each node pool's own list."""

    applications: tuple[dict[str, Any], ...] = ()
    nodes: tuple[NodeHostApplications, ...] = ()

    def for_node(self, labels: Mapping[str, str] | None) -> tuple[int, tuple[dict[str, Any], ...]]:
        """(index of the first matching node config or -1, its applications): Koordinator's
        getHostApplicationConfig replaces the cluster list, it does not merge."""
        for i, nc in enumerate(self.nodes):
            if nc.selector is not None and nc.selector.matches(labels or {}):
                return i, nc.applications
        return -1, self.applications


def _applications(raw: Any, at: str) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{at}: must be a list")
    out = []
    for i, app in enumerate(raw):
        where = f"{at}[{i}]"
        try:
            spec = HostApplicationSpec.model_validate(app)
        except ValidationError as e:
            first = e.errors()[0]
            raise ConfigError(f"{where}.{'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg')}") from None
        problems = []
        if not spec.name:
            problems.append(f"{where}.name: required (a host application is found by its name)")
        if spec.priority not in _PRIORITIES:
            problems.append(f"{where}.priority: must be one of {', '.join(p for p in _PRIORITIES if p)} or unset, "
                            f"got {json.dumps(spec.priority)}")
        if spec.qos not in _QOS_CLASSES:
            problems.append(f"{where}.qos: must be one of {', '.join(q for q in _QOS_CLASSES if q)} or unset, "
                            f"got {json.dumps(spec.qos)}")
        if spec.cgroupPath is not None and spec.cgroupPath.base not in CGROUP_BASES:
            problems.append(f"{where}.cgroupPath.base: must be one of {', '.join(b for b in CGROUP_BASES if b)}, "
                            f"got {json.dumps(spec.cgroupPath.base)}")
        if problems:
            raise ConfigError("; ".join(problems))
        out.append(spec.model_dump(exclude_none=True))
    names = [a["name"] for a in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{at}: application names must be unique, got {', '.join(names)}")
    return tuple(out)


def parse_host_application_config(doc: Any) -> HostApplicationConfig:
    """Parse `host-application-config`; None (absent or blank) is no host application."""
    if doc is None:
        return HostApplicationConfig()
    key = KEY_HOST_APPLICATION
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{key}: must be a JSON object with applications/nodeConfigs")
    cluster = _applications(doc.get("applications"), f"{key}.applications")
    raw_nodes = doc.get("nodeConfigs") or []
    if not isinstance(raw_nodes, list):
        raise ConfigError(f"{key}.nodeConfigs: must be a list")
    nodes = []
    for i, nc in enumerate(raw_nodes):
        at = f"{key}.nodeConfigs[{i}]"
        if not isinstance(nc, Mapping):
            raise ConfigError(f"{at}: must be an object")
        name = nc.get("name") if isinstance(nc.get("name"), str) else f"#{i}"
        nodes.append(NodeHostApplications(name, _selector(nc, at), _applications(nc.get("applications"),
                                                                                 f"{at}.applications")))
    return HostApplicationConfig(cluster, tuple(nodes))


# ----------------------------------------------------------------------------- NodeSLO


@dataclass
class NodeSLOBuilder:
    """Builds NodeSLO specs; nodes that match the same strategies share one spec object."""

    threshold: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_RESOURCE_THRESHOLD))
    qos: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_RESOURCE_QOS))
    burst: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_CPU_BURST))
    system: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_SYSTEM))
    host_apps: HostApplicationConfig = field(default_factory=HostApplicationConfig)
    _cache: dict[tuple[int, ...], NodeSLOSpec] = field(default_factory=dict)

    def spec_for(self, labels: Mapping[str, str] | None) -> NodeSLOSpec:
        picked = [c.for_node(labels) for c in (self.threshold, self.qos, self.burst, self.system)]
        hi, apps = self.host_apps.for_node(labels)
        key = (*(i for i, _ in picked), hi)
        spec = self._cache.get(key)
        if spec is None:
            doc = {STRATEGY_KINDS[c.key][1]: s for c, (_, s) in zip((self.threshold, self.qos, self.burst, self.system),
                                                                    picked, strict=True)}
            doc["hostApplications"] = list(apps)
            spec = NodeSLOSpec.model_validate(doc)
            self._cache[key] = spec
        return spec
