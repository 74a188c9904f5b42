"""Koordinator's LoadAwareScheduling: filter on estimated usage, score least-used.

Estimated used = NodeMetric usage + for each pod assigned to the node after (metric update
time - report interval), or missing from the metric's pods, max(0, estimate - reported usage).
That window keeps a node whose metrics do not show its new pods yet from being flooded.

A node fails when round(estimated used + the pod's estimate) / allocatable x 100 exceeds its
threshold (usageThresholds, or prodUsageThresholds over prod usage for prod pods, or the
aggregated thresholds over a NodeMetric percentile); a NodeMetric older than
nodeMetricExpirationSeconds fails it ("node(s) nodeMetric expired"). A node without a
NodeMetric passes and scores nothing, as in Koordinator.

Per node the plugin keeps, for each threshold set, the estimate at which the node would fail
(`first_over` folds Koordinator's rounding into one integer), so a request compares each
candidate's limit with the pod's estimate; scores are computed over the free capacity.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from koordcommon.cpus import json_annotation
from koordcommon.durations import DurationError, parse_duration_ms
from koordcommon.model import is_prod
from koordcommon.resources import ZERO, Resources
from koordcommon.schemas import NodeMetric

from ..framework import NO_SCORE, ColumnPlugin, Columns, NodeView, PodInfo, Verdict, amounts

NAME = "LoadAwareScheduling"
AGGREGATION_TYPES = ("avg", "p50", "p90", "p95", "p99")
ANNOTATION_USAGE_THRESHOLDS = "scheduling.koordinator.sh/usage-thresholds"
NEVER = int(np.iinfo(np.int64).max)  # a limit that is never reached, a time that never comes

# Filter codes; reasons are Koordinator's messages.
EXPIRED, CPU_OVER, MEM_OVER, CPU_AGG_OVER, MEM_AGG_OVER = 1, 2, 3, 4, 5
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
    estimated_seconds_after_initialized: int | None = None
    aggregated: AggregatedArgs = AggregatedArgs()


ANNOTATION_SECONDS_AFTER_SCHEDULED = "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
ANNOTATION_SECONDS_AFTER_INITIALIZED = "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"


def _seconds(pod, annotation: str, configured: int | None, allow_customize: bool) -> int:
    """A pod's estimation window: its annotation when customisation is allowed, else the setting."""
    if allow_customize and (raw := pod.annotations.get(annotation)):
        try:
            return max(int(raw), 0)
        except ValueError:
            pass  # a malformed annotation overrides nothing
    return configured or 0


def estimation_deadline(pod, assigned_ms: int, args: LoadAwareArgs, allow_customize: bool = False) -> int | None:
    """Until when a pod's estimate counts in full whatever its metric says (Koordinator's
    estimatedDeadline): from its Initialized condition by estimatedSecondsAfterInitialized when
    set and the pod is initialized, else from its assignment by estimatedSecondsAfterPodScheduled."""
    after_init = _seconds(pod, ANNOTATION_SECONDS_AFTER_INITIALIZED, args.estimated_seconds_after_initialized, allow_customize)
    if after_init > 0 and pod.initialized_ms:
        return pod.initialized_ms + after_init * 1000
    after_scheduled = _seconds(
        pod, ANNOTATION_SECONDS_AFTER_SCHEDULED, args.estimated_seconds_after_pod_scheduled, allow_customize
    )
    return assigned_ms + after_scheduled * 1000 if after_scheduled > 0 else None


# --------------------------------------------------------------------------- a node's existing load


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


def node_load(
    metric: NodeMetric | None, pods, args: LoadAwareArgs, filter_aggregation: tuple[str, int] | None = None
) -> NodeLoad:
    """Koordinator's podAssignCache.addPod over every assigned pod, then the existing-load sums.

    `filter_aggregation` is the (type, duration) the node's filter judges aggregated usage by,
    when its profile has one (None: the arguments' own, when configured)."""
    if metric is None:
        return NodeLoad()
    update = metric.update_time_ms
    window_start = update - metric.report_interval_s * 1000
    usage: dict[str, Resources] = {}
    reported_prod: set[str] = set()
    for pm in metric.pods:
        key = f"{pm.namespace}/{pm.name}"
        usage[key] = pm.usage
        if is_prod(pm.priority_class):
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
    if filter_aggregation is None:
        filter_aggregation = (a.usage_aggregation_type, a.usage_aggregated_duration_s) if a.filter_enabled else ("", 0)
    return NodeLoad(
        has_metric=True,
        update_ms=update,
        exist=exist,
        prod=prod_usage + prod_delta,
        agg_filter=agg(*filter_aggregation),
        agg_score=agg(a.score_aggregation_type, a.score_aggregated_duration_s),
        pending=pending,
    )


# --------------------------------------------------------------------------- per-node thresholds


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """The thresholds one node is judged by: the arguments, or its annotation's overrides."""

    usage: Thresholds
    prod: Thresholds
    aggregated: Thresholds = Thresholds()  # enabled only together with an aggregation type
    aggregation_type: str = ""
    aggregated_duration_s: int = 0


def node_profile(annotation: dict | None, args: LoadAwareArgs) -> NodeProfile:
    """Koordinator's node usage-thresholds annotation over the arguments.

    The annotation is `{"usageThresholds": {"cpu": 70}, "prodUsageThresholds": {...},
    "aggregatedUsage": {"usageThresholds": {...}, "usageAggregationType": "p95",
    "usageAggregatedDuration": "5m"}}`; empty parts keep the arguments, and `aggregatedUsage`
    counts only with both thresholds and a type (then it turns the aggregated filter on for this
    node even when the arguments configure none).
    """
    a = args.aggregated
    if a.filter_enabled:
        agg = (a.usage_thresholds, a.usage_aggregation_type, a.usage_aggregated_duration_s)
    else:
        agg = (Thresholds(), "", 0)
    usage, prod = args.usage_thresholds, args.prod_usage_thresholds
    if annotation:

        def read(d, fallback: Thresholds) -> Thresholds:
            if not isinstance(d, dict) or not d:
                return fallback
            return Thresholds(_pct(d.get("cpu")), _pct(d.get("memory")))

        usage = read(annotation.get("usageThresholds"), usage)
        prod = read(annotation.get("prodUsageThresholds"), prod)
        part = annotation.get("aggregatedUsage")
        if isinstance(part, dict):
            thr = read(part.get("usageThresholds"), Thresholds())
            kind = part.get("usageAggregationType")
            if thr.enabled and kind in AGGREGATION_TYPES:
                agg = (thr, kind, _duration_s(part.get("usageAggregatedDuration")))
    return NodeProfile(usage, prod, *agg)


def _duration_s(v) -> int:
    """A Go duration ("5m"); anything else means "the longest window with data" (0)."""
    if not isinstance(v, str) or not v:
        return 0
    try:
        return max(parse_duration_ms(v) // 1000, 0)
    except DurationError:
        return 0


def _pct(v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return 0
    return max(0, min(100, int(v)))


_RESOURCES = {"cpu": None, "memory": None}
# What of the annotation is honoured; any other field (a threshold on another resource too) is named in a warning.
USAGE_THRESHOLDS_SHAPE = {
    "usageThresholds": _RESOURCES, "prodUsageThresholds": _RESOURCES,
    "aggregatedUsage": {"usageThresholds": _RESOURCES, "usageAggregationType": None, "usageAggregatedDuration": None},
}


def _annotation(view: NodeView) -> dict | None:
    if view.record is None:
        return None
    return json_annotation(view.record.annotations, ANNOTATION_USAGE_THRESHOLDS, USAGE_THRESHOLDS_SHAPE)


# --------------------------------------------------------------------------- the percent check


def usage_percent(used: int, alloc: int) -> int:
    """round(used / allocatable x 100) as Koordinator computes it (float64, halves up)."""
    return math.floor(used / alloc * 100 + 0.5)


@functools.lru_cache(maxsize=4096)  # a node's allocatable and thresholds rarely change; its load does
def first_over(alloc: int, threshold: int) -> int:
    """The least usage whose percent of `alloc` exceeds `threshold` (both > 0).

    The percent is monotone in the usage, so "usage + estimate >= first_over" is exactly
    "usage_percent(usage + estimate) > threshold"; the float estimate is corrected by a step or
    two so that rounding at the boundary agrees with the percent maths.
    """
    x = max(0, math.ceil((threshold + 0.5) * alloc / 100))
    while x > 0 and usage_percent(x - 1, alloc) > threshold:
        x -= 1
    while usage_percent(x, alloc) <= threshold:
        x += 1
    return x


def headroom(used: int, alloc: int, threshold: int) -> int:
    """The estimate at which a node fails one resource's threshold (NEVER when the check is off)."""
    if threshold <= 0 or alloc <= 0:
        return NEVER
    return first_over(alloc, threshold) - used


# --------------------------------------------------------------------------- the plugin


class LoadAware(ColumnPlugin):
    name = NAME
    weight = 1
    COLUMNS = (
        "lim_cpu", "lim_mem",  # non-prod pods: the estimate at which the node fails its threshold set
        "plim_cpu", "plim_mem",  # prod pods
        "aggregated",  # 1: the non-prod threshold set is the aggregated one; 2: the prod one too
        "free_cpu", "free_mem",  # score, non-prod pods: allocatable - the usage scores are computed over
        "pfree_cpu", "pfree_mem",  # score, prod pods
        "alloc_cpu", "alloc_mem",  # allocatable, 1 where it is 0 (a divisor)
        "expire_at",  # filter: the metric counts as expired from this time (NEVER without a metric)
        "valid_until",  # score: the metric counts until this time (never valid without a metric)
    )  # fmt: skip

    def __init__(self, args: LoadAwareArgs | None = None) -> None:
        super().__init__()
        self.args = args or LoadAwareArgs()

    def load(self, view: NodeView, filter_aggregation: tuple[str, int] | None = None) -> NodeLoad:
        """The node's existing load (also what explanations show)."""
        load = node_load(view.metric, view.pods, self.args, filter_aggregation)
        if view.departed_usage != ZERO:
            # Node usage still holds the departed pods' usage; prod usage sums only the pods left.
            load.exist = (load.exist - view.departed_usage).clamp0()
            load.agg_filter = (load.agg_filter - view.departed_usage).clamp0()
        return load

    def row_values(self, view: NodeView) -> list[int]:
        p = node_profile(_annotation(view), self.args)
        load = self.load(view, (p.aggregation_type, p.aggregated_duration_s))
        return self.row_from(load, p.usage, p.prod, p.aggregated if p.aggregation_type else Thresholds(), view.allocatable)

    def row_from(
        self, load: NodeLoad, usage_thr: Thresholds, prod_thr: Thresholds, agg_thr: Thresholds, allocatable: Resources
    ) -> list[int]:
        """The node's columns from its load and thresholds: which threshold set applies is per
        node (an annotation may turn prod or aggregated ones on)."""
        args = self.args
        alloc_cpu, alloc_mem = allocatable.cpu_milli, allocatable.memory_bytes

        def limits(used: Resources, thr: Thresholds) -> tuple[int, int]:
            return headroom(used.cpu_milli, alloc_cpu, thr.cpu), headroom(used.memory_bytes, alloc_mem, thr.memory)

        if load.has_metric:
            lim = limits(load.agg_filter, agg_thr) if agg_thr.enabled else limits(load.exist, usage_thr)
            plim = limits(load.prod, prod_thr) if prod_thr.enabled else lim
            # a metric whose update time is unknown counts as expired (Koordinator: updateTime nil)
            known = load.update_ms > 0
            expire_at = valid_until = load.update_ms + args.node_metric_expiration_s * 1000 if known else -NEVER
        else:  # load awareness is skipped for a node without a NodeMetric, as in Koordinator
            lim = plim = (NEVER, NEVER)
            expire_at, valid_until = NEVER, -NEVER
        base = load.agg_score if args.aggregated.score_enabled else load.exist
        prod_base = load.prod if args.score_according_prod_usage else base
        aggregated = (1 if agg_thr.enabled else 0) + (1 if agg_thr.enabled and not prod_thr.enabled else 0)
        return [
            *lim,
            *plim,
            aggregated,
            alloc_cpu - base.cpu_milli,
            alloc_mem - base.memory_bytes,
            alloc_cpu - prod_base.cpu_milli,
            alloc_mem - prod_base.memory_bytes,
            alloc_cpu if alloc_cpu > 0 else 1,
            alloc_mem if alloc_mem > 0 else 1,
            expire_at,
            valid_until,
        ]

    def explain(self, pod: PodInfo, view: NodeView, now_ms: int) -> dict[str, Any]:
        """Estimated usage against the threshold per resource, the metric's age, and the
        least-used score's inputs: what `filter` and `score` judged this node by."""
        args = self.args
        if pod.daemonset:
            return {"note": "DaemonSet pods pass the load checks"}
        p = node_profile(_annotation(view), args)
        load = self.load(view, (p.aggregation_type, p.aggregated_duration_s))
        alloc = view.allocatable
        out: dict[str, Any] = {
            "estimate": amounts(pod.estimate),
            "allocatable": amounts(alloc),
            "threshold_source": "node annotation " + ANNOTATION_USAGE_THRESHOLDS if _annotation(view) else "arguments",
        }
        if not load.has_metric:
            out["note"] = "no NodeMetric for this node: load-aware checks are skipped (as in Koordinator)"
            return out
        age_s = (now_ms - load.update_ms) / 1000 if load.update_ms > 0 else None
        out["metric"] = {"update_ms": load.update_ms, "age_s": age_s, "expiration_s": args.node_metric_expiration_s,
                         "expired": load.update_ms <= 0 or load.update_ms + args.node_metric_expiration_s * 1000 <= now_ms,
                         "filter_expired": args.filter_expired_node_metrics}  # fmt: skip
        if p.aggregation_type and p.aggregated.enabled:
            kind, used, thr = f"aggregated {p.aggregation_type}", load.agg_filter, p.aggregated
        elif pod.is_prod and p.prod.enabled:
            kind, used, thr = "prodUsageThresholds over prod usage", load.prod, p.prod
        else:
            kind, used, thr = "usageThresholds", load.exist, p.usage
        out["judged_by"] = kind
        out["node_usage"] = amounts(view.metric.node_usage) if view.metric is not None else None
        out["pending_estimates"] = len(load.pending)  # pods counted by estimate, not yet in the metric
        for res, u, e, a, t in (
            ("cpu", used.cpu_milli, pod.estimate.cpu_milli, alloc.cpu_milli, thr.cpu),
            ("memory", used.memory_bytes, pod.estimate.memory_bytes, alloc.memory_bytes, thr.memory),
        ):
            pct = usage_percent(u + e, a) if a > 0 else None
            out[res] = {"used": u, "estimate": e, "allocatable": a, "percent": pct, "threshold": t or None,
                        "over": bool(t and pct is not None and pct > t)}  # fmt: skip
        return out

    def filter(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> Verdict:
        """PASS, EXPIRED or the first resource over its threshold (cpu before memory, as
        Koordinator checks resources in sorted order)."""
        c: Columns = store if store is not None else self.columns
        if pod.daemonset:  # Koordinator lets DaemonSet pods through the load checks
            return Verdict.passing(len(rows))
        prefix = "plim" if pod.is_prod else "lim"
        over_cpu = c.take(prefix + "_cpu", rows) <= pod.estimate.cpu_milli
        over_mem = c.take(prefix + "_mem", rows) <= pod.estimate.memory_bytes
        codes = np.where(over_cpu, CPU_OVER, np.where(over_mem, MEM_OVER, 0)).astype(np.int16)
        aggregated = c.take("aggregated", rows) >= (2 if pod.is_prod else 1)
        codes += ((codes > 0) & aggregated) * np.int16(CPU_AGG_OVER - CPU_OVER)  # aggregated = plain + 2
        if self.args.filter_expired_node_metrics:
            expired = c.take("expire_at", rows) <= now_ms
            codes[expired] = 0 if self.args.enable_schedule_when_node_metrics_expired else EXPIRED
        return Verdict(codes, REASONS)

    def score(self, pod: PodInfo, rows: np.ndarray, now_ms: int, store: Any = None) -> np.ndarray | None:
        """Least used: `sum(w x (capacity - used) x 100 / capacity) / sum(w)` in integers, each
        resource's part 0 when used exceeds capacity; NO_SCORE for a node without a metric or
        whose metric expired."""
        c: Columns = store if store is not None else self.columns
        args = self.args
        wc, wm, dw = args.cpu_weight, args.memory_weight, args.dominant_resource_weight
        valid = c.take("valid_until", rows) > now_ms
        if wc + wm + dw == 0:
            return np.where(valid, 0, NO_SCORE)
        prefix = "pfree" if pod.is_prod else "free"
        s_cpu = np.maximum(
            (c.take(prefix + "_cpu", rows) - pod.estimate.cpu_milli) * 100 // c.take("alloc_cpu", rows), 0
        )
        s_mem = np.maximum(
            (c.take(prefix + "_mem", rows) - pod.estimate.memory_bytes) * 100 // c.take("alloc_mem", rows), 0
        )
        total = (s_cpu * wc + s_mem * wm + np.minimum(s_cpu, s_mem) * dw) // (wc + wm + dw)
        return np.where(valid, total, NO_SCORE)
