"""Koordinator's LoadAwareScheduling as an extender: filter on estimated usage, score least-used.

Two halves. `node_load` turns one node's NodeMetric and assigned pods into the "existing load"
numbers (scalar, run when that node changes). `filter_codes` and `scores` judge all candidate
nodes of one request at once over the `NodeTable` columns.

Estimated used = NodeMetric usage + for each pod assigned to the node after (metric update
time - report interval), or missing from the metric's pods, max(0, estimate - reported usage).
That window keeps a node whose metrics do not show its new pods yet from being flooded.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from koordcommon.resources import ZERO, Resources
from koordcommon.schemas import NodeMetric

from .table import BOOL_INDEX, INT_INDEX, NEVER, NodeTable

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


# --------------------------------------------------------------------------- per-node limits


def usage_percent(used: int, alloc: int) -> int:
    """round(used / allocatable x 100) as Koordinator computes it (float64, halves up)."""
    return math.floor(used / alloc * 100 + 0.5)


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


def _headroom(used: int, alloc: int, threshold: int) -> int:
    """The estimate at which a node fails one resource's threshold (NEVER when the check is off)."""
    if threshold <= 0 or alloc <= 0:
        return NEVER
    return first_over(alloc, threshold) - used


def derive_row(t: NodeTable, r: int, args: LoadAwareArgs) -> None:
    """Recompute row `r`'s derived columns from its base columns (after any of them changed)."""
    ints, bools = t.row_values(r)

    def v(col: str) -> int:
        return ints[INT_INDEX[col]]

    alloc_cpu, alloc_mem = v("alloc_cpu"), v("alloc_mem")
    has_agg, has_prod = bools[BOOL_INDEX["has_agg_thr"]], bools[BOOL_INDEX["has_prod_thr"]]
    if bools[BOOL_INDEX["has_metric"]]:
        plain = (_headroom(v("exist_cpu"), alloc_cpu, v("thr_cpu")), _headroom(v("exist_mem"), alloc_mem, v("thr_mem")))
        agg = (_headroom(v("aggf_cpu"), alloc_cpu, v("athr_cpu")), _headroom(v("aggf_mem"), alloc_mem, v("athr_mem")))
        prod = (_headroom(v("prod_cpu"), alloc_cpu, v("pthr_cpu")), _headroom(v("prod_mem"), alloc_mem, v("pthr_mem")))
        # Which threshold set applies is per node: an annotation may turn prod or aggregated ones on.
        lim = agg if has_agg else plain
        plim = prod if has_prod else lim
        expire_at = valid_until = v("update_ms") + args.node_metric_expiration_s * 1000
    else:  # load awareness is skipped for a node without a NodeMetric, as in Koordinator
        lim = plim = (NEVER, NEVER)
        expire_at, valid_until = NEVER, -NEVER
    if args.aggregated.score_enabled:
        base = (v("aggs_cpu"), v("aggs_mem"))
    else:
        base = (v("exist_cpu"), v("exist_mem"))
    prod_base = (v("prod_cpu"), v("prod_mem")) if args.score_according_prod_usage else base
    # in DERIVED_INT_COLUMNS and DERIVED_BOOL_COLUMNS order
    t.set_derived(
        r,
        [
            lim[0],
            lim[1],
            plim[0],
            plim[1],
            alloc_cpu - base[0],
            alloc_mem - base[1],
            alloc_cpu - prod_base[0],
            alloc_mem - prod_base[1],
            alloc_cpu if alloc_cpu > 0 else 1,
            alloc_mem if alloc_mem > 0 else 1,
            v("bal_cpu") - v("breq_cpu"),
            v("bal_mem") - v("breq_mem"),
            expire_at,
            valid_until,
        ],
        [has_agg, has_agg and not has_prod],
    )
    t.move_kind[r] = (
        bool(bools[BOOL_INDEX["has_metric"]]),
        has_prod,
        lim[0] == NEVER,
        lim[1] == NEVER,
        plim[0] == NEVER,
        plim[1] == NEVER,
    )


def _cols(*names: str) -> list[int]:
    return [INT_INDEX[n] for n in names]


# The columns a pod's estimate moves, per resource: the usage sums up, the headroom down.
_SUMS = _cols("exist_cpu", "aggf_cpu", "aggs_cpu", "exist_mem", "aggf_mem", "aggs_mem")
_PROD = _cols("prod_cpu", "prod_mem")
_LIM, _PLIM = _cols("lim_cpu", "lim_mem"), _cols("plim_cpu", "plim_mem")
_SFREE, _PSFREE = _cols("sfree_cpu", "sfree_mem"), _cols("psfree_cpu", "psfree_mem")
_BATCH = _cols("breq_cpu", "breq_mem", "bfree_cpu", "bfree_mem")


def shift_row(
    t: NodeTable, r: int, delta: Resources, prod_delta: Resources, batch: Resources, args: LoadAwareArgs
) -> None:
    """Add a pod the node's metric does not report, or take it away, without recomputing the row.

    Such a pod's estimate joins every usage sum in full (what `node_load` over the pods with it
    would give), its batch request joins the batch requested, and each derived column moves by
    the same amount: the result equals `derive_row` after a full recompute. Which columns move
    with which amount depends only on a few facts of the row (`derive_row` records them), so a
    move is one small matrix product added to the row.
    """
    amounts = (
        delta.cpu_milli,
        delta.memory_bytes,
        prod_delta.cpu_milli,
        prod_delta.memory_bytes,
        batch.cpu_milli,
        batch.memory_bytes,
    )
    t.add(r, _move_matrix(t.move_kind[r], args.score_according_prod_usage) @ np.array(amounts, dtype=np.int64))


@functools.lru_cache(maxsize=64)
def _move_matrix(kind: tuple[bool, bool, bool, bool, bool, bool], score_prod: bool) -> np.ndarray:
    """Column deltas per unit of (delta cpu, delta mem, prod cpu, prod mem, batch cpu, batch mem).

    `kind` is (has metric, prod thresholds, lim cpu off, lim mem off, plim cpu off, plim mem off).
    """
    has_metric, by_prod_thr, *off = kind
    m = np.zeros((len(INT_INDEX), 6), dtype=np.int64)
    for k, unit in zip(_BATCH, ((4, 1), (5, 1), (4, -1), (5, -1))):
        m[k, unit[0]] = unit[1]
    if has_metric:  # without a metric the usage sums stay zero and load awareness is off
        for res in (0, 1):  # cpu, memory
            d, p = res, 2 + res
            for k in _SUMS[3 * res : 3 * res + 3]:
                m[k, d] = 1
            m[_PROD[res], p] = 1
            m[_SFREE[res], d] = -1
            m[_PSFREE[res], p if score_prod else d] = -1
            if not off[res]:  # a check that is off stays off
                m[_LIM[res], d] = -1
            if not off[2 + res]:
                m[_PLIM[res], p if by_prod_thr else d] = -1
    m.flags.writeable = False
    return m


# --------------------------------------------------------------------------- request-time judgement
# Columns are gathered with `take`: for one-dimensional int columns it is several times cheaper
# than fancy indexing, and a request is a handful of such gathers.


def filter_codes(
    t: NodeTable, ix: np.ndarray, est: Resources, prod_pod: bool, now_ms: int, args: LoadAwareArgs
) -> np.ndarray:
    """One code per candidate row: PASS, EXPIRED or the first resource over its threshold.

    Nodes without a NodeMetric pass (load awareness is skipped, as in Koordinator).
    """
    lim, agg = (t.pair("plim_cpu"), t.agg_p) if prod_pod else (t.pair("lim_cpu"), t.agg_n)
    over = lim.take(ix, axis=1) <= ((est.cpu_milli,), (est.memory_bytes,))
    # Koordinator checks resources in sorted order (cpu, then memory) and reports the first.
    codes = np.where(over[0], np.int8(CPU_OVER), over[1].view(np.int8) * np.int8(MEM_OVER))
    if t.any_aggregated():
        codes += ((codes > 0) & agg.take(ix)) * np.int8(CPU_AGG_OVER - CPU_OVER)  # aggregated = plain + 2
    # (the table-wide facts spare a request checks that no candidate can fail)
    if args.filter_expired_node_metrics and t.earliest_expiry() <= now_ms:
        expired = t.expire_at.take(ix) <= now_ms
        if expired.any():
            codes[expired] = PASS if args.enable_schedule_when_node_metrics_expired else EXPIRED
    return codes


def scores(
    t: NodeTable, ix: np.ndarray, est: Resources, prod_pod: bool, now_ms: int, args: LoadAwareArgs
) -> tuple[np.ndarray, np.ndarray]:
    """(score 0-100, valid) per candidate: least-used over resourceWeights.

    `sum(w x (capacity - used) x 100 / capacity) / sum(w)` in integers, each resource's part
    0 when used exceeds capacity; a node without a metric, or whose metric expired, is not
    valid and scores 0.
    """
    if t.all_have_metrics() and t.earliest_expiry() > now_ms:
        valid, all_valid = _all_true(len(ix)), True
    else:
        valid = t.valid_until.take(ix) > now_ms
        all_valid = bool(valid.all())
    wc, wm, dw = args.cpu_weight, args.memory_weight, args.dominant_resource_weight
    if wc + wm + dw == 0 or not (all_valid or valid.any()):
        return np.zeros(len(ix), dtype=np.int64), valid
    # per resource: (allocatable - used) x 100 / allocatable, 0 when used exceeds it
    part = (t.pair("psfree_cpu") if prod_pod else t.pair("sfree_cpu")).take(ix, axis=1)
    part -= ((est.cpu_milli,), (est.memory_bytes,))
    part *= 100
    part //= t.pair("salloc_cpu").take(ix, axis=1)
    np.maximum(part, 0, out=part)
    s_cpu, s_mem = part
    total = (s_cpu if wc == 1 else s_cpu * wc) + (s_mem if wm == 1 else s_mem * wm)
    if dw:
        total += np.minimum(s_cpu, s_mem) * dw
    if wc + wm + dw != 1:
        total //= wc + wm + dw
    if not all_valid:
        total[~valid] = 0
    return total, valid


# --------------------------------------------------------------------------- one row at a time
# The two verdicts above for a single row, from its values (`NodeTable.row_values`): a kept
# verdict is brought up to date row by row (see memo), where numpy's fixed cost per call would
# outweigh the work. test_limits holds both forms to the same oracle.

_LIM_CPU, _LIM_MEM, _PLIM_CPU, _PLIM_MEM = _cols("lim_cpu", "lim_mem", "plim_cpu", "plim_mem")
_SFREE_CPU, _SFREE_MEM, _PSFREE_CPU, _PSFREE_MEM = _cols("sfree_cpu", "sfree_mem", "psfree_cpu", "psfree_mem")
_SALLOC_CPU, _SALLOC_MEM, _EXPIRE, _VALID = _cols("salloc_cpu", "salloc_mem", "expire_at", "valid_until")
_AGG_N, _AGG_P = BOOL_INDEX["agg_n"], BOOL_INDEX["agg_p"]


def row_code(
    ints: list[int], bools: list[bool], est: Resources, prod_pod: bool, now_ms: int, args: LoadAwareArgs
) -> int:
    """`filter_codes` for one row."""
    if prod_pod:
        lim_cpu, lim_mem, agg = ints[_PLIM_CPU], ints[_PLIM_MEM], bools[_AGG_P]
    else:
        lim_cpu, lim_mem, agg = ints[_LIM_CPU], ints[_LIM_MEM], bools[_AGG_N]
    code = CPU_OVER if lim_cpu <= est.cpu_milli else MEM_OVER if lim_mem <= est.memory_bytes else PASS
    if code and agg:
        code += CPU_AGG_OVER - CPU_OVER
    if args.filter_expired_node_metrics and ints[_EXPIRE] <= now_ms:
        code = PASS if args.enable_schedule_when_node_metrics_expired else EXPIRED
    return code


def row_score(
    ints: list[int], bools: list[bool], est: Resources, prod_pod: bool, now_ms: int, args: LoadAwareArgs
) -> int:
    """`scores` for one row: the score 0-100, or -1 where the row is not valid."""
    if ints[_VALID] <= now_ms:
        return -1
    wc, wm, dw = args.cpu_weight, args.memory_weight, args.dominant_resource_weight
    if wc + wm + dw == 0:
        return 0
    if prod_pod:
        free_cpu, free_mem = ints[_PSFREE_CPU], ints[_PSFREE_MEM]
    else:
        free_cpu, free_mem = ints[_SFREE_CPU], ints[_SFREE_MEM]
    s_cpu = max(0, (free_cpu - est.cpu_milli) * 100 // ints[_SALLOC_CPU])
    s_mem = max(0, (free_mem - est.memory_bytes) * 100 // ints[_SALLOC_MEM])
    total = s_cpu * wc + s_mem * wm + min(s_cpu, s_mem) * dw
    return total // (wc + wm + dw)


_ALL_TRUE = np.ones(0, dtype=bool)


def _all_true(n: int) -> np.ndarray:
    """A read-only all-True mask of length n (a view of one shared array)."""
    global _ALL_TRUE
    if len(_ALL_TRUE) < n:
        _ALL_TRUE = np.ones(max(n, 2 * len(_ALL_TRUE)), dtype=bool)
        _ALL_TRUE.flags.writeable = False
    return _ALL_TRUE[:n]


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
    all_valid = bool(valid.all())
    v = score if all_valid else score[valid]
    table = score_table(int(v.max()), int(v.min()), mapping, min_span) if len(v) else None
    return map_scores(score, valid, table, all_valid)


def map_scores(score: np.ndarray, valid: np.ndarray, table: np.ndarray | None, all_valid: bool) -> np.ndarray:
    """0-10 per candidate by `table` (see `score_table`), 0 where not valid."""
    if table is None:
        return np.zeros(len(score), dtype=np.int64)
    # scores are whole points 0-100: the mapping is a table lookup per candidate
    out = table.take(score, mode="clip")
    if not all_valid:
        out[~valid] = 0
    return out


def score_table(hi: int, lo: int, mapping: str, min_span: int) -> np.ndarray:
    """The 0-100 -> 0-10 table `to_extender_scores` maps candidates by, given the highest and
    lowest valid score. Tables are shared: the same object means the same mapping. Every table
    is non-decreasing, so the highest mapped score goes with the highest 0-100 one."""
    if mapping == "absolute":
        return _ABSOLUTE
    return _range_lut(hi, max(hi - lo, min_span, 1))


_POINTS = np.arange(101, dtype=np.int64)
_ABSOLUTE = (_POINTS * 10 + 50) // 100
_ABSOLUTE.flags.writeable = False


@functools.lru_cache(maxsize=1024)
def _range_lut(hi: int, span: int) -> np.ndarray:
    """10 at `hi`, one level less per span / 10 points below it: round((hi - s) x 10 / span), halves up."""
    down = ((hi - _POINTS) * 20 + span) // (2 * span)
    lut = np.clip(10 - down, 0, 10)
    lut.flags.writeable = False  # shared by every request with the same hi and span
    return lut
