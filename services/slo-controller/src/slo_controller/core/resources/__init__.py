"""Overcommit rules, one module each (Koordinator's noderesource plugins), behind one shape:
`calculate(snapshot, strategy) -> ResourceItems`. `core.plan.PLUGINS` runs them in order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import ColocationStrategy
from ..snapshot import NodeSnapshot

# Messages and inputs are read only when a result is written, published or shown, so the
# rules may hand them over as functions: a full recompute then formats nothing.
Explain = str | Callable[[], str]


@dataclass(frozen=True, slots=True)
class ResourceItem:
    suffix: str  # batch-cpu, batch-memory, mid-cpu, mid-memory (published under the configured prefix)
    value: int | None  # integer milli-cores or bytes; None resets (removes) the resource
    explain: Explain  # Koordinator-style message: how the value came about

    @property
    def message(self) -> str:
        return self.explain if isinstance(self.explain, str) else self.explain()


@dataclass(frozen=True, slots=True)
class ResourceItems:
    plugin: str
    items: tuple[ResourceItem, ...]
    degraded: bool = False
    reason: str = ""
    details: dict[str, Any] | Callable[[], dict[str, Any]] = field(default_factory=dict)
    # per NUMA zone of the node: (zone name, {suffix: value}); () when the node reports no zones
    zones: tuple[tuple[str, dict[str, int]], ...] = ()

    @property
    def inputs(self) -> dict[str, Any]:
        """The numbers the rule used (capacity, margins, HP sums...), for reports."""
        return self.details if isinstance(self.details, dict) else self.details()

    @property
    def reset(self) -> bool:
        return all(i.value is None for i in self.items)

    def value(self, suffix: str) -> int | None:
        for i in self.items:
            if i.suffix == suffix:
                return i.value
        return None


Calculate = Callable[[NodeSnapshot, ColocationStrategy], ResourceItems]


def trunc_percent(value: int, percent: int) -> int:
    """value x percent / 100 truncated toward zero, as Go's int64 arithmetic does."""
    q = value * percent
    return q // 100 if q >= 0 else -((-q) // 100)


def giga(value: int) -> int:
    """Quantity.ScaledValue(Giga): rounds up, as Koordinator's messages print memory."""
    return -((-value) // 1_000_000_000)


def ratio(percent: int) -> str:
    """A percent as the ratio Go's %v prints (0, 0.1, 1)."""
    return f"{percent / 100:g}"


def reset_items(plugin: str, suffixes: tuple[str, ...], message: str, degraded: bool, reason: str) -> ResourceItems:
    return ResourceItems(plugin, tuple(ResourceItem(s, None, message) for s in suffixes), degraded, reason)


def computed_items(
    plugin: str,
    suffixes: tuple[str, ...],
    values: tuple[tuple[int, Explain], ...],
    details: dict[str, Any] | Callable[[], dict[str, Any]],
    zones: tuple[tuple[str, dict[str, int]], ...] = (),
) -> ResourceItems:
    """A rule's result: one (value, explain) per suffix, in the order of `suffixes`."""
    items = tuple(ResourceItem(s, value, explain) for s, (value, explain) in zip(suffixes, values, strict=True))
    return ResourceItems(plugin, items, details=details, zones=zones)
