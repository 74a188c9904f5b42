"""One tick's row of the ledger, from what each node ran.

The real mode reads each node's round from the agent's sample on the bus; the fast mode's
`Replay._observe` applies the same rule to the rounds of its in-process agent. A node's tick is
its status (the batch allocatable offered), what the node ran in all, what each pod ran
(BestEffort pods held to what CPU suppress granted) and what each pod asked for before QoS. The batch pods are those the batch driver has bound
(`BatchDriver.uids_running`); everything else a node ran, its system usage included, is the
online load.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from koordcommon import resources as rn

from .ledger import Ledger


@dataclass
class NodeTick:
    allocatable: Mapping[str, int]  # the node's status
    node_cpu: float | None = None  # milli-cores the node ran in all (pods + system); None: no round
    pods: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # uid -> (cpu, memory) it ran
    asked: Mapping[str, float] = field(default_factory=dict)  # uid -> cpu it asked for before QoS
    node_mem: float | None = None  # bytes the node held in all (pods + system); None: not known


def ledger_row(ticks: Sequence[NodeTick], batch_uids: Mapping[str, str], suppress_pct: np.ndarray,
               ran: Callable[[str, float, float], None] | None = None, tick_s: int = 60) -> dict[str, np.ndarray]:
    """The ledger's series for one tick (node order as given). `ran(pod key, cpu ms, held ms)` is
    told the CPU each batch pod ran this tick and the run time CPU suppress withheld from it: the
    tick's length x the share of what it asked that it was not granted (the batch driver's account
    of the work done, and of how much later the pod ends)."""
    n = len(ticks)
    v = {s: np.zeros(n) for s in Ledger.SERIES}
    v["suppress_pct"] = suppress_pct
    batch_cpu, batch_mem = rn.batch_cpu(), rn.batch_memory()
    for i, t in enumerate(ticks):
        v["batch_alloc_cpu"][i] = t.allocatable.get(batch_cpu, 0)
        v["batch_alloc_mem"][i] = t.allocatable.get(batch_mem, 0)
        if t.node_cpu is None:
            continue
        pods_cpu = pods_mem = 0.0
        for uid, (cpu, mem) in t.pods.items():
            if math.isnan(cpu):
                continue
            pods_cpu += cpu
            pods_mem += 0.0 if math.isnan(mem) else mem
            key = batch_uids.get(uid)
            if key is None:
                v["online_cpu"][i] += cpu
                v["online_mem"][i] += mem
            else:
                v["batch_cpu"][i] += cpu
                v["batch_mem"][i] += mem
                asked = t.asked.get(uid, cpu)
                v["batch_cpu_asked"][i] += asked
                if ran is not None:
                    held = tick_s * 1000 * (asked - cpu) / asked if asked > cpu else 0.0
                    ran(key, cpu * tick_s * 1000, held)
        # what the node ran besides its pods (system) counts with the online load
        v["online_cpu"][i] += max(t.node_cpu - pods_cpu, 0.0)
        if t.node_mem is not None:
            v["online_mem"][i] += max(t.node_mem - pods_mem, 0.0)
    return v


def record_placements(results: Iterable, jobs, ledger: Ledger, t_ms: int) -> None:
    """A scheduling pass's outcome: the bound pods start; an attempt that found no node counts
    what each node answered (an extender or bind error is neither: the pod stays queued)."""
    for res in results:
        if res.node is not None:
            jobs.started(f"{res.namespace}/{res.name}", t_ms)
        elif not res.error:
            ledger.unschedulable(res.reasons)


__all__ = ["NodeTick", "ledger_row", "record_placements"]
