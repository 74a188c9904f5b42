"""What a replay evaluates: one colocation configuration as a user writes it for the services.

A configuration is the three things an administrator sets: the slo-controller's ConfigMap
(`slo-controller-config`, Koordinator's keys and JSON documents), the scheduler-extender's
settings (its YAML, Koordinator's LoadAwareSchedulingArgs in snake_case) and the descheduler's
LowNodeLoadArgs or whole DeschedulerConfiguration (Koordinator's names; absent: no descheduler;
a DeschedulerConfiguration's deschedulingInterval is the replay's round interval). The replay hands each to the
service that reads it, through that service's own parser, so a configuration that replays is
one the services accept.

A sweep varies named knobs over values: `colocation.cpuReclaimThresholdPercent=50,60,70`,
`threshold.cpuSuppressThresholdPercent=55,65`, `extender.usage_thresholds.cpu=65,75`,
`descheduler.nodePools.0.highThresholds.cpu=70,80`. The short names of the colocation and
resource-threshold fields work without their section.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

KEY_COLOCATION = "colocation-config"
KEY_THRESHOLD = "resource-threshold-config"

# The repository's example ConfigMap (deploy/config/slo-controller-config.yaml), which a test holds
# equal to this: colocation on with Koordinator's defaults, CPU suppress at 65 % and memory
# eviction at 70 %, CPU burst off.
DEFAULT_SLO_CONFIG: dict[str, Any] = {
    KEY_COLOCATION: {
        "enable": True,
        "metricAggregateDurationSeconds": 300,
        "cpuReclaimThresholdPercent": 60,
        "memoryReclaimThresholdPercent": 65,
        "memoryCalculatePolicy": "usage",
        "degradeTimeMinutes": 15,
        "updateTimeThresholdSeconds": 300,
        "resourceDiffThreshold": 0.1,
    },
    KEY_THRESHOLD: {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 65, "memoryEvictThresholdPercent": 70}},
    "cpu-burst-config": {"clusterStrategy": {"policy": "none"}},
}
# The descheduler as the chart ships it: Koordinator's LowNodeLoad defaults, evicting directly
# (the replay places replacements itself; ReservationFirst needs koord-scheduler).
DEFAULT_DESCHEDULER: dict[str, Any] = {
    "evictableNamespaces": {"exclude": ["kube-system", "koordinator-system"]},
    "migration": {"defaultJobMode": "EvictDirectly"},
}


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class WhatIfConfig:
    name: str = "default"
    slo: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(DEFAULT_SLO_CONFIG))
    extender: dict[str, Any] = field(default_factory=dict)  # scheduler-extender settings overrides
    descheduler: dict[str, Any] | None = field(default_factory=lambda: copy.deepcopy(DEFAULT_DESCHEDULER))
    descheduler_interval_s: float = 60.0
    colocation: bool = True  # False: online pods alone, no batch work submitted (the baseline)

    def slo_configmap(self) -> dict[str, str]:
        """The ConfigMap's data as the slo-controller reads it: each key a JSON document."""
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in self.slo.items()}

    def extender_settings(self):
        from scheduler_extender.settings import Settings

        try:
            return Settings(**self.extender)
        except ValueError as exc:
            raise ConfigError(f"{self.name}: scheduler-extender settings: {exc}") from None

    def descheduler_config(self):
        """The descheduler's reading of its configuration (LowNodeLoadArgs or a
        DeschedulerConfiguration, by its own parser): the arguments, the round interval the file
        sets, the warnings about keys without effect; None without a descheduler."""
        if not self.descheduler_interval_s >= 1:
            raise ConfigError(f"{self.name}: descheduler_interval_s {self.descheduler_interval_s}: at least 1 s")
        if self.descheduler is None:
            return None
        from descheduler.core.config import parse_config

        try:
            return parse_config(self.descheduler)
        except ValueError as exc:
            raise ConfigError(f"{self.name}: descheduler args: {exc}") from None

    def descheduler_args(self):
        loaded = self.descheduler_config()
        return None if loaded is None else loaded.args

    def slo_config(self):
        """(what the slo-controller makes of the ConfigMap, by its own parser with its defaults
        filled in; the warnings it logs for settings it accepts without effect). ConfigError names
        what it refuses: the service would keep its previous configuration and run on that."""
        from slo_controller.core.configmap import ConfigState

        state = ConfigState()
        result = state.apply(self.slo_configmap())
        if result.errors:
            raise ConfigError(f"{self.name}: slo-controller-config rejected: {'; '.join(result.errors.values())}")
        return state.current, result.warnings

    def check(self) -> WhatIfConfig:
        """The configuration, once each service has accepted its part (ConfigError otherwise):
        refused before any replay starts, not in the middle of a sweep."""
        self.slo_config()
        self.extender_settings()
        self.descheduler_args()
        return self

    def effective(self) -> tuple:
        """What each service makes of the configuration (its defaults filled in): two
        configurations with equal effective settings replay alike."""
        return self.slo_config()[0], self.extender_settings(), self.descheduler_args(), self.descheduler_interval_s, \
            self.colocation

    def doc(self) -> dict[str, Any]:
        """The configuration as a document (reports carry it, `load_config` reads it back)."""
        return {
            "name": self.name,
            "slo-controller-config": self.slo,
            "scheduler-extender": self.extender,
            "descheduler": self.descheduler,
            "descheduler_interval_s": self.descheduler_interval_s,
            "colocation": self.colocation,
        }


def from_doc(doc: Mapping[str, Any]) -> WhatIfConfig:
    """A configuration from its document (`WhatIfConfig.doc`, as a report carries it)."""
    return WhatIfConfig(
        name=doc["name"], slo=copy.deepcopy(doc["slo-controller-config"]), extender=dict(doc["scheduler-extender"]),
        descheduler=copy.deepcopy(doc["descheduler"]), descheduler_interval_s=float(doc["descheduler_interval_s"]),
        colocation=bool(doc["colocation"]),
    )  # fmt: skip


def with_descheduler(cfg: WhatIfConfig, doc: Any, interval_s: float | None = None) -> WhatIfConfig:
    """`cfg` with the descheduler's configuration `doc`, and its round interval: `interval_s`
    when given, else a DeschedulerConfiguration's deschedulingInterval, else cfg's; the two
    given and different are refused."""
    from descheduler.core.config import parse_config

    try:
        in_file = parse_config(doc).interval_s if doc is not None else None
    except ValueError as exc:
        raise ConfigError(f"{cfg.name}: descheduler args: {exc}") from None
    if in_file is not None and interval_s is not None and float(interval_s) != in_file:
        raise ConfigError(f"descheduler_interval_s {interval_s:g} and the DeschedulerConfiguration's "
                          f"deschedulingInterval ({in_file:g} s) differ: set the interval once")
    chosen = interval_s if interval_s is not None else in_file
    return replace(cfg, descheduler=doc,
                   descheduler_interval_s=float(chosen) if chosen is not None else cfg.descheduler_interval_s)


def baseline() -> WhatIfConfig:
    """The no-colocation baseline: the online pods alone."""
    return WhatIfConfig(name="no colocation", colocation=False, descheduler=None)


def _json_doc(value: Any, where: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON: {exc}") from None
    return value


def load_config(path: str | Path) -> WhatIfConfig:
    """A YAML file with `slo-controller-config` (a ConfigMap, or its data map, whose values may be
    JSON strings as in Kubernetes), `scheduler-extender` and `descheduler` (absent: defaults;
    `descheduler: null`: none), and optionally `name`."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{p}: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{p}: a mapping of slo-controller-config, scheduler-extender, descheduler expected")
    known = {"name", "slo-controller-config", "scheduler-extender", "descheduler", "descheduler_interval_s", "colocation"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ConfigError(f"{p}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    slo = copy.deepcopy(DEFAULT_SLO_CONFIG)
    cm = doc.get("slo-controller-config")
    if cm is not None:
        data = cm.get("data", cm) if isinstance(cm, dict) else None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: slo-controller-config must be a ConfigMap or its data map")
        slo = {k: _json_doc(v, f"{p}: slo-controller-config {k}") for k, v in data.items()}
    cfg = WhatIfConfig(
        name=str(doc.get("name") or p.stem),
        slo=slo,
        extender=dict(doc.get("scheduler-extender") or {}),
        colocation=bool(doc.get("colocation", True)),
    )
    try:
        interval = doc.get("descheduler_interval_s")
        cfg = with_descheduler(cfg, doc["descheduler"] if "descheduler" in doc else copy.deepcopy(DEFAULT_DESCHEDULER),
                               float(interval) if interval is not None else None)
        return cfg.check()  # fail early, naming the file
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


# --------------------------------------------------------------------------- sweeps

_COLOCATION_FIELDS = {
    "enable", "cpuReclaimThresholdPercent", "memoryReclaimThresholdPercent", "cpuCalculatePolicy",
    "memoryCalculatePolicy", "degradeTimeMinutes", "updateTimeThresholdSeconds", "resourceDiffThreshold",
    "metricAggregateDurationSeconds", "midCPUThresholdPercent", "midMemoryThresholdPercent",
    "midUnallocatedPercent", "batchCPUThresholdPercent", "batchMemoryThresholdPercent",
}  # fmt: skip
_THRESHOLD_FIELDS = {
    "cpuSuppressThresholdPercent", "cpuSuppressPolicy", "memoryEvictThresholdPercent", "memoryEvictLowerPercent",
    "cpuEvictBESatisfactionLowerPercent", "cpuEvictBESatisfactionUpperPercent", "cpuEvictTimeWindowSeconds",
    "cpuEvictPolicy",
}  # fmt: skip


_SECTIONS = ("colocation", "threshold", "extender", "descheduler")


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _set_path(doc: Any, path: Sequence[str], value: Any, where: str) -> None:
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(doc, list):
            doc = doc[int(key)]
            continue
        if key not in doc or doc[key] is None:
            doc[key] = [{}] if nxt.isdigit() else {}
        doc = doc[key]
    last = path[-1]
    if isinstance(doc, list):
        doc[int(last)] = value
    elif isinstance(doc, dict):
        doc[last] = value
    else:
        raise ConfigError(f"{where}: cannot set {'.'.join(path)}")


def _lownodeload_args(doc: dict) -> dict:
    """Where a `descheduler.<arg>` knob goes: the document itself when it is LowNodeLoadArgs, the
    LowNodeLoad plugin's arguments in the (one) profile of a DeschedulerConfiguration."""
    from descheduler.core.config import LOW_NODE_LOAD, DeschedulerConfiguration

    if doc.get("kind") != DeschedulerConfiguration.KIND and "profiles" not in doc:
        return doc
    profiles = doc.setdefault("profiles", [{}]) or [{}]
    doc["profiles"] = profiles
    configs = profiles[0].setdefault("pluginConfig", [])
    entry = next((c for c in configs if isinstance(c, dict) and c.get("name") == LOW_NODE_LOAD), None)
    if entry is None:
        entry = {"name": LOW_NODE_LOAD, "args": {}}
        configs.append(entry)
    if not isinstance(entry.get("args"), dict):
        entry["args"] = {}
    return entry["args"]


def with_knob(cfg: WhatIfConfig, knob: str, value: Any) -> WhatIfConfig:
    """`cfg` with one knob set (see the module doc for the names)."""
    section, _, rest = knob.partition(".")
    if not rest:
        section, rest = ("colocation", knob) if knob in _COLOCATION_FIELDS else (
            ("threshold", knob) if knob in _THRESHOLD_FIELDS else ("", knob))
    if section == "colocation":
        slo = copy.deepcopy(cfg.slo)
        slo.setdefault(KEY_COLOCATION, {})[rest] = value
        return replace(cfg, slo=slo)
    if section == "threshold":
        slo = copy.deepcopy(cfg.slo)
        slo.setdefault(KEY_THRESHOLD, {}).setdefault("clusterStrategy", {})[rest] = value
        return replace(cfg, slo=slo)
    if section == "extender":
        ext = copy.deepcopy(cfg.extender)
        path = rest.split(".")
        if len(path) > 1 and path[0] not in ext:
            from scheduler_extender.settings import Settings

            default = Settings.model_fields.get(path[0])
            if default is not None and default.default_factory is not None:
                ext[path[0]] = copy.deepcopy(default.default_factory())
        _set_path(ext, path, value, knob)
        return replace(cfg, extender=ext)
    if section == "descheduler":
        desched = copy.deepcopy(cfg.descheduler or DEFAULT_DESCHEDULER)
        args = _lownodeload_args(desched)
        path = rest.split(".")
        if path[0] == "nodePools" and "nodePools" not in args:
            args["nodePools"] = [{}]
        _set_path(args, path, value, knob)
        return replace(cfg, descheduler=desched)
    raise ConfigError(
        f"unknown knob {knob!r}: use colocation.<field>, threshold.<field>, extender.<setting> or descheduler.<arg>"
    )


def parse_sweep(specs: Sequence[str]) -> dict[str, list[Any]]:
    """`knob=v1,v2,...` strings -> knob -> values."""
    out: dict[str, list[Any]] = {}
    for spec in specs:
        knob, sep, values = spec.partition("=")
        if not sep or not knob.strip() or not values.strip():
            raise ConfigError(f"sweep {spec!r}: write knob=value1,value2")
        out[knob.strip()] = [_parse_value(v.strip()) for v in values.split(",")]
    return out


def _label(knob: str, value: Any) -> str:
    section, _, rest = knob.partition(".")
    return f"{rest if section in _SECTIONS and rest else knob}={value}"


def sweep(base: WhatIfConfig, knobs: Mapping[str, Sequence[Any]]) -> list[WhatIfConfig]:
    """Every combination of the knobs' values over `base`, named by what differs."""
    if not knobs:
        return [base.check()]
    names = list(knobs)
    out = []
    for combo in itertools.product(*(knobs[n] for n in names)):
        cfg = base
        for knob, value in zip(names, combo, strict=True):
            cfg = with_knob(cfg, knob, value)
        out.append(replace(cfg, name=" ".join(_label(k, v) for k, v in zip(names, combo, strict=True))).check())
    return out


def variations(base: WhatIfConfig, knobs: Mapping[str, Sequence[Any]]) -> list[WhatIfConfig]:
    """`base` (named by its own name) and, for each knob and value, `base` with that one setting
    changed: what each setting does on its own, in 1 + sum of values replays rather than their
    product. A value equal to the base's own is not replayed twice."""
    out = [base.check()]
    for knob, values in knobs.items():
        for value in values:
            cfg = with_knob(base, knob, value)
            if cfg.effective() == base.effective():  # the base's own value, written or by default
                continue
            out.append(replace(cfg, name=_label(knob, value)).check())
    return out
