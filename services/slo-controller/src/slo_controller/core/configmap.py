"""The whole `slo-controller-config` ConfigMap, applied key by key with keep-last-good.

Koordinator handles each data key on its own: a key that fails to parse or validate sets an
error and leaves that key's previous configuration in force; the other keys still update.
Every field is either honoured or named: a field a key does not have refuses the key
(`configkeys.check_fields`), a setting nothing here acts on is named "not supported" in a
warning, and a data key that is none of Koordinator's is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from koordcommon.suggest import closest

from . import configkeys as ck
from .config import ColocationConfig, ConfigError, load_json_key, parse_colocation_config
from .nodeslo import (
    HostApplicationConfig,
    NodeSLOBuilder,
    StrategyConfig,
    default_strategy_config,
    parse_host_application_config,
    parse_strategy_config,
)

# The keys whose change rebuilds the NodeSLOs.
NODESLO_KEYS = (ck.KEY_RESOURCE_THRESHOLD, ck.KEY_RESOURCE_QOS, ck.KEY_CPU_BURST, ck.KEY_SYSTEM,
                ck.KEY_HOST_APPLICATION)


@dataclass(frozen=True)
class SLOConfig:
    colocation: ColocationConfig = field(default_factory=ColocationConfig)
    threshold: StrategyConfig = field(default_factory=lambda: default_strategy_config(ck.KEY_RESOURCE_THRESHOLD))
    qos: StrategyConfig = field(default_factory=lambda: default_strategy_config(ck.KEY_RESOURCE_QOS))
    burst: StrategyConfig = field(default_factory=lambda: default_strategy_config(ck.KEY_CPU_BURST))
    system: StrategyConfig = field(default_factory=lambda: default_strategy_config(ck.KEY_SYSTEM))
    host_apps: HostApplicationConfig = field(default_factory=HostApplicationConfig)

    def nodeslo_builder(self) -> NodeSLOBuilder:
        return NodeSLOBuilder(self.threshold, self.qos, self.burst, self.system, self.host_apps)


@dataclass(frozen=True)
class ApplyResult:
    changed: tuple[str, ...]  # keys whose configuration changed
    errors: dict[str, str]  # key -> why it was rejected (its previous config stays)
    warnings: tuple[str, ...] = ()  # settings accepted without effect ("not supported"), pools falling back


def unwrap_configmap(doc: Any) -> Mapping[str, Any]:
    """The `data` map of a ConfigMap object, or the document itself when it is the data map."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"config must be a ConfigMap or its data map, got {type(doc).__name__}")
    if doc.get("kind") == "ConfigMap" or ("data" in doc and isinstance(doc.get("data"), Mapping)):
        return doc.get("data") or {}
    return doc


_STRATEGY_FIELD = {ck.KEY_RESOURCE_THRESHOLD: "threshold", ck.KEY_RESOURCE_QOS: "qos", ck.KEY_CPU_BURST: "burst",
                   ck.KEY_SYSTEM: "system"}
_NOT_SUPPORTED = {ck.KEY_RESOURCE_QOS: ck.resource_qos_not_supported, ck.KEY_SYSTEM: ck.system_not_supported}


def apply_key(cfg: SLOConfig, key: str, doc: Any) -> tuple[SLOConfig, list[str]]:
    """`cfg` with one key's document in force, and the warnings it brings; ConfigError refuses it."""
    if doc is not None:
        refusal = ck.check_fields(key, doc)
        if refusal:
            raise ConfigError(refusal)
    if key == ck.KEY_COLOCATION:
        col = parse_colocation_config(doc)
        warnings = list(col.warnings)
        warnings += ck.colocation_not_supported(col.cluster.to_dict(), key)
        for i, nc in enumerate(col.node_configs):
            warnings += ck.colocation_not_supported(nc.strategy.to_dict(), f"{key}.nodeConfigs[{i}]")
        return replace(cfg, colocation=col), _unique(warnings)
    if key == ck.KEY_HOST_APPLICATION:
        return replace(cfg, host_apps=parse_host_application_config(doc)), []
    if key in (ck.KEY_CPU_NORMALIZATION, ck.KEY_RESOURCE_AMPLIFICATION):
        refusal, note = ck.whole_key_not_supported(key, doc)
        if refusal:
            raise ConfigError(f"{key}: {refusal}")
        return cfg, [note] if note else []
    parsed = parse_strategy_config(key, doc)
    check = _NOT_SUPPORTED.get(key)
    warnings = [w for where, s in parsed.strategies() for w in check(s, where)] if check else []
    return replace(cfg, **{_STRATEGY_FIELD[key]: parsed}), _unique(warnings)


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


class ConfigState:
    """The configuration in force; `apply` takes a new ConfigMap data map."""

    def __init__(self, initial: SLOConfig | None = None) -> None:
        self.current = initial or SLOConfig()
        self._raw: dict[str, Any] = {}
        self._warnings: dict[str, list[str]] = {}
        self.errors: dict[str, str] = {}
        self.warnings: tuple[str, ...] = ()  # of the configuration in force

    def apply(self, data: Mapping[str, Any]) -> ApplyResult:
        cfg = self.current
        changed: list[str] = []
        errors: dict[str, str] = {}
        for key in ck.CONFIG_KEYS:
            raw = data.get(key)
            if key in self._raw and self._raw[key] == raw:
                continue  # unchanged since it was last accepted
            try:
                cfg, self._warnings[key] = apply_key(cfg, key, load_json_key(data, key))
            except ConfigError as e:
                errors[key] = str(e)
                continue
            self._raw[key] = raw
            changed.append(key)
        for key in data:
            if key not in ck.CONFIG_KEYS:
                close = closest(key, ck.CONFIG_KEYS)
                errors[str(key)] = (f"{key} is not a key of slo-controller-config"
                                    + (f" (did you mean {close}?)" if close else "")
                                    + f"; the keys are {', '.join(ck.CONFIG_KEYS)}")
        self.current = cfg
        self.errors = errors
        # every warning of the configuration in force, the unchanged keys' included
        self.warnings = tuple(w for key in ck.CONFIG_KEYS for w in self._warnings.get(key, ()))
        return ApplyResult(tuple(changed), errors, self.warnings)
