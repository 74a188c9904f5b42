"""What a replay observed, tick by tick and pod by pod, and the figures computed from it.

Per tick and node (arrays of shape ticks x nodes): the batch allocatable the node offered (its
status, as kube-scheduler sees it), the CPU and memory the online pods and the batch pods used
(what ran: BestEffort pods held to what CPU suppress granted), the CPU the batch pods asked for,
and the node's CPU suppress threshold. Per batch pod: when it arrived, was queued, started and
ended, the CPU it used and how it ended. Evictions and migrations are counted by cause, and
scheduling attempts that found no node by what each node answered (which resource holds the
batch work back).

The figures (`summary`) are over node-minutes; percentages are of node capacity. Online risk is
judged against one reference threshold for every configuration (`RISK_THRESHOLD_PCT`, the
default configuration's CPU suppress threshold): a configuration that lowers its own suppress
threshold is then credited for the load it keeps off its nodes, not judged by a stricter bar.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from koordsim.jobs import COMPLETED, EVICTED, PENDING, PodLife

# node CPU use above this share of capacity counts as risk to online pods, in every configuration
RISK_THRESHOLD_PCT = 65.0
# ...by more than this (percentage points): CPU suppress never takes BestEffort below Koordinator's
# minimum quota (2000 us a period: 0.02 core), so a node whose online load alone sits exactly at the
# threshold (the Alibaba trace reports whole percent) is 0.02 % over with colocation and harmlessly
# so; the strict count is reported beside it
RISK_TOLERANCE_PCT = 0.1


@dataclass
class Ledger:
    nodes: list[str]
    tick_s: int
    start_ms: int
    capacity_cpu: np.ndarray = field(repr=False)  # per node, milli-cores
    capacity_mem: np.ndarray = field(repr=False)  # per node, bytes
    # (not in the repr: a finished replay's task is printed by asyncio when it ends, and the
    # series of a long replay would take longer to print than to compute)
    rows: dict[str, list[np.ndarray]] = field(default_factory=dict, repr=False)  # series -> one array per tick
    times: list[int] = field(default_factory=list, repr=False)
    pods: dict[str, PodLife] = field(default_factory=dict, repr=False)
    evictions: Counter = field(default_factory=Counter)  # cause -> pods evicted
    held_back: Counter = field(default_factory=Counter)  # why a node refused a batch pod -> node verdicts
    failed_attempts: int = 0  # scheduling attempts that found no node
    SERIES = (
        "batch_alloc_cpu", "batch_alloc_mem",  # what the node offered (status), milli-cores / bytes
        "online_cpu", "online_mem",  # what the online pods used
        "batch_cpu", "batch_mem",  # what the batch pods used (after suppress)
        "batch_cpu_asked",  # what the batch pods asked for
        "suppress_pct",  # the node's CPU suppress threshold (percent; NaN: suppress off)
    )  # fmt: skip

    def __post_init__(self) -> None:
        for s in self.SERIES:
            self.rows.setdefault(s, [])

    def observe(self, t_ms: int, values: dict[str, np.ndarray]) -> None:
        self.times.append(t_ms)
        for s in self.SERIES:
            self.rows[s].append(np.asarray(values[s], dtype=np.float64))

    def unschedulable(self, reasons: dict[str, str]) -> None:
        """A batch pod no node took: each node's reason counts once (a node naming two
        resources counts for both)."""
        self.failed_attempts += 1
        for text in reasons.values():
            for part in {r.strip().removeprefix("node(s) ") for r in text.split(",") if r.strip()}:
                self.held_back[part] += 1

    def series(self, name: str) -> np.ndarray:
        rows = self.rows[name]
        return np.vstack(rows) if rows else np.zeros((0, len(self.nodes)))

    # ------------------------------------------------------------------ figures

    def summary(self, baseline: bool = False) -> dict[str, Any]:
        """The report's figures. `baseline`: this run had no batch (online alone)."""
        ticks = len(self.times)
        node_minutes = ticks * len(self.nodes) * self.tick_s / 60
        cap_c, cap_m = self.capacity_cpu[None, :], self.capacity_mem[None, :]
        online_c, batch_c = self.series("online_cpu"), self.series("batch_cpu")
        online_m, batch_m = self.series("online_mem"), self.series("batch_mem")
        node_c, node_m = online_c + batch_c, online_m + batch_m
        alloc_c = self.series("batch_alloc_cpu") / cap_c * 100
        alloc_m = self.series("batch_alloc_mem") / cap_m * 100
        threshold = self.series("suppress_pct")
        util = node_c / cap_c * 100
        minutes = self.tick_s / 60

        def pct(a: np.ndarray, q: float) -> float:
            return float(np.percentile(a, q)) if a.size else math.nan

        over_own = (util > np.where(np.isnan(threshold), np.inf, threshold)).sum() * minutes
        over_thr = (util > RISK_THRESHOLD_PCT + RISK_TOLERANCE_PCT).sum() * minutes
        over_strict = (util > RISK_THRESHOLD_PCT).sum() * minutes
        excess = np.maximum(node_c - cap_c * RISK_THRESHOLD_PCT / 100, 0).sum() / 1000 * self.tick_s / 3600
        over_cap_c = (node_c > cap_c).sum() * minutes
        over_cap_m = (node_m > cap_m).sum() * minutes
        lives = list(self.pods.values())
        started = [p for p in lives if p.started_ms is not None]
        delays_s = np.array([(p.started_ms - p.queued_ms) / 1000 for p in started]) if started else np.zeros(0)
        done = [p for p in lives if p.outcome == COMPLETED]
        suppressed = np.maximum(self.series("batch_cpu_asked") - batch_c, 0).sum() * self.tick_s / 1000
        per_node_util = util.mean(axis=0) if ticks else np.zeros(len(self.nodes))
        return {
            "node_minutes": node_minutes,
            "reclaimed_cpu_pct": {"mean": _f(alloc_c.mean()) if ticks else math.nan, "p10": pct(alloc_c, 10), "p50": pct(alloc_c, 50)},
            "reclaimed_memory_pct": {"mean": _f(alloc_m.mean()) if ticks else math.nan, "p10": pct(alloc_m, 10), "p50": pct(alloc_m, 50)},
            "batch_cpu_used_pct": _f((batch_c / cap_c * 100).mean()) if ticks else math.nan,
            "batch_cpu_hours_used": _f(batch_c.sum() / 1000 * self.tick_s / 3600),
            "batch_cpu_hours_completed": _f(sum(p.cpu_ms for p in done) / 1000 / 3_600_000),
            # run time CPU suppress withheld from batch pods: they ended (or will end) that much later
            "batch_pod_hours_held": _f(sum(p.held_ms for p in lives) / 3_600_000),
            "batch_pods": {
                "submitted": len({p.key.split("#")[0] for p in lives}),
                "completed": len(done),
                "evicted": sum(1 for p in lives if p.outcome == EVICTED),
                "pending_at_end": sum(1 for p in lives if p.outcome == PENDING),
            },
            "queueing_delay_s": {"p50": pct(delays_s, 50), "p95": pct(delays_s, 95)},
            "online_risk": {
                "risk_threshold_pct": RISK_THRESHOLD_PCT,
                "risk_tolerance_pct": RISK_TOLERANCE_PCT,
                "node_minutes_over_risk_threshold": _f(over_thr),
                "node_minutes_over_risk_threshold_strict": _f(over_strict),
                "core_hours_over_risk_threshold": _f(excess),
                "node_minutes_over_own_suppress_threshold": _f(over_own),
                "node_minutes_over_cpu_capacity": _f(over_cap_c),
                "node_minutes_over_memory_capacity": _f(over_cap_m),
            },
            "be_cpu_seconds_suppressed": _f(suppressed),
            "unschedulable_attempts": self.failed_attempts,
            "held_back_by": _shares(self.held_back),
            "evictions": dict(sorted(self.evictions.items())),
            "utilisation_cpu_pct": {
                "mean": _f(util.mean()) if ticks else math.nan,
                "p95": pct(util, 95),
                "stddev_across_nodes": _f(per_node_util.std()) if ticks else math.nan,
            },
            "online_utilisation_cpu_pct": {
                "mean": _f((online_c / cap_c * 100).mean()) if ticks else math.nan,
                "p95": pct(online_c / cap_c * 100, 95),
            },
            "baseline": baseline,
        }

    def hourly(self) -> dict[str, Any]:
        """Per node and hour: capacity, offered batch, online and batch use (the report's bands)."""
        per_hour = max(1, 3600 // self.tick_s)
        out: dict[str, Any] = {"hours": [], "nodes": self.nodes}
        n = len(self.times) // per_hour
        for name in ("batch_alloc_cpu", "online_cpu", "batch_cpu"):
            a = self.series(name)[: n * per_hour]
            out[name] = (a.reshape(n, per_hour, -1).mean(axis=1) if n else a[:0]).round(1).tolist()
        out["hours"] = [self.times[i * per_hour] for i in range(n)]
        out["capacity_cpu"] = self.capacity_cpu.tolist()
        return out


def _shares(counts: Counter, top: int = 4) -> dict[str, float]:
    """The most frequent reasons, each as a share (0-1) of all node verdicts."""
    total = sum(counts.values())
    return {k: round(v / total, 4) for k, v in counts.most_common(top)} if total else {}


def _f(x: float) -> float:
    return float(x)
