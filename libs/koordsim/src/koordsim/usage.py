"""Usage of simulated pods and nodes: a pure function of (object, simulated time).

Trace-driven pods share one padded VM matrix and differ by (row, offset, scale), so 30,000
pods cost a few index arrays, and a node's usage is one vectorised gather. Pods the sim did
not create at genesis (batch, demo) use their request x a seeded utilisation.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
from koordcommon.records import PodRecord
from koordcommon.resources import Resources

_U64 = np.uint64
_MIB = 1 << 20
BE_DEFAULT_CPU_MILLI = 50  # a pod without requests still uses a little
BE_DEFAULT_MEMORY = 64 * _MIB
PLAN_BUCKET_S = 60
PLAN_NOISE = 0.1
PLAN_MEMORY_UTILISATION = 0.6


def hash01(values: np.ndarray) -> np.ndarray:
    """splitmix64 of each uint64, as a float in [0, 1): deterministic on every platform."""
    z = np.atleast_1d(np.asarray(values, dtype=_U64)) + _U64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    z = z ^ (z >> _U64(31))
    return (z >> _U64(11)).astype(np.float64) / float(1 << 53)


def stable_seed(text: str) -> int:
    return zlib.crc32(text.encode())


@dataclass(frozen=True)
class TraceSource:
    """A genesis pod replaying VM `row` of the matrix from `offset` steps, scaled to its request."""

    row: int
    offset: int
    cpu_scale: float
    mem_scale: float


@dataclass(frozen=True)
class Override:
    """Hot-spot injection: multiply usage of a node's pods (or one pod) within [from, to)."""

    node: str | None = None
    pod_key: str | None = None
    cpu_factor: float = 1.0
    memory_factor: float = 1.0
    from_ms: int | None = None
    to_ms: int | None = None

    def active(self, t_ms: int) -> bool:
        return (self.from_ms is None or t_ms >= self.from_ms) and (self.to_ms is None or t_ms < self.to_ms)


@dataclass
class PodSet:
    """Index arrays for a set of running pods, in `keys` order."""

    keys: list[str]
    nodes: np.ndarray  # str per pod
    trace_idx: np.ndarray
    rows: np.ndarray
    offsets: np.ndarray
    cpu_scale: np.ndarray
    mem_scale: np.ndarray
    plan_idx: np.ndarray
    plan_seed: np.ndarray
    plan_cpu: np.ndarray
    plan_mem: np.ndarray
    containers: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)


def concat_podsets(sets: list[PodSet]) -> PodSet:
    """One PodSet of many (each node's, in order): a single evaluate() then serves them all,
    each set's pods at its own offset."""
    offsets = np.cumsum([0] + [len(ps.keys) for ps in sets])

    def cat(name: str, dtype, shift: bool = False) -> np.ndarray:
        parts = [getattr(ps, name) + int(o) if shift else getattr(ps, name) for ps, o in zip(sets, offsets, strict=False)]
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)

    containers: dict[str, list[tuple[str, float, float]]] = {}
    for ps in sets:
        containers.update(ps.containers)
    return PodSet(
        keys=[k for ps in sets for k in ps.keys],
        nodes=cat("nodes", object),
        trace_idx=cat("trace_idx", np.int64, shift=True),
        rows=cat("rows", np.int64),
        offsets=cat("offsets", np.int64),
        cpu_scale=cat("cpu_scale", np.float64),
        mem_scale=cat("mem_scale", np.float64),
        plan_idx=cat("plan_idx", np.int64, shift=True),
        plan_seed=cat("plan_seed", np.uint64),
        plan_cpu=cat("plan_cpu", np.float64),
        plan_mem=cat("plan_mem", np.float64),
        containers=containers,
    )


class UsageModel:
    def __init__(
        self,
        vm_cpu: np.ndarray,
        vm_mem: np.ndarray,
        vm_len: np.ndarray,
        vm_step_s: int,
        sys_cpu_pct: np.ndarray,
        sys_mem_pct: np.ndarray,
        sys_len: np.ndarray,
        sys_step_s: int,
        batch_utilisation: float = 0.7,
    ):
        self.vm_cpu, self.vm_mem, self.vm_len, self.vm_step_s = vm_cpu, vm_mem, vm_len.astype(np.int64), vm_step_s
        self.sys_cpu, self.sys_mem, self.sys_len, self.sys_step_s = sys_cpu_pct, sys_mem_pct, sys_len.astype(np.int64), sys_step_s
        self.batch_utilisation = batch_utilisation
        self.pod_sources: dict[str, TraceSource] = {}  # by pod uid
        # node -> (machine row, offset, capacity cpu, capacity memory, cpu fraction, memory fraction)
        self.node_system: dict[str, tuple[int, int, int, int, float, float]] = {}
        # node -> a row of the VM matrix holding its system usage in milli-cores and bytes (a
        # recorded history, history.py), read like a pod's trace
        self.node_sources: dict[str, TraceSource] = {}

    # ------------------------------------------------------------------ compile

    def compile(self, pods: list[PodRecord]) -> PodSet:
        keys, nodes, t_idx, rows, offs, cs, ms = [], [], [], [], [], [], []
        p_idx, p_seed, p_cpu, p_mem = [], [], [], []
        containers: dict[str, list[tuple[str, float, float]]] = {}
        for i, p in enumerate(pods):
            keys.append(p.key)
            nodes.append(p.node_name or "")
            src = self.pod_sources.get(p.uid)
            if src is not None:
                t_idx.append(i)
                rows.append(src.row)
                offs.append(src.offset)
                cs.append(src.cpu_scale)
                ms.append(src.mem_scale)
            else:
                p_idx.append(i)
                p_seed.append(stable_seed(p.uid or p.key))
                base = p.batch_requests()
                if base.is_zero():
                    base = p.request_resources()
                if base.is_zero():
                    base = Resources(BE_DEFAULT_CPU_MILLI, BE_DEFAULT_MEMORY)
                p_cpu.append(base.cpu_milli)
                p_mem.append(base.memory_bytes)
            if len(p.containers) > 1:
                containers[p.key] = _container_shares(p)
        return PodSet(
            keys=keys,
            nodes=np.asarray(nodes, dtype=object),
            trace_idx=np.asarray(t_idx, dtype=np.int64),
            rows=np.asarray(rows, dtype=np.int64),
            offsets=np.asarray(offs, dtype=np.int64),
            cpu_scale=np.asarray(cs, dtype=np.float64),
            mem_scale=np.asarray(ms, dtype=np.float64),
            plan_idx=np.asarray(p_idx, dtype=np.int64),
            plan_seed=np.asarray(p_seed, dtype=np.uint64),
            plan_cpu=np.asarray(p_cpu, dtype=np.float64),
            plan_mem=np.asarray(p_mem, dtype=np.float64),
            containers=containers,
        )

    # ------------------------------------------------------------------ evaluate

    def evaluate(self, ps: PodSet, t_ms: int, overrides: list[Override] = ()) -> tuple[np.ndarray, np.ndarray]:
        """(cpu milli-cores, memory bytes) per pod of `ps` at simulated time t_ms (int64 arrays)."""
        n = len(ps.keys)
        cpu = np.zeros(n)
        mem = np.zeros(n)
        if ps.trace_idx.size:
            c, m = self.trace_values(ps.rows, ps.offsets, t_ms)
            cpu[ps.trace_idx] = c * ps.cpu_scale
            mem[ps.trace_idx] = m * ps.mem_scale
        if ps.plan_idx.size:
            u_cpu, u_mem = self.plan_utilisation(ps.plan_seed, t_ms)
            cpu[ps.plan_idx] = ps.plan_cpu * u_cpu
            mem[ps.plan_idx] = ps.plan_mem * u_mem
        for o in overrides:
            if not o.active(t_ms):
                continue
            if o.pod_key is not None:
                mask = np.fromiter((k == o.pod_key for k in ps.keys), dtype=bool, count=n)
                if o.node is not None:
                    mask &= ps.nodes == o.node
            elif o.node is not None:
                mask = ps.nodes == o.node
            else:
                mask = np.ones(n, dtype=bool)
            cpu[mask] *= o.cpu_factor
            mem[mask] *= o.memory_factor
        return cpu.astype(np.int64), mem.astype(np.int64)

    def trace_values(self, rows: np.ndarray, offsets: np.ndarray, t_ms: int) -> tuple[np.ndarray, np.ndarray]:
        """Unscaled VM usage, linearly interpolated between the 300-s samples, looping the trace."""
        pos_steps, rem_ms = divmod(int(t_ms), self.vm_step_s * 1000)
        frac = rem_ms / (self.vm_step_s * 1000)
        lens = self.vm_len[rows]
        i0 = (pos_steps + offsets) % lens
        i1 = (i0 + 1) % lens
        cpu = self.vm_cpu[rows, i0] * (1 - frac) + self.vm_cpu[rows, i1] * frac
        mem = self.vm_mem[rows, i0] * (1 - frac) + self.vm_mem[rows, i1] * frac
        return cpu, mem

    def plan_utilisation(self, seeds: np.ndarray, t_ms: int) -> tuple[np.ndarray, np.ndarray]:
        bucket, rem = divmod(int(t_ms) // 1000, PLAN_BUCKET_S)
        frac = rem / PLAN_BUCKET_S
        k0 = seeds * _U64(1_000_003) + _U64(bucket & 0xFFFFFFFF)
        h = hash01(k0) * (1 - frac) + hash01(k0 + _U64(1)) * frac
        u_cpu = np.maximum(self.batch_utilisation + PLAN_NOISE * (2 * h - 1), 0.0)
        u_mem = PLAN_MEMORY_UTILISATION + 0.5 * PLAN_NOISE * (2 * hash01(seeds) - 1)
        return u_cpu, np.broadcast_to(u_mem, u_cpu.shape)

    def system_usage(self, node: str, t_ms: int) -> Resources:
        src = self.node_sources.get(node)
        if src is not None:
            cpu, mem = self.trace_values(np.asarray([src.row]), np.asarray([src.offset]), t_ms)
            return Resources(int(cpu[0] * src.cpu_scale), int(mem[0] * src.mem_scale))
        sys = self.node_system.get(node)
        if sys is None or self.sys_cpu.shape[0] == 0:
            return Resources()
        row, off, cap_cpu, cap_mem, cpu_frac, mem_frac = sys
        step_ms = self.sys_step_s * 1000
        pos, rem = divmod(int(t_ms), step_ms)
        frac = rem / step_ms
        length = int(self.sys_len[row])
        i0 = (pos + off) % length
        i1 = (i0 + 1) % length
        cpu_pct = self.sys_cpu[row, i0] * (1 - frac) + self.sys_cpu[row, i1] * frac
        mem_pct = self.sys_mem[row, i0] * (1 - frac) + self.sys_mem[row, i1] * frac
        return Resources(
            int(cap_cpu * cpu_frac * cpu_pct / 100), int(256 * _MIB + cap_mem * mem_frac * mem_pct / 100)
        )


def _container_shares(pod: PodRecord) -> list[tuple[str, float, float]]:
    """Each container's share of the pod's usage: by its requests, equal when none are set."""
    cpus = [max(c.requests.get("cpu", 0), 0) for c in pod.containers]
    mems = [max(c.requests.get("memory", 0), 0) for c in pod.containers]
    n = len(pod.containers)
    tc, tm = sum(cpus), sum(mems)
    return [
        (c.name, cpus[i] / tc if tc else 1 / n, mems[i] / tm if tm else 1 / n) for i, c in enumerate(pod.containers)
    ]


def container_shares(pod: PodRecord) -> list[tuple[str, float, float]]:
    if len(pod.containers) <= 1:
        return [(c.name, 1.0, 1.0) for c in pod.containers]
    return _container_shares(pod)
