"""Filter and score tables with hand-checked numbers.

Node n: allocatable 32 cores / 64Gi. Incoming pod: requests = limits = 4 cores / 8Gi, so its
estimate is 3400m / 6012954214 bytes (85 % / 70 %).
"""

import numpy as np
import pytest
from extender_helpers import T0, Gi, guaranteed, metric, node, pod, pod_metric
from koordcommon.model import PriorityClass
from koordcommon.resources import Resources
from koordcommon.schemas import AggregatedUsage
from scheduler_extender.core.extender import filter_nodes, score_nodes
from scheduler_extender.core.framework import NO_SCORE, to_extender_scores
from scheduler_extender.core.plugins.known import REASON_UNKNOWN
from scheduler_extender.core.plugins.loadaware import NAME as LOAD_AWARE
from scheduler_extender.core.plugins.loadaware import AggregatedArgs, LoadAwareArgs, Thresholds
from scheduler_extender.core.state import ClusterState, ExtenderConfig

INCOMING = guaranteed("incoming", 4000, 8 * Gi)


def make_state(config=None, now=T0 + 10_000):
    clock = {"now": now}
    st = ClusterState(config or ExtenderConfig(), clock=lambda: clock["now"])
    st.clock_box = clock
    return st


def judge(st, p=INCOMING, names=("n",), now=None):
    return filter_nodes(st, st.pod_info(p), list(names), now)


def reason(st, p=INCOMING, name="n", now=None):
    o = judge(st, p, (name,), now)
    return o.failed([name]).get(name) or o.unresolvable([name]).get(name) or "pass"


def load_scores(st, p=INCOMING, rows=(0,)):
    """The load-aware plugin's own 0-100 scores for node rows (NO_SCORE where it has none)."""
    st.flush()
    return st.plugin(LOAD_AWARE).score(st.pod_info(p), np.array(rows), st.clock())


CPU_OVER = "node(s) cpu usage exceed threshold"
MEM_OVER = "node(s) memory usage exceed threshold"
EXPIRED = "node(s) nodeMetric expired"


@pytest.mark.parametrize(
    "case, usage_cpu, assigned, reported, expected",
    [
        # 16000 + 3400 = 19400 / 32000 = 60.6 % -> 61 <= 65
        ("idle node", 16000, None, None, "pass"),
        # a pod bound 30 s before the metric (inside the 60 s report window), not reported:
        # 16000 + 3400 + 3400 = 22800 -> 71.25 % -> 71 > 65
        ("fresh pod not in metric", 16000, T0 - 30_000, None, CPU_OVER),
        # bound 120 s before, reported at 1000m: its usage is in node usage already
        ("old pod reported", 16000, T0 - 120_000, (1000, 1 * Gi), "pass"),
        # bound 30 s before, reported at 3000m: only max(0, 3400 - 3000) = 400 added -> 62 %
        ("fresh pod partly reported", 16000, T0 - 30_000, (3000, 1 * Gi), "pass"),
        # bound long ago but missing from the metric's pods: still estimated -> 71 %
        ("old pod missing from metric", 16000, T0 - 120_000, None, CPU_OVER),
        # rounding: (17400 + 3400) / 32000 = 65.0 % -> pass; 17561 + 3400 = 20961 -> 65.5 % -> 66 > 65
        ("exactly 65 %", 17400, None, None, "pass"),
        ("65.5 % rounds up", 17561, None, None, CPU_OVER),
    ],
)
def test_filter_estimated_usage(case, usage_cpu, assigned, reported, expected):
    st = make_state()
    st.apply_node(node("n"))
    pods = []
    if reported is not None:
        pods.append(pod_metric("p1", *reported))
    if assigned is not None:
        st.apply_pod(guaranteed("p1", 4000, 8 * Gi, node="n", start_ms=assigned), initial=True)
    st.apply_metric(metric("n", usage_cpu, 32 * Gi, pods=pods))
    assert reason(st) == expected, case


def test_memory_threshold_95():
    st = make_state()
    st.apply_node(node("n"))
    # (58Gi + 6012954214) / 64Gi = 99.4 % -> fail; 54Gi -> 93.1 % -> pass
    st.apply_metric(metric("n", 1000, 58 * Gi))
    assert reason(st) == MEM_OVER
    st.apply_metric(metric("n", 1000, 54 * Gi, ts=T0 + 1))
    assert reason(st) == "pass"


@pytest.mark.parametrize(
    "age_ms, filter_expired, expected",
    [(179_999, True, "pass"), (180_000, True, EXPIRED), (600_000, True, EXPIRED), (600_000, False, "pass")],
)
def test_expired_metric(age_ms, filter_expired, expected):
    cfg = ExtenderConfig(load=LoadAwareArgs(filter_expired_node_metrics=filter_expired))
    st = make_state(cfg, now=T0 + age_ms)
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 1000, 1 * Gi))
    assert reason(st) == expected


def test_expired_metric_also_beats_threshold_reason_and_scores_zero():
    st = make_state(now=T0 + 200_000)
    st.apply_node(node("n"))
    st.apply_node(node("m"))
    st.apply_metric(metric("n", 30000, 1 * Gi))  # over threshold and expired
    st.apply_metric(metric("m", 1000, 1 * Gi, ts=T0 + 190_000))
    assert reason(st, name="n") == EXPIRED
    scores = score_nodes(st, st.pod_info(INCOMING), ["n", "m"])
    assert scores.outcome.total[0] == NO_SCORE and scores.mapped.tolist() == [0, 10]


def test_node_without_metric_passes_and_unknown_node_fails():
    st = make_state()
    st.apply_node(node("known"))
    assert reason(st, name="known") == "pass"
    assert reason(st, name="ghost") == REASON_UNKNOWN
    lenient = make_state(ExtenderConfig(fail_unknown_nodes=False))
    assert reason(lenient, name="ghost") == "pass"


def test_prod_thresholds_apply_to_prod_pods_over_prod_usage():
    # usageThresholds cpu 30, prodUsageThresholds cpu 50. Node usage 16000 = prod pod 8000 +
    # batch pod 6000 + system 2000. Prod incoming: (8000 + 3400) / 32000 = 35.6 % -> 36 <= 50.
    # Batch incoming (batch-cpu 4000 -> 3400): (16000 + 3400) / 32000 -> 61 > 30.
    cfg = ExtenderConfig(
        load=LoadAwareArgs(usage_thresholds=Thresholds(30, 95), prod_usage_thresholds=Thresholds(50, 95))
    )
    st = make_state(cfg)
    st.apply_node(node("n"))
    st.apply_pod(guaranteed("prod1", 8000, 8 * Gi, node="n", start_ms=T0 - 600_000), initial=True)
    st.apply_pod(
        pod(
            "batch1",
            labels={"koordinator.sh/qosClass": "BE"},
            priority=5000,
            node="n",
            start_ms=T0 - 600_000,
            extra_requests={"koordinator.sh/batch-cpu": 6000},
        ),
        initial=True,
    )
    st.apply_metric(
        metric(
            "n",
            16000,
            16 * Gi,
            pods=[pod_metric("prod1", 8000, 8 * Gi), pod_metric("batch1", 6000, 2 * Gi, cls=PriorityClass.BATCH)],
        )
    )
    assert reason(st) == "pass"
    batch_pod = pod(
        "b", labels={"koordinator.sh/qosClass": "BE"}, priority=5000, extra_requests={"koordinator.sh/batch-cpu": 4000}
    )
    # the load check runs before the batch fit, so the load reason is reported
    assert reason(st, batch_pod) == CPU_OVER
    # prod usage 8000 + a fresh prod pod (not yet reported, 3400) + incoming 3400 = 14800 -> 46 % pass;
    # one more fresh prod pod: 18200 -> 57 % > 50
    st.apply_pod(guaranteed("prod2", 4000, 8 * Gi, node="n"))
    assert reason(st) == "pass"
    st.apply_pod(guaranteed("prod3", 4000, 8 * Gi, node="n"))
    assert reason(st) == CPU_OVER


def test_non_prod_pod_uses_plain_thresholds():
    cfg = ExtenderConfig(
        load=LoadAwareArgs(usage_thresholds=Thresholds(30, 95), prod_usage_thresholds=Thresholds(50, 95))
    )
    st = make_state(cfg)
    st.apply_node(node("n", extra={"koordinator.sh/batch-cpu": 20000, "koordinator.sh/batch-memory": 20 * Gi}))
    st.apply_metric(metric("n", 16000, 16 * Gi))
    batch_pod = pod(
        "b", labels={"koordinator.sh/qosClass": "BE"}, priority=5000, extra_requests={"koordinator.sh/batch-cpu": 4000}
    )
    # (16000 + 3400) / 32000 -> 61 > 30
    assert reason(st, batch_pod) == CPU_OVER


def test_aggregated_thresholds():
    agg = AggregatedArgs(
        usage_thresholds=Thresholds(60, 95), usage_aggregation_type="p95", usage_aggregated_duration_s=300
    )
    st = make_state(ExtenderConfig(load=LoadAwareArgs(aggregated=agg)))
    st.apply_node(node("n"))
    aggs = [
        AggregatedUsage(duration_s=300, p95=Resources(17000, 8 * Gi)),
        AggregatedUsage(duration_s=1800, p95=Resources(30000, 8 * Gi)),
    ]
    # p95 over 5 min: (17000 + 3400) / 32000 = 63.75 -> 64 > 60
    st.apply_metric(metric("n", 8000, 8 * Gi, aggregated_node_usages=aggs))
    assert reason(st) == "node(s) cpu aggregated usage exceed threshold"
    st.apply_metric(
        metric(
            "n",
            8000,
            8 * Gi,
            ts=T0 + 1,
            aggregated_node_usages=[AggregatedUsage(duration_s=300, p95=Resources(15000, 8 * Gi))],
        )
    )
    # (15000 + 3400) / 32000 = 57.5 -> 58 <= 60
    assert reason(st) == "pass"


def test_node_annotation_overrides_thresholds():
    st = make_state()
    st.apply_node(
        node("n", annotations={"scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds":{"cpu":50}}'})
    )
    st.apply_metric(metric("n", 16000, 16 * Gi))
    assert reason(st) == CPU_OVER  # 61 % > 50 on this node only
    st.apply_node(node("m"))
    st.apply_metric(metric("m", 16000, 16 * Gi))
    assert reason(st, name="m") == "pass"


def test_daemonset_pods_skip_load_checks():
    from koordcommon.records import OwnerRef

    st = make_state()
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 31000, 1 * Gi))
    ds = guaranteed("ds", 100, Gi, owners=[OwnerRef(kind="DaemonSet", name="agent")])
    assert reason(st) == CPU_OVER
    assert reason(st, ds) == "pass"


# --------------------------------------------------------------------------- score


def test_score_least_used_hand_checked():
    st = make_state()
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 16000, 32 * Gi))
    assert st.pod_info(INCOMING).estimate == Resources(3400, 6012954214)
    # cpu (32000 - 19400) x 100 // 32000 = 39; memory (64Gi - 40372692582) x 100 // 64Gi = 41; (39 + 41) // 2 = 40
    assert load_scores(st).tolist() == [40]


def test_score_counts_assigned_pods_and_weights():
    cfg = ExtenderConfig(load=LoadAwareArgs(cpu_weight=3, memory_weight=1))
    st = make_state(cfg)
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 16000, 32 * Gi))
    st.apply_pod(guaranteed("fresh", 4000, 8 * Gi, node="n"))
    # cpu used 22800 -> 28; memory used 32Gi + 2 x 6012954214 = 46385646796 -> 32; (28 x 3 + 32) // 4 = 29
    assert load_scores(st).tolist() == [29]


@pytest.mark.parametrize(
    "scores, valid, mapping, expected",
    [
        ([40, 35, 20], [1, 1, 1], "range", [10, 7, 0]),
        ([40, 35, 20], [1, 1, 1], "absolute", [4, 4, 2]),
        ([50, 48, 47], [1, 1, 1], "range", [10, 8, 7]),  # within min_span 10: one point, one level
        ([50, 48, 47], [1, 1, 1], "absolute", [5, 5, 5]),  # the ties the range mapping avoids
        ([90, 10, 0], [1, 1, 0], "range", [10, 0, 0]),
        ([0, 0], [0, 0], "range", [0, 0]),
        ([73], [1], "range", [10]),
    ],
)
def test_score_mapping(scores, valid, mapping, expected):
    rated = np.where(np.array(valid, dtype=bool), np.array(scores, dtype=np.int64), NO_SCORE)
    assert to_extender_scores(rated, mapping, 10).tolist() == expected


def test_score_prefers_less_loaded_and_orders_like_usage():
    st = make_state()
    names = []
    for i, cpu in enumerate([4000, 8000, 12000, 16000, 20000]):
        st.apply_node(node(f"n{i}"))
        st.apply_metric(metric(f"n{i}", cpu, 16 * Gi))
        names.append(f"n{i}")
    scores = score_nodes(st, st.pod_info(INCOMING), names)
    mapped, raw = scores.mapped, scores.outcome.total
    assert raw.tolist() == sorted(raw.tolist(), reverse=True)
    assert mapped.tolist() == sorted(mapped.tolist(), reverse=True)
    assert mapped[0] == 10 and len(set(mapped.tolist())) == 5


# --------------------------------------------------------------------------- Koordinator parity


def test_node_aggregated_usage_annotation_turns_the_aggregated_filter_on():
    """The extender's arguments configure no aggregated filter; the node's annotation does."""
    aggs = [AggregatedUsage(duration_s=300, p95=Resources(17000, 8 * Gi)), AggregatedUsage(duration_s=1800, p95=Resources(30000, 8 * Gi))]
    st = make_state()
    on = '{"aggregatedUsage":{"usageThresholds":{"cpu":60},"usageAggregationType":"p95","usageAggregatedDuration":"5m"}}'
    half = '{"aggregatedUsage":{"usageThresholds":{"cpu":60}}}'  # no type: ignored, as in Koordinator
    st.apply_node(node("n", annotations={"scheduling.koordinator.sh/usage-thresholds": on}))
    st.apply_node(node("m", annotations={"scheduling.koordinator.sh/usage-thresholds": half}))
    for name in ("n", "m"):
        st.apply_metric(metric(name, 8000, 8 * Gi, aggregated_node_usages=aggs))
    # n: p95 over 5 min (17000 + 3400) / 32000 = 63.75 -> 64 > 60; m: plain (8000 + 3400) -> 36 <= 65
    assert reason(st, name="n") == "node(s) cpu aggregated usage exceed threshold"
    assert reason(st, name="m") == "pass"
    longest = '{"aggregatedUsage":{"usageThresholds":{"cpu":90},"usageAggregationType":"p95"}}'
    st.apply_node(node("n", annotations={"scheduling.koordinator.sh/usage-thresholds": longest}))
    # no duration: the longest window with data, 30 min: (30000 + 3400) / 32000 = 104 % > 90
    assert reason(st, name="n") == "node(s) cpu aggregated usage exceed threshold"


def test_metric_with_unknown_update_time_counts_as_expired():
    st = make_state()
    st.apply_node(node("n"))
    st.apply_metric(metric("n", 1000, Gi, ts=0))
    assert reason(st) == EXPIRED
    scores = score_nodes(st, st.pod_info(INCOMING), ["n"])
    assert scores.outcome.total.tolist() == [NO_SCORE]


@pytest.mark.parametrize(
    "allow, annotation, expected",
    [
        # LS pod, requests 4 cores / 8Gi, no limits; factors cpu 80, memory 80 (Koordinator's test)
        (False, None, Resources(3200, 6871947674)),
        (False, '{"cpu": 100}', Resources(3200, 6871947674)),  # not allowed: the annotation is ignored
        (True, '{"cpu": 100}', Resources(4000, 6871947674)),
        (True, "{oops", Resources(3200, 6871947674)),
    ],
)
def test_per_pod_estimation_override(allow, annotation, expected):
    from scheduler_extender.core.estimator import EstimatorArgs

    st = make_state(ExtenderConfig(estimator=EstimatorArgs(80, 80, allow_customize=allow)))
    annotations = {"scheduling.koordinator.sh/load-estimated-scaling-factors": annotation} if annotation else {}
    p = pod("ls", 4000, 8 * Gi, priority=9999, annotations=annotations)
    assert st.pod_info(p).estimate == expected


AFTER_INIT = "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"
AFTER_SCHEDULED = "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"


@pytest.mark.parametrize(
    "after_initialized, after_scheduled, allow, annotations, expected_cpu",
    [
        (None, None, False, {}, 10000),  # reported long ago: its usage is in the node's already
        (300, None, False, {}, 10000 + 2400),  # initialized 100 s before the metric: estimate counts in full
        (60, None, False, {}, 10000),  # that window ended before the metric
        (None, 600, False, {}, 10000),  # scheduled 700 s before the metric: 600 s window over
        (None, 900, False, {}, 10000 + 2400),
        (None, None, False, {AFTER_INIT: "300"}, 10000),  # annotations count only when customisation is allowed
        # allowCustomizeEstimation: the pod's windows replace the arguments'
        (None, None, True, {AFTER_INIT: "300"}, 10000 + 2400),  # 100 s after Initialized, within 300 s
        (300, None, True, {AFTER_INIT: "60"}, 10000),  # the pod's 60 s ended before the metric
        (None, None, True, {AFTER_SCHEDULED: "900"}, 10000 + 2400),  # 700 s after PodScheduled, within 900 s
        (None, 900, True, {AFTER_SCHEDULED: "600"}, 10000),
        (None, 900, True, {AFTER_SCHEDULED: "ten minutes"}, 10000 + 2400),  # malformed: the argument's window
    ],
)
def test_estimation_windows(after_initialized, after_scheduled, allow, annotations, expected_cpu):
    from scheduler_extender.core.estimator import EstimatorArgs

    args = LoadAwareArgs(
        estimated_seconds_after_initialized=after_initialized, estimated_seconds_after_pod_scheduled=after_scheduled
    )
    st = make_state(ExtenderConfig(load=args, estimator=EstimatorArgs(allow_customize=allow)))
    st.apply_node(node("n"))
    p = guaranteed("p1", 4000, 8 * Gi, node="n", start_ms=T0 - 700_000)
    p.scheduled_ms, p.initialized_ms = T0 - 700_000, T0 - 100_000
    p.annotations.update(annotations)
    st.apply_pod(p, initial=True)
    st.apply_metric(metric("n", 10000, 8 * Gi, pods=[pod_metric("p1", 1000, Gi)]))
    assert st.plugin(LOAD_AWARE).load(st.view("n")).exist.cpu_milli == expected_cpu


@pytest.mark.parametrize(
    "annotation, named, expected",
    [
        # a threshold on a resource the filter does not judge, a misspelt part: named, the rest applies
        ('{"usageThresholds":{"cpu":30,"nvidia.com/gpu":50}}', "usageThresholds.nvidia.com/gpu",
         "node(s) cpu usage exceed threshold"),
        ('{"usageThreshold":{"cpu":30}}', "usageThreshold", "pass"),
        ('{"aggregatedUsage":{"usageThresholds":{"cpu":30},"usageAggregationType":"p95","scoreAggregationType":"avg"}}',
         "aggregatedUsage.scoreAggregationType",  # no aggregated data, no duration: node usage, 36 % > 30
         "node(s) cpu aggregated usage exceed threshold"),
        ('{"usageThresholds":{"cpu":30}}', None, "node(s) cpu usage exceed threshold"),  # (8000 + 3400) / 32000
    ],
)
def test_node_usage_thresholds_annotation_names_fields_it_does_not_honour(caplog, annotation, named, expected):
    st = make_state()
    st.apply_node(node("n", annotations={"scheduling.koordinator.sh/usage-thresholds": annotation}))
    st.apply_metric(metric("n", 8000, 8 * Gi))
    with caplog.at_level("WARNING", logger="koordcommon.annotations"):
        assert reason(st) == expected
    said = [r.getMessage() for r in caplog.records if r.name == "koordcommon.annotations"]
    if named is None:
        assert said == []
    else:
        assert said and all(named in m and "not honoured" in m for m in said)


def test_scaling_factors_annotation_names_resources_it_does_not_estimate(caplog):
    from scheduler_extender.core.estimator import EstimatorArgs

    st = make_state(ExtenderConfig(estimator=EstimatorArgs(80, 80, allow_customize=True)))
    ann = {"scheduling.koordinator.sh/load-estimated-scaling-factors": '{"cpu": 100, "ephemeral-storage": 50}'}
    with caplog.at_level("WARNING", logger="koordcommon.annotations"):
        got = st.pod_info(pod("ls2", 4000, 8 * Gi, priority=9999, annotations=ann)).estimate
    assert got == Resources(4000, 6871947674)  # cpu 100 % applies; memory stays at 80 %
    assert any("ephemeral-storage" in r.getMessage() for r in caplog.records if r.name == "koordcommon.annotations")
