"""Bus adapter: container usage in (koord.metrics.>), Recommendation messages out.

Delivery guarantee. The durable consumer `recommender` acks a batch once the handler has
applied it to the in-memory state; the state reaches the database at the next checkpoint
(periodically and on shutdown). A crash therefore loses at most the samples acked since the
last checkpoint (one checkpoint interval; set the interval to 0 to checkpoint every batch
before it is acked). Messages delivered again (a crash between checkpoint and ack, an ack
lost on reconnect, a slow handler past ack_wait) are not counted twice: every pod container
keeps the timestamp of its last CPU and memory sample and of its last OOM in the
checkpoint, and samples not newer than those are discarded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from koordcommon import schemas, subjects
from koordcommon.bus import Bus, Delivery
from koordcommon.resources import Resources

from .core.engine import ContainerResult, RecommenderState, UsageSample, WorkloadResult
from .core.profile import LEVELS, Stats
from .core.workload import ContainerKey, WorkloadKey

DURABLE = "recommender"
FILTER = "koord.metrics.>"
# Pods that report no per-container usage are tracked as one container of this name
# (never a valid Kubernetes container name, so it cannot collide).
POD_LEVEL_CONTAINER = "_pod"

Resolve = Callable[[schemas.PodUsage], Awaitable[WorkloadKey]]
MethodOf = Callable[[WorkloadKey, schemas.PodUsage], Awaitable[str | None]]


async def apply_sample(
    state: RecommenderState, msg: schemas.NodeMetricSample, resolve: Resolve, method_of: MethodOf | None = None
) -> int:
    """Feed one NodeMetricSample into the state; the number of container samples accepted."""
    t = msg.ts / 1000.0
    accepted = 0
    for pod in msg.pods:
        workload = await resolve(pod)
        if method_of is not None:
            state.set_method(workload, await method_of(workload, pod))
        containers: Iterable[schemas.ContainerUsage] = pod.containers or [
            schemas.ContainerUsage(name=POD_LEVEL_CONTAINER, requests=pod.requests, limits=pod.limits, usage=pod.usage)
        ]
        for c in containers:
            key = ContainerKey(workload, c.name)
            took = state.add(
                UsageSample(
                    key=key,
                    pod_uid=pod.uid,
                    t=t,
                    cpu_cores=c.usage.cpu_milli / 1000.0,
                    memory_bytes=float(c.usage.memory_bytes),
                    cpu_request_cores=c.requests.cpu_milli / 1000.0,
                    memory_request_bytes=float(c.requests.memory_bytes),
                )
            )
            accepted += took
            if c.last_oom_ms is not None:
                state.record_oom(key, pod.uid, c.last_oom_ms / 1000.0, float(c.requests.memory_bytes))
    return accepted


async def consume_usage(
    bus: Bus,
    state: RecommenderState,
    resolve: Resolve,
    after_batch: Callable[[], Awaitable[None]] | None = None,
    batch: int = 500,
    method_of: MethodOf | None = None,
):
    """Start the durable consumer; `after_batch` runs before the batch is acked (checkpointing)."""

    async def handle(deliveries: list[Delivery[schemas.NodeMetricSample]]) -> None:
        for d in deliveries:
            await apply_sample(state, d.msg, resolve, method_of)
        if after_batch is not None:
            await after_batch()

    return await bus.consume(
        stream=subjects.METRICS_STREAM,
        durable=DURABLE,
        filter_subject=FILTER,
        schema=schemas.NodeMetricSample,
        handler=handle,
        batch=batch,
    )


# --------------------------------------------------------------------------- output


def _res(cpu_cores: float | None, memory_bytes: float | None) -> Resources:
    return Resources(
        0 if cpu_cores is None else round(cpu_cores * 1000),
        0 if memory_bytes is None else int(memory_bytes),
    )


def _profiles(c: ContainerResult) -> list[schemas.UsageProfile]:
    out = []
    for level in LEVELS:
        cpu, mem = c.windows.get(level.window_s, (None, None))
        if cpu is None and mem is None:
            continue

        def pick(name: str, cpu: Stats | None = cpu, mem: Stats | None = mem) -> Resources:
            return _res(getattr(cpu, name) if cpu else None, getattr(mem, name) if mem else None)

        out.append(
            schemas.UsageProfile(
                window_s=level.window_s, p50=pick("p50"), p90=pick("p90"), p95=pick("p95"), p99=pick("p99"), max=pick("max")
            )
        )
    return out


def _diurnal(values: list[float | None], scale: float) -> list[int]:
    if all(v is None for v in values):
        return []
    return [0 if v is None else round(v * scale) for v in values]


def to_message(result: WorkloadResult) -> schemas.Recommendation:
    wl = result.workload
    return schemas.Recommendation(
        namespace=wl.namespace,
        owner_kind=wl.kind,
        owner_name=wl.name,
        containers=[
            schemas.ContainerRecommendation(
                container=c.container,
                target=Resources(c.estimate.target.cpu_milli, c.estimate.target.memory_bytes),
                lower_bound=Resources(c.estimate.lower_bound.cpu_milli, c.estimate.lower_bound.memory_bytes),
                upper_bound=Resources(c.estimate.upper_bound.cpu_milli, c.estimate.upper_bound.memory_bytes),
                current_requests=None if c.current is None else Resources(c.current.cpu_milli, c.current.memory_bytes),
                profiles=_profiles(c),
                diurnal_cpu_milli=_diurnal(c.diurnal_cpu, 1000.0),
                diurnal_memory_bytes=_diurnal(c.diurnal_memory, 1.0),
                method=c.method,
            )
            for c in result.containers
        ],
    )


def subject_of(workload: WorkloadKey) -> str:
    return subjects.recommendation(workload.namespace, workload.owner_token)


def retraction(workload: WorkloadKey) -> schemas.Recommendation:
    """A forgotten workload's last word: a recommendation with no container (no profile)."""
    return schemas.Recommendation(namespace=workload.namespace, owner_kind=workload.kind, owner_name=workload.name)


async def retract(bus: Bus, workloads: list[WorkloadKey]) -> int:
    items = [(subject_of(w), bus.stamp(retraction(w))) for w in workloads]
    if items:
        await bus.publish_many(items)
    return len(items)


async def publish(bus: Bus, results: list[WorkloadResult]) -> int:
    items = [(subject_of(r.workload), bus.stamp(to_message(r))) for r in results]
    if items:
        await bus.publish_many(items)
    return len(items)
