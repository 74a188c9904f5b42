"""Rows built from bus messages, as tuples in the column order of each table.

Tuples (not dicts) because the same rows feed PostgreSQL COPY and SQLite executemany
directly; at tens of thousands of container samples a second the difference shows.
Every table has a natural key taken from the message (node + ts, pod uid, message id), so a
redelivered message yields the same key and is dropped by the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson
from koordcommon.model import PriorityClass, QoSClass, priority_class_from_value
from koordcommon.schemas import (
    Event,
    Message,
    NodeMetric,
    NodeMetricSample,
    NodeResource,
    PodUsage,
    Recommendation,
    to_builtins,
)

PROD, MID, BATCH, FREE = "prod", "mid", "batch", "free"
BANDS = (PROD, MID, BATCH, FREE)

NODE_SAMPLE_COLUMNS = (
    "node", "ts", "window_s",
    "cpu_milli", "memory_bytes", "system_cpu_milli", "system_memory_bytes",
    "capacity_cpu_milli", "capacity_memory_bytes", "allocatable_cpu_milli", "allocatable_memory_bytes",
    "prod_used_cpu_milli", "prod_used_memory_bytes", "prod_requested_cpu_milli", "prod_requested_memory_bytes",
    "mid_used_cpu_milli", "mid_used_memory_bytes", "mid_requested_cpu_milli", "mid_requested_memory_bytes",
    "batch_used_cpu_milli", "batch_used_memory_bytes", "batch_requested_cpu_milli", "batch_requested_memory_bytes",
    "free_used_cpu_milli", "free_used_memory_bytes", "free_requested_cpu_milli", "free_requested_memory_bytes",
    "pods",
)  # fmt: skip
NODE_SAMPLE_KEY = ("node", "ts")

POD_SAMPLE_COLUMNS = (
    "node", "ts", "uid", "namespace", "name", "owner_kind", "owner_name",
    "qos", "priority_class", "band", "priority",
    "requests_cpu_milli", "requests_memory_bytes", "limits_cpu_milli", "limits_memory_bytes",
    "batch_requests_cpu_milli", "batch_requests_memory_bytes", "cpu_milli", "memory_bytes",
)  # fmt: skip
POD_SAMPLE_KEY = ("node", "ts", "uid")

CONTAINER_SAMPLE_COLUMNS = (
    "node", "ts", "pod_uid", "container",
    "requests_cpu_milli", "requests_memory_bytes", "limits_cpu_milli", "limits_memory_bytes",
    "cpu_milli", "memory_bytes",
)  # fmt: skip
CONTAINER_SAMPLE_KEY = ("node", "ts", "pod_uid", "container")

NODE_METRIC_COLUMNS = (
    "node", "ts", "aggregate_duration_s", "report_interval_s",
    "cpu_milli", "memory_bytes", "system_cpu_milli", "system_memory_bytes",
    "prod_reclaimable_cpu_milli", "prod_reclaimable_memory_bytes", "prod_peak_cpu_milli", "prod_peak_memory_bytes",
    "pods", "aggregated",
)  # fmt: skip
NODE_METRIC_KEY = ("node", "ts")

NODE_RESOURCE_COLUMNS = (
    "node", "ts", "batch_cpu_milli", "batch_memory_bytes", "mid_cpu_milli", "mid_memory_bytes",
    "degraded", "reason", "written", "metric_ts", "inputs", "messages",
)  # fmt: skip
NODE_RESOURCE_KEY = ("node", "ts")

RECOMMENDATION_COLUMNS = ("namespace", "owner_kind", "owner_name", "ts", "source", "containers")
RECOMMENDATION_KEY = ("namespace", "owner_kind", "owner_name", "ts")

EVENT_COLUMNS = ("msg_id", "ts", "kind", "node", "action", "reason", "dry_run", "target", "details", "source")
EVENT_KEY = ("msg_id",)


def band(priority_class: PriorityClass, priority: int | None, qos: QoSClass) -> str:
    """The priority band a pod's resources belong to (Koordinator's GetPodPriorityClassWithDefault).

    Explicit class first, then the value band; a pod with neither is prod, unless it is BE.
    """
    cls = priority_class if priority_class is not PriorityClass.NONE else priority_class_from_value(priority)
    if cls is PriorityClass.NONE:
        cls = PriorityClass.BATCH if qos is QoSClass.BE else PriorityClass.PROD
    return {PriorityClass.PROD: PROD, PriorityClass.MID: MID, PriorityClass.BATCH: BATCH}.get(cls, FREE)


def _json(value) -> str:
    return orjson.dumps(value).decode()


@dataclass
class Rows:
    """Rows of one batch of messages, per table."""

    node_samples: list[tuple] = field(default_factory=list)
    pod_samples: list[tuple] = field(default_factory=list)
    container_samples: list[tuple] = field(default_factory=list)
    node_metrics: list[tuple] = field(default_factory=list)
    node_resources: list[tuple] = field(default_factory=list)
    recommendations: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)

    def tables(self) -> dict[str, list[tuple]]:
        return {name: rows for name, rows in vars(self).items() if rows}

    def count(self) -> int:
        return sum(len(rows) for rows in vars(self).values())

    def add(self, msg: Message) -> None:
        if isinstance(msg, NodeMetricSample):
            add_sample(self, msg)
        elif isinstance(msg, NodeMetric):
            self.node_metrics.append(node_metric_row(msg))
        elif isinstance(msg, NodeResource):
            self.node_resources.append(node_resource_row(msg))
        elif isinstance(msg, Recommendation):
            self.recommendations.append(recommendation_row(msg))
        elif isinstance(msg, Event):
            self.events.append(event_row(msg))
        else:
            raise TypeError(f"no table for {type(msg).__name__}")


def build_rows(messages) -> Rows:
    rows = Rows()
    for msg in messages:
        rows.add(msg)
    return rows


def _pod_row(node: str, ts: int, pod: PodUsage, pod_band: str) -> tuple:
    owner = pod.owner
    return (
        node, ts, pod.uid, pod.namespace, pod.name,
        owner.kind if owner else "", owner.name if owner else "",
        pod.qos.value, pod.priority_class.value, pod_band, pod.priority,
        pod.requests.cpu_milli, pod.requests.memory_bytes, pod.limits.cpu_milli, pod.limits.memory_bytes,
        pod.batch_requests.cpu_milli, pod.batch_requests.memory_bytes,
        pod.usage.cpu_milli, pod.usage.memory_bytes,
    )  # fmt: skip


def add_sample(rows: Rows, msg: NodeMetricSample) -> None:
    """One node row, one row per pod and one per container of the sample."""
    node, ts = msg.node, msg.ts
    # per band: used cpu, used memory, requested cpu, requested memory
    sums = {b: [0, 0, 0, 0] for b in BANDS}
    pod_rows, container_rows = rows.pod_samples, rows.container_samples
    for pod in msg.pods:
        b = band(pod.priority_class, pod.priority, pod.qos)
        acc = sums[b]
        acc[0] += pod.usage.cpu_milli
        acc[1] += pod.usage.memory_bytes
        # Batch and free pods request the batch tier (koordinator.sh/batch-*), not cpu/memory.
        req = pod.batch_requests if b in (BATCH, FREE) and not pod.batch_requests.is_zero() else pod.requests
        acc[2] += req.cpu_milli
        acc[3] += req.memory_bytes
        pod_rows.append(_pod_row(node, ts, pod, b))
        for c in pod.containers:
            container_rows.append((
                node, ts, pod.uid, c.name,
                c.requests.cpu_milli, c.requests.memory_bytes, c.limits.cpu_milli, c.limits.memory_bytes,
                c.usage.cpu_milli, c.usage.memory_bytes,
            ))  # fmt: skip
    rows.node_samples.append((
        node, ts, msg.window_s,
        msg.node_usage.cpu_milli, msg.node_usage.memory_bytes,
        msg.system_usage.cpu_milli, msg.system_usage.memory_bytes,
        msg.capacity.cpu_milli, msg.capacity.memory_bytes,
        msg.allocatable.cpu_milli, msg.allocatable.memory_bytes,
        *sums[PROD], *sums[MID], *sums[BATCH], *sums[FREE],
        len(msg.pods),
    ))  # fmt: skip


def _opt(r, attr):
    return None if r is None else getattr(r, attr)


def node_metric_row(msg: NodeMetric) -> tuple:
    aggregated = [to_builtins(a) for a in msg.aggregated_node_usages]
    return (
        msg.node, msg.ts, msg.aggregate_duration_s, msg.report_interval_s,
        msg.node_usage.cpu_milli, msg.node_usage.memory_bytes,
        msg.system_usage.cpu_milli, msg.system_usage.memory_bytes,
        _opt(msg.prod_reclaimable, "cpu_milli"), _opt(msg.prod_reclaimable, "memory_bytes"),
        _opt(msg.prod_peak, "cpu_milli"), _opt(msg.prod_peak, "memory_bytes"),
        len(msg.pods), _json(aggregated),
    )  # fmt: skip


def node_resource_row(msg: NodeResource) -> tuple:
    return (
        msg.node, msg.ts,
        _opt(msg.batch, "cpu_milli"), _opt(msg.batch, "memory_bytes"),
        _opt(msg.mid, "cpu_milli"), _opt(msg.mid, "memory_bytes"),
        msg.degraded, msg.reason, msg.written, msg.metric_ts, _json(msg.inputs), _json(msg.messages),
    )  # fmt: skip


def recommendation_row(msg: Recommendation) -> tuple:
    containers = [c.model_dump(mode="json") for c in msg.containers]
    return (msg.namespace, msg.owner_kind, msg.owner_name, msg.ts, msg.source, _json(containers))


def event_row(msg: Event) -> tuple:
    return (
        msg.msg_id, msg.ts, msg.kind, msg.node, msg.action, msg.reason, msg.dry_run,
        _json(msg.target), _json(msg.details), msg.source,
    )  # fmt: skip
