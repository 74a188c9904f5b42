"""Batch arrivals for the simulated cluster, from the Alibaba 2017 batch_task table.

Each selected task becomes pending BE pods requesting `koordinator.sh/batch-cpu` (plan_cpu,
100 = 1 core) and `batch-memory` (its share of a 2017 machine's memory, see `_memory`), running for the task's
traced duration. By default a task is one pod asking one instance (the demo's light stream); with
`batch_pod_cpu_milli` its instances are packed into pods of up to that much CPU (a Spark or Flink
executor runs several task slots), each pod owned by the task's Job. The trace's day of
submissions is thinned (to `batch_tasks_per_node_hour`, or to the demand `batch_load` asks for)
and loops, so any simulated time has arrivals.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from koordcommon import resources as rn
from koordcommon.records import ContainerSpec, OwnerRef, PodRecord

from . import traces
from .genesis import pod_uid
from .spec import GIB, SimSpec

BATCH_NAMESPACE = "batch-stream"
TRACE_PERIOD_S = 86_400  # the v2017 trace covers one day
DURATION_ANNOTATION = "sim.koordinator.sh/duration-s"
MIN_DURATION_S, MAX_DURATION_S = 60, 4 * 3600
DEFAULT_CPU_MILLI = 500
MIN_MEMORY = 64 << 20
V2017_MACHINE_CORES = 64  # the 2017 trace's machines; plan_mem is a share of one machine's memory


def _tasks(spec: SimSpec) -> tuple[np.ndarray, ...]:
    """(create s, duration s, job, task, instances, plan cpu milli, memory norm) per task."""
    source = spec.trace_source()
    if source is None:  # synthetic load, asked for
        rng = np.random.default_rng(spec.seed)
        n = 4000
        create = np.sort(rng.integers(0, TRACE_PERIOD_S, n))
        return (create, rng.integers(60, 1800, n), np.arange(n), np.zeros(n, dtype=np.int64),
                rng.integers(1, 50, n), rng.choice([500, 1000], n), rng.uniform(0.002, 0.02, n))
    bt = traces.alibaba2017_batch_tasks(source)
    return bt.create_s, bt.duration_s, bt.job_id, bt.task_id, bt.instances, bt.plan_cpu_milli, bt.memory_norm


def _clamped(duration: np.ndarray) -> np.ndarray:
    return np.clip(duration, MIN_DURATION_S, MAX_DURATION_S)


def _cpu(cpu: np.ndarray) -> np.ndarray:
    return np.where(cpu > 0, cpu, DEFAULT_CPU_MILLI)


def _stride(spec: SimSpec, create: np.ndarray, duration: np.ndarray, instances: np.ndarray, cpu: np.ndarray,
            period: int) -> int:
    """Every how many tasks one is taken: to `batch_load` when set, else `batch_tasks_per_node_hour`.

    Task sizes are heavy-tailed, so the demand of every k-th task strays from 1/k of the whole:
    the stride whose own picks come closest to the asked demand is taken."""
    if spec.batch_load is not None and spec.batch_pod_cpu_milli > 0:
        work = np.maximum(instances, 1) * _cpu(cpu) * _clamped(duration)  # milli-core-seconds per task
        target = spec.batch_load * spec.nodes * spec.node_cpu_cores * 1000 * period
        if target <= 0:
            return 0
        guess = max(1, round(float(work.sum()) / target))

        def miss(k: int) -> float:
            # every k-th task from seed % k: a strided slice, not a mask over every task (a
            # small cluster tries hundreds of strides); integer sums, so exact either way
            return abs(float(work[spec.seed % k :: k].sum()) - target)

        return min(range(max(1, guess // 2), 2 * guess + 2), key=miss)
    want = spec.nodes * spec.batch_tasks_per_node_hour / 3600
    return max(1, round(create.size / period / want)) if want > 0 else 0


def _schedule(spec: SimSpec) -> tuple[int, np.ndarray, tuple[np.ndarray, ...]] | None:
    """(period s, the picked tasks' offsets in the period, ascending, the task columns in that
    order): the thinned day of arrivals, computed once per spec."""
    return _schedule_of(spec.model_dump_json())


@functools.lru_cache(maxsize=8)
def _schedule_of(spec_json: str) -> tuple[int, np.ndarray, tuple[np.ndarray, ...]] | None:
    spec = SimSpec.model_validate_json(spec_json)
    create, duration, job, task, instances, cpu, mem = _tasks(spec)
    if create.size == 0:
        return None
    # Loop over the span that has arrivals (about 17 h of the 24-h trace), so a long run has no
    # silent hours; `batch_trace_offset_s` picks where in that span simulated time starts.
    period = int(create.max() - create.min()) + 1
    stride = _stride(spec, create, duration, instances, cpu, period)
    if stride <= 0:
        return None
    pick = np.flatnonzero(np.arange(create.size) % stride == spec.seed % stride)
    offset_s = ((create[pick] - create.min() - spec.batch_trace_offset_s) % period).astype(np.int64)
    order = np.argsort(offset_s, kind="stable")
    rows = pick[order]
    return period, offset_s[order], tuple(c[rows] for c in (duration, job, task, instances, cpu, mem))


def batch_arrivals(spec: SimSpec, from_ms: int, to_ms: int) -> list[PodRecord]:
    """Pods whose (looped, thinned) arrival falls in (from_ms, to_ms], oldest first."""
    spec = spec.resolved()
    if spec.nodes == 0 or to_ms <= from_ms:
        return []
    schedule = _schedule(spec)
    if schedule is None:
        return []
    period, offsets, (duration, job, task, instances, cpu, mem) = schedule
    start_s = (spec.start_ms or 0) // 1000
    lo, hi = from_ms // 1000 - start_s, to_ms // 1000 - start_s
    out: list[PodRecord] = []
    for loop in range(max(lo // period, 0), max(hi // period, -1) + 1):
        base = loop * period
        first, last = np.searchsorted(offsets, (lo - base, hi - base), side="right")
        for k in range(first, last):
            arrival_ms = (start_s + base + int(offsets[k])) * 1000
            if arrival_ms <= from_ms or arrival_ms > to_ms:
                continue
            out.extend(_task_pods(spec, loop, int(job[k]), int(task[k]), int(instances[k]), int(cpu[k]),
                                  float(mem[k]), int(duration[k]), arrival_ms))
    return out


def _memory(spec: SimSpec, mem_norm: float) -> int:
    """Bytes for an instance's plan_mem. plan_mem is a share of a 2017 machine's memory, which the
    trace does not give: that machine (64 cores) is taken to hold as much memory per core as the
    simulated node, so a task keeps the memory-to-CPU ratio it had in the trace on any node size."""
    if math.isnan(mem_norm):
        return MIN_MEMORY
    per_core = spec.node_memory_gib * GIB / max(spec.node_cpu_cores, 1)
    return max(int(mem_norm * V2017_MACHINE_CORES * per_core), MIN_MEMORY)


def _task_pods(spec: SimSpec, loop: int, job: int, task: int, instances: int, cpu: int, mem_norm: float,
               duration_s: int, at_ms: int) -> list[PodRecord]:
    cpu = cpu if cpu > 0 else DEFAULT_CPU_MILLI
    mem = _memory(spec, mem_norm)
    name = f"job-{job}-task-{task}-{loop}"
    if spec.batch_pod_cpu_milli <= 0:  # one pod asking one instance
        return [_pod(spec, name, cpu, mem, duration_s, at_ms, job)]
    per_pod = max(1, spec.batch_pod_cpu_milli // cpu)
    owner = OwnerRef("Job", name, pod_uid(spec.seed, BATCH_NAMESPACE, f"job/{name}"), "batch/v1", True)
    pods = []
    left = max(instances, 1)
    for k in range(-(-left // per_pod)):
        n = min(per_pod, left - k * per_pod)
        pods.append(_pod(spec, f"{name}-{k}", n * cpu, n * mem, duration_s, at_ms, job, owner))
    return pods


def _pod(spec: SimSpec, name: str, cpu: int, mem: int, duration_s: int, at_ms: int, job: int,
         owner: OwnerRef | None = None) -> PodRecord:
    requests = {rn.batch_cpu(): cpu, rn.batch_memory(): mem}
    return PodRecord(
        namespace=BATCH_NAMESPACE,
        name=name,
        uid=pod_uid(spec.seed, BATCH_NAMESPACE, name),
        labels={"app": f"job-{job}", "koordinator.sh/qosClass": "BE"},
        annotations={DURATION_ANNOTATION: str(min(max(duration_s, MIN_DURATION_S), MAX_DURATION_S))},
        owners=[owner] if owner is not None else [],
        priority=5000,
        priority_class_name="koord-batch",
        containers=[ContainerSpec("task", dict(requests), dict(requests))],
        created_ms=at_ms,
    )


def finished(pod: PodRecord, now_ms: float) -> bool:
    """A running stream pod whose trace duration has elapsed (a caller that knows how long CPU
    suppress held the pod back passes `now_ms` less that time)."""
    if pod.phase != "Running" or pod.start_ms is None:
        return False
    try:
        duration_s = int(pod.annotations.get(DURATION_ANNOTATION, ""))
    except ValueError:
        return False
    return now_ms >= pod.start_ms + duration_s * 1000


def assumptions(spec: SimSpec) -> list[str]:
    """How the batch stream is modelled, in the words a report repeats."""
    spec = spec.resolved()
    packed = spec.batch_pod_cpu_milli > 0
    if packed and spec.batch_load is not None:
        create, duration, _, _, instances, cpu, _ = _tasks(spec)
        period = int(create.max() - create.min()) + 1 if create.size else 1
        stride = _stride(spec, create, duration, instances, cpu, period)
        picked = np.arange(create.size) % max(stride, 1) == spec.seed % max(stride, 1)
        demand = float((np.maximum(instances, 1) * _cpu(cpu) * _clamped(duration))[picked].sum())
        achieved = demand / max(spec.nodes * spec.node_cpu_cores * 1000 * period, 1)
        thinning = (f"every {stride}th task (of {create.size}), for a mean batch CPU request of {achieved:.0%} of node "
                    f"CPU (asked: {spec.batch_load:.0%})")
    else:
        thinning = f"{spec.batch_tasks_per_node_hour:g} tasks per node-hour"
    return [
        ("batch demand: Alibaba 2017 batch_task rows (arrival = task create time, duration = end - create, "
        f"clamped to {MIN_DURATION_S} s .. {MAX_DURATION_S // 3600} h), {thinning}, looping over the day's "
        "17 hours of submissions"),
        (f"a task's instances are packed into pods of up to {spec.batch_pod_cpu_milli}m, owned by the task's Job; "
         if packed else "a task is one pod asking one instance; ")
        + "an instance asks plan_cpu as batch-cpu (tasks without it: "
        f"{DEFAULT_CPU_MILLI}m) and plan_mem x a 2017 machine's memory as batch-memory (that machine's "
        f"{V2017_MACHINE_CORES} cores at this node's {spec.node_memory_gib / max(spec.node_cpu_cores, 1):.3g} GiB "
        f"per core; at least {MIN_MEMORY >> 20} MiB)",
        (f"batch usage: {spec.batch_utilisation:.0%} of the request, +/- 10 % noise per pod and minute (seeded), "
        "memory 55-65 % of the request"),
        ("a task's traced duration is its run time at the CPU it asks for: a minute in which CPU suppress grants a "
         "pod a share s of what it asked advances it by s of a minute, so a throttled pod runs longer than traced "
         "(and asks for CPU, and holds its batch request, all the while)"),
        "an evicted batch pod is submitted again and runs its whole duration anew",
    ] + ([(f"the batch framework keeps at most {spec.batch_max_pending} pods pending in the cluster and holds the rest "
           "in its own queue, first in first out; queueing delay counts from when a pod entered that queue")]
         if spec.batch_max_pending else [])
