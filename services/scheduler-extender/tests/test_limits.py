"""The precomputed per-node limits judge exactly as the percent maths they replace.

`first_over` is checked by hand and against a scan; the load-aware plugin's filter and score
over its columns, and the batch fit's, are checked against a scalar transcription of
Koordinator's rules on random nodes, with usages placed on and around every threshold boundary.
"""

import math
import random

import numpy as np
import pytest
from koordcommon.resources import Resources
from scheduler_extender.core.framework import NO_SCORE, PodInfo
from scheduler_extender.core.plugins import loadaware as la
from scheduler_extender.core.plugins.loadaware import AggregatedArgs, LoadAware, LoadAwareArgs, NodeLoad, Thresholds
from scheduler_extender.core.plugins.tierfit import BATCH_CPU_SHORT, BATCH_MEM_SHORT, BatchMidFit
from scheduler_extender.core.state import ClusterState
from test_loadaware import INCOMING

PASS = 0

Gi = 1024**3


@pytest.mark.parametrize(
    "alloc, threshold, expected",
    [
        (1000, 65, 655),  # 654 -> 65.4 % -> 65 (not over); 655 -> 65.5 % -> 66
        (31500, 65, 20633),  # 20632 -> 65.498 % -> 65; 20633 -> 65.502 % -> 66
        (4, 50, 3),  # 2 -> 50 %; 3 -> 75 %
        (3, 65, 2),  # 1 -> 33 %; 2 -> 67 %
        (64 * Gi, 95, 65627100283),  # 95.5 % of 68719476736 bytes is 65627100282.88
        (126 * Gi, 95, 129203353682),  # 95.5 % of 135291469824 bytes is 129203353681.92
        (1, 100, 2),  # 1 -> 100 % (not over); 2 -> 200 %
    ],
)
def test_first_over(alloc, threshold, expected):
    got = la.first_over(alloc, threshold)
    assert la.usage_percent(got, alloc) > threshold
    assert la.usage_percent(got - 1, alloc) <= threshold
    assert got == expected


def test_first_over_matches_a_scan():
    for alloc in (1, 2, 3, 7, 100, 999, 1000, 4001, 31500):
        for threshold in range(1, 101):
            scan = next(x for x in range(3 * alloc + 2) if la.usage_percent(x, alloc) > threshold)
            assert la.first_over(alloc, threshold) == scan, (alloc, threshold)


# --------------------------------------------------------------------------- oracle


def oracle_code(row: dict, est: Resources, prod_pod: bool, now: int, args: LoadAwareArgs) -> int:
    """Koordinator's filter for one node, spelled out on the base columns."""
    if not row["has_metric"]:
        return PASS
    expired = now - row["update_ms"] >= args.node_metric_expiration_s * 1000
    if args.filter_expired_node_metrics and expired:
        return PASS if args.enable_schedule_when_node_metrics_expired else la.EXPIRED
    if prod_pod and row["has_prod_thr"]:
        used, thr, agg = (row["prod_cpu"], row["prod_mem"]), (row["pthr_cpu"], row["pthr_mem"]), False
    elif row["has_agg_thr"]:
        used, thr, agg = (row["aggf_cpu"], row["aggf_mem"]), (row["athr_cpu"], row["athr_mem"]), True
    else:
        used, thr, agg = (row["exist_cpu"], row["exist_mem"]), (row["thr_cpu"], row["thr_mem"]), False
    alloc = (row["alloc_cpu"], row["alloc_mem"])
    codes = ((la.CPU_AGG_OVER if agg else la.CPU_OVER), (la.MEM_AGG_OVER if agg else la.MEM_OVER))
    for u, e, t, a, code in zip(used, (est.cpu_milli, est.memory_bytes), thr, alloc, codes):
        if t > 0 and a > 0 and math.floor((u + e) / a * 100 + 0.5) > t:
            return code
    return PASS


def oracle_score(row: dict, est: Resources, prod_pod: bool, now: int, args: LoadAwareArgs) -> int:
    if not row["has_metric"] or now - row["update_ms"] >= args.node_metric_expiration_s * 1000:
        return NO_SCORE
    if prod_pod and args.score_according_prod_usage:
        base = (row["prod_cpu"], row["prod_mem"])
    elif args.aggregated.score_enabled:
        base = (row["aggs_cpu"], row["aggs_mem"])
    else:
        base = (row["exist_cpu"], row["exist_mem"])
    parts = []
    for b, e, cap in zip(base, (est.cpu_milli, est.memory_bytes), (row["alloc_cpu"], row["alloc_mem"])):
        used = b + e
        parts.append((cap - used) * 100 // cap if cap > 0 and used <= cap else 0)
    w = (args.cpu_weight, args.memory_weight, args.dominant_resource_weight)
    if sum(w) == 0:
        return 0
    return (parts[0] * w[0] + parts[1] * w[1] + min(parts) * w[2]) // sum(w)


def random_row(rng: random.Random, est: Resources, now: int, fresh: bool) -> dict:
    """A node with usages on and around the threshold boundaries; `fresh`: every node has a
    live metric and plain thresholds."""
    alloc = (rng.choice([0, 1000, 31500, 96000]), rng.choice([0, 8 * Gi, 126 * Gi]))
    row = {
        "alloc_cpu": alloc[0],
        "alloc_mem": alloc[1],
        "known": True,
        "has_metric": fresh or rng.random() < 0.9,
        "update_ms": now - rng.choice([0, 10_000, 179_999] if fresh else [0, 10_000, 179_999, 180_000, 400_000]),
        "has_prod_thr": rng.random() < 0.3,
        "has_agg_thr": not fresh and rng.random() < 0.3,
    }
    for res, a, e in (("cpu", alloc[0], est.cpu_milli), ("mem", alloc[1], est.memory_bytes)):
        for col in ("thr", "pthr", "athr"):
            row[f"{col}_{res}"] = rng.choice([0, 50, 65, 95, 100])
        for col, thr_col in (("exist", "thr"), ("prod", "pthr"), ("aggf", "athr"), ("aggs", "thr")):
            t = row[f"{thr_col}_{res}"]
            if a and t and rng.random() < 0.6:  # on the boundary: usage + estimate = first_over +- 1
                row[f"{col}_{res}"] = max(0, la.first_over(a, t) - e + rng.choice([-1, 0, 1]))
            else:
                row[f"{col}_{res}"] = rng.randint(0, int(a * 1.2) + 1)
        row[f"bal_{res}"] = rng.randint(0, a + 1)
        row[f"breq_{res}"] = rng.randint(0, a + 1)
    # a threshold set is on when some resource of it is
    row["has_prod_thr"] = row["has_prod_thr"] and (row["pthr_cpu"] > 0 or row["pthr_mem"] > 0)
    row["has_agg_thr"] = row["has_agg_thr"] and (row["athr_cpu"] > 0 or row["athr_mem"] > 0)
    return row


def columns_of(plugin: LoadAware, row: dict) -> list[int]:
    def pair(prefix: str) -> Resources:
        return Resources(row[f"{prefix}_cpu"], row[f"{prefix}_mem"])

    load = NodeLoad(
        has_metric=row["has_metric"],
        update_ms=row["update_ms"],
        exist=pair("exist"),
        prod=pair("prod"),
        agg_filter=pair("aggf"),
        agg_score=pair("aggs"),
    )
    off = Thresholds()
    return plugin.row_from(
        load,
        Thresholds(row["thr_cpu"], row["thr_mem"]),
        Thresholds(row["pthr_cpu"], row["pthr_mem"]) if row["has_prod_thr"] else off,
        Thresholds(row["athr_cpu"], row["athr_mem"]) if row["has_agg_thr"] else off,
        pair("alloc"),
    )


ARGS = [
    LoadAwareArgs(),
    LoadAwareArgs(enable_schedule_when_node_metrics_expired=True),
    LoadAwareArgs(filter_expired_node_metrics=False, cpu_weight=2, memory_weight=1, dominant_resource_weight=1),
    LoadAwareArgs(cpu_weight=0, memory_weight=3, dominant_resource_weight=2),
    LoadAwareArgs(score_according_prod_usage=True, aggregated=AggregatedArgs(Thresholds(70, 90), "p95", 0, "p90")),
]


@pytest.mark.parametrize("fresh", [False, True])
@pytest.mark.parametrize("args", ARGS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_filter_and_score_match_the_oracle(args, seed, fresh):
    rng = random.Random(seed)
    now = 1_700_000_000_000
    est = Resources(rng.choice([0, 850, 3400]), rng.choice([0, 256 * 1024**2, 6 * Gi]))
    plugin, fit = LoadAware(args), BatchMidFit()
    rows = []
    for i in range(400):
        row = random_row(rng, est, now, fresh)
        plugin.columns.set(i, columns_of(plugin, row))
        fit.columns.set(i, [row["bal_cpu"] - row["breq_cpu"], row["bal_mem"] - row["breq_mem"], 0, 0])
        rows.append(row)
    ix = np.array(rng.sample(range(400), 300), dtype=np.intp)
    base = ClusterState().pod_info(INCOMING)
    for prod_pod in (False, True):
        pod = PodInfo(base.record, est, prod_pod, base.request, Resources(), Resources(), False)
        assert plugin.filter(pod, ix, now).codes.tolist() == [oracle_code(rows[i], est, prod_pod, now, args) for i in ix]
        assert plugin.score(pod, ix, now).tolist() == [oracle_score(rows[i], est, prod_pod, now, args) for i in ix]
    for request in (Resources(0, 0), Resources(1000, 0), Resources(0, 2 * Gi), Resources(4000, 4 * Gi)):
        pod = PodInfo(base.record, est, False, Resources(), request, Resources(), False)
        want = []
        for i in ix:
            row = rows[i]
            if request.cpu_milli > 0 and row["bal_cpu"] - row["breq_cpu"] < request.cpu_milli:
                want.append(BATCH_CPU_SHORT)
            elif request.memory_bytes > 0 and row["bal_mem"] - row["breq_mem"] < request.memory_bytes:
                want.append(BATCH_MEM_SHORT)
            else:
                want.append(0)
        assert fit.filter(pod, ix, now).codes.tolist() == want
