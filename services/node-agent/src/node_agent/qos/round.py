"""One QoS round of one node, as plain data: given this node's state and NodeSLO, what would QoS do?

No bus, no real cgroups, no clock of its own: everything comes in as arguments, so a what-if
replay can drive it on simulated time as fast as it likes. What a node carries from one round
to the next (the BE and node cpu history CPU eviction averages over, the cool-down clocks, the
pods whose eviction was requested, the CPU burst limiters) is a `QoSMemory` the caller keeps
per node.

    files = MemoryCgroupFiles({"cpuset.cpus": format_cpuset(range(cores))})  # simulated cgroups
    memory = QoSMemory(started_ms=t0)
    state = QoSState(node=..., now_ms=t, ..., read=files.read)
    plan = plan_round(state, slo, memory, cap_be_usage=True)    # list[CgroupWrite | Eviction]

`plan` is what QoS would do this round; nothing has changed yet. To carry it out as the agent
does: `events = await Executor(files, node, cluster=port, limiter=TokenBucket(rate, clock=sim_s))
.apply(plan, memory, t)` writes the cgroups (into `files`), evicts through the cluster port, and
records the requests in `memory` (pending pods, restarted cool-downs). A later round's state
reads the written values back through `files.read`.

`NodeQoS.simulated_node(name, capacity, t0, cluster=port, limiter=...)` (node.py) wires the same
for a simulated node and builds the state from PodInfos and a NodeRound of usage:
`await nq.round(nq.state(t, capacity, allocatable, pods, NodeRound(node=..., pods=...)))`.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field

from koordcommon.schemas import NodeSLOSpec

from .model import CFS_PERIOD_US, Action, BESample, BurstLimiter, Eviction, QoSState
from .strategies import cpu_burst, plan_all
from .strategies.cpuset import parse_cpuset

BE_HISTORY_S = 600


@dataclass
class QoSMemory:
    """What QoS remembers of one node between rounds."""

    started_ms: int = 0  # when QoS began looking after the node (CPU eviction waits a cool-down from it)
    be_history: deque[BESample] = field(default_factory=deque)
    last_evict_ms: dict[str, int] = field(default_factory=dict)  # cool-down clock -> ms of its last eviction
    pending: dict[str, int] = field(default_factory=dict)  # uid -> ms of the eviction request
    burst_limiters: dict[str, BurstLimiter] = field(default_factory=dict)  # container dir -> cfs quota budget

    def observe(self, sample: BESample, alive: set[str]) -> None:
        """Keep this round's BE sample (10 minutes of them) and forget requests whose pod is gone."""
        self.be_history.append(sample)
        while self.be_history and self.be_history[0].ts_ms < sample.ts_ms - BE_HISTORY_S * 1000:
            self.be_history.popleft()
        self.pending = {u: t for u, t in self.pending.items() if u in alive}

    def evicted(self, ev: Eviction, t_ms: int) -> None:
        """An eviction was requested: the pod is pending and its cool-down clock restarts."""
        self.pending[ev.uid] = t_ms
        self.last_evict_ms[ev.cool_down] = t_ms


def be_limit(state: QoSState) -> int:
    """The BE cgroup's real CPU limit (milli-cores): its cpuset, capped by its cfs quota when set."""
    cpus = parse_cpuset(state.read(state.be_dir, "cpuset.cpus") or "") or [p.cpu for p in state.processors]
    limit = len(cpus) * 1000
    try:
        quota = int(state.read(state.be_dir, "cpu.cfs_quota_us") or -1)
    except ValueError:
        quota = -1
    if quota != -1:
        limit = min(limit, quota * 1000 // CFS_PERIOD_US)
    return limit


def be_sample(state: QoSState, cap_usage: bool = False) -> BESample:
    """node_be for one round: usage of the besteffort dir, its real limit and the BE requests."""
    usage = sum(p.usage.cpu_milli for p in state.pods if p.kube_best_effort and p.usage is not None)
    usage += sum(h.usage.cpu_milli for h in state.host_apps if h.base == "KubepodsBesteffort" and h.usage is not None)
    limit = be_limit(state)
    request = sum(max(p.info.batch_requests.cpu_milli, 0) for p in state.pods if p.is_be)
    if cap_usage:  # simulated cgroups: BE pods cannot use more than their cpuset / quota grants
        usage = min(usage, limit)
    node_cpu = state.node_usage.cpu_milli if state.node_usage is not None else None
    return BESample(state.now_ms, usage, limit, request, node_cpu)


def plan_round(state: QoSState, slo: NodeSLOSpec | None, memory: QoSMemory, cap_be_usage: bool = False) -> list[Action]:
    """Record the round in `memory` and return what every strategy plans (nothing without a NodeSLO).

    `state` is taken as the moment's view; its history and cool-down fields are filled from
    `memory`. `cap_be_usage`: the usage is simulated and may exceed what the BE cgroups grant.
    """
    memory.observe(be_sample(state, cap_be_usage), {p.info.uid for p in state.pods})
    memory.burst_limiters = cpu_burst.advance_limiters(state, slo, memory.burst_limiters)
    if slo is None:
        return []
    # a shallow copy, so the caller's state stays the moment's view (dataclasses.replace would
    # do the same through __init__, at several times the cost on every node's every round)
    state = copy.copy(state)
    state.be_history = list(memory.be_history)
    state.last_evict_ms = dict(memory.last_evict_ms)
    state.started_ms = memory.started_ms
    state.pending_evictions = frozenset(memory.pending)
    state.burst_limiters = dict(memory.burst_limiters)
    return plan_all(state, slo)
