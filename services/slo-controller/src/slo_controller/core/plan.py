"""One node's reconcile as data: run the overcommit rules, decide whether to write, say what.

The adapter executes the plan (patch node status, publish NodeResource); nothing here acts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from koordcommon import resources as rn
from koordcommon.resources import Resources

from .config import NodeColocation
from .resources import Calculate, ResourceItem, ResourceItems, reset_items
from .resources import batch as batch_plugin
from .resources import mid as mid_plugin
from .snapshot import NodeSnapshot
from .sync import sync_decision

DISABLED_MESSAGE = "colocation disabled for this node"
# Koordinator's calculate order: midresource, then batchresource. A new rule is a module in
# resources/ and one line here.
PLUGINS: tuple[tuple[str, Calculate], ...] = (("mid", mid_plugin.calculate), ("batch", batch_plugin.calculate))
_SUFFIXES = {"batch": batch_plugin.SUFFIXES, "mid": mid_plugin.SUFFIXES}


@dataclass(frozen=True, slots=True)
class NodePlan:
    node: str
    values: dict[str, int | None]  # published resource name -> value; None removes it
    write: bool
    reason: str  # why it is (not) written: expired, diff:<name>, unchanged
    enabled: bool
    degraded: bool
    results: tuple[ResourceItems, ...]
    # batch resources per NUMA zone (zone -> published name -> value); empty without zones
    zones: dict[str, dict[str, int]] = field(default_factory=dict)
    zones_reset: bool = False  # batch was removed: every zone's batch resources go to 0

    @property
    def set_resources(self) -> dict[str, int]:
        return {k: v for k, v in self.values.items() if v is not None}

    @property
    def remove_resources(self) -> list[str]:
        return [k for k, v in self.values.items() if v is None]

    def _pair(self, plugin: str, cpu: str, mem: str) -> Resources | None:
        for r in self.results:
            if r.plugin == plugin:
                c, m = r.value(cpu), r.value(mem)
                return None if c is None and m is None else Resources(c or 0, m or 0)
        return None

    @property
    def batch(self) -> Resources | None:
        return self._pair("batch", rn.BATCH_CPU_SUFFIX, rn.BATCH_MEMORY_SUFFIX)

    @property
    def mid(self) -> Resources | None:
        return self._pair("mid", rn.MID_CPU_SUFFIX, rn.MID_MEMORY_SUFFIX)

    @property
    def messages(self) -> list[str]:
        return [i.message for r in self.results for i in r.items]

    def inputs(self) -> dict[str, Any]:
        return {r.plugin: r.inputs for r in self.results if r.inputs}


def calculate_all(snapshot: NodeSnapshot, colocation: NodeColocation) -> tuple[ResourceItems, ...]:
    if not colocation.enabled:
        return tuple(reset_items(name, _SUFFIXES[name], DISABLED_MESSAGE, False, "disabled") for name, _ in PLUGINS)
    return tuple(calc(snapshot, colocation.strategy) for _, calc in PLUGINS)


def plan_node(
    snapshot: NodeSnapshot,
    colocation: NodeColocation,
    prefix: str,
    last_sync_ms: int | None,
) -> NodePlan:
    results = calculate_all(snapshot, colocation)
    values: dict[str, int | None] = {}
    zones: dict[str, dict[str, int]] = {}
    degraded = zones_reset = False
    for r in results:
        degraded = degraded or r.degraded
        zones_reset = zones_reset or (r.plugin == "batch" and r.reset)
        item: ResourceItem
        for item in r.items:
            values[prefix + item.suffix] = item.value
        for zone, by_suffix in r.zones:
            zones.setdefault(zone, {}).update({prefix + suffix: v for suffix, v in by_suffix.items()})
    strategy = colocation.strategy
    write, reason = sync_decision(
        snapshot.node.allocatable,
        values,
        last_sync_ms,
        snapshot.now_ms,
        strategy.update_threshold_ms,
        strategy.resourceDiffThreshold,
    )
    return NodePlan(snapshot.node.name, values, write, reason, colocation.enabled, degraded, results, zones, zones_reset)
