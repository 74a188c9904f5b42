"""Koordinator's LoadAwareScheduling as an extender: filter on estimated usage, score least-used.

Two halves. `node_load` turns one node's NodeMetric and assigned pods into the "existing load"
numbers (scalar, run when that node changes). `filter_codes` and `scores` judge all candidate
nodes of one request at once over the `NodeTable` columns.

Estimated used = NodeMetric usage + for each pod assigned to the node after (metric update
time - report interval), or missing from the metric's pods, max(0, estimate - reported usage).
That window keeps a node whose metrics do not show its new pods yet from being flooded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from koordcommon.resources import ZERO, Resources
from koordcommon.schemas import NodeMetric

from .table import NodeTable

AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")

# Filter outcome codes, one per candidate; reasons are Koordinator's messages.
PASS = 0
EXPIRED = 1
CPU_OVER = 2
MEM_OVER = 3
CPU_AGG_OVER = 4
MEM_AGG_OVER = 5
REASONS = {
    EXPIRED: "node(s) nodeMetric expired",
    CPU_OVER: "node(s) cpu usage exceed threshold",
    MEM_OVER: "node(s) memory usage exceed threshold",
    CPU_AGG_OVER: "node(s) cpu aggregated usage exceed threshold",
    MEM_AGG_OVER: "node(s) memory aggregated usage exceed threshold",
}


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Percent of allocatable per resource; 0 turns that resource's check off."""

    cpu: int = 0
    memory: int = 0

    @property
    def enabled(self) -> bool:
        return self.cpu > 0 or self.memory > 0


@dataclass(frozen=True, slots=True)
class AggregatedArgs:
    usage_thresholds: Thresholds = Thresholds()
    usage_aggregation_type: str = ""  # avg | p50 | p90 | p95 | p99; "" = not configured
    usage_aggregated_duration_s: int = 0  # 0 = the longest window that has data
    score_aggregation_type: str = ""
    score_aggregated_duration_s: int = 0

    @property
    def filter_enabled(self) -> bool:
        return self.usage_thresholds.enabled and bool(self.usage_aggregation_type)

    @property
    def score_enabled(self) -> bool:
        return bool(self.score_aggregation_type)


@dataclass(frozen=True, slots=True)
class LoadAwareArgs:
    filter_expired_node_metrics: bool = True
    node_metric_expiration_s: int = 180
    enable_schedule_when_node_metrics_expired: bool = False
    usage_thresholds: Thresholds = Thresholds(65, 95)
    prod_usage_thresholds: Thresholds = Thresholds()
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    cpu_weight: int = 1
    memory_weight: int = 1
    dominant_resource_weight: int = 0
    estimated_seconds_after_pod_scheduled: int | None = None
    aggregated: AggregatedArgs = AggregatedArgs()


@dataclass(slots=True)
class AssignedPod:
    """A pod bound (or about to be bound) to a node, as the assigned-pod cache holds it."""

    key: str  # namespace/name: NodeMetric reports pod usage by it
    estimate: Resources
    assigned_ms: int
    is_prod: bool = False
    requests: Resources = ZERO  # native cpu/memory requests (reservation accounting)
    batch: Resources = ZERO  # batch-cpu / batch-memory requests
    deadline_ms: int | None = None  # estimate at least until then (estimatedSecondsAfterPodScheduled)
    assumed: bool = False  # placed by our prioritize answer, not yet seen bound


@dataclass(slots=True)
class NodeLoad:
    """The existing load of one node, before the incoming pod is added."""

    has_metric: bool = False
    update_ms: int = 0
    exist: Resources = ZERO
    prod: Resources = ZERO
    agg_filter: Resources = ZERO
    agg_score: Resources = ZERO
    pending: list[str] = field(default_factory=list)  # pods whose estimate was added


def _aggregated(metric: NodeMetric, kind: str, duration_s: int) -> Resources | None:
    """The aggregated node usage of type `kind` over `duration_s` (0: longest window with data)."""
    best: tuple[int, Resources] | None = None
    for agg in metric.aggregated_node_usages:
        value = getattr(agg, kind, None)
        if value is None:
            continue
        if duration_s and agg.duration_s == duration_s:
            return value
        if not duration_s and (best is None or agg.duration_s > best[0]):
            best = (agg.duration_s, value)
    return best[1] if best else None


def node_load(metric: NodeMetric | None, pods, args: LoadAwareArgs) -> NodeLoad:
    """Koordinator's podAssignCache.addPod over every assigned pod, then the existing-load sums."""
    if metric is None:
        return NodeLoad()
    update = metric.update_time_ms
    window_start = update - metric.report_interval_s * 1000
    usage: dict[str, Resources] = {}
    reported_prod: set[str] = set()
    for pm in metric.pods:
        key = f"{pm.namespace}/{pm.name}"
        usage[key] = pm.usage
        if pm.priority_class == "koord-prod" or pm.priority_class == "":
            reported_prod.add(key)
    node_delta = ZERO
    node_estimated = ZERO
    prod_usage = metric.system_usage if args.prod_usage_include_sys else ZERO
    prod_delta = ZERO
    pending = []
    for p in pods:
        u = usage.get(p.key)
        active_prod = p.is_prod and u is not None and p.key in reported_prod
        if active_prod:
            prod_usage = prod_usage + u
        e = p.estimate
        should = u is None or p.assigned_ms > window_start or (p.deadline_ms is not None and p.deadline_ms > update)
        if should:
            node_delta = node_delta + (e - (u or ZERO)).clamp0()
            pending.append(p.key)
        node_estimated = node_estimated + e
        if p.is_prod:
            pu = u
            if not active_prod and u is not None:
                pu, should = None, True
            if should:
                prod_delta = prod_delta + (e - (pu or ZERO)).clamp0()
    exist = metric.node_usage + node_delta

    def agg(kind: str, duration_s: int) -> Resources:
        if not kind:
            return exist
        base = _aggregated(metric, kind, duration_s)
        if base is None:
            return exist if duration_s == 0 else node_estimated
        return base + node_delta

    a = args.aggregated
    return NodeLoad(
        has_metric=True,
        update_ms=update,
        exist=exist,
        prod=prod_usage + prod_delta,
        agg_filter=agg(a.usage_aggregation_type if a.filter_enabled else "", a.usage_aggregated_duration_s),
        agg_score=agg(a.score_aggregation_type, a.score_aggregated_duration_s),
        pending=pending,
    )


def write_load(table: NodeTable, r: int, load: NodeLoad) -> None:
    table.set(
        r,
        has_metric=load.has_metric,
        update_ms=load.update_ms,
        exist_cpu=load.exist.cpu_milli,
        exist_mem=load.exist.memory_bytes,
        prod_cpu=load.prod.cpu_milli,
        prod_mem=load.prod.memory_bytes,
        aggf_cpu=load.agg_filter.cpu_milli,
        aggf_mem=load.agg_filter.memory_bytes,
        aggs_cpu=load.agg_score.cpu_milli,
        aggs_mem=load.agg_score.memory_bytes,
    )


# --------------------------------------------------------------------------- per-node thresholds

ANNOTATION_USAGE_THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"


def node_thresholds(annotation: dict | None, args: LoadAwareArgs) -> tuple[Thresholds, Thresholds, Thresholds]:
    """(usage, prod, aggregated) thresholds of one node: its annotation overrides the args.

    The annotation is Koordinator's JSON `{"usageThresholds": {"cpu": 70}, "prodUsageThresholds":
    {...}, "aggregatedUsage": {"usageThresholds": {...}, ...}}`; empty parts keep the args.
    """
    usage, prod, agg = args.usage_thresholds, args.prod_usage_thresholds, args.aggregated.usage_thresholds
    if not annotation:
        return usage, prod, agg

    def read(d, fallback: Thresholds) -> Thresholds:
        if not isinstance(d, dict) or not d:
            return fallback
        return Thresholds(_pct(d.get("cpu")), _pct(d.get("memory")))

    usage = read(annotation.get("usageThresholds"), usage)
    prod = read(annotation.get("prodUsageThresholds"), prod)
    agg_part = annotation.get("aggregatedUsage")
    if isinstance(agg_part, dict):
        agg = read(agg_part.get("usageThresholds"), agg)
    return usage, prod, agg


def _pct(v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0
    return max(0, min(100, int(v)))


# --------------------------------------------------------------------------- request-time judgement


def _usage_percent(used: np.ndarray, alloc: np.ndarray) -> np.ndarray:
    """round(used / allocatable x 100) as Koordinator computes it (float64, halves up)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.floor(used / np.where(alloc > 0, alloc, 1) * 100 + 0.5)


def expired_mask(t: NodeTable, ix: np.ndarray, now_ms: int, args: LoadAwareArgs) -> np.ndarray:
    """NodeMetric older than nodeMetricExpirationSeconds (now - update >= expiration)."""
    return t.has_metric[ix] & (now_ms - t.update_ms[ix] >= args.node_metric_expiration_s * 1000)


def filter_codes(
    t: NodeTable, ix: np.ndarray, est: Resources, prod_pod: bool, now_ms: int, args: LoadAwareArgs
) -> np.ndarray:
    """One code per candidate row: PASS, EXPIRED or the first resource over its threshold.

    Nodes without a NodeMetric pass (load awareness is skipped, as in Koordinator).
    """
    n = len(ix)
    codes = np.zeros(n, dtype=np.int8)
    has = t.has_metric[ix]
    if not has.any():
        return codes
    alloc_cpu, alloc_mem = t.alloc_cpu[ix], t.alloc_mem[ix]
    if args.filter_expired_node_metrics:
        expired = expired_mask(t, ix, now_ms, args)
        live = has & ~expired
    else:
        expired = None
        live = has
    # Which threshold set applies is per node: a node annotation may turn prod thresholds on.
    use_prod = t.has_prod_thr[ix] if prod_pod else None
    if use_prod is not None and not use_prod.any():
        use_prod = None
    use_agg = t.has_agg_thr[ix]
    if use_prod is not None:
        use_agg = use_agg & ~use_prod
    if not use_agg.any():
        use_agg = None
    if use_prod is None and use_agg is None:  # the common case: plain usageThresholds everywhere
        used_cpu, used_mem = t.exist_cpu[ix] + est.cpu_milli, t.exist_mem[ix] + est.memory_bytes
        thr_cpu, thr_mem = t.thr_cpu[ix], t.thr_mem[ix]
    else:
        prod = use_prod if use_prod is not None else np.zeros(n, dtype=bool)
        agg = use_agg if use_agg is not None else np.zeros(n, dtype=bool)
        used_cpu = np.where(prod, t.prod_cpu[ix], np.where(agg, t.aggf_cpu[ix], t.exist_cpu[ix])) + est.cpu_milli
        used_mem = np.where(prod, t.prod_mem[ix], np.where(agg, t.aggf_mem[ix], t.exist_mem[ix])) + est.memory_bytes
        thr_cpu = np.where(prod, t.pthr_cpu[ix], np.where(agg, t.athr_cpu[ix], t.thr_cpu[ix]))
        thr_mem = np.where(prod, t.pthr_mem[ix], np.where(agg, t.athr_mem[ix], t.thr_mem[ix]))
    over_cpu = live & (thr_cpu > 0) & (alloc_cpu > 0) & (_usage_percent(used_cpu, alloc_cpu) > thr_cpu)
    over_mem = live & (thr_mem > 0) & (alloc_mem > 0) & (_usage_percent(used_mem, alloc_mem) > thr_mem)
    # Koordinator checks resources in sorted order (cpu, then memory) and reports the first.
    if use_agg is None:
        codes[over_mem] = MEM_OVER
        codes[over_cpu] = CPU_OVER
    else:
        codes[over_mem] = np.where(use_agg[over_mem], MEM_AGG_OVER, MEM_OVER)
        codes[over_cpu] = np.where(use_agg[over_cpu], CPU_AGG_OVER, CPU_OVER)
    if expired is not None and not args.enable_schedule_when_node_metrics_expired:
        codes[expired] = EXPIRED
    return codes


def scores(
    t: NodeTable, ix: np.ndarray, est: Resources, prod_pod: bool, now_ms: int, args: LoadAwareArgs
) -> tuple[np.ndarray, np.ndarray]:
    """(score 0-100, valid) per candidate: least-used over resourceWeights.

    `sum(w x (capacity - used) x 100 / capacity) / sum(w)` in integers; a node without a
    metric, or whose metric expired, is not valid and scores 0.
    """
    n = len(ix)
    valid = t.has_metric[ix] & ~expired_mask(t, ix, now_ms, args)
    wc, wm, dw = args.cpu_weight, args.memory_weight, args.dominant_resource_weight
    if wc + wm + dw == 0 or not valid.any():
        return np.zeros(n, dtype=np.int64), valid
    if prod_pod and args.score_according_prod_usage:
        base_cpu, base_mem = t.prod_cpu[ix], t.prod_mem[ix]
    elif args.aggregated.score_enabled:
        base_cpu, base_mem = t.aggs_cpu[ix], t.aggs_mem[ix]
    else:
        base_cpu, base_mem = t.exist_cpu[ix], t.exist_mem[ix]
    s_cpu = _least_used(base_cpu + est.cpu_milli, t.alloc_cpu[ix])
    s_mem = _least_used(base_mem + est.memory_bytes, t.alloc_mem[ix])
    total = s_cpu * wc + s_mem * wm
    if dw:
        total = total + np.minimum(s_cpu, s_mem) * dw
    out = total // (wc + wm + dw)
    out[~valid] = 0
    return out, valid


def _least_used(used: np.ndarray, cap: np.ndarray) -> np.ndarray:
    ok = (cap > 0) & (used <= cap)
    safe = np.where(cap > 0, cap, 1)
    return np.where(ok, (cap - used) * 100 // safe, 0)


# --------------------------------------------------------------------------- 0-100 -> 0-10

SCORE_MAPPINGS = ("range", "absolute")


def to_extender_scores(score: np.ndarray, valid: np.ndarray, mapping: str = "range", min_span: int = 10) -> np.ndarray:
    """Map 0-100 scores to kube-scheduler's extender range 0-10.

    `absolute`: round(score / 10). Simple, but nodes 1-9 points apart tie, so among similar
    nodes the extender stops steering.
    `range` (default): the best candidate gets 10 and the others lose one level per
    `span / 10` points below it, with span = max(best - worst, min_span). Order is kept as far
    as 11 levels allow; when candidates are within `min_span` points, one point is one level,
    so tiny differences are not blown up to the whole range. Invalid nodes (no or expired
    metric) get 0.
    """
    out = np.zeros(len(score), dtype=np.int64)
    if not valid.any():
        return out
    if mapping == "absolute":
        out[valid] = (score[valid] * 10 + 50) // 100
        return out
    v = score[valid]
    hi, lo = int(v.max()), int(v.min())
    span = max(hi - lo, min_span, 1)
    down = ((hi - v) * 20 + span) // (2 * span)  # round((hi - s) x 10 / span), halves up
    out[valid] = np.maximum(10 - down, 0)
    return out
