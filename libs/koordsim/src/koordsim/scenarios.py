"""The initial cluster of each scenario a SimSpec names, and the builder that makes it.

* `vms`: Bitbrains VMs packed onto nodes as online pods (genesis.py);
* `machines`: real Alibaba 2018 machines, one node each (machines.py);
* `history`: a cluster's own history, exported by the metrics-collector (history.py).
"""

from __future__ import annotations

from collections.abc import Callable

from . import genesis, history, machines
from .genesis import Genesis
from .spec import SimSpec

BUILDERS: dict[str, Callable[[SimSpec], Genesis]] = {
    "vms": genesis.build_vms,
    "machines": machines.build,
    "history": history.build,
}


def build(spec: SimSpec) -> Genesis:
    """The cluster the spec's scenario describes (a pure function of the spec)."""
    return BUILDERS[spec.scenario](spec)
