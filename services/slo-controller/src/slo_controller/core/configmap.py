"""The whole `slo-controller-config` ConfigMap, applied key by key with keep-last-good.

Koordinator handles each data key on its own: a key that fails to parse or validate sets an
error and leaves that key's previous configuration in force; the other keys still update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import (
    KEY_COLOCATION,
    KEY_CPU_BURST,
    KEY_RESOURCE_QOS,
    KEY_RESOURCE_THRESHOLD,
    ColocationConfig,
    ConfigError,
    load_json_key,
    parse_colocation_config,
)
from .nodeslo import NodeSLOBuilder, StrategyConfig, default_strategy_config, parse_strategy_config

NODESLO_KEYS = (KEY_RESOURCE_THRESHOLD, KEY_RESOURCE_QOS, KEY_CPU_BURST)


@dataclass(frozen=True)
class SLOConfig:
    colocation: ColocationConfig = field(default_factory=ColocationConfig)
    threshold: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_RESOURCE_THRESHOLD))
    qos: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_RESOURCE_QOS))
    burst: StrategyConfig = field(default_factory=lambda: default_strategy_config(KEY_CPU_BURST))

    def nodeslo_builder(self) -> NodeSLOBuilder:
        return NodeSLOBuilder(self.threshold, self.qos, self.burst)


@dataclass(frozen=True)
class ApplyResult:
    changed: tuple[str, ...]  # keys whose configuration changed
    errors: dict[str, str]  # key -> why it was rejected (its previous config stays)
    warnings: tuple[str, ...] = ()


def unwrap_configmap(doc: Any) -> Mapping[str, Any]:
    """The `data` map of a ConfigMap object, or the document itself when it is the data map."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"config must be a ConfigMap or its data map, got {type(doc).__name__}")
    if doc.get("kind") == "ConfigMap" or ("data" in doc and isinstance(doc.get("data"), Mapping)):
        return doc.get("data") or {}
    return doc


class ConfigState:
    """The configuration in force; `apply` takes a new ConfigMap data map."""

    def __init__(self, initial: SLOConfig | None = None) -> None:
        self.current = initial or SLOConfig()
        self._raw: dict[str, Any] = {}
        self.errors: dict[str, str] = {}

    def apply(self, data: Mapping[str, Any]) -> ApplyResult:
        cfg = self.current
        changed: list[str] = []
        errors: dict[str, str] = {}
        warnings: list[str] = []
        for key in (KEY_COLOCATION, *NODESLO_KEYS):
            raw = data.get(key)
            if key in self._raw and self._raw[key] == raw:
                continue  # unchanged since it was last accepted
            try:
                doc = load_json_key(data, key)
                if key == KEY_COLOCATION:
                    parsed_col = parse_colocation_config(doc)
                    warnings.extend(parsed_col.warnings)
                    cfg = _replace(cfg, colocation=parsed_col)
                else:
                    parsed = parse_strategy_config(key, doc)
                    cfg = _replace(cfg, **{_FIELD[key]: parsed})
            except ConfigError as e:
                errors[key] = str(e)
                continue
            self._raw[key] = raw
            changed.append(key)
        self.current = cfg
        self.errors = errors
        return ApplyResult(tuple(changed), errors, tuple(warnings))


_FIELD = {KEY_RESOURCE_THRESHOLD: "threshold", KEY_RESOURCE_QOS: "qos", KEY_CPU_BURST: "burst"}


def _replace(cfg: SLOConfig, **kw: Any) -> SLOConfig:
    values = {"colocation": cfg.colocation, "threshold": cfg.threshold, "qos": cfg.qos, "burst": cfg.burst}
    values.update(kw)
    return SLOConfig(**values)
