"""Why a pod was filtered: each plugin's verdict with its own numbers, over the extender's real
state and its real HTTP routes (the verbs record the decision; the explain route reads it)."""

from __future__ import annotations

import orjson
import pytest
from extender_helpers import T0, Gi, guaranteed, metric, node, pod
from scheduler_extender.core.explain import Decisions, explain_pod
from scheduler_extender.core.extender import filter_request
from scheduler_extender.core.state import ClusterState, ExtenderConfig
from scheduler_extender.core.wire import decode_extender_args

INCOMING = guaranteed("incoming", 4000, 8 * Gi)  # estimate 3400m (85 %) / 6012954214 (70 %)
BATCH = "koordinator.sh/batch-cpu"


def state() -> ClusterState:
    st = ClusterState(ExtenderConfig(), clock=lambda: T0 + 10_000)
    st.apply_node(node("idle"))  # 8 cores used of 32: (8000 + 3400) / 32000 = 36 % with the pod
    st.apply_node(node("hot"))  # 20 cores used: (20000 + 3400) / 32000 = 73 % > 65
    st.apply_node(node("stale"))  # metric 200 s old > 180
    st.apply_node(node("nometric"))
    st.apply_metric(metric("idle", 8000, 16 * Gi))
    st.apply_metric(metric("hot", 20000, 16 * Gi))
    st.apply_metric(metric("stale", 1000, 16 * Gi, ts=T0 - 190_000))
    return st


def by_node(found: dict) -> dict[str, dict]:
    return {n["node"]: n for n in found["nodes"]}


def plugin(entry: dict, name: str) -> dict:
    return next(p for p in entry["plugins"] if p["plugin"] == name)


# node -> (passed, rejected_by, cpu percent with the pod, threshold)
EXPECTED = {
    "idle": (True, None, 36, 65),
    "hot": (False, "LoadAwareScheduling", 73, 65),
    "stale": (False, "LoadAwareScheduling", 14, 65),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_load_verdict_carries_estimate_threshold_and_usage(name):
    st, decisions = state(), Decisions()
    info = st.pod_info(INCOMING)
    names = ["idle", "hot", "stale", "nometric"]
    decisions.record("filter", T0, info, st.rows_of(names), names)
    found = explain_pod(st, decisions, info.key, limit=10)
    entry = by_node(found)[name]
    passed, rejected_by, pct, thr = EXPECTED[name]
    assert (entry["passed"], entry["rejected_by"]) == (passed, rejected_by)
    load = plugin(entry, "LoadAwareScheduling")
    nums = load["numbers"]
    assert nums["estimate"] == {"cpu_milli": 3400, "memory_bytes": 6012954214}
    assert (nums["cpu"]["percent"], nums["cpu"]["threshold"], nums["cpu"]["estimate"]) == (pct, thr, 3400)
    assert nums["cpu"]["over"] is (pct > thr)
    if name == "stale":
        assert load["reason"] == "node(s) nodeMetric expired"
        assert nums["metric"]["expired"] is True and nums["metric"]["age_s"] == 200
    if name == "hot":
        assert load["reason"] == "node(s) cpu usage exceed threshold"
        assert nums["cpu"]["used"] == 20000
    # a node that passed has its score broken down; the load plugin's part is least-used
    if passed:
        assert entry["score"]["by_plugin"]["LoadAwareScheduling"] == entry["score"]["total"] > 0
        assert entry["score"]["extender"] == 10


def test_summary_and_unknown_pod():
    st, decisions = state(), Decisions()
    info = st.pod_info(INCOMING)
    names = ["idle", "hot", "stale", "nometric", "ghost"]
    decisions.record("filter", T0, info, st.rows_of(names), names)
    found = explain_pod(st, decisions, info.key, limit=2)
    assert (found["candidates"], found["passed"]) == (5, 2)  # idle and nometric pass (no metric: skipped)
    assert found["rejected"] == {"node(s) cpu usage exceed threshold": 1, "node(s) nodeMetric expired": 1,
                                 "node(s) unknown to the extender: no node, NodeMetric or NodeResource seen for it": 1}  # fmt: skip
    assert found["rejected_by_plugin"] == {"LoadAwareScheduling": 2, "NodeKnown": 1}
    assert len(found["nodes"]) == 2 and found["nodes"][0]["node"] == "idle"  # the best passing node first
    assert explain_pod(st, decisions, "default/never-seen") is None


def test_batch_fit_numbers_and_bound_pod_judged_without_itself():
    st = ClusterState(ExtenderConfig(), clock=lambda: T0 + 10_000)
    st.apply_node(node("n", extra={BATCH: 10000}))
    st.apply_metric(metric("n", 2000, 8 * Gi))
    running = pod("running", node="n", extra_requests={BATCH: 6000}, priority=5500, start_ms=T0 - 600_000)
    st.apply_pod(running, initial=True)
    want = pod("want", extra_requests={BATCH: 5000}, priority=5500)
    decisions = Decisions()
    decisions.record("filter", T0, st.pod_info(want), st.rows_of(["n"]), ["n"])
    entry = explain_pod(st, decisions, "default/want")["nodes"][0]
    fit = plugin(entry, "BatchMidFit")
    assert (fit["passed"], fit["reason"]) == (False, "node(s) Insufficient koordinator.sh/batch-cpu")
    assert fit["numbers"]["batch"]["allocatable"]["cpu_milli"] == 10000
    assert fit["numbers"]["batch"]["requested"]["cpu_milli"] == 6000
    assert fit["numbers"]["batch"]["free"]["cpu_milli"] == 4000 and fit["numbers"]["batch"]["pod"]["cpu_milli"] == 5000
    # the running pod is bound: on its own node it is judged as the node was before it came
    own = explain_pod(st, decisions, "default/running")
    mine = by_node(own)["n"]
    assert mine["bound"] is True and mine["passed"] is True
    assert plugin(mine, "BatchMidFit")["numbers"]["batch"]["requested"]["cpu_milli"] == 0


def test_filter_verb_records_the_decision():
    st, decisions = state(), Decisions()
    body = orjson.dumps({"Pod": {"metadata": {"name": "incoming", "namespace": "default", "uid": "u1"},
                                 "spec": {"containers": [{"name": "c", "resources": {
                                     "requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}}]}},
                         "NodeNames": ["idle", "hot"]})  # fmt: skip
    result = filter_request(st, decode_extender_args(body))
    decisions.record("filter", T0, result.pod, result.rows, result.names, result.reasons, result.passed)
    d = decisions.get("default/incoming")
    assert (d.verb, d.passed, d.rejected) == ("filter", 1, {"node(s) cpu usage exceed threshold": 1})
    found = explain_pod(st, decisions, "default/incoming")
    assert found["decision"]["candidates"] == 2 and [n["node"] for n in found["nodes"]] == ["idle", "hot"]


def test_decisions_are_bounded():
    st, decisions = state(), Decisions(limit=3)
    for i in range(5):
        info = st.pod_info(guaranteed(f"p{i}", 100, Gi))
        decisions.record("prioritize", T0, info, st.rows_of(["idle"]), ["idle"])
    assert list(decisions.by_pod) == ["default/p2", "default/p3", "default/p4"]
