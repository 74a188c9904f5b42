"""The plugin registry: which plugins exist and the order they run in.

Adding a plugin: write a module here with a class that has `name`, `weight`, `refresh`,
`scratch`, `filter` and `score` (see `framework.Plugin`; `framework.ColumnPlugin` does most of
it for per-node integers), register a factory below, and add its name to `DEFAULT_ORDER`.
docs/architecture.md walks through the load-aware plugin as the example.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..framework import Plugin
from .known import NodeKnown
from .loadaware import LoadAware, LoadAwareArgs
from .numa import NodeNUMAResource, NUMAResourceArgs
from .reservation import Reservation
from .tierfit import BatchMidFit

# name -> factory(config) -> plugin. The config is the extender's `ExtenderConfig`.
FACTORIES: dict[str, Callable[[Any], Plugin]] = {
    NodeKnown.name: lambda cfg: NodeKnown(cfg.fail_unknown_nodes),
    LoadAware.name: lambda cfg: LoadAware(cfg.load),
    BatchMidFit.name: lambda cfg: BatchMidFit(),
    NodeNUMAResource.name: lambda cfg: NodeNUMAResource(cfg.numa),
    Reservation.name: lambda cfg: Reservation(),
}

# kube-scheduler reports a node's first failing plugin: unknown names first (nothing else can
# judge them), then load, then capacity, then exclusive CPUs (only LSE / LSR pods pay for it),
# then reservations (the costliest, per node).
DEFAULT_ORDER = (NodeKnown.name, LoadAware.name, BatchMidFit.name, NodeNUMAResource.name, Reservation.name)


def build(names: Sequence[str], config: Any, weights: dict[str, int] | None = None) -> list[Plugin]:
    """The plugins named, in order. NodeKnown always runs first: the others judge only names
    that have data. Unknown names raise ValueError naming the ones there are."""
    unknown = [n for n in names if n not in FACTORIES]
    if unknown:
        raise ValueError(f"unknown plugin(s) {', '.join(unknown)}; known: {', '.join(FACTORIES)}")
    ordered = [NodeKnown.name, *(n for n in names if n != NodeKnown.name)]
    plugins = [FACTORIES[n](config) for n in dict.fromkeys(ordered)]
    for p in plugins:
        if weights and p.name in weights:
            p.weight = weights[p.name]
    return plugins


__all__ = ["DEFAULT_ORDER", "FACTORIES", "LoadAwareArgs", "NUMAResourceArgs", "build"]
