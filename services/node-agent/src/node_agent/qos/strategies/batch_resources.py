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
    before = _WRITES.get(state.node, {})
    kept: dict[tuple[str, str, bool], tuple[object, tuple, list[CgroupWrite]]] = {}
    for p in state.pods:
        if p.is_be:
            out += _pod_writes(p, quota_off, before, kept)
    _WRITES[state.node] = kept  # a pod gone from the node leaves nothing behind
    return out


# A pod's writes follow from its spec and dirs alone: kept while the pod is on its node and the
# same (its PodInfo, derived again whenever the pod changes), and its dirs and the quota rule are too.
_WRITES: dict[str, dict[tuple[str, str, bool], tuple[object, tuple, list[CgroupWrite]]]] = {}  # node -> its last round's


def _pod_writes(p, quota_off: bool, before: dict, kept: dict) -> list[CgroupWrite]:
    key = (p.info.uid, p.rel, quota_off)
    dirs = tuple(p.containers.items())
    hit = before.get(key)
    if hit is None or hit[0] is not p.info or hit[1] != dirs:
        hit = (p.info, dirs, _derive(p, quota_off))
    kept[key] = hit
    return hit[2]


def _derive(p, quota_off: bool) -> list[CgroupWrite]:
    conts = p.info.containers
    if not any(not c.batch_requests.is_zero() or not c.batch_limits.is_zero() for c in conts):
        return []  # no extended-resource spec: the hook does nothing
    writes: list[CgroupWrite] = []
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
    return pod + writes
