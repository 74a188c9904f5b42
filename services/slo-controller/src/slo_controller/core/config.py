"""The colocation config: Koordinator's `slo-controller-config` ConfigMap, key `colocation-config`.

Field names are Koordinator's (camelCase) so users can bring their ConfigMaps as they are.
Merging follows Koordinator's MergeCfg: every field the overlay sets wins, every field it
leaves out (or sets to null) keeps the value underneath.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from koordcommon.selectors import LabelSelector, SelectorError, parse_selector

from .configkeys import KEY_COLOCATION, KEY_RESOURCE_THRESHOLD

CONFIGMAP_NAME = "slo-controller-config"
CONFIGMAP_NAMESPACE = "koordinator-system"

# Koordinator's shipped config/manager/slo-controller-config.yaml: colocation on, the rest default.
SHIPPED_CONFIG_DATA: dict[str, str] = {
    KEY_COLOCATION: '{"enable": true}',
    KEY_RESOURCE_THRESHOLD: '{"clusterStrategy": {"enable": true}}',
}

# Node metadata that overrides the pool strategy (Koordinator's apis/extension/node_colocation.go).
ANNOTATION_COLOCATION_STRATEGY = "node.koordinator.sh/colocation-strategy"
LABEL_CPU_RECLAIM_RATIO = "node.koordinator.sh/cpu-reclaim-ratio"
LABEL_MEMORY_RECLAIM_RATIO = "node.koordinator.sh/memory-reclaim-ratio"
LABEL_MID_CPU_RESERVED_RATIO = "node.koordinator.sh/mid-static-cpu-reserved-ratio"
LABEL_MID_MEMORY_RESERVED_RATIO = "node.koordinator.sh/mid-static-memory-reserved-ratio"
_RATIO_LABELS = (
    (LABEL_CPU_RECLAIM_RATIO, "cpuReclaimThresholdPercent"),
    (LABEL_MEMORY_RECLAIM_RATIO, "memoryReclaimThresholdPercent"),
    (LABEL_MID_CPU_RESERVED_RATIO, "midStaticCPUReservedPercent"),
    (LABEL_MID_MEMORY_RESERVED_RATIO, "midStaticMemoryReservedPercent"),
)

# `predict` is this project's: HP as the node's predicted peak (resources/batch.py, peak.py).
CALCULATE_POLICIES = ("usage", "request", "maxUsageRequest", "predict")
MEMORY_COLLECT_POLICIES = ("usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache")
MID_RECLAIM_STATIC = "static"


class ConfigError(ValueError):
    """A config document that cannot be used; the message names the key and the field."""


@dataclass(frozen=True, slots=True)
class ColocationStrategy:
    """Koordinator's ColocationStrategy with DefaultColocationStrategy's values."""

    enable: bool = False
    metricAggregateDurationSeconds: int = 300
    metricReportIntervalSeconds: int = 60
    metricAggregatePolicy: dict[str, Any] = field(default_factory=lambda: {"durations": ["5m", "10m", "30m"]})
    metricMemoryCollectPolicy: str = "usageWithoutPageCache"
    cpuReclaimThresholdPercent: int = 60
    cpuCalculatePolicy: str = "usage"
    memoryReclaimThresholdPercent: int = 65
    memoryCalculatePolicy: str = "usage"
    degradeTimeMinutes: int = 15
    updateTimeThresholdSeconds: int = 300
    resourceDiffThreshold: float = 0.1
    midReclaimMode: str | None = None  # None: dynamic; "static"
    midCPUThresholdPercent: int = 100
    midMemoryThresholdPercent: int = 100
    midUnallocatedPercent: int = 0
    midStaticCPUReservedPercent: int = 0
    midStaticMemoryReservedPercent: int = 0
    batchCPUThresholdPercent: int | None = None  # None: no cap
    batchMemoryThresholdPercent: int | None = None
    extensions: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def degrade_after_ms(self) -> int:
        return self.degradeTimeMinutes * 60_000

    @property
    def update_threshold_ms(self) -> int:
        return self.updateTimeThresholdSeconds * 1000


_FIELD_TYPES: dict[str, str] = {
    "enable": "bool",
    "metricAggregateDurationSeconds": "int",
    "metricReportIntervalSeconds": "int",
    "metricAggregatePolicy": "object",
    "metricMemoryCollectPolicy": "str",
    "cpuReclaimThresholdPercent": "int",
    "cpuCalculatePolicy": "str",
    "memoryReclaimThresholdPercent": "int",
    "memoryCalculatePolicy": "str",
    "degradeTimeMinutes": "int",
    "updateTimeThresholdSeconds": "int",
    "resourceDiffThreshold": "float",
    "midReclaimMode": "str",
    "midCPUThresholdPercent": "int",
    "midMemoryThresholdPercent": "int",
    "midUnallocatedPercent": "int",
    "midStaticCPUReservedPercent": "int",
    "midStaticMemoryReservedPercent": "int",
    "batchCPUThresholdPercent": "int",
    "batchMemoryThresholdPercent": "int",
    "extensions": "object",
}


def _type_ok(kind: str, v: Any) -> bool:
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "int":  # Go int64: JSON integers only (1.0 is accepted by encoding/json, 1.5 is not)
        return not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
    if kind == "float":
        return not isinstance(v, bool) and isinstance(v, (int, float))
    if kind == "str":
        return isinstance(v, str)
    return isinstance(v, dict)


def strategy_overlay(doc: Any, where: str) -> dict[str, Any]:
    """The ColocationStrategy fields a JSON object sets (nulls dropped, ints normalised).

    A wrong type is a ConfigError, as an unmarshal failure is in Koordinator. Fields it does
    not have are left here: the ConfigMap refuses them first (`configkeys.check_fields`), and
    the node annotation's are ignored, as Koordinator ignores them.
    """
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: must be a JSON object, got {type(doc).__name__}")
    out: dict[str, Any] = {}
    for name, kind in _FIELD_TYPES.items():
        if name not in doc or doc[name] is None:
            continue
        v = doc[name]
        if not _type_ok(kind, v):
            raise ConfigError(f"{where}.{name}: expected {kind}, got {json.dumps(v)}")
        if kind == "int":
            v = int(v)
        elif kind == "float":
            v = float(v)
        out[name] = v
    return out


def deep_merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`overlay` over `base`, objects merged key by key: how every config layer (defaults,
    cluster strategy, node strategy) is laid over the one below. A null keeps the value below,
    as a nil field does in Koordinator's MergeCfg."""
    out = dict(base)
    for k, v in overlay.items():
        if v is None:
            continue
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def merge_strategy(base: ColocationStrategy, overlay: Mapping[str, Any]) -> ColocationStrategy:
    if not overlay:
        return base
    return ColocationStrategy(**deep_merge(base.to_dict(), overlay))


def validate_strategy(s: ColocationStrategy, where: str = KEY_COLOCATION) -> list[str]:
    """Koordinator's IsColocationStrategyValid plus the ranges of its struct validation tags."""
    errors: list[str] = []

    def need(ok: bool, name: str, rule: str) -> None:
        if not ok:
            errors.append(f"{where}: {name} must be {rule}, got {json.dumps(getattr(s, name))}")

    need(s.metricAggregateDurationSeconds > 0, "metricAggregateDurationSeconds", "> 0")
    need(s.metricReportIntervalSeconds > 0, "metricReportIntervalSeconds", "> 0")
    need(s.metricMemoryCollectPolicy in MEMORY_COLLECT_POLICIES, "metricMemoryCollectPolicy",
         "one of " + ", ".join(MEMORY_COLLECT_POLICIES))
    # Thresholds above 100 are allowed: they make the safety margin negative (Koordinator keeps it).
    need(s.cpuReclaimThresholdPercent >= 0, "cpuReclaimThresholdPercent", ">= 0")
    need(s.memoryReclaimThresholdPercent >= 0, "memoryReclaimThresholdPercent", ">= 0")
    need(s.cpuCalculatePolicy in CALCULATE_POLICIES, "cpuCalculatePolicy", "one of " + ", ".join(CALCULATE_POLICIES))
    need(s.memoryCalculatePolicy in CALCULATE_POLICIES, "memoryCalculatePolicy",
         "one of " + ", ".join(CALCULATE_POLICIES))
    need(s.degradeTimeMinutes > 0, "degradeTimeMinutes", "> 0")
    need(s.updateTimeThresholdSeconds > 0, "updateTimeThresholdSeconds", "> 0")
    need(0 < s.resourceDiffThreshold <= 1, "resourceDiffThreshold", "in (0, 1]")
    need(s.midReclaimMode in (None, "", MID_RECLAIM_STATIC), "midReclaimMode", 'unset or "static"')
    for name in ("midCPUThresholdPercent", "midMemoryThresholdPercent", "midUnallocatedPercent",
                 "midStaticCPUReservedPercent", "midStaticMemoryReservedPercent"):
        need(0 <= getattr(s, name) <= 100, name, "in [0, 100]")
    for name in ("batchCPUThresholdPercent", "batchMemoryThresholdPercent"):
        need(getattr(s, name) is None or getattr(s, name) >= 0, name, ">= 0")
    durations = s.metricAggregatePolicy.get("durations") if isinstance(s.metricAggregatePolicy, dict) else None
    if durations is not None and not (isinstance(durations, list) and all(isinstance(d, str) for d in durations)):
        errors.append(f"{where}: metricAggregatePolicy.durations must be a list of duration strings")
    return errors


@dataclass(frozen=True, slots=True)
class NodeColocationConfig:
    """One `nodeConfigs[]` entry: a node pool's overrides, already merged over the cluster strategy."""

    name: str
    selector: LabelSelector | None  # nil matches no node
    strategy: ColocationStrategy


@dataclass(frozen=True, slots=True)
class NodeColocation:
    """The strategy in force on one node and whether colocation is on there."""

    strategy: ColocationStrategy
    enabled: bool
    source: str  # "cluster", "nodeConfig:<name>", plus "+annotation"/"+labels"
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ColocationConfig:
    cluster: ColocationStrategy = field(default_factory=ColocationStrategy)
    node_configs: tuple[NodeColocationConfig, ...] = ()
    warnings: tuple[str, ...] = ()

    def for_node(self, labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> NodeColocation:
        """Koordinator's GetNodeColocationStrategy plus its enable rule."""
        labels = labels or {}
        annotations = annotations or {}
        strategy, source = self.cluster, "cluster"
        for nc in self.node_configs:
            if nc.selector is not None and nc.selector.matches(labels):
                strategy, source = nc.strategy, f"nodeConfig:{nc.name}"
                break
        warnings: list[str] = []
        raw = annotations.get(ANNOTATION_COLOCATION_STRATEGY)
        if raw:
            try:
                candidate = merge_strategy(strategy, _annotation_overlay(raw))
                problems = validate_strategy(candidate, f"annotation {ANNOTATION_COLOCATION_STRATEGY}")
            except ConfigError as e:
                problems = [str(e)]
            if problems:
                warnings.extend(problems)  # an unusable annotation is ignored, not fatal
            else:
                strategy, source = candidate, source + "+annotation"
        overlay: dict[str, int] = {}
        for label, name in _RATIO_LABELS:
            pct = _ratio_percent(labels.get(label))
            if pct is not None:
                overlay[name] = pct
        if overlay:
            strategy, source = replace(strategy, **overlay), source + "+labels"
        # The cluster switch wins: a node config cannot turn colocation on for its pool alone.
        enabled = self.cluster.enable is True and strategy.enable is True
        return NodeColocation(strategy, enabled, source, tuple(warnings))


@lru_cache(maxsize=1024)
def _annotation_overlay(raw: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise ConfigError(f"annotation {ANNOTATION_COLOCATION_STRATEGY}: invalid JSON: {e}") from None
    return strategy_overlay(doc, f"annotation {ANNOTATION_COLOCATION_STRATEGY}")


def _ratio_percent(value: str | None) -> int | None:
    """`"0.8"` -> 80, truncated as Go's int64(v*100) does; negative or unparsable -> None (ignored)."""
    if value is None:
        return None
    try:
        ratio = float(value)
    except ValueError:
        return None
    if not math.isfinite(ratio) or ratio < 0:
        return None
    return int(ratio * 100)


def load_json_key(data: Mapping[str, Any], key: str) -> Any:
    """The decoded JSON document under a ConfigMap data key; None when absent or blank."""
    raw = data.get(key)
    if raw is None:
        return None
    if isinstance(raw, (dict, list)):  # a YAML file may carry the document inline
        return raw
    if not isinstance(raw, str):
        raise ConfigError(f"{key}: must be a JSON string, got {type(raw).__name__}")
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ConfigError(f"{key}: invalid JSON: {e}") from None


def parse_colocation_config(doc: Any) -> ColocationConfig:
    """Koordinator's colocation_cm_event_handler: defaults <- cluster fields <- each nodeConfig.

    Raises ConfigError when the cluster strategy cannot be used (the caller keeps the last
    good config). A node config that is invalid after merging falls back to the cluster
    strategy, with a warning, as Koordinator does.
    """
    if doc is None:
        return ColocationConfig()
    where = KEY_COLOCATION
    cluster = merge_strategy(ColocationStrategy(), strategy_overlay(doc, where))
    errors = validate_strategy(cluster, where)
    if errors:
        raise ConfigError("; ".join(errors))
    raw_nodes = doc.get("nodeConfigs") or []
    if not isinstance(raw_nodes, list):
        raise ConfigError(f"{where}.nodeConfigs: must be a list")
    nodes: list[NodeColocationConfig] = []
    warnings: list[str] = []
    for i, nc in enumerate(raw_nodes):
        at = f"{where}.nodeConfigs[{i}]"
        if not isinstance(nc, Mapping):
            raise ConfigError(f"{at}: must be an object")
        name = nc.get("name") if isinstance(nc.get("name"), str) else f"#{i}"
        try:
            selector = parse_selector(nc.get("nodeSelector"), f"{at}.nodeSelector")
        except SelectorError as e:
            raise ConfigError(str(e)) from None
        merged = merge_strategy(cluster, strategy_overlay(nc, at))
        problems = validate_strategy(merged, f"{at} ({name})")
        if problems:
            warnings.append("; ".join(problems) + " -> using the cluster strategy for this pool")
            merged = cluster
        nodes.append(NodeColocationConfig(name, selector, merged))
    return ColocationConfig(cluster, tuple(nodes), tuple(warnings))
