"""Batch arrivals for the simulated cluster, from the Alibaba 2017 batch_task table.

Each selected task becomes one pending BE pod requesting `koordinator.sh/batch-cpu` (plan_cpu,
100 = 1 core) and `batch-memory` (normalised memory x the node's memory). The 24-h trace is
thinned to `batch_tasks_per_node_hour` and loops, so any simulated time has arrivals.
"""

from __future__ import annotations

import math

import numpy as np
from koordcommon import resources as rn
from koordcommon.records import ContainerSpec, PodRecord

from . import traces
from .genesis import pod_uid
from .spec import GIB, SimSpec

BATCH_NAMESPACE = "batch-stream"
TRACE_PERIOD_S = 86_400  # the v2017 trace covers one day
DURATION_ANNOTATION = "sim.koordinator.sh/duration-s"
MIN_DURATION_S, MAX_DURATION_S = 60, 4 * 3600
DEFAULT_CPU_MILLI = 500
MIN_MEMORY = 64 << 20


def _tasks(spec: SimSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    source = spec.trace_source()
    if source is None:  # synthetic load, asked for
        rng = np.random.default_rng(spec.seed)
        n = 4000
        create = np.sort(rng.integers(0, TRACE_PERIOD_S, n))
        return (create, rng.integers(60, 1800, n), np.arange(n), np.zeros(n, dtype=np.int64),
                rng.choice([500, 1000], n), rng.uniform(0.002, 0.02, n))
    bt = traces.alibaba2017_batch_tasks(source)
    return bt.create_s, bt.duration_s, bt.job_id, bt.task_id, bt.plan_cpu_milli, bt.memory_norm


def batch_arrivals(spec: SimSpec, from_ms: int, to_ms: int) -> list[PodRecord]:
    """Pods whose (looped, thinned) arrival falls in (from_ms, to_ms], oldest first."""
    spec = spec.resolved()
    if spec.nodes == 0 or spec.batch_tasks_per_node_hour <= 0 or to_ms <= from_ms:
        return []
    create, duration, job, task, cpu, mem = _tasks(spec)
    if create.size == 0:
        return []
    # Loop over the span that has arrivals (about 17 h of the 24-h trace), so a long run has no
    # silent hours; `batch_trace_offset_s` picks where in that span simulated time starts.
    period = int(create.max() - create.min()) + 1
    rate = create.size / period
    want = spec.nodes * spec.batch_tasks_per_node_hour / 3600
    stride = max(1, round(rate / want))
    pick = np.flatnonzero(np.arange(create.size) % stride == spec.seed % stride)
    offset_s = ((create[pick] - create.min() - spec.batch_trace_offset_s) % period).astype(np.int64)
    start_s = (spec.start_ms or 0) // 1000
    lo, hi = from_ms // 1000 - start_s, to_ms // 1000 - start_s
    out: list[PodRecord] = []
    for loop in range(max(lo // period, 0), max(hi // period, -1) + 1):
        at = loop * period + offset_s
        for k in np.flatnonzero((at > lo) & (at <= hi)):
            i = pick[k]
            arrival_ms = (start_s + int(at[k])) * 1000
            if arrival_ms <= from_ms or arrival_ms > to_ms:
                continue
            out.append(_pod(spec, loop, int(job[i]), int(task[i]), int(cpu[i]), float(mem[i]), int(duration[i]), arrival_ms))
    return out


def _pod(spec: SimSpec, loop: int, job: int, task: int, cpu: int, mem_norm: float, duration_s: int, at_ms: int) -> PodRecord:
    name = f"job-{job}-task-{task}-{loop}"
    cpu = cpu if cpu > 0 else DEFAULT_CPU_MILLI
    mem = MIN_MEMORY if math.isnan(mem_norm) else max(int(mem_norm * spec.node_memory_gib * GIB), MIN_MEMORY)
    requests = {rn.batch_cpu(): cpu, rn.batch_memory(): mem}
    return PodRecord(
        namespace=BATCH_NAMESPACE,
        name=name,
        uid=pod_uid(spec.seed, BATCH_NAMESPACE, name),
        labels={"app": f"job-{job}", "koordinator.sh/qosClass": "BE"},
        annotations={DURATION_ANNOTATION: str(min(max(duration_s, MIN_DURATION_S), MAX_DURATION_S))},
        priority=5000,
        priority_class_name="koord-batch",
        containers=[ContainerSpec("task", dict(requests), dict(requests))],
        created_ms=at_ms,
    )


def finished(pod: PodRecord, now_ms: int) -> bool:
    """A running stream pod whose trace duration has elapsed."""
    if pod.phase != "Running" or pod.start_ms is None:
        return False
    try:
        duration_s = int(pod.annotations.get(DURATION_ANNOTATION, ""))
    except ValueError:
        return False
    return now_ms >= pod.start_ms + duration_s * 1000
