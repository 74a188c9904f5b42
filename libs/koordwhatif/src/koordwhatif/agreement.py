"""Do the fast and the real replay agree? Each figure of a replay's summary (`Ledger.summary`),
compared within a tolerance that says why the two modes may differ by that much.

The two modes run the same code on the same trace, tick grid and configuration; what differs
is that the real mode's services are processes acting on their own timers over NATS:

* tick alignment: the fast mode does every step at the tick's instant in a fixed order. The
  real mode puts the batch steps and the placements on the tick grid, but the slo-controller's
  resync (every 30 s of cluster time) rewrites a node's status when updateTimeThresholdSeconds
  has passed, between ticks, where the fast mode (no resync) writes at the next NodeMetric;
  the descheduler's rounds fall anywhere within a tick.
* timing jitter: a process held up (CPU contention) acts part of a tick late; one node's
  status is then seen a tick late, or a placement misses a round (`RealRunResult.late`).
* whole numbers: the agents report usage in whole milli-cores; the fast mode keeps floats.
* divergence: once one eviction or placement differs, what runs where afterwards differs too,
  more so the longer the run and the more pods are evicted. The batch figures therefore get
  relative tolerances, and the agreement test runs a short trace.

The tolerances below were set from these mechanisms and checked against 10 real runs of the
agreement test's trace at 40x (3 Alibaba 2018 machines, 18 minutes, a configuration that
suppresses and evicts) on a 2-core machine, two of them with a busy loop taking one core: all
agreed; the largest difference measured is noted with each. A deliberately different
configuration moves the figures it governs far beyond them (libs/koordwhatif/tests/test_real.py
shows three).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Tolerance:
    figure: str  # a dotted path into the summary; a last part ending in * sums the keys it starts
    abs: float  # allowed |fast - real|, in the figure's unit ...
    rel: float = 0.0  # ... plus this share of the larger of the two
    why: str = ""

    def allowed(self, a: float, b: float) -> float:
        return self.abs + self.rel * max(abs(a), abs(b))


@dataclass(frozen=True)
class Disagreement:
    figure: str
    fast: float | None
    real: float | None
    allowed: float
    why: str

    def __str__(self) -> str:
        if self.fast is None or self.real is None or math.isnan(self.fast) != math.isnan(self.real):
            return f"{self.figure}: fast {self.fast}, real {self.real} (one has no value)"
        return (f"{self.figure}: fast {self.fast:.6g}, real {self.real:.6g}, differ by "
                f"{abs(self.fast - self.real):.3g} > {self.allowed:.3g} allowed ({self.why})")


_TICK = "one node-tick"
TOLERANCES: tuple[Tolerance, ...] = (
    Tolerance("node_minutes", 0, why="the same tick grid"),
    Tolerance("online_risk.risk_threshold_pct", 0, why="the report's reference, the same in both modes"),
    Tolerance("online_risk.risk_tolerance_pct", 0, why="the report's reference, the same in both modes"),
    Tolerance("batch_pods.submitted", 0, why="arrivals are a function of the trace and the tick grid alone"),
    Tolerance("online_utilisation_cpu_pct.mean", 0.25,
              why="the online load is the trace's; only whole milli-core samples and the tick an evicted batch pod "
                  "counts as online differ (measured <= 0.002)"),
    Tolerance("online_utilisation_cpu_pct.p95", 0.5, why="as the mean, at one percentile (measured <= 0.005)"),
    Tolerance("reclaimed_cpu_pct.mean", 3.0,
              why=f"{_TICK}'s status seen a tick early or late (a resync write between ticks, a NodeMetric taken "
                  "late) moves the mean by that node's batch share / node-ticks: up to 1.4 on 3 nodes x 18 ticks; "
                  "two such node-ticks are allowed (measured <= 0.03 at 40x; up to 2.6 at 60x, where ticks 2 and 3 "
                  "often ran late)"),
    Tolerance("reclaimed_cpu_pct.p10", 2.0, why="as the mean, at one percentile (measured 0)"),
    Tolerance("reclaimed_cpu_pct.p50", 2.0, why="as the mean, at one percentile (measured 0)"),
    Tolerance("reclaimed_memory_pct.mean", 1.0,
              why=f"as the CPU: {_TICK} of a node's batch memory share (about 20 %) / node-ticks (measured 0)"),
    Tolerance("reclaimed_memory_pct.p10", 1.0, why="as the mean, at one percentile (measured 0)"),
    Tolerance("reclaimed_memory_pct.p50", 1.0, why="as the mean, at one percentile (measured 0)"),
    Tolerance("utilisation_cpu_pct.mean", 1.0, 0.05,
              why="online load (exact) plus batch use (see batch_cpu_used_pct) (measured <= 0.96)"),
    Tolerance("utilisation_cpu_pct.p95", 1.0, 0.05, why="as the mean, at one percentile (measured 0)"),
    Tolerance("utilisation_cpu_pct.stddev_across_nodes", 1.0, 0.10,
              why="batch placed on other nodes once placements diverge (measured <= 0.30)"),
    Tolerance("batch_cpu_used_pct", 0.5, 0.10,
              why="placements and evictions diverge once one differs (measured <= 7.3 %)"),
    Tolerance("batch_cpu_hours_used", 0.2, 0.10, why="as batch_cpu_used_pct (measured <= 7.3 %)"),
    Tolerance("batch_cpu_hours_completed", 0.2, 0.10, why="pods finishing a tick apart at the run's end"),
    Tolerance("be_cpu_seconds_suppressed", 60.0, 0.15,
              why="suppression follows which BE pods run where (measured <= 4.2 %)"),
    Tolerance("batch_pod_hours_held", 0.05, 0.15,
              why="the run time suppression withheld: as be_cpu_seconds_suppressed (measured 1.4 %)"),
    Tolerance("online_risk.node_minutes_over_risk_threshold", 2.0, 0.10,
              why="batch load at the threshold's edge, a tick earlier or later (measured 0)"),
    Tolerance("online_risk.node_minutes_over_risk_threshold_strict", 2.0, 0.10,
              why="as over the risk threshold (measured 0)"),
    Tolerance("online_risk.core_hours_over_risk_threshold", 0.1, 0.10,
              why="as over the risk threshold, weighed by how far over (measured 0)"),
    Tolerance("online_risk.node_minutes_over_own_suppress_threshold", 2.0, 0.10,
              why="as over the risk threshold (measured <= 1)"),
    Tolerance("online_risk.node_minutes_over_cpu_capacity", 2.0, 0.10, why="as over the risk threshold"),
    Tolerance("online_risk.node_minutes_over_memory_capacity", 2.0, 0.10, why="as over the risk threshold"),
    Tolerance("evictions.qos:*", 2.0, 0.10,
              why="one eviction a node and round at most, in both modes; divergence (measured <= 1 of 24)"),
    Tolerance("evictions.descheduler", 2.0, 0.10, why="rounds anywhere within a tick instead of on it"),
    Tolerance("batch_pods.completed", 2.0, 0.10, why="a pod started a tick apart finishes a tick apart"),
    Tolerance("batch_pods.evicted", 2.0, 0.10, why="as the evictions (measured <= 1)"),
    Tolerance("batch_pods.pending_at_end", 3.0, 0.10, why="pods placed a tick apart near the end (measured 0)"),
    Tolerance("queueing_delay_s.p50", 60.0, 0.10, why="one tick of a pod's wait (measured <= 30 s)"),
    Tolerance("queueing_delay_s.p95", 60.0, 0.10, why="one tick of a pod's wait (measured 0)"),
    Tolerance("unschedulable_attempts", 3.0, 0.15, why="attempts follow the placements (measured 0)"),
)


# Summary entries that are not figures to compare, and why.
NOT_COMPARED = {
    "baseline": "whether the run had batch at all: the configuration's, the same in both modes",
    "held_back_by": "each reason's share of the node verdicts against unplaced pods; unschedulable_attempts "
                    "is compared",
}


def leaves(summary: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths of the summary's numbers, NOT_COMPARED left out."""
    out = []
    for k, v in summary.items():
        path = f"{prefix}{k}"
        if path in NOT_COMPARED:
            continue
        if isinstance(v, Mapping):
            out += leaves(v, f"{path}.")
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out.append(path)
    return out


def figure(summary: Mapping[str, Any], path: str) -> float | None:
    """The value at a dotted path of the summary (None when absent); a last part ending in `*`
    sums the values whose keys start with the rest (0 when none)."""
    *parents, last = path.split(".")
    node: Any = summary
    for part in parents:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if not isinstance(node, Mapping):
        return None
    if last.endswith("*"):
        return float(sum(v for k, v in node.items() if str(k).startswith(last[:-1])))
    value = node.get(last)
    return None if value is None else float(value)


def compare(fast: Mapping[str, Any], real: Mapping[str, Any],
            tolerances: Sequence[Tolerance] = TOLERANCES) -> list[Disagreement]:
    """The figures that differ by more than their tolerance (both absent or both NaN agree)."""
    out = []
    for t in tolerances:
        a, b = figure(fast, t.figure), figure(real, t.figure)
        if a is None and b is None:
            continue
        if a is None or b is None or math.isnan(a) != math.isnan(b):
            out.append(Disagreement(t.figure, a, b, t.abs, t.why))
            continue
        if math.isnan(a):
            continue
        allowed = t.allowed(a, b)
        if abs(a - b) > allowed:
            out.append(Disagreement(t.figure, a, b, allowed, t.why))
    return out


__all__ = ["NOT_COMPARED", "TOLERANCES", "Disagreement", "Tolerance", "compare", "figure", "leaves"]
