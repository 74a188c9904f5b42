"""NodeSLO: the per-node QoS strategy built from the ConfigMap keys `resource-threshold-config`,
`resource-qos-config` and `cpu-burst-config`.

Each key is `{clusterStrategy, nodeStrategies: [{name, nodeSelector, ...}]}`. The cluster
strategy is merged over Koordinator's defaults (pkg/util/sloconfig/nodeslo_config.go, mirrored
by the defaults of `koordcommon.schemas`), each node strategy over the cluster strategy; a
node gets the first node strategy whose selector matches, else the cluster strategy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordcommon.schemas import CPUBurstStrategy, NodeSLOSpec, ResourceQOSStrategy, ResourceThresholdStrategy
from koordcommon.selectors import LabelSelector, SelectorError, parse_selector
from pydantic import BaseModel, ValidationError

from .config import KEY_CPU_BURST, KEY_RESOURCE_QOS, KEY_RESOURCE_THRESHOLD, ConfigError, deep_merge

# ConfigMap key -> (model of one strategy, field of NodeSLO.spec)
STRATEGY_KINDS: dict[str, tuple[type[BaseModel], str]] = {
    KEY_RESOURCE_THRESHOLD: (ResourceThresholdStrategy, "resourceUsedThresholdWithBE"),
    KEY_RESOURCE_QOS: (ResourceQOSStrategy, "resourceQOSStrategy"),
    KEY_CPU_BURST: (CPUBurstStrategy, "cpuBurstStrategy"),
}
QOS_CLASS_SECTIONS = ("lsrClass", "lsClass", "beClass", "systemClass")


# (path, low, high) ranges from Koordinator's struct validation tags; None = unbounded.
_RANGES: dict[str, list[tuple[tuple[str, ...], int | None, int | None]]] = {
    KEY_RESOURCE_THRESHOLD: [
        (("cpuSuppressThresholdPercent",), 0, 100),
        (("memoryEvictThresholdPercent",), 0, 100),
        (("memoryEvictLowerPercent",), 0, 100),
        (("cpuEvictBESatisfactionUpperPercent",), 0, 100),
        (("cpuEvictBESatisfactionLowerPercent",), 0, 100),
        (("cpuEvictBEUsageThresholdPercent",), 0, 100),
        (("cpuEvictTimeWindowSeconds",), 1, None),
    ],
    KEY_CPU_BURST: [
        (("cpuBurstPercent",), 0, None),
        (("cfsQuotaBurstPercent",), 100, None),
        (("sharePoolThresholdPercent",), 0, 100),
    ],
    KEY_RESOURCE_QOS: [
        p
        for cls in QOS_CLASS_SECTIONS
        for p in (
            ((cls, "cpuQOS", "groupIdentity"), -1, 2),
            ((cls, "memoryQOS", "minLimitPercent"), 0, 100),
            ((cls, "memoryQOS", "lowLimitPercent"), 0, 100),
            ((cls, "memoryQOS", "throttlingPercent"), 0, 100),
            ((cls, "memoryQOS", "wmarkRatio"), 0, 100),
            ((cls, "memoryQOS", "wmarkScalePermill"), 0, 1000),
            ((cls, "memoryQOS", "wmarkMinAdj"), -25, 50),
        )
    ],
}
_ENUMS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    KEY_RESOURCE_THRESHOLD: [
        ("cpuSuppressPolicy", ("cpuset", "cfsQuota")),
        ("cpuEvictPolicy", ("evictByRealLimit", "evictByAllocatable")),
    ],
    KEY_CPU_BURST: [("policy", ("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"))],
    KEY_RESOURCE_QOS: [],
}


def _get(d: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for p in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(p)
    return d


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
    for name, allowed in _ENUMS[key]:
        v = dumped.get(name)
        if v is not None and v not in allowed:
            errors.append(f"{where}.{name}: must be one of {', '.join(allowed)}, got {json.dumps(v)}")
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


def default_strategy_config(key: str) -> StrategyConfig:
    model, _ = STRATEGY_KINDS[key]
    return StrategyConfig(key, model().model_dump())


def parse_strategy_config(key: str, doc: Any) -> StrategyConfig:
    """Parse one of the three NodeSLO keys; None (absent or blank) gives the defaults."""
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
        try:
            selector = parse_selector(ns.get("nodeSelector"), f"{at}.nodeSelector")
        except SelectorError as e:
            raise ConfigError(str(e)) from None
        overlay = {k: v for k, v in ns.items() if k not in ("name", "nodeSelector")}
        merged = validate_strategy(key, deep_merge(cluster, overlay), at)
        name = ns.get("name") if isinstance(ns.get("name"), str) else f"#{i}"
        nodes.append(NodeStrategy(name, selector, merged))
    return StrategyConfig(key, cluster, tuple(nodes))


@dataclass
class NodeSLOBuilder:
    """Builds NodeSLO specs; nodes that match the same strategies share one spec object."""

    threshold: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_RESOURCE_THRESHOLD))
    qos: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_RESOURCE_QOS))
    burst: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_CPU_BURST))
    _cache: dict[tuple[int, int, int], NodeSLOSpec] = field(default_factory=dict)

    def spec_for(self, labels: Mapping[str, str] | None) -> NodeSLOSpec:
        ti, t = self.threshold.for_node(labels)
        qi, q = self.qos.for_node(labels)
        bi, b = self.burst.for_node(labels)
        key = (ti, qi, bi)
        spec = self._cache.get(key)
        if spec is None:
            spec = NodeSLOSpec.model_validate(
                {
                    STRATEGY_KINDS[KEY_RESOURCE_THRESHOLD][1]: t,
                    STRATEGY_KINDS[KEY_RESOURCE_QOS][1]: q,
                    STRATEGY_KINDS[KEY_CPU_BURST][1]: b,
                }
            )
            self._cache[key] = spec
        return spec
