"""The NodeResourceTopology object of a node: where the batch resources of each NUMA zone go.

Koordinator's BatchResource plugin writes each zone's batch-cpu / batch-memory into the zone's
`resources` of the node's NodeResourceTopology (topology.node.k8s.io/v1alpha1, named after the
node), capacity = allocatable = available, and leaves every other resource of the zone as it
is (UpdateNRTZoneListIfNeeded): a value is rewritten when it moved by more than
resourceDiffThreshold, a zone that got no value has its batch resources set to 0, a resource
the zone lacks is added (resources kept sorted by name). Here the object is created from the
zones the node agent reports when none exists yet (koordlet creates it in a Koordinator cluster).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from koordcommon import resources as rn
from koordcommon.quantity import QuantityError, format_quantity, parse_quantity

from .sync import is_quantity_diff

NRT_KIND = "NodeResourceTopology"
API_VERSION = "topology.node.k8s.io/v1alpha1"
_FIELDS = ("capacity", "allocatable", "available")


def new_object(node: str, zones: tuple[tuple[str, int, int], ...]) -> dict[str, Any]:
    """A NodeResourceTopology of `zones` ((name, cpu milli, memory bytes) each), as koordlet lays it out."""
    def info(name: str, value: int) -> dict[str, str]:
        q = format_quantity(name, value)
        return {"name": name, **{f: q for f in _FIELDS}}

    return {
        "apiVersion": API_VERSION,
        "kind": NRT_KIND,
        "metadata": {"name": node},
        "topologyPolicies": ["None"],
        "zones": [{"name": name, "type": "Node", "resources": [info(rn.CPU, cpu), info(rn.MEMORY, mem)]}
                  for name, cpu, mem in zones],
    }


def _value(name: str, q: Any) -> int | None:
    """An NRT quantity as the integer the published resources use (batch-cpu: milli-cores as an integer)."""
    try:
        quantity = parse_quantity(str(q))
    except (QuantityError, ValueError):
        return None
    return quantity.milli_value() if name == rn.CPU else quantity.value()


def update_zones(obj: Mapping[str, Any], values: Mapping[str, Mapping[str, int]], names: tuple[str, ...],
                 diff_threshold: float) -> tuple[dict[str, Any], bool]:
    """`obj` with each zone's `names` resources set from `values` (zone -> name -> integer), and
    whether anything moved beyond `diff_threshold`; zones without values get 0 for `names`."""
    out = copy.deepcopy(dict(obj))
    changed = False
    for zone in out.get("zones") or []:
        resources = zone.setdefault("resources", [])
        wanted = values.get(zone.get("name"))
        if wanted is None:  # reset: Koordinator sets zero instead of deleting
            for info in resources:
                if info.get("name") in names and any(_value(info["name"], info.get(f)) != 0 for f in _FIELDS):
                    for f in _FIELDS:
                        info[f] = "0"
                    changed = True
            continue
        for name, value in wanted.items():
            q = format_quantity(name, value)
            info = next((r for r in resources if r.get("name") == name), None)
            if info is None:
                resources.append({"name": name, **{f: q for f in _FIELDS}})
                resources.sort(key=lambda r: r.get("name", ""))
                changed = True
                continue
            for f in _FIELDS:
                if is_quantity_diff(_value(name, info.get(f)), value, diff_threshold):
                    info[f] = q
                    changed = True
    return out, changed


def zone_values(obj: Mapping[str, Any] | None, names: tuple[str, ...]) -> dict[str, dict[str, int | None]]:
    """The `names` resources of each zone (allocatable), for reports."""
    out: dict[str, dict[str, int | None]] = {}
    for zone in (obj or {}).get("zones") or []:
        out[zone.get("name", "")] = {r["name"]: _value(r["name"], r.get("allocatable"))
                                     for r in zone.get("resources") or [] if r.get("name") in names}
    return out
