"""Which CPUs an LSE / LSR pod gets on a node: koord-scheduler's CPU accumulator (NodeNUMAResource,
`takeCPUs`), as plain functions over a `koordcommon.cpus.Topology`.

FullPCPUs (SameCore) packs whole physical cores: first one NUMA node that holds the request in
free whole cores, then one socket, then the sockets with the most free whole cores, then single
free cores from the sockets with the fewest. SpreadByPCPUs (Spread) takes one CPU per core
first (a core's siblings only once every core of the group gives one), within one NUMA node,
then one socket. What is left either way comes from the free CPUs ordered by socket affinity
with what was already taken. NUMA nodes and sockets are tried in the order of the NUMA allocate
strategy: MostAllocated the fullest first (bin-packing), LeastAllocated the emptiest first.
A CPUExclusivePolicy (PCPULevel / NUMANodeLevel) keeps away, while it can, from the cores /
NUMA nodes already held by pods of the same policy.

The outcome is stable: the same topology, free CPUs and request give the same CPUs, whatever
order the inputs come in. `allocate` adds the required policies and NUMA topology policy on top.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from koordcommon.cpus import (
    EXCLUSIVE_NUMA,
    EXCLUSIVE_PCPU,
    FULL_PCPUS,
    MOST_ALLOCATED,
    SPREAD_BY_PCPUS,
    Topology,
)


class _Accumulator:
    def __init__(self, topo: Topology, available: Iterable[int], need: int, strategy: str, exclusive: str,
                 held_cores: set[int], held_nodes: set[int]) -> None:  # fmt: skip
        self.topo = topo
        self.free = {c for c in available if c in topo.by_id}
        self.need = need
        self.most = strategy == MOST_ALLOCATED
        self.exclusive = exclusive
        self.held_cores = set(held_cores) if exclusive == EXCLUSIVE_PCPU else set()
        self.held_nodes = set(held_nodes) if exclusive == EXCLUSIVE_NUMA else set()
        self.result: list[int] = []

    # -- bookkeeping
    def take(self, cpus: Iterable[int]) -> None:
        for c in cpus:
            self.free.discard(c)
            self.result.append(c)
            info = self.topo.by_id[c]
            if self.exclusive == EXCLUSIVE_PCPU:
                self.held_cores.add(info.core)
            elif self.exclusive == EXCLUSIVE_NUMA:
                self.held_nodes.add(info.node)
            self.need -= 1

    @property
    def done(self) -> bool:
        return self.need < 1

    def _order(self, score: int) -> int:
        """Sort key of a free count: ascending for MostAllocated, descending for LeastAllocated."""
        return score if self.most else -score

    def _skip(self, c: int, cores: bool, nodes: bool) -> bool:
        info = self.topo.by_id[c]
        return (cores and info.core in self.held_cores) or (nodes and info.node in self.held_nodes)

    # -- free whole cores, grouped
    def _free_cores(self, skip_nodes: bool) -> dict[int, list[int]]:
        cores: dict[int, list[int]] = {}
        for c in sorted(self.free):
            if not self._skip(c, False, skip_nodes):
                cores.setdefault(self.topo.by_id[c].core, []).append(c)
        return cores

    def _flatten(self, groups: dict[int, list[int]], cores: dict[int, list[int]]) -> dict[int, list[int]]:
        """Each group's cores, most free CPUs first then by id, as one CPU list."""
        return {g: [c for core in sorted(ids, key=lambda k: (-len(cores[k]), k)) for c in cores[core]]
                for g, ids in groups.items()}  # fmt: skip

    def whole_cores_by_node(self, skip_exclusive: bool) -> list[list[int]]:
        cores = self._free_cores(skip_exclusive)
        socket_free: dict[int, int] = {}
        for ids in cores.values():
            info = self.topo.by_id[ids[0]]
            socket_free[info.socket] = socket_free.get(info.socket, 0) + len(ids)
        whole = {k: v for k, v in cores.items() if len(v) == self.topo.cpus_per_core}
        groups: dict[int, list[int]] = {}
        for k, v in whole.items():
            groups.setdefault(self.topo.by_id[v[0]].node, []).append(k)
        lists = self._flatten(groups, whole)
        socket_of = {n: self.topo.by_id[cpus[0]].socket for n, cpus in lists.items()}
        order = sorted(lists, key=lambda n: (self._order(len(lists[n])), self._order(socket_free[socket_of[n]]), n))
        return [lists[n] for n in order]

    def whole_cores_by_socket(self) -> list[list[int]]:
        cores = self._free_cores(False)
        whole = {k: v for k, v in cores.items() if len(v) == self.topo.cpus_per_core}
        groups: dict[int, list[int]] = {}
        for k, v in whole.items():
            groups.setdefault(self.topo.by_id[v[0]].socket, []).append(k)
        lists = self._flatten(groups, whole)
        return [lists[s] for s in sorted(lists, key=lambda s: (self._order(len(lists[s])), s))]

    # -- free CPUs, grouped
    def _one_per_core(self, cpus: list[int]) -> list[int]:
        seen: set[int] = set()
        out = []
        for c in cpus:
            core = self.topo.by_id[c].core
            if core not in seen:
                seen.add(core)
                out.append(c)
        return out

    def cpus_by_node(self, skip_exclusive: bool) -> list[list[int]]:
        groups: dict[int, list[int]] = {}
        node_free: dict[int, int] = {}
        socket_free: dict[int, int] = {}
        for c in sorted(self.free):
            if skip_exclusive and self._skip(c, True, True):
                continue
            info = self.topo.by_id[c]
            groups.setdefault(info.node, []).append(c)
            node_free[info.node] = node_free.get(info.node, 0) + 1
            socket_free[info.socket] = socket_free.get(info.socket, 0) + 1
        if skip_exclusive:
            groups = {n: self._one_per_core(v) for n, v in groups.items()}
        socket_of = {n: self.topo.by_id[v[0]].socket for n, v in groups.items()}
        order = sorted(groups, key=lambda n: (self._order(node_free[n]), self._order(socket_free[socket_of[n]]), n))
        return [groups[n] for n in order]

    def cpus_by_socket(self, skip_exclusive: bool) -> list[list[int]]:
        groups: dict[int, list[int]] = {}
        for c in sorted(self.free):
            if skip_exclusive and self._skip(c, True, False):
                continue
            groups.setdefault(self.topo.by_id[c].socket, []).append(c)
        if skip_exclusive:
            groups = {s: self._one_per_core(v) for s, v in groups.items()}
        return [groups[s] for s in sorted(groups, key=lambda s: (self._order(len(groups[s])), s))]

    def cpus_in_order(self, skip_exclusive: bool) -> list[int]:
        """Free CPUs core by core: cores on the sockets already used first, then by the strategy
        over socket and NUMA node free counts, fuller cores last, then socket and core id."""
        cores: dict[int, list[int]] = {}
        node_free: dict[int, int] = {}
        socket_free: dict[int, int] = {}
        for c in sorted(self.free):
            if skip_exclusive and self._skip(c, True, True):
                continue
            info = self.topo.by_id[c]
            cores.setdefault(info.core, []).append(c)
            node_free[info.node] = node_free.get(info.node, 0) + 1
            socket_free[info.socket] = socket_free.get(info.socket, 0) + 1
        used_sockets: dict[int, int] = {}
        for c in self.result:
            s = self.topo.by_id[c].socket
            used_sockets[s] = used_sockets.get(s, 0) + 1

        def key(core: int) -> tuple:
            info = self.topo.by_id[cores[core][0]]
            return (-used_sockets.get(info.socket, 0), self._order(socket_free[info.socket]),
                    self._order(node_free[info.node]), len(cores[core]), info.socket, core)  # fmt: skip

        return [c for core in sorted(cores, key=key) for c in cores[core]]

    def spread(self, cpus: list[int]) -> list[int]:
        """One CPU of each core in turn: every core's first CPU, then every core's second..."""
        if len(cpus) <= self.topo.cpus_per_core:
            return cpus
        out: list[int] = []
        rest = list(cpus)
        while rest:
            seen: set[int] = set()
            later = []
            for c in rest:
                core = self.topo.by_id[c].core
                if core in seen:
                    later.append(c)
                else:
                    seen.add(core)
                    out.append(c)
            rest = later
        return out


def take_cpus(topo: Topology, available: Iterable[int], need: int, bind_policy: str = FULL_PCPUS,
              strategy: str = MOST_ALLOCATED, exclusive: str = "", held_cores: Iterable[int] = (),
              held_nodes: Iterable[int] = ()) -> list[int] | None:  # fmt: skip
    """`need` CPUs out of `available` by the bind policy and NUMA strategy, ascending; None when
    there are not that many. `held_cores` / `held_nodes`: cores and NUMA nodes held by pods of the
    pod's exclusive policy (PCPULevel / NUMANodeLevel)."""
    acc = _Accumulator(topo, available, need, strategy, exclusive, set(held_cores), set(held_nodes))
    if acc.done:
        return []
    if acc.need > len(acc.free):
        return None
    per_core, per_node, per_socket = topo.cpus_per_core, topo.cpus_per_node, topo.cpus_per_socket
    full = bind_policy == FULL_PCPUS
    if full or per_core == 1:
        if acc.need <= per_node:
            for skip in (True, False):
                for cpus in acc.whole_cores_by_node(skip):
                    if len(cpus) >= acc.need:
                        acc.take(cpus[: acc.need])
                        return sorted(acc.result)
        if acc.need <= per_socket:
            for cpus in acc.whole_cores_by_socket():
                if len(cpus) >= acc.need:
                    acc.take(cpus[: acc.need])
                    return sorted(acc.result)
        # larger than a socket, or every socket partly taken: whole sockets' worth of free cores
        # from the sockets with the most, regardless of the strategy
        leftovers = []
        for cpus in sorted(acc.whole_cores_by_socket(), key=len, reverse=True):
            if acc.need < len(cpus):
                leftovers.append(cpus)
                continue
            acc.take(cpus)
            if acc.done:
                return sorted(acc.result)
        # then single whole cores from the sockets with the fewest
        if acc.need >= per_core:
            for cpus in sorted(leftovers, key=len):
                for i in range(0, len(cpus), per_core):
                    acc.take(cpus[i : i + per_core])
                    if acc.done:
                        return sorted(acc.result)
                    if acc.need < per_core:
                        break
    if not full:
        if acc.need <= per_node:
            for skip in (True, False):
                for cpus in acc.cpus_by_node(skip):
                    if len(cpus) >= acc.need:
                        acc.take(acc.spread(cpus)[: acc.need])
                        return sorted(acc.result)
        if acc.need <= per_socket:
            for skip in (True, False):
                for cpus in acc.cpus_by_socket(skip):
                    if len(cpus) >= acc.need:
                        acc.take(acc.spread(cpus)[: acc.need])
                        return sorted(acc.result)
    for skip in (True, False):
        for c in acc.spread(acc.cpus_in_order(skip)):
            if acc.need >= 1:
                acc.take([c])
            if acc.done:
                return sorted(acc.result)
    return None


# --------------------------------------------------------------------------- required policies


REASON_NOT_ENOUGH = "node(s) not enough cpus available to satisfy request"
REASON_SMT = "node(s) requested cpus not multiple cpus per core"
REASON_NUMA = "node(s) cannot fit the cpus in the NUMA topology policy"


def whole_cores(topo: Topology, cpus: Iterable[int]) -> bool:
    """Every core touched is taken whole (FullPCPUs satisfied)."""
    cpus = list(cpus)
    return len({topo.by_id[c].core for c in cpus}) * topo.cpus_per_core == len(cpus)


def one_per_core(topo: Topology, cpus: Iterable[int]) -> bool:
    """No two CPUs share a core (SpreadByPCPUs satisfied)."""
    cpus = list(cpus)
    return len({topo.by_id[c].core for c in cpus}) == len(cpus)


def _restrict(topo: Topology, available: frozenset[int], policy: str) -> frozenset[int]:
    """A required policy narrows what may be taken: FullPCPUs only cores free whole,
    SpreadByPCPUs the lowest free CPU of each core."""
    by_core: dict[int, list[int]] = {}
    for c in sorted(available):
        by_core.setdefault(topo.by_id[c].core, []).append(c)
    if policy == FULL_PCPUS:
        return frozenset(c for cpus in by_core.values() if len(cpus) == topo.cpus_per_core for c in cpus)
    if policy == SPREAD_BY_PCPUS:
        return frozenset(cpus[0] for cpus in by_core.values())
    return available


@dataclass(frozen=True)
class Allocation:
    cpus: tuple[int, ...] = ()
    reason: str = ""  # why none fits ("" when allocated)

    @property
    def ok(self) -> bool:
        return not self.reason


def allocate(topo: Topology, available: frozenset[int], need: int, policy: str, required: bool, strategy: str,
             numa_policy: str = "", exclusive: str = "", held_cores: Iterable[int] = (),
             held_nodes: Iterable[int] = ()) -> Allocation:  # fmt: skip
    """The CPUs the pod gets on this node, or why it cannot: a required policy must be met
    (FullPCPUs in whole cores, SpreadByPCPUs one CPU a core), and under the NUMA topology policy
    SingleNUMANode the CPUs sit on one NUMA node, under Restricted on as few NUMA nodes as the
    request needs at the least (ceil(need / CPUs per NUMA node))."""
    if required and policy == FULL_PCPUS and need % max(topo.cpus_per_core, 1):
        return Allocation(reason=REASON_SMT)
    pool = _restrict(topo, available, policy) if required else available

    def take(cpus: frozenset[int]) -> list[int] | None:
        got = take_cpus(topo, cpus, need, policy, strategy, exclusive, held_cores, held_nodes)
        if got is not None and required and not (whole_cores(topo, got) if policy == FULL_PCPUS
                                                 else one_per_core(topo, got)):  # fmt: skip
            return None
        return got

    got = take(pool)
    if got is None:
        return Allocation(reason=(f"node(s) insufficient CPUs to satisfy required cpu bind policy {policy}"
                                  if required and len(pool) < len(available) else REASON_NOT_ENOUGH))  # fmt: skip
    if numa_policy not in ("SingleNUMANode", "Restricted"):
        return Allocation(tuple(got))
    per_node = max(topo.cpus_per_node, 1)
    most = 1 if numa_policy == "SingleNUMANode" else -(-need // per_node)
    if len(topo.nodes_of(got)) <= most:
        return Allocation(tuple(got))
    # a placement on the fewest NUMA nodes: each set of that many nodes, fullest first under
    # MostAllocated (emptiest first under LeastAllocated)
    nodes = topo.numa_nodes
    free = {n: len(pool & set(cpus)) for n, cpus in nodes.items()}
    combos = sorted(itertools.combinations(sorted(nodes), most),
                    key=lambda ns: ((1 if strategy == MOST_ALLOCATED else -1) * sum(free[n] for n in ns), ns))
    for ns in combos:
        if sum(free[n] for n in ns) < need:
            continue
        within = pool & frozenset(c for n in ns for c in nodes[n])
        got = take(within)
        if got is not None:
            return Allocation(tuple(got))
    return Allocation(reason=REASON_NUMA)
