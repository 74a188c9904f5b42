"""MidResource: Koordinator's midresource TestPluginCalculate table.

Node: allocatable 100 cores / 200G, capacity 100 cores / 210G (kubelet reserves 0 / 10G).
podA LS prod 9000 requests 20c/40G, podB BE batch 5999 requests 15c/30G, both Running:
prod allocated 20c/40G, unallocated 80c/160G.
"""

from __future__ import annotations

import pytest
from koordcommon.records import ContainerSpec, NodeRecord, PodRecord
from slo_controller.core.config import ColocationStrategy, merge_strategy
from slo_controller.core.resources import mid
from slo_controller.core.snapshot import MetricView, NodeSnapshot, PodLoad

G = 10**9
C = 1000
NOW = 1_700_000_000_000

NODE = NodeRecord(
    "test-node1",
    capacity={"cpu": 100 * C, "memory": 210 * G},
    allocatable={"cpu": 100 * C, "memory": 200 * G},
)
PODS = [
    PodLoad.from_record(
        PodRecord("ns", "podA", "a", "test-node1", labels={"koordinator.sh/qosClass": "LS"}, priority=9000,
                  phase="Running", containers=[ContainerSpec("c", {"cpu": 20 * C, "memory": 40 * G}, {})])
    ),
    PodLoad.from_record(
        PodRecord("ns", "podB", "b", "test-node1", labels={"koordinator.sh/qosClass": "BE"}, priority=5999,
                  phase="Running", containers=[ContainerSpec("c", {"cpu": 15 * C, "memory": 30 * G}, {})])
    ),
]


def metric(usage, reclaimable, age_ms=0, host_prod=(0, 0)) -> MetricView:
    return MetricView(NOW - age_ms, usage, (0, 0), {}, host_prod, host_prod, reclaimable)


def run(m, degrade_after_ms=None, **kw):
    strategy = merge_strategy(ColocationStrategy(), {"enable": True, "degradeTimeMinutes": 5, **kw})
    out = mid.calculate(NodeSnapshot(NODE, PODS, m, NOW, degrade_after_ms), strategy)
    return out.value("mid-cpu"), out.value("mid-memory"), out


@pytest.mark.parametrize(
    "m, kw, cpu, mem",
    [
        # expired metric (30 min old, degrade after 5) -> reset
        (metric((20 * C, 45 * G), None, age_ms=30 * 60_000), {}, None, None),
        # valid: min(10, unused 80) + 80 x 0 = 10c; min(15, 165) = 15G
        (metric((20 * C, 45 * G), (10 * C, 15 * G)), {}, 10 * C, 15 * G),
        # exceeds the threshold: cpu min(15 + 8, 10) = 10; memory min(30 + 16, 210 x 20% = 42) = 42
        (
            metric((30 * C, 50 * G), (15 * C, 30 * G)),
            {"midCPUThresholdPercent": 10, "midMemoryThresholdPercent": 20, "midUnallocatedPercent": 10},
            10 * C,
            42 * G,
        ),
        # no prodReclaimable: does not degrade, reclaims 0
        (metric((30 * C, 50 * G), None), {}, 0, 0),
        # static, not exceeded: min(10%, 10%) of 100c = 10c; min(10% of 210G, 20%) = 21G
        (
            None,
            {"midReclaimMode": "static", "midStaticCPUReservedPercent": 10, "midStaticMemoryReservedPercent": 10,
             "midCPUThresholdPercent": 10, "midMemoryThresholdPercent": 20},
            10 * C,
            21 * G,
        ),
        # static, exceeded: reserved 100/100 capped by 10%/20% -> 10c / 42G
        (
            None,
            {"midReclaimMode": "static", "midStaticCPUReservedPercent": 100, "midStaticMemoryReservedPercent": 100,
             "midCPUThresholdPercent": 10, "midMemoryThresholdPercent": 20},
            10 * C,
            42 * G,
        ),
        # node usage missing -> unused 0 -> 0
        (metric(None, (20 * C, 20 * G)), {}, 0, 0),
        # reclaimable above what is free: unused 10c / 10G
        (metric((90 * C, 200 * G), (20 * C, 20 * G)), {}, 10 * C, 10 * G),
        # prod host application 5c/15G, no reclaimable -> 0
        (metric((30 * C, 50 * G), None, host_prod=(5 * C, 15 * G)), {}, 0, 0),
    ],
)
def test_mid_table(m, kw, cpu, mem):
    got_cpu, got_mem, out = run(m, **kw)
    assert (got_cpu, got_mem) == (cpu, mem)
    assert out.degraded is (cpu is None)


def test_valid_case_message():
    _, _, out = run(metric((20 * C, 45 * G), (10 * C, 15 * G)))
    assert out.items[0].message == (
        "midAllocatable[CPU(milli-core)]:10000 = min(min(ProdReclaimable:10000, NodeUnused:80000) + "
        "Unallocated:80000 * midUnallocatedRatio:0, NodeCapacity:100000 * thresholdRatio:1)"
    )


def test_host_application_raises_system_term():
    # system 5c/15G beats kubelet reserve 0/10G: unallocated 100-5-20 = 75c, 210-15-40 = 155G
    _, _, out = run(metric((30 * C, 50 * G), None, host_prod=(5 * C, 15 * G)))
    assert out.inputs["unallocated"] == [75 * C, 155 * G]
    assert "Unallocated:75000" in out.items[0].message
    assert "Unallocated:155" in out.items[1].message


def test_unallocated_share():
    # midUnallocatedPercent 50: min(10, 80) + 80 x 50% = 50c; min(15, 165) + 160 x 50% = 95G
    assert run(metric((20 * C, 45 * G), (10 * C, 15 * G)), midUnallocatedPercent=50)[:2] == (50 * C, 95 * G)


def test_missing_metric_degrades_dynamic_mode_only():
    assert run(None)[:2] == (None, None)
    assert run(None, midReclaimMode="static", midStaticCPUReservedPercent=5)[:2] == (5 * C, 0)
