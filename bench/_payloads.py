"""Realistic bus payloads shared by the benchmarks: a node's 10-second report of 30 pods."""

from __future__ import annotations

import uuid

from koordcommon.model import PriorityClass, QoSClass
from koordcommon.resources import Resources
from koordcommon.schemas import ContainerUsage, NodeMetricSample, Owner, PodUsage

GiB = 1 << 30
NODES = 50


def pod_usages(i: int, pods: int) -> list[PodUsage]:
    """The pods of node i % NODES: a third batch (BE, batch resources), the rest prod web pods.

    Uids depend on the node and the pod's place, so consecutive reports of a node name the
    same pods, as a real node agent's do.
    """
    out = []
    for p in range(pods):
        be = p % 3 == 0
        out.append(
            PodUsage(
                uid=str(uuid.UUID(int=((i % NODES) * 1000 + p) | (1 << 64))),
                namespace="batch" if be else "default",
                name=f"{'spark' if be else 'web'}-{p}",
                owner=Owner(kind="Job" if be else "ReplicaSet", name=f"{'spark' if be else 'web'}-{p % 7}"),
                qos=QoSClass.BE if be else QoSClass.LS,
                priority_class=PriorityClass.BATCH if be else PriorityClass.PROD,
                priority=5000 if be else 9000,
                requests=Resources(0 if be else 500, 0 if be else GiB),
                limits=Resources(0 if be else 1000, 0 if be else 2 * GiB),
                batch_requests=Resources(1000, 2 * GiB) if be else Resources(),
                usage=Resources(137 + p * 11 + i % 13, 300_000_000 + p * 7_000_000),
                containers=[
                    ContainerUsage(name="main", usage=Resources(120 + p, 280_000_000 + p * 1_000)),
                    ContainerUsage(name="sidecar", usage=Resources(17, 20_000_000)),
                ],
            )
        )
    return out


def node_sample(i: int, pods: int, ts: int | None = None, seq: int = 0) -> NodeMetricSample:
    node = f"node-{i % NODES:03d}.cluster.local"
    extra = {} if ts is None else {"ts": ts}
    return NodeMetricSample(
        node=node,
        source=f"node-agent/{node}",
        seq=seq,
        capacity=Resources(32_000, 128 * GiB),
        allocatable=Resources(31_500, 120 * GiB),
        node_usage=Resources(12_345 + i % 100, 60 * GiB + i),
        system_usage=Resources(800, 4 * GiB),
        pods=pod_usages(i, pods),
        **extra,
    )
