"""What the reporter publishes when: samples every report interval, the NodeMetric every
NodeMetric interval; without samples (a replay has no collector), the NodeMetrics alone."""

from __future__ import annotations

import pytest
from koordcommon import subjects
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, NodeMetricSample
from node_agent.core.messages import HistoryConfig
from node_agent.core.reporter import NodeRound, ReportConfig, Reporter

GI = 1 << 30


@pytest.mark.parametrize("samples, expected", [
    # rounds every 10 s from t=10 s; samples due at every 20 s, NodeMetrics at every 60 s
    (True, [(20, "metrics"), (40, "metrics"), (60, "metrics"), (60, "nodemetric"), (80, "metrics"),
            (100, "metrics"), (120, "metrics"), (120, "nodemetric")]),
    (False, [(60, "nodemetric"), (120, "nodemetric")]),
])
def test_what_is_due_and_when(samples, expected):
    reporter = Reporter(HistoryConfig(collect_interval_s=10), ReportConfig(report_interval_s=20, nodemetric_interval_s=60,
                                                                           aggregate_window_s=60), samples=samples)
    reporter.set_nodes({"n1": (Resources(4000, 8 * GI), Resources(4000, 8 * GI))})
    out = []
    for t in range(10, 130, 10):
        reporter.record(t * 1000, {"n1": NodeRound(node=(1000.0, float(GI)))})
        for subject, msg in reporter.due(t * 1000):
            kind = "nodemetric" if isinstance(msg, NodeMetric) else "metrics"
            assert isinstance(msg, NodeMetric | NodeMetricSample)
            assert subject == (subjects.nodemetric("n1") if kind == "nodemetric" else subjects.metrics("n1"))
            out.append((t, kind))
    assert out == expected
