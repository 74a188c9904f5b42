"""Every field of Koordinator's `slo-controller-config` ConfigMap, known by its place.

Koordinator decodes each data key with Go's encoding/json, which drops a field it does not
know: a misspelt `cpuSupressThresholdPercent` is then silently the default. Here each document
is held to the shape of its key (Koordinator's apis/configuration and NodeSLO types) first; a
field outside it refuses the key, named with the closest known field. Then `not_supported`
names each setting no part of koord-py acts on (the strategy is applied without it), so a
field is either honoured or named: never accepted and dropped.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from typing import Any

from koordcommon import suggest
from koordcommon.schemas import (
    CPUBurstStrategy,
    HostApplicationSpec,
    ResourceQOS,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)
from pydantic import BaseModel

KEY_COLOCATION = "colocation-config"
KEY_RESOURCE_THRESHOLD = "resource-threshold-config"
KEY_RESOURCE_QOS = "resource-qos-config"
KEY_CPU_BURST = "cpu-burst-config"
KEY_SYSTEM = "system-config"
KEY_HOST_APPLICATION = "host-application-config"
KEY_CPU_NORMALIZATION = "cpu-normalization-config"
KEY_RESOURCE_AMPLIFICATION = "resource-amplification-config"
# Koordinator's configuration keys, in its order (apis/configuration/slo_controller_config.go).
CONFIG_KEYS = (KEY_COLOCATION, KEY_RESOURCE_THRESHOLD, KEY_RESOURCE_QOS, KEY_CPU_BURST, KEY_SYSTEM,
               KEY_HOST_APPLICATION, KEY_CPU_NORMALIZATION, KEY_RESOURCE_AMPLIFICATION)


# A shape: None = a value (number, string, bool, list of values); a dict = an object with
# exactly these fields; [shape] = a list of such; MapOf(shape) = an object whose keys are
# names (resources, CPU models) and whose values have the shape; ANY = not looked into here
# (label selectors: parse_selector judges them; schedFeatures: kernel feature names).
class MapOf:
    def __init__(self, value: Any) -> None:
        self.value = value


ANY = MapOf(None)
Shape = Any

_SELECTOR = {"nodeSelector": ANY}
_PROFILE = {"name": None, **_SELECTOR}


def model_shape(model: type[BaseModel]) -> dict[str, Shape]:
    """The fields of a koordcommon NodeSLO model, nested models and lists of them followed."""
    out: dict[str, Shape] = {}
    for name, info in model.model_fields.items():
        out[name] = _annotation_shape(info.annotation)
    return out


def _annotation_shape(annotation: Any) -> Shape:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_shape(annotation)
    if origin is list and args:
        inner = _annotation_shape(args[0])
        return [inner] if inner is not None else None
    if origin is dict:
        return ANY
    if args and origin is not None:  # X | None
        shapes = [_annotation_shape(a) for a in args]
        return next((s for s in shapes if s is not None), None)
    return None


# The ResourceQOS sections the schema keeps as plain maps (the node agent only checks `enable`).
_IO_CFG = {f: None for f in (
    "readIOPS", "writeIOPS", "readBPS", "writeBPS", "ioWeightPercent", "readLatency", "writeLatency",
    "readLatencyPercent", "writeLatencyPercent", "enableUserModel", "modelReadBPS", "modelWriteBPS",
    "modelReadSeqIOPS", "modelWriteSeqIOPS", "modelReadRandIOPS", "modelWriteRandIOPS")}
_RESOURCE_QOS = {
    **model_shape(ResourceQOS),
    "blkioQOS": {"enable": None, "blocks": [{"name": None, "type": None, "ioCfg": _IO_CFG}]},
    "resctrlQOS": {"enable": None, "catRangeStartPercent": None, "catRangeEndPercent": None, "mbaPercent": None},
    "networkQOS": {"enable": None, "ingressRequest": None, "ingressLimit": None, "egressRequest": None,
                   "egressLimit": None},
}
QOS_SECTIONS = ("lsrClass", "lsClass", "beClass", "systemClass", "cgroupRoot")
_RESOURCE_QOS_STRATEGY = {
    **model_shape(ResourceQOSStrategy),
    "policies": {"cpuPolicy": None, "netQOSPolicy": None},
    **{section: _RESOURCE_QOS for section in QOS_SECTIONS},
}
_HOST_APPLICATION = {**model_shape(HostApplicationSpec), "strategy": {}}  # HostApplicationStrategy has no field

# colocation-config: ColocationStrategy inline, and per pool in nodeConfigs.
COLOCATION_FIELDS = (
    "enable", "metricAggregateDurationSeconds", "metricReportIntervalSeconds", "metricAggregatePolicy",
    "metricMemoryCollectPolicy", "cpuReclaimThresholdPercent", "cpuCalculatePolicy", "memoryReclaimThresholdPercent",
    "memoryCalculatePolicy", "degradeTimeMinutes", "updateTimeThresholdSeconds", "resourceDiffThreshold",
    "midReclaimMode", "midCPUThresholdPercent", "midMemoryThresholdPercent", "midUnallocatedPercent",
    "midStaticCPUReservedPercent", "midStaticMemoryReservedPercent", "batchCPUThresholdPercent",
    "batchMemoryThresholdPercent", "extensions",
)
_COLOCATION_STRATEGY = {
    **{f: None for f in COLOCATION_FIELDS},
    "metricAggregatePolicy": {"durations": None},
    "extensions": ANY,
}


def _per_node(strategy: dict[str, Shape]) -> dict[str, Shape]:
    """{clusterStrategy, nodeStrategies: [{name, nodeSelector, <strategy inline>}]}."""
    return {"clusterStrategy": strategy, "nodeStrategies": [{**_PROFILE, **strategy}]}


_CPU_NORMALIZATION = {
    "enable": None,
    "defaultRatio": None,
    "ratioModel": MapOf({"baseRatio": None, "hyperThreadEnabledRatio": None, "turboEnabledRatio": None,
                         "hyperThreadTurboEnabledRatio": None}),
}
_RESOURCE_AMPLIFICATION = {"enable": None, "resourceAmplificationRatio": ANY}

SHAPES: dict[str, dict[str, Shape]] = {
    KEY_COLOCATION: {**_COLOCATION_STRATEGY, "nodeConfigs": [{**_PROFILE, **_COLOCATION_STRATEGY}]},
    KEY_RESOURCE_THRESHOLD: _per_node(model_shape(ResourceThresholdStrategy)),
    KEY_RESOURCE_QOS: _per_node(_RESOURCE_QOS_STRATEGY),
    KEY_CPU_BURST: _per_node(model_shape(CPUBurstStrategy)),
    KEY_SYSTEM: _per_node({**model_shape(SystemStrategy), "schedFeatures": ANY}),
    KEY_HOST_APPLICATION: {"applications": [_HOST_APPLICATION],
                           "nodeConfigs": [{**_PROFILE, "applications": [_HOST_APPLICATION]}]},
    KEY_CPU_NORMALIZATION: {**_CPU_NORMALIZATION, "nodeConfigs": [{**_PROFILE, **_CPU_NORMALIZATION}]},
    KEY_RESOURCE_AMPLIFICATION: {**_RESOURCE_AMPLIFICATION,
                                 "nodeConfigs": [{**_PROFILE, **_RESOURCE_AMPLIFICATION}]},
}


def unknown_fields(doc: Any, shape: Shape, path: str = "") -> list[str]:
    """Each field of `doc` outside `shape`, as `path (did you mean x?)`; types are judged later."""
    out: list[str] = []
    if isinstance(shape, MapOf):
        if shape.value is not None and isinstance(doc, Mapping):
            for k, v in doc.items():
                out += unknown_fields(v, shape.value, f"{path}[{k}]")
        return out
    if isinstance(shape, list):
        if isinstance(doc, list):
            for i, item in enumerate(doc):
                out += unknown_fields(item, shape[0], f"{path}[{i}]")
        return out
    if isinstance(shape, dict) and isinstance(doc, Mapping):
        for k, v in doc.items():
            at = f"{path}.{k}" if path else str(k)
            if k not in shape:
                close = closest(str(k), list(shape))
                out.append(at + (f" (did you mean {close}?)" if close else ""))
            else:
                out += unknown_fields(v, shape[k], at)
    return out


def closest(name: str, known: list[str]) -> str | None:
    """The known name a misspelt or shortened `name` most likely meant, if any is near."""
    close = suggest.closest(name, known)
    if close:
        return close
    starts = [k for k in known if k.lower().startswith(name.lower())]
    return starts[0] if len(starts) == 1 else None


def check_fields(key: str, doc: Any) -> str | None:
    """The refusal of a document with fields its key does not have; None when every one is known."""
    unknown = unknown_fields(doc, SHAPES[key])
    if not unknown:
        return None
    s = "s" if len(unknown) > 1 else ""
    return f"{key}: unknown field{s} {', '.join(unknown)}"


# ----------------------------------------------------------------------------- not supported

# colocation-config fields that tune koordlet's metric collection (NodeMetric.spec in
# Koordinator). The node agent takes them from its own settings; only the default (which is
# the agent's default too) can be honoured from the ConfigMap.
COLLECT_POLICY_DEFAULTS: dict[str, tuple[Any, str]] = {
    "metricAggregateDurationSeconds": (300, "KOORD_AGENT_AGGREGATE_WINDOW_S"),
    "metricReportIntervalSeconds": (60, "KOORD_AGENT_NODEMETRIC_INTERVAL_S"),
    "metricAggregatePolicy": ({"durations": ["5m", "10m", "30m"]}, "KOORD_AGENT_AGGREGATE_DURATIONS_S"),
    "metricMemoryCollectPolicy": ("usageWithoutPageCache", "(only usageWithoutPageCache is collected)"),
}


def colocation_not_supported(strategy: Mapping[str, Any], where: str) -> list[str]:
    """The settings of one merged ColocationStrategy that nothing here acts on."""
    out = []
    for name, (default, instead) in COLLECT_POLICY_DEFAULTS.items():
        if strategy.get(name) != default:
            out.append(f"{where}.{name} {_show(strategy.get(name))} is not supported: the node agent's metric "
                       f"collection is set by {instead}, default {_show(default)}")
    if strategy.get("extensions"):
        out.append(f"{where}.extensions ({', '.join(sorted(strategy['extensions']))}) are not supported")
    return out


_QOS_NOT_SUPPORTED = (("blkioQOS", "block IO QoS"), ("resctrlQOS", "LLC / memory bandwidth (resctrl) QoS"),
                      ("networkQOS", "network QoS"))


def resource_qos_not_supported(strategy: Mapping[str, Any], where: str) -> list[str]:
    """The sections of one merged ResourceQOSStrategy the node agent does not apply."""
    out = []
    policies = strategy.get("policies") or {}
    if policies.get("cpuPolicy") == "coreSched":
        out.append(f"{where}.policies.cpuPolicy coreSched (core scheduling: cpuQOS.schedIdle, coreExpeller) is not "
                   "supported: no CPU QoS is applied")
    for section in QOS_SECTIONS:
        qos = strategy.get(section) or {}
        for name, what in _QOS_NOT_SUPPORTED:
            if _enabled(qos.get(name)):
                extra = f", policies.netQOSPolicy {policies.get('netQOSPolicy')}" if name == "networkQOS" else ""
                out.append(f"{where}.{section}.{name} ({what}{extra}) is not supported")
        if section == "cgroupRoot":
            for name in ("cpuQOS", "memoryQOS"):
                if _enabled(qos.get(name)):
                    out.append(f"{where}.cgroupRoot.{name} is not supported (QoS classes only)")
    return out


def system_not_supported(strategy: Mapping[str, Any], where: str) -> list[str]:
    """Every SystemStrategy setting (node-wide sysctls): the node agent writes none."""
    out = []
    for name, value in strategy.items():
        if name == "totalNetworkBandwidth":
            unset = value in (None, "", "0", 0)
        else:
            unset = not value if name == "schedFeatures" else value is None
        if not unset:
            out.append(f"{where}.{name} {_show(value)} (a node-wide kernel setting) is not supported")
    return out


def whole_key_not_supported(key: str, doc: Any) -> tuple[str | None, str | None]:
    """(refusal, note) for the keys of noderesource plugins koord-py does not have: refused when
    they switch the plugin on anywhere, named in a note otherwise."""
    what = {KEY_CPU_NORMALIZATION: "CPU normalization (the cpunormalization plugin)",
            KEY_RESOURCE_AMPLIFICATION: "resource amplification (the resourceamplification plugin)"}[key]
    if not isinstance(doc, Mapping) or not doc:
        return None, None
    nodes = doc.get("nodeConfigs") if isinstance(doc.get("nodeConfigs"), list) else []
    on = [key] if doc.get("enable") is True else []
    on += [f"{key}.nodeConfigs[{i}]" for i, nc in enumerate(nodes) if isinstance(nc, Mapping) and nc.get("enable")]
    if on:
        return f"{what} is not supported: enabled at {', '.join(on)}", None
    return None, f"{key}: {what} is not supported; it is disabled here, so nothing changes"


def _enabled(section: Any) -> bool:
    return isinstance(section, Mapping) and section.get("enable") is True


def _show(v: Any) -> str:
    return json.dumps(v)
