"""A cluster of real machines: each node replays one Alibaba 2018 machine's whole usage.

The 2018 trace gives, per machine, whole-machine CPU and memory utilisation over 8 days (no
per-container rows survive in the copies we can get). Each machine becomes a node carrying one
online (prod, LS) pod whose usage is the machine's usage, so whatever the machine ran counts
as load that batch work may not take away. That is conservative: the machines already ran
Alibaba's own batch jobs, which this reading counts as online too.

Modelling choices, stated once here and repeated in every report that uses them
(`assumptions`):
* the machines that report over all 8 days are used (14 of the 16 in the trace; the other two
  start late or stop early, and a node whose usage is missing for days would read as idle);
* a larger cluster repeats those machines with their series shifted in time by a seeded offset
  per copy (a synthetic cluster, labelled so);
* the trace normalises memory and counts the page cache and the co-located batch jobs in it;
  the online pod's memory is `online_memory_share` of the traced machine memory;
* the online pod requests what a scheduler filled the node with (a seeded `prod_fill_min` to
  `prod_fill_max` of allocatable, as the Bitbrains cluster does), and never less than its own
  peak usage over the trace.
"""

from __future__ import annotations

import numpy as np
from koordcommon.model import LABEL_QOS_CLASS, PriorityClass
from koordcommon.records import ContainerSpec, NodeRecord, OwnerRef, PodRecord

from . import traces
from .genesis import Genesis, pod_uid, safe_hash
from .spec import GIB, SimSpec
from .usage import TraceSource, UsageModel

ONLINE_NAMESPACE = "online"
MACHINE_LABEL = "sim.koordinator.sh/machine"
SYNTHETIC_LABEL = "sim.koordinator.sh/synthetic-copy"
TRACE_DAYS = 8


SLACK_S = 6 * 3600  # a machine whose first or last report is this close to the trace's ends counts as complete


def full_day_machines(usage: dict[str, traces.MachineUsage], days: int = TRACE_DAYS) -> list[traces.MachineUsage]:
    """The machines that report over all `days` days (their first report within the first hours,
    their last within the last): 14 of the 16 in the trace."""
    end = days * 86_400
    return sorted(
        (m for m in usage.values() if m.start_s < SLACK_S and m.start_s + len(m) * m.step_s >= end - SLACK_S),
        key=lambda m: m.machine_id,
    )


def _aligned(m: traces.MachineUsage, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The machine's series on the trace's own clock (row 0 = trace second 0): the hours before its
    first report take that report's value, the hours after its last take the last."""
    lead = m.start_s // m.step_s
    cpu = np.concatenate((np.full(lead, m.cpu_percent[0]), m.cpu_percent))
    mem = np.concatenate((np.full(lead, m.mem_percent[0]), m.mem_percent))
    if len(cpu) < length:
        cpu = np.concatenate((cpu, np.full(length - len(cpu), cpu[-1])))
        mem = np.concatenate((mem, np.full(length - len(mem), mem[-1])))
    return cpu[:length], mem[:length]


def assumptions(spec: SimSpec, machines: list[str], copies: int) -> list[str]:
    out = [
        (f"online load: Alibaba 2018 machine_usage of {len(machines)} machines that report over all 8 days "
        f"({', '.join(machines)}), re-binned to 60 s, holes filled with the last value, the first hours before a "
        "machine's first report with that report; the two machines that start days late or stop days early "
        "are left out"),
        ("each machine's whole usage (its online services, the batch jobs it ran in 2018 and the OS) counts as "
        "online load that batch may not take: reclaimed capacity is a lower bound"),
        (f"node size: {spec.node_cpu_cores} cores (the trace's machines have 96), {spec.node_memory_gib} GiB "
        "(the trace normalises memory; assumed)"),
        (f"online memory: {spec.online_memory_share:.0%} of the traced machine memory (the trace counts page "
        "cache and the 2018 batch jobs in it; the node agent, like Koordinator, does not count page cache)"),
        (f"online requests: a seeded {spec.prod_fill_min:.0%}-{spec.prod_fill_max:.0%} of allocatable, at "
        "least the machine's peak usage"),
    ]
    if copies > 1:
        out.append(
            f"synthetic cluster: {spec.nodes} nodes repeat the {len(machines)} machines {copies} times, each "
            "copy's series shifted by a seeded offset (not real machines)"
        )
    return out


def build(spec: SimSpec) -> Genesis:
    """The `machines` scenario: a cluster of real machines, one node each."""
    spec = spec.resolved()
    source = spec.trace_source()
    if source is None:
        raise traces.TracesNotFound("the machines scenario replays the Alibaba 2018 trace; synthetic load has none")
    machines = full_day_machines(traces.alibaba2018_machine_usage(source))
    if not machines:
        raise traces.TracesNotFound(f"no Alibaba 2018 machine covers 8 days in {source.describe()}")
    step = machines[0].step_s
    length = TRACE_DAYS * 86_400 // step
    cap_cpu, cap_mem = spec.node_cpu_cores * 1000, spec.node_memory_gib * GIB
    alloc_cpu = max(cap_cpu - spec.kube_reserved_cpu_milli, 0)
    alloc_mem = max(cap_mem - spec.kube_reserved_memory_bytes, 0)
    aligned = [_aligned(m, length) for m in machines]
    cpu = np.stack([c for c, _ in aligned]) / 100 * cap_cpu
    mem = np.stack([m for _, m in aligned]) / 100 * cap_mem * spec.online_memory_share
    usage = UsageModel(
        cpu, mem, np.full(len(machines), length), step,
        np.zeros((0, 1)), np.zeros((0, 1)), np.zeros(0, dtype=np.int64), step, spec.batch_utilisation,
    )  # fmt: skip
    n = spec.nodes if spec.nodes > 0 else len(machines)
    copies = -(-n // len(machines))
    rng = np.random.default_rng(spec.seed)
    shifts = np.concatenate(([0], rng.integers(1, length, size=copies - 1))) if copies > 1 else np.zeros(1, dtype=int)
    fill = rng.uniform(spec.prod_fill_min, max(spec.prod_fill_max, spec.prod_fill_min), size=n)
    start = spec.start_ms or 0
    # trace second 0 falls on the spec's start: UsageModel indexes series by absolute simulated time
    base_offset = (-(start // (step * 1000))) % length
    nodes: list[NodeRecord] = []
    pods: list[PodRecord] = []
    workloads: dict[str, str] = {}
    for i in range(n):
        row, copy = i % len(machines), i // len(machines)
        m = machines[row]
        name = spec.node_name(i)
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", MACHINE_LABEL: m.machine_id}
        if copy:
            labels[SYNTHETIC_LABEL] = str(copy)
        nodes.append(
            NodeRecord(
                name=name,
                labels=labels,
                capacity={"cpu": cap_cpu, "memory": cap_mem, "pods": spec.node_max_pods},
                allocatable={"cpu": alloc_cpu, "memory": alloc_mem, "pods": spec.node_max_pods},
                created_ms=start - 86_400_000,
                resource_version="1",
            )
        )
        deploy = f"online-{m.machine_id.replace('_', '-')}" + (f"-copy{copy}" if copy else "")
        rs = f"{deploy}-{safe_hash(f'{spec.seed}/{deploy}', 10)}"
        workloads[rs] = deploy
        pod_name = f"{rs}-{safe_hash(f'{spec.seed}/{rs}/0', 5)}"
        uid = pod_uid(spec.seed, ONLINE_NAMESPACE, pod_name)
        req_cpu = int(max(fill[i] * alloc_cpu, cpu[row].max()))
        req_mem = int(max(fill[i] * alloc_mem, mem[row].max()))
        pods.append(
            PodRecord(
                namespace=ONLINE_NAMESPACE,
                name=pod_name,
                uid=uid,
                node_name=name,
                labels={"app": deploy, "pod-template-hash": rs.rsplit("-", 1)[1], LABEL_QOS_CLASS: "LS"},
                owners=[OwnerRef("ReplicaSet", rs, pod_uid(spec.seed, ONLINE_NAMESPACE, rs), "apps/v1", True)],
                priority=9500,
                priority_class_name=PriorityClass.PROD.value,
                phase="Running",
                containers=[ContainerSpec("app", {"cpu": req_cpu, "memory": req_mem}, {"cpu": cap_cpu, "memory": cap_mem})],
                kube_qos="Burstable",
                created_ms=start - 3_600_000,
                start_ms=start - 3_600_000,
                resource_version="1",
            )
        )
        usage.pod_sources[uid] = TraceSource(row=row, offset=int((base_offset + shifts[copy]) % length), cpu_scale=1.0, mem_scale=1.0)
    return Genesis(nodes, pods, workloads, usage, False, assumptions(spec, [m.machine_id for m in machines], copies))
