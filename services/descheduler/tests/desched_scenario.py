"""Builders shared by the descheduler's tests: batch workloads on simulated nodes and the
NodeMetrics a node agent would report for them."""

from __future__ import annotations

from koordcommon.records import ContainerSpec, OwnerRef, PodRecord
from koordcommon.schemas import NodeMetric, PodMetric
from koordsim.cluster import SimCluster

GI = 1 << 30
BATCH_NS = "batch"


def batch_pod(rs: str, i: int, node: str, cpu: int = 2000, mem_gi: int = 4, priority: int = 5500,
              labels: dict | None = None, annotations: dict | None = None) -> PodRecord:
    """Replica `i` of ReplicaSet `rs` (a koord-batch BE pod) running on `node`."""
    return PodRecord(
        namespace=BATCH_NS,
        name=f"{rs}-{i:05d}",
        uid=f"uid-{rs}-{i}",
        node_name=node,
        phase="Running",
        labels={"app": rs.rsplit("-", 1)[0], "koordinator.sh/qosClass": "BE", **(labels or {})},
        annotations=dict(annotations or {}),
        owners=[OwnerRef("ReplicaSet", rs, uid=f"rs-{rs}", api_version="apps/v1", controller=True)],
        priority=priority,
        priority_class_name="koord-batch",
        containers=[ContainerSpec("main", requests={"cpu": cpu, "memory": mem_gi * GI},
                                  limits={"cpu": 2 * cpu, "memory": 2 * mem_gi * GI})],
    )


def node_metric(cluster: SimCluster, node: str, ts: int | None = None) -> NodeMetric:
    """What the node agent reports for `node` now: node, system and per-pod usage."""
    snap = cluster.usage_snapshot(node)
    pods = {p.key: p for p in cluster.state.pods_on(node)}
    metrics = []
    for key, usage in snap.pods.items():
        p = pods.get(key)
        if p is None:
            continue
        metrics.append(PodMetric(uid=p.uid, namespace=p.namespace, name=p.name, usage=usage,
                                 priority_class=p.priority_class, qos=p.qos, priority=p.priority,
                                 requests=p.request_resources(), limits=p.limit_resources()))
    node_rec = cluster.state.nodes[node]
    return NodeMetric(node=node, ts=snap.t_ms if ts is None else ts, node_usage=snap.node_usage,
                      system_usage=snap.system_usage, allocatable=node_rec.allocatable_resources(), pods=metrics)


def all_metrics(cluster: SimCluster) -> dict[str, NodeMetric]:
    return {n: node_metric(cluster, n) for n in cluster.state.nodes}


def cpu_percent(cluster: SimCluster, node: str) -> float:
    alloc = cluster.state.nodes[node].allocatable["cpu"]
    return 100.0 * cluster.usage_snapshot(node).node_usage.cpu_milli / alloc
