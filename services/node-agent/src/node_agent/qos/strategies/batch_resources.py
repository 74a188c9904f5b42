"""Batch resources (koordlet runtimehooks/hooks/batchresource): BE pods' cgroups from batch-cpu/memory.

shares = batch milli-cpu x 1024 / 1000 (2..262144), quota = milli x 100000 / 1000 (at least
1000, -1 when unlimited), memory limit = batch-memory (-1 when unlimited). With CPU suppress
by cfsQuota enabled, pod and container quotas stay -1 (the besteffort dir does the limiting).
"""

from __future__ import annotations

from koordcommon.schemas import NodeSLOSpec

from ..model import CFS_PERIOD_US, CgroupWrite, QoSState

NAME = "batch_resources"
MIN_SHARES, MAX_SHARES = 2, 262144
MIN_QUOTA = 1000


def milli_to_shares(milli: int) -> int:
    if milli <= 0:
        return MIN_SHARES
    return min(max(milli * 1024 // 1000, MIN_SHARES), MAX_SHARES)


def milli_to_quota(milli: int) -> int:
    q = milli * CFS_PERIOD_US // 1000
    if q <= 0:
        return -1
    return max(q, MIN_QUOTA)


def plan(state: QoSState, slo: NodeSLOSpec) -> list[CgroupWrite]:
    t = slo.resourceUsedThresholdWithBE
    quota_off = t.enable and t.cpuSuppressPolicy == "cfsQuota"
    out: list[CgroupWrite] = []
    for p in state.pods:
        writes: list[CgroupWrite] = []
        if not p.is_be:
            continue
        conts = p.info.containers
        if not any(not c.batch_requests.is_zero() or not c.batch_limits.is_zero() for c in conts):
            continue  # no extended-resource spec: the hook does nothing
        for c in conts:
            rel = p.containers.get(c.name)
            if rel is None:
                continue
            writes.append(CgroupWrite(rel, "cpu.shares", milli_to_shares(max(c.batch_requests.cpu_milli, 0)), NAME,
                                      "container"))
            quota = -1 if quota_off else milli_to_quota(max(c.batch_limits.cpu_milli, 0))
            writes.append(CgroupWrite(rel, "cpu.cfs_quota_us", quota, NAME, "container"))
            mem = c.batch_limits.memory_bytes if c.batch_limits.memory_bytes > 0 else -1
            writes.append(CgroupWrite(rel, "memory.limit_in_bytes", mem, NAME, "container"))
        shares = milli_to_shares(sum(max(c.batch_requests.cpu_milli, 0) for c in conts))
        if quota_off or any(not c.has_limits or c.batch_limits.cpu_milli <= 0 for c in conts):
            quota = -1
        else:
            quota = milli_to_quota(sum(c.batch_limits.cpu_milli for c in conts))
        if any(not c.has_limits or c.batch_limits.memory_bytes <= 0 for c in conts):
            mem = -1
        else:
            mem = sum(c.batch_limits.memory_bytes for c in conts)
        pod = [
            CgroupWrite(p.rel, "cpu.shares", shares, NAME, "pod"),
            CgroupWrite(p.rel, "cpu.cfs_quota_us", quota, NAME, "pod"),
            CgroupWrite(p.rel, "memory.limit_in_bytes", mem, NAME, "pod"),
        ]
        # pod dir first: the executor retries a write the kernel refused once the rest are done,
        # which settles a lowered pod limit after its containers
        out += pod + writes
    return out
