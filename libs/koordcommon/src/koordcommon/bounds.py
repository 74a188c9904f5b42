"""Value ranges of the bus messages: well-formed but impossible values are refused.

A message can decode perfectly and still be hostile or broken: a sample with usage -1e18 once
wrecked the dashboard's cluster chart, one stamped in the year 4878 pinned a node's "latest"
row. Every consumer of the bus (`Bus.consume`, `Bus.tail`) checks what it decoded here; a
message out of range is dead-lettered with the reason and counted
(`koord_bus_deadletter_total{reason_kind="out_of_range" | "clock_skew"}`), never handed on.

The rules:
* no negative resource anywhere (usage, capacity, allocatable, requests, batch, recommendations);
* a node's capacity at most `MAX_CPU_MILLI` / `MAX_MEMORY_BYTES` (a sane ceiling for one node);
* usage at most `USAGE_CAPACITY_FACTOR` x the node's capacity (node, system, each pod, each
  container); the ceiling above when the capacity is not given;
* a per-node message names the node of its subject (`koord.metrics.n1` carries node n1): with
  the bus permissions this ties a message to the identity that could publish it;
* a measurement's time (NodeMetricSample, NodeMetric) within [-MAX_AGE_S, +MAX_FUTURE_S] of the
  receiver's clock, which is the simulated clock on a simulated cluster;
* windows and durations positive and at most a day;
* a recommendation's target, lower bound and requests within one node's ceiling; its upper
  bound within VPA's MaxResourceAmount (`MAX_RECOMMENDED_AMOUNT`), which is what VPA reports for
  a container with samples but no history yet (+Inf, capped).
"""

from __future__ import annotations

from collections.abc import Iterable

from . import subjects
from .resources import Resources
from .schemas import (
    ContainerRecommendation,
    Event,
    FastMessage,
    Message,
    NodeMetric,
    NodeMetricSample,
    NodeResource,
    NodeSLO,
    Recommendation,
)

MAX_CPU_MILLI = 100_000_000  # 100,000 cores: more than any one machine
MAX_MEMORY_BYTES = 1 << 52  # 4 PiB
USAGE_CAPACITY_FACTOR = 2  # measurement jitter never doubles a node
MAX_FUTURE_S = 300.0  # clock skew tolerated between a producer and a receiver
MAX_AGE_S = 8 * 24 * 3600.0  # older than any stream keeps a message (7 days) plus a day
MAX_WINDOW_S = 24 * 3600
# VPA's model.MaxResourceAmount (milli-cores and bytes alike): the recommender caps every amount
# at it, and an upper bound without history is exactly it.
MAX_RECOMMENDED_AMOUNT = 10**14

OUT_OF_RANGE = "out_of_range"
CLOCK_SKEW = "clock_skew"


class OutOfRange(ValueError):
    """A decoded message whose values cannot be true; `kind` classes it for the counter."""

    def __init__(self, message: str, kind: str = OUT_OF_RANGE) -> None:
        super().__init__(message)
        self.kind = kind


def _resources(where: str, r: Resources | None, ceiling: Resources | None = None) -> None:
    if r is None:
        return
    if r.cpu_milli < 0 or r.memory_bytes < 0:
        raise OutOfRange(f"{where}: negative resource (cpu_milli={r.cpu_milli}, memory_bytes={r.memory_bytes})")
    if ceiling is not None and (r.cpu_milli > ceiling.cpu_milli or r.memory_bytes > ceiling.memory_bytes):
        raise OutOfRange(
            f"{where}: (cpu_milli={r.cpu_milli}, memory_bytes={r.memory_bytes}) over the bound "
            f"(cpu_milli={ceiling.cpu_milli}, memory_bytes={ceiling.memory_bytes})"
        )


_NODE_MAX = Resources(MAX_CPU_MILLI, MAX_MEMORY_BYTES)


def usage_ceiling(capacity: Resources) -> Resources:
    """The most usage a node of this capacity can report (the absolute ceiling when unknown)."""
    cpu = capacity.cpu_milli * USAGE_CAPACITY_FACTOR if capacity.cpu_milli > 0 else MAX_CPU_MILLI
    mem = capacity.memory_bytes * USAGE_CAPACITY_FACTOR if capacity.memory_bytes > 0 else MAX_MEMORY_BYTES
    return Resources(cpu, mem)


def _subject_node(subject: str, node: str, kind: str) -> None:
    if node != subjects.node_of(subject):
        raise OutOfRange(f"{kind} for node {node!r} on the subject of node {subjects.node_of(subject)!r}")


def _measured_at(ts: int, now_ms: int | None, what: str) -> None:
    if now_ms is None:
        return
    if ts > now_ms + MAX_FUTURE_S * 1000:
        raise OutOfRange(f"{what}: ts {ts} is {(ts - now_ms) / 1000:.0f} s ahead of the receiver's clock", CLOCK_SKEW)
    if ts < now_ms - MAX_AGE_S * 1000:
        raise OutOfRange(f"{what}: ts {ts} is {(now_ms - ts) / 86_400_000:.1f} days behind the receiver's clock", CLOCK_SKEW)


def _pods(pods: Iterable, ceiling: Resources) -> None:
    for i, p in enumerate(pods):
        at = f"pods.{i}"
        for name in ("requests", "limits"):
            _resources(f"{at}.{name}", getattr(p, name))
        _resources(f"{at}.usage", p.usage, ceiling)
        _resources(f"{at}.batch_requests", getattr(p, "batch_requests", None))
        for j, c in enumerate(getattr(p, "containers", ())):
            _resources(f"{at}.containers.{j}.usage", c.usage, ceiling)
            _resources(f"{at}.containers.{j}.requests", c.requests)
            _resources(f"{at}.containers.{j}.limits", c.limits)


def _sample(m: NodeMetricSample, subject: str | None, now_ms: int | None) -> None:
    if subject is not None:
        _subject_node(subject, m.node, "NodeMetricSample")
    _measured_at(m.ts, now_ms, "NodeMetricSample")
    if not 0 < m.window_s <= MAX_WINDOW_S:
        raise OutOfRange(f"window_s: {m.window_s} is not within (0, {MAX_WINDOW_S}]")
    _resources("capacity", m.capacity, _NODE_MAX)
    _resources("allocatable", m.allocatable, _NODE_MAX)
    ceiling = usage_ceiling(m.capacity)
    _resources("node_usage", m.node_usage, ceiling)
    _resources("system_usage", m.system_usage, ceiling)
    _pods(m.pods, ceiling)


def _nodemetric(m: NodeMetric, subject: str | None, now_ms: int | None) -> None:
    if subject is not None:
        _subject_node(subject, m.node, "NodeMetric")
    _measured_at(m.ts, now_ms, "NodeMetric")
    for name, value in (("aggregate_duration_s", m.aggregate_duration_s), ("report_interval_s", m.report_interval_s)):
        if not 0 < value <= MAX_WINDOW_S:
            raise OutOfRange(f"{name}: {value} is not within (0, {MAX_WINDOW_S}]")
    _resources("capacity", m.capacity, _NODE_MAX)
    _resources("allocatable", m.allocatable, _NODE_MAX)
    ceiling = usage_ceiling(m.capacity)
    _resources("node_usage", m.node_usage, ceiling)
    _resources("system_usage", m.system_usage, ceiling)
    for agg_name in ("aggregated_node_usages", "aggregated_system_usages"):
        for i, agg in enumerate(getattr(m, agg_name)):
            if not 0 < agg.duration_s <= MAX_WINDOW_S:
                raise OutOfRange(f"{agg_name}.{i}.duration_s: {agg.duration_s} is not within (0, {MAX_WINDOW_S}]")
            for q in ("avg", "p50", "p90", "p95", "p99"):
                _resources(f"{agg_name}.{i}.{q}", getattr(agg, q), ceiling)
    _pods(m.pods, ceiling)
    for i, h in enumerate(m.host_applications):
        _resources(f"host_applications.{i}.usage", h.usage, ceiling)
    _resources("prod_reclaimable", m.prod_reclaimable, ceiling)
    _resources("prod_peak", m.prod_peak, ceiling)


def _noderesource(m: NodeResource, subject: str | None, now_ms: int | None) -> None:
    if subject is not None:
        _subject_node(subject, m.node, "NodeResource")
    _resources("batch", m.batch, _NODE_MAX)
    _resources("mid", m.mid, _NODE_MAX)


def _nodeslo(m: NodeSLO, subject: str | None, now_ms: int | None) -> None:
    t = m.spec.resourceUsedThresholdWithBE
    for name in ("cpuSuppressThresholdPercent", "memoryEvictThresholdPercent"):
        value = getattr(t, name)
        if not 0 <= value <= 100:
            raise OutOfRange(f"spec.resourceUsedThresholdWithBE.{name}: {value} is not a percentage")


_RECOMMENDED_MAX = Resources(MAX_RECOMMENDED_AMOUNT, MAX_RECOMMENDED_AMOUNT)


def _container(where: str, c: ContainerRecommendation) -> None:
    for name in ("target", "lower_bound", "current_requests"):
        _resources(f"{where}.{name}", getattr(c, name), _NODE_MAX)
    _resources(f"{where}.upper_bound", c.upper_bound, _RECOMMENDED_MAX)


def _recommendation(m: Recommendation, subject: str | None, now_ms: int | None) -> None:
    for i, c in enumerate(m.containers):
        _container(f"containers.{i}", c)


def _event(m: Event, subject: str | None, now_ms: int | None) -> None:
    if subject is not None and m.node:
        _subject_node(subject, m.node, "Event")


_RULES = {
    NodeMetricSample: _sample,
    NodeMetric: _nodemetric,
    NodeResource: _noderesource,
    NodeSLO: _nodeslo,
    Recommendation: _recommendation,
    Event: _event,
}


def check(msg: Message | FastMessage, subject: str | None = None, now_ms: int | None = None) -> None:
    """Raise OutOfRange when `msg` holds values that cannot be true. `subject` (un-namespaced)
    ties a per-node message to its node; `now_ms` is the receiver's clock (None: not judged)."""
    rule = _RULES.get(type(msg))
    if rule is not None:
        rule(msg, subject, now_ms)
