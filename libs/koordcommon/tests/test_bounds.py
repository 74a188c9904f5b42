"""Hostile but well-formed bus messages: refused by value range, dead-lettered with the reason,
counted, never handed to a consumer."""

from __future__ import annotations

import asyncio
import base64

import pytest
from koordcommon import bounds, subjects
from koordcommon.bus import DEADLETTERED
from koordcommon.resources import Resources
from koordcommon.schemas import (
    ContainerRecommendation,
    DeadLetter,
    Event,
    NodeMetric,
    NodeMetricSample,
    NodeResource,
    PodUsage,
    Recommendation,
    now_ms,
)

GIB = 1 << 30
NOW = 1_760_000_000_000
CAP = Resources(32_000, 128 * GIB)
YEAR_4878 = 91_770_000_000_000


def sample(**kw) -> NodeMetricSample:
    base = {"node": "n1", "ts": NOW, "capacity": CAP, "allocatable": CAP, "node_usage": Resources(8000, 40 * GIB)}
    return NodeMetricSample(**{**base, **kw})


def pod(**kw) -> PodUsage:
    return PodUsage(**{"uid": "u1", "namespace": "ns", "name": "p", "usage": Resources(500, GIB), **kw})


@pytest.mark.parametrize(
    "msg, subject, kind, says",
    [
        (sample(node_usage=Resources(int(-1e18), 0)), "koord.metrics.n1", "out_of_range", "node_usage: negative"),
        (sample(node_usage=Resources(64_001, 0)), "koord.metrics.n1", "out_of_range", "node_usage"),  # > 2 x capacity
        (sample(pods=[pod(usage=Resources(0, -1))]), "koord.metrics.n1", "out_of_range", "pods.0.usage: negative"),
        (sample(pods=[pod(requests=Resources(-5, 0))]), "koord.metrics.n1", "out_of_range", "pods.0.requests"),
        (sample(capacity=Resources(10**12, 0)), "koord.metrics.n1", "out_of_range", "capacity"),
        (sample(capacity=Resources(), node_usage=Resources(10**9, 0)), "koord.metrics.n1", "out_of_range", "node_usage"),
        (sample(ts=YEAR_4878), "koord.metrics.n1", "clock_skew", "ahead of the receiver's clock"),
        (sample(ts=NOW + 301_000), "koord.metrics.n1", "clock_skew", "301 s ahead"),
        (sample(ts=NOW - 9 * 86_400_000), "koord.metrics.n1", "clock_skew", "days behind"),
        (sample(ts=0), "koord.metrics.n1", "clock_skew", "days behind"),
        (sample(window_s=0), "koord.metrics.n1", "out_of_range", "window_s"),
        (sample(node="n2"), "koord.metrics.n1", "out_of_range", "for node 'n2' on the subject of node 'n1'"),
        (NodeMetric(node="n1", ts=NOW, capacity=CAP, node_usage=Resources(-1, 0)), "koord.nodemetric.n1",
         "out_of_range", "node_usage: negative"),
        (NodeMetric(node="n1", ts=NOW, aggregate_duration_s=0, node_usage=Resources()), "koord.nodemetric.n1",
         "out_of_range", "aggregate_duration_s"),
        (NodeResource(node="n1", batch=Resources(-1000, 0)), "koord.noderesource.n1", "out_of_range", "batch: negative"),
        (Recommendation(namespace="ns", owner_kind="Deployment", owner_name="w", containers=[ContainerRecommendation(
            container="c", target=Resources(-1, 0), lower_bound=Resources(), upper_bound=Resources())]),
         "koord.recommendation.ns.w", "out_of_range", "containers.0.target"),
        (Recommendation(namespace="ns", owner_kind="Deployment", owner_name="w", containers=[ContainerRecommendation(
            container="c", target=Resources(250, GIB), lower_bound=Resources(),
            upper_bound=Resources(10**14 + 1, 10**14))]),
         "koord.recommendation.ns.w", "out_of_range", "containers.0.upper_bound"),
        (Recommendation(namespace="ns", owner_kind="Deployment", owner_name="w", containers=[ContainerRecommendation(
            container="c", target=Resources(10**14, GIB), lower_bound=Resources(), upper_bound=Resources())]),
         "koord.recommendation.ns.w", "out_of_range", "containers.0.target"),
        (Event(kind="evict", node="n2", action="evict"), "koord.events.evict.n1", "out_of_range", "node 'n2'"),
    ],
)
def test_out_of_range_messages_are_refused_naming_the_value(msg, subject, kind, says):
    with pytest.raises(bounds.OutOfRange) as info:
        bounds.check(msg, subject, NOW)
    assert info.value.kind == kind
    assert says in str(info.value)


@pytest.mark.parametrize(
    "msg, subject",
    [
        (sample(), "koord.metrics.n1"),
        (sample(ts=NOW + 299_000), "koord.metrics.n1"),  # within the skew window
        (sample(ts=NOW - 7 * 86_400_000), "koord.metrics.n1"),  # as old as a stream keeps
        (sample(node_usage=Resources(64_000, 256 * GIB)), "koord.metrics.n1"),  # twice the capacity: the bound
        (sample(capacity=Resources(), node_usage=Resources(4000, GIB)), "koord.metrics.n1"),  # capacity unknown
        (sample(node="a.b"), "koord.metrics.a_d_b"),  # dotted node names travel encoded
        (NodeResource(node="n1", batch=None, degraded=True), "koord.noderesource.n1"),
        # a young workload's upper bound is VPA's MaxResourceAmount: +Inf, capped (found by bench/soak.py)
        (Recommendation(namespace="ns", owner_kind="Deployment", owner_name="w", containers=[ContainerRecommendation(
            container="c", target=Resources(250, GIB), lower_bound=Resources(25, 250 << 20),
            upper_bound=Resources(10**14, 10**14))]), "koord.recommendation.ns.w"),
    ],
)
def test_possible_messages_pass(msg, subject):
    bounds.check(msg, subject, NOW)


async def test_out_of_range_on_the_bus_is_dead_lettered_counted_and_never_consumed(bus):
    """Through a real JetStream consumer: the good sample arrives, the hostile ones do not."""
    now = now_ms()
    good = sample(ts=now)
    hostile = [sample(ts=now, node_usage=Resources(int(-1e18), 0)), sample(ts=YEAR_4878)]
    await bus.ensure_streams(subjects.METRICS_STREAM, subjects.DEADLETTER_STREAM)
    for m in (*hostile, good):
        await bus.publish(subjects.metrics("n1"), bus.stamp(m))
    before = {k: DEADLETTERED.labels("test", "KOORD_METRICS", k)._value.get() for k in ("out_of_range", "clock_skew")}
    seen: list[NodeMetricSample] = []

    async def handle(batch):
        seen.extend(d.msg for d in batch)

    await bus.consume(subjects.METRICS_STREAM, "bounds", "koord.metrics.>", NodeMetricSample, handle)
    letters = []
    async for d in bus.tail(subjects.DEADLETTER_STREAM, "koord.deadletter.>", DeadLetter):
        letters.append(d.msg)
        if len(letters) == 2:
            break
    for _ in range(50):
        if seen:
            break
        await asyncio.sleep(0.1)
    assert [m.node_usage for m in seen] == [good.node_usage]
    assert sorted(letter.reason.split(":")[0] for letter in letters) == ["NodeMetricSample", "node_usage"]
    assert all(letter.subject == "koord.metrics.n1" for letter in letters)
    assert base64.b64decode(letters[0].raw_b64) == hostile[0].encode()
    after = {k: DEADLETTERED.labels("test", "KOORD_METRICS", k)._value.get() for k in before}
    assert after["out_of_range"] - before["out_of_range"] == 1
    assert after["clock_skew"] - before["clock_skew"] == 1
