"""The extender's Prometheus metrics, counted in plain numbers and exposed on scrape.

Every verb call updates several series (requests, latency, candidates, nodes filtered by
reason). prometheus_client's own metric objects take a lock on every update; the verbs all run
on the server's one event-loop thread, so here the updates are plain additions and a collector
reads them when /metrics is scraped (on that same thread).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CANDIDATE_BUCKETS = (1, 10, 100, 500, 1000, 2500, 5000, 10000)


class Histogram:
    """Counts per bucket (upper bounds inclusive, as Prometheus' `le`) and the sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last is above every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative (le, count) pairs ending with +Inf."""
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts):
            running += n
            out.append((repr(float(bound)), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


class ExtenderMetrics:
    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, str], int] = defaultdict(int)  # (verb, outcome)
        self.filtered: defaultdict[str, int] = defaultdict(int)  # reason -> nodes
        self.latency: defaultdict[str, Histogram] = defaultdict(lambda: Histogram(LATENCY_BUCKETS))
        self.candidates: defaultdict[str, Histogram] = defaultdict(lambda: Histogram(CANDIDATE_BUCKETS))

    def collect(self):
        requests = CounterMetricFamily(
            "koord_extender_requests", "Extender calls by verb and outcome", labels=["verb", "outcome"]
        )
        for (verb, outcome), n in sorted(self.requests.items()):
            requests.add_metric([verb, outcome], n)
        yield requests
        filtered = CounterMetricFamily(
            "koord_extender_nodes_filtered", "Nodes rejected by filter or preempt, by reason", labels=["reason"]
        )
        for reason, n in sorted(self.filtered.items()):
            filtered.add_metric([reason], n)
        yield filtered
        for name, doc, series in (
            ("koord_extender_request_seconds", "Extender call latency (body read to reply) by verb", self.latency),
            ("koord_extender_candidate_nodes", "Nodes per request by verb", self.candidates),
        ):
            family = HistogramMetricFamily(name, doc, labels=["verb"])
            for verb, h in sorted(series.items()):
                family.add_metric([verb], h.buckets(), sum_value=h.total)
            yield family


METRICS = ExtenderMetrics()
REGISTRY.register(METRICS)
