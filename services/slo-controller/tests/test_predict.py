"""The `predict` batch policy: HP as max(N-sigma of the node's HP usage, per-pod peak sum).

Case A of test_batch: capacity 100 cores / 120 G, reclaim thresholds 60 / 65 % (margins 40 c /
42 G), system 4 c / 6 G, HP pods p1 and p2 (both prod) using 22 c / 28 G of 30 c / 40 G asked.
"""

from __future__ import annotations

import dataclasses

import pytest
from koordcommon.records import NodeRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric
from slo_controller.core.config import ColocationStrategy, merge_strategy, parse_colocation_config
from slo_controller.core.peak import PeakConfig, UsageMoments, hp_usage, predict
from slo_controller.core.resources import batch
from slo_controller.core.snapshot import MetricView, NodeSnapshot, PodLoad

G = 10**9
C = 1000
NOW = 1_700_000_000_000


def node() -> NodeRecord:
    return NodeRecord("n1", labels={}, annotations={}, capacity={"cpu": 100 * C, "memory": 120 * G, "pods": 110},
                      allocatable={"cpu": 100 * C, "memory": 120 * G, "pods": 110})


def pod(key, cpu, mem, hp=True, prod=True) -> PodLoad:
    return PodLoad(key, cpu * C, mem, True, hp, prod and hp, False)


PODS_A = [pod("ns/p1", 20, 30 * G), pod("ns/p2", 10, 10 * G), pod("ns/b1", 0, 0, hp=False)]
USAGE_A = {"ns/p1": (10 * C, 20 * G, True), "ns/p2": (12 * C, 8 * G, True), "ns/b1": (5 * C, 5 * G, False)}


def metric(pods=None) -> MetricView:
    return MetricView(NOW - 60_000, (50 * C, 60 * G), (4 * C, 6 * G), dict(USAGE_A if pods is None else pods))


def strategy(**kw) -> ColocationStrategy:
    return merge_strategy(ColocationStrategy(), {"enable": True, **kw})

PREDICT = {"cpuCalculatePolicy": "predict", "memoryCalculatePolicy": "predict"}


def history(samples=((0, 20 * C, 26 * G), (3600, 22 * C, 28 * G)), cpu_hl=3600.0, mem_hl=3600.0, min_samples=2):
    h = UsageMoments(PeakConfig(cpu_half_life_s=cpu_hl, memory_half_life_s=mem_hl, min_samples=min_samples))
    for t, c, m in samples:
        assert h.observe(NOW - 10_000_000 + int(t * 1000), c, m)
    return h


def test_moments_decay_by_half_life():
    # 20 c then 22 c one half-life later: weights 0.5 and 1, w = 1.5
    # mean = (10 000 + 22 000) / 1.5 = 21 333.33 m; E[x^2] = (0.5 x 4e8 + 4.84e8) / 1.5 = 4.56e8;
    # var = 4.56e8 - 21 333.33^2 = 888 888.9, std = 942.809; mean + 5 std = 26 047.38 -> 26 048
    h = history()
    (cm, cs), (mm, ms) = h.mean_std()
    assert (cm, cs) == pytest.approx((21333.333333, 942.809042))
    # memory 26 G then 28 G: mean 27.333 G, std 0.942809 G -> 32 047 378 542
    assert (mm, ms) == pytest.approx((27.333333333e9, 0.942809042e9))
    assert h.n_sigma() == (26048, 32047378542)
    # memory with a 2 h half-life keeps more of the 26 G: weight 2^-0.5 = 0.7071 ->
    # mean 27.1716 G, std 0.985171 G -> 32 097 430 031
    assert history(mem_hl=7200.0).n_sigma() == (26048, 32097430031)
    # a report not newer than the last is not folded in; too few reports: no prediction
    assert not h.observe(h.last_ms, 1, 1) and h.samples == 2
    assert history(min_samples=3).n_sigma() is None


def snapshot(pods=PODS_A, prod_peak=(15 * C, 25 * G), hist=None, usage=None) -> NodeSnapshot:
    m = dataclasses.replace(metric(usage), prod_peak=prod_peak)
    return NodeSnapshot(node(), pods, m, NOW, None, hist)


@pytest.mark.parametrize(
    ("prod_peak", "hist", "cpu", "mem", "hp"),
    [
        # N-sigma (26 048 m, 32.047 G) above the per-pod sum (15 c, 25 G): N-sigma;
        # cpu 100 - 40 - 4 - 26.048 = 29.952 c; memory 120 - 42 - 6 - 32.047378542 G
        ((15 * C, 25 * G), "h", 29952, 39952621458, (26048, 32047378542)),
        # the per-pod sum above N-sigma for CPU (28 c): 100 - 40 - 4 - 28 = 28 c
        ((28 * C, 25 * G), "h", 28 * C, 39952621458, (28 * C, 32047378542)),
        # no history yet: the HP requests (30 c / 40 G) stand in for N-sigma: 26 c, 32 G
        ((15 * C, 25 * G), None, 26 * C, 32 * G, (30 * C, 40 * G)),
        # no prod peak from the node agent: requests stand in for the per-pod sum
        (None, "h", 26 * C, 32 * G, (30 * C, 40 * G)),
        # a prediction below the usage in force (22 c / 28 G) counts as that usage: 34 c, 44 G
        ((1 * C, 1 * G), history(samples=((0, 1, 1), (60, 1, 1))), 34 * C, 44 * G, (22 * C, 28 * G)),
    ],
)
def test_predict_policy(prod_peak, hist, cpu, mem, hp):
    snap = snapshot(prod_peak=prod_peak, hist=history() if hist == "h" else hist)
    out = batch.calculate(snap, strategy(**PREDICT))
    assert (out.value("batch-cpu"), out.value("batch-memory")) == (cpu, mem)
    assert (predict(snap, snap.hp_history).cpu, predict(snap, snap.hp_history).memory) == hp


def test_mid_pods_add_their_usage_to_the_prod_peak_and_the_plan_explains_it():
    # m1: mid (HP, not prod) asks 5 c / 5 G, uses 3 c / 2 G; a mid pod without a metric counts by request
    pods = [*PODS_A, pod("ns/m1", 5, 5 * G, prod=False), pod("ns/m2", 1, 1 * G, prod=False)]
    usage = {**metric().pods, "ns/m1": (3 * C, 2 * G, True)}
    snap = snapshot(pods=pods, prod_peak=(28 * C, 25 * G), usage=usage, hist=history())
    p = predict(snap, snap.hp_history)
    assert p.per_pod == (28 * C + 3 * C + 1 * C, 25 * G + 2 * G + 1 * G)
    assert (p.cpu, p.memory) == (32 * C, 32047378542)
    out = batch.calculate(snap, strategy(**PREDICT))
    item = next(i for i in out.items if i.suffix == "batch-cpu")
    assert "podHPPredictedPeak:32000" in item.message
    assert out.inputs["perPodPeakSum"] == (32 * C, 28 * G) and out.inputs["nSigmaPeak"] == (26048, 32047378542)


def test_hp_usage_counts_each_pod_by_its_own_priority():
    assert hp_usage(metric()) == (22 * C, 28 * G)  # b1 (batch) is left out
    m = MetricView.from_message(NodeMetric(node="n1", node_usage=Resources(1, 1), prod_peak=Resources(7, 8),
                                           pods=[PodMetric(uid="u", namespace="ns", name="p", usage=Resources(5, 6))]))
    assert m.prod_peak == (7, 8) and hp_usage(m) == (5, 6)


def test_the_configmap_accepts_predict_and_names_the_policies_otherwise():
    cfg = parse_colocation_config({"enable": True, **PREDICT})
    assert (cfg.cluster.cpuCalculatePolicy, cfg.cluster.memoryCalculatePolicy) == ("predict", "predict")
    with pytest.raises(ValueError, match="predict"):
        parse_colocation_config({"enable": True, "cpuCalculatePolicy": "prediction"})
