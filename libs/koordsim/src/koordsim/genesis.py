"""The initial simulated cluster: a pure function of a SimSpec.

Online pods replay Bitbrains VMs (VM i -> Deployment `vm-<i>`, prod, LS). Their requests are
the VM's provisioned size scaled so that each node's prod requests reach a seeded 60-80% of
allocatable with no pod above `max_pod_fraction` of the node; usage is scaled by the same
factor, so a pod's usage/request ratio is the VM's own. Node system usage follows the shape
of an Alibaba 2018 machine.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field

import numpy as np
from koordcommon.model import LABEL_QOS_CLASS, PriorityClass
from koordcommon.records import ContainerSpec, NodeRecord, OwnerRef, PodRecord

from . import traces
from .spec import GIB, SimSpec
from .usage import TraceSource, UsageModel

ONLINE_NAMESPACE = "online"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
FAILURE_DOMAIN_LABEL = "sim.koordinator.sh/failure-domain"
MACHINE_LABEL = "sim.koordinator.sh/machine"
_HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' SafeEncodeString alphabet
_UID_NS = uuid.UUID("6f1c6c52-1a8e-4c39-9a51-0d1f2a6a7b10")
MID_REQUEST_FRACTION = 0.05  # a mid pod requests at most this share of a node


@dataclass
class Genesis:
    nodes: list[NodeRecord]
    pods: list[PodRecord]
    workloads: dict[str, str]  # ReplicaSet name -> Deployment name
    usage: UsageModel
    synthetic: bool
    assumptions: list[str] = field(default_factory=list)  # how the cluster models its traces, for reports


def safe_hash(text: str, n: int) -> str:
    digest = hashlib.sha1(text.encode()).digest()
    return "".join(_HASH_ALPHABET[b % len(_HASH_ALPHABET)] for b in digest[:n])


def pod_uid(seed: int, namespace: str, name: str) -> str:
    return str(uuid.uuid5(_UID_NS, f"{seed}/{namespace}/{name}"))


def _load_vms(spec: SimSpec, count: int, rng: np.random.Generator) -> tuple[list[traces.VmTrace], bool]:
    if count == 0:
        return [], False
    source = spec.trace_source()
    if source is None:  # synthetic load, asked for
        gen = traces.SyntheticDiurnal(seed=spec.seed, mean=0.1, amplitude=0.06, noise=0.02)
        cores = rng.choice([1, 2, 4, 8], size=count, p=[0.45, 0.2, 0.22, 0.13])
        return [gen.vm(i + 1, int(c), int(c) * 4 * GIB) for i, c in enumerate(cores)], True
    ids = np.asarray(traces.bitbrains_vm_ids(source))
    if ids.size == 0:
        raise traces.TracesNotFound(f"no Bitbrains VMs in {source.describe()}")
    chosen = rng.permutation(ids)[: min(count, ids.size)]
    return [traces.bitbrains_vm(int(i), source) for i in chosen], False


def _load_machines(spec: SimSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, list[traces.MachineMeta]]:
    source = spec.trace_source()
    if source is None:  # synthetic load, asked for
        gen = traces.SyntheticDiurnal(seed=spec.seed, mean=35, amplitude=15, noise=3, step_s=60)
        cpu = np.clip(gen.series(7 * 1440), 0, 100)[None, :]
        mem = np.full_like(cpu, 88.0)
        return cpu, mem, np.asarray([cpu.shape[1]]), 60, []
    usage = traces.alibaba2018_machine_usage(source)
    meta = traces.alibaba2018_machine_meta(source)
    series = sorted(usage.values(), key=lambda m: m.machine_id)
    length = max(len(m) for m in series)
    cpu = np.zeros((len(series), length))
    mem = np.zeros((len(series), length))
    for i, m in enumerate(series):
        cpu[i, : len(m)] = m.cpu_percent
        mem[i, : len(m)] = m.mem_percent
    lens = np.asarray([len(m) for m in series])
    return cpu, mem, lens, series[0].step_s, meta


def _fill_scale(raw: np.ndarray, target: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Per node (row) the factor s with sum(min(s x raw, cap)) = target (bisection, vectorised).

    raw: nodes x pods (0 where a node has fewer pods); target, cap: per node.
    """
    lo = np.zeros(raw.shape[0])
    hi = np.full(raw.shape[0], 1.0)
    total = lambda s: np.minimum(raw * s[:, None], cap[:, None]).sum(axis=1)
    while True:  # grow hi until it reaches the target or every pod is capped
        short = (total(hi) < target) & ((raw * hi[:, None]) < cap[:, None]).any(axis=1) & (raw.sum(axis=1) > 0)
        if not short.any():
            break
        hi[short] *= 2
    for _ in range(50):
        mid = (lo + hi) / 2
        under = total(mid) < target
        lo = np.where(under, mid, lo)
        hi = np.where(under, hi, mid)
    return hi


def build_vms(spec: SimSpec) -> Genesis:
    """The `vms` scenario: Bitbrains VMs packed onto nodes."""
    spec = spec.resolved()
    rng = np.random.default_rng(spec.seed)
    n_nodes, ppn = spec.nodes, spec.online_pods_per_node
    n_online = n_nodes * ppn
    n_mid = spec.mid_pods if spec.mid_pods is not None else n_nodes // 4
    # Online and mid pods belong to this many workloads (Deployments), one VM each. A trace set with
    # fewer VMs (the bundled sample) lends each VM to several workloads, so the cluster has the same
    # workloads, replicas and evictable pods whichever set drives it.
    n_workloads = min(n_online + n_mid, spec.max_vms)
    vms, synthetic = _load_vms(spec, n_workloads, rng)
    sys_cpu, sys_mem, sys_len, sys_step, meta = _load_machines(spec)

    # one padded matrix for every VM: pods index it by (row, offset)
    length = max((len(v) for v in vms), default=1)
    vm_cpu = np.zeros((max(len(vms), 1), length))
    vm_mem = np.zeros((max(len(vms), 1), length))
    for i, v in enumerate(vms):
        vm_cpu[i, : len(v)] = v.cpu_milli
        vm_mem[i, : len(v)] = v.memory_bytes
    vm_len = np.asarray([max(len(v), 1) for v in vms] or [1])
    usage = UsageModel(vm_cpu, vm_mem, vm_len, traces.BITBRAINS_STEP_S, sys_cpu, sys_mem, sys_len, sys_step, spec.batch_utilisation)

    # ---- nodes
    cap_cpu = spec.node_cpu_cores * 1000
    cap_mem = spec.node_memory_gib * GIB
    alloc_cpu = max(cap_cpu - spec.kube_reserved_cpu_milli, 0)
    alloc_mem = max(cap_mem - spec.kube_reserved_memory_bytes, 0)
    created = (spec.start_ms or 0) - 86_400_000
    nodes: list[NodeRecord] = []
    sys_offsets = rng.integers(0, 1 << 30, size=max(n_nodes, 1))
    for i in range(n_nodes):
        name = spec.node_name(i)
        labels = {HOSTNAME_LABEL: name, "kubernetes.io/os": "linux", "node-role.kubernetes.io/worker": ""}
        if meta:
            m = meta[i % len(meta)]
            labels[ZONE_LABEL] = f"zone-{m.failure_domain_2}"
            labels[FAILURE_DOMAIN_LABEL] = str(m.failure_domain_1)
            labels[MACHINE_LABEL] = m.machine_id
        else:
            labels[ZONE_LABEL] = f"zone-{i % 3}"
        nodes.append(
            NodeRecord(
                name=name,
                labels=labels,
                capacity={"cpu": cap_cpu, "memory": cap_mem, "pods": spec.node_max_pods},
                allocatable={"cpu": alloc_cpu, "memory": alloc_mem, "pods": spec.node_max_pods},
                created_ms=created,
                resource_version="1",
            )
        )
        row = i % sys_cpu.shape[0]
        usage.node_system[name] = (
            row, int(sys_offsets[i] % sys_len[row]), cap_cpu, cap_mem, spec.system_cpu_fraction, spec.system_memory_fraction
        )

    pods: list[PodRecord] = []
    workloads: dict[str, str] = {}
    if n_nodes == 0 or not vms:
        return Genesis(nodes, pods, workloads, usage, synthetic, _vm_assumptions(spec, synthetic))

    # ---- online (prod) pods: pod j belongs to workload j mod n_workloads, which replays VM
    # (workload mod |vms|), on node j mod nodes (round robin)
    vm_of = np.arange(n_online) % n_workloads
    # round robin: pod j lands on node j % n_nodes, i.e. column-major in (node, slot)
    order = np.arange(n_online).reshape(ppn, n_nodes).T if ppn else np.zeros((n_nodes, 0), dtype=np.int64)
    vm_at = [vms[vm_of[j] % len(vms)] for j in order.ravel()]
    raw_cpu = np.asarray([max(v.cpu_milli_provisioned, 1) for v in vm_at], dtype=np.float64).reshape(order.shape)
    raw_mem = np.asarray([max(v.memory_bytes_provisioned, 1) for v in vm_at], dtype=np.float64).reshape(order.shape)
    fill = rng.uniform(spec.prod_fill_min, max(spec.prod_fill_max, spec.prod_fill_min), size=n_nodes)
    if ppn:
        s_cpu = _fill_scale(raw_cpu, fill * alloc_cpu, np.full(n_nodes, spec.max_pod_fraction * alloc_cpu))
        s_mem = _fill_scale(raw_mem, fill * alloc_mem, np.full(n_nodes, spec.max_pod_fraction * alloc_mem))
        req_cpu = np.floor(np.minimum(raw_cpu * s_cpu[:, None], spec.max_pod_fraction * alloc_cpu))
        req_mem = np.floor(np.minimum(raw_mem * s_mem[:, None], spec.max_pod_fraction * alloc_mem))
    offsets = rng.integers(0, 1 << 30, size=n_online + n_mid)
    prio = rng.integers(0, 100, size=n_online + n_mid)
    replica_of = np.zeros(n_workloads, dtype=np.int64)
    names: set[str] = set()
    used = np.zeros((n_nodes, 2))
    start = spec.start_ms or 0

    def add_pod(j: int, node_i: int, w: int, cpu: int, mem: int, cls: PriorityClass, base_prio: int) -> None:
        vm_k, lap = w % len(vms), w // len(vms)
        vm = vms[vm_k]
        deploy = f"vm-{vm.vm_id}" + (f"-{lap}" if lap else "")  # a VM's later workloads are vm-<id>-<n>
        if cls is not PriorityClass.PROD:
            deploy = f"mid-{deploy}"
        rs = f"{deploy}-{safe_hash(f'{spec.seed}/{deploy}', 10)}"
        workloads[rs] = deploy
        replica = int(replica_of[w])
        replica_of[w] += 1
        name = f"{rs}-{safe_hash(f'{spec.seed}/{rs}/{replica}', 5)}"
        retry = 0
        while name in names:  # five hash letters collide among a VM's many replicas now and then
            retry += 1
            name = f"{rs}-{safe_hash(f'{spec.seed}/{rs}/{replica}/{retry}', 5)}"
        names.add(name)
        uid = pod_uid(spec.seed, ONLINE_NAMESPACE, name)
        pods.append(
            PodRecord(
                namespace=ONLINE_NAMESPACE,
                name=name,
                uid=uid,
                node_name=nodes[node_i].name,
                labels={"app": deploy, "pod-template-hash": rs.rsplit("-", 1)[1], LABEL_QOS_CLASS: "LS"},
                owners=[OwnerRef("ReplicaSet", rs, pod_uid(spec.seed, ONLINE_NAMESPACE, rs), "apps/v1", True)],
                priority=base_prio + int(prio[j]),
                priority_class_name=cls.value,
                phase="Running",
                containers=[
                    ContainerSpec("app", {"cpu": cpu, "memory": mem}, {"cpu": 2 * cpu, "memory": 2 * mem})
                ],
                kube_qos="Burstable",
                created_ms=start - 3_600_000,
                start_ms=start - 3_600_000,
                resource_version="1",
            )
        )
        usage.pod_sources[uid] = TraceSource(
            row=vm_k,
            offset=int(offsets[j] % len(vm)),
            cpu_scale=cpu / max(vm.cpu_milli_provisioned, 1),
            mem_scale=mem / max(vm.memory_bytes_provisioned, 1),
        )
        used[node_i] += (cpu, mem)

    for j in range(n_online):
        node_i, slot = j % n_nodes, j // n_nodes
        cpu, mem = int(req_cpu[node_i, slot]), int(req_mem[node_i, slot])
        if used[node_i, 0] + cpu > alloc_cpu or used[node_i, 1] + mem > alloc_mem:
            continue  # fit check: never over-commit allocatable
        add_pod(j, node_i, int(vm_of[j]), cpu, mem, PriorityClass.PROD, 9000)

    # ---- a few mid pods, on the next node (round robin) where they fit
    node_i = 0
    for m in range(n_mid):
        j = n_online + m
        w = (n_online + m) % n_workloads
        vm = vms[w % len(vms)]
        cpu = int(min(vm.cpu_milli_provisioned, MID_REQUEST_FRACTION * alloc_cpu))
        mem = int(min(vm.memory_bytes_provisioned, MID_REQUEST_FRACTION * alloc_mem))
        for _ in range(n_nodes):
            fits = used[node_i, 0] + cpu <= alloc_cpu and used[node_i, 1] + mem <= alloc_mem
            target = node_i
            node_i = (node_i + 1) % n_nodes
            if fits:
                add_pod(j, target, w, cpu, mem, PriorityClass.MID, 7000)
                break
    return Genesis(nodes, pods, workloads, usage, synthetic, _vm_assumptions(spec, synthetic))


def _vm_assumptions(spec: SimSpec, synthetic: bool) -> list[str]:
    if synthetic:
        return ["online load: seeded synthetic diurnal series (asked for), not a trace"]
    return [
        (f"online load: Bitbrains GWA-T-12 VMs (5-minute samples, linearly interpolated), {spec.online_pods_per_node} "
        f"per node, each a prod Deployment replica whose request is the VM's provisioned size scaled so the node's "
        f"prod requests fill a seeded {spec.prod_fill_min:.0%}-{spec.prod_fill_max:.0%} of allocatable; usage scaled "
        "alike, so each pod's usage/request ratio is its VM's"),
        (f"node system usage: the shape of an Alibaba 2018 machine's usage, scaled to {spec.system_cpu_fraction:.0%} "
        f"CPU / {spec.system_memory_fraction:.0%} memory of capacity at 100 % machine utilisation"),
        f"node size: {spec.node_cpu_cores} cores, {spec.node_memory_gib} GiB",
    ]
