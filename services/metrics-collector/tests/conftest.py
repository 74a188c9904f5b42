"""Sample messages with known values for the collector tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import ContainerUsage, NodeMetricSample, Owner, PodUsage

# The process tests share the collector process helper of test_ingest_e2e (import mode importlib).
sys.path.insert(0, str(Path(__file__).parent))

GIB = 1 << 30

# (priority_class, priority, qos) of the pods on every sample node, in order.
POD_KINDS = (
    (PriorityClass.PROD, 9500, QoSClass.LS),
    (PriorityClass.NONE, None, QoSClass.BE),  # no class, BE: batch
    (PriorityClass.BATCH, 5500, QoSClass.BE),
    (PriorityClass.NONE, 7100, QoSClass.LS),  # value band: mid
)


def make_sample(node: str, ts: int, i: int = 0, pods: int = 3, containers: int = 2, seq: int | None = None):
    """Sample number i of a node: usage grows with i so every bucket has known values."""
    pod_list = []
    for p in range(pods):
        cls, prio, qos = POD_KINDS[p % len(POD_KINDS)]
        batch = cls is PriorityClass.BATCH or qos is QoSClass.BE
        pod_list.append(
            PodUsage(
                uid=f"{node}-pod-{p}",
                namespace="default",
                name=f"pod-{p}",
                owner=Owner(kind="ReplicaSet", name=f"rs-{p}"),
                qos=qos,
                priority_class=cls,
                priority=prio,
                requests=Resources(0, 0) if batch else Resources(500, GIB),
                limits=Resources(0, 0) if batch else Resources(1000, 2 * GIB),
                batch_requests=Resources(1000, 2 * GIB) if batch else Resources(),
                usage=Resources(100 + 10 * i + p, GIB // 4 + p),
                containers=[
                    ContainerUsage(
                        name=f"c{c}",
                        requests=Resources(250, GIB // 2),
                        usage=Resources(50 + 5 * i + c, GIB // 8 + c),
                    )
                    for c in range(containers)
                ],
            )
        )
    return NodeMetricSample(
        node=node,
        ts=ts,
        source=f"node-agent/{node}",
        seq=seq if seq is not None else ts,
        capacity=Resources(8000, 32 * GIB),
        allocatable=Resources(7800, 30 * GIB),
        node_usage=Resources(1000 + 7 * i, 4 * GIB + i),
        system_usage=Resources(200, GIB),
        pods=pod_list,
    )


@pytest.fixture
def sample_factory():
    return make_sample
