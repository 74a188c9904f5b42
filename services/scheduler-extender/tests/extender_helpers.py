"""Builders for the core tests: pods, nodes and NodeMetrics with real numbers."""

from koordcommon.model import PriorityClass
from koordcommon.records import ContainerSpec, NodeRecord, OwnerRef, PodRecord
from koordcommon.resources import Resources
from koordcommon.schemas import NodeMetric, PodMetric

Gi = 1024**3
T0 = 1_700_000_000_000  # NodeMetric update time used by the tables


def pod(
    name,
    cpu=0,
    mem=0,
    lim_cpu=None,
    lim_mem=None,
    node=None,
    ns="default",
    labels=None,
    priority=None,
    extra_requests=None,
    owners=None,
    uid=None,
    annotations=None,
    phase="Running",
    start_ms=None,
    containers=None,
):
    req = {}
    if cpu:
        req["cpu"] = cpu
    if mem:
        req["memory"] = mem
    req.update(extra_requests or {})
    lim = dict(extra_requests or {})
    if lim_cpu is not None:
        lim["cpu"] = lim_cpu
    if lim_mem is not None:
        lim["memory"] = lim_mem
    return PodRecord(
        namespace=ns,
        name=name,
        uid=uid or f"uid-{name}",
        node_name=node,
        labels=dict(labels or {}),
        annotations=dict(annotations or {}),
        owners=list(owners or []),
        priority=priority,
        phase=phase,
        containers=containers or [ContainerSpec("main", req, lim)],
        start_ms=start_ms,
    )


def guaranteed(name, cpu, mem, **kw):
    return pod(name, cpu, mem, lim_cpu=cpu, lim_mem=mem, **kw)


def node(name, cpu=32000, mem=64 * Gi, extra=None, annotations=None):
    alloc = {"cpu": cpu, "memory": mem, "pods": 110, **(extra or {})}
    return NodeRecord(name=name, capacity=dict(alloc), allocatable=alloc, annotations=dict(annotations or {}))


def metric(node_name, cpu, mem, ts=T0, pods=(), alloc=(32000, 64 * Gi), report_s=60, **kw):
    return NodeMetric(
        node=node_name,
        ts=ts,
        report_interval_s=report_s,
        allocatable=Resources(*alloc),
        node_usage=Resources(cpu, mem),
        pods=list(pods),
        **kw,
    )


def pod_metric(name, cpu, mem, ns="default", cls=PriorityClass.PROD):
    return PodMetric(uid=f"uid-{name}", namespace=ns, name=name, usage=Resources(cpu, mem), priority_class=cls)


def rs_owner(name):
    return OwnerRef(kind="ReplicaSet", name=name, uid=f"uid-{name}", api_version="apps/v1", controller=True)
