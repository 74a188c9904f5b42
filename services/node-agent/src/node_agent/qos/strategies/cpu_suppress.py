"""CPU suppress (koordlet qosmanager/plugins/cpusuppress): shrink what BE pods may use.

BE may use capacity x threshold% - non-BE pod usage - max(system usage, reserved). The
cpuset policy turns that into a cpuset of at least 2 CPUs growing by at most ceil(10 % of
the CPUs) a round; the cfsQuota policy into the besteffort dir's quota (at least 2000 us,
changes under 1 % of capacity skipped, raised by at most 10 % of capacity a round).
"""

from __future__ import annotations

import math

from koordcommon.schemas import NodeSLOSpec

from ..model import CFS_PERIOD_US, CgroupWrite, QoSState
from .cpuset import format_cpuset, parse_cpuset, pick_cpus

NAME = "cpu_suppress"
BE_MIN_QUOTA = 2000
BE_MIN_CPUS = 2


def suppress_milli(state: QoSState, threshold_percent: int) -> int:
    cap = state.capacity.cpu_milli
    reserved = max(state.capacity.cpu_milli - state.allocatable.cpu_milli, 0)
    pods_all = sum(p.usage.cpu_milli for p in state.pods if p.usage is not None)
    non_be = sum(
        p.usage.cpu_milli for p in state.pods if p.usage is not None and not p.is_be and not p.kube_best_effort
    )
    node_used = state.node_usage.cpu_milli if state.node_usage is not None else pods_all
    system = max(node_used - pods_all, 0, reserved)
    return cap * threshold_percent // 100 - non_be - system


def full_be_cpuset(state: QoSState) -> list[int]:
    """Every CPU minus LSE-bound and reserved CPUs (koordlet calcBECPUSet)."""
    lse = set()
    for p in state.pods:
        if p.info.cpuset and p.raw_qos.value == "LSE":
            lse.update(parse_cpuset(p.info.cpuset))
    return [c.cpu for c in state.processors if c.cpu not in lse and c.cpu not in state.reserved_cpus]


def be_dirs(state: QoSState) -> list[tuple[int, str]]:
    """(depth, dir) of the besteffort QoS dir, BE pod dirs and their container dirs, top first."""
    out = [(0, state.be_dir)]
    for p in state.pods:
        if p.kube_best_effort:
            out.append((1, p.rel))
    for p in state.pods:
        if p.kube_best_effort:
            out += [(2, rel) for rel in p.containers.values()]
    return out


def _cpuset_writes(state: QoSState, new: list[int]) -> list[CgroupWrite]:
    """Union top-down first, then the new set bottom-up, so no child is ever wider than its parent."""
    writes = []
    new_s = format_cpuset(new)
    dirs = be_dirs(state)
    for _, rel in dirs:
        old = state.read(rel, "cpuset.cpus") or ""
        try:
            union = format_cpuset(set(parse_cpuset(old)) | set(new))
        except ValueError:
            union = new_s
        if union != new_s and union != format_cpuset(parse_cpuset(old) if old else []):
            writes.append(CgroupWrite(rel, "cpuset.cpus", union, NAME, "qos" if rel == state.be_dir else "pod"))
    for depth, rel in reversed(dirs):
        writes.append(CgroupWrite(rel, "cpuset.cpus", new_s, NAME, ("qos", "pod", "container")[depth]))
    return writes


def _int(text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        return default


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    cfg = slo.resourceUsedThresholdWithBE
    full = full_be_cpuset(state)
    if not cfg.enable:
        return [CgroupWrite(state.be_dir, "cpu.cfs_quota_us", -1, NAME, "qos")] + _cpuset_writes(state, full)
    suppress = suppress_milli(state, cfg.cpuSuppressThresholdPercent)
    cap_cores = state.capacity.cpu_milli // 1000
    if cfg.cpuSuppressPolicy == "cfsQuota":
        new = max(suppress * CFS_PERIOD_US // 1000, BE_MIN_QUOTA)
        cur = _int(state.read(state.be_dir, "cpu.cfs_quota_us"), -1)
        writes: list[CgroupWrite] = []
        min_delta = cap_cores * CFS_PERIOD_US * 0.01
        if not (abs(new - cur) < min_delta and new != BE_MIN_QUOTA):
            max_inc = int(cap_cores * CFS_PERIOD_US * 0.1)
            if new - cur > max_inc and cur != -1:
                new = cur + max_inc
            writes.append(CgroupWrite(state.be_dir, "cpu.cfs_quota_us", new, NAME, "qos"))
        return writes + _cpuset_writes(state, full)
    # cpuset policy
    old = parse_cpuset(state.read(state.be_dir, "cpuset.cpus") or "")
    lsr, ls = [], []
    owner: dict[int, str] = {}
    for p in state.pods:
        if p.info.cpuset:
            for c in parse_cpuset(p.info.cpuset):
                owner[c] = p.raw_qos.value
    for proc in state.processors:
        if proc.cpu in state.reserved_cpus:
            continue
        q = owner.get(proc.cpu)
        if q == "LSR":
            lsr.append(proc)
        elif q != "LSE":
            ls.append(proc)
    n = max(math.ceil(suppress / 1000), BE_MIN_CPUS)
    max_inc = math.ceil(len(state.processors) * 0.1)
    if n - len(old) > max_inc:
        n = len(old) + max_inc
    n_lsr = n * len(lsr) // (len(lsr) + len(ls)) if (lsr or ls) else 0
    chosen = pick_cpus(n_lsr, lsr, len(state.processors)) + pick_cpus(n - n_lsr, ls, len(state.processors))
    if not chosen:
        return []
    return _cpuset_writes(state, chosen) + [CgroupWrite(state.be_dir, "cpu.cfs_quota_us", -1, NAME, "qos")]
