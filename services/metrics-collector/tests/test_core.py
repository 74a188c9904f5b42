"""The pure core: rows from messages, time parsing, buckets, percentiles, retention plans."""

from __future__ import annotations

import numpy as np
import pytest
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import AggregatedUsage, Event, NodeMetric, NodeResource, Recommendation
from metrics_collector.core import rows as R
from metrics_collector.core.retention import Delete, RetentionPolicy, Rollup, plan, rollup_window
from metrics_collector.core.series import (
    HOUR_MS,
    MINUTE_MS,
    QueryError,
    aggregate,
    bucket_of,
    choose_resolution,
    make_range,
    parse_duration,
    parse_quantiles,
    parse_time,
    percentile,
)

GIB = 1 << 30


@pytest.mark.parametrize(
    "cls, prio, qos, band",
    [
        (PriorityClass.PROD, None, QoSClass.LS, "prod"),
        (PriorityClass.NONE, None, QoSClass.LSR, "prod"),  # a plain Kubernetes pod
        (PriorityClass.NONE, None, QoSClass.BE, "batch"),  # Koordinator: BE without class is batch
        (PriorityClass.NONE, 9999, QoSClass.BE, "prod"),  # the value band wins over the QoS default
        (PriorityClass.NONE, 7000, QoSClass.LS, "mid"),
        (PriorityClass.NONE, 5999, QoSClass.BE, "batch"),
        (PriorityClass.NONE, 3000, QoSClass.BE, "free"),
        (PriorityClass.NONE, 8500, QoSClass.LS, "prod"),  # between bands, not BE
        (PriorityClass.MID, 9500, QoSClass.BE, "mid"),  # explicit class wins over the value
        (PriorityClass.FREE, None, QoSClass.LS, "free"),
    ],
)
def test_band(cls, prio, qos, band):
    assert R.band(cls, prio, qos) == band


def test_sample_rows_sum_bands(sample_factory):
    sample = sample_factory("n1", 1_000, i=2, pods=4, containers=2)
    rows = R.build_rows([sample])
    assert len(rows.node_samples) == 1 and len(rows.pod_samples) == 4 and len(rows.container_samples) == 8
    node = dict(zip(R.NODE_SAMPLE_COLUMNS, rows.node_samples[0], strict=True))
    # pods: 0 prod (usage 120), 1 BE no class -> batch (121), 2 batch (122), 3 priority 7100 -> mid (123)
    assert (node["prod_used_cpu_milli"], node["batch_used_cpu_milli"], node["mid_used_cpu_milli"]) == (120, 243, 123)
    # batch pods count their koordinator.sh/batch-* requests, the others cpu/memory requests
    assert (node["prod_requested_cpu_milli"], node["batch_requested_cpu_milli"], node["mid_requested_cpu_milli"]) == (
        500, 2000, 500)  # fmt: skip
    assert (node["batch_requested_memory_bytes"], node["free_used_cpu_milli"], node["pods"]) == (4 * GIB, 0, 4)
    assert (node["cpu_milli"], node["capacity_memory_bytes"]) == (1014, 32 * GIB)
    pod = dict(zip(R.POD_SAMPLE_COLUMNS, rows.pod_samples[1], strict=True))
    assert (pod["uid"], pod["band"], pod["qos"], pod["priority_class"], pod["owner_kind"]) == (
        "n1-pod-1", "batch", "BE", "", "ReplicaSet")  # fmt: skip
    container = dict(zip(R.CONTAINER_SAMPLE_COLUMNS, rows.container_samples[3], strict=True))
    assert (container["pod_uid"], container["container"], container["cpu_milli"]) == ("n1-pod-1", "c1", 61)


def test_other_message_rows():
    metric = NodeMetric(node="n1", ts=5, node_usage=Resources(1, 2), prod_reclaimable=Resources(3, 4),
                        aggregated_node_usages=[AggregatedUsage(duration_s=300, p90=Resources(7, 8))])  # fmt: skip
    res = NodeResource(node="n1", ts=6, batch=Resources(5000, GIB), mid=None, degraded=False, reason="ok",
                       inputs={"batch": {"capacity": [8000, 4 * GIB]}}, messages=["batchAllocatable[CPU(Milli-Core)]:5000"])
    rec = Recommendation(namespace="ns", owner_kind="Deployment", owner_name="web", ts=7, source="recommender/a")
    ev = Event(kind="evict", node="n1", action="evict", ts=8, source="node-agent/n1", seq=42, target={"pod": "p"})
    rows = R.build_rows([metric, res, rec, ev])
    m = dict(zip(R.NODE_METRIC_COLUMNS, rows.node_metrics[0], strict=True))
    assert (m["prod_reclaimable_cpu_milli"], m["prod_peak_cpu_milli"], m["aggregate_duration_s"]) == (3, None, 300)
    assert '"p90":{"cpu_milli":7,"memory_bytes":8}' in m["aggregated"]
    # the inputs and messages behind the values are kept with them (explanations)
    assert rows.node_resources == [("n1", 6, 5000, GIB, None, None, False, "ok", False, None,
                                    '{"batch":{"capacity":[8000,4294967296]}}', '["batchAllocatable[CPU(Milli-Core)]:5000"]')]
    assert rows.recommendations == [("ns", "Deployment", "web", 7, "recommender/a", "[]")]
    assert rows.events[0][:7] == ("node-agent/n1:42", 8, "evict", "n1", "evict", "", False)
    with pytest.raises(TypeError):
        R.build_rows([object()])


@pytest.mark.parametrize(
    "text, ms",
    [
        ("1700000000000", 1_700_000_000_000),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
        ("2023-11-14T22:13:20.5", 1_700_000_000_500),
        (1_700_000_000_000, 1_700_000_000_000),
    ],
)
def test_parse_time(text, ms):
    assert parse_time(text) == ms


@pytest.mark.parametrize(
    "text, ms", [("30", 30_000), ("30s", 30_000), ("5m", 300_000), ("1h", HOUR_MS), ("1d", 86_400_000),
                 ("500ms", 500), ("1.5m", 90_000), (" 2H ", 2 * HOUR_MS)],
)  # fmt: skip
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: parse_time("yesterday", "from"), "from: 'yesterday' is neither epoch milliseconds"),
        (lambda: parse_duration("5 minutes"), "step: '5 minutes' is not a duration"),
        (lambda: parse_duration("0s"), "step: must be positive"),
        (lambda: make_range(10, 10, 1000), "to (10) must be after from (10)"),
        (lambda: make_range(0, 60_000, 500), "step must be at least 1s"),
        (lambda: make_range(0, 86_400_000, 1000), "range / step gives 86400 points, more than 11000"),
        (lambda: parse_quantiles("0.5,abc"), "q: 'abc' is not a number"),
        (lambda: parse_quantiles("0"), "q: 0 is outside"),
        (lambda: parse_quantiles(","), "q: give at least one quantile"),
        (lambda: percentile([1.0], 0.5, "median-ish"), "method: 'median-ish' is not one of"),
    ],
)
def test_query_errors(call, message):
    with pytest.raises(QueryError) as exc:
        call()
    assert message in str(exc.value)


def test_parse_quantiles_accepts_fractions_and_percent():
    assert parse_quantiles("0.5, 90,99.9,1") == [0.5, 0.9, pytest.approx(0.999), 1.0]


def test_aggregate_buckets_are_epoch_aligned():
    points = [(59_999, (1.0, 10.0)), (60_000, (2.0, 5.0)), (65_000, (4.0, 7.0)), (185_000, (8.0, 1.0))]
    buckets = aggregate(points, 60_000)
    assert [(b.ts, b.samples, b.sums, b.maxes) for b in buckets] == [
        (0, 1, (1.0, 10.0), (1.0, 10.0)),
        (60_000, 2, (6.0, 12.0), (4.0, 7.0)),
        (180_000, 1, (8.0, 1.0), (8.0, 1.0)),
    ]
    assert buckets[1].avg(0) == 3.0
    assert bucket_of(119_999, 60_000) == 60_000 and bucket_of(120_000, 60_000) == 120_000


@pytest.mark.parametrize("n", [1, 2, 5, 10, 97, 1000])
@pytest.mark.parametrize("q", [0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0])
def test_percentiles_match_numpy(n, q):
    values = sorted(np.random.default_rng(n).gamma(2.0, 300.0, size=n).round().tolist())
    assert percentile(values, q, "linear") == pytest.approx(float(np.percentile(values, q * 100)))
    assert percentile(values, q, "nearest") == float(np.percentile(values, q * 100, method="inverted_cdf"))


@pytest.mark.parametrize(
    "values, q, expected",
    [
        ([10, 20, 30, 40, 50, 60, 70, 80, 90, 100], 0.9, 90),  # index int(10 * 0.9) - 1 = 8
        ([10, 20, 30, 40, 50, 60, 70, 80, 90, 100], 0.95, 90),  # int(9.5) - 1 = 8
        ([10, 20, 30, 40, 50, 60, 70, 80, 90, 100], 0.5, 50),
        ([10, 20, 30], 0.1, 10),  # int(0.3) - 1 = -1 -> clamped to the first
        ([10, 20, 30], 1.0, 30),
    ],
)
def test_koordinator_percentile(values, q, expected):
    assert percentile(values, q, "koordinator") == expected


def test_percentile_of_nothing():
    assert percentile([], 0.5) is None


NOW = 1_000 * HOUR_MS  # an hour boundary
DAY = 24 * HOUR_MS


@pytest.mark.parametrize(
    "start, step, resolution",
    [
        (NOW - HOUR_MS, 60_000, "raw"),  # within raw retention: raw answers every step
        (NOW - 2 * DAY, 10_000, "raw"),  # finer than a minute: only raw can answer
        (NOW - 2 * DAY, 5 * MINUTE_MS, "1m"),
        (NOW - 2 * DAY, HOUR_MS, "1m"),  # minutes still kept: the finer rollup
        (NOW - 2 * DAY, 90_000, "1m"),  # each minute falls whole into one 90 s bucket
        (NOW - 10 * DAY, HOUR_MS, "1h"),  # older than the minute retention
        (NOW - 10 * DAY, 2 * MINUTE_MS, "1h"),  # minutes gone: hourly points are the best left
    ],
)
def test_choose_resolution(start, step, resolution):
    assert choose_resolution(start, step, NOW, DAY, 7 * DAY) == resolution


POLICY = RetentionPolicy()


@pytest.mark.parametrize(
    "last, first, step, window",
    [
        (None, None, MINUTE_MS, None),  # nothing stored
        (None, NOW - 10 * MINUTE_MS + 5, MINUTE_MS, (NOW - 10 * MINUTE_MS, NOW - 5 * MINUTE_MS)),
        (NOW - 6 * MINUTE_MS, 0, MINUTE_MS, None),  # up to date
        (NOW - 8 * MINUTE_MS, 0, MINUTE_MS, (NOW - 7 * MINUTE_MS, NOW - 5 * MINUTE_MS)),
        (None, NOW - 3 * DAY, MINUTE_MS, (NOW - 3 * DAY, NOW - 3 * DAY + 6 * HOUR_MS)),  # catch up 6 h a run
        (None, NOW - 90 * MINUTE_MS, HOUR_MS, (NOW - 2 * HOUR_MS, NOW - HOUR_MS)),
    ],
)
def test_rollup_window(last, first, step, window):
    assert rollup_window(last, first, NOW, step, POLICY) == window


def test_plan_rolls_then_deletes_only_rolled_rows():
    state = {
        ("node", "1m"): (None, NOW - 3 * DAY),  # collector was down: raw rows from 3 days ago
        ("node", "1h"): (None, None),
        ("pod", "1m"): (NOW - 6 * MINUTE_MS, NOW - HOUR_MS),  # minutes rolled up to date
        ("pod", "1h"): (NOW - 2 * HOUR_MS, NOW - 3 * HOUR_MS),
    }
    p = plan(NOW, POLICY, state)
    # pods: minutes up to date and no hour complete yet (NOW is an hour boundary, the lag of
    # 5 min puts the last complete hour at NOW - 1h, already rolled); nodes catch up 6 h a run
    assert p.rollups == (Rollup("node", "raw", "1m", NOW - 3 * DAY, NOW - 3 * DAY + 6 * HOUR_MS, MINUTE_MS),)
    deletes = {d.table: d.before for d in p.deletes}
    # raw node rows older than 24 h go, but not those still waiting for their rollup
    assert deletes["node_samples"] == NOW - 3 * DAY + 6 * HOUR_MS
    assert deletes["pod_samples"] == NOW - DAY
    assert deletes["pod_usage_1m"] == NOW - 7 * DAY
    assert deletes["node_usage_1h"] == NOW - 90 * DAY
    assert Delete("events", NOW - 30 * DAY) in p.deletes


def test_plan_hour_rollup_waits_for_its_minutes():
    state = {
        ("pod", "1m"): (NOW - 3 * HOUR_MS - MINUTE_MS, NOW - 5 * HOUR_MS),  # minutes rolled to NOW - 3h
        ("pod", "1h"): (NOW - 5 * HOUR_MS, NOW - 5 * HOUR_MS),
    }
    p = plan(NOW, POLICY, state)
    assert p.rollups == (
        Rollup("pod", "raw", "1m", NOW - 3 * HOUR_MS, NOW - 5 * MINUTE_MS, MINUTE_MS),
        Rollup("pod", "1m", "1h", NOW - 4 * HOUR_MS, NOW - HOUR_MS, HOUR_MS),
    )
    # minutes are kept until their hour is rolled
    assert {d.table: d.before for d in p.deletes}["pod_usage_1m"] == NOW - 7 * DAY
